//! Pure judgement of what the cluster shows: whether a restore gave the
//! target back, whether a step changed anything, and how to say what
//! differs. No I/O, so every verdict the suite prints is unit-tested here.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{Container, Pod},
};
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::plugins::CallError;

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

/// Whether two image references name the same image, as runtimes report
/// them (`nginx:1.27` is `docker.io/library/nginx:1.27`).
fn same_image(a: &str, b: &str) -> bool {
    fn normal(image: &str) -> String {
        let image = image.strip_prefix("docker.io/").unwrap_or(image);
        let image = image.strip_prefix("library/").unwrap_or(image);
        let last = image.rsplit('/').next().unwrap_or(image);
        if last.contains(':') || last.contains('@') {
            image.to_string()
        } else {
            format!("{image}:latest")
        }
    }
    normal(a) == normal(b)
}

/// JSON pointers where `a` and `b` differ (at most `limit`), for messages.
fn differences(a: &serde_json::Value, b: &serde_json::Value, limit: usize) -> Vec<String> {
    fn walk(a: &serde_json::Value, b: &serde_json::Value, path: String, out: &mut Vec<String>) {
        use serde_json::Value::{Array, Object};
        match (a, b) {
            (Object(x), Object(y)) => {
                let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
                for key in keys {
                    let null = serde_json::Value::Null;
                    let next = format!("{path}/{key}");
                    walk(
                        x.get(key).unwrap_or(&null),
                        y.get(key).unwrap_or(&null),
                        next,
                        out,
                    );
                }
            }
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
