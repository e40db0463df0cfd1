//! `get-job {jobId}` → `{ok: true, job: {...every column..., events: [...]}}` or
//! `{ok: false, error: "no workflow run <id>"}`. `events` lists the job's outbox rows
//! (`eventId`, `type`, `status`: PENDING until the relay publishes them).

use std::sync::Arc;

use registry_stub::{ActionError, ActionRequest};
use serde_json::{Value, json};
use uuid::Uuid;

use super::{JobsState, camel_case_keys, store_error};

/// Handles one call.
pub async fn handle(state: Arc<JobsState>, request: ActionRequest) -> Result<Value, ActionError> {
    let id = request.str("jobId");
    let job_id = Uuid::parse_str(id).map_err(|e| ActionError::invalid(format!("jobId: {e}")))?;
    let Some(row) = state.store.get_job(job_id).await.map_err(store_error)? else {
        return Ok(json!({ "ok": false, "error": format!("no workflow run {job_id}") }));
    };
    let mut job = camel_case_keys(row);
    // The job's outbox rows, so its events can be read even with the Kafka lanes off.
    let events: Vec<Value> = state
        .store
        .job_events(job_id)
        .await
        .map_err(store_error)?
        .into_iter()
        .map(|e| json!({ "eventId": e.event_id.to_string(), "type": e.event_type, "status": e.status }))
        .collect();
    job["events"] = Value::Array(events);
    Ok(json!({ "ok": true, "job": job }))
}
