//! A step that ended, recorded and put in scope ([`Ended`]); a finished map step
//! ([`end_map`]); the workflow's output built from the scope ([`build_output`]).

use prost_reflect::DynamicMessage;

use super::map::Mapping;
use super::outcome::SegmentError;
use super::sink::CheckpointSink;
use crate::checkpoint::Checkpoint;
use crate::compile::{CompiledStep, CompiledWorkflow, encode_json};
use crate::failure::{FailureKind, StepFailure};
use crate::rules::apply_rule;
use crate::scope::Scope;

/// Ends a map step whose calls are all done: records its checkpoint (its list) and
/// puts the list in scope, or answers its failure.
pub(super) async fn end_map<S: CheckpointSink>(
    mapping: Mapping<'_>,
    sink: &mut S,
    scope: &mut Scope,
    steps: &mut Vec<Checkpoint>,
) -> Result<(), SegmentError> {
    let name = mapping.step.name.clone();
    let (checkpoint, list) = mapping.end()?;
    sink.record(&checkpoint)
        .await
        .map_err(|source| SegmentError::Checkpoint {
            step: name.clone(),
            source,
        })?;
    scope.insert_list(&name, list);
    steps.push(checkpoint);
    Ok(())
}

/// A step that ended (called, or skipped by its gate), ready to be recorded.
pub(super) struct Ended<'w> {
    step: &'w CompiledStep,
    checkpoint: Checkpoint,
    /// The response (the output type's default for a skipped step).
    response: DynamicMessage,
}

impl<'w> Ended<'w> {
    /// The checkpoint of `step` that answered `response` (`None`: skipped). No
    /// checkpoint without a faithful encoding: a response with no proto3 JSON form
    /// fails the step here, before anything is stored.
    pub(super) fn new(
        step: &'w CompiledStep,
        response: Option<DynamicMessage>,
    ) -> Result<Self, StepFailure> {
        let Some(response) = response else {
            return Ok(Ended {
                step,
                checkpoint: Checkpoint {
                    name: step.name.clone(),
                    skipped: true,
                    response: None,
                },
                response: DynamicMessage::new(step.output_type()),
            });
        };
        let json = encode_json(&response).map_err(|e| {
            StepFailure::at(
                &step.name,
                FailureKind::Workflow,
                format!("its response cannot be stored: {e}"),
            )
        })?;
        Ok(Ended {
            step,
            checkpoint: Checkpoint {
                name: step.name.clone(),
                skipped: false,
                response: Some(json),
            },
            response,
        })
    }

    /// Records the checkpoint through `sink`, then puts the response in scope for
    /// the steps that wait for it.
    pub(super) async fn record<S: CheckpointSink>(
        self,
        sink: &mut S,
        scope: &mut Scope,
        steps: &mut Vec<Checkpoint>,
    ) -> Result<(), SegmentError> {
        sink.record(&self.checkpoint)
            .await
            .map_err(|source| SegmentError::Checkpoint {
                step: self.step.name.clone(),
                source,
            })?;
        if self.checkpoint.skipped && self.step.map.is_some() {
            scope.insert_skipped_list(&self.step.name);
        } else if self.checkpoint.skipped {
            scope.insert_skipped(&self.step.name, self.response);
        } else {
            scope.insert_step(&self.step.name, self.response);
        }
        steps.push(self.checkpoint);
        Ok(())
    }
}

pub(super) fn build_output(
    workflow: &CompiledWorkflow,
    scope: &Scope,
) -> Result<DynamicMessage, StepFailure> {
    let mapping_failure = |message: String| StepFailure {
        step: None,
        kind: FailureKind::Mapping,
        message,
    };
    match &workflow.output {
        Some(mapping) => {
            let mut output = DynamicMessage::new(mapping.message.clone());
            for rule in &mapping.rules {
                apply_rule(rule, &mut output, scope)
                    .map_err(|e| mapping_failure(format!("output rule '{}': {e}", rule.text)))?;
            }
            Ok(output)
        }
        None => {
            let last = workflow
                .steps
                .last()
                .ok_or_else(|| StepFailure::workflow("the workflow has no steps"))?;
            match scope.read(&last.name, &[]) {
                Ok(prost_reflect::Value::Message(message)) => Ok(message),
                Ok(_) | Err(_) => Err(mapping_failure(format!(
                    "the last step '{}' left no response",
                    last.name
                ))),
            }
        }
    }
}
