//! The HTTPRoute filter as the Gateway API (v1.6.3) spells it. Unknown
//! fields are refused: a field this module does not know could change what
//! the filter means.

use std::borrow::Cow;

use serde::Deserialize;

use crate::Error;

/// Header names and values borrow from the filter's JSON where they can.
pub enum Filter<'a> {
    RequestHeaderModifier(HeaderModifier<'a>),
    ResponseHeaderModifier(HeaderModifier<'a>),
    RequestRedirect(Redirect),
    UrlRewrite(UrlRewrite),
    RequestMirror,
    Cors(Cors),
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Raw<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow)]
    request_header_modifier: Option<HeaderModifier<'a>>,
    #[serde(borrow)]
    response_header_modifier: Option<HeaderModifier<'a>>,
    request_redirect: Option<Redirect>,
    #[serde(rename = "urlRewrite")]
    url_rewrite: Option<UrlRewrite>,
    request_mirror: Option<serde_json::Value>,
    // Known, so their filters are told "not this module" rather than
    // "unknown field".
    #[serde(rename = "extensionRef")]
    _extension_ref: Option<serde::de::IgnoredAny>,
    cors: Option<Cors>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Cors {
    #[serde(default)]
    pub allow_origins: Vec<String>,
    #[serde(default)]
    pub allow_methods: Vec<String>,
    #[serde(default)]
    pub allow_headers: Vec<String>,
    #[serde(default)]
    pub expose_headers: Vec<String>,
    pub allow_credentials: Option<bool>,
    pub max_age: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeaderModifier<'a> {
    #[serde(default, borrow)]
    pub set: Vec<Header<'a>>,
    #[serde(default, borrow)]
    pub add: Vec<Header<'a>>,
    #[serde(default, borrow)]
    pub remove: Vec<Cow<'a, str>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Header<'a> {
    #[serde(borrow)]
    pub name: Cow<'a, str>,
    #[serde(borrow)]
    pub value: Cow<'a, str>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Redirect {
    pub scheme: Option<String>,
    pub hostname: Option<String>,
    pub path: Option<PathModifier>,
    pub port: Option<i64>,
    pub status_code: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UrlRewrite {
    pub hostname: Option<String>,
    pub path: Option<PathModifier>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PathModifier {
    #[serde(rename = "type")]
    pub kind: String,
    pub replace_full_path: Option<String>,
    pub replace_prefix_match: Option<String>,
}

/// How a path modifier rewrites.
pub enum PathChange<'a> {
    FullPath(&'a str),
    PrefixMatch(&'a str),
}

impl PathModifier {
    /// The change, checked against its `type`; `field` names it in messages.
    pub fn change(&self, field: &str) -> Result<PathChange<'_>, Error> {
        match (
            self.kind.as_str(),
            &self.replace_full_path,
            &self.replace_prefix_match,
        ) {
            ("ReplaceFullPath", Some(path), None) => Ok(PathChange::FullPath(path)),
            ("ReplacePrefixMatch", None, Some(prefix)) => Ok(PathChange::PrefixMatch(prefix)),
            ("ReplaceFullPath", _, _) => Err(Error::invalid(format!(
                "{field}.replaceFullPath must be set (and only it) when {field}.type is ReplaceFullPath"
            ))),
            ("ReplacePrefixMatch", _, _) => Err(Error::invalid(format!(
                "{field}.replacePrefixMatch must be set (and only it) when {field}.type is \
                 ReplacePrefixMatch"
            ))),
            (other, _, _) => Err(Error::invalid(format!(
                "{field}.type `{other}` is neither ReplaceFullPath nor ReplacePrefixMatch"
            ))),
        }
    }
}

pub fn parse(text: &str) -> Result<Filter<'_>, Error> {
    let raw: Raw =
        serde_json::from_str(text).map_err(|e| Error::invalid(format!("malformed filter: {e}")))?;
    let missing =
        |field: &str| Error::invalid(format!("type is {} but {field} is missing", raw.kind));
    match raw.kind.as_ref() {
        "RequestHeaderModifier" => raw
            .request_header_modifier
            .map(Filter::RequestHeaderModifier)
            .ok_or_else(|| missing("requestHeaderModifier")),
        "ResponseHeaderModifier" => raw
            .response_header_modifier
            .map(Filter::ResponseHeaderModifier)
            .ok_or_else(|| missing("responseHeaderModifier")),
        "RequestRedirect" => raw
            .request_redirect
            .map(Filter::RequestRedirect)
            .ok_or_else(|| missing("requestRedirect")),
        "URLRewrite" => raw
            .url_rewrite
            .map(Filter::UrlRewrite)
            .ok_or_else(|| missing("urlRewrite")),
        "RequestMirror" => raw
            .request_mirror
            .map(|_| Filter::RequestMirror)
            .ok_or_else(|| missing("requestMirror")),
        "CORS" => raw.cors.map(Filter::Cors).ok_or_else(|| missing("cors")),
        other => Err(Error::invalid(format!(
            "type `{other}` is not one this module translates ({})",
            crate::HANDLES.join(", ")
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn invalid(text: &str) -> String {
        match parse(text) {
            Err(Error::InvalidInput(m)) => m,
            Err(other) => panic!("expected invalid-input, got {other:?}"),
            Ok(_) => panic!("expected invalid-input for {text}"),
        }
    }

    #[test]
    fn malformed_and_mismatched_filters_are_invalid_input() {
        assert!(invalid("[1]").starts_with("malformed filter"));
        let m = invalid(r#"{"type":"RequestHeaderModifier","requestHeaderModifier":{"sett":[]}}"#);
        assert!(m.contains("unknown field `sett`"), "{m}");
        let m = invalid(r#"{"type":"RequestRedirect"}"#);
        assert_eq!(m, "type is RequestRedirect but requestRedirect is missing");
        let m = invalid(
            r#"{"type":"ExtensionRef","extensionRef":{"group":"g","kind":"k","name":"n"}}"#,
        );
        assert!(
            m.starts_with("type `ExtensionRef` is not one this module translates"),
            "{m}"
        );
        let m = invalid(r#"{"type":"URLRewrite","urlRewrite":{"hostname":7}}"#);
        assert!(m.contains("invalid type: integer `7`"), "{m}");
    }
}
