//! `pontoon conformance`: runs the provider contract against a real cluster
//! and says, check by check, whether a bridge-mount provider keeps it.
//!
//! It works in scratch namespaces with a sample Deployment (two replicas, a
//! container port, an HTTP readiness probe), then a StatefulSet and a bare
//! Pod of the same container (the steps, the cleanup and the exact restore
//! again, with a mount each), and compares what is on the cluster before
//! and after each step: idempotent steps leave the same state,
//! `uninstall` leaves nothing behind and the target exactly as it was (its
//! whole pod template, and live pods whose containers are the template's),
//! also when it interrupts an install that never finished.

use std::{
    collections::BTreeMap,
    fmt,
    path::Path,
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use k8s_openapi::api::{
    apps::v1::{Deployment, StatefulSet},
    autoscaling::v2::HorizontalPodAutoscaler,
    core::v1::{ConfigMap, Namespace, ObjectReference, Pod, Secret, Service},
};
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{DeleteParams, ListParams, ObjectMeta, PostParams},
};
use serde_json::json;

use crate::plugins::{
    CallError, ClusterAccess, Discovery, EventSubject, LoadedModule, PluginRuntime, ProviderModule,
    bindings::{Mount, Progress, ProviderError, Settings},
};

/// Image of the sample target's container.
const SAMPLE_IMAGE: &str = "nginx:1.27";
/// Replicas of the sample target: more than one, so providers that patch
/// pods one by one show it.
const SAMPLE_REPLICAS: i32 = 2;
/// The one change to a pod template a restore may make: `kubectl rollout
/// restart`'s annotation, which rolls the pods back to the template.
const RESTARTED_AT: &str = "kubectl.kubernetes.io/restartedAt";
/// Where the API server mounts a pod's service account token: added to the
/// pod's containers at admission, so never in the template.
const SERVICE_ACCOUNT_MOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

pub struct Options {
    pub timeout: Duration,
    pub keep_namespaces: bool,
    pub carrier_image: String,
}

/// The outcome of one check.
pub struct Check {
    pub name: String,
    pub result: Result<(), String>,
    /// Not run, because an earlier check it needs failed (why); counted
    /// apart, so that the total never shrinks.
    pub skipped: Option<String>,
}

impl Check {
    pub fn passed(&self) -> bool {
        self.skipped.is_none() && self.result.is_ok()
    }

    pub fn failed(&self) -> bool {
        self.skipped.is_none() && self.result.is_err()
    }
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.skipped, &self.result) {
            (Some(why), _) => write!(f, "SKIP  {}: {why}", self.name),
            (None, Ok(())) => write!(f, "PASS  {}", self.name),
            (None, Err(why)) => write!(f, "FAIL  {}: {why}", self.name),
        }
    }
}

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
struct Run {
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

/// Runs every check; returns them all (the caller decides the exit status).
pub async fn run(
    client: Client,
    provider_path: &Path,
    options: Options,
    report: impl FnMut(&Check) + Send + 'static,
) -> anyhow::Result<Vec<Check>> {
    let runtime = PluginRuntime::new(crate::plugins::Limits::default())?;
    let provider = match runtime.load_file(provider_path).await? {
        LoadedModule::Provider(p) => Arc::new(p),
        LoadedModule::Filter(f) => bail!(
            "{} is a config filter (`{}`), not a bridge-mount provider",
            provider_path.display(),
            f.name()
        ),
    };
    let suffix = random_suffix();
    let target_ns = format!("conformance-{suffix}");
    let operator_ns = format!("conformance-{suffix}-operator");
    for ns in [&target_ns, &operator_ns] {
        create_namespace(&client, ns).await?;
    }
    let mount = Mount {
        name: "conformance".into(),
        namespace: target_ns.clone(),
        uid: format!("conformance-{suffix}"),
        target: "deploy/sample".into(),
        target_namespace: target_ns.clone(),
        target_container: "app".into(),
        parameters: None,
        settings: Settings {
            operator_namespace: operator_ns.clone(),
            carrier_image: options.carrier_image.clone(),
            restore_config_map: "gefyra-carrier2-restore-configmap".into(),
        },
    };
    let mut run = Run {
        client: client.clone(),
        provider,
        discovery: Arc::default(),
        mount,
        operator_ns,
        kind: TargetKind::Deployment,
        timeout: options.timeout,
        checks: Vec::new(),
        report: Box::new(report),
    };
    let outcome = run.all().await;
    if !options.keep_namespaces {
        for ns in [&target_ns, &run.operator_ns] {
            let _ = Api::<Namespace>::all(client.clone())
                .delete(ns, &DeleteParams::background())
                .await;
        }
    }
    outcome?;
    Ok(run.checks)
}

fn random_suffix() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos() ^ (d.as_secs() as u32))
        .unwrap_or_default();
    format!("{:08x}", nanos ^ std::process::id().rotate_left(16))
}

async fn create_namespace(client: &Client, name: &str) -> anyhow::Result<()> {
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
enum TargetKind {
    Deployment,
    StatefulSet,
    Pod,
}

impl TargetKind {
    /// The object's name, and its pods' `app` label.
    fn name(self) -> &'static str {
        match self {
            Self::Deployment => "sample",
            Self::StatefulSet => "sample-sts",
            Self::Pod => "sample-pod",
        }
    }

    /// The mount's `target`.
    fn target(self) -> String {
        match self {
            Self::Deployment => format!("deploy/{}", self.name()),
            Self::StatefulSet => format!("sts/{}", self.name()),
            Self::Pod => format!("pod/{}", self.name()),
        }
    }

    /// The prefix of this round's check names.
    fn label(self) -> &'static str {
        match self {
            Self::Deployment => "",
            Self::StatefulSet => "StatefulSet target: ",
            Self::Pod => "Pod target: ",
        }
    }

    async fn create(self, client: &Client, ns: &str) -> anyhow::Result<()> {
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

    async fn delete(self, client: &Client, ns: &str) -> anyhow::Result<()> {
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
    async fn template(self, client: &Client, ns: &str) -> Result<serde_json::Value, String> {
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
    async fn pods(self, client: &Client, ns: &str) -> Result<Vec<Pod>, String> {
        Api::<Pod>::namespaced(client.clone(), ns)
            .list(&ListParams::default().labels(&format!("app={}", self.name())))
            .await
            .map(|l| l.items)
            .map_err(|e| e.to_string())
    }

    /// Whether the target is up: its pods ready.
    async fn ready(self, client: &Client, ns: &str) -> anyhow::Result<bool> {
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

/// A container's name, image, command and args.
type ContainerShape = (
    String,
    Option<String>,
    Option<Vec<String>>,
    Option<Vec<String>>,
);

/// The parts of the target a provider must give back unchanged.
#[derive(Debug, PartialEq)]
struct TargetShape {
    labels: BTreeMap<String, String>,
    template_labels: BTreeMap<String, String>,
    containers: Vec<ContainerShape>,
}

impl TargetShape {
    fn of(deployment: &Deployment) -> Self {
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
fn template_of(deployment: &Deployment) -> serde_json::Value {
    without_restart_annotation(json!(deployment.spec.as_ref().map(|s| &s.template)))
}

/// A pod template as JSON, less the restart annotation.
fn without_restart_annotation(mut template: serde_json::Value) -> serde_json::Value {
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
fn container_json(container: &k8s_openapi::api::core::v1::Container) -> serde_json::Value {
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
                let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
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

/// What is in the scratch namespaces, by `Kind namespace/name`, with the
/// content a provider could change (spec, data, labels).
type Snapshot = BTreeMap<String, serde_json::Value>;

impl Run {
    fn access(&self) -> ClusterAccess {
        let (api_version, kind) = match self.kind {
            TargetKind::Deployment => ("apps/v1", "Deployment"),
            TargetKind::StatefulSet => ("apps/v1", "StatefulSet"),
            TargetKind::Pod => ("v1", "Pod"),
        };
        let subject = ObjectReference {
            api_version: Some(api_version.into()),
            kind: Some(kind.into()),
            name: Some(self.kind.name().into()),
            namespace: Some(self.mount.target_namespace.clone()),
            ..Default::default()
        };
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

    async fn all(&mut self) -> anyhow::Result<()> {
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
            let shape = TargetShape::of(&now);
            let live = pods
                .list(&ListParams::default().labels("app=sample"))
                .await
                .map_err(|e| e.to_string())?;
            let images: Vec<String> = live
                .items
                .iter()
                .filter(|p| p.meta().deletion_timestamp.is_none())
                .flat_map(|p| {
                    p.status
                        .iter()
                        .flat_map(|s| s.container_statuses.iter().flatten())
                })
                .filter(|c| c.name == "app")
                .map(|c| c.image.clone())
                .collect();
            let pods_restored = !images.is_empty() && images.iter().all(|i| i == SAMPLE_IMAGE);
            if shape == *original && pods_restored {
                return Ok(());
            }
            if started.elapsed() > self.timeout {
                return Err(if shape != *original {
                    format!("target changed: was {original:?}, is {shape:?}")
                } else {
                    format!("pods of the target run {images:?}, expected {SAMPLE_IMAGE}")
                });
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
            let problem = self.restore_problem(template, &now, &live);
            let Some(problem) = problem else {
                return Ok(());
            };
            if started.elapsed() > self.timeout {
                return Err(format!("after {:?}: {problem}", self.timeout));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// What still differs from the original target, if anything.
    fn restore_problem(
        &self,
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

fn expect_bool(outcome: Result<bool, CallError>, expected: bool) -> Result<(), String> {
    match outcome {
        Ok(value) if value == expected => Ok(()),
        Ok(value) => Err(format!("returned {value}")),
        Err(err) => Err(err.to_string()),
    }
}

fn same(first: &Snapshot, second: &Snapshot) -> Result<(), String> {
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

fn leftovers(before: &Snapshot, after: &Snapshot) -> Result<(), String> {
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
