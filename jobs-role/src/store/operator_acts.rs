//! Operator acts on jobs (cancel, retry), for one job or thousands, the same way.
//!
//! The ids are taken in chunks of [`JOBS_PER_TRANSACTION`]. Each chunk's rows are
//! locked in job-id order with `SKIP LOCKED`, so an act never deadlocks with a
//! worker's group commit (which writes its rows in its own order) and never waits on
//! a stuck transaction: a row another transaction holds (a claim, a checkpoint, a
//! `complete-step`) is tried again, with a growing pause, until [`LOCK_WAIT`] has
//! passed; only then is it answered [`ByJob::Busy`]. Each job's outcome is decided
//! under its row lock by the act's own rules (from [`crate::status`]), and written in
//! the chunk's transaction with its event, so one job's answer is exactly what its row
//! said when the act got the lock.
//!
//! Chunks commit on their own: a failure part way (the database going away) leaves
//! the chunks before it done, and [`ActedOn::interrupted`] says so. Every act is safe
//! to send again: a job already acted on answers its "already" outcome.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use super::*;

/// The most jobs one transaction of an act locks and changes.
pub const JOBS_PER_TRANSACTION: usize = 1_000;

/// How long an act keeps trying a row another transaction holds before answering
/// [`ByJob::Busy`]. Workers hold a row for a few milliseconds; a row held this long
/// belongs to a stuck transaction.
pub const LOCK_WAIT: Duration = Duration::from_secs(5);

/// The first pause before a held row is tried again; it doubles up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(10);
const MAX_PAUSE: Duration = Duration::from_millis(500);

/// One job's answer to an act.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ByJob<T> {
    /// The act decided, under the row lock: `T` says what it did.
    Decided(T),
    /// No such job.
    NotFound,
    /// Another transaction held the row for all of [`LOCK_WAIT`]: nothing changed.
    Busy,
}

/// What an act did to the jobs it was given.
#[derive(Debug)]
pub struct ActedOn<T> {
    /// Each job's answer, in job-id order (each id once, however often given).
    pub outcomes: Vec<(Uuid, ByJob<T>)>,
    /// The failure that stopped the act part way. The chunks before it committed; the
    /// jobs without an outcome were left as they were (unless the failure was the
    /// `COMMIT` itself, whose fate is unknown: asking again tells).
    pub interrupted: Option<StoreError>,
}

/// An operator's act: how it locks its jobs and what it does to the locked rows.
pub(super) trait Act {
    /// What the act did to one job.
    type Outcome;

    /// The statement locking the act's rows ([`sql::LOCK_JOBS_FOR_CANCEL`], ...):
    /// `$1` job ids; it answers at least `job_id`.
    const LOCK: &'static str;

    /// Decides each locked row's outcome and writes it, with its events, in `tx`.
    async fn on_locked(
        &self,
        tx: &Transaction<'_>,
        rows: &[tokio_postgres::Row],
    ) -> Result<Vec<(Uuid, Self::Outcome)>, StoreError>;
}

impl Store {
    /// Carries out `act` on `job_ids` (see the module's comment).
    pub(super) async fn act_on<A: Act>(&self, act: &A, job_ids: &[Uuid]) -> ActedOn<A::Outcome> {
        let mut ids = job_ids.to_vec();
        ids.sort_unstable();
        ids.dedup();
        let mut outcomes = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(JOBS_PER_TRANSACTION) {
            if let Err(error) = self.act_on_chunk(act, chunk, &mut outcomes).await {
                outcomes.sort_by_key(|(id, _)| *id);
                return ActedOn {
                    outcomes,
                    interrupted: Some(error),
                };
            }
        }
        outcomes.sort_by_key(|(id, _)| *id);
        ActedOn {
            outcomes,
            interrupted: None,
        }
    }

    /// One chunk: passes until every row was locked once or [`LOCK_WAIT`] is over.
    async fn act_on_chunk<A: Act>(
        &self,
        act: &A,
        chunk: &[Uuid],
        outcomes: &mut Vec<(Uuid, ByJob<A::Outcome>)>,
    ) -> Result<(), StoreError> {
        let started = Instant::now();
        let mut pause = FIRST_PAUSE;
        let mut held = chunk.to_vec();
        loop {
            held = self.act_pass(act, &held, outcomes).await?;
            if held.is_empty() {
                return Ok(());
            }
            if started.elapsed() >= LOCK_WAIT {
                outcomes.extend(held.into_iter().map(|id| (id, ByJob::Busy)));
                return Ok(());
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(MAX_PAUSE);
        }
    }

    /// One transaction: acts on the rows it could lock, answers the ids that name no
    /// job, and returns the ids of rows another transaction held.
    async fn act_pass<A: Act>(
        &self,
        act: &A,
        ids: &[Uuid],
        outcomes: &mut Vec<(Uuid, ByJob<A::Outcome>)>,
    ) -> Result<Vec<Uuid>, StoreError> {
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        let rows = tx.query(A::LOCK, &[&ids]).await?;
        let locked: HashSet<Uuid> = rows.iter().map(|row| row.get("job_id")).collect();
        let unlocked: Vec<Uuid> = ids
            .iter()
            .copied()
            .filter(|id| !locked.contains(id))
            .collect();
        let existing: HashSet<Uuid> = if unlocked.is_empty() {
            HashSet::new()
        } else {
            tx.query(sql::EXISTING_JOBS, &[&unlocked])
                .await?
                .iter()
                .map(|row| row.get("job_id"))
                .collect()
        };
        let decided = act.on_locked(&tx, &rows).await?;
        tx.commit().await?;
        outcomes.extend(
            decided
                .into_iter()
                .map(|(id, outcome)| (id, ByJob::Decided(outcome))),
        );
        let (held, missing): (Vec<Uuid>, Vec<Uuid>) =
            unlocked.into_iter().partition(|id| existing.contains(id));
        outcomes.extend(missing.into_iter().map(|id| (id, ByJob::NotFound)));
        Ok(held)
    }
}

/// The jobs a bulk act selects by filter (every field given narrows the selection).
#[derive(Debug, Clone, Default)]
pub struct JobSelection {
    /// Only jobs in these statuses (the act's own, checked by the caller).
    pub statuses: Vec<JobStatus>,
    /// Only this workflow.
    pub workflow_name: Option<String>,
    /// Only jobs created before this instant (RFC 3339).
    pub created_before: Option<String>,
    /// Only jobs created after this instant (RFC 3339).
    pub created_after: Option<String>,
    /// At most this many, oldest first.
    pub limit: i64,
}

/// The jobs a selection found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selected {
    /// Their ids, oldest first.
    pub job_ids: Vec<Uuid>,
    /// True when more jobs matched than the limit let in (call again for them).
    pub more: bool,
}

impl Store {
    /// The jobs `cancel-jobs` would cancel: live, and not already asked to stop.
    pub async fn cancellable_jobs(&self, selection: &JobSelection) -> Result<Selected, StoreError> {
        self.select(sql::CANCELLABLE_JOBS, selection).await
    }

    /// The jobs `retry-jobs` would re-queue: finished, and claimed at least once.
    pub async fn retryable_jobs(&self, selection: &JobSelection) -> Result<Selected, StoreError> {
        self.select(sql::RETRYABLE_JOBS, selection).await
    }

    async fn select(
        &self,
        statement: &str,
        selection: &JobSelection,
    ) -> Result<Selected, StoreError> {
        let client = self.pool.get().await?;
        let statuses: Vec<&str> = selection.statuses.iter().map(|s| s.as_str()).collect();
        // One more than the limit tells whether more matched.
        let rows = client
            .query(
                statement,
                &[
                    &statuses,
                    &selection.workflow_name,
                    &selection.created_before,
                    &selection.created_after,
                    &(selection.limit + 1),
                ],
            )
            .await?;
        let mut job_ids: Vec<Uuid> = rows.iter().map(|row| row.get("job_id")).collect();
        let more = job_ids.len() as i64 > selection.limit;
        job_ids.truncate(usize::try_from(selection.limit).unwrap_or(0));
        Ok(Selected { job_ids, more })
    }
}
