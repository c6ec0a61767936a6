//! RequestHeaderModifier and ResponseHeaderModifier as Praxis `headers`.
//! Praxis applies remove, then set, then add, which gives the spec's
//! results for distinct names (the spec forbids a name twice in one list).

use std::borrow::Cow;

use crate::{
    Error,
    entry::{Entry, Headers, Pair, Side},
    input::{Header, HeaderModifier},
    text,
};

/// Headers Praxis refuses to add to responses (hop-by-hop, RFC 9110).
const RESPONSE_HOP_BY_HOP: [&str; 7] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

pub fn request<'a>(m: &HeaderModifier<'a>) -> Result<Vec<Entry<'a>>, Error> {
    translate(m, Side::Request)
}

pub fn response<'a>(m: &HeaderModifier<'a>) -> Result<Vec<Entry<'a>>, Error> {
    translate(m, Side::Response)
}

fn translate<'a>(m: &HeaderModifier<'a>, side: Side) -> Result<Vec<Entry<'a>>, Error> {
    let field = match side {
        Side::Request => "requestHeaderModifier",
        Side::Response => "responseHeaderModifier",
    };
    let mut entry = Headers::new(side);
    entry.set = pairs(&m.set, field, "set", side)?;
    entry.add = pairs(&m.add, field, "add", side)?;
    entry.remove = names(&m.remove, field)?;
    Ok(if entry.is_empty() {
        Vec::new()
    } else {
        vec![Entry::Headers(entry)]
    })
}

fn pairs<'a>(
    list: &[Header<'a>],
    field: &str,
    op: &str,
    side: Side,
) -> Result<Vec<Pair<'a>>, Error> {
    list.iter()
        .enumerate()
        .map(|(i, h)| {
            // The field is named only on error: this runs per header of
            // every route at each Gateway's first reconcile.
            let at = || format!("{field}.{op}[{i}]");
            let name = text::header_name(&h.name).map_err(|e| e.at(&format!("{}.name", at())))?;
            if side == Side::Response && RESPONSE_HOP_BY_HOP.contains(&name.as_ref()) {
                return Err(Error::unsupported(format!(
                    "{}.name: Praxis does not add the hop-by-hop header `{name}` to responses",
                    at()
                )));
            }
            text::header_value(&h.value).map_err(|e| e.at(&format!("{}.value", at())))?;
            Ok(Pair {
                name,
                value: h.value.clone(),
            })
        })
        .collect()
}

fn names<'a>(list: &[Cow<'a, str>], field: &str) -> Result<Vec<Cow<'a, str>>, Error> {
    list.iter()
        .enumerate()
        .map(|(i, n)| text::header_name(n).map_err(|e| e.at(&format!("{field}.remove[{i}]"))))
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::{Error, translate_values};

    fn one(filter: serde_json::Value) -> serde_json::Value {
        let mut entries = translate_values(&filter.to_string()).unwrap();
        assert_eq!(entries.len(), 1, "one headers entry");
        entries.remove(0)
    }

    fn error(filter: serde_json::Value) -> Error {
        translate_values(&filter.to_string()).unwrap_err()
    }

    #[test]
    fn request_headers_set_add_remove() {
        let entry = one(json!({
            "type": "RequestHeaderModifier",
            "requestHeaderModifier": {
                "set": [{"name": "X-Env", "value": "prod"}],
                "add": [{"name": "x-trace", "value": "a, b"}],
                "remove": ["X-Internal"]
            }
        }));
        assert_eq!(
            entry,
            json!({
                "filter": "headers",
                "request_set": [{"name": "x-env", "value": "prod"}],
                "request_add": [{"name": "x-trace", "value": "a, b"}],
                "request_remove": ["x-internal"]
            })
        );
    }

    #[test]
    fn response_headers_use_the_response_lists() {
        let entry = one(json!({
            "type": "ResponseHeaderModifier",
            "responseHeaderModifier": {"add": [{"name": "x-served-by", "value": "praxis"}], "remove": ["server"]}
        }));
        assert_eq!(
            entry,
            json!({
                "filter": "headers",
                "response_add": [{"name": "x-served-by", "value": "praxis"}],
                "response_remove": ["server"]
            })
        );
    }

    #[test]
    fn escaped_json_strings_are_read_as_their_text() {
        // A JSON escape cannot be borrowed from the input: the decoded text
        // is what Praxis gets, and what the checks see.
        let text = r#"{"type":"RequestHeaderModifier","requestHeaderModifier":
            {"set":[{"name":"X-\u0041","value":"a\tb \"c\""}]}}"#;
        let entries = translate_values(text).unwrap();
        assert_eq!(
            entries[0]["request_set"],
            json!([{"name": "x-a", "value": "a\tb \"c\""}])
        );
        let text =
            r#"{"type":"RequestHeaderModifier","requestHeaderModifier":{"remove":["x-\u000a"]}}"#;
        assert!(matches!(
            translate_values(text),
            Err(Error::InvalidInput(m)) if m.starts_with("requestHeaderModifier.remove[0]:")
        ));
    }

    #[test]
    fn an_empty_modifier_adds_nothing() {
        let entries =
            translate_values(r#"{"type":"RequestHeaderModifier","requestHeaderModifier":{}}"#)
                .unwrap();
        assert!(entries.is_empty());
    }

    #[test]
    fn invalid_names_and_values_name_the_field() {
        let err = error(
            json!({"type": "RequestHeaderModifier", "requestHeaderModifier": {"add": [{"name": "", "value": "v"}]}}),
        );
        assert_eq!(
            err,
            Error::InvalidInput(
                "requestHeaderModifier.add[0].name: the header name is empty".into()
            )
        );
        let err = error(
            json!({"type": "RequestHeaderModifier", "requestHeaderModifier": {"remove": ["ok", "bad name"]}}),
        );
        assert!(
            matches!(err, Error::InvalidInput(m) if m.starts_with("requestHeaderModifier.remove[1]: `bad name`"))
        );
        let err = error(
            json!({"type": "ResponseHeaderModifier", "responseHeaderModifier": {"set": [{"name": "a", "value": "x\ny"}]}}),
        );
        assert!(
            matches!(err, Error::InvalidInput(m) if m.starts_with("responseHeaderModifier.set[0].value:"))
        );
    }

    #[test]
    fn hop_by_hop_response_headers_are_unsupported() {
        let err = error(
            json!({"type": "ResponseHeaderModifier", "responseHeaderModifier": {"set": [{"name": "Connection", "value": "close"}]}}),
        );
        assert!(
            matches!(err, Error::Unsupported(m) if m.contains("hop-by-hop header `connection`"))
        );
        // Requests may carry them: only Praxis's response side refuses.
        one(
            json!({"type": "RequestHeaderModifier", "requestHeaderModifier": {"set": [{"name": "te", "value": "trailers"}]}}),
        );
    }
}
