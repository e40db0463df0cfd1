//! `retry-jobs {jobIds | filter + limit, maxAttempts?, reason?, workflow?}`:
//! `retry-job` for many jobs, each keeping its checkpoints (see [`super::many_jobs`]
//! for the answer); `workflow: "current"` moves each onto the workflow stored under its
//! name now, those whose results do not fit answered `INCOMPATIBLE` with why (see
//! [`super::current_workflow`]).
//! Without `filter.status` a filter selects DEAD and FAILED jobs: a CANCELLED job was
//! stopped on purpose, so it is re-run only when the filter names CANCELLED. Jobs
//! FAILED at submission (never claimed) are never selected. `fromStep` is not offered:
//! a step belongs to one workflow's snapshot, so re-running from a step is
//! `retry-job`'s, one job at a time. `notChanged` lists jobs not in a state a retry
//! takes (`WRONG_STATE`, with their status), jobs that left the filter's statuses
//! before their turn (`NO_LONGER_MATCHES`), unknown ids (`NOT_FOUND`) and rows a
//! long-running transaction held (`BUSY`).
//!
//! A retry is an act: a job retried that fails again matches the same filter again,
//! oldest first. To work through a backlog once, calling again while `more`, give
//! `filter.finishedBefore` the time of the first call: jobs that finish again after it
//! are left out.

use std::sync::Arc;

use registry_stub::{ActionError, ActionRequest};
use serde_json::Value;
use uuid::Uuid;

use super::many_jobs::{NamedJobs, NotChanged, answer, named_jobs};
use super::retry_job::{new_budget, outcome_name, refusal};
use super::{JobsState, current_workflow, store_error};
use crate::status::JobStatus;
use crate::store::{ByJob, Retry, RetryOutcome};

/// What sending a call again after an interruption does.
const RESEND: &str = "Sending the same call again retries the jobs not retried yet, and any retried job that has finished again meanwhile; to work through a backlog once, give filter.finishedBefore the time your first call was sent";

const FINISHED: [JobStatus; 3] = [JobStatus::Dead, JobStatus::Failed, JobStatus::Cancelled];
const BY_DEFAULT: [JobStatus; 2] = [JobStatus::Dead, JobStatus::Failed];

/// Handles one call.
pub async fn handle(state: Arc<JobsState>, request: ActionRequest) -> Result<Value, ActionError> {
    let named = named_jobs(&request, "retry-jobs", &FINISHED, &BY_DEFAULT)?;
    let (job_ids, more) = match &named {
        NamedJobs::Ids(ids) => (ids.clone(), false),
        NamedJobs::Filter(selection) => {
            let selected = state
                .store
                .retryable_jobs(selection)
                .await
                .map_err(store_error)?;
            (selected.job_ids, selected.more)
        }
    };
    let plan = match current_workflow::wants_current(&request) {
        true => Some(current_workflow::plan(&state, &job_ids, None).await?),
        false => None,
    };
    // Jobs whose results do not fit their current workflow are answered without
    // acting on them.
    let misfits: Vec<(Uuid, RetryOutcome)> = plan
        .as_ref()
        .map(|plan| {
            plan.misfits
                .iter()
                .map(|(job_id, status, findings)| {
                    let status = *status;
                    let findings = findings.clone();
                    (*job_id, RetryOutcome::Incompatible { status, findings })
                })
                .collect()
        })
        .unwrap_or_default();
    let acting: Vec<Uuid> = job_ids
        .iter()
        .filter(|id| !misfits.iter().any(|(misfit, _)| misfit == *id))
        .copied()
        .collect();
    let retry = Retry {
        from_step: None,
        max_attempts: new_budget(&request),
        reason: Some(request.str("reason")).filter(|r| !r.is_empty()),
        moves: plan.as_ref().map(|plan| &plan.moves),
    };
    let mut acted = state
        .store
        .retry_jobs(&acting, &retry, named.recheck())
        .await;
    acted.outcomes.extend(
        misfits
            .into_iter()
            .map(|(job_id, outcome)| (job_id, ByJob::Decided(outcome))),
    );
    // One list in job-id order, as the act answers its own.
    acted.outcomes.sort_by_key(|(job_id, _)| *job_id);
    answer(
        "retry-jobs",
        acted,
        more,
        RESEND,
        |outcome: &RetryOutcome| {
            if matches!(outcome, RetryOutcome::Retried { .. }) {
                return None;
            }
            let (status, error) = refusal(outcome);
            Some(NotChanged {
                outcome: outcome_name(outcome),
                status: Some(status),
                error,
            })
        },
    )
}
