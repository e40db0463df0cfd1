//! Flow limits before each call: what the call costs under its step's `rateLimit`,
//! and the sink's admission (the jobs worker's fleet-wide buckets and target caps).

use tokio::time::Instant;

use super::sink::{Admission, CallGuard, CheckpointSink};
use super::{Runner, SegmentError};
use crate::compile::{CompiledStep, CompiledWorkflow};
use crate::scope::Scope;

/// Why a sink's hold-back stopped a segment: it held a call back with no call in
/// flight to wait for (a sink that breaks [`CheckpointSink::admit`]'s contract).
#[derive(Debug, thiserror::Error)]
#[error("the call was held back with no call in flight to wait for")]
struct HeldBackAlone;

impl Runner {
    /// Asks `sink` to admit one call of `step` over `scope` (a map element's with its
    /// item): `Some(guard)` to call now, holding the guard until the call ends;
    /// `None` to hold it back until a call in flight ends. A deferral stops the
    /// segment before the call ([`SegmentError::NotCalled`]).
    pub(super) async fn admit<S: CheckpointSink>(
        &self,
        workflow: &CompiledWorkflow,
        step: &CompiledStep,
        scope: &Scope,
        sink: &mut S,
        others_in_flight: bool,
        segment_end: Instant,
    ) -> Result<Option<CallGuard>, SegmentError> {
        if step.rate_limit.is_none() && !sink.limits(step) {
            return Ok(Some(Box::new(())));
        }
        let caller = self.caller();
        // A step its gate skips makes no call: it takes nothing from the limits (the
        // call evaluates the gate again and skips it; a map step's gate was decided
        // before its elements started).
        if step.map.is_none()
            && step.when.is_some()
            && !caller
                .gate_opens(workflow, step, scope, segment_end)
                .await?
        {
            return Ok(Some(Box::new(())));
        }
        let cost = caller.call_cost(workflow, step, scope, segment_end).await?;
        match sink.admit(step, &cost, others_in_flight).await {
            Admission::Go(guard) => Ok(Some(guard)),
            Admission::HoldBack if others_in_flight => Ok(None),
            Admission::HoldBack => Err(SegmentError::NotCalled {
                step: step.name.clone(),
                source: Box::new(HeldBackAlone),
            }),
            Admission::Defer(source) => Err(SegmentError::NotCalled {
                step: step.name.clone(),
                source,
            }),
        }
    }
}
