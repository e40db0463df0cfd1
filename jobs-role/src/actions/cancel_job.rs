//! `cancel-job {jobId, reason}`: an operator stops a job (see [`crate::store::CancelOutcome`]).
//!
//! | answer                                                   | meaning                                  |
//! |----------------------------------------------------------|------------------------------------------|
//! | `{ok: true, outcome: "CANCELLED", status: "CANCELLED"}`    | was QUEUED or WAITING; cancelled now     |
//! | `{ok: true, outcome: "CANCEL_REQUESTED", status: "RUNNING"}` | its worker abandons the step and settles CANCELLED |
//! | `{ok: true, outcome: "ALREADY_CANCELLED", status}`        | cancelled (or requested) before; nothing changed |
//! | `{ok: false, outcome: "ALREADY_FINISHED", status}`        | COMPLETED, FAILED or DEAD; nothing changed |
//! | `{ok: false, error: "no workflow run <id>"}`              | no such job                              |

use std::sync::Arc;

use registry_stub::{ActionError, ActionRequest};
use serde_json::{Value, json};
use uuid::Uuid;

use super::{JobsState, store_error};
use crate::status::JobStatus;
use crate::store::CancelOutcome;

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
    let answer = |ok: bool, outcome: &str, status: JobStatus| json!({ "ok": ok, "outcome": outcome, "status": status.as_str() });
    Ok(match outcome {
        CancelOutcome::Cancelled => answer(true, "CANCELLED", JobStatus::Cancelled),
        CancelOutcome::CancelRequested => answer(true, "CANCEL_REQUESTED", JobStatus::Running),
        CancelOutcome::AlreadyCancelled { status } => answer(true, "ALREADY_CANCELLED", status),
        CancelOutcome::AlreadyFinished { status } => answer(false, "ALREADY_FINISHED", status),
        CancelOutcome::NotFound => {
            json!({ "ok": false, "error": format!("no workflow run {job_id}") })
        }
    })
}
