//! `get-job-items {jobId, stepName, offset?, limit?}` → `{ok: true, items, done,
//! failed, nextOffset}`: one page of a map step's stored elements (those whose calls
//! ended), by position in its list, from `offset`, at most `limit` (default 100, at
//! most 500; the request's rules bound both). `nextOffset` is -1 on the last page.
//! A job that does not exist, or a step its workflow does not have, is answered
//! `{ok: false, error}`.

use std::sync::Arc;

use registry_stub::{ActionError, ActionRequest};
use serde_json::{Value, json};
use uuid::Uuid;

use super::{JobsState, store_error};

/// Elements answered when the caller gives no limit.
const DEFAULT_LIMIT: i64 = 100;

/// Handles one call.
pub async fn handle(state: Arc<JobsState>, request: ActionRequest) -> Result<Value, ActionError> {
    let job_id = Uuid::parse_str(request.str("jobId"))
        .map_err(|e| ActionError::invalid(format!("jobId: {e}")))?;
    let step = request.str("stepName");
    let limit = request
        .get("limit")
        .and_then(Value::as_i64)
        .filter(|limit| *limit > 0)
        .unwrap_or(DEFAULT_LIMIT);
    let offset = request
        .get("offset")
        .and_then(Value::as_i64)
        .and_then(|offset| i32::try_from(offset).ok())
        .unwrap_or(0);
    let Some(job) = state.store.get_job(job_id).await.map_err(store_error)? else {
        return Ok(json!({ "ok": false, "error": format!("no workflow run {job_id}") }));
    };
    let (compiled, at) = super::job_step(&state, &job, "stepName", step).await?;
    if compiled.steps[at].map.is_none() {
        return Err(ActionError::invalid(format!(
            "stepName: step '{step}' is not a map step (it has no 'forEach'): its response is in the job's checkpoints"
        )));
    }
    // One more than asked says whether another page follows.
    let mut page = state
        .store
        .job_items_page(job_id, step, offset, limit + 1)
        .await
        .map_err(store_error)?;
    let next_offset = if page.len() as i64 > limit {
        page.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
        page.last().map_or(-1, |last| last.index + 1)
    } else {
        -1
    };
    let (done, failed) = state
        .store
        .job_item_counts(job_id)
        .await
        .map_err(store_error)?
        .into_iter()
        .find(|(name, ..)| name == step)
        .map_or((0, 0), |(_, done, failed)| (done, failed));
    let items: Vec<Value> = page
        .into_iter()
        .map(|item| match item.outcome {
            Ok(response) => json!({ "index": item.index, "response": response }),
            Err(error) => json!({ "index": item.index, "error": error }),
        })
        .collect();
    Ok(json!({
        "ok": true, "items": items, "done": done, "failed": failed, "nextOffset": next_offset,
    }))
}
