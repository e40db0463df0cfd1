//! Child steps: `"workflow": "stored-name"` starts a job of another stored workflow
//! (one per element with `forEach`) and parks until it ends; the child's output is
//! the step's response and the step's `rules` build the child's input. The node
//! resolves the name when this workflow is stored or submitted and files the child's
//! envelope into the step as `workflowSnapshot` ([`crate::resolve`]), so an edited
//! child never shifts a live parent.
//!
//! The child's input and output types must be defined, the same way, in this
//! workflow's own schema: the rules build the input here, and later steps read the
//! output here (one descriptor pool per workflow; no message crosses pools).

use std::collections::HashSet;

use prost_reflect::{Kind, MessageDescriptor};
use serde_json::{Map, Value};

use crate::compile::draft::{Draft, json_kind};
use crate::spec::ChildSpec;

/// Deepest child workflows may nest (a child's child's ...): the compiler refuses
/// snapshots nested deeper, whatever a node's `[jobs].max_child_depth` says.
pub const MAX_CHILD_DEPTH: usize = 8;

/// Reads a child step's `workflow` and `workflowSnapshot`: `None` for a step without
/// `workflow` (a stray `workflowSnapshot` is a finding).
pub(super) fn read_child(
    draft: &mut Draft<'_>,
    object: &Map<String, Value>,
    step: Option<&str>,
    path: &str,
) -> Option<ChildSpec> {
    if !object.contains_key("workflow") {
        if object.contains_key("workflowSnapshot") {
            draft.find(
                step,
                format!("{path}.workflowSnapshot"),
                "only a child step (\"workflow\": \"name\") carries 'workflowSnapshot'",
            );
        }
        return None;
    }
    for key in [
        "completion",
        "target",
        "method",
        "outputType",
        "requestType",
        "waitTimeoutMs",
        "onTimeout",
        "validate",
    ] {
        if object.contains_key(key) {
            draft.find(
                step,
                format!("{path}.{key}"),
                format!("a child step runs the workflow it names, whose types and checks are its own: remove '{key}'"),
            );
        }
    }
    let workflow = draft.string(object, "workflow", true, step, path)?;
    let snapshot = match object.get("workflowSnapshot") {
        None | Some(Value::Null) => None,
        Some(Value::Object(snapshot)) => Some(Value::Object(snapshot.clone())),
        Some(other) => {
            draft.find(
                step,
                format!("{path}.workflowSnapshot"),
                format!(
                    "'workflowSnapshot' must be the child's envelope (an object), not {}",
                    json_kind(other)
                ),
            );
            None
        }
    };
    Some(ChildSpec {
        workflow,
        snapshot,
        path: format!("{path}.workflow"),
    })
}

/// Why `here` (a type of this workflow's schema) is not the same type as `there`
/// (the child's), or `Ok`: the same name, and the same fields of the same types and
/// numbers, all the way down (each message and enum compared once).
pub(super) fn same_type(here: &MessageDescriptor, there: &MessageDescriptor) -> Result<(), String> {
    let mut seen = HashSet::new();
    compare(here, there, &mut seen)
}

fn compare(
    here: &MessageDescriptor,
    there: &MessageDescriptor,
    seen: &mut HashSet<String>,
) -> Result<(), String> {
    if !seen.insert(here.full_name().to_owned()) {
        return Ok(());
    }
    if here.descriptor_proto() != there.descriptor_proto() {
        return Err(format!(
            "{} is defined differently in this workflow's schema than in the child's",
            here.full_name()
        ));
    }
    for (mine, theirs) in here.fields().zip(there.fields()) {
        match (mine.kind(), theirs.kind()) {
            (Kind::Message(a), Kind::Message(b)) => compare(&a, &b, seen)?,
            (Kind::Enum(a), Kind::Enum(b))
                if seen.insert(a.full_name().to_owned())
                    && a.enum_descriptor_proto() != b.enum_descriptor_proto() =>
            {
                return Err(format!(
                    "{} is defined differently in this workflow's schema than in the child's",
                    a.full_name()
                ));
            }
            _ => {}
        }
    }
    Ok(())
}
