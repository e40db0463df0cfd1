//! `reject-step {jobId, stepName, reason}`: a reviewer fails a job parked on an
//! external step, as a verdict: FAILED with `REJECTED: step '<step>': <reason>` (the
//! reason is also the verdict). The same double gate as `complete-step`: fail-fast
//! here, then again under the row lock, so a rejection racing an answer (or a timeout,
//! or a cancel) is decided by whichever commits first, and the other is told.
//!
//! | answer                                                  | meaning                               |
//! |---------------------------------------------------------|---------------------------------------|
//! | `{ok: true, outcome: "REJECTED", status: "FAILED", error}` | the job failed with the verdict       |
//! | `{ok: true, outcome: "ALREADY_REJECTED", status: "FAILED"}` | rejected on that step before (a resend) |
//! | `{ok: false, outcome: "ALREADY_DONE", status, error}`    | the step was answered first: nothing rejected |
//! | `{ok: false, outcome: "WRONG_STATE", status, outstandingStep, error}` | not parked on that step |
//! | `{ok: false, error: "no workflow run <id>"}`             | no such job                           |

use std::sync::Arc;

use registry_stub::{ActionError, ActionRequest};
use serde_json::{Value, json};
use uuid::Uuid;

use super::complete_step::{ParkedStep, answer, parked_step};
use super::{JobsState, store_error};
use crate::store::ParkedAnswer;

/// Handles one call.
pub async fn handle(state: Arc<JobsState>, request: ActionRequest) -> Result<Value, ActionError> {
    let step_name = request.str("stepName");
    let body = match parked_step(&state, &request).await? {
        Ok(ParkedStep {
            job_id, compiled, ..
        }) => {
            let reason = request.str("reason");
            let decision = ParkedAnswer::Reject {
                error: format!("REJECTED: step '{step_name}': {reason}"),
                verdict: reason.to_owned(),
            };
            let decided = state
                .store
                .complete_parked_step(job_id, step_name, &decision, &compiled)
                .await
                .map_err(store_error)?;
            answer(decided, step_name, Some(&decision))
        }
        Err(answered) => answered,
    };
    as_rejection(&state, &request, step_name, body).await
}

/// Says a parked-step answer as a rejection's caller needs it: rejecting is what was
/// asked, so it is `ok`; a step answered first is not (nothing was rejected); a resend
/// of a rejection that landed is `ok` again.
async fn as_rejection(
    state: &JobsState,
    request: &ActionRequest,
    step_name: &str,
    mut body: Value,
) -> Result<Value, ActionError> {
    match body["outcome"].as_str() {
        Some("REJECTED") => body["ok"] = Value::Bool(true),
        Some("ALREADY_DONE") => {
            body["ok"] = Value::Bool(false);
            body["error"] = json!(format!(
                "step '{step_name}' was answered before the rejection: nothing was rejected"
            ));
        }
        Some("WRONG_STATE") if body["status"] == "FAILED" => {
            // The gate parsed the id already.
            let job_id = Uuid::parse_str(request.str("jobId"))
                .map_err(|e| ActionError::invalid(format!("jobId: {e}")))?;
            let job = state.store.get_job(job_id).await.map_err(store_error)?;
            let ours = format!("REJECTED: step '{step_name}':");
            if job.is_some_and(|job| job["error"].as_str().is_some_and(|e| e.starts_with(&ours))) {
                return Ok(
                    json!({ "ok": true, "outcome": "ALREADY_REJECTED", "status": "FAILED" }),
                );
            }
        }
        _ => {}
    }
    Ok(body)
}
