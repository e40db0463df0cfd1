//! `cancel-jobs {jobIds | filter + limit, reason}`: `cancel-job` for many jobs (see
//! [`super::many_jobs`] for the answer). A filter selects live jobs (QUEUED, WAITING,
//! RUNNING; `filter.status` narrows to one) not already asked to stop, oldest first.
//! Each job is cancelled as `cancel-job` would: QUEUED and WAITING ones at once,
//! RUNNING ones by their workers. `changed` counts both; `notChanged` lists jobs found
//! finished or cancelled before (`ALREADY_FINISHED`, `ALREADY_CANCELLED`), jobs that
//! left the filter's statuses before their turn (`NO_LONGER_MATCHES`: a QUEUED job
//! claimed meanwhile is not stopped by a QUEUED-only filter), unknown ids (`NOT_FOUND`)
//! and rows a long-running transaction held (`BUSY`). Sent again, it changes nothing
//! twice.

use std::sync::Arc;

use registry_stub::{ActionError, ActionRequest};
use serde_json::Value;

use super::cancel_job::told;
use super::many_jobs::{NamedJobs, NotChanged, answer, named_jobs};
use super::{JobsState, store_error};
use crate::status::JobStatus;
use crate::store::CancelOutcome;

const LIVE: [JobStatus; 3] = [JobStatus::Queued, JobStatus::Waiting, JobStatus::Running];

/// Handles one call.
pub async fn handle(state: Arc<JobsState>, request: ActionRequest) -> Result<Value, ActionError> {
    let named = named_jobs(&request, "cancel-jobs", &LIVE, &LIVE)?;
    let (job_ids, more) = match &named {
        NamedJobs::Ids(ids) => (ids.clone(), false),
        NamedJobs::Filter(selection) => {
            let selected = state
                .store
                .cancellable_jobs(selection)
                .await
                .map_err(store_error)?;
            (selected.job_ids, selected.more)
        }
    };
    let acted = state
        .store
        .cancel_jobs(&job_ids, request.str("reason"), named.recheck())
        .await;
    // The live descendants of the jobs it stopped end with them.
    let stopped: Vec<uuid::Uuid> = acted
        .outcomes
        .iter()
        .filter(|(_, outcome)| matches!(outcome, crate::store::ByJob::Decided(d) if told(d).0))
        .map(|(job_id, _)| *job_id)
        .collect();
    for parent in state
        .store
        .parents_among(&stopped)
        .await
        .map_err(store_error)?
    {
        state
            .store
            .cancel_descendants(parent, request.str("reason"))
            .await
            .map_err(store_error)?;
    }
    let on_resend =
        "Sending the same call again is safe: jobs already cancelled answer ALREADY_CANCELLED";
    answer(
        "cancel-jobs",
        acted,
        more,
        on_resend,
        |outcome: &CancelOutcome| {
            if outcome.changed() {
                return None;
            }
            let (_, name, status) = told(outcome);
            let error = match outcome {
                CancelOutcome::AlreadyFinished { status } => {
                    format!("the job had already finished ({status})")
                }
                _ => "the job was cancelled, or asked to cancel, before".to_owned(),
            };
            Some(NotChanged {
                outcome: name,
                status: Some(status),
                error,
            })
        },
    )
}
