//! `submit-workflows {workflow? | workflowName?, submissions: [{workflow? | workflowName?,
//! input, jobId?, maxAttempts?, priority?, runAt? | delayMs?, dedupeKey?, dedupeMode?,
//! dedupeWindowMs?}]}` → `{ok, answers: [{index, ok, jobId, status, created, deduplicated?}
//! | {index, ok: false, error}], created, refused}`.
//!
//! Up to 1,000 submissions in one call and one transaction. Each item is checked and
//! answered on its own, with the error `submit-workflow` would give it (its message
//! prefixed with `submissions[i].`); one bad item never sinks the others. An item
//! without a definition uses the call's.

use std::sync::Arc;

use registry_stub::{ActionError, ActionRequest};
use serde_json::{Value, json};
use uuid::Uuid;

use super::JobsState;
use super::submit::{answered, submit_error};
use crate::submit::{DefinitionSource, Start, Submission, dedupe_of, metadata_of};

/// Longest stored workflow name an item may give (as `submit-workflow` allows).
const MAX_NAME_CHARS: usize = 200;
/// Most attempts an item may ask for (as `submit-workflow` allows).
const MAX_ATTEMPTS: i64 = 100;

/// Handles one call.
pub async fn handle(state: Arc<JobsState>, request: ActionRequest) -> Result<Value, ActionError> {
    let shared = match (request.get("workflow"), request.str("workflowName")) {
        (Some(_), name) if !name.is_empty() => {
            return Err(ActionError::invalid(
                "give at most one shared definition source: an inline workflow, or a stored workflowName",
            ));
        }
        (Some(inline), _) => Some(DefinitionSource::Inline(Arc::new(inline.clone()))),
        (None, "") => None,
        (None, name) => Some(DefinitionSource::Stored(name.to_owned())),
    };
    let items = request
        .get("submissions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let checked: Vec<Result<Submission, ActionError>> = items
        .iter()
        .map(|item| submission(item, shared.as_ref()))
        .collect();
    let good: Vec<Submission> = checked
        .iter()
        .filter_map(|item| item.as_ref().ok().cloned())
        .collect();
    let mut submitted = state.submitter.submit_many(good).await.into_iter();
    let (mut created, mut refused) = (0, 0);
    let answers: Vec<Value> = checked
        .into_iter()
        .enumerate()
        .map(|(index, item)| {
            let answer = item.and_then(|_| match submitted.next() {
                Some(result) => result.map_err(|e| submit_error(&state.submitter, e)),
                None => Err(ActionError::internal("the submission got no answer")),
            });
            match answer {
                Ok(done) => {
                    created += usize::from(done.created);
                    let mut answer = answered(&done);
                    answer["index"] = json!(index);
                    answer["ok"] = json!(true);
                    answer
                }
                Err(error) => {
                    refused += 1;
                    let mut body = error.body();
                    if let Some(message) = body["message"].as_str() {
                        body["message"] = Value::String(format!("submissions[{index}].{message}"));
                    }
                    json!({ "index": index, "ok": false, "error": body })
                }
            }
        })
        .collect();
    Ok(json!({ "ok": true, "answers": answers, "created": created, "refused": refused }))
}

/// One item as a submission, or the error that names its field.
fn submission(item: &Value, shared: Option<&DefinitionSource>) -> Result<Submission, ActionError> {
    let item = &proto3_names(item);
    let text = |field: &str| item.get(field).and_then(Value::as_str).unwrap_or_default();
    let source = match (item.get("workflow"), text("workflowName")) {
        (Some(_), name) if !name.is_empty() => {
            return Err(ActionError::invalid(
                "workflow: give exactly one definition source: an inline workflow, or a stored workflowName",
            ));
        }
        (Some(inline), _) => DefinitionSource::Inline(Arc::new(inline.clone())),
        (None, "") => shared.cloned().ok_or_else(|| {
            ActionError::invalid(
                "workflow: no definition: give the item a workflow or workflowName, or give the call one",
            )
        })?,
        (None, name) if name.chars().count() > MAX_NAME_CHARS => {
            return Err(ActionError::invalid(format!(
                "workflowName: at most {MAX_NAME_CHARS} characters"
            )));
        }
        (None, name) => DefinitionSource::Stored(name.to_owned()),
    };
    let job_id = match text("jobId") {
        "" => None,
        id => Some(
            Uuid::parse_str(id)
                .map_err(|e| ActionError::invalid(format!("jobId: not a uuid: {e}")))?,
        ),
    };
    let max_attempts = match item.get("maxAttempts").and_then(as_integer) {
        None | Some(0) => None,
        Some(n @ 1..=MAX_ATTEMPTS) => i32::try_from(n).ok(),
        Some(n) => {
            return Err(ActionError::invalid(format!(
                "maxAttempts: {n} is outside 0..={MAX_ATTEMPTS}"
            )));
        }
    };
    let priority = match item.get("priority").and_then(as_integer) {
        None => None,
        Some(p @ 0..=9) => i16::try_from(p).ok(),
        Some(p) => {
            return Err(ActionError::invalid(format!(
                "priority: {p} is outside 0..=9 (higher runs first; 5 when absent)"
            )));
        }
    };
    let delay_ms = match item.get("delayMs") {
        None | Some(Value::Null) => 0,
        Some(value) => as_integer(value).ok_or_else(|| {
            ActionError::invalid(format!(
                "delayMs: {value} is not a whole number of milliseconds"
            ))
        })?,
    };
    let start = Start::parse(text("runAt"), delay_ms).map_err(ActionError::invalid)?;
    let window = match item.get("dedupeWindowMs") {
        None | Some(Value::Null) => 0,
        Some(value) => as_integer(value).ok_or_else(|| {
            ActionError::invalid(format!(
                "dedupeWindowMs: {value} is not a whole number of milliseconds"
            ))
        })?,
    };
    let dedupe = dedupe_of(text("dedupeKey"), text("dedupeMode"), window, start)
        .map_err(ActionError::invalid)?;
    let metadata = metadata_of(item.get("metadata")).map_err(ActionError::invalid)?;
    Ok(Submission {
        source,
        input: item.get("input").cloned().unwrap_or_else(|| json!({})),
        job_id,
        max_attempts,
        start,
        priority,
        dedupe,
        metadata,
    })
}

/// An item with its fields under their JSON names, whichever spelling proto3 JSON
/// allowed the caller (`run_at` or `runAt`), the JSON name winning when both are given.
fn proto3_names(item: &Value) -> Value {
    let Some(fields) = item.as_object() else {
        return item.clone();
    };
    let mut named = serde_json::Map::new();
    for (name, value) in fields {
        let json_name = lower_camel(name);
        if json_name == *name || !fields.contains_key(&json_name) {
            named.insert(json_name, value.clone());
        }
    }
    Value::Object(named)
}

fn lower_camel(name: &str) -> String {
    let mut camel = String::with_capacity(name.len());
    let mut upper = false;
    for c in name.chars() {
        match c {
            '_' => upper = true,
            c if upper => {
                camel.extend(c.to_uppercase());
                upper = false;
            }
            c => camel.push(c),
        }
    }
    camel
}

/// A whole number as proto3 JSON writes one: a number, or its decimal string.
fn as_integer(value: &Value) -> Option<i64> {
    value.as_i64().or_else(|| value.as_str()?.parse().ok())
}
