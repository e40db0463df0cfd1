//! PostgreSQL's frontend messages, as far as the proxy needs them: where each ends,
//! and whether it is a `COMMIT`.
//!
//! A session opens with untyped messages (`int32 length`, then the body: an
//! SSLRequest or GSSENCRequest, then the StartupMessage); every later message is a
//! type byte and an `int32 length` that counts itself. A server that accepts TLS
//! makes the rest unreadable: the proxy then copies bytes without looking.

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{Connection, Trigger, read_exact_or_end};

/// The request codes of the untyped messages that precede the StartupMessage.
const SSL_REQUEST: i32 = 80_877_103;
const GSSENC_REQUEST: i32 = 80_877_104;

/// Forwards the client's messages one at a time, watching for `COMMIT`.
pub(crate) async fn client_to_server(
    conn: &Connection,
    from: &mut (impl AsyncReadExt + Unpin),
    to: &mut (impl AsyncWriteExt + Unpin),
) -> std::io::Result<()> {
    // The untyped opening: negotiation requests, then the StartupMessage.
    loop {
        let Some(length) = read_exact_or_end(from, 4).await? else {
            return Ok(());
        };
        let len = i32::from_be_bytes([length[0], length[1], length[2], length[3]]);
        if !(8..=100_000).contains(&len) {
            // Not an opening message: the server accepted TLS and this is its
            // handshake. Nothing more is readable.
            conn.forward_client_message(&length, None, to).await?;
            return copy_rest(conn, from, to).await;
        }
        let body_len = usize::try_from(len.saturating_sub(4)).unwrap_or(0);
        let body = read_exact_or_end(from, body_len).await?.unwrap_or_default();
        let code = body
            .get(..4)
            .map(|c| i32::from_be_bytes([c[0], c[1], c[2], c[3]]));
        let mut message = length;
        message.extend_from_slice(&body);
        conn.forward_client_message(&message, None, to).await?;
        match code {
            // The server answers one byte; the client may go on in TLS (then nothing
            // here is readable) or send the StartupMessage in the clear.
            Some(SSL_REQUEST) | Some(GSSENC_REQUEST) => continue,
            _ => break,
        }
    }
    loop {
        let Some(head) = read_exact_or_end(from, 5).await? else {
            return Ok(());
        };
        let kind = head[0];
        let len = i32::from_be_bytes([head[1], head[2], head[3], head[4]]);
        if !(4..=1 << 30).contains(&len) || !kind.is_ascii_alphabetic() {
            // Not a plain message (TLS took over): copy the rest blindly.
            conn.forward_client_message(&head, None, to).await?;
            return copy_rest(conn, from, to).await;
        }
        let body = read_exact_or_end(from, len as usize - 4)
            .await?
            .unwrap_or_default();
        let trigger = (kind == b'Q' && is_commit(&body)).then_some(Trigger::Commit);
        let mut message = head;
        message.extend_from_slice(&body);
        conn.forward_client_message(&message, trigger, to).await?;
    }
}

/// Whether a simple query's text (NUL-terminated) is a `COMMIT`.
fn is_commit(body: &[u8]) -> bool {
    let text = body.strip_suffix(&[0]).unwrap_or(body);
    let Ok(text) = std::str::from_utf8(text) else {
        return false;
    };
    let text = text.trim().trim_end_matches(';').trim();
    text.eq_ignore_ascii_case("COMMIT") || text.eq_ignore_ascii_case("END")
}

async fn copy_rest(
    conn: &Connection,
    from: &mut (impl AsyncReadExt + Unpin),
    to: &mut (impl AsyncWriteExt + Unpin),
) -> std::io::Result<()> {
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let n = from.read(&mut buffer).await?;
        if n == 0 {
            return Ok(());
        }
        conn.forward_client_message(&buffer[..n], None, to).await?;
    }
}

#[cfg(test)]
mod tests {
    use super::is_commit;

    #[test]
    fn commits_are_recognised_in_any_spelling() {
        assert!(is_commit(b"COMMIT\0"));
        assert!(is_commit(b" commit; \0"));
        assert!(!is_commit(b"SELECT 'COMMIT'\0"));
        assert!(!is_commit(b"BEGIN\0"));
    }
}
