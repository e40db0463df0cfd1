//! `trigger-schedule` (one job of a schedule now) and `backfill-schedule` (a job per
//! tick of a past range), scope `schedules:write`. Both go through the schedule's
//! own path ([`crate::schedules::Scheduler`]): its stored workflow resolved and
//! checked, its concurrency key under any overlap policy but `allow`, `scheduleName`
//! and `scheduledFor` on every job.

use std::sync::Arc;

use registry_stub::{ActionError, ActionRequest};
use serde_json::{Value, json};
use uuid::Uuid;

use super::schedules::{instant, unknown};
use super::submit::submit_error;
use super::{JobsState, store_error};
use crate::schedules::firing::ScheduleJobsError;

/// `trigger-schedule`.
pub async fn trigger(state: Arc<JobsState>, request: ActionRequest) -> Result<Value, ActionError> {
    let name = request.str("name");
    let job_id = match request.str("jobId") {
        "" => None,
        // The request rule already checked it is a uuid.
        id => Some(Uuid::parse_str(id).map_err(|e| ActionError::invalid(format!("jobId: {e}")))?),
    };
    match state.scheduler.trigger(name, job_id).await {
        Ok((job_id, at, inserted)) => Ok(json!({
            "ok": true,
            "jobId": job_id.to_string(),
            "status": inserted.status.as_str(),
            "created": inserted.created,
            "scheduledFor": at.to_rfc3339(),
        })),
        Err(refused) => refusal(&state, name, refused),
    }
}

/// `backfill-schedule`: the ticks in `[from, to)`; `to` may not be in the future
/// (the schedule fires those itself).
pub async fn backfill(state: Arc<JobsState>, request: ActionRequest) -> Result<Value, ActionError> {
    let name = request.str("name");
    let (Some(from), Some(to)) = (instant(&request, "from")?, instant(&request, "to")?) else {
        return Err(ActionError::invalid("from: give from and to (RFC 3339)"));
    };
    if to <= from {
        return Err(ActionError::invalid("to: must be after from"));
    }
    let (now, _) = state.store.schedule_clock().await.map_err(store_error)?;
    if to > now {
        return Err(ActionError::invalid(format!(
            "to: {} is in the future; backfill fills past ticks (the schedule fires the rest)",
            to.to_rfc3339()
        )));
    }
    match state.scheduler.backfill(name, from, to).await {
        Ok(ticks) => {
            let made = ticks.iter().filter(|(_, _, created)| *created).count();
            let listed: Vec<Value> = ticks
                .iter()
                .map(|(tick, job_id, created)| {
                    json!({ "scheduledFor": tick.to_rfc3339(), "jobId": job_id.to_string(), "created": created })
                })
                .collect();
            Ok(json!({
                "ok": true,
                "made": made,
                "already": ticks.len() - made,
                "ticks": listed,
            }))
        }
        Err(refused) => refusal(&state, name, refused),
    }
}

/// The answer to a trigger or backfill that made nothing.
fn refusal(
    state: &JobsState,
    name: &str,
    refused: ScheduleJobsError,
) -> Result<Value, ActionError> {
    match refused {
        ScheduleJobsError::Unknown(_) => Ok(unknown(name)),
        ScheduleJobsError::Submit(e) => Err(submit_error(&state.submitter, e)),
        ScheduleJobsError::Store(e) => Err(store_error(e)),
        too_many @ ScheduleJobsError::TooManyTicks(_) => {
            Err(ActionError::invalid(too_many.to_string()))
        }
        unreadable @ ScheduleJobsError::Unreadable(..) => {
            Err(ActionError::invalid(format!("name: {unreadable}")))
        }
    }
}
