//! `get-job {jobId, waitMs?, include?}` → `{ok: true, job: {...every column...,
//! events: [...]}}` or `{ok: false, error: "no workflow run <id>"}`.
//!
//! - The workflow snapshot (`workflowDefinition`, tens of kilobytes with its
//!   descriptor set) is left out unless `include: ["definition"]` asks for it: a
//!   page polling a job reads it once.
//! - `events` are the job's events in order, read from its outbox rows, so they can
//!   be read even with the Kafka lanes off: `eventId`, `type`, `status` (of the outbox
//!   row: PENDING until the relay publishes it), `step`, `attempt`, `occurredAt`, and
//!   `error`, `verdict` and `detail` when the event has them.
//! - `steps` are the workflow's steps with their states (see [`super::job_steps`]).
//!
//! A reviewer (a call admitted by `jobs:review` alone) reads a trimmed view: see
//! [`super::review`].
//!
//! With `waitMs` (up to 60,000) the answer waits until the job is finished or WAITING
//! on a step, or the time is up, whichever comes first. A job not submitted yet is
//! waited for too, as the event stream waits for it (a record produced to the request
//! topic a moment ago becomes a job once the consumer takes it): the answer is `no
//! workflow run` only when it still does not exist at the end. It is woken by the job's own
//! events through the node's [`crate::watch::Watchers`] hub, not by polling, and
//! counts against `[jobs].max_watchers` (and the token's share of it,
//! `max_watchers_per_token`) while it waits. When no slot is free it is answered
//! 429 `resource_exhausted` at once: waiting calls never poll the row, so they never
//! take the connections running jobs write through.

use std::sync::Arc;
use std::time::Duration;

use registry_stub::{ActionError, ActionRequest, Code};
use serde_json::{Value, json};
use uuid::Uuid;

use super::{JobsState, camel_case_keys, job_steps, review, store_error};
use crate::status::JobStatus;

/// Handles one call.
pub async fn handle(state: Arc<JobsState>, request: ActionRequest) -> Result<Value, ActionError> {
    let id = request.str("jobId");
    let job_id = Uuid::parse_str(id).map_err(|e| ActionError::invalid(format!("jobId: {e}")))?;
    let with_definition = request
        .get("include")
        .and_then(Value::as_array)
        .is_some_and(|parts| parts.iter().any(|p| p == "definition"));
    let row = match request.get("waitMs").and_then(Value::as_u64).unwrap_or(0) {
        0 => state
            .store
            .get_job_view(job_id, with_definition)
            .await
            .map_err(store_error)?,
        ms => {
            let wait = Duration::from_millis(ms);
            settled_row(&state, &request, job_id, wait, with_definition).await?
        }
    };
    let Some(row) = row else {
        return Ok(json!({ "ok": false, "error": format!("no workflow run {job_id}") }));
    };
    if review::is_reviewer(&request) {
        return Ok(json!({ "ok": true, "job": review::job_view(&state, &row).await? }));
    }
    // The job's outbox rows, so its events can be read even with the Kafka lanes off.
    let events: Vec<Value> = state
        .store
        .job_events(job_id)
        .await
        .map_err(store_error)?
        .into_iter()
        .map(|e| event_view(&e.event_id, &e.event_type, &e.status, &e.payload))
        .collect();
    let steps = job_steps::step_views(&state, job_id, &row, &events)
        .await
        .map_err(store_error)?;
    let mut job = camel_case_keys(row);
    if let Some(steps) = steps {
        job["steps"] = steps;
    }
    // Its children, from the index on parents (none for most jobs).
    let (children, count) = state
        .store
        .children_of(job_id, 100, 0)
        .await
        .map_err(store_error)?;
    if count > 0 {
        job["childCount"] = json!(count);
        job["children"] = children
            .into_iter()
            .map(|c| {
                json!({ "jobId": c.job_id.to_string(), "workflowName": c.workflow_name,
                        "status": c.status, "step": c.step, "item": c.item })
            })
            .collect();
    }
    job["events"] = Value::Array(events);
    // Why a QUEUED job is not running yet: its start, a pause, its keys' limits.
    if job["status"] == "QUEUED"
        && let Some(hold_ups) = state.store.hold_ups(job_id).await.map_err(store_error)?
    {
        let throttled = job["throttled"].as_str().map(str::to_owned);
        job["heldBy"] = held_by(&hold_ups, throttled.as_deref());
    }
    Ok(json!({ "ok": true, "job": job }))
}

/// One event as `get-job` lists it: the outbox row's id, type and status, with what
/// the event says (step, attempt, time, and error, verdict and detail when set).
fn event_view(event_id: &Uuid, event_type: &str, status: &str, payload: &[u8]) -> Value {
    let mut view = json!({ "eventId": event_id.to_string(), "type": event_type, "status": status });
    match crate::event_json::event_json(payload) {
        Ok(Value::Object(event)) => {
            for key in [
                "step",
                "attempt",
                "occurredAt",
                "error",
                "verdict",
                "detail",
            ] {
                if let Some(value) = event.get(key) {
                    view[key] = value.clone();
                }
            }
        }
        Ok(_) => {}
        Err(error) => {
            // A payload the contract cannot decode was never written by this engine.
            tracing::error!(%event_id, %error, "an outbox payload does not decode");
            view["undecodable"] = json!(error);
        }
    }
    view
}

/// The job's row once it is finished or WAITING, or when `wait` is up (`None`: no such
/// job).
async fn settled_row(
    state: &JobsState,
    request: &ActionRequest,
    job_id: Uuid,
    wait: Duration,
    with_definition: bool,
) -> Result<Option<Value>, ActionError> {
    let deadline = tokio::time::Instant::now() + wait;
    // The slot first: past the node's bound (or the token's share) the call is
    // answered at once, before any read, never left to read the row over and over on
    // the pool the running jobs write through.
    let mut watching = state
        .watchers
        .watch(job_id, i64::MAX, request.caller.0)
        .map_err(|e| {
            ActionError::new(
                Code::ResourceExhausted,
                format!("waitMs: {e}; or call get-job without waitMs"),
            )
        })?;
    // Watch from the latest event before reading the row: an event committed between
    // the read and the wait still wakes it.
    let position = state
        .store
        .latest_event_position(job_id)
        .await
        .map_err(store_error)?;
    watching.start_after(position);
    loop {
        let row = state
            .store
            .get_job_view(job_id, with_definition)
            .await
            .map_err(store_error)?;
        // A job that does not exist yet is waited for: its first event wakes the wait.
        let settled = row.as_ref().is_some_and(|row| {
            row["status"]
                .as_str()
                .and_then(|s| s.parse::<JobStatus>().ok())
                .is_some_and(|s| s.is_terminal() || s == JobStatus::Waiting)
        });
        if settled {
            return Ok(row);
        }
        let woken = async {
            let event = watching.next().await;
            // Read the row again once, whatever else has arrived.
            watching.drain();
            event.is_some()
        };
        match tokio::time::timeout_at(deadline, woken).await {
            Ok(true) => {}
            // Time is up, or the hub stopped (the node is shutting down).
            Ok(false) | Err(_) => return Ok(row),
        }
    }
}

/// What holds a QUEUED job back, in words a reader acts on: each is `{reason,
/// detail}` with reason `THROTTLED` (a fleet-wide limit gave it back: `throttled`
/// says which), `RUN_AFTER`, `WORKFLOW_PAUSED`, `KEY_PAUSED` or `KEY_AT_LIMIT` (empty:
/// nothing; the next claim takes it).
fn held_by(hold_ups: &crate::store::HoldUps, throttled: Option<&str>) -> Value {
    let mut reasons = Vec::new();
    if let Some(why) = throttled {
        reasons.push(json!({ "reason": "THROTTLED", "detail": why }));
    }
    if let Some(at) = hold_ups.run_after_ms {
        reasons.push(json!({ "reason": "RUN_AFTER", "runAfterMs": at,
            "detail": "its start (runAfter: a delay, a backoff, a sleep or a throttle) is still ahead" }));
    }
    if hold_ups.workflow_paused {
        reasons.push(json!({ "reason": "WORKFLOW_PAUSED",
            "detail": "its workflow is paused (resume-workflow)" }));
    }
    for key in hold_ups.keys.as_array().into_iter().flatten() {
        let name = key["key"].as_str().unwrap_or_default();
        if key["paused"] == true {
            reasons.push(json!({ "reason": "KEY_PAUSED", "key": name,
                "detail": format!("concurrency key '{name}' is paused (resume-workflow)") }));
        }
        let (running, limit) = (
            key["running"].as_i64().unwrap_or(0),
            key["limit"].as_i64().unwrap_or(0),
        );
        if running >= limit {
            reasons.push(json!({ "reason": "KEY_AT_LIMIT", "key": name, "running": running, "limit": limit,
                "detail": format!("concurrency key '{name}' has {running} running jobs, its limit of {limit}") }));
        }
    }
    Value::from(reasons)
}
