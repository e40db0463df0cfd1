//! Where a segment's results go: the [`CheckpointSink`] a caller hands the runner
//! (the jobs worker's writes to the job row; nothing for a synchronous run).

use std::future::Future;

use super::cost::CallCost;
use super::wait::Wake;
use crate::checkpoint::{Checkpoint, ItemOutcome};
use crate::compile::CompiledStep;

/// Any error a checkpoint sink reports.
pub type SinkError = Box<dyn std::error::Error + Send + Sync>;

/// Where a segment's checkpoints go, one at a time, before the next step runs.
pub trait CheckpointSink: Send {
    /// Persists one checkpoint. An error stops the segment with
    /// [`SegmentError::Checkpoint`]; the caller decides what that means.
    fn record(
        &mut self,
        checkpoint: &Checkpoint,
    ) -> impl Future<Output = Result<(), SinkError>> + Send;

    /// Asked just before each step call: an error stops the segment before the call,
    /// as a failed [`record`](Self::record) does. The jobs worker refuses once its
    /// claim may have lapsed by its own clock (a process frozen past its lease must
    /// not call a step another node may have run since). Calls are allowed by default.
    fn before_call(&mut self, step: &str) -> Result<(), SinkError> {
        let _ = step;
        Ok(())
    }

    /// Asked before a step call that would run beside calls already in flight (the
    /// first call of a segment is never asked): `Some(guard)` lets it start, the
    /// guard held until the call ends; `None` holds it back until a call in flight
    /// ends. The jobs worker answers with a per-target permit taken without waiting
    /// (a segment that waited while holding a permit could wait on another segment
    /// waiting on it). Every call is let through by default.
    fn beside_others(&mut self, step: &CompiledStep) -> Option<CallGuard> {
        let _ = step;
        Some(Box::new(()))
    }

    /// Whether the sink holds limits of its own on calls of `step` (beyond the step's
    /// `rateLimit`): when neither applies, [`admit`](Self::admit) is not asked. None
    /// by default.
    fn limits(&self, step: &CompiledStep) -> bool {
        let _ = step;
        false
    }

    /// Asked before each step call (each element of a map step), after
    /// [`before_call`](Self::before_call): may the call be made now under the
    /// fleet's flow limits? `cost` is what the step's `rateLimit` says it costs
    /// (its key and units, computed over the call's scope; one unit without a
    /// limit); `others_in_flight` says whether calls of this segment are in flight.
    /// The jobs worker takes tokens from the fleet's buckets here, waiting briefly
    /// when the next token is near; it answers [`Admission::HoldBack`] only while
    /// others are in flight, and [`Admission::Defer`] only when none are. Every call
    /// is admitted by default.
    fn admit(
        &mut self,
        step: &CompiledStep,
        cost: &CallCost,
        others_in_flight: bool,
    ) -> impl Future<Output = Admission> + Send {
        let _ = (step, cost, others_in_flight);
        std::future::ready(Admission::Go(Box::new(())))
    }

    /// Persists how elements of map step `step` ended (by position in its list: the
    /// response, or with `onItemFailure: "collect"` the error), before their slots go
    /// to new calls: a later segment calls only the elements with none. The elements
    /// whose calls ended together come in one call. An error stops the segment as a
    /// failed [`record`](Self::record) does. Nothing is kept by default.
    fn record_items(
        &mut self,
        step: &CompiledStep,
        items: &[(usize, ItemOutcome)],
    ) -> impl Future<Output = Result<(), SinkError>> + Send {
        let _ = (step, items);
        std::future::ready(Ok(()))
    }

    /// Asked when sleep step `step` is reached: true when its sleep is over by the
    /// store's clock (the wake time fixed when the job first parked on it, or `wake`
    /// itself when that is a time), and the step is then done; false parks the job
    /// on it. The jobs worker answers from the wake times its claim read and the
    /// database's time of the claim, so a job never wakes early. No sleep is over by
    /// default (a synchronous run refuses a workflow that would sleep).
    fn slept(&mut self, step: &CompiledStep, wake: Wake) -> bool {
        let _ = (step, wake);
        false
    }
}

/// What [`CheckpointSink::beside_others`] hands a call to hold while it runs.
pub type CallGuard = Box<dyn Send>;

/// The sink's answer to [`CheckpointSink::admit`].
pub enum Admission {
    /// Call now, holding the guard until the call ends.
    Go(CallGuard),
    /// Not now: start it again once a call in flight ends.
    HoldBack,
    /// Not in this segment: it stops before the call with
    /// [`SegmentError::NotCalled`](crate::SegmentError::NotCalled) carrying this
    /// error (the jobs worker defers the job to when the limit has room).
    Defer(SinkError),
}
