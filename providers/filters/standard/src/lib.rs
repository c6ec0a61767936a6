//! standard-filters: the Gateway API's own HTTPRoute filters as Praxis
//! 0.7.5 filter entries, bundled with Pontoon as `standard_filters.wasm`.
//!
//! | filter | Praxis |
//! |---|---|
//! | `RequestHeaderModifier` | `headers` (`request_set`, `request_add`, `request_remove`) |
//! | `ResponseHeaderModifier` | `headers` (`response_set`, `response_add`, `response_remove`) |
//! | `RequestRedirect` | `redirect` (`location` template, `status`); 303 and `ReplacePrefixMatch`: `pontoon_redirect` (Pontoon's data plane) |
//! | `URLRewrite` | `url_rewrite` (path) and `headers` (`Host`) |
//! | `CORS` | `pontoon_cors` (Pontoon's data plane) |
//! | `RequestMirror` | unsupported: Praxis has no request mirroring |
//!
//! Translation is pure: the entries depend on the filter alone (the route
//! context only names the filter in messages), so a host may cache them by
//! the filter's JSON. What only the Gateway knows (the listener's scheme and
//! port, the rule's matched prefix) is left as a `${pontoon_...}`
//! placeholder that Pontoon's config generation fills in ([`placeholders`]).
//!
//! The same functions run natively ([`translate`]), for the host's tests
//! and for its benchmark against the component.

// Natively nothing exports the component, so what only the export reaches
// looks dead there; the component build checks it.
#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]

mod cors;
mod entry;
mod headers;
mod input;
mod redirect;
mod rewrite;
mod text;

/// The filter types this module translates (its metadata's `handles`).
pub const HANDLES: [&str; 6] = [
    "RequestHeaderModifier",
    "ResponseHeaderModifier",
    "RequestRedirect",
    "URLRewrite",
    "RequestMirror",
    "CORS",
];

/// What config generation substitutes in the entries (the contract with
/// `host/gateway/src/data_plane/config/filters.rs`; a host test checks they agree).
pub mod placeholders {
    /// `http` or `https`: the listener's protocol.
    pub const LISTENER_SCHEME: &str = "${pontoon_listener_scheme}";
    /// `:PORT` of the listener, empty when it is its scheme's default.
    pub const PORT_SUFFIX: &str = "${pontoon_port_suffix}";
    /// `${pontoon_port_suffix:N}`: `:N`, empty when N is the default port of
    /// the listener's scheme.
    pub fn port_suffix_of(port: u16) -> String {
        format!("${{pontoon_port_suffix:{port}}}")
    }
    /// The matched PathPrefix without its trailing `/`, regex-escaped; the
    /// entry is repeated per match of the rule.
    pub const MATCH_PREFIX: &str = "${pontoon_match_prefix}";
}

/// Why a filter cannot be translated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// The filter's fields are wrong; the message names the field.
    InvalidInput(String),
    /// A valid filter Praxis cannot express; the message says why.
    Unsupported(String),
}

impl Error {
    fn invalid(message: impl Into<String>) -> Self {
        Self::InvalidInput(message.into())
    }

    fn unsupported(message: impl Into<String>) -> Self {
        Self::Unsupported(message.into())
    }

    fn at(self, location: &str) -> Self {
        match self {
            Self::InvalidInput(m) => Self::InvalidInput(format!("{location}: {m}")),
            Self::Unsupported(m) => Self::Unsupported(format!("{location}: {m}")),
        }
    }
}

/// Translates one HTTPRoute filter (its JSON) into Praxis filter entries
/// (JSON objects, as text), applied in order. `location` names the filter
/// in error messages (`HTTPRoute ns/web rule 0 filter 1`).
pub fn translate(filter: &str, location: &str) -> Result<Vec<String>, Error> {
    translate_lazily(filter, || location.to_string())
}

/// [`translate`], with the location made only for an error message.
pub fn translate_lazily(
    filter: &str,
    location: impl FnOnce() -> String,
) -> Result<Vec<String>, Error> {
    let entries = entries(filter).map_err(|e| e.at(&location()))?;
    // serde_json's writer, not `Display`: formatting through `fmt` costs the
    // component a third of its time per filter.
    entries
        .iter()
        .map(|entry| serde_json::to_string(entry).map_err(|e| Error::invalid(e.to_string())))
        .collect()
}

/// [`translate`] without the location, as JSON values.
pub fn translate_values(filter: &str) -> Result<Vec<serde_json::Value>, Error> {
    entries(filter)?
        .iter()
        .map(|entry| serde_json::to_value(entry).map_err(|e| Error::invalid(e.to_string())))
        .collect()
}

fn entries(filter: &str) -> Result<Vec<entry::Entry<'_>>, Error> {
    match input::parse(filter)? {
        input::Filter::RequestHeaderModifier(m) => headers::request(&m),
        input::Filter::ResponseHeaderModifier(m) => headers::response(&m),
        input::Filter::RequestRedirect(r) => redirect::translate(&r),
        input::Filter::UrlRewrite(r) => rewrite::translate(&r),
        input::Filter::Cors(c) => cors::translate(&c),
        input::Filter::RequestMirror => Err(Error::unsupported(
            "RequestMirror: Praxis 0.7.5 has no filter that sends a copy of a request to a \
             second backend",
        )),
    }
}

#[cfg(target_arch = "wasm32")]
mod component {
    use pontoon_provider_sdk::config_filter::{FilterError, FilterMetadata, Guest, RouteContext};

    struct StandardFilters;

    impl Guest for StandardFilters {
        fn metadata() -> FilterMetadata {
            FilterMetadata {
                name: "standard-filters".into(),
                version: env!("CARGO_PKG_VERSION").into(),
                description: "Gateway API HTTPRoute filters (header modifiers, redirect, URL \
                              rewrite) as Praxis filter entries"
                    .into(),
                handles: super::HANDLES.iter().map(|h| (*h).to_string()).collect(),
            }
        }

        fn translate(filter: String, context: RouteContext) -> Result<Vec<String>, FilterError> {
            super::translate_lazily(&filter, || context.location()).map_err(|e| match e {
                super::Error::InvalidInput(m) => FilterError::InvalidInput(m),
                super::Error::Unsupported(m) => FilterError::Unsupported(m),
            })
        }
    }

    pontoon_provider_sdk::export_config_filter!(StandardFilters);
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn errors_name_where_the_filter_is() {
        let err = translate(
            r#"{"type":"RequestMirror","requestMirror":{"backendRef":{"name":"m"}}}"#,
            "HTTPRoute ns/web rule 0 filter 1",
        )
        .unwrap_err();
        let Error::Unsupported(message) = err else {
            panic!("mirroring is unsupported, not invalid");
        };
        assert!(
            message.starts_with("HTTPRoute ns/web rule 0 filter 1: RequestMirror: Praxis"),
            "{message}"
        );
    }

    #[test]
    fn entries_are_json_objects_with_a_filter_name() {
        let entries = translate(
            &json!({"type": "RequestHeaderModifier", "requestHeaderModifier": {"set": [{"name": "a", "value": "b"}]}})
                .to_string(),
            "here",
        )
        .unwrap();
        let entry: serde_json::Value = serde_json::from_str(&entries[0]).unwrap();
        assert_eq!(entry["filter"], "headers");
    }

    #[test]
    fn the_placeholder_helper_spells_the_contract() {
        assert_eq!(
            placeholders::port_suffix_of(8080),
            "${pontoon_port_suffix:8080}"
        );
    }
}
