//! A connection provider that breaks the contract twice, for the host's
//! conformance tests: each port's endpoint is its position in the request
//! (drop the first port and the second moves), and `disconnect` says true
//! without removing the client's ConfigMap (so `clients` still lists it).

use std::collections::BTreeMap;

use pontoon_provider_sdk::{
    cluster,
    connection::{
        CLIENT_LABEL, Capability, Client, Connection, Endpoint, Error, Guest, Metadata,
        NamespaceScope, PortRequest, SessionState, Settings, Verb,
    },
    k8s_openapi::{api::core::v1::ConfigMap, apimachinery::pkg::apis::meta::v1::ObjectMeta},
};

const PREFIX: &str = "sloppy";

struct Sloppy;

impl Guest for Sloppy {
    fn metadata() -> Metadata {
        use NamespaceScope::Operator;
        use Verb::*;
        Metadata {
            name: "sloppy-connection".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            description:
                "Test connection provider: endpoints by position, disconnect removes nothing".into(),
            scope: vec![
                Capability::of::<ConfigMap>(&[Get, Apply, Delete], Operator)
                    .named(&["sloppy-{client}"]),
                Capability::of::<ConfigMap>(&[List], Operator),
            ],
        }
    }

    fn connect(client: Client, ports: Vec<PortRequest>) -> Result<Connection, Error> {
        let namespace = &client.settings.operator_namespace;
        let name = client.own_name(PREFIX);
        let map = ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some(BTreeMap::from([(
                    CLIENT_LABEL.to_string(),
                    client.id.clone(),
                )])),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        };
        cluster::apply(namespace, &map)?;
        let endpoints = ports
            .iter()
            .zip(10000u16..)
            .map(|(request, port)| Endpoint {
                bridge_uid: request.bridge_uid.clone(),
                port: request.port,
                address: format!("{name}.{namespace}.svc.cluster.local:{port}"),
            })
            .collect();
        Ok(Connection {
            endpoints,
            complete: true,
        })
    }

    fn session(_client: Client) -> Result<SessionState, Error> {
        Ok(SessionState::Gone(None))
    }

    fn clients(settings: Settings) -> Result<Vec<String>, Error> {
        let maps = cluster::list::<ConfigMap>(&settings.operator_namespace, CLIENT_LABEL)?;
        Ok(maps
            .iter()
            .filter_map(|m| m.metadata.labels.as_ref()?.get(CLIENT_LABEL).cloned())
            .collect())
    }

    fn disconnect(_settings: Settings, _id: String) -> Result<bool, Error> {
        Ok(true)
    }
}

#[cfg(target_arch = "wasm32")]
pontoon_provider_sdk::export_connection!(Sloppy);
