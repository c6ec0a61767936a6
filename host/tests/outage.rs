//! The API server goes away: kube-apiserver is stopped for a few seconds
//! and started again (tests/testbed/apiserver-restart.sh) while ten mounts
//! are installing and just after a Gateway's route changed. The operator
//! keeps running, says it is not ready while it cannot reach the API server
//! and ready again after; every mount reaches ACTIVE through every state,
//! and the Gateway's config ends up with the route as last written.
//!
//! Its own test binary: cargo runs test binaries one after another, so no
//! other test sees the outage.

use std::{path::Path, process::Command, time::Duration};

use gateway_api::httproutes::HttpRoute;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use kube::api::{Patch, PatchParams, PostParams};
use pontoon::bridge_mount::GefyraBridgeMount;
use pontoon_tests::{gateway_api as crds, wait_for};
use serde_json::json;

mod support;

use support::mounts::*;

const MOUNTS: usize = 10;

fn config_with(needle: &'static str) -> impl Fn(Option<&ConfigMap>) -> bool {
    move |c| {
        c.and_then(|c| c.data.as_ref())
            .and_then(|d| d.get("config.yaml"))
            .is_some_and(|y| y.contains(needle))
    }
}

#[tokio::test]
async fn the_operator_rides_out_an_api_server_restart() -> anyhow::Result<()> {
    crds::install_crds().await?;
    let controller = "pontoon.dev/outage-test";
    let mut bed = Bed::with_flags("outage", &["--gateway-controller-name", controller]).await?;
    let class = bed.gefyra.name().to_string();
    crds::create_class(&class, controller, None).await?;

    // A Gateway with one route, its config written.
    let service: Service = serde_json::from_value(json!({
        "metadata": { "name": "web" },
        "spec": { "selector": { "app": "web" }, "ports": [{ "port": 80, "targetPort": 8080 }] }
    }))?;
    bed.gefyra
        .api::<Service>()
        .create(&PostParams::default(), &service)
        .await?;
    bed.gefyra
        .api::<gateway_api::gateways::Gateway>()
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": { "name": "gw" },
                "spec": { "gatewayClassName": class,
                          "listeners": [{ "name": "http", "port": 80, "protocol": "HTTP" }] }
            }))?,
        )
        .await?;
    let route_spec = |path: &str| {
        json!({ "parentRefs": [{ "name": "gw" }],
                "rules": [{ "matches": [{ "path": { "type": "PathPrefix", "value": path } }],
                            "backendRefs": [{ "name": "web", "port": 80 }] }] })
    };
    let routes = bed.gefyra.api::<HttpRoute>();
    routes
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({ "metadata": { "name": "r" }, "spec": route_spec("/before") }),
            )?,
        )
        .await?;
    let configmaps = bed.gefyra.api::<ConfigMap>();
    wait_for(&configmaps, "praxis-gw", config_with("/before"), TIMEOUT).await?;

    // Ten workloads, then ten mounts at once.
    let names: Vec<String> = (0..MOUNTS).map(|i| format!("web-{i}")).collect();
    bed.deployments(&names).await?;
    assert_eq!(
        bed.operator.get("/readyz").await?.0,
        200,
        "ready before the outage"
    );
    for i in 0..MOUNTS {
        bed.mount(&format!("m-{i}"), &format!("deploy/web-{i}"), "app")
            .await?;
    }
    let installing = |m: &GefyraBridgeMount| m.fields.state.as_deref() == Some("INSTALLING");
    bed.wait_any("no mount installs", installing).await?;
    // The route changes, and at once the API server goes away for 5 s.
    routes
        .patch(
            "r",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": route_spec("/after") })),
        )
        .await?;
    let script = pontoon_tests::repo_root().join("tests/testbed/apiserver-restart.sh");
    let mut restart = Command::new(Path::new(&script)).arg("5").spawn()?;

    // While it is down the operator says it is not ready, naming why.
    let mut not_ready = None;
    let outage = loop {
        if let Ok((503, body)) = bed.operator.get("/readyz").await {
            not_ready.get_or_insert(body);
        }
        if let Some(status) = restart.try_wait()? {
            break status;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    anyhow::ensure!(outage.success(), "apiserver-restart.sh failed: {outage}");
    let body = not_ready.ok_or_else(|| {
        anyhow::anyhow!("/readyz never said not ready while the API server was down")
    })?;
    assert!(body.contains("API server"), "{body}");

    // Ready again once it answers; still the same process.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while bed.operator.get("/readyz").await?.0 != 200 {
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "not ready 30 s after the API server came back:\n{}",
            bed.operator.log_tail(20)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let exited = bed.operator.wait_exit(Duration::ZERO)?;
    assert!(
        exited.is_none() && !bed.operator.log().contains("panicked"),
        "the operator crashed ({exited:?}):\n{}",
        bed.operator.log_tail(30)
    );

    // Every mount through every state.
    for i in 0..MOUNTS {
        let mount = bed.wait_state(&format!("m-{i}"), "ACTIVE").await?;
        let transitions = mount.fields.state_transitions.clone().unwrap_or_default();
        for state in ["PREPARING", "INSTALLING", "ACTIVE"] {
            assert!(
                transitions.contains_key(state),
                "m-{i} has no {state} in {transitions:?}"
            );
        }
    }
    // The Gateway's config is the route as last written.
    wait_for(&configmaps, "praxis-gw", config_with("/after"), TIMEOUT).await?;
    let config = configmaps.get("praxis-gw").await?;
    let yaml = config
        .data
        .as_ref()
        .and_then(|d| d.get("config.yaml"))
        .cloned()
        .unwrap_or_default();
    assert!(
        !yaml.contains("/before"),
        "the old route is still served: {yaml}"
    );
    // A mount left behind would outlive its operator (its finalizer stays).
    for i in 0..MOUNTS {
        bed.delete_mount(&format!("m-{i}")).await?;
    }
    Ok(())
}
