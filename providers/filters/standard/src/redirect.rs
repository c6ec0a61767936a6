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
//! `ReplacePrefixMatch` has no template equivalent (Praxis substitutes the
//! whole path only), and Praxis answers 301, 302, 307 or 308, not 303.

use serde_json::json;

use crate::{
    Error,
    entry::Entry,
    input::{PathChange, Redirect},
    placeholders, text,
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
        s @ (301 | 302 | 307 | 308) => s,
        303 => {
            return Err(Error::unsupported(
                "requestRedirect.statusCode: Praxis redirects with 301, 302, 307 or 308, not 303",
            ));
        }
        other => {
            return Err(Error::invalid(format!(
                "requestRedirect.statusCode: {other} is not a redirect status"
            )));
        }
    };
    let path = match r
        .path
        .as_ref()
        .map(|p| p.change("requestRedirect.path"))
        .transpose()?
    {
        None => "${path}",
        Some(PathChange::FullPath(p)) => text::path(p, "requestRedirect.path.replaceFullPath")?,
        Some(PathChange::PrefixMatch(_)) => {
            return Err(Error::unsupported(
                "requestRedirect.path: ReplacePrefixMatch cannot be expressed: Praxis's redirect \
                 template substitutes the whole request path only",
            ));
        }
    };
    let port_part = match (scheme, port) {
        (Some(scheme), Some(p)) if p != default_port(scheme) => format!(":{p}"),
        (Some(_), _) => String::new(),
        (None, Some(p)) => placeholders::port_suffix_of(p),
        (None, None) => placeholders::PORT_SUFFIX.to_string(),
    };
    let scheme = scheme.unwrap_or(placeholders::LISTENER_SCHEME);
    Ok(vec![Entry::Value(json!({
        "filter": "redirect",
        "status": status,
        "location": format!("{scheme}://{host}{port_part}{path}${{query}}"),
    }))])
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

    #[test]
    fn what_praxis_cannot_do_is_unsupported() {
        let err =
            error(json!({"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/new"}}));
        assert!(
            matches!(err, Error::Unsupported(m) if m.starts_with("requestRedirect.path: ReplacePrefixMatch"))
        );
        let err = error(json!({"statusCode": 303}));
        assert!(matches!(err, Error::Unsupported(m) if m.contains("not 303")));
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
