//! Record framing on the topics.
//!
//! Without a schema registry a record's value is the plain encoded protobuf message.
//! With one, it is the Confluent wire format: a magic byte `0`, the schema id as 4
//! bytes big-endian, the message-index array as zigzag varints (a single `0` byte for
//! the first message of the file, which both contract messages' files use:
//! `WorkflowRunEvent` is message 0 of `jobs.proto`), then the protobuf payload.
//!
//! Consumers of either form call [`unframe`]: a protobuf message never starts with a
//! `0` byte (field number 0 does not exist), so the first byte tells the forms apart.

use prost::Message as _;
use prost_types::value::Kind;
use serde_json::Value;

use crate::v1::WorkflowRunRequest;

/// The contract's `.proto` source, with its `buf.validate` annotations.
pub const CONTRACT_PROTO: &str = include_str!("../../proto/protomolt/jobs/v1/jobs.proto");

/// The file the annotations come from; a schema registry knows nothing of it.
const VALIDATE_IMPORT: &str = "import \"buf/validate/validate.proto\";";

/// The contract as registered with a schema registry: [`CONTRACT_PROTO`] without the
/// `buf/validate/validate.proto` import and its annotations. A registry resolves only
/// the imports it is given as references (the `google/protobuf` well-known types it
/// knows itself), and the annotations are rules this crate evaluates at runtime, not
/// part of the wire format: the messages, fields, numbers and types are identical
/// (a test compares the two descriptors).
pub fn registry_schema() -> String {
    let source = CONTRACT_PROTO.replace(VALIDATE_IMPORT, "");
    let mut kept = String::with_capacity(source.len());
    let mut rest = source.as_str();
    loop {
        let option = rest.find("option (buf.validate.");
        let bracket = rest.find('[');
        let cut = match (option, bracket) {
            (Some(o), Some(b)) => o.min(b),
            (Some(o), None) => o,
            (None, Some(b)) => b,
            (None, None) => break,
        };
        let (before, from) = rest.split_at(cut);
        if from.starts_with('[') {
            let end = matching(from, '[', ']');
            if from[..end].contains("(buf.validate.") {
                kept.push_str(before.trim_end_matches([' ', '\n']));
            } else {
                kept.push_str(before);
                kept.push_str(&from[..end]);
            }
            rest = &from[end..];
        } else {
            // `option (buf.validate.message).cel = { ... };`
            kept.push_str(before.trim_end_matches(' '));
            let end = matching(from, '{', '}');
            rest = from[end..].trim_start_matches(';');
            rest = rest.strip_prefix('\n').unwrap_or(rest);
        }
    }
    kept.push_str(rest);
    kept
}

/// The index just past the `close` matching the first `open` of `text` (the end of
/// `text` when unbalanced; the contract is ours and balanced).
fn matching(text: &str, open: char, close: char) -> usize {
    let mut depth = 0usize;
    let mut in_string = false;
    for (i, c) in text.char_indices() {
        match c {
            '"' => in_string = !in_string,
            _ if in_string => {}
            c if c == open => depth += 1,
            c if c == close => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return i + c.len_utf8();
                }
            }
            _ => {}
        }
    }
    text.len()
}

/// Why framed bytes could not be unframed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FramingError {
    /// Shorter than the 5-byte Confluent header.
    #[error("a Confluent-framed record needs at least 6 bytes, got {0}")]
    TooShort(usize),
    /// The message-index array is not valid varints.
    #[error("the message-index array of a Confluent-framed record is malformed")]
    BadIndexes,
}

/// Frames `payload` in the Confluent wire format for `schema_id` (message index 0).
pub fn frame(schema_id: u32, payload: &[u8]) -> Vec<u8> {
    let mut framed = Vec::with_capacity(payload.len() + 6);
    framed.push(0);
    framed.extend_from_slice(&schema_id.to_be_bytes());
    framed.push(0); // message indexes: the shorthand for [0]
    framed.extend_from_slice(payload);
    framed
}

/// The protobuf payload of a record in either form, and the schema id when framed.
pub fn unframe(bytes: &[u8]) -> Result<(Option<u32>, &[u8]), FramingError> {
    if bytes.first() != Some(&0) {
        return Ok((None, bytes));
    }
    if bytes.len() < 6 {
        return Err(FramingError::TooShort(bytes.len()));
    }
    let schema_id = u32::from_be_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]);
    let mut rest = &bytes[5..];
    let (count, used) = read_varint(rest).ok_or(FramingError::BadIndexes)?;
    rest = &rest[used..];
    // Zigzag-encoded count; 0 is the shorthand for the single index [0].
    let count = (count >> 1) as i64 ^ -((count & 1) as i64);
    if !(0..=64).contains(&count) {
        return Err(FramingError::BadIndexes);
    }
    for _ in 0..count {
        let (_, used) = read_varint(rest).ok_or(FramingError::BadIndexes)?;
        rest = &rest[used..];
    }
    Ok((Some(schema_id), rest))
}

fn read_varint(bytes: &[u8]) -> Option<(u64, usize)> {
    let mut value = 0u64;
    for (i, byte) in bytes.iter().enumerate().take(10) {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    None
}

/// A request record read as far as it can be without a database: the job it names,
/// the request, and its input as JSON. Whether the request keeps its `buf.validate`
/// rules ([`crate::WireMessage::validate`]) and names a stored workflow is the
/// consumer's to decide (those become FAILED jobs; a [`RecordRefusal`] has no job).
#[derive(Debug, Clone, PartialEq)]
pub struct RequestRecord {
    /// The request's `job_id`, a uuid.
    pub job_id: uuid::Uuid,
    /// The decoded request.
    pub request: WorkflowRunRequest,
    /// `input` as JSON (an empty object when absent).
    pub input: Value,
}

/// Why a request record cannot become a job row at all (it is dead-lettered).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordRefusal {
    /// The record has no value.
    #[error("the record has no value: expected a WorkflowRunRequest")]
    NoValue,
    /// The value is JSON, the common mistake of a new producer.
    #[error("{JSON_RECORD_HINT}")]
    Json,
    /// The value is neither framing of a `WorkflowRunRequest`.
    #[error("not a WorkflowRunRequest: {0}")]
    NotARequest(String),
    /// The `job_id` is not a uuid, so no row can hold the request.
    #[error("no usable job_id ('{0}' is not a uuid): no job row can hold it")]
    NoJobId(String),
}

/// Reads a record's value from the requests topic, in either framing (plain or
/// Confluent); a hostile value is a [`RecordRefusal`], never a panic (fuzzed by
/// `fuzz/fuzz_targets/request_record.rs`).
pub fn read_request_record(value: Option<&[u8]>) -> Result<RequestRecord, RecordRefusal> {
    let bytes = value.ok_or(RecordRefusal::NoValue)?;
    if looks_like_json(bytes) {
        return Err(RecordRefusal::Json);
    }
    let (_, payload) = unframe(bytes).map_err(|e| RecordRefusal::NotARequest(e.to_string()))?;
    let request = WorkflowRunRequest::decode(payload)
        .map_err(|e| RecordRefusal::NotARequest(e.to_string()))?;
    let job_id = uuid::Uuid::parse_str(&request.job_id)
        .map_err(|_| RecordRefusal::NoJobId(cut(&request.job_id)))?;
    let input = request
        .input
        .as_ref()
        .map_or_else(|| Value::Object(Default::default()), struct_json);
    Ok(RequestRecord {
        job_id,
        request,
        input,
    })
}

/// An event record from the signals topic, read as far as it can be without a
/// database: its key, id and payload (as JSON).
#[derive(Debug, Clone, PartialEq)]
pub struct SignalRecord {
    /// The event key: the message's `key`, else the record key.
    pub key: String,
    /// The message's `event_id`, or empty.
    pub event_id: String,
    /// `payload` as JSON.
    pub payload: Value,
}

/// Reads a record's value (and key) from the signals topic, in either framing; a
/// hostile record is refused with why, never a panic.
pub fn read_signal_record(
    record_key: Option<&[u8]>,
    value: Option<&[u8]>,
) -> Result<SignalRecord, String> {
    let bytes = value.ok_or("the record has no value: expected a SendEvent")?;
    if looks_like_json(bytes) {
        return Err("the value is JSON: produce an encoded protomolt.jobs.v1.SendEvent".into());
    }
    let (_, payload) = unframe(bytes).map_err(|e| format!("not a SendEvent: {e}"))?;
    let event =
        crate::v1::SendEvent::decode(payload).map_err(|e| format!("not a SendEvent: {e}"))?;
    crate::WireMessage::validate(&event)
        .map_err(|e| format!("the SendEvent breaks its rules: {e}"))?;
    let from_record = record_key.map(|k| String::from_utf8_lossy(k).into_owned());
    let key = match (event.key.as_str(), from_record) {
        ("", Some(key)) if !key.is_empty() => key,
        ("", _) => return Err("no key: set the SendEvent's key or the record key".into()),
        (key, Some(other)) if !other.is_empty() && other != key => {
            return Err(format!(
                "the SendEvent's key '{}' and the record key '{}' differ",
                cut(key),
                cut(&other)
            ));
        }
        (key, _) => key.to_owned(),
    };
    if key.chars().count() > 1000 || key.chars().any(char::is_control) {
        return Err(
            "the key must be at most 1000 characters, none a control character (NUL included)"
                .into(),
        );
    }
    let payload = event
        .payload
        .as_ref()
        .map_or_else(|| Value::Object(Default::default()), struct_json);
    Ok(SignalRecord {
        key,
        event_id: event.event_id,
        payload,
    })
}

/// At most 80 characters of `text`, for a reason that quotes it.
fn cut(text: &str) -> String {
    text.chars().take(80).collect()
}

/// A `google.protobuf.Struct` as JSON.
pub fn struct_json(value: &prost_types::Struct) -> Value {
    Value::Object(
        value
            .fields
            .iter()
            .map(|(k, v)| (k.clone(), value_json(v)))
            .collect(),
    )
}

fn value_json(value: &prost_types::Value) -> Value {
    match &value.kind {
        None | Some(Kind::NullValue(_)) => Value::Null,
        // Struct numbers are doubles; whole ones become JSON integers so they parse
        // into integer fields.
        Some(Kind::NumberValue(n)) if n.fract() == 0.0 && n.abs() < 9_007_199_254_740_992.0 => {
            Value::from(*n as i64)
        }
        Some(Kind::NumberValue(n)) => {
            serde_json::Number::from_f64(*n).map_or(Value::Null, Value::Number)
        }
        Some(Kind::StringValue(s)) => Value::String(s.clone()),
        Some(Kind::BoolValue(b)) => Value::Bool(*b),
        Some(Kind::StructValue(s)) => struct_json(s),
        Some(Kind::ListValue(list)) => Value::Array(list.values.iter().map(value_json).collect()),
    }
}

/// The dead-letter reason of a request record whose value is JSON.
pub const JSON_RECORD_HINT: &str = "the record's value is JSON, but a request record is the binary protobuf encoding of jobs.v1.WorkflowRunRequest (job_id, workflow_name, input), optionally in the Confluent wire format: produce request.SerializeToString() (Python), encode_to_vec() (Rust) or the equivalent; `protomolt proto export DIR` writes the .proto files";

/// True when a record's value is a JSON object. A binary WorkflowRunRequest can
/// never start with `{`: that byte is a group tag of field 15, which the message
/// does not have; a value with leading whitespace counts only when all of it parses.
fn looks_like_json(bytes: &[u8]) -> bool {
    match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{') if bytes.first() == Some(&b'{') => true,
        Some(b'{') => {
            serde_json::from_slice::<serde_json::Value>(bytes).is_ok_and(|v| v.is_object())
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_plain_bytes_pass_through() {
        let payload = [0x0a, 0x03, b'a', b'b', b'c'];
        let framed = frame(42, &payload);
        assert_eq!(&framed[..6], &[0, 0, 0, 0, 42, 0]);
        assert_eq!(unframe(&framed), Ok((Some(42), &payload[..])));
        assert_eq!(unframe(&payload), Ok((None, &payload[..])));
        // An explicit index array [1, 2] (zigzag: count 2 -> 4, then 1 -> 2, 2 -> 4).
        let explicit = [&[0, 0, 0, 0, 7, 4, 2, 4][..], &payload].concat();
        assert_eq!(unframe(&explicit), Ok((Some(7), &payload[..])));
        assert_eq!(unframe(&[0, 1]), Err(FramingError::TooShort(2)));
        assert_eq!(
            unframe(&[0, 0, 0, 0, 1, 0xff]),
            Err(FramingError::BadIndexes)
        );
    }
}
