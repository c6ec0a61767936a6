//! TLS listeners in Passthrough mode: one Praxis TCP listener per port,
//! whose `sni_router` sends each TLS stream, unopened, to the backend of the
//! TLSRoute whose hostname the ClientHello names. The backend presents its
//! own certificate; Praxis never holds a key.
//!
//! Praxis's `sni_router` sends a server name to one address, not to a
//! cluster: the address is the backend Service's cluster IP and port, and
//! kube-proxy spreads the connections over its pods. A name no route claims,
//! a ClientHello without one, and a route whose backend did not resolve get
//! their connection closed (the spec: rejected), never another route's
//! backend.
//!
//! TLS listeners in Terminate mode share that router (and so a port with
//! passthrough listeners: mixed): a server name of a terminating listener's
//! route is sent, unopened, to a TCP listener of Praxis's own on the pod's
//! loopback (`loopback.rs`), one per such route, which terminates TLS with
//! the Gateway listener's certificate and sends the plain stream to the
//! route's backend. Praxis's TCP listeners do terminate TLS, but route by
//! server name only before they do; the hop joins the two.

use super::{
    clusters::PLACEHOLDER_ENDPOINT,
    host_precedence::HostPattern,
    praxis::{Certificate, FilterChain, Listener, SniRoute, SniRouter, Tls},
    praxis_listeners::PortGroup,
};
use crate::data_plane::{
    loopback::LoopbackPorts,
    model::{self, Backend, Protocol, Route, Rule},
};

/// The idle timeout of the `n`-th TCP listener: Praxis's default (5 min),
/// a millisecond more for each further one. Praxis serves TCP listeners of
/// the same (upstream, cluster, idle timeout, maximum duration) with one
/// pipeline and refuses them different filter chains; passthrough
/// listeners have neither upstream nor cluster (their `sni_router` routes),
/// so only this tells them apart.
pub fn session_timeout(n: u64) -> Option<u64> {
    const PRAXIS_DEFAULT_MS: u64 = 300_000;
    (n > 0).then(|| PRAXIS_DEFAULT_MS + n)
}

/// Whether a TLSRoute rule can be passed through: Praxis sends a server
/// name to one address.
pub fn check_rule(rule: &Rule) -> Result<(), String> {
    let weighted = rule.backends.iter().filter(|b| b.weight > 0).count();
    if weighted > 1 {
        return Err(format!(
            "{weighted} backendRefs with weight: Praxis's sni_router sends a server name to one \
             address, so a TLSRoute rule takes one backend (give the others weight 0, or put \
             them behind one Service)"
        ));
    }
    Ok(())
}

/// The `sni_router` of one TLS port, and the loopback listeners that
/// terminate its terminating listeners' routes (into `hops`).
pub fn chain(
    group: &PortGroup<'_>,
    name: &str,
    ports: &mut LoopbackPorts,
    hops: &mut Vec<Listener>,
) -> FilterChain<'static> {
    let mut router = SniRouter {
        filter: "sni_router",
        routes: Vec::new(),
        default_upstream: None,
    };
    let mut claimed: Vec<String> = Vec::new();
    for listener in &group.listeners {
        let listener_host = HostPattern::parse(listener.hostname.as_deref());
        for route in &listener.routes {
            let mut upstream = upstream(route);
            if listener.protocol == Protocol::TlsTerminate {
                upstream = terminated(listener, upstream, name, ports, hops);
            }
            for host in hosts(route, &listener_host) {
                match host {
                    None if router.default_upstream.is_none() => {
                        router.default_upstream = Some(upstream.clone());
                    }
                    None => {}
                    Some(host) if !claimed.contains(&host) => {
                        claimed.push(host.clone());
                        router.routes.push(SniRoute {
                            server_names: vec![host],
                            upstream: upstream.clone(),
                        });
                    }
                    Some(_) => {}
                }
            }
        }
    }
    // Praxis wants a route or a default; with none, every connection is
    // sent where nothing listens, which closes it.
    if router.routes.is_empty() && router.default_upstream.is_none() {
        router.default_upstream = Some(PLACEHOLDER_ENDPOINT.into());
    }
    FilterChain {
        name: name.to_string(),
        filters: vec![super::praxis::Filter::SniRouter(router)],
    }
}

/// Where the router sends a terminating listener's route: a new loopback
/// listener that terminates TLS and sends the stream on to `backend`; with
/// no backend, no certificate or no port left, nowhere (closed).
fn terminated(
    listener: &model::Listener,
    backend: String,
    name: &str,
    ports: &mut LoopbackPorts,
    hops: &mut Vec<Listener>,
) -> String {
    let Some(files) = listener.certificates.first() else {
        return PLACEHOLDER_ENDPOINT.into();
    };
    if backend == PLACEHOLDER_ENDPOINT {
        return backend;
    }
    let Some(address) = ports.take() else {
        return PLACEHOLDER_ENDPOINT.into();
    };
    hops.push(Listener {
        name: format!("{name}-terminate-{}", address.port()),
        address: address.to_string(),
        protocol: Some("tcp"),
        tcp_session_timeout_ms: None,
        upstream: Some(backend),
        tls: Some(Tls {
            certificates: vec![Certificate {
                cert_path: files.cert_path.clone(),
                key_path: files.key_path.clone(),
                default: false,
                server_names: Vec::new(),
            }],
            client_ca: None,
            client_cert_mode: None,
        }),
        filter_chains: Vec::new(),
    });
    address.to_string()
}

/// The server names a route takes on its listener (lower case), `None` for
/// "any" (a route without hostnames on a listener without one).
fn hosts(route: &Route, listener_host: &HostPattern) -> Vec<Option<String>> {
    if route.hostnames.is_empty() {
        return vec![listener_host.router_host()];
    }
    route
        .hostnames
        .iter()
        .map(|h| HostPattern::parse(Some(h)).router_host())
        .collect()
}

/// Where a route's streams go: its backend Service's cluster address (else
/// one of its endpoints), or, when it has none, nowhere. (A TCP listener's
/// too: `tcp::upstream`.)
pub(super) fn upstream(route: &Route) -> String {
    route
        .rules
        .iter()
        .flat_map(|r| &r.backends)
        .filter(|b| b.weight > 0)
        .find_map(address)
        .map_or_else(|| PLACEHOLDER_ENDPOINT.to_string(), |a| a.to_string())
}

pub(super) fn address(backend: &Backend) -> Option<std::net::SocketAddr> {
    backend
        .service_address
        .or_else(|| backend.endpoints.first().copied())
}
