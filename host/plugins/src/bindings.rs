//! Host bindings generated from `wit/`: the one place `bindgen!` runs.
//!
//! Imports are async on the host (the guest sees a blocking call while the
//! host awaits the API server on tokio) and trappable only where the host
//! itself can fail; exports are called asynchronously so a guest that runs
//! long yields to the executor at every epoch tick.

/// The `bridge-mount-provider` world.
pub mod provider {
    wasmtime::component::bindgen!({
        world: "bridge-mount-provider",
        path: "../../wit",
        imports: { default: async },
        exports: { default: async },
        // Bridges are compared and hashed to know whether the pods hold
        // the current ones.
        additional_derives: [PartialEq, Eq, Hash],
    });
}

/// The `config-filter-provider` world; shares `log` with the provider world.
pub mod filter {
    wasmtime::component::bindgen!({
        world: "config-filter-provider",
        path: "../../wit",
        imports: { default: async },
        exports: { default: async },
        with: {
            "pontoon:provider/log": super::provider::pontoon::provider::log,
        },
    });
}

/// The `connection-provider` world; shares `cluster`, `log` and `types`
/// with the provider world, so one implementation of the host interfaces
/// serves both.
pub mod connection {
    wasmtime::component::bindgen!({
        world: "connection-provider",
        path: "../../wit",
        imports: { default: async },
        exports: { default: async },
        with: {
            "pontoon:provider/cluster": super::provider::pontoon::provider::cluster,
            "pontoon:provider/log": super::provider::pontoon::provider::log,
            "pontoon:provider/types": super::provider::pontoon::provider::types,
        },
    });
}

/// The records of the `connection` export: clients, their ports and
/// endpoints.
pub use connection::exports::pontoon::provider::connection as connection_world;
pub use filter::exports::pontoon::provider::config_filter::{
    FilterError, FilterMetadata, RouteContext,
};
pub use provider::exports::pontoon::provider::bridge_mount::{
    Condition, Mount, Progress, Settings,
};
/// The records of the `bridges` import: a mount's GefyraBridges as a
/// provider renders them.
pub use provider::pontoon::provider::bridges as provider_bridges;
pub use provider::pontoon::provider::cluster::{
    ClusterError, EventType, ExecOutput, ExecRequest, ObjectRef, PatchType,
};
pub use provider::pontoon::provider::log::Level;
/// The `notes` import: hints a provider keeps for a mount between calls.
pub use provider::pontoon::provider::notes as provider_notes;
pub use provider::pontoon::provider::types::{
    Capability, Error as ProviderError, Metadata, NamespaceScope, TemporaryError, Verb,
};

/// WIT name of the interface a bridge-mount provider exports.
pub const BRIDGE_MOUNT_EXPORT: &str = "pontoon:provider/bridge-mount@0.1.0";
/// WIT name of the interface a provider imports to render GefyraBridges.
pub const BRIDGES_IMPORT: &str = "pontoon:provider/bridges@0.1.0";
/// WIT name of the interface a connection provider exports.
pub const CONNECTION_EXPORT: &str = "pontoon:provider/connection@0.1.0";
/// WIT name of the interface a config filter exports.
pub const CONFIG_FILTER_EXPORT: &str = "pontoon:provider/config-filter@0.1.0";
