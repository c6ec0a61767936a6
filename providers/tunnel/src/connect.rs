//! `connect`: sets up (or keeps) a client's relay and gives each requested
//! port its endpoint.
//!
//! The Service is written first: it holds the port allocation, and it is
//! what `clients` finds a client by, so a step cut short after it still
//! leaves the client findable (and torn down once no bridge names it).

use std::collections::BTreeSet;

use pontoon_provider_sdk::{
    cluster::{self, ClusterError},
    connection::{Client, Connection, Endpoint, Error, PortRequest},
    info,
    k8s_openapi::api::{
        core::v1::{Pod, Service},
        rbac::v1::{Role, RoleBinding},
    },
    warn,
};

use crate::{
    api, names,
    objects::{CONTAINER, Relay},
    ports,
};

pub fn connect(client: &Client, requests: &[PortRequest]) -> Result<Connection, Error> {
    check(client)?;
    let namespace = client.settings.operator_namespace.as_str();
    let relay = Relay {
        id: &client.id,
        client_name: &client.name,
        image: &client.settings.relay_image,
    };

    // Everything read first: someone else's object of a relay's name stops
    // the step before anything is written.
    let service = api::read_own::<Service>(namespace, relay.id, relay.client_name)?;
    let pod = api::read_own::<Pod>(namespace, relay.id, relay.client_name)?;
    api::read_own::<Role>(namespace, relay.id, relay.client_name)?;
    api::read_own::<RoleBinding>(namespace, relay.id, relay.client_name)?;

    // An unreadable allocation is lost: every request gets a port afresh
    // (endpoints may move once), which beats a client never served again.
    let previous = match service.as_ref().map(kept_allocation) {
        None => ports::Allocation::new(),
        Some(Ok(allocation)) => allocation,
        Some(Err(e)) => {
            warn!(
                "Service `{}`: annotation {} is unreadable ({e}); allocating its ports afresh",
                relay.name(),
                ports::ANNOTATION
            );
            ports::Allocation::new()
        }
    };
    let allocation = ports::allocate(&previous, &ports::keys(requests))
        .map_err(|e| Error::invalid_input(format!("client `{}`: {e}", client.name)))?;
    cluster::apply(namespace, &relay.service(&allocation))?;

    let pod_there = ensure_pod(namespace, &relay, pod)?;

    // Applied every time (a no-op when unchanged): an edited Role is put back.
    cluster::apply(namespace, &relay.role())?;
    cluster::apply(namespace, &relay.role_binding())?;

    let host = relay.service_host(namespace);
    Ok(Connection {
        endpoints: endpoints(requests, &allocation, &host),
        complete: pod_there,
    })
}

/// What `connect` needs of the client record and settings.
fn check(client: &Client) -> Result<(), Error> {
    if !names::valid_id(&client.id) {
        return Err(Error::invalid_input(format!(
            "client `{}` has the id `{}`, which cannot name its relay's objects",
            client.name, client.id
        )));
    }
    if client.settings.relay_image.is_empty() {
        return Err(Error::failed(
            "no relay image is configured: the operator's settings name none",
        ));
    }
    Ok(())
}

/// The allocation the Service keeps (none kept: an empty one).
fn kept_allocation(service: &Service) -> Result<ports::Allocation, serde_json::Error> {
    match service
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ports::ANNOTATION))
    {
        Some(text) => ports::from_annotation(text),
        None => Ok(ports::Allocation::new()),
    }
}

/// Makes the relay pod if there is none; whether a pod that can serve is
/// there now. A pod is made once and left alone after: almost nothing of a
/// pod can change, and changing its image would restart the relay under a
/// live session.
fn ensure_pod(namespace: &str, relay: &Relay<'_>, pod: Option<Pod>) -> Result<bool, Error> {
    let name = relay.name();
    let Some(pod) = pod else {
        return match cluster::create(namespace, &relay.pod(namespace)) {
            Ok(_) => {
                info!(
                    "created relay pod `{name}` for client `{}`",
                    relay.client_name
                );
                Ok(true)
            }
            // Made by a call racing this one: seen by the next.
            Err(ClusterError::Conflict(_)) => Ok(false),
            Err(e) => Err(e.into()),
        };
    };
    if pod.metadata.deletion_timestamp.is_some() {
        // Going away; made again by a later call, once it is gone.
        return Ok(false);
    }
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Failed" | "Succeeded")) {
        // Evicted, or its node gone: `restartPolicy: Always` cannot bring
        // a finished pod back. Removed, and made again by a later call.
        info!("relay pod `{name}` has ended ({phase:?}); deleting it to make it anew");
        if let Some(version) = pod.metadata.resource_version.as_deref() {
            match cluster::delete_if_unchanged::<Pod>(namespace, &name, version) {
                Ok(_) | Err(ClusterError::Conflict(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        return Ok(false);
    }
    let image = pod
        .spec
        .as_ref()
        .and_then(|s| s.containers.iter().find(|c| c.name == CONTAINER))
        .and_then(|c| c.image.as_deref());
    if image != Some(relay.image) {
        info!(
            "relay pod `{name}` runs image {image:?}, not {:?}; left as it is (the relay \
             would restart under a live session); the next relay made for the client gets it",
            relay.image
        );
    }
    Ok(true)
}

/// One endpoint per distinct requested port, in the order requested.
fn endpoints(
    requests: &[PortRequest],
    allocation: &ports::Allocation,
    host: &str,
) -> Vec<Endpoint> {
    let mut seen = BTreeSet::new();
    requests
        .iter()
        .filter_map(|r| {
            let key = ports::key(&r.bridge_uid, r.port);
            let relay_port = *allocation.get(&key)?;
            seen.insert(key).then(|| Endpoint {
                bridge_uid: r.bridge_uid.clone(),
                port: r.port,
                address: format!("{host}:{relay_port}"),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(uid: &str, port: u16) -> PortRequest {
        PortRequest {
            bridge_uid: uid.into(),
            bridge: "shop/web".into(),
            port,
            local_port: 3000,
        }
    }

    #[test]
    fn each_distinct_request_gets_its_relay_port_as_endpoint() {
        let requests = [request("u1", 80), request("u2", 8080), request("u1", 80)];
        let allocation =
            ports::allocate(&ports::Allocation::new(), &ports::keys(&requests)).unwrap();
        let got = endpoints(
            &requests,
            &allocation,
            "pontoon-relay-ab.pontoon.svc.cluster.local",
        );
        let got: Vec<(&str, u16, &str)> = got
            .iter()
            .map(|e| (e.bridge_uid.as_str(), e.port, e.address.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("u1", 80, "pontoon-relay-ab.pontoon.svc.cluster.local:10000"),
                (
                    "u2",
                    8080,
                    "pontoon-relay-ab.pontoon.svc.cluster.local:10001"
                ),
            ]
        );
    }

    #[test]
    fn a_client_must_have_a_usable_id_and_an_image() {
        let client = |id: &str, image: &str| Client {
            name: "alice".into(),
            id: id.into(),
            settings: pontoon_provider_sdk::connection::Settings {
                operator_namespace: "pontoon".into(),
                relay_image: image.into(),
            },
        };
        assert!(check(&client("0123456789abcdef", "img")).is_ok());
        assert!(matches!(
            check(&client("Bad-Id", "img")),
            Err(Error::InvalidInput(m)) if m.contains("`Bad-Id`")
        ));
        assert!(matches!(check(&client("ab", "")), Err(Error::Failed(_))));
    }

    #[test]
    fn the_allocation_is_read_from_the_service() {
        let mut service = Relay {
            id: "ab",
            client_name: "alice",
            image: "img",
        }
        .service(&[("u/80".to_string(), 10003)].into());
        assert_eq!(kept_allocation(&service).unwrap()["u/80"], 10003);
        if let Some(a) = service.metadata.annotations.as_mut() {
            a.insert(ports::ANNOTATION.into(), "{".into());
        }
        assert!(kept_allocation(&service).is_err());
        if let Some(a) = service.metadata.annotations.as_mut() {
            a.remove(ports::ANNOTATION);
        }
        assert!(kept_allocation(&service).unwrap().is_empty());
    }
}
