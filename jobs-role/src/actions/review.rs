//! What a reviewer sees. A call admitted by the `jobs:review` scope alone (the token
//! has neither `jobs:read` nor `*`) answers and rejects parked steps, reads the review
//! inbox, and reads a parked job trimmed to what the step's `reviewerSees` shows (the
//! node's `[jobs].reviewer_sees` when the step says nothing; see
//! `workflow::ReviewerSees`):
//!
//! - `get-job`: a job WAITING on an external step gives `jobId`, `workflowName`,
//!   `status`, `outstandingStep`, `pendingRequest` (what the step asks), `createdAt`,
//!   `updatedAt`, `waitUntil` and `reviewerSees` (what this view holds), then `input`,
//!   `checkpoints` (the earlier steps' responses) and `metadata` only as
//!   `reviewerSees` lists them; any other job only its `jobId`, `workflowName` and
//!   `status`. Never its events, steps, children, error, result or snapshot.
//! - `list-jobs`: WAITING jobs only (another `status`, or a `metadata` filter, is
//!   refused), each as `jobId`, `workflowName`, `status`, `outstandingStep`,
//!   `createdAt`, `updatedAt`.
//! - `complete-step`, `reject-step` and `get-form` answer as they do for anyone: their
//!   answers hold nothing of the job but its status and the reviewer's own answer.
//!
//! The job's event stream (`GET /v1/jobs/{id}/events`) stays `jobs:read`'s: its events
//! carry responses and results.

use registry_stub::{ActionError, ActionRequest, Code};
use serde_json::{Map, Value, json};
use workflow::{Completion, ReviewerSees};

use super::{JobsState, REVIEW_SCOPE};

/// True when the call was admitted by `jobs:review` alone.
pub fn is_reviewer(request: &ActionRequest) -> bool {
    request.granted.as_deref() == Some(REVIEW_SCOPE)
}

/// The columns every reviewer's view of a parked job holds.
const PARKED_VIEW: [&str; 8] = [
    "job_id",
    "workflow_name",
    "status",
    "outstanding_step",
    "pending_request",
    "created_at",
    "updated_at",
    "wait_until",
];

/// The columns of a list row a reviewer sees.
const LISTED_VIEW: [&str; 6] = [
    "jobId",
    "workflowName",
    "status",
    "outstandingStep",
    "createdAt",
    "updatedAt",
];

/// A job's row (snake_case columns) as a reviewer reads it, camelCase.
pub async fn job_view(state: &JobsState, row: &Value) -> Value {
    let parked_on = match (row["status"].as_str(), row["outstanding_step"].as_str()) {
        (Some("WAITING"), Some(step)) => Some(step),
        _ => None,
    };
    let sees = match parked_on {
        Some(step) => step_sees(state, row, step).await,
        None => None,
    };
    let Some(sees) = sees else {
        return super::camel_case_keys(pick(row, &["job_id", "workflow_name", "status"]));
    };
    let mut columns: Vec<&str> = PARKED_VIEW.to_vec();
    for (shown, column) in [
        (sees.input, "input"),
        (sees.responses, "checkpoints"),
        (sees.metadata, "metadata"),
    ] {
        if shown {
            columns.push(column);
        }
    }
    let mut view = super::camel_case_keys(pick(row, &columns));
    view["reviewerSees"] = json!(sees.names());
    view
}

/// What a reviewer of a job parked on `step` is shown: the step's `reviewerSees`, or
/// the node's default; `None` when the step is not one a reviewer answers (an event,
/// a sleep, a child) or the job's snapshot cannot be read (nothing but the status is
/// shown then).
async fn step_sees(state: &JobsState, row: &Value, step: &str) -> Option<ReviewerSees> {
    let digest = row["definition_digest"].as_str()?;
    let cache = state.submitter.compiled();
    let compiled = match cache.get_by_digest(digest) {
        Some(compiled) => compiled,
        None => {
            let definition = state.store.snapshot(digest).await.ok()??;
            cache
                .get_or_compile_off_thread(&definition)
                .await
                .ok()?
                .workflow
        }
    };
    let step = compiled.step(step)?;
    (step.completion == Completion::External)
        .then(|| step.reviewer_sees.unwrap_or(state.reviewer_sees))
}

/// `row` with only `columns` (those it has).
fn pick(row: &Value, columns: &[&str]) -> Value {
    let picked: Map<String, Value> = columns
        .iter()
        .filter_map(|column| Some(((*column).to_owned(), row.get(*column)?.clone())))
        .collect();
    Value::Object(picked)
}

/// Refuses what a reviewer may not list: jobs that are not WAITING, or a metadata
/// filter (which would tell metadata values apart).
pub fn check_listing(request: &ActionRequest) -> Result<(), ActionError> {
    let status = request.str("status");
    if !(status.is_empty() || status == "WAITING") {
        return Err(ActionError::new(
            Code::PermissionDenied,
            format!(
                "status: a reviewer's token (jobs:review) lists only WAITING jobs, not {status}; reading other jobs needs jobs:read"
            ),
        ));
    }
    if request.get("metadata").is_some() {
        return Err(ActionError::new(
            Code::PermissionDenied,
            "metadata: a reviewer's token (jobs:review) cannot filter by metadata; that needs jobs:read",
        ));
    }
    Ok(())
}

/// A list row as a reviewer sees it.
pub fn listed_view(row: &Value) -> Value {
    pick(row, &LISTED_VIEW)
}
