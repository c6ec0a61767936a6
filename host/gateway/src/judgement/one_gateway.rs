//! One Gateway judged as a whole: whether it is accepted (or why not), the
//! routes that name it, and, from its listeners' states and its routes'
//! verdicts, the model config generation takes, how many routes attach to
//! each listener, and what the Gateway's config was built from. Pure: the
//! Gateway's reconcile gathers the inputs (stores, Secrets, filter
//! translations) and acts on the outcome.

use std::{
    collections::{BTreeMap, HashSet},
    sync::Arc,
};

use crate::httproutes::HttpRoute;
use gateway_api::{gateways::Gateway, grpcroutes::GrpcRoute, tlsroutes::TlsRoute};
use kube::ResourceExt;

use crate::{
    data_plane::model::{self, GatewayModel, RouteKind},
    judgement::addresses,
    judgement::resolve::{
        attach, ca_bundles, listener_sets::SetRef, listeners::ListenerState, view::ClusterView,
    },
    judgement::route_kinds::{AnyRoute, RouteResource},
    judgement::routes::RouteVerdict,
    judgement::tcp_route::TcpRoute,
};

/// Why the Gateway is not accepted (reason, message), if it is not.
pub fn acceptance(
    gateway: &Gateway,
    view: &dyn ClusterView,
    states: &[ListenerState],
) -> Result<(), (&'static str, String)> {
    let class = view.gateway_class(&gateway.spec.gateway_class_name);
    if let Some(p) = class.as_ref().and_then(|c| c.spec.parameters_ref.as_ref()) {
        return Err((
            "InvalidParameters",
            format!(
                "GatewayClass {} has parametersRef {}/{} {}, which Pontoon does not support",
                gateway.spec.gateway_class_name, p.group, p.kind, p.name
            ),
        ));
    }
    if let Some(p) = gateway
        .spec
        .infrastructure
        .as_ref()
        .and_then(|i| i.parameters_ref.as_ref())
    {
        return Err((
            "InvalidParameters",
            format!(
                "infrastructure.parametersRef ({}/{} {}) is not supported",
                p.group, p.kind, p.name
            ),
        ));
    }
    if let Some(message) = addresses::unsupported(gateway) {
        return Err(("UnsupportedAddress", message));
    }
    if !states.iter().any(ListenerState::usable) {
        return Err((
            "ListenersNotValid",
            "no listener is valid; see the listeners' conditions".into(),
        ));
    }
    Ok(())
}

/// Whether one of the route's parent references names the Gateway or one
/// of `sets` (its ListenerSets).
pub fn names_gateway<K: RouteResource>(route: &K, gateway: &Gateway, sets: &[SetRef]) -> bool {
    let ns = route.namespace().unwrap_or_default();
    route
        .parent_names()
        .iter()
        .any(|p| attach::names_gateway_or_set(p, &ns, gateway, sets))
}

/// Of `routes` (one kind), the ones that name this Gateway, in HTTPRoute's
/// shape; [`in_precedence_order`] once every kind is in.
pub fn candidate_routes<K: RouteResource>(
    gateway: &Gateway,
    sets: &[SetRef],
    routes: impl IntoIterator<Item = Arc<K>>,
) -> Vec<AnyRoute> {
    routes
        .into_iter()
        .filter(|r| names_gateway(&**r, gateway, sets))
        .map(|r| r.to_any())
        .collect()
}

/// The routes of every kind that name `gateway` (or one of its
/// ListenerSets, `sets`), in HTTPRoute's shape and in the spec's
/// precedence: the order in which they are judged.
pub fn routes_in_precedence(
    gateway: &Gateway,
    sets: &[SetRef],
    http: impl IntoIterator<Item = Arc<HttpRoute>>,
    grpc: impl IntoIterator<Item = Arc<GrpcRoute>>,
    tls: impl IntoIterator<Item = Arc<TlsRoute>>,
    tcp: impl IntoIterator<Item = Arc<TcpRoute>>,
) -> Vec<AnyRoute> {
    let mut routes = candidate_routes(gateway, sets, http);
    routes.extend(candidate_routes(gateway, sets, grpc));
    routes.extend(candidate_routes(gateway, sets, tls));
    routes.extend(candidate_routes(gateway, sets, tcp));
    in_precedence_order(&mut routes);
    routes
}

/// Oldest first (the spec's tie-break between routes), then by namespace,
/// name and kind.
pub fn in_precedence_order(routes: &mut [AnyRoute]) {
    routes.sort_by_cached_key(|r| {
        (
            r.route.metadata.creation_timestamp.clone().map(|t| t.0),
            r.namespace(),
            r.name(),
            r.kind,
        )
    });
}

/// The data plane's model, and what its listeners report.
#[derive(Clone, Debug, PartialEq)]
pub struct Built {
    /// Only the programmable listeners, each with the routes attached to it.
    pub model: GatewayModel,
    /// Routes attached to each listener, in the Gateway's order (all of
    /// them, programmable or not).
    pub attached: Vec<i32>,
}

/// Builds the model from the listeners' states and the verdicts of the
/// routes that name the Gateway (in their precedence order).
pub fn build(gateway: &Gateway, states: &[ListenerState], verdicts: &[RouteVerdict]) -> Built {
    let mut attached = vec![0_i32; states.len()];
    let mut model =
        GatewayModel {
            namespace: gateway.namespace().unwrap_or_default(),
            name: gateway.name_any(),
            listeners: states
                .iter()
                .map(|s| model::Listener {
                    name: s.name.clone(),
                    port: s.port,
                    protocol: s.protocol.unwrap_or(model::Protocol::Http),
                    hostname: s.hostname.clone(),
                    certificates: s.certificates.iter().map(|c| c.files()).collect(),
                    client_validation: s.client_ca.as_ref().ok().and_then(Option::as_ref).map(
                        |ca| model::ClientValidation {
                            ca_path: format!(
                                "{}/{}",
                                crate::data_plane::certificates::TLS_MOUNT_ROOT,
                                crate::data_plane::certificates::client_ca_file(s.port)
                            ),
                            required: !ca.insecure_fallback,
                        },
                    ),
                    routes: Vec::new(),
                })
                .collect(),
        };
    for verdict in verdicts.iter().filter(|v| v.attached()) {
        let mut on: BTreeMap<usize, Vec<String>> = BTreeMap::new();
        for parent in &verdict.parents {
            for a in parent.accepted.iter().flatten() {
                let hosts = on.entry(a.listener).or_default();
                for h in &a.hostnames {
                    if !hosts.contains(h) {
                        hosts.push(h.clone());
                    }
                }
            }
        }
        for (listener, hostnames) in on {
            attached[listener] += 1;
            model.listeners[listener].routes.push(model::Route {
                kind: verdict.kind,
                namespace: verdict.namespace.clone(),
                name: verdict.name.clone(),
                hostnames,
                rules: verdict.rules.clone(),
            });
        }
    }
    // Only what can be served goes into the config.
    let programmable: Vec<bool> = states.iter().map(ListenerState::programmable).collect();
    let mut index = 0;
    model.listeners.retain(|_| {
        let keep = programmable[index];
        index += 1;
        keep
    });
    Built { model, attached }
}

/// What one Gateway's config was built from, besides its routes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct References {
    /// (namespace, name) of every Service its routes refer to.
    pub services: HashSet<(String, String)>,
    /// (namespace, name) of every Secret its listeners refer to.
    pub secrets: HashSet<(String, String)>,
    /// (namespace, name) of every ConfigMap it reads CA certificates from.
    pub config_maps: HashSet<(String, String)>,
    /// (kind, namespace, name) of every route that named it.
    pub routes: HashSet<(RouteKind, String, String)>,
    /// Every ListenerSet that named it.
    pub listener_sets: HashSet<SetRef>,
}

/// What the Gateway's config was built from, so that a change of one wakes
/// it: the Secrets fetched and every one its listeners name (a missing
/// one's creation must wake it too), and the Services and routes of
/// `verdicts`.
pub fn references<'a>(
    gateway: &Gateway,
    states: &[ListenerState],
    fetched_secrets: impl IntoIterator<Item = &'a (String, String)>,
    verdicts: &[RouteVerdict],
) -> References {
    let mut secrets: HashSet<(String, String)> = fetched_secrets.into_iter().cloned().collect();
    for s in states {
        for listener in &gateway.spec.listeners {
            if listener.name != s.name {
                continue;
            }
            for r in listener
                .tls
                .iter()
                .flat_map(|t| t.certificate_refs.iter().flatten())
            {
                let ns = r
                    .namespace
                    .clone()
                    .unwrap_or_else(|| gateway.namespace().unwrap_or_default());
                secrets.insert((ns, r.name.clone()));
            }
        }
    }
    // The CA ConfigMaps of client-certificate validation, found or not.
    let gateway_namespace = gateway.namespace().unwrap_or_default();
    let config_maps = gateway
        .spec
        .listeners
        .iter()
        .filter_map(|l| ca_bundles::frontend_validation(gateway, u16::try_from(l.port).ok()?))
        .flat_map(|v| v.refs)
        .map(|r| {
            (
                r.namespace.unwrap_or_else(|| gateway_namespace.clone()),
                r.name,
            )
        })
        .collect();
    let mut references = References {
        secrets,
        config_maps,
        ..Default::default()
    };
    for verdict in verdicts {
        references.services.extend(verdict.services.iter().cloned());
        references.routes.insert((
            verdict.kind,
            verdict.namespace.clone(),
            verdict.name.clone(),
        ));
    }
    references
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        data_plane::model::RouteKind,
        data_plane::model::Rule,
        judgement::resolve::{attach::Attachment, issue::Issue, listeners, view::ListView},
        judgement::routes::ParentVerdict,
    };
    use gateway_api::gatewayclasses::GatewayClass;
    use serde_json::json;

    fn gateway(spec: serde_json::Value) -> Gateway {
        serde_json::from_value(json!({
            "metadata": { "name": "gw", "namespace": "infra" },
            "spec": spec,
        }))
        .unwrap()
    }

    fn http_gateway() -> Gateway {
        gateway(json!({ "gatewayClassName": "pontoon", "listeners": [
            { "name": "http", "port": 80, "protocol": "HTTP" },
            { "name": "udp", "port": 53, "protocol": "UDP" },
            { "name": "web", "port": 8080, "protocol": "HTTP", "hostname": "*.example.com" }
        ] }))
    }

    fn class(spec: serde_json::Value) -> Arc<GatewayClass> {
        Arc::new(
            serde_json::from_value(json!({ "metadata": { "name": "pontoon" }, "spec": spec }))
                .unwrap(),
        )
    }

    fn route(
        namespace: &str,
        name: &str,
        created: &str,
        parent: serde_json::Value,
    ) -> Arc<crate::httproutes::HttpRoute> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": { "name": name, "namespace": namespace, "creationTimestamp": created },
                "spec": { "parentRefs": [parent] },
            }))
            .unwrap(),
        )
    }

    fn rule(index: usize) -> Rule {
        Rule {
            index,
            matches: Vec::new(),
            backends: Vec::new(),
            filters: Vec::new(),
            timeouts: Default::default(),
        }
    }

    /// The route on listener `listener` (an index), with these hostnames.
    fn on(listener: usize, hostnames: &[&str]) -> Attachment {
        Attachment {
            listener,
            hostnames: hostnames.iter().map(|h| h.to_string()).collect(),
        }
    }

    /// A parent reference to `infra/gw`, judged.
    fn parent(accepted: Result<Vec<Attachment>, Issue>) -> ParentVerdict {
        ParentVerdict {
            parent: serde_json::from_value(json!({ "name": "gw", "namespace": "infra" })).unwrap(),
            accepted,
        }
    }

    fn refused() -> ParentVerdict {
        parent(Err(Issue::new("NotAllowedByListeners", "not allowed")))
    }

    /// The verdict on route `shop/{name}`, with `rules` rules to serve and
    /// one backend Service.
    fn verdict(name: &str, parents: Vec<ParentVerdict>, rules: usize) -> RouteVerdict {
        RouteVerdict {
            kind: RouteKind::Http,
            namespace: "shop".into(),
            name: name.into(),
            parents,
            rules: (0..rules).map(rule).collect(),
            refused_rules: Vec::new(),
            unresolved: Vec::new(),
            services: vec![("shop".into(), format!("{name}-backend"))],
        }
    }

    fn judged(gateway: &Gateway, view: &ListView) -> Result<(), (&'static str, String)> {
        acceptance(gateway, view, &listeners::evaluate(gateway, view))
    }

    #[test]
    fn a_gateway_with_a_valid_listener_and_nothing_unsupported_is_accepted() {
        let view = ListView {
            classes: vec![class(
                json!({ "controllerName": "pontoon.dev/gateway-controller" }),
            )],
            ..Default::default()
        };
        assert_eq!(judged(&http_gateway(), &view), Ok(()));
    }

    #[test]
    fn parameters_addresses_and_no_valid_listener_are_refused_with_their_reasons() {
        let with_parameters = ListView {
            classes: vec![class(json!({
                "controllerName": "pontoon.dev/gateway-controller",
                "parametersRef": { "group": "example.org", "kind": "Config", "name": "p" },
            }))],
            ..Default::default()
        };
        let (reason, message) = judged(&http_gateway(), &with_parameters).unwrap_err();
        assert_eq!(reason, "InvalidParameters");
        assert!(
            message.contains("GatewayClass pontoon has parametersRef example.org/Config p"),
            "{message}"
        );

        let view = ListView::default();
        let mut infrastructure = http_gateway();
        infrastructure.spec.infrastructure = serde_json::from_value(json!({
            "parametersRef": { "group": "example.org", "kind": "Config", "name": "q" }
        }))
        .unwrap();
        let (reason, message) = judged(&infrastructure, &view).unwrap_err();
        assert_eq!(reason, "InvalidParameters");
        assert!(
            message.contains("infrastructure.parametersRef (example.org/Config q)"),
            "{message}"
        );

        let mut addressed = http_gateway();
        addressed.spec.addresses =
            serde_json::from_value(json!([{ "type": "Hostname", "value": "gw.example.com" }]))
                .unwrap();
        assert_eq!(
            judged(&addressed, &view).unwrap_err().0,
            "UnsupportedAddress"
        );
        for fine in [
            json!([{ "type": "IPAddress" }]),
            json!([{ "value": "192.0.2.1" }]),
        ] {
            let mut asked = http_gateway();
            asked.spec.addresses = serde_json::from_value(fine.clone()).unwrap();
            assert_eq!(judged(&asked, &view), Ok(()), "{fine}");
        }

        let udp_only = gateway(json!({ "gatewayClassName": "pontoon", "listeners": [
            { "name": "udp", "port": 53, "protocol": "UDP" }
        ] }));
        assert_eq!(judged(&udp_only, &view).unwrap_err().0, "ListenersNotValid");
    }

    #[test]
    fn candidate_routes_name_the_gateway_oldest_first_then_by_namespace_and_name() {
        let gw = http_gateway();
        let ours = json!({ "name": "gw", "namespace": "infra" });
        let routes = vec![
            route("shop", "b", "2026-01-02T00:00:00Z", ours.clone()),
            route(
                "shop",
                "other",
                "2026-01-01T00:00:00Z",
                json!({ "name": "elsewhere", "namespace": "infra" }),
            ),
            route(
                "infra",
                "same-ns",
                "2026-01-03T00:00:00Z",
                json!({ "name": "gw" }),
            ),
            route("shop", "a", "2026-01-02T00:00:00Z", ours.clone()),
            route("blog", "z", "2026-01-02T00:00:00Z", ours),
            route(
                "blog",
                "wrong-ns",
                "2026-01-01T00:00:00Z",
                json!({ "name": "gw" }),
            ),
        ];
        let mut candidates = candidate_routes(&gw, &[], routes);
        in_precedence_order(&mut candidates);
        let names: Vec<String> = candidates
            .iter()
            .map(|r| format!("{}/{}", r.namespace(), r.name()))
            .collect();
        assert_eq!(names, ["blog/z", "shop/a", "shop/b", "infra/same-ns"]);
    }

    #[test]
    fn attached_routes_go_to_their_listeners_and_only_programmable_listeners_are_served() {
        let gw = http_gateway();
        let states = listeners::evaluate(&gw, &ListView::default());
        let verdicts = [
            verdict(
                "both",
                vec![
                    parent(Ok(vec![on(0, &["a.com"])])),
                    parent(Ok(vec![on(0, &["a.com", "b.com"]), on(2, &[])])),
                    refused(),
                ],
                1,
            ),
            verdict("no-rules", vec![parent(Ok(vec![on(0, &[])]))], 0),
            verdict("refused", vec![refused()], 1),
        ];
        let built = build(&gw, &states, &verdicts);

        assert_eq!(
            built.attached,
            [1, 0, 1],
            "per listener, in the Gateway's order"
        );
        let served: Vec<&str> = built
            .model
            .listeners
            .iter()
            .map(|l| l.name.as_str())
            .collect();
        assert_eq!(served, ["http", "web"], "the UDP listener is not served");
        let http = &built.model.listeners[0].routes;
        assert_eq!(http.len(), 1);
        assert_eq!(
            (http[0].namespace.as_str(), http[0].name.as_str()),
            ("shop", "both")
        );
        assert_eq!(http[0].hostnames, ["a.com", "b.com"], "each hostname once");
        assert_eq!(http[0].rules, [rule(0)]);
        assert_eq!(
            built.model.listeners[1].routes[0].hostnames,
            Vec::<String>::new()
        );
        assert_eq!(
            built.model.listeners[1].hostname.as_deref(),
            Some("*.example.com")
        );
        assert_eq!(
            (built.model.namespace.as_str(), built.model.name.as_str()),
            ("infra", "gw")
        );
    }

    #[test]
    fn references_are_every_secret_named_and_every_route_and_service_judged() {
        let gw = gateway(json!({ "gatewayClassName": "pontoon", "listeners": [
            { "name": "https", "port": 443, "protocol": "HTTPS", "tls": { "certificateRefs": [
                { "name": "missing" },
                { "name": "shared", "namespace": "certs" }
            ] } }
        ] }));
        let states = listeners::evaluate(&gw, &ListView::default());
        let fetched = [("certs".to_string(), "shared".to_string())];
        let verdicts = [
            verdict("r", vec![parent(Ok(vec![on(0, &[])]))], 1),
            verdict("refused", vec![refused()], 1),
        ];
        let references = references(&gw, &states, &fetched, &verdicts);
        let set = |pairs: &[(&str, &str)]| -> HashSet<(String, String)> {
            pairs
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect()
        };
        assert_eq!(
            references.secrets,
            set(&[("infra", "missing"), ("certs", "shared")])
        );
        let http = |name: &str| (RouteKind::Http, "shop".to_string(), name.to_string());
        assert_eq!(
            references.routes,
            HashSet::from([http("r"), http("refused")])
        );
        assert_eq!(
            references.services,
            set(&[("shop", "r-backend"), ("shop", "refused-backend")])
        );
    }
}
