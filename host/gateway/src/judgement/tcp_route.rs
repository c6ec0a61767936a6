//! TCPRoute as Gateway API v1.6 serves it (`gateway.networking.k8s.io/v1`,
//! standard channel). The `gateway-api` crate carries TCPRoute only as the
//! experimental `v1alpha2`, which a v1.6 API server no longer serves, so
//! this is Pontoon's own type: the fields a Gateway reads, each spelled and
//! shaped as the CRD spells it (parent and backend references are
//! HTTPRoute's, field for field; the status is a route status).

use crate::httproutes::{HttpRouteParentRefs, HttpRouteRulesBackendRefs, HttpRouteStatus};
use kube::CustomResource;
use serde::{Deserialize, Serialize};

/// A TCPRoute's spec: its parents and its one rule (v1 allows exactly one).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "gateway.networking.k8s.io",
    version = "v1",
    kind = "TCPRoute",
    root = "TcpRoute",
    plural = "tcproutes",
    namespaced,
    status = "HttpRouteStatus",
    schema = "disabled"
)]
pub struct TcpRouteSpec {
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "parentRefs"
    )]
    pub parent_refs: Option<Vec<HttpRouteParentRefs>>,
    #[serde(default)]
    pub rules: Vec<TcpRouteRule>,
}

/// A TCPRoute rule: where its connections go.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct TcpRouteRule {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, rename = "backendRefs")]
    pub backend_refs: Vec<HttpRouteRulesBackendRefs>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_v1_tcp_route_as_the_conformance_suite_writes_it() {
        let route: TcpRoute = serde_json::from_value(serde_json::json!({
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "TCPRoute",
            "metadata": { "name": "r", "namespace": "ns" },
            "spec": {
                "parentRefs": [{ "name": "gw", "sectionName": "tcp", "port": 9300 }],
                "rules": [{ "backendRefs": [
                    { "name": "v1", "port": 3000, "weight": 70 },
                    { "name": "v2", "port": 3000, "namespace": "web", "weight": 30 }
                ] }]
            }
        }))
        .unwrap();
        let parent = &route.spec.parent_refs.as_ref().unwrap()[0];
        assert_eq!(parent.section_name.as_deref(), Some("tcp"));
        assert_eq!(parent.port, Some(9300));
        let backends = &route.spec.rules[0].backend_refs;
        assert_eq!(backends[1].namespace.as_deref(), Some("web"));
        assert_eq!(backends[0].weight, Some(70));
        assert_eq!(
            <TcpRoute as kube::Resource>::api_version(&()),
            "gateway.networking.k8s.io/v1"
        );
    }
}
