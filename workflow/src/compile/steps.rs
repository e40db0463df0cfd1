//! The envelope's steps and output as written ([`StepSpec`], [`OutputSpec`]): every
//! key read, every name and type resolved that can be, before verification.

use std::collections::HashSet;

use prost_reflect::{DescriptorPool, MessageDescriptor, MethodDescriptor};
use serde_json::{Map, Value};

use crate::compile::child::read_child;
use crate::compile::draft::{Draft, json_kind};
use crate::compile::graph::read_after;
use crate::compile::limits::MAX_STEPS;
use crate::compile::map::read_map;
use crate::compile::names::valid_step_name;
use crate::compile::parking::{empty_type, read_event, read_sleep};
use crate::compile::pool::{resolve_message, resolve_method};
use crate::compile::rate::read_rate_limit;
use crate::compile::review::read_reviewer_sees;
use crate::spec::{Completion, OutputSpec, StepSpec};

/// The keys of `output`.
pub(super) const OUTPUT_KEYS: &[&str] = &["type", "rules"];

/// The keys of a step.
pub(super) const STEP_KEYS: &[&str] = &[
    "name",
    "after",
    "forEach",
    "maxParallel",
    "onItemFailure",
    "target",
    "method",
    "rules",
    "when",
    "completion",
    "validate",
    "deadlineMs",
    "tls",
    "maxResponseBytes",
    "waitTimeoutMs",
    "onTimeout",
    "outputType",
    "requestType",
    "sleep",
    "eventKey",
    "eventLookbackMs",
    "workflow",
    "workflowSnapshot",
    "rateLimit",
    "reviewerSees",
];

pub(super) fn step_specs(
    draft: &mut Draft<'_>,
    root: &Map<String, Value>,
    pool: Option<&DescriptorPool>,
) -> Vec<StepSpec> {
    let Some(value) = root.get("steps") else {
        draft.find(
            None,
            "$.steps",
            "'steps' is required: a non-empty array of steps",
        );
        return Vec::new();
    };
    let Some(items) = value.as_array() else {
        draft.find(
            None,
            "$.steps",
            format!("'steps' must be an array, not {}", json_kind(value)),
        );
        return Vec::new();
    };
    if items.is_empty() {
        draft.find(None, "$.steps", "a workflow needs at least one step");
    }
    if items.len() > MAX_STEPS {
        draft.find(
            None,
            "$.steps",
            format!(
                "{} steps is more than the limit of {MAX_STEPS}",
                items.len()
            ),
        );
        return Vec::new();
    }
    let mut seen = HashSet::new();
    let mut specs = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let path = format!("$.steps[{i}]");
        let Some(object) = item.as_object() else {
            draft.find(
                None,
                &path,
                format!("a step must be an object, not {}", json_kind(item)),
            );
            continue;
        };
        let name = draft.string(object, "name", true, None, &path);
        let label = name.clone().unwrap_or_else(|| format!("#{i}"));
        let step = Some(label.as_str());
        draft.unknown_keys(object, STEP_KEYS, step, &path);
        if let Some(name) = &name {
            if let Err(reason) = valid_step_name(name) {
                draft.find(step, format!("{path}.name"), format!("step name {reason}"));
            } else if !seen.insert(name.clone()) {
                draft.find(
                    step,
                    format!("{path}.name"),
                    format!("duplicate step name '{name}': step names must be unique"),
                );
            }
        }
        let sleep = read_sleep(draft, object, step, &path);
        let child = read_child(draft, object, step, &path);
        let completion = match object.get("completion") {
            _ if object.contains_key("sleep") => Completion::Sleep,
            _ if object.contains_key("workflow") => Completion::Child,
            None | Some(Value::Null) => Completion::Call,
            Some(Value::String(s)) if s == "external" => Completion::External,
            Some(Value::String(s)) if s == "event" => Completion::Event,
            Some(Value::String(s)) if s == "call" => Completion::Call,
            Some(other) => {
                draft.find(
                    step,
                    format!("{path}.completion"),
                    format!(
                        "'completion' must be \"call\", \"external\" or \"event\", not {other}"
                    ),
                );
                Completion::Call
            }
        };
        let event = read_event(draft, object, completion, step, &path);
        let target = match completion {
            Completion::Sleep | Completion::Event | Completion::Child => None,
            _ => draft.string(
                object,
                "target",
                completion == Completion::Call,
                step,
                &path,
            ),
        };
        let (method, request_type, response_type) =
            step_types(draft, object, pool, completion, &label, &path);
        let rules = match completion {
            Completion::Sleep | Completion::Event => Vec::new(),
            _ => draft.rules(object, step, &path),
        };
        if !rules.is_empty()
            && method.is_none()
            && !object.contains_key("requestType")
            && object.contains_key("outputType")
            && completion == Completion::External
        {
            draft.find(
                step,
                format!("{path}.rules"),
                "rules build the request the reviewer is shown: declare its type as 'requestType' too, or drop the rules",
            );
        }
        let when = draft
            .string(object, "when", false, step, &path)
            .map(|w| (w, format!("{path}.when")));
        let validate = draft.boolean(object, "validate", step, &path);
        let tls = draft.boolean(object, "tls", step, &path);
        let deadline = draft.deadline(object, step, &path);
        let max_response_bytes = draft.max_response_bytes(object, step, &path);
        let (wait_timeout, on_timeout) = draft.parked_wait(object, completion, step, &path);
        let after = read_after(draft, object, step, &path);
        let map = read_map(draft, object, completion, step, &path);
        let rate_limit = read_rate_limit(draft, object, completion, step, &path);
        let reviewer_sees = read_reviewer_sees(draft, object, completion, step, &path);
        specs.push(StepSpec {
            name: label,
            after,
            map,
            target,
            method,
            request_type,
            response_type,
            rules,
            when,
            completion,
            validate,
            deadline,
            tls,
            max_response_bytes,
            wait_timeout,
            on_timeout,
            sleep,
            event,
            child,
            rate_limit,
            reviewer_sees,
        });
    }
    specs
}

/// A step's method, request type and response type. A called step names a `method`;
/// an external step either names one (never called: its types are used) or declares
/// `outputType`, the type of its answer, and optionally `requestType`, what its rules
/// build for the reviewer to see.
fn step_types(
    draft: &mut Draft<'_>,
    object: &Map<String, Value>,
    pool: Option<&DescriptorPool>,
    completion: Completion,
    label: &str,
    path: &str,
) -> (
    Option<MethodDescriptor>,
    Option<MessageDescriptor>,
    Option<MessageDescriptor>,
) {
    let step = Some(label);
    match completion {
        // The keys it may not have are findings where the sleep is read.
        Completion::Sleep => return (None, None, Some(empty_type())),
        // The child's own types, filled in once its snapshot compiles.
        Completion::Child => return (None, None, None),
        Completion::Event => {
            let response = draft
                .string(object, "outputType", true, step, path)
                .and_then(|name| {
                    let pool = pool?;
                    resolve_message(draft, pool, &name, step, &format!("{path}.outputType"))
                });
            return (None, None, response);
        }
        Completion::Call | Completion::External => {}
    }
    let declares_types = object.contains_key("outputType") || object.contains_key("requestType");
    if completion == Completion::Call || !declares_types {
        if declares_types {
            for key in ["outputType", "requestType"]
                .into_iter()
                .filter(|k| object.contains_key(*k))
            {
                draft.find(
                    step,
                    format!("{path}.{key}"),
                    format!("only an external step declares '{key}': a called step's types are its method's"),
                );
            }
        }
        let method_name = if completion == Completion::Call || object.contains_key("method") {
            draft.string(object, "method", true, step, path)
        } else {
            draft.find(
                step,
                format!("{path}.outputType"),
                "an external step needs 'outputType', the type of the answer (with 'requestType' and 'rules' for what the reviewer is shown), or a 'method' whose types it uses",
            );
            None
        };
        let method = match (pool, &method_name) {
            (Some(pool), Some(m)) => {
                resolve_method(draft, pool, m, label, &format!("{path}.method"))
            }
            _ => None,
        };
        let request = method.as_ref().map(MethodDescriptor::input);
        let response = method.as_ref().map(MethodDescriptor::output);
        return (method, request, response);
    }
    if object.contains_key("method") {
        draft.find(
            step,
            format!("{path}.method"),
            "declare either 'method' or 'outputType'/'requestType' on an external step, not both",
        );
    }
    let mut resolve = |key: &str, required: bool| {
        let name = draft.string(object, key, required, step, path)?;
        let pool = pool?;
        resolve_message(draft, pool, &name, step, &format!("{path}.{key}"))
    };
    let response = resolve("outputType", true);
    let request = resolve("requestType", false);
    (None, request, response)
}

pub(super) fn output_spec(
    draft: &mut Draft<'_>,
    value: &Value,
    pool: Option<&DescriptorPool>,
) -> Option<OutputSpec> {
    let Some(object) = value.as_object() else {
        draft.find(
            None,
            "$.output",
            format!("'output' must be an object, not {}", json_kind(value)),
        );
        return None;
    };
    draft.unknown_keys(object, OUTPUT_KEYS, None, "$.output");
    let type_name = draft.string(object, "type", true, None, "$.output");
    let message = match (pool, &type_name) {
        (Some(pool), Some(name)) => resolve_message(draft, pool, name, None, "$.output.type"),
        _ => None,
    };
    let rules = draft.rules(object, None, "$.output");
    Some(OutputSpec { message, rules })
}
