//! The laptop's end of a bridge: one session with the relay, over the port-forward's stream.
//!
//! [`Session::open`] says hello and waits to be welcomed. From then on, tasks of the session
//! ping the relay every second (and end the session when it stops answering), and serve the data
//! streams the relay opens: each names the relay port its cluster connection arrived on, which
//! the routes map to a local `host:port` to dial. What happens is reported as
//! [`SessionEvent`]s, for the CLI to show.

use std::{
    collections::{BTreeMap, VecDeque},
    io,
    sync::{Arc, PoisonError, RwLock},
    time::Duration,
};

use tokio::{
    io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadHalf, WriteHalf},
    net::TcpStream,
    sync::{mpsc, oneshot, watch},
    time::Instant,
};
use tokio_util::{sync::CancellationToken, task::TaskTracker};

use crate::{
    mux::{Mux, MuxHandle, MuxStream, Side},
    protocol::{
        LaptopMessage, LineReader, Listening, PROTOCOL_VERSION, ProtocolError, RelayMessage,
        read_stream_header, write_message,
    },
};

/// How often the laptop pings: the relay ends a session it has not heard from for its idle
/// timeout (5 s), so several pings fit in it.
const PING_INTERVAL: Duration = Duration::from_secs(1);

/// A relay not heard from for this long is gone (a port-forward can die without closing).
const RELAY_SILENCE: Duration = Duration::from_secs(5);

/// The bound on `Hello` → `Welcome` → `Listening`.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long [`Session::close`] waits for the relay to end the session it asked to end.
const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// The bound on dialling a local target: one that does not answer is reported, not waited for.
const DIAL_TIMEOUT: Duration = Duration::from_secs(10);

/// The bound on a data stream's header, which the relay sends at once.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// The copy buffer of each direction of a connection.
const COPY_BUFFER: usize = 64 * 1024;

/// A live session with a relay. Dropping it ends the session, as [`Session::close`] does
/// without waiting.
#[derive(Debug)]
pub struct Session {
    commands: mpsc::Sender<Command>,
    routes: Arc<Routes>,
    ended: watch::Receiver<Option<String>>,
}

/// What happens in a session, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionEvent {
    /// The relay listens on these ports now (after `open` and each `set_routes`).
    Listening(Listening),
    /// A cluster connection arrived on this relay port.
    Connection { port: u16 },
    /// A cluster connection could not be carried to its local target; the relay closed it.
    DialFailed {
        port: u16,
        /// The route's `host:port`; empty when the relay port has no route.
        target: String,
        error: String,
    },
    /// The session ended; the last event.
    Closed { reason: String },
}

/// Why a session could not be opened or used.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The relay said no; its reason, verbatim (e.g. another session is live).
    #[error("the relay refused the session: {0}")]
    Refused(String),
    #[error(transparent)]
    Protocol(#[from] ProtocolError),
    #[error("session: {0}")]
    Io(#[from] io::Error),
    #[error("the relay did not answer within {0:?}")]
    Timeout(Duration),
    #[error("unexpected message from the relay: {0}")]
    Unexpected(String),
    /// The session has ended, with why.
    #[error("the session has ended: {0}")]
    Closed(String),
}

/// Relay port → local `host:port`, read by every data stream, replaced by `set_routes`.
#[derive(Debug, Default)]
struct Routes(RwLock<BTreeMap<u16, String>>);

impl Routes {
    fn get(&self, port: u16) -> Option<String> {
        let routes = self.0.read().unwrap_or_else(PoisonError::into_inner);
        routes.get(&port).cloned()
    }

    fn replace(&self, routes: BTreeMap<u16, String>) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = routes;
    }
}

#[derive(Debug)]
enum Command {
    Ports {
        ports: Vec<u16>,
        reply: oneshot::Sender<Listening>,
    },
    Close,
}

type ControlReader = LineReader<ReadHalf<MuxStream>>;
type ControlWriter = WriteHalf<MuxStream>;

impl Session {
    /// Opens a session over `stream` (the port-forward to the relay's session port): says hello
    /// as `client`, asks for the ports of `routes`, and returns once the relay listens. The first
    /// event is that `Listening`.
    pub async fn open<S>(
        stream: S,
        client: &str,
        routes: BTreeMap<u16, String>,
    ) -> Result<(Session, mpsc::UnboundedReceiver<SessionEvent>), SessionError>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        Self::open_within(stream, client, routes, HANDSHAKE_TIMEOUT).await
    }

    /// [`Session::open`], the handshake bounded by `bound`: a caller that tries again soon
    /// (a relay pod that has just started) gives up on a silent stream sooner. A relay that
    /// listens answers in a few round trips; a port-forward whose far end never connected
    /// can stay silent instead of closing.
    pub async fn open_within<S>(
        stream: S,
        client: &str,
        routes: BTreeMap<u16, String>,
        bound: Duration,
    ) -> Result<(Session, mpsc::UnboundedReceiver<SessionEvent>), SessionError>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let mux = Mux::start(stream, Side::Laptop);
        let ports: Vec<u16> = routes.keys().copied().collect();
        let handshake = tokio::time::timeout(bound, handshake(&mux, client, ports));
        let (reader, writer, listening) = match handshake.await {
            Ok(Ok(opened)) => opened,
            Ok(Err(error)) => {
                end_mux(&mux.handle).await;
                return Err(error);
            }
            Err(_) => {
                end_mux(&mux.handle).await;
                return Err(SessionError::Timeout(bound));
            }
        };
        let Mux {
            inbound, handle, ..
        } = mux;
        let (events, events_rx) = mpsc::unbounded_channel();
        let _ = events.send(SessionEvent::Listening(listening));
        let routes = Arc::new(Routes(RwLock::new(routes)));
        let (commands, commands_rx) = mpsc::channel(16);
        let (ended_tx, ended) = watch::channel(None);
        let streams = CancellationToken::new();
        let tasks = TaskTracker::new();
        tasks.spawn(serve_streams(
            inbound,
            routes.clone(),
            events.clone(),
            streams.clone(),
            tasks.clone(),
        ));
        tokio::spawn(async move {
            let reason = tokio::select! {
                reason = control(reader, writer, commands_rx, &events) => reason,
                end = handle.ended() => format!("connection to the relay ended: {end:?}"),
            };
            tracing::info!(%reason, "session ended");
            streams.cancel();
            tasks.close();
            end_mux(&handle).await;
            tasks.wait().await;
            let _ = events.send(SessionEvent::Closed {
                reason: reason.clone(),
            });
            ended_tx.send_replace(Some(reason));
        });
        Ok((
            Session {
                commands,
                routes,
                ended,
            },
            events_rx,
        ))
    }

    /// Replaces the routes, and asks the relay to listen on their ports; returns its answer.
    /// Connections on a port that keeps its route are not touched.
    pub async fn set_routes(
        &self,
        routes: BTreeMap<u16, String>,
    ) -> Result<Listening, SessionError> {
        let ports = routes.keys().copied().collect();
        self.routes.replace(routes);
        let (reply, answer) = oneshot::channel();
        if self
            .commands
            .send(Command::Ports { ports, reply })
            .await
            .is_err()
        {
            return Err(self.closed_error());
        }
        answer.await.map_err(|_| self.closed_error())
    }

    /// Completes when the session has ended: closed, the relay gone or silent, the stream ended.
    pub async fn closed(&self) {
        let mut ended = self.ended.clone();
        let _ = ended.wait_for(Option::is_some).await;
    }

    /// Why the session ended, once it has.
    pub fn close_reason(&self) -> Option<String> {
        self.ended.borrow().clone()
    }

    /// Ends the session: tells the relay (which stops listening), and waits a little for it.
    pub async fn close(self) {
        let _ = self.commands.send(Command::Close).await;
        self.closed().await;
    }

    fn closed_error(&self) -> SessionError {
        SessionError::Closed(
            self.close_reason()
                .unwrap_or_else(|| "the session is ending".into()),
        )
    }
}

/// Closes the multiplexer and waits for it (bounded by the multiplexer's own grace).
async fn end_mux(handle: &MuxHandle) {
    handle.close();
    handle.ended().await;
}

/// `Hello` → `Welcome` → `Listening`.
async fn handshake(
    mux: &Mux,
    client: &str,
    ports: Vec<u16>,
) -> Result<(ControlReader, ControlWriter, Listening), SessionError> {
    let control = mux.opener.open().await?;
    let (read, mut writer) = tokio::io::split(control);
    let mut reader = LineReader::new(read);
    let hello = LaptopMessage::Hello {
        version: PROTOCOL_VERSION,
        client: client.to_owned(),
        ports,
    };
    write_message(&mut writer, &hello).await?;
    let mut welcomed = false;
    loop {
        let Some(message) = reader.next::<RelayMessage>().await? else {
            return Err(SessionError::Closed(
                "the relay ended the session without an answer".into(),
            ));
        };
        match message {
            RelayMessage::Refused { reason } => return Err(SessionError::Refused(reason)),
            RelayMessage::Welcome { version } if version == PROTOCOL_VERSION && !welcomed => {
                welcomed = true;
            }
            RelayMessage::Listening(listening) if welcomed => {
                return Ok((reader, writer, listening));
            }
            other => return Err(SessionError::Unexpected(format!("{other:?}"))),
        }
    }
}

/// The control stream after the handshake: pings, route changes, the relay's answers. Returns
/// why the session ended.
async fn control(
    mut reader: ControlReader,
    mut writer: ControlWriter,
    mut commands: mpsc::Receiver<Command>,
    events: &mpsc::UnboundedSender<SessionEvent>,
) -> String {
    let mut ping = tokio::time::interval(PING_INTERVAL);
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut seq = 0u64;
    let mut heard = Instant::now();
    // `Ports` are answered in order, each by one `Listening`.
    let mut waiting: VecDeque<oneshot::Sender<Listening>> = VecDeque::new();
    loop {
        tokio::select! {
            _ = ping.tick() => {
                if heard.elapsed() > RELAY_SILENCE {
                    return format!("the relay has not answered for {RELAY_SILENCE:?}");
                }
                seq += 1;
                if let Err(error) = send(&mut writer, &LaptopMessage::Ping { seq }).await {
                    return format!("pinging the relay: {error}");
                }
            }
            message = reader.next::<RelayMessage>() => {
                heard = Instant::now();
                match message {
                    Ok(Some(RelayMessage::Pong { .. })) => {}
                    Ok(Some(RelayMessage::Listening(listening))) => {
                        let _ = events.send(SessionEvent::Listening(listening.clone()));
                        if let Some(reply) = waiting.pop_front() {
                            let _ = reply.send(listening);
                        }
                    }
                    Ok(Some(other)) => return format!("unexpected message from the relay: {other:?}"),
                    Ok(None) => return "the relay ended the session".into(),
                    Err(error) => return error.to_string(),
                }
            }
            command = commands.recv() => match command {
                Some(Command::Ports { ports, reply }) => {
                    if let Err(error) = send(&mut writer, &LaptopMessage::Ports { ports }).await {
                        return format!("sending ports: {error}");
                    }
                    waiting.push_back(reply);
                }
                // `None`: the `Session` was dropped, which closes it too.
                Some(Command::Close) | None => {
                    // The end of the control stream ends the session on the relay, which then
                    // closes the connection: wait for that, briefly, so the relay's ports are
                    // closed when `close` returns.
                    let _ = writer.shutdown().await;
                    let _ = tokio::time::timeout(CLOSE_WAIT, async {
                        while let Ok(Some(_)) = reader.next::<RelayMessage>().await {}
                    })
                    .await;
                    return "closed by this side".into();
                }
            },
        }
    }
}

/// Sends a control message, bounded in time: a relay that stops reading is as gone as one that
/// stops answering.
async fn send(writer: &mut ControlWriter, message: &LaptopMessage) -> io::Result<()> {
    tokio::time::timeout(RELAY_SILENCE, write_message(writer, message))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "the relay does not read"))?
}

/// Serves each data stream the relay opens, until the session ends.
async fn serve_streams(
    mut inbound: mpsc::UnboundedReceiver<MuxStream>,
    routes: Arc<Routes>,
    events: mpsc::UnboundedSender<SessionEvent>,
    stop: CancellationToken,
    tasks: TaskTracker,
) {
    loop {
        let stream = tokio::select! {
            () = stop.cancelled() => return,
            stream = inbound.recv() => match stream {
                Some(stream) => stream,
                None => return,
            },
        };
        let (routes, events, stop) = (routes.clone(), events.clone(), stop.clone());
        tasks.spawn(async move {
            tokio::select! {
                () = stop.cancelled() => {}
                () = serve_stream(stream, &routes, &events) => {}
            }
        });
    }
}

/// One cluster connection: dial its route's target and carry bytes both ways. On failure the
/// stream is dropped unclosed, which resets it: the relay then closes the cluster connection.
async fn serve_stream(
    mut stream: MuxStream,
    routes: &Routes,
    events: &mpsc::UnboundedSender<SessionEvent>,
) {
    let port = match tokio::time::timeout(HEADER_TIMEOUT, read_stream_header(&mut stream)).await {
        Ok(Ok(port)) => port,
        Ok(Err(error)) => {
            tracing::debug!(%error, "reading a data stream's header");
            return;
        }
        Err(_) => {
            tracing::debug!("no data stream header in time");
            return;
        }
    };
    let Some(target) = routes.get(port) else {
        let _ = events.send(SessionEvent::DialFailed {
            port,
            target: String::new(),
            error: "no route for this relay port".into(),
        });
        return;
    };
    let _ = events.send(SessionEvent::Connection { port });
    let dialled = match tokio::time::timeout(DIAL_TIMEOUT, TcpStream::connect(&target)).await {
        Ok(Ok(tcp)) => Ok(tcp),
        Ok(Err(error)) => Err(error.to_string()),
        Err(_) => Err(format!("no answer within {DIAL_TIMEOUT:?}")),
    };
    let mut tcp = match dialled {
        Ok(tcp) => tcp,
        Err(error) => {
            tracing::debug!(port, %target, %error, "dialling a route's target");
            let _ = events.send(SessionEvent::DialFailed {
                port,
                target,
                error,
            });
            return;
        }
    };
    let _ = tcp.set_nodelay(true);
    // Half-close travels: EOF on one side shuts down writing on the other.
    if let Err(error) =
        tokio::io::copy_bidirectional_with_sizes(&mut stream, &mut tcp, COPY_BUFFER, COPY_BUFFER)
            .await
    {
        tracing::debug!(port, %target, %error, "connection ended");
    }
}
