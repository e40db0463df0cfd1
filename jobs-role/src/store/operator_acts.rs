//! Operator acts on jobs (cancel, retry), for one job or thousands, the same way.
//!
//! The ids are taken in chunks of [`JOBS_PER_TRANSACTION`]. Each chunk's rows are
//! locked in job-id order with `SKIP LOCKED`, so an act never deadlocks with a
//! worker's group commit (which writes its rows in its own order) and never queues
//! behind a long transaction. The rows another transaction held (a claim, a
//! checkpoint, a `complete-step`: milliseconds) are tried again together after a short
//! pause, twice, and the few still held then each wait their turn in the row's lock
//! queue, one row per transaction (holding nothing else, so no deadlock), until the
//! call's [`LOCK_WAIT`] is spent; a row still held then is answered [`ByJob::Busy`].
//! Each job's outcome is decided under its row lock by the act's own rules (from
//! [`crate::status`]) and written in that transaction with its event, so one job's
//! answer is exactly what its row said when the act got the lock.
//!
//! A filter's selection is checked again under the lock ([`Recheck`]): a job that
//! left it meanwhile (a QUEUED job claimed, a DEAD one cancelled, a retried one that
//! finished again after `finishedBefore`) is answered [`ByJob::NoLongerMatches`] and
//! left as it is. Waiting rows hold one of a few connections set aside for it (a
//! quarter of the pool), so waiting acts never starve the workers; past the call's
//! time, what is left gets one last look, skipping held rows, so a call never runs
//! much past [`LOCK_WAIT`]. The act runs in a task of its own: a caller that hangs up
//! does not leave a connection waiting in a lock queue for nobody.
//!
//! Chunks commit on their own: a failure part way (the database going away) leaves
//! the chunks before it done, and [`ActedOn::interrupted`] says so.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use super::*;

/// The most jobs one transaction of an act locks and changes.
pub const JOBS_PER_TRANSACTION: usize = 1_000;

/// How long one act, however many jobs it names, waits for rows other transactions
/// hold before answering them [`ByJob::Busy`]. Workers hold a row for milliseconds;
/// this outlasts a group commit stuck behind another row (its own bound is 5 s,
/// `BATCH_LOCK_TIMEOUT`), so only a long-running transaction makes a row busy.
pub const LOCK_WAIT: Duration = Duration::from_secs(8);

/// The pauses before held rows are tried again together, skipping any still held.
const QUICK_RETRIES: [Duration; 2] = [Duration::from_millis(10), Duration::from_millis(100)];

/// One job's answer to an act.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ByJob<T> {
    /// The act decided, under the row lock: `T` says what it did.
    Decided(T),
    /// The job left the filter's selection (its statuses, `finishedBefore`) before
    /// its row was locked: nothing changed.
    NoLongerMatches {
        /// Its status when locked.
        status: JobStatus,
    },
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
    /// The failure that stopped the act part way. The transactions before it
    /// committed; the jobs without an outcome were left as they were (unless the
    /// failure was a `COMMIT` itself, whose fate is unknown: reading the jobs tells).
    pub interrupted: Option<StoreError>,
}

/// An operator's act: how it locks its jobs and what it does to the locked rows.
pub(super) trait Act {
    /// What the act did to one job.
    type Outcome;

    /// Locks the act's rows, skipping held ones ([`sql::LOCK_JOBS_FOR_CANCEL`], ...):
    /// `$1` job ids; it answers at least `job_id` and `status`.
    const LOCK: &'static str;

    /// [`Act::LOCK`] waiting for the rows instead.
    const LOCK_WAITING: &'static str;

    /// Decides each locked row's outcome and writes it, with its events, in `tx`.
    fn on_locked(
        &self,
        tx: &Transaction<'_>,
        rows: &[tokio_postgres::Row],
    ) -> impl std::future::Future<Output = Result<Vec<(Uuid, Self::Outcome)>, StoreError>> + Send;
}

/// How a pass takes its row locks.
#[derive(Clone, Copy)]
enum Locking {
    /// Skip the rows another transaction holds.
    Skip,
    /// Wait for them, at most this long.
    Wait(Duration),
}

/// What a filter selected jobs by, checked again under each row lock: a job outside
/// it is answered [`ByJob::NoLongerMatches`]. The default (jobs named by id) lets any
/// job through.
#[derive(Debug, Clone, Default)]
pub struct Recheck {
    /// The statuses selected (empty: any).
    pub statuses: Vec<JobStatus>,
    /// Only jobs that finished before this instant (RFC 3339).
    pub finished_before: Option<String>,
}

impl Store {
    /// Carries out `act` on `job_ids` (see the module's comment), in a task of its
    /// own: a caller that hangs up never leaves a pooled connection waiting in a
    /// lock queue; the act runs to its end (at most [`LOCK_WAIT`] of waiting) and its
    /// events tell what it did.
    pub(super) async fn act_on<A: Act + Send + Sync + 'static>(
        &self,
        act: A,
        job_ids: &[Uuid],
        recheck: Recheck,
    ) -> ActedOn<A::Outcome>
    where
        A::Outcome: Send + 'static,
    {
        let store = self.clone();
        let mut ids = job_ids.to_vec();
        ids.sort_unstable();
        ids.dedup();
        let acting = tokio::spawn(async move {
            let deadline = Instant::now() + LOCK_WAIT;
            let mut outcomes = Vec::with_capacity(ids.len());
            let interrupted = store
                .act_until(&act, &ids, &recheck, deadline, &mut outcomes)
                .await
                .err();
            outcomes.sort_by_key(|(id, _)| *id);
            ActedOn {
                outcomes,
                interrupted,
            }
        });
        match acting.await {
            Ok(acted) => acted,
            // The task panicked (a defect) or the runtime is shutting down.
            Err(failed) => ActedOn {
                outcomes: Vec::new(),
                interrupted: Some(StoreError::GroupCommit(format!(
                    "the operator act stopped: {failed}"
                ))),
            },
        }
    }

    async fn act_until<A: Act>(
        &self,
        act: &A,
        ids: &[Uuid],
        recheck: &Recheck,
        deadline: Instant,
        outcomes: &mut Vec<(Uuid, ByJob<A::Outcome>)>,
    ) -> Result<(), StoreError> {
        let mut held = self.skip_passes(act, ids, recheck, outcomes).await?;
        for pause in QUICK_RETRIES {
            if held.is_empty() {
                return Ok(());
            }
            tokio::time::sleep(pause).await;
            held = self.skip_passes(act, &held, recheck, outcomes).await?;
        }
        // Each row still held waits its turn, while the call's time lasts, holding
        // one of the few connections set aside for waiting acts.
        let mut left_over = Vec::new();
        for (i, id) in held.iter().enumerate() {
            let left = deadline.saturating_duration_since(Instant::now());
            let permit = match tokio::time::timeout(left, self.waiting_acts.acquire()).await {
                Ok(Ok(permit)) => permit,
                // The time is up (or the semaphore closed, which never happens).
                _ => {
                    left_over.extend_from_slice(&held[i..]);
                    break;
                }
            };
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                left_over.extend_from_slice(&held[i..]);
                break;
            }
            let still = self
                .act_pass(act, &[*id], recheck, Locking::Wait(left), outcomes)
                .await?;
            drop(permit);
            left_over.extend(still);
        }
        // The time is up: one last look at what is left, skipping what is still held.
        let still = self.skip_passes(act, &left_over, recheck, outcomes).await?;
        outcomes.extend(still.into_iter().map(|id| (id, ByJob::Busy)));
        Ok(())
    }

    /// `ids` in transactions of [`JOBS_PER_TRANSACTION`], skipping held rows; returns
    /// the ids of the rows other transactions held.
    async fn skip_passes<A: Act>(
        &self,
        act: &A,
        ids: &[Uuid],
        recheck: &Recheck,
        outcomes: &mut Vec<(Uuid, ByJob<A::Outcome>)>,
    ) -> Result<Vec<Uuid>, StoreError> {
        let mut held = Vec::new();
        for chunk in ids.chunks(JOBS_PER_TRANSACTION) {
            held.extend(
                self.act_pass(act, chunk, recheck, Locking::Skip, outcomes)
                    .await?,
            );
        }
        Ok(held)
    }

    /// One transaction: acts on the rows it could lock, answers the ids that name no
    /// job, and returns the ids of rows another transaction held.
    async fn act_pass<A: Act>(
        &self,
        act: &A,
        ids: &[Uuid],
        recheck: &Recheck,
        locking: Locking,
        outcomes: &mut Vec<(Uuid, ByJob<A::Outcome>)>,
    ) -> Result<Vec<Uuid>, StoreError> {
        let mut client = self.shared().await?;
        let tx = client.transaction().await?;
        let bound = &recheck.finished_before;
        let rows = match locking {
            Locking::Skip => tx.query(A::LOCK, &[&ids, bound]).await?,
            Locking::Wait(wait) => {
                // Never a zero bound: PostgreSQL reads `lock_timeout = 0` as none.
                let wait = format!("{}ms", wait.as_millis().max(1));
                tx.query(sql::SET_LOCK_TIMEOUT, &[&wait]).await?;
                match tx
                    .query(A::LOCK_WAITING, &[&ids, bound])
                    .await
                    .map_err(StoreError::from)
                {
                    // Still held when the bound ran out (the transaction is aborted
                    // and rolled back on drop).
                    Err(error) if error.is_lock_timeout() => return Ok(ids.to_vec()),
                    rows => rows?,
                }
            }
        };
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
        let mut selected = Vec::with_capacity(rows.len());
        let mut moved = Vec::new();
        for row in rows {
            let status: JobStatus = row.get::<_, String>("status").parse()?;
            let in_statuses = recheck.statuses.is_empty() || recheck.statuses.contains(&status);
            if in_statuses && row.get::<_, bool>("finished_in_bound") {
                selected.push(row);
            } else {
                moved.push((row.get("job_id"), ByJob::NoLongerMatches { status }));
            }
        }
        let decided = act.on_locked(&tx, &selected).await?;
        tx.commit().await?;
        outcomes.extend(
            decided
                .into_iter()
                .map(|(id, outcome)| (id, ByJob::Decided(outcome))),
        );
        outcomes.extend(moved);
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
    /// Only jobs that finished before this instant (RFC 3339).
    pub finished_before: Option<String>,
    /// Only jobs whose metadata holds every entry of this object.
    pub metadata: Option<serde_json::Value>,
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
        let client = self.shared().await?;
        let statuses: Vec<&str> = selection.statuses.iter().map(|s| s.as_str()).collect();
        // One more than the limit tells whether more matched. Planned for these values
        // each call (see `Store::list_jobs`: never a cached, generic plan).
        let rows = client
            .query(
                statement,
                &[
                    &statuses,
                    &selection.workflow_name,
                    &selection.created_before,
                    &selection.created_after,
                    &(selection.limit + 1),
                    &selection.finished_before,
                    &selection.metadata,
                ],
            )
            .await?;
        let mut job_ids: Vec<Uuid> = rows.iter().map(|row| row.get("job_id")).collect();
        let more = job_ids.len() as i64 > selection.limit;
        job_ids.truncate(usize::try_from(selection.limit).unwrap_or(0));
        Ok(Selected { job_ids, more })
    }
}
