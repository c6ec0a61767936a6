//! The Carrier2 configuration: Gefyra's schema, written as the YAML that
//! `/tmp/config.yaml` in the patched container holds, and read back.
//!
//! The YAML is written by hand (no YAML crate in the module): block style,
//! every string double-quoted with JSON escapes, which YAML reads as the
//! same string.

use pontoon_provider_sdk::bridge_mount::bridges::{Bridge, MatchType, RequestMatch, Rule};

use std::collections::BTreeMap;

use pontoon_provider_sdk::k8s_openapi::api::core::v1::Container;

use crate::{
    names,
    probes::{Probes, container_ports, probes},
};

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

fn match_type(kind: MatchType) -> &'static str {
    match kind {
        MatchType::Exact => "exact",
        MatchType::Prefix => "prefix",
        MatchType::Regex => "regex",
    }
}

/// Carrier2's `bridges:` block of one proxy, at `indent`.
fn bridges_yaml(out: &mut String, indent: &str, bridges: &BTreeMap<String, BridgeEntry>) {
    if bridges.is_empty() {
        out.push_str(&format!("{indent}bridges: {{}}\n"));
        return;
    }
    out.push_str(&format!("{indent}bridges:\n"));
    for (name, entry) in bridges {
        out.push_str(&format!("{indent}  {}:\n", quoted(name)));
        out.push_str(&format!(
            "{indent}    endpoint: {}\n",
            quoted(&entry.endpoint)
        ));
        if entry.rules.is_empty() {
            out.push_str(&format!("{indent}    rules: []\n"));
            continue;
        }
        out.push_str(&format!("{indent}    rules:\n"));
        for rule in &entry.rules {
            if rule.matches.is_empty() {
                out.push_str(&format!("{indent}      - match: []\n"));
                continue;
            }
            out.push_str(&format!("{indent}      - match:\n"));
            for m in &rule.matches {
                let at = format!("{indent}              ");
                match m {
                    RequestMatch::Header(h) => {
                        out.push_str(&format!("{indent}          - matchHeader:\n"));
                        out.push_str(&format!("{at}name: {}\n", quoted(&h.name)));
                        out.push_str(&format!("{at}value: {}\n", quoted(&h.value)));
                        out.push_str(&format!("{at}type: {}\n", match_type(h.match_type)));
                    }
                    RequestMatch::Path(p) => {
                        out.push_str(&format!("{indent}          - matchPath:\n"));
                        out.push_str(&format!("{at}path: {}\n", quoted(&p.path)));
                        out.push_str(&format!("{at}type: {}\n", match_type(p.match_type)));
                    }
                }
            }
        }
    }
}

/// A whole Carrier2 config; the fixed settings are Gefyra's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CarrierConfig {
    pub probes: Option<Probes>,
    pub proxy: Vec<Proxy>,
}

/// `text` as a YAML double-quoted scalar on one line. JSON's escaping is
/// not enough: YAML also refuses DEL, the C1 controls and the noncharacters
/// unescaped (a file name in `providerParameter` may hold any of them), so
/// every character outside YAML's printable set is written as `\u`/`\U`.
fn quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            ' '..='~' => out.push(c),
            '\u{A0}'..='\u{D7FF}' | '\u{E000}'..='\u{FEFE}' | '\u{FF00}'..='\u{FFFD}' => {
                out.push(c)
            }
            '\u{10000}'.. => out.push(c),
            _ => out.push_str(&format!("\\u{:04X}", u32::from(c))),
        }
    }
    out.push('"');
    out
}

fn int_list(out: &mut String, indent: &str, key: &str, values: &[i32]) {
    if values.is_empty() {
        out.push_str(&format!("{indent}{key}: []\n"));
        return;
    }
    out.push_str(&format!("{indent}{key}:\n"));
    for value in values {
        out.push_str(&format!("{indent}  - {value}\n"));
    }
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
        let mut out = String::new();
        out.push_str("version: 1\n");
        out.push_str("threads: 4\n");
        out.push_str(&format!("error_log: {}\n", quoted(ERROR_LOG)));
        out.push_str(&format!("pid_file: {}\n", quoted(PID_FILE)));
        out.push_str(&format!("upgrade_sock: {}\n", quoted(UPGRADE_SOCK)));
        out.push_str("upstream_keepalive_pool_size: 100\n");
        if let Some(probes) = &self.probes {
            out.push_str("probes:\n");
            int_list(&mut out, "  ", "httpGet", &probes.http_get);
            int_list(&mut out, "  ", "httpsGet", &probes.https_get);
        }
        if self.proxy.is_empty() {
            out.push_str("proxy: []\n");
            return out;
        }
        out.push_str("proxy:\n");
        for proxy in &self.proxy {
            out.push_str(&format!("  - port: {}\n", proxy.port));
            if let Some(tls) = &proxy.tls {
                out.push_str("    tls:\n");
                out.push_str(&format!(
                    "      certificate: {}\n",
                    quoted(&tls.certificate)
                ));
                out.push_str(&format!("      key: {}\n", quoted(&tls.key)));
                if let Some(sni) = &tls.sni {
                    out.push_str(&format!("      sni: {}\n", quoted(sni)));
                }
            }
            if proxy.cluster_upstream.is_empty() {
                out.push_str("    clusterUpstream: []\n");
            } else {
                out.push_str("    clusterUpstream:\n");
                for upstream in &proxy.cluster_upstream {
                    out.push_str(&format!("      - {}\n", quoted(upstream)));
                }
            }
            bridges_yaml(&mut out, "    ", &proxy.bridges);
        }
        out
    }
}

/// Whether a Carrier2 config (as read back from a pod) has at least one
/// proxy with a non-empty `clusterUpstream`. A small reader for the shapes a
/// YAML emitter gives a list: block items below the key, or a flow list.
pub fn has_cluster_upstream(yaml: &str) -> bool {
    let lines: Vec<&str> = yaml.lines().collect();
    for (index, line) in lines.iter().enumerate() {
        let content = line.trim_start();
        let indent = line.len() - content.len();
        // The key may open a list item (`- clusterUpstream:`).
        let (content, indent) = match content.strip_prefix("- ") {
            Some(rest) => (rest.trim_start(), indent + 2),
            None => (content, indent),
        };
        let Some(rest) = content
            .strip_prefix("clusterUpstream:")
            .or_else(|| content.strip_prefix("\"clusterUpstream\":"))
        else {
            continue;
        };
        let value = rest.split(" #").next().unwrap_or_default().trim();
        if !value.is_empty() {
            let inner = value.trim_start_matches('[').trim_end_matches(']').trim();
            if value.starts_with('[') && !inner.is_empty() {
                return true;
            }
            continue;
        }
        let next = lines[index + 1..]
            .iter()
            .find(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'));
        if let Some(next) = next {
            let next_content = next.trim_start();
            let next_indent = next.len() - next_content.len();
            if next_indent >= indent
                && next_content.starts_with('-')
                && !next_content.trim_start_matches('-').trim().is_empty()
            {
                return true;
            }
        }
    }
    false
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use pontoon_provider_sdk::bridge_mount::bridges::{HeaderMatch, PathMatch, PortRoute};

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
    fn the_yaml_has_gefyras_fields_in_gefyras_order() {
        assert_eq!(
            sample_config().to_yaml(),
            r#"version: 1
threads: 4
error_log: "/tmp/carrier.log"
pid_file: "/tmp/carrier2.pid"
upgrade_sock: "/tmp/carrier2.sock"
upstream_keepalive_pool_size: 100
probes:
  httpGet:
    - 8080
  httpsGet: []
proxy:
  - port: 80
    clusterUpstream:
      - "web-app-gefyra-svc.shop.svc.cluster.local:80"
    bridges: {}
  - port: 8443
    tls:
      certificate: "/tmp/from_k8s_secret_cert_8443.pem"
      key: "/etc/tls/key.pem"
      sni: "shop.example.com"
    clusterUpstream:
      - "web-app-gefyra-svc.shop.svc.cluster.local:8443"
    bridges: {}
"#
        );
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
        for text in [
            "plain",
            "quote \" backslash \\ tab \t newline \n return \r",
            "DEL \u{7f} C1 \u{85}\u{9f} BOM \u{feff} nonchar \u{fffe} NUL \u{0}",
            "ship \u{1F6A2}, accents \u{e9}, - a: [b] # c &d *e !f",
        ] {
            let yaml = format!("k: {}\n", quoted(text));
            assert_eq!(yaml.lines().count(), 1, "one line: {yaml}");
            let parsed: serde_json::Value =
                yaml_serde::from_str(&yaml).unwrap_or_else(|e| panic!("{yaml}: {e}"));
            assert_eq!(parsed["k"], text, "{yaml}");
        }
    }
}
