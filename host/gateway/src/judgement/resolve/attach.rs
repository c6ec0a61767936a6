//! Whether a route's parent reference attaches it to a Gateway, and to which
//! listeners, with the hostnames it serves there: section name and port,
//! the listener's allowed namespaces and kinds, and hostname intersection.

use crate::httproutes::HttpRouteParentRefs;
use gateway_api::gateways::Gateway;

use super::{
    hostnames,
    issue::Issue,
    label_selector::selects,
    listener_sets::{self, SetRef},
    listeners::{AllowedNamespaces, ListenerState},
    view::ClusterView,
};
use crate::{
    data_plane::model::{GATEWAY_GROUP, RouteKind},
    judgement::route_kinds::NamesParent,
};

/// The route on one listener.
#[derive(Clone, Debug, PartialEq)]
pub struct Attachment {
    /// Index into the Gateway's listeners.
    pub listener: usize,
    /// The hostnames the route serves on it (empty: any).
    pub hostnames: Vec<String>,
}

/// Whether `parent` names `gateway` (group, kind, namespace, name).
pub fn names_gateway(parent: &impl NamesParent, route_namespace: &str, gateway: &Gateway) -> bool {
    parent.group().unwrap_or(GATEWAY_GROUP) == GATEWAY_GROUP
        && parent.kind().unwrap_or("Gateway") == "Gateway"
        && parent.namespace().unwrap_or(route_namespace)
            == gateway.metadata.namespace.as_deref().unwrap_or_default()
        && Some(parent.name()) == gateway.metadata.name.as_deref()
}

/// Whether `parent` names `gateway` or one of `sets` (its ListenerSets).
pub fn names_gateway_or_set(
    parent: &impl NamesParent,
    route_namespace: &str,
    gateway: &Gateway,
    sets: &[SetRef],
) -> bool {
    names_gateway(parent, route_namespace, gateway)
        || listener_sets::named_by(parent, route_namespace).is_some_and(|s| sets.contains(&s))
}

/// The ListenerSets among `listeners`' declarers.
pub fn sets_of(listeners: &[ListenerState]) -> Vec<SetRef> {
    let mut sets: Vec<SetRef> = listeners.iter().filter_map(|l| l.set.clone()).collect();
    sets.dedup();
    sets
}

/// The listeners `parent` attaches the route (of `kind`) to, or why it
/// attaches to none. A parent reference to the Gateway reaches its own
/// listeners only; one to a ListenerSet, that set's only.
pub fn attach(
    kind: RouteKind,
    route_namespace: &str,
    route_hostnames: &[String],
    parent: &HttpRouteParentRefs,
    gateway: &Gateway,
    listeners: &[ListenerState],
    view: &dyn ClusterView,
) -> Result<Vec<Attachment>, Issue> {
    let gateway_namespace = gateway.metadata.namespace.as_deref().unwrap_or_default();
    let set = listener_sets::named_by(parent, route_namespace);
    let parent_name = match &set {
        None => format!("Gateway {gateway_namespace}/{}", parent.name),
        Some(set) => format!("ListenerSet {set}"),
    };
    let candidates: Vec<(usize, &ListenerState)> = listeners
        .iter()
        .enumerate()
        .filter(|(_, l)| l.set == set)
        .filter(|(_, l)| parent.section_name.as_deref().is_none_or(|s| s == l.name))
        .filter(|(_, l)| parent.port.is_none_or(|p| i32::from(l.port) == p))
        .collect();
    if candidates.is_empty() {
        let what = match (&parent.section_name, parent.port) {
            (Some(s), Some(p)) => format!("listener `{s}` on port {p}"),
            (Some(s), None) => format!("listener `{s}`"),
            (None, Some(p)) => format!("listener on port {p}"),
            (None, None) => "listener".to_string(),
        };
        return Err(Issue::new(
            "NoMatchingParent",
            format!("{parent_name} has no {what}"),
        ));
    }
    let allowed: Vec<(usize, &ListenerState)> = candidates
        .into_iter()
        .filter(|(_, l)| l.usable() && l.supported_kinds.contains(&kind))
        .filter(|(_, l)| namespace_allowed(&l.allowed, &l.namespace, route_namespace, view))
        .collect();
    if allowed.is_empty() {
        return Err(Issue::new(
            "NotAllowedByListeners",
            format!(
                "no listener of {parent_name} allows {kind}s from namespace `{route_namespace}`"
            ),
        ));
    }
    let attached: Vec<Attachment> = allowed
        .into_iter()
        .filter_map(|(i, l)| {
            hostnames::effective(l.hostname.as_deref(), route_hostnames).map(|hostnames| {
                Attachment {
                    listener: i,
                    hostnames,
                }
            })
        })
        .collect();
    if attached.is_empty() {
        return Err(Issue::new(
            "NoMatchingListenerHostname",
            format!(
                "none of the route's hostnames ({}) matches a listener of {parent_name}",
                route_hostnames.join(", "),
            ),
        ));
    }
    Ok(attached)
}

/// Whether a listener declared in `listener_namespace` (its Gateway's or
/// ListenerSet's) takes routes from `route_namespace`.
fn namespace_allowed(
    allowed: &AllowedNamespaces,
    listener_namespace: &str,
    route_namespace: &str,
    view: &dyn ClusterView,
) -> bool {
    match allowed {
        AllowedNamespaces::Same => listener_namespace == route_namespace,
        AllowedNamespaces::All => true,
        AllowedNamespaces::Selector(selector) => view
            .namespace_labels(route_namespace)
            .is_some_and(|labels| selects(selector, &labels)),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::judgement::resolve::{listeners, view::ListView};

    fn gateway(listeners: serde_json::Value) -> Gateway {
        serde_json::from_value(serde_json::json!({
            "metadata": { "name": "gw", "namespace": "infra" },
            "spec": { "gatewayClassName": "pontoon", "listeners": listeners }
        }))
        .unwrap()
    }

    fn parent(value: serde_json::Value) -> HttpRouteParentRefs {
        serde_json::from_value(value).unwrap()
    }

    fn view() -> ListView {
        ListView {
            namespaces: vec![
                ("infra".into(), BTreeMap::new()),
                (
                    "shop".into(),
                    [("team".to_string(), "web".to_string())].into(),
                ),
                ("other".into(), BTreeMap::new()),
            ],
            ..Default::default()
        }
    }

    fn run(
        gw: &Gateway,
        route_ns: &str,
        hosts: &[&str],
        p: serde_json::Value,
    ) -> Result<Vec<Attachment>, Issue> {
        let view = view();
        let states = listeners::evaluate(gw, &view);
        let hosts: Vec<String> = hosts.iter().map(|s| s.to_string()).collect();
        attach(
            RouteKind::Http,
            route_ns,
            &hosts,
            &parent(p),
            gw,
            &states,
            &view,
        )
    }

    #[test]
    fn each_route_kind_attaches_to_the_listeners_that_take_it() {
        let gw = gateway(serde_json::json!([
            { "name": "http", "port": 80, "protocol": "HTTP" },
            { "name": "tls", "port": 443, "protocol": "TLS", "tls": { "mode": "Passthrough" } }
        ]));
        let view = view();
        let states = listeners::evaluate(&gw, &view);
        let on = |kind| {
            attach(
                kind,
                "infra",
                &[],
                &parent(serde_json::json!({ "name": "gw" })),
                &gw,
                &states,
                &view,
            )
            .map(|a| a.iter().map(|a| a.listener).collect::<Vec<_>>())
        };
        assert_eq!(on(RouteKind::Http), Ok(vec![0]));
        assert_eq!(on(RouteKind::Grpc), Ok(vec![0]));
        assert_eq!(on(RouteKind::Tls), Ok(vec![1]));
        let only_http = |kind| {
            attach(
                kind,
                "infra",
                &[],
                &parent(serde_json::json!({ "name": "gw", "sectionName": "http" })),
                &gw,
                &states,
                &view,
            )
        };
        let refused = only_http(RouteKind::Tls).unwrap_err();
        assert_eq!(refused.reason, "NotAllowedByListeners");
        assert!(refused.message.contains("allows TLSRoutes"), "{refused:?}");
    }

    #[test]
    fn same_namespace_is_the_default() {
        let gw = gateway(serde_json::json!([{ "name": "http", "port": 80, "protocol": "HTTP" }]));
        assert!(run(&gw, "infra", &[], serde_json::json!({ "name": "gw" })).is_ok());
        let refused = run(
            &gw,
            "shop",
            &[],
            serde_json::json!({ "name": "gw", "namespace": "infra" }),
        );
        assert_eq!(refused.unwrap_err().reason, "NotAllowedByListeners");
    }

    #[test]
    fn all_and_selector_namespaces() {
        let gw = gateway(serde_json::json!([
            { "name": "all", "port": 80, "protocol": "HTTP", "hostname": "all.com",
              "allowedRoutes": { "namespaces": { "from": "All" } } },
            { "name": "team", "port": 8080, "protocol": "HTTP",
              "allowedRoutes": { "namespaces": { "from": "Selector",
                "selector": { "matchLabels": { "team": "web" } } } } }
        ]));
        let p = serde_json::json!({ "name": "gw", "namespace": "infra" });
        let shop = run(&gw, "shop", &[], p.clone()).unwrap();
        assert_eq!(shop.iter().map(|a| a.listener).collect::<Vec<_>>(), [0, 1]);
        let other = run(&gw, "other", &[], p).unwrap();
        assert_eq!(other.iter().map(|a| a.listener).collect::<Vec<_>>(), [0]);
        assert_eq!(other[0].hostnames, ["all.com"]);
    }

    #[test]
    fn section_name_and_port_pick_listeners() {
        let gw = gateway(serde_json::json!([
            { "name": "a", "port": 80, "protocol": "HTTP" },
            { "name": "b", "port": 8080, "protocol": "HTTP" }
        ]));
        let by_name = run(
            &gw,
            "infra",
            &[],
            serde_json::json!({ "name": "gw", "sectionName": "b" }),
        );
        assert_eq!(by_name.unwrap()[0].listener, 1);
        let by_port = run(
            &gw,
            "infra",
            &[],
            serde_json::json!({ "name": "gw", "port": 80 }),
        );
        assert_eq!(by_port.unwrap()[0].listener, 0);
        let none = run(
            &gw,
            "infra",
            &[],
            serde_json::json!({ "name": "gw", "sectionName": "c" }),
        );
        let issue = none.unwrap_err();
        assert_eq!(issue.reason, "NoMatchingParent");
        assert!(issue.message.contains("`c`"), "{issue:?}");
    }

    #[test]
    fn hostnames_must_intersect() {
        let gw = gateway(serde_json::json!([
            { "name": "a", "port": 80, "protocol": "HTTP", "hostname": "*.example.com" }
        ]));
        let p = serde_json::json!({ "name": "gw" });
        let ok = run(
            &gw,
            "infra",
            &["foo.example.com", "foo.other.com"],
            p.clone(),
        )
        .unwrap();
        assert_eq!(ok[0].hostnames, ["foo.example.com"]);
        let refused = run(&gw, "infra", &["foo.other.com"], p).unwrap_err();
        assert_eq!(refused.reason, "NoMatchingListenerHostname");
    }

    #[test]
    fn parent_refs_name_gateways_by_group_kind_namespace_and_name() {
        let gw = gateway(serde_json::json!([]));
        assert!(names_gateway(
            &parent(serde_json::json!({ "name": "gw" })),
            "infra",
            &gw
        ));
        assert!(!names_gateway(
            &parent(serde_json::json!({ "name": "gw" })),
            "shop",
            &gw
        ));
        assert!(names_gateway(
            &parent(serde_json::json!({ "name": "gw", "namespace": "infra" })),
            "shop",
            &gw
        ));
        assert!(!names_gateway(
            &parent(serde_json::json!({ "name": "gw", "kind": "Service", "group": "" })),
            "infra",
            &gw
        ));
    }
}
