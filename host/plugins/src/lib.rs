//! The WebAssembly plugin runtime: loads provider and config-filter
//! components, runs each call in a fresh sandboxed instance, and serves the
//! host interfaces (`cluster`, `log`) they import.
//!
//! It knows the WIT contract, not what providers are for: no Gefyra or
//! Gateway API logic lives here.
//!
//! Each file imports only files above it (no circle; `use super::` and
//! `use crate::` lines show it):
//!
//! 1. `bindings` (the WIT, generated), `budget` (the memory provider calls
//!    share), `freshness` (what lists ask of the watch cache), `notes`
//!    (the mounts' notes, in memory), then `limits` (deadline and memory
//!    cap)
//! 2. `error`, `scope` (capability scopes), `engine` (engine, epoch clock)
//! 3. `journal` (what a provider wrote, for conformance), `grants` (what an
//!    administrator allows), `access` (the cluster as one call may reach it)
//! 4. `state`: the per-call store data
//! 5. `host/`: the host interfaces, one per file (`cluster`, `log`,
//!    `bridges`, `notes`); `call`:
//!    the mechanics of one call (store, deadlines, stops as [`CallError`],
//!    call metrics)
//! 6. `provider`, `filter`, `connection`: the typed faces of the three
//!    worlds
//! 7. `registry`: the loaded modules by name
//! 8. `runtime`: loads and compiles modules into a registry

mod access;
pub mod bindings;
mod budget;
mod call;
mod connection;
mod engine;
mod error;
mod filter;
mod freshness;
pub mod grants;
mod host;
mod journal;
mod limits;
mod notes;
mod provider;
mod registry;
mod runtime;
pub mod scope;
mod state;
mod write_turns;

pub use access::{ClusterAccess, Discovery, EventSubject};
pub use call::HARD_DEADLINE_GRACE;
pub use connection::ConnectionModule;
pub use error::{CallError, LoadError, describe_provider_error};
pub use filter::FilterModule;
pub use freshness::Freshness;
pub use journal::{Journal, Written};
pub use limits::Limits;
pub use notes::{MountNotes, Notes};
pub use provider::ProviderModule;
pub use registry::{LoadedModule, Registry};
pub use runtime::{PluginRuntime, Worlds};
pub use write_turns::WriteTurns;
