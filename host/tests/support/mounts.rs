//! What the bridge-mount tests share: a bed (a target namespace, a `gefyra`
//! namespace for the mounts, an operator serving it), the sample targets,
//! and what a user would check with kubectl: Carrier2 in the pods, and the
//! namespace exactly as it was after the mount.

use std::{collections::BTreeMap, time::Duration};

use anyhow::{Context, bail};
use k8s_openapi::api::{
    apps::v1::{Deployment, StatefulSet},
    autoscaling::v2::HorizontalPodAutoscaler,
    core::v1::{ConfigMap, Container, Pod, Service},
};
use kube::{
    Api, ResourceExt,
    api::{AttachParams, DeleteParams, ListParams, Patch, PatchParams, PostParams},
};
use pontoon::bridge_mount::{
    GefyraBridgeMount, crd::BridgeMountFields, settings::restore_config_map,
};
use pontoon_tests::{TestNamespace, operator::Operator, wait_for, wait_for_list};
use serde_json::json;
use tokio::io::AsyncReadExt;

pub const CARRIER_IMAGE: &str = "quay.io/gefyra/carrier2:latest";
pub const APP_IMAGE: &str = "nginx:1.27";
/// Generous for a loaded 2-core machine; on an idle one a mount is ACTIVE in about a second.
pub const TIMEOUT: Duration = Duration::from_secs(90);

/// A target namespace, a `gefyra` namespace for the mounts (as Gefyra's
/// client uses), and an operator serving that namespace.
pub struct Bed {
    pub target: TestNamespace,
    pub gefyra: TestNamespace,
    pub operator: Operator,
}

impl Bed {
    pub async fn new(prefix: &str) -> anyhow::Result<Self> {
        Self::with_flags(prefix, &[]).await
    }

    pub async fn with_flags(prefix: &str, flags: &[&str]) -> anyhow::Result<Self> {
        let bundled = pontoon_tests::providers::bundled_providers_dir()?;
        Self::with_providers(prefix, &bundled, flags).await
    }

    /// A bed whose operator loads the modules of `providers`.
    pub async fn with_providers(
        prefix: &str,
        providers: &std::path::Path,
        flags: &[&str],
    ) -> anyhow::Result<Self> {
        install_crds().await?;
        let target = TestNamespace::new(prefix).await?;
        let gefyra = TestNamespace::new(&format!("{prefix}-gefyra")).await?;
        let operator = Operator::start_with_providers(
            std::path::Path::new(env!("CARGO_BIN_EXE_pontoon")),
            gefyra.name(),
            providers,
            flags,
        )?;
        Ok(Self {
            target,
            gefyra,
            operator,
        })
    }

    /// Deployment `web` with `replicas` Ready pods in the target namespace.
    pub async fn deploy_web(&self, replicas: i32) -> anyhow::Result<()> {
        self.target
            .api::<Deployment>()
            .create(&PostParams::default(), &deployment("web", replicas)?)
            .await?;
        ready_pods(&self.target, "app=web", usize::try_from(replicas)?).await?;
        Ok(())
    }

    pub fn mounts(&self) -> Api<GefyraBridgeMount> {
        self.gefyra.api()
    }

    /// The name of the restore ConfigMap of mount `name` (one a mount, by
    /// its uid, in the operator's namespace).
    pub async fn restore_config_map(&self, name: &str) -> anyhow::Result<String> {
        let mount = self.mounts().get(name).await?;
        Ok(restore_config_map(
            mount.metadata.uid.as_deref().context("the mount's uid")?,
        ))
    }

    /// Every restore entry of every mount of the bed (their ConfigMaps in
    /// the operator's namespace).
    pub async fn restore_entries(&self) -> anyhow::Result<BTreeMap<String, String>> {
        let mut entries = BTreeMap::new();
        for config_map in self
            .gefyra
            .api::<ConfigMap>()
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|c| c.name_any().starts_with("gefyra-carrier2-restore-"))
        {
            entries.extend(config_map.data.unwrap_or_default());
        }
        Ok(entries)
    }

    /// Creates a mount with exactly the fields Gefyra's client sends.
    /// One-replica Deployments `names` (pods labelled `app=<name>`), their
    /// pods ready.
    pub async fn deployments(&self, names: &[impl AsRef<str>]) -> anyhow::Result<()> {
        for name in names {
            self.target
                .api::<Deployment>()
                .create(&PostParams::default(), &deployment(name.as_ref(), 1)?)
                .await?;
        }
        for name in names {
            ready_pods(&self.target, &format!("app={}", name.as_ref()), 1).await?;
        }
        Ok(())
    }

    pub async fn mount(
        &self,
        name: &str,
        target: &str,
        container: &str,
    ) -> anyhow::Result<GefyraBridgeMount> {
        self.mount_with(name, target, container, BridgeMountFields::default())
            .await
    }

    pub async fn mount_with(
        &self,
        name: &str,
        target: &str,
        container: &str,
        extra: BridgeMountFields,
    ) -> anyhow::Result<GefyraBridgeMount> {
        let mount = GefyraBridgeMount {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                namespace: Some(self.gefyra.name().into()),
                ..Default::default()
            },
            fields: BridgeMountFields {
                target_namespace: Some(self.target.name().into()),
                target: Some(target.into()),
                target_container: Some(container.into()),
                provider: extra.provider.or(Some("carrier2mount".into())),
                provider_parameter: extra.provider_parameter.or(Some(Default::default())),
                ..extra
            },
        };
        Ok(self.mounts().create(&PostParams::default(), &mount).await?)
    }

    /// Waits until some mount satisfies `reached` (polled every 20 ms, to
    /// act at a step of a mount as soon as it is seen); `what` names it.
    pub async fn wait_any(
        &self,
        what: &str,
        reached: impl Fn(&GefyraBridgeMount) -> bool,
    ) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + TIMEOUT;
        while !self
            .mounts()
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .any(&reached)
        {
            anyhow::ensure!(tokio::time::Instant::now() < deadline, "{what}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    /// Waits until the mount is in `state`; on timeout says where it is and
    /// what the operator logged.
    pub async fn wait_state(&self, name: &str, state: &str) -> anyhow::Result<GefyraBridgeMount> {
        let mounts = self.mounts();
        let reached = |m: Option<&GefyraBridgeMount>| {
            m.is_some_and(|m| m.fields.state.as_deref() == Some(state))
        };
        match wait_for(&mounts, name, reached, TIMEOUT).await {
            Ok(Some(mount)) => Ok(mount),
            Ok(None) => bail!("mount {name} disappeared while waiting for {state}"),
            Err(err) => {
                let now = mounts.get_opt(name).await?;
                bail!(
                    "{err}: mount {name} wanted {state}, is {:?} with {:#?}\n--- operator log ({}) ---\n{}",
                    now.as_ref().and_then(|m| m.fields.state.clone()),
                    now.as_ref().and_then(|m| m.fields.status.clone()),
                    self.operator.log_path().display(),
                    self.operator.log_tail(40)
                )
            }
        }
    }

    pub async fn wait_gone(&self, name: &str) -> anyhow::Result<()> {
        let mounts = self.mounts();
        let gone = |m: Option<&GefyraBridgeMount>| m.is_none();
        wait_for(&mounts, name, gone, TIMEOUT)
            .await
            .with_context(|| {
                format!(
                    "mount {name} was not deleted\n--- operator log ---\n{}",
                    self.operator.log_tail(40)
                )
            })?;
        Ok(())
    }

    pub async fn delete_mount(&self, name: &str) -> anyhow::Result<()> {
        self.mounts().delete(name, &DeleteParams::default()).await?;
        self.wait_gone(name).await
    }

    /// The `Ready` condition's reason and message.
    pub fn ready(mount: &GefyraBridgeMount) -> (String, String) {
        mount
            .fields
            .status
            .iter()
            .flat_map(|s| s.conditions.iter())
            .find(|c| c.type_ == "Ready")
            .map(|c| (c.reason.clone(), c.message.clone()))
            .unwrap_or_default()
    }
}

/// The CRDs as `pontoon crds` prints them, applied once per test process.
pub async fn install_crds() -> anyhow::Result<()> {
    static DONE: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    DONE.get_or_try_init(|| async {
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
        let client = pontoon_tests::client().await?;
        let crds: Api<CustomResourceDefinition> = Api::all(client);
        for crd in pontoon::crds::all()? {
            let name = crd.name_any();
            crds.patch(
                &name,
                &PatchParams::apply("pontoon-tests").force(),
                &Patch::Apply(&crd),
            )
            .await?;
            let established = |c: Option<&CustomResourceDefinition>| {
                c.and_then(|c| c.status.as_ref())
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| {
                        cs.iter()
                            .any(|c| c.type_ == "Established" && c.status == "True")
                    })
            };
            wait_for(&crds, &name, established, TIMEOUT).await?;
        }
        anyhow::Ok(())
    })
    .await?;
    Ok(())
}

pub fn app_container() -> serde_json::Value {
    json!({
        "name": "app",
        "image": APP_IMAGE,
        "command": ["nginx"],
        "args": ["-g", "daemon off;"],
        "ports": [
            { "containerPort": 80, "name": "http" },
            { "containerPort": 8443, "name": "https" }
        ],
        "readinessProbe": { "httpGet": { "path": "/healthz", "port": 8081 } },
        "env": [{ "name": "GREETING", "value": "hello" }]
    })
}

pub fn sidecar() -> serde_json::Value {
    json!({ "name": "sidecar", "image": "busybox:1.36", "command": ["sleep", "infinity"] })
}

pub fn deployment(name: &str, replicas: i32) -> anyhow::Result<Deployment> {
    Ok(serde_json::from_value(json!({
        "metadata": { "name": name, "labels": { "app": name, "tier": "web" } },
        "spec": {
            "replicas": replicas,
            "selector": { "matchLabels": { "app": name } },
            "template": {
                "metadata": { "labels": { "app": name, "tier": "web" } },
                "spec": { "containers": [app_container(), sidecar()] }
            }
        }
    }))?)
}

pub fn statefulset(name: &str, replicas: i32) -> anyhow::Result<StatefulSet> {
    Ok(serde_json::from_value(json!({
        "metadata": { "name": name, "labels": { "app": name } },
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "selector": { "matchLabels": { "app": name } },
            "template": {
                "metadata": { "labels": { "app": name } },
                "spec": { "containers": [app_container()] }
            }
        }
    }))?)
}

pub fn bare_pod(name: &str) -> anyhow::Result<Pod> {
    Ok(serde_json::from_value(json!({
        "metadata": { "name": name, "labels": { "app": name } },
        "spec": { "containers": [app_container(), sidecar()] }
    }))?)
}

pub fn hpa(name: &str) -> anyhow::Result<HorizontalPodAutoscaler> {
    Ok(serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": {
            "scaleTargetRef": { "apiVersion": "apps/v1", "kind": "Deployment", "name": name },
            "minReplicas": 3,
            "maxReplicas": 6,
            "metrics": [{ "type": "Resource", "resource": {
                "name": "cpu", "target": { "type": "Utilization", "averageUtilization": 80 } } }]
        }
    }))?)
}

/// Whether every live pod of `ns` that `selector` selects runs the Carrier2
/// image (and there is one).
pub async fn on_carrier(ns: &TestNamespace, selector: &str) -> anyhow::Result<bool> {
    let pods = live(
        ns.api::<Pod>()
            .list(&ListParams::default().labels(selector))
            .await?
            .items,
    );
    Ok(!pods.is_empty()
        && pods
            .iter()
            .all(|p| app_of(p).is_ok_and(|c| c.image.as_deref() == Some(CARRIER_IMAGE))))
}

/// The pods that are not being deleted.
pub fn live(pods: Vec<Pod>) -> Vec<Pod> {
    pods.into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect()
}

/// [`live`], borrowed: for the conditions of `wait_for_list`.
pub fn live_refs(pods: &[Pod]) -> Vec<&Pod> {
    pods.iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect()
}

/// Waits for `count` Ready pods matching `selector`.
pub async fn ready_pods(
    ns: &TestNamespace,
    selector: &str,
    count: usize,
) -> anyhow::Result<Vec<Pod>> {
    let pods = wait_for_list(
        &ns.api::<Pod>(),
        selector,
        |ps| {
            let ps = live_refs(ps);
            ps.len() == count && ps.iter().all(|p| pontoon_tests::pod_ready(p))
        },
        TIMEOUT,
    )
    .await?;
    Ok(live(pods))
}

/// The `app` container of a pod spec.
pub fn app_of(pod: &Pod) -> anyhow::Result<Container> {
    pod.spec
        .as_ref()
        .and_then(|s| s.containers.iter().find(|c| c.name == "app"))
        .cloned()
        .with_context(|| format!("pod {} has no container app", pod.name_any()))
}

/// Runs `command` in a container and returns its stdout.
pub async fn exec(
    pods: &Api<Pod>,
    pod: &str,
    container: &str,
    command: &[&str],
) -> anyhow::Result<String> {
    let params = AttachParams::default().container(container).stderr(false);
    let mut attached = pods.exec(pod, command.iter().copied(), &params).await?;
    let mut stdout = String::new();
    attached
        .stdout()
        .context("exec gave no stdout")?
        .read_to_string(&mut stdout)
        .await?;
    attached.join().await?;
    Ok(stdout)
}

/// The Carrier2 config in a patched pod's `app` container, as read back over exec.
pub async fn carrier_config(pods: &Api<Pod>, pod: &str) -> anyhow::Result<serde_json::Value> {
    carrier_config_in(pods, pod, "app").await
}

/// The Carrier2 config in a patched pod's `container`, as read back over exec.
pub async fn carrier_config_in(
    pods: &Api<Pod>,
    pod: &str,
    container: &str,
) -> anyhow::Result<serde_json::Value> {
    let text = exec(pods, pod, container, &["cat", "/tmp/config.yaml"]).await?;
    yaml_serde::from_str(&text).with_context(|| format!("config of {pod} is not YAML:\n{text}"))
}

/// Every pod of `selector` runs Carrier2 in `app` (spec and status), and its
/// config proxies each container port to the shadow Service.
pub async fn assert_carrier_everywhere(
    ns: &TestNamespace,
    selector: &str,
    count: usize,
    shadow_service: &str,
) -> anyhow::Result<()> {
    let pods: Api<Pod> = ns.api();
    let patched = wait_for_list(
        &pods,
        selector,
        |ps| {
            let ps = live_refs(ps);
            ps.len() == count
                && ps.iter().all(|p| {
                    p.status
                        .as_ref()
                        .and_then(|s| s.container_statuses.as_ref())
                        .is_some_and(|cs| {
                            cs.iter()
                                .any(|c| c.name == "app" && c.image == CARRIER_IMAGE && c.ready)
                        })
                })
        },
        TIMEOUT,
    )
    .await?;
    for pod in live(patched) {
        let name = pod.name_any();
        assert_eq!(
            app_of(&pod)?.image.as_deref(),
            Some(CARRIER_IMAGE),
            "{name}"
        );
        let config = carrier_config(&pods, &name).await?;
        let proxies = config["proxy"]
            .as_array()
            .context("config has no proxy list")?;
        let ports: Vec<i64> = proxies.iter().filter_map(|p| p["port"].as_i64()).collect();
        assert_eq!(
            ports,
            [80, 8443],
            "{name} proxies every container port: {config}"
        );
        for proxy in proxies {
            let port = proxy["port"].as_i64().unwrap_or_default();
            assert_eq!(
                proxy["clusterUpstream"],
                json!([format!(
                    "{shadow_service}.{}.svc.cluster.local:{port}",
                    ns.name()
                )]),
                "{name} points port {port} at the shadow Service"
            );
        }
        assert_eq!(
            config["probes"]["httpGet"],
            json!([8081]),
            "{name} answers the readiness probe port itself"
        );
    }
    Ok(())
}

/// What the target namespace held before the mount.
pub struct Before {
    pub objects: BTreeMap<String, serde_json::Value>,
    /// The `app` container of a target pod, as the API server stored it.
    pub container: Container,
}

impl Before {
    pub async fn take(ns: &TestNamespace, selector: &str) -> anyhow::Result<Self> {
        let pods = ns
            .api::<Pod>()
            .list(&ListParams::default().labels(selector))
            .await?;
        let pod = pods.items.first().context("no target pod")?;
        Ok(Self {
            objects: inventory(ns).await?,
            container: app_of(pod)?,
        })
    }
}

/// What a user would compare after the mount: every object of the namespace
/// by kind and name, with the parts of a workload a mount may never change.
pub async fn inventory(ns: &TestNamespace) -> anyhow::Result<BTreeMap<String, serde_json::Value>> {
    let mut all = BTreeMap::new();
    let lp = ListParams::default();
    for d in ns.api::<Deployment>().list(&lp).await? {
        let spec = d.spec.as_ref().context("deployment without spec")?;
        let template = serde_json::to_value(&spec.template)?;
        all.insert(
            format!("Deployment/{}", d.name_any()),
            json!({ "labels": d.labels(), "replicas": spec.replicas, "selector": spec.selector, "template": template }),
        );
    }
    for s in ns.api::<StatefulSet>().list(&lp).await? {
        let spec = s.spec.as_ref().context("statefulset without spec")?;
        let template = serde_json::to_value(&spec.template)?;
        all.insert(
            format!("StatefulSet/{}", s.name_any()),
            json!({ "labels": s.labels(), "selector": spec.selector, "template": template }),
        );
    }
    for s in ns.api::<Service>().list(&lp).await? {
        all.insert(format!("Service/{}", s.name_any()), json!(s.labels()));
    }
    for h in ns.api::<HorizontalPodAutoscaler>().list(&lp).await? {
        all.insert(
            format!("HorizontalPodAutoscaler/{}", h.name_any()),
            json!(h.spec),
        );
    }
    for c in ns.api::<ConfigMap>().list(&lp).await? {
        if c.name_any() != "kube-root-ca.crt" {
            all.insert(format!("ConfigMap/{}", c.name_any()), json!(c.data));
        }
    }
    Ok(all)
}

/// After the mount: the namespace holds exactly what it held before, every
/// pod of the target runs its original container again, and the operator
/// keeps no restore entry.
pub async fn assert_restored(
    bed: &Bed,
    before: &Before,
    selector: &str,
    count: usize,
) -> anyhow::Result<()> {
    let original = &before.container;
    let pods = wait_for_list(
        &bed.target.api::<Pod>(),
        selector,
        |ps| {
            let ps = live_refs(ps);
            ps.len() == count
                && ps.iter().all(|p| {
                    pontoon_tests::pod_ready(p)
                        && p.status
                            .as_ref()
                            .and_then(|s| s.container_statuses.as_ref())
                            .is_some_and(|cs| {
                                cs.iter().all(|c| c.name != "app" || c.image == APP_IMAGE)
                            })
                })
        },
        TIMEOUT,
    )
    .await
    .with_context(|| format!("pods of {selector} never ran {APP_IMAGE} again"))?;
    for pod in live(pods) {
        let app = app_of(&pod)?;
        assert_eq!(app.image, original.image, "image of {}", pod.name_any());
        assert_eq!(
            app.command,
            original.command,
            "command of {}",
            pod.name_any()
        );
        assert_eq!(app.args, original.args, "args of {}", pod.name_any());
        // Each pod has its own service-account token volume; all else must be equal.
        let without_token = |c: &Container| Container {
            volume_mounts: None,
            ..c.clone()
        };
        assert_eq!(
            without_token(&app),
            without_token(original),
            "the whole container of {}",
            pod.name_any()
        );
    }
    let after = inventory(&bed.target).await?;
    assert_eq!(after, before.objects, "the target namespace is as it was");
    let left = bed.restore_entries().await?;
    assert!(left.is_empty(), "restore entries left behind: {left:?}");
    Ok(())
}
