//! One yamux connection over a byte stream, driven by one task.
//!
//! yamux 0.13 is poll-based: the connection makes progress (reads frames, writes the streams'
//! frames, answers pings, grants window) only while `poll_next_inbound` is being polled, and
//! opens a stream only through `poll_new_outbound` on the same `&mut`. So one task owns the
//! connection and polls both; the rest of the crate asks it for streams through an [`Opener`]
//! (request and reply over channels) and receives the peer's streams from `inbound`. Streams are
//! handed out as tokio I/O (`compat`), as everything else in the crate speaks tokio.

use std::{future::poll_fn, io, task::Poll, time::Duration};

use tokio::{
    io::{AsyncRead, AsyncWrite},
    sync::{mpsc, oneshot, watch},
};
use tokio_util::{
    compat::{Compat, FuturesAsyncReadCompatExt, TokioAsyncReadCompatExt},
    sync::CancellationToken,
};

/// A stream of the session, as tokio I/O.
pub(crate) type MuxStream = Compat<yamux::Stream>;

/// yamux's per-stream window to start with (256 KiB, by its specification).
const STREAM_CREDIT: usize = yamux::DEFAULT_CREDIT as usize;

/// The laptop's bound on streams. The relay decides how many data streams exist, and a peer
/// opening one stream beyond this bound makes yamux end the *whole* session; the laptop also
/// holds a stream a little longer than the relay (while dialling its local target). So the
/// bound sits far above anything a relay opens (see [`relay_stream_bound`]): it is a cap, not an
/// allocation, and costs nothing until streams exist.
const LAPTOP_MAX_STREAMS: usize = 4096;

/// The relay's headroom over its data streams: the control stream, and streams whose task has
/// ended but which the driver has not yet removed. Opening beyond the bound fails for that one
/// connection only, never for the session.
const RELAY_STREAM_SLACK: usize = 16;

/// Window beyond each stream's first 256 KiB that yamux may grant, shared by all the streams of
/// a session, so a fast stream can grow its window to the bandwidth-delay product (yamux
/// auto-tunes it from the measured RTT). 100 MiB/s over a port-forward of 1 ms RTT needs about
/// 100 KiB in flight, 5 ms about 512 KiB: a few MiB leave ample room while keeping what a slow
/// reader can make the receiver buffer small. The relay's is smaller: it aims at a resident size
/// of at most 16 MiB under load, and idles at 9–13 MiB (most of it the binary's own pages), so
/// what the laptop's answers can make it hold is kept to 4 MiB beyond the streams' first
/// credit (still 80 MiB/s over a port-forward of 50 ms). With 8 MiB, a 64 MiB download peaked
/// at 16.6 MiB in one bench run of three.
const LAPTOP_WINDOW_BUDGET: usize = 32 * 1024 * 1024;
const RELAY_WINDOW_BUDGET: usize = 4 * 1024 * 1024;

/// How long a closing session may take to flush its last frames (a `Refused`, a final `Pong`)
/// before the byte stream is dropped anyway: a half-open port-forward never drains.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// The most of a session's outgoing bytes buffered until yamux flushes
/// (larger writes go through at once).
const FRAME_COALESCE: usize = 64 * 1024;

/// How many open requests may wait for the driver; callers beyond wait their turn.
const OPEN_QUEUE: usize = 64;

/// Which end of the session this is: yamux's client and server number their streams apart.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Side {
    /// Opens the control stream, accepts data streams.
    Laptop,
    /// Accepts the control stream, opens at most `max_data_streams` data streams at once.
    Relay { max_data_streams: usize },
}

/// The most data streams a relay may hold at once without ever tripping the laptop's bound.
pub(crate) const fn relay_stream_bound() -> usize {
    LAPTOP_MAX_STREAMS / 2
}

/// Why the connection ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum MuxEnd {
    /// This side closed it ([`MuxHandle::close`]).
    Closed,
    /// The peer closed it, or the byte stream reached its end.
    RemoteClosed,
    /// The byte stream failed, or the peer broke the yamux protocol.
    Failed(String),
}

/// A session's multiplexer: open streams, receive the peer's, close, learn of the end.
#[derive(Debug)]
pub(crate) struct Mux {
    pub(crate) opener: Opener,
    /// The peer's streams, in the order they were opened. Unbounded, because yamux bounds the
    /// number of streams; a stream received after this is dropped is reset.
    pub(crate) inbound: mpsc::UnboundedReceiver<MuxStream>,
    pub(crate) handle: MuxHandle,
}

/// Opens streams to the peer; cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct Opener {
    requests: mpsc::Sender<oneshot::Sender<io::Result<MuxStream>>>,
}

/// Closes the connection and tells when it ended; cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct MuxHandle {
    close: CancellationToken,
    ended: watch::Receiver<Option<MuxEnd>>,
}

impl Mux {
    /// Starts the driver task on the current tokio runtime. The owner must call
    /// [`MuxHandle::close`] when done: dropping the handles does not end the session.
    pub(crate) fn start<T>(io: T, side: Side) -> Mux
    where
        T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (config, mode) = match side {
            Side::Laptop => (
                yamux_config(LAPTOP_MAX_STREAMS, LAPTOP_WINDOW_BUDGET),
                yamux::Mode::Client,
            ),
            Side::Relay { max_data_streams } => (
                yamux_config(
                    max_data_streams
                        .min(relay_stream_bound())
                        .saturating_add(RELAY_STREAM_SLACK),
                    RELAY_WINDOW_BUDGET,
                ),
                yamux::Mode::Server,
            ),
        };
        // yamux writes a frame's 12-byte header and its body in two writes,
        // then flushes. Unbuffered, a port-forward carries them as two
        // messages, and the API client's connection (Nagle's algorithm on)
        // holds the second until the first is acknowledged: up to a delayed
        // ACK, 40 ms, for a small answer. Buffered up to the flush, a frame
        // is one write.
        let io = tokio::io::BufWriter::with_capacity(FRAME_COALESCE, io);
        let connection = yamux::Connection::new(io.compat(), config, mode);
        let (requests, request_rx) = mpsc::channel(OPEN_QUEUE);
        let (inbound_tx, inbound) = mpsc::unbounded_channel();
        let (ended_tx, ended) = watch::channel(None);
        let close = CancellationToken::new();
        tokio::spawn(drive(
            connection,
            request_rx,
            inbound_tx,
            close.clone(),
            ended_tx,
        ));
        Mux {
            opener: Opener { requests },
            inbound,
            handle: MuxHandle { close, ended },
        }
    }
}

fn yamux_config(max_streams: usize, window_budget: usize) -> yamux::Config {
    // yamux's own assertions multiply the bound by 256 KiB: an absurd bound would overflow
    // there. No side ever needs more than the laptop's bound.
    let max_streams = max_streams.clamp(1, LAPTOP_MAX_STREAMS);
    let mut config = yamux::Config::default();
    // yamux asserts `window >= streams × 256 KiB` at each setter; lifting the window first
    // keeps every intermediate state valid, whatever the numbers.
    config.set_max_connection_receive_window(None);
    config.set_max_num_streams(max_streams);
    config.set_max_connection_receive_window(Some(
        max_streams
            .saturating_mul(STREAM_CREDIT)
            .saturating_add(window_budget),
    ));
    config
}

impl Opener {
    /// A new stream to the peer. Fails when the session has ended or holds its most streams.
    pub(crate) async fn open(&self) -> io::Result<MuxStream> {
        let (reply, answer) = oneshot::channel();
        self.requests
            .send(reply)
            .await
            .map_err(|_| session_gone())?;
        answer.await.map_err(|_| session_gone())?
    }
}

impl MuxHandle {
    /// Asks the driver to close: pending frames are flushed (for at most a second), then the
    /// byte stream is closed. Returns at once; [`Self::ended`] tells when it is done.
    pub(crate) fn close(&self) {
        self.close.cancel();
    }

    /// Completes when the connection has ended, with why.
    pub(crate) async fn ended(&self) -> MuxEnd {
        let mut ended = self.ended.clone();
        match ended.wait_for(Option::is_some).await {
            Ok(end) => end.clone().unwrap_or(MuxEnd::RemoteClosed),
            // The driver is gone without a word: only when the runtime shuts down.
            Err(_) => MuxEnd::Failed("session driver stopped".into()),
        }
    }
}

fn session_gone() -> io::Error {
    io::Error::new(io::ErrorKind::NotConnected, "session has ended")
}

type Reply = oneshot::Sender<io::Result<MuxStream>>;

/// What stopped the polling loop.
enum Stop {
    Ended(MuxEnd),
    CloseRequested,
}

async fn drive<T>(
    mut connection: yamux::Connection<T>,
    mut requests: mpsc::Receiver<Reply>,
    inbound: mpsc::UnboundedSender<MuxStream>,
    close: CancellationToken,
    ended: watch::Sender<Option<MuxEnd>>,
) where
    T: futures::AsyncRead + futures::AsyncWrite + Unpin,
{
    let stop = {
        let cancelled = close.cancelled();
        tokio::pin!(cancelled);
        // One open request at a time is being served; the others wait in `requests`.
        let mut pending: Option<Reply> = None;
        poll_fn(|cx| {
            loop {
                if cancelled.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Stop::CloseRequested);
                }
                match connection.poll_next_inbound(cx) {
                    Poll::Ready(Some(Ok(stream))) => {
                        // A receiver that is gone means nobody serves the peer's streams:
                        // dropping the stream resets it, which the peer sees.
                        let _ = inbound.send(stream.compat());
                        continue;
                    }
                    Poll::Ready(Some(Err(error))) => {
                        return Poll::Ready(Stop::Ended(MuxEnd::Failed(error.to_string())));
                    }
                    Poll::Ready(None) => return Poll::Ready(Stop::Ended(MuxEnd::RemoteClosed)),
                    Poll::Pending => {}
                }
                if pending.is_none()
                    && let Poll::Ready(Some(reply)) = requests.poll_recv(cx)
                {
                    pending = Some(reply);
                }
                let Some(reply) = pending.take() else {
                    return Poll::Pending;
                };
                if reply.is_closed() {
                    // The caller stopped waiting: do not open a stream nobody will use.
                    continue;
                }
                match connection.poll_new_outbound(cx) {
                    Poll::Ready(result) => {
                        // An error here (most streams open, connection closing) is the
                        // caller's; a dead connection is also reported by `poll_next_inbound`.
                        let result = result
                            .map(FuturesAsyncReadCompatExt::compat)
                            .map_err(|error| io::Error::other(error.to_string()));
                        let _ = reply.send(result);
                        continue;
                    }
                    Poll::Pending => {
                        pending = Some(reply);
                        return Poll::Pending;
                    }
                }
            }
        })
        .await
    };
    let end = match stop {
        Stop::Ended(end) => end,
        Stop::CloseRequested => {
            match tokio::time::timeout(CLOSE_GRACE, poll_fn(|cx| connection.poll_close(cx))).await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => tracing::debug!(%error, "closing the session's connection"),
                Err(_) => tracing::debug!("session's connection did not drain; dropping it"),
            }
            MuxEnd::Closed
        }
    };
    // The byte stream closes here, before anyone learns of the end.
    drop(connection);
    ended.send_replace(Some(end));
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    #[tokio::test]
    async fn streams_carry_bytes_both_ways_with_half_close() {
        let (a, b) = tokio::io::duplex(64 * 1024);
        let laptop = Mux::start(a, Side::Laptop);
        let mut relay = Mux::start(
            b,
            Side::Relay {
                max_data_streams: 8,
            },
        );
        let mut out = laptop.opener.open().await.unwrap();
        out.write_all(b"hello").await.unwrap();
        out.shutdown().await.unwrap();
        let mut inbound = relay.inbound.recv().await.unwrap();
        let mut got = Vec::new();
        inbound.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"hello");
        // The laptop's write side is closed; its read side still works.
        inbound.write_all(b"world").await.unwrap();
        inbound.shutdown().await.unwrap();
        let mut back = Vec::new();
        out.read_to_end(&mut back).await.unwrap();
        assert_eq!(back, b"world");

        laptop.handle.close();
        assert_eq!(laptop.handle.ended().await, MuxEnd::Closed);
        assert_eq!(relay.handle.ended().await, MuxEnd::RemoteClosed);
        assert!(relay.opener.open().await.is_err());
    }

    #[test]
    fn configs_for_any_bound_do_not_panic() {
        for streams in [0, 1, 512, 4096, usize::MAX / 2] {
            let _ = yamux_config(streams, RELAY_WINDOW_BUDGET);
        }
    }
}
