//! The ordered checks: a round against the sample Deployment with every
//! check, then a shorter round each against a StatefulSet and a bare Pod.
//! Each check's name is what a provider's author reads, so names never
//! change; a check that needs an earlier one which failed is reported as
//! skipped, so that the total never shrinks.

use std::{
    fmt,
    sync::Arc,
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
    compare::{
        Snapshot, TargetShape, expect_bool, leftovers, restore_problem, same, shape_problem,
        template_of,
    },
    fixtures::{SAMPLE_IMAGE, TargetKind},
    report::Check,
};
use crate::plugins::{
    CallError, ClusterAccess, Discovery, EventSubject, ProviderModule,
    bindings::{Mount, Progress, ProviderError},
};

/// The checks that follow `prepare completes`, up to uninstall.
const AFTER_PREPARE: [&str; 5] = [
    "prepare twice gives the same cluster state",
    "prepared becomes true",
    INSTALL_COMPLETES,
    "install twice is harmless",
    READY_AFTER_INSTALL,
];
const INSTALL_COMPLETES: &str = "install completes";
const READY_AFTER_INSTALL: &str = "ready reports every condition true after install";
const LEFTOVERS: &str = "uninstall leaves nothing the provider created";
/// The checks that follow `uninstall completes`, besides [`LEFTOVERS`].
const AFTER_UNINSTALL: [&str; 3] = [
    "uninstall leaves the target as it was (image, command, args, labels)",
    "uninstall restores the target exactly (whole pod template; live pods' containers are the template's)",
    "uninstall twice is harmless",
];

/// Everything the checks share.
pub(super) struct Run {
    client: Client,
    provider: Arc<ProviderModule>,
    discovery: Arc<Discovery>,
    mount: Mount,
    operator_ns: String,
    /// The workload of the round that runs.
    kind: TargetKind,
    timeout: Duration,
    checks: Vec<Check>,
    /// Called with each check as it completes, so progress is visible.
    report: Box<dyn FnMut(&Check) + Send>,
}

impl Run {
    /// A run of the first round's `mount`, reporting each check to `report`.
    pub(super) fn new(
        client: Client,
        provider: Arc<ProviderModule>,
        mount: Mount,
        operator_ns: String,
        timeout: Duration,
        report: Box<dyn FnMut(&Check) + Send>,
    ) -> Self {
        Self {
            client,
            provider,
            discovery: Arc::default(),
            mount,
            operator_ns,
            kind: TargetKind::Deployment,
            timeout,
            checks: Vec::new(),
            report,
        }
    }

    /// The checks recorded so far, in the order they ran.
    pub(super) fn into_checks(self) -> Vec<Check> {
        self.checks
    }

    fn access(&self) -> ClusterAccess {
        let subject = self.kind.reference(&self.mount.target_namespace);
        ClusterAccess {
            client: self.client.clone(),
            discovery: self.discovery.clone(),
            scope: self.provider.scope_for(&self.mount),
            field_manager: self.provider.name().to_string(),
            events: Some(EventSubject::new(
                self.client.clone(),
                "pontoon-conformance",
                subject,
            )),
        }
    }

    fn record(&mut self, name: impl Into<String>, result: Result<(), String>) -> bool {
        let check = Check {
            name: format!("{}{}", self.kind.label(), name.into()),
            result,
            skipped: None,
        };
        (self.report)(&check);
        let ok = check.result.is_ok();
        self.checks.push(check);
        ok
    }

    /// Records `names` as not run, because `because` failed.
    fn skip(&mut self, names: &[&str], because: &str) {
        for name in names {
            let check = Check {
                name: format!("{}{name}", self.kind.label()),
                result: Ok(()),
                skipped: Some(format!("`{}{because}` failed", self.kind.label())),
            };
            (self.report)(&check);
            self.checks.push(check);
        }
    }

    /// Every round, in order.
    pub(super) async fn all(&mut self) -> anyhow::Result<()> {
        self.deployment_round().await?;
        for kind in [TargetKind::StatefulSet, TargetKind::Pod] {
            self.other_round(kind).await?;
        }
        Ok(())
    }

    /// The steps, cleanup and exact restore for a StatefulSet or bare Pod
    /// target, with a mount of its own.
    async fn other_round(&mut self, kind: TargetKind) -> anyhow::Result<()> {
        let ns = self.mount.target_namespace.clone();
        let first = self.mount.clone();
        self.kind = kind;
        self.mount.name = format!("conformance-{}", kind.name());
        self.mount.uid = format!("{}-{}", first.uid, kind.name());
        self.mount.target = kind.target();
        let outcome = self.steps_of_other_round(&ns).await;
        self.mount = first;
        self.kind = TargetKind::Deployment;
        outcome
    }

    async fn steps_of_other_round(&mut self, ns: &str) -> anyhow::Result<()> {
        let kind = self.kind;
        kind.create(&self.client, ns).await?;
        self.wait_target_ready().await?;
        let template = kind
            .template(&self.client, ns)
            .await
            .map_err(anyhow::Error::msg)?;
        let before = self.snapshot().await?;
        self.check_target_exists().await;
        let prepared = self.drive("prepare").await;
        if self.record("prepare completes", prepared) {
            let became = self.wait_prepared().await;
            self.record("prepared becomes true", became);
            let installed = self.drive("install").await;
            if self.record(INSTALL_COMPLETES, installed) {
                let ready = self.wait_all_ready().await;
                self.record(READY_AFTER_INSTALL, ready);
            } else {
                self.skip(&[READY_AFTER_INSTALL], INSTALL_COMPLETES);
            }
        } else {
            self.skip(
                &[
                    "prepared becomes true",
                    INSTALL_COMPLETES,
                    READY_AFTER_INSTALL,
                ],
                "prepare completes",
            );
        }
        let uninstalled = self.drive("uninstall").await;
        let completed = self.record("uninstall completes", uninstalled);
        let after = self.snapshot().await?;
        self.record(LEFTOVERS, leftovers(&before, &after));
        if completed {
            let exact = self.wait_restored_exactly(&template).await;
            self.record(AFTER_UNINSTALL[1], exact);
        } else {
            self.skip(&AFTER_UNINSTALL[1..2], "uninstall completes");
        }
        self.check_target_gone().await
    }

    /// Every check, against a Deployment.
    async fn deployment_round(&mut self) -> anyhow::Result<()> {
        let ns = self.mount.target_namespace.clone();
        self.kind.create(&self.client, &ns).await?;
        self.wait_target_ready().await?;
        let deployments: Api<Deployment> = Api::namespaced(self.client.clone(), &ns);
        let sample = deployments.get("sample").await?;
        let original = TargetShape::of(&sample);
        let template = template_of(&sample);

        self.check_validate().await;

        self.check_target_exists().await;

        let before = self.snapshot().await?;
        let prepared = self.drive("prepare").await;
        if !self.record("prepare completes", prepared) {
            self.skip(&AFTER_PREPARE, "prepare completes");
            return self
                .finish_with_uninstall(&before, &original, &template)
                .await;
        }
        let after_first = self.snapshot().await?;
        let again = self.drive("prepare").await;
        let after_second = self.snapshot().await?;
        self.record(
            "prepare twice gives the same cluster state",
            again.and_then(|()| same(&after_first, &after_second)),
        );

        let became_prepared = self.wait_prepared().await;
        self.record("prepared becomes true", became_prepared);

        let installed = self.drive("install").await;
        if !self.record(INSTALL_COMPLETES, installed) {
            self.skip(&AFTER_PREPARE[3..], INSTALL_COMPLETES);
        } else {
            let first = self.snapshot().await?;
            let again = self.drive("install").await;
            let second = self.snapshot().await?;
            self.record(
                "install twice is harmless",
                again.and_then(|()| same(&first, &second)),
            );

            let all_ready = self.wait_all_ready().await;
            self.record(READY_AFTER_INSTALL, all_ready);
        }
        self.finish_with_uninstall(&before, &original, &template)
            .await
    }

    async fn finish_with_uninstall(
        &mut self,
        before: &Snapshot,
        original: &TargetShape,
        template: &serde_json::Value,
    ) -> anyhow::Result<()> {
        let uninstalled = self.drive("uninstall").await;
        let completed = self.record("uninstall completes", uninstalled);
        // What is left is reported whether or not uninstall said it was done.
        let after = self.snapshot().await?;
        self.record(LEFTOVERS, leftovers(before, &after));
        if completed {
            let restored = self.wait_target_restored(original).await;
            self.record(AFTER_UNINSTALL[0], restored);
            let exact = self.wait_restored_exactly(template).await;
            self.record(AFTER_UNINSTALL[1], exact);
            let again = self.drive("uninstall").await;
            self.record(AFTER_UNINSTALL[2], again);
        } else {
            self.skip(&AFTER_UNINSTALL, "uninstall completes");
        }
        let interrupted = self.interrupted_install(before, template).await;
        self.record(
            "uninstall in the middle of install restores the target (prepare, one install call, uninstall)",
            interrupted,
        );
        self.check_target_gone().await
    }

    async fn check_target_exists(&mut self) {
        let exists = self
            .provider
            .target_exists(self.access(), &self.mount)
            .await;
        self.record(
            "target-exists is true for an existing target",
            expect_bool(exists, true),
        );
    }

    /// Deletes the round's target; `target-exists` must turn false.
    async fn check_target_gone(&mut self) -> anyhow::Result<()> {
        self.kind
            .delete(&self.client, &self.mount.target_namespace)
            .await?;
        let gone = self
            .poll("target-exists", |run| async move {
                match run.provider.target_exists(run.access(), &run.mount).await {
                    Ok(exists) => Ok(!exists),
                    Err(err) => Err(err.to_string()),
                }
            })
            .await;
        self.record("target-exists is false after the target is deleted", gone);
        Ok(())
    }

    /// Polls `prepared` until it is true.
    async fn wait_prepared(&self) -> Result<(), String> {
        self.poll("prepared", |run| async move {
            run.provider
                .prepared(run.access(), &run.mount)
                .await
                .map_err(|e| e.to_string())
        })
        .await
    }

    /// An operator that crashed during install: prepare, one install call
    /// (not driven to done), then uninstall driven to done must leave the
    /// target exactly as it was and nothing behind.
    async fn interrupted_install(
        &self,
        before: &Snapshot,
        template: &serde_json::Value,
    ) -> Result<(), String> {
        self.drive("prepare")
            .await
            .map_err(|e| format!("prepare: {e}"))?;
        self.wait_prepared().await?;
        match self.provider.install(self.access(), &self.mount).await {
            Ok(_)
            | Err(CallError::Provider {
                error: ProviderError::Temporary(_),
                ..
            }) => {}
            Err(err) => return Err(format!("install: {err}")),
        }
        self.drive("uninstall")
            .await
            .map_err(|e| format!("uninstall: {e}"))?;
        self.wait_restored_exactly(template).await?;
        let after = self.snapshot().await.map_err(|e| format!("{e:#}"))?;
        leftovers(before, &after)
    }

    async fn check_validate(&mut self) {
        let accepted = self
            .provider
            .validate(Some(self.access()), &self.mount)
            .await
            .map_err(|e| e.to_string());
        self.record("validate accepts a well-formed mount", accepted);
        let cases = [
            ("validate rejects an empty target", "", "app"),
            ("validate rejects an empty container", "deploy/sample", ""),
            (
                "validate rejects a malformed target (`deploy/`)",
                "deploy/",
                "app",
            ),
            (
                "validate rejects a malformed target (`deploy/a/b`)",
                "deploy/a/b",
                "app",
            ),
            (
                "validate rejects a malformed target (`frobnicator/sample`)",
                "frobnicator/sample",
                "app",
            ),
        ];
        for (name, target, container) in cases {
            let mut mount = self.mount.clone();
            mount.target = target.into();
            mount.target_container = container.into();
            let result = match self.provider.validate(Some(self.access()), &mount).await {
                Err(err)
                    if matches!(err.provider_error(), Some(ProviderError::InvalidInput(_))) =>
                {
                    Ok(())
                }
                Err(err) => Err(format!("expected invalid-input, got: {err}")),
                Ok(()) => Err(format!(
                    "accepted target `{target}` with container `{container}`"
                )),
            };
            self.record(name, result);
        }
    }

    /// Calls a step until it reports done, following its retry hints.
    async fn drive(&self, step: &'static str) -> Result<(), String> {
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
    async fn wait_all_ready(&self) -> Result<(), String> {
        let started = Instant::now();
        loop {
            let conditions = self
                .provider
                .ready(self.access(), &self.mount)
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
            if missing.is_empty() {
                return Ok(());
            }
            if started.elapsed() > self.timeout {
                return Err(format!(
                    "after {:?} still not ready: {}",
                    self.timeout,
                    missing.join(", ")
                ));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Polls `probe` until it returns true or the timeout passes.
    async fn poll<'a, F, Fut>(&'a self, what: &str, mut probe: F) -> Result<(), String>
    where
        F: FnMut(&'a Self) -> Fut,
        Fut: std::future::Future<Output = Result<bool, String>>,
    {
        let started = Instant::now();
        loop {
            if probe(self).await? {
                return Ok(());
            }
            if started.elapsed() > self.timeout {
                return Err(format!("{what} was still false after {:?}", self.timeout));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    async fn wait_target_ready(&self) -> anyhow::Result<()> {
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
    async fn wait_target_restored(&self, original: &TargetShape) -> Result<(), String> {
        let ns = &self.mount.target_namespace;
        let deployments: Api<Deployment> = Api::namespaced(self.client.clone(), ns);
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        let started = Instant::now();
        loop {
            let now = deployments.get("sample").await.map_err(|e| e.to_string())?;
            let live = pods
                .list(&ListParams::default().labels("app=sample"))
                .await
                .map_err(|e| e.to_string())?;
            let Some(problem) = shape_problem(
                original,
                &TargetShape::of(&now),
                &live.items,
                "app",
                SAMPLE_IMAGE,
            ) else {
                return Ok(());
            };
            if started.elapsed() > self.timeout {
                return Err(problem);
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// The target's pod template equals `template` (but for the restart
    /// annotation) and every live pod has the template's containers, running
    /// the images they ask for.
    async fn wait_restored_exactly(&self, template: &serde_json::Value) -> Result<(), String> {
        let ns = &self.mount.target_namespace;
        let started = Instant::now();
        loop {
            let now = self.kind.template(&self.client, ns).await?;
            let live = self.kind.pods(&self.client, ns).await?;
            let problem = restore_problem(template, &now, &live);
            let Some(problem) = problem else {
                return Ok(());
            };
            if started.elapsed() > self.timeout {
                return Err(format!("after {:?}: {problem}", self.timeout));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    async fn snapshot(&self) -> anyhow::Result<Snapshot> {
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
