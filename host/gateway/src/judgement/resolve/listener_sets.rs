//! ListenerSets: listeners that other teams add to a Gateway. Which sets a
//! Gateway takes (its `allowedListeners`), in the spec's precedence order
//! (the Gateway's own listeners first, then sets oldest first, then by
//! `namespace/name`), and how a route's parent reference names one.

use std::sync::Arc;

use gateway_api::{
    gateways::{Gateway, GatewayAllowedListenersNamespacesFrom, GatewayListeners},
    listenersets::ListenerSet,
};
use kube::runtime::reflector::ObjectRef;

use super::{issue::Issue, label_selector::selects, view::ClusterView};
use crate::{data_plane::model::GATEWAY_GROUP, judgement::route_kinds::NamesParent};

pub const KIND: &str = "ListenerSet";

/// Names one ListenerSet.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SetRef {
    pub namespace: String,
    pub name: String,
}

impl SetRef {
    pub fn of(set: &ListenerSet) -> Self {
        Self {
            namespace: set.metadata.namespace.clone().unwrap_or_default(),
            name: set.metadata.name.clone().unwrap_or_default(),
        }
    }
}

impl std::fmt::Display for SetRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// A ListenerSet whose parent is the Gateway, and whether the Gateway takes it.
#[derive(Clone, Debug)]
pub struct Candidate {
    pub set: Arc<ListenerSet>,
    /// `Err` (reason NotAllowed) when the Gateway's `allowedListeners` does
    /// not admit its namespace.
    pub allowed: Result<(), Issue>,
}

impl Candidate {
    pub fn reference(&self) -> SetRef {
        SetRef::of(&self.set)
    }
}

/// The Gateway `set`'s parentRef names (in the set's namespace unless it
/// says another); `None` when it names another kind.
pub fn parent_gateway(set: &ListenerSet) -> Option<ObjectRef<Gateway>> {
    let parent = &set.spec.parent_ref;
    let set_namespace = set.metadata.namespace.as_deref().unwrap_or_default();
    (parent.group.as_deref().unwrap_or(GATEWAY_GROUP) == GATEWAY_GROUP
        && parent.kind.as_deref().unwrap_or("Gateway") == "Gateway")
        .then(|| {
            ObjectRef::new(&parent.name)
                .within(parent.namespace.as_deref().unwrap_or(set_namespace))
        })
}

/// Whether `set`'s parentRef names `gateway`.
pub fn names_gateway(set: &ListenerSet, gateway: &Gateway) -> bool {
    parent_gateway(set).is_some_and(|p| {
        p.namespace.as_deref() == gateway.metadata.namespace.as_deref()
            && Some(p.name.as_str()) == gateway.metadata.name.as_deref()
    })
}

/// Every ListenerSet of `sets` that names `gateway`, allowed or not.
pub fn naming(gateway: &Gateway, sets: impl IntoIterator<Item = Arc<ListenerSet>>) -> Vec<SetRef> {
    sets.into_iter()
        .filter(|s| names_gateway(s, gateway))
        .map(|s| SetRef::of(&s))
        .collect()
}

/// The ListenerSets naming `gateway` (being deleted ones left out), in
/// precedence order, each judged against its `allowedListeners`.
pub fn candidates(gateway: &Gateway, view: &dyn ClusterView) -> Vec<Candidate> {
    let mut sets: Vec<Arc<ListenerSet>> = view
        .listener_sets()
        .into_iter()
        .filter(|s| s.metadata.deletion_timestamp.is_none() && names_gateway(s, gateway))
        .collect();
    sets.sort_by_cached_key(|s| {
        (
            s.metadata.creation_timestamp.clone().map(|t| t.0),
            SetRef::of(s),
        )
    });
    sets.into_iter()
        .map(|set| Candidate {
            allowed: allowed(gateway, &set, view),
            set,
        })
        .collect()
}

/// Whether the Gateway's `allowedListeners` admits the set's namespace
/// (absent, or `from: None`, admits none).
fn allowed(gateway: &Gateway, set: &ListenerSet, view: &dyn ClusterView) -> Result<(), Issue> {
    let set_namespace = set.metadata.namespace.as_deref().unwrap_or_default();
    let gateway_namespace = gateway.metadata.namespace.as_deref().unwrap_or_default();
    let namespaces = gateway
        .spec
        .allowed_listeners
        .as_ref()
        .and_then(|a| a.namespaces.as_ref());
    let from = namespaces.and_then(|n| n.from.clone());
    let ok = match from {
        Some(GatewayAllowedListenersNamespacesFrom::All) => true,
        Some(GatewayAllowedListenersNamespacesFrom::Same) => set_namespace == gateway_namespace,
        Some(GatewayAllowedListenersNamespacesFrom::Selector) => {
            // The same selector shape as a listener's allowedRoutes.
            let selector = namespaces
                .and_then(|n| n.selector.as_ref())
                .and_then(|s| serde_json::to_value(s).ok())
                .and_then(|v| serde_json::from_value(v).ok())
                .unwrap_or_default();
            view.namespace_labels(set_namespace)
                .is_some_and(|labels| selects(&selector, &labels))
        }
        Some(GatewayAllowedListenersNamespacesFrom::None) | None => false,
    };
    if ok {
        return Ok(());
    }
    let why = match from {
        Some(GatewayAllowedListenersNamespacesFrom::Same) => format!(
            "Gateway {gateway_namespace}/{} takes ListenerSets from its own namespace only",
            gateway.metadata.name.as_deref().unwrap_or_default()
        ),
        Some(GatewayAllowedListenersNamespacesFrom::Selector) => format!(
            "the labels of namespace `{set_namespace}` do not match the allowedListeners \
             selector of Gateway {gateway_namespace}/{}",
            gateway.metadata.name.as_deref().unwrap_or_default()
        ),
        _ => format!(
            "Gateway {gateway_namespace}/{} takes no ListenerSets (set spec.allowedListeners \
             to admit them)",
            gateway.metadata.name.as_deref().unwrap_or_default()
        ),
    };
    Err(Issue::new("NotAllowed", why))
}

/// The set's listeners in the Gateway's listener shape (the two API types
/// have the same fields).
pub fn listeners(set: &ListenerSet) -> Vec<GatewayListeners> {
    set.spec
        .listeners
        .iter()
        .filter_map(|l| {
            serde_json::to_value(l)
                .ok()
                .and_then(|v| serde_json::from_value(v).ok())
        })
        .collect()
}

/// The ListenerSet a route's parent reference names, if it names one.
pub fn named_by(parent: &impl NamesParent, route_namespace: &str) -> Option<SetRef> {
    (parent.group().unwrap_or(GATEWAY_GROUP) == GATEWAY_GROUP
        && parent.kind().unwrap_or("Gateway") == KIND)
        .then(|| SetRef {
            namespace: parent.namespace().unwrap_or(route_namespace).to_string(),
            name: parent.name().to_string(),
        })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::judgement::resolve::view::ListView;

    fn gateway(allowed: serde_json::Value) -> Gateway {
        serde_json::from_value(serde_json::json!({
            "metadata": { "name": "gw", "namespace": "infra" },
            "spec": { "gatewayClassName": "pontoon", "allowedListeners": allowed,
                      "listeners": [{ "name": "http", "port": 80, "protocol": "HTTP" }] }
        }))
        .unwrap()
    }

    fn set(namespace: &str, name: &str, created: &str) -> Arc<ListenerSet> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": { "name": name, "namespace": namespace, "creationTimestamp": created },
                "spec": { "parentRef": { "name": "gw", "namespace": "infra" },
                          "listeners": [{ "name": "l", "port": 80, "protocol": "HTTP",
                                          "hostname": format!("{name}.example") }] }
            }))
            .unwrap(),
        )
    }

    fn view() -> ListView {
        ListView {
            namespaces: vec![
                ("infra".into(), BTreeMap::new()),
                ("team".into(), [("allowed".into(), "ns".into())].into()),
                ("other".into(), BTreeMap::new()),
            ],
            listener_sets: vec![
                set("other", "b", "2026-01-01T00:00:02Z"),
                set("team", "a", "2026-01-01T00:00:02Z"),
                set("infra", "old", "2026-01-01T00:00:01Z"),
            ],
            ..Default::default()
        }
    }

    fn verdicts(gateway: &Gateway) -> Vec<(String, bool)> {
        candidates(gateway, &view())
            .iter()
            .map(|c| (c.reference().to_string(), c.allowed.is_ok()))
            .collect()
    }

    #[test]
    fn oldest_first_then_by_namespace_and_name() {
        let order: Vec<String> =
            verdicts(&gateway(serde_json::json!({"namespaces": {"from": "All"}})))
                .into_iter()
                .map(|(s, _)| s)
                .collect();
        assert_eq!(order, ["infra/old", "other/b", "team/a"]);
    }

    #[test]
    fn allowed_listeners_admit_by_namespace() {
        let none = verdicts(&gateway(serde_json::Value::Null));
        assert!(none.iter().all(|(_, ok)| !ok), "{none:?}");
        let explicit_none = verdicts(&gateway(
            serde_json::json!({"namespaces": {"from": "None"}}),
        ));
        assert!(explicit_none.iter().all(|(_, ok)| !ok));
        let same = verdicts(&gateway(
            serde_json::json!({"namespaces": {"from": "Same"}}),
        ));
        assert_eq!(
            same,
            [
                ("infra/old".to_string(), true),
                ("other/b".into(), false),
                ("team/a".into(), false)
            ]
        );
        let selector = verdicts(&gateway(serde_json::json!({"namespaces": {
            "from": "Selector", "selector": {"matchLabels": {"allowed": "ns"}}}})));
        assert_eq!(
            selector,
            [
                ("infra/old".to_string(), false),
                ("other/b".into(), false),
                ("team/a".into(), true)
            ]
        );
    }

    #[test]
    fn a_set_naming_another_gateway_is_no_candidate() {
        let mut other = gateway(serde_json::json!({"namespaces": {"from": "All"}}));
        other.metadata.name = Some("other".into());
        assert!(candidates(&other, &view()).is_empty());
    }
}
