//! tunnel: Pontoon's bundled connection provider, what `pontoon bridge`
//! connects through.
//!
//! For each client (a developer, by Kubernetes user name) it keeps, in the
//! operator's namespace, a relay: a Pod running `pontoon relay`, a Service
//! with one port per bridged port (the bridges' endpoints), and a Role and
//! RoleBinding that let that developer port-forward into that pod. Every
//! object is named `pontoon-relay-<client id>`, which is all the scope
//! allows it to touch, and labelled as the client's.
//!
//! Pure logic lives in the modules by concept, with unit tests beside it
//! (`cargo test -p tunnel` runs them natively); only `api`, `connect`,
//! `clients` and `disconnect` call the host.

// Natively (unit tests) nothing exports the functions, so the code only
// they reach looks dead; the component build checks it.
#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]

mod api;
mod clients;
mod connect;
mod disconnect;
pub mod names;
pub mod objects;
pub mod ports;
mod session;

use pontoon_provider_sdk::{
    connection::{
        Capability, Client, Connection, Error, Guest, Metadata, NamespaceScope, PortRequest,
        SessionState, Settings, Verb,
    },
    k8s_openapi::{
        Resource as _,
        api::{
            core::v1::{Pod, Service},
            rbac::v1::{Role, RoleBinding},
        },
    },
};

use crate::api::Found;

struct Tunnel;

/// Exactly what the functions use, all in the operator namespace: the
/// client's own objects by name (`{client}`: its id), and the lists
/// `clients` finds the clients by (a list has no name to restrict).
pub fn scope() -> Vec<Capability> {
    use NamespaceScope::Operator;
    use Verb::*;
    let own = [names::SCOPE_NAME];
    vec![
        // Made once, never changed (see `connect::ensure_pod`).
        Capability::of::<Pod>(&[Get, Create, Delete], Operator).named(&own),
        Capability::of::<Service>(&[Get, Apply, Delete], Operator).named(&own),
        Capability::new(
            Role::GROUP,
            &[Role::KIND, RoleBinding::KIND],
            &[Get, Apply, Delete],
            Operator,
        )
        .named(&own),
        Capability::new(Pod::GROUP, &[Pod::KIND, Service::KIND], &[List], Operator),
    ]
}

impl Guest for Tunnel {
    fn metadata() -> Metadata {
        Metadata {
            name: "tunnel".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            description: "A relay pod per client in the operator namespace, reached by \
                          `pontoon bridge` through a port-forward"
                .into(),
            scope: scope(),
        }
    }

    fn connect(client: Client, ports: Vec<PortRequest>) -> Result<Connection, Error> {
        connect::connect(&client, &ports)
    }

    fn session(client: Client) -> Result<SessionState, Error> {
        if !names::valid_id(&client.id) {
            return Err(Error::invalid_input(format!(
                "client `{}` has the id `{}`, which cannot name its relay",
                client.name, client.id
            )));
        }
        // Someone else's pod of that name is no relay of ours: no session.
        let pod = match api::read::<Pod>(&client.settings.operator_namespace, &client.id)? {
            Found::Ours(pod) => Some(pod),
            Found::Absent | Found::Foreign => None,
        };
        Ok(session::state(pod.as_ref()))
    }

    fn clients(settings: Settings) -> Result<Vec<String>, Error> {
        clients::clients(&settings)
    }

    fn disconnect(settings: Settings, id: String) -> Result<bool, Error> {
        disconnect::disconnect(&settings, &id)
    }
}

// Only the component exports it: a native build (unit tests) would have to
// link symbols named after WIT functions, which native linkers refuse.
#[cfg(target_arch = "wasm32")]
pontoon_provider_sdk::export_connection!(Tunnel);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scope_is_the_clients_own_objects_in_the_operator_namespace() {
        let scope = scope();
        assert!(
            scope
                .iter()
                .all(|c| matches!(c.namespace, NamespaceScope::Operator))
        );
        for capability in &scope {
            if capability.verbs.contains(&Verb::List) {
                assert!(
                    capability.names.is_empty(),
                    "a list has no name: a named rule would deny it"
                );
                assert_eq!(capability.verbs, [Verb::List]);
            } else {
                assert_eq!(capability.names, ["pontoon-relay-{client}"]);
            }
            assert!(!capability.verbs.contains(&Verb::Exec));
            assert!(!capability.verbs.contains(&Verb::Patch));
        }
        let kinds: Vec<(&str, &str)> = scope
            .iter()
            .flat_map(|c| c.kinds.iter().map(|k| (c.api_group.as_str(), k.as_str())))
            .collect();
        for kind in [
            ("", "Pod"),
            ("", "Service"),
            ("rbac.authorization.k8s.io", "Role"),
            ("rbac.authorization.k8s.io", "RoleBinding"),
        ] {
            assert!(kinds.contains(&kind), "{kind:?}");
        }
    }
}
