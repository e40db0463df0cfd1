//! `get-job {jobId, waitMs?}` → `{ok: true, job: {...every column..., events: [...]}}`
//! or `{ok: false, error: "no workflow run <id>"}`. `events` lists the job's outbox
//! rows (`eventId`, `type`, `status`: PENDING until the relay publishes them).
//!
//! With `waitMs` (up to 60,000) the answer waits until the job is finished or WAITING
//! on a step, or the time is up, whichever comes first; it is woken by the job's own
//! events through the node's [`crate::watch::Watchers`] hub, not by polling, and
//! counts against `[jobs].max_watchers` while it waits (when every slot is taken it
//! reads the row twice a second instead of being refused).

use std::sync::Arc;
use std::time::Duration;

use registry_stub::{ActionError, ActionRequest};
use serde_json::{Value, json};
use uuid::Uuid;

use super::{JobsState, camel_case_keys, store_error};
use crate::status::JobStatus;

/// Handles one call.
pub async fn handle(state: Arc<JobsState>, request: ActionRequest) -> Result<Value, ActionError> {
    let id = request.str("jobId");
    let job_id = Uuid::parse_str(id).map_err(|e| ActionError::invalid(format!("jobId: {e}")))?;
    let row = match request.get("waitMs").and_then(Value::as_u64).unwrap_or(0) {
        0 => state.store.get_job(job_id).await.map_err(store_error)?,
        ms => settled_row(&state, job_id, Duration::from_millis(ms)).await?,
    };
    let Some(row) = row else {
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

/// How often a waiting get-job reads the row when the node has no watcher slot free.
const POLL_WITHOUT_A_SLOT: Duration = Duration::from_millis(500);

/// The job's row once it is finished or WAITING, or when `wait` is up (`None`: no such
/// job).
async fn settled_row(
    state: &JobsState,
    job_id: Uuid,
    wait: Duration,
) -> Result<Option<Value>, ActionError> {
    let deadline = tokio::time::Instant::now() + wait;
    // Watch from the latest event before reading the row: an event committed between
    // the read and the wait still wakes it.
    let position = state
        .store
        .latest_event_position(job_id)
        .await
        .map_err(store_error)?;
    // Without a free slot, fall back to reading the row twice a second: slower to
    // notice, but the caller still waits, rather than being refused.
    let mut watching = state.watchers.watch(job_id, position).ok();
    loop {
        let row = state.store.get_job(job_id).await.map_err(store_error)?;
        let settled = row.as_ref().is_none_or(|row| {
            row["status"]
                .as_str()
                .and_then(|s| s.parse::<JobStatus>().ok())
                .is_some_and(|s| s.is_terminal() || s == JobStatus::Waiting)
        });
        if settled {
            return Ok(row);
        }
        let woken = async {
            match watching.as_mut() {
                Some(watching) => {
                    let event = watching.next().await;
                    // Read the row again once, whatever else has arrived.
                    watching.drain();
                    event.is_some()
                }
                None => {
                    tokio::time::sleep(POLL_WITHOUT_A_SLOT).await;
                    !state.watchers.is_closed()
                }
            }
        };
        match tokio::time::timeout_at(deadline, woken).await {
            Ok(true) => {}
            // Time is up, or the hub stopped (the node is shutting down).
            Ok(false) | Err(_) => return Ok(row),
        }
    }
}
