//! ReferenceGrant: an object in another namespace may be referred to only
//! when a grant in *that* namespace allows the referring kind from the
//! referring namespace.

use super::view::ClusterView;

/// One side of a reference: API group (`""` for core) and kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupKind<'a> {
    pub group: &'a str,
    pub kind: &'a str,
}

pub const HTTP_ROUTE: GroupKind<'static> = GroupKind {
    group: "gateway.networking.k8s.io",
    kind: "HTTPRoute",
};
pub const GATEWAY: GroupKind<'static> = GroupKind {
    group: "gateway.networking.k8s.io",
    kind: "Gateway",
};
pub const LISTENER_SET: GroupKind<'static> = GroupKind {
    group: "gateway.networking.k8s.io",
    kind: "ListenerSet",
};
pub const SERVICE: GroupKind<'static> = GroupKind {
    group: "",
    kind: "Service",
};
pub const SECRET: GroupKind<'static> = GroupKind {
    group: "",
    kind: "Secret",
};

/// Whether `from` (a `from_kind` in `from_namespace`) may refer to the
/// `to_kind` named `to_name` in `to_namespace`. Same-namespace references
/// need no grant.
pub fn permitted(
    view: &dyn ClusterView,
    from_kind: GroupKind<'_>,
    from_namespace: &str,
    to_kind: GroupKind<'_>,
    to_namespace: &str,
    to_name: &str,
) -> bool {
    if from_namespace == to_namespace {
        return true;
    }
    view.reference_grants(to_namespace).iter().any(|grant| {
        let from_ok = grant.spec.from.iter().any(|f| {
            f.group == from_kind.group && f.kind == from_kind.kind && f.namespace == from_namespace
        });
        let to_ok = grant.spec.to.iter().any(|t| {
            t.group == to_kind.group
                && t.kind == to_kind.kind
                && t.name
                    .as_deref()
                    .is_none_or(|n| n.is_empty() || n == to_name)
        });
        from_ok && to_ok
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use gateway_api::referencegrants::ReferenceGrant;

    use super::*;
    use crate::judgement::resolve::view::ListView;

    fn grant(ns: &str, from_ns: &str, to_name: Option<&str>) -> Arc<ReferenceGrant> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": { "name": "g", "namespace": ns },
                "spec": {
                    "from": [{ "group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "namespace": from_ns }],
                    "to": [{ "group": "", "kind": "Service", "name": to_name }]
                }
            }))
            .unwrap(),
        )
    }

    #[test]
    fn same_namespace_needs_no_grant() {
        let view = ListView::default();
        assert!(permitted(&view, HTTP_ROUTE, "a", SERVICE, "a", "svc"));
        assert!(!permitted(&view, HTTP_ROUTE, "a", SERVICE, "b", "svc"));
    }

    #[test]
    fn a_grant_in_the_target_namespace_permits() {
        let view = ListView {
            grants: vec![grant("b", "a", None)],
            ..Default::default()
        };
        assert!(permitted(&view, HTTP_ROUTE, "a", SERVICE, "b", "svc"));
        assert!(
            !permitted(&view, HTTP_ROUTE, "c", SERVICE, "b", "svc"),
            "other namespace"
        );
        assert!(
            !permitted(&view, GATEWAY, "a", SERVICE, "b", "svc"),
            "other kind"
        );
        assert!(
            !permitted(&view, HTTP_ROUTE, "a", SECRET, "b", "svc"),
            "other target kind"
        );
    }

    #[test]
    fn a_named_grant_permits_that_name_only() {
        let view = ListView {
            grants: vec![grant("b", "a", Some("svc"))],
            ..Default::default()
        };
        assert!(permitted(&view, HTTP_ROUTE, "a", SERVICE, "b", "svc"));
        assert!(!permitted(&view, HTTP_ROUTE, "a", SERVICE, "b", "other"));
    }

    #[test]
    fn a_grant_in_the_referring_namespace_does_not_count() {
        let view = ListView {
            grants: vec![grant("a", "a", None)],
            ..Default::default()
        };
        assert!(!permitted(&view, HTTP_ROUTE, "a", SERVICE, "b", "svc"));
    }
}
