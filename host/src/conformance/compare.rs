//! Pure judgement of what the cluster shows: whether a restore gave the
//! target back, whether a step changed anything, and how to say what
//! differs. No I/O, so every verdict the suite prints is unit-tested here.

use pontoon_provider_sdk::image::same_image;
use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{Container, Pod},
};
use kube::{Resource, ResourceExt};
use serde_json::json;

/// The one change to a pod template a restore may make: `kubectl rollout
/// restart`'s annotation, which rolls the pods back to the template.
const RESTARTED_AT: &str = "kubectl.kubernetes.io/restartedAt";
/// Where the API server mounts a pod's service account token: added to the
/// pod's containers at admission, so never in the template.
const SERVICE_ACCOUNT_MOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// A container's name, image, command and args.
type ContainerShape = (
    String,
    Option<String>,
    Option<Vec<String>>,
    Option<Vec<String>>,
);

/// The parts of the target a provider must give back unchanged.
#[derive(Debug, PartialEq)]
pub(super) struct TargetShape {
    labels: BTreeMap<String, String>,
    template_labels: BTreeMap<String, String>,
    containers: Vec<ContainerShape>,
}

impl TargetShape {
    pub(super) fn of(deployment: &Deployment) -> Self {
        let template = deployment.spec.as_ref().map(|s| &s.template);
        Self {
            labels: deployment.labels().clone(),
            template_labels: template
                .and_then(|t| t.metadata.as_ref())
                .and_then(|m| m.labels.clone())
                .unwrap_or_default(),
            containers: template
                .and_then(|t| t.spec.as_ref())
                .map(|s| {
                    s.containers
                        .iter()
                        .map(|c| {
                            (
                                c.name.clone(),
                                c.image.clone(),
                                c.command.clone(),
                                c.args.clone(),
                            )
                        })
                        .collect()
                })
                .unwrap_or_default(),
        }
    }
}

/// A Deployment's pod template as JSON, less the restart annotation.
pub(super) fn template_of(deployment: &Deployment) -> serde_json::Value {
    without_restart_annotation(json!(deployment.spec.as_ref().map(|s| &s.template)))
}

/// A pod template as JSON, less the restart annotation.
pub(super) fn without_restart_annotation(mut template: serde_json::Value) -> serde_json::Value {
    if let Some(metadata) = template
        .get_mut("metadata")
        .and_then(serde_json::Value::as_object_mut)
        && let Some(annotations) = metadata
            .get_mut("annotations")
            .and_then(serde_json::Value::as_object_mut)
    {
        annotations.remove(RESTARTED_AT);
        if annotations.is_empty() {
            metadata.remove("annotations");
        }
    }
    template
}

/// A container as JSON, less the service account token mount that admission adds to pods.
pub(super) fn container_json(container: &Container) -> serde_json::Value {
    let mut value = json!(container);
    if let Some(object) = value.as_object_mut() {
        let mounts = object
            .get_mut("volumeMounts")
            .and_then(serde_json::Value::as_array_mut);
        if let Some(mounts) = mounts {
            mounts.retain(|m| m["mountPath"] != SERVICE_ACCOUNT_MOUNT);
            if mounts.is_empty() {
                object.remove("volumeMounts");
            }
        }
    }
    value
}

/// JSON pointers where `a` and `b` differ (at most `limit`), for messages.
pub(super) fn differences(
    a: &serde_json::Value,
    b: &serde_json::Value,
    limit: usize,
) -> Vec<String> {
    fn walk(a: &serde_json::Value, b: &serde_json::Value, path: String, out: &mut Vec<String>) {
        use serde_json::Value::{Array, Null, Object};
        let none = serde_json::Map::new();
        // A map against an absent one is against an empty one: each key
        // added or removed is named.
        let maps = match (a, b) {
            (Object(x), Object(y)) => Some((x, y)),
            (Object(x), Null) => Some((x, &none)),
            (Null, Object(y)) => Some((&none, y)),
            _ => None,
        };
        if let Some((x, y)) = maps {
            let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for key in keys {
                let null = Null;
                walk(
                    x.get(key).unwrap_or(&null),
                    y.get(key).unwrap_or(&null),
                    format!("{path}/{key}"),
                    out,
                );
            }
            return;
        }
        match (a, b) {
            (Array(x), Array(y)) if x.len() == y.len() => {
                for (index, (p, q)) in x.iter().zip(y).enumerate() {
                    walk(p, q, format!("{path}/{index}"), out);
                }
            }
            _ if a != b => out.push(format!("{path}: {a} -> {b}")),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(a, b, String::new(), &mut out);
    out.truncate(limit);
    out
}

/// What still differs from the original target, if anything.
pub(super) fn restore_problem(
    original: &serde_json::Value,
    now: &serde_json::Value,
    pods: &[Pod],
) -> Option<String> {
    if original != now {
        return Some(format!(
            "the pod template changed: {}",
            differences(original, now, 5).join("; ")
        ));
    }
    let wanted = original
        .pointer("/spec/containers")
        .cloned()
        .unwrap_or_default();
    let live: Vec<&Pod> = pods
        .iter()
        .filter(|p| p.meta().deletion_timestamp.is_none())
        .collect();
    if live.is_empty() {
        return Some("the target has no live pods".into());
    }
    for pod in live {
        let name = pod.name_any();
        let spec = pod.spec.as_ref()?;
        let containers = json!(
            spec.containers
                .iter()
                .map(container_json)
                .collect::<Vec<_>>()
        );
        if containers != wanted {
            return Some(format!(
                "pod {name} has other containers than the template: {}",
                differences(&wanted, &containers, 5).join("; ")
            ));
        }
        let statuses = pod
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.clone())
            .unwrap_or_default();
        for container in &spec.containers {
            let status = statuses.iter().find(|s| s.name == container.name);
            let running = status
                .and_then(|s| s.state.as_ref())
                .is_some_and(|s| s.running.is_some());
            let image = status.map(|s| s.image.as_str()).unwrap_or_default();
            let asked = container.image.as_deref().unwrap_or_default();
            if !running || !same_image(image, asked) {
                return Some(format!(
                    "pod {name}: container {} runs {image:?} (running: {running}), its spec asks for {:?}",
                    container.name, container.image
                ));
            }
        }
    }
    None
}

/// What still differs from the original target's shape (the Deployment's
/// labels, its template's labels and containers), or else whether every live
/// pod's container `container` runs `image`, if anything.
pub(super) fn shape_problem(
    original: &TargetShape,
    now: &TargetShape,
    pods: &[Pod],
    container: &str,
    image: &str,
) -> Option<String> {
    let images: Vec<String> = pods
        .iter()
        .filter(|p| p.meta().deletion_timestamp.is_none())
        .flat_map(|p| {
            p.status
                .iter()
                .flat_map(|s| s.container_statuses.iter().flatten())
        })
        .filter(|c| c.name == container)
        .map(|c| c.image.clone())
        .collect();
    let pods_restored = !images.is_empty() && images.iter().all(|i| i == image);
    if now == original && pods_restored {
        return None;
    }
    Some(if now != original {
        format!("target changed: was {original:?}, is {now:?}")
    } else {
        format!("pods of the target run {images:?}, expected {image}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment(value: serde_json::Value) -> Deployment {
        serde_json::from_value(value).unwrap()
    }

    fn container(value: serde_json::Value) -> Container {
        serde_json::from_value(value).unwrap()
    }

    /// A pod with one container `app` asking for `asked`, whose status says
    /// it runs `runs` (and whether it is running).
    fn pod(name: &str, asked: &str, runs: &str, running: bool) -> Pod {
        let state = if running {
            json!({ "running": { "startedAt": "2025-01-01T00:00:00Z" } })
        } else {
            json!({ "waiting": { "reason": "ContainerCreating" } })
        };
        serde_json::from_value(json!({
            "metadata": { "name": name },
            "spec": { "containers": [{ "name": "app", "image": asked }] },
            "status": { "containerStatuses": [{
                "name": "app", "image": runs, "imageID": "", "ready": running,
                "restartCount": 0, "state": state
            }] }
        }))
        .unwrap()
    }

    fn deleting(mut pod: Pod) -> Pod {
        pod.metadata.deletion_timestamp =
            Some(serde_json::from_value(json!("2025-01-01T00:00:00Z")).unwrap());
        pod
    }

    fn template(image: &str) -> serde_json::Value {
        json!({ "spec": { "containers": [{ "name": "app", "image": image }] } })
    }

    #[test]
    fn differences_names_each_changed_leaf_by_json_pointer() {
        let a = json!({ "spec": { "image": "nginx:1.27", "args": ["-g", "x"], "port": 80 } });
        let b = json!({ "spec": { "image": "carrier2", "args": ["-g", "y"], "port": 80 } });
        assert_eq!(
            differences(&a, &b, 5),
            [
                r#"/spec/args/1: "x" -> "y""#,
                r#"/spec/image: "nginx:1.27" -> "carrier2""#
            ]
        );
    }

    #[test]
    fn differences_reports_added_and_removed_keys_against_null() {
        let a = json!({ "env": "MODE", "kept": 1 });
        let b = json!({ "kept": 1, "volumeMounts": [] });
        assert_eq!(
            differences(&a, &b, 5),
            [r#"/env: "MODE" -> null"#, "/volumeMounts: null -> []"]
        );
    }

    #[test]
    fn differences_reports_arrays_of_another_length_whole() {
        let a = json!({ "containers": [1] });
        let b = json!({ "containers": [1, 2] });
        assert_eq!(differences(&a, &b, 5), ["/containers: [1] -> [1,2]"]);
    }

    #[test]
    fn differences_stops_at_the_limit_and_is_empty_for_equal_values() {
        let a = json!({ "a": 1, "b": 2, "c": 3 });
        let b = json!({ "a": 0, "b": 0, "c": 0 });
        assert_eq!(differences(&a, &b, 2), ["/a: 1 -> 0", "/b: 2 -> 0"]);
        assert_eq!(differences(&a, &b, 0), Vec::<String>::new());
        assert_eq!(differences(&a, &a, 5), Vec::<String>::new());
    }

    #[test]
    fn without_restart_annotation_drops_only_kubectls_restart_annotation() {
        let restarted = json!({ "metadata": {
            "labels": { "app": "sample" },
            "annotations": { RESTARTED_AT: "2025-01-01T00:00:00Z", "team": "web" }
        } });
        assert_eq!(
            without_restart_annotation(restarted),
            json!({ "metadata": {
                "labels": { "app": "sample" },
                "annotations": { "team": "web" }
            } })
        );
    }

    #[test]
    fn without_restart_annotation_removes_the_annotations_it_emptied() {
        let restarted = json!({ "metadata": {
            "labels": { "app": "sample" },
            "annotations": { RESTARTED_AT: "2025-01-01T00:00:00Z" }
        } });
        assert_eq!(
            without_restart_annotation(restarted),
            json!({ "metadata": { "labels": { "app": "sample" } } })
        );
        // A template without metadata or annotations is left as it is.
        let plain = json!({ "metadata": { "labels": { "app": "sample" } } });
        assert_eq!(without_restart_annotation(plain.clone()), plain);
        assert_eq!(without_restart_annotation(json!(null)), json!(null));
    }

    #[test]
    fn template_of_is_the_pod_template_less_the_restart_annotation() {
        let restarted = deployment(json!({
            "metadata": { "name": "sample" },
            "spec": {
                "selector": { "matchLabels": { "app": "sample" } },
                "template": {
                    "metadata": {
                        "labels": { "app": "sample" },
                        "annotations": { RESTARTED_AT: "2025-01-01T00:00:00Z" }
                    },
                    "spec": { "containers": [{ "name": "app", "image": "nginx:1.27" }] }
                }
            }
        }));
        assert_eq!(
            template_of(&restarted),
            json!({
                "metadata": { "labels": { "app": "sample" } },
                "spec": { "containers": [{ "name": "app", "image": "nginx:1.27" }] }
            })
        );
        assert_eq!(template_of(&Deployment::default()), json!(null));
    }

    #[test]
    fn container_json_drops_only_the_service_account_mount() {
        let admitted = container(json!({
            "name": "app",
            "image": "nginx:1.27",
            "volumeMounts": [
                { "name": "data", "mountPath": "/data" },
                { "name": "kube-api-access-x", "mountPath": SERVICE_ACCOUNT_MOUNT, "readOnly": true }
            ]
        }));
        assert_eq!(
            container_json(&admitted),
            json!({
                "name": "app",
                "image": "nginx:1.27",
                "volumeMounts": [{ "name": "data", "mountPath": "/data" }]
            })
        );
    }

    #[test]
    fn container_json_of_a_pod_container_equals_its_template_container() {
        let in_template = container(json!({ "name": "app", "image": "nginx:1.27" }));
        let admitted = container(json!({
            "name": "app",
            "image": "nginx:1.27",
            "volumeMounts": [
                { "name": "kube-api-access-x", "mountPath": SERVICE_ACCOUNT_MOUNT }
            ]
        }));
        assert_eq!(container_json(&admitted), container_json(&in_template));
        assert_eq!(
            container_json(&in_template),
            json!({ "name": "app", "image": "nginx:1.27" })
        );
    }

    #[test]
    fn target_shape_sees_labels_and_each_containers_image_command_and_args() {
        let sample = |image: &str, tier: &str| {
            deployment(json!({
                "metadata": { "name": "sample", "labels": { "app": "sample", "tier": tier } },
                "spec": {
                    "selector": { "matchLabels": { "app": "sample" } },
                    "template": {
                        "metadata": { "labels": { "app": "sample" } },
                        "spec": { "containers": [{
                            "name": "app", "image": image, "command": ["nginx"], "args": ["-g"]
                        }] }
                    }
                }
            }))
        };
        let shape = TargetShape::of(&sample("nginx:1.27", "web"));
        assert_eq!(shape.labels["tier"], "web");
        assert_eq!(shape.template_labels["app"], "sample");
        assert_eq!(
            shape.containers,
            [(
                "app".to_string(),
                Some("nginx:1.27".to_string()),
                Some(vec!["nginx".to_string()]),
                Some(vec!["-g".to_string()])
            )]
        );
        assert_eq!(shape, TargetShape::of(&sample("nginx:1.27", "web")));
        assert_ne!(shape, TargetShape::of(&sample("carrier2:0.1", "web")));
        assert_ne!(shape, TargetShape::of(&sample("nginx:1.27", "api")));
    }

    #[test]
    fn shape_problem_accepts_the_original_shape_with_pods_on_the_image() {
        let shape = TargetShape::of(&deployment(json!({ "metadata": { "name": "sample" } })));
        let pods = [pod("sample-1", "nginx:1.27", "nginx:1.27", true)];
        assert_eq!(
            shape_problem(&shape, &shape, &pods, "app", "nginx:1.27"),
            None
        );
    }

    #[test]
    fn shape_problem_names_a_changed_target_first() {
        let original = TargetShape::of(&deployment(json!({
            "metadata": { "name": "sample", "labels": { "app": "sample" } }
        })));
        let now = TargetShape::of(&deployment(json!({ "metadata": { "name": "sample" } })));
        let pods = [pod("sample-1", "nginx:1.27", "carrier2:0.1", true)];
        let problem = shape_problem(&original, &now, &pods, "app", "nginx:1.27").unwrap();
        assert!(problem.starts_with("target changed: was "), "{problem}");
        assert!(problem.contains(r#""app": "sample""#), "{problem}");
    }

    #[test]
    fn shape_problem_names_the_images_live_pods_run() {
        let shape = TargetShape::of(&deployment(json!({ "metadata": { "name": "sample" } })));
        let pods = [
            pod("sample-1", "nginx:1.27", "nginx:1.27", true),
            pod("sample-2", "nginx:1.27", "carrier2:0.1", true),
            deleting(pod("sample-3", "nginx:1.27", "other:1", true)),
        ];
        assert_eq!(
            shape_problem(&shape, &shape, &pods, "app", "nginx:1.27").as_deref(),
            Some(r#"pods of the target run ["nginx:1.27", "carrier2:0.1"], expected nginx:1.27"#)
        );
        assert_eq!(
            shape_problem(&shape, &shape, &[], "app", "nginx:1.27").as_deref(),
            Some("pods of the target run [], expected nginx:1.27"),
            "a target without live pods is not restored"
        );
    }

    #[test]
    fn restore_problem_accepts_pods_with_the_templates_containers_running_its_image() {
        let pods = [
            pod(
                "sample-1",
                "nginx:1.27",
                "docker.io/library/nginx:1.27",
                true,
            ),
            deleting(pod("sample-old", "carrier2:0.1", "carrier2:0.1", true)),
        ];
        let wanted = template("nginx:1.27");
        assert_eq!(restore_problem(&wanted, &wanted, &pods), None);
    }

    #[test]
    fn restore_problem_names_where_the_template_changed() {
        let pods = [pod("sample-1", "nginx:1.27", "nginx:1.27", true)];
        assert_eq!(
            restore_problem(&template("nginx:1.27"), &template("carrier2:0.1"), &pods).as_deref(),
            Some(
                r#"the pod template changed: /spec/containers/0/image: "nginx:1.27" -> "carrier2:0.1""#
            )
        );
    }

    #[test]
    fn restore_problem_wants_live_pods() {
        let wanted = template("nginx:1.27");
        let gone = [deleting(pod("sample-1", "nginx:1.27", "nginx:1.27", true))];
        assert_eq!(
            restore_problem(&wanted, &wanted, &gone).as_deref(),
            Some("the target has no live pods")
        );
    }

    #[test]
    fn restore_problem_names_a_pod_whose_containers_are_not_the_templates() {
        let wanted = template("nginx:1.27");
        let pods = [pod("sample-1", "carrier2:0.1", "carrier2:0.1", true)];
        assert_eq!(
            restore_problem(&wanted, &wanted, &pods).as_deref(),
            Some(
                r#"pod sample-1 has other containers than the template: /0/image: "nginx:1.27" -> "carrier2:0.1""#
            )
        );
    }

    #[test]
    fn restore_problem_names_a_container_not_yet_running_its_image() {
        let wanted = template("nginx:1.27");
        let waiting = [pod("sample-1", "nginx:1.27", "nginx:1.27", false)];
        assert_eq!(
            restore_problem(&wanted, &wanted, &waiting).as_deref(),
            Some(
                r#"pod sample-1: container app runs "nginx:1.27" (running: false), its spec asks for Some("nginx:1.27")"#
            )
        );
        let stale = [pod("sample-1", "nginx:1.27", "carrier2:0.1", true)];
        assert_eq!(
            restore_problem(&wanted, &wanted, &stale).as_deref(),
            Some(
                r#"pod sample-1: container app runs "carrier2:0.1" (running: true), its spec asks for Some("nginx:1.27")"#
            )
        );
    }
}
