//! TCP listeners: one Praxis TCP listener per port, whose connections go to
//! the backend of the listener's oldest TCPRoute (the spec serves only that
//! one when several attach; the others stay Accepted and counted).
//!
//! The listener names a static `upstream`, the backend Service's cluster
//! address (else one of its endpoints), and kube-proxy spreads connections
//! over its pods. A static upstream is also what lets protocols in which
//! the server speaks first (SMTP, MySQL, SSH, the conformance suite's echo
//! server) work: without one, Praxis 0.7.5 reads the client's first bytes
//! (looking for a TLS server name) before it dials, and closes a client that
//! stays silent for 5 s. Its only weighted balancing for TCP
//! (`tcp_load_balancer` over a listener's `cluster`) works that way. So a
//! rule splitting connections over several weighted backends keeps a static
//! upstream (its first backend's) and gets Pontoon's data plane's
//! `pontoon_tcp_weights`, a connect filter that draws the backend by weight
//! before Praxis dials; stock Praxis refuses such a rule rather than serve
//! it to stall.
//!
//! A route whose backend did not resolve, or no route at all, gets an
//! upstream where nothing listens: the connection is refused (the spec:
//! rejected), never sent elsewhere.

use super::{
    clusters::PLACEHOLDER_ENDPOINT,
    passthrough,
    praxis::{Filter, FilterChain, TcpWeight, TcpWeights},
    praxis_listeners::PortGroup,
};
use crate::data_plane::{model::Rule, program::DataPlane};

pub const WEIGHTS: &str = "pontoon_tcp_weights";

/// How long Praxis lets a TCP session last: its most (1 h). Praxis cuts a
/// session at this age whatever its traffic (it is not an idle timeout), and
/// its default, 5 min, would end every longer-lived connection (a database
/// session, a stream) early.
pub const SESSION_TIMEOUT_MS: u64 = 3_600_000;

/// Whether a TCPRoute rule can be served: to one backend, or to several by
/// weight on Pontoon's data plane.
pub fn check_rule(rule: &Rule, plane: DataPlane) -> Result<(), String> {
    let weighted = rule.backends.iter().filter(|b| b.weight > 0).count();
    if weighted > 1
        && let Some(why) = plane.lacks("a TCPRoute rule with several weighted backends")
    {
        return Err(format!(
            "{why}: stock Praxis balances TCP by weight only after the client has sent its \
             first bytes, which stalls protocols in which the server speaks first (give the \
             others weight 0, or put them behind one Service)"
        ));
    }
    Ok(())
}

/// The chain of a TCP port whose route splits its connections by weight
/// (named `name`), or `None` when it sends them all to one backend.
pub fn weights(group: &PortGroup<'_>, name: &str) -> Option<FilterChain<'static>> {
    let rule = group.listeners.first()?.routes.first()?.rules.first()?;
    let backends: Vec<TcpWeight> = rule
        .backends
        .iter()
        .filter(|b| b.weight > 0)
        .map(|b| TcpWeight {
            address: passthrough::address(b)
                .map_or_else(|| PLACEHOLDER_ENDPOINT.to_string(), |a| a.to_string()),
            weight: b.weight,
        })
        .collect();
    (backends.len() > 1).then(|| FilterChain {
        name: name.to_string(),
        filters: vec![Filter::TcpWeights(TcpWeights {
            filter: WEIGHTS,
            backends,
        })],
    })
}

/// Where a TCP port's connections go: as a passed-through TLS stream's,
/// to its route's backend, or nowhere.
pub fn upstream(group: &PortGroup<'_>) -> String {
    group
        .listeners
        .first()
        .and_then(|listener| listener.routes.first())
        .map_or_else(|| PLACEHOLDER_ENDPOINT.to_string(), passthrough::upstream)
}
