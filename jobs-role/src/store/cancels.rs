//! Cancels: an operator's `cancel-job` and `cancel-jobs`, decided under the row lock
//! (see [`operator_acts`](super::operator_acts)), and the CANCELLED settlement of a
//! RUNNING job whose cancel was requested.
//!
//! QUEUED and WAITING jobs become CANCELLED at once. A RUNNING job belongs to the
//! worker holding its claim, so the cancel is a request: the row is marked, the worker
//! is told (a NOTIFY now, its lease renewal at the latest) and settles CANCELLED
//! through its fence; while the mark is on, no other settlement or release of the
//! claim matches, and the sweeper settles it CANCELLED when the worker is gone. So the
//! row lock decides a race between a cancel and a settlement: the settlement that
//! commits first wins (the cancel answers `ALREADY_FINISHED`), and a cancel answered
//! `CANCEL_REQUESTED` always ends CANCELLED.

use super::operator_acts::{Act, ActedOn, ByJob, Recheck};

use super::*;

/// The longest reason a row keeps (`workflow_run_cancel_reason_length`).
pub const MAX_REASON_CHARS: usize = 500;

/// What `cancel-job` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CancelOutcome {
    /// QUEUED or WAITING: CANCELLED now.
    Cancelled,
    /// RUNNING: the worker holding it settles it CANCELLED (within a second when its
    /// node hears the NOTIFY; at its next lease renewal otherwise).
    CancelRequested,
    /// Cancelled before, or a cancel already requested: nothing changed.
    AlreadyCancelled {
        /// The job's status now (CANCELLED, or RUNNING while its worker settles).
        status: JobStatus,
    },
    /// The job had already finished: nothing changed.
    AlreadyFinished {
        /// Its final status.
        status: JobStatus,
    },
}

impl CancelOutcome {
    /// What a cancel does to a job in `status` (`cancel_requested`: its worker was
    /// already asked to stop), decided under the row lock.
    fn of(status: JobStatus, cancel_requested: bool) -> CancelOutcome {
        match status {
            JobStatus::Cancelled => CancelOutcome::AlreadyCancelled { status },
            JobStatus::Running if cancel_requested => CancelOutcome::AlreadyCancelled { status },
            JobStatus::Running => CancelOutcome::CancelRequested,
            JobStatus::Queued | JobStatus::Waiting => {
                debug_assert!(status.can_become(JobStatus::Cancelled));
                CancelOutcome::Cancelled
            }
            finished => CancelOutcome::AlreadyFinished { status: finished },
        }
    }

    /// True when the cancel changed the job (cancelled it, or asked its worker to).
    pub fn changed(&self) -> bool {
        matches!(
            self,
            CancelOutcome::Cancelled | CancelOutcome::CancelRequested
        )
    }
}

/// `cancel-job` and `cancel-jobs`: see [`operator_acts`](super::operator_acts); also a
/// concurrency key's cancel strategy ([`flow`](super::flow)).
pub(super) struct CancelAct {
    reason: String,
}

impl CancelAct {
    pub(super) fn new(reason: &str) -> CancelAct {
        // NULs written out (PostgreSQL cannot store them) may lengthen the reason
        // past what the row keeps: cut it there.
        CancelAct {
            reason: printable(reason).chars().take(MAX_REASON_CHARS).collect(),
        }
    }
}

impl Act for CancelAct {
    type Outcome = CancelOutcome;
    const LOCK: &'static str = sql::LOCK_JOBS_FOR_CANCEL;
    const LOCK_WAITING: &'static str = sql::LOCK_JOBS_FOR_CANCEL_WAITING;

    async fn on_locked(
        &self,
        tx: &Transaction<'_>,
        rows: &[tokio_postgres::Row],
    ) -> Result<Vec<(Uuid, CancelOutcome)>, StoreError> {
        let mut outcomes = Vec::with_capacity(rows.len());
        let mut now = Vec::new();
        let mut requested = Vec::new();
        let mut events = EventBatch::default();
        for row in rows {
            let job_id: Uuid = row.get("job_id");
            let status: JobStatus = row.get::<_, String>("status").parse()?;
            let outcome = CancelOutcome::of(status, row.get("cancel_requested"));
            match outcome {
                CancelOutcome::Cancelled => {
                    now.push(job_id);
                    let name: String = row.get("workflow_name");
                    let metadata: Option<Value> = row.get("metadata");
                    events.push(
                        &cancelled_event(
                            job_id,
                            &name,
                            row.get("attempt"),
                            &self.reason,
                            metadata.as_ref(),
                        )
                        .facts(),
                    )?;
                }
                CancelOutcome::CancelRequested => requested.push(job_id),
                _ => {}
            }
            outcomes.push((job_id, outcome));
        }
        if !now.is_empty() {
            tx.execute(sql::CANCEL_NOW, &[&now, &self.reason]).await?;
            events.insert(tx).await?;
        }
        if !requested.is_empty() {
            tx.execute(sql::REQUEST_CANCEL, &[&requested, &self.reason])
                .await?;
            tx.execute(sql::NOTIFY_CANCEL, &[&requested]).await?;
        }
        Ok(outcomes)
    }
}

impl Store {
    /// Cancels a job for an operator, under the row lock: a claim, a `complete-step`
    /// or another cancel racing this one is serialised on the row, so each caller's
    /// answer is what the row said when it got the lock.
    pub async fn cancel_job(
        &self,
        job_id: Uuid,
        reason: &str,
    ) -> Result<ByJob<CancelOutcome>, StoreError> {
        let mut acted = self
            .cancel_jobs(&[job_id], reason, Recheck::default())
            .await;
        match (acted.interrupted, acted.outcomes.pop()) {
            (Some(error), _) => Err(error),
            (None, Some((_, outcome))) => Ok(outcome),
            // Provably unreachable: an act that was not interrupted answers every id.
            (None, None) => Ok(ByJob::Busy),
        }
    }

    /// Cancels many jobs, each as [`Store::cancel_job`] would; `recheck`: what a
    /// filter selected them by, checked again under each row lock.
    pub async fn cancel_jobs(
        &self,
        job_ids: &[Uuid],
        reason: &str,
        recheck: Recheck,
    ) -> ActedOn<CancelOutcome> {
        self.act_on(CancelAct::new(reason), job_ids, recheck).await
    }

    /// Settles CANCELLED, with its event, a claimed job whose cancel was requested
    /// (a worker's own write: on the connections reserved for the worker).
    /// [`StoreError::LostClaim`] when the fence matches nothing or no cancel was
    /// requested: the caller's own outcome stands then. Sent again after a COMMIT
    /// whose answer was lost, it finds the job CANCELLED under this claim's token and
    /// answers `Ok`.
    pub async fn settle_cancelled(&self, claim: &Claim) -> Result<(), StoreError> {
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        let Some(row) = tx
            .query_opt(
                sql::SETTLE_CANCELLED,
                &[&claim.job_id, &claim.owner, &claim.token],
            )
            .await?
        else {
            tx.rollback().await?;
            let state = client
                .query_opt(sql::CLAIM_WRITES_STATE, &[&vec![claim.job_id]])
                .await?;
            let landed = state.is_some_and(|state| {
                state.get::<_, i32>("claims") == claim.token
                    && state.get::<_, String>("status") == JobStatus::Cancelled.as_str()
            });
            return if landed { Ok(()) } else { Err(claim.lost()) };
        };
        insert_cancelled_event(&tx, claim.job_id, &claim.workflow_name, &row).await?;
        tx.commit().await?;
        Ok(())
    }
}

/// The CANCELLED event of a job a statement just cancelled; `row` carries its
/// `attempt`, `cancel_reason` and `metadata`.
pub(super) async fn insert_cancelled_event(
    tx: &Transaction<'_>,
    job_id: Uuid,
    workflow_name: &str,
    row: &tokio_postgres::Row,
) -> Result<(), StoreError> {
    let reason: Option<String> = row.get("cancel_reason");
    let metadata: Option<Value> = row.try_get("metadata")?;
    let event = cancelled_event(
        job_id,
        workflow_name,
        row.get("attempt"),
        reason.as_deref().unwrap_or_default(),
        metadata.as_ref(),
    );
    insert_event(tx, &event.facts()).await
}

/// What a CANCELLED event says.
struct CancelledEvent<'a> {
    job_id: Uuid,
    workflow_name: &'a str,
    attempt: i32,
    detail: [(&'static str, &'a str); 1],
    metadata: Option<&'a Value>,
}

fn cancelled_event<'a>(
    job_id: Uuid,
    workflow_name: &'a str,
    attempt: i32,
    reason: &'a str,
    metadata: Option<&'a Value>,
) -> CancelledEvent<'a> {
    CancelledEvent {
        job_id,
        workflow_name,
        attempt,
        detail: [("reason", reason)],
        metadata,
    }
}

impl CancelledEvent<'_> {
    fn facts(&self) -> EventFacts<'_> {
        EventFacts {
            job_id: self.job_id,
            workflow_name: self.workflow_name,
            kind: Type::Cancelled,
            step: None,
            attempt: self.attempt,
            verdict: None,
            error: None,
            status: JobStatus::Cancelled,
            detail: &self.detail,
            data: None,
            waiting_on: None,
            metadata: self.metadata,
        }
    }
}
