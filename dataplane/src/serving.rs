//! Whether building a config's entries starts the sockets they name (the
//! backend TLS relays, the misdirected-request fronts). The server sets it
//! before it loads its config; `-t`, which only checks a config, and the
//! unit tests of other filters never do, so neither binds a port.

use std::sync::atomic::{AtomicBool, Ordering};

static SERVING: AtomicBool = AtomicBool::new(false);

/// From now on, entries start the sockets they name.
pub fn start() {
    SERVING.store(true, Ordering::SeqCst);
}

/// Whether entries built now start their sockets.
pub fn is_serving() -> bool {
    SERVING.load(Ordering::SeqCst)
}
