//! The WebAssembly plugin runtime: loads provider and config-filter
//! components, runs each call in a fresh sandboxed instance, and serves the
//! host interfaces (`cluster`, `log`) they import.
//!
//! It knows the WIT contract, not what providers are for: no Gefyra or
//! Gateway API logic lives here.

pub mod bindings;
mod call;
mod cluster;
mod engine;
mod error;
mod filter;
pub mod grants;
mod limits;
mod provider;
mod registry;
mod runtime;
pub mod scope;
mod state;

pub use cluster::{ClusterAccess, Discovery, EventSubject};
pub use error::{CallError, LoadError, describe_provider_error};
pub use filter::FilterModule;
pub use limits::Limits;
pub use provider::ProviderModule;
pub use registry::{LoadedModule, Registry};
pub use runtime::{PluginRuntime, Worlds};
