//! The plugin runtime against the test bed: well-behaved modules do their
//! work through the host's cluster interface; hostile ones are contained,
//! each with an error naming it, while other calls carry on.

use std::{sync::Arc, time::Duration};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use pontoon::gateway::judgement::translate::{FilterRequest, Translator};
use pontoon::plugins::{
    CallError, ClusterAccess, FilterModule, Freshness, Limits, LoadError, LoadedModule,
    PluginRuntime, ProviderModule, Registry, Worlds,
    bindings::{Mount, Progress, ProviderError, RouteContext, Settings},
};
use pontoon_tests::{TestNamespace, modules::test_module};
use tokio::time::Instant;

fn mount(ns: &str, parameters: Option<serde_json::Value>) -> Mount {
    Mount {
        name: "web-mount".into(),
        namespace: ns.into(),
        uid: "0000".into(),
        target: "deploy/web".into(),
        target_namespace: ns.into(),
        target_container: "web".into(),
        parameters: parameters.map(|p| p.to_string()),
        settings: Settings {
            operator_namespace: format!("{ns}-operator"),
            carrier_image: "quay.io/gefyra/carrier2:latest".into(),
            restore_config_map: pontoon::bridge_mount::settings::restore_config_map("0000"),
        },
    }
}

/// A pod `name` with one container `app` (a process pod the test bed runs), ready.
async fn ready_pod(ns: &TestNamespace, name: &str) -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::Pod;
    let pods: Api<Pod> = ns.api();
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": { "name": name },
        "spec": { "containers": [{ "name": "app", "image": "busybox:1.36" }] }
    }))?;
    pods.create(&Default::default(), &pod).await?;
    let ready = |p: Option<&Pod>| p.is_some_and(pontoon_tests::pod_ready);
    pontoon_tests::wait_for(&pods, name, ready, Duration::from_secs(60)).await?;
    Ok(())
}

async fn provider(runtime: &Arc<PluginRuntime>, name: &str) -> anyhow::Result<Arc<ProviderModule>> {
    match runtime.load_file(&test_module(name)?).await? {
        LoadedModule::Provider(p) => Ok(Arc::new(p)),
        _ => anyhow::bail!("{name} is not a bridge-mount provider"),
    }
}

async fn filter(runtime: &Arc<PluginRuntime>, name: &str) -> anyhow::Result<FilterModule> {
    match runtime.load_file(&test_module(name)?).await? {
        LoadedModule::Filter(f) => Ok(f),
        _ => anyhow::bail!("{name} is not a config filter"),
    }
}

fn access(ns: &TestNamespace, provider: &ProviderModule, mount: &Mount) -> ClusterAccess {
    ClusterAccess {
        client: ns.client.clone(),
        discovery: Arc::default(),
        // Steps driven one by one right after the test's own writes, as
        // `pontoon conformance` drives them.
        freshness: Arc::new(Freshness::consistent()),
        writes: Arc::default(),
        scope: provider.scope_for(mount),
        field_manager: provider.name().to_string(),
        events: None,
        journal: None,
        bridges: std::sync::Arc::from([]),
        notes: None,
    }
}

#[tokio::test]
async fn a_well_behaved_provider_runs_every_step_on_the_cluster() -> anyhow::Result<()> {
    let ns = TestNamespace::new("rt-sample").await?;
    let runtime = PluginRuntime::new(Limits::default())?;
    let sample = provider(&runtime, "sample_provider").await?;
    assert_eq!(sample.metadata.name, "sample");
    assert_eq!(sample.metadata.version, "0.1.0");
    let mount = mount(ns.name(), None);
    let configmaps: Api<ConfigMap> = ns.api();

    assert!(matches!(
        sample.prepare(access(&ns, &sample, &mount), &mount).await?,
        Progress::Done
    ));
    let cm = configmaps.get("web-mount-sample").await?;
    let labels = cm.metadata.labels.unwrap_or_default();
    assert_eq!(
        labels
            .get("app.kubernetes.io/managed-by")
            .map(String::as_str),
        Some("sample")
    );
    assert!(
        sample
            .prepared(access(&ns, &sample, &mount), &mount)
            .await?
    );

    let before = sample.ready(access(&ns, &sample, &mount), &mount).await?;
    assert!(
        before.iter().any(|c| !c.ready),
        "not ready before install: {before:?}"
    );
    assert!(matches!(
        sample.install(access(&ns, &sample, &mount), &mount).await?,
        Progress::Done
    ));
    let after = sample.ready(access(&ns, &sample, &mount), &mount).await?;
    assert!(
        !after.is_empty() && after.iter().all(|c| c.ready),
        "ready after install: {after:?}"
    );

    assert!(matches!(
        sample
            .uninstall(access(&ns, &sample, &mount), &mount)
            .await?,
        Progress::Done
    ));
    assert!(
        configmaps.get_opt("web-mount-sample").await?.is_none(),
        "uninstall removed the ConfigMap"
    );
    assert!(
        !sample
            .prepared(access(&ns, &sample, &mount), &mount)
            .await?
    );
    Ok(())
}

#[tokio::test]
async fn exec_from_a_provider_runs_in_the_pod_and_returns_its_output() -> anyhow::Result<()> {
    let ns = TestNamespace::new("rt-exec").await?;
    ready_pod(&ns, "target").await?;

    let runtime = PluginRuntime::new(Limits::default())?;
    let probe = provider(&runtime, "exec_probe").await?;
    let script = "read line; echo \"got $line\" > /tmp/seen; cat /tmp/seen; echo oops >&2; exit 3";
    let m = mount(
        ns.name(),
        Some(serde_json::json!({
            "pod": "target", "container": "app",
            "command": ["sh", "-c", script], "stdin": "hello\n"
        })),
    );
    assert!(matches!(
        probe.prepare(access(&ns, &probe, &m), &m).await?,
        Progress::Done
    ));
    let result = ns
        .api::<ConfigMap>()
        .get("exec-result")
        .await?
        .data
        .unwrap_or_default();
    assert_eq!(
        result.get("stdout").map(String::as_str),
        Some("got hello\n"),
        "{result:?}"
    );
    assert_eq!(
        result.get("stderr").map(String::as_str),
        Some("oops\n"),
        "{result:?}"
    );
    assert_eq!(
        result.get("exitCode").map(String::as_str),
        Some("3"),
        "{result:?}"
    );
    Ok(())
}

#[tokio::test]
async fn an_exec_whose_stderr_never_ends_is_stopped_at_the_cap_naming_the_pod() -> anyhow::Result<()>
{
    let ns = TestNamespace::new("rt-exec-cap").await?;
    ready_pod(&ns, "chatty").await?;

    let runtime = PluginRuntime::new(Limits::default())?;
    let probe = provider(&runtime, "exec_probe").await?;
    // Quiet on stdout, endless on stderr: the cap holds for both streams.
    let m = mount(
        ns.name(),
        Some(serde_json::json!({
            "pod": "chatty", "container": "app",
            "command": ["sh", "-c", "yes 'no end to this' >&2"]
        })),
    );
    let started = Instant::now();
    match probe.prepare(access(&ns, &probe, &m), &m).await {
        Err(CallError::Provider {
            error: ProviderError::Failed(message),
            ..
        }) => assert!(
            message.contains("exec in pod `chatty` (container `app`): its stderr passed 1 MiB"),
            "{message}"
        ),
        other => panic!("an endless stderr was not refused at the cap: {other:?}"),
    }
    assert!(
        ns.api::<ConfigMap>()
            .get_opt("exec-result")
            .await?
            .is_none(),
        "nothing of the endless output reached the provider"
    );
    println!("refused after {:?}", started.elapsed());
    Ok(())
}

#[tokio::test]
async fn a_list_follows_every_page_and_stops_at_its_cap() -> anyhow::Result<()> {
    use futures::StreamExt;
    let ns = TestNamespace::new("rt-list").await?;
    let config_maps: Api<ConfigMap> = ns.api();
    let make = |name: String, size: &'static str, data: String| {
        let api = config_maps.clone();
        async move {
            let object: ConfigMap = serde_json::from_value(serde_json::json!({
                "metadata": { "name": name, "labels": { "size": size } },
                "data": { "d": data }
            }))?;
            api.create(&Default::default(), &object).await?;
            anyhow::Ok(())
        }
    };
    // 1100 small ones: three pages of the host's 500.
    let small = (0..1100).map(|i| make(format!("small-{i:04}"), "small", "x".into()));
    // Ten of 900 KiB: 9 MiB together, past the 8 MiB a list may return.
    let big = (0..10).map(|i| make(format!("big-{i}"), "big", "b".repeat(900 * 1024)));
    let made: Vec<anyhow::Result<()>> = futures::stream::iter(
        small
            .map(futures::future::Either::Left)
            .chain(big.map(futures::future::Either::Right)),
    )
    .buffer_unordered(16)
    .collect()
    .await;
    made.into_iter().collect::<anyhow::Result<Vec<()>>>()?;

    let runtime = PluginRuntime::new(Limits::default())?;
    let probe = provider(&runtime, "list_probe").await?;
    let paged = mount(
        ns.name(),
        Some(serde_json::json!({ "selector": "size=small" })),
    );
    assert!(matches!(
        probe.prepare(access(&ns, &probe, &paged), &paged).await?,
        Progress::Done
    ));
    let result = config_maps
        .get("list-result")
        .await?
        .data
        .unwrap_or_default();
    assert_eq!(
        (
            result.get("count").map(String::as_str),
            result.get("distinct").map(String::as_str)
        ),
        (Some("1100"), Some("1100")),
        "every page, each object once: {result:?}"
    );

    let everything = mount(
        ns.name(),
        Some(serde_json::json!({ "selector": "size=big" })),
    );
    match probe
        .prepare(access(&ns, &probe, &everything), &everything)
        .await
    {
        Err(CallError::Provider {
            error: ProviderError::Failed(message),
            ..
        }) => assert!(
            message.starts_with("denied: ")
                && message.contains(&format!(
                    "the list of ConfigMap in namespace `{}` passed 8 MiB",
                    ns.name()
                ))
                && message.contains("label selector"),
            "{message}"
        ),
        other => panic!("a 9 MiB list was not refused at the cap: {other:?}"),
    }
    Ok(())
}

#[tokio::test]
async fn provider_events_land_on_the_mount() -> anyhow::Result<()> {
    use k8s_openapi::api::{core::v1::ObjectReference, events::v1::Event};
    use pontoon::plugins::EventSubject;
    let ns = TestNamespace::new("rt-events").await?;
    let runtime = PluginRuntime::new(Limits::default())?;
    let sample = provider(&runtime, "sample_provider").await?;
    let mount = mount(ns.name(), None);
    let subject = ObjectReference {
        api_version: Some("gefyra.dev/v1".into()),
        kind: Some("GefyraBridgeMount".into()),
        name: Some(mount.name.clone()),
        namespace: Some(ns.name().into()),
        uid: Some(mount.uid.clone()),
        ..Default::default()
    };
    let mut cluster = access(&ns, &sample, &mount);
    cluster.events = Some(EventSubject::new(
        ns.client.clone(),
        "pontoon-test",
        subject,
    ));
    sample.prepare(cluster, &mount).await?;

    // The host posts Events in the background: the call does not wait.
    let is_prepared = |e: &Event| e.reason.as_deref() == Some("Prepared");
    let events = pontoon_tests::wait_for_list(
        &ns.api::<Event>(),
        "",
        |events: &[Event]| events.iter().any(is_prepared),
        std::time::Duration::from_secs(10),
    )
    .await?;
    let prepared = events
        .iter()
        .find(|e| is_prepared(e))
        .expect("waited for it");
    let regarding = prepared.regarding.as_ref().expect("event has a subject");
    assert_eq!(regarding.kind.as_deref(), Some("GefyraBridgeMount"));
    assert_eq!(regarding.name.as_deref(), Some("web-mount"));
    assert_eq!(prepared.type_.as_deref(), Some("Normal"));
    Ok(())
}

/// Current-thread runtime on purpose: a looping guest must yield to the
/// executor, or the well-behaved call beside it could not finish first.
#[tokio::test(flavor = "current_thread")]
async fn hostile_modules_are_contained_while_others_keep_working() -> anyhow::Result<()> {
    let ns = TestNamespace::new("rt-hostile").await?;
    let other = TestNamespace::new("rt-victim").await?;
    // All six calls at once: what is tested is that they cannot hurt each
    // other, not the operator's bound on calls running together.
    let limits = Limits {
        deadline: Duration::from_secs(3),
        memory_bytes: 32 * 1024 * 1024,
        concurrent_calls: 6,
        memory_budget_bytes: 6 * 32 * 1024 * 1024,
    };
    let runtime = PluginRuntime::new(limits)?;
    let (sample, looping, hog, trap, outsider) = (
        provider(&runtime, "sample_provider").await?,
        provider(&runtime, "infinite_loop").await?,
        provider(&runtime, "memory_hog").await?,
        provider(&runtime, "trap").await?,
        provider(&runtime, "out_of_scope").await?,
    );
    let plain = mount(ns.name(), None);
    let steal = mount(
        ns.name(),
        Some(
            serde_json::json!({ "secretNamespace": "kube-system", "secretName": "bootstrap-token" }),
        ),
    );
    let escape = mount(
        ns.name(),
        Some(serde_json::json!({ "otherNamespace": other.name() })),
    );

    let (looped, hogged, trapped, stolen, escaped, served) = tokio::join!(
        timed(looping.prepare(access(&ns, &looping, &plain), &plain)),
        timed(hog.prepare(access(&ns, &hog, &plain), &plain)),
        timed(trap.prepare(access(&ns, &trap, &plain), &plain)),
        timed(outsider.prepare(access(&ns, &outsider, &steal), &steal)),
        timed(outsider.install(access(&ns, &outsider, &escape), &escape)),
        timed(sample.prepare(access(&ns, &sample, &plain), &plain)),
    );

    match &looped.0 {
        Err(err @ CallError::Deadline { module, .. }) => {
            assert_eq!(module, "infinite-loop");
            assert!(err.to_string().contains("infinite-loop"), "{err}");
        }
        other => panic!("expected a deadline error, got {other:?}"),
    }
    match &hogged.0 {
        Err(
            err @ CallError::OutOfMemory {
                module, limit_mib, ..
            },
        ) => {
            assert_eq!(module, "memory-hog");
            assert_eq!(*limit_mib, 32);
            assert!(err.to_string().contains("memory limit of 32 MiB"), "{err}");
        }
        other => panic!("expected an out-of-memory error, got {other:?}"),
    }
    match &trapped.0 {
        Err(err @ CallError::Trap { module, .. }) => {
            assert_eq!(module, "trap");
            assert!(
                err.to_string().contains("trap module panics on purpose"),
                "guest panic message is kept: {err}"
            );
        }
        other => panic!("expected a trap, got {other:?}"),
    }
    for (what, outcome) in [
        ("reading a Secret in kube-system", &stolen.0),
        ("creating in another namespace", &escaped.0),
    ] {
        match outcome {
            Err(CallError::Provider {
                module,
                error: ProviderError::Failed(message),
                ..
            }) => {
                assert_eq!(module, "out-of-scope");
                assert!(
                    message.starts_with("denied: ")
                        && message.contains("outside the provider's capability scope"),
                    "{what}: {message}"
                );
            }
            other => panic!("{what}: expected a denial, got {other:?}"),
        }
    }
    let escaped_cm: Api<ConfigMap> = other.api();
    assert!(
        escaped_cm.get_opt("escaped").await?.is_none(),
        "a denied create never reached the API server"
    );

    assert!(
        matches!(served.0, Ok(Progress::Done)),
        "well-behaved call succeeded: {:?}",
        served.0
    );
    assert!(
        served.1 < looped.1,
        "the well-behaved call finished while the loop was still running"
    );
    // The host keeps serving after all of that.
    assert!(
        sample
            .prepared(access(&ns, &sample, &plain), &plain)
            .await?
    );
    Ok(())
}

/// Runs `call`, noting when it finished.
async fn timed<T>(call: impl std::future::Future<Output = T>) -> (T, Instant) {
    let out = call.await;
    (out, Instant::now())
}

#[tokio::test]
async fn a_module_of_no_known_world_is_rejected_naming_the_file() -> anyhow::Result<()> {
    let runtime = PluginRuntime::new(Limits::default())?;
    let path = test_module("not_a_provider")?;
    let err = match runtime.load_file(&path).await {
        Err(err) => err,
        Ok(_) => anyhow::bail!("not_a_provider.wasm was accepted"),
    };
    assert!(matches!(err, LoadError::UnknownWorld { .. }), "{err}");
    assert!(
        err.to_string().contains("not_a_provider.wasm"),
        "error names the file: {err}"
    );

    // In a directory, the bad module is reported and the good ones load.
    let dir = tempfile::tempdir()?;
    std::fs::copy(&path, dir.path().join("not_a_provider.wasm"))?;
    std::fs::copy(
        test_module("sample_provider")?,
        dir.path().join("sample_provider.wasm"),
    )?;
    std::fs::copy(
        test_module("header_filter")?,
        dir.path().join("header_filter.wasm"),
    )?;
    std::fs::write(dir.path().join("garbage.wasm"), b"not wasm at all")?;
    // An empty core module: what `--target wasm32-unknown-unknown` gives.
    std::fs::write(dir.path().join("core.wasm"), b"\0asm\x01\0\0\0")?;
    let registry = runtime.load_dir(dir.path()).await?;
    assert_eq!(registry.provider_names().collect::<Vec<_>>(), ["sample"]);
    assert_eq!(
        registry.filter_names().collect::<Vec<_>>(),
        ["header-filter"]
    );
    let rejected: Vec<String> = registry.rejected.iter().map(ToString::to_string).collect();
    assert_eq!(rejected.len(), 3, "{rejected:?}");
    assert!(
        rejected.iter().any(|r| r.contains("core.wasm")
            && r.contains("core WebAssembly module")
            && r.contains("--target wasm32-wasip2")),
        "{rejected:?}"
    );
    assert!(
        rejected
            .iter()
            .any(|r| r.contains("garbage.wasm") && r.contains("not a WebAssembly component")),
        "{rejected:?}"
    );
    assert!(rejected.iter().any(|r| r.contains("not_a_provider.wasm") && r.contains("implements no Pontoon world")), "{rejected:?}");
    Ok(())
}

#[tokio::test]
async fn identical_modules_are_compiled_once() -> anyhow::Result<()> {
    let runtime = PluginRuntime::new(Limits::default())?;
    let dir = tempfile::tempdir()?;
    let path = test_module("sample_provider")?;
    std::fs::copy(&path, dir.path().join("copy.wasm"))?;
    runtime.load_file(&path).await?;
    runtime.load_file(&dir.path().join("copy.wasm")).await?;
    assert_eq!(runtime.compiled_count(), 1);
    runtime.load_file(&test_module("trap")?).await?;
    assert_eq!(runtime.compiled_count(), 2);
    Ok(())
}

/// `pontoon run --controllers gateway-api` (or `bridge-mounts`): the other
/// world's bundled module is neither compiled nor kept.
#[tokio::test]
async fn only_the_modules_of_the_running_controllers_are_loaded() -> anyhow::Result<()> {
    let providers = pontoon_tests::providers::bundled_providers_dir()?;
    let runtime = PluginRuntime::new(Limits::default())?;
    let gateway_only = Worlds {
        providers: false,
        filters: true,
    };
    let registry = runtime.load_worlds(&[&providers], gateway_only).await?;
    assert!(registry.filter("standard-filters").is_some());
    assert_eq!(registry.provider_names().count(), 0);
    assert_eq!(
        registry.skipped,
        vec![
            providers.join("carrier2mount.wasm"),
            providers.join("tunnel.wasm")
        ],
        "carrier2mount and tunnel (the bridges' connection provider) are listed as left alone"
    );
    assert!(registry.rejected.is_empty());
    assert_eq!(
        runtime.compiled_count(),
        1,
        "carrier2mount and tunnel are not compiled"
    );

    let runtime = PluginRuntime::new(Limits::default())?;
    let mounts_only = Worlds {
        providers: true,
        filters: false,
    };
    let registry = runtime.load_worlds(&[&providers], mounts_only).await?;
    assert!(registry.provider("carrier2mount").is_some());
    assert!(registry.connection("tunnel").is_some());
    assert_eq!(registry.filter_names().count(), 0);
    assert_eq!(runtime.compiled_count(), 2, "carrier2mount and tunnel");
    Ok(())
}

#[tokio::test]
async fn a_restart_with_a_warm_cache_loads_the_providers_without_compiling() -> anyhow::Result<()> {
    let cache = tempfile::tempdir()?;
    let providers = pontoon_tests::providers::bundled_providers_dir()?;
    let first = PluginRuntime::with_cache_dir(Limits::default(), cache.path())?;
    let loaded = first.load_dir(&providers).await?;
    let modules = loaded.provider_names().count()
        + loaded.filter_names().count()
        + loaded.connection_names().count();
    assert!(modules >= 3, "carrier2mount, standard-filters and tunnel");
    assert_eq!(
        first.disk_cache_counts(),
        Some((0, modules)),
        "a cold cache compiles each"
    );
    drop((loaded, first));
    // A new engine on the same directory: the operator after a restart.
    let second = PluginRuntime::with_cache_dir(Limits::default(), cache.path())?;
    let started = Instant::now();
    let loaded = second.load_dir(&providers).await?;
    let took = started.elapsed();
    assert_eq!(
        second.disk_cache_counts(),
        Some((modules, 0)),
        "nothing compiled again"
    );
    assert!(loaded.provider("carrier2mount").is_some());
    println!("{modules} modules loaded from the cache in {took:?}");
    Ok(())
}

#[tokio::test]
async fn a_provider_declaring_more_than_its_grant_is_refused_naming_the_excess()
-> anyhow::Result<()> {
    use pontoon::plugins::{LoadError, grants::Grants};
    let runtime = PluginRuntime::new(Limits::default())?;
    let dir = tempfile::tempdir()?;
    std::fs::copy(
        test_module("sample_provider")?,
        dir.path().join("sample_provider.wasm"),
    )?;
    std::fs::copy(
        pontoon_tests::providers::bundled_provider("carrier2mount")?,
        dir.path().join("carrier2mount.wasm"),
    )?;
    // The chart's grant for carrier2mount, and one for `sample` that lacks
    // what it declares on Pods and deleting ConfigMaps.
    let bundled = std::fs::read_to_string(
        pontoon_tests::repo_root().join("charts/pontoon/files/grants/bundled.yaml"),
    )?;
    let grants_file = dir.path().join("grants.yaml");
    std::fs::write(
        &grants_file,
        format!(
            "{bundled}\nsample:\n  - kinds: [ConfigMap]\n    verbs: [get, list, create, apply, patch]\n    namespace: target\n  - apiGroup: apps\n    kinds: [Deployment, StatefulSet]\n    verbs: [get, list]\n    namespace: target\n"
        ),
    )?;
    let mut registry = runtime.load_dir(dir.path()).await?;
    registry.refuse_ungranted(&Grants::read(&grants_file)?);
    assert!(
        registry.provider("carrier2mount").is_some(),
        "within the chart's grant"
    );
    assert!(registry.provider("sample").is_none());
    let [LoadError::NotGranted { module, excess, .. }] = registry.rejected.as_slice() else {
        panic!("one module refused: {:?}", registry.rejected);
    };
    assert_eq!(module, "sample");
    assert_eq!(
        excess,
        &[
            "delete ConfigMap (core) in the target namespace, any name",
            "get, list Pod (core) in the target namespace, any name",
        ]
    );
    let message = registry.rejected[0].to_string();
    assert!(message.contains("add them to its grant"), "{message}");
    // A broken grants file says where.
    std::fs::write(
        &grants_file,
        "sample: [{kinds: [Pod], verbs: [read], namespace: target}]",
    )?;
    let err = Grants::read(&grants_file).unwrap_err().to_string();
    assert!(
        err.contains("grants.yaml is not valid") && err.contains("read"),
        "{err}"
    );
    Ok(())
}

/// `RequestHeaderModifier` setting `name: value`, as JSON.
fn header_filter(name: &str, value: &str) -> String {
    serde_json::json!({
        "type": "RequestHeaderModifier",
        "requestHeaderModifier": { "set": [{ "name": name, "value": value }] }
    })
    .to_string()
}

fn route_context(route: &str, filter_index: u32) -> RouteContext {
    RouteContext {
        route_namespace: "shop".into(),
        route_name: route.into(),
        rule_index: 0,
        filter_index,
        gateway_namespace: "infra".into(),
        gateway_name: "edge".into(),
    }
}

#[tokio::test]
async fn a_filter_that_traps_fails_alone_in_its_batch() -> anyhow::Result<()> {
    let runtime = PluginRuntime::new(Limits::default())?;
    let filter = filter(&runtime, "header_filter").await?;
    let filters: Vec<String> = (0..6)
        .map(|i| match i {
            1 | 4 => header_filter("x-panic", "boom"),
            _ => header_filter("x-n", &i.to_string()),
        })
        .collect();
    let contexts: Vec<RouteContext> = (0..6).map(|i| route_context("web", i)).collect();
    let items: Vec<(&str, &RouteContext)> =
        filters.iter().map(String::as_str).zip(&contexts).collect();
    let results = filter.translate_all(&items).await;
    assert_eq!(results.len(), 6, "one result per filter");
    for (i, result) in results.iter().enumerate() {
        match (i, result) {
            (1 | 4, Err(err)) => {
                let message = err.to_string();
                assert!(
                    message.contains("header-filter") && message.contains("panic"),
                    "filter {i}: {message}"
                );
            }
            (1 | 4, Ok(entries)) => panic!("filter {i} should have trapped: {entries:?}"),
            (_, Ok(entries)) => {
                let entry: serde_json::Value = serde_json::from_str(&entries[0])?;
                assert_eq!(
                    entry["request_set"][0]["value"],
                    i.to_string(),
                    "filter {i} gets its own translation, after the trap too"
                );
            }
            (_, Err(err)) => panic!("filter {i} failed with its neighbour: {err}"),
        }
    }
    Ok(())
}

/// A batch large enough to be split over the cores comes back in order, a
/// trapped filter is refused alone, and only the module's answers are
/// cached (a trap may pass, so it is tried again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_translator_keeps_order_across_parts_and_does_not_cache_traps() -> anyhow::Result<()> {
    let runtime = PluginRuntime::new(Limits::default())?;
    let mut registry = Registry::default();
    registry.insert(runtime.load_file(&test_module("header_filter")?).await?);
    let translator = Translator::new(Arc::new(registry));
    let trapping = [7_usize, 900];
    let requests: Arc<[FilterRequest]> = (0..1200_usize)
        .map(|i| FilterRequest {
            kind: "RequestHeaderModifier".into(),
            filter: if trapping.contains(&i) {
                header_filter("x-panic", "boom")
            } else {
                header_filter("x-n", &i.to_string())
            },
            context: route_context(&format!("route-{i}"), 0),
        })
        .collect();
    let first = translator.translate(requests.clone()).await;
    assert_eq!(first.len(), requests.len());
    for (i, outcome) in first.iter().enumerate() {
        match outcome {
            Ok(filter) if !trapping.contains(&i) => {
                assert_eq!(filter.entries[0]["request_set"][0]["value"], i.to_string());
                assert_eq!(filter.module, "header-filter");
            }
            Err(issue) if trapping.contains(&i) => {
                assert_eq!(issue.reason, "UnsupportedValue");
                assert!(issue.message.contains("panic"), "{}", issue.message);
            }
            other => panic!("request {i}: unexpected {other:?}"),
        }
    }
    // Again: answers come from the cache (the very entries handed out
    // before), traps are run again and fail the same way.
    let second = translator.translate(requests.clone()).await;
    for (i, (a, b)) in first.iter().zip(&second).enumerate() {
        match (a, b) {
            (Ok(a), Ok(b)) => assert!(Arc::ptr_eq(&a.entries, &b.entries), "request {i}"),
            (Err(a), Err(b)) => assert_eq!(a.message, b.message, "request {i}"),
            _ => panic!("request {i} changed outcome"),
        }
    }
    Ok(())
}

#[tokio::test]
async fn a_config_filter_translates_and_reports_bad_input() -> anyhow::Result<()> {
    let runtime = PluginRuntime::new(Limits::default())?;
    let filter = filter(&runtime, "header_filter").await?;
    assert_eq!(filter.metadata.handles, ["RequestHeaderModifier"]);
    let context = RouteContext {
        route_namespace: "shop".into(),
        route_name: "web".into(),
        rule_index: 0,
        filter_index: 1,
        gateway_namespace: "infra".into(),
        gateway_name: "edge".into(),
    };
    let input = serde_json::json!({
        "type": "RequestHeaderModifier",
        "requestHeaderModifier": { "set": [{ "name": "x-env", "value": "dev" }], "remove": ["x-debug"] }
    });
    let entries = filter.translate(&input.to_string(), &context).await?;
    assert_eq!(entries.len(), 1);
    let entry: serde_json::Value = serde_json::from_str(&entries[0])?;
    assert_eq!(entry["filter"], "headers");
    assert_eq!(entry["request_set"][0]["name"], "x-env");
    assert_eq!(entry["request_remove"][0], "x-debug");

    let wrong = serde_json::json!({ "type": "RequestRedirect", "requestRedirect": {} });
    let err = filter
        .translate(&wrong.to_string(), &context)
        .await
        .expect_err("wrong type is refused");
    assert!(err.to_string().contains("header-filter"), "{err}");
    Ok(())
}

#[tokio::test]
async fn a_scope_with_a_placeholder_followed_by_a_wildcard_is_refused_at_load() -> anyhow::Result<()>
{
    use pontoon::plugins::LoadError;
    let runtime = PluginRuntime::new(Limits::default())?;
    let refused = match runtime.load_file(&test_module("greedy_names")?).await {
        Err(refused) => refused,
        Ok(_) => anyhow::bail!("greedy-names was loaded"),
    };
    assert!(matches!(refused, LoadError::Metadata { .. }), "{refused}");
    let said = refused.to_string();
    assert!(
        said.contains("name `{mount}*`: `{mount}` may not be followed directly by `*`")
            && said.contains("name `{target}-*`: a name with `{target}` must be exact"),
        "names each pattern and why: {said}"
    );
    Ok(())
}
