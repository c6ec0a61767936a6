//! A rule's filters on one backend (`backendRefs[].filters`): the header
//! modifiers, which Pontoon's data plane applies to the requests the load
//! balancer sends to that backend and to their responses. Other filter
//! types on a backend are refused, saying which.

use crate::httproutes::HttpRouteRulesBackendRefs;
use serde_json::Value;

use crate::data_plane::model::{BackendHeaders, HeaderChanges, HeaderValuePair};

/// Each reference's header changes (`None`: it has no filters), in order;
/// `Err` names the first filter that cannot be served on a backend.
pub fn of(refs: &[HttpRouteRulesBackendRefs]) -> Result<Vec<Option<BackendHeaders>>, String> {
    refs.iter()
        .enumerate()
        .map(|(i, r)| {
            let filters = r.filters.as_deref().unwrap_or_default();
            if filters.is_empty() {
                return Ok(None);
            }
            let mut headers = BackendHeaders::default();
            for (j, filter) in filters.iter().enumerate() {
                let value = serde_json::to_value(filter).unwrap_or_default();
                let (changes, field) = match value["type"].as_str() {
                    Some("RequestHeaderModifier") => {
                        (&mut headers.request, "requestHeaderModifier")
                    }
                    Some("ResponseHeaderModifier") => {
                        (&mut headers.response, "responseHeaderModifier")
                    }
                    other => {
                        return Err(format!(
                            "backendRefs[{i}].filters[{j}]: {} is not supported on a backend \
                             (RequestHeaderModifier and ResponseHeaderModifier are; put other \
                             filters on the rule)",
                            other.unwrap_or("a filter without a type")
                        ));
                    }
                };
                add(changes, &value[field]);
                check(changes, field == "responseHeaderModifier")
                    .map_err(|why| format!("backendRefs[{i}].filters[{j}].{field}: {why}"))?;
            }
            Ok(Some(headers))
        })
        .collect()
}

/// Headers of one connection, which a response's filter must not add.
const HOP_BY_HOP: [&str; 7] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// What the data plane would refuse to load (and with it the whole
/// Gateway's config), said of this filter instead: header names of token
/// characters, values of visible ASCII, spaces and tabs, no hop-by-hop
/// header added to a response.
fn check(changes: &HeaderChanges, response: bool) -> Result<(), String> {
    let names = changes
        .set
        .iter()
        .chain(&changes.add)
        .map(|p| p.name.as_str())
        .chain(changes.remove.iter().map(String::as_str));
    for name in names {
        let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
        if name.is_empty() || !name.bytes().all(token) {
            return Err(format!("`{name}` is not a header name"));
        }
    }
    for pair in changes.set.iter().chain(&changes.add) {
        if !pair
            .value
            .bytes()
            .all(|b| b == b'\t' || (b' '..=b'~').contains(&b))
        {
            return Err(format!(
                "the value of `{}` is not visible ASCII (Praxis sends no other header values)",
                pair.name
            ));
        }
        if response && HOP_BY_HOP.contains(&pair.name.as_str()) {
            return Err(format!(
                "`{}` is a hop-by-hop header, which a response does not carry on",
                pair.name
            ));
        }
    }
    Ok(())
}

fn add(changes: &mut HeaderChanges, modifier: &Value) {
    let pairs = |key: &str| {
        modifier[key]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| {
                Some(HeaderValuePair {
                    name: p["name"].as_str()?.to_ascii_lowercase(),
                    value: p["value"].as_str()?.to_string(),
                })
            })
            .collect::<Vec<_>>()
    };
    changes.set.extend(pairs("set"));
    changes.add.extend(pairs("add"));
    changes.remove.extend(
        modifier["remove"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|n| Some(n.as_str()?.to_ascii_lowercase())),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refs(json: serde_json::Value) -> Vec<HttpRouteRulesBackendRefs> {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn header_modifiers_are_read_and_other_filters_refused() {
        let headers = of(&refs(serde_json::json!([
            {"name": "a", "port": 80},
            {"name": "b", "port": 80, "filters": [
                {"type": "RequestHeaderModifier", "requestHeaderModifier": {
                    "set": [{"name": "Backend", "value": "b"}],
                    "add": [{"name": "x-add", "value": "1"}], "remove": ["X-Gone"]}},
                {"type": "ResponseHeaderModifier", "responseHeaderModifier": {
                    "set": [{"name": "x-served", "value": "b"}]}}
            ]}
        ])))
        .unwrap();
        assert_eq!(headers[0], None);
        let b = headers[1].as_ref().unwrap();
        assert_eq!(
            b.request.set,
            [HeaderValuePair {
                name: "backend".into(),
                value: "b".into()
            }]
        );
        assert_eq!(b.request.add[0].name, "x-add");
        assert_eq!(b.request.remove, ["x-gone"]);
        assert_eq!(b.response.set[0].value, "b");

        for (filter, says) in [
            (
                serde_json::json!({"type": "RequestHeaderModifier", "requestHeaderModifier": {
                    "set": [{"name": "x-name", "value": "caf\u{e9}"}]}}),
                "filters[0].requestHeaderModifier: the value of `x-name` is not visible ASCII",
            ),
            (
                serde_json::json!({"type": "ResponseHeaderModifier", "responseHeaderModifier": {
                    "add": [{"name": "Connection", "value": "close"}]}}),
                "`connection` is a hop-by-hop header",
            ),
        ] {
            let why = of(&refs(
                serde_json::json!([{"name": "a", "port": 80, "filters": [filter]}]),
            ))
            .unwrap_err();
            assert!(why.contains(says), "{why}");
        }

        let refused = of(&refs(serde_json::json!([
            {"name": "a", "port": 80, "filters": [
                {"type": "RequestMirror", "requestMirror": {"backendRef": {"name": "m", "port": 80}}}]}
        ])))
        .unwrap_err();
        assert!(
            refused.contains("backendRefs[0].filters[0]") && refused.contains("RequestMirror"),
            "{refused}"
        );
    }
}
