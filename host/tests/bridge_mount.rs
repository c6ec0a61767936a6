//! Bridge mounts end to end on the test bed: an operator process (`pontoon
//! run`) per test, the bundled `carrier2mount.wasm`, mounts created the way
//! Gefyra's client creates them, and what a user would check with kubectl:
//! the state, the shadow copies, the pods running Carrier2 pointed at the
//! shadow, and, after the mount ends, the workload exactly as it was.

use std::{
    collections::{BTreeMap, BTreeSet},
    time::Duration,
};

use anyhow::{Context, bail};
use futures::TryStreamExt;
use k8s_openapi::api::{
    apps::v1::{Deployment, StatefulSet},
    autoscaling::v2::HorizontalPodAutoscaler,
    core::v1::{ConfigMap, Pod, Service},
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
    runtime::{WatchStreamExt, watcher},
};
use pontoon::bridge_mount::{GefyraBridge, GefyraBridgeMount, crd::BridgeMountFields};
use pontoon_tests::{
    TestNamespace,
    operator::{Operator, sample},
    wait_for,
};
use serde_json::json;

mod support;

use support::mounts::*;

#[tokio::test]
async fn a_deployment_with_an_hpa_is_mounted_and_restored_exactly() -> anyhow::Result<()> {
    let bed = Bed::new("bm-deploy").await?;
    let ns = &bed.target;
    ns.api::<Deployment>()
        .create(&PostParams::default(), &deployment("web", 3)?)
        .await?;
    ns.api::<HorizontalPodAutoscaler>()
        .create(&PostParams::default(), &hpa("web")?)
        .await?;
    ready_pods(ns, "app=web", 3).await?;
    let before = Before::take(ns, "app=web").await?;
    bed.mount("web-mount", "deployment/web", "app").await?;
    let active = bed.wait_state("web-mount", "ACTIVE").await?;
    let transitions = active.fields.state_transitions.clone().unwrap_or_default();
    for state in ["PREPARING", "INSTALLING", "ACTIVE"] {
        assert!(
            transitions.contains_key(state),
            "stateTransitions has {state}: {transitions:?}"
        );
    }
    assert_eq!(Bed::ready(&active).0, "Active");

    // The shadow: a copy with every label suffixed, selected by its duplication id.
    let shadow = ns.api::<Deployment>().get("web-gefyra").await?;
    assert_eq!(
        shadow.labels().get("app").map(String::as_str),
        Some("web-gefyra")
    );
    let shadow_template = shadow
        .spec
        .as_ref()
        .and_then(|s| s.template.metadata.as_ref())
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    assert_eq!(
        shadow_template.get("tier").map(String::as_str),
        Some("web-gefyra")
    );
    let id = shadow_template
        .get("bridge.gefyra.dev/duplication-id")
        .context("shadow pods carry a duplication id")?;
    let service = ns.api::<Service>().get("web-app-gefyra-svc").await?;
    let spec = service.spec.context("service without spec")?;
    assert_eq!(
        spec.selector.unwrap_or_default(),
        BTreeMap::from([("bridge.gefyra.dev/duplication-id".to_string(), id.clone())])
    );
    let ports: Vec<i32> = spec
        .ports
        .unwrap_or_default()
        .iter()
        .map(|p| p.port)
        .collect();
    assert_eq!(ports, [80, 8443]);
    let shadow_hpa = ns
        .api::<HorizontalPodAutoscaler>()
        .get("web-gefyra")
        .await?;
    assert_eq!(shadow_hpa.spec.scale_target_ref.name, "web-gefyra");
    let shadow_pods = ready_pods(ns, &format!("bridge.gefyra.dev/duplication-id={id}"), 3).await?;
    for pod in &shadow_pods {
        assert_eq!(
            app_of(pod)?.image.as_deref(),
            Some(APP_IMAGE),
            "shadow pods run the original"
        );
    }

    assert_carrier_everywhere(ns, "app=web", 3, "web-app-gefyra-svc").await?;
    let entries = bed.restore_entries().await?;
    assert_eq!(
        entries.len(),
        3,
        "one restore entry per patched pod: {entries:?}"
    );
    for entry in entries.values() {
        assert!(
            entry.contains(APP_IMAGE),
            "entry keeps the original image: {entry}"
        );
    }

    // Bridges of this mount (as Gefyra's client labels them) end with it; others stay.
    let bridges: Api<GefyraBridge> = bed.gefyra.api();
    for (name, mount) in [("to-web", "web-mount"), ("to-other", "other-mount")] {
        let bridge: GefyraBridge = serde_json::from_value(json!({
            "metadata": { "name": name, "labels": { "gefyra.dev/bridge-mount": mount } },
            "provider": "carrier2",
            "target": mount,
            "targetNamespace": ns.name(),
            "portMappings": ["80:8080"]
        }))?;
        bridges.create(&PostParams::default(), &bridge).await?;
    }

    let uids = |pods: Vec<Pod>| -> BTreeSet<String> {
        pods.iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter_map(|p| p.metadata.uid.clone())
            .collect()
    };
    let mounted = uids(
        ns.api::<Pod>()
            .list(&ListParams::default().labels("app=web"))
            .await?
            .items,
    );
    bed.delete_mount("web-mount").await?;
    assert_restored(&bed, &before, "app=web", 3).await?;
    // Put back in place: the same pods, not a rollout's new ones.
    let restored = uids(
        ns.api::<Pod>()
            .list(&ListParams::default().labels("app=web"))
            .await?
            .items,
    );
    assert_eq!(
        restored, mounted,
        "the pods that ran Carrier2 run the original again"
    );
    assert!(
        bridges.get_opt("to-web").await?.is_none(),
        "the mount's bridge is deleted"
    );
    assert!(
        bridges.get_opt("to-other").await?.is_some(),
        "another mount's bridge stays"
    );
    Ok(())
}

#[tokio::test]
async fn an_active_mount_that_loses_a_patched_pod_installs_again() -> anyhow::Result<()> {
    let bed = Bed::new("bm-intact").await?;
    let ns = &bed.target;
    bed.deploy_web(2).await?;
    bed.mount("web-mount", "deploy/web", "app").await?;
    bed.wait_state("web-mount", "ACTIVE").await?;
    assert_carrier_everywhere(ns, "app=web", 2, "web-app-gefyra-svc").await?;

    // The ReplicaSet replaces a deleted pod with one of the original image:
    // the mount is no longer intact, restores and installs Carrier2 again.
    let seen = tokio::spawn(states_seen_until(bed.mounts(), "web-mount", "ACTIVE"));
    let pods: Api<Pod> = ns.api();
    let victim = pods
        .list(&ListParams::default().labels("app=web"))
        .await?
        .items
        .first()
        .map(|p| p.name_any())
        .context("no pod")?;
    pods.delete(&victim, &DeleteParams::default()).await?;
    let seen = seen.await??;
    assert!(
        seen.windows(2).any(|w| w == ["RESTORING", "INSTALLING"]),
        "went RESTORING -> INSTALLING: {seen:?}"
    );
    assert_eq!(seen.last().map(String::as_str), Some("ACTIVE"), "{seen:?}");
    assert_carrier_everywhere(ns, "app=web", 2, "web-app-gefyra-svc").await?;
    bed.delete_mount("web-mount").await?;
    Ok(())
}

#[tokio::test]
async fn a_statefulset_is_mounted_and_restored_exactly() -> anyhow::Result<()> {
    let bed = Bed::new("bm-sts").await?;
    let ns = &bed.target;
    ns.api::<StatefulSet>()
        .create(&PostParams::default(), &statefulset("db", 2)?)
        .await?;
    ready_pods(ns, "app=db", 2).await?;
    let before = Before::take(ns, "app=db").await?;
    bed.mount("db-mount", "sts/db", "app").await?;
    bed.wait_state("db-mount", "ACTIVE").await?;
    let shadow = ns.api::<StatefulSet>().get("db-gefyra").await?;
    assert_eq!(
        shadow.labels().get("app").map(String::as_str),
        Some("db-gefyra")
    );
    ns.api::<Service>().get("db-app-gefyra-svc").await?;
    assert_carrier_everywhere(ns, "app=db", 2, "db-app-gefyra-svc").await?;

    bed.delete_mount("db-mount").await?;
    assert_restored(&bed, &before, "app=db", 2).await?;
    Ok(())
}

#[tokio::test]
async fn a_bare_pod_is_mounted_and_restored_exactly() -> anyhow::Result<()> {
    let bed = Bed::new("bm-pod").await?;
    let ns = &bed.target;
    ns.api::<Pod>()
        .create(&PostParams::default(), &bare_pod("solo")?)
        .await?;
    ready_pods(ns, "app=solo", 1).await?;
    let before = Before::take(ns, "app=solo").await?;
    let uid = ns.api::<Pod>().get("solo").await?.uid();

    bed.mount("solo-mount", "pod/solo", "app").await?;
    bed.wait_state("solo-mount", "ACTIVE").await?;
    let shadow = ns.api::<Pod>().get("solo-gefyra").await?;
    assert_eq!(
        shadow.labels().get("app").map(String::as_str),
        Some("solo-gefyra")
    );
    assert_carrier_everywhere(ns, "app=solo", 1, "solo-app-gefyra-svc").await?;

    bed.delete_mount("solo-mount").await?;
    assert_restored(&bed, &before, "app=solo", 1).await?;
    assert_eq!(
        ns.api::<Pod>().get("solo").await?.uid(),
        uid,
        "a bare pod is patched back, not replaced"
    );
    Ok(())
}

#[tokio::test]
async fn a_missing_target_that_comes_back_within_the_grace_period_is_mounted_again()
-> anyhow::Result<()> {
    let bed = Bed::new("bm-missing").await?;
    let ns = &bed.target;
    let deployments: Api<Deployment> = ns.api();
    bed.deploy_web(1).await?;
    bed.mount("web-mount", "deploy/web", "app").await?;
    bed.wait_state("web-mount", "ACTIVE").await?;

    deployments
        .delete("web", &DeleteParams::foreground())
        .await?;
    let missing = bed.wait_state("web-mount", "MISSING").await?;
    assert_eq!(Bed::ready(&missing).0, "TargetMissing");
    // MISSING cleans up: no shadow is left while the target is gone.
    let uninstalled = |m: Option<&GefyraBridgeMount>| {
        m.and_then(|m| m.fields.status.as_ref()).is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == "Uninstalled" && c.status == "True")
        })
    };
    wait_for(&bed.mounts(), "web-mount", uninstalled, TIMEOUT).await?;
    assert!(
        deployments.get_opt("web-gefyra").await?.is_none(),
        "shadow removed"
    );
    assert!(
        ns.api::<Service>()
            .get_opt("web-app-gefyra-svc")
            .await?
            .is_none()
    );

    deployments
        .create(&PostParams::default(), &deployment("web", 1)?)
        .await?;
    let again = bed.wait_state("web-mount", "ACTIVE").await?;
    let transitions = again.fields.state_transitions.unwrap_or_default();
    assert!(transitions.contains_key("MISSING"), "{transitions:?}");
    deployments
        .get("web-gefyra")
        .await
        .context("prepare ran again")?;
    assert_carrier_everywhere(ns, "app=web", 1, "web-app-gefyra-svc").await?;
    bed.delete_mount("web-mount").await?;
    Ok(())
}

#[tokio::test]
async fn a_missing_target_past_its_grace_period_terminates_the_mount() -> anyhow::Result<()> {
    let bed = Bed::new("bm-grace").await?;
    let ns = &bed.target;
    let deployments: Api<Deployment> = ns.api();
    bed.deploy_web(1).await?;
    let extra = BridgeMountFields {
        missing_grace_period: Some(2),
        ..Default::default()
    };
    bed.mount_with("web-mount", "deploy/web", "app", extra)
        .await?;
    bed.wait_state("web-mount", "ACTIVE").await?;

    // Watch from now on, to see the states the mount passes through.
    let seen = tokio::spawn(states_seen(bed.mounts(), "web-mount"));
    deployments
        .delete("web", &DeleteParams::foreground())
        .await?;
    bed.wait_gone("web-mount").await?;
    let seen = seen.await??;
    assert!(
        seen.contains(&"MISSING".to_string()) && seen.contains(&"TERMINATED".to_string()),
        "went through MISSING and TERMINATED: {seen:?}"
    );
    assert!(deployments.get_opt("web-gefyra").await?.is_none());
    Ok(())
}

/// The states a mount goes through, from the next change on, until it is
/// in `until` again after having left it.
async fn states_seen_until(
    mounts: Api<GefyraBridgeMount>,
    name: &str,
    until: &str,
) -> anyhow::Result<Vec<String>> {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut stream = std::pin::pin!(watcher(mounts, config).applied_objects());
    let mut seen: Vec<String> = Vec::new();
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    while let Ok(Some(m)) = tokio::time::timeout_at(deadline, stream.try_next()).await? {
        let Some(state) = m.fields.state else {
            continue;
        };
        if seen.last() != Some(&state) {
            seen.push(state.clone());
        }
        if state == until && seen.len() > 1 {
            return Ok(seen);
        }
    }
    bail!("mount {name} did not come back to {until}; states seen: {seen:?}")
}

/// The states a mount is seen in until it is deleted.
async fn states_seen(mounts: Api<GefyraBridgeMount>, name: &str) -> anyhow::Result<Vec<String>> {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut stream = std::pin::pin!(watcher(mounts, config).default_backoff());
    let mut seen: Vec<String> = Vec::new();
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    while let Ok(Some(event)) = tokio::time::timeout_at(deadline, stream.try_next()).await? {
        match event {
            watcher::Event::Apply(m) | watcher::Event::InitApply(m) => {
                if let Some(state) = m.fields.state
                    && seen.last() != Some(&state)
                {
                    seen.push(state);
                }
            }
            watcher::Event::Delete(_) => return Ok(seen),
            _ => {}
        }
    }
    bail!("mount {name} was not deleted; states seen: {seen:?}")
}

#[tokio::test]
async fn a_mount_past_its_sunset_is_terminated() -> anyhow::Result<()> {
    let bed = Bed::new("bm-sunset").await?;
    let ns = &bed.target;
    bed.deploy_web(1).await?;
    let before = Before::take(ns, "app=web").await?;
    let now = k8s_openapi::jiff::Timestamp::now();
    let in_an_hour = now + k8s_openapi::jiff::SignedDuration::from_hours(1);
    let extra = BridgeMountFields {
        sunset: Some(in_an_hour.to_string()),
        ..Default::default()
    };
    bed.mount_with("web-mount", "deploy/web", "app", extra)
        .await?;
    bed.wait_state("web-mount", "ACTIVE").await?;

    // The client moves the sunset into the past (Gefyra writes it without offset).
    let past = (now - k8s_openapi::jiff::SignedDuration::from_mins(1))
        .strftime("%Y-%m-%dT%H:%M:%S")
        .to_string();
    bed.mounts()
        .patch(
            "web-mount",
            &PatchParams::default(),
            &Patch::Merge(json!({ "sunset": past })),
        )
        .await?;
    bed.wait_gone("web-mount").await?;
    assert_restored(&bed, &before, "app=web", 1).await?;

    // A mount created past its sunset never touches the target.
    let extra = BridgeMountFields {
        sunset: Some(past),
        ..Default::default()
    };
    bed.mount_with("late", "deploy/web", "app", extra).await?;
    bed.wait_gone("late").await?;
    assert!(
        ns.api::<Deployment>()
            .get_opt("web-gefyra")
            .await?
            .is_none()
    );
    Ok(())
}

#[tokio::test]
async fn an_invalid_target_or_container_is_an_error_that_names_it() -> anyhow::Result<()> {
    let bed = Bed::new("bm-invalid").await?;
    let ns = &bed.target;
    bed.deploy_web(1).await?;

    bed.mount("bad-kind", "frobnicator/web", "app").await?;
    bed.mount("bad-container", "deploy/web", "nope").await?;
    let bad_kind = bed.wait_state("bad-kind", "ERROR").await?;
    let (reason, message) = Bed::ready(&bad_kind);
    assert_eq!(reason, "InvalidInput");
    assert!(
        message.contains("frobnicator/web"),
        "names the target: {message}"
    );
    let bad_container = bed.wait_state("bad-container", "ERROR").await?;
    let (reason, message) = Bed::ready(&bad_container);
    assert_eq!(reason, "InvalidInput");
    assert!(message.contains("nope"), "names the container: {message}");
    assert!(
        ns.api::<Deployment>()
            .get_opt("web-gefyra")
            .await?
            .is_none(),
        "nothing was duplicated for a container that does not exist"
    );

    let edited = bed
        .mounts()
        .patch(
            "bad-kind",
            &PatchParams::default(),
            &Patch::Merge(json!({ "target": "deploy/web" })),
        )
        .await;
    let refused = format!("{:?}", edited.expect_err("the target cannot be changed"));
    assert!(
        refused.contains("target cannot be added, changed or removed once the mount exists"),
        "{refused}"
    );

    bed.delete_mount("bad-kind").await?;
    bed.delete_mount("bad-container").await?;
    Ok(())
}

#[tokio::test]
async fn a_mount_naming_an_unknown_provider_says_so() -> anyhow::Result<()> {
    install_crds().await?;
    let gefyra = TestNamespace::new("bm-noprov-gefyra").await?;
    // The provider directory also holds a file that is no component: the
    // operator says which and carries on with the others.
    let providers = tempfile::tempdir()?;
    std::fs::copy(
        pontoon_tests::providers::bundled_provider("carrier2mount")?,
        providers.path().join("carrier2mount.wasm"),
    )?;
    std::fs::write(providers.path().join("broken.wasm"), b"not a component")?;
    let mut operator = Operator::start_with_providers(
        std::path::Path::new(env!("CARGO_BIN_EXE_pontoon")),
        gefyra.name(),
        providers.path(),
        &[],
    )?;
    let mounts: Api<GefyraBridgeMount> = gefyra.api();
    let mount = GefyraBridgeMount {
        metadata: kube::api::ObjectMeta {
            name: Some("web-mount".into()),
            ..Default::default()
        },
        fields: BridgeMountFields {
            target_namespace: Some(gefyra.name().into()),
            target: Some("deploy/web".into()),
            target_container: Some("app".into()),
            provider: Some("teleporter".into()),
            ..Default::default()
        },
    };
    mounts.create(&PostParams::default(), &mount).await?;
    let in_error = |m: Option<&GefyraBridgeMount>| {
        m.is_some_and(|m| m.fields.state.as_deref() == Some("ERROR"))
    };
    let mount = wait_for(&mounts, "web-mount", in_error, TIMEOUT)
        .await
        .with_context(|| operator.log_tail(30))?
        .context("mount vanished")?;
    let (reason, message) = Bed::ready(&mount);
    assert_eq!(reason, "ProviderNotFound");
    assert!(
        message.contains("`teleporter`") && message.contains("carrier2mount"),
        "names the provider and the loaded ones: {message}"
    );
    let log = operator.log();
    assert!(
        log.lines()
            .any(|l| l.contains("rejected module") && l.contains("broken.wasm")),
        "the rejected file is named in the log:\n{log}"
    );
    // Deleting a mount that never did anything needs no provider.
    mounts.delete("web-mount", &DeleteParams::default()).await?;
    let gone = |m: Option<&GefyraBridgeMount>| m.is_none();
    wait_for(&mounts, "web-mount", gone, TIMEOUT).await?;

    let status = operator.terminate(Duration::from_secs(20))?;
    assert!(
        status.success(),
        "SIGTERM stops the operator cleanly: {status}\n{}",
        operator.log_tail(30)
    );
    assert!(
        operator.log().contains("bridge-mount controller stopped"),
        "{}",
        operator.log_tail(10)
    );
    Ok(())
}

#[tokio::test]
async fn a_second_mount_of_the_same_container_is_refused() -> anyhow::Result<()> {
    let bed = Bed::new("bm-dup").await?;
    bed.deploy_web(1).await?;
    bed.mount("first", "deploy/web", "app").await?;
    bed.wait_state("first", "ACTIVE").await?;
    bed.mount("second", "deployment/web", "app").await?;
    let second = bed.wait_state("second", "ERROR").await?;
    let (reason, message) = Bed::ready(&second);
    assert_eq!(reason, "DuplicateMount");
    assert!(
        message.contains("/first"),
        "names the first mount: {message}"
    );
    let first = bed.mounts().get("first").await?;
    assert_eq!(
        first.fields.state.as_deref(),
        Some("ACTIVE"),
        "the first is untouched"
    );
    bed.delete_mount("second").await?;
    bed.delete_mount("first").await?;
    Ok(())
}

#[tokio::test]
async fn an_operator_killed_while_installing_converges_and_still_restores_exactly()
-> anyhow::Result<()> {
    let mut bed = Bed::new("bm-crash").await?;
    let ns = &bed.target;
    bed.deploy_web(3).await?;
    let before = Before::take(ns, "app=web").await?;
    let installing = tokio::spawn(first_seen_in(bed.mounts(), "web-mount", "INSTALLING"));
    bed.mount("web-mount", "deploy/web", "app").await?;
    installing.await??;
    bed.operator.kill()?;
    let killed_in = bed.mounts().get("web-mount").await?.fields.state;
    assert_eq!(
        killed_in.as_deref(),
        Some("INSTALLING"),
        "the operator was killed while installing"
    );

    bed.operator.restart()?;
    bed.wait_state("web-mount", "ACTIVE").await?;
    assert_carrier_everywhere(ns, "app=web", 3, "web-app-gefyra-svc").await?;
    bed.delete_mount("web-mount").await?;
    assert_restored(&bed, &before, "app=web", 3).await?;
    Ok(())
}

/// Returns as soon as the mount is seen in `state`.
async fn first_seen_in(
    mounts: Api<GefyraBridgeMount>,
    name: &str,
    state: &str,
) -> anyhow::Result<()> {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut stream = std::pin::pin!(watcher(mounts, config).applied_objects());
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    while let Ok(Some(mount)) = tokio::time::timeout_at(deadline, stream.try_next()).await? {
        if mount.fields.state.as_deref() == Some(state) {
            return Ok(());
        }
    }
    bail!("mount {name} was never seen in {state}")
}

#[tokio::test]
async fn health_readiness_and_metrics_show_an_active_mount() -> anyhow::Result<()> {
    let bed = Bed::new("bm-metrics").await?;
    let (status, body) = bed.operator.get("/healthz").await?;
    assert_eq!((status, body.as_str()), (200, "ok\n"));
    bed.deploy_web(1).await?;
    bed.mount("web-mount", "deploy/web", "app").await?;
    bed.wait_state("web-mount", "ACTIVE").await?;

    let (status, body) = bed.operator.get("/readyz").await?;
    assert_eq!(
        (status, body.as_str()),
        (200, "ok\n"),
        "providers loaded, cache synced"
    );
    // The gauge counts the operator's own cache, which may see ACTIVE a
    // moment after this test's watch did: the next scrape shows it.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let metrics = loop {
        let (status, metrics) = bed.operator.get("/metrics").await?;
        assert_eq!(status, 200);
        let active = sample(&metrics, r#"pontoon_bridge_mounts{state="ACTIVE"}"#);
        if active == Some(1.0) {
            break metrics;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the gauge never showed the ACTIVE mount: {metrics}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let log = || bed.operator.log_tail(20);
    assert_eq!(
        sample(&metrics, r#"pontoon_bridge_mounts{state="ERROR"}"#),
        Some(0.0),
        "every state is listed: {metrics}"
    );
    let reconciles = sample(
        &metrics,
        r#"pontoon_reconciles_total{controller="bridge-mount",result="ok"}"#,
    );
    assert!(
        reconciles.is_some_and(|n| n >= 3.0),
        "REQUESTED..ACTIVE: {metrics}\n{}",
        log()
    );
    for step in ["prepare", "install"] {
        let calls = sample(
            &metrics,
            &format!(
                r#"pontoon_provider_calls_total{{module="carrier2mount",step="{step}",result="returned"}}"#
            ),
        );
        assert!(calls.is_some_and(|n| n >= 1.0), "{step}: {metrics}");
        let timed = sample(
            &metrics,
            &format!(
                r#"pontoon_provider_call_seconds_count{{module="carrier2mount",step="{step}"}}"#
            ),
        );
        assert_eq!(timed, calls, "every {step} call is timed: {metrics}");
    }
    assert_eq!(sample(&metrics, "pontoon_leader"), Some(1.0), "{metrics}");
    assert!(
        !metrics.contains("pontoon_sandbox_stops_total{"),
        "no call was stopped: {metrics}"
    );
    let (status, _) = bed.operator.get("/nope").await?;
    assert_eq!(status, 404);
    // The provider's own log lines carry its name, not the host's code path.
    let log = bed.operator.log();
    assert!(
        log.contains("provider: carrier2mount: created shadow"),
        "{log}"
    );
    assert!(!log.contains("pontoon::plugins::host::log"), "{log}");
    bed.delete_mount("web-mount").await?;
    Ok(())
}

fn leading(op: &Operator) -> bool {
    op.log().contains("leading: starting the controllers")
}

/// A second replica beside `bed`'s operator, returned once one of the two
/// leads.
async fn second_replica(bed: &Bed, flags: &[&str]) -> anyhow::Result<Operator> {
    let second = Operator::start_replica(
        std::path::Path::new(env!("CARGO_BIN_EXE_pontoon")),
        bed.gefyra.name(),
        "second",
        flags,
    )?;
    let deadline = std::time::Instant::now() + TIMEOUT;
    while !leading(&bed.operator) && !leading(&second) {
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "nobody leads\n{}\n---\n{}",
            bed.operator.log_tail(20),
            second.log_tail(20)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(second)
}

/// Leader election with a short Lease, so that a take-over is quick to see:
/// the shortest the operator accepts with 1 s provider calls (renew
/// deadline 2 s + 1 s call + 5 s to stop it < 9 s).
const SHORT_LEASE: [&str; 9] = [
    "--leader-elect",
    "--leader-elect-lease-duration",
    "9",
    "--leader-elect-renew-deadline",
    "2",
    "--leader-elect-retry-period",
    "1",
    "--provider-deadline",
    "1",
];

/// One request of a replica, as the test bed's audit log recorded it.
struct Request {
    verb: String,
    resource: String,
    name: String,
    code: i64,
}

/// The requests of the operator process `pid` (its `User-Agent` names the
/// replica `<host>-<pid>`) in the test bed's audit log, from byte `from` on.
fn audited_requests_of(pid: u32, from: usize) -> anyhow::Result<Vec<Request>> {
    let log = std::fs::read(pontoon_tests::testbed_dir().join("logs/audit.log"))?;
    let agent = format!("-{pid})");
    let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
    let mut requests = Vec::new();
    for line in String::from_utf8_lossy(&log[from.min(log.len())..]).lines() {
        let Ok(event) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let by = event["userAgent"].as_str().unwrap_or_default();
        if !(by.starts_with("pontoon/") && by.ends_with(&agent)) {
            continue;
        }
        let object = &event["objectRef"];
        requests.push(Request {
            verb: text(&event["verb"]),
            resource: match object["subresource"].as_str() {
                Some(sub) => format!("{}/{sub}", text(&object["resource"])),
                None => text(&object["resource"]),
            },
            name: text(&object["name"]),
            code: event["responseStatus"]["code"].as_i64().unwrap_or_default(),
        });
    }
    Ok(requests)
}

/// Whether a request changed the cluster (or ran a command in a pod).
fn is_write(request: &Request) -> bool {
    !matches!(request.verb.as_str(), "get" | "list" | "watch")
        || ["exec", "attach", "portforward"]
            .iter()
            .any(|sub| request.resource.ends_with(&format!("/{sub}")))
}

#[tokio::test]
async fn a_leader_frozen_past_its_lease_writes_nothing_after_a_standby_took_over()
-> anyhow::Result<()> {
    // The replicas authenticate as a ServiceAccount, so that the test bed's
    // audit log records their requests (it records ServiceAccounts only).
    let accounts = TestNamespace::new("bm-fence-sa").await?;
    accounts
        .api::<k8s_openapi::api::core::v1::ServiceAccount>()
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({ "metadata": { "name": "pontoon" } }))?,
        )
        .await?;
    let bindings: Api<k8s_openapi::api::rbac::v1::ClusterRoleBinding> =
        Api::all(pontoon_tests::client().await?);
    let binding = format!("{}-admin", accounts.name());
    bindings
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": { "name": binding },
                "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin" },
                "subjects": [{ "kind": "ServiceAccount", "name": "pontoon", "namespace": accounts.name() }],
            }))?,
        )
        .await?;
    let outcome = frozen_leader(&accounts).await;
    let _ = bindings.delete(&binding, &DeleteParams::default()).await;
    outcome
}

async fn frozen_leader(accounts: &TestNamespace) -> anyhow::Result<()> {
    let work = pontoon_tests::providers::target_dir().join(format!("fence-{}", accounts.name()));
    let kubeconfig = pontoon_tests::kubelet::as_service_account(accounts.name(), "pontoon", &work)?;
    let kubeconfig = kubeconfig.display().to_string();
    let flags: Vec<&str> = SHORT_LEASE
        .iter()
        .copied()
        .chain(["--kubeconfig", &kubeconfig])
        .collect();
    let mut bed = Bed::with_flags("bm-fence", &flags).await?;
    let second = second_replica(&bed, &flags).await?;
    // From here on `bed.operator` is the leader and `standby` the other.
    let mut standby = second;
    if leading(&standby) {
        std::mem::swap(&mut bed.operator, &mut standby);
    }
    let leader_pid = bed.operator.pid().context("the leader runs")?;

    // Work in flight when the leader freezes: three mounts, frozen as soon
    // as the first one is installing.
    let names = ["web-a", "web-b", "web-c"];
    bed.deployments(&names).await?;
    let mounts = bed.mounts();
    for name in names {
        let mount: GefyraBridgeMount = serde_json::from_value(json!({
            "apiVersion": "gefyra.dev/v1",
            "kind": "gefyrabridgemount",
            "metadata": { "name": format!("{name}-mount") },
            "provider": "carrier2mount",
            "targetNamespace": bed.target.name(),
            "target": format!("deployment/{name}"),
            "targetContainer": "app",
        }))?;
        mounts.create(&PostParams::default(), &mount).await?;
    }
    let installing = |m: &GefyraBridgeMount| {
        m.fields
            .state
            .as_deref()
            .is_some_and(|s| s != "REQUESTED" && s != "PREPARING")
    };
    bed.wait_any("no mount installs", installing).await?;
    bed.operator.signal("STOP")?;
    let frozen = std::time::Instant::now();

    // The standby takes over once the Lease expired, and finishes the mounts.
    while !leading(&standby) {
        anyhow::ensure!(
            frozen.elapsed() < Duration::from_secs(60),
            "the standby did not take over:\n{}",
            standby.log_tail(20)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let took = frozen.elapsed();
    // Everything the leader sent before it froze is in the log by now (its
    // requests were answered seconds ago); what follows is after the take-over.
    let audit = pontoon_tests::testbed_dir().join("logs/audit.log");
    let taken_over_at = usize::try_from(std::fs::metadata(&audit)?.len())?;
    for name in names {
        bed.wait_state(&format!("{name}-mount"), "ACTIVE")
            .await
            .map_err(|e| anyhow::anyhow!("{e}\n--- new leader ---\n{}", standby.log_tail(30)))?;
    }

    // The old leader wakes with its reconciles in flight: it must notice its
    // lost Lease and exit without a single write.
    bed.operator.signal("CONT")?;
    let exited = bed.operator.wait_exit(Duration::from_secs(20))?;
    let log = bed.operator.log();
    assert!(
        exited.is_some_and(|status| !status.success()),
        "the old leader did not exit after losing its Lease ({exited:?}):\n{}",
        bed.operator.log_tail(30)
    );
    assert!(
        log.contains("lost the leader Lease"),
        "{}",
        bed.operator.log_tail(30)
    );
    // The API server writes an audit line once it answered; the old
    // leader's last request, if any, was answered before it exited.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = audited_requests_of(leader_pid, 0)?;
    assert!(
        before.iter().any(is_write),
        "the audit log shows no write of the leader (pid {leader_pid}) at all: the test cannot tell"
    );
    let after: Vec<String> = audited_requests_of(leader_pid, taken_over_at)?
        .iter()
        .filter(|r| is_write(r))
        .map(|r| format!("{} {} {} -> {}", r.verb, r.resource, r.name, r.code))
        .collect();
    assert!(
        after.is_empty(),
        "the old leader (pid {leader_pid}, frozen {took:?} until a standby led) wrote after the take-over: {after:#?}\n{}",
        bed.operator.log_tail(40)
    );
    // The new leader still serves: a mount deleted now is restored.
    // Mounts left behind would outlive their operators (finalizers stay).
    for name in names {
        bed.delete_mount(&format!("{name}-mount")).await?;
    }
    Ok(())
}

#[tokio::test]
async fn with_leader_election_one_operator_acts_and_a_standby_takes_over() -> anyhow::Result<()> {
    let flags = SHORT_LEASE;
    let mut bed = Bed::with_flags("bm-leader", &flags).await?;
    let mut second = second_replica(&bed, &flags).await?;
    let first_leads = leading(&bed.operator);
    bed.deploy_web(1).await?;
    bed.mount("web-mount", "deploy/web", "app").await?;
    bed.wait_state("web-mount", "ACTIVE").await?;
    // The standby stands by: it never reconciled, and it is ready anyway
    // (so a rollout of replicas proceeds).
    {
        let (leader, standby) = if first_leads {
            (&bed.operator, &second)
        } else {
            (&second, &bed.operator)
        };
        assert!(
            leader.log().contains("reconciled"),
            "{}",
            leader.log_tail(20)
        );
        let log = standby.log();
        assert!(log.contains("standing by: another replica leads"), "{log}");
        assert!(!log.contains("reconciled"), "the standby acted:\n{log}");
        let (_, metrics) = standby.get("/metrics").await?;
        assert_eq!(sample(&metrics, "pontoon_leader"), Some(0.0), "{metrics}");
        assert!(
            !metrics.contains(r#"controller="bridge-mount""#),
            "the standby counted reconciles: {metrics}"
        );
        assert_eq!(standby.get("/readyz").await?.0, 200);
    }

    // The leader crashes (SIGKILL: no hand-over); the standby takes over
    // once the Lease expires, and serves what changes next.
    let killed = std::time::Instant::now();
    let standby = if first_leads {
        bed.operator.kill()?;
        &second
    } else {
        second.kill()?;
        &bed.operator
    };
    while !leading(standby) {
        anyhow::ensure!(
            killed.elapsed() < Duration::from_secs(30),
            "the standby did not take over:\n{}",
            standby.log_tail(20)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let took = killed.elapsed();
    assert!(
        took <= Duration::from_secs(11),
        "take-over after {took:?}; the Lease lasts 9 s and is tried every 1 s"
    );
    bed.delete_mount("web-mount").await?;
    // Restored by the new leader: the original pods carry no Carrier2.
    bed.mount("web-mount-2", "deploy/web", "app").await?;
    bed.wait_state("web-mount-2", "ACTIVE")
        .await
        .map_err(|e| anyhow::anyhow!("{e}\n--- new leader ---\n{}", standby.log_tail(30)))?;
    // A mount left behind would outlive its operator (its finalizer stays).
    bed.delete_mount("web-mount-2").await?;
    Ok(())
}

#[tokio::test]
async fn oversized_fields_are_refused_naming_the_field_and_the_limit() -> anyhow::Result<()> {
    let bed = Bed::new("bm-oversized").await?;
    bed.deploy_web(1).await?;
    // A 1 MiB providerParameter: the API server stores it, the operator
    // refuses it before any provider sees it, saying how large it is.
    let blob = serde_json::Map::from_iter([(
        "blob".to_string(),
        serde_json::Value::String("x".repeat(1024 * 1024)),
    )]);
    bed.mount_with(
        "huge",
        "deploy/web",
        "app",
        BridgeMountFields {
            provider_parameter: Some(blob),
            ..BridgeMountFields::default()
        },
    )
    .await?;
    let refused = bed.wait_state("huge", "ERROR").await?;
    let (reason, message) = Bed::ready(&refused);
    assert_eq!(reason, "InvalidInput");
    assert!(
        message.starts_with(
            "providerParameter is 1048587 bytes of JSON and a mount may carry at most 65536"
        ),
        "{message}"
    );
    // Nothing was made for it.
    assert!(
        bed.target
            .api::<Deployment>()
            .get_opt("web-gefyra")
            .await?
            .is_none(),
        "a shadow exists for a refused mount"
    );
    // Names past what Kubernetes allows are refused by the CRD at once.
    let long = format!("deploy/{}", "a".repeat(320));
    let err = bed
        .mount("long", &long, "app")
        .await
        .expect_err("a 327-character target was stored");
    let text = err.to_string();
    assert!(
        text.contains("target") && text.contains("320"),
        "the API server names the field and its limit: {text}"
    );
    let err = bed
        .mount("long-container", "deploy/web", &"c".repeat(64))
        .await
        .expect_err("a 64-character container was stored");
    assert!(err.to_string().contains("targetContainer"), "{err}");
    bed.delete_mount("huge").await?;
    Ok(())
}

/// Every value a watch saw of one mount: its states in order and each
/// stateTransitions entry.
#[derive(Default)]
struct Seen {
    states: Vec<String>,
    transitions: BTreeMap<String, std::collections::BTreeSet<String>>,
}

#[tokio::test]
async fn a_second_writer_racing_the_operator_loses_no_transition_and_doubles_none()
-> anyhow::Result<()> {
    let bed = Bed::new("bm-race").await?;
    let names = ["web-a", "web-b", "web-c"];
    bed.deployments(&names).await?;
    // The test's own watch records every version of every mount.
    let seen = std::sync::Arc::new(std::sync::Mutex::new(BTreeMap::<String, Seen>::new()));
    let watch = {
        let seen = seen.clone();
        let stream = watcher(bed.mounts(), watcher::Config::default())
            .applied_objects()
            .try_for_each(move |m: GefyraBridgeMount| {
                let mut seen = seen.lock().unwrap();
                let entry = seen.entry(m.name_any()).or_default();
                if let Some(state) = m.fields.state.clone()
                    && entry.states.last() != Some(&state)
                {
                    entry.states.push(state);
                }
                for (state, at) in m.fields.state_transitions.clone().unwrap_or_default() {
                    entry.transitions.entry(state).or_default().insert(at);
                }
                std::future::ready(Ok(()))
            });
        tokio::spawn(stream)
    };

    // The second writer: one task per mount replaces it (a label, and a
    // condition of its own in the status), one the restore ConfigMap (an
    // annotation), each write bound to the version it read and sent a
    // moment after the read (the window in which the operator's writes
    // land), until the mounts are ACTIVE; each counts the conflicts it met.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let window = Duration::from_millis(20);
    let mut writers = tokio::task::JoinSet::new();
    for name in names {
        let (mounts, stop) = (bed.mounts(), stop.clone());
        let name = format!("{name}-mount");
        writers.spawn(async move {
            let (mut writes, mut conflicts) = (0u32, 0u32);
            let mut round = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                round += 1;
                let Ok(Some(mut mount)) = mounts.get_opt(&name).await else {
                    tokio::time::sleep(window).await;
                    continue;
                };
                mount
                    .labels_mut()
                    .insert("race.pontoon.dev/round".into(), round.to_string());
                let status = mount.fields.status.get_or_insert_with(Default::default);
                status.conditions.retain(|c| c.type_ != "RaceTest");
                status.conditions.push(Condition {
                    type_: "RaceTest".into(),
                    status: "True".into(),
                    reason: "Round".into(),
                    message: format!("round {round}"),
                    last_transition_time: Time(k8s_openapi::jiff::Timestamp::now()),
                    observed_generation: None,
                });
                tokio::time::sleep(window).await;
                match mounts.replace(&name, &PostParams::default(), &mount).await {
                    Ok(_) => writes += 1,
                    Err(kube::Error::Api(s)) if s.code == 409 => conflicts += 1,
                    Err(err) => return Err(anyhow::anyhow!("writing {name}: {err}")),
                }
            }
            Ok::<_, anyhow::Error>((writes, conflicts))
        });
    }
    {
        let (configmaps, stop) = (bed.gefyra.api::<ConfigMap>(), stop.clone());
        writers.spawn(async move {
            let (mut writes, mut conflicts) = (0u32, 0u32);
            let mut round = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                round += 1;
                // The first mount's restore ConfigMap, once there is one.
                let Ok(listed) = configmaps.list(&ListParams::default()).await else {
                    tokio::time::sleep(window).await;
                    continue;
                };
                let Some(mut restore) = listed
                    .items
                    .into_iter()
                    .filter(|c| c.name_any().starts_with("gefyra-carrier2-restore-"))
                    .min_by_key(|c| c.name_any())
                else {
                    tokio::time::sleep(window).await;
                    continue;
                };
                let restore_name = restore.name_any();
                restore
                    .annotations_mut()
                    .insert("race.pontoon.dev/round".into(), round.to_string());
                tokio::time::sleep(window).await;
                match configmaps
                    .replace(&restore_name, &PostParams::default(), &restore)
                    .await
                {
                    Ok(_) => writes += 1,
                    Err(kube::Error::Api(s)) if s.code == 409 => conflicts += 1,
                    Err(err) => {
                        return Err(anyhow::anyhow!("writing the restore ConfigMap: {err}"));
                    }
                }
            }
            Ok::<_, anyhow::Error>((writes, conflicts))
        });
    }
    for name in names {
        bed.mount(&format!("{name}-mount"), &format!("deploy/{name}"), "app")
            .await?;
    }
    for name in names {
        bed.wait_state(&format!("{name}-mount"), "ACTIVE").await?;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (mut writes, mut conflicts) = (0, 0);
    while let Some(counts) = writers.join_next().await {
        let (w, c) = counts??;
        writes += w;
        conflicts += c;
    }
    // The watch has seen the last versions by now.
    tokio::time::sleep(Duration::from_millis(500)).await;
    watch.abort();

    assert!(writes > 0, "the second writer never wrote");
    assert!(
        conflicts > 0,
        "the second writer met no conflict in {writes} writes: nothing raced"
    );
    let (_, metrics) = bed.operator.get("/metrics").await?;
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    let order = ["REQUESTED", "PREPARING", "INSTALLING", "ACTIVE"];
    for name in names {
        let mount = format!("{name}-mount");
        let seen = seen.get(&mount).context("the watch saw the mount")?;
        // States only move forward: no transition undone or repeated.
        let ranks: Vec<usize> = seen
            .states
            .iter()
            .map(|s| order.iter().position(|o| o == s).unwrap_or(usize::MAX))
            .collect();
        assert!(
            ranks.windows(2).all(|w| w[0] < w[1]) && ranks.last() == Some(&3),
            "{mount} went {:?}",
            seen.states
        );
        // Each transition written once: its time never rewritten.
        for state in ["PREPARING", "INSTALLING", "ACTIVE"] {
            let times = seen.transitions.get(state);
            assert_eq!(
                times.map(|t| t.len()),
                Some(1),
                "{mount}: stateTransitions.{state} seen as {times:?}"
            );
        }
        // Monotonic: each state entered no earlier than the one before.
        let at = |state: &str| seen.transitions[state].first().cloned().unwrap_or_default();
        assert!(
            at("PREPARING") <= at("INSTALLING") && at("INSTALLING") <= at("ACTIVE"),
            "{mount}: {:?}",
            seen.transitions
        );
    }
    let operator = |result: &str| {
        sample(
            &metrics,
            &format!(r#"pontoon_reconciles_total{{controller="bridge-mount",result="{result}"}}"#),
        )
        .unwrap_or(0.0)
    };
    println!(
        "second writer: {writes} writes, {conflicts} conflicts; operator: {} reconciles, {} lost a race and were retried",
        operator("ok") + operator("conflict"),
        operator("conflict")
    );
    for name in names {
        bed.delete_mount(&format!("{name}-mount")).await?;
    }
    Ok(())
}
