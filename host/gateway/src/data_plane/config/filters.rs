//! A rule's translated filters, scoped to that rule.
//!
//! The entries come from config filter modules (Praxis filter entries as
//! JSON). Each one is gated on the rule's tag: the load balancer publishes
//! the selected cluster's `application_protocol` (the rule) and
//! `application_provider` (the match), and a `selected_upstream` condition
//! lets the entry run only when its own rule was routed to. So a filter
//! never reaches another rule, even one with the same path on the listener.
//!
//!
//! What a module cannot know is left as a placeholder (`placeholders`), filled
//! in as each entry is written (`module_entry`).

use std::sync::Arc;

use serde_json::{Map, Value};

use super::{
    conditions::{Condition, ConditionMatch, SelectedUpstream},
    module_entry::{Fill, ModuleEntry},
    placeholders::{ListenerFacts, MATCH_PREFIX, may_hold_placeholder, unknown_placeholder},
    praxis::{Filter, StaticResponse, Timeout},
    route_entries::CheckedMatch,
};
use crate::data_plane::{model::TranslatedFilter, program::DataPlane};

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

/// Checks a rule's translated filters; `Err` says what is wrong with them,
/// or that they need a filter `plane` lacks.
pub fn check(
    filters: &[TranslatedFilter],
    matches: &[CheckedMatch],
    plane: DataPlane,
) -> Result<(), String> {
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
            let Some(name) = object.get("filter").and_then(Value::as_str) else {
                return Err(format!("{}: an entry has no `filter` name", at()));
            };
            if !plane.has_filter(name)
                && let Some(why) = plane.lacks(&format!("its entry `{name}`"))
            {
                return Err(format!("{}: {why}", at()));
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

/// Whether any entry is a security filter.
pub fn has_security_filter(filters: &[TranslatedFilter]) -> bool {
    filters.iter().flat_map(|f| f.entries.iter()).any(|e| {
        e.get("filter")
            .and_then(Value::as_str)
            .is_some_and(|name| SECURITY_FILTERS.contains(&name))
    })
}

/// The condition that runs an entry only for requests its rule (and, with
/// `provider`, its match) was routed to.
pub(super) fn gate(protocol: Option<String>, provider: Option<String>) -> Condition {
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
    use crate::{data_plane::config::route_entries::PathSpec, data_plane::model::Protocol};

    fn http(port: u16) -> ListenerFacts {
        ListenerFacts {
            protocol: Protocol::Http,
            port,
        }
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
            exact_query: Vec::new(),
            regex_query: Vec::new(),
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
                std::slice::from_ref(&prefix),
                DataPlane::Pontoon
            )
            .is_ok()
        );
        let why = check(&[uses_prefix], &[prefix, exact], DataPlane::Pontoon).unwrap_err();
        assert!(why.contains("not a PathPrefix"), "{why}");
        let why = check(
            &[filter(json!({"filter": "x", "v": "${pontoon_nope}"}))],
            &[],
            DataPlane::Pontoon,
        )
        .unwrap_err();
        assert!(
            why.contains("unknown placeholder `${pontoon_nope}`"),
            "{why}"
        );
        let why = check(&[filter(json!({"no": "filter"}))], &[], DataPlane::Pontoon).unwrap_err();
        assert!(
            why.contains("filter 0 (URLRewrite, from module m): an entry has no `filter`"),
            "{why}"
        );
        let why = check(&[filter(json!("headers"))], &[], DataPlane::Pontoon).unwrap_err();
        assert!(why.contains("not a JSON object"), "{why}");
    }

    #[test]
    fn entries_of_pontoons_filters_are_refused_on_stock_praxis() {
        let redirect = TranslatedFilter {
            kind: "RequestRedirect".into(),
            module: "standard-filters".into(),
            entries: vec![json!({"filter": "pontoon_redirect", "status": 303, "location": "/"})]
                .into(),
        };
        let filters = std::slice::from_ref(&redirect);
        assert!(check(filters, &[], DataPlane::Pontoon).is_ok());
        let why = check(filters, &[], DataPlane::StockPraxis).unwrap_err();
        assert!(
            why.contains(
                "filter 0 (RequestRedirect, from module standard-filters): its entry \
                 `pontoon_redirect` needs Pontoon's data plane"
            ),
            "{why}"
        );
        assert!(why.contains("--praxis-image"), "{why}");
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
