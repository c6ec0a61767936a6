//! The front of a shared HTTPS port: it holds the port's public address,
//! reads each connection's ClientHello for its server name (without
//! answering it), records the connection's origin (`origins.rs`), and hands
//! the unopened stream to Praxis's HTTPS listener on loopback, dialled from
//! the connection's own loopback address. Praxis then does the TLS, and
//! the filter learns from that address which name the client asked for.

use std::{
    collections::HashMap,
    io::Cursor,
    net::{IpAddr, SocketAddr},
    sync::{Arc, LazyLock, Mutex, PoisonError, RwLock},
    time::Duration,
};

use rustls::{ServerConfig, server::Acceptor};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpSocket, TcpStream},
    runtime::Runtime,
    sync::Semaphore,
};
use tokio_rustls::TlsAcceptor;

use super::origins::{self, Origin};

/// How long a client may take to send its ClientHello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// The most of a ClientHello read before giving up on its server name:
/// rustls takes one of up to 64 KiB, a few records.
const MAX_HELLO_BYTES: usize = 66_000;

/// Connections open at once, over every front, from their accept (so a
/// client that never finishes its ClientHello holds one too); past it a new
/// one is closed at once.
static CONNECTIONS: LazyLock<Arc<Semaphore>> =
    LazyLock::new(|| Arc::new(Semaphore::new(origins::MAX_CONNECTIONS)));

/// Where a front hands its connections, and whether it ends their TLS first.
struct Handoff {
    hop: SocketAddr,
    tls: Option<TlsAcceptor>,
}

type Slot = Arc<RwLock<Arc<Handoff>>>;

/// The fronts of this process, by public address, each reading its handoff
/// from its slot: a reload that moves the hop, or brings new certificates,
/// needs no new socket.
static FRONTS: LazyLock<Mutex<HashMap<SocketAddr, Slot>>> = LazyLock::new(Mutex::default);

/// The fronts carry every request of their ports, so they get a thread per
/// core, apart from Praxis's.
static RUNTIME: LazyLock<Result<Runtime, String>> = LazyLock::new(|| {
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name("pontoon-front")
        .enable_all()
        .build()
        .map_err(|e| format!("the fronts' runtime: {e}"))
});

/// Serves `listen`, handing its connections to `hop` (after ending their
/// TLS with `tls`, if given): binds it the first time, else only changes
/// the handoff.
pub fn start(listen: SocketAddr, hop: SocketAddr, tls: Option<ServerConfig>) -> Result<(), String> {
    let handoff = Arc::new(Handoff {
        hop,
        tls: tls.map(|config| TlsAcceptor::from(Arc::new(config))),
    });
    let mut fronts = FRONTS.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(slot) = fronts.get(&listen) {
        *slot.write().unwrap_or_else(PoisonError::into_inner) = handoff;
        return Ok(());
    }
    let runtime = RUNTIME.as_ref().map_err(Clone::clone)?;
    let listener = crate::serving::bind(runtime, listen)?;
    let slot: Slot = Arc::new(RwLock::new(handoff));
    runtime.spawn(accept(listener, slot.clone()));
    fronts.insert(listen, slot);
    Ok(())
}

async fn accept(listener: TcpListener, slot: Slot) {
    loop {
        let (downstream, peer) = crate::serving::next_connection(&listener, super::NAME).await;
        let Ok(permit) = CONNECTIONS.clone().try_acquire_owned() else {
            tracing::warn!(
                "{}: {} connections open already; closing one",
                super::NAME,
                origins::MAX_CONNECTIONS
            );
            continue;
        };
        let handoff = slot.read().unwrap_or_else(PoisonError::into_inner).clone();
        tokio::spawn(async move {
            if let Err(error) = carry(downstream, peer, &handoff).await {
                tracing::debug!(%peer, %error, "{}: connection ended", super::NAME);
            }
            drop(permit);
        });
    }
}

/// One connection: its ClientHello read (or its TLS ended), its origin
/// recorded, then copied both ways to the hop until either side closes.
async fn carry(
    mut downstream: TcpStream,
    peer: SocketAddr,
    handoff: &Handoff,
) -> std::io::Result<()> {
    let timed_out = || std::io::Error::new(std::io::ErrorKind::TimedOut, "no handshake in time");
    downstream.set_nodelay(true)?;
    let client = unmapped(peer.ip());
    match &handoff.tls {
        None => {
            let (server_name, hello) =
                tokio::time::timeout(HELLO_TIMEOUT, read_hello(&mut downstream))
                    .await
                    .map_err(|_| timed_out())??;
            let origin = Origin {
                client,
                server_name,
                tls_ended: false,
            };
            let (registration, mut upstream) = dial(origin, peer, handoff.hop).await?;
            upstream.write_all(&hello).await?;
            tokio::io::copy_bidirectional(&mut downstream, &mut upstream).await?;
            drop(registration);
        }
        Some(acceptor) => {
            let mut tls = tokio::time::timeout(HELLO_TIMEOUT, acceptor.accept(downstream))
                .await
                .map_err(|_| timed_out())??;
            let origin = Origin {
                client,
                server_name: tls.get_ref().1.server_name().map(str::to_ascii_lowercase),
                tls_ended: true,
            };
            let (registration, mut upstream) = dial(origin, peer, handoff.hop).await?;
            tokio::io::copy_bidirectional(&mut tls, &mut upstream).await?;
            drop(registration);
        }
    }
    Ok(())
}

/// The hop, dialled from a loopback address that names `origin`.
async fn dial(
    origin: Origin,
    peer: SocketAddr,
    hop: SocketAddr,
) -> std::io::Result<(origins::Registration, TcpStream)> {
    // The accept's permit bounds the table: it is never full here.
    let registration = origins::register(origin)
        .ok_or_else(|| std::io::Error::other("no loopback address left"))?;
    tracing::debug!(
        %peer,
        via = %registration.address(),
        "{}: connection handed to Praxis",
        super::NAME
    );
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(IpAddr::V4(registration.address()), 0))?;
    let upstream = socket.connect(hop).await?;
    upstream.set_nodelay(true)?;
    Ok((registration, upstream))
}

/// The bytes of the connection up to its whole ClientHello, and the server
/// name in it. Whatever is not a ClientHello (or names none) gives `None`,
/// and is handed on all the same for Praxis to answer.
async fn read_hello(stream: &mut TcpStream) -> std::io::Result<(Option<String>, Vec<u8>)> {
    let mut acceptor = Acceptor::default();
    let mut seen = Vec::with_capacity(2048);
    let mut chunk = [0_u8; 4096];
    loop {
        let read = stream.read(&mut chunk).await?;
        if read == 0 {
            return Ok((None, seen));
        }
        seen.extend_from_slice(&chunk[..read]);
        let mut fresh = Cursor::new(&chunk[..read]);
        while (fresh.position() as usize) < read {
            match acceptor.read_tls(&mut fresh) {
                Ok(0) | Err(_) => return Ok((None, seen)),
                Ok(_) => {}
            }
        }
        match acceptor.accept() {
            Ok(Some(accepted)) => {
                let name = accepted
                    .client_hello()
                    .server_name()
                    .map(str::to_ascii_lowercase);
                return Ok((name, seen));
            }
            Ok(None) if seen.len() < MAX_HELLO_BYTES => {}
            Ok(None) | Err(_) => return Ok((None, seen)),
        }
    }
}

/// An IPv4 client on a dual-stack socket, as the IPv4 address it is.
fn unmapped(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}
