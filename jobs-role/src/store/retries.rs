//! Retries by an operator: `retry-job` puts a DEAD, FAILED or CANCELLED job (or a
//! COMPLETED one, from a named step) back in the queue with a fresh retry budget,
//! decided under the row lock. Nothing automatic ever does this. A retry is an act,
//! not a request made idempotent: sent again after it was carried out (a client's
//! resend after a timeout), it finds the job finished again and re-queues it again.

use super::*;

/// What the operator asked for.
#[derive(Debug, Clone)]
pub struct Retry<'a> {
    /// The step to run again from, with its position in the job's workflow: its
    /// checkpoint and every later one are dropped. `None` keeps every checkpoint (the
    /// job resumes at the first missing one).
    pub from_step: Option<(&'a str, usize)>,
    /// The new retry budget; `None` keeps the job's own.
    pub max_attempts: Option<i32>,
    /// Why, for the RETRIED event.
    pub reason: Option<&'a str>,
}

/// What `retry-job` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RetryOutcome {
    /// QUEUED again; `was` is the status it left.
    Retried {
        /// The status before the retry.
        was: JobStatus,
        /// Checkpoints kept: the next claim runs the workflow's step at this position
        /// first (fewer than `fromStep`'s position when the job never got that far).
        checkpoints_kept: i32,
    },
    /// FAILED before it was ever claimed (its submission was refused): submit again.
    NeverRan,
    /// The job is not in a state a retry takes (live, or COMPLETED without a step).
    WrongState {
        /// Its status now.
        status: JobStatus,
    },
    /// No such job.
    NotFound,
}

impl Store {
    /// Re-queues a finished job for an operator, under the row lock: of two retries
    /// racing, one re-queues and the other finds the job QUEUED (`WrongState`). The
    /// job keeps its id and its events; a RETRIED event records the act.
    pub async fn retry_job(
        &self,
        job_id: Uuid,
        retry: &Retry<'_>,
    ) -> Result<RetryOutcome, StoreError> {
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        let Some(row) = tx.query_opt(sql::LOCK_JOB_FOR_RETRY, &[&job_id]).await? else {
            return Ok(RetryOutcome::NotFound);
        };
        let status: JobStatus = row.get::<_, String>("status").parse()?;
        if !status.can_be_retried(retry.from_step.is_some()) {
            return Ok(RetryOutcome::WrongState { status });
        }
        // FAILED before any claim: its submission was refused (a broker-native request
        // naming an unknown workflow, or an input its rules reject). Running it would
        // skip those checks; it must be submitted again instead.
        if status == JobStatus::Failed && row.get::<_, i32>("claims") == 0 {
            return Ok(RetryOutcome::NeverRan);
        }
        debug_assert!(status.can_become(JobStatus::Queued));
        let max_attempts = retry
            .max_attempts
            .unwrap_or_else(|| row.get("max_attempts"));
        // The step's position is how many checkpoints stay (steps run in order, one
        // checkpoint each); a position past them keeps them all.
        let keep = retry
            .from_step
            .map(|(_, at)| i32::try_from(at).unwrap_or(i32::MAX));
        let kept: Option<i32> = tx
            .query_one(sql::RETRY_JOB, &[&job_id, &max_attempts, &keep])
            .await?
            .get("kept");
        let name: String = row.get("workflow_name");
        let was = status.as_str();
        let reason = retry.reason.map(printable);
        let mut detail: Vec<(&str, &str)> = vec![("from", was)];
        if let Some((step, _)) = retry.from_step {
            detail.push(("fromStep", step));
        }
        if let Some(reason) = &reason {
            detail.push(("reason", reason));
        }
        let event = EventFacts {
            job_id,
            workflow_name: &name,
            kind: Type::Retried,
            step: None,
            attempt: 0,
            verdict: None,
            error: None,
            status: JobStatus::Queued,
            detail: &detail,
        };
        insert_event(&tx, &event).await?;
        tx.execute(sql::NOTIFY_QUEUED, &[&job_id.to_string()])
            .await?;
        tx.commit().await?;
        Ok(RetryOutcome::Retried {
            was: status,
            checkpoints_kept: kept.unwrap_or(0),
        })
    }
}
