//! The Carrier2 configuration: Gefyra's schema, written as the YAML that
//! `/tmp/config.yaml` in the patched container holds, and read back.
//!
//! The document is written by `serde_json` (pretty-printed): JSON is a YAML
//! document, and it double-quotes every string with JSON's escapes. A YAML
//! emitter quotes only what a YAML 1.2 reader could misread, and Carrier2
//! reads YAML 1.1, where a bare `n`, `yes` or `off` is a boolean: a header
//! value `n` written plain made Carrier2 refuse the whole config. Lines are
//! never folded. The document's structs keep Gefyra's field names and order;
//! configs are read back with `yaml_serde`, which also reads the block style
//! Gefyra's own operator writes.

use pontoon_provider_sdk::bridge_mount::bridges::{Bridge, Rule};

use std::collections::BTreeMap;

use pontoon_provider_sdk::k8s_openapi::api::core::v1::Container;

use crate::{
    names,
    probes::{Probes, container_ports, probes},
};

mod document;

/// Where the patched container keeps Carrier2's config and its files.
pub const CONFIG_PATH: &str = "/tmp/config.yaml";
pub const ERROR_LOG: &str = "/tmp/carrier.log";
pub const PID_FILE: &str = "/tmp/carrier2.pid";
pub const UPGRADE_SOCK: &str = "/tmp/carrier2.sock";

/// TLS termination of one proxied port (file paths in the container).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tls {
    pub certificate: String,
    pub key: String,
    pub sni: Option<String>,
}

/// One proxied container port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Proxy {
    pub port: i32,
    pub tls: Option<Tls>,
    pub cluster_upstream: Vec<String>,
    /// Bridge name → where its matching requests on this port go.
    pub bridges: BTreeMap<String, BridgeEntry>,
}

/// One bridge on one port, as Carrier2's `bridges` map holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BridgeEntry {
    pub endpoint: String,
    pub rules: Vec<Rule>,
}

/// The bridges that take requests on `port`: each bridge with a route for
/// it, under its name (the host lists every name once).
fn bridges_on(bridges: &[Bridge], port: i32) -> BTreeMap<String, BridgeEntry> {
    bridges
        .iter()
        .filter_map(|bridge| {
            let route = bridge.ports.iter().find(|r| i32::from(r.port) == port)?;
            let entry = BridgeEntry {
                endpoint: route.endpoint.clone(),
                rules: bridge.rules.clone(),
            };
            Some((bridge.name.clone(), entry))
        })
        .collect()
}

/// A whole Carrier2 config; the fixed settings are Gefyra's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CarrierConfig {
    pub probes: Option<Probes>,
    pub proxy: Vec<Proxy>,
}

impl CarrierConfig {
    /// The config for the patched `container`: each of its ports proxied to
    /// the shadow Service `service` in `namespace` (with the TLS the mount
    /// asks for that port) unless a request matches one of the mount's
    /// `bridges` on that port, and the probe ports it answers itself; an
    /// error says which probe Carrier2 cannot answer.
    pub fn for_container(
        container: &Container,
        tls: &BTreeMap<i32, Tls>,
        service: &str,
        namespace: &str,
        bridges: &[Bridge],
    ) -> Result<Self, String> {
        let ports = container_ports(container);
        Ok(Self {
            probes: probes(container, &ports)?,
            proxy: ports
                .iter()
                .map(|&port| Proxy {
                    port,
                    tls: tls.get(&port).cloned(),
                    cluster_upstream: vec![names::cluster_upstream(service, namespace, port)],
                    bridges: bridges_on(bridges, port),
                })
                .collect(),
        })
    }

    pub fn to_yaml(&self) -> String {
        // Only strings, integers, sequences and maps: nothing to refuse.
        let json = serde_json::to_string_pretty(&document::Document::of(self)).unwrap_or_default();
        let mut text = String::with_capacity(json.len() + 1);
        // JSON's syntax is ASCII, so whatever this escapes is inside a string.
        for c in json.chars() {
            if yaml_holds_unescaped(c) {
                text.push(c);
            } else {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    text.push_str(&format!("\\u{unit:04x}"));
                }
            }
        }
        text.push('\n');
        text
    }
}

/// Whether YAML (1.1 and 1.2) reads `c` as itself inside a double-quoted
/// string: its printable characters without the byte-order mark, and without
/// NEL and the Unicode line and paragraph separators, which YAML 1.1 folds.
/// JSON has already escaped the C0 controls, `"` and `\\`.
fn yaml_holds_unescaped(c: char) -> bool {
    matches!(c,
        '\t' | '\n' | '\r' | ' '..='~' | '\u{a0}'..='\u{d7ff}' | '\u{e000}'..='\u{fffd}' | '\u{10000}'..)
        && !matches!(c, '\u{feff}' | '\u{2028}' | '\u{2029}')
}

/// Whether a Carrier2 config (as read back from a pod, written by Pontoon
/// or by Gefyra's own operator) has at least one proxy with a non-empty
/// `clusterUpstream`; a config that is not YAML has none.
pub fn has_cluster_upstream(yaml: &str) -> bool {
    let Ok(config) = yaml_serde::from_str::<serde_json::Value>(yaml) else {
        return false;
    };
    config["proxy"].as_array().is_some_and(|proxies| {
        proxies.iter().any(|p| {
            p["clusterUpstream"]
                .as_array()
                .is_some_and(|list| !list.is_empty())
        })
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use pontoon_provider_sdk::bridge_mount::bridges::{
        HeaderMatch, MatchType, PathMatch, PortRoute, RequestMatch,
    };

    pub(crate) fn sample_config() -> CarrierConfig {
        CarrierConfig {
            probes: Some(Probes {
                http_get: vec![8080],
                https_get: vec![],
            }),
            proxy: vec![
                Proxy {
                    port: 80,
                    tls: None,
                    cluster_upstream: vec!["web-app-gefyra-svc.shop.svc.cluster.local:80".into()],
                    bridges: BTreeMap::new(),
                },
                Proxy {
                    port: 8443,
                    tls: Some(Tls {
                        certificate: "/tmp/from_k8s_secret_cert_8443.pem".into(),
                        key: "/etc/tls/key.pem".into(),
                        sni: Some("shop.example.com".into()),
                    }),
                    cluster_upstream: vec!["web-app-gefyra-svc.shop.svc.cluster.local:8443".into()],
                    bridges: BTreeMap::new(),
                },
            ],
        }
    }

    fn bridge(name: &str, rules: Vec<Rule>, ports: &[(u16, &str)]) -> Bridge {
        Bridge {
            name: name.into(),
            rules,
            ports: ports
                .iter()
                .map(|&(port, endpoint)| PortRoute {
                    port,
                    endpoint: endpoint.into(),
                })
                .collect(),
        }
    }

    #[test]
    fn the_config_has_gefyras_fields_in_gefyras_order() {
        assert_eq!(
            sample_config().to_yaml(),
            r#"{
  "version": 1,
  "threads": 4,
  "error_log": "/tmp/carrier.log",
  "pid_file": "/tmp/carrier2.pid",
  "upgrade_sock": "/tmp/carrier2.sock",
  "upstream_keepalive_pool_size": 100,
  "probes": {
    "httpGet": [
      8080
    ],
    "httpsGet": []
  },
  "proxy": [
    {
      "port": 80,
      "clusterUpstream": [
        "web-app-gefyra-svc.shop.svc.cluster.local:80"
      ],
      "bridges": {}
    },
    {
      "port": 8443,
      "tls": {
        "certificate": "/tmp/from_k8s_secret_cert_8443.pem",
        "key": "/etc/tls/key.pem",
        "sni": "shop.example.com"
      },
      "clusterUpstream": [
        "web-app-gefyra-svc.shop.svc.cluster.local:8443"
      ],
      "bridges": {}
    }
  ]
}
"#
        );
    }

    #[test]
    fn every_string_is_double_quoted_so_yaml_1_1_words_stay_strings() {
        // Carrier2 reads YAML 1.1: each of these, written bare, is a
        // boolean, a null or a number there.
        let words = [
            "n", "y", "N", "Yes", "no", "on", "OFF", "~", "null", "0x1f", "0o17", "1e3", "1_000",
            "12:30", ".inf", "-",
        ];
        for word in words {
            let mut config = sample_config();
            config.proxy[1].tls.as_mut().unwrap().sni = Some(word.into());
            let yaml = config.to_yaml();
            assert!(
                yaml.contains(&format!("\"sni\": \"{word}\"")),
                "{word} is not double-quoted:\n{yaml}"
            );
        }
    }

    #[test]
    fn bridges_go_to_the_proxy_of_their_remote_port_and_parse_back_in_gefyras_shape() {
        let header = RequestMatch::Header(HeaderMatch {
            name: "x-gefyra".into(),
            value: "peer: \"1\"".into(),
            match_type: MatchType::Exact,
        });
        let path = RequestMatch::Path(PathMatch {
            path: "^/b(/|$)".into(),
            match_type: MatchType::Regex,
        });
        let bridges = vec![
            bridge(
                "bridge-a",
                vec![Rule {
                    matches: vec![header.clone(), path.clone()],
                }],
                &[(80, "192.168.101.1:8080")],
            ),
            bridge(
                "bridge-b",
                vec![
                    Rule {
                        matches: vec![path],
                    },
                    Rule { matches: vec![] },
                ],
                &[(8443, "10.1.2.3:9000")],
            ),
        ];
        let mut config = sample_config();
        config.proxy[0].bridges = bridges_on(&bridges, 80);
        config.proxy[1].bridges = bridges_on(&bridges, 8443);
        let parsed: serde_json::Value = yaml_serde::from_str(&config.to_yaml()).unwrap();
        assert_eq!(
            parsed["proxy"][0]["bridges"],
            serde_json::json!({"bridge-a": {"endpoint": "192.168.101.1:8080", "rules": [{"match": [
                {"matchHeader": {"name": "x-gefyra", "value": "peer: \"1\"", "type": "exact"}},
                {"matchPath": {"path": "^/b(/|$)", "type": "regex"}}
            ]}]}})
        );
        assert_eq!(
            parsed["proxy"][1]["bridges"],
            serde_json::json!({"bridge-b": {"endpoint": "10.1.2.3:9000", "rules": [
                {"match": [{"matchPath": {"path": "^/b(/|$)", "type": "regex"}}]},
                {"match": []}
            ]}})
        );
        // A port no bridge maps keeps an empty map.
        assert!(bridges_on(&bridges, 9999).is_empty());
    }

    #[test]
    fn the_yaml_parses_back_to_the_same_values() {
        let mut config = sample_config();
        // Strings YAML would misread unquoted stay strings.
        config.proxy[1].tls.as_mut().unwrap().sni = Some("yes: \"no\" # 'x'\n".into());
        let parsed: serde_json::Value = yaml_serde::from_str(&config.to_yaml()).unwrap();
        assert_eq!(
            parsed,
            serde_json::json!({
                "version": 1,
                "threads": 4,
                "error_log": "/tmp/carrier.log",
                "pid_file": "/tmp/carrier2.pid",
                "upgrade_sock": "/tmp/carrier2.sock",
                "upstream_keepalive_pool_size": 100,
                "probes": {"httpGet": [8080], "httpsGet": []},
                "proxy": [
                    {"port": 80, "clusterUpstream": ["web-app-gefyra-svc.shop.svc.cluster.local:80"], "bridges": {}},
                    {"port": 8443,
                     "tls": {"certificate": "/tmp/from_k8s_secret_cert_8443.pem", "key": "/etc/tls/key.pem",
                             "sni": "yes: \"no\" # 'x'\n"},
                     "clusterUpstream": ["web-app-gefyra-svc.shop.svc.cluster.local:8443"], "bridges": {}}
                ]
            })
        );
        let bare: serde_json::Value =
            yaml_serde::from_str(&CarrierConfig::default().to_yaml()).unwrap();
        assert_eq!(bare["proxy"], serde_json::json!([]));
        assert!(bare.get("probes").is_none());
    }

    #[test]
    fn cluster_upstream_is_found_in_every_list_shape() {
        assert!(has_cluster_upstream(&sample_config().to_yaml()));
        // PyYAML's default block style (Gefyra's writer): items at the key's indent.
        assert!(has_cluster_upstream(
            "proxy:\n- port: 80\n  clusterUpstream:\n  - svc.ns.svc.cluster.local:80\n  bridges: {}\n"
        ));
        assert!(has_cluster_upstream("proxy:\n- clusterUpstream: [a:1]\n"));
        assert!(!has_cluster_upstream(
            "proxy:\n- port: 80\n  clusterUpstream: []\n"
        ));
        assert!(!has_cluster_upstream(
            "proxy:\n- port: 80\n  clusterUpstream:\n  bridges: {}\n"
        ));
        assert!(!has_cluster_upstream("version: 1\nproxy: []\n"));
        assert!(!has_cluster_upstream(""));
        let mut empty = sample_config();
        for proxy in &mut empty.proxy {
            proxy.cluster_upstream.clear();
        }
        assert!(!has_cluster_upstream(&empty.to_yaml()));
    }

    #[test]
    fn any_string_is_written_as_yaml_that_reads_back_the_same() {
        let long = "a".repeat(300) + " " + &"b".repeat(300);
        for text in [
            "plain",
            "quote \" backslash \\ tab \t newline \n return \r",
            "DEL \u{7f} C1 \u{85}\u{9f} BOM \u{feff} nonchar \u{fffe} NUL \u{0}",
            "ship \u{1F6A2}, accents \u{e9}, - a: [b] # c &d *e !f",
            "true",
            "0x1F",
            "~",
            " leading and trailing ",
            &long,
        ] {
            let mut config = sample_config();
            config.proxy[1].tls.as_mut().unwrap().sni = Some(text.to_string());
            config.proxy[0].bridges = BTreeMap::from([(
                text.to_string(),
                BridgeEntry {
                    endpoint: text.to_string(),
                    rules: vec![],
                },
            )]);
            let yaml = config.to_yaml();
            let parsed: serde_json::Value =
                yaml_serde::from_str(&yaml).unwrap_or_else(|e| panic!("{yaml}: {e}"));
            assert_eq!(parsed["proxy"][1]["tls"]["sni"], text, "{yaml}");
            assert_eq!(
                parsed["proxy"][0]["bridges"][text]["endpoint"], text,
                "{yaml}"
            );
            // Never folded: a long string stays on one line.
            if text == long {
                assert!(yaml.lines().any(|l| l.contains(&long)), "{yaml}");
            }
        }
    }
}
