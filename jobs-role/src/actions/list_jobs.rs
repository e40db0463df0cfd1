//! `list-jobs {status?, workflowName?, createdBefore?, createdAfter?, outstandingStep?,
//! priority?, jobIdPrefix?, scheduleName?, metadata?, oldestFirst?, limit?, offset?}` → summaries newest first
//! (oldest first with `oldestFirst`, as a review inbox reads them).
//! `jobIdPrefix` selects the ids that begin with those hex digits (dashes ignored),
//! read as a range of the primary key, so it stays cheap on any number of rows.
//! A reviewer (`jobs:review` alone) lists WAITING jobs only, trimmed (see
//! [`super::review`]). A limit of 0 selects the default of 50; anything above the ceiling of 500 is
//! clamped rather than refused, because the ceiling bounds the answer, not the request.
//!
//! Paging: `offset` (at most 10,000: an offset scan reads every row it skips), or
//! keyset paging with `after` (`{createdAt, jobId}`, the `next` of a full page's
//! answer), which costs the same on any page.

use std::sync::Arc;

use registry_stub::{ActionError, ActionRequest};
use serde_json::{Value, json};
use uuid::Uuid;

use super::{JobsState, review, store_error};
use crate::status::JobStatus;
use crate::store::JobFilter;

/// The limit when none is given.
pub const DEFAULT_LIMIT: i64 = 50;
/// The most summaries one answer holds.
pub const MAX_LIMIT: i64 = 500;

/// Handles one call.
pub async fn handle(state: Arc<JobsState>, request: ActionRequest) -> Result<Value, ActionError> {
    let reviewer = review::is_reviewer(&request);
    if reviewer {
        review::check_listing(&request)?;
    }
    let status = match request.str("status") {
        // A reviewer's inbox: WAITING jobs only.
        "" if reviewer => Some(JobStatus::Waiting),
        "" => None,
        name => Some(
            name.parse::<JobStatus>()
                .map_err(|e| ActionError::invalid(format!("status: {e}")))?,
        ),
    };
    let limit = match request.get("limit").and_then(Value::as_i64).unwrap_or(0) {
        0 => DEFAULT_LIMIT,
        n => n.min(MAX_LIMIT),
    };
    let offset = request.get("offset").and_then(Value::as_i64).unwrap_or(0);
    let given = |field: &str| Some(request.str(field).to_owned()).filter(|v| !v.is_empty());
    let filter = JobFilter {
        status,
        workflow_name: given("workflowName"),
        limit,
        offset,
        // The request parser has checked both are RFC 3339 timestamps.
        created_before: given("createdBefore"),
        created_after: given("createdAfter"),
        outstanding_step: given("outstandingStep"),
        schedule_name: given("scheduleName"),
        // Checked as a submission's is: a filter for keys no job can hold says so.
        metadata: crate::submit::metadata_of(request.get("metadata"))
            .map_err(ActionError::invalid)?,
        // The request rule has checked it is 0..=9.
        priority: request
            .get("priority")
            .and_then(Value::as_i64)
            .and_then(|p| i16::try_from(p).ok()),
        job_ids_between: match request.str("jobIdPrefix") {
            "" => None,
            prefix => Some(JobFilter::id_prefix_range(prefix).ok_or_else(|| {
                ActionError::invalid(format!(
                    "jobIdPrefix: '{prefix}' is not the beginning of a job id: give 1 to 32 hex digits (dashes allowed)"
                ))
            })?),
        },
        oldest_first: request.get("oldestFirst").and_then(Value::as_bool) == Some(true),
        parent_job_id: match request.str("parentJobId") {
            "" => None,
            id => Some(
                Uuid::parse_str(id)
                    .map_err(|e| ActionError::invalid(format!("parentJobId: {e}")))?,
            ),
        },
        after: request.message_json("after").and_then(|after| {
            // The rules checked both: a timestamp, and a UUID.
            let created_at = after["createdAt"].as_str()?.to_owned();
            let job_id = Uuid::parse_str(after["jobId"].as_str()?).ok()?;
            Some((created_at, job_id))
        }),
    };
    let mut jobs = state.store.list_jobs(&filter).await.map_err(store_error)?;
    if reviewer {
        jobs = jobs.iter().map(review::listed_view).collect();
    }
    // A full page may have a next one: where it starts.
    let next = jobs
        .last()
        .filter(|_| jobs.len() as i64 == limit)
        .map(|last| json!({ "createdAt": last["createdAt"], "jobId": last["jobId"] }));
    let mut answer = json!({ "ok": true, "jobs": jobs, "limit": limit, "offset": offset });
    if let Some(next) = next {
        answer["next"] = next;
    }
    Ok(answer)
}
