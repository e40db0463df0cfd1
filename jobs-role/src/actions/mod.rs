//! The jobs verbs on the registry's shared actions route.
//!
//! | verb              | scope           | module            |
//! |-------------------|-----------------|-------------------|
//! | `submit-workflow` | `workflow:run`  | [`submit`]        |
//! | `submit-workflows`| `workflow:run`  | [`submit_many`]   |
//! | `get-job`         | `jobs:read` (or `jobs:review`, trimmed) | [`get_job`]       |
//! | `get-job-items`   | `jobs:read`     | [`get_job_items`] |
//! | `list-jobs`       | `jobs:read` (or `jobs:review`, WAITING jobs, trimmed) | [`list_jobs`]     |
//! | `complete-step`   | `jobs:complete` (or `jobs:review`) | [`complete_step`] |
//! | `reject-step`     | `jobs:complete` (or `jobs:review`) | [`reject_step`]   |
//! | `send-event`      | `jobs:signal`   | [`send_event`]    |
//! | `cancel-job`      | `jobs:operate`  | [`cancel_job`]    |
//! | `retry-job`       | `jobs:operate`  | [`retry_job`]     |
//! | `cancel-jobs`     | `jobs:operate`  | [`cancel_jobs`]   |
//! | `retry-jobs`      | `jobs:operate`  | [`retry_jobs`]    |
//! | `get-form`        | `jobs:read` (or `jobs:review`) | [`get_form`]      |
//! | `get-fleet`       | `jobs:read`     | [`get_fleet`]     |
//! | `list-rejects`    | `jobs:read`     | [`list_rejects`]  |
//! | `redrive-events`  | `jobs:operate`  | [`redrive_events`]|
//! | `pause-workflow`  | `jobs:operate`  | [`pause`]         |
//! | `resume-workflow` | `jobs:operate`  | [`pause`]         |
//!
//! A node without jobs configured still mounts them all; they answer `unavailable`.
//!
//! `jobs:review` is a reviewer's scope: answer and reject parked steps, read the
//! inbox and a parked job's request and form, and nothing a step's `reviewerSees`
//! keeps from them (see [`review`]).

pub mod cancel_job;
pub mod cancel_jobs;
pub mod complete_step;
mod current_workflow;
pub mod get_fleet;
pub mod get_form;
pub mod get_job;
pub mod get_job_items;
mod job_steps;
pub mod list_jobs;
pub mod list_rejects;
pub mod many_jobs;
pub mod pause;
pub mod redrive_events;
pub mod reject_step;
pub mod retry_job;
pub mod retry_jobs;
pub mod review;
pub mod schedule_jobs;
pub mod schedules;
pub mod send_event;
pub mod submit;
pub mod submit_many;

use std::future::Future;
use std::sync::Arc;

use prost_reflect::DescriptorPool;
use registry_stub::registry::surface_message;
use registry_stub::{Action, ActionError, ActionRequest, MountError};
use serde_json::{Map, Value};

use crate::store::{Store, StoreError};
use crate::submit::Submitter;

/// The scope of a reviewer: the verbs a review needs, their answers trimmed to what
/// the parked step's `reviewerSees` shows (see [`review`]).
pub const REVIEW_SCOPE: &str = "jobs:review";

/// The jobs role's surface contract.
pub const VERBS_PROTO: &str = include_str!("../../proto/jobs_verbs.proto");
const VERBS_PROTO_FILE: &str = "protomolt/jobs/verbs/v1/jobs_verbs.proto";

/// What the verbs work with when jobs are configured.
#[derive(Clone)]
pub struct JobsState {
    /// The store.
    pub store: Store,
    /// The submitter.
    pub submitter: Submitter,
    /// The node's watch hub (live event streams, waiting `get-job` calls).
    pub watchers: crate::watch::Watchers,
    /// The latest read of the fleet, shared by `get-fleet` callers.
    pub fleet: get_fleet::FleetSnapshot,
    /// The last hour minute by minute (the metrics loop and the node's steps keep it).
    pub history: Arc<crate::history::History>,
    /// Makes schedules' ticks into jobs (triggers and backfills here; the firing
    /// loop shares it).
    pub scheduler: crate::schedules::Scheduler,
    /// Wakes this node's firing loop (a schedule was put or resumed).
    pub schedule_wake: Arc<tokio::sync::Notify>,
    /// What a reviewer is shown of a job parked on a step without its own
    /// `reviewerSees` (`[jobs].reviewer_sees`).
    pub reviewer_sees: workflow::ReviewerSees,
}

/// The jobs verbs, answering `unavailable` when `state` is `None`.
pub fn actions(state: Option<Arc<JobsState>>) -> Result<Vec<Action>, MountError> {
    let pool =
        workflow::schema::compile_proto_pool(VERBS_PROTO_FILE, VERBS_PROTO).map_err(MountError)?;
    Ok(vec![
        verb(
            &pool,
            &state,
            "submit-workflow",
            "Submit a workflow as a durable asynchronous job (inline, or a stored name).",
            "workflow:run",
            "SubmitWorkflow",
            submit::handle,
        )?,
        verb(
            &pool,
            &state,
            "submit-workflows",
            "Submit up to 1,000 workflows as jobs in one call and one transaction, each answered on its own.",
            "workflow:run",
            "SubmitWorkflows",
            submit_many::handle,
        )?,
        verb(
            &pool,
            &state,
            "get-job",
            "Read one run by id, with every column, its checkpoints and its verdict; waitMs (up to 60,000) waits for it to finish or park on a step first.",
            "jobs:read",
            "GetJob",
            get_job::handle,
        )?
        .also_granted_by(REVIEW_SCOPE),
        verb(
            &pool,
            &state,
            "list-jobs",
            "List runs newest first, filtered by status, workflow name, creation time, outstanding step or priority (limit 0 means 50; above 500 is clamped).",
            "jobs:read",
            "ListJobs",
            list_jobs::handle,
        )?
        .also_granted_by(REVIEW_SCOPE),
        verb(
            &pool,
            &state,
            "complete-step",
            "Complete a run's parked external step with a validated response.",
            "jobs:complete",
            "CompleteStep",
            complete_step::handle,
        )?
        .also_granted_by(REVIEW_SCOPE),
        verb(
            &pool,
            &state,
            "send-event",
            "Deliver an event to every run waiting on its key (an event step's eventKey); kept for the runs that wait on the key later, within their lookback; eventId makes it idempotent.",
            "jobs:signal",
            "SendEvent",
            send_event::handle,
        )?,
        verb(
            &pool,
            &state,
            "reject-step",
            "Fail a run parked on an external step, as a verdict (REJECTED: step '<step>': <reason>).",
            "jobs:complete",
            "RejectStep",
            reject_step::handle,
        )?
        .also_granted_by(REVIEW_SCOPE),
        verb(
            &pool,
            &state,
            "cancel-job",
            "Cancel a run: QUEUED or WAITING at once; RUNNING abandons its step and settles CANCELLED.",
            "jobs:operate",
            "CancelJob",
            cancel_job::handle,
        )?,
        verb(
            &pool,
            &state,
            "retry-job",
            "Re-queue a DEAD, FAILED or CANCELLED run with a fresh retry budget (a COMPLETED one from a named step).",
            "jobs:operate",
            "RetryJob",
            retry_job::handle,
        )?,
        verb(
            &pool,
            &state,
            "cancel-jobs",
            "Cancel many runs, by jobIds (up to 1,000) or by a filter with a limit (up to 10,000), each as cancel-job would.",
            "jobs:operate",
            "CancelJobs",
            cancel_jobs::handle,
        )?,
        verb(
            &pool,
            &state,
            "retry-jobs",
            "Re-queue many runs, by jobIds (up to 1,000) or by a filter with a limit (up to 10,000), each as retry-job would (no fromStep).",
            "jobs:operate",
            "RetryJobs",
            retry_jobs::handle,
        )?,
        verb(
            &pool,
            &state,
            "get-form",
            "Describe, for a generated form, the output type of a job's step (jobId, stepName) or the input type of a stored workflow (workflowName): fields, kinds, comments and declared rules.",
            "jobs:read",
            "GetForm",
            get_form::handle,
        )?
        .also_granted_by(REVIEW_SCOPE),
        verb(
            &pool,
            &state,
            "get-job-items",
            "One page of a map step's stored elements (jobId, stepName, offset, limit up to 500), by position: each element's response, or its error when collected.",
            "jobs:read",
            "GetJobItems",
            get_job_items::handle,
        )?,
        verb(
            &pool,
            &state,
            "get-fleet",
            "The fleet at a glance: live jobs by status, jobs finished in the last hour, the oldest claimable job's age, the outbox's depth, WAITING jobs by step, the database server the node reached.",
            "jobs:read",
            "GetFleet",
            get_fleet::handle,
        )?,
        verb(
            &pool,
            &state,
            "list-rejects",
            "The request records the Kafka consumer dead-lettered, newest first, each with its topic, partition, offset, key and the reason it was refused.",
            "jobs:read",
            "ListRejects",
            list_rejects::handle,
        )?,
        verb(
            &pool,
            &state,
            "redrive-events",
            "Publish again jobs' dead-lettered (FAILED) events and those held behind them, in order: by jobIds, or all: true (optionally of one workflowName) up to a limit.",
            "jobs:operate",
            "RedriveEvents",
            redrive_events::handle,
        )?,
        verb(
            &pool,
            &state,
            "pause-workflow",
            "Pause a workflow (workflowName) or one concurrency key (concurrencyKey) across the fleet: no new claims of its jobs; running segments finish, queued jobs stay queued.",
            "jobs:operate",
            "PauseWorkflow",
            pause::pause,
        )?,
        verb(
            &pool,
            &state,
            "resume-workflow",
            "Resume a paused workflow (workflowName) or concurrency key (concurrencyKey): claims take its queued jobs again.",
            "jobs:operate",
            "ResumeWorkflow",
            pause::resume,
        )?,
        verb(
            &pool,
            &state,
            "put-schedule",
            "Make or replace a schedule: a stored workflow (workflowName) run as a job at each tick of a cron expression in an IANA timezone, with overlap (skip, buffer-one, allow, cancel-previous) and catch-up (none, last, all) policies.",
            "schedules:write",
            "PutSchedule",
            schedules::put,
        )?,
        verb(
            &pool,
            &state,
            "get-schedule",
            "Read a schedule: its spec, pause, next 5 ticks, newest tick, last error and newest 20 jobs.",
            "schedules:read",
            "GetSchedule",
            schedules::get,
        )?,
        verb(
            &pool,
            &state,
            "list-schedules",
            "List every schedule by name (up to 1,000), each with its next ticks.",
            "schedules:read",
            "ListSchedules",
            schedules::list,
        )?,
        verb(
            &pool,
            &state,
            "delete-schedule",
            "Delete a schedule: no tick fires again; its jobs stay.",
            "schedules:write",
            "DeleteSchedule",
            schedules::delete,
        )?,
        verb(
            &pool,
            &state,
            "pause-schedule",
            "Pause a schedule across the fleet: no tick fires until resume-schedule (the pause's ticks are not caught up).",
            "schedules:write",
            "PauseSchedule",
            schedules::pause,
        )?,
        verb(
            &pool,
            &state,
            "resume-schedule",
            "Resume a paused schedule from its next tick after now.",
            "schedules:write",
            "ResumeSchedule",
            schedules::resume,
        )?,
        verb(
            &pool,
            &state,
            "trigger-schedule",
            "Make one job of a schedule now, whatever its ticks and pause (jobId makes a retried trigger one job).",
            "schedules:write",
            "TriggerSchedule",
            schedule_jobs::trigger,
        )?,
        verb(
            &pool,
            &state,
            "backfill-schedule",
            "Make a job for each of a schedule's ticks in [from, to), each with its tick's job id, so running it twice makes no more (at most 1,000 ticks).",
            "schedules:write",
            "BackfillSchedule",
            schedule_jobs::backfill,
        )?,
    ])
}

fn verb<F, Fut>(
    pool: &DescriptorPool,
    state: &Option<Arc<JobsState>>,
    name: &str,
    description: &str,
    scope: &str,
    message: &str,
    handler: F,
) -> Result<Action, MountError>
where
    F: Fn(Arc<JobsState>, ActionRequest) -> Fut + Copy + Send + Sync + 'static,
    Fut: Future<Output = Result<Value, ActionError>> + Send + 'static,
{
    let request = surface_message(pool, &format!("protomolt.jobs.verbs.v1.{message}Request"))?;
    let response = surface_message(pool, &format!("protomolt.jobs.verbs.v1.{message}Response"))?;
    let state = state.clone();
    let verb = name.to_owned();
    Ok(Action::new(
        name,
        description,
        scope,
        request,
        response,
        move |request| {
            let state = state.clone();
            let verb = verb.clone();
            async move {
                match state {
                    Some(state) => handler(state, request).await,
                    None => Err(ActionError::unavailable(format!(
                        "{verb}: jobs are not configured on this node: set [jobs].database_url and [jobs].worker_id and mount the jobs role"
                    ))),
                }
            }
        },
    ))
}

/// The job's own workflow snapshot (compiled through the node's cache, off the async
/// threads) and the position of its step `step`, which the request named in `field`;
/// a 400 naming `field` when the snapshot no longer compiles or has no such step
/// (listing its steps).
pub(super) async fn job_step(
    state: &JobsState,
    job: &Value,
    field: &str,
    step: &str,
) -> Result<(std::sync::Arc<workflow::CompiledWorkflow>, usize), ActionError> {
    let compiled = state
        .submitter
        .compiled()
        .get_or_compile_off_thread(&job["workflow_definition"])
        .await
        .map_err(|findings| {
            ActionError::invalid(format!(
                "{field}: the job's stored workflow no longer compiles: {findings}"
            ))
        })?
        .workflow;
    let Some(index) = compiled.step(step).map(|found| found.index) else {
        let steps: Vec<&str> = compiled.steps.iter().map(|s| s.name.as_str()).collect();
        return Err(ActionError::invalid(format!(
            "{field}: workflow '{}' has no step '{step}' (its steps: {})",
            compiled.name,
            steps.join(", ")
        )));
    };
    Ok((compiled, index))
}

/// Maps a store failure: a value PostgreSQL refuses is `invalid_argument` (the
/// caller's data); an unreachable or failing database is `unavailable`, with a
/// generic sentence and a reference to the log line that holds the driver's text
/// (which can name hosts and database users); the rest `internal`.
pub fn store_error(error: StoreError) -> ActionError {
    match error {
        StoreError::Data { .. } => ActionError::invalid(format!(
            "the request holds a value the jobs database cannot store: {error}"
        )),
        StoreError::Pool(_)
        | StoreError::Database(_)
        | StoreError::GroupCommit(_)
        | StoreError::DiskFull(_) => {
            let reference = uuid::Uuid::now_v7();
            tracing::warn!(%reference, %error, "the jobs database is unavailable");
            let why = if error.is_disk_full() {
                "the jobs database's disk is full; try again once its operator frees space"
            } else {
                "the jobs database is unavailable; try again shortly"
            };
            ActionError::unavailable(format!("{why} (reference {reference} in the node's log)"))
        }
        other => ActionError::internal(other),
    }
}

/// Rewrites the snake_case keys of a stored row as the camelCase the wire uses.
pub fn camel_case_keys(row: Value) -> Value {
    match row {
        Value::Object(fields) => Value::Object(
            fields
                .into_iter()
                .map(|(key, value)| (camel_case(&key), value))
                .collect::<Map<String, Value>>(),
        ),
        other => other,
    }
}

fn camel_case(snake: &str) -> String {
    let mut out = String::with_capacity(snake.len());
    let mut upper = false;
    for c in snake.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_become_camel_case() {
        let row = serde_json::json!({ "job_id": 1, "workflow_definition": {"steps_x": 1}, "status": "QUEUED" });
        assert_eq!(
            camel_case_keys(row),
            serde_json::json!({ "jobId": 1, "workflowDefinition": {"steps_x": 1}, "status": "QUEUED" })
        );
    }
}
