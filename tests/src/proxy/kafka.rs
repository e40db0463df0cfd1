//! Kafka's wire protocol, as far as the proxy needs it.
//!
//! Every request and answer is an `int32 size` and that many bytes. A request starts
//! `api_key int16, api_version int16, correlation_id int32`; its answer starts with the
//! same correlation id, so the proxy remembers each request's key and version to read
//! the answer. Three answers are rewritten in place:
//!
//! - **Metadata** (key 3): each broker's port, when it is the upstream's, becomes the
//!   proxy's, so a client that bootstrapped through the proxy stays behind it (the
//!   host is left alone: tests run on 127.0.0.1).
//! - **FindCoordinator** (key 10): the group coordinator's port, likewise (a consumer
//!   told the real address would move its connection there, around the proxy; flexible
//!   from version 3).
//! - **Produce** (key 0): every partition's error code, when a rewrite is armed.
//!
//! And one is dropped when the test asks: **Fetch** (key 1).
//!
//! Versions from 9 on (Produce, Metadata) are "flexible": compact arrays and strings (unsigned
//! varint lengths, plus one) and tagged fields, in the answer header too.

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{Connection, Trigger, read_exact_or_end};
use std::sync::atomic::Ordering;

const PRODUCE: i16 = 0;
const FETCH: i16 = 1;
const METADATA: i16 = 3;
const FIND_COORDINATOR: i16 = 10;
/// The first flexible version of FindCoordinator.
const FIND_COORDINATOR_FIRST_FLEXIBLE: i16 = 3;
/// The first flexible version of Produce and of Metadata.
const FIRST_FLEXIBLE: i16 = 9;

/// Forwards requests, remembering each one's key and version by correlation id.
pub(crate) async fn client_to_server(
    conn: &Connection,
    from: &mut (impl AsyncReadExt + Unpin),
    to: &mut (impl AsyncWriteExt + Unpin),
) -> std::io::Result<()> {
    loop {
        let Some(frame) = read_frame(from).await? else {
            return Ok(());
        };
        let mut trigger = None;
        if frame.len() >= 12 {
            let key = i16::from_be_bytes([frame[4], frame[5]]);
            let version = i16::from_be_bytes([frame[6], frame[7]]);
            let correlation = i32::from_be_bytes([frame[8], frame[9], frame[10], frame[11]]);
            conn.requests
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(correlation, (key, version));
            if key == PRODUCE {
                trigger = Some(Trigger::Produce);
            }
        }
        conn.forward_client_message(&frame, trigger, to).await?;
    }
}

/// Forwards answers, rewriting Metadata ports and (when armed) Produce errors.
pub(crate) async fn server_to_client(
    conn: &Connection,
    from: &mut (impl AsyncReadExt + Unpin),
    to: &mut (impl AsyncWriteExt + Unpin),
) -> std::io::Result<()> {
    loop {
        let Some(mut frame) = read_frame(from).await? else {
            return Ok(());
        };
        if frame.len() >= 8 {
            let correlation = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
            let request = conn
                .requests
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&correlation);
            match request {
                Some((METADATA, version)) => {
                    let (from_port, to_port) = (conn.shared.upstream.port(), conn.shared.port);
                    // An answer this reader cannot follow is passed on as it is.
                    let _ = rewrite_metadata_ports(&mut frame, version, from_port, to_port);
                }
                Some((FIND_COORDINATOR, version)) => {
                    let (from_port, to_port) = (conn.shared.upstream.port(), conn.shared.port);
                    let _ = rewrite_coordinator_ports(&mut frame, version, from_port, to_port);
                }
                Some((PRODUCE, version)) => {
                    if let Some(code) = conn.shared.take_rewrite()
                        && rewrite_produce_errors(&mut frame, version, code).is_some()
                    {
                        conn.shared.rewritten_answers.fetch_add(1, Ordering::SeqCst);
                    }
                }
                Some((FETCH, _)) if conn.number < conn.shared.faults().withhold_fetches_below => {
                    continue;
                }
                _ => {}
            }
        }
        conn.forward_answer(&frame, to).await?;
    }
}

/// One frame, its size prefix included.
async fn read_frame(from: &mut (impl AsyncReadExt + Unpin)) -> std::io::Result<Option<Vec<u8>>> {
    let Some(size) = read_exact_or_end(from, 4).await? else {
        return Ok(None);
    };
    let len = i32::from_be_bytes([size[0], size[1], size[2], size[3]]);
    let len = usize::try_from(len).map_err(|_| std::io::Error::other("negative frame size"))?;
    let body = read_exact_or_end(from, len).await?.unwrap_or_default();
    let mut frame = size;
    frame.extend_from_slice(&body);
    Ok(Some(frame))
}

/// A cursor over an answer.
struct Reader<'a> {
    bytes: &'a mut [u8],
    at: usize,
    flexible: bool,
}

impl Reader<'_> {
    fn skip(&mut self, n: usize) -> Option<()> {
        (self.at + n <= self.bytes.len()).then(|| self.at += n)
    }

    fn int16(&mut self) -> Option<i16> {
        let b = self.bytes.get(self.at..self.at + 2)?;
        let v = i16::from_be_bytes([b[0], b[1]]);
        self.at += 2;
        Some(v)
    }

    fn int32(&mut self) -> Option<i32> {
        let b = self.bytes.get(self.at..self.at + 4)?;
        let v = i32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        self.at += 4;
        Some(v)
    }

    fn uvarint(&mut self) -> Option<u64> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = *self.bytes.get(self.at)?;
            self.at += 1;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Some(value);
            }
        }
        None
    }

    /// An array's length (a null array reads as empty).
    fn array_len(&mut self) -> Option<usize> {
        if self.flexible {
            Some(usize::try_from(self.uvarint()?.saturating_sub(1)).ok()?)
        } else {
            Some(usize::try_from(self.int32()?.max(0)).ok()?)
        }
    }

    /// Skips a string or a nullable string.
    fn skip_string(&mut self) -> Option<()> {
        let len = if self.flexible {
            usize::try_from(self.uvarint()?.saturating_sub(1)).ok()?
        } else {
            usize::try_from(self.int16()?.max(0)).ok()?
        };
        self.skip(len)
    }

    fn skip_tagged_fields(&mut self) -> Option<()> {
        if !self.flexible {
            return Some(());
        }
        for _ in 0..self.uvarint()? {
            self.uvarint()?;
            let size = usize::try_from(self.uvarint()?).ok()?;
            self.skip(size)?;
        }
        Some(())
    }

    fn write_int16(&mut self, at: usize, value: i16) {
        self.bytes[at..at + 2].copy_from_slice(&value.to_be_bytes());
    }

    fn write_int32(&mut self, at: usize, value: i32) {
        self.bytes[at..at + 4].copy_from_slice(&value.to_be_bytes());
    }
}

/// A reader past the size and the answer header (correlation id; tagged fields when
/// flexible).
fn body_reader(frame: &mut [u8], version: i16) -> Option<Reader<'_>> {
    flexible_body_reader(frame, version >= FIRST_FLEXIBLE)
}

/// [`body_reader`] for an answer whose first flexible version is another.
fn flexible_body_reader(frame: &mut [u8], flexible: bool) -> Option<Reader<'_>> {
    let mut reader = Reader {
        bytes: frame,
        at: 8,
        flexible,
    };
    reader.skip_tagged_fields()?;
    Some(reader)
}

/// Replaces `from_port` by `to_port` in a Metadata answer's brokers.
fn rewrite_metadata_ports(
    frame: &mut [u8],
    version: i16,
    from_port: u16,
    to_port: u16,
) -> Option<()> {
    let mut r = body_reader(frame, version)?;
    if version >= 3 {
        r.int32()?; // throttle_time_ms
    }
    for _ in 0..r.array_len()? {
        r.int32()?; // node_id
        r.skip_string()?; // host
        let at = r.at;
        if r.int32()? == i32::from(from_port) {
            r.write_int32(at, i32::from(to_port));
        }
        if version >= 1 {
            r.skip_string()?; // rack
        }
        r.skip_tagged_fields()?;
    }
    Some(())
}

/// Replaces `from_port` by `to_port` in a FindCoordinator answer: without it a
/// consumer group's client would follow its coordinator's address around the proxy
/// (librdkafka moves a broker it knows to the address it is last told).
fn rewrite_coordinator_ports(
    frame: &mut [u8],
    version: i16,
    from_port: u16,
    to_port: u16,
) -> Option<()> {
    let mut r = flexible_body_reader(frame, version >= FIND_COORDINATOR_FIRST_FLEXIBLE)?;
    let port = |r: &mut Reader<'_>| -> Option<()> {
        let at = r.at;
        if r.int32()? == i32::from(from_port) {
            r.write_int32(at, i32::from(to_port));
        }
        Some(())
    };
    match version {
        0 => {
            r.int16()?; // error_code
            r.int32()?; // node_id
            r.skip_string()?; // host
            port(&mut r)
        }
        1..=3 => {
            r.int32()?; // throttle_time_ms
            r.int16()?; // error_code
            r.skip_string()?; // error_message
            r.int32()?; // node_id
            r.skip_string()?; // host
            port(&mut r)
        }
        _ => {
            r.int32()?; // throttle_time_ms
            for _ in 0..r.array_len()? {
                r.skip_string()?; // key
                r.int32()?; // node_id
                r.skip_string()?; // host
                port(&mut r)?;
                r.int16()?; // error_code
                r.skip_string()?; // error_message
                r.skip_tagged_fields()?;
            }
            Some(())
        }
    }
}

/// Sets every partition's error code in a Produce answer to `code`.
fn rewrite_produce_errors(frame: &mut [u8], version: i16, code: i16) -> Option<()> {
    let mut r = body_reader(frame, version)?;
    for _ in 0..r.array_len()? {
        r.skip_string()?; // topic name
        for _ in 0..r.array_len()? {
            r.int32()?; // partition index
            let at = r.at;
            r.int16()?;
            r.write_int16(at, code);
            r.skip(8)?; // base_offset
            if version >= 2 {
                r.skip(8)?; // log_append_time_ms
            }
            if version >= 5 {
                r.skip(8)?; // log_start_offset
            }
            if version >= 8 {
                for _ in 0..r.array_len()? {
                    r.int32()?; // batch_index
                    r.skip_string()?; // batch_index_error_message
                    r.skip_tagged_fields()?;
                }
                r.skip_string()?; // error_message
            }
            r.skip_tagged_fields()?;
        }
        r.skip_tagged_fields()?;
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn produce_answer_v7(partitions: &[(i32, i16)]) -> Vec<u8> {
        let mut body = vec![0, 0, 0, 0]; // size, patched below
        body.extend_from_slice(&7i32.to_be_bytes()); // correlation id
        body.extend_from_slice(&1i32.to_be_bytes()); // one topic
        body.extend_from_slice(&3i16.to_be_bytes());
        body.extend_from_slice(b"top");
        body.extend_from_slice(&(partitions.len() as i32).to_be_bytes());
        for (index, code) in partitions {
            body.extend_from_slice(&index.to_be_bytes());
            body.extend_from_slice(&code.to_be_bytes());
            body.extend_from_slice(&[0; 24]); // three int64s
        }
        body.extend_from_slice(&0i32.to_be_bytes()); // throttle
        let size = (body.len() - 4) as i32;
        body[..4].copy_from_slice(&size.to_be_bytes());
        body
    }

    #[test]
    fn every_partition_of_a_produce_answer_gets_the_error() {
        let mut frame = produce_answer_v7(&[(0, 0), (1, 0), (2, 0)]);
        assert!(rewrite_produce_errors(&mut frame, 7, 45).is_some());
        assert_eq!(frame, produce_answer_v7(&[(0, 45), (1, 45), (2, 45)]));
    }

    #[test]
    fn a_flexible_produce_answer_is_rewritten_too() {
        let mut frame = vec![0, 0, 0, 0];
        frame.extend_from_slice(&7i32.to_be_bytes());
        frame.push(0); // header tagged fields
        frame.push(2); // one topic
        frame.push(4);
        frame.extend_from_slice(b"top");
        frame.push(2); // one partition
        frame.extend_from_slice(&0i32.to_be_bytes());
        let code_at = frame.len();
        frame.extend_from_slice(&0i16.to_be_bytes());
        frame.extend_from_slice(&[0; 24]);
        frame.push(1); // no record errors
        frame.push(0); // null error message
        frame.push(0); // partition tagged fields
        frame.push(0); // topic tagged fields
        frame.extend_from_slice(&0i32.to_be_bytes());
        frame.push(0);
        assert!(rewrite_produce_errors(&mut frame, 9, -1).is_some());
        assert_eq!(&frame[code_at..code_at + 2], &(-1i16).to_be_bytes());
    }

    #[test]
    fn coordinator_ports_of_the_upstream_become_the_proxys() {
        // Version 2 (not flexible): one coordinator.
        let mut frame = vec![0, 0, 0, 0];
        frame.extend_from_slice(&1i32.to_be_bytes());
        frame.extend_from_slice(&0i32.to_be_bytes()); // throttle
        frame.extend_from_slice(&0i16.to_be_bytes()); // error code
        frame.extend_from_slice(&(-1i16).to_be_bytes()); // no error message
        frame.extend_from_slice(&0i32.to_be_bytes()); // node 0
        frame.extend_from_slice(&9i16.to_be_bytes());
        frame.extend_from_slice(b"127.0.0.1");
        let port_at = frame.len();
        frame.extend_from_slice(&9092i32.to_be_bytes());
        assert!(rewrite_coordinator_ports(&mut frame, 2, 9092, 40000).is_some());
        assert_eq!(&frame[port_at..port_at + 4], &40000i32.to_be_bytes());

        // Version 4 (flexible): a list of coordinators, one per key.
        let mut frame = vec![0, 0, 0, 0];
        frame.extend_from_slice(&1i32.to_be_bytes());
        frame.push(0); // header tagged fields
        frame.extend_from_slice(&0i32.to_be_bytes()); // throttle
        frame.push(2); // one coordinator
        frame.push(6);
        frame.extend_from_slice(b"group");
        frame.extend_from_slice(&0i32.to_be_bytes()); // node 0
        frame.push(10);
        frame.extend_from_slice(b"127.0.0.1");
        let port_at = frame.len();
        frame.extend_from_slice(&9092i32.to_be_bytes());
        frame.extend_from_slice(&0i16.to_be_bytes()); // error code
        frame.push(0); // null error message
        frame.push(0); // tagged fields
        frame.push(0);
        assert!(rewrite_coordinator_ports(&mut frame, 4, 9092, 40000).is_some());
        assert_eq!(&frame[port_at..port_at + 4], &40000i32.to_be_bytes());
    }

    #[test]
    fn metadata_ports_of_the_upstream_become_the_proxys() {
        let mut frame = vec![0, 0, 0, 0];
        frame.extend_from_slice(&1i32.to_be_bytes());
        frame.extend_from_slice(&0i32.to_be_bytes()); // throttle (v3+)
        frame.extend_from_slice(&1i32.to_be_bytes()); // one broker
        frame.extend_from_slice(&0i32.to_be_bytes()); // node 0
        frame.extend_from_slice(&9i16.to_be_bytes());
        frame.extend_from_slice(b"127.0.0.1");
        let port_at = frame.len();
        frame.extend_from_slice(&9092i32.to_be_bytes());
        frame.extend_from_slice(&(-1i16).to_be_bytes()); // no rack
        assert!(rewrite_metadata_ports(&mut frame, 5, 9092, 40000).is_some());
        assert_eq!(&frame[port_at..port_at + 4], &40000i32.to_be_bytes());
    }
}
