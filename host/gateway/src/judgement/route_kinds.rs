//! The route kinds a Gateway takes: HTTPRoute, GRPCRoute, TLSRoute and
//! TCPRoute.
//!
//! Attachment, ReferenceGrants, backends, filters and status are judged the
//! same way for all four, so each route is read in HTTPRoute's shape, which
//! holds every field the others have: a GRPCRoute's method match is the
//! path its requests carry (`/{service}/{method}`), its header matches,
//! filters and backend references are HTTPRoute's of the same names; a
//! TLSRoute is hostnames and backends; a TCPRoute is backends. What that shape cannot carry (a gRPC
//! method match Praxis's router cannot express) is refused rule by rule,
//! with the reason, as a rule Praxis cannot express is.

use std::{collections::BTreeMap, fmt::Debug, sync::Arc};

use crate::httproutes::{HttpRoute, HttpRouteRules, HttpRouteSpec, HttpRouteStatus};
use gateway_api::{
    grpcroutes::{
        GrpcRoute, GrpcRouteRules, GrpcRouteRulesMatches, GrpcRouteRulesMatchesMethodType,
    },
    tlsroutes::TlsRoute,
};
use kube::{Resource, ResourceExt, core::NamespaceResourceScope};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::{Value, json};

use super::tcp_route::TcpRoute;
use crate::data_plane::model::RouteKind;

/// One route of any kind, in HTTPRoute's shape.
#[derive(Clone, Debug)]
pub struct AnyRoute {
    pub kind: RouteKind,
    /// An HTTPRoute itself; a GRPCRoute or TLSRoute read in its shape.
    pub route: Arc<HttpRoute>,
    /// Rules (by index) that shape could not carry faithfully, and why.
    pub refused: BTreeMap<usize, String>,
}

impl AnyRoute {
    pub fn namespace(&self) -> String {
        self.route.namespace().unwrap_or_default()
    }

    pub fn name(&self) -> String {
        self.route.name_any()
    }
}

/// A parent reference of any route kind: the fields that say which Gateway.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParentName {
    pub group: Option<String>,
    pub kind: Option<String>,
    pub namespace: Option<String>,
    pub name: String,
}

/// The fields of a parent reference that say which Gateway it names.
pub trait NamesParent {
    fn group(&self) -> Option<&str>;
    fn kind(&self) -> Option<&str>;
    fn namespace(&self) -> Option<&str>;
    fn name(&self) -> &str;
}

macro_rules! names_parent {
    ($($t:ty),*) => {$(
        impl NamesParent for $t {
            fn group(&self) -> Option<&str> {
                self.group.as_deref()
            }
            fn kind(&self) -> Option<&str> {
                self.kind.as_deref()
            }
            fn namespace(&self) -> Option<&str> {
                self.namespace.as_deref()
            }
            fn name(&self) -> &str {
                &self.name
            }
        }
    )*};
}

names_parent!(ParentName, crate::httproutes::HttpRouteParentRefs);

/// What the controllers need of a route resource of each kind.
pub trait RouteResource:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + DeserializeOwned
    + Serialize
    + Debug
    + Send
    + Sync
    + 'static
{
    const KIND: RouteKind;

    /// The route in HTTPRoute's shape.
    fn to_any(self: &Arc<Self>) -> AnyRoute;

    /// Its parent references (cheap: no conversion of the rest).
    fn parent_names(&self) -> Vec<ParentName>;

    /// The Services (namespace, name) its backend references name.
    fn backend_services(&self) -> Vec<(String, String)>;
}

macro_rules! parent_names {
    ($route:expr) => {
        $route
            .spec
            .parent_refs
            .iter()
            .flatten()
            .map(|p| ParentName {
                group: p.group.clone(),
                kind: p.kind.clone(),
                namespace: p.namespace.clone(),
                name: p.name.clone(),
            })
            .collect()
    };
}

/// The Services a route's backend references name: HTTPRoute's and
/// GRPCRoute's rules and references are optional lists, TLSRoute's and
/// TCPRoute's required ones.
macro_rules! backend_services {
    ($route:expr) => {
        backend_services!(
            $route,
            $route
                .spec
                .rules
                .iter()
                .flatten()
                .flat_map(|rule| rule.backend_refs.iter().flatten())
        )
    };
    ($route:expr, required) => {
        backend_services!(
            $route,
            $route.spec.rules.iter().flat_map(|rule| &rule.backend_refs)
        )
    };
    ($route:expr, $refs:expr) => {{
        let ns = $route.namespace().unwrap_or_default();
        $refs
            .filter(|b| {
                b.group.as_deref().unwrap_or("").is_empty()
                    && b.kind.as_deref().unwrap_or("Service") == "Service"
            })
            .map(|b| {
                (
                    b.namespace.clone().unwrap_or_else(|| ns.clone()),
                    b.name.clone(),
                )
            })
            .collect()
    }};
}

impl RouteResource for HttpRoute {
    const KIND: RouteKind = RouteKind::Http;

    fn to_any(self: &Arc<Self>) -> AnyRoute {
        AnyRoute {
            kind: RouteKind::Http,
            route: self.clone(),
            refused: BTreeMap::new(),
        }
    }

    fn parent_names(&self) -> Vec<ParentName> {
        parent_names!(self)
    }

    fn backend_services(&self) -> Vec<(String, String)> {
        backend_services!(self)
    }
}

impl RouteResource for GrpcRoute {
    const KIND: RouteKind = RouteKind::Grpc;

    fn to_any(self: &Arc<Self>) -> AnyRoute {
        let mut refused = BTreeMap::new();
        let rules = self
            .spec
            .rules
            .iter()
            .flatten()
            .enumerate()
            .map(|(index, rule)| match grpc_rule(rule) {
                Ok(rule) => rule,
                Err(why) => {
                    refused.insert(index, why);
                    HttpRouteRules::default()
                }
            })
            .collect();
        let spec = HttpRouteSpec {
            parent_refs: convert(&self.spec.parent_refs),
            hostnames: self.spec.hostnames.clone(),
            rules: Some(rules),
            use_default_gateways: None,
        };
        AnyRoute {
            kind: RouteKind::Grpc,
            route: Arc::new(http_shape(self.metadata.clone(), spec, &self.status)),
            refused,
        }
    }

    fn parent_names(&self) -> Vec<ParentName> {
        parent_names!(self)
    }

    fn backend_services(&self) -> Vec<(String, String)> {
        backend_services!(self)
    }
}

impl RouteResource for TlsRoute {
    const KIND: RouteKind = RouteKind::Tls;

    fn to_any(self: &Arc<Self>) -> AnyRoute {
        let rules = self
            .spec
            .rules
            .iter()
            .map(|rule| HttpRouteRules {
                name: rule.name.clone(),
                backend_refs: convert(&Some(rule.backend_refs.clone())),
                ..Default::default()
            })
            .collect();
        let spec = HttpRouteSpec {
            parent_refs: convert(&self.spec.parent_refs),
            hostnames: Some(self.spec.hostnames.clone()),
            rules: Some(rules),
            use_default_gateways: None,
        };
        AnyRoute {
            kind: RouteKind::Tls,
            route: Arc::new(http_shape(self.metadata.clone(), spec, &self.status)),
            refused: BTreeMap::new(),
        }
    }

    fn parent_names(&self) -> Vec<ParentName> {
        parent_names!(self)
    }

    fn backend_services(&self) -> Vec<(String, String)> {
        backend_services!(self, required)
    }
}

impl RouteResource for TcpRoute {
    const KIND: RouteKind = RouteKind::Tcp;

    fn to_any(self: &Arc<Self>) -> AnyRoute {
        let rules = self
            .spec
            .rules
            .iter()
            .map(|rule| HttpRouteRules {
                name: rule.name.clone(),
                backend_refs: Some(rule.backend_refs.clone()),
                ..Default::default()
            })
            .collect();
        let spec = HttpRouteSpec {
            parent_refs: self.spec.parent_refs.clone(),
            hostnames: None,
            rules: Some(rules),
            use_default_gateways: None,
        };
        AnyRoute {
            kind: RouteKind::Tcp,
            route: Arc::new(http_shape(self.metadata.clone(), spec, &self.status)),
            refused: BTreeMap::new(),
        }
    }

    fn parent_names(&self) -> Vec<ParentName> {
        parent_names!(self)
    }

    fn backend_services(&self) -> Vec<(String, String)> {
        backend_services!(self, required)
    }
}

fn http_shape<S: Serialize>(
    metadata: kube::core::ObjectMeta,
    spec: HttpRouteSpec,
    status: &Option<S>,
) -> HttpRoute {
    let mut route = HttpRoute::new(&metadata.name.clone().unwrap_or_default(), spec);
    route.metadata = metadata;
    route.status = convert::<_, HttpRouteStatus>(status);
    route
}

/// One type's value as another's of the same JSON shape (GRPCRoute's and
/// TLSRoute's parent references, backend references, filters and status
/// are HTTPRoute's, field for field); `None` if it is not.
fn convert<A: Serialize, B: DeserializeOwned>(value: &Option<A>) -> Option<B> {
    value
        .as_ref()
        .and_then(|v| serde_json::to_value(v).ok())
        .and_then(|v| serde_json::from_value(v).ok())
}

/// A GRPCRoute rule as an HTTPRoute rule, or why Praxis cannot route it.
fn grpc_rule(rule: &GrpcRouteRules) -> Result<HttpRouteRules, String> {
    let matches = rule
        .matches
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, m)| grpc_match(m).map_err(|why| format!("match {i}: {why}")))
        .collect::<Result<Vec<Value>, String>>()?;
    let value = json!({
        "name": rule.name,
        "matches": matches,
        "filters": rule.filters,
        "backendRefs": rule.backend_refs,
    });
    serde_json::from_value(strip_nulls(value)).map_err(|e| format!("cannot be read: {e}"))
}

/// A gRPC match as an HTTP one: a gRPC call is a POST to `/{service}/{method}`.
fn grpc_match(m: &GrpcRouteRulesMatches) -> Result<Value, String> {
    let mut out = serde_json::Map::new();
    if let Some(method) = &m.method {
        if method.r#type == Some(GrpcRouteRulesMatchesMethodType::RegularExpression) {
            return Err(
                "method type RegularExpression is not supported: Praxis's router matches \
                 paths exactly or by prefix; use type Exact"
                    .into(),
            );
        }
        let service = method.service.as_deref().filter(|s| !s.is_empty());
        let name = method.method.as_deref().filter(|s| !s.is_empty());
        let path = match (service, name) {
            (Some(s), Some(m)) => json!({"type": "Exact", "value": format!("/{s}/{m}")}),
            (Some(s), None) => json!({"type": "PathPrefix", "value": format!("/{s}")}),
            (None, Some(_)) => {
                return Err(
                    "a method match without a service is not supported: its path \
                     (`/*/{method}`) would need a regular expression, which Praxis's router \
                     cannot match; name the service too"
                        .into(),
                );
            }
            (None, None) => json!({"type": "PathPrefix", "value": "/"}),
        };
        out.insert("path".into(), path);
    }
    if let Some(headers) = &m.headers {
        out.insert(
            "headers".into(),
            serde_json::to_value(headers).map_err(|e| e.to_string())?,
        );
    }
    Ok(Value::Object(out))
}

fn strip_nulls(value: Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, strip_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(strip_nulls).collect()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grpc(rules: Value) -> Arc<GrpcRoute> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "gateway.networking.k8s.io/v1",
                "kind": "GRPCRoute",
                "metadata": {"name": "echo", "namespace": "apps"},
                "spec": {
                    "parentRefs": [{"name": "gw", "sectionName": "http"}],
                    "hostnames": ["grpc.example.com"],
                    "rules": rules
                },
                "status": {"parents": [{"controllerName": "other.dev/x",
                    "parentRef": {"name": "gw"}, "conditions": []}]}
            }))
            .unwrap(),
        )
    }

    #[test]
    fn a_grpc_route_reads_as_the_http_route_its_requests_would_match() {
        let route = grpc(json!([
            {"matches": [{"method": {"service": "echo.Echo", "method": "Ping"},
                          "headers": [{"name": "version", "value": "two"}]},
                         {"method": {"service": "echo.Echo"}}],
             "filters": [{"type": "RequestHeaderModifier",
                          "requestHeaderModifier": {"set": [{"name": "x", "value": "y"}]}}],
             "backendRefs": [{"name": "echo", "port": 9000, "weight": 3}]},
            {"backendRefs": [{"name": "other", "port": 9000}]}
        ]))
        .to_any();
        assert_eq!(route.kind, RouteKind::Grpc);
        assert!(route.refused.is_empty(), "{:?}", route.refused);
        let r = &route.route;
        assert_eq!(r.name_any(), "echo");
        assert_eq!(r.namespace().as_deref(), Some("apps"));
        assert_eq!(
            r.spec.hostnames.as_deref(),
            Some(&["grpc.example.com".to_string()][..])
        );
        let parent = &r.spec.parent_refs.as_ref().unwrap()[0];
        assert_eq!(
            (parent.name.as_str(), parent.section_name.as_deref()),
            ("gw", Some("http"))
        );
        let rules = r.spec.rules.as_ref().unwrap();
        let json = serde_json::to_value(&rules[0]).unwrap();
        assert_eq!(
            json["matches"],
            json!([
                {"path": {"type": "Exact", "value": "/echo.Echo/Ping"},
                 "headers": [{"name": "version", "value": "two"}]},
                {"path": {"type": "PathPrefix", "value": "/echo.Echo"}}
            ])
        );
        assert_eq!(
            json["filters"][0]["requestHeaderModifier"]["set"][0]["name"],
            "x"
        );
        assert_eq!(json["backendRefs"][0]["weight"], 3);
        // Other controllers' status entries are read too (and so kept).
        assert_eq!(
            r.status.as_ref().unwrap().parents[0].controller_name,
            "other.dev/x"
        );
    }

    #[test]
    fn grpc_matches_the_router_cannot_express_refuse_their_rule_naming_why() {
        let route = grpc(json!([
            {"matches": [{"method": {"method": "Ping"}}], "backendRefs": [{"name": "a", "port": 1}]},
            {"matches": [{"method": {"type": "RegularExpression", "service": "e.*"}}]},
            {"backendRefs": [{"name": "b", "port": 1}]}
        ]))
        .to_any();
        assert_eq!(route.refused.keys().copied().collect::<Vec<_>>(), [0, 1]);
        assert!(route.refused[&0].contains("match 0: a method match without a service"));
        assert!(route.refused[&1].contains("RegularExpression"));
        assert_eq!(route.route.spec.rules.as_ref().unwrap().len(), 3);
    }

    #[test]
    fn a_tls_route_is_its_hostnames_and_backends() {
        let route: Arc<TlsRoute> = Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "gateway.networking.k8s.io/v1",
                "kind": "TLSRoute",
                "metadata": {"name": "db", "namespace": "apps"},
                "spec": {
                    "parentRefs": [{"name": "gw"}],
                    "hostnames": ["db.example.com"],
                    "rules": [{"backendRefs": [{"name": "db", "port": 5432}]}]
                }
            }))
            .unwrap(),
        );
        assert_eq!(route.backend_services(), [("apps".into(), "db".into())]);
        let any = route.to_any();
        assert_eq!(any.kind, RouteKind::Tls);
        let rules = any.route.spec.rules.clone().unwrap();
        assert_eq!(rules[0].backend_refs.as_ref().unwrap()[0].port, Some(5432));
        assert_eq!(
            any.route.spec.hostnames.clone().unwrap(),
            ["db.example.com"]
        );
    }

    #[test]
    fn a_tcp_route_is_its_backends_and_keeps_its_status() {
        let route: Arc<TcpRoute> = Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "gateway.networking.k8s.io/v1",
                "kind": "TCPRoute",
                "metadata": {"name": "db", "namespace": "apps"},
                "spec": {
                    "parentRefs": [{"name": "gw", "sectionName": "tcp"}],
                    "rules": [{"backendRefs": [
                        {"name": "db", "port": 5432},
                        {"name": "db2", "namespace": "other", "port": 5432, "weight": 0}
                    ]}]
                },
                "status": {"parents": [{
                    "parentRef": {"name": "gw"},
                    "controllerName": "pontoon.dev/gateway-controller",
                    "conditions": []
                }]}
            }))
            .unwrap(),
        );
        assert_eq!(
            route.backend_services(),
            [("apps".into(), "db".into()), ("other".into(), "db2".into())]
        );
        assert_eq!(route.parent_names()[0].name, "gw");
        let any = route.to_any();
        assert_eq!(any.kind, RouteKind::Tcp);
        assert_eq!(any.route.spec.hostnames, None);
        let rules = any.route.spec.rules.clone().unwrap();
        assert_eq!(rules[0].backend_refs.as_ref().unwrap()[1].weight, Some(0));
        assert_eq!(any.route.status.as_ref().unwrap().parents.len(), 1);
    }
}
