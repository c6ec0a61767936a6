//! A relay and a laptop in one process: the relay on its own thread with a `current_thread`
//! runtime (as in its pod), the laptop's session on the test's runtime, joined by real TCP
//! standing in for the port-forward.

#![allow(dead_code)] // Each test binary uses a part.
#![allow(clippy::unwrap_used, clippy::expect_used)] // A panic is how a test reports.

use std::{
    collections::BTreeMap,
    future::Future,
    net::{SocketAddr, TcpListener as StdListener},
    time::Duration,
};

use pontoon_tunnel::{RelayConfig, Session, SessionEvent, relay::Relay};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::{mpsc, oneshot},
};

pub const LOCALHOST: [u8; 4] = [127, 0, 0, 1];

/// `n` distinct ports that were free a moment ago, ascending.
pub fn free_ports(n: usize) -> Vec<u16> {
    let held: Vec<StdListener> = (0..n)
        .map(|_| StdListener::bind("127.0.0.1:0").unwrap())
        .collect();
    let mut ports: Vec<u16> = held
        .iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect();
    ports.sort_unstable();
    ports
}

pub struct TestRelay {
    pub session_addr: SocketAddr,
    pub health_addr: SocketAddr,
    /// Free ports inside the relay's port range (which spans from the first to the last).
    pub ports: Vec<u16>,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl TestRelay {
    /// A relay on loopback whose port range spans `port_count` free ports.
    pub fn start(port_count: usize, tweak: impl FnOnce(&mut RelayConfig)) -> TestRelay {
        let ports = free_ports(port_count);
        let mut config = RelayConfig {
            session_addr: SocketAddr::from((LOCALHOST, 0)),
            health_addr: SocketAddr::from((LOCALHOST, 0)),
            port_range: ports[0]..=ports[ports.len() - 1],
            listen_host: LOCALHOST.into(),
            idle_timeout: Duration::from_secs(2),
            ..RelayConfig::default()
        };
        tweak(&mut config);
        let (addrs_tx, addrs_rx) = std::sync::mpsc::channel();
        let (shutdown, shutdown_rx) = oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let relay = Relay::bind(config).await.unwrap();
                addrs_tx
                    .send((relay.session_addr().unwrap(), relay.health_addr().unwrap()))
                    .unwrap();
                relay
                    .serve(async {
                        let _ = shutdown_rx.await;
                    })
                    .await
                    .unwrap();
            });
        });
        let (session_addr, health_addr) = addrs_rx.recv().unwrap();
        TestRelay {
            session_addr,
            health_addr,
            ports,
            shutdown: Some(shutdown),
            thread: Some(thread),
        }
    }

    /// A new "port-forward" to the relay's session port.
    pub async fn forward(&self) -> TcpStream {
        TcpStream::connect(self.session_addr).await.unwrap()
    }

    /// A session routing each `(relay port, target)`.
    pub async fn open(
        &self,
        routes: &[(u16, SocketAddr)],
    ) -> (Session, mpsc::UnboundedReceiver<SessionEvent>) {
        Session::open(self.forward().await, "test@laptop", route_map(routes))
            .await
            .unwrap()
    }

    /// The status of `GET path` on the health port.
    pub async fn probe(&self, path: &str) -> u16 {
        http_status(self.health_addr, path).await
    }

    /// Stops the relay and waits for its thread.
    pub async fn stop(mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            tokio::task::spawn_blocking(move || thread.join().unwrap())
                .await
                .unwrap();
        }
    }
}

impl Drop for TestRelay {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
    }
}

pub fn route_map(routes: &[(u16, SocketAddr)]) -> BTreeMap<u16, String> {
    routes
        .iter()
        .map(|(port, target)| (*port, target.to_string()))
        .collect()
}

pub fn relay_addr(port: u16) -> SocketAddr {
    SocketAddr::from((LOCALHOST, port))
}

pub async fn http_status(addr: SocketAddr, path: &str) -> u16 {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    tcp.write_all(format!("GET {path} HTTP/1.1\r\nHost: relay\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut response = String::new();
    tcp.read_to_string(&mut response).await.unwrap();
    response
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {response:?}"))
}

/// A local target that sends back what it reads, until EOF, then closes.
pub async fn echo_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut tcp, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let (mut read, mut write) = tcp.split();
                if tokio::io::copy(&mut read, &mut write).await.is_ok() {
                    let _ = write.shutdown().await;
                }
            });
        }
    });
    addr
}

/// Sends `payload` through `addr` and returns what comes back, writing and reading at once.
pub async fn round_trip(addr: SocketAddr, payload: &[u8]) -> Vec<u8> {
    try_round_trip(addr, payload).await.unwrap()
}

pub async fn try_round_trip(addr: SocketAddr, payload: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut tcp = TcpStream::connect(addr).await?;
    let (mut read, mut write) = tcp.split();
    let send = async {
        write.write_all(payload).await?;
        write.shutdown().await
    };
    let mut back = Vec::with_capacity(payload.len());
    let receive = read.read_to_end(&mut back);
    let (sent, received) = tokio::join!(send, receive);
    sent?;
    received?;
    Ok(back)
}

/// Whether a TCP connection to `addr` is refused (nothing listens).
pub async fn refused(addr: SocketAddr) -> bool {
    matches!(
        TcpStream::connect(addr).await,
        Err(error) if error.kind() == std::io::ErrorKind::ConnectionRefused
    )
}

/// Polls `check` until it holds or `limit` passes; whether it held.
pub async fn eventually<F, Fut>(limit: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if check().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The next event that `pick` accepts, within `limit`.
pub async fn next_event<T>(
    events: &mut mpsc::UnboundedReceiver<SessionEvent>,
    limit: Duration,
    mut pick: impl FnMut(SessionEvent) -> Option<T>,
) -> T {
    tokio::time::timeout(limit, async {
        loop {
            let event = events.recv().await.expect("events ended");
            if let Some(found) = pick(event) {
                return found;
            }
        }
    })
    .await
    .expect("no such event in time")
}
