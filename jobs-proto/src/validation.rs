//! Runtime evaluation of the contract's `buf.validate` rules and the validating codec.

use std::fmt;
use std::sync::LazyLock;

use prost::Message;
use prost_protovalidate::Validator;
use prost_protovalidate_types::MessageConstraintsExt;
use prost_reflect::{MessageDescriptor, ReflectMessage};

use crate::v1::{SendEvent, WorkflowRunEvent, WorkflowRunRequest};

/// One broken rule: where, which rule, and what it says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Dotted path of the offending field (`job_id`, `occurred_at`); empty for a
    /// message-level rule.
    pub field_path: String,
    /// The rule's identifier (`string.uuid`, `required`,
    /// `workflow_run_event.completed_has_verdict`).
    pub rule_id: String,
    /// What the rule says, in words.
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

/// Why a contract message was refused.
#[derive(Debug, thiserror::Error)]
pub enum ContractError {
    /// The message breaks one or more of its declared rules; every violation is listed.
    #[error("{message} breaks its rules: {}", join(violations))]
    Invalid {
        /// Full protobuf name of the message.
        message: &'static str,
        /// Every broken rule, with its field path.
        violations: Vec<Violation>,
    },
    /// The bytes are not an encoding of the message at all.
    #[error("bytes are not a valid {message} encoding: {source}")]
    Undecodable {
        /// Full protobuf name of the message.
        message: &'static str,
        /// The protobuf decoder's complaint.
        #[source]
        source: prost::DecodeError,
    },
    /// The rules themselves could not be evaluated (a defect in the schema, not the data).
    #[error("the rules of {message} could not be evaluated: {reason}")]
    RulesUnusable {
        /// Full protobuf name of the message.
        message: &'static str,
        /// The validator's complaint.
        reason: String,
    },
}

impl ContractError {
    /// The violations of an [`ContractError::Invalid`] refusal; empty otherwise.
    pub fn violations(&self) -> &[Violation] {
        match self {
            ContractError::Invalid { violations, .. } => violations,
            _ => &[],
        }
    }
}

fn join(violations: &[Violation]) -> String {
    violations
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

fn declared_rule_message(message_type: &MessageDescriptor, rule_id: &str) -> String {
    message_type
        .message_constraints()
        .ok()
        .flatten()
        .and_then(|rules| {
            rules
                .cel
                .into_iter()
                .find(|r| r.id.as_deref() == Some(rule_id))
        })
        .and_then(|rule| rule.message)
        .unwrap_or_else(|| rule_id.to_owned())
}

/// One validator for the process: it caches the compiled rules (CEL included) per
/// message type, so only the first validation of each type pays for compilation.
static VALIDATOR: LazyLock<Validator> = LazyLock::new(Validator::new);

/// A contract message: validated against its `buf.validate` rules on encode and decode.
pub trait WireMessage: Message + ReflectMessage + Default + Sized {
    /// Full protobuf name, used in error messages.
    const FULL_NAME: &'static str;

    /// Evaluates every rule declared on the message and returns all violations.
    fn validate(&self) -> Result<(), ContractError> {
        match VALIDATOR.validate(self) {
            Ok(()) => Ok(()),
            Err(prost_protovalidate::Error::Validation(err)) => Err(ContractError::Invalid {
                message: Self::FULL_NAME,
                violations: err
                    .violations()
                    .iter()
                    .map(|v| Violation {
                        field_path: v.field_path(),
                        rule_id: v.rule_id().to_owned(),
                        message: match v.message() {
                            // Message-level CEL rules come back without their declared
                            // message: fill it in from the schema.
                            "" => declared_rule_message(&self.descriptor(), v.rule_id()),
                            message => message.to_owned(),
                        },
                    })
                    .collect(),
            }),
            Err(other) => Err(ContractError::RulesUnusable {
                message: Self::FULL_NAME,
                reason: other.to_string(),
            }),
        }
    }

    /// Validates, then encodes. An invalid message is refused and nothing is encoded.
    fn encode_validated(&self) -> Result<Vec<u8>, ContractError> {
        self.validate()?;
        Ok(self.encode_to_vec())
    }

    /// Decodes, then validates. Bytes that decode to an invalid message are refused.
    fn decode_validated(bytes: &[u8]) -> Result<Self, ContractError> {
        let message = Self::decode(bytes).map_err(|source| ContractError::Undecodable {
            message: Self::FULL_NAME,
            source,
        })?;
        message.validate()?;
        Ok(message)
    }
}

impl WireMessage for WorkflowRunEvent {
    const FULL_NAME: &'static str = "protomolt.jobs.v1.WorkflowRunEvent";
}

impl WireMessage for WorkflowRunRequest {
    const FULL_NAME: &'static str = "protomolt.jobs.v1.WorkflowRunRequest";
}

impl WireMessage for SendEvent {
    const FULL_NAME: &'static str = "protomolt.jobs.v1.SendEvent";
}
