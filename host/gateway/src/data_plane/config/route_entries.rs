//! HTTPRoute matches to Praxis router entries, in the Gateway API's order.
//!
//! Praxis's router matches a path (exact, or prefix at segment boundaries,
//! which is the spec's PathPrefix), one host pattern and exact header values,
//! and ranks matching entries by (exact path, path length, number of host and
//! header constraints), the first in config order winning ties. What it
//! cannot test itself is tested before it by classifiers that set internal
//! `x-praxis-pontoon-*` request headers (clients cannot send `x-praxis-*`
//! headers: Praxis rejects such requests, and strips them upstream), which
//! the entries then require:
//!
//! - a method: a `headers` filter gated on `methods` sets the method header;
//! - a header RegularExpression: `guardrails` in flag mode tests the header
//!   and its branch sets a flag;
//! - hostname precedence: `guardrails` tests `Host` against the more specific
//!   hostnames on the same port, and its branch flags "none of them", which
//!   entries of the less specific pattern require.
//!
//! Every entry is padded with always-set headers to the same number of
//! constraints, so Praxis's ranking reduces to (exact, path length, config
//! order), and config order is the spec's: hostname, method, headers, route
//! age, rule and match order.
//!
//! Query parameters: Pontoon's data plane's `pontoon_query_params` copies a
//! parameter's value into `x-praxis-pontoon-query-<name in hex>` (hex keeps
//! the name's case, which the spec says counts), or sets a flag when it
//! matches a regular expression, and the entries require those. Stock Praxis
//! has nothing that reads the query string: there such rules are refused, as
//! path RegularExpression matches are everywhere.

use std::{
    cmp::Reverse,
    collections::{BTreeMap, BTreeSet},
};

use super::{
    conditions::{Condition, ConditionMatch},
    host_precedence::HostPattern,
    praxis::{
        Branch, Guardrails, GuardrailsRule, HeaderPair, Headers, InlineChain, OnResult, QueryCopy,
        QueryParams, QueryTest, ResultMatch, Route as RouterRoute,
    },
};
use crate::data_plane::{
    model::{Match, MatchKind, PathMatch, Rule},
    program::DataPlane,
};

/// Prefix of every internal header Pontoon sets (reserved by Praxis).
pub const INTERNAL_HEADER_PREFIX: &str = "x-praxis-pontoon-";
/// Header-name prefixes Praxis reserves: a request carrying one is refused.
const RESERVED_PREFIXES: [&str; 3] = ["x-praxis-", "x-ext-protocol-", "x-ext-agent-"];
/// Praxis's limits for a user regular expression (guardrails).
const MAX_PATTERN_LEN: usize = 1024;
const MAX_REGEX_SIZE: usize = 1 << 20;

/// The path part of a router entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PathSpec {
    Exact(String),
    Prefix(String),
}

impl PathSpec {
    /// Praxis's measure of a path's specificity: the exact path's length, or
    /// the prefix's without its trailing `/` (`/` itself counts 1).
    fn specificity(&self) -> usize {
        match self {
            Self::Exact(p) => p.len(),
            Self::Prefix(p) => p.strip_suffix('/').unwrap_or(p).len().max(1),
        }
    }

    /// The prefix a PathPrefix match replaces (ReplacePrefixMatch), without a
    /// trailing `/`.
    pub fn prefix(&self) -> Option<&str> {
        match self {
            Self::Prefix(p) => Some(p.strip_suffix('/').unwrap_or(p)),
            Self::Exact(_) => None,
        }
    }
}

/// A match the router can take, once checked.
#[derive(Clone, Debug)]
pub struct CheckedMatch {
    pub path: PathSpec,
    pub method: Option<String>,
    /// Lower-case names, first occurrence of a name only (the spec's rule).
    pub exact_headers: Vec<(String, String)>,
    /// Lower-case names; anchored full-value patterns.
    pub regex_headers: Vec<(String, String)>,
    /// Query parameters (name, value), first occurrence of a name only.
    pub exact_query: Vec<(String, String)>,
    /// Query parameters (name, anchored full-value pattern).
    pub regex_query: Vec<(String, String)>,
}

/// Checks a rule's matches; `Err` says why Praxis cannot express the rule.
pub fn check_matches(rule: &Rule, plane: DataPlane) -> Result<Vec<CheckedMatch>, String> {
    if rule.matches.is_empty() {
        return Ok(vec![CheckedMatch {
            path: PathSpec::Prefix("/".into()),
            method: None,
            exact_headers: Vec::new(),
            regex_headers: Vec::new(),
            exact_query: Vec::new(),
            regex_query: Vec::new(),
        }]);
    }
    rule.matches
        .iter()
        .enumerate()
        .map(|(index, m)| check_match(m, plane).map_err(|why| format!("match {index}: {why}")))
        .collect()
}

fn check_match(m: &Match, plane: DataPlane) -> Result<CheckedMatch, String> {
    let path = match &m.path {
        None => PathSpec::Prefix("/".into()),
        Some(PathMatch::Exact(p)) => PathSpec::Exact(check_path(p, "Exact")?),
        Some(PathMatch::Prefix(p)) => PathSpec::Prefix(check_path(p, "PathPrefix")?),
        Some(PathMatch::RegularExpression(_)) => {
            return Err(
                "path type RegularExpression is not supported: Praxis 0.7.5 matches paths \
                        by exact value or prefix only, and none of its filters tests a path \
                        against a regular expression"
                    .into(),
            );
        }
    };
    if let Some(q) = m.query_params.first()
        && let Some(why) = plane.lacks(&format!(
            "queryParams ({}): matching the query string (Praxis's router and conditions do not \
             read it)",
            q.name
        ))
    {
        return Err(why);
    }
    let (exact_query, regex_query) = check_query(m)?;
    let method = match &m.method {
        Some(method) if !is_token(method) => {
            return Err(format!("method {method:?} is not an HTTP method token"));
        }
        method => method.clone(),
    };
    let mut seen = BTreeSet::new();
    let (mut exact_headers, mut regex_headers) = (Vec::new(), Vec::new());
    for header in &m.headers {
        let name = header.name.to_ascii_lowercase();
        if !is_token(&name) {
            return Err(format!(
                "header name {:?} is not a valid HTTP header name",
                header.name
            ));
        }
        if let Some(prefix) = RESERVED_PREFIXES.iter().find(|p| name.starts_with(*p)) {
            return Err(format!(
                "header {name}: Praxis reserves `{prefix}*` headers and refuses requests that \
                 carry one, so this match could never hold"
            ));
        }
        if !seen.insert(name.clone()) {
            continue;
        }
        match header.kind {
            MatchKind::Exact => exact_headers.push((name, header.value.clone())),
            MatchKind::RegularExpression => {
                let pattern = anchored(&header.value);
                check_regex(&pattern).map_err(|why| format!("header {name}: {why}"))?;
                regex_headers.push((name, pattern));
            }
        }
    }
    Ok(CheckedMatch {
        path,
        method,
        exact_headers,
        regex_headers,
        exact_query,
        regex_query,
    })
}

/// A match's query parameters: (exact, regular expression), first entry of
/// a name only (the spec's rule for repeated names).
type QueryTests = (Vec<(String, String)>, Vec<(String, String)>);

fn check_query(m: &Match) -> Result<QueryTests, String> {
    let mut seen = BTreeSet::new();
    let (mut exact, mut regex) = (Vec::new(), Vec::new());
    for q in &m.query_params {
        if q.name.is_empty() {
            return Err("a queryParams name is empty".into());
        }
        if !seen.insert(q.name.as_str()) {
            continue;
        }
        match q.kind {
            MatchKind::Exact => {
                // The router compares it with a header's value.
                if !q
                    .value
                    .bytes()
                    .all(|b| b == b'\t' || (0x20..0x7f).contains(&b))
                {
                    return Err(format!(
                        "queryParams {}: the value has characters other than printable ASCII, \
                         which the data plane cannot compare",
                        q.name
                    ));
                }
                exact.push((q.name.clone(), q.value.clone()));
            }
            MatchKind::RegularExpression => {
                let pattern = anchored(&q.value);
                check_regex(&pattern).map_err(|why| format!("queryParams {}: {why}", q.name))?;
                regex.push((q.name.clone(), pattern));
            }
        }
    }
    Ok((exact, regex))
}

/// The internal header `pontoon_query_params` copies parameter `name` into.
fn query_header(name: &str) -> String {
    let hex: String = name.bytes().map(|b| format!("{b:02x}")).collect();
    flag(&format!("query-{hex}"))
}

fn check_path(path: &str, kind: &str) -> Result<String, String> {
    if !path.starts_with('/') {
        return Err(format!("{kind} path {path:?} does not start with `/`"));
    }
    Ok(path.to_string())
}

/// The spec's regular expressions match the whole value.
fn anchored(pattern: &str) -> String {
    format!("^(?:{pattern})$")
}

fn check_regex(pattern: &str) -> Result<(), String> {
    if pattern.len() > MAX_PATTERN_LEN {
        return Err(format!(
            "the regular expression is longer than Praxis's limit of {MAX_PATTERN_LEN} characters"
        ));
    }
    regex::RegexBuilder::new(pattern)
        .size_limit(MAX_REGEX_SIZE)
        .build()
        .map(drop)
        .map_err(|e| {
            let detail = e.to_string();
            let last = detail.lines().last().unwrap_or_default().trim().to_string();
            format!("invalid regular expression: {last}")
        })
}

fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// One router entry to be: a checked match under one host pattern.
#[derive(Clone, Debug)]
pub struct Candidate {
    pub path: PathSpec,
    pub host: HostPattern,
    /// The Gateway listener's hostname (for listener-level precedence).
    pub listener_host: HostPattern,
    pub method: Option<String>,
    pub exact_headers: Vec<(String, String)>,
    pub regex_headers: Vec<(String, String)>,
    pub exact_query: Vec<(String, String)>,
    pub regex_query: Vec<(String, String)>,
    pub cluster: String,
    /// (listener, route, rule, match, hostname) positions: the spec's
    /// tie-breakers after the match's own precedence.
    pub order: [usize; 5],
}

impl Candidate {
    fn sort_key(&self) -> impl Ord + use<> {
        (
            Reverse(matches!(self.path, PathSpec::Exact(_))),
            Reverse(self.path.specificity()),
            self.host.precedence(),
            Reverse(self.method.is_some()),
            Reverse(self.exact_headers.len() + self.regex_headers.len()),
            Reverse(self.exact_query.len() + self.regex_query.len()),
            self.order,
        )
    }
}

/// The classifiers and the router entries for one Praxis listener.
pub struct Routing {
    pub classifiers: Vec<super::praxis::Filter<'static>>,
    pub routes: Vec<RouterRoute>,
}

/// Builds the router entries (and what they need before the router) for the
/// candidates of one Praxis listener. `chain` names the filter chain, for
/// unique branch names.
pub fn routing(chain: &str, mut candidates: Vec<Candidate>) -> Routing {
    candidates.sort_by_key(Candidate::sort_key);
    let exclusions = host_exclusions(&candidates);

    let mut classifiers = Vec::new();
    let mut entries: Vec<(RouterRoute, usize)> = Vec::with_capacity(candidates.len());

    let methods: BTreeSet<&str> = candidates
        .iter()
        .filter_map(|c| c.method.as_deref())
        .collect();
    let regex_index = numbered(&candidates, |c| &c.regex_headers);
    let query_copies: BTreeSet<&str> = candidates
        .iter()
        .flat_map(|c| c.exact_query.iter().map(|(n, _)| n.as_str()))
        .collect();
    let query_tests = numbered(&candidates, |c| &c.regex_query);
    let mut exclusion_sets: Vec<&BTreeSet<HostPattern>> =
        exclusions.iter().filter(|e| !e.is_empty()).collect();
    exclusion_sets.sort();
    exclusion_sets.dedup();

    for (candidate, excluded) in candidates.iter().zip(&exclusions) {
        let mut headers: BTreeMap<String, String> =
            candidate.exact_headers.iter().cloned().collect();
        if let Some(method) = &candidate.method {
            headers.insert(method_header(), method.clone());
        }
        for (name, pattern) in &candidate.regex_headers {
            if let Some(i) = regex_index.get(&(name.as_str(), pattern.as_str())) {
                headers.insert(flag(&format!("header-{i}")), "1".into());
            }
        }
        for (name, value) in &candidate.exact_query {
            headers.insert(query_header(name), value.clone());
        }
        for (name, pattern) in &candidate.regex_query {
            if let Some(i) = query_tests.get(&(name.as_str(), pattern.as_str())) {
                headers.insert(flag(&format!("query-re-{i}")), "1".into());
            }
        }
        if !excluded.is_empty()
            && let Ok(i) = exclusion_sets.binary_search(&excluded)
        {
            headers.insert(flag(&format!("host-{i}")), "1".into());
        }
        let host = candidate.host.router_host();
        let constraints = headers.len() + usize::from(host.is_some());
        let (path, path_prefix) = match &candidate.path {
            PathSpec::Exact(p) => (Some(p.clone()), None),
            PathSpec::Prefix(p) => (None, Some(p.clone())),
        };
        entries.push((
            RouterRoute {
                path,
                path_prefix,
                host,
                headers,
                cluster: candidate.cluster.clone(),
            },
            constraints,
        ));
    }

    // Pads: every entry ends up with as many constraints as the most
    // constrained one, so constraint counts never outrank config order.
    let most = entries.iter().map(|(_, c)| *c).max().unwrap_or(0);
    let least = entries.iter().map(|(_, c)| *c).min().unwrap_or(0);
    if most > least {
        classifiers.push(super::praxis::Filter::Headers(Headers::set(
            Vec::new(),
            (1..=most - least)
                .map(|i| HeaderPair {
                    name: flag(&format!("pad-{i}")),
                    value: "1".into(),
                })
                .collect(),
        )));
    }
    let routes = entries
        .into_iter()
        .map(|(mut route, constraints)| {
            for i in 1..=most - constraints {
                route.headers.insert(flag(&format!("pad-{i}")), "1".into());
            }
            route
        })
        .collect();

    for method in methods {
        classifiers.push(super::praxis::Filter::Headers(Headers::set(
            vec![Condition {
                when: ConditionMatch {
                    methods: Some(vec![method.to_string()]),
                    ..ConditionMatch::default()
                },
            }],
            vec![HeaderPair {
                name: method_header(),
                value: method.to_string(),
            }],
        )));
    }
    for (i, excluded) in exclusion_sets.iter().enumerate() {
        let rules = excluded
            .iter()
            .filter_map(HostPattern::host_header_regex)
            .map(|pattern| GuardrailsRule {
                target: "header",
                name: "host".into(),
                pattern,
            })
            .collect();
        // Flagged when Host names none of the more specific hostnames.
        classifiers.push(classifier(
            chain,
            &format!("host-{i}"),
            rules,
            ResultMatch::Not { not: "blocked" },
        ));
    }
    for ((name, pattern), i) in &regex_index {
        let rule = GuardrailsRule {
            target: "header",
            name: (*name).to_string(),
            pattern: (*pattern).to_string(),
        };
        classifiers.push(classifier(
            chain,
            &format!("header-{i}"),
            vec![rule],
            ResultMatch::Exact("blocked"),
        ));
    }

    if !query_copies.is_empty() || !query_tests.is_empty() {
        classifiers.push(super::praxis::Filter::QueryParams(QueryParams {
            filter: "pontoon_query_params",
            copy: query_copies
                .iter()
                .map(|name| QueryCopy {
                    name: (*name).to_string(),
                    header: query_header(name),
                })
                .collect(),
            test: query_tests
                .iter()
                .map(|((name, pattern), i)| QueryTest {
                    name: (*name).to_string(),
                    pattern: (*pattern).to_string(),
                    header: flag(&format!("query-re-{i}")),
                })
                .collect(),
        }));
    }

    Routing {
        classifiers,
        routes,
    }
}

/// Each distinct (name, pattern) of the candidates' `patterns`, numbered in
/// sorted order: the number names its classifier's flag header.
fn numbered<'a>(
    candidates: &'a [Candidate],
    patterns: impl Fn(&'a Candidate) -> &'a [(String, String)],
) -> BTreeMap<(&'a str, &'a str), usize> {
    candidates
        .iter()
        .flat_map(|c| patterns(c).iter().map(|(n, p)| (n.as_str(), p.as_str())))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .enumerate()
        .map(|(i, k)| (k, i))
        .collect()
}

fn method_header() -> String {
    flag("method")
}

fn flag(what: &str) -> String {
    format!("{INTERNAL_HEADER_PREFIX}{what}")
}

/// `guardrails` in flag mode whose branch sets the flag header `what` when
/// its verdict is `result`.
fn classifier(
    chain: &str,
    what: &str,
    rules: Vec<GuardrailsRule>,
    result: ResultMatch,
) -> super::praxis::Filter<'static> {
    let name = format!("{chain}-{what}");
    super::praxis::Filter::Guardrails(Guardrails {
        filter: "guardrails",
        action: "flag",
        rules,
        branch_chains: vec![Branch {
            name: name.clone(),
            on_result: OnResult {
                filter: "guardrails",
                key: "status",
                result,
            },
            chains: vec![InlineChain {
                name: format!("{name}-set"),
                filters: vec![Headers::set(
                    Vec::new(),
                    vec![HeaderPair {
                        name: flag(what),
                        value: "1".into(),
                    }],
                )],
            }],
        }],
    })
}

/// For each candidate, the more specific host patterns whose hosts it must
/// not take: listeners' hostnames on the same port within its listener's
/// (those a request is given to first), and route hostnames of its own
/// listener within its own.
fn host_exclusions(candidates: &[Candidate]) -> Vec<BTreeSet<HostPattern>> {
    let listener_patterns: BTreeSet<&HostPattern> =
        candidates.iter().map(|c| &c.listener_host).collect();
    let mut route_patterns: BTreeMap<usize, BTreeSet<&HostPattern>> = BTreeMap::new();
    for c in candidates {
        route_patterns
            .entry(c.order[0])
            .or_default()
            .insert(&c.host);
    }
    candidates
        .iter()
        .map(|c| {
            // Only those that share hosts with the entry's own pattern.
            let listener_level = listener_patterns
                .iter()
                .filter(|p| p.strictly_within(&c.listener_host) && p.overlaps(&c.host));
            let route_level = route_patterns
                .get(&c.order[0])
                .into_iter()
                .flatten()
                .filter(|p| p.strictly_within(&c.host));
            listener_level
                .chain(route_level)
                .map(|p| (*p).clone())
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests;
