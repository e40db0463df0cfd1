//! Running workflows: one segment at a time for jobs, all at once for `run-workflow`.
//!
//! A segment rebuilds the scope from the prior checkpoints (already replayed by the
//! caller), resumes at the first missing step, and for each step: evaluates its
//! `when` gate (off the async threads, within the smaller of
//! [`crate::gate::GATE_TIME_LIMIT`] and what is left of the segment), builds the
//! request with its rules, calls the target within the smaller of the step's deadline
//! and what is left of the segment's, checks the response when the step asks for
//! `validate` (off the async threads too, within [`RULES_TIME_LIMIT`]), and hands the
//! checkpoint to the caller's [`CheckpointSink`] **before** the next step runs. It
//! stops at an external step (`Parked`), at the end (`Completed`), or at the first
//! failure.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

use prost_reflect::DynamicMessage;
use serde_json::Value;
use tokio::time::Instant;

use crate::checkpoint::{Checkpoint, ReplayedCheckpoint};
use crate::compile::{CompiledStep, CompiledWorkflow, RULES_TIME_LIMIT, encode_json};
use crate::failure::{FailureKind, StepFailure};
use crate::gate::GATE_TIME_LIMIT;
use crate::grpc::{Call, CallError, GrpcClient};
use crate::outbound::OutboundPolicy;
use crate::rules::apply_rule;
use crate::scope::Scope;

/// The synchronous verb's refusal of a workflow that would park.
pub const SYNC_REFUSAL: &str = "synchronous run-workflow cannot park - submit the workflow as a job (submit-workflow) so complete-step can supply the response";

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
}

/// gRPC metadata the caller attaches to each step call (the jobs worker sends the job
/// id, the step, the attempt and an idempotency key; the synchronous verb sends none).
pub trait CallMetadata: Send + Sync {
    /// The headers for a call of `step`.
    fn for_step(&self, step: &CompiledStep) -> Vec<(String, String)>;
}

/// No metadata at all.
pub struct NoMetadata;

impl CallMetadata for NoMetadata {
    fn for_step(&self, _step: &CompiledStep) -> Vec<(String, String)> {
        Vec::new()
    }
}

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
    /// The run reached an external step and waits for its response.
    Parked {
        /// The external step.
        step: String,
        /// Every checkpoint so far, in order.
        steps: Vec<Checkpoint>,
        /// What the step's rules built from the scope, as proto3 JSON: the request its
        /// reviewer is shown. `None` when the step has no request type.
        request: Option<Value>,
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

/// The largest step response a runner accepts unless configured otherwise (tonic's
/// own default).
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 4 * 1024 * 1024;

/// Runs compiled workflows; holds the gRPC channel cache (and the TLS settings per
/// target), so share one per process.
pub struct Runner {
    grpc: GrpcClient,
    max_response_bytes: usize,
    outbound: Arc<OutboundPolicy>,
}

impl Default for Runner {
    fn default() -> Self {
        Runner {
            grpc: GrpcClient::default(),
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
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

    /// Runs one segment: resumes after `prior`, records each new checkpoint through
    /// `sink` before the next step, and stops at an external step or the end.
    pub async fn run_segment<S: CheckpointSink>(
        &self,
        workflow: &CompiledWorkflow,
        input: &DynamicMessage,
        prior: Vec<ReplayedCheckpoint>,
        sink: &mut S,
        metadata: &dyn CallMetadata,
    ) -> Result<SegmentOutcome, SegmentError> {
        let segment_end = Instant::now() + self.outbound.segment_limit(workflow.deadline);
        let mut scope = Scope::new(input.clone());
        let mut steps = Vec::with_capacity(workflow.steps.len());
        for replayed in prior {
            if replayed.checkpoint.skipped {
                scope.insert_skipped(&replayed.checkpoint.name, replayed.response);
            } else {
                scope.insert_step(&replayed.checkpoint.name, replayed.response);
            }
            steps.push(replayed.checkpoint);
        }
        for step in workflow.steps.iter().skip(steps.len()) {
            // An external step parks only when its gate (if any) is open; a closed gate
            // skips it like any other step.
            let called = if step.is_external() {
                if self.gate_opens(workflow, step, &scope, segment_end).await? {
                    let request = match build_request(step, &scope)? {
                        Some(request) => Some(encode_json(&request).map_err(|e| {
                            StepFailure::at(
                                &step.name,
                                FailureKind::Mapping,
                                format!("the request its rules build cannot be stored: {e}"),
                            )
                        })?),
                        None => None,
                    };
                    return Ok(SegmentOutcome::Parked {
                        step: step.name.clone(),
                        steps,
                        request,
                    });
                }
                None
            } else {
                // A span per step call: the metadata is made inside it, so a caller
                // tracing across processes can send the call's own trace context.
                let span = tracing::info_span!(
                    "step",
                    otel.kind = "client",
                    step = %step.name,
                    target = step.target.as_deref().unwrap_or_default()
                );
                sink.before_call(&step.name)
                    .map_err(|source| SegmentError::NotCalled {
                        step: step.name.clone(),
                        source,
                    })?;
                self.run_step(workflow, step, &scope, segment_end, metadata)
                    .instrument(span)
                    .await?
            };
            let (checkpoint, response) = match called {
                Some(response) => {
                    // No checkpoint without a faithful encoding: a response with no
                    // proto3 JSON form fails the step here, before anything is stored.
                    let json = encode_json(&response).map_err(|e| {
                        StepFailure::at(
                            &step.name,
                            FailureKind::Workflow,
                            format!("its response cannot be stored: {e}"),
                        )
                    })?;
                    (
                        Checkpoint {
                            name: step.name.clone(),
                            skipped: false,
                            response: Some(json),
                        },
                        response,
                    )
                }
                None => (
                    Checkpoint {
                        name: step.name.clone(),
                        skipped: true,
                        response: None,
                    },
                    DynamicMessage::new(step.output_type()),
                ),
            };
            sink.record(&checkpoint)
                .await
                .map_err(|source| SegmentError::Checkpoint {
                    step: step.name.clone(),
                    source,
                })?;
            if checkpoint.skipped {
                scope.insert_skipped(&step.name, response);
            } else {
                scope.insert_step(&step.name, response);
            }
            steps.push(checkpoint);
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

    /// Evaluates `step`'s `when` gate (true without one), bounded by its time limit
    /// and what is left of the segment.
    async fn gate_opens(
        &self,
        workflow: &CompiledWorkflow,
        step: &CompiledStep,
        scope: &Scope,
        segment_end: Instant,
    ) -> Result<bool, StepFailure> {
        let Some(gate) = &step.when else {
            return Ok(true);
        };
        let remaining = time_left(workflow, &step.name, segment_end)?;
        gate.evaluate_within(scope, GATE_TIME_LIMIT.min(remaining))
            .await
            .map_err(|e| {
                let bound = Bounded {
                    own_limit: GATE_TIME_LIMIT,
                    remaining,
                    segment_end,
                    doing: "the `when` gate ran",
                };
                bound.failure(workflow, &step.name, FailureKind::Gate, e)
            })
    }

    /// Runs one called step; `None` when its gate skipped it.
    async fn run_step(
        &self,
        workflow: &CompiledWorkflow,
        step: &CompiledStep,
        scope: &Scope,
        segment_end: Instant,
        metadata: &dyn CallMetadata,
    ) -> Result<Option<DynamicMessage>, StepFailure> {
        let fail = |kind: FailureKind, message: String| StepFailure::at(&step.name, kind, message);
        if !self.gate_opens(workflow, step, scope, segment_end).await? {
            return Ok(None);
        }
        let method = step
            .method
            .as_ref()
            .ok_or_else(|| fail(FailureKind::Workflow, "a called step needs a method".into()))?;
        // A job accepted under an older policy must not call what the current one
        // forbids: it fails here, loud and not retried, before anything is sent.
        let breaches = self.outbound.step_findings(workflow, step);
        if !breaches.is_empty() {
            let listed: Vec<String> = breaches.iter().map(|f| f.message.clone()).collect();
            return Err(fail(
                FailureKind::Workflow,
                format!(
                    "the outbound policy forbids this call: {}",
                    listed.join("; ")
                ),
            ));
        }
        let request =
            build_request(step, scope)?.unwrap_or_else(|| DynamicMessage::new(method.input()));
        self.outbound
            .check_request_size(prost::Message::encoded_len(&request))
            .map_err(|e| fail(FailureKind::Workflow, e))?;
        let remaining = time_left(workflow, &step.name, segment_end)?;
        let deadline = step.deadline.map_or(remaining, |own| own.min(remaining));
        let target = step
            .target
            .as_deref()
            .ok_or_else(|| fail(FailureKind::Workflow, "a called step needs a target".into()))?;
        let limit = self
            .outbound
            .response_limit(step.max_response_bytes.unwrap_or(self.max_response_bytes));
        let headers = metadata.for_step(step);
        let call = Call {
            target,
            tls: step.tls,
            method,
            deadline,
            metadata: &headers,
            max_response_bytes: limit,
        };
        let response = self
            .grpc
            .call(&call, request)
            .await
            .map_err(|e| match e {
                CallError::Status {
                    code,
                    message,
                    transport,
                } => {
                    let too_large = code == tonic::Code::OutOfRange
                        && message.contains("message length too large");
                    let said = if too_large {
                        format!(
                            "{}: the response is larger than the limit of {limit} bytes ({message}): raise the step's maxResponseBytes, or the node's [registry].max_response_bytes",
                            code_name(code)
                        )
                    } else if transport {
                        format!(
                            "{}: {message} (the connection to target {target} failed)",
                            code_name(code)
                        )
                    } else {
                        format!("{}: {message}", code_name(code))
                    };
                    fail(
                        FailureKind::Grpc {
                            code,
                            message,
                            transport,
                        },
                        said,
                    )
                }
                CallError::Certificate(reason) => fail(
                    FailureKind::Workflow,
                    format!(
                        "the TLS handshake with '{target}' failed over certificates: {reason}: check the CA bundle and client certificate configured for this target ([[registry.tls]])"
                    ),
                ),
                CallError::Refused(reason) => fail(FailureKind::Workflow, reason),
                CallError::Deadline(waited) => fail(
                    FailureKind::Deadline,
                    deadline_message(waited, step.deadline, remaining),
                ),
            })?;
        if step.validate {
            // The check runs the type's CEL rules: off the async threads, and bounded
            // by what is left of the segment as a call is.
            let remaining = segment_end.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Err(fail(
                    FailureKind::Deadline,
                    format!(
                        "the segment deadline of {} ms passed before the response could be checked",
                        workflow.deadline.as_millis()
                    ),
                ));
            }
            let violations = workflow
                .violations_within(&response, RULES_TIME_LIMIT.min(remaining))
                .await
                .map_err(|e| {
                    let bound = Bounded {
                        own_limit: RULES_TIME_LIMIT,
                        remaining,
                        segment_end,
                        doing: "the response was checked",
                    };
                    bound.failure(workflow, &step.name, FailureKind::Workflow, e)
                })?;
            if !violations.is_empty() {
                let listed = violations
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ");
                return Err(fail(
                    FailureKind::Validation { violations },
                    format!(
                        "the response breaks the rules of {}: {listed}",
                        step.output_type().full_name()
                    ),
                ));
            }
        }
        Ok(Some(response))
    }
}

/// The message `step`'s rules build from `scope` (`None` for an external step without
/// a request type).
fn build_request(
    step: &CompiledStep,
    scope: &Scope,
) -> Result<Option<DynamicMessage>, StepFailure> {
    let Some(request_type) = &step.request_type else {
        return Ok(None);
    };
    let mut request = DynamicMessage::new(request_type.clone());
    for rule in &step.rules {
        apply_rule(rule, &mut request, scope).map_err(|e| {
            StepFailure::at(
                &step.name,
                FailureKind::Mapping,
                format!("rule '{}': {e}", rule.text),
            )
        })?;
    }
    Ok(Some(request))
}

/// A time-bounded evaluation (a gate, a response check) and the bounds it ran under.
struct Bounded {
    /// The evaluation's own limit.
    own_limit: Duration,
    /// What was left of the segment when it started.
    remaining: Duration,
    segment_end: Instant,
    /// What was going on, for the message ("the `when` gate ran").
    doing: &'static str,
}

impl Bounded {
    /// The step failure for an evaluation that failed with `error`: when the segment's
    /// end was the binding bound and has passed, the segment ran out (a slow earlier
    /// step), a retryable deadline, since a retry resumes with a fresh segment;
    /// otherwise a failure of `kind`.
    fn failure(
        &self,
        workflow: &CompiledWorkflow,
        step: &str,
        kind: FailureKind,
        error: String,
    ) -> StepFailure {
        if self.remaining < self.own_limit && Instant::now() >= self.segment_end {
            let message = format!(
                "the segment deadline of {} ms passed while {} ({error})",
                workflow.deadline.as_millis(),
                self.doing
            );
            StepFailure::at(step, FailureKind::Deadline, message)
        } else {
            StepFailure::at(step, kind, error)
        }
    }
}

/// What is left of the segment; a `DEADLINE` failure of `step` when nothing is.
fn time_left(
    workflow: &CompiledWorkflow,
    step: &str,
    segment_end: Instant,
) -> Result<Duration, StepFailure> {
    let remaining = segment_end.saturating_duration_since(Instant::now());
    if remaining.is_zero() {
        return Err(StepFailure::at(
            step,
            FailureKind::Deadline,
            format!(
                "the segment deadline of {} ms passed before the step could run",
                workflow.deadline.as_millis()
            ),
        ));
    }
    Ok(remaining)
}

fn deadline_message(waited: Duration, own: Option<Duration>, remaining: Duration) -> String {
    let which = match own {
        Some(own) if own <= remaining => "the step's deadline",
        _ => "what was left of the segment deadline",
    };
    format!("no answer within {} ms ({which})", waited.as_millis())
}

fn build_output(workflow: &CompiledWorkflow, scope: &Scope) -> Result<DynamicMessage, StepFailure> {
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

/// The canonical upper-case name of a gRPC status code.
pub fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match code {
        Ok => "OK",
        Cancelled => "CANCELLED",
        Unknown => "UNKNOWN",
        InvalidArgument => "INVALID_ARGUMENT",
        DeadlineExceeded => "DEADLINE_EXCEEDED",
        NotFound => "NOT_FOUND",
        AlreadyExists => "ALREADY_EXISTS",
        PermissionDenied => "PERMISSION_DENIED",
        ResourceExhausted => "RESOURCE_EXHAUSTED",
        FailedPrecondition => "FAILED_PRECONDITION",
        Aborted => "ABORTED",
        OutOfRange => "OUT_OF_RANGE",
        Unimplemented => "UNIMPLEMENTED",
        Internal => "INTERNAL",
        Unavailable => "UNAVAILABLE",
        DataLoss => "DATA_LOSS",
        Unauthenticated => "UNAUTHENTICATED",
    }
}
