//! A GefyraBridge's life as a user sees it with kubectl: refused with a
//! message naming the field, fixed and ACTIVE, rendered into the Carrier2
//! config of every pod of its mount, updated when its rules change, waiting
//! in REQUESTED while its mount is MISSING and ACTIVE again with it, gone
//! from every pod when deleted, and deleted with its mount. On the test
//! bed's control plane (the pods are kwok's; the traffic through them is
//! `mount_traffic.rs`).

mod support;

use anyhow::bail;
use k8s_openapi::api::{apps::v1::Deployment, core::v1::Pod};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
};
use pontoon::bridge_mount::GefyraBridge;
use pontoon_tests::wait_for;
use serde_json::{Value, json};
use support::mounts::{Bed, TIMEOUT, carrier_config, deployment, ready_pods};

/// A GefyraBridge as Gefyra's client writes it, on port 80 of `app`, in
/// namespace `ns` for a mount whose target is in `target_ns`; its requests
/// go to Gefyra's client network (192.168.101.0/24, which the bed's
/// operator allows).
fn bridge(
    name: &str,
    mount: &str,
    ns: &str,
    target_ns: &str,
    header: &str,
    mapping: &str,
) -> Value {
    json!({
        "apiVersion": "gefyra.dev/v1",
        "kind": "gefyrabridge",
        "metadata": { "name": name, "namespace": ns,
                      "labels": { "gefyra.dev/bridge-mount": mount } },
        "provider": "carrier2",
        "providerParameter": { "rules": [
            { "match": [{ "matchHeader": { "name": "x-gefyra", "value": header, "type": "exact" } }] }
        ] },
        "connectionProvider": "stowaway",
        "client": "client-a",
        "targetNamespace": target_ns,
        "target": mount,
        "targetContainer": "app",
        "portMappings": [mapping],
        "handleProbes": true,
        "destinationIP": "192.168.101.1",
    })
}

/// The operator lets bridges send requests to Gefyra's client network too.
const GEFYRA_CLIENTS: &str = "--bridge-destinations=cluster,192.168.101.0/24";

async fn create(api: &Api<GefyraBridge>, object: Value) -> anyhow::Result<()> {
    api.create(&PostParams::default(), &serde_json::from_value(object)?)
        .await?;
    Ok(())
}

/// Waits for `state`; the bridge as it then is.
async fn wait_bridge(
    api: &Api<GefyraBridge>,
    name: &str,
    state: &str,
) -> anyhow::Result<GefyraBridge> {
    let reached =
        |b: Option<&GefyraBridge>| b.is_some_and(|b| b.bridge.state.as_deref() == Some(state));
    match wait_for(api, name, reached, TIMEOUT).await {
        Ok(Some(bridge)) => Ok(bridge),
        Ok(None) => bail!("bridge {name} is gone"),
        Err(err) => {
            let now = api.get_opt(name).await?;
            bail!(
                "{err}: bridge {name} wanted {state}, is {:?} ({:?})",
                now.as_ref().and_then(|b| b.bridge.state.clone()),
                now.as_ref().and_then(|b| b.bridge.status.clone())
            )
        }
    }
}

fn message(bridge: &GefyraBridge) -> String {
    bridge
        .bridge
        .status
        .as_ref()
        .and_then(|s| s.get("message"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// The `bridges` of port 80 in every pod's Carrier2 config, by pod.
async fn bridges_in_pods(pods: &Api<Pod>) -> anyhow::Result<Vec<(String, Value)>> {
    let mut out = Vec::new();
    for pod in pods
        .list(&ListParams::default().labels("app=web"))
        .await?
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
    {
        let name = pod.name_any();
        let config = carrier_config(pods, &name).await.unwrap_or(Value::Null);
        let on_80 = config["proxy"]
            .as_array()
            .and_then(|ports| ports.iter().find(|p| p["port"] == 80))
            .map(|p| p["bridges"].clone())
            .unwrap_or(Value::Null);
        out.push((name, on_80));
    }
    Ok(out)
}

/// Waits until each of `pods` (that many) holds bridges satisfying `ok`.
async fn until_pods(
    pods: &Api<Pod>,
    count: usize,
    what: &str,
    ok: impl Fn(&Value) -> bool,
) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    let mut last = Vec::new();
    while started.elapsed() < TIMEOUT {
        last = bridges_in_pods(pods).await?;
        if last.len() == count && last.iter().all(|(_, b)| ok(b)) {
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    bail!("{what}: not in every pod within {TIMEOUT:?}; their bridges: {last:?}")
}

fn header_of(bridges: &Value, name: &str) -> Option<String> {
    bridges[name]["rules"][0]["match"][0]["matchHeader"]["value"]
        .as_str()
        .map(str::to_string)
}

#[tokio::test]
async fn a_bridge_is_refused_fixed_rendered_updated_carried_through_missing_and_removed()
-> anyhow::Result<()> {
    let bed = Bed::with_flags("br-life", &[GEFYRA_CLIENTS]).await?;
    let outcome = life(&bed).await;
    if outcome.is_err() {
        let _ = bed.delete_mount("web-mount").await;
    }
    outcome
}

async fn life(bed: &Bed) -> anyhow::Result<()> {
    let ns = &bed.target;
    let pods: Api<Pod> = ns.api();
    let bridges: Api<GefyraBridge> = bed.gefyra.api();
    let gefyra = bed.gefyra.name().to_string();
    bed.deploy_web(2).await?;
    bed.mount("web-mount", "deploy/web", "app").await?;
    bed.wait_state("web-mount", "ACTIVE").await?;

    // Refused, each with the field to change.
    create(
        &bridges,
        bridge(
            "wrong-port",
            "web-mount",
            &gefyra,
            ns.name(),
            "peer0",
            "8080:9999",
        ),
    )
    .await?;
    let mut bad_rule = bridge(
        "bad-rule",
        "web-mount",
        &gefyra,
        ns.name(),
        "peer9",
        "8081:80",
    );
    bad_rule["providerParameter"]["rules"][0]["match"][0]["matchHeader"]["type"] = json!("regex");
    bad_rule["providerParameter"]["rules"][0]["match"][0]["matchHeader"]["value"] = json!("(");
    create(&bridges, bad_rule).await?;
    let refused = wait_bridge(&bridges, "wrong-port", "ERROR").await?;
    assert!(
        message(&refused)
            .contains("portMappings[0]: remote port 9999 is not a port of container `app`"),
        "{}",
        message(&refused)
    );
    let refused = wait_bridge(&bridges, "bad-rule", "ERROR").await?;
    assert!(
        message(&refused).starts_with("providerParameter.rules[0].match[0].matchHeader"),
        "{}",
        message(&refused)
    );

    // A valid bridge: in every pod's config, at the developer's address with
    // the mapping's local port.
    create(
        &bridges,
        bridge(
            "to-dev",
            "web-mount",
            &gefyra,
            ns.name(),
            "peer1",
            "8080:80",
        ),
    )
    .await?;
    wait_bridge(&bridges, "to-dev", "ACTIVE").await?;
    until_pods(&pods, 2, "to-dev rendered", |b| {
        b["to-dev"]["endpoint"] == "192.168.101.1:8080"
            && header_of(b, "to-dev").as_deref() == Some("peer1")
            && b.get("wrong-port").is_none()
            && b.get("bad-rule").is_none()
    })
    .await?;

    // Its rules change: every pod's config follows.
    let rules = json!({ "providerParameter": { "rules": [
        { "match": [{ "matchHeader": { "name": "x-gefyra", "value": "peer2", "type": "exact" } }] }
    ] } });
    bridges
        .patch("to-dev", &PatchParams::default(), &Patch::Merge(&rules))
        .await?;
    until_pods(&pods, 2, "to-dev's new rules", |b| {
        header_of(b, "to-dev").as_deref() == Some("peer2")
    })
    .await?;
    wait_bridge(&bridges, "to-dev", "ACTIVE").await?;

    // The refused one fixed: ACTIVE, beside the first.
    let fix = json!({ "portMappings": ["8082:80"] });
    bridges
        .patch("wrong-port", &PatchParams::default(), &Patch::Merge(&fix))
        .await?;
    wait_bridge(&bridges, "wrong-port", "ACTIVE").await?;
    until_pods(&pods, 2, "both bridges", |b| {
        b["wrong-port"]["endpoint"] == "192.168.101.1:8082" && b.get("to-dev").is_some()
    })
    .await?;

    // The mount leaves ACTIVE (its target gone): its bridges wait in
    // REQUESTED, and come back with it into the new pods.
    let deployments: Api<Deployment> = ns.api();
    deployments
        .delete("web", &DeleteParams::foreground())
        .await?;
    bed.wait_state("web-mount", "MISSING").await?;
    // The mount passes RESTORING on its way to MISSING (its pods go first):
    // the bridge waits in REQUESTED from then on, and its message follows
    // the mount's state.
    let says_missing = |b: Option<&GefyraBridge>| {
        b.is_some_and(|b| {
            b.bridge.state.as_deref() == Some("REQUESTED") && message(b).contains("MISSING")
        })
    };
    if let Err(err) = wait_for(&bridges, "to-dev", says_missing, TIMEOUT).await {
        let now = bridges.get_opt("to-dev").await?;
        panic!(
            "{err}: a waiting bridge says why (the mount is MISSING): {:?} {:?}",
            now.as_ref().and_then(|b| b.bridge.state.clone()),
            now.as_ref().map(message)
        );
    }
    deployments
        .create(&PostParams::default(), &deployment("web", 2)?)
        .await?;
    ready_pods(ns, "app=web", 2).await?;
    bed.wait_state("web-mount", "ACTIVE").await?;
    let back = wait_bridge(&bridges, "to-dev", "ACTIVE").await?;
    let transitions = back.bridge.state_transitions.clone().unwrap_or_default();
    assert!(
        transitions.contains_key("REQUESTED") && transitions.contains_key("ACTIVE"),
        "{transitions:?}"
    );
    until_pods(&pods, 2, "the bridges in the new pods", |b| {
        header_of(b, "to-dev").as_deref() == Some("peer2") && b.get("wrong-port").is_some()
    })
    .await?;

    // Deleted: gone from every pod; the other stays.
    bridges.delete("to-dev", &DeleteParams::default()).await?;
    until_pods(&pods, 2, "to-dev removed", |b| {
        b.get("to-dev").is_none() && b.get("wrong-port").is_some()
    })
    .await?;

    // The mount goes: its bridges go with it.
    bed.delete_mount("web-mount").await?;
    let left = bridges.list(&ListParams::default()).await?.items;
    if !left.is_empty() {
        bail!(
            "bridges left after their mount: {:?}",
            left.iter().map(|b| b.name_any()).collect::<Vec<_>>()
        );
    }
    Ok(())
}

/// A bridge of `web-mount` of `bed` sending `header` requests to `to`
/// (`destinationIP` or `clusterEndpoint`).
fn bridge_to(bed: &Bed, name: &str, header: &str, to: Value) -> Value {
    let mut object = bridge(
        name,
        "web-mount",
        bed.gefyra.name(),
        bed.target.name(),
        header,
        "8080:80",
    );
    object["destinationIP"] = Value::Null;
    if let (Some(object), Some(to)) = (object.as_object_mut(), to.as_object()) {
        object.extend(to.clone());
    }
    object
}

#[tokio::test]
async fn a_bridge_sends_requests_only_where_allowed_and_a_mount_renders_its_oldest_few()
-> anyhow::Result<()> {
    let bed = Bed::with_flags("br-bound", &["--max-bridges-per-mount=2"]).await?;
    let bridges: Api<GefyraBridge> = bed.gefyra.api();
    bed.deploy_web(1).await?;
    bed.mount("web-mount", "deploy/web", "app").await?;
    bed.wait_state("web-mount", "ACTIVE").await?;

    // The Service network (the API server's own Service) is in the cluster.
    let service_ip = json!({ "destinationIP": "10.96.0.1" });
    for (name, header) in [("one", "a"), ("two", "b")] {
        create(&bridges, bridge_to(&bed, name, header, service_ip.clone())).await?;
        wait_bridge(&bridges, name, "ACTIVE").await?;
    }
    // Ages are told by creation time, to the second: the third is younger.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    create(&bridges, bridge_to(&bed, "three", "c", service_ip.clone())).await?;
    let refused = wait_bridge(&bridges, "three", "ERROR").await?;
    assert!(
        message(&refused).contains("has 3 bridges and renders at most 2")
            && message(&refused).contains("--max-bridges-per-mount"),
        "{}",
        message(&refused)
    );
    for name in ["one", "two", "three"] {
        bridges.delete(name, &DeleteParams::default()).await?;
    }

    // Outside the cluster's networks, unless the administrator allows it.
    create(
        &bridges,
        bridge_to(
            &bed,
            "outside",
            "d",
            json!({ "destinationIP": "192.168.101.1" }),
        ),
    )
    .await?;
    let refused = wait_bridge(&bridges, "outside", "ERROR").await?;
    assert!(
        message(&refused).contains(
            "endpoint `192.168.101.1:8080` is not a destination bridges may send requests to"
        ) && message(&refused).contains("bridges.allowedDestinations"),
        "{}",
        message(&refused)
    );
    // (Refused bridges count against the mount's limit too.)
    bridges.delete("outside", &DeleteParams::default()).await?;
    // A Service name stays in the cluster unless it is an ExternalName.
    bed.target
        .api::<k8s_openapi::api::core::v1::Service>()
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": { "name": "leak" },
                "spec": { "type": "ExternalName", "externalName": "evil.example.com" }
            }))?,
        )
        .await?;
    let leak = format!("leak.{}.svc.cluster.local:80", bed.target.name());
    create(
        &bridges,
        bridge_to(
            &bed,
            "via-leak",
            "e",
            json!({ "clusterEndpoint": { "80": leak } }),
        ),
    )
    .await?;
    let refused = wait_bridge(&bridges, "via-leak", "ERROR").await?;
    assert!(
        message(&refused).contains("is not a destination bridges may send requests to"),
        "{}",
        message(&refused)
    );
    bridges.delete("via-leak", &DeleteParams::default()).await?;
    create(
        &bridges,
        bridge_to(
            &bed,
            "via-service",
            "f",
            json!({ "clusterEndpoint": { "80": "kubernetes.default.svc.cluster.local:443" } }),
        ),
    )
    .await?;
    wait_bridge(&bridges, "via-service", "ACTIVE").await?;

    // A bridge must name its mount's target namespace: the policy judged its
    // creator's rights there.
    let mut elsewhere = bridge_to(&bed, "elsewhere", "g", service_ip);
    elsewhere["targetNamespace"] = json!(bed.gefyra.name());
    create(&bridges, elsewhere).await?;
    let refused = wait_bridge(&bridges, "elsewhere", "ERROR").await?;
    assert!(
        message(&refused).contains(&format!(
            "targetNamespace: `{}` is not the namespace `{}` of the mount's target",
            bed.gefyra.name(),
            bed.target.name()
        )),
        "{}",
        message(&refused)
    );
    bed.delete_mount("web-mount").await?;
    Ok(())
}
