//! What the checks run against: the scratch namespaces, the sample mount and
//! the sample targets (a Deployment, a StatefulSet and a bare Pod of the
//! same container), created, read and deleted on the cluster.

use anyhow::Context;
use k8s_openapi::api::{
    apps::v1::{Deployment, StatefulSet},
    core::v1::{Namespace, ObjectReference, Pod},
};
use kube::{
    Api, Client,
    api::{DeleteParams, ListParams, ObjectMeta, PostParams},
};
use serde_json::json;

use super::compare::{container_json, template_of, without_restart_annotation};
use crate::plugins::bindings::{Mount, Settings};

/// Image of the sample target's container.
pub(super) const SAMPLE_IMAGE: &str = "nginx:1.27";
/// Replicas of the sample target: more than one, so providers that patch
/// pods one by one show it.
const SAMPLE_REPLICAS: i32 = 2;

/// Makes the scratch namespaces' names unique, so that runs against the same
/// cluster (CI jobs in parallel, a run whose namespaces were kept) never meet.
pub(super) fn random_suffix() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos() ^ (d.as_secs() as u32))
        .unwrap_or_default();
    format!("{:08x}", nanos ^ std::process::id().rotate_left(16))
}

pub(super) async fn create_namespace(client: &Client, name: &str) -> anyhow::Result<()> {
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some([("pontoon.dev/conformance".to_string(), "true".to_string())].into()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .with_context(|| format!("creating scratch namespace {name}"))?;
    Ok(())
}

/// Deletes a scratch namespace and, with it, whatever the checks left there.
pub(super) async fn delete_namespace(client: &Client, name: &str) -> kube::Result<()> {
    Api::<Namespace>::all(client.clone())
        .delete(name, &DeleteParams::background())
        .await?;
    Ok(())
}

/// The mount of the first round: the sample Deployment's container `app`,
/// restored through the operator namespace's restore ConfigMap.
pub(super) fn sample_mount(
    suffix: &str,
    target_ns: &str,
    operator_ns: &str,
    carrier_image: &str,
) -> Mount {
    Mount {
        name: "conformance".into(),
        namespace: target_ns.into(),
        uid: format!("conformance-{suffix}"),
        target: "deploy/sample".into(),
        target_namespace: target_ns.into(),
        target_container: "app".into(),
        parameters: None,
        settings: Settings {
            operator_namespace: operator_ns.into(),
            carrier_image: carrier_image.into(),
            restore_config_map: crate::bridge_mount::settings::restore_config_map(&format!(
                "conformance-{suffix}"
            )),
        },
    }
}

/// The container of every sample target.
fn sample_container() -> serde_json::Value {
    json!({
        "name": "app",
        "image": SAMPLE_IMAGE,
        "command": ["nginx"],
        "args": ["-g", "daemon off;"],
        "env": [{ "name": "MODE", "value": "conformance" }],
        "ports": [{ "containerPort": 80, "name": "http" }],
        // Served on a real cluster too (nginx answers `/`), and by the
        // port's name, which a provider must resolve.
        "readinessProbe": {
            "httpGet": { "path": "/", "port": "http" },
            "periodSeconds": 5
        }
    })
}

fn sample_deployment() -> anyhow::Result<Deployment> {
    Ok(serde_json::from_value(json!({
        "metadata": { "name": "sample", "labels": { "app": "sample", "tier": "web" } },
        "spec": {
            "replicas": SAMPLE_REPLICAS,
            "selector": { "matchLabels": { "app": "sample" } },
            "template": {
                "metadata": { "labels": { "app": "sample", "tier": "web" } },
                "spec": { "containers": [sample_container()] }
            }
        }
    }))?)
}

/// The kinds of target a round runs against: the first round (every check)
/// a Deployment, then a StatefulSet and a bare Pod (the steps, the cleanup
/// and the exact restore).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TargetKind {
    Deployment,
    StatefulSet,
    Pod,
}

impl std::str::FromStr for TargetKind {
    type Err = String;

    /// As `--kinds` takes them: `deployment`, `statefulset`, `pod` (any case).
    fn from_str(text: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|kind| kind.kind().eq_ignore_ascii_case(text))
            .ok_or_else(|| {
                format!("`{text}` is not a kind of target: deployment, statefulset or pod")
            })
    }
}

impl TargetKind {
    /// Every kind, in the order the rounds run.
    pub const ALL: [Self; 3] = [Self::Deployment, Self::StatefulSet, Self::Pod];

    /// The Kubernetes kind.
    pub fn kind(self) -> &'static str {
        match self {
            Self::Deployment => "Deployment",
            Self::StatefulSet => "StatefulSet",
            Self::Pod => "Pod",
        }
    }

    /// Whether `message` (a provider's refusal) names this kind.
    pub(super) fn named_in(self, message: &str) -> bool {
        let message = message.to_ascii_lowercase();
        let words: &[&str] = match self {
            Self::Deployment => &["deployment"],
            Self::StatefulSet => &["statefulset", "stateful set"],
            Self::Pod => &["pod"],
        };
        words.iter().any(|w| message.contains(w))
    }

    /// The object's name, and its pods' `app` label.
    pub(super) fn name(self) -> &'static str {
        match self {
            Self::Deployment => "sample",
            Self::StatefulSet => "sample-sts",
            Self::Pod => "sample-pod",
        }
    }

    /// The mount's `target`.
    pub(super) fn target(self) -> String {
        match self {
            Self::Deployment => format!("deploy/{}", self.name()),
            Self::StatefulSet => format!("sts/{}", self.name()),
            Self::Pod => format!("pod/{}", self.name()),
        }
    }

    /// The target as the subject of the Events the provider posts.
    pub(super) fn reference(self, ns: &str) -> ObjectReference {
        let api_version = match self {
            Self::Pod => "v1",
            Self::Deployment | Self::StatefulSet => "apps/v1",
        };
        ObjectReference {
            api_version: Some(api_version.into()),
            kind: Some(self.kind().into()),
            name: Some(self.name().into()),
            namespace: Some(ns.into()),
            ..Default::default()
        }
    }

    /// The prefix of this round's check names.
    pub(super) fn label(self) -> &'static str {
        match self {
            Self::Deployment => "",
            Self::StatefulSet => "StatefulSet target: ",
            Self::Pod => "Pod target: ",
        }
    }

    pub(super) async fn create(self, client: &Client, ns: &str) -> anyhow::Result<()> {
        let name = self.name();
        let labels = json!({ "app": name });
        match self {
            Self::Deployment => {
                Api::<Deployment>::namespaced(client.clone(), ns)
                    .create(&PostParams::default(), &sample_deployment()?)
                    .await?;
            }
            Self::StatefulSet => {
                let set: StatefulSet = serde_json::from_value(json!({
                    "metadata": { "name": name, "labels": labels },
                    "spec": {
                        "replicas": 1,
                        "serviceName": name,
                        "selector": { "matchLabels": labels },
                        "template": {
                            "metadata": { "labels": labels },
                            "spec": { "containers": [sample_container()] }
                        }
                    }
                }))?;
                Api::<StatefulSet>::namespaced(client.clone(), ns)
                    .create(&PostParams::default(), &set)
                    .await?;
            }
            Self::Pod => {
                let pod: Pod = serde_json::from_value(json!({
                    "metadata": { "name": name, "labels": labels },
                    "spec": { "containers": [sample_container()] }
                }))?;
                Api::<Pod>::namespaced(client.clone(), ns)
                    .create(&PostParams::default(), &pod)
                    .await?;
            }
        }
        Ok(())
    }

    pub(super) async fn delete(self, client: &Client, ns: &str) -> anyhow::Result<()> {
        let params = DeleteParams::foreground();
        match self {
            Self::Deployment => {
                Api::<Deployment>::namespaced(client.clone(), ns)
                    .delete(self.name(), &params)
                    .await?;
            }
            Self::StatefulSet => {
                Api::<StatefulSet>::namespaced(client.clone(), ns)
                    .delete(self.name(), &params)
                    .await?;
            }
            Self::Pod => {
                Api::<Pod>::namespaced(client.clone(), ns)
                    .delete(self.name(), &params)
                    .await?;
            }
        }
        Ok(())
    }

    /// What a restore must give back: the pod template (a Pod's own spec
    /// containers for a bare Pod, as `{"spec": {"containers": ...}}`).
    pub(super) async fn template(
        self,
        client: &Client,
        ns: &str,
    ) -> Result<serde_json::Value, String> {
        let err = |e: kube::Error| e.to_string();
        Ok(match self {
            Self::Deployment => template_of(
                &Api::<Deployment>::namespaced(client.clone(), ns)
                    .get(self.name())
                    .await
                    .map_err(err)?,
            ),
            Self::StatefulSet => {
                let set = Api::<StatefulSet>::namespaced(client.clone(), ns)
                    .get(self.name())
                    .await
                    .map_err(err)?;
                without_restart_annotation(json!(set.spec.as_ref().map(|s| &s.template)))
            }
            Self::Pod => {
                let pod = Api::<Pod>::namespaced(client.clone(), ns)
                    .get(self.name())
                    .await
                    .map_err(err)?;
                let containers: Vec<serde_json::Value> = pod
                    .spec
                    .iter()
                    .flat_map(|s| s.containers.iter())
                    .map(container_json)
                    .collect();
                json!({ "spec": { "containers": containers } })
            }
        })
    }

    /// The target's live pods.
    pub(super) async fn pods(self, client: &Client, ns: &str) -> Result<Vec<Pod>, String> {
        Api::<Pod>::namespaced(client.clone(), ns)
            .list(&ListParams::default().labels(&format!("app={}", self.name())))
            .await
            .map(|l| l.items)
            .map_err(|e| e.to_string())
    }

    /// Whether the target is up: its pods ready.
    pub(super) async fn ready(self, client: &Client, ns: &str) -> anyhow::Result<bool> {
        Ok(match self {
            Self::Deployment => {
                Api::<Deployment>::namespaced(client.clone(), ns)
                    .get(self.name())
                    .await?
                    .status
                    .and_then(|s| s.ready_replicas)
                    == Some(SAMPLE_REPLICAS)
            }
            Self::StatefulSet => {
                Api::<StatefulSet>::namespaced(client.clone(), ns)
                    .get(self.name())
                    .await?
                    .status
                    .and_then(|s| s.ready_replicas)
                    == Some(1)
            }
            Self::Pod => Api::<Pod>::namespaced(client.clone(), ns)
                .get(self.name())
                .await?
                .status
                .and_then(|s| s.conditions)
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True")),
        })
    }
}
