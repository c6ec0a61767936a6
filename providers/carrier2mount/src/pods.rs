//! What pods say about themselves: which image a container runs, whether it
//! is up, who owns the pod. Pure; the steps list the pods.

use std::collections::BTreeSet;

use pontoon_provider_sdk::k8s_openapi::api::core::v1::{Container, ContainerStatus, Pod};

pub fn name(pod: &Pod) -> &str {
    pod.metadata.name.as_deref().unwrap_or_default()
}

pub fn is_terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

pub fn container<'a>(pod: &'a Pod, name: &str) -> Option<&'a Container> {
    pod.spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == name)
}

pub fn container_status<'a>(pod: &'a Pod, name: &str) -> Option<&'a ContainerStatus> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|s| s.name == name)
}

use pontoon_provider_sdk::image::same_image;

/// The image a container's spec asks for.
pub fn spec_image<'a>(pod: &'a Pod, container: &str) -> Option<&'a str> {
    self::container(pod, container)?.image.as_deref()
}

/// Whether the container's spec asks for `image`.
pub fn asks_for(pod: &Pod, container: &str, image: &str) -> bool {
    spec_image(pod, container).is_some_and(|spec| same_image(spec, image))
}

/// The image the container runs now, if it has started at all.
pub fn running_image<'a>(pod: &'a Pod, container: &str) -> Option<&'a str> {
    let status = container_status(pod, container)?;
    status.state.as_ref()?.running.as_ref()?;
    Some(status.image.as_str())
}

/// The pod runs and the container is running and ready.
pub fn running_and_ready(pod: &Pod, container: &str) -> bool {
    let phase_running = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|p| p == "Running");
    let Some(status) = container_status(pod, container) else {
        return false;
    };
    phase_running
        && status.ready
        && status.started != Some(false)
        && status
            .state
            .as_ref()
            .and_then(|s| s.running.as_ref())
            .is_some()
}

/// Why a pod is not running and ready, for humans.
pub fn not_ready_reason(pod: &Pod, container: &str) -> String {
    let phase = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_else(|| "Pending".into());
    let Some(status) = container_status(pod, container) else {
        return format!(
            "{} is {phase}, container `{container}` has no status yet",
            name(pod)
        );
    };
    let state = status.state.as_ref();
    if let Some(waiting) = state.and_then(|s| s.waiting.as_ref()) {
        let why = waiting.reason.clone().unwrap_or_else(|| "waiting".into());
        return format!("{}: container `{container}` is waiting ({why})", name(pod));
    }
    if let Some(terminated) = state.and_then(|s| s.terminated.as_ref()) {
        return format!(
            "{}: container `{container}` terminated (exit code {})",
            name(pod),
            terminated.exit_code
        );
    }
    if phase != "Running" {
        return format!("{} is {phase}", name(pod));
    }
    format!("{}: container `{container}` is not ready", name(pod))
}

/// The controllers owning the pods (`ReplicaSet/web-7d9c`); more than one
/// means a rollout is under way.
pub fn owners<'a>(pods: impl IntoIterator<Item = &'a Pod>) -> BTreeSet<String> {
    pods.into_iter()
        .filter_map(|pod| {
            let refs = pod.metadata.owner_references.as_ref()?;
            let owner = refs
                .iter()
                .find(|r| r.controller == Some(true))
                .or(refs.first())?;
            Some(format!("{}/{}", owner.kind, owner.name))
        })
        .collect()
}

/// Which of `pods` run `image` in `container`, as the reason of the
/// `CarrierInstalled` condition: e.g. "2 of 3 original pods run X; web-1 runs Y".
pub fn image_report(pods: &[Pod], container: &str, image: &str) -> (bool, String) {
    if pods.is_empty() {
        return (false, "no original pods found".into());
    }
    let mut others = Vec::new();
    for pod in pods {
        match running_image(pod, container) {
            Some(running) if same_image(running, image) => {}
            Some(running) => others.push(format!("{} runs {running}", name(pod))),
            None => others.push(format!("{} has not started `{container}` yet", name(pod))),
        }
    }
    let total = pods.len();
    let good = total - others.len();
    if others.is_empty() {
        (true, format!("all {total} original pods run {image}"))
    } else {
        (
            false,
            format!(
                "{good} of {total} original pods run {image}; {}",
                others.join(", ")
            ),
        )
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use pontoon_provider_sdk::k8s_openapi::{
        api::core::v1::{
            ContainerState, ContainerStateRunning, ContainerStateWaiting, PodSpec, PodStatus,
        },
        apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference},
    };

    use super::*;

    pub fn pod(name: &str, spec_image: &str, running: Option<&str>, ready: bool) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "app".into(),
                    image: Some(spec_image.into()),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some("Running".into()),
                container_statuses: Some(vec![ContainerStatus {
                    name: "app".into(),
                    image: running.unwrap_or(spec_image).into(),
                    ready,
                    started: Some(running.is_some()),
                    state: Some(match running {
                        Some(_) => ContainerState {
                            running: Some(ContainerStateRunning::default()),
                            ..Default::default()
                        },
                        None => ContainerState {
                            waiting: Some(ContainerStateWaiting {
                                reason: Some("ContainerCreating".into()),
                                message: None,
                            }),
                            ..Default::default()
                        },
                    }),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn readiness_needs_a_running_ready_container() {
        assert!(running_and_ready(
            &pod("a", "nginx", Some("nginx"), true),
            "app"
        ));
        assert!(!running_and_ready(
            &pod("a", "nginx", Some("nginx"), false),
            "app"
        ));
        let waiting = pod("b", "nginx", None, false);
        assert!(!running_and_ready(&waiting, "app"));
        assert_eq!(
            not_ready_reason(&waiting, "app"),
            "b: container `app` is waiting (ContainerCreating)"
        );
        assert_eq!(running_image(&waiting, "app"), None);
        assert!(!running_and_ready(
            &pod("a", "nginx", Some("nginx"), true),
            "other"
        ));
    }

    #[test]
    fn the_image_report_names_the_pods_that_lag() {
        let carrier = "quay.io/gefyra/carrier2:latest";
        let pods = [
            pod("web-1", carrier, Some(carrier), true),
            pod("web-2", "nginx:1.27", Some("nginx:1.27"), true),
            pod("web-3", carrier, None, false),
        ];
        assert_eq!(
            image_report(&pods, "app", carrier),
            (
                false,
                "1 of 3 original pods run quay.io/gefyra/carrier2:latest; web-2 runs nginx:1.27, \
                 web-3 has not started `app` yet"
                    .into()
            )
        );
        assert_eq!(
            image_report(&pods[..1], "app", carrier),
            (
                true,
                "all 1 original pods run quay.io/gefyra/carrier2:latest".into()
            )
        );
        assert!(!image_report(&[], "app", carrier).0);
    }

    #[test]
    fn owners_are_the_controllers() {
        let mut a = pod("a", "x", None, false);
        let mut b = pod("b", "x", None, false);
        let owner = |name: &str| OwnerReference {
            api_version: "apps/v1".into(),
            kind: "ReplicaSet".into(),
            name: name.into(),
            uid: name.into(),
            controller: Some(true),
            block_owner_deletion: None,
        };
        a.metadata.owner_references = Some(vec![owner("web-1")]);
        b.metadata.owner_references = Some(vec![owner("web-1")]);
        assert_eq!(owners([&a, &b]).len(), 1);
        b.metadata.owner_references = Some(vec![owner("web-2")]);
        assert_eq!(
            owners([&a, &b]).into_iter().collect::<Vec<_>>(),
            ["ReplicaSet/web-1", "ReplicaSet/web-2"]
        );
    }
}
