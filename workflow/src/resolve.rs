//! Resolving child workflows: a step `"workflow": "name"` names a stored workflow,
//! and before the workflow is stored or submitted the node files the child's
//! envelope into the step as `workflowSnapshot`, its own children resolved the same
//! way ([`resolve_children`]). A job runs the snapshot its submission filed: a child
//! edited or deleted later never shifts a live parent (the seed's rule for every
//! workflow). A child that does not exist or does not compile, a workflow that would
//! start itself, and children nested past the depth bound are findings naming the
//! step.

use serde_json::Value;

use crate::compile::MAX_CHILD_DEPTH;
use crate::finding::{Finding, Findings};
use crate::suggest::did_you_mean;

/// Most child workflows one workflow's tree may file, all levels counted: each is a
/// copy of a stored envelope inside the job's snapshot (and is verified at every
/// submission), so a few steps naming workflows that name others cannot multiply it.
pub const MAX_CHILD_WORKFLOWS: usize = 64;

/// True when some step of `envelope` names a child workflow.
pub fn has_child_steps(envelope: &Value) -> bool {
    envelope["steps"]
        .as_array()
        .is_some_and(|steps| steps.iter().any(|s| s.get("workflow").is_some()))
}

/// `envelope` with the snapshot of every child workflow filed into its step (any
/// snapshot already there is replaced: the stored workflow decides), looked up by
/// name through `lookup` and checked as a new workflow is
/// ([`crate::CompiledWorkflow::compile_new`]), nested at most `max_depth` deep (and
/// never past [`MAX_CHILD_DEPTH`]). `names` lists the stored names, for "did you
/// mean".
pub fn resolve_children(
    envelope: &Value,
    lookup: &dyn Fn(&str) -> Option<Value>,
    names: &[String],
    max_depth: usize,
) -> Result<Value, Findings> {
    let mut findings = Vec::new();
    let own = envelope["name"].as_str().unwrap_or_default().to_owned();
    let mut filed = 0;
    let resolved = resolve_in(
        envelope,
        lookup,
        names,
        max_depth.min(MAX_CHILD_DEPTH),
        &mut vec![own],
        &mut findings,
        &mut filed,
    );
    if findings.is_empty() {
        Ok(resolved)
    } else {
        Err(Findings(findings))
    }
}

/// [`resolve_children`] below the workflows in `chain` (the root first).
fn resolve_in(
    envelope: &Value,
    lookup: &dyn Fn(&str) -> Option<Value>,
    names: &[String],
    max_depth: usize,
    chain: &mut Vec<String>,
    findings: &mut Vec<Finding>,
    filed: &mut usize,
) -> Value {
    let mut resolved = envelope.clone();
    let Some(steps) = resolved.get_mut("steps").and_then(Value::as_array_mut) else {
        return resolved;
    };
    for (i, step) in steps.iter_mut().enumerate() {
        let Some(name) = step
            .get("workflow")
            .and_then(Value::as_str)
            .map(str::to_owned)
        else {
            continue;
        };
        let label = step["name"].as_str().map(str::to_owned);
        let mut find = |message: String| {
            findings.push(Finding {
                step: label.clone(),
                path: format!("$.steps[{i}].workflow"),
                message,
            });
        };
        let through = || {
            chain
                .iter()
                .map(String::as_str)
                .chain([name.as_str()])
                .collect::<Vec<_>>()
                .join(" -> ")
        };
        if chain.contains(&name) {
            find(format!(
                "workflow '{name}' would start itself ({}): a workflow that starts itself never ends",
                through()
            ));
            continue;
        }
        if chain.len() > max_depth {
            find(format!(
                "child workflows nest more than {max_depth} deep ({}): [jobs].max_child_depth",
                through()
            ));
            continue;
        }
        *filed += 1;
        if *filed > MAX_CHILD_WORKFLOWS {
            find(format!(
                "the workflow's tree names more than {MAX_CHILD_WORKFLOWS} child workflows in all (each is filed into the job's snapshot): start fewer, or map one over a list"
            ));
            continue;
        }
        let Some(child) = lookup(&name) else {
            let hint = did_you_mean(&name, names.iter().map(String::as_str))
                .map(|close| format!(" (did you mean '{close}'?)"))
                .unwrap_or_default();
            find(format!(
                "no stored workflow named '{name}'{hint}: store it first (put-workflow)"
            ));
            continue;
        };
        chain.push(name.clone());
        let mut inner = Vec::new();
        let child = resolve_in(&child, lookup, names, max_depth, chain, &mut inner, filed);
        chain.pop();
        if inner.is_empty()
            && let Err(problems) = crate::CompiledWorkflow::compile_new(&child)
        {
            inner = problems.0;
        }
        if !inner.is_empty() {
            for problem in inner {
                find(format!(
                    "child workflow '{name}' does not verify: {problem}"
                ));
            }
            continue;
        }
        step["workflowSnapshot"] = child;
    }
    resolved
}
