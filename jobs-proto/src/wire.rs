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
