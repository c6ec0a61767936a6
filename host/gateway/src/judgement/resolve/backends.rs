//! A rule's backend references resolved to the ready endpoints behind them:
//! Services only, other namespaces only with a ReferenceGrant, endpoints from
//! the Service's EndpointSlices.

use std::net::{IpAddr, SocketAddr};

use crate::httproutes::HttpRouteRulesBackendRefs;
use k8s_openapi::api::core::v1::{Service, ServicePort};

use super::{
    grants::{self, GroupKind, SERVICE},
    issue::Issue,
    view::ClusterView,
};
use crate::{
    data_plane::model::{Backend, BackendProtocol},
    data_plane::model::{GATEWAY_GROUP, RouteKind},
};

/// The backends of one rule that resolved, and the problems of the others
/// (each a `ResolvedRefs: False` reason for the route).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Resolved {
    pub backends: Vec<Backend>,
    pub issues: Vec<Issue>,
    /// Services the rule refers to (namespace, name), resolved or not: a
    /// change of any of them concerns the route.
    pub services: Vec<(String, String)>,
}

/// `kind` is the referring route's: ReferenceGrants name it, and it decides
/// what a backend speaks when its Service port does not say.
pub fn resolve(
    kind: RouteKind,
    route_namespace: &str,
    refs: &[HttpRouteRulesBackendRefs],
    view: &dyn ClusterView,
) -> Resolved {
    let mut out = Resolved::default();
    for r in refs {
        let group = r.group.as_deref().unwrap_or("");
        let ref_kind = r.kind.as_deref().unwrap_or("Service");
        let namespace = r.namespace.as_deref().unwrap_or(route_namespace);
        let label = format!("{namespace}/{}", r.name);
        if !group.is_empty() || ref_kind != "Service" {
            out.issues.push(Issue::new(
                "InvalidKind",
                format!(
                    "backendRef {label} is a {}{ref_kind}; only Services are supported",
                    if group.is_empty() {
                        String::new()
                    } else {
                        format!("{group}/")
                    }
                ),
            ));
            continue;
        }
        out.services.push((namespace.to_string(), r.name.clone()));
        if !grants::permitted(
            view,
            GroupKind {
                group: GATEWAY_GROUP,
                kind: kind.name(),
            },
            route_namespace,
            SERVICE,
            namespace,
            &r.name,
        ) {
            out.issues.push(Issue::new(
                "RefNotPermitted",
                format!("Service {label} is in another namespace and no ReferenceGrant there allows {kind}s from `{route_namespace}`"),
            ));
            continue;
        }
        let Some(service) = view.service(namespace, &r.name) else {
            out.issues.push(Issue::new(
                "BackendNotFound",
                format!("Service {label} does not exist"),
            ));
            continue;
        };
        let Some(port) = r.port else {
            out.issues.push(Issue::new(
                "UnsupportedValue",
                format!("backendRef to Service {label} needs a port"),
            ));
            continue;
        };
        let Some(service_port) = service_port(&service, port) else {
            out.issues.push(Issue::new(
                "BackendNotFound",
                format!("Service {label} has no port {port}"),
            ));
            continue;
        };
        let weight = u32::try_from(r.weight.unwrap_or(1)).unwrap_or(0);
        if weight == 0 {
            continue;
        }
        let protocol = match service_port.app_protocol.as_deref() {
            Some(H2C) => BackendProtocol::H2c,
            Some(_) => BackendProtocol::Http1,
            // gRPC is HTTP/2; a Service that does not say is spoken to so.
            None if kind == RouteKind::Grpc => BackendProtocol::H2c,
            None => BackendProtocol::Http1,
        };
        let port_name = service_port.name.clone().filter(|n| !n.is_empty());
        out.backends.push(Backend {
            cluster: cluster_name(namespace, &r.name, port),
            namespace: namespace.to_string(),
            service: r.name.clone(),
            weight,
            endpoints: ready_endpoints(view, namespace, &r.name, port_name.as_deref()),
            protocol,
            service_address: cluster_address(&service, port),
            port_name,
            tls: None,
            headers: None,
        });
    }
    out
}

/// The cluster name of a Service port, unique within a config:
/// `<namespace>/<service>:<port>` (what [`Backend::cluster`] holds).
pub fn cluster_name(namespace: &str, service: &str, port: i32) -> String {
    format!("{namespace}/{service}:{port}")
}

/// The Service (namespace, name) a [`cluster_name`] names.
pub fn service_of_cluster(cluster: &str) -> Option<(&str, &str)> {
    let (namespace, rest) = cluster.split_once('/')?;
    let (service, _port) = rest.rsplit_once(':')?;
    Some((namespace, service))
}

/// The `appProtocol` of a Service port speaking HTTP/2 over cleartext
/// (Kubernetes's standard name, KEP-3726).
const H2C: &str = "kubernetes.io/h2c";

/// A Service's port `port`, if it has one.
fn service_port(service: &Service, port: i32) -> Option<&ServicePort> {
    service
        .spec
        .as_ref()?
        .ports
        .as_ref()?
        .iter()
        .find(|p| p.port == port)
}

/// The Service's cluster IP with `port`; none for a headless Service.
fn cluster_address(service: &Service, port: i32) -> Option<SocketAddr> {
    let ip: IpAddr = service.spec.as_ref()?.cluster_ip.as_deref()?.parse().ok()?;
    Some(SocketAddr::new(ip, u16::try_from(port).ok()?))
}

/// Ready (or not yet judged) endpoint addresses of a Service port, sorted.
fn ready_endpoints(
    view: &dyn ClusterView,
    namespace: &str,
    service: &str,
    port_name: Option<&str>,
) -> Vec<SocketAddr> {
    let mut out = Vec::new();
    for slice in view.endpoint_slices(namespace, service) {
        let Some(number) = slice
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref().filter(|n| !n.is_empty()) == port_name)
            .and_then(|p| p.port)
            .and_then(|p| u16::try_from(p).ok())
        else {
            continue;
        };
        for endpoint in slice.endpoints.iter().flatten() {
            let conditions = endpoint.conditions.as_ref();
            let ready = conditions.and_then(|c| c.ready).unwrap_or(true);
            let terminating = conditions.and_then(|c| c.terminating).unwrap_or(false);
            if !ready || terminating {
                continue;
            }
            for address in &endpoint.addresses {
                if let Ok(ip) = address.parse::<IpAddr>() {
                    out.push(SocketAddr::new(ip, number));
                }
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::judgement::resolve::view::ListView;

    fn refs(value: serde_json::Value) -> Vec<HttpRouteRulesBackendRefs> {
        serde_json::from_value(value).unwrap()
    }

    fn view() -> ListView {
        let service: Service = serde_json::from_value(serde_json::json!({
            "metadata": { "name": "web", "namespace": "shop" },
            "spec": { "clusterIP": "10.96.0.10", "ports": [
                { "name": "http", "port": 80, "targetPort": 8080 },
                { "name": "admin", "port": 9000 },
                { "name": "h2c", "port": 8081, "appProtocol": "kubernetes.io/h2c" }
            ] }
        }))
        .unwrap();
        let slice = serde_json::from_value(serde_json::json!({
            "metadata": { "name": "web-abc", "namespace": "shop",
                          "labels": { "kubernetes.io/service-name": "web" } },
            "addressType": "IPv4",
            "ports": [{ "name": "http", "port": 8080 }, { "name": "admin", "port": 9000 }],
            "endpoints": [
                { "addresses": ["10.244.0.5"], "conditions": { "ready": true } },
                { "addresses": ["10.244.0.6"], "conditions": { "ready": false } },
                { "addresses": ["10.244.0.7"] },
                { "addresses": ["10.244.0.8"], "conditions": { "ready": true, "terminating": true } }
            ]
        }))
        .unwrap();
        ListView {
            services: vec![Arc::new(service)],
            slices: vec![Arc::new(slice)],
            ..Default::default()
        }
    }

    #[test]
    fn ready_endpoints_of_the_service_port() {
        let resolved = resolve(
            RouteKind::Http,
            "shop",
            &refs(serde_json::json!([{ "name": "web", "port": 80, "weight": 3 }])),
            &view(),
        );
        assert!(resolved.issues.is_empty());
        assert_eq!(resolved.backends.len(), 1);
        let backend = &resolved.backends[0];
        assert_eq!(backend.cluster, "shop/web:80");
        assert_eq!(backend.weight, 3);
        let endpoints: Vec<String> = backend.endpoints.iter().map(|e| e.to_string()).collect();
        assert_eq!(endpoints, ["10.244.0.5:8080", "10.244.0.7:8080"]);
        assert_eq!(backend.protocol, BackendProtocol::Http1);
        assert_eq!(
            backend.service_address,
            Some("10.96.0.10:80".parse().unwrap())
        );
    }

    #[test]
    fn a_backend_speaks_what_its_port_says_else_what_its_route_kind_needs() {
        let protocol = |kind, port| {
            let refs = refs(serde_json::json!([{ "name": "web", "port": port }]));
            resolve(kind, "shop", &refs, &view()).backends[0].protocol
        };
        assert_eq!(protocol(RouteKind::Http, 8081), BackendProtocol::H2c);
        assert_eq!(protocol(RouteKind::Http, 80), BackendProtocol::Http1);
        assert_eq!(protocol(RouteKind::Grpc, 80), BackendProtocol::H2c);
        assert_eq!(protocol(RouteKind::Grpc, 8081), BackendProtocol::H2c);
    }

    #[test]
    fn a_reference_grant_names_the_route_kind_that_refers() {
        let mut view = view();
        let grant = serde_json::from_value(serde_json::json!({
            "metadata": { "name": "grpc-in", "namespace": "shop" },
            "spec": {
                "from": [{ "group": "gateway.networking.k8s.io", "kind": "GRPCRoute", "namespace": "apps" }],
                "to": [{ "group": "", "kind": "Service" }]
            }
        }))
        .unwrap();
        view.grants = vec![Arc::new(grant)];
        let refs = refs(serde_json::json!([{ "name": "web", "namespace": "shop", "port": 80 }]));
        let grpc = resolve(RouteKind::Grpc, "apps", &refs, &view);
        assert!(grpc.issues.is_empty(), "{:?}", grpc.issues);
        let http = resolve(RouteKind::Http, "apps", &refs, &view);
        assert_eq!(http.issues[0].reason, "RefNotPermitted");
        assert!(
            http.issues[0]
                .message
                .contains("allows HTTPRoutes from `apps`")
        );
    }

    #[test]
    fn each_problem_has_its_reason() {
        let resolved = resolve(
            RouteKind::Http,
            "shop",
            &refs(serde_json::json!([
                { "name": "missing", "port": 80 },
                { "name": "web", "port": 81 },
                { "name": "web", "namespace": "elsewhere", "port": 80 },
                { "name": "bucket", "group": "storage.example.com", "kind": "Bucket" },
                { "name": "web", "port": 80, "weight": 0 }
            ])),
            &view(),
        );
        let reasons: Vec<&str> = resolved.issues.iter().map(|i| i.reason).collect();
        assert_eq!(
            reasons,
            [
                "BackendNotFound",
                "BackendNotFound",
                "RefNotPermitted",
                "InvalidKind"
            ]
        );
        assert!(resolved.backends.is_empty(), "weight 0 takes no traffic");
        assert!(resolved.issues[1].message.contains("no port 81"));
    }
}
