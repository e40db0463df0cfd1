//! `get-fleet {}` → the fleet at a glance, for the console's fleet page: live jobs by
//! status, jobs finished in the last hour by status, the age of the oldest claimable
//! QUEUED job, the outbox's depth, WAITING jobs by step, the paused workflows and
//! keys, the busiest concurrency keys, the fleet-wide limits, the last hour minute
//! by minute for the charts ([`crate::history`]), and the database server the node
//! reaches (with a multi-host URL, which host is the primary now; told here, behind a
//! token, and not by the unauthenticated `/readyz`, which names no host).
//!
//! The counts are index scans (the partial indexes of live rows, the finished index,
//! the outbox's partial indexes): cheap for thousands of rows, but linear in them, so
//! a million live jobs cost a second of database time. Every console tab polls this
//! every few seconds, so the node reads it at most once per [`FLEET_FRESH_FOR`], one
//! read at a time on one connection, and every caller in between shares that read.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use registry_stub::{ActionError, ActionRequest};
use serde_json::{Value, json};
use tokio::sync::Mutex;

use super::{JobsState, store_error};

/// How long one read of the fleet answers every caller.
pub const FLEET_FRESH_FOR: Duration = Duration::from_secs(2);

/// The node's latest read of the fleet, shared by every caller while it is fresh.
#[derive(Default, Clone)]
pub struct FleetSnapshot {
    latest: Arc<Mutex<Option<(Instant, Value)>>>,
}

/// Handles one call.
pub async fn handle(state: Arc<JobsState>, _request: ActionRequest) -> Result<Value, ActionError> {
    // Held across the read: callers arriving meanwhile wait for it and share it.
    let mut latest = state.fleet.latest.lock().await;
    if let Some((read_at, answer)) = latest.as_ref()
        && read_at.elapsed() < FLEET_FRESH_FOR
    {
        return Ok(answer.clone());
    }
    let answer = read(&state).await?;
    *latest = Some((Instant::now(), answer.clone()));
    Ok(answer)
}

async fn read(state: &JobsState) -> Result<Value, ActionError> {
    let store = &state.store;
    let backlog = store.fleet_backlog().await.map_err(store_error)?;
    let (live_jobs, waiting) = store.fleet_live().await.map_err(store_error)?;
    let finished = store.finished_last_hour().await.map_err(store_error)?;
    let paused = store.paused_workflows().await.map_err(store_error)?;
    let paused_keys = store.paused_keys().await.map_err(store_error)?;
    let keys = store
        .busiest_keys(BUSIEST_KEYS)
        .await
        .map_err(store_error)?;
    let limits = store.limits_state(LIMITS).await.map_err(store_error)?;
    let per_minute = store.finished_per_minute().await.map_err(store_error)?;
    let history = last_hour(&state.history.minutes(), &per_minute);
    // Best effort: a server that will not say (a revoked function, a pooler) still
    // answers the rest of the fleet.
    let primary = match store.database_server().await {
        Ok(address) => Some(address),
        Err(e) => {
            tracing::debug!(error = %e, "reading which database server the node reaches failed");
            None
        }
    };
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
        "pausedWorkflows": paused.iter().map(|p| json!({
            "workflowName": p.workflow_name,
            "pausedAt": rfc3339_millis(p.paused_at_ms),
            "reason": p.reason.clone().unwrap_or_default(),
        })).collect::<Vec<_>>(),
        "pausedKeys": paused_keys,
        "keys": keys.iter().map(|k| json!({
            "key": k.key, "workflowName": k.workflow_name, "limit": k.limit,
            "running": k.running, "queued": k.queued, "paused": k.paused,
        })).collect::<Vec<_>>(),
        "limits": limits.iter().map(|l| json!({
            "name": l.name, "tokens": l.tokens, "burst": l.burst,
            "inFlight": l.in_flight, "maxConcurrent": l.max_concurrent,
        })).collect::<Vec<_>>(),
        "history": history,
        "database": { "primary": primary },
        "readAt": now_rfc3339_millis(),
    }))
}

/// The most concurrency keys the answer lists.
const BUSIEST_KEYS: i64 = 20;
/// The most fleet-wide limits the answer lists.
const LIMITS: i64 = 20;

/// The last hour per minute, oldest first: the node's samples (live counts, p95 of
/// its steps) joined with the jobs finished in each minute, every minute of the hour
/// present (`at` RFC 3339; counts it did not read are `null`).
fn last_hour(samples: &[Value], finished: &[(i64, i64, i64)]) -> Vec<Value> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs() / 60).unwrap_or(0))
        .unwrap_or(0);
    (now - 59..=now)
        .map(|minute| {
            let sample = samples
                .iter()
                .find(|s| s["minute"].as_i64() == Some(minute));
            let (completed, failed) = finished
                .iter()
                .find(|(at, _, _)| *at == minute)
                .map_or((0, 0), |(_, c, f)| (*c, *f));
            let field = |name: &str| sample.map_or(Value::Null, |s| s[name].clone());
            json!({
                "at": rfc3339_millis(minute.saturating_mul(60_000)),
                "completed": completed,
                "failed": failed,
                "queued": field("queued"),
                "running": field("running"),
                "p95StepMs": field("p95StepMs"),
            })
        })
        .collect()
}

/// A time in milliseconds since the Unix epoch as RFC 3339 in UTC.
fn rfc3339_millis(ms: i64) -> String {
    let at = std::time::UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    prost_types::Timestamp::from(at).to_string()
}

/// Now, as RFC 3339 in UTC to the millisecond (prost's Timestamp prints itself so, with
/// as many fraction digits as its nanoseconds need).
fn now_rfc3339_millis() -> String {
    let mut now = prost_types::Timestamp::from(std::time::SystemTime::now());
    now.nanos -= now.nanos % 1_000_000;
    now.to_string()
}
