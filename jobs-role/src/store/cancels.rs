//! Cancels: an operator's `cancel-job`, decided under the row lock, and the CANCELLED
//! settlement of a RUNNING job whose cancel was requested.
//!
//! QUEUED and WAITING jobs become CANCELLED at once. A RUNNING job belongs to the
//! worker holding its claim, so the cancel is a request: the row is marked, the worker
//! is told (a NOTIFY now, its lease renewal at the latest) and settles CANCELLED
//! through its fence; while the mark is on, no other settlement or release of the
//! claim matches, and the sweeper settles it CANCELLED when the worker is gone. So the
//! row lock decides a race between a cancel and a settlement: the settlement that
//! commits first wins (the cancel answers `ALREADY_FINISHED`), and a cancel answered
//! `CANCEL_REQUESTED` always ends CANCELLED.

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
    /// No such job.
    NotFound,
}

impl Store {
    /// Cancels a job for an operator, under the row lock: a claim, a `complete-step`
    /// or another cancel racing this one is serialised on the row, so each caller's
    /// answer is what the row said when it got the lock.
    pub async fn cancel_job(
        &self,
        job_id: Uuid,
        reason: &str,
    ) -> Result<CancelOutcome, StoreError> {
        // NULs written out (PostgreSQL cannot store them) may lengthen the reason
        // past what the row keeps: cut it there.
        let reason: String = printable(reason).chars().take(MAX_REASON_CHARS).collect();
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        let Some(row) = tx.query_opt(sql::LOCK_JOB_FOR_CANCEL, &[&job_id]).await? else {
            return Ok(CancelOutcome::NotFound);
        };
        let status: JobStatus = row.get::<_, String>("status").parse()?;
        let outcome = match status {
            JobStatus::Cancelled => CancelOutcome::AlreadyCancelled { status },
            JobStatus::Running if row.get::<_, bool>("cancel_requested") => {
                CancelOutcome::AlreadyCancelled { status }
            }
            JobStatus::Running => {
                tx.execute(sql::REQUEST_CANCEL, &[&job_id, &reason]).await?;
                tx.execute(sql::NOTIFY_CANCEL, &[&job_id.to_string()])
                    .await?;
                CancelOutcome::CancelRequested
            }
            JobStatus::Queued | JobStatus::Waiting => {
                debug_assert!(status.can_become(JobStatus::Cancelled));
                tx.execute(sql::CANCEL_NOW, &[&job_id, &reason]).await?;
                let name: String = row.get("workflow_name");
                let event = cancelled_event(job_id, &name, row.get("attempt"), &reason);
                insert_event(&tx, &event.facts()).await?;
                CancelOutcome::Cancelled
            }
            finished => CancelOutcome::AlreadyFinished { status: finished },
        };
        tx.commit().await?;
        Ok(outcome)
    }

    /// Settles CANCELLED, with its event, a claimed job whose cancel was requested.
    /// [`StoreError::LostClaim`] when the fence matches nothing or no cancel was
    /// requested: the caller's own outcome stands then.
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
            return Err(claim.lost());
        };
        insert_cancelled_event(&tx, claim.job_id, &claim.workflow_name, &row).await?;
        tx.commit().await?;
        Ok(())
    }
}

/// The CANCELLED event of a job a statement just cancelled; `row` carries its
/// `attempt` and `cancel_reason`.
pub(super) async fn insert_cancelled_event(
    tx: &Transaction<'_>,
    job_id: Uuid,
    workflow_name: &str,
    row: &tokio_postgres::Row,
) -> Result<(), StoreError> {
    let reason: Option<String> = row.get("cancel_reason");
    let event = cancelled_event(
        job_id,
        workflow_name,
        row.get("attempt"),
        reason.as_deref().unwrap_or_default(),
    );
    insert_event(tx, &event.facts()).await
}

/// What a CANCELLED event says.
struct CancelledEvent<'a> {
    job_id: Uuid,
    workflow_name: &'a str,
    attempt: i32,
    detail: [(&'static str, &'a str); 1],
}

fn cancelled_event<'a>(
    job_id: Uuid,
    workflow_name: &'a str,
    attempt: i32,
    reason: &'a str,
) -> CancelledEvent<'a> {
    CancelledEvent {
        job_id,
        workflow_name,
        attempt,
        detail: [("reason", reason)],
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
        }
    }
}
