//! The relay: the cluster end of a bridge, one small pod per bridged workload.
//!
//! It waits for the laptop's session on a loopback port (only the API server's port-forward,
//! which enters the pod's network namespace, reaches it), serves one live session at a time,
//! and while that session is live listens on the relay ports the laptop asked for. Each TCP
//! connection on those ports becomes one data stream to the laptop. When the session ends — the
//! laptop closed it, its byte stream ended, or it stayed silent for the idle timeout — the relay
//! stops listening, so cluster clients are refused instead of hanging on a dead tunnel, and the
//! pod turns unready (see [`health`]).
//!
//! Everything runs as tasks of whatever runtime calls [`run`]; a `current_thread` runtime is
//! enough, and is what keeps the pod small.

mod health;

use std::{
    collections::{BTreeMap, BTreeSet},
    future::Future,
    io,
    net::{IpAddr, Ipv4Addr, SocketAddr},
    ops::RangeInclusive,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use tokio::{
    io::{AsyncWrite, AsyncWriteExt, WriteHalf},
    net::{TcpListener, TcpStream},
    sync::{OwnedSemaphorePermit, Semaphore, watch},
    task::JoinHandle,
};
use tokio_util::{sync::CancellationToken, task::TaskTracker};

use crate::{
    mux::{Mux, MuxStream, Opener, Side, relay_stream_bound},
    protocol::{
        LaptopMessage, LineReader, Listening, PROTOCOL_VERSION, PortFailure, RelayMessage,
        write_message, write_stream_header,
    },
};

/// The copy buffer of each direction of a data stream. Small on purpose: the relay holds two
/// per connection, and aims at about 16 MiB resident with hundreds of connections; yamux frames
/// are 16 KiB anyway.
const COPY_BUFFER: usize = 16 * 1024;

/// How long to wait before accepting again after `accept` failed (out of file descriptors):
/// retrying at once would spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// How the relay is set up; [`Default`] is what the relay pod runs with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayConfig {
    /// Where the laptop's session arrives. Loopback: the port-forward reaches it, nothing else.
    pub session_addr: SocketAddr,
    /// Plain HTTP for the kubelet: `/healthz` (the process) and `/ready` (a session is live).
    pub health_addr: SocketAddr,
    /// The relay ports a laptop may ask for; the pod's Service exposes exactly these.
    pub port_range: RangeInclusive<u16>,
    /// The address relay ports listen on.
    pub listen_host: IpAddr,
    /// A session from which nothing is heard for this long has ended (the laptop pings every
    /// second).
    pub idle_timeout: Duration,
    /// The most cluster connections carried at once; a connection beyond is closed at once,
    /// rather than made to wait or allowed to grow the relay without bound.
    pub max_streams: usize,
    /// When set, only a `Hello` naming this client is accepted.
    pub client: Option<String>,
    /// The relay's own Service (`host:port` of its health port), which `/reachable` dials.
    pub service: Option<String>,
}

impl Default for RelayConfig {
    fn default() -> Self {
        Self {
            session_addr: SocketAddr::from((Ipv4Addr::LOCALHOST, 7000)),
            health_addr: SocketAddr::from((Ipv4Addr::UNSPECIFIED, 7001)),
            port_range: 10000..=10999,
            listen_host: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            idle_timeout: Duration::from_secs(5),
            max_streams: 512,
            client: None,
            service: None,
        }
    }
}

/// Runs a relay until `shutdown` completes; fails only when its own ports cannot be bound.
pub async fn run(config: RelayConfig, shutdown: impl Future<Output = ()>) -> io::Result<()> {
    Relay::bind(config).await?.serve(shutdown).await
}

/// A relay whose session and health ports are bound, not yet serving. [`run`] in two steps, for
/// callers that need the bound addresses (port 0 in tests) before serving.
#[derive(Debug)]
pub struct Relay {
    config: RelayConfig,
    session_listener: TcpListener,
    health_listener: TcpListener,
}

/// The live session, as the health endpoint and a refused second laptop see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Live {
    id: u64,
    pub(crate) client: String,
    /// When it connected, to the second (a refusal is read by people).
    pub(crate) since: jiff::Timestamp,
}

/// What the relay's tasks share.
#[derive(Debug)]
struct Shared {
    config: RelayConfig,
    /// The live session, if any. A `watch` so that claiming the slot is one atomic step
    /// (`send_if_modified`) and the health endpoint reads it without a lock of its own.
    live: watch::Sender<Option<Live>>,
    next_id: AtomicU64,
}

impl Relay {
    /// Binds the session and health ports.
    pub async fn bind(config: RelayConfig) -> io::Result<Relay> {
        let session_listener = TcpListener::bind(config.session_addr).await?;
        let health_listener = TcpListener::bind(config.health_addr).await?;
        Ok(Relay {
            config,
            session_listener,
            health_listener,
        })
    }

    /// The bound session address (the port when `session_addr` asked for port 0).
    pub fn session_addr(&self) -> io::Result<SocketAddr> {
        self.session_listener.local_addr()
    }

    /// The bound health address.
    pub fn health_addr(&self) -> io::Result<SocketAddr> {
        self.health_listener.local_addr()
    }

    /// Serves sessions and health checks until `shutdown` completes, then ends the live session
    /// (its relay ports stop listening) and returns.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) -> io::Result<()> {
        let Relay {
            config,
            session_listener,
            health_listener,
        } = self;
        tracing::info!(
            session = %session_listener.local_addr()?,
            health = %health_listener.local_addr()?,
            ports = ?config.port_range,
            "relay serving"
        );
        let shared = Arc::new(Shared {
            config,
            live: watch::Sender::new(None),
            next_id: AtomicU64::new(1),
        });
        let stop = CancellationToken::new();
        let tasks = TaskTracker::new();
        tasks.spawn(health::serve(
            health_listener,
            shared.live.subscribe(),
            shared.config.service.clone(),
            stop.clone(),
        ));
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                accepted = session_listener.accept() => match accepted {
                    Ok((tcp, peer)) => {
                        tasks.spawn(serve_connection(shared.clone(), tcp, peer, stop.clone()));
                    }
                    Err(error) => {
                        tracing::warn!(%error, "accepting a session");
                        tokio::time::sleep(ACCEPT_BACKOFF).await;
                    }
                },
            }
        }
        tracing::info!("relay shutting down");
        stop.cancel();
        tasks.close();
        tasks.wait().await;
        Ok(())
    }
}

impl Shared {
    /// The bound on concurrent data streams: the configured one, within what the laptop's
    /// multiplexer accepts (beyond it, yamux would end the whole session).
    fn max_data_streams(&self) -> usize {
        self.config.max_streams.min(relay_stream_bound())
    }

    /// Makes `client` the live session, or says since when another one is.
    fn claim(self: &Arc<Self>, client: &str) -> Result<LiveGuard, Live> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let since = jiff::Timestamp::now();
        let since = jiff::Timestamp::from_second(since.as_second()).unwrap_or(since);
        let mut existing = None;
        self.live.send_if_modified(|slot| match slot {
            Some(live) => {
                existing = Some(live.clone());
                false
            }
            None => {
                *slot = Some(Live {
                    id,
                    client: client.to_owned(),
                    since,
                });
                true
            }
        });
        match existing {
            Some(live) => Err(live),
            None => Ok(LiveGuard {
                shared: self.clone(),
                id,
            }),
        }
    }
}

/// Holds the live slot; frees it when dropped, however the session task ends.
struct LiveGuard {
    shared: Arc<Shared>,
    id: u64,
}

impl Drop for LiveGuard {
    fn drop(&mut self) {
        self.shared.live.send_if_modified(|slot| {
            if slot.as_ref().is_some_and(|live| live.id == self.id) {
                *slot = None;
                true
            } else {
                false
            }
        });
    }
}

/// One connection to the session port: a session that is accepted or refused.
async fn serve_connection(
    shared: Arc<Shared>,
    tcp: TcpStream,
    peer: SocketAddr,
    stop: CancellationToken,
) {
    // Control lines and small requests should not wait for Nagle.
    let _ = tcp.set_nodelay(true);
    let mut mux = Mux::start(
        tcp,
        Side::Relay {
            max_data_streams: shared.max_data_streams(),
        },
    );
    let reason = session(&shared, &mut mux, &stop).await;
    tracing::info!(%peer, %reason, "session ended");
    mux.handle.close();
    mux.handle.ended().await;
}

/// The session's life from `Hello` to its end, as a reason for the log.
async fn session(shared: &Arc<Shared>, mux: &mut Mux, stop: &CancellationToken) -> String {
    let idle = shared.config.idle_timeout;
    let control = tokio::select! {
        () = stop.cancelled() => return "relay shutting down".into(),
        stream = tokio::time::timeout(idle, mux.inbound.recv()) => match stream {
            Ok(Some(stream)) => stream,
            Ok(None) => return "ended before opening its control stream".into(),
            Err(_) => return "no control stream opened in time".into(),
        },
    };
    let (read, mut write) = tokio::io::split(control);
    let mut reader = LineReader::new(read);
    let hello = tokio::select! {
        () = stop.cancelled() => return "relay shutting down".into(),
        hello = tokio::time::timeout(idle, reader.next::<LaptopMessage>()) => hello,
    };
    let (client, ports) = match hello {
        Ok(Ok(Some(LaptopMessage::Hello {
            version,
            client,
            ports,
        }))) => {
            if version != PROTOCOL_VERSION {
                let reason = format!(
                    "protocol version {version} is not the relay's version {PROTOCOL_VERSION}; \
                     use a pontoon of the relay's release"
                );
                return refuse(&mut write, reason, idle).await;
            }
            if let Some(expected) = &shared.config.client
                && *expected != client
            {
                let reason = format!("this relay serves {expected}, not {client}");
                return refuse(&mut write, reason, idle).await;
            }
            (client, ports)
        }
        Ok(Ok(Some(other))) => return format!("expected hello, got {other:?}"),
        Ok(Ok(None)) => return "control stream ended before hello".into(),
        Ok(Err(error)) => return error.to_string(),
        Err(_) => return "no hello in time".into(),
    };
    let _live = match shared.claim(&client) {
        Ok(guard) => guard,
        Err(live) => {
            let reason = format!(
                "another session of this relay is live (connected {})",
                live.since
            );
            return refuse(&mut write, reason, idle).await;
        }
    };
    tracing::info!(%client, "session live");
    let welcome = RelayMessage::Welcome {
        version: PROTOCOL_VERSION,
    };
    if let Err(error) = send(&mut write, &welcome, idle).await {
        return format!("sending welcome: {error}");
    }
    let mut listeners = Listeners::new(shared, mux.opener.clone());
    let reason = tokio::select! {
        reason = control_loop(shared, &mut reader, &mut write, &mut listeners, ports, stop) => reason,
        // A byte stream that ends does not always end the control stream's reads.
        end = mux.handle.ended() => format!("connection ended: {end:?}"),
    };
    // Stop listening and end the data streams before the live slot (`_live`) is freed: once the
    // pod reads unready, cluster clients are refused, not accepted into a dead session.
    listeners.shut_down().await;
    reason
}

/// Serves the control stream of the live session until the session ends.
async fn control_loop<R, W>(
    shared: &Shared,
    reader: &mut LineReader<R>,
    write: &mut W,
    listeners: &mut Listeners,
    ports: Vec<u16>,
    stop: &CancellationToken,
) -> String
where
    R: tokio::io::AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let idle = shared.config.idle_timeout;
    let listening = listeners.apply(&ports).await;
    if let Err(error) = send(write, &RelayMessage::Listening(listening), idle).await {
        return format!("sending listening: {error}");
    }
    loop {
        let message = tokio::select! {
            () = stop.cancelled() => return "relay shutting down".into(),
            // `next` is cancel-safe: a timeout keeps a partial line for the next call.
            message = tokio::time::timeout(idle, reader.next::<LaptopMessage>()) => message,
        };
        let answer = match message {
            Err(_) => return format!("nothing heard for {idle:?}"),
            Ok(Ok(None)) => return "the laptop closed the session".into(),
            Ok(Err(error)) => return error.to_string(),
            Ok(Ok(Some(LaptopMessage::Ping { seq }))) => RelayMessage::Pong { seq },
            // A repeated hello is read as what it asks for: these ports.
            Ok(Ok(Some(LaptopMessage::Ports { ports } | LaptopMessage::Hello { ports, .. }))) => {
                RelayMessage::Listening(listeners.apply(&ports).await)
            }
        };
        if let Err(error) = send(write, &answer, idle).await {
            return format!("answering the laptop: {error}");
        }
    }
}

/// Sends a control message, bounded in time: a laptop that stops reading must not hold the
/// session forever.
async fn send<W: AsyncWrite + Unpin>(
    write: &mut W,
    message: &RelayMessage,
    idle: Duration,
) -> io::Result<()> {
    tokio::time::timeout(idle, write_message(write, message))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "control stream not read"))?
}

/// Tells the laptop why it is not served, and ends its control stream.
async fn refuse(write: &mut WriteHalf<MuxStream>, reason: String, idle: Duration) -> String {
    tracing::info!(%reason, "refusing a session");
    let message = RelayMessage::Refused {
        reason: reason.clone(),
    };
    if send(write, &message, idle).await.is_ok() {
        let _ = write.shutdown().await;
    }
    format!("refused: {reason}")
}

/// The relay ports of the live session, and the connections they accepted.
struct Listeners {
    range: RangeInclusive<u16>,
    host: IpAddr,
    opener: Opener,
    /// Bounds the concurrent data streams of the session.
    permits: Arc<Semaphore>,
    /// Ends every task of the session: accept loops and connections.
    session: CancellationToken,
    tasks: TaskTracker,
    ports: BTreeMap<u16, PortListener>,
}

struct PortListener {
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl Listeners {
    fn new(shared: &Shared, opener: Opener) -> Self {
        Self {
            range: shared.config.port_range.clone(),
            host: shared.config.listen_host,
            opener,
            permits: Arc::new(Semaphore::new(shared.max_data_streams())),
            session: CancellationToken::new(),
            tasks: TaskTracker::new(),
            ports: BTreeMap::new(),
        }
    }

    /// Listens on exactly `requested` (those it can), and says which listen and which not.
    /// Connections accepted on a port no longer asked for carry on to their end.
    async fn apply(&mut self, requested: &[u16]) -> Listening {
        let requested: BTreeSet<u16> = requested.iter().copied().collect();
        let dropped: Vec<u16> = self
            .ports
            .keys()
            .filter(|port| !requested.contains(port))
            .copied()
            .collect();
        for port in dropped {
            if let Some(listener) = self.ports.remove(&port) {
                listener.stop.cancel();
                // Wait for the listening socket to be closed: when `Listening` reaches the
                // laptop, the port refuses connections.
                let _ = listener.task.await;
            }
        }
        let mut failed = Vec::new();
        for &port in &requested {
            if self.ports.contains_key(&port) {
                continue;
            }
            if !self.range.contains(&port) {
                failed.push(PortFailure {
                    port,
                    reason: format!(
                        "outside the relay's port range {}-{}",
                        self.range.start(),
                        self.range.end()
                    ),
                });
                continue;
            }
            match TcpListener::bind((self.host, port)).await {
                Ok(listener) => {
                    let stop = self.session.child_token();
                    let task = self.tasks.spawn(accept_loop(
                        listener,
                        port,
                        stop.clone(),
                        Carrier {
                            opener: self.opener.clone(),
                            permits: self.permits.clone(),
                            session: self.session.clone(),
                            tasks: self.tasks.clone(),
                        },
                    ));
                    self.ports.insert(port, PortListener { stop, task });
                }
                Err(error) => failed.push(PortFailure {
                    port,
                    reason: format!("cannot listen on {}:{port}: {error}", self.host),
                }),
            }
        }
        let listening = Listening {
            ports: self.ports.keys().copied().collect(),
            failed,
        };
        tracing::info!(ports = ?listening.ports, failed = ?listening.failed, "listening");
        listening
    }

    /// Stops listening and ends every connection of the session, and waits until they are gone.
    async fn shut_down(self) {
        self.session.cancel();
        self.tasks.close();
        self.tasks.wait().await;
    }
}

impl Drop for Listeners {
    /// A session task dropped midway (the runtime shutting down) must not leave ports open.
    fn drop(&mut self) {
        self.session.cancel();
    }
}

/// What a relay port needs to carry its connections.
#[derive(Clone)]
struct Carrier {
    opener: Opener,
    permits: Arc<Semaphore>,
    session: CancellationToken,
    tasks: TaskTracker,
}

async fn accept_loop(listener: TcpListener, port: u16, stop: CancellationToken, carrier: Carrier) {
    loop {
        let accepted = tokio::select! {
            () = stop.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let (tcp, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!(port, %error, "accepting a connection");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let Ok(permit) = carrier.permits.clone().try_acquire_owned() else {
            // Dropping closes it: the client learns at once, the session is not touched.
            tracing::warn!(port, %peer, "too many connections; closing this one");
            continue;
        };
        carrier.tasks.spawn(carry(
            tcp,
            port,
            carrier.opener.clone(),
            carrier.session.clone(),
            permit,
        ));
    }
}

/// Carries one cluster connection over a new data stream, until both directions have ended
/// or the session does.
async fn carry(
    mut tcp: TcpStream,
    port: u16,
    opener: Opener,
    session: CancellationToken,
    _permit: OwnedSemaphorePermit,
) {
    let _ = tcp.set_nodelay(true);
    let work = async {
        let mut stream = opener.open().await?;
        write_stream_header(&mut stream, port).await?;
        // Half-close travels: EOF on one side shuts down writing on the other.
        tokio::io::copy_bidirectional_with_sizes(&mut tcp, &mut stream, COPY_BUFFER, COPY_BUFFER)
            .await
    };
    tokio::select! {
        () = session.cancelled() => {}
        result = work => if let Err(error) = result {
            tracing::debug!(port, %error, "connection ended");
        },
    }
}
