//! The shadow of a target: a copy of the workload under `<name>-gefyra` with
//! every label value suffixed, the Service that selects its pods, and the
//! copy of an HPA that scales the original Deployment. Pure: built from the
//! objects as read, applied by the caller.

use std::collections::BTreeMap;

use pontoon_provider_sdk::{
    TargetKind,
    k8s_openapi::{
        api::core::v1::{Container, Service, ServicePort, ServiceSpec},
        apimachinery::pkg::{apis::meta::v1::ObjectMeta, util::intstr::IntOrString},
    },
};
use serde_json::{Map, Value, json};

use crate::{
    names::{self, DUPLICATION_ID_LABEL},
    restore::OriginalConfig,
    workload::{Problem, Workload},
};

/// Annotations that describe the original object's history, not what it is,
/// or that are bookkeeping of the original's mount (a bare Pod's copy of its
/// original container belongs to that pod only).
pub const DROPPED_ANNOTATIONS: [&str; 3] = [
    "kubectl.kubernetes.io/last-applied-configuration",
    "deployment.kubernetes.io/revision",
    crate::original::ANNOTATION,
];

/// The annotation on a shadow Deployment or StatefulSet naming the
/// `metadata.generation` of the target it copies: when the user changes the
/// target (image, env, replicas), the shadow is stale and is copied again.
pub const TARGET_GENERATION: &str = "pontoon.dev/target-generation";

fn generation(object: &Value) -> Option<i64> {
    object
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)
}

/// Why the shadow no longer copies the workload as it is now; `None` while
/// it does. A bare Pod's spec cannot change in ways a copy must follow, and
/// a shadow of a target without a generation cannot be judged: never stale.
pub fn stale(shadow: &Value, workload: &Workload) -> Option<String> {
    if workload.kind == TargetKind::Pod {
        return None;
    }
    let current = generation(&workload.object)?;
    let copied = shadow
        .pointer(&format!(
            "/metadata/annotations/{}",
            TARGET_GENERATION.replace('/', "~1")
        ))
        .and_then(Value::as_str);
    if copied == Some(current.to_string().as_str()) {
        return None;
    }
    Some(format!(
        "the shadow {}/{} copies {} of {}, which is at generation {current} now",
        workload.kind.short_name(),
        names::shadow_workload(&workload.name),
        copied.map_or_else(
            || "an unknown generation".to_string(),
            |g| format!("generation {g}")
        ),
        workload.describe()
    ))
}

/// Label values with the shadow suffix (keys unchanged).
pub fn shadow_labels(labels: &Map<String, Value>) -> Map<String, Value> {
    labels
        .iter()
        .map(|(key, value)| {
            let value = value.as_str().unwrap_or_default();
            (key.clone(), Value::String(names::shadow_label_value(value)))
        })
        .collect()
}

fn labels_at(object: &Value, pointer: &str) -> Map<String, Value> {
    object
        .pointer(pointer)
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

/// A fresh `metadata`: the name and namespace given, the labels given, and
/// the original's annotations less [`DROPPED_ANNOTATIONS`]. Everything the
/// server manages (uid, resourceVersion, creationTimestamp, generation,
/// managedFields, ownerReferences, finalizers) is left out.
fn fresh_metadata(
    original: &Value,
    name: &str,
    namespace: &str,
    labels: Map<String, Value>,
) -> Value {
    let mut metadata = Map::new();
    metadata.insert("name".into(), name.into());
    metadata.insert("namespace".into(), namespace.into());
    if !labels.is_empty() {
        metadata.insert("labels".into(), Value::Object(labels));
    }
    let annotations: Map<String, Value> = labels_at(original, "/metadata/annotations")
        .into_iter()
        .filter(|(key, _)| !DROPPED_ANNOTATIONS.contains(&key.as_str()))
        .collect();
    if !annotations.is_empty() {
        metadata.insert("annotations".into(), Value::Object(annotations));
    }
    Value::Object(metadata)
}

/// The shadow copy of `workload`, its pods labelled with `duplication_id`.
///
/// `container` replaces the target container's image, command and args
/// (for a bare Pod that already runs Carrier2: the copy must run the
/// original, taken from the restore entry).
pub fn workload_copy(
    workload: &Workload,
    duplication_id: &str,
    container: Option<(&str, &OriginalConfig)>,
) -> Result<Value, Problem> {
    let mut copy = workload.object.clone();
    let labels = shadow_labels(&labels_at(&workload.object, "/metadata/labels"));
    let Some(object) = copy.as_object_mut() else {
        return Err(Problem(format!("{} is not an object", workload.describe())));
    };
    object.remove("status");
    let mut metadata_labels = labels;
    match workload.kind {
        TargetKind::Pod => {
            metadata_labels.insert(DUPLICATION_ID_LABEL.into(), duplication_id.into());
            if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
                // Let the scheduler place the copy.
                spec.remove("nodeName");
            }
        }
        TargetKind::Deployment | TargetKind::StatefulSet => {
            let spec = object
                .get_mut("spec")
                .and_then(Value::as_object_mut)
                .ok_or_else(|| Problem(format!("{} has no spec", workload.describe())))?;
            rewrite_selector(spec);
            let template = spec
                .entry("template")
                .or_insert_with(|| json!({}))
                .as_object_mut()
                .ok_or_else(|| Problem(format!("{} has no pod template", workload.describe())))?;
            let template_meta = template
                .entry("metadata")
                .or_insert_with(|| json!({}))
                .as_object_mut()
                .ok_or_else(|| {
                    Problem(format!("{} has no template metadata", workload.describe()))
                })?;
            template_meta.remove("creationTimestamp");
            let mut pod_labels = template_meta
                .get("labels")
                .and_then(Value::as_object)
                .map(shadow_labels)
                .unwrap_or_default();
            pod_labels.insert(DUPLICATION_ID_LABEL.into(), duplication_id.into());
            template_meta.insert("labels".into(), Value::Object(pod_labels));
        }
    }
    let mut metadata = fresh_metadata(
        &workload.object,
        &names::shadow_workload(&workload.name),
        &workload.namespace,
        metadata_labels,
    );
    if workload.kind != TargetKind::Pod
        && let (Some(generation), Some(metadata)) =
            (generation(&workload.object), metadata.as_object_mut())
    {
        let annotations = metadata.entry("annotations").or_insert_with(|| json!({}));
        if let Some(annotations) = annotations.as_object_mut() {
            annotations.insert(TARGET_GENERATION.into(), generation.to_string().into());
        }
    }
    object.insert("metadata".into(), metadata);
    if let Some((name, original)) = container {
        set_container_config(&mut copy, workload.kind, name, original);
    }
    Ok(copy)
}

/// Suffixes the values of `matchLabels` and of `In`/`NotIn` expressions the
/// same way as the pod labels, so the copy selects exactly its own pods.
fn rewrite_selector(spec: &mut Map<String, Value>) {
    let Some(selector) = spec.get_mut("selector").and_then(Value::as_object_mut) else {
        return;
    };
    if let Some(labels) = selector.get("matchLabels").and_then(Value::as_object) {
        let rewritten = shadow_labels(labels);
        selector.insert("matchLabels".into(), Value::Object(rewritten));
    }
    for expression in selector
        .get_mut("matchExpressions")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        for value in expression
            .get_mut("values")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            if let Some(text) = value.as_str() {
                *value = Value::String(names::shadow_label_value(text));
            }
        }
    }
}

/// A shadow StatefulSet's claims, as they are named: `<template>-<shadow>-<n>`
/// for every claim template and ordinal below `replicas`.
pub fn claim_names(copy: &Value, replicas: i64) -> Vec<String> {
    let shadow = copy
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    copy.pointer("/spec/volumeClaimTemplates")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|t| t.pointer("/metadata/name").and_then(Value::as_str))
        .flat_map(|claim| (0..replicas.max(0)).map(move |n| format!("{claim}-{shadow}-{n}")))
        .collect()
}

/// The claims of a shadow StatefulSet carry the mount's mark, and the
/// StatefulSet controller keeps them whatever happens (Retain): with
/// Delete it would take a claim of one of their names that a user made
/// into the shadow and delete it with the shadow. Uninstall deletes the
/// claims that carry the mark, and no other; `prepare` refuses a claim of
/// one of their names that lacks it before the shadow can use it.
pub fn mark_volume_claims(copy: &mut Value, uid: &str) {
    let Some(spec) = copy.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    let Some(templates) = spec
        .get_mut("volumeClaimTemplates")
        .and_then(Value::as_array_mut)
        .filter(|t| !t.is_empty())
    else {
        return;
    };
    for template in templates.iter_mut() {
        crate::mark::stamp(template, uid);
    }
    spec.insert(
        "persistentVolumeClaimRetentionPolicy".into(),
        json!({ "whenDeleted": "Retain", "whenScaled": "Retain" }),
    );
}

fn set_container_config(copy: &mut Value, kind: TargetKind, name: &str, original: &OriginalConfig) {
    let pointer = format!("{}/containers", Workload::pod_spec_pointer(kind));
    let Some(containers) = copy.pointer_mut(&pointer).and_then(Value::as_array_mut) else {
        return;
    };
    for container in containers.iter_mut().filter_map(Value::as_object_mut) {
        if container.get("name").and_then(Value::as_str) != Some(name) {
            continue;
        }
        let fields = [
            ("image", original.image.as_ref().map(|i| json!(i))),
            ("command", original.command.as_ref().map(|c| json!(c))),
            ("args", original.args.as_ref().map(|a| json!(a))),
        ];
        for (field, value) in fields {
            match value {
                Some(value) => container.insert(field.into(), value),
                None => container.remove(field),
            };
        }
    }
}

/// The duplication id a shadow's pods carry (its template's label, or for a
/// Pod its own), to keep it when the shadow is applied again.
pub fn duplication_id_of(shadow: &Value, kind: TargetKind) -> Option<String> {
    let pointer = format!(
        "{}/{}",
        Workload::pod_labels_pointer(kind),
        DUPLICATION_ID_LABEL.replace('~', "~0").replace('/', "~1")
    );
    shadow
        .pointer(&pointer)
        .and_then(Value::as_str)
        .filter(|id| !id.is_empty())
        .map(str::to_string)
}

/// The Service in front of the shadow pods: one port per port of the target
/// container, named `<port>-<index>` as Gefyra names them.
pub fn service(
    workload: &Workload,
    shadow: &Value,
    container: &Container,
    duplication_id: &str,
) -> Service {
    let labels: BTreeMap<String, String> = labels_at(shadow, "/metadata/labels")
        .into_iter()
        .filter_map(|(k, v)| v.as_str().map(|v| (k, v.to_string())))
        .collect();
    let ports = container
        .ports
        .iter()
        .flatten()
        .enumerate()
        .map(|(index, port)| ServicePort {
            name: Some(format!("{}-{index}", port.container_port)),
            port: port.container_port,
            target_port: Some(IntOrString::Int(port.container_port)),
            protocol: port.protocol.clone(),
            ..Default::default()
        })
        .collect();
    Service {
        metadata: ObjectMeta {
            name: Some(names::shadow_service(&workload.name, &container.name)),
            namespace: Some(workload.namespace.clone()),
            labels: (!labels.is_empty()).then_some(labels),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            selector: Some([(DUPLICATION_ID_LABEL.to_string(), duplication_id.to_string())].into()),
            ports: Some(ports),
            ..Default::default()
        }),
        status: None,
    }
}

/// Whether an HPA (autoscaling/v2, as JSON) scales the Deployment `name`.
pub fn hpa_scales(hpa: &Value, deployment: &str) -> bool {
    let target = hpa.pointer("/spec/scaleTargetRef");
    let field = |f: &str| target.and_then(|t| t.get(f)).and_then(Value::as_str);
    field("kind") == Some("Deployment") && field("name") == Some(deployment)
}

/// Whether an HPA of the shadow HPA's name is this mount's: it carries the
/// mount's mark, or (made before the mark) no mark and scales the shadow.
pub fn hpa_is_ours(hpa: &Value, deployment: &str, uid: &str) -> bool {
    let marked = hpa
        .pointer(&format!(
            "/metadata/labels/{}",
            crate::mark::MOUNT_LABEL.replace('/', "~1")
        ))
        .is_some();
    if marked {
        crate::mark::is_ours(hpa, uid)
    } else {
        hpa_scales(hpa, &names::shadow_workload(deployment))
    }
}

/// The copy of `hpa` that scales the shadow Deployment instead.
pub fn hpa_copy(hpa: &Value, workload: &Workload) -> Value {
    let mut spec = hpa.get("spec").cloned().unwrap_or_else(|| json!({}));
    if let Some(target) = spec
        .get_mut("scaleTargetRef")
        .and_then(Value::as_object_mut)
    {
        target.insert("name".into(), names::shadow_workload(&workload.name).into());
    }
    json!({
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": fresh_metadata(
            hpa,
            &names::shadow_hpa(&workload.name),
            &workload.namespace,
            labels_at(hpa, "/metadata/labels"),
        ),
        "spec": spec,
    })
}

#[cfg(test)]
mod tests {
    use pontoon_provider_sdk::Target;

    use super::*;
    use crate::workload::tests::{deployment, web};

    #[test]
    fn the_copy_is_renamed_relabelled_and_stripped_of_server_fields() {
        let copy = workload_copy(&web(), "dup-1", None).unwrap();
        assert_eq!(
            copy["metadata"],
            json!({
                "name": "web-gefyra",
                "namespace": "shop",
                "labels": {"app": "web-gefyra", "tier": "front-gefyra"},
                "annotations": {"team": "shop", "pontoon.dev/target-generation": "3"}
            })
        );
        assert!(copy.get("status").is_none());
        assert_eq!(copy["apiVersion"], "apps/v1");
        assert_eq!(copy["kind"], "Deployment");
        assert_eq!(
            copy["spec"]["selector"],
            json!({"matchLabels": {"app": "web-gefyra"}})
        );
        assert_eq!(
            copy["spec"]["template"]["metadata"],
            json!({"labels": {
                "app": "web-gefyra",
                "tier": "front-gefyra",
                "bridge.gefyra.dev/duplication-id": "dup-1"
            }})
        );
        // The pod spec is copied as it is.
        assert_eq!(
            copy["spec"]["template"]["spec"],
            deployment()["spec"]["template"]["spec"]
        );
        assert_eq!(copy["spec"]["replicas"], 2);
        assert_eq!(
            duplication_id_of(&copy, TargetKind::Deployment).as_deref(),
            Some("dup-1")
        );
    }

    #[test]
    fn a_shadow_is_stale_once_the_target_changed() {
        let w = web();
        let copy = workload_copy(&w, "dup-1", None).unwrap();
        assert_eq!(stale(&copy, &w), None);
        let mut changed = deployment();
        changed["metadata"]["generation"] = json!(4);
        let changed = Workload::new(&Target::parse("deploy/web").unwrap(), "shop", changed);
        assert_eq!(
            stale(&copy, &changed).as_deref(),
            Some(
                "the shadow deploy/web-gefyra copies generation 3 of deploy/web in namespace \
                 `shop`, which is at generation 4 now"
            )
        );
        // A shadow made before the annotation existed is copied again once.
        let mut unannotated = copy.clone();
        unannotated["metadata"]["annotations"]
            .as_object_mut()
            .unwrap()
            .remove(TARGET_GENERATION);
        assert!(
            stale(&unannotated, &w)
                .unwrap()
                .contains("copies an unknown generation")
        );
    }

    #[test]
    fn a_bare_pods_copy_is_never_stale_and_drops_the_pods_original() {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "solo", "namespace": "ns", "generation": 2, "annotations": {
                crate::original::ANNOTATION: "{}", "team": "a"
            }},
            "spec": {"containers": [{"name": "app", "image": "busybox:1"}]}
        });
        let w = Workload::new(&Target::parse("pod/solo").unwrap(), "ns", pod);
        let copy = workload_copy(&w, "id", None).unwrap();
        assert_eq!(copy["metadata"]["annotations"], json!({"team": "a"}));
        let mut later = w.clone();
        later.object["metadata"]["generation"] = json!(5);
        assert_eq!(stale(&copy, &later), None);
    }

    #[test]
    fn an_hpa_copy_is_ours_by_its_mark_or_by_what_it_scales() {
        let copy = hpa_copy(
            &json!({"spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}}}),
            &web(),
        );
        assert!(hpa_is_ours(&copy, "web", "uid-1"));
        let mut marked = copy.clone();
        crate::mark::stamp(&mut marked, "uid-1");
        assert!(hpa_is_ours(&marked, "web", "uid-1"));
        assert!(!hpa_is_ours(&marked, "web", "uid-2"));
        let users = json!({"metadata": {"name": "web-gefyra"},
            "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "something-else"}}});
        assert!(!hpa_is_ours(&users, "web", "uid-1"));
    }

    #[test]
    fn selector_expressions_follow_the_labels() {
        let mut object = deployment();
        object["spec"]["selector"]["matchExpressions"] = json!([
            {"key": "tier", "operator": "In", "values": ["front", "edge"]},
            {"key": "canary", "operator": "DoesNotExist"}
        ]);
        let w = Workload::new(&Target::parse("deploy/web").unwrap(), "shop", object);
        let copy = workload_copy(&w, "d", None).unwrap();
        assert_eq!(
            copy["spec"]["selector"]["matchExpressions"],
            json!([
                {"key": "tier", "operator": "In", "values": ["front-gefyra", "edge-gefyra"]},
                {"key": "canary", "operator": "DoesNotExist"}
            ])
        );
    }

    #[test]
    fn a_pod_copy_carries_the_id_itself_and_loses_its_node() {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "solo", "namespace": "ns", "uid": "u", "labels": {"app": "solo"},
                          "ownerReferences": [{"name": "x"}]},
            "spec": {"nodeName": "kwok-node-0", "containers": [
                {"name": "app", "image": "quay.io/gefyra/carrier2:latest", "command": ["x"]}
            ]},
            "status": {"phase": "Running"}
        });
        let w = Workload::new(&Target::parse("pod/solo").unwrap(), "ns", pod);
        let original = OriginalConfig {
            image: Some("busybox:1".into()),
            command: None,
            args: Some(vec!["sleep".into(), "1d".into()]),
        };
        let copy = workload_copy(&w, "id-9", Some(("app", &original))).unwrap();
        assert_eq!(
            copy["metadata"],
            json!({"name": "solo-gefyra", "namespace": "ns", "labels": {
                "app": "solo-gefyra", "bridge.gefyra.dev/duplication-id": "id-9"
            }})
        );
        assert!(copy.get("status").is_none());
        assert!(copy["spec"].get("nodeName").is_none());
        assert_eq!(
            copy["spec"]["containers"][0],
            json!({"name": "app", "image": "busybox:1", "args": ["sleep", "1d"]})
        );
        assert_eq!(
            duplication_id_of(&copy, TargetKind::Pod).as_deref(),
            Some("id-9")
        );
    }

    #[test]
    fn a_statefulset_copys_claims_are_marked_and_kept_by_its_controller() {
        let mut object = deployment();
        object["kind"] = json!("StatefulSet");
        object["spec"]["volumeClaimTemplates"] =
            json!([{"metadata": {"name": "data"}}, {"metadata": {"name": "logs"}}]);
        let w = Workload::new(&Target::parse("sts/web").unwrap(), "shop", object);
        let mut copy = workload_copy(&w, "d", None).unwrap();
        mark_volume_claims(&mut copy, "uid-1");
        assert_eq!(
            copy["spec"]["persistentVolumeClaimRetentionPolicy"],
            json!({"whenDeleted": "Retain", "whenScaled": "Retain"}),
            "the StatefulSet controller never adopts a claim into deletion"
        );
        for template in copy["spec"]["volumeClaimTemplates"].as_array().unwrap() {
            assert!(crate::mark::is_ours(template, "uid-1"), "{template}");
        }
        assert_eq!(
            claim_names(&copy, 2),
            [
                "data-web-gefyra-0",
                "data-web-gefyra-1",
                "logs-web-gefyra-0",
                "logs-web-gefyra-1"
            ]
        );
        let mut plain = workload_copy(&web(), "d", None).unwrap();
        mark_volume_claims(&mut plain, "uid-1");
        assert!(
            plain["spec"]
                .get("persistentVolumeClaimRetentionPolicy")
                .is_none()
        );
        assert!(claim_names(&plain, 3).is_empty());
    }

    #[test]
    fn the_service_selects_the_id_and_serves_every_container_port() {
        let w = web();
        let copy = workload_copy(&w, "dup-1", None).unwrap();
        let container = w.container("app").unwrap();
        let svc = service(&w, &copy, &container, "dup-1");
        let value = serde_json::to_value(&svc).unwrap();
        assert_eq!(
            value,
            json!({
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {
                    "name": "web-app-gefyra-svc",
                    "namespace": "shop",
                    "labels": {"app": "web-gefyra", "tier": "front-gefyra"}
                },
                "spec": {
                    "selector": {"bridge.gefyra.dev/duplication-id": "dup-1"},
                    "ports": [
                        {"name": "80-0", "port": 80, "targetPort": 80, "protocol": "TCP"},
                        {"name": "8443-1", "port": 8443, "targetPort": 8443}
                    ]
                }
            })
        );
    }

    #[test]
    fn the_hpa_copy_scales_the_shadow() {
        let hpa = json!({
            "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "web-hpa", "namespace": "shop", "uid": "h", "resourceVersion": "5",
                          "labels": {"app": "web"}},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                      "minReplicas": 1, "maxReplicas": 4},
            "status": {"currentReplicas": 2}
        });
        assert!(hpa_scales(&hpa, "web"));
        assert!(!hpa_scales(&hpa, "web-gefyra"));
        let copy = hpa_copy(&hpa, &web());
        assert_eq!(
            copy,
            json!({
                "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                "metadata": {"name": "web-gefyra", "namespace": "shop", "labels": {"app": "web"}},
                "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web-gefyra"},
                          "minReplicas": 1, "maxReplicas": 4}
            })
        );
        assert!(hpa_scales(&copy, "web-gefyra"));
    }
}
