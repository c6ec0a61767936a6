//! The Carrier2 configuration (Gefyra's schema, YAML at `/tmp/config.yaml`
//! in the patched container) and the shell scripts that write, reload and
//! read it back over `exec`.
//!
//! The YAML is written by hand (no YAML crate in the module): block style,
//! every string double-quoted with JSON escapes, which YAML reads as the
//! same string.

use pontoon_provider_sdk::{
    bridge_mount::bridges::{Bridge, MatchType, RequestMatch, Rule},
    k8s_openapi::{
        api::core::v1::{Container, Probe},
        apimachinery::pkg::util::intstr::IntOrString,
    },
};

use std::collections::BTreeMap;

use crate::{names, tls::TlsFiles};

pub const CONFIG_PATH: &str = "/tmp/config.yaml";
pub const ERROR_LOG: &str = "/tmp/carrier.log";
pub const PID_FILE: &str = "/tmp/carrier2.pid";
pub const UPGRADE_SOCK: &str = "/tmp/carrier2.sock";
/// What Carrier2 logs when it has taken a config.
pub const BOOTSTRAP_MARK: &str = "Bootstrap starting";
/// What a Rust program prints when it gives up (a config Carrier2 refused).
pub const PANIC_MARK: &str = "thread 'main' panicked";

/// The probe ports Carrier2 answers itself (those it does not proxy).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Probes {
    pub http_get: Vec<i32>,
    pub https_get: Vec<i32>,
}

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

/// The container's startup, readiness and liveness probes with their names.
fn probes_of(container: &Container) -> Vec<(&'static str, &Probe)> {
    [
        ("startupProbe", container.startup_probe.as_ref()),
        ("readinessProbe", container.readiness_probe.as_ref()),
        ("livenessProbe", container.liveness_probe.as_ref()),
    ]
    .into_iter()
    .filter_map(|(name, probe)| probe.map(|p| (name, p)))
    .collect()
}

/// Probes Carrier2 cannot stand in for: it answers HTTP(S) GET probes only.
/// The message names the probe and the container.
pub fn check_probes(container: &Container) -> Result<(), String> {
    for (name, probe) in probes_of(container) {
        let kind = if probe.exec.is_some() {
            "an exec"
        } else if probe.tcp_socket.is_some() {
            "a tcpSocket"
        } else if probe.grpc.is_some() {
            "a grpc"
        } else {
            continue;
        };
        return Err(format!(
            "container `{}` has {kind} {name}; Carrier2 can only answer httpGet probes, \
             so carrier2mount cannot take this container over (use an httpGet probe or none)",
            container.name
        ));
    }
    Ok(())
}

/// The port number of an httpGet probe, resolving a named port.
fn probe_port(container: &Container, name: &str, port: &IntOrString) -> Result<i32, String> {
    match port {
        IntOrString::Int(number) => Ok(*number),
        IntOrString::String(text) => {
            if let Ok(number) = text.parse() {
                return Ok(number);
            }
            container
                .ports
                .iter()
                .flatten()
                .find(|p| p.name.as_deref() == Some(text.as_str()))
                .map(|p| p.container_port)
                .ok_or_else(|| {
                    format!(
                        "the {name} of container `{}` uses port `{text}`, which the container does not name",
                        container.name
                    )
                })
        }
    }
}

/// The `probes` section: the HTTP and HTTPS GET probe ports that are not
/// proxied anyway; `None` when the container has no probes.
pub fn probes(container: &Container, proxied: &[i32]) -> Result<Option<Probes>, String> {
    check_probes(container)?;
    let all = probes_of(container);
    if all.is_empty() {
        return Ok(None);
    }
    let mut result = Probes::default();
    for (name, probe) in all {
        let Some(get) = &probe.http_get else { continue };
        let port = probe_port(container, name, &get.port)?;
        if proxied.contains(&port) {
            continue;
        }
        let https = get
            .scheme
            .as_deref()
            .is_some_and(|s| s.eq_ignore_ascii_case("https"));
        let list = if https {
            &mut result.https_get
        } else {
            &mut result.http_get
        };
        if !list.contains(&port) {
            list.push(port);
        }
    }
    result.http_get.sort_unstable();
    result.https_get.sort_unstable();
    Ok(Some(result))
}

/// The container ports Carrier2 proxies, in the container's order, once each.
pub fn container_ports(container: &Container) -> Vec<i32> {
    let mut ports: Vec<i32> = Vec::new();
    for port in container.ports.iter().flatten() {
        if !ports.contains(&port.container_port) {
            ports.push(port.container_port);
        }
    }
    ports
}

/// A here-document delimiter that no line of `content` equals.
fn delimiter(content: &str) -> String {
    let mut candidate = "PONTOON_EOF".to_string();
    let mut n = 0;
    while content.lines().any(|line| line == candidate) {
        n += 1;
        candidate = format!("PONTOON_EOF_{n}");
    }
    candidate
}

/// Content as a file holds it after a here-document: ending in a newline.
pub fn as_file(content: &str) -> String {
    if content.ends_with('\n') {
        content.to_string()
    } else {
        format!("{content}\n")
    }
}

fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// The files carrier2mount keeps in a patched container: TLS material first,
/// the config last (Carrier2 reads the config, which names the others).
pub fn desired_files(config: &CarrierConfig, tls: &TlsFiles) -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = tls
        .iter()
        .map(|(path, content)| (path.clone(), as_file(content)))
        .collect();
    files.push((CONFIG_PATH.to_string(), as_file(&config.to_yaml())));
    files
}

/// What [`configure_script`] prints when every file already holds its
/// content (and Carrier2 is left alone).
pub const UNCHANGED_MARK: &str = "carrier2mount: config unchanged";

/// A script (for `busybox sh` on stdin) that compares every file with what
/// it should hold and, unless all do, writes them and reloads Carrier2 (see
/// [`write_script`]): one exec per pod and change, not a read-back and then
/// a write (each exec is a round trip through the API server and kubelet).
///
/// Each file is framed by its path and followed by `|`, so a difference in
/// trailing newlines is still a difference (`$(...)` strips them).
pub fn configure_script(files: &[(String, String)]) -> String {
    let want: String = files
        .iter()
        .map(|(path, content)| format!("== {path}\n{content}|"))
        .collect();
    let end = delimiter(&want);
    let got: String = files
        .iter()
        .map(|(path, _)| {
            let quoted = shell_quote(path);
            format!("printf '== %s\\n' {quoted}; cat {quoted} 2>/dev/null; printf '|'; ")
        })
        .collect();
    let mut script = format!(
        "want=$(cat <<'{end}'\n{want}\n{end}\n)\n\
         got=$({{ {got}}})\n\
         if [ \"$got\" = \"$want\" ]; then echo '{UNCHANGED_MARK}'; exit 0; fi\n"
    );
    script.push_str(&write_script(files));
    script
}

/// Every script ends by exiting: the shell must not wait for the end of its
/// input, which not every exec transport passes on.
pub const SCRIPT_END: &str = "exit 0\n";

/// A script that prints the config.
pub fn cat_config_script() -> String {
    format!("cat {CONFIG_PATH}\n{SCRIPT_END}")
}

/// A script (for `busybox sh` on stdin) that writes every file, reloads
/// Carrier2 with the config and prints its log. It exits non-zero, and
/// empties the config so that a later read-back does not take it for done,
/// when Carrier2 did not start with it.
///
/// The reload is Gefyra's: a running Carrier2 (Pingora) hands its listening
/// sockets over to a new process started with `-u` once it gets SIGQUIT;
/// with none running, the new one starts without `-u` (an upgrade would wait
/// for sockets nobody sends). The pid file is trusted only if that process
/// is a carrier2, so a stale file never signals some other process. A
/// container that has just restarted on Carrier2 may hold its ports before
/// it writes its pid file: a fresh start that fails then is followed by one
/// upgrade from the carrier2 the pid file names by now. Only shell builtins
/// and `cat` are used, which Carrier2's image has.
pub fn write_script(files: &[(String, String)]) -> String {
    let mut script = String::new();
    for (path, content) in files {
        let end = delimiter(content);
        script.push_str(&format!(
            "cat > {} <<'{end}'\n{content}{end}\n",
            shell_quote(path)
        ));
    }
    script.push_str(&format!(
        r#"upgrade=
take_over() {{
  pid=$(cat {PID_FILE} 2>/dev/null)
  [ -n "$pid" ] || return 1
  case "$(cat "/proc/$pid/cmdline" 2>/dev/null)" in
    *carrier2*) kill -QUIT "$pid" 2>/dev/null && upgrade=-u ;;
    *) return 1 ;;
  esac
}}
take_over
: > {ERROR_LOG}
carrier2 -c {CONFIG_PATH} $upgrade -d >> {ERROR_LOG} 2>&1
status=$?
if [ "$status" -ne 0 ] && [ -z "$upgrade" ] && take_over; then
  : > {ERROR_LOG}
  carrier2 -c {CONFIG_PATH} -u -d >> {ERROR_LOG} 2>&1
  status=$?
fi
log=$(cat {ERROR_LOG})
printf '%s\n' "$log"
case "$log" in
  *"{PANIC_MARK}"*) ok=no ;;
  *"{BOOTSTRAP_MARK}"*) ok=yes ;;
  *) ok=no ;;
esac
if [ "$status" -ne 0 ] || [ "$ok" != yes ]; then
  : > {CONFIG_PATH}
  echo "carrier2 did not start with the new config (exit status $status)" >&2
  exit 1
fi
"#
    ));
    script.push_str(SCRIPT_END);
    script
}

/// Whether the output of [`write_script`] says Carrier2 took the config.
pub fn reload_succeeded(exit_code: i32, output: &str) -> bool {
    exit_code == 0 && output.contains(BOOTSTRAP_MARK) && !output.contains(PANIC_MARK)
}

/// The last lines of an output, for messages.
pub fn tail(output: &str, lines: usize) -> String {
    let all: Vec<&str> = output.lines().filter(|l| !l.trim().is_empty()).collect();
    all[all.len().saturating_sub(lines)..].join(" | ")
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
mod tests {
    use pontoon_provider_sdk::k8s_openapi::api::core::v1::{
        ContainerPort, ExecAction, HTTPGetAction, TCPSocketAction,
    };

    use super::*;
    use pontoon_provider_sdk::bridge_mount::bridges::{HeaderMatch, PathMatch, PortRoute};

    fn http_probe(port: IntOrString, scheme: Option<&str>) -> Probe {
        Probe {
            http_get: Some(HTTPGetAction {
                port,
                scheme: scheme.map(str::to_string),
                path: Some("/".into()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn container() -> Container {
        Container {
            name: "app".into(),
            image: Some("nginx:1.27".into()),
            ports: Some(vec![
                ContainerPort {
                    container_port: 80,
                    ..Default::default()
                },
                ContainerPort {
                    container_port: 8443,
                    name: Some("tls".into()),
                    ..Default::default()
                },
                ContainerPort {
                    container_port: 9090,
                    name: Some("admin".into()),
                    ..Default::default()
                },
            ]),
            readiness_probe: Some(http_probe(IntOrString::Int(8080), None)),
            liveness_probe: Some(http_probe(IntOrString::Int(9443), Some("HTTPS"))),
            startup_probe: Some(http_probe(IntOrString::String("tls".into()), Some("HTTPS"))),
            ..Default::default()
        }
    }

    fn sample_config() -> CarrierConfig {
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
    fn probe_ports_skip_proxied_ports_and_split_by_scheme() {
        let c = container();
        let ports = container_ports(&c);
        assert_eq!(ports, [80, 8443, 9090]);
        // startup probe on `tls` = 8443 is proxied; readiness 8080 http; liveness 9443 https.
        assert_eq!(
            probes(&c, &ports).unwrap(),
            Some(Probes {
                http_get: vec![8080],
                https_get: vec![9443],
            })
        );
        let mut no_probes = c.clone();
        no_probes.readiness_probe = None;
        no_probes.liveness_probe = None;
        no_probes.startup_probe = None;
        assert_eq!(probes(&no_probes, &ports).unwrap(), None);
    }

    #[test]
    fn exec_and_tcp_probes_are_refused_naming_probe_and_container() {
        let mut c = container();
        c.liveness_probe = Some(Probe {
            exec: Some(ExecAction {
                command: Some(vec!["true".into()]),
            }),
            ..Default::default()
        });
        assert_eq!(
            probes(&c, &[80]).unwrap_err(),
            "container `app` has an exec livenessProbe; Carrier2 can only answer httpGet probes, \
             so carrier2mount cannot take this container over (use an httpGet probe or none)"
        );
        let mut t = container();
        t.readiness_probe = Some(Probe {
            tcp_socket: Some(TCPSocketAction {
                port: IntOrString::Int(80),
                host: None,
            }),
            ..Default::default()
        });
        let message = check_probes(&t).unwrap_err();
        assert!(message.contains("tcpSocket readinessProbe"), "{message}");
        assert!(check_probes(&container()).is_ok());
    }

    #[test]
    fn an_unknown_named_probe_port_is_an_error() {
        let mut c = container();
        c.readiness_probe = Some(http_probe(IntOrString::String("nope".into()), None));
        assert!(probes(&c, &[80]).unwrap_err().contains("port `nope`"));
    }

    #[test]
    fn the_configure_script_compares_every_file_before_it_writes() {
        let tls: TlsFiles = [(
            "/tmp/from_k8s_secret_cert_all.pem".to_string(),
            "PEM".to_string(),
        )]
        .into();
        let files = desired_files(&sample_config(), &tls);
        assert_eq!(files.len(), 2);
        assert_eq!(files[0].1, "PEM\n");
        assert_eq!(files[1].0, CONFIG_PATH);
        let script = configure_script(&files);
        assert!(
            script.starts_with(
                "want=$(cat <<'PONTOON_EOF'\n== /tmp/from_k8s_secret_cert_all.pem\nPEM\n|== /tmp/config.yaml\nversion: 1\n"
            ),
            "{script}"
        );
        assert!(script.contains(
            "got=$({ printf '== %s\\n' '/tmp/from_k8s_secret_cert_all.pem'; cat '/tmp/from_k8s_secret_cert_all.pem' 2>/dev/null; printf '|'; \
             printf '== %s\\n' '/tmp/config.yaml'; cat '/tmp/config.yaml' 2>/dev/null; printf '|'; })\n"
        ));
        assert!(script.contains(&format!(
            "if [ \"$got\" = \"$want\" ]; then echo '{UNCHANGED_MARK}'; exit 0; fi\n"
        )));
        assert!(script.ends_with(&write_script(&files)));
    }

    #[test]
    fn write_script_writes_reloads_and_checks() {
        let files = vec![
            ("/tmp/a.pem".to_string(), "x\nPONTOON_EOF\ny\n".to_string()),
            (CONFIG_PATH.to_string(), "version: 1\n".to_string()),
        ];
        let script = write_script(&files);
        assert!(script.starts_with(
            "cat > '/tmp/a.pem' <<'PONTOON_EOF_1'\nx\nPONTOON_EOF\ny\nPONTOON_EOF_1\n\
             cat > '/tmp/config.yaml' <<'PONTOON_EOF'\nversion: 1\nPONTOON_EOF\n"
        ));
        assert!(
            script.contains("carrier2 -c /tmp/config.yaml $upgrade -d >> /tmp/carrier.log 2>&1\n")
        );
        assert!(script.contains("*carrier2*) kill -QUIT \"$pid\" 2>/dev/null && upgrade=-u ;;"));
        // A fresh start that lost the race with a Carrier2 still starting
        // hands over from it once.
        assert!(script.contains(
            "if [ \"$status\" -ne 0 ] && [ -z \"$upgrade\" ] && take_over; then\n  : > /tmp/carrier.log\n  carrier2 -c /tmp/config.yaml -u -d >> /tmp/carrier.log 2>&1\n"
        ));
        assert!(script.contains(": > /tmp/config.yaml\n"));
        assert!(script.ends_with("fi\nexit 0\n"));
    }

    /// The script run by a real shell, in a directory standing in for the
    /// pod's /tmp, against a fake `carrier2`: the pod's own Carrier2 (a
    /// process named carrier2) took the ports but had not written its pid
    /// file when the script read it; the fresh start fails on the taken
    /// ports, as Pingora's would, by which time the pid file is there.
    #[test]
    #[cfg(unix)]
    fn a_fresh_start_that_finds_the_ports_taken_hands_over_once() {
        use std::process::{Command, Stdio};
        let dir = std::env::temp_dir().join(format!("carrier2mount-race-{}", std::process::id()));
        let bin = dir.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let tmp = format!("{}/", dir.display());
        let mut serving = Command::new("bash")
            .args(["-c", "exec -a carrier2 sleep 30"])
            .spawn()
            .unwrap();
        let fake = format!(
            "#!/bin/sh
             case \" $* \" in\n               *' -u '*) echo 'INFO Bootstrap starting'; echo \"upgrading from pid $(cat {tmp}carrier2.pid)\"; exit 0 ;;\n             esac\n             echo {pid} > {tmp}carrier2.pid\n             echo \"{PANIC_MARK} at src/main.rs: a Carrier2 already serves (its ports are taken)\" >&2\n             exit 1\n",
            pid = serving.id()
        );
        let fake_path = bin.join("carrier2");
        std::fs::write(&fake_path, fake).unwrap();
        Command::new("chmod")
            .arg("+x")
            .arg(&fake_path)
            .status()
            .unwrap();
        let files = vec![(CONFIG_PATH.to_string(), "version: 1\n".to_string())];
        let script = write_script(&files).replace("/tmp/", &tmp);
        let mut shell = Command::new("sh")
            .arg("-s")
            .env(
                "PATH",
                format!(
                    "{}:{}",
                    bin.display(),
                    std::env::var("PATH").unwrap_or_default()
                ),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write as _;
        shell
            .stdin
            .take()
            .unwrap()
            .write_all(script.as_bytes())
            .unwrap();
        let output = shell.wait_with_output().unwrap();
        let _ = serving.kill();
        let _ = serving.wait();
        let config = std::fs::read_to_string(dir.join("config.yaml")).unwrap_or_default();
        std::fs::remove_dir_all(&dir).unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            reload_succeeded(output.status.code().unwrap_or(-1), &stdout),
            "{stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(
            stdout.contains(&format!("upgrading from pid {}", serving.id())),
            "{stdout}"
        );
        assert_eq!(config, "version: 1\n");
    }

    #[test]
    fn reload_needs_bootstrap_and_no_panic() {
        assert!(reload_succeeded(0, "INFO Bootstrap starting\n"));
        assert!(!reload_succeeded(1, "Bootstrap starting"));
        assert!(!reload_succeeded(
            0,
            "Bootstrap starting\nthread 'main' panicked at src/main.rs: bad config"
        ));
        assert!(!reload_succeeded(0, ""));
        assert_eq!(tail("a\n\nb\nc\n", 2), "b | c");
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
