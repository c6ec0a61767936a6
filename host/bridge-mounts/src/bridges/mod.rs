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
mod idle;
pub mod judge;
pub mod lookup;
pub mod sessions;
pub mod settings;

pub use book::Book;
pub use destinations::Destinations;
pub use lookup::MOUNT_LABEL;
pub use settings::{BridgeSettings, MAX_BRIDGES_PER_MOUNT};
