//! What a reviewer sees. A call admitted by the `jobs:review` scope alone (the token
//! has neither `jobs:read` nor `*`) answers and rejects parked steps, reads the review
//! inbox, and reads a parked job trimmed to what the step's `reviewerSees` shows (the
//! node's `[jobs].reviewer_sees` when the step says nothing; see
//! `workflow::ReviewerSees`):
//!
//! - `get-job` (marked `reviewer: true`): a job WAITING on an external step gives `jobId`, `workflowName`,
//!   `status`, `outstandingStep`, `pendingRequest` (what the step asks), `createdAt`,
//!   `updatedAt`, `waitUntil` and `reviewerSees` (what this view holds), then `input`,
//!   `checkpoints` (the earlier steps' responses) and `metadata` only as
//!   `reviewerSees` lists them; any other job only its `jobId`, `workflowName` and
//!   `status`. (The request is what the step's rules build: a workflow whose rules
//!   copy the input into it shows the input there.) Never its events, steps, children, error, result or snapshot.
//! - `list-jobs`: WAITING jobs only (another `status` is refused, and so is a filter
//!   a trimmed row would not show: `metadata`, `parentJobId`, `scheduleName`,
//!   `priority`), each as `jobId`, `workflowName`, `status`, `outstandingStep`,
//!   `createdAt`, `updatedAt`.
//! - `get-form` of a job's step only (of a stored workflow's input, `workflowName`,
//!   is `jobs:read`'s).
//! - `complete-step`, `reject-step` and `get-form` answer as they do for anyone: their
//!   answers hold nothing of the job but its status and the reviewer's own answer.
//!
//! The job's event stream (`GET /v1/jobs/{id}/events`) stays `jobs:read`'s: its events
//! carry responses and results.

use registry_stub::{ActionError, ActionRequest, Code};
use serde_json::{Map, Value, json};
use workflow::{Completion, ReviewerSees};

use super::{JobsState, REVIEW_SCOPE, store_error};

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

/// A job's row (snake_case columns) as a reviewer reads it, camelCase; `reviewer:
/// true` marks the view. A job WAITING on an external step (any of those it waits
/// on) shows what that step's `reviewerSees` lists; any other only its id, workflow
/// and status (so does a job whose snapshot has no digest yet, written before V21:
/// it fails closed).
pub async fn job_view(state: &JobsState, row: &Value) -> Result<Value, ActionError> {
    let waiting_on: Vec<&str> = match row["status"].as_str() {
        Some("WAITING") => row["outstanding_step"]
            .as_str()
            .into_iter()
            .chain(
                row["outstanding_steps"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str),
            )
            .collect(),
        _ => Vec::new(),
    };
    let parked = match waiting_on.is_empty() {
        true => None,
        false => external_step(state, row, &waiting_on).await?,
    };
    let Some((step, sees)) = parked else {
        let mut view = super::camel_case_keys(pick(row, &["job_id", "workflow_name", "status"]));
        view["reviewer"] = json!(true);
        return Ok(view);
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
    // The step a reviewer answers (the first wait may be a sleep or an event).
    view["outstandingStep"] = json!(step);
    view["reviewer"] = json!(true);
    view["reviewerSees"] = json!(sees.names());
    Ok(view)
}

/// The first of `steps` a reviewer answers (an external step) and what its reviewer is
/// shown: the step's `reviewerSees`, or the node's default. `None` when none is
/// external (an event, a sleep, a child) or the row names no snapshot digest; a
/// database that cannot be read answers `unavailable`.
async fn external_step(
    state: &JobsState,
    row: &Value,
    steps: &[&str],
) -> Result<Option<(String, ReviewerSees)>, ActionError> {
    let Some(digest) = row["definition_digest"].as_str() else {
        return Ok(None);
    };
    let cache = state.submitter.compiled();
    let compiled = match cache.get_by_digest(digest) {
        Some(compiled) => compiled,
        None => {
            let Some(definition) = state.store.snapshot(digest).await.map_err(store_error)? else {
                return Ok(None);
            };
            match cache.get_or_compile_off_thread(&definition).await {
                Ok(compiled) => compiled.workflow,
                Err(_) => return Ok(None),
            }
        }
    };
    Ok(steps.iter().find_map(|name| {
        let step = compiled.step(name)?;
        (step.completion == Completion::External).then(|| {
            (
                step.name.clone(),
                step.reviewer_sees.unwrap_or(state.reviewer_sees),
            )
        })
    }))
}

/// `row` with only `columns` (those it has).
fn pick(row: &Value, columns: &[&str]) -> Value {
    let picked: Map<String, Value> = columns
        .iter()
        .filter_map(|column| Some(((*column).to_owned(), row.get(*column)?.clone())))
        .collect();
    Value::Object(picked)
}

/// The filters a reviewer may list by; the others would tell apart what the trimmed
/// rows leave out (metadata values, parents, schedules, priorities).
const REVIEWER_FILTERS: [&str; 10] = [
    "status",
    "workflowName",
    "outstandingStep",
    "createdBefore",
    "createdAfter",
    "jobIdPrefix",
    "oldestFirst",
    "limit",
    "offset",
    "after",
];

/// Refuses what a reviewer may not list: jobs that are not WAITING, or a filter
/// outside [`REVIEWER_FILTERS`].
pub fn check_listing(request: &ActionRequest) -> Result<(), ActionError> {
    if let Some(field) = request.json.as_object().and_then(|body| {
        body.keys()
            .find(|key| !REVIEWER_FILTERS.contains(&key.as_str()))
    }) {
        return Err(ActionError::new(
            Code::PermissionDenied,
            format!(
                "{field}: a reviewer's token (jobs:review) cannot filter by it; that needs jobs:read"
            ),
        ));
    }
    let status = request.str("status");
    if !(status.is_empty() || status == "WAITING") {
        return Err(ActionError::new(
            Code::PermissionDenied,
            format!(
                "status: a reviewer's token (jobs:review) lists only WAITING jobs, not {status}; reading other jobs needs jobs:read"
            ),
        ));
    }
    Ok(())
}

/// A list row as a reviewer sees it.
pub fn listed_view(row: &Value) -> Value {
    pick(row, &LISTED_VIEW)
}

/// Refuses a reviewer's `get-form` of a stored workflow's input (not a parked step's
/// answer).
pub fn check_form(request: &ActionRequest) -> Result<(), ActionError> {
    if is_reviewer(request) && !request.str("workflowName").is_empty() {
        return Err(ActionError::new(
            Code::PermissionDenied,
            "workflowName: a reviewer's token (jobs:review) reads the form of a parked job's step (jobId and stepName); a workflow's input form needs jobs:read",
        ));
    }
    Ok(())
}
