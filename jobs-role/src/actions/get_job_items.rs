//! `get-job-items {jobId, stepName, offset?, limit?}` → `{ok: true, items, done,
//! failed, nextOffset}`: one page of a map step's stored elements (those whose calls
//! ended), by position in its list, from `offset`, at most `limit` (default 100, at
//! most 500; the request's rules bound both), and at about 8 MiB of responses (at
//! least one element). `nextOffset` is -1 on the last page.
//! A job that does not exist, or a step its workflow does not have, is answered
//! `{ok: false, error}`.

use std::sync::Arc;

use registry_stub::{ActionError, ActionRequest};
use serde_json::{Value, json};
use uuid::Uuid;

use super::{JobsState, store_error};

/// Elements answered when the caller gives no limit.
const DEFAULT_LIMIT: i64 = 100;
/// About the most bytes of responses one page carries.
const PAGE_BYTES: usize = 8 * 1024 * 1024;

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
    // The snapshot alone, not the row: its checkpoints can be large.
    let Some(digest) = state.store.job_digest(job_id).await.map_err(store_error)? else {
        return Ok(json!({ "ok": false, "error": format!("no workflow run {job_id}") }));
    };
    let Some(compiled) = super::job_steps::job_workflow(&state, job_id, &digest)
        .await
        .map_err(store_error)?
    else {
        return Err(ActionError::invalid(
            "stepName: the job's stored workflow no longer compiles",
        ));
    };
    let Some(found) = compiled.step(step) else {
        let steps: Vec<&str> = compiled.steps.iter().map(|s| s.name.as_str()).collect();
        return Err(ActionError::invalid(format!(
            "stepName: workflow '{}' has no step '{step}' (its steps: {})",
            compiled.name,
            steps.join(", ")
        )));
    };
    if found.map.is_none() {
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
    let mut next_offset = if page.len() as i64 > limit {
        page.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
        page.last().map_or(-1, |last| last.index + 1)
    } else {
        -1
    };
    // A page stops at about PAGE_BYTES of responses (at least one element): elements
    // may each be megabytes.
    let mut bytes = 0;
    if let Some(cut) = page.iter().position(|item| {
        bytes += match &item.outcome {
            Ok(response) => serde_json::to_vec(response).map_or(0, |b| b.len()),
            Err(error) => error.len(),
        };
        bytes > PAGE_BYTES
    }) {
        let keep = cut.max(1);
        if keep < page.len() {
            page.truncate(keep);
            next_offset = page.last().map_or(-1, |last| last.index + 1);
        }
    }
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
