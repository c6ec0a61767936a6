//! The `connection-provider` world: implement [`Guest`] and export it with
//! [`export_connection!`](crate::export_connection).
//!
//! A connection provider sets up, in the operator's namespace, how the
//! bridges of one client (a developer's machine) are reached: the host
//! calls `connect` with every port of the client's bridges and writes the
//! endpoints it returns into the bridges' `clusterEndpoint`; `session`
//! says whether the client is connected (the host takes the bridges of a
//! client gone for longer than a grace out of Carrier2's config);
//! `disconnect` removes what `connect` made once no bridge names the
//! client. Name your objects after the client's id (`{client}` in a
//! capability's names) and label the ones that show the session with
//! [`CLIENT_LABEL`].

/// Bindings generated from `wit/` by wit-bindgen.
pub mod bindings;

pub use bindings::exports::pontoon::provider::connection::{
    Client, Connection, Endpoint, Guest, PortRequest, SessionState, Settings,
};
pub use bindings::pontoon::provider::types::{
    Capability, Error, Metadata, NamespaceScope, TemporaryError, Verb,
};

/// The label the host watches pods by (in the operator namespace): a pod
/// so labelled whose state changes makes the host ask `session` again.
pub const CLIENT_LABEL: &str = "pontoon.dev/connection-client";

// The error constructors, `?` on cluster calls and the capability helpers,
// as every world with cluster access has them.
crate::contract::contract_helpers!();

impl Client {
    /// The name of an object this client owns: `<prefix>-<id>`, what a
    /// scope's `<prefix>-{client}` allows.
    pub fn own_name(&self, prefix: &str) -> String {
        own_name(prefix, &self.id)
    }
}

/// [`Client::own_name`] for a client known by its id only (`disconnect`).
pub fn own_name(prefix: &str, id: &str) -> String {
    format!("{prefix}-{id}")
}

/// Exports a type implementing [`Guest`] as the component's `connection`.
///
/// ```ignore
/// struct MyConnections;
/// impl pontoon_provider_sdk::connection::Guest for MyConnections { /* ... */ }
/// pontoon_provider_sdk::export_connection!(MyConnections);
/// ```
#[macro_export]
macro_rules! export_connection {
    ($ty:ident) => {
        $crate::connection::bindings::export!($ty with_types_in $crate::connection::bindings);
    };
    ($ty:ident with_types_in $($path:tt)*) => {
        $crate::connection::bindings::export!($ty with_types_in $($path)*);
    };
}
