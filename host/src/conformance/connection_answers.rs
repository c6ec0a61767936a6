//! What a connection provider's answers must be, judged without the cluster:
//! endpoints per port, kept from call to call; its metadata; what its writes
//! may touch.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::{
    bridge::connections::CLIENT_LABEL,
    plugins::{
        ConnectionModule, Written,
        bindings::{
            NamespaceScope,
            connection_world::{Endpoint, PortRequest},
        },
    },
};

/// Two ports of two made-up bridges.
pub(super) fn sample_requests(suffix: &str) -> [PortRequest; 2] {
    let request = |bridge: &str, port: u16, local_port: u16| PortRequest {
        bridge_uid: format!("conformance-{suffix}-{bridge}"),
        bridge: format!("conformance/{bridge}"),
        port,
        local_port,
    };
    [request("web", 80, 3000), request("api", 8080, 3001)]
}

pub(super) fn describe(request: &PortRequest) -> String {
    format!(
        "bridge {} (uid {}) port {}",
        request.bridge, request.bridge_uid, request.port
    )
}

/// What the module's metadata says that a connection provider may not.
pub(super) fn metadata_problem(module: &ConnectionModule) -> Option<String> {
    let mut problems = Vec::new();
    if module.metadata.name.trim().is_empty() {
        problems.push("its name is empty".to_string());
    }
    for capability in &module.metadata.scope {
        // Refused at load already; said again here if that ever changes.
        if capability.namespace != NamespaceScope::Operator {
            problems.push(format!(
                "{:?} of `{}` is not in the operator namespace",
                capability.kinds, capability.api_group
            ));
        }
    }
    (!problems.is_empty()).then(|| problems.join("; "))
}

/// What is wrong with the endpoints `connect` gave for `requests`.
pub(super) fn endpoint_problems(requests: &[PortRequest], endpoints: &[Endpoint]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut by_address: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for request in requests {
        let given: Vec<&Endpoint> = endpoints
            .iter()
            .filter(|e| e.bridge_uid == request.bridge_uid && e.port == request.port)
            .collect();
        match given.as_slice() {
            [] => problems.push(format!("no endpoint for {}", describe(request))),
            [endpoint] => {
                if !host_port(&endpoint.address) {
                    problems.push(format!(
                        "the endpoint of {} is `{}`, not host:port with a port above 0",
                        describe(request),
                        endpoint.address
                    ));
                }
                by_address
                    .entry(&endpoint.address)
                    .or_default()
                    .push(describe(request));
            }
            more => problems.push(format!(
                "{} endpoints for {}",
                more.len(),
                describe(request)
            )),
        }
    }
    for (address, users) in by_address {
        if users.len() > 1 {
            problems.push(format!(
                "{} share the endpoint {address}",
                users.join(" and ")
            ));
        }
    }
    for endpoint in endpoints {
        if !requests
            .iter()
            .any(|r| r.bridge_uid == endpoint.bridge_uid && r.port == endpoint.port)
        {
            problems.push(format!(
                "an endpoint for uid {} port {}, which was not requested",
                endpoint.bridge_uid, endpoint.port
            ));
        }
    }
    problems
}

/// Whether `address` is `host:port`, the port above 0.
pub(super) fn host_port(address: &str) -> bool {
    address
        .rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0))
}

/// Whether every request of `requests` has in `now` the endpoint it had
/// in `first`.
pub(super) fn kept(
    requests: &[PortRequest],
    first: &[Endpoint],
    now: &[Endpoint],
) -> Result<(), String> {
    let find = |list: &[Endpoint], r: &PortRequest| {
        list.iter()
            .find(|e| e.bridge_uid == r.bridge_uid && e.port == r.port)
            .map(|e| e.address.clone())
    };
    let problems: Vec<String> = requests
        .iter()
        .filter_map(|r| match (find(first, r), find(now, r)) {
            (Some(was), None) => Some(format!("no endpoint for {} now (was {was})", describe(r))),
            (Some(was), Some(is)) if was != is => Some(format!(
                "the endpoint of {} moved from {was} to {is}",
                describe(r)
            )),
            _ => None,
        })
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

/// What is wrong with an object written for client `id` (`now`: as the
/// cluster has it, `None` if gone): outside the operator namespace, or not
/// marked as the client's (a pod by its label: the host watches by it).
pub(super) fn ownership_problem(
    written: &Written,
    now: Option<&Value>,
    operator_ns: &str,
    id: &str,
) -> Option<String> {
    let what = written.describe();
    if written.namespace != operator_ns {
        return Some(format!(
            "{what} is not in the operator namespace `{operator_ns}`"
        ));
    }
    // Gone (the provider deleted it again): nothing left to mark.
    let now = now?;
    let labelled = now["metadata"]["labels"][CLIENT_LABEL].as_str() == Some(id);
    if labelled {
        return None;
    }
    if written.kind == "Pod" {
        return Some(format!(
            "{what} is not labelled {CLIENT_LABEL}: {id} (the host watches the client's pods by it)"
        ));
    }
    (!written.name.contains(id))
        .then(|| format!("{what} is neither labelled {CLIENT_LABEL}: {id} nor named with the id"))
}

/// What happened to an object of the other client since `before`.
pub(super) fn untouched(
    written: &Written,
    before: Option<&Value>,
    now: Option<&Value>,
) -> Option<String> {
    let what = written.describe();
    let before = before?;
    match now {
        None => Some(format!("{what} of the other client is gone")),
        Some(now) if !now["metadata"]["deletionTimestamp"].is_null() => {
            Some(format!("{what} of the other client is being deleted"))
        }
        Some(now) if now["metadata"]["uid"] != before["metadata"]["uid"] => {
            Some(format!("{what} of the other client was replaced"))
        }
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn endpoint(uid: &str, port: u16, address: &str) -> Endpoint {
        Endpoint {
            bridge_uid: uid.into(),
            port,
            address: address.into(),
        }
    }

    fn requests() -> [PortRequest; 2] {
        sample_requests("0000abcd")
    }

    #[test]
    fn sample_requests_are_of_two_bridges() {
        let [a, b] = requests();
        assert_ne!(a.bridge_uid, b.bridge_uid);
        assert_ne!(a.port, b.port);
    }

    #[test]
    fn each_request_needs_its_own_well_formed_endpoint() {
        let [a, b] = requests();
        let good = [
            endpoint(&a.bridge_uid, a.port, "relay.ns.svc:10000"),
            endpoint(&b.bridge_uid, b.port, "relay.ns.svc:10001"),
        ];
        assert!(endpoint_problems(&[a.clone(), b.clone()], &good).is_empty());

        let shared = [
            endpoint(&a.bridge_uid, a.port, "relay.ns.svc:10000"),
            endpoint(&b.bridge_uid, b.port, "relay.ns.svc:10000"),
        ];
        let problems = endpoint_problems(&[a.clone(), b.clone()], &shared);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("share the endpoint relay.ns.svc:10000"));

        let bad = [
            endpoint(&a.bridge_uid, a.port, "relay.ns.svc"),
            endpoint(&a.bridge_uid, 9, "x:1"),
        ];
        let problems = endpoint_problems(&[a.clone(), b.clone()], &bad);
        assert!(
            problems[0].contains("is `relay.ns.svc`, not host:port"),
            "{problems:?}"
        );
        assert!(problems[1].starts_with("no endpoint for bridge conformance/api"));
        assert!(problems[2].contains("port 9, which was not requested"));
        assert!(!host_port("h:0") && !host_port(":80") && host_port("[::1]:80"));
    }

    #[test]
    fn an_endpoint_that_moves_or_vanishes_is_named() {
        let [a, b] = requests();
        let first = [
            endpoint(&a.bridge_uid, a.port, "h:1"),
            endpoint(&b.bridge_uid, b.port, "h:2"),
        ];
        let both = [a.clone(), b.clone()];
        assert!(kept(&both, &first, &first).is_ok());
        let moved = [endpoint(&b.bridge_uid, b.port, "h:3")];
        let why = kept(&both, &first, &moved).unwrap_err();
        assert!(
            why.contains("no endpoint for bridge conformance/web"),
            "{why}"
        );
        assert!(why.contains("moved from h:2 to h:3"), "{why}");
    }

    fn written(kind: &str, namespace: &str, name: &str) -> Written {
        Written {
            api_version: "v1".into(),
            kind: kind.into(),
            namespace: namespace.into(),
            name: name.into(),
            before: None,
            verbs: vec!["create"],
        }
    }

    #[test]
    fn what_connect_writes_must_be_the_clients_in_the_operator_namespace() {
        let id = "0123456789abcdef";
        let labelled = json!({"metadata": {"labels": {CLIENT_LABEL: id}}});
        let bare = json!({"metadata": {}});
        let relay = format!("relay-{id}");
        assert_eq!(
            ownership_problem(&written("Pod", "op", "x"), Some(&labelled), "op", id),
            None
        );
        assert_eq!(
            ownership_problem(&written("Service", "op", &relay), Some(&bare), "op", id),
            None
        );
        assert_eq!(
            ownership_problem(&written("ConfigMap", "op", "shared"), None, "op", id),
            None,
            "gone again"
        );
        assert_eq!(
            ownership_problem(&written("Pod", "op", &relay), Some(&bare), "op", id).as_deref(),
            Some(
                "Pod op/relay-0123456789abcdef is not labelled pontoon.dev/connection-client: \
                 0123456789abcdef (the host watches the client's pods by it)"
            )
        );
        assert_eq!(
            ownership_problem(&written("ConfigMap", "op", "shared"), Some(&bare), "op", id)
                .as_deref(),
            Some(
                "ConfigMap op/shared is neither labelled pontoon.dev/connection-client: \
                 0123456789abcdef nor named with the id"
            )
        );
        assert_eq!(
            ownership_problem(&written("Pod", "shop", &relay), Some(&labelled), "op", id)
                .as_deref(),
            Some("Pod shop/relay-0123456789abcdef is not in the operator namespace `op`")
        );
    }

    #[test]
    fn another_clients_object_must_stay_the_same_object() {
        let w = written("Pod", "op", "relay-b");
        let before = json!({"metadata": {"uid": "1"}});
        assert_eq!(untouched(&w, Some(&before), Some(&before)), None);
        assert!(
            untouched(&w, Some(&before), None)
                .unwrap()
                .ends_with("is gone")
        );
        let going = json!({"metadata": {"uid": "1", "deletionTimestamp": "2026-01-01T00:00:00Z"}});
        assert!(
            untouched(&w, Some(&before), Some(&going))
                .unwrap()
                .ends_with("being deleted")
        );
        let other = json!({"metadata": {"uid": "2"}});
        assert!(
            untouched(&w, Some(&before), Some(&other))
                .unwrap()
                .ends_with("was replaced")
        );
        assert_eq!(untouched(&w, None, None), None, "gone already before");
    }
}
