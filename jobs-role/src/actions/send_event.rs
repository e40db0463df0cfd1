//! `send-event {key, payload, eventId?}` (scope `jobs:signal`): delivers an event to
//! every job WAITING on `key` (the key its event step's `eventKey` computed), in one
//! transaction. For each waiting step the payload must parse as the step's
//! `outputType` (and, with `validate: true`, pass its rules): then it is the step's
//! checkpoint and the job resumes (or, when other waits still hold it, stays
//! WAITING on them); otherwise that job is refused, with why, and the others still
//! resume. The event is kept for the steps that park on `key` later, within their
//! `eventLookbackMs` (at most [`MAX_SIGNALS_PER_KEY`] per key, 7 days). `eventId`
//! makes sending idempotent on its key: an id sent before on the key answers
//! `duplicate: true` and resumes nothing (as long as the event is kept); without one
//! the node makes one up and answers it. A payload is at most
//! [`crate::signals::MAX_EVENT_PAYLOAD_BYTES`] of JSON.
//!
//! ```json
//! {"ok": true, "eventId": "…", "duplicate": false,
//!  "resumed": [{"jobId": "…", "step": "paid", "status": "QUEUED"}],
//!  "refused": [{"jobId": "…", "step": "paid", "reason": "the payload is not a shop.v1.Payment: …"}]}
//! ```

use std::sync::Arc;

use registry_stub::{ActionError, ActionRequest};
use serde_json::{Value, json};

use super::{JobsState, store_error};
#[cfg(doc)]
use crate::store::MAX_SIGNALS_PER_KEY;
use workflow::runner::event_key_problem;

use crate::store::nul_path;

/// The longest event key, in characters (the column's bound).
pub const MAX_KEY_CHARS: usize = workflow::runner::MAX_EVENT_KEY_CHARS;
/// The longest event id, in characters.
pub const MAX_EVENT_ID_CHARS: usize = 200;

/// Handles one call.
pub async fn handle(state: Arc<JobsState>, request: ActionRequest) -> Result<Value, ActionError> {
    let key = request.str("key");
    if let Some(problem) = event_key_problem(key) {
        return Err(ActionError::invalid(format!(
            "key: the key {problem} (the key the waiting jobs' eventKey computed)"
        )));
    }
    let Some(payload) = request.get("payload").filter(|p| p.is_object()).cloned() else {
        return Err(ActionError::invalid(
            "payload: required, a JSON object: the event, in proto3 JSON of the waiting steps' outputType",
        ));
    };
    crate::signals::check_payload(&payload)
        .map_err(|e| ActionError::invalid(format!("payload: {e}")))?;
    if let Some(path) = nul_path(&payload, "payload") {
        return Err(ActionError::invalid(format!(
            "{path}: holds a NUL character (\\u0000), which PostgreSQL cannot store; remove it"
        )));
    }
    let event_id = match request.str("eventId") {
        "" => uuid::Uuid::now_v7().to_string(),
        id if id.chars().count() > MAX_EVENT_ID_CHARS => {
            return Err(ActionError::invalid(format!(
                "eventId: at most {MAX_EVENT_ID_CHARS} characters"
            )));
        }
        id => match event_key_problem(id) {
            Some(problem) => {
                return Err(ActionError::invalid(format!("eventId: the id {problem}")));
            }
            None => id.to_owned(),
        },
    };
    let compiled = state.submitter.compiled();
    let outcome = state
        .store
        .send_signal(key, &event_id, &payload, |definition, step| {
            let (compiled, payload, event_id) =
                (compiled.clone(), payload.clone(), event_id.clone());
            Box::pin(async move {
                crate::signals::offer(&compiled, &definition, &step, &payload, &event_id).await
            })
        })
        .await
        .map_err(store_error)?;
    Ok(json!({
        "ok": true,
        "eventId": event_id,
        "duplicate": outcome.duplicate,
        "resumed": outcome.resumed.iter().map(|(job_id, step, status)| {
            json!({ "jobId": job_id.to_string(), "step": step, "status": status.as_str() })
        }).collect::<Vec<_>>(),
        "refused": outcome.refused.iter().map(|(job_id, step, reason)| {
            json!({ "jobId": job_id.to_string(), "step": step, "reason": reason })
        }).collect::<Vec<_>>(),
    }))
}
