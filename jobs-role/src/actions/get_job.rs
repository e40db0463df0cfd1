//! `get-job {jobId}` → `{ok: true, job: {...every column...}}` or
//! `{ok: false, error: "no workflow run <id>"}`.

use std::sync::Arc;

use registry_stub::{ActionError, ActionRequest};
use serde_json::{Value, json};
use uuid::Uuid;

use super::{JobsState, camel_case_keys, store_error};

/// Handles one call.
pub async fn handle(state: Arc<JobsState>, request: ActionRequest) -> Result<Value, ActionError> {
    let id = request.str("jobId");
    let job_id = Uuid::parse_str(id).map_err(|e| ActionError::invalid(format!("jobId: {e}")))?;
    Ok(
        match state.store.get_job(job_id).await.map_err(store_error)? {
            Some(row) => json!({ "ok": true, "job": camel_case_keys(row) }),
            None => json!({ "ok": false, "error": format!("no workflow run {job_id}") }),
        },
    )
}
