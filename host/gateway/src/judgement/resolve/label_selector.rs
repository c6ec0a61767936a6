//! Kubernetes label selectors, as the Gateway API's namespace selectors
//! (of listeners and of ListenerSets) use them.

use std::collections::BTreeMap;

use gateway_api::gateways::GatewayListenersAllowedRoutesNamespacesSelector;

/// A Kubernetes label selector (matchLabels and matchExpressions, ANDed).
pub fn selects(
    selector: &GatewayListenersAllowedRoutesNamespacesSelector,
    labels: &BTreeMap<String, String>,
) -> bool {
    let by_labels = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let by_expressions = selector.match_expressions.iter().flatten().all(|e| {
        let values = e.values.clone().unwrap_or_default();
        let value = labels.get(&e.key);
        match e.operator.as_str() {
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            _ => false,
        }
    });
    by_labels && by_expressions
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selector_expressions() {
        let labels: BTreeMap<String, String> = [("a".to_string(), "1".to_string())].into();
        let sel = |e: serde_json::Value| -> GatewayListenersAllowedRoutesNamespacesSelector {
            serde_json::from_value(serde_json::json!({ "matchExpressions": [e] })).unwrap()
        };
        assert!(selects(
            &sel(serde_json::json!({"key":"a","operator":"In","values":["1","2"]})),
            &labels
        ));
        assert!(!selects(
            &sel(serde_json::json!({"key":"a","operator":"NotIn","values":["1"]})),
            &labels
        ));
        assert!(selects(
            &sel(serde_json::json!({"key":"a","operator":"Exists"})),
            &labels
        ));
        assert!(selects(
            &sel(serde_json::json!({"key":"b","operator":"DoesNotExist"})),
            &labels
        ));
    }
}
