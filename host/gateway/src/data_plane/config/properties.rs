//! Property test: for any Gateway the controller could resolve from objects
//! the API server admits (the Gateway API CRDs' patterns for hostnames,
//! paths, header names and methods; anything for what they leave free:
//! header values, regular expressions, weights, endpoints, ports), with the
//! filters the bundled filter module translates, generation gives a config
//! praxis-proxy-core loads, or a refusal with a reason; it never panics.

use std::net::{IpAddr, SocketAddr};

use proptest::prelude::*;
use serde_json::json;

use super::{tests::praxis_loads, *};
use crate::data_plane::model::{
    Backend, BackendProtocol, CertificateFiles, ClientValidation, Listener, Match, MatchKind,
    PathMatch, Protocol, Retry, Route, Rule, Timeouts, TranslatedFilter, ValueMatch,
};

/// Text as users write it in a route, from the plain to the hostile.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z0-9-]{1,12}",
        "[ -~]{0,16}",
        "\\PC{0,12}",
        Just(String::new()),
        Just("${host}${query}\"'\\\n{{}}".to_string()),
    ]
}

/// A hostname as the CRDs admit it (`Hostname`: an optional `*.` prefix,
/// then DNS labels).
fn hostname() -> impl Strategy<Value = String> {
    "(\\*\\.)?[a-z0-9]([-a-z0-9]{0,8}[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]{0,8}[a-z0-9])?){0,3}"
}

/// A hostname without a wildcard (`PreciseHostname`, e.g. of a redirect).
fn precise_hostname() -> impl Strategy<Value = String> {
    "[a-z0-9]([-a-z0-9]{0,8}[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]{0,8}[a-z0-9])?){0,3}"
}

/// A path as the CRDs admit it: `/`, then the characters of their pattern
/// (percent-escapes included).
fn path() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof!["[-A-Za-z0-9._~!$&'()*+,;=:@]{1,6}", "%[0-9a-fA-F]{2}"],
        0..4,
    )
    .prop_map(|segments| format!("/{}", segments.join("/")))
}

/// An HTTP header (or query parameter) name as the CRDs admit it.
fn header_name() -> impl Strategy<Value = String> {
    "[A-Za-z0-9!#$%&'*+.^_`|~-]{1,16}"
}

fn path_match() -> impl Strategy<Value = PathMatch> {
    prop_oneof![
        path().prop_map(PathMatch::Exact),
        path().prop_map(PathMatch::Prefix),
        prop_oneof![
            Just("^/v[0-9]+/.*$".to_string()),
            Just("(unclosed".to_string()),
            text()
        ]
        .prop_map(PathMatch::RegularExpression),
    ]
}

fn value_match() -> impl Strategy<Value = ValueMatch> {
    (
        header_name(),
        prop_oneof![text(), Just("^(a|b)+$".to_string()), Just("[".to_string())],
        prop_oneof![Just(MatchKind::Exact), Just(MatchKind::RegularExpression)],
    )
        .prop_map(|(name, value, kind)| ValueMatch { name, value, kind })
}

fn route_match() -> impl Strategy<Value = Match> {
    (
        proptest::option::of(path_match()),
        proptest::collection::vec(value_match(), 0..3),
        proptest::collection::vec(value_match(), 0..2),
        proptest::option::of(
            proptest::sample::select(vec![
                "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH",
            ])
            .prop_map(String::from),
        ),
    )
        .prop_map(|(path, headers, query_params, method)| Match {
            path,
            headers,
            query_params,
            method,
        })
}

fn backend() -> impl Strategy<Value = Backend> {
    (
        "[a-z]{1,6}",
        1..=65535u16,
        0..=1000u32,
        proptest::collection::vec((any::<IpAddr>(), any::<u16>()), 0..3),
        proptest::option::of(any::<IpAddr>()),
        any::<bool>(),
    )
        .prop_map(
            |(service, port, weight, endpoints, cluster_ip, h2c)| Backend {
                cluster: format!("shop/{service}:{port}"),
                weight,
                endpoints: endpoints
                    .into_iter()
                    .map(|(ip, port)| SocketAddr::new(ip, port))
                    .collect(),
                protocol: if h2c {
                    BackendProtocol::H2c
                } else {
                    BackendProtocol::Http1
                },
                service_address: cluster_ip.map(|ip| SocketAddr::new(ip, port)),
                ..Backend::default()
            },
        )
}

/// A Gateway API filter, as the bundled module translates it (or refuses).
fn filter() -> impl Strategy<Value = Option<TranslatedFilter>> {
    let header = || (header_name(), text());
    let spec = prop_oneof![
        (proptest::collection::vec(header(), 0..3), proptest::collection::vec(header_name(), 0..2)).prop_map(|(set, remove)| json!({
            "type": "RequestHeaderModifier",
            "requestHeaderModifier": {
                "set": set.iter().map(|(n, v)| json!({"name": n, "value": v})).collect::<Vec<_>>(),
                "remove": remove,
            }
        })),
        (proptest::collection::vec(header(), 0..3)).prop_map(|add| json!({
            "type": "ResponseHeaderModifier",
            "responseHeaderModifier": {
                "add": add.iter().map(|(n, v)| json!({"name": n, "value": v})).collect::<Vec<_>>(),
            }
        })),
        (
            proptest::option::of(prop_oneof![Just("http"), Just("https")]),
            proptest::option::of(precise_hostname()),
            proptest::option::of(1..=65535u32),
            prop_oneof![Just(301), Just(302), Just(303), Just(307), Just(308)],
            proptest::option::of(path()),
        )
            .prop_map(|(scheme, hostname, port, status, full)| {
                let mut redirect = json!({"statusCode": status});
                if let Some(s) = scheme { redirect["scheme"] = json!(s); }
                if let Some(h) = hostname { redirect["hostname"] = json!(h); }
                if let Some(p) = port { redirect["port"] = json!(p); }
                if let Some(f) = full { redirect["path"] = json!({"type": "ReplaceFullPath", "replaceFullPath": f}); }
                json!({"type": "RequestRedirect", "requestRedirect": redirect})
            }),
        (proptest::option::of(precise_hostname()), path(), any::<bool>()).prop_map(|(hostname, to, prefix)| {
            let path = if prefix {
                json!({"type": "ReplacePrefixMatch", "replacePrefixMatch": to})
            } else {
                json!({"type": "ReplaceFullPath", "replaceFullPath": to})
            };
            let mut rewrite = json!({"path": path});
            if let Some(h) = hostname { rewrite["hostname"] = json!(h); }
            json!({"type": "URLRewrite", "urlRewrite": rewrite})
        }),
    ];
    spec.prop_map(|filter| {
        let kind = filter["type"].as_str().unwrap_or_default().to_string();
        // A filter the module refuses is left out with its route's rule by
        // the controller; here it is simply not there.
        standard_filters::translate_values(&filter.to_string())
            .ok()
            .map(|entries| TranslatedFilter {
                kind,
                module: "standard-filters".into(),
                entries: entries.into(),
            })
    })
}

/// A rule's `retry` as judgement passes it on: attempts of 1 or more
/// (beyond Praxis's 15 too), statuses of 400 to 599, durations as above.
fn retry() -> impl Strategy<Value = Retry> {
    (
        proptest::option::of(prop_oneof![1..=16u32, Just(u32::MAX)]),
        proptest::collection::btree_set(400..=599u16, 0..5),
        proptest::option::of(prop_oneof![0..=1_000u64, 0..=360_000_000u64]),
    )
        .prop_map(|(attempts, codes, backoff_ms)| Retry {
            attempts,
            codes: codes.into_iter().collect(),
            backoff_ms,
        })
}

fn rule() -> impl Strategy<Value = Rule> {
    (
        proptest::collection::vec(route_match(), 0..3),
        proptest::collection::vec(backend(), 0..3),
        proptest::collection::vec(filter(), 0..3),
        // Gateway API durations: 0 (none) up to 5 digits of hours.
        proptest::option::of(0..=360_000_000u64),
        proptest::option::of(0..=360_000_000u64),
        proptest::option::of(retry()),
    )
        .prop_map(
            |(matches, backends, filters, request, backend, retry)| Rule {
                index: 0,
                matches,
                backends,
                filters: filters.into_iter().flatten().collect(),
                timeouts: Timeouts {
                    request_ms: request.filter(|ms| *ms > 0),
                    backend_request_ms: backend.filter(|ms| *ms > 0),
                    retry,
                },
            },
        )
}

fn route() -> impl Strategy<Value = Route> {
    (
        "[a-z]{1,8}",
        proptest::collection::vec(hostname(), 0..3),
        proptest::collection::vec(rule(), 1..4),
    )
        .prop_map(|(name, hostnames, rules)| Route {
            kind: RouteKind::Http,
            namespace: "shop".into(),
            name,
            hostnames,
            rules: rules
                .into_iter()
                .enumerate()
                .map(|(index, rule)| Rule { index, ..rule })
                .collect(),
        })
}

fn listener() -> impl Strategy<Value = Listener> {
    (
        "[a-z]{1,8}",
        prop_oneof![Just(80u16), Just(443u16), Just(8080u16), 1..=65535u16],
        prop_oneof![
            Just(Protocol::Http),
            Just(Protocol::Https),
            Just(Protocol::TlsPassthrough),
            Just(Protocol::Tcp)
        ],
        any::<bool>(),
        // The controller does not accept a listener whose hostname is an IP.
        proptest::option::of(hostname().prop_filter("not an IP", |h| h.parse::<IpAddr>().is_err())),
        proptest::collection::vec(route(), 0..3),
        proptest::option::of(any::<bool>()),
    )
        .prop_map(
            |(name, port, protocol, certified, hostname, routes, validation)| Listener {
                name,
                port,
                protocol,
                // The controller drops a TCP listener's hostname (the spec ignores it).
                hostname: hostname.filter(|_| protocol != Protocol::Tcp),
                client_validation: validation.filter(|_| protocol == Protocol::Https).map(
                    |required| ClientValidation {
                        ca_path: format!("/etc/praxis-tls/client-ca-{port}.pem"),
                        required,
                    },
                ),
                // TLS listeners take TLSRoutes: hostnames and backends;
                // TCP ones TCPRoutes: backends.
                routes: match protocol {
                    Protocol::TlsPassthrough => routes
                        .into_iter()
                        .map(|r| Route {
                            kind: RouteKind::Tls,
                            ..r
                        })
                        .collect(),
                    Protocol::Tcp => routes
                        .into_iter()
                        .map(|r| Route {
                            kind: RouteKind::Tcp,
                            hostnames: Vec::new(),
                            ..r
                        })
                        .collect(),
                    _ => routes,
                },
                certificates: if protocol == Protocol::Https && certified {
                    vec![CertificateFiles {
                        cert_path: "/etc/praxis-tls/web/tls.crt".into(),
                        key_path: "/etc/praxis-tls/web/tls.key".into(),
                    }]
                } else {
                    Vec::new()
                },
            },
        )
}

fn gateway() -> impl Strategy<Value = GatewayModel> {
    proptest::collection::vec(listener(), 0..4).prop_map(|listeners| GatewayModel {
        namespace: "infra".into(),
        name: "edge".into(),
        listeners,
    })
}

/// What the controller does: leave out the rules Praxis cannot express
/// (each refusal says why), generate the rest.
#[test]
fn any_gateway_gives_a_config_praxis_loads_or_a_refusal_with_a_reason() {
    use proptest::test_runner::{TestCaseError, TestRunner};
    use std::cell::Cell;
    let cases = std::env::var("PONTOON_FUZZ_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(256);
    let mut runner = TestRunner::new(ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let (loaded, refused_configs, refused_rules) =
        (Cell::new(0u32), Cell::new(0u32), Cell::new(0u32));
    let outcome = runner.run(&gateway(), |model| {
        let (kept, refused) = split_refused(&model, DataPlane::Pontoon);
        for refusal in &refused {
            prop_assert!(refusal.message.len() > "rule 0: ".len(), "{refusal:?}");
        }
        refused_rules.set(refused_rules.get() + u32::try_from(refused.len()).unwrap_or(u32::MAX));
        match generate(&kept, &GenerateOptions::default()) {
            Ok(yaml) => {
                praxis_loads(&yaml).map_err(|why| {
                    TestCaseError::fail(format!(
                        "praxis-proxy-core refuses a generated config: {why}\n{yaml}"
                    ))
                })?;
                loaded.set(loaded.get() + 1);
            }
            Err(err) => {
                prop_assert!(!err.to_string().is_empty());
                refused_configs.set(refused_configs.get() + 1);
            }
        }
        // With the refused rules left in, generation refuses; never panics.
        let _ = generate(&model, &GenerateOptions::default());
        Ok(())
    });
    if let Err(err) = outcome {
        panic!("{err}");
    }
    println!(
        "gateways: {} configs loaded in praxis, {} refused; {} rules refused",
        loaded.get(),
        refused_configs.get(),
        refused_rules.get()
    );
    // A generator that only made refused Gateways would check nothing.
    assert!(
        loaded.get() > cases / 4,
        "only {} of {cases} configs generated",
        loaded.get()
    );
}
