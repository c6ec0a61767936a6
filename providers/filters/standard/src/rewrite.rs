//! URLRewrite as Praxis `url_rewrite` (a regular expression replacement on
//! the path; the query is kept) and `headers` (`Host`).
//!
//! `ReplacePrefixMatch` replaces the prefix the rule matched, which only
//! config generation knows: the pattern holds `${pontoon_match_prefix}`,
//! and the entry is repeated per match. `(/.*)?$` after the prefix keeps
//! the spec's segment semantics, and Praxis collapses the `//` a `/`
//! replacement would leave (`/foo/bar` with `/` gives `/bar`), and makes an
//! empty result `/`.

use serde_json::json;

use crate::{
    Error,
    entry::{Entry, Headers, Pair, Side},
    input::{PathChange, UrlRewrite},
    placeholders, text,
};

pub fn translate(r: &UrlRewrite) -> Result<Vec<Entry<'static>>, Error> {
    let mut entries = Vec::new();
    if let Some(host) = &r.hostname {
        let host = text::hostname(host, "urlRewrite.hostname")?;
        let mut headers = Headers::new(Side::Request);
        headers.set.push(Pair {
            name: "host".into(),
            value: host.to_string().into(),
        });
        entries.push(Entry::Headers(headers));
    }
    if let Some(path) = &r.path {
        let (pattern, replacement) = match path.change("urlRewrite.path")? {
            PathChange::FullPath(p) => (
                "^.*$".to_string(),
                text::replacement_literal(text::path(p, "urlRewrite.path.replaceFullPath")?),
            ),
            PathChange::PrefixMatch(p) => {
                let p = if p.is_empty() {
                    p
                } else {
                    text::path(p, "urlRewrite.path.replacePrefixMatch")?
                };
                prefix_replacement(p)
            }
        };
        entries.push(Entry::Value(json!({
            "filter": "url_rewrite",
            "operations": [{"regex_replace": {"pattern": pattern, "replacement": replacement}}]
        })));
    }
    Ok(entries)
}

/// The regular expression replacement of a `ReplacePrefixMatch` by `with`
/// (a checked path, or empty), for `url_rewrite` and `pontoon_redirect`.
pub fn prefix_replacement(with: &str) -> (String, String) {
    (
        format!("^{}(/.*)?$", placeholders::MATCH_PREFIX),
        format!(
            "{}${{1}}",
            text::replacement_literal(with.trim_end_matches('/'))
        ),
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::{Error, translate_values};

    fn entries(rewrite: serde_json::Value) -> Vec<serde_json::Value> {
        translate_values(&json!({"type": "URLRewrite", "urlRewrite": rewrite}).to_string()).unwrap()
    }

    fn replace(rewrite: serde_json::Value) -> (String, String) {
        let e = entries(rewrite);
        let op = &e[0]["operations"][0]["regex_replace"];
        (
            op["pattern"].as_str().unwrap().into(),
            op["replacement"].as_str().unwrap().into(),
        )
    }

    #[test]
    fn full_path() {
        assert_eq!(
            replace(json!({"path": {"type": "ReplaceFullPath", "replaceFullPath": "/new$1"}})),
            ("^.*$".into(), "/new$$1".into())
        );
    }

    #[test]
    fn prefix_match_keeps_the_rest_of_the_path() {
        let expected = |r: &str| ("^${pontoon_match_prefix}(/.*)?$".to_string(), r.to_string());
        let prefix = |p: &str| {
            replace(json!({"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": p}}))
        };
        assert_eq!(prefix("/xyz"), expected("/xyz${1}"));
        assert_eq!(prefix("/xyz/"), expected("/xyz${1}"));
        assert_eq!(prefix("/"), expected("${1}"));
        assert_eq!(prefix(""), expected("${1}"));
    }

    #[test]
    fn hostname_sets_host() {
        let e = entries(
            json!({"hostname": "internal.example.com", "path": {"type": "ReplaceFullPath", "replaceFullPath": "/"}}),
        );
        assert_eq!(e.len(), 2);
        assert_eq!(
            e[0],
            json!({"filter": "headers", "request_set": [{"name": "host", "value": "internal.example.com"}]})
        );
        assert_eq!(e[1]["filter"], "url_rewrite");
    }

    #[test]
    fn invalid_fields_are_named() {
        let err = translate_values(
            &json!({"type": "URLRewrite", "urlRewrite": {"hostname": "bad host"}}).to_string(),
        )
        .unwrap_err();
        assert_eq!(
            err,
            Error::InvalidInput("urlRewrite.hostname: `bad host` is not a valid hostname".into())
        );
        let err = translate_values(
            &json!({"type": "URLRewrite", "urlRewrite": {"path": {"type": "Nope", "replaceFullPath": "/"}}}).to_string(),
        )
        .unwrap_err();
        assert_eq!(
            err,
            Error::InvalidInput(
                "urlRewrite.path.type `Nope` is neither ReplaceFullPath nor ReplacePrefixMatch"
                    .into()
            )
        );
    }
}
