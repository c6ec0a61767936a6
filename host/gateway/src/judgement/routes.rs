//! One route (HTTPRoute, GRPCRoute, TLSRoute or TCPRoute, in HTTPRoute's shape: see
//! `route_kinds`) judged against one of our Gateways: which of its parent
//! references attach it to which listeners, whether its backends resolve,
//! and its rules in the model's terms with their filters translated. The
//! Gateway controller builds the data plane from it, the route controllers
//! the route's status, so both always agree.

use gateway_api::{
    gateways::Gateway,
    httproutes::{HttpRouteParentRefs, HttpRouteRulesFiltersType as FilterType},
};

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
        matches, mirrors,
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
        let timeouts = durations::timeouts(rule.timeouts.as_ref()).unwrap_or_else(|why| {
            refused.get_or_insert(Issue::new(
                UNSUPPORTED_VALUE,
                format!("rule {index}: {why}"),
            ));
            Default::default()
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
    mirror: Option<&gateway_api::httproutes::HttpRouteRulesFiltersRequestMirror>,
    view: &dyn ClusterView,
    plane: DataPlane,
) -> Result<mirrors::Resolved, String> {
    if let Some(why) = plane.lacks("RequestMirror") {
        return Err(why);
    }
    let mirror = mirror.ok_or("a RequestMirror filter needs its `requestMirror` field")?;
    mirrors::resolve(kind, namespace, mirror, view)
}
