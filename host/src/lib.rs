//! Pontoon: a Kubernetes operator whose providers are WebAssembly components.
//!
//! The binary (`src/main.rs`) is a thin command-line edge over this library.

pub mod conformance;
pub mod crds;
pub mod developer;
pub mod leader;
pub mod operator;
pub mod telemetry;

// The parts, each its own crate, under the names the binary and the
// integration tests use.
pub use pontoon_bridge_mounts::{self as bridge_mount, bridges as bridge};
pub use pontoon_gateway as gateway;
pub use pontoon_plugins as plugins;
pub use pontoon_support::{chaos, conditions, controller_support, health, metrics};
