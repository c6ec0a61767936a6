//! `pontoon_redirect`: HTTPRoute RequestRedirect where Praxis's `redirect`
//! falls short: status 303, and `ReplacePrefixMatch` (the path with the
//! prefix the rule matched replaced). The operator writes Praxis's own
//! `redirect` for everything else.
//!
//! `location` is a template in the words of Praxis's `redirect`: `${host}`
//! (the request's host, without port), `${path}` (the request's path, after
//! `path_regex_replace` when given), `${query}` (`?` and the query, or
//! nothing). The regular expression is the one the operator writes for
//! URLRewrite's `ReplacePrefixMatch` (the matched prefix and the rest of the
//! path), so a redirect's path and a rewrite's agree.
//!
//! ```yaml
//! filter: pontoon_redirect
//! status: 303
//! location: "http://${host}${path}${query}"
//! path_regex_replace: {pattern: "^/old(/.*)?$", replacement: "/new${1}"}
//! ```

use async_trait::async_trait;
use praxis_filter::{
    FilterAction, FilterError, HttpFilter, HttpFilterContext, Rejection, parse_filter_config,
};
use regex::Regex;
use serde::Deserialize;

pub const NAME: &str = "pontoon_redirect";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    status: u16,
    location: String,
    #[serde(default)]
    path_regex_replace: Option<RegexReplace>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RegexReplace {
    pattern: String,
    replacement: String,
}

pub struct Redirect {
    status: u16,
    location: String,
    path: Option<(Regex, String)>,
}

impl Redirect {
    pub fn from_config(config: &serde_yaml::Value) -> Result<Box<dyn HttpFilter>, FilterError> {
        let config: Config = parse_filter_config(NAME, config)?;
        if !matches!(config.status, 301 | 302 | 303 | 307 | 308) {
            return Err(format!(
                "{NAME}: status {} is not a redirect (301, 302, 303, 307, 308)",
                config.status
            )
            .into());
        }
        let path = config
            .path_regex_replace
            .map(|r| {
                Regex::new(&r.pattern)
                    .map(|re| (re, r.replacement))
                    .map_err(|e| format!("{NAME}: path_regex_replace.pattern: {e}"))
            })
            .transpose()?;
        Ok(Box::new(Self {
            status: config.status,
            location: config.location,
            path,
        }))
    }

    fn location(&self, ctx: &HttpFilterContext<'_>) -> Option<String> {
        let uri = &ctx.request.uri;
        let mut path = uri.path().to_string();
        if let Some((re, replacement)) = &self.path {
            path = re.replace(&path, replacement.as_str()).into_owned();
            // A `/` prefix replacement leaves `//rest`; an empty result is `/`.
            while path.starts_with("//") {
                path.remove(0);
            }
            if path.is_empty() {
                path.push('/');
            }
        }
        let query = uri.query().map(|q| format!("?{q}")).unwrap_or_default();
        let mut location = self
            .location
            .replace("${path}", &path)
            .replace("${query}", &query);
        if location.contains("${host}") {
            location = location.replace("${host}", host(ctx)?);
        }
        Some(location)
    }
}

/// The request's host without port, if it is one a `Location` may carry.
fn host<'a>(ctx: &'a HttpFilterContext<'_>) -> Option<&'a str> {
    let host = crate::request_host::request_host(ctx)?;
    let usable = !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._[]:".contains(&b));
    usable.then_some(host)
}

#[async_trait]
impl HttpFilter for Redirect {
    fn name(&self) -> &'static str {
        NAME
    }

    async fn on_request(
        &self,
        ctx: &mut HttpFilterContext<'_>,
    ) -> Result<FilterAction, FilterError> {
        Ok(FilterAction::Reject(match self.location(ctx) {
            Some(location) => Rejection::status(self.status).with_header("Location", &location),
            None => Rejection::status(400),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_context::{config, request, run};

    fn answer(filter_yaml: &str, uri: &str, host: &str) -> (u16, Option<String>) {
        let filter = Redirect::from_config(&config(filter_yaml)).unwrap();
        let (action, _) = run(&*filter, &request(uri, &[("host", host)]));
        let FilterAction::Reject(rejection) = action else {
            panic!("a redirect answers");
        };
        let location = rejection
            .headers
            .iter()
            .find(|(n, _)| n == "Location")
            .map(|(_, v)| v.clone());
        (rejection.status, location)
    }

    const PREFIX: &str = r#"{status: 302, location: "http://${host}${path}${query}",
        path_regex_replace: {pattern: "^/old(/.*)?$", replacement: "/new${1}"}}"#;

    #[test]
    fn status_303_is_answered() {
        let (status, location) = answer(
            r#"{status: 303, location: "https://${host}:8443${path}${query}"}"#,
            "/a/b?x=1",
            "example.com:8080",
        );
        assert_eq!(status, 303);
        assert_eq!(
            location.as_deref(),
            Some("https://example.com:8443/a/b?x=1")
        );
    }

    #[test]
    fn the_matched_prefix_is_replaced_at_segment_boundaries() {
        let cases = [
            ("/old", "http://h/new"),
            ("/old/", "http://h/new/"),
            ("/old/x/y?q=2", "http://h/new/x/y?q=2"),
        ];
        for (uri, want) in cases {
            assert_eq!(answer(PREFIX, uri, "h").1.as_deref(), Some(want), "{uri}");
        }
    }

    #[test]
    fn a_slash_replacement_leaves_no_double_slash() {
        let to_root = r#"{status: 301, location: "http://${host}${path}",
            path_regex_replace: {pattern: "^/old(/.*)?$", replacement: "${1}"}}"#;
        assert_eq!(answer(to_root, "/old", "h").1.as_deref(), Some("http://h/"));
        assert_eq!(
            answer(to_root, "/old/x", "h").1.as_deref(),
            Some("http://h/x")
        );
    }

    #[test]
    fn a_host_that_cannot_be_in_a_location_is_a_bad_request() {
        let (status, location) = answer(PREFIX, "/old", "bad\"host");
        assert_eq!((status, location), (400, None));
        assert_eq!(
            answer(PREFIX, "/old", "[::1]:80").1.as_deref(),
            Some("http://[::1]/new")
        );
    }

    #[test]
    fn only_redirect_statuses_are_taken() {
        let err = Redirect::from_config(&config(r#"{status: 200, location: "/"}"#))
            .err()
            .unwrap();
        assert!(err.to_string().contains("not a redirect"), "{err}");
    }
}
