//! `retry-job {jobId, fromStep?, maxAttempts?, reason?}`: an operator re-queues a
//! finished job (see [`crate::store::Retry`]). `fromStep` must name a step of the
//! job's own workflow snapshot (400 otherwise, listing its steps).
//!
//! | answer                                                       | meaning                          |
//! |--------------------------------------------------------------|----------------------------------|
//! | `{ok: true, outcome: "RETRIED", status: "QUEUED", from, checkpointsKept}` | queued again; `from` the status it left; `checkpointsKept` the checkpoints kept (all but those of `fromStep` and the steps after it) |
//! | `{ok: false, outcome: "WRONG_STATE", status, error}`           | live, COMPLETED without `fromStep`, or FAILED at submission |
//! | `{ok: false, error: "no workflow run <id>"}`                   | no such job                      |
//!
//! A job whose row another transaction holds for all of [`crate::store::LOCK_WAIT`]
//! (a stuck write) answers `unavailable`, with nothing changed.

use std::sync::Arc;

use registry_stub::{ActionError, ActionRequest};
use serde_json::{Value, json};
use uuid::Uuid;

use super::many_jobs::busy;
use super::{JobsState, store_error};
use crate::status::JobStatus;
use crate::store::{ByJob, RerunFrom, Retry, RetryOutcome};

/// Handles one call.
pub async fn handle(state: Arc<JobsState>, request: ActionRequest) -> Result<Value, ActionError> {
    let job_id = Uuid::parse_str(request.str("jobId"))
        .map_err(|e| ActionError::invalid(format!("jobId: {e}")))?;
    let not_found = || json!({ "ok": false, "error": format!("no workflow run {job_id}") });
    let from_step = match request.str("fromStep") {
        "" => None,
        step => {
            let Some(job) = state.store.get_job(job_id).await.map_err(store_error)? else {
                return Ok(not_found());
            };
            let (compiled, at) = super::job_step(&state, &job, "fromStep", step).await?;
            // The step and every step that runs after it, directly or through others.
            let dropped = compiled
                .steps
                .iter()
                .filter(|s| s.index == at || s.ancestors.contains(&at))
                .map(|s| (s.name.clone(), s.index))
                .collect();
            Some(RerunFrom { step, dropped })
        }
    };
    let retry = Retry {
        from_step,
        max_attempts: new_budget(&request),
        reason: Some(request.str("reason")).filter(|r| !r.is_empty()),
    };
    let outcome = state
        .store
        .retry_job(job_id, &retry)
        .await
        .map_err(store_error)?;
    Ok(match outcome {
        ByJob::Decided(RetryOutcome::Retried {
            was,
            checkpoints_kept,
        }) => json!({
            "ok": true, "outcome": "RETRIED", "status": JobStatus::Queued.as_str(), "from": was.as_str(),
            "checkpointsKept": checkpoints_kept,
        }),
        ByJob::Decided(refused) => {
            let (status, error) = refusal(&refused);
            json!({ "ok": false, "outcome": "WRONG_STATE", "status": status.as_str(), "error": error })
        }
        ByJob::NotFound => not_found(),
        // NoLongerMatches only answers a filter's selection, never a job named by id.
        ByJob::Busy | ByJob::NoLongerMatches { .. } => {
            return Err(ActionError::unavailable(busy(job_id).error));
        }
    })
}

/// The retry budget a request asks for (`maxAttempts`; 0 or absent: each job keeps
/// its own).
pub fn new_budget(request: &ActionRequest) -> Option<i32> {
    request
        .get("maxAttempts")
        .and_then(Value::as_i64)
        .and_then(|n| i32::try_from(n).ok())
        .filter(|n| *n > 0)
}

/// The job's status and why, for a refused retry (one carried out: QUEUED, and no
/// reason).
pub fn refusal(outcome: &RetryOutcome) -> (JobStatus, String) {
    match outcome {
        RetryOutcome::Retried { .. } => (JobStatus::Queued, String::new()),
        RetryOutcome::NeverRan => (
            JobStatus::Failed,
            "this job failed at submission and never ran (see its error): submit it again with a new jobId".to_owned(),
        ),
        RetryOutcome::WrongState { status } if *status == JobStatus::Completed => (
            *status,
            "a COMPLETED job is re-run only from a named step: give fromStep".to_owned(),
        ),
        RetryOutcome::WrongState { status } => (
            *status,
            format!("only DEAD, FAILED or CANCELLED jobs are retried; this one is {status}"),
        ),
    }
}
