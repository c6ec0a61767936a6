//! A rule's RequestMirror filters, resolved by the host rather than a config
//! filter module: the mirror's `backendRef` is judged as a backend is
//! (Services only, another namespace only with a ReferenceGrant), and its
//! ready endpoints are what the data plane's `pontoon_mirror` sends the
//! copies to. A mirror whose backend does not resolve makes the route's
//! `ResolvedRefs` False, and the rule is served without that mirror: a
//! mirror never changes what the client gets, so its absence cannot either.

use crate::httproutes::{HttpRouteRulesBackendRefs, HttpRouteRulesFiltersRequestMirror};
use serde_json::json;

use super::{backends, issue::Issue, view::ClusterView};
use crate::data_plane::model::{BackendProtocol, RouteKind, TranslatedFilter};

/// The filter type, as routes and `supportedFeatures` spell it.
pub const KIND: &str = "RequestMirror";
/// Who made the entry, as a module's name stands in messages.
const MAKER: &str = "pontoon (host)";

/// One mirror filter after resolution.
#[derive(Debug, Default)]
pub struct Resolved {
    /// The `pontoon_mirror` entry, when the backend resolved.
    pub filter: Option<TranslatedFilter>,
    /// Why the backend did not resolve (`ResolvedRefs: False`).
    pub issues: Vec<Issue>,
    /// The Service named, for watches.
    pub services: Vec<(String, String)>,
}

/// Resolves `mirror` of a route of `kind` in `route_namespace`; `Err` when
/// the filter itself asks for something that is not a share of requests.
pub fn resolve(
    kind: RouteKind,
    route_namespace: &str,
    mirror: &HttpRouteRulesFiltersRequestMirror,
    view: &dyn ClusterView,
) -> Result<Resolved, String> {
    let (numerator, denominator) = share(mirror)?;
    let backend_ref = &mirror.backend_ref;
    let as_backend = HttpRouteRulesBackendRefs {
        group: backend_ref.group.clone(),
        kind: backend_ref.kind.clone(),
        name: backend_ref.name.clone(),
        namespace: backend_ref.namespace.clone(),
        port: backend_ref.port,
        ..HttpRouteRulesBackendRefs::default()
    };
    let resolved = backends::resolve(kind, route_namespace, &[as_backend], view);
    let filter = resolved.backends.first().map(|backend| {
        let endpoints: Vec<String> = backend.endpoints.iter().map(|e| e.to_string()).collect();
        TranslatedFilter {
            kind: KIND.to_string(),
            module: MAKER.to_string(),
            entries: vec![json!({
                "filter": "pontoon_mirror",
                "backend": backend.cluster,
                "endpoints": endpoints,
                "numerator": numerator,
                "denominator": denominator,
                "h2c": backend.protocol == BackendProtocol::H2c,
            })]
            .into(),
        }
    });
    let issues = resolved
        .issues
        .into_iter()
        .map(|i| Issue::new(i.reason, format!("RequestMirror: {}", i.message)))
        .collect();
    Ok(Resolved {
        filter,
        issues,
        services: resolved.services,
    })
}

/// The share of requests mirrored, as numerator and denominator: all of
/// them unless `percent` or `fraction` (denominator 100 by default) says.
fn share(mirror: &HttpRouteRulesFiltersRequestMirror) -> Result<(u32, u32), String> {
    let (numerator, denominator) = match (mirror.percent, &mirror.fraction) {
        (Some(_), Some(_)) => return Err("RequestMirror sets both percent and fraction".into()),
        (Some(percent), None) => (percent, 100),
        (None, Some(f)) => (f.numerator, f.denominator.unwrap_or(100)),
        (None, None) => (1, 1),
    };
    match (u32::try_from(numerator), u32::try_from(denominator)) {
        (Ok(n), Ok(d)) if d > 0 && n <= d => Ok((n, d)),
        _ => Err(format!(
            "RequestMirror's share {numerator}/{denominator} is not one: it needs 0 <= numerator <= denominator and denominator > 0"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mirror(json: serde_json::Value) -> HttpRouteRulesFiltersRequestMirror {
        serde_json::from_value(json).unwrap()
    }

    fn view() -> crate::judgement::resolve::view::ListView {
        let service = serde_json::from_value(json!({
            "metadata": { "name": "mirror", "namespace": "shop" },
            "spec": { "clusterIP": "10.96.0.20", "ports": [{ "name": "http", "port": 80, "targetPort": 3000 }] }
        }))
        .unwrap();
        let slice = serde_json::from_value(json!({
            "metadata": { "name": "mirror-abc", "namespace": "shop",
                          "labels": { "kubernetes.io/service-name": "mirror" } },
            "addressType": "IPv4",
            "ports": [{ "name": "http", "port": 3000 }],
            "endpoints": [{ "addresses": ["10.244.0.9"], "conditions": { "ready": true } }]
        }))
        .unwrap();
        crate::judgement::resolve::view::ListView {
            services: vec![std::sync::Arc::new(service)],
            slices: vec![std::sync::Arc::new(slice)],
            ..Default::default()
        }
    }

    #[test]
    fn a_mirror_is_its_backends_ready_endpoints_or_why_not() {
        let to = |name: &str, namespace: Option<&str>| {
            mirror(
                json!({"backendRef": {"name": name, "namespace": namespace, "port": 80}, "percent": 35}),
            )
        };
        let resolved = resolve(RouteKind::Http, "shop", &to("mirror", None), &view()).unwrap();
        let entry = &resolved.filter.unwrap().entries[0];
        assert_eq!(entry["filter"], "pontoon_mirror");
        assert_eq!(entry["endpoints"], json!(["10.244.0.9:3000"]));
        assert_eq!(
            (entry["numerator"].as_u64(), entry["denominator"].as_u64()),
            (Some(35), Some(100))
        );
        assert!(resolved.issues.is_empty());

        let missing = resolve(RouteKind::Http, "shop", &to("gone", None), &view()).unwrap();
        assert!(missing.filter.is_none());
        assert_eq!(missing.issues[0].reason, "BackendNotFound");
        assert!(
            missing.issues[0].message.starts_with("RequestMirror: "),
            "{:?}",
            missing.issues
        );

        // Another namespace without a ReferenceGrant: never mirrored there.
        let foreign = resolve(
            RouteKind::Http,
            "other",
            &to("mirror", Some("shop")),
            &view(),
        )
        .unwrap();
        assert!(foreign.filter.is_none());
        assert_eq!(foreign.issues[0].reason, "RefNotPermitted");
    }

    #[test]
    fn the_share_is_all_a_percent_or_a_fraction() {
        let backend = serde_json::json!({"name": "m", "port": 80});
        assert_eq!(share(&mirror(json!({"backendRef": backend}))), Ok((1, 1)));
        assert_eq!(
            share(&mirror(json!({"backendRef": backend, "percent": 20}))),
            Ok((20, 100))
        );
        assert_eq!(
            share(&mirror(
                json!({"backendRef": backend, "fraction": {"numerator": 1, "denominator": 3}})
            )),
            Ok((1, 3))
        );
        assert_eq!(
            share(&mirror(
                json!({"backendRef": backend, "fraction": {"numerator": 5}})
            )),
            Ok((5, 100))
        );
        for bad in [
            json!({"backendRef": backend, "percent": 120}),
            json!({"backendRef": backend, "percent": -1}),
            json!({"backendRef": backend, "fraction": {"numerator": 4, "denominator": 3}}),
            json!({"backendRef": backend, "fraction": {"numerator": 0, "denominator": 0}}),
            json!({"backendRef": backend, "percent": 5, "fraction": {"numerator": 1}}),
        ] {
            assert!(share(&mirror(bad.clone())).is_err(), "{bad}");
        }
    }
}
