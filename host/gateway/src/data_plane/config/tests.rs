//! Golden tests: one model per feature, its config in `testdata/NAME.yaml`
//! (`UPDATE_GOLDEN=1 cargo test -p pontoon gateway::config` rewrites them),
//! and every generated config parsed and validated by praxis-proxy-core.

use std::{net::SocketAddr, path::PathBuf};

use serde_json::json;

use super::*;
use crate::data_plane::model::{
    Backend, BackendProtocol, BackendTls, CertificateFiles, Listener, Match, MatchKind, PathMatch,
    Protocol, Retry, Route, Rule, Timeouts, TranslatedFilter, ValueMatch,
};

// ----- model builders ------------------------------------------------------

fn gateway(listeners: Vec<Listener>) -> GatewayModel {
    GatewayModel {
        namespace: "infra".into(),
        name: "edge".into(),
        listeners,
    }
}

fn http(name: &str, port: u16, hostname: Option<&str>, routes: Vec<Route>) -> Listener {
    Listener {
        name: name.into(),
        port,
        protocol: Protocol::Http,
        hostname: hostname.map(Into::into),
        certificates: Vec::new(),
        client_validation: None,
        routes,
    }
}

fn https(
    name: &str,
    port: u16,
    hostname: Option<&str>,
    secret: &str,
    routes: Vec<Route>,
) -> Listener {
    Listener {
        protocol: Protocol::Https,
        certificates: vec![CertificateFiles {
            cert_path: format!("/etc/praxis-tls/{secret}/tls.crt"),
            key_path: format!("/etc/praxis-tls/{secret}/tls.key"),
        }],
        ..http(name, port, hostname, routes)
    }
}

fn route(name: &str, hostnames: &[&str], rules: Vec<Rule>) -> Route {
    Route {
        kind: RouteKind::Http,
        namespace: "shop".into(),
        name: name.into(),
        hostnames: hostnames.iter().map(|h| (*h).into()).collect(),
        rules: rules
            .into_iter()
            .enumerate()
            .map(|(index, rule)| Rule { index, ..rule })
            .collect(),
    }
}

fn rule(matches: Vec<Match>, backends: Vec<Backend>) -> Rule {
    Rule {
        index: 0,
        matches,
        backends,
        filters: Vec::new(),
        timeouts: Timeouts::default(),
    }
}

fn with_filters(rule: Rule, filters: Vec<TranslatedFilter>) -> Rule {
    Rule { filters, ..rule }
}

fn prefix(p: &str) -> Match {
    Match {
        path: Some(PathMatch::Prefix(p.into())),
        ..Match::default()
    }
}

fn exact(p: &str) -> Match {
    Match {
        path: Some(PathMatch::Exact(p.into())),
        ..Match::default()
    }
}

fn header(name: &str, value: &str, kind: MatchKind) -> ValueMatch {
    ValueMatch {
        name: name.into(),
        value: value.into(),
        kind,
    }
}

fn backend(service: &str, weight: u32, endpoints: &[&str]) -> Backend {
    Backend {
        cluster: format!("shop/{service}:80"),
        weight,
        endpoints: endpoints
            .iter()
            .map(|e| e.parse::<SocketAddr>().unwrap())
            .collect(),
        protocol: BackendProtocol::Http1,
        service_address: None,
        ..Backend::default()
    }
}

fn web() -> Vec<Backend> {
    vec![backend("web", 1, &["10.244.1.10:8080", "10.244.1.11:8080"])]
}

fn translated(kind: &str, entries: Vec<serde_json::Value>) -> TranslatedFilter {
    TranslatedFilter {
        kind: kind.into(),
        module: "standard-filters".into(),
        entries: entries.into(),
    }
}

// ----- golden files --------------------------------------------------------

fn testdata(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("src/data_plane/config/testdata")
        .join(format!("{name}.yaml"))
}

/// Generates, checks with praxis-proxy-core, compares with the golden file.
fn golden(name: &str, model: &GatewayModel, options: &GenerateOptions) -> String {
    let yaml = generate(model, options).unwrap_or_else(|e| panic!("{name}: generate failed: {e}"));
    praxis_loads(&yaml)
        .unwrap_or_else(|e| panic!("{name}: praxis-proxy-core refuses the config: {e}\n{yaml}"));
    // Generation writes one line of JSON; the golden files keep it
    // indented, for diffs a reader can follow.
    let yaml = indented(&yaml);
    let path = testdata(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, &yaml).unwrap();
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (UPDATE_GOLDEN=1 writes it)", path.display()));
    assert_eq!(
        yaml,
        expected,
        "{name}: generated config differs from {}",
        path.display()
    );
    yaml
}

/// The config with its JSON indented, the comment line kept.
fn indented(config: &str) -> String {
    let (comment, json) = config.split_once('\n').expect("a comment line");
    let value: serde_json::Value = serde_json::from_str(json).expect("the config is JSON");
    format!(
        "{comment}\n{}\n",
        serde_json::to_string_pretty(&value).expect("JSON")
    )
}

/// Praxis's own parse and validation (`Config::from_yaml`).
pub(super) fn praxis_loads(yaml: &str) -> Result<praxis_core::config::Config, String> {
    praxis_core::config::Config::from_yaml(yaml).map_err(|e| e.to_string())
}

fn options() -> GenerateOptions {
    GenerateOptions::default()
}

// ----- features ------------------------------------------------------------

#[test]
fn http_listener_with_one_route() {
    let model = gateway(vec![http(
        "web",
        80,
        None,
        vec![route("web", &[], vec![rule(vec![prefix("/")], web())])],
    )]);
    let yaml = golden("http_basic", &model, &options());
    let config = praxis_loads(&yaml).unwrap();
    assert!(
        config.insecure_options.allow_private_endpoints,
        "pod addresses need allow_private_endpoints"
    );
    assert!(
        !config.insecure_options.allow_root,
        "allow_root only when asked for"
    );
    let chain = &config.filter_chains[0];
    let types: Vec<&str> = chain
        .filters
        .iter()
        .map(|f| f.filter_type.as_str())
        .collect();
    assert_eq!(types, ["request_id", "router", "load_balancer"]);
}

#[test]
fn options_for_tests_and_health_probes() {
    let model = gateway(vec![http(
        "web",
        8080,
        None,
        vec![route("web", &[], vec![rule(vec![], web())])],
    )]);
    let options = GenerateOptions {
        listen_ip: "127.0.0.1".parse().unwrap(),
        health_address: Some("0.0.0.0:9901".parse().unwrap()),
        allow_root: true,
        data_plane: DataPlane::Pontoon,
    };
    let yaml = golden("options", &model, &options);
    let config = praxis_loads(&yaml).unwrap();
    assert!(config.insecure_options.allow_root);
    assert_eq!(
        config.admin.metrics_address.as_deref(),
        Some("0.0.0.0:9901")
    );
    assert_eq!(config.listeners[0].address, "127.0.0.1:8080");
}

#[test]
fn https_listeners_and_shared_ports() {
    let model = gateway(vec![
        http(
            "plain",
            80,
            None,
            vec![route("web", &[], vec![rule(vec![prefix("/")], web())])],
        ),
        https(
            "secure",
            443,
            None,
            "web-tls",
            vec![route("web", &[], vec![rule(vec![prefix("/")], web())])],
        ),
        // Two listeners on one port: certificates chosen by SNI.
        https(
            "a",
            8443,
            Some("a.example.com"),
            "a-tls",
            vec![route("a", &[], vec![rule(vec![], web())])],
        ),
        https(
            "any",
            8443,
            None,
            "default-tls",
            vec![route("b", &[], vec![rule(vec![], web())])],
        ),
    ]);
    let yaml = golden("https", &model, &options());
    let config = praxis_loads(&yaml).unwrap();
    let names: Vec<&str> = config.listeners.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names, ["http-80", "https-443", "https-8443"]);
    let shared = config.listeners[2].tls.as_ref().unwrap();
    assert_eq!(shared.certificates.len(), 2);
    assert_eq!(shared.certificates[0].server_names, ["a.example.com"]);
    assert!(
        shared.certificates[1].default,
        "the listener without hostname has the default certificate"
    );
    // The shared port's public address is the misdirected-request front's;
    // Praxis's listener behind it is on loopback. The port with one
    // listener is Praxis's own.
    let addresses: Vec<&str> = config
        .listeners
        .iter()
        .map(|l| l.address.as_str())
        .collect();
    assert_eq!(addresses, ["0.0.0.0:80", "0.0.0.0:443", "127.0.0.1:15100"]);
    let front = r#"{"filter":"pontoon_misdirected","listen":"0.0.0.0:8443","hop":"127.0.0.1:15100","listener_hostnames":["a.example.com"]}"#;
    let compact = generate(&model, &options()).unwrap();
    assert_eq!(compact.matches(front).count(), 1, "{compact}");

    // Stock Praxis has no front: the port is its listener's, unchecked.
    let stock = generate(
        &model,
        &GenerateOptions {
            data_plane: DataPlane::StockPraxis,
            ..options()
        },
    )
    .unwrap();
    assert!(!stock.contains("pontoon_misdirected"), "{stock}");
    assert!(stock.contains(r#""address":"0.0.0.0:8443""#), "{stock}");
}

#[test]
fn paths_in_gateway_api_precedence() {
    let model = gateway(vec![http(
        "web",
        80,
        None,
        vec![
            route(
                "older",
                &[],
                vec![
                    rule(vec![prefix("/")], web()),
                    rule(vec![prefix("/api/")], web()),
                ],
            ),
            route(
                "newer",
                &[],
                vec![
                    rule(vec![exact("/api/v1")], web()),
                    rule(vec![prefix("/api")], web()),
                    rule(vec![prefix("/api/v1")], web()),
                ],
            ),
        ],
    )]);
    let yaml = golden("paths", &model, &options());
    let routes = router_routes(&yaml);
    // Exact first, then longest prefix; `/api/` and `/api` are the same
    // prefix (trailing slash ignored), the older route's first.
    assert_eq!(
        routes,
        [
            "path /api/v1 -> r3-m0_shop_newer_0",
            "path_prefix /api/v1 -> r5-m0_shop_newer_2",
            "path_prefix /api/ -> r2-m0_shop_older_1",
            "path_prefix /api -> r4-m0_shop_newer_1",
            "path_prefix / -> r1-m0_shop_older_0",
        ]
    );
}

#[test]
fn hostnames_and_their_precedence() {
    let model = gateway(vec![
        http(
            "wild",
            80,
            Some("*.example.com"),
            vec![
                // Its hostnames, already intersected with the listener's.
                route(
                    "shop",
                    &["shop.example.com"],
                    vec![rule(vec![prefix("/")], web())],
                ),
                route("wild", &[], vec![rule(vec![prefix("/long/path")], web())]),
            ],
        ),
        http(
            "exact",
            80,
            Some("foo.example.com"),
            vec![route("foo", &[], vec![rule(vec![prefix("/")], web())])],
        ),
        http(
            "any",
            80,
            None,
            vec![route("rest", &[], vec![rule(vec![prefix("/")], web())])],
        ),
    ]);
    let yaml = golden("hostnames", &model, &options());
    let config = praxis_loads(&yaml).unwrap();
    let types: Vec<&str> = config.filter_chains[0]
        .filters
        .iter()
        .map(|f| f.filter_type.as_str())
        .collect();
    assert_eq!(
        types,
        [
            "request_id",
            "headers",
            "guardrails",
            "guardrails",
            "router",
            "load_balancer"
        ],
        "pads, then one Host classifier per exclusion set"
    );
}

#[test]
fn method_and_header_matches() {
    let model = gateway(vec![http(
        "web",
        80,
        None,
        vec![route(
            "api",
            &[],
            vec![
                rule(
                    vec![Match {
                        method: Some("POST".into()),
                        ..prefix("/api")
                    }],
                    web(),
                ),
                rule(
                    vec![Match {
                        headers: vec![
                            header("X-Version", "2", MatchKind::Exact),
                            header("x-user", "(alice|bob)-[0-9]+", MatchKind::RegularExpression),
                        ],
                        ..prefix("/api")
                    }],
                    web(),
                ),
                rule(vec![prefix("/api")], web()),
            ],
        )],
    )]);
    let yaml = golden("matches", &model, &options());
    assert_eq!(
        router_routes(&yaml),
        [
            "path_prefix /api [x-praxis-pontoon-method=POST, x-praxis-pontoon-pad-1=1] -> r1-m0_shop_api_0",
            "path_prefix /api [x-praxis-pontoon-header-0=1, x-version=2] -> r2-m0_shop_api_1",
            "path_prefix /api [x-praxis-pontoon-pad-1=1, x-praxis-pontoon-pad-2=1] -> r3-m0_shop_api_2",
        ],
        "method before headers before none, all with two constraints"
    );
}

#[test]
fn weighted_and_missing_backends() {
    let model = gateway(vec![http(
        "web",
        80,
        None,
        vec![route(
            "split",
            &[],
            vec![
                rule(
                    vec![prefix("/split")],
                    vec![
                        backend(
                            "v1",
                            90,
                            &["10.244.1.10:8080", "10.244.1.11:8080", "10.244.1.12:8080"],
                        ),
                        backend("v2", 10, &["10.244.2.10:8080"]),
                    ],
                ),
                rule(vec![prefix("/none")], Vec::new()),
                rule(vec![prefix("/down")], vec![backend("down", 1, &[])]),
            ],
        )],
    )]);
    golden("backends", &model, &options());
}

#[test]
fn a_backends_own_filters_apply_to_the_requests_sent_to_it() {
    use crate::data_plane::model::{BackendHeaders, HeaderChanges, HeaderValuePair};
    let with_headers = |service: &str, endpoints: &[&str]| Backend {
        headers: Some(BackendHeaders {
            request: HeaderChanges {
                set: vec![HeaderValuePair {
                    name: "backend".into(),
                    value: service.into(),
                }],
                ..HeaderChanges::default()
            },
            response: HeaderChanges::default(),
        }),
        ..backend(service, 1, endpoints)
    };
    let split = vec![
        with_headers("v1", &["10.244.2.1:8080"]),
        with_headers("v2", &["10.244.2.2:8080"]),
        backend("plain", 1, &["10.244.2.3:8080"]),
    ];
    let model = gateway(vec![http(
        "web",
        80,
        None,
        vec![route(
            "split",
            &[],
            vec![rule(vec![prefix("/")], split.clone())],
        )],
    )]);
    let yaml = golden("backend_headers", &model, &options());
    assert!(
        yaml.contains(r#""filter": "pontoon_backend_headers""#),
        "{yaml}"
    );
    let config: serde_json::Value = serde_json::from_str(yaml.split_once('\n').unwrap().1).unwrap();
    let entry = config["filter_chains"][0]["filters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["filter"] == "pontoon_backend_headers")
        .unwrap();
    let endpoints: Vec<&serde_json::Value> = entry["backends"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| &b["endpoints"][0])
        .collect();
    assert_eq!(
        endpoints,
        ["10.244.2.1:8080", "10.244.2.2:8080"],
        "only backends with filters"
    );

    let mut shared = split;
    shared[1].endpoints = shared[0].endpoints.clone();
    let why = check_rule(RouteKind::Http, &rule(vec![], shared), DataPlane::Pontoon).unwrap_err();
    assert!(why.contains("share the endpoint 10.244.2.1:8080"), "{why}");
    let stock = check_rule(
        RouteKind::Http,
        &rule(vec![], vec![with_headers("v1", &["10.244.2.1:8080"])]),
        DataPlane::StockPraxis,
    )
    .unwrap_err();
    assert!(stock.contains("needs Pontoon's data plane"), "{stock}");
}

#[test]
fn client_certificates_are_required_or_only_asked_for() {
    // The Praxis listener's `tls` and the front's entry, if any.
    let with = |required: bool, plane: DataPlane| {
        let mut listener = https(
            "secure",
            443,
            None,
            "web-tls",
            vec![route("web", &[], vec![rule(vec![prefix("/")], web())])],
        );
        listener.client_validation = Some(crate::data_plane::model::ClientValidation {
            ca_path: "/etc/praxis-tls/client-ca-443.pem".into(),
            required,
        });
        let options = GenerateOptions {
            data_plane: plane,
            ..options()
        };
        let yaml = generate(&gateway(vec![listener]), &options).unwrap();
        let config = praxis_loads(&yaml).unwrap();
        let listener = &config.listeners[0];
        let tls = serde_json::to_value(&listener.tls).unwrap();
        let compact: serde_json::Value =
            serde_json::from_str(yaml.lines().nth(1).unwrap()).unwrap();
        let front = compact["filter_chains"][0]["filters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["filter"] == "pontoon_misdirected")
            .cloned();
        (listener.address.clone(), tls, front)
    };
    for plane in [DataPlane::Pontoon, DataPlane::StockPraxis] {
        let (address, valid_only, front) = with(true, plane);
        assert_eq!(address, "0.0.0.0:443");
        assert_eq!(valid_only["client_cert_mode"], "require", "{valid_only}");
        assert!(valid_only["client_ca"].is_object(), "{valid_only}");
        assert_eq!(front, None, "a required certificate is Praxis's to check");
    }
    // AllowInsecureFallback on stock Praxis: asked for, not required, but a
    // certificate presented is still verified (the feature is not claimed).
    let (address, fallback, front) = with(false, DataPlane::StockPraxis);
    assert_eq!(address, "0.0.0.0:443");
    assert_eq!(fallback["client_cert_mode"], "request", "{fallback}");
    assert_eq!(front, None);
    // On Pontoon's data plane the front holds the port and ends the TLS
    // with the listener's own settings; Praxis serves plain HTTP behind it.
    let (address, tls, front) = with(false, DataPlane::Pontoon);
    assert_eq!(address, "127.0.0.1:15100");
    assert!(tls.is_null(), "{tls}");
    let front = front.unwrap();
    assert_eq!(front["listen"], "0.0.0.0:443", "{front}");
    assert_eq!(front["hop"], "127.0.0.1:15100", "{front}");
    assert_eq!(front["tls"]["client_cert_mode"], "request", "{front}");
    assert_eq!(
        front["tls"]["client_ca"]["ca_path"], "/etc/praxis-tls/client-ca-443.pem",
        "{front}"
    );
    assert_eq!(
        front["tls"]["certificates"][0]["cert_path"], "/etc/praxis-tls/web-tls/tls.crt",
        "{front}"
    );
}

#[test]
fn rule_filters_apply_to_their_rule_only() {
    let set_header = |value: &str| {
        translated(
            "RequestHeaderModifier",
            vec![
                json!({"filter": "headers", "request_set": [{"name": "x-route", "value": value}]}),
            ],
        )
    };
    let model = gateway(vec![http(
        "web",
        8080,
        None,
        vec![
            // Same path, different routes and hostnames: each keeps its filter.
            route(
                "a",
                &["a.example.com"],
                vec![with_filters(
                    rule(vec![prefix("/app")], web()),
                    vec![set_header("a")],
                )],
            ),
            route(
                "b",
                &["b.example.com"],
                vec![with_filters(
                    rule(vec![prefix("/app")], web()),
                    vec![set_header("b")],
                )],
            ),
            route(
                "copied",
                &["copied.example.com"],
                vec![with_filters(
                    rule(vec![prefix("/")], web()),
                    vec![translated(
                        "RequestMirror",
                        vec![json!({
                            "filter": "pontoon_mirror",
                            "backend": "default/mirror:8080",
                            "endpoints": ["10.0.0.9:8080"],
                            "numerator": 20,
                            "denominator": 100,
                            "h2c": false
                        })],
                    )],
                )],
            ),
            route(
                "moved",
                &[],
                vec![
                    with_filters(
                        rule(vec![prefix("/old")], Vec::new()),
                        vec![translated(
                            "RequestRedirect",
                            vec![json!({
                                "filter": "redirect",
                                "status": 302,
                                "location": "${pontoon_listener_scheme}://${host}${pontoon_port_suffix}/new${query}"
                            })],
                        )],
                    ),
                    with_filters(
                        rule(vec![prefix("/v1"), prefix("/legacy/v1")], web()),
                        vec![translated(
                            "URLRewrite",
                            vec![json!({
                                "filter": "url_rewrite",
                                "operations": [{"regex_replace": {
                                    "pattern": "^${pontoon_match_prefix}(/.*)?$",
                                    "replacement": "/v2${1}"
                                }}]
                            })],
                        )],
                    ),
                ],
            ),
        ],
    )]);
    let yaml = golden("filters", &model, &options());
    assert!(
        yaml.contains(r#""location": "http://${host}:8080/new${query}""#),
        "{yaml}"
    );
    assert!(
        yaml.contains(r#""pattern": "^/legacy/v1(/.*)?$""#),
        "{yaml}"
    );
}

#[test]
fn a_listener_without_routes_answers_404() {
    let model = gateway(vec![http("web", 80, None, Vec::new())]);
    golden("empty", &model, &options());
}

#[test]
fn security_filters_from_modules_may_be_gated_on_their_rule() {
    let model = gateway(vec![http(
        "web",
        80,
        None,
        vec![route(
            "cors",
            &[],
            vec![with_filters(
                rule(vec![], web()),
                vec![translated(
                    "ExtensionRef:example.com/Cors",
                    vec![json!({"filter": "cors", "allow_origins": ["https://example.com"]})],
                )],
            )],
        )],
    )]);
    let yaml = generate(&model, &options()).unwrap();
    let config = praxis_loads(&yaml).unwrap();
    assert!(
        config
            .insecure_options
            .skip_pipeline_checks
            .conditional_security
    );
}

// ----- behaviour -----------------------------------------------------------

#[test]
fn same_model_same_bytes() {
    let model = gateway(vec![http(
        "web",
        80,
        None,
        vec![route(
            "r",
            &["a.example.com", "*.example.com"],
            vec![rule(
                vec![Match {
                    headers: vec![
                        header("b", "1", MatchKind::Exact),
                        header("a", "x.*", MatchKind::RegularExpression),
                        header("c", "2", MatchKind::Exact),
                    ],
                    method: Some("GET".into()),
                    ..prefix("/")
                }],
                web(),
            )],
        )],
    )]);
    let first = generate(&model, &options()).unwrap();
    for _ in 0..10 {
        assert_eq!(generate(&model, &options()).unwrap(), first);
    }
}

#[test]
fn unsupported_rules_are_refused_by_name_and_can_be_left_out() {
    let model = gateway(vec![
        http(
            "web",
            80,
            None,
            vec![route(
                "mixed",
                &[],
                vec![
                    rule(vec![prefix("/ok")], web()),
                    rule(
                        vec![Match {
                            path: Some(PathMatch::RegularExpression("/re/.*".into())),
                            ..Match::default()
                        }],
                        web(),
                    ),
                    rule(
                        vec![Match {
                            query_params: vec![header("page", "1", MatchKind::Exact)],
                            ..prefix("/q")
                        }],
                        web(),
                    ),
                ],
            )],
        ),
        // The same route on a second listener is refused once.
        http(
            "alt",
            8080,
            None,
            vec![route(
                "mixed",
                &[],
                vec![
                    rule(vec![prefix("/ok")], web()),
                    rule(
                        vec![Match {
                            path: Some(PathMatch::RegularExpression("/re/.*".into())),
                            ..Match::default()
                        }],
                        web(),
                    ),
                ],
            )],
        ),
    ]);
    // Query parameters need Pontoon's data plane.
    let stock = GenerateOptions {
        data_plane: DataPlane::StockPraxis,
        ..options()
    };
    let Err(ConfigError::UnsupportedRules(on_pontoon)) = generate(&model, &options()) else {
        panic!("expected the regular expression path to be refused");
    };
    let indexes: Vec<usize> = on_pontoon.iter().map(|r| r.rule_index).collect();
    assert_eq!(indexes, [1]);
    let Err(ConfigError::UnsupportedRules(refused)) = generate(&model, &stock) else {
        panic!("expected the unsupported rules to be refused");
    };
    let summary: Vec<(usize, &str)> = refused.iter().map(|r| (r.rule_index, r.reason())).collect();
    assert_eq!(summary, [(1, "UnsupportedValue"), (2, "UnsupportedValue")]);
    assert!(
        refused[0]
            .message
            .starts_with("rule 1: match 0: path type RegularExpression"),
        "{}",
        refused[0]
    );
    assert!(
        refused[1].message.contains("queryParams (page)"),
        "{}",
        refused[1]
    );
    assert_eq!(
        refused[0].to_string(),
        format!("HTTPRoute shop/mixed {}", refused[0].message)
    );

    let (kept, split) = split_refused(&model, DataPlane::StockPraxis);
    assert_eq!(split, refused);
    assert_eq!(kept.listeners[0].routes[0].rules.len(), 1);
    let yaml = generate(&kept, &stock).unwrap();
    praxis_loads(&yaml).unwrap();
    assert!(!yaml.contains("/re/"), "refused rules are left out");
}

#[test]
fn listener_errors() {
    let conflict = gateway(vec![
        http("a", 8443, None, Vec::new()),
        https("b", 8443, None, "tls", Vec::new()),
    ]);
    assert_eq!(
        generate(&conflict, &options()),
        Err(ConfigError::PortConflict {
            port: 8443,
            first: "a".into(),
            second: "b".into()
        })
    );
    // Found by the property test: Praxis refuses both configs.
    let twice = gateway(vec![
        https("a", 443, None, "tls", Vec::new()),
        https("b", 443, Some("A.example.com"), "tls", Vec::new()),
        https("c", 443, None, "tls", Vec::new()),
    ]);
    assert_eq!(
        generate(&twice, &options()),
        Err(ConfigError::HostnameConflict {
            port: 443,
            hostname: "(none)".into(),
            first: "a".into(),
            second: "c".into()
        })
    );
    let short = gateway(vec![
        https("a", 443, None, "tls", Vec::new()),
        https("b", 443, Some("*.com"), "tls", Vec::new()),
    ]);
    let refused = generate(&short, &options()).unwrap_err().to_string();
    assert!(
        refused.contains("at least three labels (*.example.com), not *.com"),
        "{refused}"
    );
    // Alone on its port it needs no SNI, and loads.
    let alone = gateway(vec![https("b", 443, Some("*.com"), "tls", Vec::new())]);
    praxis_loads(&generate(&alone, &options()).unwrap()).unwrap();
    let mut no_cert = https("b", 443, None, "tls", Vec::new());
    no_cert.certificates.clear();
    assert_eq!(
        generate(&gateway(vec![no_cert]), &options()),
        Err(ConfigError::MissingCertificate {
            listener: "b".into()
        })
    );
}

#[test]
fn too_many_classifiers_is_an_error_not_a_broken_config() {
    let rules = (0..300)
        .map(|i| {
            rule(
                vec![Match {
                    headers: vec![header(
                        "x-id",
                        &format!("{i}-[0-9]+"),
                        MatchKind::RegularExpression,
                    )],
                    ..prefix("/")
                }],
                web(),
            )
        })
        .collect();
    let model = gateway(vec![http("web", 80, None, vec![route("many", &[], rules)])]);
    assert_eq!(
        generate(&model, &options()),
        Err(ConfigError::TooManyBranches { count: 300 })
    );
}

#[test]
fn a_large_gateway_loads() {
    // 200 routes with two hostnames, headers and filters each.
    let routes = (0..200)
        .map(|i| {
            let host = format!("h{}.example.com", i % 20);
            route(
                &format!("r{i}"),
                &[host.as_str(), "*.example.com"],
                vec![with_filters(
                    rule(
                        vec![Match {
                            headers: vec![header("x-tenant", &format!("t{i}"), MatchKind::Exact)],
                            ..prefix(&format!("/svc{}", i % 7))
                        }],
                        web(),
                    ),
                    vec![translated(
                        "RequestHeaderModifier",
                        vec![json!({"filter": "headers", "request_set": [{"name": "x-r", "value": i.to_string()}]})],
                    )],
                )],
            )
        })
        .collect();
    let yaml = generate(&gateway(vec![http("web", 80, None, routes)]), &options()).unwrap();
    let config = praxis_loads(&yaml).unwrap();
    // request_id, pads, Host classifier, router, load balancer, 200 filters,
    // in chains of at most 100 (Praxis's limit).
    let sizes: Vec<usize> = config
        .filter_chains
        .iter()
        .map(|c| c.filters.len())
        .collect();
    assert_eq!(sizes, [100, 100, 5]);
    assert_eq!(
        config.listeners[0].filter_chains,
        ["http-80", "http-80-2", "http-80-3"]
    );
}

/// The router's entries as `path[_prefix] P [headers] -> cluster`, in order.
fn router_routes(yaml: &str) -> Vec<String> {
    let config = praxis_loads(yaml).unwrap();
    let router = config.filter_chains[0]
        .filters
        .iter()
        .find(|f| f.filter_type == "router")
        .unwrap();
    router.config["routes"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|r| {
            let (kind, path) = match r.get("path") {
                Some(p) => ("path", p.as_str().unwrap()),
                None => ("path_prefix", r["path_prefix"].as_str().unwrap()),
            };
            let headers = r.get("headers").map(|h| {
                let pairs: Vec<String> = h
                    .as_mapping()
                    .unwrap()
                    .iter()
                    .map(|(k, v)| format!("{}={}", k.as_str().unwrap(), v.as_str().unwrap()))
                    .collect();
                format!(" [{}]", pairs.join(", "))
            });
            format!(
                "{kind} {path}{} -> {}",
                headers.unwrap_or_default(),
                r["cluster"].as_str().unwrap()
            )
        })
        .collect()
}

#[test]
fn the_bundled_filters_leave_the_placeholders_generation_fills() {
    use standard_filters::placeholders;
    assert_eq!(placeholders::LISTENER_SCHEME, LISTENER_SCHEME);
    assert_eq!(placeholders::PORT_SUFFIX, PORT_SUFFIX);
    assert_eq!(placeholders::MATCH_PREFIX, MATCH_PREFIX);
    assert_eq!(
        placeholders::port_suffix_of(8443),
        format!("{PORT_SUFFIX_OF}8443}}")
    );
}

/// The bundled module's real output, through generation, loads in Praxis.
#[test]
fn standard_filters_entries_load_in_praxis() {
    let translate = |filter: serde_json::Value| {
        let kind = filter["type"].as_str().unwrap().to_string();
        let entries = standard_filters::translate_values(&filter.to_string()).unwrap();
        translated(&kind, entries)
    };
    let redirect = translate(json!({"type": "RequestRedirect", "requestRedirect": {"port": 8443}}));
    let rewrite = translate(json!({"type": "URLRewrite", "urlRewrite": {
        "hostname": "internal.example.com",
        "path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/v2"}}}));
    let headers = translate(
        json!({"type": "ResponseHeaderModifier", "responseHeaderModifier": {
        "set": [{"name": "x-a", "value": "1"}], "add": [{"name": "x-b", "value": "2"}], "remove": ["server"]}}),
    );
    let model = gateway(vec![https(
        "web",
        8443,
        None,
        "tls",
        vec![route(
            "r",
            &[],
            vec![
                with_filters(rule(vec![prefix("/old")], Vec::new()), vec![redirect]),
                with_filters(
                    rule(vec![prefix("/v1"), prefix("/api/v1/")], web()),
                    vec![rewrite, headers],
                ),
            ],
        )],
    )]);
    let yaml = golden("standard_filters", &model, &options());
    // Port 8443 is the HTTPS listener's own, not HTTPS's default: kept.
    assert!(
        yaml.contains(r#""location": "https://${host}:8443${path}${query}""#),
        "{yaml}"
    );
    assert!(yaml.contains(r#""pattern": "^/api/v1(/.*)?$""#), "{yaml}");
}

#[test]
fn a_config_beyond_a_config_map_is_an_error() {
    let routes = (0..5000)
        .map(|i| {
            route(
                &format!("route-{i}"),
                &[],
                vec![rule(vec![prefix(&format!("/service-number-{i}"))], web())],
            )
        })
        .collect();
    let model = gateway(vec![http("web", 80, None, routes)]);
    match generate(&model, &options()) {
        Err(ConfigError::TooLarge { bytes }) => assert!(bytes > MAX_CONFIG_BYTES),
        other => panic!("expected TooLarge, got {:?}", other.map(|c| c.len())),
    }
}

// ----- route kinds and backend protocols -----------------------------------

fn grpc_backend(service: &str, weight: u32, endpoints: &[&str]) -> Backend {
    Backend {
        protocol: BackendProtocol::H2c,
        ..backend(service, weight, endpoints)
    }
}

#[test]
fn grpc_routes_and_h2c_backends_speak_http2_to_their_endpoints() {
    let grpc = Route {
        kind: RouteKind::Grpc,
        ..route(
            "echo",
            &["grpc.example.com"],
            vec![
                rule(
                    vec![exact("/echo.Echo/Ping"), prefix("/echo.Echo")],
                    vec![
                        grpc_backend("echo-v1", 70, &["10.244.2.10:3000"]),
                        grpc_backend("echo-v2", 30, &["10.244.2.11:3000"]),
                    ],
                ),
                rule(
                    vec![Match {
                        headers: vec![header("version", "two", MatchKind::Exact)],
                        ..prefix("/")
                    }],
                    vec![grpc_backend("echo-v2", 1, &["10.244.2.11:3000"])],
                ),
            ],
        )
    };
    let h2c = route(
        "web",
        &[],
        vec![rule(
            vec![prefix("/")],
            vec![grpc_backend("h2c", 1, &["10.244.1.12:3001"])],
        )],
    );
    let plain = route("plain", &[], vec![rule(vec![prefix("/old")], web())]);
    let model = gateway(vec![http("web", 80, None, vec![grpc, h2c, plain])]);
    let yaml = golden("grpc", &model, &options());
    let config = praxis_loads(&yaml).unwrap();
    let versions: Vec<String> = config.filter_chains[0]
        .filters
        .iter()
        .filter(|f| f.filter_type == "load_balancer")
        .flat_map(|f| {
            f.config["clusters"]
                .as_sequence()
                .cloned()
                .unwrap_or_default()
        })
        .map(|c| {
            format!(
                "{}={:?}",
                c["name"].as_str().unwrap(),
                c["http"]["version"].as_str()
            )
        })
        .collect();
    assert!(
        versions
            .iter()
            .filter(|v| v.ends_with("Some(\"h2\")"))
            .count()
            == 4
            && versions.iter().filter(|v| v.ends_with("None")).count() == 1,
        "gRPC and h2c clusters speak h2, the HTTP/1.1 one does not: {versions:?}"
    );
}

fn tls_backend(service: &str, sni: &str, ca: Option<&str>, client: bool) -> Backend {
    Backend {
        tls: Some(BackendTls {
            sni: sni.into(),
            ca_path: ca.map(Into::into),
            client_certificate: client.then(|| CertificateFiles {
                cert_path: "/etc/praxis-tls/infra-client.crt".into(),
                key_path: "/etc/praxis-tls/infra-client.key".into(),
            }),
            subject_alt_names: Vec::new(),
            relays: Vec::new(),
        }),
        ..backend(service, 1, &["10.244.4.10:8443"])
    }
}

#[test]
fn backend_tls_policies_become_cluster_tls_verified_against_their_hostname() {
    let ca = "/etc/praxis-tls/backend-ca.shop.policy.pem";
    let model = gateway(vec![http(
        "web",
        80,
        None,
        vec![route(
            "secure",
            &[],
            vec![
                rule(
                    vec![prefix("/private")],
                    vec![tls_backend("private", "abc.example.com", Some(ca), true)],
                ),
                rule(
                    vec![prefix("/public")],
                    vec![tls_backend("public", "www.example.com", None, false)],
                ),
                rule(vec![prefix("/")], web()),
            ],
        )],
    )]);
    let yaml = golden("backend_tls", &model, &options());
    let config = praxis_loads(&yaml).unwrap();
    let tls: Vec<String> = config.filter_chains[0]
        .filters
        .iter()
        .filter(|f| f.filter_type == "load_balancer")
        .flat_map(|f| {
            f.config["clusters"]
                .as_sequence()
                .cloned()
                .unwrap_or_default()
        })
        .map(|c| {
            let tls = &c["tls"];
            format!(
                "{:?} {:?} {:?}",
                tls["sni"].as_str(),
                tls["ca"]["ca_path"].as_str(),
                tls["client_cert"]["cert_path"].as_str()
            )
        })
        .collect();
    assert_eq!(
        tls,
        [
            format!(
                "Some(\"abc.example.com\") Some({ca:?}) Some(\"/etc/praxis-tls/infra-client.crt\")"
            ),
            "Some(\"www.example.com\") None None".into(),
            "None None None".into(),
        ],
        "each rule's cluster speaks TLS as its backend's policy asks, the plain one not at all"
    );
}

#[test]
fn subject_alt_names_are_checked_by_a_relay_praxis_speaks_plain_http_to() {
    use crate::data_plane::model::{Relay, SubjectAltName};
    let ca = "/etc/praxis-tls/backend-ca.shop.policy.pem";
    let relay = Relay {
        listen: "127.0.0.1:15100".parse().unwrap(),
        upstream: "10.96.0.10:443".parse().unwrap(),
    };
    let mut relayed = tls_backend("private", "abc.example.com", Some(ca), false);
    relayed.endpoints = vec![relay.listen];
    if let Some(tls) = relayed.tls.as_mut() {
        tls.subject_alt_names = vec![
            SubjectAltName::Hostname("dce.example.com".into()),
            SubjectAltName::Uri("spiffe://abc.example.com/id".into()),
        ];
        tls.relays = vec![relay];
    }
    let model = gateway(vec![http(
        "web",
        80,
        None,
        vec![route(
            "secure",
            &[],
            vec![rule(vec![prefix("/private")], vec![relayed.clone()])],
        )],
    )]);
    let yaml = golden("backend_tls_sans", &model, &options());
    let config = praxis_loads(&yaml).unwrap();
    let filters = &config.filter_chains[0].filters;
    let cluster = filters
        .iter()
        .filter(|f| f.filter_type == "load_balancer")
        .flat_map(|f| {
            f.config["clusters"]
                .as_sequence()
                .cloned()
                .unwrap_or_default()
        })
        .next()
        .unwrap();
    assert!(
        cluster["tls"].is_null(),
        "plain HTTP to the relay: {cluster:?}"
    );
    assert_eq!(
        cluster["endpoints"][0]["address"].as_str(),
        Some("127.0.0.1:15100")
    );
    let entry = filters
        .iter()
        .find(|f| f.filter_type == "pontoon_backend_tls")
        .expect("the relay's entry");
    let relays = serde_json::to_value(&entry.config["relays"]).unwrap();
    assert_eq!(
        relays,
        serde_json::json!([{
            "listen": "127.0.0.1:15100",
            "upstream": "10.96.0.10:443",
            "server_name": "abc.example.com",
            "ca_path": ca,
            "subject_alt_names": [
                { "hostname": "dce.example.com" },
                { "uri": "spiffe://abc.example.com/id" }
            ]
        }])
    );
    // Stock Praxis has no relay.
    let why = check_rule(
        RouteKind::Http,
        &rule(vec![prefix("/")], vec![relayed]),
        DataPlane::StockPraxis,
    )
    .unwrap_err();
    assert!(
        why.contains("subjectAltNames needs Pontoon's data plane"),
        "{why}"
    );
}

#[test]
fn backends_of_one_rule_must_share_their_tls() {
    let mixed = rule(
        vec![prefix("/")],
        vec![
            tls_backend("private", "abc.example.com", None, false),
            backend("web", 1, &["10.244.1.10:8080"]),
        ],
    );
    let why = check_rule(RouteKind::Http, &mixed, DataPlane::Pontoon).unwrap_err();
    assert!(why.contains("different TLS"), "{why}");
}

#[test]
fn backends_of_one_rule_must_speak_one_protocol() {
    let mixed = rule(
        vec![prefix("/")],
        vec![
            grpc_backend("h2c", 1, &["10.244.1.12:3001"]),
            backend("web", 1, &["10.244.1.10:8080"]),
        ],
    );
    let why = check_rule(RouteKind::Http, &mixed, DataPlane::Pontoon).unwrap_err();
    assert!(why.contains("speak different protocols"), "{why}");
    // A backend with weight 0 takes no request, so it does not count.
    let weightless = rule(
        vec![prefix("/")],
        vec![
            grpc_backend("h2c", 1, &["10.244.1.12:3001"]),
            backend("web", 0, &["10.244.1.10:8080"]),
        ],
    );
    assert!(check_rule(RouteKind::Http, &weightless, DataPlane::Pontoon).is_ok());
}

#[test]
fn timeouts_bound_the_backend_read_and_the_whole_request() {
    let timed = |request_ms, backend_request_ms| Rule {
        timeouts: Timeouts {
            request_ms,
            backend_request_ms,
            retry: None,
        },
        ..rule(vec![prefix("/")], web())
    };
    let model = gateway(vec![http(
        "web",
        80,
        None,
        vec![
            route(
                "request",
                &["request.example.com"],
                vec![timed(Some(500), None)],
            ),
            route(
                "backend",
                &["backend.example.com"],
                vec![timed(None, Some(250))],
            ),
            route(
                "both",
                &["both.example.com"],
                vec![timed(Some(2000), Some(1500))],
            ),
            route("none", &["none.example.com"], vec![timed(None, None)]),
        ],
    )]);
    let yaml = golden("timeouts", &model, &options());
    let config = praxis_loads(&yaml).unwrap();
    let filters = &config.filter_chains[0].filters;
    let timeouts: Vec<u64> = filters
        .iter()
        .filter(|f| f.filter_type == "timeout")
        .map(|f| f.config["timeout_ms"].as_u64().unwrap())
        .collect();
    assert_eq!(
        timeouts,
        [500, 2000],
        "a timeout filter per request timeout"
    );
    let reads: Vec<Option<u64>> = filters
        .iter()
        .filter(|f| f.filter_type == "load_balancer")
        .flat_map(|f| {
            f.config["clusters"]
                .as_sequence()
                .cloned()
                .unwrap_or_default()
        })
        .map(|c| c["read_timeout_ms"].as_u64())
        .collect();
    assert_eq!(reads, [Some(500), Some(250), Some(1500), None]);
}

#[test]
fn a_rules_retry_is_its_clusters_retry_policy() {
    let retried = |request_ms, backend_request_ms, retry| Rule {
        timeouts: Timeouts {
            request_ms,
            backend_request_ms,
            retry,
        },
        ..rule(vec![prefix("/"), exact("/once")], web())
    };
    let model = gateway(vec![http(
        "web",
        80,
        None,
        vec![
            route(
                "codes",
                &["codes.example.com"],
                vec![retried(
                    None,
                    None,
                    Some(Retry {
                        attempts: Some(3),
                        codes: vec![500, 502],
                        backoff_ms: None,
                    }),
                )],
            ),
            route(
                "timed",
                &["timed.example.com"],
                vec![retried(
                    Some(2000),
                    Some(500),
                    Some(Retry {
                        attempts: None,
                        codes: Vec::new(),
                        backoff_ms: Some(100),
                    }),
                )],
            ),
            route(
                "none",
                &["none.example.com"],
                vec![retried(None, Some(500), None)],
            ),
        ],
    )]);
    let yaml = golden("retries", &model, &options());
    let config = praxis_loads(&yaml).unwrap();
    // As Praxis reads each cluster's policy (both matches of a rule alike).
    let policies: Vec<Option<praxis_core::config::RetryPolicy>> = config.filter_chains[0]
        .filters
        .iter()
        .filter(|f| f.filter_type == "load_balancer")
        .flat_map(|f| {
            f.config["clusters"]
                .as_sequence()
                .cloned()
                .unwrap_or_default()
        })
        .map(|c| {
            let json = serde_json::to_value(&c).unwrap();
            serde_json::from_value::<praxis_core::config::Cluster>(json)
                .unwrap()
                .retry_policy
        })
        .collect();
    assert_eq!(policies.len(), 6, "a cluster per rule and match");
    assert_eq!(policies[0], policies[1]);
    let codes = policies[0].as_ref().expect("a policy for `codes`");
    assert_eq!(codes.effective_max_retries(), 3);
    assert_eq!(
        codes
            .retriable_status_codes
            .iter()
            .map(|c| c.get())
            .collect::<Vec<_>>(),
        [500, 502]
    );
    use praxis_core::config::RetriableCondition::{ConnectFailure, RefusedStream, Reset};
    assert_eq!(
        codes.retriable_conditions,
        [ConnectFailure, Reset, RefusedStream]
    );
    assert!(codes.allow_non_idempotent() && codes.configured);
    let timed = policies[2].as_ref().expect("a policy for `timed`");
    assert_eq!(timed.effective_max_retries(), 3, "Praxis's default");
    assert!(timed.retriable_status_codes.is_empty());
    assert_eq!(
        (timed.per_try_timeout_ms, timed.request_timeout_ms),
        (Some(500), Some(2000))
    );
    let backoff = timed.backoff.as_ref().unwrap();
    assert_eq!(
        (backoff.base_interval_ms, backoff.max_interval_ms),
        (100, 1000)
    );
    assert_eq!(policies[4], None, "no retry, no policy: Praxis's default");
}

fn tls_route(name: &str, hostnames: &[&str], backends: Vec<Backend>) -> Route {
    Route {
        kind: RouteKind::Tls,
        ..route(name, hostnames, vec![rule(Vec::new(), backends)])
    }
}

fn service(name: &str, address: &str) -> Backend {
    Backend {
        service_address: Some(address.parse().unwrap()),
        ..backend(name, 1, &["10.244.3.10:8443"])
    }
}

fn passthrough(name: &str, port: u16, hostname: Option<&str>, routes: Vec<Route>) -> Listener {
    Listener {
        protocol: Protocol::TlsPassthrough,
        ..http(name, port, hostname, routes)
    }
}

#[test]
fn tls_passthrough_routes_streams_by_server_name_to_the_service() {
    let model = gateway(vec![
        http(
            "web",
            80,
            None,
            vec![route("web", &[], vec![rule(vec![prefix("/")], web())])],
        ),
        passthrough(
            "tls",
            443,
            Some("*.example.com"),
            vec![
                tls_route(
                    "db",
                    &["db.example.com"],
                    vec![service("db", "10.96.0.20:5432")],
                ),
                // Its backend did not resolve: its name is closed, not
                // handed to the wildcard's route.
                tls_route("broken", &["broken.example.com"], Vec::new()),
                tls_route("rest", &[], vec![service("rest", "10.96.0.21:8443")]),
            ],
        ),
        passthrough(
            "any",
            443,
            None,
            vec![tls_route(
                "other",
                &[],
                vec![service("other", "10.96.0.22:8443")],
            )],
        ),
        passthrough("idle", 8443, None, Vec::new()),
    ]);
    let yaml = golden("passthrough", &model, &options());
    let config = praxis_loads(&yaml).unwrap();
    assert!(config.insecure_options.allow_private_upstreams);
    let value: serde_json::Value = serde_json::from_str(yaml.split_once('\n').unwrap().1).unwrap();
    let listener = &value["listeners"][1];
    assert_eq!(listener["protocol"], "tcp");
    assert!(
        listener.get("tls").is_none(),
        "passthrough never terminates"
    );
    let router = &value["filter_chains"][1]["filters"][0];
    assert_eq!(router["filter"], "sni_router");
    assert_eq!(
        router["routes"],
        json!([
            {"server_names": ["db.example.com"], "upstream": "10.96.0.20:5432"},
            {"server_names": ["broken.example.com"], "upstream": "127.0.0.1:9"},
            {"server_names": ["*.example.com"], "upstream": "10.96.0.21:8443"}
        ])
    );
    assert_eq!(router["default_upstream"], "10.96.0.22:8443");
    let idle = &value["filter_chains"][2]["filters"][0];
    assert_eq!(
        idle["default_upstream"], "127.0.0.1:9",
        "nothing to reach: closed"
    );
}

#[test]
fn terminating_tls_listeners_share_the_server_name_router_through_a_loopback_hop() {
    use crate::data_plane::model::CertificateFiles;
    let terminate = |name: &str, hostname: &str, routes: Vec<Route>| Listener {
        protocol: Protocol::TlsTerminate,
        certificates: vec![CertificateFiles {
            cert_path: format!("/etc/praxis-tls/{name}.crt"),
            key_path: format!("/etc/praxis-tls/{name}.key"),
        }],
        ..http(name, 8883, Some(hostname), routes)
    };
    let model = gateway(vec![
        passthrough(
            "pass",
            8883,
            Some("abc.example.com"),
            vec![tls_route("db", &[], vec![service("db", "10.96.0.20:8443")])],
        ),
        terminate(
            "term",
            "tls.example.com",
            vec![tls_route(
                "plain",
                &[],
                vec![service("plain", "10.96.0.21:3000")],
            )],
        ),
        terminate(
            "gone",
            "gone.example.com",
            vec![tls_route("gone", &[], Vec::new())],
        ),
        // A listener on the first loopback port: the hop takes the next.
        http(
            "web",
            15100,
            None,
            vec![route("web", &[], vec![rule(vec![prefix("/")], web())])],
        ),
    ]);
    let yaml = golden("tls_terminate", &model, &options());
    praxis_loads(&yaml).unwrap();
    let value: serde_json::Value = serde_json::from_str(yaml.split_once('\n').unwrap().1).unwrap();
    let router = &value["filter_chains"][0]["filters"][0];
    assert_eq!(
        router["routes"],
        json!([
            {"server_names": ["abc.example.com"], "upstream": "10.96.0.20:8443"},
            {"server_names": ["tls.example.com"], "upstream": "127.0.0.1:15101"},
            {"server_names": ["gone.example.com"], "upstream": "127.0.0.1:9"}
        ]),
        "passthrough to the backend; terminate through the hop; nothing to reach: closed"
    );
    let hop = value["listeners"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["address"] == "127.0.0.1:15101")
        .expect("the hop");
    assert_eq!(hop["protocol"], "tcp");
    assert_eq!(hop["upstream"], "10.96.0.21:3000");
    assert_eq!(
        hop["tls"]["certificates"],
        json!([{"cert_path": "/etc/praxis-tls/term.crt", "key_path": "/etc/praxis-tls/term.key"}])
    );
    assert_eq!(value["listeners"].as_array().unwrap().len(), 3);
}

#[test]
fn a_tls_route_rule_takes_one_backend() {
    let two = Rule {
        backends: vec![
            service("a", "10.96.0.20:443"),
            service("b", "10.96.0.21:443"),
        ],
        ..rule(Vec::new(), Vec::new())
    };
    let why = check_rule(RouteKind::Tls, &two, DataPlane::Pontoon).unwrap_err();
    assert!(why.contains("sends a server name to one address"), "{why}");
    let model = gateway(vec![passthrough(
        "tls",
        443,
        None,
        vec![Route {
            kind: RouteKind::Tls,
            ..route("two", &["a.example.com"], vec![two])
        }],
    )]);
    assert!(matches!(
        generate(&model, &options()),
        Err(ConfigError::UnsupportedRules(r)) if r.len() == 1
    ));
}

fn tcp(name: &str, port: u16, routes: Vec<Route>) -> Listener {
    Listener {
        protocol: Protocol::Tcp,
        ..http(name, port, None, routes)
    }
}

fn tcp_route(name: &str, backends: Vec<Backend>) -> Route {
    Route {
        kind: RouteKind::Tcp,
        ..route(name, &[], vec![rule(Vec::new(), backends)])
    }
}

#[test]
fn a_tcp_listener_sends_every_connection_to_its_oldest_routes_service() {
    let model = gateway(vec![
        tcp(
            "db",
            5432,
            vec![
                tcp_route("oldest", vec![service("db", "10.96.0.20:5432")]),
                // Attached too, but only the oldest route is served.
                tcp_route("newer", vec![service("other", "10.96.0.21:5432")]),
            ],
        ),
        // Its backend did not resolve: refused, never sent elsewhere.
        tcp("broken", 9300, vec![tcp_route("broken", Vec::new())]),
        tcp("idle", 9301, Vec::new()),
        // A second port to the same Service: Praxis serves both with one
        // pipeline, which it allows only when their chains are the same.
        tcp(
            "db-alt",
            15432,
            vec![tcp_route("alt", vec![service("db", "10.96.0.20:5432")])],
        ),
    ]);
    let yaml = golden("tcp", &model, &options());
    let config = praxis_loads(&yaml).unwrap();
    assert!(config.insecure_options.allow_private_upstreams);
    let value: serde_json::Value = serde_json::from_str(yaml.split_once('\n').unwrap().1).unwrap();
    let listeners = value["listeners"].as_array().unwrap();
    let upstreams: Vec<&str> = listeners
        .iter()
        .map(|l| l["upstream"].as_str().unwrap())
        .collect();
    assert_eq!(
        upstreams,
        [
            "10.96.0.20:5432",
            "127.0.0.1:9",
            "127.0.0.1:9",
            "10.96.0.20:5432"
        ]
    );
    for listener in listeners {
        assert_eq!(listener["protocol"], "tcp");
        assert_eq!(listener["tcp_session_timeout_ms"], 3_600_000);
        assert_eq!(listener["filter_chains"], json!([]));
        assert!(listener.get("tls").is_none());
    }
    assert_eq!(listeners[0]["name"], "tcp-5432");
}

#[test]
fn a_tcp_route_rule_splits_by_weight_with_a_connect_filter_on_pontoons_data_plane() {
    let split = Rule {
        backends: vec![
            Backend {
                weight: 3,
                ..service("a", "10.96.0.20:3000")
            },
            service("b", "10.96.0.21:3000"),
            // Did not resolve: its share of connections is refused.
            Backend {
                service_address: None,
                endpoints: Vec::new(),
                ..service("gone", "10.96.0.22:3000")
            },
        ],
        ..rule(Vec::new(), Vec::new())
    };
    let why = check_rule(RouteKind::Tcp, &split, DataPlane::StockPraxis).unwrap_err();
    assert!(
        why.contains("needs Pontoon's data plane") && why.contains("server speaks first"),
        "{why}"
    );
    assert!(check_rule(RouteKind::Tcp, &split, DataPlane::Pontoon).is_ok());
    let mut one = split.clone();
    one.backends[1].weight = 0;
    one.backends[2].weight = 0;
    let model = gateway(vec![
        tcp(
            "tcp",
            9300,
            vec![Route {
                kind: RouteKind::Tcp,
                ..route("split", &[], vec![split])
            }],
        ),
        tcp(
            "one",
            9301,
            vec![Route {
                kind: RouteKind::Tcp,
                ..route("one", &[], vec![one])
            }],
        ),
    ]);
    let yaml = golden("tcp_weights", &model, &options());
    praxis_loads(&yaml).unwrap();
    let value: serde_json::Value = serde_json::from_str(yaml.split_once('\n').unwrap().1).unwrap();
    let (split, one) = (&value["listeners"][0], &value["listeners"][1]);
    // Dialled at once (a static upstream), the filter choosing the address.
    assert_eq!(split["upstream"], "10.96.0.20:3000");
    assert_eq!(split["filter_chains"], json!(["tcp-9300"]));
    assert_eq!(
        split["tcp_session_timeout_ms"], 3_599_999,
        "a session timeout of its own: Praxis serves TCP listeners alike as one"
    );
    assert_eq!(
        value["filter_chains"][0]["filters"][0],
        json!({ "filter": "pontoon_tcp_weights", "backends": [
            { "address": "10.96.0.20:3000", "weight": 3 },
            { "address": "10.96.0.21:3000", "weight": 1 },
            { "address": "127.0.0.1:9", "weight": 1 }
        ] })
    );
    // Weight 0 is no share: the other backend takes every connection, with
    // no filter.
    assert_eq!(one["upstream"], "10.96.0.20:3000");
    assert_eq!(one["filter_chains"], json!([]));
    assert_eq!(one["tcp_session_timeout_ms"], 3_600_000);
}
