//! Pontoon: a Kubernetes operator whose providers are WebAssembly components.
//!
//! The binary (`src/main.rs`) is a thin command-line edge over this library.

pub mod bridge;
pub mod bridge_mount;
pub mod chaos;
pub mod conditions;
pub mod conformance;
pub mod controller_support;
pub mod crds;
pub mod developer;
pub mod gateway;
pub mod health;
pub mod leader;
pub mod metrics;
pub mod operator;
pub mod plugins;
pub mod telemetry;
