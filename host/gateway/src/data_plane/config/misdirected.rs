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

use std::net::SocketAddr;

use super::{
    praxis::{Filter, MisdirectedEntry},
    praxis_listeners::PortGroup,
};
use crate::data_plane::{model::Protocol, program::DataPlane};

pub const NAME: &str = "pontoon_misdirected";

/// Whether `group`'s requests are checked for misdirection on `plane`.
pub fn applies(group: &PortGroup<'_>, plane: DataPlane) -> bool {
    group.protocol == Protocol::Https && group.listeners.len() > 1 && plane.has_filter(NAME)
}

/// The entry for `group`, whose public address is `listen` and whose Praxis
/// listener binds `hop`.
pub fn entry(group: &PortGroup<'_>, listen: String, hop: SocketAddr) -> Filter<'static> {
    Filter::Misdirected(MisdirectedEntry {
        filter: NAME,
        listen,
        hop: hop.to_string(),
        listener_hostnames: group
            .listeners
            .iter()
            .filter_map(|l| l.hostname.as_deref())
            .filter(|h| !h.is_empty())
            .map(str::to_ascii_lowercase)
            .collect(),
    })
}
