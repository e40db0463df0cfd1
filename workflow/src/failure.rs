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
    /// The offending value as text (a string quoted, a list or map by its size), at
    /// most [`MAX_SHOWN_VALUE`] bytes; `None` for a message-level rule or a message.
    pub value: Option<String>,
}

/// Most bytes of an offending value a violation shows: enough to recognise it,
/// never a whole document in a verdict.
pub const MAX_SHOWN_VALUE: usize = 256;

/// A scalar field value as a verdict shows it, cut at [`MAX_SHOWN_VALUE`] bytes.
fn shown_value(value: &prost_reflect::Value) -> Option<String> {
    use prost_reflect::Value as V;
    let mut longer = false;
    let text = match value {
        V::Bool(b) => b.to_string(),
        V::I32(n) | V::EnumNumber(n) => n.to_string(),
        V::I64(n) => n.to_string(),
        V::U32(n) => n.to_string(),
        V::U64(n) => n.to_string(),
        V::F32(n) => n.to_string(),
        V::F64(n) => n.to_string(),
        // Cut before it is escaped: a string of megabytes is never copied whole.
        V::String(text) => {
            let kept: String = text.chars().take(MAX_SHOWN_VALUE).collect();
            longer = kept.len() < text.len();
            serde_json::Value::String(kept).to_string()
        }
        V::Bytes(bytes) => format!("{} bytes", bytes.len()),
        // A list or map rule is about its size.
        V::List(items) => format!("{} items", items.len()),
        V::Map(entries) => format!("{} entries", entries.len()),
        V::Message(_) => return None,
    };
    if !longer && text.len() <= MAX_SHOWN_VALUE {
        return Some(text);
    }
    let mut end = text.len().min(MAX_SHOWN_VALUE - '…'.len_utf8());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Some(format!("{}…", &text[..end]))
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let field = if self.field_path.is_empty() {
            "(message)"
        } else {
            &self.field_path
        };
        write!(f, "{field}: {} [{}]", self.message, self.rule_id)?;
        match &self.value {
            Some(value) => write!(f, " (got {value})"),
            None => Ok(()),
        }
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
    /// A child workflow the step started ended FAILED, DEAD or CANCELLED.
    Child,
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
            FailureKind::Child => "CHILD",
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
    /// the call, or a deadline (the table is in `docs/envelope.md`).
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
                        .unwrap_or_else(|| rule_sentence(v.rule_id())),
                    message => message.to_owned(),
                };
                Violation {
                    field_path: v.field_path(),
                    rule_id: v.rule_id().to_owned(),
                    message,
                    value: v.field_value().and_then(shown_value),
                }
            })
            .collect()),
        Err(other) => Err(other.to_string()),
    }
}

/// What a standard rule the validator reports without a message means, in the
/// validator's own style ("value must be …"): the well-known string formats
/// (`string.uuid`, `string.email`, and their `_empty` variants), a oneof that must be
/// set. Any other id reads "value breaks the rule '<id>'".
pub fn rule_sentence(rule_id: &str) -> String {
    let (format, empty) = match rule_id.strip_suffix("_empty") {
        Some(format) => (format, true),
        None => (rule_id, false),
    };
    let what = match format.strip_prefix("string.").unwrap_or(format) {
        "uuid" => "a UUID (8-4-4-4-12 hex digits)",
        "tuuid" => "a UUID written as 32 hex digits without dashes",
        "email" => "an email address",
        "hostname" => "a hostname",
        "ip" => "an IP address",
        "ipv4" => "an IPv4 address",
        "ipv6" => "an IPv6 address",
        "uri" => "an absolute URI (with a scheme)",
        "uri_ref" => "a URI reference",
        "address" => "a hostname or an IP address",
        "ip_with_prefixlen" => "an IP address with a prefix length",
        "ipv4_with_prefixlen" => "an IPv4 address with a prefix length",
        "ipv6_with_prefixlen" => "an IPv6 address with a prefix length",
        "ip_prefix" => "an IP prefix",
        "ipv4_prefix" => "an IPv4 prefix",
        "ipv6_prefix" => "an IPv6 prefix",
        "host_and_port" => "a host and port (example.com:443)",
        "ulid" => "a ULID",
        "protobuf_fqn" => "a fully-qualified protobuf name",
        "protobuf_dot_fqn" => "a fully-qualified protobuf name with a leading dot",
        "well_known_regex.header_name" => "an HTTP header name",
        "well_known_regex.header_value" => "an HTTP header value",
        "required" => return "exactly one field of this oneof must be set".to_owned(),
        _ => return format!("value breaks the rule '{rule_id}'"),
    };
    if empty {
        format!("value must be {what}, and it is empty")
    } else {
        format!("value must be {what}")
    }
}

/// One violation as a sentence about its field: the validator's "value must be …"
/// reads "jobId must be …"; other messages follow the field after a colon.
pub fn sentence(field: &str, message: &str) -> String {
    if field.is_empty() {
        return message.to_owned();
    }
    match message.strip_prefix("value ") {
        Some(rest) => format!("{field} {rest}"),
        None => format!("{field}: {message}"),
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
    fn rules_without_a_message_read_as_sentences() {
        assert_eq!(
            rule_sentence("string.uuid"),
            "value must be a UUID (8-4-4-4-12 hex digits)"
        );
        assert_eq!(
            sentence("jobId", &rule_sentence("string.uuid")),
            "jobId must be a UUID (8-4-4-4-12 hex digits)"
        );
        assert_eq!(
            rule_sentence("string.email_empty"),
            "value must be an email address, and it is empty"
        );
        assert_eq!(
            rule_sentence("custom.id"),
            "value breaks the rule 'custom.id'"
        );
        assert_eq!(
            sentence("limit", "value must be less than 1000"),
            "limit must be less than 1000"
        );
        assert_eq!(sentence("", "a and b differ"), "a and b differ");
        assert_eq!(sentence("x", "a and b differ"), "x: a and b differ");
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
