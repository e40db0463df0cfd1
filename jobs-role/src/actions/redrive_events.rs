//! `redrive-events {jobIds} | {all: true, workflowName?, limit}` →
//! `{ok, jobs, events, jobIds, more}`: the dead-lettered (FAILED) events of the jobs
//! named, or of every job that has one, published again in order with the events
//! HELD behind them.
//!
//! A FAILED outbox row spent its publish attempts on refusals of its own content (too
//! large for the broker, say): fix the cause first (the broker's
//! `message.max.bytes`), then redrive. Each FAILED row starts over with a fresh
//! budget; the relay takes only a job's earliest PENDING row, so the job's events go
//! out in their order. A job with nothing FAILED or HELD is left out of the answer.

use std::sync::Arc;

use registry_stub::{ActionError, ActionRequest};
use serde_json::{Value, json};
use uuid::Uuid;

use super::{JobsState, store_error};

/// Handles one call.
pub async fn handle(state: Arc<JobsState>, request: ActionRequest) -> Result<Value, ActionError> {
    let (job_ids, more) = if request.get("all").and_then(Value::as_bool) == Some(true) {
        let limit = request.get("limit").and_then(Value::as_i64).unwrap_or(0);
        let workflow = Some(request.str("workflowName")).filter(|name| !name.is_empty());
        let mut found = state
            .store
            .jobs_with_failed_events(workflow, limit + 1)
            .await
            .map_err(store_error)?;
        let more = found.len() as i64 > limit;
        found.truncate(usize::try_from(limit).unwrap_or(0));
        (found, more)
    } else {
        let ids = request
            .get("jobIds")
            .and_then(Value::as_array)
            .map(|ids| {
                ids.iter()
                    .filter_map(Value::as_str)
                    // The rules checked every id is a UUID.
                    .filter_map(|id| Uuid::parse_str(id).ok())
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        (ids, false)
    };
    let released = if job_ids.is_empty() {
        Vec::new()
    } else {
        state
            .store
            .redrive_job_events(&job_ids)
            .await
            .map_err(store_error)?
    };
    let events: usize = released.iter().map(|(_, n)| n).sum();
    if !released.is_empty() {
        tracing::info!(
            jobs = released.len(),
            events,
            "redrive-events: dead-lettered events and those held behind them are PENDING again"
        );
    }
    Ok(json!({
        "ok": true,
        "jobs": released.len(),
        "events": events,
        "jobIds": released.iter().map(|(id, _)| id.to_string()).collect::<Vec<_>>(),
        "more": more,
    }))
}
