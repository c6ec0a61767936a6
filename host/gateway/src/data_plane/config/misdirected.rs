//! Misdirected requests on a shared HTTPS port, on Pontoon's data plane
//! (GatewayHTTPSListenerDetectMisdirectedRequests): a request whose host
//! belongs to another of the port's listeners than the TLS server name its
//! connection asked for is answered 421.
//!
//! Praxis picks a shared port's certificate by server name but tells no
//! filter which name that was. So the port's Praxis listener moves to the
//! pod's loopback, and `pontoon_misdirected`, first in its chain after the
//! request id, holds the public address: a front that reads each
//! ClientHello's server name and hands the stream on, unopened, from a
//! loopback address of the connection's own, by which the filter finds
//! the name (and the client's real address, which it puts back for the
//! filters after it). A port with one listener has no other listener to be
//! misdirected to, and is served as before; so is every port on stock
//! Praxis, which has no such filter and does not claim the feature.
//!
//! A port whose client-certificate validation is `AllowInsecureFallback`
//! (GatewayFrontendClientCertificateValidationInsecureFallback) goes behind
//! the front too, whatever its listeners, and there the front ends the TLS
//! itself: Praxis refuses, in the handshake, a certificate that does not
//! chain to the CA, where the fallback lets it in. The port's Praxis
//! listener then serves plain HTTP on loopback.

use std::net::SocketAddr;

use super::{
    praxis::{Filter, MisdirectedEntry, Tls},
    praxis_listeners::{PortGroup, host_of},
};
use crate::data_plane::{model::Protocol, program::DataPlane};

pub const NAME: &str = "pontoon_misdirected";

/// Whether `group`'s connections go through the front on `plane`.
pub fn applies(group: &PortGroup<'_>, plane: DataPlane) -> bool {
    group.protocol == Protocol::Https
        && (group.listeners.len() > 1 || ends_tls(group))
        && plane.has_filter(NAME)
}

/// Whether the front, not Praxis, ends `group`'s TLS: its client
/// certificates are asked for but let in when they do not validate.
pub fn ends_tls(group: &PortGroup<'_>) -> bool {
    group
        .listeners
        .iter()
        .find_map(|l| l.client_validation.as_ref())
        .is_some_and(|v| !v.required)
}

/// The entry for `group`, whose public address is `listen` and whose Praxis
/// listener binds `hop`; with `tls` when the front ends the TLS.
pub fn entry(
    group: &PortGroup<'_>,
    listen: String,
    hop: SocketAddr,
    tls: Option<Tls>,
) -> Filter<'static> {
    Filter::Misdirected(MisdirectedEntry {
        filter: NAME,
        listen,
        hop: hop.to_string(),
        listener_hostnames: group.listeners.iter().filter_map(|l| host_of(l)).collect(),
        tls,
    })
}
