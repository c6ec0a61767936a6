//! A rule's translated filters, scoped to that rule.
//!
//! The entries come from config filter modules (Praxis filter entries as
//! JSON). Each one is gated on the rule's tag: the load balancer publishes
//! the selected cluster's `application_protocol` (the rule) and
//! `application_provider` (the match), and a `selected_upstream` condition
//! lets the entry run only when its own rule was routed to. So a filter
//! never reaches another rule, even one with the same path on the listener.
//!
//! What a module cannot know is left as a placeholder and filled in here:
//!
//! | placeholder | value |
//! |---|---|
//! | `${pontoon_listener_scheme}` | `http` or `https`, the listener's protocol |
//! | `${pontoon_listener_port}` | the listener's port |
//! | `${pontoon_port_suffix}` | `:PORT` of the listener, empty when it is the scheme's default |
//! | `${pontoon_port_suffix:N}` | `:N`, empty when N is the listener scheme's default port |
//! | `${pontoon_match_prefix}` | the matched PathPrefix without its trailing `/`, regex-escaped; the entry is repeated per match, each gated on its match |

use serde_json::{Map, Value};

use super::{
    praxis::{Condition, ConditionMatch, Filter, SelectedUpstream, StaticResponse},
    routes::CheckedMatch,
};
use crate::gateway::model::{Protocol, TranslatedFilter};

pub const LISTENER_SCHEME: &str = "${pontoon_listener_scheme}";
pub const LISTENER_PORT: &str = "${pontoon_listener_port}";
pub const PORT_SUFFIX: &str = "${pontoon_port_suffix}";
/// Followed by `:N}`.
pub const PORT_SUFFIX_OF: &str = "${pontoon_port_suffix:";
pub const MATCH_PREFIX: &str = "${pontoon_match_prefix}";
const PLACEHOLDER_START: &str = "${pontoon_";

/// Praxis's security filters: gated on a rule, Praxis reports them as a
/// bypass risk unless `skip_pipeline_checks.conditional_security` is set.
const SECURITY_FILTERS: [&str; 10] = [
    "basic_auth",
    "cors",
    "credential_injection",
    "csrf",
    "forwarded_headers",
    "guardrails",
    "ip_acl",
    "peer_identity_trust",
    "policy",
    "rate_limit",
];

/// Praxis's filters that write the upstream path.
const REWRITE_FILTERS: [&str; 2] = ["path_rewrite", "url_rewrite"];

/// The listener a rule's entries are written for.
#[derive(Clone, Copy, Debug)]
pub struct ListenerFacts {
    pub protocol: Protocol,
    pub port: u16,
}

/// Checks a rule's translated filters; `Err` says what is wrong with them.
pub fn check(filters: &[TranslatedFilter], matches: &[CheckedMatch]) -> Result<(), String> {
    for (index, filter) in filters.iter().enumerate() {
        let at = || {
            format!(
                "filter {index} ({}, from module {})",
                filter.kind, filter.module
            )
        };
        for entry in &filter.entries {
            let object = entry
                .as_object()
                .ok_or_else(|| format!("{}: an entry is not a JSON object", at()))?;
            if !object.get("filter").is_some_and(Value::is_string) {
                return Err(format!("{}: an entry has no `filter` name", at()));
            }
            if object.get("conditions").is_some_and(|c| !c.is_array()) {
                return Err(format!("{}: an entry's `conditions` is not a list", at()));
            }
            let mut unknown = None;
            let mut uses_prefix = false;
            visit_strings(entry, &mut |s| {
                uses_prefix |= s.contains(MATCH_PREFIX);
                if let Some(p) = unknown_placeholder(s) {
                    unknown.get_or_insert(p);
                }
            });
            if let Some(placeholder) = unknown {
                return Err(format!("{}: unknown placeholder `{placeholder}`", at()));
            }
            if uses_prefix && matches.iter().any(|m| m.path.prefix().is_none()) {
                return Err(format!(
                    "{}: it replaces the matched path prefix, but the rule has a match that is \
                     not a PathPrefix",
                    at()
                ));
            }
        }
    }
    Ok(())
}

/// The rule's entries, gated on it, then the rule's own answer if it has
/// nowhere to send requests (`status`).
pub fn rule_entries(
    filters: &[TranslatedFilter],
    matches: &[CheckedMatch],
    rule_tag: &str,
    match_tag: impl Fn(usize) -> String,
    listener: ListenerFacts,
    status: Option<u16>,
) -> Vec<Filter> {
    let rule_condition = gate(Some(rule_tag.to_string()), None);
    let rule_gate = serde_json::to_value(&rule_condition).unwrap_or(Value::Null);
    let mut out = Vec::new();
    for entry in filters.iter().flat_map(|f| &f.entries) {
        let mut uses_prefix = false;
        visit_strings(entry, &mut |s| uses_prefix |= s.contains(MATCH_PREFIX));
        if uses_prefix {
            for (k, m) in matches.iter().enumerate() {
                let prefix = regex::escape(m.path.prefix().unwrap_or_default());
                let filled = fill(entry, listener, Some(&prefix));
                let gate = gate(Some(rule_tag.to_string()), Some(match_tag(k)));
                let gate = serde_json::to_value(&gate).unwrap_or(Value::Null);
                out.push(Filter::Module(scoped(filled, &gate)));
            }
        } else {
            let filled = fill(entry, listener, None);
            out.push(Filter::Module(scoped(filled, &rule_gate)));
        }
    }
    if let Some(status) = status {
        out.push(Filter::StaticResponse(StaticResponse {
            filter: "static_response",
            conditions: vec![rule_condition],
            status,
        }));
    }
    out
}

/// Whether any entry is a security filter.
pub fn has_security_filter(filters: &[TranslatedFilter]) -> bool {
    filters.iter().flat_map(|f| &f.entries).any(|e| {
        e.get("filter")
            .and_then(Value::as_str)
            .is_some_and(|name| SECURITY_FILTERS.contains(&name))
    })
}

fn gate(protocol: Option<String>, provider: Option<String>) -> Condition {
    Condition {
        when: ConditionMatch {
            selected_upstream: Some(SelectedUpstream {
                application_protocol: protocol,
                application_provider: provider,
            }),
            ..ConditionMatch::default()
        },
    }
}

/// The entry with the `gate` condition before its own conditions. Rewrite filters
/// also get `allow_rewrite_override`: Praxis refuses a second path rewriter
/// in a pipeline without it, but gated rules never both run.
fn scoped(mut entry: Value, gate: &Value) -> Value {
    let Some(object) = entry.as_object_mut() else {
        return entry;
    };
    let gate = gate.clone();
    match object.get_mut("conditions") {
        Some(Value::Array(list)) => list.insert(0, gate),
        _ => {
            object.insert("conditions".into(), Value::Array(vec![gate]));
        }
    }
    if object
        .get("filter")
        .and_then(Value::as_str)
        .is_some_and(|f| REWRITE_FILTERS.contains(&f))
    {
        object.insert("allow_rewrite_override".into(), Value::Bool(true));
    }
    entry
}

fn fill(entry: &Value, listener: ListenerFacts, match_prefix: Option<&str>) -> Value {
    match entry {
        Value::String(s) if s.contains(PLACEHOLDER_START) => {
            Value::String(fill_str(s, listener, match_prefix))
        }
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|v| fill(v, listener, match_prefix))
                .collect(),
        ),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), fill(v, listener, match_prefix)))
                .collect::<Map<_, _>>(),
        ),
        other => other.clone(),
    }
}

fn fill_str(s: &str, listener: ListenerFacts, match_prefix: Option<&str>) -> String {
    let scheme = super::listeners::scheme(listener.protocol);
    let suffix = |port: u16| {
        let default = match listener.protocol {
            Protocol::Http => 80,
            Protocol::Https => 443,
        };
        if port == default {
            String::new()
        } else {
            format!(":{port}")
        }
    };
    let mut out = s
        .replace(LISTENER_SCHEME, scheme)
        .replace(LISTENER_PORT, &listener.port.to_string())
        .replace(PORT_SUFFIX, &suffix(listener.port));
    if let Some(prefix) = match_prefix {
        out = out.replace(MATCH_PREFIX, prefix);
    }
    while let Some(start) = out.find(PORT_SUFFIX_OF) {
        let rest = &out[start + PORT_SUFFIX_OF.len()..];
        let Some(end) = rest.find('}') else { break };
        let Ok(port) = rest[..end].parse::<u16>() else {
            break;
        };
        let whole = format!("{PORT_SUFFIX_OF}{}}}", &rest[..end]);
        out = out.replacen(&whole, &suffix(port), 1);
    }
    out
}

/// The first `${pontoon_...}` in `s` that is not a known placeholder.
fn unknown_placeholder(s: &str) -> Option<String> {
    let mut rest = s;
    while let Some(start) = rest.find(PLACEHOLDER_START) {
        let tail = &rest[start..];
        let end = tail.find('}').map_or(tail.len(), |e| e + 1);
        let placeholder = &tail[..end];
        let known = [LISTENER_SCHEME, LISTENER_PORT, PORT_SUFFIX, MATCH_PREFIX]
            .contains(&placeholder)
            || placeholder
                .strip_prefix(PORT_SUFFIX_OF)
                .and_then(|p| p.strip_suffix('}'))
                .is_some_and(|p| p.parse::<u16>().is_ok());
        if !known {
            return Some(placeholder.to_string());
        }
        rest = &tail[end..];
    }
    None
}

fn visit_strings(value: &Value, f: &mut impl FnMut(&str)) {
    match value {
        Value::String(s) => f(s),
        Value::Array(items) => items.iter().for_each(|v| visit_strings(v, f)),
        Value::Object(map) => map.values().for_each(|v| visit_strings(v, f)),
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::gateway::config::routes::PathSpec;

    fn http(port: u16) -> ListenerFacts {
        ListenerFacts {
            protocol: Protocol::Http,
            port,
        }
    }

    #[test]
    fn placeholders_take_the_listener() {
        let s = "${pontoon_listener_scheme}://${host}${pontoon_port_suffix}${path}";
        assert_eq!(fill_str(s, http(80), None), "http://${host}${path}");
        assert_eq!(fill_str(s, http(8080), None), "http://${host}:8080${path}");
        let https = ListenerFacts {
            protocol: Protocol::Https,
            port: 443,
        };
        assert_eq!(fill_str(s, https, None), "https://${host}${path}");
        let explicit = "x${pontoon_port_suffix:443}y${pontoon_port_suffix:80}z";
        assert_eq!(fill_str(explicit, https, None), "xy:80z");
        assert_eq!(fill_str(explicit, http(80), None), "x:443yz");
        assert_eq!(fill_str("${pontoon_listener_port}", http(81), None), "81");
    }

    #[test]
    fn unknown_placeholders_and_prefix_without_prefix_match_are_refused() {
        let filter = |entry: Value| TranslatedFilter {
            kind: "URLRewrite".into(),
            module: "m".into(),
            entries: vec![entry],
        };
        let prefix = CheckedMatch {
            path: PathSpec::Prefix("/a".into()),
            method: None,
            exact_headers: Vec::new(),
            regex_headers: Vec::new(),
        };
        let exact = CheckedMatch {
            path: PathSpec::Exact("/a".into()),
            ..prefix.clone()
        };
        let uses_prefix =
            filter(json!({"filter": "url_rewrite", "p": "^${pontoon_match_prefix}(/.*)?$"}));
        assert!(
            check(
                std::slice::from_ref(&uses_prefix),
                std::slice::from_ref(&prefix)
            )
            .is_ok()
        );
        let why = check(&[uses_prefix], &[prefix, exact]).unwrap_err();
        assert!(why.contains("not a PathPrefix"), "{why}");
        let why = check(
            &[filter(json!({"filter": "x", "v": "${pontoon_nope}"}))],
            &[],
        )
        .unwrap_err();
        assert!(
            why.contains("unknown placeholder `${pontoon_nope}`"),
            "{why}"
        );
        let why = check(&[filter(json!({"no": "filter"}))], &[]).unwrap_err();
        assert!(
            why.contains("filter 0 (URLRewrite, from module m): an entry has no `filter`"),
            "{why}"
        );
        let why = check(&[filter(json!("headers"))], &[]).unwrap_err();
        assert!(why.contains("not a JSON object"), "{why}");
    }

    #[test]
    fn entries_are_gated_on_their_rule_and_keep_their_own_conditions_after() {
        let filters = [TranslatedFilter {
            kind: "RequestHeaderModifier".into(),
            module: "m".into(),
            entries: vec![json!({
                "filter": "headers",
                "conditions": [{"when": {"methods": ["GET"]}}],
                "request_set": [{"name": "a", "value": "b"}]
            })],
        }];
        let out = rule_entries(
            &filters,
            &[],
            "r1",
            |k| format!("r1-m{k}"),
            http(80),
            Some(500),
        );
        let out = serde_json::to_value(&out).unwrap();
        assert_eq!(
            out,
            json!([
                {
                    "filter": "headers",
                    "conditions": [
                        {"when": {"selected_upstream": {"application_protocol": "r1"}}},
                        {"when": {"methods": ["GET"]}}
                    ],
                    "request_set": [{"name": "a", "value": "b"}]
                },
                {
                    "filter": "static_response",
                    "conditions": [{"when": {"selected_upstream": {"application_protocol": "r1"}}}],
                    "status": 500
                }
            ])
        );
    }
}
