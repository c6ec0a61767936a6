//! The host interfaces a module imports, one per file, each a `Host` impl
//! on the per-call store data ([`CallState`]).

mod bridges;
mod cluster;
mod exec;
mod log;
mod notes;

use super::state::CallState;

/// `types` declares records only; nothing for the host to serve.
impl super::bindings::provider::pontoon::provider::types::Host for CallState {}
