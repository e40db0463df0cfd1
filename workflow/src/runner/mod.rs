//! Running workflows: one segment at a time for jobs, all at once for `run-workflow`.
//!
//! A segment rebuilds the scope from the prior checkpoints (already replayed by the
//! caller) and runs every step whose dependencies are done, several at once when the
//! workflow's graph allows (see [`Runner::run_segment`]); for each step it evaluates its
//! `when` gate (off the async threads, within the smaller of
//! [`crate::gate::GATE_TIME_LIMIT`] and what is left of the segment), builds the
//! request with its rules, calls the target within the smaller of the step's deadline
//! and what is left of the segment's, checks the response when the step asks for
//! `validate` (off the async threads too, within [`crate::compile::RULES_TIME_LIMIT`]),
//! and hands the
//! checkpoint to the caller's [`CheckpointSink`] **before** any step that waits for
//! it runs. It stops when steps wait (for an answer, a time or an event: see
//! [`WaitKind`]) and nothing else can run (`Parked`), at the end (`Completed`), or at
//! a failure.
//!
//! | module    | concept                                                                |
//! |-----------|------------------------------------------------------------------------|
//! | this one  | the segment: which steps are ready, how many run at once, what is recorded |
//! | `sink`    | where checkpoints go: [`CheckpointSink`]                                |
//! | `call`    | one step call: gate, request, call, response check, and their failures |
//! | `map`     | a map step's elements: which to call, how they ended                   |
//! | `wait`    | what a parked step waits for: an answer, a time, an event, children    |
//! | `child`   | a child step: done when its children ended, else the ones to start     |
//! | `ended`   | a step that ended, recorded and put in scope; the workflow's output    |
//! | `outcome` | how a segment or a synchronous run ends                                |

mod admit;
mod call;
mod child;
mod cost;
mod ended;
mod map;
mod outcome;
mod sink;
mod wait;

use std::sync::Arc;

use futures_util::stream::FuturesUnordered;
use futures_util::{FutureExt, StreamExt};
use prost_reflect::DynamicMessage;
use tokio::time::Instant;
use tracing::Instrument;

use call::Caller;
pub use call::{CallMetadata, MAX_EVENT_KEY_CHARS, NoMetadata, code_name, event_key_problem};
pub use cost::CallCost;
use ended::{Ended, build_output, end_map};
use map::Mapping;
pub use map::{DEFAULT_MAX_MAP_ITEMS, list_length};
pub use outcome::{RunError, RunOutcome, SYNC_REFUSAL, SegmentError, SegmentOutcome};
pub use sink::{Admission, CallGuard, CheckpointSink, SinkError};
pub use wait::{WaitKind, WaitingStep, Wake};

use crate::checkpoint::{Checkpoint, ItemCheckpoint, ItemOutcome, ReplayedCheckpoint};
use crate::compile::{CompiledStep, CompiledWorkflow, Completion, empty_type, encode_json};
use crate::failure::{FailureKind, StepFailure};
use crate::grpc::GrpcClient;
use crate::outbound::OutboundPolicy;
use crate::scope::Scope;

/// The largest step response a runner accepts unless configured otherwise (tonic's
/// own default).
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 4 * 1024 * 1024;

/// Runs compiled workflows; holds the gRPC channel cache (and the TLS settings per
/// target), so share one per process.
pub struct Runner {
    grpc: GrpcClient,
    max_response_bytes: usize,
    max_map_items: usize,
    outbound: Arc<OutboundPolicy>,
}

impl Default for Runner {
    fn default() -> Self {
        Runner {
            grpc: GrpcClient::default(),
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            max_map_items: DEFAULT_MAX_MAP_ITEMS,
            outbound: Arc::new(OutboundPolicy::unrestricted()),
        }
    }
}

struct Discard;

impl CheckpointSink for Discard {
    async fn record(&mut self, _checkpoint: &Checkpoint) -> Result<(), SinkError> {
        Ok(())
    }
}

impl Runner {
    /// What one step call needs of the runner.
    fn caller(&self) -> Caller<'_> {
        Caller {
            grpc: &self.grpc,
            outbound: &self.outbound,
            max_response_bytes: self.max_response_bytes,
        }
    }

    /// Evaluates `step`'s `when` gate; a closed gate records the step as skipped
    /// (its checkpoint, its default in scope) and answers true.
    async fn skipped_by_gate<S: CheckpointSink>(
        &self,
        workflow: &CompiledWorkflow,
        step: &CompiledStep,
        scope: &mut Scope,
        steps: &mut Vec<Checkpoint>,
        sink: &mut S,
        segment_end: Instant,
    ) -> Result<bool, SegmentError> {
        if self
            .caller()
            .gate_opens(workflow, step, scope, segment_end)
            .await?
        {
            return Ok(false);
        }
        Ended::new(step, None)?.record(sink, scope, steps).await?;
        Ok(true)
    }

    /// A runner with an empty channel cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// TLS steps reach the targets each entry matches with its CA bundle and client
    /// certificate (the first match applies; the public roots otherwise).
    pub fn with_tls_targets(mut self, tls: Vec<crate::grpc::TlsTarget>) -> Self {
        self.grpc = GrpcClient::with_tls(tls).with_outbound(self.outbound.clone());
        self
    }

    /// Calls only what `policy` allows: before each call a step is checked against it
    /// (a step it forbids fails with a `WORKFLOW` failure, not retried, and nothing is
    /// sent), and connections go only to the addresses it allows.
    pub fn with_outbound(mut self, policy: OutboundPolicy) -> Self {
        self.outbound = Arc::new(policy);
        self.grpc = std::mem::take(&mut self.grpc).with_outbound(self.outbound.clone());
        self
    }

    /// The outbound policy, for the checks made when a workflow is accepted
    /// ([`OutboundPolicy::findings`]).
    pub fn outbound(&self) -> Arc<OutboundPolicy> {
        self.outbound.clone()
    }

    /// Lets a map step fan out over at most `items` elements; a longer list fails the
    /// step, naming both numbers.
    pub fn with_max_map_items(mut self, items: usize) -> Self {
        self.max_map_items = items;
        self
    }

    /// Accepts step responses up to `bytes` (a step's `maxResponseBytes` overrides
    /// it); larger ones fail the step, naming both settings.
    pub fn with_max_response_bytes(mut self, bytes: usize) -> Self {
        self.max_response_bytes = bytes;
        self
    }

    /// Runs the whole workflow in one segment. Reaching an external step (one whose
    /// `when` gate, if any, is open) refuses the run: only a job can wait for it. A
    /// gate that skips the external step lets the run go on.
    pub async fn run(
        &self,
        workflow: &CompiledWorkflow,
        input: &DynamicMessage,
    ) -> Result<RunOutcome, RunError> {
        match self
            .run_segment(workflow, input, Vec::new(), &mut Discard, &NoMetadata)
            .await
        {
            Ok(SegmentOutcome::Completed {
                output,
                output_json,
                steps,
            }) => Ok(RunOutcome {
                output,
                output_json,
                steps,
            }),
            Ok(SegmentOutcome::Parked { .. }) => Err(RunError::WouldPark),
            Err(SegmentError::Failed(failure)) => Err(RunError::Failed(failure)),
            Err(
                SegmentError::Checkpoint { step, source }
                | SegmentError::NotCalled { step, source },
            ) => Err(RunError::Failed(StepFailure::at(
                &step,
                FailureKind::Workflow,
                source.to_string(),
            ))),
        }
    }

    /// Runs one segment: resumes after `prior`, runs every step whose dependencies
    /// are done (at most the workflow's `maxParallel` steps at once), records each new
    /// checkpoint through `sink` as its step completes and before any step that waits
    /// for it starts, and stops when every step is done or nothing more can run
    /// because external steps wait.
    ///
    /// A failure in one branch: a retryable one lets the calls already in flight
    /// finish (their checkpoints are recorded) and starts nothing more, then returns
    /// the failure, so the retry runs only what is missing; any other failure (a
    /// verdict, a defect, a non-retryable status) returns at once, abandoning the calls
    /// in flight, whose responses are never recorded.
    pub async fn run_segment<S: CheckpointSink>(
        &self,
        workflow: &CompiledWorkflow,
        input: &DynamicMessage,
        prior: Vec<ReplayedCheckpoint>,
        sink: &mut S,
        metadata: &dyn CallMetadata,
    ) -> Result<SegmentOutcome, SegmentError> {
        self.resume_segment(workflow, input, prior, &[], sink, metadata)
            .await
    }

    /// [`Runner::run_segment`] with the elements of unfinished map steps that an
    /// earlier segment stored (`items`): those elements are not called again. Each
    /// element called is recorded through [`CheckpointSink::record_items`] as its call
    /// ends; a map step's own checkpoint (its list) once every element is done.
    pub async fn resume_segment<S: CheckpointSink>(
        &self,
        workflow: &CompiledWorkflow,
        input: &DynamicMessage,
        prior: Vec<ReplayedCheckpoint>,
        items: &[ItemCheckpoint],
        sink: &mut S,
        metadata: &dyn CallMetadata,
    ) -> Result<SegmentOutcome, SegmentError> {
        let segment_end = Instant::now() + self.outbound.segment_limit(workflow.deadline);
        let mut scope = Scope::new(input.clone());
        let mut steps = Vec::with_capacity(workflow.steps.len());
        let mut state = vec![StepState::Pending; workflow.steps.len()];
        for replayed in prior {
            if let Some(step) = workflow.step(&replayed.checkpoint.name) {
                state[step.index] = StepState::Done;
            }
            steps.push(replayed.into_scope(&mut scope));
        }
        // One call of a step, or of one element of a map step, with its own copy of
        // the scope (messages are shared, so the copy costs a reference count per
        // root): the scope grows as siblings end.
        let call = |index: usize,
                    element: Option<(usize, prost_reflect::Value)>,
                    scope: Scope,
                    guard: Option<CallGuard>| {
            let step = &workflow.steps[index];
            let element_index = element.as_ref().map(|(k, _)| *k);
            // A span per step call: the metadata is made inside it, so a caller
            // tracing across processes can send the call's own trace context.
            let span = tracing::info_span!(
                "step",
                otel.kind = "client",
                step = %step.name,
                item = element_index,
                target = step.target.as_deref().unwrap_or_default()
            );
            async move {
                let _guard = guard;
                let caller = self.caller();
                let called = match element {
                    None => {
                        caller
                            .run_step(workflow, step, &scope, segment_end, metadata)
                            .instrument(span)
                            .await
                    }
                    Some((k, value)) => {
                        let scope = scope.with_item(value, k);
                        let headers = span.in_scope(|| metadata.for_item(step, k));
                        caller
                            .call_step(workflow, step, &scope, segment_end, headers)
                            .instrument(span)
                            .await
                            .map(Some)
                    }
                };
                (index, element_index, called)
            }
        };
        let mut in_flight = FuturesUnordered::new();
        let mut mappings: Vec<Mapping> = Vec::new();
        let mut running_steps = 0usize;
        let mut waiting: Vec<WaitingStep> = Vec::new();
        let mut retryable: Option<StepFailure> = None;
        loop {
            // Start what is ready: the next elements of running map steps, then the
            // steps whose dependencies are done, in declaration order; nothing new
            // once a branch failed (retryably, or an element for good) and the segment
            // only lets the calls in flight end.
            'start: while retryable.is_none() && !mappings.iter().any(Mapping::failing) {
                for mapping in &mut mappings {
                    while mapping.has_more() {
                        let guard = match in_flight.is_empty() {
                            true => None,
                            false => match sink.beside_others(mapping.step) {
                                Some(guard) => Some(guard),
                                None => break 'start,
                            },
                        };
                        sink.before_call(&mapping.step.name).map_err(|source| {
                            SegmentError::NotCalled {
                                step: mapping.step.name.clone(),
                                source,
                            }
                        })?;
                        let Some(element) = mapping.next_element() else {
                            break;
                        };
                        let item_scope = scope.with_item(element.1.clone(), element.0);
                        let admitted = self
                            .admit(
                                workflow,
                                mapping.step,
                                &item_scope,
                                sink,
                                !in_flight.is_empty(),
                                segment_end,
                            )
                            .await?;
                        let Some(limits) = admitted else {
                            mapping.put_back(element.0);
                            break 'start;
                        };
                        in_flight.push(call(
                            mapping.step.index,
                            Some(element),
                            scope.clone(),
                            Some(Box::new((guard, limits))),
                        ));
                    }
                }
                if running_steps >= workflow.max_parallel.max(1) {
                    break;
                }
                let Some(step) = next_ready(workflow, &state) else {
                    break;
                };
                if step.completion == Completion::Child {
                    if self
                        .skipped_by_gate(workflow, step, &mut scope, &mut steps, sink, segment_end)
                        .await?
                    {
                        state[step.index] = StepState::Done;
                        continue;
                    }
                    match child::reach_child(
                        step,
                        &mut scope,
                        &mut steps,
                        items,
                        self.max_map_items,
                        sink,
                    )
                    .await?
                    {
                        None => state[step.index] = StepState::Done,
                        Some(waits) => {
                            state[step.index] = StepState::Waiting;
                            waiting.push(waits);
                        }
                    }
                    continue;
                }
                if step.map.is_some() {
                    if self
                        .skipped_by_gate(workflow, step, &mut scope, &mut steps, sink, segment_end)
                        .await?
                    {
                        state[step.index] = StepState::Done;
                        continue;
                    }
                    let mapping = Mapping::start(step, &scope, items, self.max_map_items)?;
                    state[step.index] = StepState::Running;
                    running_steps += 1;
                    if mapping.ended() {
                        running_steps -= 1;
                        end_map(mapping, sink, &mut scope, &mut steps).await?;
                        state[step.index] = StepState::Done;
                    } else {
                        mappings.push(mapping);
                    }
                    continue;
                }
                if step.is_called() {
                    let guard = if in_flight.is_empty() {
                        None
                    } else {
                        match sink.beside_others(step) {
                            Some(guard) => Some(guard),
                            None => break,
                        }
                    };
                    sink.before_call(&step.name)
                        .map_err(|source| SegmentError::NotCalled {
                            step: step.name.clone(),
                            source,
                        })?;
                    let admitted = self
                        .admit(
                            workflow,
                            step,
                            &scope,
                            sink,
                            !in_flight.is_empty(),
                            segment_end,
                        )
                        .await?;
                    let Some(limits) = admitted else {
                        break;
                    };
                    state[step.index] = StepState::Running;
                    running_steps += 1;
                    in_flight.push(call(
                        step.index,
                        None,
                        scope.clone(),
                        Some(Box::new((guard, limits))),
                    ));
                    continue;
                }
                // A step that parks the job waits only when its gate (if any) is open; a
                // closed gate skips it like any other step. A sleep whose time has come
                // is done, answering `google.protobuf.Empty`.
                if self
                    .skipped_by_gate(workflow, step, &mut scope, &mut steps, sink, segment_end)
                    .await?
                {
                    state[step.index] = StepState::Done;
                    continue;
                }
                let waits =
                    wait::waiting_for(&self.caller(), workflow, step, &scope, segment_end).await?;
                if let WaitKind::Sleep(wake) = waits.kind
                    && sink.slept(step, wake)
                {
                    let done = Ended::new(step, Some(DynamicMessage::new(empty_type())))?;
                    done.record(sink, &mut scope, &mut steps).await?;
                    state[step.index] = StepState::Done;
                    continue;
                }
                state[step.index] = StepState::Waiting;
                waiting.push(waits);
            }
            let Some(first) = in_flight.next().await else {
                break;
            };
            // Every call that has ended by now, so a map step's elements are recorded
            // together: one write for many elements, and no element's slot is given
            // to a new call before its record lands.
            let mut ended = vec![first];
            while let Some(Some(more)) = in_flight.next().now_or_never() {
                ended.push(more);
            }
            let mut elements: Vec<(usize, usize, ItemOutcome)> = Vec::new();
            // A permanent failure ends the segment, but only once the elements that
            // ended beside it are recorded: they are not called again.
            let mut permanent: Option<StepFailure> = None;
            for (index, element, called) in ended {
                let step = &workflow.steps[index];
                let Some(k) = element else {
                    running_steps -= 1;
                    match called {
                        Ok(response) if permanent.is_none() => {
                            let done = Ended::new(step, response)?;
                            done.record(sink, &mut scope, &mut steps).await?;
                            state[index] = StepState::Done;
                        }
                        // Abandoned with the segment: not recorded.
                        Ok(_) => {}
                        Err(failure) if failure.is_retryable() => {
                            state[index] = StepState::Pending;
                            retryable.get_or_insert(failure);
                        }
                        Err(failure) => {
                            permanent.get_or_insert(failure);
                        }
                    }
                    continue;
                };
                let Some(mapping) = mappings.iter_mut().find(|m| m.step.index == index) else {
                    continue;
                };
                let stored = match called {
                    Ok(Some(response)) => match mapping.answered(k, response) {
                        Ok(outcome) => Some(outcome),
                        Err(failure) => mapping.failed(k, failure),
                    },
                    // An element's call never skips (its gate was the step's); were
                    // it to, the element is called again.
                    Ok(None) => {
                        mapping.interrupted(k);
                        None
                    }
                    Err(failure) if failure.is_retryable() => {
                        mapping.interrupted(k);
                        retryable.get_or_insert(failure);
                        None
                    }
                    Err(failure) => mapping.failed(k, failure),
                };
                if let Some(outcome) = stored {
                    elements.push((index, k, outcome));
                }
            }
            let mut at = 0;
            while at < mappings.len() {
                let step = mappings[at].step;
                let recorded: Vec<(usize, ItemOutcome)> = elements
                    .iter()
                    .filter(|(index, ..)| *index == step.index)
                    .map(|(_, k, outcome)| (*k, outcome.clone()))
                    .collect();
                if !recorded.is_empty() {
                    sink.record_items(step, &recorded).await.map_err(|source| {
                        SegmentError::Checkpoint {
                            step: step.name.clone(),
                            source,
                        }
                    })?;
                }
                if permanent.is_none() && mappings[at].ended() {
                    let mapping = mappings.swap_remove(at);
                    running_steps -= 1;
                    end_map(mapping, sink, &mut scope, &mut steps).await?;
                    state[step.index] = StepState::Done;
                } else {
                    at += 1;
                }
            }
            if let Some(failure) = permanent {
                return Err(failure.into());
            }
        }
        if let Some(failure) = retryable {
            return Err(failure.into());
        }
        if !waiting.is_empty() {
            let first = waiting.remove(0);
            return Ok(SegmentOutcome::Parked {
                step: first.step,
                steps,
                request: first.request,
                kind: first.kind,
                also_waiting: waiting,
            });
        }
        let output = build_output(workflow, &scope)?;
        let output_json = encode_json(&output).map_err(|e| StepFailure {
            step: None,
            kind: FailureKind::Mapping,
            message: format!("the output cannot be stored: {e}"),
        })?;
        Ok(SegmentOutcome::Completed {
            output,
            output_json,
            steps,
        })
    }
}

/// Where a step of a running segment stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StepState {
    /// Not started: its dependencies are not all done, or it is next.
    Pending,
    /// Its call is in flight.
    Running,
    /// Its checkpoint is recorded (called or skipped).
    Done,
    /// An external step whose answer the job waits for.
    Waiting,
}

/// The first step, in declaration order, that has not started and whose
/// dependencies are all done.
fn next_ready<'w>(workflow: &'w CompiledWorkflow, state: &[StepState]) -> Option<&'w CompiledStep> {
    workflow.steps.iter().find(|step| {
        state[step.index] == StepState::Pending
            && step.after.iter().all(|&d| state[d] == StepState::Done)
    })
}
