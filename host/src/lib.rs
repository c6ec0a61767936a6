//! Pontoon: a Kubernetes operator whose providers are WebAssembly components.
//!
//! The binary (`src/main.rs`) is a thin command-line edge over this library.

pub mod conformance;
pub mod plugins;
pub mod telemetry;
