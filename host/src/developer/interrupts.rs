//! Ctrl-C and SIGTERM as `pontoon bridge` hears them: the first ends the
//! run cleanly, a later one while it cleans up is heard too.

use tokio::signal::unix::{SignalKind, signal};

/// The first and every later Ctrl-C or SIGTERM.
pub(super) struct Interrupts {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Interrupts {
    pub(super) fn new() -> anyhow::Result<Self> {
        Ok(Self {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    pub(super) async fn next(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }
}
