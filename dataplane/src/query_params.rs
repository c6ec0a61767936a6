//! `pontoon_query_params`: HTTPRoute query parameter matches.
//!
//! Praxis's router does not read the query string, but it reads the
//! request headers earlier filters set. So this filter, before the router,
//! writes what the listener's routes ask of the query into internal headers
//! that the router's entries then require:
//!
//! - `copy`: the value of a parameter, for exact matches;
//! - `test`: `1` when the value matches a regular expression (Praxis's
//!   `guardrails`, which classifies headers, reads them as received, so it
//!   cannot test a copy).
//!
//! Praxis refuses requests that carry `x-praxis-*` headers of their own and
//! strips them upstream, so a client can neither forge these nor see them
//! reach a backend.
//!
//! A parameter's name is compared exactly (the Gateway API: case-sensitive)
//! after percent-decoding, as is its value; where a parameter is repeated,
//! the first occurrence counts. A value that cannot be a header value (a
//! control character once decoded) is not copied, so matches nothing exactly.
//!
//! ```yaml
//! filter: pontoon_query_params
//! copy: [{name: animal, header: x-praxis-pontoon-query-616e696d616c}]
//! test: [{name: animal, pattern: "^(?:wh.*)$", header: x-praxis-pontoon-query-re-0}]
//! ```

use std::borrow::Cow;

use async_trait::async_trait;
use http::{HeaderName, HeaderValue};
use praxis_filter::{
    FilterAction, FilterError, HttpFilter, HttpFilterContext, parse_filter_config,
};
use regex::Regex;
use serde::Deserialize;

pub const NAME: &str = "pontoon_query_params";

/// Header names this filter may write: reserved by Praxis, so no client
/// sends them.
const HEADER_PREFIX: &str = "x-praxis-pontoon-";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default)]
    copy: Vec<Copy>,
    #[serde(default)]
    test: Vec<Test>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Copy {
    name: String,
    header: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Test {
    name: String,
    pattern: String,
    header: String,
}

pub struct QueryParams {
    /// Every parameter named, once: the index of its value in [`Self::values`].
    names: Vec<String>,
    copy: Vec<(usize, HeaderName)>,
    test: Vec<(usize, Regex, HeaderName)>,
}

/// Limits of a pattern, as Praxis's own for user regular expressions.
const MAX_PATTERN_LEN: usize = 1024;
const MAX_REGEX_SIZE: usize = 1 << 20;

impl QueryParams {
    pub fn from_config(config: &serde_yaml::Value) -> Result<Box<dyn HttpFilter>, FilterError> {
        let config: Config = parse_filter_config(NAME, config)?;
        if config.copy.is_empty() && config.test.is_empty() {
            return Err(format!("{NAME}: neither `copy` nor `test` names a parameter").into());
        }
        let mut names: Vec<String> = Vec::new();
        let mut index_of = |name: &str| -> Result<usize, String> {
            if name.is_empty() {
                return Err(format!("{NAME}: a parameter's `name` is empty"));
            }
            Ok(names.iter().position(|n| n == name).unwrap_or_else(|| {
                names.push(name.to_string());
                names.len() - 1
            }))
        };
        let mut copy = Vec::with_capacity(config.copy.len());
        for c in &config.copy {
            copy.push((index_of(&c.name)?, internal_header(&c.header)?));
        }
        let mut test = Vec::with_capacity(config.test.len());
        for t in &config.test {
            if t.pattern.len() > MAX_PATTERN_LEN {
                return Err(format!(
                    "{NAME}: the pattern for `{}` is longer than {MAX_PATTERN_LEN} characters",
                    t.name
                )
                .into());
            }
            let regex = regex::RegexBuilder::new(&t.pattern)
                .size_limit(MAX_REGEX_SIZE)
                .build()
                .map_err(|e| format!("{NAME}: the pattern for `{}`: {e}", t.name))?;
            test.push((index_of(&t.name)?, regex, internal_header(&t.header)?));
        }
        Ok(Box::new(Self { names, copy, test }))
    }

    /// The first value of each named parameter in `query`, decoded.
    fn values<'q>(&self, query: &'q str) -> Vec<Option<Cow<'q, str>>> {
        let mut found: Vec<Option<Cow<'q, str>>> = vec![None; self.names.len()];
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let name = decode(name);
            if let Some(i) = self.names.iter().position(|n| *n == name)
                && let Some(slot) = found.get_mut(i)
                && slot.is_none()
            {
                *slot = Some(decode(value));
            }
        }
        found
    }

    /// The internal headers for `query`.
    fn headers(&self, query: &str) -> Vec<(HeaderName, HeaderValue)> {
        let values = self.values(query);
        let value = |i: usize| values.get(i).and_then(Option::as_deref);
        let copies = self.copy.iter().filter_map(|(i, header)| {
            let value = HeaderValue::from_str(value(*i)?).ok()?;
            Some((header.clone(), value))
        });
        let tests = self
            .test
            .iter()
            .filter(|(i, regex, _)| value(*i).is_some_and(|v| regex.is_match(v)))
            .map(|(_, _, header)| (header.clone(), HeaderValue::from_static("1")));
        copies.chain(tests).collect()
    }
}

fn internal_header(name: &str) -> Result<HeaderName, String> {
    let header = HeaderName::try_from(name).map_err(|e| format!("{NAME}: header `{name}`: {e}"))?;
    if !header.as_str().starts_with(HEADER_PREFIX) {
        return Err(format!(
            "{NAME}: header `{header}` does not start with `{HEADER_PREFIX}`: a client could \
             send it"
        ));
    }
    Ok(header)
}

fn decode(text: &str) -> Cow<'_, str> {
    percent_encoding::percent_decode_str(text).decode_utf8_lossy()
}

#[async_trait]
impl HttpFilter for QueryParams {
    fn name(&self) -> &'static str {
        NAME
    }

    async fn on_request(
        &self,
        ctx: &mut HttpFilterContext<'_>,
    ) -> Result<FilterAction, FilterError> {
        if let Some(query) = ctx.request.uri.query() {
            let headers = self.headers(query);
            ctx.request_headers_to_set.extend(headers);
        }
        Ok(FilterAction::Continue)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_context::{config, run_request};

    fn filter() -> Box<dyn HttpFilter> {
        QueryParams::from_config(&config(
            r#"{copy: [{name: animal, header: x-praxis-pontoon-query-0},
                       {name: Color, header: x-praxis-pontoon-query-1}],
                test: [{name: animal, pattern: "^(?:wh.*)$", header: x-praxis-pontoon-query-re-0}]}"#,
        ))
        .unwrap()
    }

    fn set_headers(uri: &str) -> Vec<(String, String)> {
        let (action, ctx) = run_request(&*filter(), uri);
        assert!(matches!(action, FilterAction::Continue));
        ctx.into_iter()
            .map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_string()))
            .collect()
    }

    #[test]
    fn first_value_of_each_named_parameter_is_copied() {
        assert_eq!(
            set_headers("/?animal=whale&Color=blue&animal=dolphin"),
            vec![
                ("x-praxis-pontoon-query-0".into(), "whale".into()),
                ("x-praxis-pontoon-query-1".into(), "blue".into()),
                ("x-praxis-pontoon-query-re-0".into(), "1".into()),
            ]
        );
    }

    #[test]
    fn names_are_case_sensitive_and_decoded() {
        assert_eq!(
            set_headers("/x?color=red&Col%6Fr=dark%20blue&animal"),
            vec![
                ("x-praxis-pontoon-query-0".into(), String::new()),
                ("x-praxis-pontoon-query-1".into(), "dark blue".into()),
            ]
        );
    }

    #[test]
    fn no_query_or_no_such_parameter_sets_nothing() {
        assert!(set_headers("/").is_empty());
        assert!(set_headers("/?other=1").is_empty());
    }

    #[test]
    fn a_pattern_must_match_the_whole_value_the_operator_anchored() {
        assert_eq!(
            set_headers("/?animal=dolphin"),
            vec![("x-praxis-pontoon-query-0".into(), "dolphin".into())]
        );
        assert_eq!(set_headers("/?animal=awhale").len(), 1);
    }

    #[test]
    fn a_value_that_cannot_be_a_header_is_not_copied() {
        assert!(set_headers("/?animal=a%0Ab").is_empty());
    }

    #[test]
    fn headers_a_client_could_send_are_refused() {
        let err = QueryParams::from_config(&config("copy: [{name: a, header: x-animal}]"))
            .err()
            .unwrap();
        assert!(err.to_string().contains("a client could send it"), "{err}");
        assert!(QueryParams::from_config(&config("copy: []")).is_err());
        assert!(QueryParams::from_config(&config("copy: [{name: a}]")).is_err());
        let bad = "test: [{name: a, pattern: '(', header: x-praxis-pontoon-q}]";
        assert!(QueryParams::from_config(&config(bad)).is_err());
    }
}
