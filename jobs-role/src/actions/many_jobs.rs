//! What `cancel-jobs` and `retry-jobs` share: the jobs a call names (`jobIds`, or a
//! `filter` with a `limit`) and the shape of the answer:
//!
//! `{ok: true, changed, changedJobIds, notChanged: [{jobId, outcome, status?, error}], more}`
//!
//! `changed` counts the jobs the act changed; `notChanged` lists every other job the
//! call named or its filter selected, each with why; `more` is true when the filter
//! matched more jobs than `limit` (send the call again for the next ones). Each job is
//! counted once however often it is named. A filter's statuses and `finishedBefore`
//! are checked again under each job's row lock: a job that left them meanwhile is
//! answered `NO_LONGER_MATCHES`.

use registry_stub::{ActionError, ActionRequest};
use serde_json::{Value, json};
use uuid::Uuid;

use super::store_error;
use crate::status::JobStatus;
use crate::store::{ActedOn, ByJob, JobSelection, LOCK_WAIT, Recheck, StoreError};

/// The most jobs a filter may select in one call (the request's rule says so too).
pub const MAX_LIMIT: i64 = 10_000;

/// The jobs a bulk call names.
#[derive(Debug)]
pub enum NamedJobs {
    /// By id (at most 1,000, the request's rule says).
    Ids(Vec<Uuid>),
    /// By filter, oldest first.
    Filter(JobSelection),
}

impl NamedJobs {
    /// What the act checks again under each row lock (nothing for ids).
    pub fn recheck(&self) -> Recheck {
        match self {
            NamedJobs::Ids(_) => Recheck::default(),
            NamedJobs::Filter(selection) => Recheck {
                statuses: selection.statuses.clone(),
                finished_before: selection.finished_before.clone(),
            },
        }
    }
}

/// Reads `jobIds`, or `filter` and `limit`, of a bulk call (the request's rules have
/// checked that exactly one is given, and a limit with a filter). `takes` are the
/// statuses the verb acts on; a filter without a status selects those of `by_default`.
/// `filter.finishedBefore` only for a verb that takes finished jobs.
pub fn named_jobs(
    request: &ActionRequest,
    verb: &str,
    takes: &[JobStatus],
    by_default: &[JobStatus],
) -> Result<NamedJobs, ActionError> {
    if let Some(ids) = request.get("jobIds").and_then(Value::as_array) {
        let ids = ids
            .iter()
            .enumerate()
            .map(|(i, id)| {
                Uuid::parse_str(id.as_str().unwrap_or_default())
                    .map_err(|e| ActionError::invalid(format!("jobIds[{i}]: {e}")))
            })
            .collect::<Result<Vec<Uuid>, ActionError>>()?;
        if !ids.is_empty() {
            return Ok(NamedJobs::Ids(ids));
        }
    }
    let filter = request.message_json("filter").unwrap_or_default();
    let text = |field: &str| {
        filter
            .get(field)
            .and_then(Value::as_str)
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
    };
    let statuses = match text("status") {
        None => by_default.to_vec(),
        Some(name) => {
            let status: JobStatus = name
                .parse()
                .map_err(|e| ActionError::invalid(format!("filter.status: {e}")))?;
            if !takes.contains(&status) {
                let names: Vec<&str> = takes.iter().map(|s| s.as_str()).collect();
                return Err(ActionError::invalid(format!(
                    "filter.status: {verb} takes {} jobs, not {status}",
                    names.join(", ")
                )));
            }
            vec![status]
        }
    };
    let finished_before = text("finishedBefore");
    if finished_before.is_some() && !takes.iter().any(|s| s.is_terminal()) {
        return Err(ActionError::invalid(format!(
            "filter.finishedBefore: {verb} selects live jobs, which have not finished; leave it out"
        )));
    }
    Ok(NamedJobs::Filter(JobSelection {
        statuses,
        workflow_name: text("workflowName"),
        // The request parser has checked both are timestamps; the canonical form
        // writes them in RFC 3339.
        created_before: text("createdBefore"),
        created_after: text("createdAfter"),
        finished_before,
        metadata: crate::submit::metadata_of(filter.get("metadata"))
            .map_err(|e| ActionError::invalid(format!("filter.{e}")))?,
        limit: request
            .get("limit")
            .and_then(Value::as_i64)
            .unwrap_or(0)
            .clamp(1, MAX_LIMIT),
    }))
}

/// How one job that was not changed is told: its outcome's name, its status when
/// known, and why.
pub struct NotChanged {
    /// `ALREADY_FINISHED`, `WRONG_STATE`, ...
    pub outcome: &'static str,
    /// The job's status when the act looked.
    pub status: Option<JobStatus>,
    /// Why, as a sentence.
    pub error: String,
}

/// The answer of a bulk act. `told` says, for each decided outcome, `None` when the
/// job was changed, or why it was not; `on_resend` tells what sending the call again
/// after an interruption does.
pub fn answer<T>(
    verb: &str,
    acted: ActedOn<T>,
    more: bool,
    on_resend: &str,
    told: impl Fn(&T) -> Option<NotChanged>,
) -> Result<Value, ActionError> {
    let mut changed = Vec::new();
    let mut not_changed = Vec::new();
    for (job_id, outcome) in &acted.outcomes {
        let why = match outcome {
            ByJob::Decided(outcome) => match told(outcome) {
                None => {
                    changed.push(job_id.to_string());
                    continue;
                }
                Some(why) => why,
            },
            ByJob::NoLongerMatches { status } => NotChanged {
                outcome: "NO_LONGER_MATCHES",
                status: Some(*status),
                error: format!(
                    "the job (now {status}) no longer matched the filter when its turn came"
                ),
            },
            ByJob::NotFound => NotChanged {
                outcome: "NOT_FOUND",
                status: None,
                error: format!("no workflow run {job_id}"),
            },
            ByJob::Busy => busy(*job_id),
        };
        let mut entry =
            json!({ "jobId": job_id.to_string(), "outcome": why.outcome, "error": why.error });
        if let Some(status) = why.status {
            entry["status"] = json!(status.as_str());
        }
        not_changed.push(entry);
    }
    if let Some(error) = acted.interrupted {
        return Err(interrupted(verb, changed.len(), on_resend, error));
    }
    Ok(json!({
        "ok": true,
        "changed": changed.len(),
        "changedJobIds": changed,
        "notChanged": not_changed,
        "more": more,
    }))
}

/// How a job whose row stayed locked is told.
pub fn busy(job_id: Uuid) -> NotChanged {
    NotChanged {
        outcome: "BUSY",
        status: None,
        error: format!(
            "job {job_id} was held by another transaction for {} s (a long-running transaction); nothing changed: try again",
            LOCK_WAIT.as_secs()
        ),
    }
}

/// The error of an act the database stopped part way.
fn interrupted(verb: &str, changed: usize, on_resend: &str, error: StoreError) -> ActionError {
    let cause = store_error(error);
    let message = format!(
        "{verb} stopped part way after changing {changed} job(s): {}. {on_resend}",
        cause.message
    );
    ActionError::new(cause.code, message)
}
