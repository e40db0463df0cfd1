//! `cancel-jobs {jobIds | filter + limit, reason}`: `cancel-job` for many jobs (see
//! [`super::many_jobs`] for the answer). A filter selects live jobs (QUEUED, WAITING,
//! RUNNING; `filter.status` narrows to one) not already asked to stop, oldest first.
//! Each job is cancelled as `cancel-job` would: QUEUED and WAITING ones at once,
//! RUNNING ones by their workers. `changed` counts both; `notChanged` lists jobs found
//! finished or cancelled before (`ALREADY_FINISHED`, `ALREADY_CANCELLED`), unknown ids
//! (`NOT_FOUND`) and rows a stuck transaction held (`BUSY`).

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
    let (job_ids, more) = match named_jobs(&request, "cancel-jobs", &LIVE, &LIVE)? {
        NamedJobs::Ids(ids) => (ids, false),
        NamedJobs::Filter(selection) => {
            let selected = state
                .store
                .cancellable_jobs(&selection)
                .await
                .map_err(store_error)?;
            (selected.job_ids, selected.more)
        }
    };
    let acted = state
        .store
        .cancel_jobs(&job_ids, request.str("reason"))
        .await;
    answer("cancel-jobs", acted, more, |outcome: &CancelOutcome| {
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
    })
}
