//! The sockets a config's entries start (the backend TLS relays, the
//! misdirected-request fronts): whether building an entry starts them, and
//! how they are bound and accept. The server turns serving on before it
//! loads its config; `-t`, which only checks a config, and the unit tests
//! of other filters never do, so neither binds a port.

use std::{
    net::SocketAddr,
    sync::atomic::{AtomicBool, Ordering},
    time::Duration,
};

use tokio::{
    net::{TcpListener, TcpStream},
    runtime::Runtime,
};

static SERVING: AtomicBool = AtomicBool::new(false);

/// From now on, entries start the sockets they name.
pub fn start() {
    SERVING.store(true, Ordering::SeqCst);
}

/// Whether entries built now start their sockets.
pub fn is_serving() -> bool {
    SERVING.load(Ordering::SeqCst)
}

/// A listener at `address` for `runtime`, bound now: a port already taken
/// is the error of the entry that names it, not a task's later.
pub fn bind(runtime: &Runtime, address: SocketAddr) -> Result<TcpListener, String> {
    let listener = std::net::TcpListener::bind(address).map_err(|e| format!("bind: {e}"))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| format!("bind: {e}"))?;
    let _entered = runtime.enter();
    TcpListener::from_std(listener).map_err(|e| format!("bind: {e}"))
}

/// The next connection `listener` accepts. A failed accept (out of
/// descriptors, most likely) is logged for `filter` and waited out rather
/// than spun on.
pub async fn next_connection(listener: &TcpListener, filter: &str) -> (TcpStream, SocketAddr) {
    loop {
        match listener.accept().await {
            Ok(accepted) => return accepted,
            Err(error) => {
                tracing::warn!(%error, "{filter}: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}
