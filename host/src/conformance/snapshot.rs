//! The cluster as the conformance check photographs it before and after a
//! step: which objects exist and what they hold, and what a step left.

use std::collections::BTreeMap;

use crate::plugins::CallError;

/// What is in the scratch namespaces, by `Kind namespace/name`, with the
/// content a provider could change (spec, data, labels).
pub(super) type Snapshot = BTreeMap<String, serde_json::Value>;

pub(super) fn expect_bool(outcome: Result<bool, CallError>, expected: bool) -> Result<(), String> {
    match outcome {
        Ok(value) if value == expected => Ok(()),
        Ok(value) => Err(format!("returned {value}")),
        Err(err) => Err(err.to_string()),
    }
}

pub(super) fn same(first: &Snapshot, second: &Snapshot) -> Result<(), String> {
    let mut differences = Vec::new();
    for (key, value) in second {
        match first.get(key) {
            None => differences.push(format!("{key} appeared")),
            Some(old) if old != value => differences.push(format!("{key} changed")),
            Some(_) => {}
        }
    }
    differences.extend(
        first
            .keys()
            .filter(|k| !second.contains_key(*k))
            .map(|k| format!("{k} disappeared")),
    );
    if differences.is_empty() {
        Ok(())
    } else {
        Err(differences.join("; "))
    }
}

pub(super) fn leftovers(before: &Snapshot, after: &Snapshot) -> Result<(), String> {
    let left: Vec<&str> = after
        .keys()
        .filter(|k| !before.contains_key(*k))
        .map(String::as_str)
        .collect();
    let lost: Vec<&str> = before
        .keys()
        .filter(|k| !after.contains_key(*k))
        .map(String::as_str)
        .collect();
    match (left.is_empty(), lost.is_empty()) {
        (true, true) => Ok(()),
        (false, _) => Err(format!("left behind: {}", left.join(", "))),
        (true, false) => Err(format!(
            "deleted what it did not create: {}",
            lost.join(", ")
        )),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn snapshot(entries: &[(&str, serde_json::Value)]) -> Snapshot {
        entries
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    }

    #[test]
    fn expect_bool_passes_only_the_expected_answer() {
        assert_eq!(expect_bool(Ok(true), true), Ok(()));
        assert_eq!(expect_bool(Ok(false), false), Ok(()));
        assert_eq!(expect_bool(Ok(false), true), Err("returned false".into()));
        let trap = CallError::Trap {
            module: "sample".into(),
            step: "target-exists",
            message: "unreachable".into(),
        };
        assert_eq!(
            expect_bool(Err(trap), true),
            Err("module `sample` trapped in `target-exists`: unreachable".into())
        );
    }

    #[test]
    fn same_accepts_an_unchanged_snapshot() {
        let first = snapshot(&[("ConfigMap conformance-x/restore", json!({ "a": 1 }))]);
        assert_eq!(same(&first, &first.clone()), Ok(()));
        assert_eq!(same(&Snapshot::new(), &Snapshot::new()), Ok(()));
    }

    #[test]
    fn same_names_what_appeared_changed_and_disappeared() {
        let first = snapshot(&[
            ("ConfigMap ns/kept", json!(1)),
            ("Deployment ns/sample", json!({ "replicas": 2 })),
            ("Service ns/old", json!(1)),
        ]);
        let second = snapshot(&[
            ("ConfigMap ns/kept", json!(1)),
            ("Deployment ns/sample", json!({ "replicas": 3 })),
            ("Deployment ns/sample-shadow", json!(1)),
        ]);
        assert_eq!(
            same(&first, &second),
            Err("Deployment ns/sample changed; Deployment ns/sample-shadow appeared; Service ns/old disappeared".into())
        );
    }

    #[test]
    fn leftovers_names_the_objects_left_behind() {
        let before = snapshot(&[("Deployment ns/sample", json!(1))]);
        let after = snapshot(&[
            ("ConfigMap ops/restore", json!(1)),
            ("Deployment ns/sample", json!(1)),
            ("Deployment ns/sample-shadow", json!(1)),
        ]);
        assert_eq!(
            leftovers(&before, &after),
            Err("left behind: ConfigMap ops/restore, Deployment ns/sample-shadow".into())
        );
    }

    #[test]
    fn leftovers_names_what_was_deleted_that_the_provider_did_not_create() {
        let before = snapshot(&[
            ("Deployment ns/sample", json!(1)),
            ("Service ns/sample", json!(1)),
        ]);
        let after = snapshot(&[("Deployment ns/sample", json!(1))]);
        assert_eq!(
            leftovers(&before, &after),
            Err("deleted what it did not create: Service ns/sample".into())
        );
        // What is left behind is named first, when both happened.
        let after = snapshot(&[("ConfigMap ops/restore", json!(1))]);
        assert_eq!(
            leftovers(&before, &after),
            Err("left behind: ConfigMap ops/restore".into())
        );
    }

    #[test]
    fn leftovers_looks_only_at_which_objects_exist() {
        let before = snapshot(&[("Deployment ns/sample", json!({ "image": "nginx" }))]);
        let after = snapshot(&[("Deployment ns/sample", json!({ "image": "carrier2" }))]);
        assert_eq!(leftovers(&before, &after), Ok(()));
    }
}
