//! Step failures: what went wrong, at which step, and whether retrying can help.
//!
//! The seed's taxonomy has three buckets, and [`FailureKind`] maps onto them:
//! retryable (`Grpc` UNAVAILABLE / DEADLINE_EXCEEDED / RESOURCE_EXHAUSTED / ABORTED,
//! any status made locally because the connection failed under the call, and
//! `Deadline`), a verdict (`Validation`), and deterministic defects that fail loud
//! (`Gate`, `Mapping`, `Workflow`, and every other gRPC code the target answers, its
//! own UNKNOWN and INTERNAL included).

use std::fmt;

use prost_protovalidate_types::MessageConstraintsExt;
use prost_reflect::MessageDescriptor;

/// One broken `buf.validate` rule of a step's response.
///
/// The engine's own type, deliberately: the engine knows nothing of the jobs wire
/// contract, whose `jobs_proto::Violation` has the same shape for the same reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Dotted path of the offending field; empty for a message-level rule.
    pub field_path: String,
    /// The rule's identifier, e.g. `repeated.max_items`.
    pub rule_id: String,
    /// What the rule says.
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let field = if self.field_path.is_empty() {
            "(message)"
        } else {
            &self.field_path
        };
        write!(f, "{field}: {} [{}]", self.message, self.rule_id)
    }
}

/// The kind of a step failure.
#[derive(Debug, Clone, PartialEq)]
pub enum FailureKind {
    /// The target answered with a non-OK gRPC status (or could not be reached:
    /// UNAVAILABLE).
    Grpc {
        /// The status code.
        code: tonic::Code,
        /// The status message, verbatim.
        message: String,
        /// The status was made on this side because the connection failed (reset,
        /// closed, refused mid-call), not answered by the target.
        transport: bool,
    },
    /// The call outlived its deadline (the step's own, or what was left of the segment's).
    Deadline,
    /// The response (or an externally supplied one) broke its declared rules.
    Validation {
        /// Every broken rule.
        violations: Vec<Violation>,
    },
    /// A `when` gate could not be evaluated to a boolean: an error, a value that is
    /// not a bool, or a bound passed (data too deep or too large, cost too high,
    /// time limit reached).
    Gate,
    /// A rule could not be applied to the values at hand (for example a number out of
    /// range for its target).
    Mapping,
    /// The workflow itself is defective, or its stored state drifted from it.
    Workflow,
}

impl FailureKind {
    /// The upper-case label errors are prefixed with (`GRPC`, `VALIDATION`, ...).
    pub fn label(&self) -> &'static str {
        match self {
            FailureKind::Grpc { .. } => "GRPC",
            FailureKind::Deadline => "DEADLINE",
            FailureKind::Validation { .. } => "VALIDATION",
            FailureKind::Gate => "GATE",
            FailureKind::Mapping => "MAPPING",
            FailureKind::Workflow => "WORKFLOW",
        }
    }
}

/// A step failed; `step` is `None` for failures of the workflow as a whole (the output
/// mapping, or replay of a checkpoint array that is not an array at all).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}: {}{message}", kind.label(), step.as_ref().map(|s| format!("step '{s}': ")).unwrap_or_default())]
pub struct StepFailure {
    /// The step that failed.
    pub step: Option<String>,
    /// What kind of failure.
    pub kind: FailureKind,
    /// What happened, in words.
    pub message: String,
}

impl StepFailure {
    /// A failure of `step`.
    pub fn at(step: &str, kind: FailureKind, message: impl Into<String>) -> Self {
        StepFailure {
            step: Some(step.to_owned()),
            kind,
            message: message.into(),
        }
    }

    /// A failure of the workflow as a whole.
    pub fn workflow(message: impl Into<String>) -> Self {
        StepFailure {
            step: None,
            kind: FailureKind::Workflow,
            message: message.into(),
        }
    }

    /// Retrying can help: a transient gRPC status, a connection that failed under
    /// the call, or a deadline (the table is in the README).
    pub fn is_retryable(&self) -> bool {
        match &self.kind {
            FailureKind::Grpc {
                code, transport, ..
            } => {
                *transport
                    || matches!(
                        code,
                        tonic::Code::Unavailable
                            | tonic::Code::DeadlineExceeded
                            | tonic::Code::ResourceExhausted
                            | tonic::Code::Aborted
                    )
            }
            FailureKind::Deadline => true,
            _ => false,
        }
    }

    /// A validation verdict: the workflow's answer, not an error.
    pub fn is_verdict(&self) -> bool {
        matches!(self.kind, FailureKind::Validation { .. })
    }
}

/// Converts the validator's answer for a message of `message_type` into violations;
/// an unusable rule set is a workflow defect. Message-level CEL rules come back from
/// the validator without their declared `message`; it is filled in from the schema so
/// every violation says what it means.
pub fn violations_of(
    message_type: &MessageDescriptor,
    result: Result<(), prost_protovalidate::Error>,
) -> Result<Vec<Violation>, String> {
    match result {
        Ok(()) => Ok(Vec::new()),
        Err(prost_protovalidate::Error::Validation(err)) => Ok(err
            .violations()
            .iter()
            .map(|v| {
                let message = match v.message() {
                    "" => declared_rule_message(message_type, v.rule_id())
                        .unwrap_or_else(|| v.rule_id().to_owned()),
                    message => message.to_owned(),
                };
                Violation {
                    field_path: v.field_path(),
                    rule_id: v.rule_id().to_owned(),
                    message,
                }
            })
            .collect()),
        Err(other) => Err(other.to_string()),
    }
}

/// The `message` a message-level CEL rule declares.
fn declared_rule_message(message_type: &MessageDescriptor, rule_id: &str) -> Option<String> {
    message_type
        .message_constraints()
        .ok()
        .flatten()?
        .cel
        .into_iter()
        .find(|rule| rule.id.as_deref() == Some(rule_id))
        .and_then(|rule| rule.message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_carry_kind_and_step() {
        let failure = StepFailure::at(
            "embed",
            FailureKind::Grpc {
                code: tonic::Code::Unavailable,
                message: "model loading".into(),
                transport: false,
            },
            "UNAVAILABLE: model loading",
        );
        assert_eq!(
            failure.to_string(),
            "GRPC: step 'embed': UNAVAILABLE: model loading"
        );
        assert!(failure.is_retryable());
        assert_eq!(
            StepFailure::workflow("drifted").to_string(),
            "WORKFLOW: drifted"
        );
    }

    #[test]
    fn only_transient_failures_retry() {
        let grpc = |code| {
            StepFailure::at(
                "s",
                FailureKind::Grpc {
                    code,
                    message: String::new(),
                    transport: false,
                },
                "",
            )
        };
        assert!(grpc(tonic::Code::DeadlineExceeded).is_retryable());
        assert!(grpc(tonic::Code::Aborted).is_retryable());
        assert!(!grpc(tonic::Code::Unknown).is_retryable());
        let transport = StepFailure::at(
            "s",
            FailureKind::Grpc {
                code: tonic::Code::Unknown,
                message: "transport error".into(),
                transport: true,
            },
            "",
        );
        assert!(
            transport.is_retryable(),
            "the connection failed, not the server"
        );
        assert!(grpc(tonic::Code::ResourceExhausted).is_retryable());
        assert!(!grpc(tonic::Code::InvalidArgument).is_retryable());
        assert!(!grpc(tonic::Code::Internal).is_retryable());
        assert!(StepFailure::at("s", FailureKind::Deadline, "").is_retryable());
        let verdict = StepFailure::at("s", FailureKind::Validation { violations: vec![] }, "");
        assert!(!verdict.is_retryable() && verdict.is_verdict());
        for kind in [
            FailureKind::Gate,
            FailureKind::Mapping,
            FailureKind::Workflow,
        ] {
            assert!(!StepFailure::at("s", kind, "").is_retryable());
        }
    }
}
