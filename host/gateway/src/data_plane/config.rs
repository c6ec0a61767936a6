//! Praxis configuration from a [`GatewayModel`]: pure functions, the same
//! model always giving byte-identical YAML (the Deployment's config hash).
//!
//! Per Praxis listener (one per port) the filter chain is:
//!
//! 1. `request_id`; on a shared HTTPS port of Pontoon's data plane,
//!    `pontoon_misdirected` (`misdirected.rs`);
//! 2. classifiers for what the router cannot test itself (`routes.rs`);
//! 3. `router`, entries in the Gateway API's precedence;
//! 4. `load_balancer`, one cluster per rule and match (`clusters.rs`);
//! 5. each rule's filters, gated on that rule (`filters.rs`), and the rule's
//!    own 500/503 when it has no backend to send to.
//!
//! See `docs/praxis-config.md` for the format and the reasons.

mod backend_headers;
mod backend_tls_relays;
mod clusters;
mod conditions;
mod error;
mod filters;
mod host_precedence;
mod misdirected;
mod module_entry;
mod passthrough;
mod placeholders;
mod praxis;
mod praxis_listeners;
mod retries;
mod route_entries;
mod tcp;

#[cfg(test)]
mod properties;
#[cfg(test)]
mod tests;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

pub use error::{ConfigError, MAX_BRANCHES, MAX_CONFIG_BYTES, RuleRefusal, UNSUPPORTED_VALUE};
pub use placeholders::{LISTENER_PORT, LISTENER_SCHEME, MATCH_PREFIX, PORT_SUFFIX, PORT_SUFFIX_OF};
pub use route_entries::INTERNAL_HEADER_PREFIX;

use self::{
    host_precedence::HostPattern,
    placeholders::ListenerFacts,
    praxis::{
        Admin, Config, Filter, FilterChain, InsecureOptions, LoadBalancer, RequestId, Router,
    },
    praxis_listeners::PortGroup,
    route_entries::{Candidate, CheckedMatch},
};
use super::{
    loopback::LoopbackPorts,
    model::{GatewayModel, Protocol, Route, RouteKind, Rule},
    program::DataPlane,
};

/// What the generated config depends on besides the model.
#[derive(Clone, Debug)]
pub struct GenerateOptions {
    /// Address the listeners bind (port from the Gateway listener).
    pub listen_ip: IpAddr,
    /// Where Praxis serves `/healthy`, `/ready` and `/metrics`
    /// (`admin.metrics_address`); none when unset.
    pub health_address: Option<SocketAddr>,
    /// `insecure_options.allow_root`: Praxis refuses to run as root without
    /// it. For tests, which run praxis as root; never in a cluster.
    pub allow_root: bool,
    /// The program that runs the config: what it may ask for.
    pub data_plane: DataPlane,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        Self {
            listen_ip: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            health_address: None,
            allow_root: false,
            data_plane: DataPlane::default(),
        }
    }
}

/// The rules of `model` that `plane` cannot serve, each once (a route on
/// several listeners is judged once), in route and rule order.
pub fn refusals(model: &GatewayModel, plane: DataPlane) -> Vec<RuleRefusal> {
    let mut out: Vec<RuleRefusal> = model
        .listeners
        .iter()
        .flat_map(|l| &l.routes)
        .flat_map(|route| route.rules.iter().map(move |rule| (route, rule)))
        .filter_map(|(route, rule)| {
            check_rule(route.kind, rule, plane)
                .err()
                .map(|why| refusal(route, rule, &why))
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

fn refusal(route: &Route, rule: &Rule, why: &str) -> RuleRefusal {
    RuleRefusal {
        route_namespace: route.namespace.clone(),
        route_name: route.name.clone(),
        rule_index: rule.index,
        message: format!("rule {}: {why}", rule.index),
    }
}

/// `model` without the rules Praxis cannot express, and those rules.
#[cfg(test)]
pub fn split_refused(model: &GatewayModel, plane: DataPlane) -> (GatewayModel, Vec<RuleRefusal>) {
    let refused = refusals(model, plane);
    let mut kept = model.clone();
    for route in kept.listeners.iter_mut().flat_map(|l| &mut l.routes) {
        route.rules.retain(|rule| {
            !refused.iter().any(|r| {
                r.route_namespace == route.namespace
                    && r.route_name == route.name
                    && r.rule_index == rule.index
            })
        });
    }
    (kept, refused)
}

/// Whether `plane` can serve `rule` of a route of `kind`: its matches,
/// checked, or why not.
pub fn check_rule(
    kind: RouteKind,
    rule: &Rule,
    plane: DataPlane,
) -> Result<Vec<CheckedMatch>, String> {
    if kind == RouteKind::Tls {
        passthrough::check_rule(rule)?;
        return Ok(Vec::new());
    }
    if kind == RouteKind::Tcp {
        tcp::check_rule(rule, plane)?;
        return Ok(Vec::new());
    }
    let matches = route_entries::check_matches(rule, plane)?;
    filters::check(&rule.filters, &matches, plane)?;
    backend_headers::check(&rule.backends, plane)?;
    backend_tls_relays::check(&rule.backends, plane)?;
    clusters::protocol(&rule.backends)?;
    clusters::tls(&rule.backends)?;
    clusters::check_timeouts(rule)?;
    retries::check(rule)?;
    Ok(matches)
}

/// The Praxis config (YAML) for one Gateway. Fails with
/// [`ConfigError::UnsupportedRules`] listing every rule Praxis cannot
/// express; [`check_rule`] first to leave them out.
pub fn generate(model: &GatewayModel, options: &GenerateOptions) -> Result<String, ConfigError> {
    let groups = praxis_listeners::group(model)?;
    if groups.is_empty() {
        return Err(ConfigError::NoListeners);
    }
    let mut config = Config {
        listeners: Vec::with_capacity(groups.len()),
        admin: options.health_address.map(|a| Admin {
            metrics_address: a.to_string(),
        }),
        filter_chains: Vec::with_capacity(groups.len()),
        insecure_options: InsecureOptions {
            allow_private_endpoints: true,
            allow_root: options.allow_root,
            ..InsecureOptions::default()
        },
    };
    let mut tags = 0_usize;
    let mut tcp_listeners = 0_u64;
    let mut weighted_tcp_listeners = 0_u64;
    let mut refused = Vec::new();
    let mut ports = LoopbackPorts::new(model, options.health_address.map(|a| a.port()));
    let mut hops = Vec::new();
    for group in &groups {
        let name = group.name();
        if group.protocol == Protocol::TlsPassthrough {
            refused.extend(group_refusals(group, options.data_plane));
            config.listeners.push(praxis::Listener {
                name: name.clone(),
                address: group.address(options.listen_ip),
                protocol: Some("tcp"),
                tcp_session_timeout_ms: passthrough::session_timeout(tcp_listeners),
                upstream: None,
                tls: None,
                filter_chains: vec![name.clone()],
            });
            tcp_listeners += 1;
            config
                .filter_chains
                .push(passthrough::chain(group, &name, &mut ports, &mut hops));
            config.insecure_options.allow_private_upstreams = true;
            continue;
        }
        if group.protocol == Protocol::Tcp {
            refused.extend(group_refusals(group, options.data_plane));
            // Praxis serves TCP listeners of one upstream and session
            // timeout as one, and refuses them different chains: only a
            // listener that splits by weight has one, and a session
            // timeout a millisecond shorter than any other's.
            let weights = tcp::weights(group, &name);
            let session_timeout = match weights {
                Some(_) => {
                    weighted_tcp_listeners += 1;
                    tcp::SESSION_TIMEOUT_MS - weighted_tcp_listeners
                }
                None => tcp::SESSION_TIMEOUT_MS,
            };
            config.listeners.push(praxis::Listener {
                name: name.clone(),
                address: group.address(options.listen_ip),
                protocol: Some("tcp"),
                tcp_session_timeout_ms: Some(session_timeout),
                upstream: Some(tcp::upstream(group)),
                tls: None,
                filter_chains: weights.iter().map(|c| c.name.clone()).collect(),
            });
            config.filter_chains.extend(weights);
            config.insecure_options.allow_private_upstreams = true;
            continue;
        }
        let (mut filters, security) =
            pipeline(group, &name, &mut tags, &mut refused, options.data_plane);
        let mut address = group.address(options.listen_ip);
        let mut tls = group.tls()?;
        // Past port 65535 (some fifty thousand hops and relays) the port is
        // Praxis's own rather than not served at all.
        if let Some(hop) = misdirected::applies(group, options.data_plane)
            .then(|| ports.take())
            .flatten()
        {
            let front_tls = if misdirected::ends_tls(group) {
                tls.take()
            } else {
                None
            };
            // After `request_id`, before anything reads the client's address.
            filters.insert(1, misdirected::entry(group, address, hop, front_tls));
            address = hop.to_string();
        }
        let chains = chunks(&name, filters);
        config.listeners.push(praxis::Listener {
            name: name.clone(),
            address,
            protocol: None,
            tcp_session_timeout_ms: None,
            upstream: None,
            tls,
            filter_chains: chains.iter().map(|c| c.name.clone()).collect(),
        });
        config
            .insecure_options
            .skip_pipeline_checks
            .conditional_security |= security;
        config.filter_chains.extend(chains);
    }
    config.listeners.append(&mut hops);
    if !refused.is_empty() {
        refused.sort();
        refused.dedup();
        return Err(ConfigError::UnsupportedRules(refused));
    }
    let count = branches(&config);
    if count > MAX_BRANCHES {
        return Err(ConfigError::TooManyBranches { count });
    }
    // YAML's JSON subset, on one line: Praxis's YAML parser reads it,
    // serde_json writes a 1000-route config several times faster than
    // yaml_serde, and compact it stays well within a ConfigMap (1 MiB) where
    // indented text would not (`jq` shows it indented).
    let mut out = format!(
        "# Praxis config generated by Pontoon for Gateway {}/{}\n",
        model.namespace, model.name
    )
    .into_bytes();
    // About 300 bytes per filter entry: one allocation instead of a dozen
    // copies of a growing buffer.
    out.reserve(
        config
            .filter_chains
            .iter()
            .map(|c| c.filters.len() * 300)
            .sum(),
    );
    serde_json::to_writer(&mut out, &config).map_err(|e| ConfigError::Json(e.to_string()))?;
    out.push(b'\n');
    if out.len() > MAX_CONFIG_BYTES {
        return Err(ConfigError::TooLarge { bytes: out.len() });
    }
    String::from_utf8(out).map_err(|e| ConfigError::Json(e.to_string()))
}

/// The rules of a port's routes that Praxis cannot express.
fn group_refusals(group: &PortGroup<'_>, plane: DataPlane) -> Vec<RuleRefusal> {
    group
        .listeners
        .iter()
        .flat_map(|l| &l.routes)
        .flat_map(|route| route.rules.iter().map(move |rule| (route, rule)))
        .filter_map(|(route, rule)| {
            check_rule(route.kind, rule, plane)
                .err()
                .map(|why| refusal(route, rule, &why))
        })
        .collect()
}

fn branches(config: &Config) -> usize {
    config
        .filter_chains
        .iter()
        .flat_map(|c| &c.filters)
        .map(|f| match f {
            Filter::Guardrails(g) => g.branch_chains.len(),
            Filter::Module(entry) => entry
                .source()
                .get("branch_chains")
                .and_then(serde_json::Value::as_array)
                .map_or(0, Vec::len),
            _ => 0,
        })
        .sum()
}

/// Praxis's limit of filters in one chain.
const MAX_FILTERS_PER_CHAIN: usize = 100;

/// A listener's pipeline as consecutive chains of at most
/// [`MAX_FILTERS_PER_CHAIN`] filters (Praxis concatenates a listener's
/// chains): `NAME`, `NAME-2`, `NAME-3`, ...
fn chunks<'a>(name: &str, filters: Vec<Filter<'a>>) -> Vec<FilterChain<'a>> {
    let mut chains: Vec<FilterChain> =
        Vec::with_capacity(filters.len() / MAX_FILTERS_PER_CHAIN + 1);
    for filter in filters {
        match chains.last_mut() {
            Some(chain) if chain.filters.len() < MAX_FILTERS_PER_CHAIN => {
                chain.filters.push(filter)
            }
            _ => {
                let name = match chains.len() {
                    0 => name.to_string(),
                    n => format!("{name}-{}", n + 1),
                };
                chains.push(FilterChain {
                    name,
                    filters: vec![filter],
                });
            }
        }
    }
    chains
}

/// One Praxis listener's filters, in order; `true` if a rule brought a
/// security filter (see [`praxis::SkipPipelineChecks`]).
fn pipeline<'a>(
    group: &PortGroup<'a>,
    name: &str,
    tags: &mut usize,
    refused: &mut Vec<RuleRefusal>,
    plane: DataPlane,
) -> (Vec<Filter<'a>>, bool) {
    let facts = ListenerFacts {
        protocol: group.protocol,
        port: group.port,
    };
    let mut candidates = Vec::new();
    let mut clusters = Vec::new();
    let mut rule_filters = Vec::new();
    let mut security = false;
    for (l, listener) in group.listeners.iter().enumerate() {
        let listener_host = HostPattern::parse(listener.hostname.as_deref());
        for (r, route) in listener.routes.iter().enumerate() {
            let hosts = route_hosts(route, &listener_host);
            for rule in &route.rules {
                let matches = match check_rule(route.kind, rule, plane) {
                    Ok(matches) => matches,
                    Err(why) => {
                        refused.push(refusal(route, rule, &why));
                        continue;
                    }
                };
                *tags += 1;
                let rule_tag = format!("r{tags}");
                let match_tag = |k: usize| format!("{rule_tag}-m{k}");
                let backends = clusters::resolve(&rule.backends);
                let settings = clusters::Settings::of(rule);
                for (k, m) in matches.iter().enumerate() {
                    let cluster = format!(
                        "{}_{}_{}_{}",
                        match_tag(k),
                        sanitize(&route.namespace),
                        sanitize(&route.name),
                        rule.index
                    );
                    clusters.push(clusters::cluster(
                        cluster.clone(),
                        &rule_tag,
                        match_tag(k),
                        &backends,
                        &settings,
                    ));
                    for (h, host) in hosts.iter().enumerate() {
                        candidates.push(Candidate {
                            path: m.path.clone(),
                            host: host.clone(),
                            listener_host: listener_host.clone(),
                            method: m.method.clone(),
                            exact_headers: m.exact_headers.clone(),
                            regex_headers: m.regex_headers.clone(),
                            exact_query: m.exact_query.clone(),
                            regex_query: m.regex_query.clone(),
                            cluster: cluster.clone(),
                            order: [l, r, rule.index, k, h],
                        });
                    }
                }
                security |= filters::has_security_filter(&rule.filters);
                rule_filters.extend(filters::rule_entries(
                    &rule.filters,
                    &matches,
                    &rule_tag,
                    match_tag,
                    facts,
                    no_backend_status(route.kind, &backends),
                    rule.timeouts.request_ms,
                ));
                rule_filters.extend(backend_headers::entry(
                    &rule.backends,
                    filters::gate(Some(rule_tag.clone()), None),
                ));
                rule_filters.extend(backend_tls_relays::entry(
                    &rule.backends,
                    filters::gate(Some(rule_tag.clone()), None),
                ));
            }
        }
    }
    if candidates.is_empty() {
        // Router and load balancer are always there; with nothing attached
        // every request gets Praxis's answer for "no route": 404.
        *tags += 1;
        let rule_tag = format!("r{tags}");
        let cluster = format!("{rule_tag}-m0_no-route");
        clusters.push(clusters::cluster(
            cluster.clone(),
            &rule_tag,
            format!("{rule_tag}-m0"),
            &clusters::Backends::Invalid,
            &clusters::Settings::default(),
        ));
        candidates.push(Candidate {
            path: route_entries::PathSpec::Prefix("/".into()),
            host: HostPattern::Any,
            listener_host: HostPattern::Any,
            method: None,
            exact_headers: Vec::new(),
            regex_headers: Vec::new(),
            exact_query: Vec::new(),
            regex_query: Vec::new(),
            cluster,
            order: [0; 5],
        });
        rule_filters.extend(filters::rule_entries(
            &[],
            &[],
            &rule_tag,
            |_| String::new(),
            facts,
            Some(404),
            None,
        ));
    }
    let routing = route_entries::routing(name, candidates);
    let mut chain = vec![Filter::RequestId(RequestId::new())];
    chain.extend(routing.classifiers);
    chain.push(Filter::Router(Router {
        filter: "router",
        multi_level_subdomain_matching: true,
        routes: routing.routes,
    }));
    chain.push(Filter::LoadBalancer(LoadBalancer {
        filter: "load_balancer",
        clusters,
    }));
    chain.extend(rule_filters);
    (chain, security)
}

/// What Praxis answers itself for a rule with nowhere to send requests: the
/// spec's 500 (invalid backends) or 503 (none ready), and for gRPC, whose
/// spec wants UNAVAILABLE for both, 503 (gRPC clients read it so).
fn no_backend_status(kind: RouteKind, backends: &clusters::Backends) -> Option<u16> {
    backends
        .status()
        .map(|status| if kind == RouteKind::Grpc { 503 } else { status })
}

/// The host patterns a route serves on its listener: its (already
/// intersected) hostnames, else the listener's hostname, else any host.
fn route_hosts(route: &Route, listener_host: &HostPattern) -> Vec<HostPattern> {
    if route.hostnames.is_empty() {
        return vec![listener_host.clone()];
    }
    let mut hosts: Vec<HostPattern> = route
        .hostnames
        .iter()
        .map(|h| HostPattern::parse(Some(h)))
        .collect();
    hosts.dedup();
    hosts
}

/// A name part Praxis accepts in cluster names (`[A-Za-z0-9_-]`).
fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}
