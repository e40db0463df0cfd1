//! Map steps: `"forEach": "input.chunks"` names a repeated field of the input or of
//! an ancestor step (or a whole earlier map step's list), and the step is called once
//! per element, its rules reading the element as `item` and its position as `index`;
//! at most its own `maxParallel` calls at once (default
//! [`DEFAULT_MAX_PARALLEL`](super::DEFAULT_MAX_PARALLEL)); `onItemFailure` says what a
//! failed element does (`"fail"`, the default, or `"collect"`).

use serde_json::{Map, Value};

use crate::compile::draft::{Draft, json_kind};
use crate::compile::graph::read_max_parallel;
use crate::rules::parse_path;
use crate::spec::{Completion, MapSpec, OnItemFailure};

/// Reads a step's `forEach`, `maxParallel` and `onItemFailure`: `None` for a step
/// that is not a map step (the other two keys are findings on it).
pub(super) fn read_map(
    draft: &mut Draft<'_>,
    object: &Map<String, Value>,
    completion: Completion,
    step: Option<&str>,
    path: &str,
) -> Option<MapSpec> {
    let Some(value) = object.get("forEach") else {
        for key in ["maxParallel", "onItemFailure"] {
            if object.contains_key(key) {
                draft.find(
                    step,
                    format!("{path}.{key}"),
                    format!("only a map step declares '{key}': add 'forEach' (the list to call the step for), or drop '{key}'"),
                );
            }
        }
        return None;
    };
    let for_each = format!("{path}.forEach");
    // Sleep and event steps refuse `forEach` where they are read.
    if matches!(completion, Completion::Sleep | Completion::Event) {
        return None;
    }
    if completion == Completion::External {
        draft.find(
            step,
            &for_each,
            "an external step cannot fan out with 'forEach': its one answer comes from complete-step",
        );
        return None;
    }
    let Some(text) = value.as_str() else {
        draft.find(
            step,
            &for_each,
            format!(
                "'forEach' must be a path to a repeated field (\"input.chunks\"), not {}",
                json_kind(value)
            ),
        );
        return None;
    };
    let mut segments = match parse_path(text) {
        Ok(segments) => segments,
        Err(reason) => {
            draft.find(step, &for_each, format!("'forEach': {reason}"));
            return None;
        }
    };
    let root = segments.remove(0);
    let max_parallel = read_max_parallel(draft, object, step, path);
    let on_item_failure = match object.get("onItemFailure") {
        None => OnItemFailure::Fail,
        Some(Value::String(s)) if s == "fail" => OnItemFailure::Fail,
        Some(Value::String(s)) if s == "collect" => OnItemFailure::Collect,
        Some(other) => {
            draft.find(
                step,
                format!("{path}.onItemFailure"),
                format!("'onItemFailure' must be \"fail\" or \"collect\", not {other}"),
            );
            OnItemFailure::Fail
        }
    };
    Some(MapSpec {
        root,
        fields: segments,
        path: for_each,
        max_parallel,
        on_item_failure,
    })
}
