//! How a segment or a synchronous run ends: [`SegmentOutcome`] and [`SegmentError`],
//! [`RunOutcome`] and [`RunError`].

use prost_reflect::DynamicMessage;
use serde_json::Value;

use super::sink::SinkError;
use super::wait::{WaitKind, WaitingStep};
use crate::checkpoint::Checkpoint;
use crate::failure::StepFailure;

/// The synchronous verb's refusal of a workflow that would park.
pub const SYNC_REFUSAL: &str = "synchronous run-workflow cannot park - submit the workflow as a job (submit-workflow) so complete-step can supply the response";

/// How a segment ended, when it did not fail.
#[derive(Debug, Clone)]
pub enum SegmentOutcome {
    /// Every step ran (or was skipped).
    Completed {
        /// The workflow's output.
        output: DynamicMessage,
        /// The output as proto3 JSON (a segment whose output has none fails instead).
        output_json: Value,
        /// Every checkpoint, prior ones included, in order.
        steps: Vec<Checkpoint>,
    },
    /// Nothing more can run: steps wait (for an answer, a time or an event).
    Parked {
        /// The first step waiting (in declaration order).
        step: String,
        /// Every checkpoint so far, in the order they were recorded.
        steps: Vec<Checkpoint>,
        /// What the step's rules built from the scope, as proto3 JSON: the request its
        /// reviewer is shown. `None` when the step has no request type.
        request: Option<Value>,
        /// What the step waits for.
        kind: WaitKind,
        /// The other steps waiting at the same time (in parallel branches), in
        /// declaration order.
        also_waiting: Vec<WaitingStep>,
    },
}

/// Why a segment stopped early.
#[derive(Debug, thiserror::Error)]
pub enum SegmentError {
    /// A step (or the output mapping) failed.
    #[error(transparent)]
    Failed(#[from] StepFailure),
    /// The sink could not record a checkpoint; the step's response is lost with it.
    #[error("recording the checkpoint of step '{step}' failed: {source}")]
    Checkpoint {
        /// The step whose checkpoint was not recorded.
        step: String,
        /// The sink's error.
        source: SinkError,
    },
    /// The sink refused a step call before it was made
    /// ([`CheckpointSink::before_call`]); nothing was called.
    #[error("step '{step}' was not called: {source}")]
    NotCalled {
        /// The step.
        step: String,
        /// The sink's reason.
        source: SinkError,
    },
}

/// A finished synchronous run.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    /// The workflow's output.
    pub output: DynamicMessage,
    /// The output as proto3 JSON.
    pub output_json: Value,
    /// Every step's checkpoint, in order.
    pub steps: Vec<Checkpoint>,
}

impl RunOutcome {
    /// The output as proto3 JSON.
    pub fn output_json(&self) -> Value {
        self.output_json.clone()
    }
}

/// Why a synchronous run did not finish.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The workflow has an external step; only a job can wait for it.
    #[error("{}", SYNC_REFUSAL)]
    WouldPark,
    /// A step failed.
    #[error(transparent)]
    Failed(#[from] StepFailure),
}
