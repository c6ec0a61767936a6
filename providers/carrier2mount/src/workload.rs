//! The target workload (Deployment, StatefulSet or bare Pod) as the JSON the
//! API server returned, so a copy keeps every field; typed views of its parts.

use pontoon_provider_sdk::{
    Target, TargetKind,
    k8s_openapi::{
        api::core::v1::{Container, PodSpec},
        apimachinery::pkg::apis::meta::v1::LabelSelector,
    },
};
use serde_json::Value;

/// One workload object of a known kind.
#[derive(Clone, Debug)]
pub struct Workload {
    pub kind: TargetKind,
    pub name: String,
    pub namespace: String,
    pub object: Value,
}

/// What is wrong with a workload for carrier2mount; the message is for the
/// user who wrote the mount.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem(pub String);

impl Workload {
    pub fn new(target: &Target, namespace: &str, object: Value) -> Self {
        Self {
            kind: target.kind,
            name: target.name.clone(),
            namespace: namespace.to_string(),
            object,
        }
    }

    /// `deploy/web` in namespace `shop`, for messages.
    pub fn describe(&self) -> String {
        format!(
            "{}/{} in namespace `{}`",
            self.kind.short_name(),
            self.name,
            self.namespace
        )
    }

    /// Where the pod spec is: the template's for Deployments and
    /// StatefulSets, the object's own for a Pod.
    pub fn pod_spec_pointer(kind: TargetKind) -> &'static str {
        match kind {
            TargetKind::Pod => "/spec",
            TargetKind::Deployment | TargetKind::StatefulSet => "/spec/template/spec",
        }
    }

    /// Where the labels of the pods are.
    pub fn pod_labels_pointer(kind: TargetKind) -> &'static str {
        match kind {
            TargetKind::Pod => "/metadata/labels",
            TargetKind::Deployment | TargetKind::StatefulSet => "/spec/template/metadata/labels",
        }
    }

    pub fn pod_spec(&self) -> Result<PodSpec, Problem> {
        let spec = self
            .object
            .pointer(Self::pod_spec_pointer(self.kind))
            .cloned()
            .ok_or_else(|| Problem(format!("{} has no pod spec", self.describe())))?;
        serde_json::from_value(spec)
            .map_err(|e| Problem(format!("{}: unreadable pod spec: {e}", self.describe())))
    }

    /// The target container as the workload declares it.
    pub fn container(&self, name: &str) -> Result<Container, Problem> {
        let spec = self.pod_spec()?;
        let names: Vec<String> = spec.containers.iter().map(|c| c.name.clone()).collect();
        spec.containers
            .into_iter()
            .find(|c| c.name == name)
            .ok_or_else(|| {
                Problem(format!(
                    "container `{name}` not found in {}; it has {}",
                    self.describe(),
                    if names.is_empty() {
                        "no containers".to_string()
                    } else {
                        names
                            .iter()
                            .map(|n| format!("`{n}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    }
                ))
            })
    }

    /// The selector of a Deployment's or StatefulSet's pods; `None` for a Pod.
    pub fn selector(&self) -> Result<Option<LabelSelector>, Problem> {
        if self.kind == TargetKind::Pod {
            return Ok(None);
        }
        let selector = self
            .object
            .pointer("/spec/selector")
            .cloned()
            .ok_or_else(|| Problem(format!("{} has no selector", self.describe())))?;
        serde_json::from_value(selector)
            .map(Some)
            .map_err(|e| Problem(format!("{}: unreadable selector: {e}", self.describe())))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use serde_json::json;

    use super::*;

    pub fn deployment() -> Value {
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": "web",
                "namespace": "shop",
                "uid": "1234",
                "resourceVersion": "77",
                "generation": 3,
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "managedFields": [{"manager": "kubectl"}],
                "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "o", "uid": "9"}],
                "labels": {"app": "web", "tier": "front"},
                "annotations": {
                    "deployment.kubernetes.io/revision": "4",
                    "kubectl.kubernetes.io/last-applied-configuration": "{}",
                    "team": "shop"
                }
            },
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"creationTimestamp": null, "labels": {"app": "web", "tier": "front"}},
                    "spec": {"containers": [
                        {"name": "sidecar", "image": "envoy:1"},
                        {
                            "name": "app",
                            "image": "nginx:1.27",
                            "command": ["nginx"],
                            "args": ["-g", "daemon off;"],
                            "ports": [{"containerPort": 80, "protocol": "TCP"}, {"containerPort": 8443}],
                            "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}},
                            "livenessProbe": {"httpGet": {"path": "/live", "port": 9443, "scheme": "HTTPS"}}
                        }
                    ]}
                }
            },
            "status": {"replicas": 2, "readyReplicas": 2}
        })
    }

    pub fn web() -> Workload {
        Workload::new(&Target::parse("deploy/web").unwrap(), "shop", deployment())
    }

    #[test]
    fn finds_the_container_in_the_template() {
        let c = web().container("app").unwrap();
        assert_eq!(c.image.as_deref(), Some("nginx:1.27"));
        assert_eq!(c.ports.unwrap().len(), 2);
    }

    #[test]
    fn a_missing_container_names_what_exists() {
        let Problem(message) = web().container("api").unwrap_err();
        assert_eq!(
            message,
            "container `api` not found in deploy/web in namespace `shop`; it has `sidecar`, `app`"
        );
    }

    #[test]
    fn a_pod_has_its_spec_at_the_top_and_no_selector() {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "labels": {"app": "p"}},
            "spec": {"containers": [{"name": "app", "image": "busybox"}]}
        });
        let w = Workload::new(&Target::parse("pod/p").unwrap(), "ns", pod);
        assert_eq!(
            w.container("app").unwrap().image.as_deref(),
            Some("busybox")
        );
        assert_eq!(w.selector().unwrap(), None);
    }

    #[test]
    fn deployment_selector_is_read() {
        let selector = web().selector().unwrap().unwrap();
        assert_eq!(crate::selector::to_string(&selector).unwrap(), "app=web");
    }
}
