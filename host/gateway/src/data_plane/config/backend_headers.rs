//! A rule's per-backend filters (`backendRefs[].filters`) as Pontoon's data
//! plane's `pontoon_backend_headers`: Praxis sends a rule to one cluster of
//! every backend's endpoints and its load balancer picks one; the entry,
//! gated on the rule and run after the load balancer, applies the header
//! changes of the backend whose endpoint was picked. That needs each
//! endpoint to belong to one backend, which [`check`] holds.

use std::collections::BTreeMap;

use super::{
    conditions::Condition,
    praxis::{BackendHeadersEntry, Filter, OneBackend},
};
use crate::data_plane::{model::Backend, program::DataPlane};

pub const NAME: &str = "pontoon_backend_headers";

/// `Err` says why the rule's backend filters cannot be served here.
pub fn check(backends: &[Backend], plane: DataPlane) -> Result<(), String> {
    if backends.iter().all(|b| b.headers.is_none()) {
        return Ok(());
    }
    if let Some(why) = plane.lacks("filters on a backend (backendRefs[].filters)") {
        return Err(why);
    }
    let mut owner: BTreeMap<std::net::SocketAddr, &str> = BTreeMap::new();
    for backend in backends {
        for endpoint in &backend.endpoints {
            if let Some(other) = owner.insert(*endpoint, &backend.cluster)
                && other != backend.cluster
            {
                return Err(format!(
                    "backends {other} and {} share the endpoint {endpoint}: filters on a backend \
                     tell backends apart by the address the request is sent to",
                    backend.cluster
                ));
            }
        }
    }
    Ok(())
}

/// The rule's entry, gated by `gate`; `None` when no backend has filters.
pub fn entry(backends: &[Backend], gate: Condition) -> Option<Filter<'_>> {
    let with: Vec<OneBackend<'_>> = backends
        .iter()
        .filter_map(|b| {
            let headers = b.headers.as_ref()?;
            Some(OneBackend {
                endpoints: b.endpoints.iter().map(ToString::to_string).collect(),
                request: &headers.request,
                response: &headers.response,
            })
        })
        .collect();
    (!with.is_empty()).then(|| {
        Filter::BackendHeaders(BackendHeadersEntry {
            filter: NAME,
            conditions: vec![gate],
            backends: with,
        })
    })
}
