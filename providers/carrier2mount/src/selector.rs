//! Label selectors as the `cluster` interface's `list` takes them
//! (`app=web,tier in (a,b),!canary`).

use pontoon_provider_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::names::DUPLICATION_ID_LABEL;

/// The selector in Kubernetes' string syntax, or an explanation when it
/// cannot be written as one (an unknown operator) or selects everything.
pub fn to_string(selector: &LabelSelector) -> Result<String, String> {
    let mut parts: Vec<String> = selector
        .match_labels
        .iter()
        .flatten()
        .map(|(key, value)| format!("{key}={value}"))
        .collect();
    for expression in selector.match_expressions.iter().flatten() {
        let key = &expression.key;
        let values = expression.values.clone().unwrap_or_default().join(",");
        parts.push(match expression.operator.as_str() {
            "In" => format!("{key} in ({values})"),
            "NotIn" => format!("{key} notin ({values})"),
            "Exists" => key.clone(),
            "DoesNotExist" => format!("!{key}"),
            other => return Err(format!("unknown selector operator `{other}` on `{key}`")),
        });
    }
    if parts.is_empty() {
        return Err("the selector is empty and would select every pod".into());
    }
    Ok(parts.join(","))
}

/// The pods of a target workload, never its shadow's: the shadow pods carry
/// the duplication-id label, the originals do not.
pub fn original_pods(selector: &LabelSelector) -> Result<String, String> {
    Ok(format!("{},!{DUPLICATION_ID_LABEL}", to_string(selector)?))
}

/// The shadow pods of one duplication.
pub fn shadow_pods(duplication_id: &str) -> String {
    format!("{DUPLICATION_ID_LABEL}={duplication_id}")
}

#[cfg(test)]
mod tests {
    use pontoon_provider_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    use super::*;

    fn requirement(key: &str, operator: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: operator.into(),
            values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
        }
    }

    #[test]
    fn match_labels_are_sorted_pairs() {
        let selector = LabelSelector {
            match_labels: Some(
                [("tier".into(), "web".into()), ("app".into(), "shop".into())].into(),
            ),
            match_expressions: None,
        };
        assert_eq!(to_string(&selector).unwrap(), "app=shop,tier=web");
        assert_eq!(
            original_pods(&selector).unwrap(),
            "app=shop,tier=web,!bridge.gefyra.dev/duplication-id"
        );
    }

    #[test]
    fn every_operator_is_written_in_kubernetes_syntax() {
        let selector = LabelSelector {
            match_labels: Some([("app".into(), "shop".into())].into()),
            match_expressions: Some(vec![
                requirement("env", "In", &["prod", "stage"]),
                requirement("track", "NotIn", &["canary"]),
                requirement("team", "Exists", &[]),
                requirement("legacy", "DoesNotExist", &[]),
            ]),
        };
        assert_eq!(
            to_string(&selector).unwrap(),
            "app=shop,env in (prod,stage),track notin (canary),team,!legacy"
        );
    }

    #[test]
    fn empty_and_unknown_selectors_are_refused() {
        assert!(
            to_string(&LabelSelector::default())
                .unwrap_err()
                .contains("select every pod")
        );
        let odd = LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![requirement("a", "Near", &["b"])]),
        };
        assert!(to_string(&odd).unwrap_err().contains("`Near`"));
    }

    #[test]
    fn shadow_pods_are_selected_by_duplication_id() {
        assert_eq!(shadow_pods("abc"), "bridge.gefyra.dev/duplication-id=abc");
    }
}
