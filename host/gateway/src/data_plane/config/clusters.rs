//! A rule's backends as one Praxis cluster. Praxis's router sends a route to
//! exactly one cluster, so a rule's weighted backends are merged into one
//! cluster whose endpoints carry the weights: each backend's share (its
//! `weight` over the rule's total) split evenly over its ready endpoints,
//! as integers in Praxis's 1..=1000. Round robin (Praxis's default, and
//! weighted) picks among them.
//!
//! Every (rule, match) gets its own cluster, tagged with the rule and match
//! (`http.application_protocol` / `application_provider`): the load balancer
//! publishes the selected cluster's tags, and the rule's filters are gated
//! on them (`filters.rs`), so a filter applies to its own rule only.

use std::{collections::BTreeMap, net::SocketAddr};

use super::{
    error::MAX_TIMEOUT_MS,
    praxis::{CaFile, Cluster, ClusterHttp, ClusterTls, Endpoint, KeyPair, RetryPolicy},
    retries,
};
use crate::data_plane::model::{Backend, BackendProtocol, BackendTls, Rule};

/// Praxis's ceiling for one endpoint's weight.
const MAX_WEIGHT: u64 = 1000;

/// Where a rule without usable endpoints is "sent": the load balancer needs
/// an endpoint to select (and so publish the rule's tags), but the rule's
/// `static_response` answers before any connection is made. Loopback fails
/// fast should that ever change.
pub const PLACEHOLDER_ENDPOINT: &str = "127.0.0.1:9";

/// What a rule's backends amount to.
#[derive(Debug, PartialEq, Eq)]
pub enum Backends {
    /// Weighted endpoints, in address order.
    Endpoints(Vec<(SocketAddr, u32)>),
    /// No backend, or all weights zero: the spec's 500.
    Invalid,
    /// Backends with weight but not one ready endpoint: 503.
    Unavailable,
}

impl Backends {
    /// The status Praxis answers itself, if the rule has nowhere to go.
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::Endpoints(_) => None,
            Self::Invalid => Some(500),
            Self::Unavailable => Some(503),
        }
    }
}

pub fn resolve(backends: &[Backend]) -> Backends {
    let weighted: Vec<(&Backend, Vec<SocketAddr>)> = backends
        .iter()
        .filter(|b| b.weight > 0)
        .map(|b| {
            let mut endpoints = b.endpoints.clone();
            endpoints.sort();
            endpoints.dedup();
            (b, endpoints)
        })
        .collect();
    if weighted.is_empty() {
        return Backends::Invalid;
    }
    let serving: Vec<(u64, &[SocketAddr])> = weighted
        .iter()
        .filter(|(_, e)| !e.is_empty())
        .map(|(b, e)| (u64::from(b.weight), e.as_slice()))
        .collect();
    if serving.is_empty() {
        return Backends::Unavailable;
    }
    Backends::Endpoints(exact_weights(&serving).unwrap_or_else(|| approximate_weights(&serving)))
}

/// Integer weights with exactly the backends' ratios, when they fit.
fn exact_weights(serving: &[(u64, &[SocketAddr])]) -> Option<Vec<(SocketAddr, u32)>> {
    let mut scale: u64 = 1;
    for (_, endpoints) in serving {
        scale = lcm(scale, endpoints.len() as u64)?;
    }
    let mut sums: BTreeMap<SocketAddr, u64> = BTreeMap::new();
    for (weight, endpoints) in serving {
        let each = weight.checked_mul(scale / endpoints.len() as u64)?;
        for address in *endpoints {
            let sum = sums.entry(*address).or_default();
            *sum = sum.checked_add(each)?;
        }
    }
    let divisor = sums.values().fold(0, |g, w| gcd(g, *w));
    let reduced = sums.into_iter().map(|(a, w)| (a, w / divisor.max(1)));
    reduced
        .map(|(address, weight)| {
            (weight <= MAX_WEIGHT)
                .then(|| u32::try_from(weight).ok().map(|w| (address, w)))
                .flatten()
        })
        .collect()
}

/// Weights scaled so the largest is 1000, every one at least 1.
fn approximate_weights(serving: &[(u64, &[SocketAddr])]) -> Vec<(SocketAddr, u32)> {
    let mut shares: BTreeMap<SocketAddr, f64> = BTreeMap::new();
    for (weight, endpoints) in serving {
        let each = *weight as f64 / endpoints.len() as f64;
        for address in *endpoints {
            *shares.entry(*address).or_default() += each;
        }
    }
    let max = shares.values().copied().fold(0.0_f64, f64::max);
    shares
        .into_iter()
        .map(|(address, share)| {
            let scaled = (share / max * MAX_WEIGHT as f64).round();
            (address, scaled.clamp(1.0, MAX_WEIGHT as f64) as u32)
        })
        .collect()
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

fn lcm(a: u64, b: u64) -> Option<u64> {
    if a == 0 || b == 0 {
        return Some(a.max(b));
    }
    (a / gcd(a, b)).checked_mul(b)
}

/// What the backends of a rule speak. They go into one cluster, which
/// speaks one HTTP version, so they must agree.
pub fn protocol(backends: &[Backend]) -> Result<BackendProtocol, String> {
    let mut weighted = backends.iter().filter(|b| b.weight > 0);
    let Some(first) = weighted.next() else {
        return Ok(BackendProtocol::Http1);
    };
    match weighted.find(|b| b.protocol != first.protocol) {
        None => Ok(first.protocol),
        Some(other) => Err(format!(
            "backends {} and {} speak different protocols ({:?} and {:?}): Praxis sends a rule \
             to one cluster, which speaks one HTTP version; give them Service ports of the same \
             appProtocol, or split the rule",
            first.cluster, other.cluster, first.protocol, other.protocol
        )),
    }
}

/// The TLS the backends of a rule are spoken to with. One cluster has one
/// `tls` block, so they must agree (a BackendTLSPolicy applies per Service
/// port, and the Gateway's client certificate is the same for all).
pub fn tls(backends: &[Backend]) -> Result<Option<&BackendTls>, String> {
    let mut weighted = backends.iter().filter(|b| b.weight > 0);
    let Some(first) = weighted.next() else {
        return Ok(None);
    };
    let trust = first.tls.as_ref().map(BackendTls::trust);
    match weighted.find(|b| b.tls.as_ref().map(BackendTls::trust) != trust) {
        None => Ok(first.tls.as_ref()),
        Some(other) => Err(format!(
            "backends {} and {} are spoken to with different TLS (BackendTLSPolicy): Praxis \
             sends a rule to one cluster, which has one TLS setting; give them the same policy, \
             or split the rule",
            first.cluster, other.cluster
        )),
    }
}

/// Whether Praxis can bound the rule's backend requests as asked.
pub fn check_timeouts(rule: &Rule) -> Result<(), String> {
    match rule.timeouts.backend_request_ms {
        Some(ms) if ms > MAX_TIMEOUT_MS => Err(format!(
            "timeouts.backendRequest of {ms} ms is longer than Praxis's longest upstream \
             timeout ({MAX_TIMEOUT_MS} ms, one hour)"
        )),
        _ => Ok(()),
    }
}

/// A rule's cluster settings besides its endpoints.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    /// `http.version` (`h2` for h2c backends).
    version: Option<&'static str>,
    read_timeout_ms: Option<u64>,
    tls: Option<BackendTls>,
    retry_policy: Option<RetryPolicy>,
}

impl Settings {
    pub fn of(rule: &Rule) -> Self {
        let version = match protocol(&rule.backends) {
            Ok(BackendProtocol::H2c) => Some("h2"),
            _ => None,
        };
        // Praxis's read timeout answers 504 when the backend has not begun
        // its response in time: the backend request's bound, and, at the
        // latest, the whole request's.
        let read_timeout_ms = match (rule.timeouts.backend_request_ms, rule.timeouts.request_ms) {
            (Some(b), Some(r)) => Some(b.min(r)),
            (b, r) => b.or(r),
        }
        // Longer than Praxis allows there: a request timeout is then kept by
        // the `timeout` filter alone (a backend timeout that long is refused).
        .filter(|ms| *ms <= MAX_TIMEOUT_MS);
        Self {
            version,
            read_timeout_ms,
            // A rule whose backends disagree is refused (`tls`) before this.
            tls: tls(&rule.backends).ok().flatten().cloned(),
            retry_policy: retries::policy(rule),
        }
    }
}

/// One (rule, match) cluster.
pub fn cluster(
    name: String,
    rule_tag: &str,
    match_tag: String,
    backends: &Backends,
    settings: &Settings,
) -> Cluster {
    let endpoints = match backends {
        Backends::Endpoints(endpoints) => endpoints
            .iter()
            .map(|(address, weight)| Endpoint {
                address: address.to_string(),
                weight: *weight,
            })
            .collect(),
        Backends::Invalid | Backends::Unavailable => vec![Endpoint {
            address: PLACEHOLDER_ENDPOINT.into(),
            weight: 1,
        }],
    };
    Cluster {
        name,
        load_balancer_strategy: "round_robin",
        endpoints,
        http: ClusterHttp {
            version: settings.version,
            application_protocol: rule_tag.to_string(),
            application_provider: match_tag,
        },
        read_timeout_ms: settings.read_timeout_ms,
        // Through relays (subjectAltNames) the cluster is plain HTTP to
        // them; they speak TLS.
        tls: settings
            .tls
            .as_ref()
            .filter(|t| !t.relayed())
            .map(|t| ClusterTls {
                sni: t.sni.clone(),
                ca: t.ca_path.clone().map(|ca_path| CaFile { ca_path }),
                client_cert: t.client_certificate.as_ref().map(KeyPair::from),
            }),
        retry_policy: settings.retry_policy.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backend(weight: u32, endpoints: &[&str]) -> Backend {
        Backend {
            cluster: "ns/svc:80".into(),
            weight,
            endpoints: endpoints.iter().map(|e| e.parse().unwrap()).collect(),
            protocol: BackendProtocol::Http1,
            service_address: None,
            ..Backend::default()
        }
    }

    fn weights(backends: &[Backend]) -> Vec<(String, u32)> {
        match resolve(backends) {
            Backends::Endpoints(e) => e.into_iter().map(|(a, w)| (a.to_string(), w)).collect(),
            other => panic!("expected endpoints, got {other:?}"),
        }
    }

    #[test]
    fn one_backend_weighs_its_endpoints_equally() {
        assert_eq!(
            weights(&[backend(1, &["10.0.0.2:80", "10.0.0.1:80"])]),
            [("10.0.0.1:80".into(), 1), ("10.0.0.2:80".into(), 1)]
        );
    }

    #[test]
    fn backend_weights_are_split_over_their_endpoints() {
        // 90/10 over 3 and 1 endpoints: each of the 3 gets 30, the one 10.
        assert_eq!(
            weights(&[
                backend(90, &["10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80"]),
                backend(10, &["10.0.1.1:80"]),
            ]),
            [
                ("10.0.0.1:80".into(), 3),
                ("10.0.0.2:80".into(), 3),
                ("10.0.0.3:80".into(), 3),
                ("10.0.1.1:80".into(), 1)
            ]
        );
    }

    #[test]
    fn an_endpoint_in_two_backends_gets_both_shares() {
        assert_eq!(
            weights(&[
                backend(1, &["10.0.0.1:80"]),
                backend(1, &["10.0.0.1:80", "10.0.0.2:80"])
            ]),
            [("10.0.0.1:80".into(), 3), ("10.0.0.2:80".into(), 1)]
        );
    }

    #[test]
    fn weights_beyond_praxis_ceiling_are_scaled() {
        let w = weights(&[
            backend(1_000_000, &["10.0.0.1:80"]),
            backend(1, &["10.0.0.2:80"]),
        ]);
        assert_eq!(w, [("10.0.0.1:80".into(), 1000), ("10.0.0.2:80".into(), 1)]);
    }

    #[test]
    fn zero_weight_backends_take_no_traffic() {
        assert_eq!(
            weights(&[backend(0, &["10.0.0.1:80"]), backend(5, &["10.0.0.2:80"])]),
            [("10.0.0.2:80".into(), 1)]
        );
    }

    #[test]
    fn no_backends_or_all_weights_zero_is_500_and_no_endpoints_503() {
        assert_eq!(resolve(&[]).status(), Some(500));
        assert_eq!(resolve(&[backend(0, &["10.0.0.1:80"])]).status(), Some(500));
        assert_eq!(resolve(&[backend(1, &[])]).status(), Some(503));
        assert_eq!(resolve(&[backend(1, &["10.0.0.1:80"])]).status(), None);
    }
}
