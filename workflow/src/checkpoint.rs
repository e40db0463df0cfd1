//! Checkpoints: one entry per executed step, and their non-trusting replay.
//!
//! ```json
//! { "name": "tokenize", "skipped": false, "response": { "ids": [4811, 9902] } }
//! ```
//!
//! The entries are stored in the order the steps completed. In a chain (no step
//! declares `after`) that is declaration order; in a graph, parallel branches finish
//! in any order, so replay finds each checkpoint by its step's name.
//!
//! Replay is not trusting: each entry must name a step of the workflow, at most once,
//! after the entries of every step it waits for (in a chain: entry *i* names step
//! *i*), every response must parse as its step's output type, and there may not be
//! more entries than steps. A workflow edited under a live job therefore fails loud
//! (a `Workflow` failure saying what drifted) instead of resuming against a shifted
//! scope.

use prost_reflect::DynamicMessage;
use serde_json::{Value, json};

use crate::compile::{CompiledWorkflow, decode_json};
use crate::failure::StepFailure;
use crate::scope::Scope;

/// One executed step, as stored in the job row.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    /// The step's name.
    pub name: String,
    /// True when the step's `when` gate was false.
    pub skipped: bool,
    /// proto3 JSON of the step's output type; `None` for a skipped step.
    pub response: Option<Value>,
}

impl Checkpoint {
    /// The stored JSON form.
    pub fn to_json(&self) -> Value {
        match &self.response {
            Some(response) => {
                json!({ "name": self.name, "skipped": self.skipped, "response": response })
            }
            None => json!({ "name": self.name, "skipped": self.skipped }),
        }
    }
}

/// A stored checkpoint that re-parsed against the workflow.
#[derive(Debug, Clone)]
pub struct ReplayedCheckpoint {
    /// The entry as stored.
    pub checkpoint: Checkpoint,
    /// The response as a message (the output type's default for a skipped step, and
    /// for a map step, whose responses are in `list`).
    pub response: DynamicMessage,
    /// A map step's responses, in element order (`None` for other steps; empty for
    /// a skipped map step).
    pub list: Option<Vec<DynamicMessage>>,
}

impl ReplayedCheckpoint {
    /// Puts the step in `scope` (its response, a map step's list, or, skipped, its
    /// default) and hands the checkpoint back.
    pub fn into_scope(self, scope: &mut Scope) -> Checkpoint {
        let name = &self.checkpoint.name;
        match (self.list, self.checkpoint.skipped) {
            (Some(_), true) => scope.insert_skipped_list(name),
            (Some(list), false) => scope.insert_list(name, list),
            (None, true) => scope.insert_skipped(name, self.response),
            (None, false) => scope.insert_step(name, self.response),
        }
        self.checkpoint
    }
}

/// One element of a map step, as its call ended.
#[derive(Debug, Clone, PartialEq)]
pub enum ItemOutcome {
    /// Its response, as proto3 JSON.
    Response(Value),
    /// Failed for good (kept only with `onItemFailure: "collect"`): the error.
    Failed(String),
}

/// One element of a map step whose step has no checkpoint yet, as stored (a resume
/// calls only the elements without one).
#[derive(Debug, Clone, PartialEq)]
pub struct ItemCheckpoint {
    /// The map step.
    pub step: String,
    /// The element's position in the list.
    pub index: usize,
    /// How its call ended.
    pub outcome: ItemOutcome,
}

/// A map step's checkpoint response: `{"items": [responses in element order],
/// "failed": [{"index", "error"}]}` (`failed` only when elements failed with
/// `onItemFailure: "collect"`).
pub fn map_checkpoint(items: Vec<Value>, failed: &[(usize, String)]) -> Value {
    let mut response = serde_json::Map::new();
    response.insert("items".into(), Value::Array(items));
    if !failed.is_empty() {
        response.insert(
            "failed".into(),
            failed
                .iter()
                .map(|(index, error)| json!({ "index": index, "error": error }))
                .collect(),
        );
    }
    Value::Object(response)
}

/// Re-parses a stored checkpoint array against `workflow`.
pub fn replay_checkpoints(
    workflow: &CompiledWorkflow,
    stored: &Value,
) -> Result<Vec<ReplayedCheckpoint>, StepFailure> {
    const DRIFT: &str = "the stored job no longer matches its workflow";
    let Some(entries) = stored.as_array() else {
        return Err(StepFailure::workflow(format!(
            "stored checkpoints are not an array ({DRIFT})"
        )));
    };
    if entries.len() > workflow.steps.len() {
        return Err(StepFailure::workflow(format!(
            "{} checkpoints are stored but the workflow has only {} steps ({DRIFT})",
            entries.len(),
            workflow.steps.len()
        )));
    }
    let chain = workflow.is_chain();
    let mut done = vec![false; workflow.steps.len()];
    let mut replayed = Vec::with_capacity(entries.len());
    for (i, entry) in entries.iter().enumerate() {
        let position = i + 1;
        let Some(object) = entry.as_object() else {
            return Err(StepFailure::workflow(format!(
                "checkpoint {position} is not an object ({DRIFT})"
            )));
        };
        let name = object
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let step = if chain {
            // A chain's entries are its steps in order (bounded by the length check).
            let step = &workflow.steps[i];
            if name != step.name {
                return Err(StepFailure::workflow(format!(
                    "checkpoint {position} names step '{name}' but step {position} is '{}' ({DRIFT})",
                    step.name
                )));
            }
            step
        } else {
            let Some(step) = workflow.step(name) else {
                return Err(StepFailure::workflow(format!(
                    "checkpoint {position} names step '{name}', which the workflow does not have ({DRIFT})"
                )));
            };
            if done[step.index] {
                return Err(StepFailure::workflow(format!(
                    "checkpoint {position} names step '{name}' a second time ({DRIFT})"
                )));
            }
            if let Some(&missing) = step.after.iter().find(|&&d| !done[d]) {
                return Err(StepFailure::workflow(format!(
                    "checkpoint {position} (step '{name}') comes before any checkpoint of step '{}', which it runs after ({DRIFT})",
                    workflow.steps[missing].name
                )));
            }
            step
        };
        done[step.index] = true;
        let skipped = match object.get("skipped") {
            None => false,
            Some(Value::Bool(b)) => *b,
            Some(other) => {
                return Err(StepFailure::workflow(format!(
                    "checkpoint {position} (step '{name}') has a non-boolean 'skipped': {other}"
                )));
            }
        };
        let output_type = step.output_type();
        let mut map_list = None;
        let (response, json) = match (skipped, object.get("response")) {
            (true, None | Some(Value::Null)) => (DynamicMessage::new(output_type), None),
            (true, Some(_)) => {
                return Err(StepFailure::workflow(format!(
                    "checkpoint {position} (step '{name}') is skipped yet carries a response ({DRIFT})"
                )));
            }
            (false, None | Some(Value::Null)) => {
                return Err(StepFailure::workflow(format!(
                    "checkpoint {position} (step '{name}') has no response ({DRIFT})"
                )));
            }
            (false, Some(json)) if step.map.is_some() => {
                let items = json.get("items").and_then(Value::as_array).ok_or_else(|| {
                    StepFailure::workflow(format!(
                        "checkpoint {position} (map step '{name}') has no 'items' list ({DRIFT})"
                    ))
                })?;
                let mut list = Vec::with_capacity(items.len());
                for (k, item) in items.iter().enumerate() {
                    list.push(decode_json(&output_type, item).map_err(|e| {
                        StepFailure::workflow(format!(
                            "checkpoint {position} (map step '{name}') item {k} does not decode: {e} ({DRIFT})"
                        ))
                    })?);
                }
                map_list = Some(list);
                (DynamicMessage::new(output_type), Some(json.clone()))
            }
            (false, Some(json)) => {
                let message = decode_json(&output_type, json).map_err(|e| {
                    StepFailure::workflow(format!(
                        "checkpoint {position} (step '{name}') does not decode: {e} ({DRIFT})"
                    ))
                })?;
                (message, Some(json.clone()))
            }
        };
        if step.map.is_some() && map_list.is_none() {
            map_list = Some(Vec::new());
        }
        replayed.push(ReplayedCheckpoint {
            checkpoint: Checkpoint {
                name: name.to_owned(),
                skipped,
                response: json,
            },
            response,
            list: map_list,
        });
    }
    Ok(replayed)
}
