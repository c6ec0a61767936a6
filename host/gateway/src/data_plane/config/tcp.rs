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
//! (`tcp_load_balancer` over a listener's `cluster`) works that way, so a
//! rule splitting connections over several weighted backends is refused
//! rather than served to stall.
//!
//! A route whose backend did not resolve, or no route at all, gets an
//! upstream where nothing listens: the connection is refused (the spec:
//! rejected), never sent elsewhere.

use super::{clusters::PLACEHOLDER_ENDPOINT, passthrough, praxis_listeners::PortGroup};
use crate::data_plane::model::Rule;

/// How long Praxis lets a TCP session last: its most (1 h). Praxis cuts a
/// session at this age whatever its traffic (it is not an idle timeout), and
/// its default, 5 min, would end every longer-lived connection (a database
/// session, a stream) early.
pub const SESSION_TIMEOUT_MS: u64 = 3_600_000;

/// Whether a TCPRoute rule can be served: to one backend.
pub fn check_rule(rule: &Rule) -> Result<(), String> {
    let weighted = rule.backends.iter().filter(|b| b.weight > 0).count();
    if weighted > 1 {
        return Err(format!(
            "{weighted} backendRefs with weight: Praxis balances TCP by weight only after the \
             client has sent its first bytes, which stalls protocols in which the server speaks \
             first, so a TCPRoute rule takes one backend (give the others weight 0, or put them \
             behind one Service)"
        ));
    }
    Ok(())
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
