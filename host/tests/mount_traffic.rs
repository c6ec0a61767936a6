//! A mount carries traffic: on the test bed's process pods (real echo
//! servers, the test bed's real Carrier2, CoreDNS, kube-proxy), requests
//! sent to the target's own Service reach the original pods before the
//! mount, the shadow once it is ACTIVE, a developer's endpoint when they
//! match a GefyraBridge's rules, and the original again after the mount is
//! deleted. Failed requests are counted during install, a bridge's rules
//! update, a bridge's deletion and restore, and printed.
//!
//! Runs as root (the test bed's network namespace); otherwise reported as
//! skipped, saying why (a failure under `CI=true`, see `pontoon_tests::skip`).

mod support;

use std::{
    collections::BTreeMap,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Context, bail, ensure};
use k8s_openapi::api::{
    apps::v1::{Deployment, StatefulSet},
    core::v1::{Pod, Service},
};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, PostParams},
};
use pontoon::bridge_mount::GefyraBridge;
use pontoon_tests::{
    TestNamespace, backends,
    traffic::{Answer, Request, TestbedNet, echo_container},
    wait_for,
};
use serde_json::json;
use support::mounts::{Bed, TIMEOUT, ready_pods};

/// echo-basic's port (its HTTP_PORT default).
const ECHO_PORT: u16 = 3000;
/// How long one request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);

/// The kinds of request the test sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    /// No bridge matches: the shadow (or before/after the mount, the original).
    Plain,
    /// `x-gefyra: a`: bridge A.
    HeaderA,
    /// Path prefix `/b`: bridge B (until its rules change).
    PathB,
    /// Path prefix `/c`: bridge B once its rules say so.
    PathC,
}

impl Kind {
    fn request(self) -> Request {
        match self {
            Kind::Plain => Request {
                path: "/plain",
                header: None,
            },
            Kind::HeaderA => Request {
                path: "/a?x=1",
                header: Some("x-gefyra: a"),
            },
            Kind::PathB => Request {
                path: "/b/deeper?y=2",
                header: None,
            },
            Kind::PathC => Request {
                path: "/c",
                header: None,
            },
        }
    }
}

/// The test bed's network and the target's Service in it.
#[derive(Clone)]
struct Net {
    net: TestbedNet,
    service: String,
}

impl Net {
    fn send(&self, kinds: &[Kind]) -> anyhow::Result<Vec<Answer>> {
        let requests: Vec<Request> = kinds.iter().map(|k| k.request()).collect();
        self.net.send(&self.service, &requests, REQUEST_TIMEOUT)
    }
}

/// Requests in a loop on a thread of their own while something happens:
/// how many were sent and how many failed.
struct Load {
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicUsize>,
    failed: Arc<AtomicUsize>,
    samples: Arc<std::sync::Mutex<Vec<String>>>,
    thread: std::thread::JoinHandle<()>,
}

impl Load {
    fn start(net: &Net, kinds: &'static [Kind]) -> Self {
        let (stop, sent, failed) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
        );
        let samples = Arc::new(std::sync::Mutex::new(Vec::new()));
        let net = net.clone();
        let thread = {
            let (stop, sent, failed, samples) =
                (stop.clone(), sent.clone(), failed.clone(), samples.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let answers = net
                        .send(kinds)
                        .unwrap_or_else(|err| vec![Err(err.to_string())]);
                    for answer in answers {
                        sent.fetch_add(1, Ordering::Relaxed);
                        if let Err(why) = answer {
                            failed.fetch_add(1, Ordering::Relaxed);
                            let mut samples = samples
                                .lock()
                                .unwrap_or_else(std::sync::PoisonError::into_inner);
                            if samples.len() < 3 {
                                samples.push(why);
                            }
                        }
                    }
                }
            })
        };
        Self {
            stop,
            sent,
            failed,
            samples,
            thread,
        }
    }

    /// Stops it; (sent, failed, a few failures).
    fn finish(self) -> (usize, usize, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.thread.join();
        let samples = self
            .samples
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        (
            self.sent.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
            samples,
        )
    }
}

fn echo() -> serde_json::Value {
    echo_container("echo", ECHO_PORT)
}

/// The kinds of target a mount takes.
#[derive(Clone, Copy, Debug)]
enum Workload {
    Deployment,
    StatefulSet,
    Pod,
}

impl Workload {
    fn target(self) -> &'static str {
        match self {
            Workload::Deployment => "deploy/echo",
            Workload::StatefulSet => "sts/echo",
            Workload::Pod => "pod/echo",
        }
    }

    fn replicas(self) -> usize {
        match self {
            Workload::Pod => 1,
            _ => 2,
        }
    }

    async fn create(self, ns: &TestNamespace) -> anyhow::Result<()> {
        let template = json!({
            "metadata": { "labels": { "app": "echo" } },
            "spec": { "containers": [echo()] }
        });
        let selector = json!({ "matchLabels": { "app": "echo" } });
        match self {
            Workload::Deployment => {
                let d: Deployment = serde_json::from_value(json!({
                    "metadata": { "name": "echo" },
                    "spec": { "replicas": self.replicas(), "selector": selector, "template": template }
                }))?;
                ns.api::<Deployment>()
                    .create(&PostParams::default(), &d)
                    .await?;
            }
            Workload::StatefulSet => {
                let s: StatefulSet = serde_json::from_value(json!({
                    "metadata": { "name": "echo" },
                    "spec": { "replicas": self.replicas(), "serviceName": "echo", "selector": selector,
                              "template": template }
                }))?;
                ns.api::<StatefulSet>()
                    .create(&PostParams::default(), &s)
                    .await?;
            }
            Workload::Pod => {
                let p: Pod = serde_json::from_value(json!({
                    "metadata": { "name": "echo", "labels": { "app": "echo" } },
                    "spec": { "containers": [echo()] }
                }))?;
                ns.api::<Pod>().create(&PostParams::default(), &p).await?;
            }
        }
        Ok(())
    }

    /// Waits until the workload's pods are its own again and stay: any
    /// rollout of the Deployment or StatefulSet is over (the restore puts
    /// each pod's original back in place and rolls nothing unless a pod
    /// cannot be made exact that way) and no pod is leaving, each being
    /// still an endpoint for a moment after its process ended.
    async fn rolled_out(self, ns: &TestNamespace) -> anyhow::Result<()> {
        let want = i32::try_from(self.replicas())?;
        let started = Instant::now();
        loop {
            let done = match self {
                Workload::Deployment => {
                    backends::rollout_complete(&ns.api::<Deployment>().get("echo").await?)
                }
                Workload::StatefulSet => {
                    let set = ns.api::<StatefulSet>().get("echo").await?;
                    let generation = set.metadata.generation;
                    set.status.is_some_and(|s| {
                        s.observed_generation >= generation
                            && s.update_revision.is_some()
                            && s.current_revision == s.update_revision
                            && s.ready_replicas == Some(want)
                    })
                }
                Workload::Pod => true,
            };
            let pods = ns
                .api::<Pod>()
                .list(&kube::api::ListParams::default().labels("app=echo"))
                .await?;
            let leaving = pods
                .items
                .iter()
                .any(|p| p.metadata.deletion_timestamp.is_some());
            if done && !leaving {
                return Ok(());
            }
            ensure!(
                started.elapsed() < TIMEOUT,
                "{self:?} echo was not rolled out within {TIMEOUT:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// A "developer": a one-pod echo server of its own; its pod's IP.
async fn developer(ns: &TestNamespace, name: &str) -> anyhow::Result<(String, String)> {
    let d: Deployment = serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": {
            "replicas": 1,
            "selector": { "matchLabels": { "app": name } },
            "template": { "metadata": { "labels": { "app": name } },
                          "spec": { "containers": [echo()] } }
        }
    }))?;
    ns.api::<Deployment>()
        .create(&PostParams::default(), &d)
        .await?;
    let pods = ready_pods(ns, &format!("app={name}"), 1).await?;
    let pod = &pods[0];
    let ip = pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .context("the developer's pod has no IP")?;
    Ok((pod.name_any(), ip))
}

/// A GefyraBridge exactly as Gefyra's client writes it, labelled with the mount.
fn bridge(
    name: &str,
    mount: &str,
    ns: &str,
    target_ns: &str,
    rules: serde_json::Value,
    ip: &str,
) -> anyhow::Result<GefyraBridge> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "gefyra.dev/v1",
        "kind": "gefyrabridge",
        "metadata": { "name": name, "namespace": ns,
                      "labels": { "gefyra.dev/bridge-mount": mount, "gefyra.dev/client": "client-a" } },
        "provider": "carrier2",
        "providerParameter": { "rules": rules },
        "connectionProvider": "stowaway",
        "client": "client-a",
        "targetNamespace": target_ns,
        "target": mount,
        "targetContainer": "echo",
        "portMappings": [format!("{ECHO_PORT}:{ECHO_PORT}")],
        "handleProbes": true,
        "destinationIP": ip,
    }))?)
}

async fn wait_bridge(api: &Api<GefyraBridge>, name: &str, state: &str) -> anyhow::Result<()> {
    let reached =
        |b: Option<&GefyraBridge>| b.is_some_and(|b| b.bridge.state.as_deref() == Some(state));
    if let Err(err) = wait_for(api, name, reached, TIMEOUT).await {
        let now = api.get_opt(name).await?;
        bail!(
            "{err}: bridge {name} wanted {state}, is {:?} ({:?})",
            now.as_ref().and_then(|b| b.bridge.state.clone()),
            now.as_ref().and_then(|b| b.bridge.status.clone())
        );
    }
    Ok(())
}

/// Polls with `kinds` until every answer satisfies `ok`; how long it took.
async fn until(
    net: &Net,
    kinds: &[Kind],
    what: &str,
    ok: impl Fn(Kind, &Answer) -> bool,
) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let mut last = Vec::new();
    while started.elapsed() < TIMEOUT {
        last = net.send(kinds)?;
        if kinds.iter().zip(&last).all(|(k, a)| ok(*k, a)) {
            return Ok(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    bail!("{what}: never seen within {TIMEOUT:?}; last answers {last:?}")
}

fn tally(
    kinds: &[Kind],
    answers: &[Answer],
    group: impl Fn(&str) -> &'static str,
) -> BTreeMap<(Kind, &'static str), usize> {
    let mut counts = BTreeMap::new();
    for (kind, answer) in kinds.iter().zip(answers) {
        let who = match answer {
            Ok(pod) => group(pod),
            Err(_) => "failed",
        };
        *counts.entry((*kind, who)).or_default() += 1;
    }
    counts
}

/// Sends `kinds` once each and checks where every one landed, exactly
/// (`expected`: how many of each kind each group answered); on a miss, says
/// who answered and what every pod's Carrier2 config held.
async fn lands(
    net: &Net,
    ns: &TestNamespace,
    kinds: &[Kind],
    group: impl Fn(&str) -> &'static str,
    expected: &[((Kind, &'static str), usize)],
    when: &str,
) -> anyhow::Result<()> {
    let answers = net.send(kinds)?;
    let counts = tally(kinds, &answers, group);
    let expected: BTreeMap<(Kind, &str), usize> = expected.iter().copied().collect();
    if counts != expected {
        bail!(
            "{when}, {} requests landed as {counts:?}, wanted {expected:?}; who answered: {answers:?}\n{}",
            kinds.len(),
            configs(ns).await
        );
    }
    Ok(())
}

/// The Carrier2 config of every pod of the target, for a failure's message.
async fn configs(ns: &TestNamespace) -> String {
    let pods = ns.api::<Pod>();
    let list = match pods
        .list(&kube::api::ListParams::default().labels("app=echo"))
        .await
    {
        Ok(list) => list.items,
        Err(err) => return format!("cannot list the pods: {err}"),
    };
    let mut out = String::new();
    for pod in list {
        let name = pod.name_any();
        let config = support::mounts::exec(&pods, &name, "echo", &["cat", "/tmp/config.yaml"])
            .await
            .unwrap_or_else(|e| format!("(exec failed: {e})"));
        out.push_str(&format!("--- {name} ---\n{config}\n"));
    }
    out
}

async fn traffic(workload: Workload, prefix: &str) -> anyhow::Result<()> {
    let testbed = match TestbedNet::of_testbed() {
        Ok(net) => net,
        Err(reason) => return pontoon_tests::skip::skip(prefix, &reason),
    };
    let bed = Bed::new(prefix).await?;
    let outcome = traffic_in(&bed, testbed, workload).await;
    if outcome.is_err() {
        // A mount left behind outlives its operator by its finalizer.
        let _ = bed.delete_mount("traffic").await;
    }
    outcome
}

/// The target's own Service (`echo`, port 80 to the echo servers), as the
/// test bed's network reaches it.
async fn echo_service(ns: &TestNamespace, testbed: TestbedNet) -> anyhow::Result<Net> {
    let service: Service = serde_json::from_value(json!({
        "metadata": { "name": "echo" },
        "spec": { "selector": { "app": "echo" },
                  "ports": [{ "name": "http", "port": 80, "targetPort": ECHO_PORT }] }
    }))?;
    let service = ns
        .api::<Service>()
        .create(&PostParams::default(), &service)
        .await?;
    let ip = service
        .spec
        .and_then(|s| s.cluster_ip)
        .context("the Service has no ClusterIP")?;
    Ok(Net {
        net: testbed,
        service: format!("{ip}:80"),
    })
}

async fn traffic_in(bed: &Bed, testbed: TestbedNet, workload: Workload) -> anyhow::Result<()> {
    let ns = &bed.target;
    let net = echo_service(ns, testbed).await?;
    workload.create(ns).await?;
    let originals: Vec<String> = ready_pods(ns, "app=echo", workload.replicas())
        .await?
        .iter()
        .map(|p| p.name_any())
        .collect();
    let ((dev_a, ip_a), (dev_b, ip_b)) =
        (developer(ns, "dev-a").await?, developer(ns, "dev-b").await?);
    let group = |pod: &str| -> &'static str {
        // The target's pods: the ones before the mount, and those a
        // restore's rollout makes (a Deployment's new ReplicaSet).
        let target_pod = originals.iter().any(|o| o == pod)
            || (pod.starts_with("echo-") && !pod.starts_with("echo-gefyra"));
        if target_pod {
            "original"
        } else if pod == dev_a {
            "dev-a"
        } else if pod == dev_b {
            "dev-b"
        } else if pod.starts_with("echo-gefyra") {
            "shadow"
        } else {
            "someone else"
        }
    };

    // Before the mount: the originals answer everything.
    let mixed: Vec<Kind> = (0..200)
        .map(|i| [Kind::Plain, Kind::HeaderA, Kind::PathB][i % 3])
        .collect();
    let before = net.send(&mixed[..30])?;
    ensure!(
        before
            .iter()
            .all(|a| a.as_ref().is_ok_and(|p| group(p) == "original")),
        "before the mount not every answer came from an original pod: {before:?}"
    );

    // Install under load.
    let load = Load::start(&net, &[Kind::Plain]);
    bed.mount("traffic", workload.target(), "echo").await?;
    bed.wait_state("traffic", "ACTIVE").await?;
    let shadow_in = until(
        &net,
        &[Kind::Plain; 10],
        "every answer from the shadow",
        |_, a| a.as_ref().is_ok_and(|p| group(p) == "shadow"),
    )
    .await?;
    let install = load.finish();

    // Two bridges, to two developers.
    let bridges: Api<GefyraBridge> = bed.gefyra.api();
    let gefyra = bed.gefyra.name().to_string();
    let header_a = json!([{ "match": [{ "matchHeader": { "name": "x-gefyra", "value": "a", "type": "exact" } }] }]);
    let path_b = json!([{ "match": [{ "matchPath": { "path": "/b", "type": "prefix" } }] }]);
    bridges
        .create(
            &PostParams::default(),
            &bridge(
                "bridge-a",
                "traffic",
                &gefyra,
                bed.target.name(),
                header_a,
                &ip_a,
            )?,
        )
        .await?;
    bridges
        .create(
            &PostParams::default(),
            &bridge(
                "bridge-b",
                "traffic",
                &gefyra,
                bed.target.name(),
                path_b,
                &ip_b,
            )?,
        )
        .await?;
    wait_bridge(&bridges, "bridge-a", "ACTIVE").await?;
    wait_bridge(&bridges, "bridge-b", "ACTIVE").await?;
    lands(
        &net,
        ns,
        &mixed,
        &group,
        &[
            ((Kind::Plain, "shadow"), 67),
            ((Kind::HeaderA, "dev-a"), 67),
            ((Kind::PathB, "dev-b"), 66),
        ],
        "with bridges A and B",
    )
    .await?;

    // Bridge B's rules change (under load): `/c` goes to dev-b, `/b` to the shadow.
    let load = Load::start(&net, &[Kind::Plain, Kind::PathB, Kind::HeaderA]);
    let path_c = json!({ "providerParameter": { "rules": [
        { "match": [{ "matchPath": { "path": "/c", "type": "prefix" } }] }
    ] } });
    bridges
        .patch(
            "bridge-b",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&path_c),
        )
        .await?;
    // Twenty in a row, each on a connection of its own: every pod of the
    // target has the new rules (with two pods, one that had not would be
    // missed with a chance of 2^-20).
    until(&net, &[Kind::PathC; 20], "/c at dev-b", |_, a| {
        a.as_ref().is_ok_and(|p| group(p) == "dev-b")
    })
    .await?;
    let update = load.finish();
    let with_c: Vec<Kind> = (0..80)
        .map(|i| [Kind::Plain, Kind::HeaderA, Kind::PathB, Kind::PathC][i % 4])
        .collect();
    lands(
        &net,
        ns,
        &with_c,
        &group,
        &[
            ((Kind::Plain, "shadow"), 20),
            ((Kind::HeaderA, "dev-a"), 20),
            ((Kind::PathB, "shadow"), 20),
            ((Kind::PathC, "dev-b"), 20),
        ],
        "after bridge B's rules changed",
    )
    .await?;

    // Bridge A goes (under load): its requests go to the shadow again.
    let load = Load::start(&net, &[Kind::Plain, Kind::PathC]);
    bridges.delete("bridge-a", &DeleteParams::default()).await?;
    // Twenty in a row again: every pod has left bridge A.
    until(
        &net,
        &[Kind::HeaderA; 20],
        "x-gefyra: a back at the shadow",
        |_, a| a.as_ref().is_ok_and(|p| group(p) == "shadow"),
    )
    .await?;
    let change = load.finish();
    lands(
        &net,
        ns,
        &with_c,
        &group,
        &[
            ((Kind::Plain, "shadow"), 20),
            ((Kind::HeaderA, "shadow"), 20),
            ((Kind::PathB, "shadow"), 20),
            ((Kind::PathC, "dev-b"), 20),
        ],
        "after bridge A went",
    )
    .await?;

    // The mount goes (under load): the originals answer again, the bridges are gone.
    let load = Load::start(&net, &[Kind::Plain]);
    bed.delete_mount("traffic").await?;
    until(
        &net,
        &[Kind::Plain, Kind::PathC, Kind::HeaderA],
        "the originals answering again",
        |_, a| a.as_ref().is_ok_and(|p| group(p) == "original"),
    )
    .await?;
    let restore = load.finish();
    ensure!(
        bridges.list(&Default::default()).await?.items.is_empty(),
        "bridges are left after their mount was deleted"
    );
    workload.rolled_out(ns).await?;
    let restored = net.send(&mixed[..30])?;
    ensure!(
        restored
            .iter()
            .all(|a| a.as_ref().is_ok_and(|p| group(p) == "original")),
        "after the mount not every answer came from an original pod: {restored:?}"
    );
    println!(
        "traffic {workload:?}: shadow answering {:.2} s after ACTIVE; failed requests: install {}/{} {:?}, \
         rules update {}/{} {:?}, bridge deleted {}/{} {:?}, restore {}/{} {:?}",
        shadow_in.as_secs_f64(),
        install.1,
        install.0,
        install.2,
        update.1,
        update.0,
        update.2,
        change.1,
        change.0,
        change.2,
        restore.1,
        restore.0,
        restore.2,
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deployment_mount_carries_traffic_and_bridges_route_by_their_rules() -> anyhow::Result<()>
{
    traffic(Workload::Deployment, "traffic-deploy").await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_statefulset_mount_carries_traffic_and_bridges_route_by_their_rules() -> anyhow::Result<()>
{
    traffic(Workload::StatefulSet, "traffic-sts").await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bare_pod_mount_carries_traffic_and_bridges_route_by_their_rules() -> anyhow::Result<()> {
    traffic(Workload::Pod, "traffic-pod").await
}

/// A Carrier2 that restarts in one pod moments after the mount went ACTIVE
/// comes back without its config (a restarted container's /tmp is new) and
/// serves nothing. The mount must see that at once, within the 30 s in which
/// `ready` takes install's note for the pods' configs: it leaves ACTIVE,
/// configures the pod again, and every request reaches the shadow again.
/// (On the test bed, as with a kubelet, the pod is first seen not Ready,
/// which alone sends the mount RESTORING; that the note names the container
/// instance, so a restarted one is read back, is checked in carrier2mount's
/// `configured` unit tests.)
#[tokio::test(flavor = "multi_thread")]
async fn a_carrier2_restarted_right_after_active_is_seen_and_configured_again() -> anyhow::Result<()>
{
    let testbed = match TestbedNet::of_testbed() {
        Ok(net) => net,
        Err(reason) => return pontoon_tests::skip::skip("traffic-restart", &reason),
    };
    let bed = Bed::new("traffic-restart").await?;
    let outcome = restarted_in(&bed, testbed).await;
    if outcome.is_err() {
        let _ = bed.delete_mount("restart").await;
    }
    outcome
}

/// How long a mount may take to leave ACTIVE once a pod's Carrier2 lost its
/// config: the pod's restart wakes a check of the mount at once (well under
/// a second here); the periodic check, and install's note about the pod,
/// would take 30 s or more.
const NOTICED_WITHIN: Duration = Duration::from_secs(15);

async fn restarted_in(bed: &Bed, testbed: TestbedNet) -> anyhow::Result<()> {
    let ns = &bed.target;
    let net = echo_service(ns, testbed).await?;
    Workload::Deployment.create(ns).await?;
    ready_pods(ns, "app=echo", 2).await?;
    let shadow = |a: &Answer| a.as_ref().is_ok_and(|p| p.starts_with("echo-gefyra"));
    bed.mount("restart", "deploy/echo", "echo").await?;
    bed.wait_state("restart", "ACTIVE").await?;
    until(
        &net,
        &[Kind::Plain; 10],
        "every answer from the shadow",
        |_, a| shadow(a),
    )
    .await?;

    // Every state the mount is in from now on.
    let mut states = {
        let config = kube::runtime::watcher::Config::default().fields("metadata.name=restart");
        let stream = kube::runtime::WatchStreamExt::applied_objects(kube::runtime::watcher(
            bed.mounts(),
            config,
        ));
        let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Ok(Some(mount)) = futures::TryStreamExt::try_next(&mut stream).await {
                if sender.send(mount.fields.state.unwrap_or_default()).is_err() {
                    break;
                }
            }
        });
        receiver
    };

    // Carrier2 in one original pod stops; the test bed restarts its container.
    let pods = ns.api::<Pod>();
    let originals: Vec<Pod> = pods
        .list(&kube::api::ListParams::default().labels("app=echo"))
        .await?
        .items
        .into_iter()
        .filter(|p| !p.name_any().starts_with("echo-gefyra"))
        .collect();
    let pod = originals.first().context("no original pod")?.name_any();
    let restarts = |p: &Pod| {
        p.status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .and_then(|c| c.iter().find(|c| c.name == "echo"))
            .map_or(0, |c| c.restart_count)
    };
    let before = restarts(&pods.get(&pod).await?);
    support::mounts::exec(
        &pods,
        &pod,
        "echo",
        &["sh", "-c", "kill $(cat /tmp/carrier2.pid)"],
    )
    .await?;
    wait_for(
        &pods,
        &pod,
        |p: Option<&Pod>| p.is_some_and(|p| restarts(p) > before),
        TIMEOUT,
    )
    .await
    .with_context(|| format!("the container of {pod} was not restarted"))?;

    // The mount leaves ACTIVE for it, soon.
    let deadline = tokio::time::Instant::now() + NOTICED_WITHIN;
    let mut seen = Vec::new();
    loop {
        match tokio::time::timeout_at(deadline, states.recv()).await {
            Ok(Some(state)) => {
                if seen.last() != Some(&state) {
                    seen.push(state.clone());
                }
                if state != "ACTIVE" {
                    break;
                }
            }
            Ok(None) => bail!("the watch of the mount ended; states seen {seen:?}"),
            Err(_) => bail!(
                "the mount stayed ACTIVE for {NOTICED_WITHIN:?} after Carrier2 in {pod} restarted \
                 without its config (states seen {seen:?})\n{}",
                configs(ns).await
            ),
        }
    }
    // ... and is whole again: every request reaches the shadow.
    bed.wait_state("restart", "ACTIVE").await?;
    until(
        &net,
        &[Kind::Plain; 20],
        "every answer from the shadow again",
        |_, a| shadow(a),
    )
    .await?;
    let config = support::mounts::exec(&pods, &pod, "echo", &["cat", "/tmp/config.yaml"]).await?;
    ensure!(
        config.contains("clusterUpstream"),
        "{pod} has no Carrier2 config forwarding to the shadow after the mount was whole again: {config}"
    );
    bed.delete_mount("restart").await
}
