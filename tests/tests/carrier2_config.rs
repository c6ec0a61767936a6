//! Property test: every Carrier2 configuration carrier2mount generates, for
//! any container it accepts (ports, named ports, probes of every kind and
//! scheme, TLS on some ports with any file names and SNI, bridges with rules
//! of every kind of match on some of its ports), passes the test
//! bed's Carrier2 schema check (`carrier2 -c FILE -t`, strict: no unknown or
//! duplicate keys, every address `host:port`); a container it does not
//! accept gets a message naming the container. Nothing panics.

use std::{collections::BTreeMap, path::Path, process::Command};

use carrier2mount::carrier_config::{CarrierConfig, Tls};
use k8s_openapi::{
    api::core::v1::{Container, ContainerPort, ExecAction, HTTPGetAction, Probe, TCPSocketAction},
    apimachinery::pkg::util::intstr::IntOrString,
};
use pontoon_provider_sdk::bridge_mount::bridges::{
    Bridge, HeaderMatch, MatchType, PathMatch, PortRoute, RequestMatch, Rule,
};
use proptest::{prelude::*, test_runner::TestCaseError};

/// A DNS label, as the names carrier2mount validated are (the shadow
/// Service and the target namespace).
fn dns_label() -> impl Strategy<Value = String> {
    "[a-z]([-a-z0-9]{0,61}[a-z0-9])?"
}

/// Any text, quotes, newlines, YAML indicators and non-ASCII included.
fn any_text() -> impl Strategy<Value = String> {
    prop_oneof![
        "\\PC{0,40}",
        "[ -~]{0,40}",
        Just(String::new()),
        Just("- a: b\n  c: [d, {e: f}]\n# not a comment\n---\n".to_string()),
        Just("'\"\\\t\r\n\u{1F6A2}: &anchor *alias !tag".to_string()),
    ]
}

fn match_type() -> impl Strategy<Value = MatchType> {
    prop_oneof![
        Just(MatchType::Exact),
        Just(MatchType::Prefix),
        Just(MatchType::Regex)
    ]
}

/// A value of a match: any text, or for `regex` a pattern that compiles
/// in Go's and Rust's engines alike (what the host lets through).
fn pattern(kind: MatchType) -> BoxedStrategy<String> {
    match kind {
        MatchType::Regex => prop_oneof![
            Just("^/b(/|$)".to_string()),
            Just("peer[0-9]+".to_string()),
            "[a-z]{1,10}".prop_map(|s| format!("^{s}.*$")),
        ]
        .boxed(),
        // Words YAML 1.1 (Carrier2's reader) takes for booleans, nulls and
        // numbers when they are written bare, beside any text.
        _ => prop_oneof![
            3 => any_text(),
            1 => proptest::sample::select(vec![
                "n", "Y", "yes", "No", "on", "OFF", "~", "null", "0x1f", "1_000", "12:30", ".inf",
            ])
            .prop_map(str::to_string),
        ]
        .boxed(),
    }
}

fn request_match() -> impl Strategy<Value = RequestMatch> {
    prop_oneof![
        (match_type(), "[A-Za-z][-A-Za-z0-9]{0,20}").prop_flat_map(|(kind, name)| {
            pattern(kind).prop_map(move |value| {
                RequestMatch::Header(HeaderMatch {
                    name: name.clone(),
                    value,
                    match_type: kind,
                })
            })
        }),
        match_type().prop_flat_map(|kind| {
            pattern(kind).prop_map(move |path| {
                RequestMatch::Path(PathMatch {
                    path,
                    match_type: kind,
                })
            })
        }),
    ]
}

/// Bridges on the container's ports (some on none of them), each with
/// rules of matches of every kind, and endpoints of IPs and DNS names.
fn bridges_for(container: &Container) -> impl Strategy<Value = Vec<Bridge>> + use<> {
    let mut ports: Vec<u16> = container
        .ports
        .iter()
        .flatten()
        .filter_map(|p| u16::try_from(p.container_port).ok())
        .collect();
    ports.push(9);
    let route = (
        prop::sample::select(ports),
        prop_oneof![
            "10\\.[0-9]{1,3}\\.[0-9]{1,3}\\.[0-9]{1,3}".boxed(),
            dns_label()
                .prop_map(|l| format!("{l}.gefyra.svc.cluster.local"))
                .boxed(),
        ],
        1..=65535u16,
    )
        .prop_map(|(port, host, to)| PortRoute {
            port,
            endpoint: format!("{host}:{to}"),
        });
    let rule = prop::collection::vec(request_match(), 1..4).prop_map(|matches| Rule { matches });
    let bridge = (
        dns_label(),
        prop::collection::vec(rule, 1..4),
        prop::collection::vec(route, 1..3),
    )
        .prop_map(|(name, rules, ports)| Bridge { name, rules, ports });
    prop::collection::vec(bridge, 0..4).prop_map(|mut bridges| {
        // The host lists each name once.
        bridges.sort_by(|a, b| a.name.cmp(&b.name));
        bridges.dedup_by(|a, b| a.name == b.name);
        bridges
    })
}

fn port_ref(names: Vec<String>) -> impl Strategy<Value = IntOrString> {
    let named = if names.is_empty() {
        vec!["http".to_string()]
    } else {
        names
    };
    prop_oneof![
        (1..=65535i32).prop_map(IntOrString::Int),
        proptest::sample::select(named).prop_map(IntOrString::String),
    ]
}

fn probe(names: Vec<String>) -> impl Strategy<Value = Option<Probe>> {
    let http = (
        port_ref(names.clone()),
        proptest::option::of(prop_oneof![
            Just("HTTP".to_string()),
            Just("HTTPS".to_string()),
            Just("https".to_string())
        ]),
    )
        .prop_map(|(port, scheme)| Probe {
            http_get: Some(HTTPGetAction {
                port,
                scheme,
                path: Some("/healthz".into()),
                ..HTTPGetAction::default()
            }),
            ..Probe::default()
        });
    let tcp = port_ref(names).prop_map(|port| Probe {
        tcp_socket: Some(TCPSocketAction {
            port,
            ..TCPSocketAction::default()
        }),
        ..Probe::default()
    });
    let exec = Just(Probe {
        exec: Some(ExecAction {
            command: Some(vec!["true".into()]),
        }),
        ..Probe::default()
    });
    proptest::option::weighted(0.6, prop_oneof![4 => http, 1 => tcp, 1 => exec])
}

fn container() -> impl Strategy<Value = Container> {
    proptest::collection::vec(
        (1..=65535i32, proptest::option::of("[a-z][a-z0-9-]{0,13}")),
        1..6,
    )
    .prop_flat_map(|ports| {
        let names: Vec<String> = ports.iter().filter_map(|(_, n)| n.clone()).collect();
        (
            Just(ports),
            probe(names.clone()),
            probe(names.clone()),
            probe(names),
        )
    })
    .prop_map(|(ports, startup, readiness, liveness)| Container {
        name: "app".into(),
        ports: Some(
            ports
                .into_iter()
                .map(|(container_port, name)| ContainerPort {
                    container_port,
                    name,
                    ..ContainerPort::default()
                })
                .collect(),
        ),
        startup_probe: startup,
        readiness_probe: readiness,
        liveness_probe: liveness,
        ..Container::default()
    })
}

/// A file name with anything a file name may hold: quotes, newlines,
/// YAML indicators, non-ASCII.
fn file_name() -> impl Strategy<Value = String> {
    prop_oneof![
        "[^/\\x00]{1,30}",
        "[a-z.]{1,12}",
        Just("'\"\n: - &a *b !c #d".to_string()),
    ]
    .prop_filter("not . or ..", |n| n != "." && n != "..")
}

/// TLS on some of the container's ports: certificate and key file names
/// (made in the check's directory before the check), any SNI.
fn tls_for(container: &Container) -> impl Strategy<Value = BTreeMap<i32, Tls>> + use<> {
    let ports: Vec<i32> = container
        .ports
        .iter()
        .flatten()
        .map(|p| p.container_port)
        .collect();
    proptest::collection::vec(
        (
            proptest::sample::select(ports),
            file_name(),
            file_name(),
            proptest::option::of(any_text()),
        ),
        0..3,
    )
    .prop_map(|entries| {
        entries
            .into_iter()
            .map(|(port, certificate, key, sni)| {
                (
                    port,
                    Tls {
                        certificate,
                        key,
                        sni,
                    },
                )
            })
            .collect()
    })
}

/// `tls` with its file names as files in `dir`, which exist (the check
/// reads them, as Carrier2 does).
fn files_in(dir: &Path, tls: BTreeMap<i32, Tls>) -> std::io::Result<BTreeMap<i32, Tls>> {
    let mut placed = BTreeMap::new();
    for (port, mut entry) in tls {
        for path in [&mut entry.certificate, &mut entry.key] {
            let file = dir.join(&*path);
            std::fs::write(&file, "-----BEGIN CERTIFICATE-----\n")?;
            *path = file.display().to_string();
        }
        placed.insert(port, entry);
    }
    Ok(placed)
}

/// What the test bed's Carrier2 says of `yaml`: `Ok` when its check passed.
fn carrier2_check(carrier2: &Path, dir: &Path, yaml: &str) -> Result<(), String> {
    let file = dir.join("config.yaml");
    std::fs::write(&file, yaml).map_err(|e| e.to_string())?;
    let output = Command::new(carrier2)
        .args(["-c", &file.display().to_string(), "-t"])
        .output()
        .map_err(|e| format!("cannot run {}: {e}", carrier2.display()))?;
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    if output.status.success() && said.contains("Server Test passed") {
        Ok(())
    } else {
        Err(said)
    }
}

#[test]
fn every_generated_carrier2_config_passes_the_test_beds_carrier2_check() {
    let carrier2 = pontoon_tests::pod_bin("carrier2").expect("the test bed's carrier2");
    let dir = std::env::temp_dir().join(format!("carrier2-configs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cases = std::env::var("PONTOON_FUZZ_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(256);
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let (accepted, refused) = (std::cell::Cell::new(0usize), std::cell::Cell::new(0usize));
    let strategy = container().prop_flat_map(|c| {
        let tls = tls_for(&c);
        let bridges = bridges_for(&c);
        (Just(c), tls, dns_label(), dns_label(), bridges)
    });
    let outcome = runner.run(
        &strategy,
        |(container, tls, service, namespace, bridges)| {
            let tls = files_in(&dir, tls).map_err(|e| TestCaseError::fail(e.to_string()))?;
            match CarrierConfig::for_container(&container, &tls, &service, &namespace, &bridges) {
                Ok(config) => {
                    accepted.set(accepted.get() + 1);
                    let yaml = config.to_yaml();
                    carrier2_check(&carrier2, &dir, &yaml).map_err(|said| {
                        TestCaseError::fail(format!(
                            "carrier2 refuses:\n{said}\n--- config ---\n{yaml}"
                        ))
                    })?;
                }
                Err(why) => {
                    refused.set(refused.get() + 1);
                    prop_assert!(
                        why.contains("container `app`"),
                        "a refusal names the container: {why}"
                    );
                }
            }
            Ok(())
        },
    );
    let _ = std::fs::remove_dir_all(&dir);
    if let Err(err) = outcome {
        panic!("{err}");
    }
    let (accepted, refused) = (accepted.get(), refused.get());
    println!("carrier2 configs: {accepted} passed the check, {refused} containers refused");
    // Both outcomes were exercised: a generator that only made refused
    // containers would check nothing.
    assert!(
        accepted > cases as usize / 4,
        "only {accepted} of {cases} accepted"
    );
    assert!(refused > 0, "no container was refused");
}
