//! One route (HTTPRoute, GRPCRoute, TLSRoute or TCPRoute, in HTTPRoute's shape: see
//! `route_kinds`) judged against one of our Gateways: which of its parent
//! references attach it to which listeners, whether its backends resolve,
//! and its rules in the model's terms with their filters translated. The
//! Gateway controller builds the data plane from it, the route controllers
//! the route's status, so both always agree.

use crate::httproutes::{HttpRouteParentRefs, HttpRouteRulesFiltersType as FilterType};
use gateway_api::gateways::Gateway;

use crate::{
    data_plane::config,
    data_plane::model::RouteKind,
    data_plane::model::{Match, Rule, TranslatedFilter},
    data_plane::program::DataPlane,
    judgement::resolve::{
        attach::{self, Attachment},
        backend_filters, backends, durations,
        issue::Issue,
        listeners::ListenerState,
        matches, mirrors, retries,
        view::ClusterView,
    },
    judgement::route_kinds::AnyRoute,
    judgement::translate::{FilterRequest, Translator, UNSUPPORTED_VALUE},
};
use pontoon_plugins::bindings::RouteContext;

/// What one parent reference of the route gets on this Gateway.
#[derive(Clone, Debug)]
pub struct ParentVerdict {
    pub parent: HttpRouteParentRefs,
    /// `Ok` with the listeners it attaches to, or why it does not.
    pub accepted: Result<Vec<Attachment>, Issue>,
}

#[derive(Clone, Debug)]
pub struct RouteVerdict {
    pub kind: RouteKind,
    pub namespace: String,
    pub name: String,
    /// One per parent reference naming this Gateway.
    pub parents: Vec<ParentVerdict>,
    /// The rules that can be programmed.
    pub rules: Vec<Rule>,
    /// Rules left out, and why (`PartiallyInvalid`, or `Accepted: False`
    /// with reason UnsupportedValue when none is left).
    pub refused_rules: Vec<Issue>,
    /// Backend problems (`ResolvedRefs: False`); the first decides the reason.
    pub unresolved: Vec<Issue>,
    /// Services the route refers to, for watches.
    pub services: Vec<(String, String)>,
}

impl RouteVerdict {
    /// Whether it attaches to this Gateway at all with something to serve.
    pub fn attached(&self) -> bool {
        !self.rules.is_empty() && self.parents.iter().any(|p| p.accepted.is_ok())
    }
}

/// Judges each of `routes` on `gateway`; a rule config generation cannot
/// express faithfully ([`config::check_rule`]) is refused. Every filter of
/// every route goes to the translator in one batch: a Gateway's first
/// reconcile translates all its routes' filters at once.
pub async fn evaluate_all(
    routes: &[AnyRoute],
    gateway: &Gateway,
    listeners: &[ListenerState],
    view: &dyn ClusterView,
    translator: &Translator,
    plane: DataPlane,
) -> Vec<RouteVerdict> {
    let gateway_namespace = gateway.metadata.namespace.clone().unwrap_or_default();
    let gateway_name = gateway.metadata.name.clone().unwrap_or_default();
    let mut requests: Vec<FilterRequest> = Vec::new();
    // Whose each request is: (route, rule).
    let mut owners = Vec::new();
    let mut translated: Vec<Vec<Vec<Result<TranslatedFilter, Issue>>>> = Vec::new();
    for (route_index, any) in routes.iter().enumerate() {
        let route = &any.route;
        let rules = route.spec.rules.as_deref().unwrap_or_default();
        translated.push(vec![Vec::new(); rules.len()]);
        for (rule_index, rule) in rules.iter().enumerate() {
            for (filter_index, filter) in rule.filters.iter().flatten().enumerate() {
                // Mirrors are the host's: their backends are resolved as
                // backends are (see `judge`).
                if filter.r#type == FilterType::RequestMirror {
                    continue;
                }
                let context = RouteContext {
                    route_namespace: route.metadata.namespace.clone().unwrap_or_default(),
                    route_name: route.metadata.name.clone().unwrap_or_default(),
                    rule_index: u32::try_from(rule_index).unwrap_or(u32::MAX),
                    filter_index: u32::try_from(filter_index).unwrap_or(u32::MAX),
                    gateway_namespace: gateway_namespace.clone(),
                    gateway_name: gateway_name.clone(),
                };
                requests.push(FilterRequest::new(filter, context));
                owners.push((route_index, rule_index));
            }
        }
    }
    for ((route, rule), outcome) in owners
        .into_iter()
        .zip(translator.translate(requests.into()).await)
    {
        translated[route][rule].push(outcome);
    }
    routes
        .iter()
        .zip(translated)
        .map(|(route, per_rule)| judge(route, gateway, listeners, view, plane, per_rule))
        .collect()
}

/// One route's verdict, given its rules' translated filters.
fn judge(
    any: &AnyRoute,
    gateway: &Gateway,
    listeners: &[ListenerState],
    view: &dyn ClusterView,
    plane: DataPlane,
    mut per_rule: Vec<Vec<Result<TranslatedFilter, Issue>>>,
) -> RouteVerdict {
    let (kind, route) = (any.kind, &any.route);
    let namespace = route.metadata.namespace.clone().unwrap_or_default();
    let name = route.metadata.name.clone().unwrap_or_default();
    let hostnames = route.spec.hostnames.clone().unwrap_or_default();
    let sets = attach::sets_of(listeners);
    let parents: Vec<ParentVerdict> = route
        .spec
        .parent_refs
        .iter()
        .flatten()
        .filter(|p| attach::names_gateway_or_set(*p, &namespace, gateway, &sets))
        .map(|p| ParentVerdict {
            parent: p.clone(),
            accepted: attach::attach(kind, &namespace, &hostnames, p, gateway, listeners, view),
        })
        .collect();

    let mut verdict = RouteVerdict {
        kind,
        namespace: namespace.clone(),
        name,
        parents,
        rules: Vec::new(),
        refused_rules: Vec::new(),
        unresolved: Vec::new(),
        services: Vec::new(),
    };
    let rules = route.spec.rules.as_deref().unwrap_or_default();
    for (index, rule) in rules.iter().enumerate() {
        let refs = rule.backend_refs.as_deref().unwrap_or_default();
        let mut resolved = backends::resolve(kind, &namespace, refs, view);
        let backend_headers = backend_filters::of(refs);
        for (r, headers) in refs.iter().zip(backend_headers.iter().flatten()) {
            let Some(headers) = headers else { continue };
            let cluster = backends::cluster_name(
                r.namespace.as_deref().unwrap_or(&namespace),
                &r.name,
                r.port.unwrap_or_default(),
            );
            for backend in resolved
                .backends
                .iter_mut()
                .filter(|b| b.cluster == cluster)
            {
                backend.headers = Some(headers.clone());
            }
        }
        verdict.services.extend(resolved.services);
        verdict.unresolved.extend(resolved.issues);
        let mut filters = Vec::new();
        let mut refused = any
            .refused
            .get(&index)
            .map(|why| Issue::new(UNSUPPORTED_VALUE, format!("rule {index}: {why}")));
        let mut translated = std::mem::take(&mut per_rule[index]).into_iter();
        for filter in rule.filters.iter().flatten() {
            let outcome = match (&filter.r#type, &filter.request_mirror) {
                (FilterType::RequestMirror, mirror) => {
                    match mirror_filter(kind, &namespace, mirror.as_ref(), view, plane) {
                        Ok(resolved) => {
                            verdict.services.extend(resolved.services);
                            verdict.unresolved.extend(resolved.issues);
                            match resolved.filter {
                                Some(filter) => Ok(filter),
                                None => continue,
                            }
                        }
                        Err(why) => Err(Issue::new(UNSUPPORTED_VALUE, why)),
                    }
                }
                _ => match translated.next() {
                    Some(outcome) => outcome,
                    None => continue,
                },
            };
            match outcome {
                Ok(filter) => filters.push(filter),
                Err(issue) => {
                    refused.get_or_insert(Issue::new(
                        UNSUPPORTED_VALUE,
                        format!("rule {index}: {}", issue.message),
                    ));
                }
            }
        }
        let matches: Vec<Match> = matches::convert(rule.matches.as_deref().unwrap_or_default());
        let mut timeouts = durations::timeouts(rule.timeouts.as_ref()).unwrap_or_else(|why| {
            refused.get_or_insert(Issue::new(
                UNSUPPORTED_VALUE,
                format!("rule {index}: {why}"),
            ));
            Default::default()
        });
        timeouts.retry = retries::of(rule.retry.as_ref()).unwrap_or_else(|why| {
            refused.get_or_insert(Issue::new(
                UNSUPPORTED_VALUE,
                format!("rule {index}: {why}"),
            ));
            None
        });
        let model = Rule {
            index,
            matches,
            backends: resolved.backends,
            filters,
            timeouts,
        };
        if refused.is_none()
            && let Err(why) = backend_headers
        {
            refused = Some(Issue::new(
                UNSUPPORTED_VALUE,
                format!("rule {index}: {why}"),
            ));
        }
        if refused.is_none()
            && let Err(why) = config::check_rule(kind, &model, plane)
        {
            refused = Some(Issue::new(
                UNSUPPORTED_VALUE,
                format!("rule {index}: {why}"),
            ));
        }
        match refused {
            Some(issue) => verdict.refused_rules.push(issue),
            None => verdict.rules.push(model),
        }
    }
    verdict
}

/// A RequestMirror filter resolved; `Err` when it cannot be served here.
fn mirror_filter(
    kind: RouteKind,
    namespace: &str,
    mirror: Option<&crate::httproutes::HttpRouteRulesFiltersRequestMirror>,
    view: &dyn ClusterView,
    plane: DataPlane,
) -> Result<mirrors::Resolved, String> {
    if let Some(why) = plane.lacks("RequestMirror") {
        return Err(why);
    }
    let mirror = mirror.ok_or("a RequestMirror filter needs its `requestMirror` field")?;
    mirrors::resolve(kind, namespace, mirror, view)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::{
        data_plane::model::Retry,
        judgement::resolve::{listeners, view::ListView},
        judgement::route_kinds::RouteResource,
    };

    /// `route` judged on a Gateway of one HTTP listener, its filters none.
    fn judged(rules: serde_json::Value) -> RouteVerdict {
        let gateway: Gateway = serde_json::from_value(json!({
            "metadata": { "name": "gw", "namespace": "shop" },
            "spec": { "gatewayClassName": "pontoon",
                      "listeners": [{ "name": "http", "port": 80, "protocol": "HTTP" }] }
        }))
        .unwrap();
        let route: Arc<crate::httproutes::HttpRoute> = Arc::new(
            serde_json::from_value(json!({
                "metadata": { "name": "web", "namespace": "shop" },
                "spec": { "parentRefs": [{ "name": "gw" }], "rules": rules }
            }))
            .unwrap(),
        );
        let view = ListView::default();
        let states = listeners::evaluate(&gateway, &view);
        let count = route.spec.rules.as_ref().map_or(0, Vec::len);
        judge(
            &route.to_any(),
            &gateway,
            &states,
            &view,
            DataPlane::Pontoon,
            vec![Vec::new(); count],
        )
    }

    #[test]
    fn a_rules_retry_reaches_the_model_and_one_praxis_cannot_serve_refuses_its_rule() {
        let backend = json!([{ "name": "api", "port": 80 }]);
        let verdict = judged(json!([
            { "backendRefs": backend,
              "retry": { "attempts": 2, "codes": [503, 500], "backoff": "50ms" },
              "timeouts": { "backendRequest": "1s" } },
            { "backendRefs": backend, "retry": { "attempts": 0 } },
            { "backendRefs": backend, "retry": { "attempts": 20 } },
            { "backendRefs": backend, "retry": { "codes": [200] } },
            // A route of the standard channel's CRD has no `retry`.
            { "backendRefs": backend }
        ]));
        let rules: Vec<(usize, Option<Retry>)> = verdict
            .rules
            .iter()
            .map(|r| (r.index, r.timeouts.retry.clone()))
            .collect();
        assert_eq!(
            rules,
            [
                (
                    0,
                    Some(Retry {
                        attempts: Some(2),
                        codes: vec![500, 503],
                        backoff_ms: Some(50)
                    })
                ),
                (4, None)
            ]
        );
        assert_eq!(verdict.rules[0].timeouts.backend_request_ms, Some(1000));
        let refused: Vec<&str> = verdict
            .refused_rules
            .iter()
            .map(|i| i.message.as_str())
            .collect();
        assert_eq!(refused.len(), 3, "{refused:?}");
        assert!(
            refused[0].starts_with("rule 1: retry.attempts: 0"),
            "{refused:?}"
        );
        assert!(
            refused[1].starts_with("rule 2: retry.attempts of 20"),
            "{refused:?}"
        );
        assert!(
            refused[2].starts_with("rule 3: retry.codes[0]: 200"),
            "{refused:?}"
        );
        assert!(
            verdict
                .refused_rules
                .iter()
                .all(|i| i.reason == UNSUPPORTED_VALUE)
        );
    }
}
