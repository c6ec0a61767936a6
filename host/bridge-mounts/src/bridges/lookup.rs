//! The cluster reads behind a judgement: a mount's bridges and the ports of
//! its target container.

use std::sync::Arc;

use futures::FutureExt;
use k8s_openapi::api::{
    apps::v1::{Deployment, StatefulSet},
    core::v1::{Container, Pod, PodSpec},
};
use kube::{Api, Client, ResourceExt, api::ListParams, runtime::reflector::Store};
use pontoon_provider_sdk::{Target, TargetKind};

use super::{
    BridgeSettings, Destinations,
    judge::{self, MountView},
};
use crate::{
    admitted::Admitted,
    crd::{GefyraBridge, GefyraBridgeMount},
};
use pontoon_plugins::bindings::provider_bridges::Bridge;

/// The label naming a bridge's mount (in the bridge's namespace).
pub const MOUNT_LABEL: &str = "gefyra.dev/bridge-mount";

/// The bridges labelled with `mount`, in its namespace; none when the
/// cluster has no GefyraBridge CRD.
pub async fn bridges_of(
    client: &Client,
    mount: &GefyraBridgeMount,
) -> Result<Vec<GefyraBridge>, kube::Error> {
    let api: Api<GefyraBridge> =
        Api::namespaced(client.clone(), &mount.namespace().unwrap_or_default());
    let selector = format!("{MOUNT_LABEL}={}", mount.name_any());
    match api.list(&ListParams::default().labels(&selector)).await {
        Ok(list) => Ok(list.items),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(Vec::new()),
        Err(err) => Err(err),
    }
}

/// The bridges labelled with `mount` as the mount controller's watch has
/// them; `None` until that watch has listed every bridge once (or when it
/// cannot, the CRD missing): a store that is not whole yet could lack a
/// bridge the pods hold, and installing without it would take it out.
///
/// The store, not a list: a list that must be current (a consistent read)
/// waits for the API server's cache to catch up with etcd, 30-90 ms on the
/// test bed while writes go on, before every install and every check of an
/// ACTIVE mount. The watch delivers a bridge into the store before the
/// change that wakes its mount, so what the mount renders is never older
/// than what woke it.
pub fn seen_bridges_of(
    seen: &Store<GefyraBridge>,
    mount: &GefyraBridgeMount,
) -> Option<Vec<GefyraBridge>> {
    seen.wait_until_ready().now_or_never()?.ok()?;
    Some(
        labelled_in(seen, mount)
            .iter()
            .map(|b| (**b).clone())
            .collect(),
    )
}

/// The bridges in `store` labelled with `mount`, in its namespace.
pub fn labelled_in(
    store: &Store<GefyraBridge>,
    mount: &GefyraBridgeMount,
) -> Vec<Arc<GefyraBridge>> {
    let (ns, name) = (mount.namespace(), mount.name_any());
    store.state_filter(|b| b.namespace() == ns && b.labels().get(MOUNT_LABEL) == Some(&name))
}

/// The ports the target container of `request` declares; `None` when the
/// target (or the container) cannot be read now.
pub async fn container_ports(client: &Client, request: &Admitted) -> Option<Vec<u16>> {
    let target = Target::parse(&request.target).ok()?;
    let ns = request.target_namespace.as_str();
    let spec: PodSpec = match target.kind {
        TargetKind::Deployment => {
            Api::<Deployment>::namespaced(client.clone(), ns)
                .get_opt(&target.name)
                .await
                .ok()??
                .spec?
                .template
                .spec?
        }
        TargetKind::StatefulSet => {
            Api::<StatefulSet>::namespaced(client.clone(), ns)
                .get_opt(&target.name)
                .await
                .ok()??
                .spec?
                .template
                .spec?
        }
        TargetKind::Pod => {
            Api::<Pod>::namespaced(client.clone(), ns)
                .get_opt(&target.name)
                .await
                .ok()??
                .spec?
        }
    };
    let wanted = request.target_container.as_str();
    let container: &Container = spec.containers.iter().find(|c| c.name == wanted)?;
    Some(
        container
            .ports
            .iter()
            .flatten()
            .filter_map(|p| u16::try_from(p.container_port).ok())
            .collect(),
    )
}

/// Every bridge of the mount (admitted for `request`) with its judgement
/// (duplicates refused, and those beyond the `max` oldest), in name order.
pub fn judge_all(
    mount: &GefyraBridgeMount,
    request: &Admitted,
    bridges: &[GefyraBridge],
    container_ports: Option<&[u16]>,
    max: usize,
) -> Vec<(String, Result<Bridge, String>)> {
    let name = mount.name_any();
    let view = MountView {
        name: &name,
        target_namespace: &request.target_namespace,
        target_container: &request.target_container,
        container_ports,
    };
    let mut live: Vec<&GefyraBridge> = bridges
        .iter()
        .filter(|b| b.metadata.deletion_timestamp.is_none())
        .collect();
    // The oldest `max` are judged; the rest are refused unjudged, so that
    // one tenant's thousand bridges cost the operator nothing per look.
    live.sort_by_key(|b| (b.metadata.creation_timestamp.clone(), b.name_any()));
    let beyond: Vec<(String, Result<Bridge, String>)> = live
        .iter()
        .skip(max)
        .map(|b| {
            (
                b.name_any(),
                Err(format!(
                    "mount `{name}` has {} bridges and renders at most {max} (the oldest; \
                     --max-bridges-per-mount): delete bridges it no longer needs",
                    live.len()
                )),
            )
        })
        .collect();
    live.truncate(max);
    let mut judged: Vec<(String, Result<Bridge, String>)> = live
        .iter()
        .map(|b| (b.name_any(), judge::judge(b, &view)))
        .collect();
    let valid: Vec<(&GefyraBridge, &Bridge)> = live
        .iter()
        .zip(&judged)
        .filter_map(|(cr, (_, verdict))| verdict.as_ref().ok().map(|b| (*cr, b)))
        .collect();
    let refused: std::collections::HashMap<String, String> = judge::duplicates(&valid)
        .into_iter()
        .map(|(n, why)| (n.to_string(), why))
        .collect();
    for (name, verdict) in &mut judged {
        if let Some(why) = refused.get(name) {
            *verdict = Err(why.clone());
        }
    }
    judged.extend(beyond);
    judged.sort_by(|a, b| a.0.cmp(&b.0));
    judged
}

/// Above this many matches in all, a judgement runs on a blocking thread:
/// parsing and checking them takes a while, and the executor runs every
/// other reconcile of the operator.
const BLOCKING_MATCHES: usize = 2000;

/// [`judge_all`], on a blocking thread when the bridges are large.
pub async fn judge_all_off_executor(
    mount: &GefyraBridgeMount,
    request: &Admitted,
    bridges: Vec<GefyraBridge>,
    container_ports: Option<Vec<u16>>,
    max: usize,
) -> Vec<(String, Result<Bridge, String>)> {
    let matches: usize = bridges.iter().map(judge::match_count).sum();
    if matches <= BLOCKING_MATCHES {
        return judge_all(mount, request, &bridges, container_ports.as_deref(), max);
    }
    let (mount, request) = (mount.clone(), request.clone());
    let judged = tokio::task::spawn_blocking(move || {
        judge_all(&mount, &request, &bridges, container_ports.as_deref(), max)
    })
    .await;
    judged.unwrap_or_else(|panicked| {
        vec![(
            String::new(),
            Err(format!("judging the bridges failed: {panicked}")),
        )]
    })
}

/// Refuses each valid bridge of `judged` that sends requests where bridges
/// may not (see `destinations`).
pub async fn refuse_outside(
    client: &Client,
    destinations: &Destinations,
    judged: &mut [(String, Result<Bridge, String>)],
) {
    for (_, verdict) in judged.iter_mut() {
        let Ok(bridge) = verdict else { continue };
        for route in &bridge.ports {
            if let Err(why) = destinations.check(client, &route.endpoint).await {
                *verdict = Err(format!("remote port {}: {why}", route.port));
                break;
            }
        }
    }
}

/// The mount's bridges to render (the mount admitted for `request`): the
/// valid ones, in name order.
pub async fn valid_bridges(
    client: &Client,
    seen: &Store<GefyraBridge>,
    mount: &GefyraBridgeMount,
    request: &Admitted,
    settings: &BridgeSettings,
) -> Result<Vec<Bridge>, kube::Error> {
    let bridges = match seen_bridges_of(seen, mount) {
        Some(bridges) => bridges,
        None => bridges_of(client, mount).await?,
    };
    if bridges.is_empty() {
        return Ok(Vec::new());
    }
    let ports = container_ports(client, request).await;
    let mut judged =
        judge_all_off_executor(mount, request, bridges, ports, settings.max_per_mount).await;
    refuse_outside(client, &settings.destinations, &mut judged).await;
    Ok(judged
        .into_iter()
        .filter_map(|(_, verdict)| verdict.ok())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mount() -> GefyraBridgeMount {
        serde_json::from_value(serde_json::json!({
            "metadata": { "name": "web-mount", "namespace": "gefyra", "uid": "u-1" },
            "targetNamespace": "shop", "target": "deploy/web", "targetContainer": "app",
        }))
        .unwrap()
    }

    fn bridge(name: &str, at: &str, header: &str) -> GefyraBridge {
        serde_json::from_value(serde_json::json!({
            "metadata": { "name": name, "namespace": "gefyra", "creationTimestamp": at },
            "providerParameter": { "rules": [{ "match": [{ "matchHeader": {
                "name": "x-gefyra", "value": header } }] }] },
            "targetNamespace": "shop",
            "portMappings": ["8080:80"],
            "destinationIP": "10.244.0.10",
        }))
        .unwrap()
    }

    #[test]
    fn a_mount_judges_its_oldest_bridges_and_refuses_the_rest_unjudged() {
        let mount = mount();
        let request = Admitted::of(&mount);
        let bridges = [
            bridge("c", "2026-12-01T00:00:03Z", "c"),
            bridge("a", "2026-12-01T00:00:01Z", "a"),
            bridge("b", "2026-12-01T00:00:02Z", "a"),
            bridge("d", "2026-12-01T00:00:04Z", "d"),
        ];
        let judged = judge_all(&mount, &request, &bridges, Some(&[80]), 3);
        let verdict = |name: &str| {
            judged
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
                .unwrap()
        };
        assert!(verdict("a").is_ok());
        assert!(
            verdict("b").unwrap_err().contains("duplicates bridge `a`"),
            "the younger duplicate"
        );
        assert!(verdict("c").is_ok());
        let beyond = verdict("d").unwrap_err();
        assert!(
            beyond.contains("has 4 bridges and renders at most 3"),
            "{beyond}"
        );
        let names: Vec<&str> = judged.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["a", "b", "c", "d"], "in name order");
    }
}
