//! `workflow: "current"` of `retry-job` and `retry-jobs`. A job runs the snapshot of
//! its workflow taken when it was submitted (targets, rules, types, the children's
//! workflows), whatever was stored under its name since, and a plain retry runs that
//! snapshot again. A retry with `workflow: "current"` moves the job onto the workflow
//! stored under its name now, snapshotted as a new submission would be (and held to a
//! new job's checks and the node's outbound policy), when what the job keeps fits it:
//!
//! - the input's type is the same;
//! - every step the job keeps a result of (a checkpoint, stored map elements, child
//!   jobs), after `fromStep` dropped its own, is a step of the new workflow of the same
//!   name, giving the same message type (a map step a list of it).
//!
//! Anything else is one finding per misfit and nothing changes (`INCOMPATIBLE`). Steps
//! without a result may change freely: they run from the new workflow. A step's re-run
//! count (part of its calls' idempotency keys) follows its name onto the new workflow.
//! What the job was submitted with stays: its input, priority, concurrency keys,
//! dedupe key and metadata. The RETRIED event names both snapshots.

use std::collections::HashMap;
use std::sync::Arc;

use registry_stub::{ActionError, ActionRequest};
use uuid::Uuid;
use workflow::{CompiledStep, CompiledWorkflow};

use super::{JobsState, store_error};
use crate::compiled::Compiled;
use crate::status::JobStatus;
use crate::store::{SnapshotMove, SnapshotMoves};
use crate::submit::SubmitError;

/// True when the request asks for the current stored workflow (`workflow:
/// "current"`); its rules admit only that, `"snapshot"` and nothing.
pub(super) fn wants_current(request: &ActionRequest) -> bool {
    request.str("workflow") == "current"
}

/// What moving jobs onto their workflows' current versions takes.
#[derive(Debug, Default)]
pub(super) struct Plan {
    /// The moves of the jobs whose results fit.
    pub moves: SnapshotMoves,
    /// The jobs whose results do not, each with its status and findings.
    pub misfits: Vec<(Uuid, JobStatus, Vec<String>)>,
    /// `fromStep`'s step and the steps after it in the new workflow (name, position),
    /// when the call named one (one job, so one workflow).
    pub dropped: Option<Vec<(String, usize)>>,
}

/// Plans the move of `job_ids` (ids of no job, and jobs in a state no retry takes,
/// are left to the act to answer). `from_step`: the step `retry-job` runs again from,
/// which must be a step of the job's current workflow.
pub(super) async fn plan(
    state: &JobsState,
    job_ids: &[Uuid],
    from_step: Option<&str>,
) -> Result<Plan, ActionError> {
    let candidates = state
        .store
        .retry_candidates(job_ids)
        .await
        .map_err(store_error)?;
    let mut plan = Plan::default();
    let mut targets: HashMap<String, Result<(usize, Arc<CompiledWorkflow>), String>> =
        HashMap::new();
    let mut olds: HashMap<String, Result<Arc<CompiledWorkflow>, String>> = HashMap::new();
    for job in candidates {
        if !job.status.can_be_retried(from_step.is_some()) {
            continue;
        }
        if job.inline {
            plan.misfits.push((job.job_id, job.status, vec![
                "the job's snapshot is still being filed (migration V21's mover is at work): try again in a minute".to_owned(),
            ]));
            continue;
        }
        if !targets.contains_key(&job.workflow_name) {
            let target = current(state, &job.workflow_name, &mut plan.moves).await;
            targets.insert(job.workflow_name.clone(), target);
        }
        let (target, new) = match &targets[&job.workflow_name] {
            Ok(found) => found.clone(),
            Err(why) => {
                plan.misfits
                    .push((job.job_id, job.status, vec![why.clone()]));
                continue;
            }
        };
        if !olds.contains_key(&job.digest) {
            olds.insert(job.digest.clone(), own_snapshot(state, &job.digest).await?);
        }
        let old = match &olds[&job.digest] {
            Ok(old) => old.clone(),
            Err(why) => {
                plan.misfits
                    .push((job.job_id, job.status, vec![why.clone()]));
                continue;
            }
        };
        let dropped = match from_step {
            Some(step) => {
                let dropped = dropped_from(&new, step)?;
                plan.dropped = Some(dropped.clone());
                dropped
            }
            None => Vec::new(),
        };
        let kept: Vec<&str> = job
            .kept
            .iter()
            .map(String::as_str)
            .filter(|name| !dropped.iter().any(|(gone, _)| gone == name))
            .collect();
        let found = misfits(&old, &new, &kept);
        if !found.is_empty() {
            plan.misfits.push((job.job_id, job.status, found));
            continue;
        }
        plan.moves.jobs.insert(
            job.job_id,
            SnapshotMove {
                target,
                checked_digest: job.digest,
                checked_claims: job.claims,
                reruns_from: Arc::new(reruns_from(&old, &new)),
            },
        );
    }
    Ok(plan)
}

/// The workflow stored under `name` now, added to `moves`' targets; or why no job of
/// it can move.
async fn current(
    state: &JobsState,
    name: &str,
    moves: &mut SnapshotMoves,
) -> Result<(usize, Arc<CompiledWorkflow>), String> {
    match state.submitter.current_workflow(name).await {
        Ok((envelope, Compiled { workflow, digest })) => {
            moves.targets.push((digest, envelope));
            Ok((moves.targets.len() - 1, workflow))
        }
        Err(SubmitError::UnknownWorkflow(_)) => Err(format!(
            "workflow: {} (was the job submitted inline, or its workflow deleted?): store it with workflows put, or retry on the job's own snapshot",
            state.submitter.unknown_workflow(name)
        )),
        Err(refused) => Err(format!(
            "workflow: '{name}' as stored now is refused, so no job moves onto it: {refused}"
        )),
    }
}

/// A job's own snapshot, compiled (from the node's cache when it has it), or why its
/// results cannot be checked.
async fn own_snapshot(
    state: &JobsState,
    digest: &str,
) -> Result<Result<Arc<CompiledWorkflow>, String>, ActionError> {
    let cache = state.submitter.compiled();
    if let Some(compiled) = cache.get_by_digest(digest) {
        return Ok(Ok(compiled));
    }
    let Some(definition) = state.store.snapshot(digest).await.map_err(store_error)? else {
        return Ok(Err(format!(
            "the job's snapshot {digest} is not filed, so its results cannot be checked"
        )));
    };
    Ok(cache
        .get_or_compile_off_thread(&definition)
        .await
        .map(|compiled| compiled.workflow)
        .map_err(|findings| {
            format!("the job's own snapshot no longer compiles, so its results cannot be checked: {findings}")
        }))
}

/// `step` of `new` and every step that runs after it (name, position); a 400 naming
/// `fromStep` when `new` has no such step.
fn dropped_from(new: &CompiledWorkflow, step: &str) -> Result<Vec<(String, usize)>, ActionError> {
    let Some(at) = new.step(step).map(|found| found.index) else {
        let steps: Vec<&str> = new.steps.iter().map(|s| s.name.as_str()).collect();
        return Err(ActionError::invalid(format!(
            "fromStep: workflow '{}' as stored now has no step '{step}' (its steps: {})",
            new.name,
            steps.join(", ")
        )));
    };
    Ok(new
        .steps
        .iter()
        .filter(|s| s.index == at || s.ancestors.contains(&at))
        .map(|s| (s.name.clone(), s.index))
        .collect())
}

/// The answer's sentence for a job whose results do not fit.
pub(super) fn misfit_error(findings: &[String]) -> String {
    format!(
        "the job's results do not fit its workflow as stored now, so it was not moved (nothing changed): {}",
        findings.join("; ")
    )
}

/// Why the results a job keeps (`kept`: step names) do not fit `new`, one sentence per
/// misfit; empty when they fit.
pub fn misfits(old: &CompiledWorkflow, new: &CompiledWorkflow, kept: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    let (was, now) = (old.input_type.full_name(), new.input_type.full_name());
    if was != now {
        found.push(format!(
            "input: the job's input is a {was}; workflow '{}' as stored now takes a {now}",
            new.name
        ));
    }
    for name in kept {
        let Some(step) = new.step(name) else {
            found.push(format!(
                "step '{name}': the job keeps its result, but workflow '{}' as stored now has no step '{name}' (retry from an earlier step, or on the job's own snapshot)",
                new.name
            ));
            continue;
        };
        let Some(before) = old.step(name) else {
            continue;
        };
        let (was, now) = (gives(before), gives(step));
        if was != now {
            found.push(format!(
                "step '{name}': the job keeps {was}, but the step as stored now gives {now} (retry from step '{name}' to run it again)"
            ));
        }
    }
    found
}

/// What a step's result is, as a phrase: "a pkg.Type", "a list of pkg.Type".
fn gives(step: &CompiledStep) -> String {
    let of = step.response_type.full_name();
    if step.map.is_some() {
        format!("a list of {of}")
    } else {
        format!("a {of}")
    }
}

/// For each step of `new`, the 1-based position of the step of the same name in
/// `old` (0: none).
fn reruns_from(old: &CompiledWorkflow, new: &CompiledWorkflow) -> Vec<i32> {
    new.steps
        .iter()
        .map(|step| {
            old.step(&step.name)
                // A workflow has at most a few hundred steps (compile bounds them).
                .map_or(0, |s| i32::try_from(s.index + 1).unwrap_or(i32::MAX))
        })
        .collect()
}
