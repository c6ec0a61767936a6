//! Pure judgement of what a provider wrote, as the host's journal recorded
//! it: whether uninstall put each object back. No I/O.
//!
//! Created objects must be gone. Objects that existed (patched, applied or
//! deleted) must be as they were before the provider first wrote them, on
//! what a user owns: labels, annotations and spec (data for ConfigMaps and
//! Secrets; for pods, each container's image, command, args and env).
//! What the cluster itself changes is left out of the comparison.

use serde_json::{Map, Value, json};

use super::compare::{differences, without_restart_annotation};
use crate::plugins::Written;

/// Set by the Deployment controller on every template change, a restart too.
const DEPLOYMENT_REVISION: &str = "deployment.kubernetes.io/revision";
/// The differences named per object, at most.
const SHOWN: usize = 5;

/// Drops nulls and empty maps and lists, so that `annotations: {}` left by
/// removing the last annotation equals no annotations at all.
fn pruned(value: Value) -> Option<Value> {
    match value {
        Value::Null => None,
        Value::Object(map) => {
            let map: Map<String, Value> = map
                .into_iter()
                .filter_map(|(k, v)| pruned(v).map(|v| (k, v)))
                .collect();
            (!map.is_empty()).then_some(Value::Object(map))
        }
        Value::Array(items) if items.is_empty() => None,
        other => Some(other),
    }
}

/// The parts of `object` (of `kind`) that are the user's, as JSON laid out
/// like the object, so that differences name the object's own fields.
pub(super) fn user_owned(kind: &str, object: &Value) -> Value {
    let mut annotations = object["metadata"]["annotations"].clone();
    if let Some(map) = annotations.as_object_mut() {
        map.remove(DEPLOYMENT_REVISION);
    }
    let mut owned = json!({
        "metadata": { "labels": object["metadata"]["labels"], "annotations": annotations },
    });
    match kind {
        "Pod" => {
            // Containers by name: a pod's spec is otherwise immutable, and
            // the name says which container differs.
            let mut spec = Map::new();
            for list in ["initContainers", "containers"] {
                let containers: Map<String, Value> = object["spec"][list]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|c| {
                        let name = c["name"].as_str().unwrap_or_default().to_string();
                        let fields = json!({
                            "image": c["image"], "command": c["command"],
                            "args": c["args"], "env": c["env"],
                        });
                        (name, fields)
                    })
                    .collect();
                spec.insert(list.into(), Value::Object(containers));
            }
            owned["spec"] = Value::Object(spec);
        }
        "ConfigMap" | "Secret" => {
            owned["data"] = object["data"].clone();
            owned["binaryData"] = object["binaryData"].clone();
        }
        _ => {
            let mut spec = object["spec"].clone();
            // `kubectl rollout restart`'s annotation is how a restore rolls
            // a workload's pods back to its template.
            if let Some(template) = spec.get_mut("template") {
                *template = without_restart_annotation(template.take());
            }
            owned["spec"] = spec;
        }
    }
    pruned(owned).unwrap_or_else(|| json!({}))
}

/// Whether the object is on its way out (a deletion timestamp).
fn terminating(object: &Value) -> bool {
    !object["metadata"]["deletionTimestamp"].is_null()
}

/// Whether a controller owns the object (a ReplicaSet's pod): it replaces
/// what is deleted, and the replacement is checked against the template.
fn controlled(object: &Value) -> bool {
    object["metadata"]["ownerReferences"]
        .as_array()
        .is_some_and(|owners| owners.iter().any(|o| o["controller"] == true))
}

/// Whether two reads are of the same object, not one recreated with its name.
fn same_object(a: &Value, b: &Value) -> bool {
    a["metadata"]["uid"] == b["metadata"]["uid"]
}

fn past_tense(verbs: &[&str]) -> String {
    verbs
        .iter()
        .map(|verb| match *verb {
            "create" => "created",
            "apply" => "applied",
            "patch" => "patched",
            "delete" => "deleted",
            other => other,
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// What is wrong with `written` now that uninstall is done (`now`: the
/// object as the cluster has it, `None` if gone), if anything.
pub(super) fn put_back_problem(written: &Written, now: Option<&Value>) -> Option<String> {
    let what = format!("{} ({})", written.describe(), past_tense(&written.verbs));
    let now = now.filter(|o| !terminating(o));
    match (&written.before, now) {
        (None, None) => None,
        (None, Some(_)) => Some(format!("{what}: created by the provider and still there")),
        (Some(before), None) if controlled(before) => None,
        // Another object of the same name (a StatefulSet's pod, recreated
        // by a restart): its controller's, checked against the template.
        (Some(before), Some(now)) if controlled(before) && !same_object(before, now) => None,
        (Some(_), None) => Some(format!("{what}: existed before install and is gone")),
        (Some(before), Some(now)) => {
            let found = differences(
                &user_owned(&written.kind, before),
                &user_owned(&written.kind, now),
                SHOWN,
            );
            (!found.is_empty()).then(|| {
                format!(
                    "{what}: not as before install (before -> now, null: absent): {}",
                    found.join("; ")
                )
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(kind: &str, before: Option<Value>, verbs: &[&'static str]) -> Written {
        Written {
            api_version: "v1".into(),
            kind: kind.into(),
            namespace: "shop".into(),
            name: "web-1".into(),
            before,
            verbs: verbs.to_vec(),
        }
    }

    fn pod(labels: Value, annotations: Value, image: &str) -> Value {
        json!({
            "metadata": {
                "name": "web-1", "labels": labels, "annotations": annotations,
                "ownerReferences": [{"kind": "ReplicaSet", "name": "web-7d", "controller": true}],
                "resourceVersion": "1"
            },
            "spec": {
                "nodeName": "node-a",
                "containers": [{"name": "app", "image": image, "env": [{"name": "MODE", "value": "x"}]}]
            },
            "status": {"phase": "Running"}
        })
    }

    #[test]
    fn a_label_left_on_a_pod_is_named_with_the_pod_and_the_field() {
        let before = pod(json!({"app": "web"}), json!(null), "nginx:1.27");
        let now = pod(
            json!({"app": "web", "labelmount/mounted": "yes"}),
            json!(null),
            "nginx:1.27",
        );
        let problem = put_back_problem(&written("Pod", Some(before), &["patch"]), Some(&now));
        assert_eq!(
            problem.as_deref(),
            Some(
                r#"Pod shop/web-1 (patched): not as before install (before -> now, null: absent): /metadata/labels/labelmount/mounted: null -> "yes""#
            )
        );
    }

    #[test]
    fn an_annotation_or_env_left_changed_is_a_problem_but_status_is_not() {
        let before = pod(json!({"app": "web"}), json!(null), "nginx:1.27");
        let mut annotated = pod(json!({"app": "web"}), json!({"note": "x"}), "nginx:1.27");
        let problem = put_back_problem(
            &written("Pod", Some(before.clone()), &["patch"]),
            Some(&annotated),
        );
        assert!(
            problem
                .unwrap()
                .contains("/metadata/annotations/note: null -> \"x\"")
        );

        annotated["metadata"]["annotations"] = json!({});
        annotated["metadata"]["resourceVersion"] = json!("9");
        annotated["status"] = json!({"phase": "Pending"});
        let entry = written("Pod", Some(before.clone()), &["patch"]);
        assert_eq!(
            put_back_problem(&entry, Some(&annotated)),
            None,
            "{{}} is no annotations"
        );

        let mut env = before.clone();
        env["spec"]["containers"][0]["env"][0]["value"] = json!("y");
        let problem = put_back_problem(&entry, Some(&env)).unwrap();
        assert!(
            problem.contains("/spec/containers/app/env/0/value: \"x\" -> \"y\""),
            "{problem}"
        );
    }

    #[test]
    fn what_the_provider_created_must_be_gone_or_going() {
        let entry = written("ConfigMap", None, &["apply", "delete"]);
        assert_eq!(put_back_problem(&entry, None), None);
        let mut left = json!({"metadata": {"name": "web-1"}, "data": {"a": "1"}});
        assert_eq!(
            put_back_problem(&entry, Some(&left)).as_deref(),
            Some(
                "ConfigMap shop/web-1 (applied, deleted): created by the provider and still there"
            )
        );
        left["metadata"]["deletionTimestamp"] = json!("2026-12-01T00:00:00Z");
        assert_eq!(put_back_problem(&entry, Some(&left)), None);
    }

    #[test]
    fn a_deleted_object_must_be_back_unless_a_controller_replaces_it() {
        let owned = pod(json!({"app": "web"}), json!(null), "nginx:1.27");
        assert_eq!(
            put_back_problem(&written("Pod", Some(owned.clone()), &["delete"]), None),
            None
        );
        let mut bare = owned;
        bare["metadata"]["ownerReferences"] = json!(null);
        assert_eq!(
            put_back_problem(&written("Pod", Some(bare), &["delete"]), None).as_deref(),
            Some("Pod shop/web-1 (deleted): existed before install and is gone")
        );
    }

    #[test]
    fn a_pod_its_controller_recreated_under_the_same_name_is_the_controllers() {
        let mut before = pod(json!({"app": "web"}), json!(null), "nginx:1.27");
        before["metadata"]["uid"] = json!("1");
        let mut recreated = pod(
            json!({"app": "web", "revision": "2"}),
            json!(null),
            "nginx:1.27",
        );
        recreated["metadata"]["uid"] = json!("2");
        let entry = written("Pod", Some(before.clone()), &["patch"]);
        assert_eq!(put_back_problem(&entry, Some(&recreated)), None);
        // The same pod, still labelled, is not.
        recreated["metadata"]["uid"] = json!("1");
        assert!(put_back_problem(&entry, Some(&recreated)).is_some());
        // Nor is a bare pod the provider deleted and created again otherwise.
        before["metadata"]["ownerReferences"] = json!(null);
        recreated["metadata"]["ownerReferences"] = json!(null);
        recreated["metadata"]["uid"] = json!("2");
        let entry = written("Pod", Some(before), &["delete", "create"]);
        assert!(put_back_problem(&entry, Some(&recreated)).is_some());
    }

    #[test]
    fn a_restart_and_its_revision_do_not_count_against_a_restore() {
        let before = json!({
            "metadata": {"annotations": {DEPLOYMENT_REVISION: "1"}, "generation": 1},
            "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "app"}]}}}
        });
        let mut now = before.clone();
        now["metadata"]["annotations"][DEPLOYMENT_REVISION] = json!("2");
        now["metadata"]["generation"] = json!(2);
        now["spec"]["template"]["metadata"] =
            json!({"annotations": {"kubectl.kubernetes.io/restartedAt": "2026-12-01T00:00:00Z"}});
        let entry = written("Deployment", Some(before), &["patch"]);
        assert_eq!(put_back_problem(&entry, Some(&now)), None);
        now["spec"]["replicas"] = json!(3);
        assert!(
            put_back_problem(&entry, Some(&now))
                .unwrap()
                .contains("/spec/replicas: 2 -> 3")
        );
    }
}
