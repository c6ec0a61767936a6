//! `make bench-mounts`: what bridge mounts cost on the test bed, with the
//! operator (release build) and the bundled carrier2mount.wasm. Prints
//! figures; asserts nothing about time.
//!
//! - one mount on a 3-replica Deployment, 10 rounds: create -> ACTIVE (p50,
//!   p99) and delete -> restored (p50: mount gone, every pod back on its
//!   original image and Ready);
//! - 50 mounts in 50 namespaces created at once, until all are ACTIVE;
//! - a burst of 200 mounts (`BENCH_MOUNTS_BURST`, 0 skips it) of 3-replica
//!   Deployments created at once, with the operator under the chart's
//!   limits (3 provider calls at once, 64 MiB each): until all are ACTIVE,
//!   the operator's peak RSS and CPU meanwhile, and their deletion until
//!   every target is restored;
//! - the operator's peak RSS and CPU seconds over the whole run.

use std::{
    collections::BTreeMap,
    process::Command,
    time::{Duration, Instant},
};

use anyhow::bail;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::{
    api::{apps::v1::Deployment, core::v1::Pod},
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams},
    runtime::{WatchStreamExt, watcher},
};
use pontoon::bridge_mount::{GefyraBridgeMount, crd::BridgeMountFields};
use pontoon_tests::{
    TestNamespace,
    bench::{BenchOperator, memory_kib, percentile},
    wait_for, wait_for_list,
};
use serde_json::json;

const ROUNDS: usize = 10;
const MANY: usize = 50;
/// Mounts of the burst, unless `BENCH_MOUNTS_BURST` says otherwise.
const BURST: usize = 200;
/// The chart's memory limit of the operator, which the burst must stay under.
const CHART_MEMORY_LIMIT_MIB: f64 = 256.0;
const CARRIER_IMAGE: &str = "quay.io/gefyra/carrier2:latest";
const APP_IMAGE: &str = "nginx:1.27";
const TIMEOUT: Duration = Duration::from_secs(180);

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let client = pontoon_tests::client().await?;
    install_crds(&client).await?;
    let gefyra = TestNamespace::new("bench-gefyra").await?;
    let ns = gefyra.name();
    let mut operator = BenchOperator::start(
        "bench-mounts",
        "carrier2mount",
        &["--namespace", ns, "--watch-namespace", ns],
    )
    .await?;
    let pid = operator.pid();

    let outcome = run(&gefyra).await;
    let burst_size = std::env::var("BENCH_MOUNTS_BURST")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(BURST);
    let burst = match &outcome {
        Ok(_) if burst_size > 0 => Some(burst(&gefyra, burst_size, pid).await),
        _ => None,
    };
    let usage = Usage::of(pid);
    operator.kill()?;
    let (create, delete, many) = outcome?;
    let burst = burst.transpose()?;
    let usage = usage?;

    println!();
    println!("one mount, 3-replica Deployment, {ROUNDS} rounds:");
    println!(
        "  create -> ACTIVE     p50 {:>7.3} s   p99 {:>7.3} s   (goal: p50 <= 1 s)",
        percentile(&create, 50),
        percentile(&create, 99)
    );
    println!(
        "  delete -> restored   p50 {:>7.3} s   p99 {:>7.3} s",
        percentile(&delete, 50),
        percentile(&delete, 99)
    );
    println!("{MANY} mounts in {MANY} namespaces (1-replica Deployments), created at once:");
    println!(
        "  all ACTIVE after     {:>7.3} s   (goal: <= 15 s)",
        many.as_secs_f64()
    );
    if let Some(b) = &burst {
        println!(
            "{} mounts of 3-replica Deployments created at once (--max-provider-calls 3, 64 MiB each):",
            b.mounts
        );
        println!(
            "  all ACTIVE after     {:>7.3} s   (goal: <= 30 s)",
            b.active.as_secs_f64()
        );
        println!(
            "  operator RSS         peak {:>6.1} MiB during the burst (limit in the chart: {CHART_MEMORY_LIMIT_MIB} MiB; goal: <= 64 MiB)",
            b.peak_rss_kib as f64 / 1024.0
        );
        println!(
            "  operator CPU         {:>7.2} s over {:.1} s: {:.2} cores on average (goal: under one)",
            b.cpu_seconds,
            b.active.as_secs_f64(),
            b.cpu_seconds / b.active.as_secs_f64().max(f64::EPSILON)
        );
        println!(
            "  all deleted and restored after {:>7.3} s (goal: <= 15 s; restored: mount gone, every pod on its original image and Ready)",
            b.restored.as_secs_f64()
        );
    }
    println!("operator process over the whole run:");
    println!(
        "  peak RSS             {:>7.1} MiB (goal: <= 64 MiB)",
        usage.peak_rss_kib as f64 / 1024.0
    );
    println!("  CPU                  {:>7.2} s", usage.cpu_seconds);
    Ok(())
}

type Figures = (Vec<Duration>, Vec<Duration>, Duration);

async fn run(gefyra: &TestNamespace) -> anyhow::Result<Figures> {
    let mounts: Api<GefyraBridgeMount> = gefyra.api();
    let one = TestNamespace::new("bench-one").await?;
    one.api::<Deployment>()
        .create(&PostParams::default(), &deployment("web", 3)?)
        .await?;
    settled(&one, 3).await?;

    let mut create = Vec::new();
    let mut delete = Vec::new();
    for round in 0..ROUNDS {
        let name = format!("web-{round}");
        let started = Instant::now();
        let active = tokio::spawn(until_active(mounts.clone(), vec![name.clone()]));
        mounts
            .create(
                &PostParams::default(),
                &mount(&name, one.name(), gefyra.name()),
            )
            .await?;
        active.await??;
        create.push(started.elapsed());

        let started = Instant::now();
        mounts.delete(&name, &DeleteParams::default()).await?;
        let gone = |m: Option<&GefyraBridgeMount>| m.is_none();
        wait_for(&mounts, &name, gone, TIMEOUT).await?;
        restored(&one, 3).await?;
        delete.push(started.elapsed());
        println!(
            "  round {round}: ACTIVE after {:.3} s, restored after {:.3} s",
            create[round].as_secs_f64(),
            delete[round].as_secs_f64()
        );
        // The restart of the restore rolls the pods: the next round starts from a settled Deployment.
        settled(&one, 3).await?;
    }

    let namespaces = targets("bench-many", MANY, 1).await?;
    let names: Vec<String> = (0..MANY).map(|i| format!("many-{i}")).collect();
    let active = tokio::spawn(until_active(mounts.clone(), names.clone()));
    let started = Instant::now();
    let creates = names.iter().zip(&namespaces).map(|(name, ns)| {
        let mounts = mounts.clone();
        let mount = mount(name, ns.name(), gefyra.name());
        async move { mounts.create(&PostParams::default(), &mount).await }
    });
    futures::future::try_join_all(creates).await?;
    active.await??;
    let many = started.elapsed();
    for name in &names {
        mounts.delete(name, &DeleteParams::default()).await?;
    }
    for name in &names {
        let gone = |m: Option<&GefyraBridgeMount>| m.is_none();
        wait_for(&mounts, name, gone, TIMEOUT).await?;
    }
    Ok((create, delete, many))
}

/// `count` namespaces `<prefix>-<i>`, each with a settled Deployment `web`
/// of `replicas` pods: the targets of mounts created at once.
async fn targets(prefix: &str, count: usize, replicas: i32) -> anyhow::Result<Vec<TestNamespace>> {
    let mut namespaces = Vec::new();
    for i in 0..count {
        let ns = TestNamespace::new(&format!("{prefix}-{i}")).await?;
        ns.api::<Deployment>()
            .create(&PostParams::default(), &deployment("web", replicas)?)
            .await?;
        namespaces.push(ns);
    }
    for ns in &namespaces {
        settled(ns, replicas).await?;
    }
    Ok(namespaces)
}

/// What the burst measured.
struct Burst {
    mounts: usize,
    active: Duration,
    restored: Duration,
    peak_rss_kib: u64,
    cpu_seconds: f64,
}

/// `count` mounts of 3-replica Deployments, one per namespace, created at
/// once; the operator's RSS sampled every 100 ms meanwhile.
async fn burst(gefyra: &TestNamespace, count: usize, pid: u32) -> anyhow::Result<Burst> {
    let mounts: Api<GefyraBridgeMount> = gefyra.api();
    let namespaces = targets("bench-burst", count, 3).await?;
    let names: Vec<String> = (0..count).map(|i| format!("burst-{i}")).collect();
    let sampling = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let sampler = {
        let sampling = sampling.clone();
        tokio::spawn(async move {
            let mut peak = 0;
            while sampling.load(std::sync::atomic::Ordering::Relaxed) {
                peak = peak.max(memory_kib(pid, "VmRSS:").unwrap_or(0));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            peak
        })
    };
    let cpu_before = Usage::of(pid)?.cpu_seconds;
    let active = tokio::spawn(until_active(mounts.clone(), names.clone()));
    let started = Instant::now();
    let creates = names.iter().zip(&namespaces).map(|(name, ns)| {
        let mounts = mounts.clone();
        let mount = mount(name, ns.name(), gefyra.name());
        async move { mounts.create(&PostParams::default(), &mount).await }
    });
    futures::future::try_join_all(creates).await?;
    active.await??;
    let active = started.elapsed();
    let cpu_seconds = Usage::of(pid)?.cpu_seconds - cpu_before;
    sampling.store(false, std::sync::atomic::Ordering::Relaxed);
    let peak_rss_kib = sampler.await?;

    let started = Instant::now();
    let deletes = names.iter().map(|name| {
        let mounts = mounts.clone();
        async move { mounts.delete(name, &DeleteParams::default()).await }
    });
    futures::future::try_join_all(deletes).await?;
    let gone = names.iter().map(|name| {
        let mounts = mounts.clone();
        async move {
            wait_for(
                &mounts,
                name,
                |m: Option<&GefyraBridgeMount>| m.is_none(),
                TIMEOUT,
            )
            .await
        }
    });
    futures::future::try_join_all(gone).await?;
    futures::future::try_join_all(namespaces.iter().map(|ns| restored(ns, 3))).await?;
    let restored = started.elapsed();
    Ok(Burst {
        mounts: count,
        active,
        restored,
        peak_rss_kib,
        cpu_seconds,
    })
}

fn deployment(name: &str, replicas: i32) -> anyhow::Result<Deployment> {
    Ok(serde_json::from_value(json!({
        "metadata": { "name": name, "labels": { "app": name } },
        "spec": {
            "replicas": replicas,
            "selector": { "matchLabels": { "app": name } },
            "template": {
                "metadata": { "labels": { "app": name } },
                "spec": { "containers": [{
                    "name": "app", "image": APP_IMAGE,
                    "ports": [{ "containerPort": 80, "name": "http" }]
                }] }
            }
        }
    }))?)
}

fn mount(name: &str, target_ns: &str, ns: &str) -> GefyraBridgeMount {
    GefyraBridgeMount {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            ..Default::default()
        },
        fields: BridgeMountFields {
            target_namespace: Some(target_ns.into()),
            target: Some("deployment/web".into()),
            target_container: Some("app".into()),
            provider: Some("carrier2mount".into()),
            ..Default::default()
        },
    }
}

/// Returns once every mount of `names` has been seen ACTIVE.
async fn until_active(mounts: Api<GefyraBridgeMount>, names: Vec<String>) -> anyhow::Result<()> {
    let mut waiting: BTreeMap<String, ()> = names.into_iter().map(|n| (n, ())).collect();
    let mut stream = std::pin::pin!(watcher(mounts, watcher::Config::default()).applied_objects());
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    while !waiting.is_empty() {
        match tokio::time::timeout_at(deadline, stream.try_next()).await {
            Ok(Ok(Some(m))) => {
                if m.fields.state.as_deref() == Some("ACTIVE") {
                    waiting.remove(&m.name_any());
                }
                if m.fields.state.as_deref() == Some("ERROR") {
                    bail!(
                        "mount {} went to ERROR: {:?}",
                        m.name_any(),
                        m.fields.status
                    );
                }
            }
            Ok(Ok(None)) => bail!("the watch of mounts ended"),
            Ok(Err(err)) => return Err(err.into()),
            Err(_) => bail!(
                "still not ACTIVE after {TIMEOUT:?}: {:?}",
                waiting.keys().collect::<Vec<_>>()
            ),
        }
    }
    Ok(())
}

fn app_image_ready(pod: &Pod, image: &str) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .all(|c| c.name != "app" || (c.image == image && c.ready))
        })
}

/// Every pod of the Deployment back on the original image, Ready, none left on Carrier2.
async fn restored(ns: &TestNamespace, replicas: usize) -> anyhow::Result<()> {
    wait_for_list(
        &ns.api::<Pod>(),
        "app=web",
        |pods| {
            let live: Vec<&Pod> = pods
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .collect();
            live.len() >= replicas
                && live
                    .iter()
                    .filter(|p| app_image_ready(p, APP_IMAGE))
                    .count()
                    >= replicas
                && !live.iter().any(|p| app_image_ready(p, CARRIER_IMAGE))
        },
        TIMEOUT,
    )
    .await?;
    Ok(())
}

/// The Deployment has exactly `replicas` pods, all updated and Ready.
async fn settled(ns: &TestNamespace, replicas: i32) -> anyhow::Result<()> {
    let deployments: Api<Deployment> = ns.api();
    let done = move |d: Option<&Deployment>| {
        d.and_then(|d| d.status.as_ref()).is_some_and(|s| {
            s.replicas == Some(replicas)
                && s.updated_replicas == Some(replicas)
                && s.ready_replicas == Some(replicas)
                && s.available_replicas == Some(replicas)
        })
    };
    wait_for(&deployments, "web", done, TIMEOUT).await?;
    let pods: Api<Pod> = ns.api();
    let expected = usize::try_from(replicas)?;
    wait_for_list(
        &pods,
        "app=web",
        |ps| ps.len() == expected && ps.iter().all(|p| app_image_ready(p, APP_IMAGE)),
        TIMEOUT,
    )
    .await?;
    Ok(())
}

async fn install_crds(client: &Client) -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in pontoon::crds::all()? {
        crds.patch(
            &crd.name_any(),
            &PatchParams::apply("bench-mounts").force(),
            &Patch::Apply(&crd),
        )
        .await?;
    }
    let mut established = futures::stream::iter(pontoon::crds::all()?)
        .then(|crd| {
            let crds = crds.clone();
            async move {
                let ok = |c: Option<&CustomResourceDefinition>| {
                    c.and_then(|c| c.status.as_ref())
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|cs| {
                            cs.iter()
                                .any(|c| c.type_ == "Established" && c.status == "True")
                        })
                };
                wait_for(&crds, &crd.name_any(), ok, TIMEOUT).await
            }
        })
        .boxed();
    while let Some(result) = established.next().await {
        result?;
    }
    Ok(())
}

/// Peak resident memory and CPU time of a process, from /proc.
struct Usage {
    peak_rss_kib: u64,
    cpu_seconds: f64,
}

impl Usage {
    fn of(pid: u32) -> anyhow::Result<Self> {
        let peak_rss_kib = memory_kib(pid, "VmHWM:")?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
        // Fields after the command name (which may contain spaces) start at `)`.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.split_whitespace().collect())
            .unwrap_or_default();
        // utime and stime are fields 14 and 15 of stat: indices 11 and 12 after `)`.
        let ticks: u64 = [11, 12]
            .iter()
            .filter_map(|&i| fields.get(i).and_then(|v| v.parse::<u64>().ok()))
            .sum();
        let per_second = clock_ticks_per_second();
        Ok(Self {
            peak_rss_kib,
            cpu_seconds: ticks as f64 / per_second,
        })
    }
}

fn clock_ticks_per_second() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}
