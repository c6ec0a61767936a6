//! The relays of a rule's backends whose BackendTLSPolicy names
//! `subjectAltNames`, as Pontoon's data plane's `pontoon_backend_tls`:
//! Praxis's own upstream TLS checks a certificate against the SNI only, so
//! the cluster sends such a backend's requests in plain HTTP to a relay on
//! loopback, which opens the TLS connection and checks the names. The entry
//! is gated on its rule and does nothing per request: building it starts
//! the relays.

use super::{
    conditions::Condition,
    praxis::{BackendTlsEntry, Filter, KeyPair, RelayEntry},
};
use crate::data_plane::{model::Backend, program::DataPlane};

pub const NAME: &str = "pontoon_backend_tls";

/// `Err` when the rule's backends need relays `plane` does not have.
pub fn check(backends: &[Backend], plane: DataPlane) -> Result<(), String> {
    if !backends
        .iter()
        .any(|b| b.tls.as_ref().is_some_and(|t| t.relayed()))
    {
        return Ok(());
    }
    plane
        .lacks("a BackendTLSPolicy with subjectAltNames")
        .map_or(Ok(()), Err)
}

/// The rule's entry, gated by `gate`; `None` when no backend is relayed.
pub fn entry(backends: &[Backend], gate: Condition) -> Option<Filter<'_>> {
    let relays: Vec<RelayEntry<'_>> = backends
        .iter()
        .filter_map(|b| b.tls.as_ref())
        .flat_map(|tls| {
            tls.relays.iter().map(move |relay| RelayEntry {
                listen: relay.listen.to_string(),
                upstream: relay.upstream.to_string(),
                server_name: &tls.sni,
                ca_path: tls.ca_path.as_deref(),
                subject_alt_names: &tls.subject_alt_names,
                client_cert: tls.client_certificate.as_ref().map(KeyPair::from),
            })
        })
        .collect();
    (!relays.is_empty()).then(|| {
        Filter::BackendTls(BackendTlsEntry {
            filter: NAME,
            conditions: vec![gate],
            relays,
        })
    })
}
