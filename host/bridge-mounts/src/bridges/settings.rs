//! The administrator's limits on bridges, as `pontoon run` takes them.

use std::sync::Arc;

use super::{
    destinations::Destinations,
    sessions::{ConnectionSettings, Sessions},
};

/// The administrator's limits on bridges.
#[derive(Clone, Debug)]
pub struct BridgeSettings {
    /// The most bridges a mount renders (`--max-bridges-per-mount`): its
    /// oldest; the others are refused.
    pub max_per_mount: usize,
    /// Where bridges may send requests (`--bridge-destinations`).
    pub destinations: Arc<Destinations>,
    /// How bridges naming a connection provider reach their clients.
    pub connections: ConnectionSettings,
    /// Where each connection provider's clients stand (written by the
    /// connection controller, read by the bridge controller).
    pub sessions: Arc<Sessions>,
}

/// The default of `--max-bridges-per-mount`: bridges of the largest shape
/// allowed (see `judge`) judged in well under 10 ms once their regular
/// expressions are known (`make bench-bridges`).
pub const MAX_BRIDGES_PER_MOUNT: usize = 16;

impl Default for BridgeSettings {
    fn default() -> Self {
        Self {
            max_per_mount: MAX_BRIDGES_PER_MOUNT,
            destinations: Arc::default(),
            connections: Default::default(),
            sessions: Arc::default(),
        }
    }
}
