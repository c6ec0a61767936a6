//! Test config filter: translates a `RequestHeaderModifier` HTTPRoute filter
//! into one Praxis `headers` filter entry. A header named `x-panic` makes it
//! panic (a trap), so that tests can see a trap fail only its own filter.

use pontoon_provider_sdk::config_filter::{FilterError, FilterMetadata, Guest, RouteContext};
use serde::{Deserialize, Serialize};

struct HeaderFilter;

const HANDLES: &str = "RequestHeaderModifier";

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Filter {
    #[serde(rename = "type")]
    kind: String,
    request_header_modifier: Option<Modifier>,
}

#[derive(Deserialize)]
struct Modifier {
    #[serde(default)]
    set: Vec<Header>,
    #[serde(default)]
    add: Vec<Header>,
    #[serde(default)]
    remove: Vec<String>,
}

#[derive(Deserialize, Serialize)]
struct Header {
    name: String,
    value: String,
}

#[derive(Serialize)]
struct Entry<'a> {
    filter: &'static str,
    request_set: &'a [Header],
    request_add: &'a [Header],
    request_remove: &'a [String],
}

impl Guest for HeaderFilter {
    fn metadata() -> FilterMetadata {
        FilterMetadata {
            name: "header-filter".into(),
            version: "0.1.0".into(),
            description: "Test filter: RequestHeaderModifier to Praxis headers".into(),
            handles: vec![HANDLES.into()],
        }
    }

    fn translate(filter: String, context: RouteContext) -> Result<Vec<String>, FilterError> {
        let at = context.location();
        let invalid = |what: String| FilterError::invalid_input(format!("{at}: {what}"));
        let filter: Filter =
            serde_json::from_str(&filter).map_err(|e| invalid(format!("malformed filter: {e}")))?;
        if filter.kind != HANDLES {
            return Err(invalid(format!(
                "filter type `{}`; this module handles {HANDLES}",
                filter.kind
            )));
        }
        let modifier = filter
            .request_header_modifier
            .ok_or_else(|| invalid("requestHeaderModifier is missing".into()))?;
        for (list, names) in [
            (
                "set",
                modifier.set.iter().map(|h| &h.name).collect::<Vec<_>>(),
            ),
            ("add", modifier.add.iter().map(|h| &h.name).collect()),
            ("remove", modifier.remove.iter().collect()),
        ] {
            if let Some(index) = names.iter().position(|name| name.is_empty()) {
                return Err(invalid(format!(
                    "requestHeaderModifier.{list}[{index}]: the header name is empty"
                )));
            }
        }
        if modifier.set.iter().any(|h| h.name == "x-panic") {
            panic!("asked to panic by {at}");
        }
        let entry = Entry {
            filter: "headers",
            request_set: &modifier.set,
            request_add: &modifier.add,
            request_remove: &modifier.remove,
        };
        let json = serde_json::to_string(&entry).map_err(|e| FilterError::failed(e.to_string()))?;
        Ok(vec![json])
    }
}

pontoon_provider_sdk::export_config_filter!(HeaderFilter);

#[cfg(test)]
mod tests {
    use super::*;

    fn context() -> RouteContext {
        RouteContext {
            route_namespace: "ns".into(),
            route_name: "web".into(),
            rule_index: 0,
            filter_index: 1,
            gateway_namespace: "gw".into(),
            gateway_name: "main".into(),
        }
    }

    fn translate(filter: serde_json::Value) -> Result<Vec<String>, FilterError> {
        HeaderFilter::translate(filter.to_string(), context())
    }

    fn invalid_input(filter: serde_json::Value) -> String {
        match translate(filter) {
            Err(FilterError::InvalidInput(message)) => message,
            other => panic!("expected invalid-input, got {other:?}"),
        }
    }

    #[test]
    fn translates_set_add_remove() {
        let entries = translate(serde_json::json!({
            "type": "RequestHeaderModifier",
            "requestHeaderModifier": {
                "set": [{"name": "x-a", "value": "1"}],
                "add": [{"name": "x-b", "value": "2"}],
                "remove": ["x-c"],
            }
        }))
        .unwrap();
        assert_eq!(entries.len(), 1);
        let entry: serde_json::Value = serde_json::from_str(&entries[0]).unwrap();
        assert_eq!(
            entry,
            serde_json::json!({
                "filter": "headers",
                "request_set": [{"name": "x-a", "value": "1"}],
                "request_add": [{"name": "x-b", "value": "2"}],
                "request_remove": ["x-c"],
            })
        );
    }

    #[test]
    fn missing_lists_are_empty() {
        let entries = translate(serde_json::json!({
            "type": "RequestHeaderModifier",
            "requestHeaderModifier": {"remove": ["x"]}
        }))
        .unwrap();
        let entry: serde_json::Value = serde_json::from_str(&entries[0]).unwrap();
        assert_eq!(entry["request_set"], serde_json::json!([]));
        assert_eq!(entry["request_add"], serde_json::json!([]));
    }

    #[test]
    fn rejects_other_types_and_empty_names() {
        let message = invalid_input(serde_json::json!({"type": "RequestRedirect"}));
        assert!(
            message.contains("filter type `RequestRedirect`"),
            "{message}"
        );
        assert!(
            message.contains("HTTPRoute ns/web rule 0 filter 1"),
            "{message}"
        );
        let message = invalid_input(serde_json::json!({
            "type": "RequestHeaderModifier",
            "requestHeaderModifier": {"add": [{"name": "", "value": "v"}]}
        }));
        assert!(
            message.contains("add[0]: the header name is empty"),
            "{message}"
        );
        let message = invalid_input(serde_json::json!({
            "type": "RequestHeaderModifier",
            "requestHeaderModifier": {"remove": ["ok", ""]}
        }));
        assert!(message.contains("remove[1]"), "{message}");
        invalid_input(serde_json::json!({"type": "RequestHeaderModifier"}));
        invalid_input(serde_json::json!([1]));
    }
}
