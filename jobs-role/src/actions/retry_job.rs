//! `retry-job {jobId, fromStep?, maxAttempts?, reason?, workflow?}`: an operator
//! re-queues a finished job (see [`crate::store::Retry`]) on its own workflow
//! snapshot, or with `workflow: "current"` on the workflow stored under its name now
//! (see [`super::current_workflow`]). `fromStep` must name a step of the workflow it
//! will run (400 otherwise, listing its steps).
//!
//! | answer                                                       | meaning                          |
//! |--------------------------------------------------------------|----------------------------------|
//! | `{ok: true, outcome: "RETRIED", status: "QUEUED", from, checkpointsKept, snapshot, snapshotBefore?}` | queued again; `from` the status it left; `checkpointsKept` the checkpoints kept (all but those of `fromStep` and the steps after it); `snapshot` the digest it runs, `snapshotBefore` the one it ran when moved |
//! | `{ok: false, outcome: "WRONG_STATE", status, error}`           | live, COMPLETED without `fromStep`, or FAILED at submission |
//! | `{ok: false, outcome: "INCOMPATIBLE", status, error, findings}` | `workflow: "current"`: what it keeps does not fit the stored workflow |
//! | `{ok: false, outcome: "CHANGED", status, error}`               | `workflow: "current"`: it changed while checked; send again |
//! | `{ok: false, error: "no workflow run <id>"}`                   | no such job                      |
//!
//! A job whose row another transaction holds for all of [`crate::store::LOCK_WAIT`]
//! (a stuck write) answers `unavailable`, with nothing changed.

use std::sync::Arc;

use registry_stub::{ActionError, ActionRequest};
use serde_json::{Value, json};
use uuid::Uuid;

use super::many_jobs::busy;
use super::{JobsState, current_workflow, store_error};
use crate::status::JobStatus;
use crate::store::{ByJob, RerunFrom, Retry, RetryOutcome};

/// Handles one call.
pub async fn handle(state: Arc<JobsState>, request: ActionRequest) -> Result<Value, ActionError> {
    let job_id = Uuid::parse_str(request.str("jobId"))
        .map_err(|e| ActionError::invalid(format!("jobId: {e}")))?;
    let not_found = || json!({ "ok": false, "error": format!("no workflow run {job_id}") });
    let step = Some(request.str("fromStep")).filter(|s| !s.is_empty());
    let plan = match current_workflow::wants_current(&request) {
        true => Some(current_workflow::plan(&state, &[job_id], step).await?),
        false => None,
    };
    if let Some((_, status, findings)) = plan.as_ref().and_then(|p| p.misfits.first()) {
        return Ok(json!({
            "ok": false, "outcome": "INCOMPATIBLE", "status": status.as_str(),
            "error": format!(
                "{} result(s) the job keeps do not fit its workflow as stored now, so it was not moved (nothing changed): see findings",
                findings.len()
            ),
            "findings": findings,
        }));
    }
    let from_step = match (step, &plan) {
        (None, _) => None,
        // On the current workflow: its steps (a job the plan left out, in a state no
        // retry takes or not there, is answered by the act).
        (Some(step), Some(plan)) => {
            let (dropped, also_dropped) = plan.dropped.clone().unwrap_or_default();
            Some(RerunFrom {
                step,
                dropped,
                also_dropped,
            })
        }
        (Some(step), None) => {
            let Some(job) = state.store.get_job(job_id).await.map_err(store_error)? else {
                return Ok(not_found());
            };
            let (compiled, at) = super::job_step(&state, &job, "fromStep", step).await?;
            // The step and every step that runs after it, directly or through others.
            let dropped = compiled
                .steps
                .iter()
                .filter(|s| s.index == at || s.ancestors.contains(&at))
                .map(|s| (s.name.clone(), s.index))
                .collect();
            Some(RerunFrom {
                step,
                dropped,
                also_dropped: Vec::new(),
            })
        }
    };
    let retry = Retry {
        from_step,
        max_attempts: new_budget(&request),
        reason: Some(request.str("reason")).filter(|r| !r.is_empty()),
        moves: plan.as_ref().map(|plan| &plan.moves),
    };
    let outcome = state
        .store
        .retry_job(job_id, &retry)
        .await
        .map_err(store_error)?;
    Ok(match outcome {
        ByJob::Decided(RetryOutcome::Retried {
            was,
            checkpoints_kept,
            snapshot,
            snapshot_before,
        }) => {
            let mut answer = json!({
                "ok": true, "outcome": "RETRIED", "status": JobStatus::Queued.as_str(), "from": was.as_str(),
                "checkpointsKept": checkpoints_kept, "snapshot": snapshot,
            });
            if let Some(before) = snapshot_before {
                answer["snapshotBefore"] = json!(before);
            }
            answer
        }
        ByJob::Decided(refused) => {
            let (status, error) = refusal(&refused);
            json!({ "ok": false, "outcome": outcome_name(&refused), "status": status.as_str(), "error": error })
        }
        ByJob::NotFound => not_found(),
        // NoLongerMatches only answers a filter's selection, never a job named by id.
        ByJob::Busy | ByJob::NoLongerMatches { .. } => {
            return Err(ActionError::unavailable(busy(job_id).error));
        }
    })
}

/// The retry budget a request asks for (`maxAttempts`; 0 or absent: each job keeps
/// its own).
pub fn new_budget(request: &ActionRequest) -> Option<i32> {
    request
        .get("maxAttempts")
        .and_then(Value::as_i64)
        .and_then(|n| i32::try_from(n).ok())
        .filter(|n| *n > 0)
}

/// The job's status and why, for a refused retry (one carried out: QUEUED, and no
/// reason).
pub fn refusal(outcome: &RetryOutcome) -> (JobStatus, String) {
    match outcome {
        RetryOutcome::Retried { .. } => (JobStatus::Queued, String::new()),
        RetryOutcome::NeverRan => (
            JobStatus::Failed,
            "this job failed at submission and never ran (see its error): submit it again with a new jobId".to_owned(),
        ),
        RetryOutcome::WrongState { status } if *status == JobStatus::Completed => (
            *status,
            "a COMPLETED job is re-run only from a named step: give fromStep".to_owned(),
        ),
        RetryOutcome::WrongState { status } => (
            *status,
            format!("only DEAD, FAILED or CANCELLED jobs are retried; this one is {status}"),
        ),
        RetryOutcome::Incompatible { status, findings } => {
            (*status, current_workflow::misfit_error(findings))
        }
        RetryOutcome::ChangedWhileChecked { status } => (
            *status,
            "the job ran again or moved onto another snapshot while its results were checked against its current workflow; nothing changed: send the retry again".to_owned(),
        ),
    }
}

/// The answer's `outcome` for a refused retry.
pub fn outcome_name(outcome: &RetryOutcome) -> &'static str {
    match outcome {
        RetryOutcome::Retried { .. } => "RETRIED",
        RetryOutcome::Incompatible { .. } => "INCOMPATIBLE",
        RetryOutcome::ChangedWhileChecked { .. } => "CHANGED",
        RetryOutcome::NeverRan | RetryOutcome::WrongState { .. } => "WRONG_STATE",
    }
}
