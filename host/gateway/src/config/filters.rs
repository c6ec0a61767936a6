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

use std::sync::Arc;

use serde::{
    Serialize, Serializer,
    ser::{SerializeMap, SerializeSeq},
};
use serde_json::{Map, Value};

use super::{
    praxis::{Condition, ConditionMatch, Filter, SelectedUpstream, StaticResponse, Timeout},
    routes::CheckedMatch,
};
use crate::model::{Protocol, TranslatedFilter};

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
        for entry in filter.entries.iter() {
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
pub fn rule_entries<'a>(
    filters: &'a [TranslatedFilter],
    matches: &[CheckedMatch],
    rule_tag: &str,
    match_tag: impl Fn(usize) -> String,
    listener: ListenerFacts,
    status: Option<u16>,
    request_timeout_ms: Option<u64>,
) -> Vec<Filter<'a>> {
    let rule_condition = gate(Some(rule_tag.to_string()), None);
    let rule_gate = Arc::new(rule_condition.clone());
    let mut out = Vec::new();
    if let Some(timeout_ms) = request_timeout_ms {
        out.push(Filter::Timeout(Timeout {
            filter: "timeout",
            conditions: vec![rule_condition.clone()],
            timeout_ms,
        }));
    }
    for entry in filters.iter().flat_map(|f| f.entries.iter()) {
        // `check` refused anything but objects beforehand.
        let Some(entry) = entry.as_object() else {
            continue;
        };
        let mut uses_prefix = false;
        visit_map_strings(entry, &mut |s| uses_prefix |= s.contains(MATCH_PREFIX));
        if uses_prefix {
            for (k, m) in matches.iter().enumerate() {
                let prefix = regex::escape(m.path.prefix().unwrap_or_default());
                let gate = Arc::new(gate(Some(rule_tag.to_string()), Some(match_tag(k))));
                out.push(Filter::Module(ModuleEntry::new(
                    entry,
                    gate,
                    Fill {
                        listener,
                        match_prefix: Some(prefix),
                    },
                )));
            }
        } else {
            out.push(Filter::Module(ModuleEntry::new(
                entry,
                rule_gate.clone(),
                Fill {
                    listener,
                    match_prefix: None,
                },
            )));
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

/// A module's entry as Praxis gets it, written straight from the model's
/// JSON when the config is serialized (no copy of the tree per entry): the
/// gate condition before the entry's own conditions, placeholders filled,
/// and `allow_rewrite_override` on rewrite filters (Praxis refuses a second
/// path rewriter in a pipeline without it, but gated rules never both run).
/// Keys come out sorted, as serde_json writes any object.
#[derive(Debug)]
pub struct ModuleEntry<'a> {
    entry: &'a Map<String, Value>,
    gate: Arc<Condition>,
    fill: Fill,
}

#[derive(Debug)]
struct Fill {
    listener: ListenerFacts,
    /// The regex-escaped prefix of the match this copy is gated on.
    match_prefix: Option<String>,
}

impl<'a> ModuleEntry<'a> {
    fn new(entry: &'a Map<String, Value>, gate: Arc<Condition>, fill: Fill) -> Self {
        Self { entry, gate, fill }
    }

    /// The entry as the module returned it.
    pub fn source(&self) -> &'a Map<String, Value> {
        self.entry
    }

    fn is_rewrite(&self) -> bool {
        self.entry
            .get("filter")
            .and_then(Value::as_str)
            .is_some_and(|f| REWRITE_FILTERS.contains(&f))
    }
}

/// What one key of a [`ModuleEntry`] writes.
enum Field<'e> {
    Value(&'e Value),
    Conditions(&'e [Value]),
    True,
}

impl Serialize for ModuleEntry<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut fields: Vec<(&str, Field<'_>)> = Vec::with_capacity(self.entry.len() + 2);
        for (key, value) in self.entry {
            match key.as_str() {
                "conditions" | "allow_rewrite_override" => {}
                _ => fields.push((key, Field::Value(value))),
            }
        }
        let own = match self.entry.get("conditions") {
            Some(Value::Array(list)) => list.as_slice(),
            _ => &[],
        };
        fields.push(("conditions", Field::Conditions(own)));
        if self.is_rewrite() {
            fields.push(("allow_rewrite_override", Field::True));
        } else if let Some(value) = self.entry.get("allow_rewrite_override") {
            fields.push(("allow_rewrite_override", Field::Value(value)));
        }
        fields.sort_unstable_by(|a, b| a.0.cmp(b.0));
        let mut map = serializer.serialize_map(Some(fields.len()))?;
        for (key, field) in fields {
            match field {
                Field::Value(value) => map.serialize_entry(key, &Filled(value, &self.fill))?,
                Field::Conditions(own) => map.serialize_entry(
                    key,
                    &Conditions {
                        gate: &self.gate,
                        own,
                        fill: &self.fill,
                    },
                )?,
                Field::True => map.serialize_entry(key, &true)?,
            }
        }
        map.end()
    }
}

/// The gate, then the entry's own conditions.
struct Conditions<'e> {
    gate: &'e Condition,
    own: &'e [Value],
    fill: &'e Fill,
}

impl Serialize for Conditions<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.own.len() + 1))?;
        seq.serialize_element(self.gate)?;
        for condition in self.own {
            seq.serialize_element(&Filled(condition, self.fill))?;
        }
        seq.end()
    }
}

/// A JSON value with its placeholders filled.
struct Filled<'e>(&'e Value, &'e Fill);

impl Serialize for Filled<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let Self(value, fill) = self;
        match value {
            Value::String(s) if may_hold_placeholder(s) => {
                serializer.serialize_str(&fill_str(s, fill.listener, fill.match_prefix.as_deref()))
            }
            Value::Array(items) => {
                let mut seq = serializer.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(&Filled(item, fill))?;
                }
                seq.end()
            }
            Value::Object(entries) => {
                let mut map = serializer.serialize_map(Some(entries.len()))?;
                for (key, item) in entries {
                    map.serialize_entry(key, &Filled(item, fill))?;
                }
                map.end()
            }
            other => other.serialize(serializer),
        }
    }
}

/// Whether any entry is a security filter.
pub fn has_security_filter(filters: &[TranslatedFilter]) -> bool {
    filters.iter().flat_map(|f| f.entries.iter()).any(|e| {
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

fn fill_str(s: &str, listener: ListenerFacts, match_prefix: Option<&str>) -> String {
    let scheme = super::listeners::scheme(listener.protocol);
    let suffix = |port: u16| {
        let default = match listener.protocol {
            Protocol::Http => 80,
            Protocol::Https | Protocol::TlsPassthrough => 443,
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

/// Whether `s` may hold a placeholder: a byte search first, since most
/// strings of most entries hold none.
fn may_hold_placeholder(s: &str) -> bool {
    s.contains('$') && s.contains(PLACEHOLDER_START)
}

fn visit_map_strings(map: &Map<String, Value>, f: &mut impl FnMut(&str)) {
    map.values().for_each(|v| visit_strings(v, f));
}

/// Calls `f` with each string in `value` that may hold a placeholder.
fn visit_strings(value: &Value, f: &mut impl FnMut(&str)) {
    match value {
        Value::String(s) if may_hold_placeholder(s) => f(s),
        Value::String(_) => {}
        Value::Array(items) => items.iter().for_each(|v| visit_strings(v, f)),
        Value::Object(map) => map.values().for_each(|v| visit_strings(v, f)),
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::config::routes::PathSpec;

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
            entries: vec![entry].into(),
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
            })]
            .into(),
        }];
        let out = rule_entries(
            &filters,
            &[],
            "r1",
            |k| format!("r1-m{k}"),
            http(80),
            Some(500),
            None,
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
