//! The original of a patched container, kept in two places until it is put
//! back: the restore ConfigMap (`restore.rs`) and an annotation on the pod
//! itself, set in the same patch that swaps the image for Carrier2's and
//! removed in the same patch that swaps it back. Either copy alone is
//! enough to restore; where both exist they must agree, and a copy that is
//! malformed or names no usable image is refused, never applied.
//!
//! Why two: the ConfigMap can be deleted or edited by anyone who may write
//! ConfigMaps in the operator namespace, and a pod can be recreated without
//! its annotation; losing one must not lose the original.

use pontoon_provider_sdk::k8s_openapi::api::core::v1::Pod;
use serde::{Deserialize, Serialize};

use crate::restore::{Entry, OriginalConfig};

/// The annotation on a patched pod holding its container's original.
pub const ANNOTATION: &str = "pontoon.dev/original-container";

/// The annotation on a patched pod naming the uid of the mount that patched
/// it, set and removed with [`ANNOTATION`]: the operator refuses a second
/// mount whose target takes that pod (one mount per pod, whatever the kind
/// of target: `deploy/web`, then `pod/web-…`).
pub const MOUNT_ANNOTATION: &str = "pontoon.dev/mount-uid";

/// Whether the pod carries either annotation of a patch.
pub fn carries_patch_annotations(pod: &Pod) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(ANNOTATION) || a.contains_key(MOUNT_ANNOTATION))
}

/// The annotation's value: which container, and what it ran.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Annotated {
    container: String,
    #[serde(flatten)]
    original: OriginalConfig,
}

/// The annotation's value for `container` of a pod about to be patched.
pub fn annotation_value(container: &str, original: &OriginalConfig) -> String {
    // Plain data with string keys: serialising cannot fail.
    serde_json::to_string(&Annotated {
        container: container.to_string(),
        original: original.clone(),
    })
    .unwrap_or_default()
}

/// What one of the two places holds for a container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Copy {
    Absent,
    /// There, but not usable; the text says why.
    Malformed(String),
    Valid(OriginalConfig),
}

/// What the pod's annotation holds for `container`.
pub fn from_pod(pod: &Pod, container: &str, carrier_image: &str) -> Copy {
    let Some(text) = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION))
    else {
        return Copy::Absent;
    };
    match serde_json::from_str::<Annotated>(text) {
        Err(e) => Copy::Malformed(format!("annotation `{ANNOTATION}` cannot be read ({e})")),
        Ok(annotated) if annotated.container != container => Copy::Malformed(format!(
            "annotation `{ANNOTATION}` is for container `{}`, not `{container}`",
            annotated.container
        )),
        Ok(annotated) => checked(annotated.original, carrier_image).map_or_else(
            |why| Copy::Malformed(format!("annotation `{ANNOTATION}` {why}")),
            Copy::Valid,
        ),
    }
}

/// What the restore ConfigMap holds for this pod: an entry written for
/// another pod of the same name (a StatefulSet pod recreated, say) is not
/// this pod's original and counts as absent.
pub fn from_entry(entry: Option<Result<Entry, String>>, pod: &Pod, carrier_image: &str) -> Copy {
    match entry {
        None => Copy::Absent,
        Some(Err(why)) => Copy::Malformed(format!("its restore entry cannot be read ({why})")),
        Some(Ok(entry)) => {
            let pod_uid = pod.metadata.uid.as_deref();
            if entry.pod_uid.is_some() && entry.pod_uid.as_deref() != pod_uid {
                return Copy::Absent;
            }
            checked(entry.original_config, carrier_image).map_or_else(
                |why| Copy::Malformed(format!("its restore entry {why}")),
                Copy::Valid,
            )
        }
    }
}

/// An original that can be applied: it names an image, and not Carrier2's
/// (restoring that would leave the pod intercepted with nothing to undo it).
fn checked(original: OriginalConfig, carrier_image: &str) -> Result<OriginalConfig, String> {
    match original.image.as_deref() {
        None => Err("names no image".into()),
        Some(image) if image.trim().is_empty() || image.chars().any(char::is_whitespace) => {
            Err(format!("names `{image}`, which is not an image reference"))
        }
        Some(image) if pontoon_provider_sdk::image::same_image(image, carrier_image) => Err(
            format!("names the Carrier2 image `{image}` as the original"),
        ),
        Some(_) => Ok(original),
    }
}

/// Which original to use for a container, given both places.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Choice {
    /// Neither place has one.
    Unknown,
    /// Use this one; `missing` says which place lacks it (to be written again).
    Use {
        original: OriginalConfig,
        missing: Option<Place>,
    },
}

/// One of the two places.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    ConfigMap,
    Pod,
}

/// Chooses the original from the ConfigMap's and the pod's copy. `Err`
/// (refuse, patch nothing) when a copy is malformed or the two disagree.
pub fn choose(config_map: Copy, pod: Copy) -> Result<Choice, String> {
    match (config_map, pod) {
        (Copy::Malformed(why), _) | (_, Copy::Malformed(why)) => Err(why),
        (Copy::Absent, Copy::Absent) => Ok(Choice::Unknown),
        (Copy::Valid(original), Copy::Absent) => Ok(Choice::Use {
            original,
            missing: Some(Place::Pod),
        }),
        (Copy::Absent, Copy::Valid(original)) => Ok(Choice::Use {
            original,
            missing: Some(Place::ConfigMap),
        }),
        (Copy::Valid(stored), Copy::Valid(annotated)) if stored == annotated => Ok(Choice::Use {
            original: stored,
            missing: None,
        }),
        (Copy::Valid(stored), Copy::Valid(annotated)) => Err(format!(
            "its restore entry ({}) and its annotation `{ANNOTATION}` ({}) disagree",
            describe(&stored),
            describe(&annotated)
        )),
    }
}

/// `image nginx:1.27, command ["nginx"], args none`, for messages.
pub fn describe(original: &OriginalConfig) -> String {
    let list = |l: &Option<Vec<String>>| {
        l.as_ref()
            .map_or_else(|| "none".to_string(), |items| format!("{items:?}"))
    };
    format!(
        "image {}, command {}, args {}",
        original.image.as_deref().unwrap_or("none"),
        list(&original.command),
        list(&original.args)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use pontoon_provider_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    const CARRIER: &str = "quay.io/gefyra/carrier2:latest";

    fn nginx() -> OriginalConfig {
        OriginalConfig {
            image: Some("nginx:1.27".into()),
            command: Some(vec!["nginx".into()]),
            args: None,
        }
    }

    fn pod_with(uid: &str, annotation: Option<&str>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("web-0".into()),
                uid: Some(uid.into()),
                annotations: annotation.map(|a| [(ANNOTATION.to_string(), a.to_string())].into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn entry(uid: Option<&str>, original: OriginalConfig) -> Entry {
        Entry {
            original_config: original,
            container: Some("app".into()),
            pod: Some("web-0".into()),
            pod_uid: uid.map(str::to_string),
            target_namespace: Some("shop".into()),
            target: Some("sts/web".into()),
            mount: Some("gefyra/m".into()),
        }
    }

    #[test]
    fn the_annotation_round_trips_for_its_container_only() {
        let value = annotation_value("app", &nginx());
        assert_eq!(
            value,
            r#"{"container":"app","image":"nginx:1.27","command":["nginx"],"args":null}"#
        );
        let pod = pod_with("u1", Some(&value));
        assert_eq!(from_pod(&pod, "app", CARRIER), Copy::Valid(nginx()));
        assert!(matches!(
            from_pod(&pod, "sidecar", CARRIER),
            Copy::Malformed(why) if why.contains("is for container `app`, not `sidecar`")
        ));
        assert_eq!(
            from_pod(&pod_with("u1", None), "app", CARRIER),
            Copy::Absent
        );
        assert!(matches!(
            from_pod(&pod_with("u1", Some("{")), "app", CARRIER),
            Copy::Malformed(why) if why.starts_with("annotation `pontoon.dev/original-container` cannot be read")
        ));
    }

    #[test]
    fn an_entry_of_another_pod_of_the_same_name_is_not_this_pods() {
        let pod = pod_with("new-uid", None);
        assert_eq!(
            from_entry(Some(Ok(entry(Some("old-uid"), nginx()))), &pod, CARRIER),
            Copy::Absent
        );
        assert_eq!(
            from_entry(Some(Ok(entry(Some("new-uid"), nginx()))), &pod, CARRIER),
            Copy::Valid(nginx())
        );
        // Entries written before pod uids were recorded are taken as they are.
        assert_eq!(
            from_entry(Some(Ok(entry(None, nginx()))), &pod, CARRIER),
            Copy::Valid(nginx())
        );
        assert!(matches!(
            from_entry(Some(Err("expected value".into())), &pod, CARRIER),
            Copy::Malformed(why) if why == "its restore entry cannot be read (expected value)"
        ));
    }

    #[test]
    fn an_original_without_a_usable_image_is_malformed() {
        let pod = pod_with("u", None);
        let with_image = |image: Option<&str>| OriginalConfig {
            image: image.map(str::to_string),
            ..nginx()
        };
        for (image, why) in [
            (None, "names no image"),
            (Some(""), "names ``, which is not an image reference"),
            (
                Some("nginx 1.28"),
                "names `nginx 1.28`, which is not an image reference",
            ),
            (
                Some("quay.io/gefyra/carrier2"),
                "names the Carrier2 image `quay.io/gefyra/carrier2` as the original",
            ),
        ] {
            assert_eq!(
                from_entry(Some(Ok(entry(None, with_image(image)))), &pod, CARRIER),
                Copy::Malformed(format!("its restore entry {why}")),
                "{image:?}"
            );
        }
    }

    #[test]
    fn either_copy_restores_and_the_missing_one_is_named() {
        assert_eq!(
            choose(Copy::Valid(nginx()), Copy::Absent),
            Ok(Choice::Use {
                original: nginx(),
                missing: Some(Place::Pod)
            })
        );
        assert_eq!(
            choose(Copy::Absent, Copy::Valid(nginx())),
            Ok(Choice::Use {
                original: nginx(),
                missing: Some(Place::ConfigMap)
            })
        );
        assert_eq!(
            choose(Copy::Valid(nginx()), Copy::Valid(nginx())),
            Ok(Choice::Use {
                original: nginx(),
                missing: None
            })
        );
        assert_eq!(choose(Copy::Absent, Copy::Absent), Ok(Choice::Unknown));
    }

    #[test]
    fn copies_that_disagree_or_do_not_read_are_refused() {
        let edited = OriginalConfig {
            image: Some("evil:1".into()),
            ..nginx()
        };
        assert_eq!(
            choose(Copy::Valid(edited), Copy::Valid(nginx())),
            Err(
                "its restore entry (image evil:1, command [\"nginx\"], args none) and its \
                 annotation `pontoon.dev/original-container` (image nginx:1.27, command \
                 [\"nginx\"], args none) disagree"
                    .into()
            )
        );
        assert_eq!(
            choose(Copy::Malformed("bad".into()), Copy::Valid(nginx())),
            Err("bad".into())
        );
        assert_eq!(
            choose(Copy::Valid(nginx()), Copy::Malformed("worse".into())),
            Err("worse".into())
        );
    }
}
