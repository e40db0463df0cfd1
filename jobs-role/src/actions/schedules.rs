//! The schedule verbs: `put-schedule`, `delete-schedule`, `pause-schedule`,
//! `resume-schedule` (scope `schedules:write`), `get-schedule` and `list-schedules`
//! (scope `schedules:read`). `trigger-schedule` and `backfill-schedule` are in
//! [`super::schedule_jobs`].
//!
//! `put-schedule` checks everything before it writes: the cron expression and time
//! zone, the bounds, that the workflow is stored on this node, and that the input
//! fits it (a tick's job is prepared as a submission would be, and thrown away). A
//! refusal is a 400 naming the field; nothing is stored.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use registry_stub::{ActionError, ActionRequest};
use serde_json::{Value, json};

use super::submit::submit_error;
use super::{JobsState, store_error};
use crate::schedules::firing::{TickKind, schedule_key};
use crate::schedules::spec::{DEFAULT_CATCHUP_WINDOW_MS, ScheduleSpec};
use crate::schedules::{Catchup, Overlap, Timing};
use crate::store::ScheduleRow;

/// How many upcoming ticks `get-schedule` shows.
const UPCOMING: usize = 5;

/// How many of its newest jobs `get-schedule` shows.
const NEWEST_JOBS: i64 = 20;

/// The most schedules `list-schedules` answers.
const MAX_LISTED: i64 = 1_000;

/// How many of each schedule's newest jobs `list-schedules` shows.
const LISTED_JOBS: i64 = 5;

/// `put-schedule`.
pub async fn put(state: Arc<JobsState>, request: ActionRequest) -> Result<Value, ActionError> {
    if let Some(c) = workflow::compile::hidden_character(request.str("pausedReason")) {
        return Err(ActionError::invalid(format!(
            "pausedReason: holds U+{:04X}, a control or invisible formatting character: remove it",
            u32::from(c)
        )));
    }
    let spec = spec_of(&request)?;
    let timing = spec.check().map_err(ActionError::invalid)?;
    if state
        .submitter
        .stored_envelope(&spec.workflow_name)
        .is_none()
    {
        return Err(ActionError::invalid(format!(
            "workflowName: {} (list-workflows shows them; put-workflow stores one)",
            state.submitter.unknown_workflow(&spec.workflow_name)
        )));
    }
    let (now, _) = state.store.schedule_clock().await.map_err(store_error)?;
    // A tick's job, prepared as a submission (workflow compiled and checked, input
    // parsed against its type, keys computed) and thrown away: what would refuse a
    // tick refuses the schedule now.
    let job = state
        .scheduler
        .job_for(&spec, uuid::Uuid::nil(), now, TickKind::Tick)
        .await
        .map_err(|refused| submit_error(&state.submitter, refused))?;
    let key = schedule_key(&job.workflow_name, &spec.name).key;
    if spec.overlap != Overlap::Allow && !job.concurrency.iter().any(|held| held.key == key) {
        return Err(ActionError::invalid(format!(
            "overlap: workflow '{}' holds three concurrency keys, the most a job holds, so overlap {} cannot add the schedule's; use overlap allow, or drop a key",
            spec.workflow_name,
            spec.overlap.as_str()
        )));
    }
    let paused = request.get("paused").and_then(Value::as_bool);
    let stored = serde_json::to_value(&spec).map_err(ActionError::internal)?;
    let existing = state
        .store
        .schedule(&spec.name)
        .await
        .map_err(store_error)?;
    // The same schedule put again (a deploy re-applying its config) changes nothing:
    // its next tick, its revision and any fire in flight stand.
    if let Some(row) = existing
        .as_ref()
        .filter(|row| row.spec == stored && paused.is_none_or(|p| p == row.paused))
    {
        return Ok(json!({ "ok": true, "created": false, "schedule": view(row, Some(&timing)) }));
    }
    // A replaced schedule never goes back to a tick it fired.
    let from = existing
        .and_then(|row| row.last_tick_at)
        .map_or(now, |last| now.max(last + chrono::Duration::seconds(1)));
    let Some(first) = spec.first_tick(&timing, from) else {
        return Err(ActionError::invalid(format!(
            "endAt: no tick of '{}' falls between now (or startAt) and endAt",
            spec.cron
        )));
    };
    let (created, row) = state
        .store
        .put_schedule(
            &spec.name,
            &stored,
            Some(first),
            paused,
            request.str("pausedReason"),
        )
        .await
        .map_err(store_error)?;
    state.schedule_wake.notify_one();
    Ok(json!({ "ok": true, "created": created, "schedule": view(&row, Some(&timing)) }))
}

/// The spec a `put-schedule` body describes (the rules checked its shapes).
fn spec_of(request: &ActionRequest) -> Result<ScheduleSpec, ActionError> {
    let number = |field: &str| request.get(field).and_then(Value::as_i64).unwrap_or(0);
    Ok(ScheduleSpec {
        name: request.str("name").to_owned(),
        cron: request.str("cron").trim().to_owned(),
        timezone: request.str("timezone").to_owned(),
        workflow_name: request.str("workflowName").to_owned(),
        input: request.get("input").cloned().unwrap_or_else(|| json!({})),
        priority: request
            .get("priority")
            .and_then(Value::as_i64)
            .and_then(|p| i16::try_from(p).ok()),
        max_attempts: i32::try_from(number("maxAttempts")).ok().filter(|n| *n > 0),
        // The rules bound both to non-negative values.
        jitter_ms: u64::try_from(number("jitterMs")).unwrap_or(0),
        overlap: Overlap::parse(request.str("overlap")).map_err(ActionError::invalid)?,
        catchup: Catchup::parse(request.str("catchup")).map_err(ActionError::invalid)?,
        catchup_window_ms: match u64::try_from(number("catchupWindowMs")).unwrap_or(0) {
            0 => DEFAULT_CATCHUP_WINDOW_MS,
            ms => ms,
        },
        start_at: instant(request, "startAt")?,
        end_at: instant(request, "endAt")?,
    })
}

/// A timestamp field (RFC 3339, as the request parser checked), if given.
pub(super) fn instant(
    request: &ActionRequest,
    field: &str,
) -> Result<Option<DateTime<Utc>>, ActionError> {
    match request.str(field) {
        "" => Ok(None),
        text => DateTime::parse_from_rfc3339(text)
            .map(|at| Some(at.with_timezone(&Utc)))
            .map_err(|e| ActionError::invalid(format!("{field}: '{text}': {e}"))),
    }
}

/// `get-schedule`.
pub async fn get(state: Arc<JobsState>, request: ActionRequest) -> Result<Value, ActionError> {
    let name = request.str("name");
    let Some(row) = state.store.schedule(name).await.map_err(store_error)? else {
        return Ok(unknown(name));
    };
    let timing = timing_of(&row);
    let mut schedule = view(&row, timing.as_ref());
    schedule["jobs"] = Value::from(
        state
            .store
            .schedule_jobs(name, NEWEST_JOBS)
            .await
            .map_err(store_error)?,
    );
    Ok(json!({ "ok": true, "schedule": schedule }))
}

/// `list-schedules`.
pub async fn list(state: Arc<JobsState>, _request: ActionRequest) -> Result<Value, ActionError> {
    let rows = state
        .store
        .list_schedules(MAX_LISTED)
        .await
        .map_err(store_error)?;
    let mut recent = state
        .store
        .recent_schedule_jobs(MAX_LISTED, LISTED_JOBS)
        .await
        .map_err(store_error)?;
    let schedules: Vec<Value> = rows
        .iter()
        .map(|row| {
            let mut schedule = view(row, timing_of(row).as_ref());
            schedule["lastJobs"] = recent.remove(&row.name).unwrap_or_else(|| json!([]));
            schedule
        })
        .collect();
    Ok(json!({ "ok": true, "schedules": schedules }))
}

/// `delete-schedule`.
pub async fn delete(state: Arc<JobsState>, request: ActionRequest) -> Result<Value, ActionError> {
    let name = request.str("name");
    if state
        .store
        .delete_schedule(name)
        .await
        .map_err(store_error)?
    {
        Ok(json!({ "ok": true }))
    } else {
        Ok(unknown(name))
    }
}

/// `pause-schedule`.
pub async fn pause(state: Arc<JobsState>, request: ActionRequest) -> Result<Value, ActionError> {
    let name = request.str("name");
    let changed = state
        .store
        .set_schedule_paused(name, true, request.str("reason"), None)
        .await
        .map_err(store_error)?;
    Ok(match changed {
        Some(changed) => json!({ "ok": true, "changed": changed }),
        None => unknown(name),
    })
}

/// `resume-schedule`: its next tick is the first after now (the pause's ticks are
/// not caught up).
pub async fn resume(state: Arc<JobsState>, request: ActionRequest) -> Result<Value, ActionError> {
    let name = request.str("name");
    let Some(row) = state.store.schedule(name).await.map_err(store_error)? else {
        return Ok(unknown(name));
    };
    let (now, _) = state.store.schedule_clock().await.map_err(store_error)?;
    let next = spec_and_timing(&row).and_then(|(spec, timing)| spec.first_tick(&timing, now));
    let changed = state
        .store
        .set_schedule_paused(name, false, "", next)
        .await
        .map_err(store_error)?;
    state.schedule_wake.notify_one();
    Ok(match changed {
        Some(changed) => json!({ "ok": true, "changed": changed }),
        None => unknown(name),
    })
}

/// The answer naming a schedule that is not there (nothing was written).
pub(super) fn unknown(name: &str) -> Value {
    json!({ "ok": false, "error": format!("no schedule named '{name}' (list-schedules shows them)") })
}

fn spec_and_timing(row: &ScheduleRow) -> Option<(ScheduleSpec, Timing)> {
    let spec: ScheduleSpec = serde_json::from_value(row.spec.clone()).ok()?;
    let timing = spec.timing().ok()?;
    Some((spec, timing))
}

fn timing_of(row: &ScheduleRow) -> Option<Timing> {
    spec_and_timing(row).map(|(_, timing)| timing)
}

/// A schedule as the verbs and the console show it: its spec, its state, and its
/// next [`UPCOMING`] ticks (none while paused).
pub(super) fn view(row: &ScheduleRow, timing: Option<&Timing>) -> Value {
    let mut schedule = match &row.spec {
        Value::Object(fields) => Value::Object(fields.clone()),
        _ => json!({}),
    };
    let at = |t: &Option<DateTime<Utc>>| t.map(|t| Value::from(t.to_rfc3339()));
    schedule["name"] = json!(row.name);
    schedule["paused"] = json!(row.paused);
    schedule["pausedReason"] = json!(row.paused_reason);
    schedule["nextFireAt"] = json!(at(&row.next_fire_at));
    schedule["lastTickAt"] = json!(at(&row.last_tick_at));
    schedule["lastFiredAt"] = json!(at(&row.last_fired_at));
    schedule["lastError"] = json!(row.last_error);
    schedule["revision"] = json!(row.revision);
    schedule["createdAt"] = json!(row.created_at.to_rfc3339());
    schedule["updatedAt"] = json!(row.updated_at.to_rfc3339());
    let spec: Option<ScheduleSpec> = serde_json::from_value(row.spec.clone()).ok();
    let upcoming: Vec<String> = match (row.paused, row.next_fire_at, timing, spec) {
        (false, Some(next), Some(timing), Some(spec)) => std::iter::once(next)
            .chain(timing.upcoming(next, UPCOMING - 1))
            .filter(|tick| spec.in_range(*tick))
            .map(|tick| tick.to_rfc3339())
            .collect(),
        _ => Vec::new(),
    };
    schedule["nextFireTimes"] = json!(upcoming);
    schedule
}
