//! A rule's filters on one backend (`backendRefs[].filters`): the header
//! modifiers, which Pontoon's data plane applies to the requests the load
//! balancer sends to that backend and to their responses. Other filter
//! types on a backend are refused, saying which.

use gateway_api::httproutes::HttpRouteRulesBackendRefs;
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
            }
            Ok(Some(headers))
        })
        .collect()
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
