//! Messages as proto3 JSON: decoding an input or an answer (naming the field that
//! did not parse), encoding a response or an output, and why a message is refused.

use prost_reflect::{DynamicMessage, MessageDescriptor, ReflectMessage};
use serde_json::Value;

use crate::failure::Violation;

/// Why an input (or an externally supplied response) was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MessageError {
    /// The JSON is not proto3 JSON of the expected type.
    #[error("not a valid {type_name} (proto3 JSON): {}{reason}", if .path.is_empty() { String::new() } else { format!("{}: ", .path) })]
    Unparsable {
        /// Full name of the expected type.
        type_name: String,
        /// Where in the JSON (`score`, `items[2].name`); empty for the whole value.
        path: String,
        /// The decoder's complaint ("expected an integer, got string \"x\"").
        reason: String,
    },
    /// The message breaks its type's declared rules.
    #[error("{type_name} breaks its rules: {}", .violations.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Invalid {
        /// Full name of the type.
        type_name: String,
        /// Every broken rule.
        violations: Vec<Violation>,
    },
    /// The type's rules could not be evaluated (a schema defect).
    #[error("the rules of {type_name} could not be evaluated: {reason}")]
    RulesUnusable {
        /// Full name of the type.
        type_name: String,
        /// The validator's complaint.
        reason: String,
    },
    /// Checking the type's rules took longer than the caller's limit
    /// ([`CompiledWorkflow::parse_message_within`](crate::CompiledWorkflow::parse_message_within)); the check was abandoned.
    #[error("the rules of {type_name} did not finish within {limit_ms} ms")]
    RulesTimedOut {
        /// Full name of the type.
        type_name: String,
        /// The limit, in milliseconds.
        limit_ms: u64,
    },
}

/// The verdict of a rule check on `message`: the message when it breaks no rule.
pub(super) fn judged(
    message: DynamicMessage,
    violations: Result<Vec<Violation>, String>,
) -> Result<DynamicMessage, MessageError> {
    let type_name = || message.descriptor().full_name().to_owned();
    match violations {
        Ok(violations) if violations.is_empty() => Ok(message),
        Ok(violations) => Err(MessageError::Invalid {
            type_name: type_name(),
            violations,
        }),
        Err(reason) => Err(MessageError::RulesUnusable {
            type_name: type_name(),
            reason,
        }),
    }
}

impl MessageError {
    /// The error as a sentence about the value called `root` (`input`, `response`):
    /// a value that does not parse is named by its path ("response.score: expected
    /// an integer, got string \"x\" (the response must be a ux.Review in proto3
    /// JSON)"); other errors follow `root` after a colon.
    pub fn located(&self, root: &str) -> String {
        match self {
            MessageError::Unparsable {
                type_name,
                path,
                reason,
            } => {
                let at = if path.is_empty() {
                    root.to_owned()
                } else {
                    format!("{root}.{path}")
                };
                format!("{at}: {reason} (the {root} must be a {type_name} in proto3 JSON)")
            }
            other => format!("{root}: {other}"),
        }
    }
}

/// Parses proto3 JSON into a message of `message_type` (unknown fields refused). The
/// error names the field that did not parse.
pub fn decode_json(
    message_type: &MessageDescriptor,
    json: &Value,
) -> Result<DynamicMessage, MessageError> {
    let mut track = serde_path_to_error::Track::new();
    let at = serde_path_to_error::Deserializer::new(json, &mut track);
    DynamicMessage::deserialize(message_type.clone(), at).map_err(|e| {
        let path = track.path();
        let shown = path.to_string();
        let mut reason = expected_got(&e.to_string(), value_at(json, &path));
        if let Some(meant) = closest_field(message_type, &path, &reason) {
            reason.push_str(&format!("; did you mean '{meant}'?"));
        }
        MessageError::Unparsable {
            type_name: message_type.full_name().to_owned(),
            path: if shown == "." { String::new() } else { shown },
            reason,
        }
    })
}

/// For a decoder's "unrecognized field name 'x'", the closest field of the message
/// the name was met in (found by following `path` from `message_type`).
fn closest_field(
    message_type: &MessageDescriptor,
    path: &serde_path_to_error::Path,
    reason: &str,
) -> Option<String> {
    use serde_path_to_error::Segment;
    let unknown = reason
        .strip_prefix("unrecognized field name '")?
        .strip_suffix('\'')?;
    let mut message = message_type.clone();
    // A map field's next segment is one of its keys, not a field.
    let mut in_map = false;
    for segment in path.iter() {
        let Segment::Map { key } = segment else {
            continue;
        };
        if in_map {
            in_map = false;
            continue;
        }
        let Some(field) = message
            .get_field_by_json_name(key)
            .or_else(|| message.get_field_by_name(key))
        else {
            break;
        };
        let kind = if field.is_map() {
            in_map = true;
            field
                .kind()
                .as_message()
                .map(|entry| entry.map_entry_value_field().kind())
        } else {
            Some(field.kind())
        };
        match kind.as_ref().and_then(|kind| kind.as_message()) {
            Some(inner) => message = inner.clone(),
            None => break,
        }
    }
    let names: Vec<String> = message.fields().map(|f| f.json_name().to_owned()).collect();
    crate::suggest::did_you_mean(unknown, names.iter().map(String::as_str)).map(str::to_owned)
}

/// The value at a decoder's path, when the path leads to one.
fn value_at<'v>(json: &'v Value, path: &serde_path_to_error::Path) -> Option<&'v Value> {
    use serde_path_to_error::Segment;
    path.iter().try_fold(json, |value, segment| match segment {
        Segment::Seq { index } => value.get(index),
        Segment::Map { key } => value.get(key.as_str()),
        _ => None,
    })
}

/// The decoder's complaint, what was wanted first: serde's "invalid type: string
/// \"x\", expected an integer" reads "expected an integer, got string \"x\"", and
/// the bare number-parsing errors of a quoted number ("invalid digit found in
/// string") say what was expected and what was sent. Other messages are kept.
fn expected_got(reason: &str, sent: Option<&Value>) -> String {
    for prefix in ["invalid type: ", "invalid value: "] {
        if let Some(rest) = reason.strip_prefix(prefix)
            && let Some((got, expected)) = rest.rsplit_once(", expected ")
        {
            return format!("expected {expected}, got {got}");
        }
    }
    let expected = match reason {
        "invalid digit found in string" | "cannot parse integer from empty string" => {
            "an integer (a JSON number, or one in a string)"
        }
        "number too large to fit in target type" | "number too small to fit in target type" => {
            "an integer within the field's range"
        }
        "invalid float literal" => "a number (a JSON number, or one in a string)",
        _ => return reason.to_owned(),
    };
    match sent {
        Some(Value::String(text)) => {
            let shown: String = text.chars().take(40).collect();
            format!("expected {expected}, got string {shown:?}")
        }
        Some(other) if !other.is_object() && !other.is_array() => {
            format!("expected {expected}, got {other}")
        }
        _ => format!("expected {expected} ({reason})"),
    }
}

/// proto3 JSON of a message, as checkpoints and outputs store it: camelCase names,
/// defaults omitted, 64-bit integers as JSON numbers (readable at 2am; values above
/// 2^53 lose precision in JavaScript readers, not in this engine).
///
/// Encoding is fallible, and the failure is never papered over: a `Struct` holding
/// NaN or an infinity, an `Any` whose type is not in the descriptor set, a
/// `Timestamp` past year 9999 have no proto3 JSON form. The error names the type and
/// the serializer's reason.
pub fn encode_json(message: &DynamicMessage) -> Result<Value, EncodeError> {
    let options = prost_reflect::SerializeOptions::new().stringify_64_bit_integers(false);
    message
        .serialize_with_options(serde_json::value::Serializer, &options)
        .map_err(|e| EncodeError {
            type_name: message.descriptor().full_name().to_owned(),
            reason: e.to_string(),
        })
}

/// A message with no proto3 JSON form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a {type_name} that cannot be written as proto3 JSON: {reason}")]
pub struct EncodeError {
    /// Full name of the message type.
    pub type_name: String,
    /// The serializer's reason (the value or type it could not write).
    pub reason: String,
}
