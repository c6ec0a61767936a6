//! GefyraBridges (Gefyra's wire format): requests of a mount's workload
//! that match a bridge's rules go to a developer instead of the shadow.
//!
//! A bridge rides on its mount (label `gefyra.dev/bridge-mount`). The host
//! judges each bridge ([`judge`]); the mount's provider renders the valid
//! ones into the interception it installs (the WIT `bridges` import; see
//! `docs/bridges.md`); the bridge controller ([`controller`]) reports each
//! bridge's state from its judgement, its mount's state and what the mount
//! controller last rendered ([`book`]).

pub mod book;
pub mod changes;
pub mod connections;
pub mod controller;
pub mod destinations;
pub mod judge;
pub mod lookup;

use std::sync::Arc;

pub use book::Book;
pub use destinations::Destinations;
pub use lookup::MOUNT_LABEL;

/// The administrator's limits on bridges.
#[derive(Clone, Debug)]
pub struct BridgeSettings {
    /// The most bridges a mount renders (`--max-bridges-per-mount`): its
    /// oldest; the others are refused.
    pub max_per_mount: usize,
    /// Where bridges may send requests (`--bridge-destinations`).
    pub destinations: Arc<Destinations>,
    /// How bridges naming a connection provider reach their clients.
    pub connections: connections::ConnectionSettings,
    /// Where each connection provider's clients stand (written by the
    /// connection controller, read by the bridge controller).
    pub sessions: Arc<connections::Sessions>,
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
