//! `cancel-job {jobId, reason}`: an operator stops a job (see [`crate::store::CancelOutcome`]).
//!
//! | answer                                                   | meaning                                  |
//! |----------------------------------------------------------|------------------------------------------|
//! | `{ok: true, outcome: "CANCELLED", status: "CANCELLED"}`    | was QUEUED or WAITING; cancelled now     |
//! | `{ok: true, outcome: "CANCEL_REQUESTED", status: "RUNNING"}` | its worker abandons the step and settles CANCELLED |
//! | `{ok: true, outcome: "ALREADY_CANCELLED", status}`        | cancelled (or requested) before; nothing changed |
//! | `{ok: false, outcome: "ALREADY_FINISHED", status}`        | COMPLETED, FAILED or DEAD; nothing changed |
//! | `{ok: false, error: "no workflow run <id>"}`              | no such job                              |
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
use crate::store::{ByJob, CancelOutcome};

/// Handles one call.
pub async fn handle(state: Arc<JobsState>, request: ActionRequest) -> Result<Value, ActionError> {
    let job_id = Uuid::parse_str(request.str("jobId"))
        .map_err(|e| ActionError::invalid(format!("jobId: {e}")))?;
    let reason = request.str("reason");
    let outcome = state
        .store
        .cancel_job(job_id, reason)
        .await
        .map_err(store_error)?;
    if matches!(&outcome, ByJob::Decided(decided) if told(decided).0) {
        // Its live descendants end with it (a job without children has none).
        state
            .store
            .cancel_descendants(job_id, reason)
            .await
            .map_err(store_error)?;
    }
    Ok(match outcome {
        ByJob::Decided(outcome) => {
            let (ok, name, status) = told(&outcome);
            json!({ "ok": ok, "outcome": name, "status": status.as_str() })
        }
        ByJob::NotFound => json!({ "ok": false, "error": format!("no workflow run {job_id}") }),
        // NoLongerMatches only answers a filter's selection, never a job named by id.
        ByJob::Busy | ByJob::NoLongerMatches { .. } => {
            return Err(ActionError::unavailable(busy(job_id).error));
        }
    })
}

/// How an outcome is told: whether the job now is (or ends) cancelled, the outcome's
/// name, and the job's status after the call.
pub fn told(outcome: &CancelOutcome) -> (bool, &'static str, JobStatus) {
    match outcome {
        CancelOutcome::Cancelled => (true, "CANCELLED", JobStatus::Cancelled),
        CancelOutcome::CancelRequested => (true, "CANCEL_REQUESTED", JobStatus::Running),
        CancelOutcome::AlreadyCancelled { status } => (true, "ALREADY_CANCELLED", *status),
        CancelOutcome::AlreadyFinished { status } => (false, "ALREADY_FINISHED", *status),
    }
}
