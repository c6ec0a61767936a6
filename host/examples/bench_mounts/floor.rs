//! The test bed's own floor for the burst: what the cluster does for the
//! same number of three-replica mounts when nothing but the writes a mount
//! cannot do without is sent, with no operator, provider, status, Event or
//! read in between. Pontoon's burst figures are read against it: what is
//! above the floor is the operator's doing (its reads, status writes,
//! Events, the provider's checks); what is below it no operator can win
//! on this machine.
//!
//! Per target, as Gefyra's design has a mount do it (the writes of all
//! targets sent at once, `AT_ONCE` in flight; one watch of the pods to wait):
//! - create: the pods' originals in a restore ConfigMap of the target's own
//!   (one create, as a mount keeps one object of its own), the
//!   shadow Deployment (3 replicas) and its Service, each original pod's
//!   container patched to Carrier2 with its original in an annotation (one
//!   strategic merge patch a pod); once a pod runs Carrier2 and is Ready, one
//!   exec in it (`true`: less than Gefyra's commit, which writes the config
//!   and starts Carrier2's upgrade). Done when every shadow has 3 Ready pods
//!   and every original pod has run its exec.
//! - restore: the shadow Deployment and Service deleted, each pod patched
//!   back (image, annotation removed), the restore ConfigMap deleted. Done
//!   when every pod of every target runs its original image
//!   and is Ready (the burst's "restored", less the mount's own deletion).

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
    time::{Duration, Instant},
};

use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{ConfigMap, Namespace, Pod, Service},
};
use kube::{
    Api, Client,
    api::{AttachParams, DeleteParams, ListParams, Patch, PatchParams, PostParams},
    runtime::watcher,
};
use pontoon_tests::{
    TestNamespace,
    bench::{CpuByCommand, Metrics},
};
use serde_json::json;
use tokio::{sync::Semaphore, task::JoinSet};

use super::{
    API_REQUESTS, APP_IMAGE, CARRIER_IMAGE, REQUEST_KEYS, TIMEOUT, app_image_ready,
    clock_ticks_per_second, deployment, targets, view::View,
};

/// Requests in flight at once: the floor is not held back by a client.
const AT_ONCE: usize = 32;
/// Each target's restore record of the floor is a ConfigMap of its own, as
/// a mount's is (in the bench's operator namespace, apart from the
/// operator's): made with the entries, deleted once its pods are back.
const RESTORE_CONFIG_MAP: &str = "bench-floor-restore";
const SHADOW: &str = "web-gefyra";

/// What the floor measured, in the burst's terms.
pub struct Floor {
    pub mounts: usize,
    /// Until every shadow was Ready and every pod exec'd on Carrier2.
    pub create: Phase,
    /// Until every pod was back on its original image and Ready.
    pub restore: Phase,
}

/// One timed phase: how long it took, the CPU seconds by process and the
/// API server's requests (all clients) meanwhile.
pub struct Phase {
    pub took: Duration,
    pub cpu: Vec<(String, f64)>,
    pub requests: Vec<(Vec<String>, f64)>,
}

/// The floor for `count` targets like the burst's; the targets' namespaces
/// are gone again when it returns, so the burst after it starts on a
/// quiet test bed.
pub async fn floor(gefyra: &TestNamespace, count: usize) -> anyhow::Result<Floor> {
    let client = pontoon_tests::client().await?;
    let namespaces = targets("bench-floor", count, 3).await?;
    let mut originals = Vec::new();
    for ns in &namespaces {
        let pods = ns
            .api::<Pod>()
            .list(&ListParams::default().labels("app=web"))
            .await?;
        let names: Vec<String> = pods
            .items
            .iter()
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        originals.push((ns, names));
    }
    let config_maps: Api<ConfigMap> = gefyra.api();
    let pods = PodView::start(&client).await?;
    let gate = Arc::new(Semaphore::new(AT_ONCE));

    let writes = originals
        .iter()
        .map(|(ns, names)| gated(&gate, mount(ns, names, &config_maps)));
    let mounted = async {
        tokio::try_join!(
            futures::future::try_join_all(writes),
            pods.until_mounted(&originals, &gate),
        )
        .map(drop)
    };
    let create = measured(&client, mounted).await?;
    let writes = originals
        .iter()
        .map(|(ns, names)| gated(&gate, restore(ns, names, &config_maps)));
    let restored = async {
        tokio::try_join!(
            futures::future::try_join_all(writes),
            pods.until_restored(&originals),
        )
        .map(drop)
    };
    let restore = measured(&client, restored).await?;

    drop(pods);
    let names: Vec<String> = namespaces.iter().map(|ns| ns.name().to_string()).collect();
    drop(originals);
    drop(namespaces);
    gone(&client, &names).await?;
    Ok(Floor {
        mounts: count,
        create,
        restore,
    })
}

/// `work` timed, with the CPU and the API server's requests it took.
async fn measured(
    client: &Client,
    work: impl Future<Output = anyhow::Result<()>>,
) -> anyhow::Result<Phase> {
    let ticks = clock_ticks_per_second();
    let processes = CpuByCommand::now();
    let requests = Metrics::of_api_server(client).await?;
    let started = Instant::now();
    work.await?;
    let took = started.elapsed();
    Ok(Phase {
        took,
        cpu: CpuByCommand::now().since(&processes, ticks),
        requests: Metrics::of_api_server(client).await?.growth_by(
            &requests,
            API_REQUESTS,
            &REQUEST_KEYS,
        ),
    })
}

/// `write` once it has one of the gate's turns.
async fn gated(
    gate: &Semaphore,
    write: impl Future<Output = anyhow::Result<()>>,
) -> anyhow::Result<()> {
    let _turn = gate.acquire().await?;
    write.await
}

/// The floor's one watch of every pod it looks at (the targets' and the
/// shadows').
struct PodView {
    view: View<Pod>,
    client: Client,
}

/// How often the view is looked at while an exec may finish.
const LOOK: Duration = Duration::from_millis(50);

impl PodView {
    async fn start(client: &Client) -> anyhow::Result<Self> {
        let config = watcher::Config::default().labels(&format!("app in (web,{SHADOW})"));
        Ok(Self {
            view: View::start(Api::<Pod>::all(client.clone()), config).await?,
            client: client.clone(),
        })
    }

    /// Until every shadow has 3 Ready pods and every original pod has run
    /// its exec, which starts as soon as the pod runs Carrier2 and is Ready
    /// (`AT_ONCE` in flight, with the writes).
    async fn until_mounted(
        &self,
        originals: &[(&TestNamespace, Vec<String>)],
        gate: &Arc<Semaphore>,
    ) -> anyhow::Result<()> {
        let mut waiting: BTreeSet<(String, String)> = originals
            .iter()
            .flat_map(|(ns, names)| names.iter().map(|n| (ns.name().to_string(), n.clone())))
            .collect();
        let targets: BTreeSet<&str> = originals.iter().map(|(ns, _)| ns.name()).collect();
        let mut execs = JoinSet::new();
        let deadline = Instant::now() + 2 * TIMEOUT;
        loop {
            let mut shadows: BTreeMap<String, usize> = BTreeMap::new();
            for pod in self.view.state() {
                let ns = pod.metadata.namespace.clone().unwrap_or_default();
                if !targets.contains(ns.as_str()) || pod.metadata.deletion_timestamp.is_some() {
                    continue;
                }
                if label(&pod) == Some(SHADOW) && app_image_ready(&pod, APP_IMAGE) {
                    *shadows.entry(ns).or_default() += 1;
                    continue;
                }
                let key = (ns, pod.metadata.name.clone().unwrap_or_default());
                if app_image_ready(&pod, CARRIER_IMAGE) && waiting.remove(&key) {
                    let pods: Api<Pod> = Api::namespaced(self.client.clone(), &key.0);
                    let gate = gate.clone();
                    execs.spawn(async move {
                        let _turn = gate.acquire_owned().await?;
                        exec_true(&pods, &key.1).await
                    });
                }
            }
            let shadows_ready = targets
                .iter()
                .all(|ns| shadows.get(*ns).copied().unwrap_or(0) >= 3);
            if shadows_ready && waiting.is_empty() && execs.is_empty() {
                return Ok(());
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "floor: not mounted after {:?}: {} pods not on Carrier2, {} execs running, shadows ready: {shadows_ready}",
                2 * TIMEOUT,
                waiting.len(),
                execs.len()
            );
            tokio::select! {
                Some(done) = execs.join_next() => done??,
                () = tokio::time::sleep(LOOK) => {}
            }
        }
    }

    /// Until every original pod runs its original image and is Ready.
    async fn until_restored(
        &self,
        originals: &[(&TestNamespace, Vec<String>)],
    ) -> anyhow::Result<()> {
        let all: BTreeSet<(String, String)> = originals
            .iter()
            .flat_map(|(ns, names)| names.iter().map(|n| (ns.name().to_string(), n.clone())))
            .collect();
        self.view
            .until(2 * TIMEOUT, |pods| {
                let back = pods
                    .iter()
                    .filter(|p| p.metadata.deletion_timestamp.is_none())
                    .filter(|p| app_image_ready(p, APP_IMAGE))
                    .filter(|p| {
                        all.contains(&(
                            p.metadata.namespace.clone().unwrap_or_default(),
                            p.metadata.name.clone().unwrap_or_default(),
                        ))
                    })
                    .count();
                (back < all.len()).then(|| format!("floor: {back} of {} pods restored", all.len()))
            })
            .await
    }
}

/// One target's mount writes: its restore entries, the shadow and its
/// Service, each original pod patched to Carrier2.
async fn mount(
    ns: &TestNamespace,
    pods: &[String],
    config_maps: &Api<ConfigMap>,
) -> anyhow::Result<()> {
    let record = ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(record_name(ns)),
            ..Default::default()
        },
        data: Some(
            pods.iter()
                .map(|pod| (entry_key(ns, pod), entry(ns, pod)))
                .collect(),
        ),
        ..Default::default()
    };
    config_maps.create(&PostParams::default(), &record).await?;
    // Labelled `app: web-gefyra` (the deployment's name), apart from the target's pods.
    ns.api::<Deployment>()
        .create(&PostParams::default(), &deployment(SHADOW, 3)?)
        .await?;
    let service: Service = serde_json::from_value(json!({
        "metadata": { "name": format!("{SHADOW}-svc") },
        "spec": { "selector": { "app": SHADOW }, "ports": [{ "port": 80 }] }
    }))?;
    ns.api::<Service>()
        .create(&PostParams::default(), &service)
        .await?;
    let api = ns.api::<Pod>();
    for pod in pods {
        let patch = json!({
            "metadata": { "annotations": { "pontoon.dev/original-container": entry(ns, pod) } },
            "spec": { "containers": [{ "name": "app", "image": CARRIER_IMAGE }] }
        });
        api.patch(pod, &PatchParams::default(), &Patch::Strategic(patch))
            .await?;
    }
    Ok(())
}

/// `true` in the pod's app container; fails unless it succeeds.
async fn exec_true(pods: &Api<Pod>, pod: &str) -> anyhow::Result<()> {
    let params = AttachParams::default().container("app").stderr(false);
    let mut process = pods.exec(pod, ["true"], &params).await?;
    let status = process.take_status();
    let mut output = Vec::new();
    if let Some(mut stdout) = process.stdout() {
        tokio::io::AsyncReadExt::read_to_end(&mut stdout, &mut output).await?;
    }
    let status = match status {
        Some(status) => status.await,
        None => None,
    };
    process.join().await?;
    anyhow::ensure!(
        status.as_ref().and_then(|s| s.status.as_deref()) == Some("Success"),
        "exec in {pod}: {status:?}"
    );
    Ok(())
}

/// One target's restore writes: the shadow and its Service deleted, each
/// pod patched back, its entries removed from the ConfigMap.
async fn restore(
    ns: &TestNamespace,
    pods: &[String],
    config_maps: &Api<ConfigMap>,
) -> anyhow::Result<()> {
    ns.api::<Deployment>()
        .delete(SHADOW, &DeleteParams::background())
        .await?;
    ns.api::<Service>()
        .delete(&format!("{SHADOW}-svc"), &DeleteParams::default())
        .await?;
    let api = ns.api::<Pod>();
    for pod in pods {
        let patch = json!({
            "metadata": { "annotations": { "pontoon.dev/original-container": null } },
            "spec": { "containers": [{ "name": "app", "image": APP_IMAGE }] }
        });
        api.patch(pod, &PatchParams::default(), &Patch::Strategic(patch))
            .await?;
    }
    config_maps
        .delete(&record_name(ns), &DeleteParams::default())
        .await?;
    Ok(())
}

/// The restore record of the target in `ns`.
fn record_name(ns: &TestNamespace) -> String {
    format!("{RESTORE_CONFIG_MAP}-{}", ns.name())
}

fn label(pod: &Pod) -> Option<&str> {
    pod.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("app"))
        .map(String::as_str)
}

fn entry_key(ns: &TestNamespace, pod: &str) -> String {
    format!("{}-{pod}-app", ns.name())
}

/// A restore entry about the size of carrier2mount's (≈330 bytes).
fn entry(ns: &TestNamespace, pod: &str) -> String {
    json!({
        "namespace": ns.name(),
        "pod": pod,
        "target": "deployment/web",
        "container": "app",
        "image": APP_IMAGE,
        "command": null,
        "args": null,
        "mount": "bench-floor",
        "saved_by": "bench-mounts floor, standing in for a provider's restore record of this container",
    })
    .to_string()
}

/// Waits until the namespaces are deleted (their pods with them).
async fn gone(client: &kube::Client, names: &[String]) -> anyhow::Result<()> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let left = namespaces
            .list(&ListParams::default().labels("pontoon.dev/test=true"))
            .await?
            .items
            .into_iter()
            .filter(|n| n.metadata.name.as_ref().is_some_and(|n| names.contains(n)))
            .count();
        if left == 0 {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{left} of the floor's namespaces are still there after 10 minutes"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
