//! RequestRedirect as a Praxis `redirect`, whose `location` is a template
//! (`${host}` the request's host without port, `${path}`, `${query}` with
//! its `?`). The spec's defaults:
//!
//! - scheme: the request's, which is the listener's protocol (Praxis's own
//!   `${scheme}` would trust a client's `X-Forwarded-Proto`);
//! - hostname: the request's `Host`;
//! - port: with a scheme, that scheme's well-known port; without, the
//!   listener's; left out of `Location` when it is the scheme's default;
//! - status: 302.
//!
//! Praxis's `redirect` has no `ReplacePrefixMatch` (its template substitutes
//! the whole path only) and answers 301, 302, 307 or 308, not 303. Those two
//! are written as `pontoon_redirect`, a filter of Pontoon's own data plane
//! (`dataplane/`) with the same template and a path rewrite, the one
//! URLRewrite's `ReplacePrefixMatch` uses ([`crate::rewrite`]); on stock
//! Praxis the host refuses the rule, saying it needs Pontoon's data plane.

use serde_json::json;

use crate::{
    Error,
    entry::Entry,
    input::{PathChange, Redirect},
    placeholders, rewrite, text,
};

pub fn translate(r: &Redirect) -> Result<Vec<Entry<'static>>, Error> {
    let scheme = match r.scheme.as_deref() {
        None => None,
        Some(s @ ("http" | "https")) => Some(s),
        Some(other) => {
            return Err(Error::invalid(format!(
                "requestRedirect.scheme: `{other}` is neither http nor https"
            )));
        }
    };
    let host = match &r.hostname {
        Some(h) => text::hostname(h, "requestRedirect.hostname")?,
        None => "${host}",
    };
    let port = match r.port {
        None => None,
        Some(p) => Some(u16::try_from(p).ok().filter(|p| *p > 0).ok_or_else(|| {
            Error::invalid(format!("requestRedirect.port: {p} is not a port (1-65535)"))
        })?),
    };
    let status = match r.status_code.unwrap_or(302) {
        s @ (301 | 302 | 303 | 307 | 308) => s,
        other => {
            return Err(Error::invalid(format!(
                "requestRedirect.statusCode: {other} is not a redirect status"
            )));
        }
    };
    let mut path_regex_replace = None;
    let path = match r
        .path
        .as_ref()
        .map(|p| p.change("requestRedirect.path"))
        .transpose()?
    {
        None => "${path}",
        Some(PathChange::FullPath(p)) => text::path(p, "requestRedirect.path.replaceFullPath")?,
        Some(PathChange::PrefixMatch(p)) => {
            let p = if p.is_empty() {
                p
            } else {
                text::path(p, "requestRedirect.path.replacePrefixMatch")?
            };
            path_regex_replace = Some(rewrite::prefix_replacement(p));
            "${path}"
        }
    };
    let port_part = match (scheme, port) {
        (Some(scheme), Some(p)) if p != default_port(scheme) => format!(":{p}"),
        (Some(_), _) => String::new(),
        (None, Some(p)) => placeholders::port_suffix_of(p),
        (None, None) => placeholders::PORT_SUFFIX.to_string(),
    };
    let scheme = scheme.unwrap_or(placeholders::LISTENER_SCHEME);
    let location = format!("{scheme}://{host}{port_part}{path}${{query}}");
    Ok(vec![Entry::Value(match path_regex_replace {
        None if status != 303 => json!({
            "filter": "redirect",
            "status": status,
            "location": location,
        }),
        None => json!({
            "filter": "pontoon_redirect",
            "status": status,
            "location": location,
        }),
        Some((pattern, replacement)) => json!({
            "filter": "pontoon_redirect",
            "status": status,
            "location": location,
            "path_regex_replace": {"pattern": pattern, "replacement": replacement},
        }),
    })])
}

fn default_port(scheme: &str) -> u16 {
    if scheme == "https" { 443 } else { 80 }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::{Error, translate_values};

    fn location(redirect: serde_json::Value) -> (String, u64) {
        let filter = json!({"type": "RequestRedirect", "requestRedirect": redirect});
        let entries = translate_values(&filter.to_string()).unwrap();
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0]["filter"], "redirect");
        (
            entries[0]["location"].as_str().unwrap().to_string(),
            entries[0]["status"].as_u64().unwrap(),
        )
    }

    fn error(redirect: serde_json::Value) -> Error {
        let filter = json!({"type": "RequestRedirect", "requestRedirect": redirect});
        translate_values(&filter.to_string()).unwrap_err()
    }

    #[test]
    fn defaults_take_the_request_and_listener() {
        assert_eq!(
            location(json!({})),
            (
                "${pontoon_listener_scheme}://${host}${pontoon_port_suffix}${path}${query}".into(),
                302
            )
        );
    }

    #[test]
    fn a_scheme_brings_its_well_known_port() {
        assert_eq!(
            location(json!({"scheme": "https"})).0,
            "https://${host}${path}${query}"
        );
        assert_eq!(
            location(json!({"scheme": "https", "port": 443})).0,
            "https://${host}${path}${query}"
        );
        assert_eq!(
            location(json!({"scheme": "http", "port": 8080})).0,
            "http://${host}:8080${path}${query}"
        );
    }

    #[test]
    fn a_port_without_scheme_is_left_out_when_it_is_the_listener_schemes_default() {
        assert_eq!(
            location(json!({"port": 8443})).0,
            "${pontoon_listener_scheme}://${host}${pontoon_port_suffix:8443}${path}${query}"
        );
    }

    #[test]
    fn hostname_full_path_and_status() {
        assert_eq!(
            location(
                json!({"hostname": "example.org", "path": {"type": "ReplaceFullPath", "replaceFullPath": "/moved"}, "statusCode": 301, "scheme": "https"})
            ),
            ("https://example.org/moved${query}".into(), 301)
        );
    }

    fn entry(redirect: serde_json::Value) -> serde_json::Value {
        let filter = json!({"type": "RequestRedirect", "requestRedirect": redirect});
        let mut entries = translate_values(&filter.to_string()).unwrap();
        assert_eq!(entries.len(), 1);
        entries.remove(0)
    }

    #[test]
    fn what_praxis_cannot_do_goes_to_pontoons_redirect() {
        assert_eq!(
            entry(json!({"statusCode": 303, "scheme": "https"})),
            json!({"filter": "pontoon_redirect", "status": 303,
                   "location": "https://${host}${path}${query}"})
        );
        assert_eq!(
            entry(json!({"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/new/"}})),
            json!({"filter": "pontoon_redirect", "status": 302,
                   "location": "${pontoon_listener_scheme}://${host}${pontoon_port_suffix}${path}${query}",
                   "path_regex_replace": {"pattern": "^${pontoon_match_prefix}(/.*)?$",
                                          "replacement": "/new${1}"}})
        );
        let to_root =
            entry(json!({"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/"}}));
        assert_eq!(to_root["path_regex_replace"]["replacement"], "${1}");
    }

    #[test]
    fn invalid_fields_are_named() {
        let cases = [
            (
                json!({"scheme": "ftp"}),
                "requestRedirect.scheme: `ftp` is neither http nor https",
            ),
            (
                json!({"port": 0}),
                "requestRedirect.port: 0 is not a port (1-65535)",
            ),
            (
                json!({"port": 70000}),
                "requestRedirect.port: 70000 is not a port (1-65535)",
            ),
            (
                json!({"statusCode": 200}),
                "requestRedirect.statusCode: 200 is not a redirect status",
            ),
            (
                json!({"hostname": "a b"}),
                "requestRedirect.hostname: `a b` is not a valid hostname",
            ),
            (
                json!({"path": {"type": "ReplaceFullPath"}}),
                "requestRedirect.path.replaceFullPath must be set (and only it) when requestRedirect.path.type is ReplaceFullPath",
            ),
            (
                json!({"path": {"type": "ReplaceFullPath", "replaceFullPath": "x"}}),
                "requestRedirect.path.replaceFullPath: `x` does not start with `/`",
            ),
        ];
        for (redirect, expected) in cases {
            assert_eq!(error(redirect), Error::InvalidInput(expected.into()));
        }
    }
}
