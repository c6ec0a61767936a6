//! `make bench-gateway` (second half; `bench_config` is the first): what the
//! Gateway API controllers cost on the test bed, with the operator (release
//! build) and the bundled config filters. Prints figures; asserts nothing
//! about time.
//!
//! - Gateway created -> `Programmed: True` (its ConfigMap, Deployment and
//!   Service applied, the Deployment available, a load-balancer address),
//!   p50 and p99 over 20 Gateways, one at a time: once with the data plane's
//!   pods only faked by kwok (an image the test bed does not run: the
//!   operator's and the control plane's share, as the goal was set), once
//!   with the real `praxis` as the test bed runs it (its pods Ready once
//!   praxis answers on `/ready`); with the faked pods, where that time
//!   goes: when the bench's own watches first saw each step; and the test
//!   bed's own share: the same Deployment created directly, without the
//!   operator, until its pod is Ready;
//! - HTTPRoute changed -> the new config in the Gateway's ConfigMap, p50 and
//!   p99 over 20 changes, again with faked pods and with a real praxis (where
//!   each change also rolls praxis processes on the same cores);
//! - the operator's RSS idle (class accepted, nothing else), then with 1000
//!   HTTPRoutes of two filters each on one Gateway (all in its config and
//!   every route's status written: the memory it holds for them; also 2 s
//!   after the config, while the statuses are still being written), then
//!   with 1000 GRPCRoutes (a method match and a header filter each) on a
//!   second Gateway besides, and its peak RSS over the run.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use anyhow::Context;
use futures::{StreamExt, TryStreamExt, stream};
use gateway_api::{
    apis::standard::{gatewayclasses::GatewayClass, gateways::Gateway},
    grpcroutes::GrpcRoute,
    httproutes::HttpRoute,
};
use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{ConfigMap, Pod, Service},
};
use kube::{
    Resource, ResourceExt,
    api::{Api, DeleteParams, Patch, PatchParams, PostParams},
    runtime::{WatchStreamExt, watcher},
};
use pontoon_tests::{
    TestNamespace, backends,
    bench::{BenchOperator, memory_kib, percentile},
    wait_for,
};
use serde_json::json;

const GATEWAYS: usize = 20;
const CHANGES: usize = 20;
const ROUTES: usize = 1000;
const TIMEOUT: Duration = Duration::from_secs(120);
/// A data-plane image the test bed does not map to a process: its pods are
/// Running and Ready as soon as kwok makes them so.
const FAKED_IMAGE: &str = "example.org/praxis-faked:0.7.5";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    pontoon_tests::gateway_api::install_crds().await?;
    let ns = TestNamespace::new("bench-gw").await?;
    let class = ns.name().to_string();
    let controller_name = format!("pontoon.dev/{class}");
    // The routes' backend (faked pods: only its EndpointSlices matter here).
    backends::deploy(&ns, "web", 2, 80, 8080).await?;

    // First with faked data planes, by an operator of its own.
    let faked_class = format!("{class}-faked");
    let faked_controller = format!("pontoon.dev/{faked_class}");
    let mut faked = gateway_operator(
        "bench-gateway-faked",
        &ns,
        &faked_controller,
        &["--data-plane-image", FAKED_IMAGE],
    )
    .await?;
    let timeline = Timeline::watch(&ns);
    let faked_figures = async {
        accepted_class(&ns, &faked_class, &faked_controller).await?;
        let programmed = programmed(&ns, &faked_class, "faked", false, Some(&timeline)).await?;
        let changed = route_changes(&ns, &format!("faked-{}", GATEWAYS - 1)).await?;
        let alone = test_bed_alone(&ns, &format!("faked-{}", GATEWAYS - 1)).await?;
        anyhow::Ok((programmed, changed, alone))
    }
    .await;
    pontoon_tests::gateway_api::remove_gateways_blocking(
        ns.name(),
        std::slice::from_ref(&faked_class),
    );
    faked.kill()?;
    let (faked_programmed, faked_changed, alone) =
        faked_figures.with_context(|| format!("see the operator's log {}", faked.log.display()))?;

    let mut operator = gateway_operator("bench-gateway", &ns, &controller_name, &[]).await?;
    let pid = operator.pid();
    let outcome = run(&ns, &class, &controller_name, pid).await;
    let peak = memory_kib(pid, "VmHWM:");
    // Whatever happened, the operator removes its finalizers before it stops.
    pontoon_tests::gateway_api::remove_gateways_blocking(ns.name(), std::slice::from_ref(&class));
    operator.kill()?;
    let figures =
        outcome.with_context(|| format!("see the operator's log {}", operator.log.display()))?;
    let mib = |kib: u64| kib as f64 / 1024.0;

    println!();
    println!("Gateway created -> Programmed, {GATEWAYS} Gateways one at a time:");
    println!(
        "  pods faked by kwok   p50 {:>7.3} s   p99 {:>7.3} s   (goal: <= 0.1 s)",
        percentile(&faked_programmed, 50),
        percentile(&faked_programmed, 99)
    );
    timeline.print("faked");
    println!(
        "    the test bed alone: its Deployment created directly -> pod Ready   p50 {:.3} s   p99 {:.3} s",
        percentile(&alone, 50),
        percentile(&alone, 99)
    );
    println!(
        "  a real praxis        p50 {:>7.3} s   p99 {:>7.3} s   (pods Ready once praxis serves)",
        percentile(&figures.programmed, 50),
        percentile(&figures.programmed, 99)
    );
    println!("HTTPRoute changed -> new config in the ConfigMap, {CHANGES} changes:");
    println!(
        "  pods faked by kwok   p50 {:>7.3} s   p99 {:>7.3} s   (goal: <= 0.05 s)",
        percentile(&faked_changed, 50),
        percentile(&faked_changed, 99)
    );
    println!(
        "  a real praxis        p50 {:>7.3} s   p99 {:>7.3} s   (each change rolls its pods)",
        percentile(&figures.changed, 50),
        percentile(&figures.changed, 99)
    );
    println!(
        "{ROUTES} HTTPRoutes x 2 filters on one Gateway: created in {:.2} s, all in the config {:.2} s after the last",
        figures.created.as_secs_f64(),
        figures.configured.as_secs_f64()
    );
    println!(
        "{ROUTES} GRPCRoutes x 1 filter on a second Gateway: created in {:.2} s, all in its config {:.2} s after the last",
        figures.grpc_created.as_secs_f64(),
        figures.grpc_configured.as_secs_f64()
    );
    println!("operator RSS:");
    println!("  idle                 {:>7.1} MiB", mib(figures.idle_kib));
    println!(
        "  with {ROUTES} routes     {:>7.1} MiB (goal: <= 48 MiB; every route's status written, median of 5 samples over 2 s)",
        mib(figures.loaded_kib)
    );
    println!(
        "    2 s after the last route reached the config, statuses still being written: {:.1} MiB",
        mib(figures.loaded_early_kib)
    );
    println!(
        "  with {ROUTES} HTTPRoutes and {ROUTES} GRPCRoutes  {:>7.1} MiB (settled as above)",
        mib(figures.grpc_loaded_kib)
    );
    println!("  peak over the run    {:>7.1} MiB", mib(peak?));
    Ok(())
}

struct Figures {
    programmed: Vec<Duration>,
    changed: Vec<Duration>,
    created: Duration,
    configured: Duration,
    idle_kib: u64,
    /// 2 s after the last route reached the config (route statuses are
    /// still being written then).
    loaded_early_kib: u64,
    /// Once every route's status is written: see [`settled_rss`].
    loaded_kib: u64,
    grpc_created: Duration,
    grpc_configured: Duration,
    grpc_loaded_kib: u64,
}

async fn run(
    ns: &TestNamespace,
    class: &str,
    controller_name: &str,
    pid: u32,
) -> anyhow::Result<Figures> {
    accepted_class(ns, class, controller_name).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle_kib = memory_kib(pid, "VmRSS:")?;

    let programmed = programmed(ns, class, "gw", false, None).await?;
    let gateways: Api<Gateway> = ns.api();
    let edge = format!("gw-{}", GATEWAYS - 1);
    let config_map = format!("praxis-{edge}");

    let changed = route_changes(ns, &edge).await?;
    let routes: Api<HttpRoute> = ns.api();
    let maps: Api<ConfigMap> = ns.api();

    // 1000 routes with two filters each.
    let started = Instant::now();
    stream::iter(0..ROUTES)
        .map(|i| {
            let routes = routes.clone();
            let edge = edge.clone();
            async move {
                let mut route = route(&format!("route-{i}"), &edge, &format!("/svc-{i}"))?;
                route.spec.rules.as_mut().context("rules")?[0].filters =
                    Some(serde_json::from_value(json!([
                        { "type": "RequestHeaderModifier", "requestHeaderModifier": {
                            "set": [{ "name": "x-route", "value": format!("route-{i}") }],
                            "remove": ["x-debug"] } },
                        { "type": "ResponseHeaderModifier", "responseHeaderModifier": {
                            "add": [{ "name": "x-served-by", "value": "praxis" }] } }
                    ]))?);
                routes.create(&PostParams::default(), &route).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(8)
        .try_collect::<()>()
        .await?;
    let created = started.elapsed();
    let last = Instant::now();
    wait_for(
        &maps,
        &config_map,
        every_route_in(|i| format!("/svc-{i}")),
        TIMEOUT,
    )
    .await?;
    let configured = last.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let loaded_early_kib = memory_kib(pid, "VmRSS:")?;
    let loaded_kib = settled_rss(&routes, ROUTES, pid).await?;

    // And 1000 GRPCRoutes on a second Gateway (one config holds about a
    // thousand routes: a ConfigMap takes 1 MiB), each a method of its own.
    let grpc_edge = "gw-grpc".to_string();
    let grpc_config_map = format!("praxis-{grpc_edge}");
    let gateway: Gateway = serde_json::from_value(json!({
        "metadata": { "name": grpc_edge },
        "spec": {
            "gatewayClassName": class,
            "listeners": [{ "name": "http", "protocol": "HTTP", "port": 80 }]
        }
    }))?;
    gateways.create(&PostParams::default(), &gateway).await?;
    let grpc_routes: Api<GrpcRoute> = ns.api();
    let started = Instant::now();
    stream::iter(0..ROUTES)
        .map(|i| {
            let grpc_routes = grpc_routes.clone();
            let edge = grpc_edge.clone();
            async move {
                let route: GrpcRoute = serde_json::from_value(json!({
                    "metadata": { "name": format!("grpc-{i}") },
                    "spec": {
                        "parentRefs": [{ "name": edge }],
                        "rules": [{
                            "matches": [{ "method": { "service": format!("bench.Svc{i}"), "method": "Call" } }],
                            "filters": [{ "type": "RequestHeaderModifier", "requestHeaderModifier": {
                                "set": [{ "name": "x-route", "value": format!("grpc-{i}") }] } }],
                            "backendRefs": [{ "name": "web", "port": 80 }]
                        }]
                    }
                }))?;
                grpc_routes.create(&PostParams::default(), &route).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(8)
        .try_collect::<()>()
        .await?;
    let grpc_created = started.elapsed();
    let last = Instant::now();
    let grpc_path = |i| format!("/bench.Svc{i}/Call");
    wait_for(&maps, &grpc_config_map, every_route_in(grpc_path), TIMEOUT).await?;
    let grpc_configured = last.elapsed();
    let grpc_loaded_kib = settled_rss(&grpc_routes, ROUTES, pid).await?;
    for gateway in [&edge, &grpc_edge] {
        gateways.delete(gateway, &DeleteParams::default()).await?;
        let gone = |g: Option<&Gateway>| g.is_none();
        wait_for(&gateways, gateway, gone, TIMEOUT).await?;
    }
    Ok(Figures {
        programmed,
        changed,
        created,
        configured,
        idle_kib,
        loaded_early_kib,
        loaded_kib,
        grpc_created,
        grpc_configured,
        grpc_loaded_kib,
    })
}

/// The operator's RSS with `count` routes of kind `K` in place: once every
/// one has an `Accepted` condition for its current generation (the status
/// writes come after the config), 2 s later (jemalloc gives freed pages
/// back within 1 s), the median of five VmRSS samples half a second apart.
async fn settled_rss<K>(routes: &Api<K>, count: usize, pid: u32) -> anyhow::Result<u64>
where
    K: Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let list = routes.list(&Default::default()).await?;
        let accepted = list
            .items
            .iter()
            .filter(|route| {
                let generation = route.meta().generation;
                let value = serde_json::to_value(route).unwrap_or_default();
                value["status"]["parents"]
                    .as_array()
                    .is_some_and(|parents| {
                        parents.iter().any(|p| {
                            p["conditions"].as_array().is_some_and(|conditions| {
                                conditions.iter().any(|c| {
                                    c["type"] == "Accepted"
                                        && c["observedGeneration"].as_i64() == generation
                                })
                            })
                        })
                    })
            })
            .count();
        if accepted >= count {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "only {accepted} of {count} routes have a status after {TIMEOUT:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut samples = Vec::new();
    for _ in 0..5 {
        samples.push(memory_kib(pid, "VmRSS:")?);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    samples.sort_unstable();
    Ok(samples[2])
}

/// An operator running only the Gateway API controllers, for `controller_name`.
async fn gateway_operator(
    bench: &str,
    ns: &TestNamespace,
    controller_name: &str,
    extra: &[&str],
) -> anyhow::Result<BenchOperator> {
    let mut args = vec![
        "--namespace",
        ns.name(),
        "--controllers",
        "gateway-api",
        "--gateway-controller-name",
        controller_name,
    ];
    args.extend_from_slice(extra);
    BenchOperator::start(bench, "standard_filters", &args).await
}

/// Waits until the class is Accepted (its operator runs).
async fn accepted_class(
    ns: &TestNamespace,
    class: &str,
    controller_name: &str,
) -> anyhow::Result<()> {
    pontoon_tests::gateway_api::create_class(class, controller_name, None).await?;
    let classes: Api<GatewayClass> = Api::all(ns.client.clone());
    let accepted = |c: Option<&GatewayClass>| {
        c.and_then(|c| c.status.as_ref()?.conditions.as_ref())
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c.type_ == "Accepted" && c.status == "True")
            })
    };
    wait_for(&classes, class, accepted, TIMEOUT).await?;
    Ok(())
}

/// The control plane's share of `programmed`: the Deployment the operator
/// made for `gateway`, created directly (its own labels, no owner), until its
/// pod is Ready, `GATEWAYS` times, one at a time.
async fn test_bed_alone(ns: &TestNamespace, gateway: &str) -> anyhow::Result<Vec<Duration>> {
    let deployments: Api<Deployment> = ns.api();
    let pods: Api<Pod> = ns.api();
    let source = deployments.get(&format!("praxis-{gateway}")).await?;
    let template = source
        .spec
        .context("the operator's Deployment has no spec")?;
    let mut took = Vec::with_capacity(GATEWAYS);
    for i in 0..GATEWAYS {
        let name = format!("alone-{i}");
        let label = format!("bench.pontoon.dev/alone={name}");
        let labels = json!({ "bench.pontoon.dev/alone": name });
        let mut spec = serde_json::to_value(&template)?;
        spec["selector"] = json!({ "matchLabels": labels });
        spec["template"]["metadata"]["labels"] = labels;
        let deployment: Deployment =
            serde_json::from_value(json!({ "metadata": { "name": name }, "spec": spec }))?;
        let ready = watcher(pods.clone(), watcher::Config::default().labels(&label))
            .applied_objects()
            .try_filter(|pod| std::future::ready(pontoon_tests::pod_ready(pod)))
            .boxed();
        let post = PostParams::default();
        let started = Instant::now();
        let (created, ready) = tokio::join!(
            deployments.create(&post, &deployment),
            tokio::time::timeout(TIMEOUT, ready.into_future())
        );
        created?;
        ready
            .context("its pod never became Ready")?
            .0
            .context("the pod watch ended")??;
        took.push(started.elapsed());
        deployments.delete(&name, &DeleteParams::default()).await?;
    }
    Ok(took)
}

/// Gateway -> Programmed, one at a time; each deleted after (but the last,
/// unless `delete_last`); its start and end go on `timeline` if given.
async fn programmed(
    ns: &TestNamespace,
    class: &str,
    prefix: &str,
    delete_last: bool,
    timeline: Option<&Timeline>,
) -> anyhow::Result<Vec<Duration>> {
    let gateways: Api<Gateway> = ns.api();
    let mut programmed = Vec::with_capacity(GATEWAYS);
    for i in 0..GATEWAYS {
        let name = format!("{prefix}-{i}");
        let gateway: Gateway = serde_json::from_value(json!({
            "metadata": { "name": name },
            "spec": {
                "gatewayClassName": class,
                "listeners": [{ "name": "http", "protocol": "HTTP", "port": 80 }]
            }
        }))?;
        let is_programmed = |g: Option<&Gateway>| {
            g.and_then(|g| g.status.as_ref()?.conditions.as_ref())
                .is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c.type_ == "Programmed" && c.status == "True")
                })
        };
        let post = PostParams::default();
        let started = Instant::now();
        let (created, done) = tokio::join!(
            gateways.create(&post, &gateway),
            wait_for(&gateways, &name, is_programmed, TIMEOUT)
        );
        created?;
        done?;
        programmed.push(started.elapsed());
        if let Some(timeline) = timeline {
            timeline.mark(&name, Step::Created, started);
            timeline.mark(&name, Step::Programmed, Instant::now());
        }
        if delete_last || i + 1 < GATEWAYS {
            gateways.delete(&name, &DeleteParams::default()).await?;
        }
    }
    Ok(programmed)
}

/// HTTPRoute changed -> the new config in `gateway`'s ConfigMap, `CHANGES` times.
async fn route_changes(ns: &TestNamespace, gateway: &str) -> anyhow::Result<Vec<Duration>> {
    let routes: Api<HttpRoute> = ns.api();
    let maps: Api<ConfigMap> = ns.api();
    let (name, config_map) = (format!("changing-{gateway}"), format!("praxis-{gateway}"));
    routes
        .create(&PostParams::default(), &route(&name, gateway, "/v0")?)
        .await?;
    wait_for(&maps, &config_map, holds("\"/v0\""), TIMEOUT).await?;
    let mut changed = Vec::with_capacity(CHANGES);
    for i in 1..=CHANGES {
        let path = format!("/v{i}");
        let patch = json!({ "spec": { "rules": [{
            "matches": [{ "path": { "type": "PathPrefix", "value": path } }],
            "backendRefs": [{ "name": "web", "port": 80 }] }] } });
        let (params, patch) = (PatchParams::default(), Patch::Merge(patch));
        let started = Instant::now();
        let marker = format!("\"{path}\"");
        let (patched, done) = tokio::join!(
            routes.patch(&name, &params, &patch),
            wait_for(&maps, &config_map, holds(&marker), TIMEOUT)
        );
        patched?;
        done?;
        changed.push(started.elapsed());
    }
    Ok(changed)
}

fn route(name: &str, gateway: &str, path: &str) -> anyhow::Result<HttpRoute> {
    Ok(serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": {
            "parentRefs": [{ "name": gateway }],
            "rules": [{
                "matches": [{ "path": { "type": "PathPrefix", "value": path } }],
                "backendRefs": [{ "name": "web", "port": 80 }]
            }]
        }
    }))?)
}

/// The ConfigMap's config contains `needle`.
fn holds(needle: &str) -> impl Fn(Option<&ConfigMap>) -> bool + use<> {
    let needle = needle.to_string();
    move |m: Option<&ConfigMap>| {
        m.and_then(|m| m.data.as_ref()?.get("config.yaml"))
            .is_some_and(|c| c.contains(&needle))
    }
}

/// The steps from a Gateway's creation to `Programmed`, in their usual order.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Step {
    Created,
    /// The operator applied its Deployment.
    Deployment,
    /// The Deployment and ReplicaSet controllers made its pod.
    Pod,
    /// The scheduler bound it.
    Scheduled,
    /// The test bed's pod-exec-sync gave it its exec sandbox.
    ExecSandbox,
    /// kwok made it Running and Ready.
    Ready,
    /// kwok gave the Service its load-balancer address.
    Address,
    Programmed,
}

const STEPS: [(Step, &str); 7] = [
    (Step::Deployment, "Deployment applied"),
    (Step::Pod, "pod created"),
    (Step::Scheduled, "pod scheduled"),
    (Step::ExecSandbox, "exec sandbox"),
    (Step::Ready, "pod Ready"),
    (Step::Address, "LB address"),
    (Step::Programmed, "Programmed"),
];

/// When the bench's own watches first saw each step of each Gateway (by
/// its name, the data plane's `app.kubernetes.io/instance`).
#[derive(Clone, Default)]
struct Timeline(Arc<Mutex<HashMap<String, HashMap<Step, Instant>>>>);

impl Timeline {
    /// Starts watching the data planes' Deployments, pods and Services in `ns`.
    fn watch(ns: &TestNamespace) -> Self {
        let timeline = Self::default();
        let labels = watcher::Config::default().labels("app.kubernetes.io/name=praxis");
        let deployments: Api<Deployment> = ns.api();
        timeline.follow(deployments, labels.clone(), |_| vec![Step::Deployment]);
        let pods: Api<Pod> = ns.api();
        timeline.follow(pods, labels.clone(), |pod| {
            let mut steps = vec![Step::Pod];
            if pod.spec.as_ref().is_some_and(|s| s.node_name.is_some()) {
                steps.push(Step::Scheduled);
            }
            if pod
                .annotations()
                .contains_key("testbed.pontoon.dev/exec-ready")
            {
                steps.push(Step::ExecSandbox);
            }
            if pontoon_tests::pod_ready(pod) {
                steps.push(Step::Ready);
            }
            steps
        });
        let services: Api<Service> = ns.api();
        timeline.follow(services, labels, |service| {
            let ingress = service
                .status
                .as_ref()
                .and_then(|s| s.load_balancer.as_ref()?.ingress.as_ref())
                .is_some_and(|i| !i.is_empty());
            if ingress {
                vec![Step::Address]
            } else {
                Vec::new()
            }
        });
        timeline
    }

    fn follow<K>(
        &self,
        api: Api<K>,
        config: watcher::Config,
        steps: impl Fn(&K) -> Vec<Step> + Send + 'static,
    ) where
        K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
    {
        let timeline = self.clone();
        tokio::spawn(
            watcher(api, config)
                .applied_objects()
                .for_each(move |object| {
                    if let Ok(object) = object
                        && let Some(gateway) = object.labels().get("app.kubernetes.io/instance")
                    {
                        let now = Instant::now();
                        for step in steps(&object) {
                            timeline.mark(gateway, step, now);
                        }
                    }
                    std::future::ready(())
                }),
        );
    }

    /// Records `step` of `gateway` at `at`, unless it was seen before.
    fn mark(&self, gateway: &str, step: Step, at: Instant) {
        #[allow(clippy::unwrap_used)]
        let mut steps = self.0.lock().unwrap();
        steps
            .entry(gateway.to_string())
            .or_default()
            .entry(step)
            .or_insert(at);
    }

    /// Prints the p50 of each step's time since its Gateway's creation,
    /// over the Gateways named `prefix-*`.
    fn print(&self, prefix: &str) {
        #[allow(clippy::unwrap_used)]
        let gateways = self.0.lock().unwrap();
        let mine: Vec<_> = gateways
            .iter()
            .filter(|(name, _)| name.starts_with(&format!("{prefix}-")))
            .map(|(_, steps)| steps)
            .collect();
        let figures: Vec<String> = STEPS
            .iter()
            .map(|(step, label)| {
                let since: Vec<Duration> = mine
                    .iter()
                    .filter_map(|s| Some(s.get(step)?.duration_since(*s.get(&Step::Created)?)))
                    .collect();
                format!("{label} {:.3}", percentile(&since, 50))
            })
            .collect();
        println!("    p50 since creation (s): {}", figures.join(", "));
    }
}

/// Whether a Gateway's config holds the path of each of the `ROUTES` routes.
fn every_route_in(path: impl Fn(usize) -> String) -> impl Fn(Option<&ConfigMap>) -> bool {
    move |m| {
        m.and_then(|m| m.data.as_ref()?.get("config.yaml"))
            .is_some_and(|c| (0..ROUTES).all(|i| c.contains(&format!("\"{}\"", path(i)))))
    }
}
