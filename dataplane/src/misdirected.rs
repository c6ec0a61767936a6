//! `pontoon_misdirected`: a 421 (Misdirected Request) for a request on a
//! shared HTTPS port whose `Host` belongs to another Gateway listener than
//! the server name its TLS connection asked for
//! (GatewayHTTPSListenerDetectMisdirectedRequests): a client that reuses
//! one listener's connection for another listener's host (HTTP/2
//! connection coalescing does, when one certificate covers both) would
//! otherwise reach that listener's routes without its certificate, or its
//! client-certificate rules, ever being met.
//!
//! Praxis serves a port's listeners with one HTTPS listener that picks the
//! certificate by server name, and tells no filter which name that was. So
//! the port's public address is held by a front in this process
//! (`front.rs`) that reads each ClientHello's server name, records it with
//! the client's address (`origins.rs`), and hands the stream on, unopened,
//! to Praxis's listener on loopback from a loopback address of the
//! connection's own. This filter, first in the port's chain, finds the
//! origin by that address, puts the client's real address back where later
//! filters read it, and compares the two listeners. The listener of a name
//! is the one whose hostname matches it most specifically (an exact name,
//! then the longest wildcard), else the one without a hostname.
//!
//! ```yaml
//! filter: pontoon_misdirected
//! listen: 0.0.0.0:443              # the port's public address: the front
//! hop: 127.0.0.1:15101             # Praxis's HTTPS listener for the port
//! listener_hostnames: [second-example.org, "*.wildcard.org"]
//! ```
//!
//! Building the entry starts the front, once per address (`-t` does not);
//! a reload that moves the hop takes effect for the next connection. With
//! `tls` (the port's listeners let in certificates that do not validate,
//! which Praxis cannot), the front ends the TLS itself (`terminate.rs`) and
//! the port's Praxis listener on loopback speaks plain HTTP (and h2c).

mod front;
pub mod origins;
mod terminate;

use std::net::SocketAddr;

use async_trait::async_trait;
use praxis_filter::{
    FilterAction, FilterError, HttpFilter, HttpFilterContext, Rejection, parse_filter_config,
};
use serde::Deserialize;

use crate::request_host::request_host;

pub const NAME: &str = "pontoon_misdirected";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    listen: SocketAddr,
    hop: SocketAddr,
    listener_hostnames: Vec<String>,
    /// The port's TLS, when the front ends it (`terminate.rs`): the Praxis
    /// listener's own `tls`, which the listener then goes without.
    #[serde(default)]
    tls: Option<terminate::TlsConfig>,
}

/// A Gateway listener's hostname.
#[derive(Debug, PartialEq, Eq)]
enum Pattern {
    Exact(String),
    /// `*.suffix`: one or more labels before `suffix`.
    Wildcard(String),
}

impl Pattern {
    fn parse(hostname: &str) -> Result<Self, String> {
        let hostname = hostname.to_ascii_lowercase();
        let pattern = match hostname.strip_prefix("*.") {
            Some(suffix) => Self::Wildcard(suffix.to_string()),
            None => Self::Exact(hostname.clone()),
        };
        let name = match &pattern {
            Self::Exact(name) | Self::Wildcard(name) => name,
        };
        if name.is_empty() || name.contains('*') {
            return Err(format!("listener hostname {hostname:?} is not a hostname"));
        }
        Ok(pattern)
    }
}

pub struct Misdirected {
    listeners: Vec<Pattern>,
}

impl Misdirected {
    pub fn from_config(config: &serde_yaml::Value) -> Result<Box<dyn HttpFilter>, FilterError> {
        let config: Config = parse_filter_config(NAME, config)?;
        if !config.hop.ip().is_loopback() {
            return Err(format!(
                "{NAME}: hop {} is not a loopback address: the front hands it the port's \
                 connections",
                config.hop
            )
            .into());
        }
        if config.listen == config.hop {
            return Err(format!("{NAME}: listen and hop are both {}", config.hop).into());
        }
        let listeners = config
            .listener_hostnames
            .iter()
            .map(|h| Pattern::parse(h))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("{NAME}: {e}"))?;
        // Built even when only checking, so `-t` reads the certificates.
        let tls = config
            .tls
            .as_ref()
            .map(terminate::server_config)
            .transpose()
            .map_err(|e| format!("{NAME}: tls: {e}"))?;
        if crate::serving::is_serving() {
            front::start(config.listen, config.hop, tls)
                .map_err(|e| format!("{NAME}: front {}: {e}", config.listen))?;
        }
        Ok(Box::new(Self { listeners }))
    }

    /// The listener that serves `name`: the index of its most specific
    /// hostname, `None` for the listener without one.
    fn listener_of(&self, name: &str) -> Option<usize> {
        most_specific(&self.listeners, name)
    }

    /// Whether a request for `host` on a connection that asked for
    /// `server_name` goes to another listener than the connection's.
    fn misdirected(&self, server_name: &str, host: &str) -> bool {
        self.listener_of(server_name) != self.listener_of(host)
    }
}

/// Which of `patterns` matches `name` most specifically: an exact name,
/// else the longest wildcard; `None` if none does.
fn most_specific<'a, P>(patterns: P, name: &str) -> Option<usize>
where
    P: IntoIterator<Item = &'a Pattern>,
    P::IntoIter: Clone,
{
    let patterns = patterns.into_iter();
    let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
    let exact = patterns
        .clone()
        .position(|p| matches!(p, Pattern::Exact(exact) if *exact == name));
    exact.or_else(|| {
        patterns
            .enumerate()
            .filter_map(|(i, p)| match p {
                Pattern::Wildcard(suffix)
                    if name.len() > suffix.len() + 1
                        && name.ends_with(suffix.as_str())
                        && name.as_bytes()[name.len() - suffix.len() - 1] == b'.' =>
                {
                    Some((suffix.len(), i))
                }
                _ => None,
            })
            .max()
            .map(|(_, i)| i)
    })
}

/// Puts the client's address, which the front recorded, where the request
/// phase's later filters read it (the response phase, and Praxis's own
/// records, still see the loopback address: the front logs the pair at
/// debug level); and answers 421 to a request for another listener's host.
#[async_trait]
impl HttpFilter for Misdirected {
    fn name(&self) -> &'static str {
        NAME
    }

    async fn on_request(
        &self,
        ctx: &mut HttpFilterContext<'_>,
    ) -> Result<FilterAction, FilterError> {
        let Some(origin) = ctx.client_addr.and_then(origins::lookup) else {
            return Ok(FilterAction::Continue);
        };
        ctx.client_addr = Some(origin.client);
        // The front ended the TLS: the request came in TLS all the same.
        ctx.downstream_tls |= origin.tls_ended;
        // An IPv6 literal (in brackets) is no listener's hostname.
        let wrong = match (origin.server_name.as_deref(), request_host(ctx)) {
            (Some(server_name), Some(host)) => self.misdirected(server_name, host),
            _ => false,
        };
        if wrong {
            return Ok(FilterAction::Reject(Rejection::status(421).with_body(
                "misdirected request: this connection's TLS \
                 server name is served by another listener than the request's host\n",
            )));
        }
        Ok(FilterAction::Continue)
    }
}

#[cfg(test)]
mod tests;
