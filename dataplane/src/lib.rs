//! Pontoon's data plane: Praxis 0.7.5 (its crates from crates.io,
//! unmodified) with filters registered through Praxis's own extension API,
//! for what the Gateway API asks and Praxis's default build lacks.
//!
//! | filter | Gateway API |
//! |---|---|
//! | `pontoon_query_params` | HTTPRoute `matches.queryParams` |
//! | `pontoon_redirect` | RequestRedirect with status 303 or `ReplacePrefixMatch` |
//! | `pontoon_cors` | HTTPRoute's CORS filter, as the Gateway API defines it |
//! | `pontoon_mirror` | RequestMirror: copies to another backend, fire-and-forget |
//! | `pontoon_backend_headers` | `backendRefs[].filters`: header changes of the backend the load balancer picked |
//! | `pontoon_tcp_weights` (TCP) | TCPRoute rules with several weighted backends, dialled at once |
//! | `pontoon_backend_tls` | BackendTLSPolicy `subjectAltNames`: TLS to the backend through a relay that checks them |
//! | `pontoon_misdirected` | 421 for a request whose host is another HTTPS listener's than its connection's server name |
//!
//! The operator writes these only when its Gateways run this binary
//! (`--data-plane-image`); with stock Praxis (`--praxis-image`) it refuses
//! what needs them.

use std::sync::Arc;

use praxis_core::config::Config;
use praxis_filter::FilterRegistry;

pub mod backend_headers;
pub mod backend_tls;
pub mod cors;
pub mod mirror;
pub mod misdirected;
pub mod query_params;
pub mod redirect;
mod request_host;
pub mod serving;
pub mod tcp_weights;
#[cfg(test)]
mod test_context;

/// The names of the filters this crate adds: every one starts with
/// `pontoon_`, which is how the operator knows an entry needs this binary.
pub const FILTERS: [&str; 8] = [
    query_params::NAME,
    redirect::NAME,
    cors::NAME,
    mirror::NAME,
    backend_headers::NAME,
    backend_tls::NAME,
    misdirected::NAME,
    tcp_weights::NAME,
];

praxis_filter::register_filters! {
    http query_params::NAME => query_params::QueryParams::from_config,
    http redirect::NAME => redirect::Redirect::from_config,
    http cors::NAME => cors::Cors::from_config,
    http mirror::NAME => mirror::Mirror::from_config,
    http backend_headers::NAME => backend_headers::BackendHeaders::from_config,
    http backend_tls::NAME => backend_tls::BackendTls::from_config,
    http misdirected::NAME => misdirected::Misdirected::from_config,
    tcp tcp_weights::NAME => tcp_weights::TcpWeights::from_config,
}

/// Praxis's built-in filters and Pontoon's.
pub fn registry() -> FilterRegistry {
    custom_registry()
}

/// What `praxis -t` checks, with this registry: the config parses, every
/// filter builds from its entry, chains resolve and are in a valid order,
/// and TCP listeners that share a group agree. Certificates and sockets are
/// only met at start.
pub fn validate(config: &Config) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let registry = registry();
    let health = praxis_core::health::build_health_registry(&config.clusters);
    let kv_stores = praxis_core::kv::KvStoreRegistry::new();
    let subrequests = praxis::build_subrequest_client(config)?;
    let sessions = Arc::new(praxis_filter::SessionStoreRegistry::new());
    praxis::resolve_pipelines(
        config,
        &registry,
        &health,
        &kv_stores,
        &sessions,
        &subrequests,
    )?;
    praxis_protocol::tcp::validate_tcp_groups(config)?;
    Ok(())
}
