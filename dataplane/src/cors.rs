//! `pontoon_cors`: HTTPRoute's CORS filter as the Gateway API defines it,
//! where Praxis's own `cors` differs: a `*` in an allowed origin stands for
//! any number of labels (`https://*.bar.com` takes `https://a.b.bar.com`),
//! preflight answers carry `Access-Control-Expose-Headers` too, and
//! wildcard methods or headers are answered with what the preflight asked
//! for (which is also what a browser takes when credentials are allowed).
//!
//! - A request without `Origin` is not a CORS request: untouched.
//! - A preflight (`OPTIONS` with `Access-Control-Request-Method`) is
//!   answered here, 204, never sent to the backend: with the CORS headers
//!   when its origin is allowed, without them otherwise (the browser then
//!   refuses the real request).
//! - Any other request goes to the backend; when its origin is allowed the
//!   response gets `Access-Control-Allow-Origin` (the request's origin),
//!   `-Allow-Credentials` and `-Expose-Headers` as configured.
//!
//! Every answer varies by `Origin`, and says so.
//!
//! ```yaml
//! filter: pontoon_cors
//! allow_origins: ["https://www.foo.com", "https://*.bar.com"]
//! allow_methods: [GET, OPTIONS]
//! allow_headers: [x-header-1]
//! expose_headers: [x-header-3]
//! allow_credentials: true
//! max_age: 3600
//! ```

use async_trait::async_trait;
use http::{HeaderMap, HeaderValue, Method, header};
use praxis_filter::{
    FilterAction, FilterError, HttpFilter, HttpFilterContext, Rejection, parse_filter_config,
};
use serde::Deserialize;

pub const NAME: &str = "pontoon_cors";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    allow_origins: Vec<String>,
    #[serde(default)]
    allow_methods: Vec<String>,
    #[serde(default)]
    allow_headers: Vec<String>,
    #[serde(default)]
    expose_headers: Vec<String>,
    #[serde(default)]
    allow_credentials: bool,
    /// Seconds a browser may keep a preflight's answer (the spec's default).
    #[serde(default = "default_max_age")]
    max_age: u32,
}

fn default_max_age() -> u32 {
    5
}

/// An allowed origin: any, or scheme, host pattern (labels, where `*`
/// stands for one or more leading labels) and port.
#[derive(Debug, PartialEq, Eq)]
enum Origin {
    Any,
    Pattern {
        scheme: String,
        /// Lower case; `None` for `*.` patterns' wildcard part.
        wildcard: bool,
        host: String,
        port: Option<String>,
    },
}

impl Origin {
    fn parse(text: &str) -> Result<Self, String> {
        if text == "*" {
            return Ok(Self::Any);
        }
        let (scheme, rest) = text
            .split_once("://")
            .ok_or_else(|| format!("{NAME}: origin `{text}` has no scheme"))?;
        let (host, port) = split_port(rest);
        // `*` alone: any host (of this scheme and port); `*.` before a
        // name: one or more labels before it.
        let (wildcard, host) = match host.strip_prefix("*.") {
            Some(suffix) => (true, suffix),
            None if host == "*" => (true, ""),
            None => (false, host),
        };
        if scheme.is_empty() || (host.is_empty() && !wildcard) || host.contains(['*', '/']) {
            return Err(format!(
                "{NAME}: origin `{text}` is not SCHEME://HOST[:PORT]"
            ));
        }
        Ok(Self::Pattern {
            scheme: scheme.to_ascii_lowercase(),
            wildcard,
            host: host.to_ascii_lowercase(),
            port: port.map(str::to_string),
        })
    }

    fn matches(&self, origin: &str) -> bool {
        let Self::Pattern {
            scheme,
            wildcard,
            host,
            port,
        } = self
        else {
            return true;
        };
        let Some((their_scheme, rest)) = origin.split_once("://") else {
            return false;
        };
        let (their_host, their_port) = split_port(rest);
        let their_host = their_host.to_ascii_lowercase();
        let host_matches = match (*wildcard, host.is_empty()) {
            (true, true) => !their_host.is_empty(),
            (true, false) => their_host
                .strip_suffix(host.as_str())
                .and_then(|labels| labels.strip_suffix('.'))
                .is_some_and(|labels| !labels.is_empty()),
            (false, _) => their_host == *host,
        };
        their_scheme.eq_ignore_ascii_case(scheme)
            && host_matches
            && effective_port(scheme, port.as_deref()) == effective_port(scheme, their_port)
    }
}

/// An origin's port, its scheme's default when it names none (the Gateway
/// API: 80 for `http`, 443 for `https`), so `https://a.com` and
/// `https://a.com:443` are one origin.
fn effective_port<'a>(scheme: &str, port: Option<&'a str>) -> Option<&'a str> {
    port.or(match scheme {
        "http" => Some("80"),
        "https" => Some("443"),
        _ => None,
    })
}

/// `host[:port]` of an origin (an IPv6 literal keeps its brackets).
fn split_port(authority: &str) -> (&str, Option<&str>) {
    let colon = match authority.rfind(']') {
        Some(end) => authority[end..].find(':').map(|i| i + end),
        None => authority.rfind(':'),
    };
    match colon {
        Some(i) => (&authority[..i], Some(&authority[i + 1..])),
        None => (authority, None),
    }
}

pub struct Cors {
    origins: Vec<Origin>,
    /// `None`: any (`*`), answered with what the preflight asks.
    methods: Option<String>,
    headers: Option<String>,
    expose: Option<HeaderValue>,
    credentials: bool,
    max_age: HeaderValue,
}

impl Cors {
    pub fn from_config(config: &serde_yaml::Value) -> Result<Box<dyn HttpFilter>, FilterError> {
        let config: Config = parse_filter_config(NAME, config)?;
        if config.allow_origins.is_empty() {
            return Err(format!("{NAME}: `allow_origins` is empty").into());
        }
        let origins = config
            .allow_origins
            .iter()
            .map(|o| Origin::parse(o))
            .collect::<Result<_, _>>()?;
        let list = |items: &[String]| -> Option<String> {
            (!items.iter().any(|i| i == "*")).then(|| items.join(", "))
        };
        let expose = match list(&config.expose_headers) {
            Some(e) if e.is_empty() => None,
            Some(e) => Some(e),
            // `*` exposes every header only without credentials (Fetch).
            None if !config.allow_credentials => Some("*".into()),
            None => None,
        };
        Ok(Box::new(Self {
            origins,
            methods: list(&config.allow_methods),
            headers: list(&config.allow_headers),
            expose: expose
                .map(|e| {
                    HeaderValue::try_from(e).map_err(|e| format!("{NAME}: expose_headers: {e}"))
                })
                .transpose()?,
            credentials: config.allow_credentials,
            max_age: HeaderValue::from(config.max_age),
        }))
    }

    /// The request's origin, when it is one this filter allows.
    fn allowed_origin<'r>(&self, request: &'r HeaderMap) -> Option<&'r HeaderValue> {
        let origin = request.get(header::ORIGIN)?;
        let text = origin.to_str().ok()?;
        self.origins
            .iter()
            .any(|o| o.matches(text))
            .then_some(origin)
    }

    fn preflight(&self, request: &HeaderMap) -> Rejection {
        let mut answer = Rejection::status(204).with_header("Vary", "Origin");
        answer.preserve_keepalive = true;
        let Some(origin) = self.allowed_origin(request).and_then(|o| o.to_str().ok()) else {
            return answer;
        };
        let asked = |name| {
            request
                .get(name)
                .and_then(|v: &HeaderValue| v.to_str().ok())
        };
        answer = answer.with_header("Access-Control-Allow-Origin", origin);
        let methods = match &self.methods {
            Some(list) => Some(list.as_str()),
            None => asked(header::ACCESS_CONTROL_REQUEST_METHOD),
        };
        if let Some(methods) = methods.filter(|m| !m.is_empty()) {
            answer = answer.with_header("Access-Control-Allow-Methods", methods);
        }
        let headers = match &self.headers {
            Some(list) => Some(list.as_str()),
            None => asked(header::ACCESS_CONTROL_REQUEST_HEADERS),
        };
        if let Some(headers) = headers.filter(|h| !h.is_empty()) {
            answer = answer.with_header("Access-Control-Allow-Headers", headers);
        }
        if let Some(expose) = self.expose.as_ref().and_then(|e| e.to_str().ok()) {
            answer = answer.with_header("Access-Control-Expose-Headers", expose);
        }
        if let Ok(max_age) = self.max_age.to_str() {
            answer = answer.with_header("Access-Control-Max-Age", max_age);
        }
        if self.credentials {
            answer = answer.with_header("Access-Control-Allow-Credentials", "true");
        }
        answer
    }
}

fn is_preflight(ctx: &HttpFilterContext<'_>) -> bool {
    ctx.request.method == Method::OPTIONS
        && ctx
            .request
            .headers
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD)
        && ctx.request.headers.contains_key(header::ORIGIN)
}

#[async_trait]
impl HttpFilter for Cors {
    fn name(&self) -> &'static str {
        NAME
    }

    async fn on_request(
        &self,
        ctx: &mut HttpFilterContext<'_>,
    ) -> Result<FilterAction, FilterError> {
        if is_preflight(ctx) {
            return Ok(FilterAction::Reject(self.preflight(&ctx.request.headers)));
        }
        Ok(FilterAction::Continue)
    }

    async fn on_response(
        &self,
        ctx: &mut HttpFilterContext<'_>,
    ) -> Result<FilterAction, FilterError> {
        let origin = self.allowed_origin(&ctx.request.headers).cloned();
        let Some(response) = ctx.response_header.as_mut() else {
            return Ok(FilterAction::Continue);
        };
        let headers = &mut response.headers;
        if ctx.request.headers.contains_key(header::ORIGIN) {
            headers.append(header::VARY, HeaderValue::from_static("Origin"));
        }
        if let Some(origin) = origin {
            headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
            if self.credentials {
                headers.insert(
                    header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
                    HeaderValue::from_static("true"),
                );
            }
            if let Some(expose) = &self.expose {
                headers.insert(header::ACCESS_CONTROL_EXPOSE_HEADERS, expose.clone());
            }
        }
        ctx.response_headers_modified = true;
        Ok(FilterAction::Continue)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_context::{config, request, run, run_response};

    const CONFORMANCE_1: &str = r#"{allow_origins: ["https://www.foo.com", "https://*.bar.com"],
        allow_methods: [GET, OPTIONS], allow_headers: [x-header-1, x-header-2],
        expose_headers: [x-header-3, x-header-4], allow_credentials: true, max_age: 3600}"#;
    const WILDCARDS: &str = r#"{allow_origins: ["*"], allow_methods: ["*"],
        allow_headers: ["*"], allow_credentials: true}"#;

    fn filter(yaml: &str) -> Box<dyn HttpFilter> {
        Cors::from_config(&config(yaml)).unwrap()
    }

    fn preflight(yaml: &str, headers: &[(&str, &str)]) -> Rejection {
        let mut req = request("/cors", headers);
        req.method = Method::OPTIONS;
        match run(&*filter(yaml), &req).0 {
            FilterAction::Reject(r) => r,
            _ => panic!("a preflight is answered"),
        }
    }

    fn header<'a>(answer: &'a Rejection, name: &str) -> Option<&'a str> {
        answer
            .headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn a_preflight_from_an_allowed_origin_gets_every_header() {
        for origin in [
            "https://www.foo.com",
            "https://www.bar.com",
            "https://xpto.www.bar.com",
        ] {
            let answer = preflight(
                CONFORMANCE_1,
                &[("origin", origin), ("access-control-request-method", "GET")],
            );
            assert_eq!(answer.status, 204);
            assert_eq!(header(&answer, "access-control-allow-origin"), Some(origin));
            assert_eq!(
                header(&answer, "access-control-allow-methods"),
                Some("GET, OPTIONS")
            );
            assert_eq!(
                header(&answer, "access-control-allow-headers"),
                Some("x-header-1, x-header-2")
            );
            assert_eq!(
                header(&answer, "access-control-expose-headers"),
                Some("x-header-3, x-header-4")
            );
            assert_eq!(header(&answer, "access-control-max-age"), Some("3600"));
            assert_eq!(
                header(&answer, "access-control-allow-credentials"),
                Some("true")
            );
        }
    }

    #[test]
    fn an_origin_not_allowed_gets_no_cors_headers() {
        for origin in [
            "https://foobar.com",
            "https://bar.com",
            "http://www.foo.com",
            "https://www.foo.com:8443",
        ] {
            let answer = preflight(
                CONFORMANCE_1,
                &[("origin", origin), ("access-control-request-method", "GET")],
            );
            assert_eq!(answer.status, 204);
            assert_eq!(
                header(&answer, "access-control-allow-origin"),
                None,
                "{origin}"
            );
        }
    }

    #[test]
    fn wildcards_answer_what_the_preflight_asked() {
        let answer = preflight(
            WILDCARDS,
            &[
                ("origin", "https://other.foo.com:12345"),
                ("access-control-request-method", "PUT"),
                ("access-control-request-headers", "x-header-1, x-header-2"),
            ],
        );
        assert_eq!(
            header(&answer, "access-control-allow-origin"),
            Some("https://other.foo.com:12345")
        );
        assert_eq!(header(&answer, "access-control-allow-methods"), Some("PUT"));
        assert_eq!(
            header(&answer, "access-control-allow-headers"),
            Some("x-header-1, x-header-2")
        );
        assert_eq!(
            header(&answer, "access-control-allow-credentials"),
            Some("true")
        );
        // The spec's default max age; no credentials unless allowed.
        let answer = preflight(
            r#"{allow_origins: ["*"], allow_methods: [PUT]}"#,
            &[
                ("origin", "https://a.example"),
                ("access-control-request-method", "PUT"),
            ],
        );
        assert_eq!(header(&answer, "access-control-max-age"), Some("5"));
        assert_eq!(header(&answer, "access-control-allow-credentials"), None);
    }

    #[test]
    fn other_requests_reach_the_backend_and_their_answer_gets_the_headers() {
        let cors = filter(CONFORMANCE_1);
        let get = request("/cors", &[("origin", "https://a.bar.com")]);
        assert!(matches!(run(&*cors, &get).0, FilterAction::Continue));
        let headers = run_response(&*cors, &get);
        assert_eq!(
            headers.get("access-control-allow-origin").unwrap(),
            "https://a.bar.com"
        );
        assert_eq!(
            headers.get("access-control-allow-credentials").unwrap(),
            "true"
        );
        assert_eq!(headers.get("vary").unwrap(), "Origin");
        let foreign = request("/cors", &[("origin", "https://foobar.com")]);
        let headers = run_response(&*cors, &foreign);
        assert!(headers.get("access-control-allow-origin").is_none());
        // Not CORS at all: OPTIONS without Origin, or no Origin.
        let mut options = request("/cors", &[("access-control-request-method", "GET")]);
        options.method = Method::OPTIONS;
        assert!(matches!(run(&*cors, &options).0, FilterAction::Continue));
        assert!(
            run_response(&*cors, &request("/", &[]))
                .get("vary")
                .is_none()
        );
    }

    #[test]
    fn a_lone_wildcard_takes_any_host_and_default_ports_are_implied() {
        let any = Origin::parse("https://*").unwrap();
        assert!(any.matches("https://a.example.com"));
        assert!(any.matches("https://example.com:443"));
        assert!(!any.matches("http://example.com"));
        assert!(!any.matches("https://example.com:8443"));
        let plain = Origin::parse("https://www.foo.com").unwrap();
        assert!(plain.matches("https://www.foo.com:443"));
        let explicit = Origin::parse("http://www.foo.com:80").unwrap();
        assert!(explicit.matches("http://www.foo.com"));
        assert!(!explicit.matches("http://www.foo.com:8080"));
    }

    #[test]
    fn origins_must_be_scheme_and_host() {
        for bad in [
            "www.foo.com",
            "https://",
            "https://a.*.com",
            "https://*x.com",
        ] {
            let yaml = format!("{{allow_origins: [\"{bad}\"]}}");
            assert!(Cors::from_config(&config(&yaml)).is_err(), "{bad}");
        }
        assert!(Cors::from_config(&config("{allow_origins: []}")).is_err());
    }
}
