//! `pontoon_backend_tls`: TLS to a backend whose certificate is checked
//! against a BackendTLSPolicy's `subjectAltNames` rather than the server
//! name sent (BackendTLSPolicySANValidation).
//!
//! Praxis's upstream TLS (Pingora's connector) verifies a certificate
//! against the SNI only, and no filter reaches into it. So a rule whose
//! backend asks for other names is sent, in plain HTTP over loopback, to a
//! relay in this process; the relay opens the TLS connection itself (SNI:
//! the policy's hostname), verifies the chain against the policy's CA and
//! the names against its `subjectAltNames`, and copies the bytes both ways.
//! A certificate that does not match closes the connection before a byte
//! of the request leaves, so Praxis answers 502.
//!
//! The relays are named by the config (an entry per rule, gated on it; the
//! filter itself does nothing per request): building the entry starts the
//! relays it names, once per process, and a reload with new settings for a
//! relay's address takes effect for its next connection. The operator
//! rolls a Gateway's pods when its config changes, so a relay no config
//! names any more lives only until then.
//!
//! ```yaml
//! filter: pontoon_backend_tls
//! relays:
//!   - listen: 127.0.0.1:15100          # the cluster's endpoint
//!     upstream: 10.96.0.12:443         # the Service's address
//!     server_name: abc.example.com     # sent as SNI
//!     ca_path: /etc/praxis-tls/backend-ca.ns.policy.pem  # none: the system's roots
//!     subject_alt_names: [{hostname: abc.example.com}, {uri: "spiffe://abc.example.com/id"}]
//!     client_cert: {cert_path: ..., key_path: ...}       # optional
//! ```

mod relay;
mod verify;

use std::net::SocketAddr;

use async_trait::async_trait;
use praxis_filter::{
    FilterAction, FilterError, HttpFilter, HttpFilterContext, parse_filter_config,
};
use serde::Deserialize;

pub use verify::SubjectAltName;

pub const NAME: &str = "pontoon_backend_tls";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    relays: Vec<RelayConfig>,
}

#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RelayConfig {
    /// Loopback address the relay listens on (the rule's cluster endpoint).
    pub listen: SocketAddr,
    /// Where it connects: the backend Service's address.
    pub upstream: SocketAddr,
    /// Sent as SNI.
    pub server_name: String,
    /// PEM CA certificates trusted; none: the system's roots.
    #[serde(default)]
    pub ca_path: Option<String>,
    /// The names the backend's certificate must have one of.
    pub subject_alt_names: Vec<SubjectAltName>,
    /// The certificate presented when the backend asks for one.
    #[serde(default)]
    pub client_cert: Option<KeyPair>,
}

#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct KeyPair {
    pub cert_path: String,
    pub key_path: String,
}

/// The entry: it has built (and, when serving, started) its relays.
pub struct BackendTls;

impl BackendTls {
    pub fn from_config(config: &serde_yaml::Value) -> Result<Box<dyn HttpFilter>, FilterError> {
        let config: Config = parse_filter_config(NAME, config)?;
        let serving = crate::serving::is_serving();
        for relay in config.relays {
            if !relay.listen.ip().is_loopback() {
                return Err(format!(
                    "{NAME}: relay address {} is not a loopback address: the relay carries \
                     requests in plain HTTP",
                    relay.listen
                )
                .into());
            }
            let target = relay::Target::build(&relay)
                .map_err(|e| format!("{NAME}: relay {}: {e}", relay.listen))?;
            if serving {
                relay::start(relay.listen, target)
                    .map_err(|e| format!("{NAME}: relay {}: {e}", relay.listen))?;
            }
        }
        Ok(Box::new(Self))
    }
}

#[async_trait]
impl HttpFilter for BackendTls {
    fn name(&self) -> &'static str {
        NAME
    }

    async fn on_request(
        &self,
        _ctx: &mut HttpFilterContext<'_>,
    ) -> Result<FilterAction, FilterError> {
        Ok(FilterAction::Continue)
    }
}

#[cfg(test)]
mod tests;
