//! The suite's waits: a step driven until it reports done, a probe polled
//! until it finds nothing wrong, the target ready or restored, and the
//! cluster state the checks compare.

use std::{
    fmt,
    time::{Duration, Instant},
};

use anyhow::bail;
use k8s_openapi::api::{
    apps::v1::{Deployment, StatefulSet},
    autoscaling::v2::HorizontalPodAutoscaler,
    core::v1::{ConfigMap, Pod, Secret, Service},
};
use kube::{Api, Client, Resource, ResourceExt, api::ListParams};
use serde_json::json;

use super::{
    compare::{TargetShape, restore_problem, shape_problem},
    fixtures::SAMPLE_IMAGE,
    snapshot::Snapshot,
    suite::Run,
};
use crate::plugins::{
    CallError,
    bindings::{Progress, ProviderError},
};

impl Run {
    /// Calls a step until it reports done, following its retry hints.
    pub(super) async fn drive(&self, step: &'static str) -> Result<(), String> {
        let started = Instant::now();
        loop {
            let outcome = match step {
                "prepare" => self.provider.prepare(self.access(), &self.mount).await,
                "install" => self.provider.install(self.access(), &self.mount).await,
                _ => self.provider.uninstall(self.access(), &self.mount).await,
            };
            let wait = match outcome {
                Ok(Progress::Done) => return Ok(()),
                Ok(Progress::RetryAfter(seconds)) => Duration::from_secs(seconds.into()),
                Ok(Progress::WhenPodsChange) => Duration::from_secs(1),
                Err(CallError::Provider {
                    error: ProviderError::Temporary(t),
                    ..
                }) => Duration::from_secs(t.retry_after_seconds.into()),
                Err(err) => return Err(err.to_string()),
            };
            if started.elapsed() + wait > self.timeout {
                return Err(format!("{step} did not complete within {:?}", self.timeout));
            }
            tokio::time::sleep(wait.clamp(Duration::from_millis(200), Duration::from_secs(5)))
                .await;
        }
    }

    /// Polls `ready` until every condition is true; on timeout, names the ones that are not.
    pub(super) async fn wait_all_ready(&self) -> Result<(), String> {
        let timeout = self.timeout;
        self.until(|run| async move {
            let conditions = run
                .provider
                .ready(run.access(), &run.mount)
                .await
                .map_err(|e| e.to_string())?;
            if conditions.is_empty() {
                return Err("ready reported no conditions".into());
            }
            let missing: Vec<String> = conditions
                .iter()
                .filter(|c| !c.ready)
                .map(|c| format!("{} ({})", c.name, c.reason))
                .collect();
            Ok((!missing.is_empty())
                .then(|| format!("after {timeout:?} still not ready: {}", missing.join(", "))))
        })
        .await
    }

    /// Polls `probe` until it returns true or the timeout passes.
    pub(super) async fn poll<'a, F, Fut>(&'a self, what: &str, mut probe: F) -> Result<(), String>
    where
        F: FnMut(&'a Self) -> Fut,
        Fut: Future<Output = Result<bool, String>>,
    {
        let timeout = self.timeout;
        self.until(move |run| {
            let done = probe(run);
            async move {
                Ok((!done.await?).then(|| format!("{what} was still false after {timeout:?}")))
            }
        })
        .await
    }

    /// Polls `probe` every half second until it finds nothing wrong
    /// (`None`); once the timeout has passed, fails with the last problem it
    /// found. An error of the probe ends the wait at once.
    pub(super) async fn until<'a, F, Fut>(&'a self, mut probe: F) -> Result<(), String>
    where
        F: FnMut(&'a Self) -> Fut,
        Fut: Future<Output = Result<Option<String>, String>>,
    {
        let started = Instant::now();
        loop {
            let Some(problem) = probe(self).await? else {
                return Ok(());
            };
            if started.elapsed() > self.timeout {
                return Err(problem);
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    pub(super) async fn wait_target_ready(&self) -> anyhow::Result<()> {
        let started = Instant::now();
        loop {
            if self
                .kind
                .ready(&self.client, &self.mount.target_namespace)
                .await?
            {
                return Ok(());
            }
            if started.elapsed() > self.timeout {
                bail!(
                    "the sample target `{}` never became ready; is the cluster scheduling pods?",
                    self.kind.target()
                );
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }

    /// The target's spec is back and its pods run the original image again.
    pub(super) async fn wait_target_restored(&self, original: &TargetShape) -> Result<(), String> {
        let ns = &self.mount.target_namespace;
        let deployments: Api<Deployment> = Api::namespaced(self.client.clone(), ns);
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        self.until(|_| async {
            let now = deployments.get("sample").await.map_err(|e| e.to_string())?;
            let live = pods
                .list(&ListParams::default().labels("app=sample"))
                .await
                .map_err(|e| e.to_string())?;
            Ok(shape_problem(
                original,
                &TargetShape::of(&now),
                &live.items,
                "app",
                SAMPLE_IMAGE,
            ))
        })
        .await
    }

    /// The target's pod template equals `template` (but for the restart
    /// annotation) and every live pod has the template's containers, running
    /// the images they ask for.
    pub(super) async fn wait_restored_exactly(
        &self,
        template: &serde_json::Value,
    ) -> Result<(), String> {
        let (ns, timeout) = (&self.mount.target_namespace, self.timeout);
        self.until(|run| async move {
            let now = run.kind.template(&run.client, ns).await?;
            let live = run.kind.pods(&run.client, ns).await?;
            Ok(restore_problem(template, &now, &live).map(|p| format!("after {timeout:?}: {p}")))
        })
        .await
    }

    pub(super) async fn snapshot(&self) -> anyhow::Result<Snapshot> {
        let mut snapshot = Snapshot::new();
        for ns in [
            self.mount.target_namespace.clone(),
            self.operator_ns.clone(),
        ] {
            collect::<Deployment>(&self.client, &ns, &mut snapshot, |o| json!(o.spec)).await?;
            collect::<StatefulSet>(&self.client, &ns, &mut snapshot, |o| json!(o.spec)).await?;
            collect::<Service>(&self.client, &ns, &mut snapshot, |o| {
                // The cluster assigns these; they are not the provider's doing.
                let mut spec = json!(o.spec);
                if let Some(spec) = spec.as_object_mut() {
                    spec.remove("clusterIP");
                    spec.remove("clusterIPs");
                }
                spec
            })
            .await?;
            collect::<ConfigMap>(&self.client, &ns, &mut snapshot, |o| {
                json!([o.data, o.binary_data])
            })
            .await?;
            collect::<Secret>(&self.client, &ns, &mut snapshot, |o| json!(o.data)).await?;
            collect::<HorizontalPodAutoscaler>(&self.client, &ns, &mut snapshot, |o| json!(o.spec))
                .await?;
        }
        // Made by the cluster in every namespace.
        snapshot.retain(|key, _| !key.ends_with("/kube-root-ca.crt"));
        Ok(snapshot)
    }
}

async fn collect<K>(
    client: &Client,
    ns: &str,
    snapshot: &mut Snapshot,
    content: impl Fn(&K) -> serde_json::Value,
) -> anyhow::Result<()>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    for object in api.list(&ListParams::default()).await? {
        if object.meta().deletion_timestamp.is_some() {
            continue;
        }
        let key = format!("{} {ns}/{}", K::kind(&()), object.name_any());
        snapshot.insert(
            key,
            json!({ "labels": object.labels(), "content": content(&object) }),
        );
    }
    Ok(())
}
