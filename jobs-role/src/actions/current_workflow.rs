//! `workflow: "current"` of `retry-job` and `retry-jobs`. A job runs the snapshot of
//! its workflow taken when it was submitted (targets, rules, types, the children's
//! workflows), whatever was stored under its name since, and a plain retry runs that
//! snapshot again. A retry with `workflow: "current"` moves the job onto the workflow
//! stored under its name now, snapshotted as a new submission would be (and held to a
//! new job's checks and the node's outbound policy), when the job may move and what
//! it keeps fits:
//!
//! - it was submitted by that stored workflow's name (an inline workflow may carry any
//!   name: its results must never pass for a stored workflow's), and is not a child
//!   job (a child moves with its parent's retry);
//! - its input is of the same type (field for field) and passes the new input rules,
//!   and the new workflow computes the concurrency keys the job holds;
//! - every step it keeps a checkpoint of (after `fromStep` dropped its own and those
//!   after it, in the old workflow and in the new) is a step of the new workflow of the
//!   same kind (a map step, a child step, or neither) giving the same message, field
//!   for field, and the checkpoints replay in the new workflow (in a chain: its first
//!   steps in order; in a graph: each after the steps it runs after);
//! - no step is part way through (stored map elements or child jobs without a
//!   checkpoint): retry from that step to run it again.
//!
//! Anything else is one finding per misfit and nothing changes (`INCOMPATIBLE`). Steps
//! without a result may change freely: they run from the new workflow, each with a
//! fresh idempotency key (the move counts as a re-run of every step that will run, so
//! a changed call is never answered from a target's cache of the old one). What the
//! job was submitted with stays: its input, priority, concurrency keys, dedupe key and
//! metadata. The RETRIED event names both snapshots.

use std::collections::HashMap;
use std::sync::Arc;

use prost_reflect::{Kind, MessageDescriptor};
use registry_stub::{ActionError, ActionRequest};
use serde_json::Value;
use uuid::Uuid;
use workflow::compile::RULES_TIME_LIMIT;
use workflow::{CompiledStep, CompiledWorkflow};

use super::{JobsState, store_error};
use crate::compiled::Compiled;
use crate::status::JobStatus;
use crate::store::{RetryCandidate, SnapshotMove, SnapshotMoves};
use crate::submit::SubmitError;

/// True when the request asks for the current stored workflow (`workflow:
/// "current"`); its rules admit only that, `"snapshot"` and nothing.
pub(super) fn wants_current(request: &ActionRequest) -> bool {
    request.str("workflow") == "current"
}

/// The steps a `fromStep` drops in the new workflow (name, position), then the old
/// workflow's steps after it that the new one lacks.
pub(super) type Dropped = (Vec<(String, usize)>, Vec<String>);

/// What moving jobs onto their workflows' current versions takes.
#[derive(Debug, Default)]
pub(super) struct Plan {
    /// The moves of the jobs whose results fit.
    pub moves: SnapshotMoves,
    /// The jobs whose results do not, each with its status and findings.
    pub misfits: Vec<(Uuid, JobStatus, Vec<String>)>,
    /// `fromStep`'s step and the steps after it in the new workflow (name, position),
    /// and the old workflow's steps after it that the new one lacks, when the call
    /// named one (one job, so one workflow).
    pub dropped: Option<Dropped>,
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
        // The act answers these (WRONG_STATE, or NEVER_RAN for a job FAILED at
        // submission): a misfit would hide why.
        if !job.status.can_be_retried(from_step.is_some())
            || (job.status == JobStatus::Failed && job.claims == 0)
        {
            continue;
        }
        if let Some(why) = may_not_move(&job) {
            plan.misfits.push((job.job_id, job.status, vec![why]));
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
        let (dropped, also_dropped) = match from_step {
            Some(step) => dropped_from(&old, &new, step)?,
            None => (Vec::new(), Vec::new()),
        };
        let gone =
            |name: &String| dropped.iter().any(|(d, _)| d == name) || also_dropped.contains(name);
        let checkpointed: Vec<&str> = job
            .checkpointed
            .iter()
            .filter(|name| !gone(name))
            .map(String::as_str)
            .collect();
        let parts: Vec<&str> = job
            .parts
            .iter()
            .filter(|name| !gone(name) && !checkpointed.contains(&name.as_str()))
            .map(String::as_str)
            .collect();
        let mut found = misfits(&old, &new, &checkpointed, &parts);
        // (An input of another type is one finding, not one per field.)
        if same_message(&old.input_type, &new.input_type) {
            found.extend(input_misfits(&new, &job.input, &job.concurrency_keys).await);
        }
        if !found.is_empty() {
            plan.misfits.push((job.job_id, job.status, found));
            continue;
        }
        if from_step.is_some() {
            plan.dropped = Some((dropped, also_dropped));
        }
        plan.moves.jobs.insert(
            job.job_id,
            SnapshotMove {
                target,
                checked_digest: job.digest,
                checked_claims: job.claims,
                reruns_from: Arc::new(reruns_from(&old, &new, &checkpointed)),
            },
        );
    }
    Ok(plan)
}

/// Why `job` may not move at all, whatever the workflow stored now.
fn may_not_move(job: &RetryCandidate) -> Option<String> {
    if job.submitted_by_name != Some(true) {
        return Some(format!(
            "workflow: the job was not submitted by the stored workflow's name (an inline workflow named '{}'{}), so it cannot move onto the stored one: retry it on its own snapshot, or submit it again by name",
            job.workflow_name,
            if job.submitted_by_name.is_none() {
                ", or a job written before migration V31"
            } else {
                ""
            }
        ));
    }
    if job.parent_job_id.is_some() {
        return Some(
            "workflow: a child job runs the workflow its parent's snapshot holds: retry the parent, which re-runs the children that did not complete".to_owned(),
        );
    }
    if job.inline {
        return Some(
            "the job's snapshot is still being filed (migration V21's mover is at work): try again in a minute".to_owned(),
        );
    }
    None
}

/// Why the job's input does not fit `new`: its input rules refuse it, or `new`
/// computes other concurrency keys than the ones it holds.
async fn input_misfits(new: &CompiledWorkflow, input: &Value, held: &[String]) -> Vec<String> {
    let parsed = match new.parse_input_within(input, RULES_TIME_LIMIT).await {
        Ok(parsed) => parsed,
        Err(e) => {
            return vec![format!(
                "{} (as workflow '{}' is stored now)",
                e.located("input"),
                new.name
            )];
        }
    };
    match new.concurrency_keys_within(&parsed, RULES_TIME_LIMIT).await {
        Ok(keys) => {
            let keys: Vec<&str> = keys.iter().map(|k| k.key.as_str()).collect();
            if keys == held {
                Vec::new()
            } else {
                vec![format!(
                    "concurrency: workflow '{}' as stored now gives the job the keys {keys:?}, and it holds {held:?}: submit it again",
                    new.name
                )]
            }
        }
        Err(why) => vec![format!("concurrency: {why}")],
    }
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

/// `step` of `new` and every step that runs after it (name, position), then the
/// steps after it in `old` that `new` lacks (their results go too); a 400 naming
/// `fromStep` when `new` has no such step.
fn dropped_from(
    old: &CompiledWorkflow,
    new: &CompiledWorkflow,
    step: &str,
) -> Result<Dropped, ActionError> {
    let Some(at) = new.step(step).map(|found| found.index) else {
        let steps: Vec<&str> = new.steps.iter().map(|s| s.name.as_str()).collect();
        return Err(ActionError::invalid(format!(
            "fromStep: workflow '{}' as stored now has no step '{step}' (its steps: {})",
            new.name,
            steps.join(", ")
        )));
    };
    let dropped: Vec<(String, usize)> = new
        .steps
        .iter()
        .filter(|s| s.index == at || s.ancestors.contains(&at))
        .map(|s| (s.name.clone(), s.index))
        .collect();
    let also: Vec<String> = match old.step(step).map(|found| found.index) {
        Some(was) => old
            .steps
            .iter()
            .filter(|s| s.index == was || s.ancestors.contains(&was))
            .filter(|s| new.step(&s.name).is_none())
            .map(|s| s.name.clone())
            .collect(),
        None => Vec::new(),
    };
    Ok((dropped, also))
}

/// The answer's sentence for a job whose results do not fit.
pub(super) fn misfit_error(findings: &[String]) -> String {
    format!(
        "the job's results do not fit its workflow as stored now, so it was not moved (nothing changed): {}",
        findings.join("; ")
    )
}

/// Why the results a job keeps do not fit `new`, one sentence per misfit; empty when
/// they fit. `checkpointed`: the steps of its checkpoints in their order; `parts`:
/// steps part way through (stored elements or child jobs, no checkpoint).
pub fn misfits(
    old: &CompiledWorkflow,
    new: &CompiledWorkflow,
    checkpointed: &[&str],
    parts: &[&str],
) -> Vec<String> {
    let mut found = Vec::new();
    let (was, now) = (&old.input_type, &new.input_type);
    if !same_message(was, now) {
        found.push(format!(
            "input: the job's input is a {}; workflow '{}' as stored now takes {}",
            was.full_name(),
            new.name,
            if was.full_name() == now.full_name() {
                format!("a different {} (its fields changed)", now.full_name())
            } else {
                format!("a {}", now.full_name())
            }
        ));
    }
    for name in checkpointed {
        let Some(step) = new.step(name) else {
            found.push(format!(
                "step '{name}': the job keeps its result, but workflow '{}' as stored now has no step '{name}' (run it again from an earlier step with fromStep, which drops the results after it, or retry on the job's own snapshot)",
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
        } else if !same_message(&before.response_type, &step.response_type) {
            found.push(format!(
                "step '{name}': the job keeps {was}, whose fields changed in the workflow stored now (retry from step '{name}' to run it again)"
            ));
        }
    }
    if found.is_empty()
        && let Some(why) = replay_misfit(new, checkpointed)
    {
        found.push(why);
    }
    for name in parts {
        found.push(format!(
            "step '{name}': the job was part way through it (stored elements or child jobs): retry from step '{name}' to run it again on the workflow stored now"
        ));
    }
    found
}

/// Why the checkpoints, in their order, would not replay in `new` (as the worker
/// replays them: a chain's are its first steps in order; a graph's each come after the
/// steps it runs after).
fn replay_misfit(new: &CompiledWorkflow, checkpointed: &[&str]) -> Option<String> {
    let mut done = vec![false; new.steps.len()];
    for (i, name) in checkpointed.iter().enumerate() {
        let step = new.step(name)?;
        if new.is_chain() {
            let expected = new.steps.get(i)?;
            if expected.name != *name {
                return Some(format!(
                    "step '{}': workflow '{}' as stored now runs it before step '{name}', and the job has no result of it (retry from step '{}')",
                    expected.name, new.name, expected.name
                ));
            }
        } else if let Some(&missing) = step.after.iter().find(|&&d| !done[d]) {
            let before = &new.steps[missing].name;
            return Some(format!(
                "step '{name}': workflow '{}' as stored now runs it after step '{before}', which the job has no result of first (retry from step '{before}')",
                new.name
            ));
        }
        done[step.index] = true;
    }
    None
}

/// True when two messages are the same, field for field: their descriptors, and those
/// of every message and enum they hold, are equal (a message of the same name whose
/// fields changed is another message).
fn same_message(a: &MessageDescriptor, b: &MessageDescriptor) -> bool {
    let mut seen = std::collections::HashSet::new();
    same_message_seen(a, b, &mut seen)
}

fn same_message_seen(
    a: &MessageDescriptor,
    b: &MessageDescriptor,
    seen: &mut std::collections::HashSet<String>,
) -> bool {
    if a.full_name() != b.full_name() || a.descriptor_proto() != b.descriptor_proto() {
        return false;
    }
    if !seen.insert(a.full_name().to_owned()) {
        return true;
    }
    a.fields()
        .zip(b.fields())
        .all(|(x, y)| match (x.kind(), y.kind()) {
            (Kind::Message(x), Kind::Message(y)) => same_message_seen(&x, &y, seen),
            (Kind::Enum(x), Kind::Enum(y)) => {
                x.enum_descriptor_proto() == y.enum_descriptor_proto()
            }
            _ => true,
        })
}

/// What a step's result is, as a phrase: "a pkg.Type", "a list of pkg.Type", "a
/// pkg.Type from a child workflow".
fn gives(step: &CompiledStep) -> String {
    let of = step.response_type.full_name();
    match (step.map.is_some(), step.child.is_some()) {
        (true, true) => format!("a list of {of} from child workflows"),
        (true, false) => format!("a list of {of}"),
        (false, true) => format!("a {of} from a child workflow"),
        (false, false) => format!("a {of}"),
    }
}

/// For each step of `new`: the 1-based position of the step of the same name in `old`
/// when the job keeps its checkpoint (its re-run count follows it), else -1 (it will
/// run: a fresh count, see `MOVE_TO_SNAPSHOTS`).
fn reruns_from(old: &CompiledWorkflow, new: &CompiledWorkflow, checkpointed: &[&str]) -> Vec<i32> {
    new.steps
        .iter()
        .map(|step| {
            if !checkpointed.contains(&step.name.as_str()) {
                return -1;
            }
            old.step(&step.name)
                // A workflow has at most a few hundred steps (compile bounds them).
                .map_or(-1, |s| i32::try_from(s.index + 1).unwrap_or(i32::MAX))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(source: &str) -> MessageDescriptor {
        workflow::schema::compile_proto_pool("t.proto", source)
            .unwrap()
            .get_message_by_name("t.Doc")
            .unwrap()
    }

    #[test]
    fn a_message_of_the_same_name_with_other_fields_is_another_message() {
        let doc = "syntax = \"proto3\"; package t; message Part { string a = 1; } message Doc { Part part = 1; }";
        let same = message(doc);
        assert!(same_message(&message(doc), &same));
        let renamed = "syntax = \"proto3\"; package t; message Part { string a = 1; } message Doc { Part piece = 1; }";
        assert!(!same_message(&message(renamed), &same));
        let nested = "syntax = \"proto3\"; package t; message Part { int64 a = 1; } message Doc { Part part = 1; }";
        assert!(!same_message(&message(nested), &same));
    }
}
