//! Test config filter for a custom `ExtensionRef`: a filter referring to
//! `stamp.pontoon.dev/HeaderStamp` named NAME sets `x-header-stamp: NAME` on
//! the request (the backend sees it) and on the response (the client sees
//! it), so a traffic test can tell that a custom module's filter ran, and
//! for which rule.

use pontoon_provider_sdk::config_filter::{FilterError, FilterMetadata, Guest, RouteContext};
use serde::Deserialize;

struct HeaderStamp;

const GROUP: &str = "stamp.pontoon.dev";
const KIND: &str = "HeaderStamp";
/// The header both directions carry.
const HEADER: &str = "x-header-stamp";

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Filter {
    #[serde(rename = "type")]
    kind: String,
    extension_ref: Option<ExtensionRef>,
}

#[derive(Deserialize)]
struct ExtensionRef {
    group: String,
    kind: String,
    name: String,
}

impl Guest for HeaderStamp {
    fn metadata() -> FilterMetadata {
        FilterMetadata {
            name: "header-stamp".into(),
            version: "0.1.0".into(),
            description: "Test filter: ExtensionRef HeaderStamp sets x-header-stamp".into(),
            handles: vec![format!("ExtensionRef:{GROUP}/{KIND}")],
        }
    }

    fn translate(filter: String, context: RouteContext) -> Result<Vec<String>, FilterError> {
        let at = context.location();
        let invalid = |what: String| FilterError::invalid_input(format!("{at}: {what}"));
        let filter: Filter =
            serde_json::from_str(&filter).map_err(|e| invalid(format!("malformed filter: {e}")))?;
        let reference = match (filter.kind.as_str(), filter.extension_ref) {
            ("ExtensionRef", Some(r)) => r,
            ("ExtensionRef", None) => return Err(invalid("extensionRef is missing".into())),
            (other, _) => {
                return Err(invalid(format!(
                    "filter type `{other}`; this module handles ExtensionRef"
                )));
            }
        };
        if reference.group != GROUP || reference.kind != KIND {
            return Err(invalid(format!(
                "extensionRef {}/{}; this module handles {GROUP}/{KIND}",
                reference.group, reference.kind
            )));
        }
        let name = &reference.name;
        if name.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
        {
            return Err(invalid(format!(
                "extensionRef.name `{name}` is not a DNS name"
            )));
        }
        let pair = serde_json::json!([{"name": HEADER, "value": name}]);
        let entry =
            serde_json::json!({"filter": "headers", "request_set": pair, "response_set": pair});
        Ok(vec![entry.to_string()])
    }
}

pontoon_provider_sdk::export_config_filter!(HeaderStamp);

#[cfg(test)]
mod tests {
    use super::*;

    fn context() -> RouteContext {
        RouteContext {
            route_namespace: "ns".into(),
            route_name: "web".into(),
            rule_index: 0,
            filter_index: 0,
            gateway_namespace: "gw".into(),
            gateway_name: "main".into(),
        }
    }

    fn translate(filter: serde_json::Value) -> Result<Vec<String>, FilterError> {
        HeaderStamp::translate(filter.to_string(), context())
    }

    #[test]
    fn stamps_requests_and_responses_with_the_reference_name() {
        let entries = translate(serde_json::json!({
            "type": "ExtensionRef",
            "extensionRef": {"group": GROUP, "kind": KIND, "name": "blue"}
        }))
        .unwrap();
        let entry: serde_json::Value = serde_json::from_str(&entries[0]).unwrap();
        assert_eq!(
            entry,
            serde_json::json!({
                "filter": "headers",
                "request_set": [{"name": "x-header-stamp", "value": "blue"}],
                "response_set": [{"name": "x-header-stamp", "value": "blue"}],
            })
        );
        assert_eq!(
            HeaderStamp::metadata().handles,
            ["ExtensionRef:stamp.pontoon.dev/HeaderStamp"]
        );
    }

    #[test]
    fn other_references_are_invalid_input_naming_the_route() {
        let err = translate(serde_json::json!({
            "type": "ExtensionRef",
            "extensionRef": {"group": "other.dev", "kind": KIND, "name": "blue"}
        }))
        .unwrap_err();
        let FilterError::InvalidInput(message) = err else {
            panic!("expected invalid-input");
        };
        assert!(
            message.starts_with(
                "HTTPRoute ns/web rule 0 filter 0: extensionRef other.dev/HeaderStamp"
            ),
            "{message}"
        );
        assert!(matches!(
            translate(serde_json::json!({"type": "RequestHeaderModifier"})),
            Err(FilterError::InvalidInput(_))
        ));
    }
}
