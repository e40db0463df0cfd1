//! One step call: its `when` gate, the request its rules build, the call within the
//! step's deadline and what is left of the segment's, and the check of the response
//! when the step asks for `validate`; and the failure each of those ends in.

use std::time::Duration;

use prost_reflect::DynamicMessage;
use tokio::time::Instant;

use crate::compile::{CompiledStep, CompiledWorkflow, RULES_TIME_LIMIT};
use crate::failure::{FailureKind, StepFailure};
use crate::gate::GATE_TIME_LIMIT;
use crate::grpc::{Call, CallError, GrpcClient};
use crate::outbound::OutboundPolicy;
use crate::rules::apply_rule;
use crate::scope::Scope;

/// The longest event key, in characters (what `send-event` accepts).
pub const MAX_EVENT_KEY_CHARS: usize = 1000;

/// Why `key` cannot be an event key (or an event's id), or `None`: it must be 1 to
/// [`MAX_EVENT_KEY_CHARS`] characters, none of them a control character or an
/// invisible formatting one (which would make one key display as another). The same
/// rule for the keys jobs wait on and the keys senders name.
pub fn event_key_problem(key: &str) -> Option<String> {
    let length = key.chars().count();
    if length == 0 || length > MAX_EVENT_KEY_CHARS {
        return Some(format!(
            "is {length} characters long: a key is 1 to {MAX_EVENT_KEY_CHARS} characters"
        ));
    }
    key.chars()
        .find(|c| c.is_control() || crate::compile::is_invisible_format(*c))
        .map(|c| {
            format!(
                "holds U+{:04X}, a control or invisible formatting character: remove it",
                u32::from(c)
            )
        })
}

/// gRPC metadata the caller attaches to each step call (the jobs worker sends the job
/// id, the step, the attempt and an idempotency key; the synchronous verb sends none).
pub trait CallMetadata: Send + Sync {
    /// The headers for a call of `step`.
    fn for_step(&self, step: &CompiledStep) -> Vec<(String, String)>;

    /// The headers for the call of element `index` of map step `step`: the step's,
    /// its `idempotency-key` (if any) followed by `/<index>`, and
    /// `x-protomolt-item: <index>`.
    fn for_item(&self, step: &CompiledStep, index: usize) -> Vec<(String, String)> {
        let mut headers = self.for_step(step);
        for (name, value) in &mut headers {
            if name == "idempotency-key" {
                value.push_str(&format!("/{index}"));
            }
        }
        if !headers.is_empty() {
            headers.push(("x-protomolt-item".into(), index.to_string()));
        }
        headers
    }
}

/// No metadata at all.
pub struct NoMetadata;

impl CallMetadata for NoMetadata {
    fn for_step(&self, _step: &CompiledStep) -> Vec<(String, String)> {
        Vec::new()
    }
}

/// What one step call needs of the runner: its channels, its outbound policy and
/// its response limit.
pub(super) struct Caller<'r> {
    pub(super) grpc: &'r GrpcClient,
    pub(super) outbound: &'r OutboundPolicy,
    pub(super) max_response_bytes: usize,
}

impl Caller<'_> {
    /// Evaluates `step`'s `when` gate (true without one), bounded by its time limit
    /// and what is left of the segment.
    pub(super) async fn gate_opens(
        &self,
        workflow: &CompiledWorkflow,
        step: &CompiledStep,
        scope: &Scope,
        segment_end: Instant,
    ) -> Result<bool, StepFailure> {
        let Some(gate) = &step.when else {
            return Ok(true);
        };
        bounded_cel(
            workflow,
            step,
            segment_end,
            "the `when` gate ran",
            FailureKind::Gate,
            |limit| gate.evaluate_within(scope, limit),
        )
        .await
    }

    /// The key event step `step` waits on: its `eventKey` evaluated over `scope`
    /// within the gate's bounds.
    pub(super) async fn event_key(
        &self,
        workflow: &CompiledWorkflow,
        step: &CompiledStep,
        key: &crate::gate::Gate,
        scope: &Scope,
        segment_end: Instant,
    ) -> Result<String, StepFailure> {
        let key = bounded_cel(
            workflow,
            step,
            segment_end,
            "its `eventKey` ran",
            FailureKind::Mapping,
            |limit| key.evaluate_string_within(scope, limit),
        )
        .await?;
        // What send-event accepts: a key no sender can name would wait for ever.
        if let Some(problem) = event_key_problem(&key) {
            return Err(StepFailure::at(
                &step.name,
                FailureKind::Mapping,
                format!("its `eventKey` computed a key that {problem}"),
            ));
        }
        Ok(key)
    }

    /// What one call of `step` costs under its `rateLimit`, over `scope`: the
    /// bucket's key (a value no key may be fails the step) and the units, each
    /// evaluated within the gate's bounds; one unit of the step's one bucket without
    /// a limit.
    pub(super) async fn call_cost(
        &self,
        workflow: &CompiledWorkflow,
        step: &CompiledStep,
        scope: &Scope,
        segment_end: Instant,
    ) -> Result<super::cost::CallCost, StepFailure> {
        let Some(limit) = &step.rate_limit else {
            return Ok(super::cost::CallCost {
                key: None,
                units: 1,
            });
        };
        let key = match &limit.key {
            Some(gate) => {
                let key = bounded_cel(
                    workflow,
                    step,
                    segment_end,
                    "its rateLimit `key` ran",
                    FailureKind::Mapping,
                    |limit| gate.evaluate_string_within(scope, limit),
                )
                .await?;
                if let Some(problem) = crate::compile::key_value_problem(&key) {
                    return Err(StepFailure::at(
                        &step.name,
                        FailureKind::Mapping,
                        format!("its rateLimit `key` computed a key that {problem}"),
                    ));
                }
                Some(key)
            }
            None => None,
        };
        let units = match &limit.units {
            Some(gate) => {
                bounded_cel(
                    workflow,
                    step,
                    segment_end,
                    "its rateLimit `units` ran",
                    FailureKind::Mapping,
                    |limit| gate.evaluate_count_within(scope, limit),
                )
                .await?
            }
            None => 1,
        };
        // A call can never cost more than its bucket holds: it would wait for ever.
        if units > u64::from(limit.burst) {
            return Err(StepFailure::at(
                &step.name,
                FailureKind::Mapping,
                format!(
                    "its rateLimit `units` computed {units}, more than the bucket's burst of {}: raise `burst`, or cost less per call",
                    limit.burst
                ),
            ));
        }
        Ok(super::cost::CallCost { key, units })
    }

    /// Runs one called step; `None` when its gate skipped it.
    pub(super) async fn run_step(
        &self,
        workflow: &CompiledWorkflow,
        step: &CompiledStep,
        scope: &Scope,
        segment_end: Instant,
        metadata: &dyn CallMetadata,
    ) -> Result<Option<DynamicMessage>, StepFailure> {
        if !self.gate_opens(workflow, step, scope, segment_end).await? {
            return Ok(None);
        }
        let headers = metadata.for_step(step);
        self.call_step(workflow, step, scope, segment_end, headers)
            .await
            .map(Some)
    }

    /// Calls `step` (its gate already decided) with the request its rules build from
    /// `scope`, sending `headers`: one call of a step, or of one element of a map step.
    pub(super) async fn call_step(
        &self,
        workflow: &CompiledWorkflow,
        step: &CompiledStep,
        scope: &Scope,
        segment_end: Instant,
        headers: Vec<(String, String)>,
    ) -> Result<DynamicMessage, StepFailure> {
        let fail = |kind: FailureKind, message: String| StepFailure::at(&step.name, kind, message);
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
                    } else if answered_plain_http(&message) {
                        // tonic maps a non-gRPC HTTP answer to a code of its own and a
                        // message about headers: say what it means.
                        format!(
                            "{}: {message} (the target {target} answered HTTP, not gRPC: check its address and port, and that it serves gRPC there)",
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
        Ok(response)
    }
}

/// The message `step`'s rules build from `scope` (`None` for an external step without
/// a request type).
pub(super) fn build_request(
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

/// A bounded CEL evaluation of `step` (a gate, an event key): run within the smaller
/// of [`GATE_TIME_LIMIT`] and what is left of the segment; an error is a failure of
/// `kind`, or `DEADLINE` when the segment's time ran out (`doing` says what ran).
async fn bounded_cel<T, F>(
    workflow: &CompiledWorkflow,
    step: &CompiledStep,
    segment_end: Instant,
    doing: &'static str,
    kind: FailureKind,
    evaluate: impl FnOnce(Duration) -> F,
) -> Result<T, StepFailure>
where
    F: std::future::Future<Output = Result<T, String>>,
{
    let remaining = time_left(workflow, &step.name, segment_end)?;
    evaluate(GATE_TIME_LIMIT.min(remaining)).await.map_err(|e| {
        let bound = Bounded {
            own_limit: GATE_TIME_LIMIT,
            remaining,
            segment_end,
            doing,
        };
        bound.failure(workflow, &step.name, kind, e)
    })
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

/// True when a status message is tonic's for an answer that was HTTP but not gRPC (a
/// web server on the target's port): "grpc-status header missing, mapped from HTTP
/// status code 404", or a text answer where gRPC's content type belongs.
fn answered_plain_http(message: &str) -> bool {
    // A 4xx only: a gateway's 502-504 without a gRPC status is an outage upstream,
    // not a wrong address.
    message.contains("mapped from HTTP status code 4")
        || (message.contains("invalid content-type") && message.contains("text/"))
}
