//! What the laptop and the relay say to each other.
//!
//! Two kinds of stream share a session:
//!
//! - **The control stream**, the first stream the laptop opens: newline-delimited JSON, one
//!   message a line, `{"type": "hello", ...}`. JSON rather than a binary format because it is
//!   read by people (logs, `socat`), and its volume is one ping a second.
//! - **Data streams**, one for each TCP connection the relay accepts, opened by the relay. The
//!   first [`STREAM_HEADER_LEN`] bytes name the relay port the connection arrived on (big-endian
//!   `u16`); everything after is the connection's bytes, unchanged, both ways.
//!
//! A line is bounded by [`MAX_LINE_BYTES`]: a peer that never sends a newline must not make the
//! other side buffer without end, so a longer line is an error that ends the session.

use serde::{Deserialize, Serialize, de::DeserializeOwned};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};

/// The protocol both sides speak; a `Hello` with another version is refused.
pub const PROTOCOL_VERSION: u32 = 1;

/// The longest control line either side accepts, newline excluded. The largest honest message
/// is a `Listening` naming every port of the relay's range with a reason each: a few KiB.
pub const MAX_LINE_BYTES: usize = 64 * 1024;

/// The bytes before a data stream's payload: the relay port, big-endian.
pub const STREAM_HEADER_LEN: usize = 2;

/// Laptop → relay.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    tag = "type",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum LaptopMessage {
    /// The first message of a session: who is asking, and the relay ports to listen on.
    Hello {
        version: u32,
        client: String,
        ports: Vec<u16>,
    },
    /// Replaces the set of relay ports to listen on; answered by `Listening`.
    Ports { ports: Vec<u16> },
    /// Keeps the session live; answered by `Pong` with the same `seq`.
    Ping { seq: u64 },
}

/// Relay → laptop.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    tag = "type",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum RelayMessage {
    /// The `Hello` was accepted: this session is the relay's live one.
    Welcome {
        version: u32,
    },
    /// The `Hello` was not accepted; the relay closes the session after this line.
    Refused {
        reason: String,
    },
    Pong {
        seq: u64,
    },
    /// The answer to `Hello` and `Ports`.
    Listening(Listening),
}

/// Which relay ports listen now, and which asked-for ports do not, with why.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Listening {
    pub ports: Vec<u16>,
    pub failed: Vec<PortFailure>,
}

/// An asked-for relay port the relay does not listen on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PortFailure {
    pub port: u16,
    /// For the developer to read, e.g. "outside the relay's port range 10000-10999".
    pub reason: String,
}

/// A control stream that cannot be read as the protocol says.
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    #[error("control stream: {0}")]
    Io(#[from] std::io::Error),
    #[error("control line longer than {MAX_LINE_BYTES} bytes")]
    LineTooLong,
    #[error("control stream ended inside a line")]
    Truncated,
    #[error("malformed control message: {0}")]
    Malformed(#[from] serde_json::Error),
}

/// Reads control messages, one a line, never holding more than [`MAX_LINE_BYTES`] of a line.
///
/// Cancel-safe: a partly read line stays in `self` until the next call, so `next` can sit in a
/// `select!` or under a timeout without losing bytes.
#[derive(Debug)]
pub(crate) struct LineReader<R> {
    inner: BufReader<R>,
    line: Vec<u8>,
}

impl<R: AsyncRead + Unpin> LineReader<R> {
    pub(crate) fn new(inner: R) -> Self {
        Self {
            inner: BufReader::new(inner),
            line: Vec::new(),
        }
    }

    /// The next message, or `None` at a clean end of the stream (between lines).
    pub(crate) async fn next<M: DeserializeOwned>(&mut self) -> Result<Option<M>, ProtocolError> {
        loop {
            let available = self.inner.fill_buf().await?;
            if available.is_empty() {
                return if self.line.is_empty() {
                    Ok(None)
                } else {
                    Err(ProtocolError::Truncated)
                };
            }
            let newline = available.iter().position(|&b| b == b'\n');
            let take = newline.unwrap_or(available.len());
            if self.line.len() + take > MAX_LINE_BYTES {
                return Err(ProtocolError::LineTooLong);
            }
            self.line.extend_from_slice(&available[..take]);
            let consumed = newline.map_or(take, |at| at + 1);
            self.inner.consume(consumed);
            if newline.is_none() {
                continue;
            }
            let line = std::mem::take(&mut self.line);
            // Blank lines (a hand-typed `\r\n` too) carry nothing; skip them.
            if line.trim_ascii().is_empty() {
                continue;
            }
            return Ok(Some(serde_json::from_slice(&line)?));
        }
    }
}

/// Writes one message as one line and flushes it: control messages are rare and each one is
/// waited for by the other side.
pub(crate) async fn write_message<W, M>(writer: &mut W, message: &M) -> std::io::Result<()>
where
    W: AsyncWrite + Unpin,
    M: Serialize,
{
    let mut line = serde_json::to_vec(message).map_err(std::io::Error::other)?;
    line.push(b'\n');
    writer.write_all(&line).await?;
    writer.flush().await
}

/// Starts a data stream: the relay port its connection arrived on.
pub(crate) async fn write_stream_header<W: AsyncWrite + Unpin>(
    writer: &mut W,
    relay_port: u16,
) -> std::io::Result<()> {
    writer.write_all(&relay_port.to_be_bytes()).await
}

/// The relay port a data stream's connection arrived on.
pub(crate) async fn read_stream_header<R: AsyncRead + Unpin>(
    reader: &mut R,
) -> std::io::Result<u16> {
    let mut header = [0u8; STREAM_HEADER_LEN];
    reader.read_exact(&mut header).await?;
    Ok(u16::from_be_bytes(header))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_tagged_camel_case_json() {
        let hello = LaptopMessage::Hello {
            version: PROTOCOL_VERSION,
            client: "alice@laptop".into(),
            ports: vec![10000, 10001],
        };
        assert_eq!(
            serde_json::to_string(&hello).unwrap(),
            r#"{"type":"hello","version":1,"client":"alice@laptop","ports":[10000,10001]}"#
        );
        let listening = RelayMessage::Listening(Listening {
            ports: vec![10000],
            failed: vec![PortFailure {
                port: 80,
                reason: "outside".into(),
            }],
        });
        let text = serde_json::to_string(&listening).unwrap();
        assert_eq!(
            text,
            r#"{"type":"listening","ports":[10000],"failed":[{"port":80,"reason":"outside"}]}"#
        );
        assert_eq!(
            serde_json::from_str::<RelayMessage>(&text).unwrap(),
            listening
        );
    }

    #[tokio::test]
    async fn reads_lines_across_reads_and_skips_blank_ones() {
        let (mut a, b) = tokio::io::duplex(64);
        let writer = tokio::spawn(async move {
            a.write_all(b"{\"type\":\"ping\",").await.unwrap();
            a.write_all(b"\"seq\":7}\n\r\n{\"type\":\"ping\",\"seq\":8}\n")
                .await
                .unwrap();
        });
        let mut reader = LineReader::new(b);
        assert_eq!(
            reader.next::<LaptopMessage>().await.unwrap(),
            Some(LaptopMessage::Ping { seq: 7 })
        );
        assert_eq!(
            reader.next::<LaptopMessage>().await.unwrap(),
            Some(LaptopMessage::Ping { seq: 8 })
        );
        writer.await.unwrap();
        assert_eq!(reader.next::<LaptopMessage>().await.unwrap(), None);
    }

    #[tokio::test]
    async fn an_over_long_line_is_an_error_not_a_buffer() {
        let (mut a, b) = tokio::io::duplex(4096);
        // The writer never sends a newline; the reader must give up at the bound, not wait.
        let writer = tokio::spawn(async move {
            let chunk = vec![b'x'; 4096];
            while a.write_all(&chunk).await.is_ok() {}
        });
        let mut reader = LineReader::new(b);
        let error = reader.next::<LaptopMessage>().await.unwrap_err();
        assert!(matches!(error, ProtocolError::LineTooLong), "{error}");
        drop(reader);
        writer.await.unwrap();
    }

    #[tokio::test]
    async fn a_stream_ending_inside_a_line_is_truncated() {
        let (mut a, b) = tokio::io::duplex(64);
        a.write_all(b"{\"type\":\"pi").await.unwrap();
        drop(a);
        let error = LineReader::new(b)
            .next::<LaptopMessage>()
            .await
            .unwrap_err();
        assert!(matches!(error, ProtocolError::Truncated), "{error}");
    }

    #[tokio::test]
    async fn stream_header_is_the_port_big_endian() {
        let mut bytes = Vec::new();
        write_stream_header(&mut bytes, 10_001).await.unwrap();
        assert_eq!(bytes, [0x27, 0x11]);
        assert_eq!(read_stream_header(&mut &bytes[..]).await.unwrap(), 10_001);
    }
}
