//! The config file as Gefyra's Carrier2 reads it: its field names and
//! order, each bridge's matches as `matchHeader`/`matchPath` entries, and
//! the fixed settings Gefyra's operator writes.

use std::collections::BTreeMap;

use pontoon_provider_sdk::bridge_mount::bridges::{MatchType, RequestMatch, Rule};
use serde::Serialize;

use super::{CarrierConfig, ERROR_LOG, PID_FILE, Proxy, UPGRADE_SOCK};

#[derive(Serialize)]
pub(super) struct Document<'a> {
    version: u32,
    threads: u32,
    error_log: &'a str,
    pid_file: &'a str,
    upgrade_sock: &'a str,
    upstream_keepalive_pool_size: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    probes: Option<ProbesEntry<'a>>,
    proxy: Vec<ProxyEntry<'a>>,
}

#[derive(Serialize)]
struct ProbesEntry<'a> {
    #[serde(rename = "httpGet")]
    http_get: &'a [i32],
    #[serde(rename = "httpsGet")]
    https_get: &'a [i32],
}

#[derive(Serialize)]
struct ProxyEntry<'a> {
    port: i32,
    #[serde(skip_serializing_if = "Option::is_none")]
    tls: Option<TlsEntry<'a>>,
    #[serde(rename = "clusterUpstream")]
    cluster_upstream: &'a [String],
    bridges: BTreeMap<&'a str, BridgeEntry<'a>>,
}

#[derive(Serialize)]
struct TlsEntry<'a> {
    certificate: &'a str,
    key: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    sni: Option<&'a str>,
}

#[derive(Serialize)]
struct BridgeEntry<'a> {
    endpoint: &'a str,
    rules: Vec<RuleEntry<'a>>,
}

#[derive(Serialize)]
struct RuleEntry<'a> {
    #[serde(rename = "match")]
    matches: Vec<MatchEntry<'a>>,
}

/// One match, as a one-key map (`matchHeader:` or `matchPath:`): a YAML
/// serializer writes an enum as a tag (`!matchHeader`), which Carrier2
/// does not read.
#[derive(Serialize)]
struct MatchEntry<'a> {
    #[serde(rename = "matchHeader", skip_serializing_if = "Option::is_none")]
    header: Option<HeaderEntry<'a>>,
    #[serde(rename = "matchPath", skip_serializing_if = "Option::is_none")]
    path: Option<PathEntry<'a>>,
}

#[derive(Serialize)]
struct HeaderEntry<'a> {
    name: &'a str,
    value: &'a str,
    #[serde(rename = "type")]
    match_type: &'static str,
}

#[derive(Serialize)]
struct PathEntry<'a> {
    path: &'a str,
    #[serde(rename = "type")]
    match_type: &'static str,
}

impl<'a> Document<'a> {
    pub(super) fn of(config: &'a CarrierConfig) -> Self {
        Self {
            version: 1,
            threads: 4,
            error_log: ERROR_LOG,
            pid_file: PID_FILE,
            upgrade_sock: UPGRADE_SOCK,
            upstream_keepalive_pool_size: 100,
            probes: config.probes.as_ref().map(|p| ProbesEntry {
                http_get: &p.http_get,
                https_get: &p.https_get,
            }),
            proxy: config.proxy.iter().map(ProxyEntry::of).collect(),
        }
    }
}

impl<'a> ProxyEntry<'a> {
    fn of(proxy: &'a Proxy) -> Self {
        Self {
            port: proxy.port,
            tls: proxy.tls.as_ref().map(|t| TlsEntry {
                certificate: &t.certificate,
                key: &t.key,
                sni: t.sni.as_deref(),
            }),
            cluster_upstream: &proxy.cluster_upstream,
            bridges: proxy
                .bridges
                .iter()
                .map(|(name, entry)| {
                    let bridge = BridgeEntry {
                        endpoint: &entry.endpoint,
                        rules: entry.rules.iter().map(RuleEntry::of).collect(),
                    };
                    (name.as_str(), bridge)
                })
                .collect(),
        }
    }
}

impl<'a> RuleEntry<'a> {
    fn of(rule: &'a Rule) -> Self {
        let matches = rule.matches.iter().map(|m| match m {
            RequestMatch::Header(h) => MatchEntry {
                header: Some(HeaderEntry {
                    name: &h.name,
                    value: &h.value,
                    match_type: match_type(h.match_type),
                }),
                path: None,
            },
            RequestMatch::Path(p) => MatchEntry {
                header: None,
                path: Some(PathEntry {
                    path: &p.path,
                    match_type: match_type(p.match_type),
                }),
            },
        });
        Self {
            matches: matches.collect(),
        }
    }
}

fn match_type(kind: MatchType) -> &'static str {
    match kind {
        MatchType::Exact => "exact",
        MatchType::Prefix => "prefix",
        MatchType::Regex => "regex",
    }
}
