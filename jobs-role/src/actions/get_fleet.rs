//! `get-fleet {}` → the fleet at a glance, for the console's fleet page: live jobs by
//! status, jobs finished in the last hour by status, the age of the oldest claimable
//! QUEUED job, the outbox's depth, and WAITING jobs by step.
//!
//! Every number comes from an index (the partial indexes of live rows, the finished
//! index, the outbox's partial indexes), so a console polling it every few seconds
//! costs the database little on any number of rows.

use std::collections::BTreeMap;
use std::sync::Arc;

use registry_stub::{ActionError, ActionRequest};
use serde_json::{Value, json};

use super::{JobsState, store_error};

/// Handles one call.
pub async fn handle(state: Arc<JobsState>, _request: ActionRequest) -> Result<Value, ActionError> {
    let store = &state.store;
    let (backlog, (live_jobs, waiting), finished) = tokio::try_join!(
        store.fleet_backlog(),
        store.fleet_live(),
        store.finished_last_hour()
    )
    .map_err(store_error)?;
    let mut live: BTreeMap<String, i64> = ["QUEUED", "RUNNING", "WAITING"]
        .into_iter()
        .map(|status| (status.to_owned(), 0))
        .collect();
    for (status, _workflow, count) in live_jobs {
        *live.entry(status).or_default() += count;
    }
    let mut last_hour: BTreeMap<String, i64> = ["COMPLETED", "FAILED", "DEAD", "CANCELLED"]
        .into_iter()
        .map(|status| (status.to_owned(), 0))
        .collect();
    last_hour.extend(finished);
    let waiting_by_steps: Vec<Value> = waiting
        .into_iter()
        .map(|(workflow, step, count)| {
            json!({ "workflowName": workflow, "stepName": step, "count": count })
        })
        .collect();
    Ok(json!({
        "ok": true,
        "live": live,
        "lastHour": last_hour,
        "oldestQueuedSeconds": backlog.oldest_claimable_seconds,
        "outbox": {
            "pending": backlog.outbox_pending,
            "held": backlog.outbox_held,
            "failed": backlog.outbox_failed,
            "oldestPendingSeconds": backlog.oldest_pending_seconds,
        },
        "waitingBySteps": waiting_by_steps,
        "readAt": now_rfc3339_millis(),
    }))
}

/// Now, as RFC 3339 in UTC to the millisecond (prost's Timestamp prints itself so, with
/// as many fraction digits as its nanoseconds need).
fn now_rfc3339_millis() -> String {
    let mut now = prost_types::Timestamp::from(std::time::SystemTime::now());
    now.nanos -= now.nanos % 1_000_000;
    now.to_string()
}
