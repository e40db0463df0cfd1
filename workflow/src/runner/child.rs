//! A child step reached by a segment: done when every element's child has ended (its
//! outcome stored by the store as the element's row), failing with the first child
//! that did not complete under `onItemFailure: "fail"`, and otherwise waiting on the
//! children to have running: at most `maxParallel` of the elements not ended yet,
//! each with the input the step's rules build for it.

use prost_reflect::DynamicMessage;

use super::call::build_request;
use super::ended::{Ended, end_map};
use super::map::Mapping;
use super::outcome::SegmentError;
use super::sink::CheckpointSink;
use super::wait::{WaitKind, WaitingStep};
use crate::checkpoint::{Checkpoint, ItemCheckpoint, ItemOutcome};
use crate::compile::{CompiledStep, OnItemFailure, decode_json, encode_json};
use crate::failure::{FailureKind, StepFailure};
use crate::scope::Scope;

/// What a child step comes to: `None` when it is done (its checkpoint recorded and
/// in scope), else what the job waits on.
pub(super) async fn reach_child<S: CheckpointSink>(
    step: &CompiledStep,
    scope: &mut Scope,
    steps: &mut Vec<Checkpoint>,
    items: &[ItemCheckpoint],
    max_items: usize,
    sink: &mut S,
) -> Result<Option<WaitingStep>, SegmentError> {
    let Some(child) = &step.child else {
        return Err(StepFailure::at(&step.name, FailureKind::Workflow, "not a child step").into());
    };
    let child_failed =
        |error: &str| StepFailure::at(&step.name, FailureKind::Child, error.to_owned());
    let input = |scope: &Scope| -> Result<serde_json::Value, StepFailure> {
        let request = build_request(step, scope)?
            .unwrap_or_else(|| DynamicMessage::new(child.compiled.input_type.clone()));
        encode_json(&request).map_err(|e| {
            StepFailure::at(
                &step.name,
                FailureKind::Mapping,
                format!("the child's input its rules build cannot be stored: {e}"),
            )
        })
    };
    let starts = if step.map.is_some() {
        let mapping = Mapping::start(step, scope, items, max_items)?;
        let collect = step
            .map
            .as_ref()
            .is_some_and(|m| m.on_item_failure == OnItemFailure::Collect);
        if let Some((_, error)) = mapping.stored_failure().filter(|_| !collect) {
            return Err(child_failed(error).into());
        }
        if mapping.ended() {
            end_map(mapping, sink, scope, steps).await?;
            return Ok(None);
        }
        let at_once = step.map.as_ref().map_or(1, |m| m.max_parallel.max(1));
        let mut starts = Vec::new();
        for (index, value) in mapping.unended().take(at_once) {
            starts.push((index, input(&scope.with_item(value.clone(), index))?));
        }
        starts
    } else {
        match items
            .iter()
            .find(|item| item.step == step.name && item.index == 0)
        {
            Some(ItemCheckpoint {
                outcome: ItemOutcome::Response(json),
                ..
            }) => {
                let response = decode_json(&step.output_type(), json).map_err(|e| {
                    StepFailure::at(
                        &step.name,
                        FailureKind::Workflow,
                        format!(
                            "the child's stored result does not decode as {}: {e}",
                            step.output_type().full_name()
                        ),
                    )
                })?;
                Ended::new(step, Some(response))?
                    .record(sink, scope, steps)
                    .await?;
                return Ok(None);
            }
            Some(ItemCheckpoint {
                outcome: ItemOutcome::Failed(error),
                ..
            }) => return Err(child_failed(error).into()),
            None => vec![(0, input(scope)?)],
        }
    };
    Ok(Some(WaitingStep {
        step: step.name.clone(),
        request: None,
        kind: WaitKind::Child {
            workflow: child.workflow.clone(),
            starts,
        },
    }))
}
