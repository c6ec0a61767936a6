//! Bridge mounts (Gefyra's GefyraBridgeMount): the CRDs in Gefyra's wire
//! format, the lifecycle state machine, and the controller that drives a
//! mount through it by calling its provider module.

pub mod context;
pub mod controller;
pub mod crd;
mod lifecycle;
pub mod state;
pub mod status;

pub use context::{Context, RESTORE_CONFIG_MAP, Settings};
pub use crd::{GefyraBridge, GefyraBridgeMount};
pub use lifecycle::DEFAULT_PROVIDER;
