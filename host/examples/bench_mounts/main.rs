//! `make bench-mounts`: what bridge mounts cost on the test bed, with the
//! operator (release build) and the bundled carrier2mount.wasm. Prints
//! figures; asserts nothing about time.
//!
//! - one mount on a 3-replica Deployment, 10 rounds: create -> ACTIVE (p50,
//!   p99) and delete -> restored (p50: mount gone, every pod back on its
//!   original image and Ready), and where that time goes: each step as the
//!   bench's own watches see it (mount states, the shadow Deployment, the
//!   restore records, the pods' images, the provider's Events), p50 since
//!   the create or the delete;
//! - 50 mounts in 50 namespaces created at once, until all are ACTIVE;
//! - bridges, where the test bed runs process pods (as root): a mount of a
//!   3-replica Deployment of echo servers, then 10 rounds of a GefyraBridge
//!   created (until the first request with its header, sent through the
//!   workload's Service, is answered by the developer's pod) and deleted
//!   (until such a request is answered by the shadow again);
//! - the test bed's floor for the burst (`floor.rs`; `BENCH_MOUNTS_FLOOR=0`
//!   skips it): the same targets given only the writes and one exec a pod
//!   that a mount cannot do without, with no operator, so that the burst's
//!   figures can be read as floor + operator;
//! - last, a burst of 200 mounts (`BENCH_MOUNTS_BURST`, 0 skips it) of
//!   3-replica Deployments created at once, with the operator under the
//!   chart's limits (3 provider calls at once, 64 MiB each, unless
//!   `PONTOON_MAX_PROVIDER_CALLS` and `PONTOON_PROVIDER_MEMORY` say
//!   otherwise, as they do for the operator): until all are
//!   ACTIVE, the operator's peak RSS and CPU meanwhile, and their deletion
//!   until every target is restored;
//! - the operator's peak RSS and CPU seconds over the whole run.

use std::{
    collections::{BTreeMap, BTreeSet},
    process::Command,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use anyhow::bail;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::{
    api::{
        apps::v1::Deployment,
        core::v1::{ConfigMap, Pod},
        events::v1::Event as KubeEvent,
    },
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams},
    runtime::{WatchStreamExt, watcher},
};
use pontoon::bridge_mount::{GefyraBridge, GefyraBridgeMount, crd::BridgeMountFields};
use pontoon_tests::{
    TestNamespace,
    bench::{
        BenchOperator, CpuByCommand, Metrics, ProcessTicks, machine_cpu, memory_kib, percentile,
    },
    traffic::{Request, TestbedNet, echo_container},
    wait_for, wait_for_list,
};
use serde_json::json;

mod floor;
mod view;

use view::View;

const ROUNDS: usize = 10;
const MANY: usize = 50;
/// Mounts of the burst, unless `BENCH_MOUNTS_BURST` says otherwise.
const BURST: usize = 200;
/// The chart's memory limit of the operator, which the burst must stay under.
const CHART_MEMORY_LIMIT_MIB: f64 = 256.0;
/// Provider calls that run at once, the memory each may take and what they
/// may take together (MiB): the operator's defaults (the chart's
/// `sandbox.concurrentCalls`, `sandbox.memoryMiB`, `sandbox.memoryBudgetMiB`),
/// unless the environment the operator inherits sets them
/// (`PONTOON_MAX_PROVIDER_CALLS`, `PONTOON_PROVIDER_MEMORY`,
/// `PONTOON_PROVIDER_MEMORY_BUDGET`).
fn sandbox() -> (usize, usize, usize) {
    let env = |name: &str, default: usize| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    (
        env("PONTOON_MAX_PROVIDER_CALLS", 6),
        env("PONTOON_PROVIDER_MEMORY", 64),
        env("PONTOON_PROVIDER_MEMORY_BUDGET", 192),
    )
}
const CARRIER_IMAGE: &str = "quay.io/gefyra/carrier2:latest";
const APP_IMAGE: &str = "nginx:1.27";
const TIMEOUT: Duration = Duration::from_secs(180);

/// Milliseconds one core takes for a fixed piece of arithmetic. The figures
/// of two runs compare only as far as the machine ran alike: the test bed's
/// CPU for the same burst moved by a quarter between runs an hour apart on
/// the same machine, so the bench prints this with its figures.
fn machine_pace() -> f64 {
    let started = Instant::now();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..300_000_000u64 {
        // xorshift: no memory, nothing the optimiser can fold away.
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x = std::hint::black_box(x);
    }
    std::hint::black_box(x);
    started.elapsed().as_secs_f64() * 1000.0
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let pace = machine_pace();
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

    let outcome = run(&gefyra, &operator).await;
    let burst_size = std::env::var("BENCH_MOUNTS_BURST")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(BURST);
    // Bridges before the burst: after it the test bed is still tearing down
    // 600 pods and 200 namespaces for a while, and a bridge's latency there
    // measures that backlog (0.83-0.87 s p50 when they ran after it), not
    // the operator. Every timed phase starts on a quiet test bed.
    let bridges = match &outcome {
        Ok(_) => match TestbedNet::of_testbed() {
            Ok(net) => Some(bridge_rounds(&gefyra, &net).await),
            Err(reason) => {
                println!("bridges: not measured: {reason}");
                None
            }
        },
        Err(_) => None,
    };
    let with_floor = std::env::var("BENCH_MOUNTS_FLOOR").map_or(true, |v| v != "0");
    let floor = match &outcome {
        Ok(_) if burst_size > 0 && with_floor => Some(floor::floor(&gefyra, burst_size).await),
        _ => None,
    };
    let burst = match &outcome {
        Ok(_) if burst_size > 0 => Some(burst(&gefyra, burst_size, &operator).await),
        _ => None,
    };
    let usage = Usage::of(pid);
    operator.kill()?;
    let bridges = bridges.transpose()?;
    let (create, delete, many, timeline, calls) = outcome?;
    let floor = floor.transpose()?;
    let burst = burst.transpose()?;
    let usage = usage?;

    println!();
    println!(
        "machine pace: {pace:.0} ms before the run (one core, a fixed loop of arithmetic, the test bed idle; compare figures of runs only at a like pace)"
    );
    println!(
        "one mount, 3-replica Deployment, {ROUNDS} rounds (each on new pods, so each Carrier2 starts without a config, as after a kubelet restart):"
    );
    println!(
        "  create -> ACTIVE     p50 {:>7.3} s   p99 {:>7.3} s   (goal: p50 <= 0.5 s; from the create call's start until the bench's watch sees state ACTIVE)",
        percentile(&create, 50),
        percentile(&create, 99)
    );
    timeline.print(&CREATE_STEPS, |r| r.created);
    println!(
        "  delete -> restored   p50 {:>7.3} s   p99 {:>7.3} s   (goal: p50 <= 0.25 s; restored: the mount gone, so its finalizer's uninstall deleted the shadow Deployment and Service, and every pod of the target on its original image and Ready, none on Carrier2)",
        percentile(&delete, 50),
        percentile(&delete, 99)
    );
    timeline.print(&DELETE_STEPS, |r| r.deleted);
    println!("  provider calls a round (create to restored), by step: calls, mean time a call");
    print_steps(&calls, ROUNDS);
    println!("{MANY} mounts in {MANY} namespaces (1-replica Deployments), created at once:");
    println!(
        "  all ACTIVE after     {:>7.3} s   (goal: <= 15 s)",
        many.as_secs_f64()
    );
    if let Some(f) = &floor {
        println!(
            "the test bed's floor for the burst: {} targets like its own, no operator; sent at once (32 in flight), only the writes a mount cannot do without and one exec a pod (see floor.rs):",
            f.mounts
        );
        println!(
            "  shadows Ready, pods on Carrier2 and exec'd after {:>7.3} s (the burst's ACTIVE less every status write, Event, read and check of the operator's)",
            f.create.took.as_secs_f64()
        );
        print_cpu("until then", &f.create.cpu);
        print_requests("until then", &f.create.requests, f.mounts);
        println!(
            "  restored after       {:>7.3} s (the burst's restored less the mounts' own deletion and the operator's reads, status and Events)",
            f.restore.took.as_secs_f64()
        );
        print_cpu("until restored", &f.restore.cpu);
        print_requests("until restored", &f.restore.requests, f.mounts);
    }
    if let Some(b) = &burst {
        let (turns, memory_mib, budget_mib) = sandbox();
        println!(
            "{} mounts of 3-replica Deployments created at once (--max-provider-calls {turns}, --provider-memory {memory_mib}, --provider-memory-budget {budget_mib}: {} MiB of the chart's {CHART_MEMORY_LIMIT_MIB} MiB with the operator's 64):",
            b.mounts,
            budget_mib + 64
        );
        println!(
            "  all ACTIVE after     {:>7.3} s   (goal: <= 30 s)",
            b.active.as_secs_f64()
        );
        println!(
            "  operator RSS         peak {:>6.1} MiB during the burst (limit in the chart: {CHART_MEMORY_LIMIT_MIB} MiB; goal: <= 64 MiB; {:.1} MiB at most in the run before it)",
            b.peak_rss_kib as f64 / 1024.0,
            b.peak_before_kib as f64 / 1024.0
        );
        println!(
            "  operator CPU         {:>7.2} s over {:.1} s: {:.2} cores on average (goal: under one)",
            b.cpu_seconds,
            b.active.as_secs_f64(),
            b.cpu_seconds / b.active.as_secs_f64().max(f64::EPSILON)
        );
        println!(
            "  provider calls       {:>7.0} calls, {:.1} s in all: {:.0}% of the {turns} turns busy on average; {:.0} ms a call (the turns bound the pace when near 100%)",
            b.calls,
            b.call_seconds,
            100.0 * b.call_seconds / (turns as f64 * b.active.as_secs_f64()).max(f64::EPSILON),
            1000.0 * b.call_seconds / b.calls.max(1.0)
        );
        println!(
            "  provider memory      {:>7.1} MiB at most in one call (each may take {memory_mib} MiB, all at once {budget_mib} MiB)",
            b.call_memory_peak / (1024.0 * 1024.0)
        );
        println!(
            "  machine CPU          {:>7.0}% of its cores busy (test bed, bench and operator together; the test bed bounds the pace when near 100%)",
            100.0 * b.machine_busy
        );
        print_cpu("until all ACTIVE", &b.create_cpu);
        print_requests("until all ACTIVE", &b.create_requests, b.mounts);
        println!(
            "  all deleted and restored after {:>7.3} s (goal: <= 15 s; restored: mount gone, every pod on its original image and Ready)",
            b.restored.as_secs_f64()
        );
        println!(
            "  operator RSS         peak {:>6.1} MiB during the deletion (goal: <= 64 MiB)",
            b.restore_peak_rss_kib as f64 / 1024.0
        );
        print_cpu("deleted until all restored", &b.delete_cpu);
        print_requests("deleted until all restored", &b.delete_requests, b.mounts);
        for (phase, steps) in [
            ("until all ACTIVE", &b.create_steps),
            ("deleted until all restored", &b.delete_steps),
        ] {
            println!("  provider calls a mount, {phase}, by step: calls, mean time a call");
            print_steps(steps, b.mounts);
        }
    }
    if let Some((created, deleted)) = &bridges {
        println!("bridges on a mount of a 3-replica Deployment of echo servers, {ROUNDS} rounds:");
        println!(
            "  bridge created -> first request routed to the developer   p50 {:>7.3} s   p99 {:>7.3} s   (goal: p50 <= 0.5 s; from the create call's start until a request with the bridge's header, sent through the workload's Service every 10 ms, is answered by the developer's pod)",
            percentile(created, 50),
            percentile(created, 99)
        );
        println!(
            "  bridge deleted -> traffic back to the shadow              p50 {:>7.3} s   p99 {:>7.3} s   (goal: p50 <= 0.5 s; until ten such requests in a row, each on a connection of its own, are all answered by shadow pods: every pod of the target has dropped the bridge)",
            percentile(deleted, 50),
            percentile(deleted, 99)
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

type Figures = (Vec<Duration>, Vec<Duration>, Duration, Timeline, Calls);

/// The provider calls of the single-mount rounds, by step: (step, calls,
/// seconds), over all rounds.
type Calls = Vec<(String, f64, f64)>;

/// The steps carrier2mount answers, as the call metrics name them.
const PROVIDER_STEPS: [&str; 7] = [
    "validate",
    "target-exists",
    "prepare",
    "prepared",
    "install",
    "ready",
    "uninstall",
];

/// The processes that took the most CPU in a phase of the burst (seconds
/// of one core; a process's reaped children count as its own: kwok's include
/// every command it ran for an exec).
fn print_cpu(phase: &str, rows: &[(String, f64)]) {
    let total: f64 = rows.iter().map(|(_, s)| s).sum();
    let top: Vec<String> = rows
        .iter()
        .take(7)
        .map(|(command, seconds)| format!("{command} {seconds:.1}"))
        .collect();
    println!(
        "  CPU by process, {phase}: {total:.1} s in all; {} (seconds of one core)",
        top.join(", ")
    );
}

/// The API server's request counter, and the labels it is broken down by.
const API_REQUESTS: &str = "apiserver_request_total";
const REQUEST_KEYS: [&str; 3] = ["verb", "resource", "subresource"];

/// The API server's requests in a phase of the burst (from every client:
/// operator, controllers, kwok, scheduler, the bench), the most first, and
/// how many that is a mount.
fn print_requests(phase: &str, rows: &[(Vec<String>, f64)], mounts: usize) {
    let total: f64 = rows.iter().map(|(_, n)| n).sum();
    let top: Vec<String> = rows
        .iter()
        .take(12)
        .map(|(key, n)| {
            let what = key
                .iter()
                .filter(|k| !k.is_empty())
                .cloned()
                .collect::<Vec<_>>();
            format!("{} {n:.0}", what.join(" "))
        })
        .collect();
    println!(
        "  API requests, {phase}: {total:.0} in all ({:.1} a mount, every client); {}",
        total / mounts.max(1) as f64,
        top.join(", ")
    );
}

/// One line per step: its calls per `per` (rounds or mounts), and the mean
/// time of one.
fn print_steps(steps: &Calls, per: usize) {
    for (step, count, seconds) in steps {
        println!(
            "    {step:<14} {:>5.1}   {:>6.1} ms",
            count / per as f64,
            1000.0 * seconds / count.max(1.0)
        );
    }
}

fn calls_between(before: &Metrics, after: &Metrics) -> Calls {
    PROVIDER_STEPS
        .iter()
        .map(|step| {
            let labels = [r#"module="carrier2mount""#, &format!(r#"step="{step}""#)];
            let delta = |name: &str| after.since(before, name, &labels);
            (
                step.to_string(),
                delta("pontoon_provider_call_seconds_count"),
                delta("pontoon_provider_call_seconds_sum"),
            )
        })
        .filter(|(_, calls, _)| *calls > 0.0)
        .collect()
}

async fn run(gefyra: &TestNamespace, operator: &BenchOperator) -> anyhow::Result<Figures> {
    let mounts: Api<GefyraBridgeMount> = gefyra.api();
    let one = TestNamespace::new("bench-one").await?;
    one.api::<Deployment>()
        .create(&PostParams::default(), &deployment("web", 3)?)
        .await?;
    settled(&one, 3).await?;
    let timeline = Timeline::default();
    timeline.watch(gefyra, &one);

    let mut create = Vec::new();
    let mut delete = Vec::new();
    let metrics_before = operator.metrics()?;
    for round in 0..ROUNDS {
        let name = format!("web-{round}");
        let active = tokio::spawn(until_active(mounts.clone(), vec![name.clone()]));
        let started = timeline.begin(&name);
        mounts
            .create(
                &PostParams::default(),
                &mount(&name, one.name(), gefyra.name()),
            )
            .await?;
        active.await??;
        create.push(started.elapsed());

        let started = timeline.deleting();
        mounts.delete(&name, &DeleteParams::default()).await?;
        let gone = |m: Option<&GefyraBridgeMount>| m.is_none();
        wait_for(&mounts, &name, gone, TIMEOUT).await?;
        restored(&one, 3).await?;
        delete.push(started.elapsed());
        timeline.mark(Step::Restored);
        println!(
            "  round {round}: ACTIVE after {:.3} s, restored after {:.3} s",
            create[round].as_secs_f64(),
            delete[round].as_secs_f64()
        );
        // The restore gives the same pods their image back in place. A
        // kubelet gives a restarted container a fresh /tmp, the test bed's
        // fake pods keep theirs, so the next round's Carrier2 would find
        // this round's config already there: each round gets new pods.
        fresh_pods(&one, 3).await?;
    }
    let calls = calls_between(&metrics_before, &operator.metrics()?);

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
    Ok((create, delete, many, timeline, calls))
}

/// What a round of the one-mount run goes through, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Step {
    Validated,
    ShadowCreated,
    ShadowReady,
    Installing,
    RecordsSaved,
    PodsPatched,
    CarrierRunning,
    ConfigCommitted,
    Active,
    ShadowGone,
    PodsPatchedBack,
    MountGone,
    Restored,
}

/// The steps after a create, as printed.
const CREATE_STEPS: [(Step, &str); 9] = [
    (Step::Validated, "PREPARING (validated)"),
    (Step::ShadowCreated, "shadow Deployment created"),
    (Step::ShadowReady, "shadow Ready"),
    (Step::Installing, "INSTALLING"),
    (
        Step::RecordsSaved,
        "restore records of all 3 pods in the ConfigMap",
    ),
    (Step::PodsPatched, "all 3 pods patched to Carrier2"),
    (Step::CarrierRunning, "all 3 restarted on Carrier2"),
    (
        Step::ConfigCommitted,
        "Carrier2 config committed in all 3 (exec, Events)",
    ),
    (Step::Active, "ACTIVE"),
];

/// The steps after a delete, as printed.
const DELETE_STEPS: [(Step, &str); 4] = [
    (Step::ShadowGone, "shadow Deployment gone"),
    (
        Step::PodsPatchedBack,
        "all 3 pods patched back to the original image",
    ),
    (Step::MountGone, "mount gone (finalizer done)"),
    (
        Step::Restored,
        "restored (every pod on its original image and Ready)",
    ),
];

/// One round as the watches saw it.
#[derive(Default)]
struct Round {
    mount: String,
    created: Option<Instant>,
    deleted: Option<Instant>,
    steps: BTreeMap<Step, Instant>,
    patched: BTreeSet<String>,
    running: BTreeSet<String>,
    back: BTreeSet<String>,
    /// The pods CarrierConfigured Events named.
    configured: BTreeSet<String>,
}

impl Round {
    /// Records `step` at its first sighting.
    fn mark(&mut self, step: Step) {
        self.steps.entry(step).or_insert_with(Instant::now);
    }

    /// Adds `pod` to `set`; once all 3 are in it, `step` is reached.
    fn count(set: &mut BTreeSet<String>, pod: String) -> bool {
        set.insert(pod);
        set.len() >= 3
    }

    fn saw_pod(&mut self, pod: &Pod) {
        let name = pod.name_any();
        let spec_image = pod
            .spec
            .iter()
            .flat_map(|s| &s.containers)
            .find(|c| c.name == "app")
            .and_then(|c| c.image.clone())
            .unwrap_or_default();
        if self.deleted.is_none() {
            if spec_image == CARRIER_IMAGE && Self::count(&mut self.patched, name.clone()) {
                self.mark(Step::PodsPatched);
            }
            if app_image_ready(pod, CARRIER_IMAGE) && Self::count(&mut self.running, name) {
                self.mark(Step::CarrierRunning);
            }
        } else if spec_image == APP_IMAGE
            && self.patched.contains(&name)
            && Self::count(&mut self.back, name)
        {
            self.mark(Step::PodsPatchedBack);
        }
    }
}

/// Each round's steps, first seen by watches running for the whole run.
#[derive(Clone, Default)]
struct Timeline(Arc<Mutex<Vec<Round>>>);

impl Timeline {
    fn with<T>(&self, f: impl FnOnce(&mut Round) -> T) -> Option<T> {
        #[allow(clippy::unwrap_used)]
        let mut rounds = self.0.lock().unwrap();
        rounds.last_mut().map(f)
    }

    /// A round of `mount` starts now.
    fn begin(&self, mount: &str) -> Instant {
        let now = Instant::now();
        #[allow(clippy::unwrap_used)]
        self.0.lock().unwrap().push(Round {
            mount: mount.into(),
            created: Some(now),
            ..Round::default()
        });
        now
    }

    /// The round's mount is deleted now.
    fn deleting(&self) -> Instant {
        let now = Instant::now();
        self.with(|r| r.deleted = Some(now));
        now
    }

    fn mark(&self, step: Step) {
        self.with(|r| r.mark(step));
    }

    /// Watches the mounts in `gefyra` (with the restore ConfigMap and the
    /// provider's Events there) and the target's shadow and pods in `target`.
    fn watch(&self, gefyra: &TestNamespace, target: &TestNamespace) {
        let config = watcher::Config::default;
        let t = self.clone();
        tokio::spawn(
            watcher(gefyra.api::<GefyraBridgeMount>(), config()).for_each(move |event| {
                t.with(|r| match event {
                    Ok(watcher::Event::Apply(m) | watcher::Event::InitApply(m))
                        if m.name_any() == r.mount =>
                    {
                        match m.fields.state.as_deref() {
                            Some("PREPARING") => r.mark(Step::Validated),
                            Some("INSTALLING") => r.mark(Step::Installing),
                            Some("ACTIVE") => r.mark(Step::Active),
                            _ => {}
                        }
                    }
                    Ok(watcher::Event::Delete(m)) if m.name_any() == r.mount => {
                        r.mark(Step::MountGone);
                    }
                    _ => {}
                });
                std::future::ready(())
            }),
        );
        let t = self.clone();
        tokio::spawn(
            watcher(target.api::<Deployment>(), config()).for_each(move |event| {
                t.with(|r| match event {
                    Ok(watcher::Event::Apply(d))
                        if d.name_any() == "web-gefyra" && r.deleted.is_none() =>
                    {
                        r.mark(Step::ShadowCreated);
                        let ready = d.status.as_ref().and_then(|s| s.ready_replicas);
                        if ready.unwrap_or_default() >= 1 {
                            r.mark(Step::ShadowReady);
                        }
                    }
                    Ok(watcher::Event::Delete(d)) if d.name_any() == "web-gefyra" => {
                        r.mark(Step::ShadowGone);
                    }
                    _ => {}
                });
                std::future::ready(())
            }),
        );
        let t = self.clone();
        tokio::spawn(
            watcher(target.api::<Pod>(), config().labels("app=web")).for_each(move |event| {
                if let Ok(watcher::Event::Apply(pod)) = event {
                    t.with(|r| r.saw_pod(&pod));
                }
                std::future::ready(())
            }),
        );
        let t = self.clone();
        let prefix = format!("{}.", target.name());
        tokio::spawn(
            watcher(gefyra.api::<ConfigMap>(), config()).for_each(move |event| {
                if let Ok(watcher::Event::Apply(cm)) = event {
                    let records = cm
                        .data
                        .iter()
                        .flat_map(|d| d.keys())
                        .filter(|k| k.starts_with(&prefix))
                        .count();
                    t.with(|r| {
                        if records >= 3 && r.deleted.is_none() {
                            r.mark(Step::RecordsSaved);
                        }
                    });
                }
                std::future::ready(())
            }),
        );
        let t = self.clone();
        tokio::spawn(
            watcher(gefyra.api::<KubeEvent>(), config()).for_each(move |event| {
                if let Ok(watcher::Event::Apply(e)) = event
                    && e.reason.as_deref() == Some("CarrierConfigured")
                {
                    // One Event a call, naming the pods whose Carrier2
                    // took its config. The recorder folds a later call's
                    // Event of the same reason into the first one's series,
                    // keeping the first note: each folded one stands for at
                    // least one more pod.
                    let folded = e.series.as_ref().map_or(0, |s| s.count.max(1) - 1);
                    let about = e.regarding.as_ref().and_then(|o| o.name.clone());
                    let note = e.note.clone().unwrap_or_default();
                    t.with(|r| {
                        if about.as_deref() != Some(r.mount.as_str()) {
                            return;
                        }
                        for pod in named_pods(&note) {
                            Round::count(&mut r.configured, pod);
                        }
                        if r.configured.len() + usize::try_from(folded).unwrap_or(0) >= 3 {
                            r.mark(Step::ConfigCommitted);
                        }
                    });
                }
                std::future::ready(())
            }),
        );
    }

    /// Prints the p50 over the rounds of each of `steps`, since the time
    /// `since` picks (the create, or the delete).
    fn print(&self, steps: &[(Step, &str)], since: impl Fn(&Round) -> Option<Instant>) {
        #[allow(clippy::unwrap_used)]
        let rounds = self.0.lock().unwrap();
        println!("    where it goes, p50 since then (s), as the bench's watches saw each step:");
        for (step, label) in steps {
            let times: Vec<Duration> = rounds
                .iter()
                .filter_map(|r| Some(r.steps.get(step)?.duration_since(since(r)?)))
                .collect();
            if times.is_empty() {
                println!("      {label:<56} not seen");
            } else {
                println!(
                    "      {label:<56} {:>7.3}   ({} of {} rounds)",
                    percentile(&times, 50),
                    times.len(),
                    rounds.len()
                );
            }
        }
    }
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
    /// The operator's peak RSS until all were ACTIVE, and from the deletes
    /// until all were restored.
    peak_rss_kib: u64,
    restore_peak_rss_kib: u64,
    /// Its peak RSS over the run before the burst (VmHWM).
    peak_before_kib: u64,
    cpu_seconds: f64,
    /// Provider calls until all were ACTIVE, and the seconds they ran
    /// (each holding one of the turns).
    calls: f64,
    call_seconds: f64,
    /// The most linear memory one carrier2mount call used.
    call_memory_peak: f64,
    /// The whole machine's CPU meanwhile: the share of all its cores busy
    /// (the test bed, the bench and the operator together).
    machine_busy: f64,
    /// The provider calls by step until all were ACTIVE, and from the
    /// deletes until all were restored.
    create_steps: Calls,
    delete_steps: Calls,
    /// CPU seconds by process until all were ACTIVE, and from the deletes
    /// until all were restored.
    create_cpu: Vec<(String, f64)>,
    delete_cpu: Vec<(String, f64)>,
    /// API server requests (all clients) by verb, resource and subresource
    /// in the same two phases.
    create_requests: Vec<(Vec<String>, f64)>,
    delete_requests: Vec<(Vec<String>, f64)>,
}

/// `count` mounts of 3-replica Deployments, one per namespace, created at
/// once; the operator's RSS sampled every 100 ms meanwhile.
async fn burst(
    gefyra: &TestNamespace,
    count: usize,
    operator: &BenchOperator,
) -> anyhow::Result<Burst> {
    let pid = operator.pid();
    let mounts: Api<GefyraBridgeMount> = gefyra.api();
    let namespaces = targets("bench-burst", count, 3).await?;
    let names: Vec<String> = (0..count).map(|i| format!("burst-{i}")).collect();
    let client = pontoon_tests::client().await?;
    let peak_before_kib = memory_kib(pid, "VmHWM:")?;
    let rss = RssSampler::start(pid);
    let cpu_before = Usage::of(pid)?.cpu_seconds;
    let machine_before = machine_cpu()?;
    let processes_before = CpuByCommand::now();
    let metrics_before = operator.metrics()?;
    let requests_before = Metrics::of_api_server(&client).await?;
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
    let machine_after = machine_cpu()?;
    let ticks = clock_ticks_per_second();
    let create_cpu = CpuByCommand::now().since(&processes_before, ticks);
    let create_requests = Metrics::of_api_server(&client).await?.growth_by(
        &requests_before,
        API_REQUESTS,
        &REQUEST_KEYS,
    );
    let metrics_after = operator.metrics()?;
    let machine_busy = (machine_after.0 - machine_before.0) as f64
        / (machine_after.1 - machine_before.1).max(1) as f64;
    let carrier = [r#"module="carrier2mount""#];
    let delta = |name: &str| metrics_after.since(&metrics_before, name, &carrier);
    let calls = delta("pontoon_provider_call_seconds_count");
    let call_seconds = delta("pontoon_provider_call_seconds_sum");
    let call_memory_peak = metrics_after.sum("pontoon_provider_memory_peak_bytes", &carrier);
    let peak_rss_kib = rss.take();

    let create_steps = calls_between(&metrics_before, &metrics_after);

    // Watched from before the deletes, with one watch of the mounts and one
    // of the targets' pods, as the floor waits for its restore.
    let left = View::start(mounts.clone(), watcher::Config::default()).await?;
    let pods = View::start(
        Api::<Pod>::all(client.clone()),
        watcher::Config::default().labels("app=web"),
    )
    .await?;
    let metrics_before = operator.metrics()?;
    let processes_before = CpuByCommand::now();
    let requests_before = Metrics::of_api_server(&client).await?;
    let started = Instant::now();
    let deletes = names.iter().map(|name| {
        let mounts = mounts.clone();
        async move { mounts.delete(name, &DeleteParams::default()).await }
    });
    futures::future::try_join_all(deletes).await?;
    let burst: BTreeSet<&str> = names.iter().map(String::as_str).collect();
    left.until(TIMEOUT, |mounts| {
        let left = mounts
            .iter()
            .filter(|m| burst.contains(m.name_any().as_str()))
            .count();
        (left > 0).then(|| format!("{left} mounts of the burst not gone"))
    })
    .await?;
    let targets: BTreeSet<&str> = namespaces.iter().map(|ns| ns.name()).collect();
    pods.until(TIMEOUT, |pods| {
        // One pass over the pods a look, by target, as the floor's.
        let mut live: BTreeMap<&str, Vec<&Pod>> = BTreeMap::new();
        for pod in pods
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
        {
            if let Some(ns) = pod.metadata.namespace.as_deref()
                && targets.contains(ns)
            {
                live.entry(ns).or_default().push(pod);
            }
        }
        let lagging = targets
            .iter()
            .filter(|ns| !is_restored(live.get(**ns).map_or(&[][..], Vec::as_slice), 3))
            .count();
        (lagging > 0).then(|| format!("{lagging} targets of the burst not restored"))
    })
    .await?;
    let restored = started.elapsed();
    let restore_peak_rss_kib = rss.take();
    let delete_cpu = CpuByCommand::now().since(&processes_before, ticks);
    let delete_requests = Metrics::of_api_server(&client).await?.growth_by(
        &requests_before,
        API_REQUESTS,
        &REQUEST_KEYS,
    );
    let delete_steps = calls_between(&metrics_before, &operator.metrics()?);
    Ok(Burst {
        mounts: count,
        active,
        restored,
        peak_before_kib,
        peak_rss_kib,
        restore_peak_rss_kib,
        cpu_seconds,
        calls,
        call_seconds,
        call_memory_peak,
        machine_busy,
        create_steps,
        delete_steps,
        create_cpu,
        delete_cpu,
        create_requests,
        delete_requests,
    })
}

/// The operator's RSS, looked at every 100 ms for as long as it lives.
struct RssSampler {
    /// The highest RSS (KiB) seen since the last `take`.
    peak: Arc<std::sync::atomic::AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl RssSampler {
    fn start(pid: u32) -> Self {
        let peak = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let seen = peak.clone();
        let task = tokio::spawn(async move {
            loop {
                let rss = memory_kib(pid, "VmRSS:").unwrap_or(0);
                seen.fetch_max(rss, std::sync::atomic::Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        Self { peak, task }
    }

    /// The peak since the last take (or the start); the next one starts
    /// from the RSS now.
    fn take(&self) -> u64 {
        self.peak.swap(0, std::sync::atomic::Ordering::Relaxed)
    }
}

impl Drop for RssSampler {
    fn drop(&mut self) {
        self.task.abort();
    }
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
            is_restored(&live, replicas)
        },
        TIMEOUT,
    )
    .await?;
    Ok(())
}

/// `live` (a target's pods not being deleted): `replicas` of them on the
/// original image and Ready, none on Carrier2.
fn is_restored(live: &[&Pod], replicas: usize) -> bool {
    live.len() >= replicas
        && live
            .iter()
            .filter(|p| app_image_ready(p, APP_IMAGE))
            .count()
            >= replicas
        && !live.iter().any(|p| app_image_ready(p, CARRIER_IMAGE))
}

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

/// The pods an Event about pods names: "Pods `a`, `b` and `c` in
/// namespace ...".
fn named_pods(note: &str) -> Vec<String> {
    let names = note.split(" in namespace ").next().unwrap_or_default();
    names
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// Replaces the Deployment's pods with new ones and waits until exactly
/// `replicas` new pods run the app and are Ready.
async fn fresh_pods(ns: &TestNamespace, replicas: usize) -> anyhow::Result<()> {
    let pods: Api<Pod> = ns.api();
    let selector = ListParams::default().labels("app=web");
    let old: BTreeSet<String> = pods
        .list(&selector)
        .await?
        .items
        .iter()
        .filter_map(|p| p.metadata.uid.clone())
        .collect();
    pods.delete_collection(&DeleteParams::default(), &selector)
        .await?;
    wait_for_list(
        &pods,
        "app=web",
        |ps| {
            ps.len() == replicas
                && ps.iter().all(|p| {
                    p.metadata
                        .uid
                        .as_ref()
                        .is_some_and(|uid| !old.contains(uid))
                        && app_image_ready(p, APP_IMAGE)
                })
        },
        TIMEOUT,
    )
    .await?;
    settled(ns, i32::try_from(replicas)?).await
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
        let ticks = ProcessTicks::of(pid)?.own;
        Ok(Self {
            peak_rss_kib,
            cpu_seconds: ticks as f64 / clock_ticks_per_second(),
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

/// Bridge rounds: (created -> routed, deleted -> back at the shadow).
async fn bridge_rounds(
    gefyra: &TestNamespace,
    net: &TestbedNet,
) -> anyhow::Result<(Vec<Duration>, Vec<Duration>)> {
    const PORT: u16 = 3000;
    let ns = TestNamespace::new("bench-bridges").await?;
    let app = |name: &str, replicas: usize| -> anyhow::Result<Deployment> {
        Ok(serde_json::from_value(json!({
            "metadata": { "name": name },
            "spec": {
                "replicas": replicas,
                "selector": { "matchLabels": { "app": name } },
                "template": { "metadata": { "labels": { "app": name } },
                              "spec": { "containers": [echo_container("echo", PORT)] } }
            }
        }))?)
    };
    let deployments = ns.api::<Deployment>();
    deployments
        .create(&PostParams::default(), &app("echo", 3)?)
        .await?;
    deployments
        .create(&PostParams::default(), &app("dev", 1)?)
        .await?;
    let service: k8s_openapi::api::core::v1::Service = serde_json::from_value(json!({
        "metadata": { "name": "echo" },
        "spec": { "selector": { "app": "echo" }, "ports": [{ "port": 80, "targetPort": PORT }] }
    }))?;
    let service = ns
        .api::<k8s_openapi::api::core::v1::Service>()
        .create(&PostParams::default(), &service)
        .await?;
    let authority = format!(
        "{}:80",
        service.spec.and_then(|s| s.cluster_ip).unwrap_or_default()
    );
    let ready = |selector: &'static str, count: usize| {
        let pods = ns.api::<Pod>();
        async move {
            wait_for_list(
                &pods,
                selector,
                |ps| {
                    let live: Vec<&Pod> = ps
                        .iter()
                        .filter(|p| p.metadata.deletion_timestamp.is_none())
                        .collect();
                    live.len() == count && live.iter().all(|p| pontoon_tests::pod_ready(p))
                },
                TIMEOUT,
            )
            .await
        }
    };
    ready("app=echo", 3).await?;
    let dev = ready("app=dev", 1).await?;
    let (dev_pod, dev_ip) = (
        dev[0].name_any(),
        dev[0]
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.clone())
            .unwrap_or_default(),
    );
    let mounts: Api<GefyraBridgeMount> = gefyra.api();
    let mut target = mount("bridged", ns.name(), gefyra.name());
    target.fields.target = Some("deploy/echo".into());
    target.fields.target_container = Some("echo".into());
    mounts.create(&PostParams::default(), &target).await?;
    until_active(mounts.clone(), vec!["bridged".into()]).await?;
    // One request, or ten in a row (each on a connection of its own, so
    // through kube-proxy's balancing anew): the first is answered by one
    // pod; the ten miss one of three pods with a chance of 3 * (2/3)^10.
    let one = vec![Request {
        path: "/",
        header: Some("x-gefyra: bench"),
    }];
    let ten = vec![one[0]; 10];
    let answered_by = |want: &'static str| {
        let (net, authority, dev_pod) = (net.clone(), authority.clone(), dev_pod.clone());
        let (one, ten) = (one.clone(), ten.clone());
        async move {
            let started = Instant::now();
            while started.elapsed() < TIMEOUT {
                let requests = if want == "dev" { &one } else { &ten };
                let answers = net.send(&authority, requests, Duration::from_secs(2))?;
                let hit = answers.iter().all(|a| {
                    let by = a.as_deref().unwrap_or_default();
                    match want {
                        "dev" => by == dev_pod,
                        _ => by.starts_with("echo-gefyra"),
                    }
                });
                if hit {
                    return Ok::<Instant, anyhow::Error>(Instant::now());
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            bail!("no request was answered by the {want} within {TIMEOUT:?}")
        }
    };
    answered_by("shadow").await?;
    let bridges: Api<GefyraBridge> = gefyra.api();
    let (mut created, mut deleted) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        let name = format!("bench-bridge-{round}");
        let bridge: GefyraBridge = serde_json::from_value(json!({
            "metadata": { "name": name, "namespace": gefyra.name(),
                          "labels": { "gefyra.dev/bridge-mount": "bridged" } },
            "provider": "carrier2",
            "providerParameter": { "rules": [{ "match": [{ "matchHeader": {
                "name": "x-gefyra", "value": "bench", "type": "exact" } }] }] },
            "target": "bridged",
            // A bridge names its mount's target namespace (the admission
            // policy judges its creator's rights there).
            "targetNamespace": ns.name(),
            "portMappings": [format!("{PORT}:{PORT}")],
            "destinationIP": dev_ip,
        }))?;
        let started = Instant::now();
        bridges.create(&PostParams::default(), &bridge).await?;
        created.push(answered_by("dev").await? - started);
        let started = Instant::now();
        bridges.delete(&name, &DeleteParams::default()).await?;
        deleted.push(answered_by("shadow").await? - started);
        println!(
            "  bridge round {round}: routed after {:.3} s, back at the shadow after {:.3} s",
            created[round].as_secs_f64(),
            deleted[round].as_secs_f64()
        );
    }
    mounts.delete("bridged", &DeleteParams::default()).await?;
    let gone = |m: Option<&GefyraBridgeMount>| m.is_none();
    wait_for(&mounts, "bridged", gone, TIMEOUT).await?;
    Ok((created, deleted))
}
