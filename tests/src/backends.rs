//! Backends on the cluster side: a Deployment and its Service, and the pod
//! addresses the real endpoint-slice controller lists for it. Traffic tests
//! start echo backends on those addresses in a [`crate::netns::NetNs`].

use std::{net::IpAddr, time::Duration};

use anyhow::Context;
use k8s_openapi::api::{apps::v1::Deployment, core::v1::Service, discovery::v1::EndpointSlice};
use kube::api::PostParams;
use serde_json::json;

use crate::{TestNamespace, wait_for_list};

/// How long the controllers may take to make pods Ready and list them.
pub const TIMEOUT: Duration = Duration::from_secs(60);

/// Creates a Deployment `name` of `replicas` pods (labelled `app: name`,
/// container port `target_port` named `http`) and a ClusterIP Service `name`
/// (`port` to `target_port`), then waits until the Service's EndpointSlices
/// list `replicas` ready addresses; returns them, sorted.
pub async fn deploy(
    ns: &TestNamespace,
    name: &str,
    replicas: usize,
    port: u16,
    target_port: u16,
) -> anyhow::Result<Vec<IpAddr>> {
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": {
            "replicas": replicas,
            "selector": { "matchLabels": { "app": name } },
            "template": {
                "metadata": { "labels": { "app": name } },
                "spec": { "containers": [{
                    "name": "web",
                    "image": "registry.k8s.io/e2e-test-images/agnhost:2.53",
                    "ports": [{ "name": "http", "containerPort": target_port }]
                }] }
            }
        }
    }))?;
    ns.api::<Deployment>()
        .create(&PostParams::default(), &deployment)
        .await
        .with_context(|| format!("creating Deployment {name}"))?;
    let service: Service = serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": {
            "selector": { "app": name },
            "ports": [{ "name": "http", "port": port, "targetPort": target_port }]
        }
    }))?;
    ns.api::<Service>()
        .create(&PostParams::default(), &service)
        .await
        .with_context(|| format!("creating Service {name}"))?;
    wait_for_endpoints(ns, name, replicas, TIMEOUT).await
}

/// Waits until the EndpointSlices of Service `service` list exactly `count`
/// ready addresses; returns them, sorted.
pub async fn wait_for_endpoints(
    ns: &TestNamespace,
    service: &str,
    count: usize,
    timeout: Duration,
) -> anyhow::Result<Vec<IpAddr>> {
    let selector = format!("kubernetes.io/service-name={service}");
    let slices = wait_for_list(
        &ns.api::<EndpointSlice>(),
        &selector,
        |slices| ready_addresses(slices).len() == count,
        timeout,
    )
    .await
    .with_context(|| format!("Service {service} never had {count} ready endpoints"))?;
    Ok(ready_addresses(&slices))
}

/// The ready addresses the slices list (an endpoint without a `ready`
/// condition counts as ready, as the API says), sorted, without duplicates.
pub fn ready_addresses(slices: &[EndpointSlice]) -> Vec<IpAddr> {
    let mut addresses: Vec<IpAddr> = slices
        .iter()
        .flat_map(|slice| slice.endpoints.iter().flatten())
        .filter(|endpoint| {
            endpoint
                .conditions
                .as_ref()
                .and_then(|c| c.ready)
                .unwrap_or(true)
        })
        .flat_map(|endpoint| &endpoint.addresses)
        .filter_map(|address| address.parse().ok())
        .collect();
    addresses.sort();
    addresses.dedup();
    addresses
}

/// A Deployment's rollout is over, as `kubectl rollout status` says: its
/// current generation seen, and all its pods (none more) updated and
/// available.
pub fn rollout_complete(d: &Deployment) -> bool {
    let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    d.status.as_ref().is_some_and(|s| {
        s.observed_generation >= d.metadata.generation
            && s.replicas == Some(want)
            && s.updated_replicas == Some(want)
            && s.available_replicas == Some(want)
    })
}
