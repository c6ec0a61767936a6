//! Bridge mounts (Gefyra's GefyraBridgeMount): the CRDs in Gefyra's wire
//! format, the lifecycle state machine, and the controller that drives a
//! mount through it by calling its provider module.

pub mod admitted;
pub mod bridges;
pub mod context;
pub mod controller;
pub mod crd;
pub mod definitions;
pub mod guard;
pub mod holders;
mod moments;
pub mod namespaces;
pub mod reason;
mod reconcile;
pub mod seen_whole;
pub mod settings;
pub mod shared;
pub mod state;
pub mod status;
pub mod terminate;
pub mod timestamps;
pub mod uninstalled;
pub mod upgrade_check;
pub mod watch_scope;

pub use context::Context;
pub use crd::{DEFAULT_PROVIDER, GefyraBridge, GefyraBridgeMount};
pub use guard::GuardSettings;
pub use namespaces::TargetNamespaces;
pub use settings::{MountSettings, RESTORE_CONFIG_MAP};
pub use shared::Shared;
pub use watch_scope::WatchScope;
