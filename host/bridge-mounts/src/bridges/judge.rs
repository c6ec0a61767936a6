//! Whether a GefyraBridge can be rendered, and what into: its fields as
//! Gefyra's client writes them, turned into the record a provider renders
//! (the `bridges` import), or a message naming the field to change.

use std::net::IpAddr;

use serde_json::Value;

use crate::crd::{BridgeProvider, GefyraBridge};
use pontoon_plugins::bindings::provider_bridges::{
    Bridge, HeaderMatch, MatchType, PathMatch, PortRoute, RequestMatch, Rule,
};

/// Most rules one bridge may hold: each is matched against every request of
/// the workload, the whole config is rewritten into every pod on change,
/// and the host judges every bridge of a mount at each look at it (bounded
/// with `--max-bridges-per-mount`; `make bench-bridges` measures it).
pub const MAX_RULES: usize = 32;
/// Most matches one rule may hold.
pub const MAX_MATCHES: usize = 8;
/// Most regular expressions one bridge may hold (compiling one costs far
/// more than judging any other match).
pub const MAX_REGEXES: usize = 16;

/// What a bridge is judged against: the mount it names, as the operator
/// admitted it.
pub struct MountView<'a> {
    pub name: &'a str,
    /// Where the mount's target lives: a bridge must say the same.
    pub target_namespace: &'a str,
    pub target_container: &'a str,
    /// The ports the mount's target container declares; `None` when the
    /// target cannot be read right now (the ports are then not checked).
    pub container_ports: Option<&'a [u16]>,
}

/// The record a provider renders for `bridge`, or why it cannot be rendered.
pub fn judge(bridge: &GefyraBridge, mount: &MountView<'_>) -> Result<Bridge, String> {
    let fields = &bridge.bridge;
    match fields.provider {
        None | Some(BridgeProvider::Carrier2) => {}
        Some(BridgeProvider::Carrier) => {
            return Err(
                "provider: `carrier` (Gefyra's first Carrier) is not served; \
                        set provider: carrier2"
                    .into(),
            );
        }
    }
    if let Some(target) = fields.target.as_deref().filter(|t| !t.is_empty())
        && target != mount.name
    {
        return Err(format!(
            "target: `{target}` is not the mount `{}` of label gefyra.dev/bridge-mount; \
             set target to the mount's name",
            mount.name
        ));
    }
    // The admission policy judged its creator's rights in the namespace the
    // bridge names (its own when it names none); that must be where the
    // requests it takes come from.
    let claimed = fields
        .target_namespace
        .as_deref()
        .filter(|ns| !ns.is_empty())
        .map_or_else(
            || bridge.metadata.namespace.clone().unwrap_or_default(),
            str::to_string,
        );
    if claimed != mount.target_namespace {
        return Err(format!(
            "targetNamespace: `{claimed}` is not the namespace `{}` of the mount's target; \
             set targetNamespace to `{}` (the admission policy judges the rights of a bridge's \
             creator there)",
            mount.target_namespace, mount.target_namespace
        ));
    }
    if let Some(container) = fields.target_container.as_deref().filter(|c| !c.is_empty())
        && container != mount.target_container
    {
        return Err(format!(
            "targetContainer: `{container}` is not the container `{}` the mount intercepts",
            mount.target_container
        ));
    }
    let rules = rules(fields.provider_parameter.as_ref())?;
    let ports = port_routes(bridge, mount)?;
    Ok(Bridge {
        name: bridge.metadata.name.clone().unwrap_or_default(),
        rules,
        ports,
    })
}

fn port_routes(bridge: &GefyraBridge, mount: &MountView<'_>) -> Result<Vec<PortRoute>, String> {
    let fields = &bridge.bridge;
    let mappings = fields.port_mappings.as_deref().unwrap_or_default();
    if mappings.is_empty() {
        return Err(
            "portMappings is empty: give at least one `local:remote` pair, \
                    remote being a port of the target container"
                .into(),
        );
    }
    let mut routes: Vec<PortRoute> = Vec::new();
    for (index, mapping) in mappings.iter().enumerate() {
        let at = format!("portMappings[{index}]");
        let (local, remote) = parse_mapping(mapping).ok_or_else(|| {
            format!("{at}: `{mapping}` is not `local:remote` with two ports (1-65535)")
        })?;
        if let Some(ports) = mount.container_ports
            && !ports.contains(&remote)
        {
            let declared = if ports.is_empty() {
                "none".to_string()
            } else {
                ports
                    .iter()
                    .map(u16::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            return Err(format!(
                "{at}: remote port {remote} is not a port of container `{}` (it declares {declared})",
                mount.target_container
            ));
        }
        if routes.iter().any(|r| r.port == remote) {
            return Err(format!("{at}: remote port {remote} is mapped twice"));
        }
        let endpoint =
            endpoint(bridge, mapping, local, remote).map_err(|why| format!("{at}: {why}"))?;
        routes.push(PortRoute {
            port: remote,
            endpoint,
        });
    }
    Ok(routes)
}

/// A `local:remote` port mapping, both ports above 0.
pub(super) fn parse_mapping(mapping: &str) -> Option<(u16, u16)> {
    let (local, remote) = mapping.trim().split_once(':')?;
    let port = |text: &str| text.trim().parse::<u16>().ok().filter(|p| *p > 0);
    Some((port(local)?, port(remote)?))
}

/// Where a mapping's requests go: what the connection provider set up for
/// it (`clusterEndpoint`, keyed by the remote port or the whole mapping, as
/// Stowaway writes one per port), else `destinationIP` with the local port.
fn endpoint(
    bridge: &GefyraBridge,
    mapping: &str,
    local: u16,
    remote: u16,
) -> Result<String, String> {
    let fields = &bridge.bridge;
    if let Some(endpoints) = &fields.cluster_endpoint {
        let found = endpoints
            .get(&remote.to_string())
            .or_else(|| endpoints.get(mapping.trim()));
        if let Some(value) = found {
            return match value.as_str() {
                Some(text) if host_port(text) => Ok(text.to_string()),
                _ => Err(format!("clusterEndpoint `{value}` is not `host:port`")),
            };
        }
    }
    let Some(destination) = fields
        .destination_ip
        .as_deref()
        .map(str::trim)
        .filter(|d| !d.is_empty())
    else {
        return Err(
            "neither clusterEndpoint nor destinationIP says where requests go; \
                    set destinationIP to the developer's address"
                .into(),
        );
    };
    match destination.parse::<IpAddr>() {
        Ok(IpAddr::V6(ip)) => Ok(format!("[{ip}]:{local}")),
        Ok(IpAddr::V4(ip)) => Ok(format!("{ip}:{local}")),
        Err(_) if dns_name(destination) => Ok(format!("{destination}:{local}")),
        Err(_) => Err(format!(
            "destinationIP `{destination}` is neither an IP address nor a DNS name"
        )),
    }
}

fn host_port(text: &str) -> bool {
    text.rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0))
}

/// Whether `text` is a DNS name (dot-separated labels of letters, digits
/// and inner dashes).
pub(super) fn dns_name(text: &str) -> bool {
    text.len() <= 253
        && text.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// How many matches a bridge's rules hold, as written (what judging it costs).
pub fn match_count(bridge: &GefyraBridge) -> usize {
    bridge
        .bridge
        .provider_parameter
        .as_ref()
        .and_then(|p| p.get("rules"))
        .and_then(Value::as_array)
        .map_or(0, |rules| {
            rules
                .iter()
                .map(|r| r.get("match").and_then(Value::as_array).map_or(1, Vec::len))
                .sum()
        })
}

fn rules(parameter: Option<&serde_json::Map<String, Value>>) -> Result<Vec<Rule>, String> {
    let Some(rules) = parameter.and_then(|p| p.get("rules")) else {
        return Err(
            "providerParameter.rules is missing: give at least one rule, e.g. \
                    [{match: [{matchHeader: {name: x-gefyra, value: me, type: exact}}]}]"
                .into(),
        );
    };
    let Some(rules) = rules.as_array() else {
        return Err("providerParameter.rules must be a list of {match: [...]}".into());
    };
    if rules.is_empty() {
        return Err(
            "providerParameter.rules is empty: a bridge without rules takes no request".into(),
        );
    }
    if rules.len() > MAX_RULES {
        return Err(format!(
            "providerParameter.rules has {} rules, more than the {MAX_RULES} a bridge may hold",
            rules.len()
        ));
    }
    let regexes = rules
        .iter()
        .filter_map(|r| r.get("match").and_then(Value::as_array))
        .flatten()
        .filter(|m| {
            m.as_object()
                .into_iter()
                .flat_map(|o| o.values())
                .any(|inner| inner.get("type").and_then(Value::as_str) == Some("regex"))
        })
        .count();
    if regexes > MAX_REGEXES {
        return Err(format!(
            "providerParameter.rules hold {regexes} regular expressions, more than the \
             {MAX_REGEXES} a bridge may hold; match by exact value or prefix instead"
        ));
    }
    rules
        .iter()
        .enumerate()
        .map(|(index, rule)| self::rule(rule, &format!("providerParameter.rules[{index}]")))
        .collect()
}

fn rule(rule: &Value, at: &str) -> Result<Rule, String> {
    let Some(matches) = rule.get("match").and_then(Value::as_array) else {
        return Err(format!(
            "{at}: needs `match`, a list of matchHeader or matchPath"
        ));
    };
    if matches.is_empty() {
        return Err(format!(
            "{at}.match is empty: a rule needs at least one match"
        ));
    }
    if matches.len() > MAX_MATCHES {
        return Err(format!(
            "{at}.match has {} matches, more than {MAX_MATCHES}",
            matches.len()
        ));
    }
    let matches = matches
        .iter()
        .enumerate()
        .map(|(index, m)| request_match(m, &format!("{at}.match[{index}]")))
        .collect::<Result<_, _>>()?;
    Ok(Rule { matches })
}

fn request_match(value: &Value, at: &str) -> Result<RequestMatch, String> {
    let object = value
        .as_object()
        .ok_or_else(|| format!("{at}: must be {{matchHeader: ...}} or {{matchPath: ...}}"))?;
    match (object.get("matchHeader"), object.get("matchPath")) {
        (Some(header), None) if object.len() == 1 => {
            let at = format!("{at}.matchHeader");
            let name = text(header, "name", &at)?;
            if name.is_empty() || !name.bytes().all(|b| b.is_ascii_graphic() && b != b':') {
                return Err(format!("{at}.name: `{name}` is not an HTTP header name"));
            }
            let value = text(header, "value", &at)?;
            let match_type = match_type(header, &at, &value)?;
            Ok(RequestMatch::Header(HeaderMatch {
                name,
                value,
                match_type,
            }))
        }
        (None, Some(path)) if object.len() == 1 => {
            let at = format!("{at}.matchPath");
            let path_text = text(path, "path", &at)?;
            let match_type = match_type(path, &at, &path_text)?;
            if match_type != MatchType::Regex && !path_text.starts_with('/') {
                return Err(format!("{at}.path: `{path_text}` must start with `/`"));
            }
            Ok(RequestMatch::Path(PathMatch {
                path: path_text,
                match_type,
            }))
        }
        _ => Err(format!(
            "{at}: must hold exactly one of matchHeader and matchPath"
        )),
    }
}

fn text(object: &Value, field: &str, at: &str) -> Result<String, String> {
    match object.get(field) {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(other) => Err(format!("{at}.{field}: `{other}` is not a string")),
        None => Err(format!("{at}.{field} is missing")),
    }
}

/// `type` of a match; `exact` when absent, as Carrier2 reads it.
fn match_type(object: &Value, at: &str, pattern: &str) -> Result<MatchType, String> {
    let kind = match object.get("type") {
        None | Some(Value::Null) => return Ok(MatchType::Exact),
        Some(Value::String(kind)) => kind.as_str(),
        Some(other) => {
            return Err(format!(
                "{at}.type: `{other}` is not one of exact, prefix, regex"
            ));
        }
    };
    match kind {
        "exact" => Ok(MatchType::Exact),
        "prefix" => Ok(MatchType::Prefix),
        "regex" => regex_verdict(pattern)
            .map(|()| MatchType::Regex)
            .map_err(|why| format!("{at}: `{pattern}` is not a regular expression: {why}")),
        other => Err(format!(
            "{at}.type: `{other}` is not one of exact, prefix, regex"
        )),
    }
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Patterns whose verdict is kept: every bridge is judged again at each
/// look at its mount, and compiling a regular expression costs far more
/// than the rest of a judgement. Bounded (a pattern is at most a few
/// hundred bytes): past it the cache starts over.
const REGEX_CACHE_ENTRIES: usize = 16_384;

static REGEX_VERDICTS: std::sync::LazyLock<
    std::sync::Mutex<std::collections::HashMap<String, Result<(), String>>>,
> = std::sync::LazyLock::new(Default::default);

/// Whether `pattern` compiles (Carrier2 compiles it; the host only judges),
/// compiled once per pattern.
fn regex_verdict(pattern: &str) -> Result<(), String> {
    let cache = || REGEX_VERDICTS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(verdict) = cache().get(pattern) {
        return verdict.clone();
    }
    let verdict = regex::Regex::new(pattern)
        .map(drop)
        .map_err(|err| one_line(&err.to_string()));
    let mut cache = cache();
    if cache.len() >= REGEX_CACHE_ENTRIES {
        cache.clear();
    }
    cache.insert(pattern.to_string(), verdict.clone());
    verdict
}

/// The bridges of `judged` that repeat an older one exactly (same rules on
/// a port both take): the younger is refused, naming the older. Linear in
/// the bridges: each one's rules are looked up among those seen before it.
pub fn duplicates<'a>(judged: &[(&'a GefyraBridge, &'a Bridge)]) -> Vec<(&'a str, String)> {
    let mut order: Vec<&(&GefyraBridge, &Bridge)> = judged.iter().collect();
    order.sort_by_key(|(cr, _)| {
        (
            cr.metadata.creation_timestamp.clone(),
            cr.metadata.name.clone(),
        )
    });
    // For each set of rules, the older bridge that holds it on each port.
    // (rules, port) → (bridge name, its client)
    type Holder<'b> = (&'b str, Option<&'b str>);
    let mut seen: std::collections::HashMap<(&[Rule], u16), Holder> = Default::default();
    let mut refused = Vec::new();
    for (cr, bridge) in order {
        let older = bridge
            .ports
            .iter()
            .find_map(|p| seen.get(&(bridge.rules.as_slice(), p.port)).copied());
        match older {
            Some((older, client)) => refused.push((
                bridge.name.as_str(),
                format!(
                    "duplicates bridge `{older}`{}: the same rules on the same port; delete one of them",
                    client
                        .map(|c| format!(" of client `{c}`"))
                        .unwrap_or_default()
                ),
            )),
            None => {
                let client = cr
                    .bridge
                    .client
                    .as_deref()
                    .map(str::trim)
                    .filter(|c| !c.is_empty());
                for p in &bridge.ports {
                    seen.entry((bridge.rules.as_slice(), p.port))
                        .or_insert((bridge.name.as_str(), client));
                }
            }
        }
    }
    refused
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bridge(fields: Value) -> GefyraBridge {
        let mut object = serde_json::json!({
            "metadata": {"name": "bridge-a", "namespace": "gefyra",
                         "labels": {"gefyra.dev/bridge-mount": "bridgemount-a"}},
            "provider": "carrier2",
            "providerParameter": {"rules": [{"match": [{"matchHeader": {"name": "x-gefyra", "value": "peer1", "type": "exact"}}]}]},
            "connectionProvider": "stowaway",
            "client": "client-a",
            "targetNamespace": "default",
            "target": "bridgemount-a",
            "targetContainer": "nginx",
            "portMappings": ["8080:80"],
            "destinationIP": "192.168.101.1",
        });
        for (key, value) in fields.as_object().unwrap() {
            object[key] = value.clone();
        }
        serde_json::from_value(object).unwrap()
    }

    fn view(ports: &[u16]) -> MountView<'_> {
        MountView {
            name: "bridgemount-a",
            target_namespace: "default",
            target_container: "nginx",
            container_ports: Some(ports),
        }
    }

    #[test]
    fn gefyras_example_bridge_goes_to_destination_ip_and_the_local_port() {
        let judged = judge(&bridge(serde_json::json!({})), &view(&[80])).unwrap();
        assert_eq!(judged.name, "bridge-a");
        assert_eq!(
            judged.ports,
            vec![PortRoute {
                port: 80,
                endpoint: "192.168.101.1:8080".into()
            }]
        );
        assert_eq!(
            judged.rules,
            vec![Rule {
                matches: vec![RequestMatch::Header(HeaderMatch {
                    name: "x-gefyra".into(),
                    value: "peer1".into(),
                    match_type: MatchType::Exact,
                })]
            }]
        );
    }

    #[test]
    fn a_cluster_endpoint_wins_over_destination_ip() {
        let b = bridge(
            serde_json::json!({"clusterEndpoint": {"80": "stowaway-port-10001.gefyra.svc.cluster.local:10001"}}),
        );
        let judged = judge(&b, &view(&[80])).unwrap();
        assert_eq!(
            judged.ports[0].endpoint,
            "stowaway-port-10001.gefyra.svc.cluster.local:10001"
        );
        let v6 = bridge(serde_json::json!({"destinationIP": "fd00::1"}));
        assert_eq!(
            judge(&v6, &view(&[80])).unwrap().ports[0].endpoint,
            "[fd00::1]:8080"
        );
    }

    #[test]
    fn each_bad_field_is_named() {
        let cases = [
            (
                serde_json::json!({"portMappings": []}),
                "portMappings is empty",
            ),
            (
                serde_json::json!({"portMappings": ["80"]}),
                "portMappings[0]: `80` is not `local:remote`",
            ),
            (
                serde_json::json!({"portMappings": ["8080:81"]}),
                "remote port 81 is not a port of container `nginx` (it declares 80)",
            ),
            (
                serde_json::json!({"portMappings": ["8080:80", "9090:80"]}),
                "portMappings[1]: remote port 80 is mapped twice",
            ),
            (
                serde_json::json!({"destinationIP": null}),
                "set destinationIP",
            ),
            (
                serde_json::json!({"destinationIP": "not an ip!"}),
                "destinationIP `not an ip!`",
            ),
            (
                serde_json::json!({"clusterEndpoint": {"80": "nope"}}),
                "clusterEndpoint `\"nope\"` is not `host:port`",
            ),
            (
                serde_json::json!({"target": "other"}),
                "target: `other` is not the mount `bridgemount-a`",
            ),
            (
                serde_json::json!({"targetContainer": "app"}),
                "targetContainer: `app`",
            ),
            (
                serde_json::json!({"targetNamespace": "bank"}),
                "targetNamespace: `bank` is not the namespace `default` of the mount's target",
            ),
            (
                serde_json::json!({"targetNamespace": null}),
                "targetNamespace: `gefyra` is not the namespace `default`",
            ),
            (
                serde_json::json!({"provider": "carrier"}),
                "set provider: carrier2",
            ),
            (
                serde_json::json!({"providerParameter": {}}),
                "providerParameter.rules is missing",
            ),
            (
                serde_json::json!({"providerParameter": {"rules": []}}),
                "providerParameter.rules is empty",
            ),
            (
                serde_json::json!({"providerParameter": {"rules": [{}]}}),
                "providerParameter.rules[0]: needs `match`",
            ),
            (
                serde_json::json!({"providerParameter": {"rules": [{"match": []}]}}),
                "providerParameter.rules[0].match is empty",
            ),
            (
                serde_json::json!({"providerParameter": {"rules": [{"match": [{"matchHeader": {"name": "x", "value": "y"}, "matchPath": {"path": "/"}}]}]}}),
                "providerParameter.rules[0].match[0]: must hold exactly one of matchHeader and matchPath",
            ),
            (
                serde_json::json!({"providerParameter": {"rules": [{"match": [{"matchHeader": {"name": "x", "value": "y", "type": "glob"}}]}]}}),
                "providerParameter.rules[0].match[0].matchHeader.type: `glob` is not one of exact, prefix, regex",
            ),
            (
                serde_json::json!({"providerParameter": {"rules": [{"match": [{"matchPath": {"path": "(", "type": "regex"}}]}]}}),
                "providerParameter.rules[0].match[0].matchPath: `(` is not a regular expression",
            ),
            (
                serde_json::json!({"providerParameter": {"rules": [{"match": [{"matchPath": {"path": "b", "type": "prefix"}}]}]}}),
                "matchPath.path: `b` must start with `/`",
            ),
            (
                serde_json::json!({"providerParameter": {"rules": [{"match": [{"matchHeader": {"name": "bad name", "value": "y"}}]}]}}),
                "matchHeader.name: `bad name` is not an HTTP header name",
            ),
        ];
        for (fields, expected) in cases {
            let err = judge(&bridge(fields.clone()), &view(&[80])).unwrap_err();
            assert!(
                err.contains(expected),
                "{fields}: {err:?} lacks {expected:?}"
            );
        }
    }

    #[test]
    fn ten_thousand_rules_are_refused_with_the_bound() {
        let rule = serde_json::json!({"match": [{"matchPath": {"path": "/x", "type": "prefix"}}]});
        let many = bridge(serde_json::json!({"providerParameter": {"rules": vec![rule; 10_000]}}));
        let err = judge(&many, &view(&[80])).unwrap_err();
        assert!(err.contains("10000 rules, more than the 32"), "{err}");
        let regex = serde_json::json!({"match": [{"matchPath": {"path": "^/x", "type": "regex"}}]});
        let many = bridge(serde_json::json!({"providerParameter": {"rules": vec![regex; 17]}}));
        let err = judge(&many, &view(&[80])).unwrap_err();
        assert!(
            err.contains("17 regular expressions, more than the 16"),
            "{err}"
        );
    }

    #[test]
    fn unknown_target_ports_are_not_checked_and_a_missing_type_is_exact() {
        let b = bridge(serde_json::json!({"portMappings": ["8080:81"],
            "providerParameter": {"rules": [{"match": [{"matchPath": {"path": "/b"}}]}]}}));
        let view = MountView {
            name: "bridgemount-a",
            target_namespace: "default",
            target_container: "nginx",
            container_ports: None,
        };
        let judged = judge(&b, &view).unwrap();
        assert_eq!(judged.ports[0].port, 81);
        assert_eq!(
            judged.rules[0].matches[0],
            RequestMatch::Path(PathMatch {
                path: "/b".into(),
                match_type: MatchType::Exact
            })
        );
    }

    #[test]
    fn the_younger_of_two_identical_bridges_is_the_duplicate() {
        let mut older = bridge(serde_json::json!({}));
        older.metadata.creation_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                "2026-01-01T00:00:00Z".parse().unwrap(),
            ));
        let mut younger = bridge(serde_json::json!({"portMappings": ["9999:80"]}));
        younger.metadata.name = Some("bridge-b".into());
        younger.metadata.creation_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                "2026-01-02T00:00:00Z".parse().unwrap(),
            ));
        let other = bridge(
            serde_json::json!({"providerParameter": {"rules": [{"match": [{"matchPath": {"path": "/b", "type": "prefix"}}]}]}}),
        );
        let (a, b, c) = (
            judge(&older, &view(&[80])).unwrap(),
            judge(&younger, &view(&[80])).unwrap(),
            judge(&other, &view(&[80])).unwrap(),
        );
        let mut c_named = c.clone();
        c_named.name = "bridge-c".into();
        let refused = duplicates(&[(&younger, &b), (&older, &a), (&other, &c_named)]);
        assert_eq!(refused.len(), 1);
        assert_eq!(refused[0].0, "bridge-b");
        assert!(refused[0].1.contains("duplicates bridge `bridge-a`"));
    }

    #[test]
    fn a_regular_expression_is_judged_once_and_then_answered_from_the_cache() {
        // A pattern no other test uses, with a verdict planted as if an
        // earlier judgement had compiled it: the cached verdict answers,
        // so the pattern is not compiled again.
        let planted = "pontoon-cache-test-(";
        assert!(regex::Regex::new(planted).is_err(), "really invalid");
        REGEX_VERDICTS
            .lock()
            .unwrap()
            .insert(planted.to_string(), Ok(()));
        assert_eq!(regex_verdict(planted), Ok(()));
        // A new pattern is compiled, and its verdict kept, valid or not.
        let fresh = "pontoon-cache-test-[a-z]+";
        assert_eq!(regex_verdict(fresh), Ok(()));
        assert_eq!(REGEX_VERDICTS.lock().unwrap().get(fresh), Some(&Ok(())));
        let broken = "pontoon-cache-test-[";
        let verdict = regex_verdict(broken);
        assert!(verdict.is_err());
        assert_eq!(REGEX_VERDICTS.lock().unwrap().get(broken), Some(&verdict));
        assert!(REGEX_VERDICTS.lock().unwrap().len() <= REGEX_CACHE_ENTRIES);
    }

    #[test]
    fn among_thousands_of_bridges_each_duplicate_names_the_one_it_repeats() {
        // 4000 bridges, each of the 2000 header values twice: the younger
        // of each pair is refused naming the older, and no other.
        let bridges: Vec<GefyraBridge> = (0..4000)
            .map(|i| {
                let mut b = bridge(serde_json::json!({"providerParameter": {"rules": [{"match": [
                    {"matchHeader": {"name": "x-dev", "value": format!("peer{}", i % 2000), "type": "exact"}}
                ]}]}}));
                b.metadata.name = Some(format!("bridge-{i:04}"));
                b
            })
            .collect();
        let judged: Vec<Bridge> = bridges
            .iter()
            .map(|b| judge(b, &view(&[80])).unwrap())
            .collect();
        let pairs: Vec<(&GefyraBridge, &Bridge)> = bridges.iter().zip(judged.iter()).collect();
        let refused = duplicates(&pairs);
        assert_eq!(refused.len(), 2000);
        for (name, why) in &refused {
            let index: usize = name.trim_start_matches("bridge-").parse().unwrap();
            assert!(index >= 2000, "{name} is the older of its pair");
            assert!(
                why.contains(&format!("duplicates bridge `bridge-{:04}`", index - 2000)),
                "{name}: {why}"
            );
        }
    }
}
