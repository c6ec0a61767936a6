//! Nothing lost, no one let in: the paths by which a user could lose their
//! original workload, or act through the operator where they have no
//! rights, tried on the test bed as users and admins would try them.

use std::collections::BTreeMap;

use anyhow::{Context, bail};
use k8s_openapi::api::{
    apps::v1::{Deployment, StatefulSet},
    core::v1::{ConfigMap, Pod, Service},
};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
};
use pontoon::bridge_mount::{GefyraBridgeMount, crd::BridgeMountFields};
use pontoon_tests::{TestNamespace, wait_for, wait_for_list};
use serde_json::json;

mod support;

use support::mounts::*;

/// A pod spec of two containers that carrier2mount could each mount.
fn two_containers() -> serde_json::Value {
    json!([
        app_container(),
        { "name": "api", "image": "nginx:1.27", "ports": [{ "containerPort": 9090 }] }
    ])
}

fn pod_of_two(name: &str) -> anyhow::Result<Pod> {
    Ok(serde_json::from_value(json!({
        "metadata": { "name": name, "labels": { "app": name } },
        "spec": { "containers": two_containers() }
    }))?)
}

fn deployment_of_two(name: &str, replicas: i32) -> anyhow::Result<Deployment> {
    Ok(serde_json::from_value(json!({
        "metadata": { "name": name, "labels": { "app": name } },
        "spec": {
            "replicas": replicas,
            "selector": { "matchLabels": { "app": name } },
            "template": {
                "metadata": { "labels": { "app": name } },
                "spec": { "containers": two_containers() }
            }
        }
    }))?)
}

/// Container `name` of the Deployment's pod template, as its user wrote it.
fn template_container(
    deployment: &Deployment,
    name: &str,
) -> anyhow::Result<k8s_openapi::api::core::v1::Container> {
    deployment
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|s| s.containers.iter().find(|c| c.name == name))
        .cloned()
        .with_context(|| {
            format!(
                "Deployment {} has no container {name} in its template",
                deployment.name_any()
            )
        })
}

/// The container `name` of a pod.
fn container(pod: &Pod, name: &str) -> anyhow::Result<k8s_openapi::api::core::v1::Container> {
    pod.spec
        .as_ref()
        .and_then(|s| s.containers.iter().find(|c| c.name == name))
        .cloned()
        .with_context(|| format!("pod {} has no container {name}", pod.name_any()))
}

/// Every restore entry of the bed's mounts (none when none exists).
async fn restore_entries(bed: &Bed) -> anyhow::Result<BTreeMap<String, String>> {
    bed.restore_entries().await
}

/// Mount `second` on container `api` of a workload that `first` mounts on
/// `app`: refused, naming `first`, and neither the pods nor the restore
/// entries change; deleting both then restores the workload exactly.
async fn second_container_is_refused(
    bed: &Bed,
    target: &str,
    selector: &str,
    count: usize,
) -> anyhow::Result<()> {
    let before = Before::take(&bed.target, selector).await?;
    bed.mount("first", target, "app").await?;
    bed.wait_state("first", "ACTIVE").await?;
    let entries = restore_entries(bed).await?;
    let pods_then = live(
        bed.target
            .api::<Pod>()
            .list(&ListParams::default().labels(selector))
            .await?
            .items,
    );

    bed.mount("second", target, "api").await?;
    let second = bed.wait_state("second", "ERROR").await?;
    let (reason, message) = Bed::ready(&second);
    assert_eq!(reason, "DuplicateMount", "{message}");
    assert!(
        message.contains("/first (ACTIVE, container `app`)")
            && message.contains("one mount at a time"),
        "names the first mount and why: {message}"
    );
    // Nothing of the second mount reached the cluster.
    assert_eq!(restore_entries(bed).await?, entries, "restore entries");
    for pod in &pods_then {
        let now = bed.target.api::<Pod>().get(&pod.name_any()).await?;
        assert_eq!(
            container(&now, "api")?.image.as_deref(),
            Some("nginx:1.27"),
            "container api of {} is untouched",
            pod.name_any()
        );
    }
    bed.delete_mount("second").await?;
    let first = bed.mounts().get("first").await?;
    assert_eq!(
        first.fields.state.as_deref(),
        Some("ACTIVE"),
        "the first is untouched"
    );
    bed.delete_mount("first").await?;
    assert_restored(bed, &before, selector, count).await?;
    Ok(())
}

#[tokio::test]
async fn a_second_mount_on_another_container_of_a_bare_pod_is_refused() -> anyhow::Result<()> {
    let bed = Bed::new("ms-two-pod").await?;
    bed.target
        .api::<Pod>()
        .create(&PostParams::default(), &pod_of_two("duo")?)
        .await?;
    ready_pods(&bed.target, "app=duo", 1).await?;
    second_container_is_refused(&bed, "pod/duo", "app=duo", 1).await
}

#[tokio::test]
async fn a_second_mount_on_another_container_of_a_deployment_is_refused() -> anyhow::Result<()> {
    let bed = Bed::new("ms-two-deploy").await?;
    bed.target
        .api::<Deployment>()
        .create(&PostParams::default(), &deployment_of_two("duo", 2)?)
        .await?;
    ready_pods(&bed.target, "app=duo", 2).await?;
    second_container_is_refused(&bed, "deploy/duo", "app=duo", 2).await
}

/// Creates the kind of target `kind` names, as `web`, with `replicas` pods.
async fn create_target(bed: &Bed, kind: &str, replicas: i32) -> anyhow::Result<(String, usize)> {
    let ns = &bed.target;
    let target = match kind {
        "deploy" => {
            ns.api::<Deployment>()
                .create(&PostParams::default(), &deployment("web", replicas)?)
                .await?;
            "deploy/web"
        }
        "sts" => {
            ns.api::<StatefulSet>()
                .create(&PostParams::default(), &statefulset("web", replicas)?)
                .await?;
            "sts/web"
        }
        _ => {
            ns.api::<Pod>()
                .create(&PostParams::default(), &bare_pod("web")?)
                .await?;
            "pod/web"
        }
    };
    let count = if kind == "pod" {
        1
    } else {
        usize::try_from(replicas)?
    };
    ready_pods(ns, "app=web", count).await?;
    Ok((target.to_string(), count))
}

/// The restore ConfigMap deleted while the mount is ACTIVE: deleting the
/// mount still restores every container exactly, from the pods' own copies.
async fn restore_config_map_deleted_while_active(kind: &str) -> anyhow::Result<()> {
    let bed = Bed::new(&format!("ms-lost-{kind}")).await?;
    let (target, count) = create_target(&bed, kind, 2).await?;
    let before = Before::take(&bed.target, "app=web").await?;
    bed.mount("web-mount", &target, "app").await?;
    bed.wait_state("web-mount", "ACTIVE").await?;
    assert!(
        !restore_entries(&bed).await?.is_empty(),
        "entries were written"
    );
    bed.gefyra
        .api::<ConfigMap>()
        .delete(
            &bed.restore_config_map("web-mount").await?,
            &DeleteParams::default(),
        )
        .await?;
    let pods = bed.target.api::<Pod>();
    for pod in live(
        pods.list(&ListParams::default().labels("app=web"))
            .await?
            .items,
    ) {
        assert!(
            pod.annotations()
                .contains_key("pontoon.dev/original-container"),
            "pod {} carries its original",
            pod.name_any()
        );
    }
    bed.delete_mount("web-mount").await?;
    assert_restored(&bed, &before, "app=web", count).await?;
    for pod in live(
        pods.list(&ListParams::default().labels("app=web"))
            .await?
            .items,
    ) {
        assert!(
            !pod.annotations()
                .contains_key("pontoon.dev/original-container"),
            "pod {} keeps no bookkeeping of ours",
            pod.name_any()
        );
    }
    Ok(())
}

#[tokio::test]
async fn a_deployment_is_restored_exactly_after_its_restore_config_map_was_deleted()
-> anyhow::Result<()> {
    restore_config_map_deleted_while_active("deploy").await
}

#[tokio::test]
async fn a_statefulset_is_restored_exactly_after_its_restore_config_map_was_deleted()
-> anyhow::Result<()> {
    restore_config_map_deleted_while_active("sts").await
}

#[tokio::test]
async fn a_bare_pod_is_restored_exactly_after_its_restore_config_map_was_deleted()
-> anyhow::Result<()> {
    restore_config_map_deleted_while_active("pod").await
}

/// Waits until the mount's Ready condition has `reason` and a message
/// containing `says`.
async fn wait_ready_reason(
    bed: &Bed,
    name: &str,
    reason: &str,
    says: &str,
) -> anyhow::Result<String> {
    let reached = |m: Option<&GefyraBridgeMount>| {
        m.is_some_and(|m| {
            let (r, message) = Bed::ready(m);
            r == reason && message.contains(says)
        })
    };
    match wait_for(&bed.mounts(), name, reached, TIMEOUT).await {
        Ok(Some(mount)) => Ok(Bed::ready(&mount).1),
        Ok(None) => bail!("mount {name} is gone; wanted {reason} saying `{says}`"),
        Err(err) => {
            let now = bed.mounts().get_opt(name).await?;
            bail!(
                "{err}: mount {name} wanted {reason} saying `{says}`, has {:?}\n{}",
                now.as_ref().map(Bed::ready),
                bed.operator.log_tail(30)
            )
        }
    }
}

#[tokio::test]
async fn an_edited_or_broken_restore_entry_is_refused_never_applied() -> anyhow::Result<()> {
    let bed = Bed::new("ms-edited").await?;
    let (target, count) = create_target(&bed, "pod", 1).await?;
    let before = Before::take(&bed.target, "app=web").await?;
    bed.mount("web-mount", &target, "app").await?;
    bed.wait_state("web-mount", "ACTIVE").await?;
    let entries = restore_entries(&bed).await?;
    let (key, value) = entries.iter().next().context("an entry")?;
    let key = key.clone();
    let mut edited: serde_json::Value = serde_json::from_str(value)?;
    edited["originalConfig"]["image"] = json!("evil.example/miner:1");
    let config_maps = bed.gefyra.api::<ConfigMap>();
    let restore_config_map = bed.restore_config_map("web-mount").await?;
    let set_entry = |text: String| {
        let config_maps = config_maps.clone();
        let key = key.clone();
        let restore_config_map = restore_config_map.clone();
        async move {
            config_maps
                .patch(
                    &restore_config_map,
                    &PatchParams::default(),
                    &Patch::Merge(json!({ "data": { key: text } })),
                )
                .await
        }
    };
    set_entry(edited.to_string()).await?;

    bed.mounts()
        .delete("web-mount", &DeleteParams::default())
        .await?;
    let message = wait_ready_reason(&bed, "web-mount", "UninstallFailed", "disagree").await?;
    assert!(
        message.contains("evil.example/miner:1")
            && message.contains("nothing was changed")
            && message.contains("pod `web`"),
        "says which pod and what disagrees: {message}"
    );
    let pod = bed.target.api::<Pod>().get("web").await?;
    assert_eq!(
        container(&pod, "app")?.image.as_deref(),
        Some(CARRIER_IMAGE),
        "nothing was patched with the edited image"
    );

    // Broken instead of edited: refused too.
    set_entry("{not json".into()).await?;
    wait_ready_reason(&bed, "web-mount", "UninstallFailed", "cannot be read").await?;
    let pod = bed.target.api::<Pod>().get("web").await?;
    assert_eq!(
        container(&pod, "app")?.image.as_deref(),
        Some(CARRIER_IMAGE)
    );

    // The administrator removes the bad entry: the pod's own copy restores it.
    config_maps
        .patch(
            &restore_config_map,
            &PatchParams::default(),
            &Patch::Merge(json!({ "data": { key: null } })),
        )
        .await?;
    bed.wait_gone("web-mount").await?;
    assert_restored(&bed, &before, "app=web", count).await?;
    Ok(())
}

/// An entry copied under another pod's key (an edit of the mount's restore
/// record) would drag that pod into the restore: it is ignored, the mount's
/// Events say which and why, and the other pod is untouched.
#[tokio::test]
async fn a_restore_entry_under_another_pods_key_is_ignored_and_reported() -> anyhow::Result<()> {
    use k8s_openapi::api::events::v1::Event;
    let bed = Bed::new("ms-misplaced").await?;
    let (target, count) = create_target(&bed, "deploy", 1).await?;
    // A pod of another team's in the same namespace.
    bed.target
        .api::<Pod>()
        .create(&PostParams::default(), &bare_pod("victim")?)
        .await?;
    ready_pods(&bed.target, "app=victim", 1).await?;
    let victim_before = bed.target.api::<Pod>().get("victim").await?;
    let before = Before::take(&bed.target, "app=web").await?;
    bed.mount("web-mount", &target, "app").await?;
    bed.wait_state("web-mount", "ACTIVE").await?;
    let entries = restore_entries(&bed).await?;
    let (key, value) = entries.iter().next().context("an entry")?;
    let stolen_key = format!("{}.victim.app", bed.target.name());
    let restore_config_map = bed.restore_config_map("web-mount").await?;
    bed.gefyra
        .api::<ConfigMap>()
        .patch(
            &restore_config_map,
            &PatchParams::default(),
            &Patch::Merge(json!({ "data": { stolen_key.clone(): value } })),
        )
        .await?;

    bed.delete_mount("web-mount").await?;
    // Ignored, not thrown away: like an entry that does not read, it may be
    // the only copy of something, so it stays (with its ConfigMap) until
    // someone removes it; the Event below says so.
    assert_eq!(
        bed.restore_entries().await?,
        BTreeMap::from([(stolen_key.clone(), value.clone())]),
        "only the misplaced entry is left"
    );
    bed.gefyra
        .api::<ConfigMap>()
        .patch(
            &restore_config_map,
            &PatchParams::default(),
            &Patch::Merge(json!({ "data": { stolen_key.clone(): null } })),
        )
        .await?;
    assert_restored(&bed, &before, "app=web", count).await?;
    let victim = bed.target.api::<Pod>().get("victim").await?;
    assert_eq!(
        (victim.spec, victim.metadata.annotations),
        (victim_before.spec, victim_before.metadata.annotations),
        "the pod whose key the entry was put under is untouched"
    );
    // Posted in the background by the host: waited for.
    let names_it = |e: &Event| {
        e.reason.as_deref() == Some("RestoreEntryIgnored")
            && e.type_.as_deref() == Some("Warning")
            && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("web-mount")
            && e.note.as_deref().is_some_and(|note| {
                note.contains(&format!("entry `{stolen_key}` is for pod"))
                    && note.contains(&format!("whose key is `{key}`: ignored"))
                    && note.contains("left in place")
            })
    };
    let events: Api<Event> = bed.gefyra.api();
    let seen = wait_for_list(
        &events,
        "",
        |events: &[Event]| events.iter().any(names_it),
        TIMEOUT,
    )
    .await;
    assert!(
        seen.is_ok(),
        "the mount's Events do not name the ignored entry: {:?}",
        events
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .map(|e| (e.reason.clone(), e.note.clone()))
            .collect::<Vec<_>>()
    );
    Ok(())
}

/// The restore gives each pod its original image back in place; a pod whose
/// command differs from its saved original (both copies agree on it, so the
/// restore trusts them) cannot be made exact that way: the Deployment is
/// restarted instead, and its template's pods replace it.
#[tokio::test]
async fn a_pod_that_cannot_be_restored_in_place_is_replaced_from_its_template() -> anyhow::Result<()>
{
    let bed = Bed::new("ms-inexact").await?;
    let (target, count) = create_target(&bed, "deploy", 1).await?;
    bed.mount("web-mount", &target, "app").await?;
    bed.wait_state("web-mount", "ACTIVE").await?;
    let pods = bed.target.api::<Pod>();
    let patched = pods
        .list(&ListParams::default().labels("app=web"))
        .await?
        .items
        .into_iter()
        .find(|p| p.metadata.deletion_timestamp.is_none())
        .context("a patched pod")?;
    let command = json!(["nginx", "-g", "daemon off; worker_processes 2;"]);
    // Both copies of its original say another command than the pod runs.
    let (key, value) = restore_entries(&bed)
        .await?
        .into_iter()
        .next()
        .context("an entry")?;
    let mut entry: serde_json::Value = serde_json::from_str(&value)?;
    entry["originalConfig"]["command"] = command.clone();
    let annotation = "pontoon.dev/original-container";
    let mut copy: serde_json::Value = serde_json::from_str(
        patched
            .annotations()
            .get(annotation)
            .context("the pod's copy of its original")?,
    )?;
    copy["command"] = command.clone();
    bed.gefyra
        .api::<ConfigMap>()
        .patch(
            &bed.restore_config_map("web-mount").await?,
            &PatchParams::default(),
            &Patch::Merge(json!({ "data": { key: entry.to_string() } })),
        )
        .await?;
    pods.patch(
        &patched.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({ "metadata": { "annotations": { annotation: copy.to_string() } } })),
    )
    .await?;

    bed.delete_mount("web-mount").await?;
    let deployment = bed.target.api::<Deployment>().get("web").await?;
    let stamped = deployment
        .spec
        .as_ref()
        .and_then(|s| s.template.metadata.as_ref())
        .and_then(|m| m.annotations.as_ref())
        .is_some_and(|a| a.contains_key("kubectl.kubernetes.io/restartedAt"));
    assert!(stamped, "the Deployment was restarted: {deployment:?}");
    let original = template_container(&deployment, "app")?;
    let uid = patched.uid();
    wait_for_list(
        &pods,
        "app=web",
        |ps| {
            let ps = live_refs(ps);
            ps.len() == count
                && ps.iter().all(|p| {
                    p.uid() != uid
                        && pontoon_tests::pod_ready(p)
                        && container(p, "app").is_ok_and(|c| {
                            c.image == original.image && c.command == original.command
                        })
                })
        },
        TIMEOUT,
    )
    .await
    .context("the template's pods never replaced the pod that could not be restored in place")?;
    Ok(())
}

#[tokio::test]
async fn objects_of_the_shadows_names_that_a_user_made_are_never_taken_over() -> anyhow::Result<()>
{
    let bed = Bed::new("ms-theirs").await?;
    let ns = &bed.target;
    bed.deploy_web(1).await?;
    // The user's own Deployment of the shadow's name, and (for a second
    // target) their own Service of the shadow Service's name.
    let mut theirs = deployment("web-gefyra", 1)?;
    theirs.metadata.labels = Some([("app".to_string(), "mine".to_string())].into());
    if let Some(spec) = theirs.spec.as_mut() {
        spec.selector.match_labels = Some([("app".to_string(), "mine".to_string())].into());
        if let Some(meta) = spec.template.metadata.as_mut() {
            meta.labels = Some([("app".to_string(), "mine".to_string())].into());
        }
    }
    ns.api::<Deployment>()
        .create(&PostParams::default(), &theirs)
        .await?;
    ns.api::<Deployment>()
        .create(&PostParams::default(), &deployment("api", 1)?)
        .await?;
    ready_pods(ns, "app=api", 1).await?;
    // Their Deployment's status settles first (the Deployment controller
    // writes it as its pod comes up): from then on, only a writer other
    // than the cluster's own would change it.
    let settled = |d: Option<&Deployment>| {
        d.and_then(|d| Some((d.metadata.generation, d.status.as_ref()?)))
            .is_some_and(|(generation, s)| {
                s.observed_generation == generation
                    && s.available_replicas == Some(1)
                    && s.conditions.iter().flatten().any(|c| {
                        c.type_ == "Progressing"
                            && c.reason.as_deref() == Some("NewReplicaSetAvailable")
                    })
            })
    };
    wait_for(&ns.api::<Deployment>(), "web-gefyra", settled, TIMEOUT)
        .await
        .context("their Deployment never settled")?;
    let their_service: Service = serde_json::from_value(json!({
        "metadata": { "name": "api-app-gefyra-svc", "labels": { "team": "mine" } },
        "spec": { "selector": { "app": "mine" }, "ports": [{ "port": 80 }] }
    }))?;
    ns.api::<Service>()
        .create(&PostParams::default(), &their_service)
        .await?;
    let deployment_then = ns.api::<Deployment>().get("web-gefyra").await?;
    let service_then = ns.api::<Service>().get("api-app-gefyra-svc").await?;

    bed.mount("web-mount", "deploy/web", "app").await?;
    bed.mount("api-mount", "deploy/api", "app").await?;
    for (mount, kind, name) in [
        ("web-mount", "Deployment", "web-gefyra"),
        ("api-mount", "Service", "api-app-gefyra-svc"),
    ] {
        let errored = bed.wait_state(mount, "ERROR").await?;
        let (_, message) = Bed::ready(&errored);
        assert!(
            message.contains(&format!("{kind} `{name}`"))
                && message.contains("was not made by this mount")
                && message.contains("rename or delete it"),
            "{mount} names the object and what to do: {message}"
        );
    }
    bed.delete_mount("web-mount").await?;
    bed.delete_mount("api-mount").await?;
    let deployment_now = ns.api::<Deployment>().get("web-gefyra").await?;
    let service_now = ns.api::<Service>().get("api-app-gefyra-svc").await?;
    assert_eq!(
        deployment_now.uid(),
        deployment_then.uid(),
        "the user's Deployment is there"
    );
    assert_eq!(
        deployment_now.resource_version(),
        deployment_then.resource_version(),
        "and unchanged"
    );
    assert_eq!(
        service_now.uid(),
        service_then.uid(),
        "the user's Service is there"
    );
    assert_eq!(
        service_now.resource_version(),
        service_then.resource_version(),
        "and unchanged"
    );
    Ok(())
}

/// Waits until the mount has entered ACTIVE again after `since` (having
/// left it for the change the test made).
async fn wait_active_again(
    bed: &Bed,
    name: &str,
    since: k8s_openapi::jiff::Timestamp,
) -> anyhow::Result<()> {
    let again = |m: Option<&GefyraBridgeMount>| {
        m.is_some_and(|m| {
            m.fields.state.as_deref() == Some("ACTIVE")
                && m.fields
                    .state_transitions
                    .as_ref()
                    .and_then(|t| t.get("ACTIVE"))
                    .and_then(|at| at.parse::<k8s_openapi::jiff::Timestamp>().ok())
                    .is_some_and(|at| at > since)
        })
    };
    wait_for(&bed.mounts(), name, again, TIMEOUT)
        .await
        .with_context(|| {
            format!(
                "{name} never became ACTIVE again\n{}",
                bed.operator.log_tail(30)
            )
        })?;
    Ok(())
}

/// The image of container `app` that the pods of `selector` run now.
async fn running_images(ns: &TestNamespace, selector: &str) -> anyhow::Result<Vec<String>> {
    let pods = live(
        ns.api::<Pod>()
            .list(&ListParams::default().labels(selector))
            .await?
            .items,
    );
    Ok(pods
        .iter()
        .flat_map(|p| {
            p.status
                .iter()
                .flat_map(|s| s.container_statuses.iter().flatten())
        })
        .filter(|c| c.name == "app")
        .map(|c| c.image.clone())
        .collect())
}

#[tokio::test]
async fn a_new_image_while_mounted_reaches_the_shadow_and_stays_after_the_mount()
-> anyhow::Result<()> {
    let bed = Bed::new("ms-update").await?;
    let ns = &bed.target;
    bed.deploy_web(2).await?;
    bed.mount("web-mount", "deploy/web", "app").await?;
    bed.wait_state("web-mount", "ACTIVE").await?;

    let new_image = json!({ "spec": { "template": { "spec": { "containers": [
        { "name": "app", "image": "nginx:1.28" }
    ] } } } });
    let changed = k8s_openapi::jiff::Timestamp::now();
    ns.api::<Deployment>()
        .patch("web", &PatchParams::default(), &Patch::Strategic(new_image))
        .await?;
    // The shadow follows the target, and the new pods are intercepted.
    let shadows = ns.api::<Deployment>();
    wait_for(
        &shadows,
        "web-gefyra",
        |d: Option<&Deployment>| {
            d.and_then(|d| d.spec.as_ref())
                .and_then(|s| s.template.spec.as_ref())
                .is_some_and(|s| {
                    s.containers
                        .iter()
                        .any(|c| c.name == "app" && c.image.as_deref() == Some("nginx:1.28"))
                })
        },
        TIMEOUT,
    )
    .await
    .with_context(|| {
        format!(
            "the shadow never got nginx:1.28\n{}",
            bed.operator.log_tail(30)
        )
    })?;
    ready_pods(ns, "app=web-gefyra", 2).await?;
    wait_active_again(&bed, "web-mount", changed).await?;
    assert_carrier_everywhere(ns, "app=web", 2, "web-app-gefyra-svc").await?;

    bed.delete_mount("web-mount").await?;
    let deployment = ns.api::<Deployment>().get("web").await?;
    let app = template_container(&deployment, "app")?;
    assert_eq!(
        app.image.as_deref(),
        Some("nginx:1.28"),
        "the user's template"
    );
    wait_for_list(
        &ns.api::<Pod>(),
        "app=web",
        |pods| {
            let pods = live_refs(pods);
            pods.len() == 2
                && pods.iter().all(|p| {
                    pontoon_tests::pod_ready(p)
                        && container(p, "app")
                            .is_ok_and(|c| c.image.as_deref() == Some("nginx:1.28"))
                })
        },
        TIMEOUT,
    )
    .await
    .context("the pods never ran the user's nginx:1.28")?;
    assert_eq!(
        running_images(ns, "app=web").await?,
        ["nginx:1.28", "nginx:1.28"]
    );
    assert!(
        ns.api::<Deployment>()
            .get_opt("web-gefyra")
            .await?
            .is_none(),
        "the shadow is gone"
    );
    Ok(())
}

#[tokio::test]
async fn an_on_delete_statefulset_pod_recreated_while_mounted_keeps_its_new_image()
-> anyhow::Result<()> {
    let bed = Bed::new("ms-ondelete").await?;
    let ns = &bed.target;
    let mut sts = statefulset("web", 2)?;
    if let Some(spec) = sts.spec.as_mut() {
        spec.update_strategy = Some(serde_json::from_value(json!({ "type": "OnDelete" }))?);
    }
    ns.api::<StatefulSet>()
        .create(&PostParams::default(), &sts)
        .await?;
    ready_pods(ns, "app=web", 2).await?;
    bed.mount("web-mount", "sts/web", "app").await?;
    bed.wait_state("web-mount", "ACTIVE").await?;

    // The user moves the template on and replaces one pod, as OnDelete asks.
    let new_image = json!({ "spec": { "template": { "spec": { "containers": [
        { "name": "app", "image": "nginx:1.28" }
    ] } } } });
    let changed = k8s_openapi::jiff::Timestamp::now();
    ns.api::<StatefulSet>()
        .patch("web", &PatchParams::default(), &Patch::Strategic(new_image))
        .await?;
    let pods = ns.api::<Pod>();
    let old_uid = pods.get("web-0").await?.uid();
    pods.delete("web-0", &DeleteParams::default()).await?;
    wait_for(
        &pods,
        "web-0",
        |p: Option<&Pod>| p.is_some_and(|p| p.uid() != old_uid),
        TIMEOUT,
    )
    .await?;
    // The new web-0 is intercepted again.
    wait_active_again(&bed, "web-mount", changed).await?;
    assert_carrier_everywhere(ns, "app=web", 2, "web-app-gefyra-svc").await?;

    bed.delete_mount("web-mount").await?;
    wait_for(
        &pods,
        "web-0",
        |p: Option<&Pod>| {
            p.is_some_and(|p| {
                container(p, "app").is_ok_and(|c| c.image.as_deref() == Some("nginx:1.28"))
                    && pontoon_tests::pod_ready(p)
            })
        },
        TIMEOUT,
    )
    .await
    .context("web-0 did not get its own original, nginx:1.28, back")?;
    let web1 = pods.get("web-1").await?;
    assert_eq!(
        container(&web1, "app")?.image.as_deref(),
        Some("nginx:1.27"),
        "web-1 was never replaced (OnDelete): its own original"
    );
    Ok(())
}

#[tokio::test]
async fn a_mount_outside_the_allowed_namespaces_is_refused_and_touches_nothing()
-> anyhow::Result<()> {
    let elsewhere = TestNamespace::new("ms-allowed").await?;
    let flags = format!("--mount-namespaces={}", elsewhere.name());
    let bed = Bed::with_flags("ms-denied", &[flags.as_str()]).await?;
    bed.deploy_web(1).await?;
    let before = Before::take(&bed.target, "app=web").await?;
    bed.mount("web-mount", "deploy/web", "app").await?;
    let refused = bed.wait_state("web-mount", "ERROR").await?;
    let (reason, message) = Bed::ready(&refused);
    assert_eq!(reason, "NamespaceNotAllowed", "{message}");
    assert!(
        message.contains(&format!("may not target namespace `{}`", bed.target.name()))
            && message.contains(&format!("only `{}`", elsewhere.name()))
            && message.contains("--mount-namespaces"),
        "{message}"
    );
    // The operator's own namespace is never a target, whatever the flags.
    let own = GefyraBridgeMount {
        metadata: kube::api::ObjectMeta {
            name: Some("own-mount".into()),
            namespace: Some(bed.gefyra.name().into()),
            ..Default::default()
        },
        fields: BridgeMountFields {
            target_namespace: Some(bed.gefyra.name().into()),
            target: Some("deploy/web".into()),
            target_container: Some("app".into()),
            provider: Some("carrier2mount".into()),
            ..Default::default()
        },
    };
    bed.mounts().create(&PostParams::default(), &own).await?;
    let refused = bed.wait_state("own-mount", "ERROR").await?;
    assert_eq!(Bed::ready(&refused).0, "NamespaceNotAllowed");

    assert_eq!(
        inventory(&bed.target).await?,
        before.objects,
        "nothing was made"
    );
    assert!(restore_entries(&bed).await?.is_empty(), "nothing was saved");
    bed.delete_mount("web-mount").await?;
    bed.delete_mount("own-mount").await?;
    assert_eq!(inventory(&bed.target).await?, before.objects);
    Ok(())
}

#[tokio::test]
async fn a_mount_is_admitted_only_when_its_creator_may_patch_exec_and_read_its_secrets_there()
-> anyhow::Result<()> {
    use support::tenants::{Policies, Tenant, kubectl, mount_manifest};
    install_crds().await?;
    let gefyra = TestNamespace::new("ms-adm-gefyra").await?;
    let target = TestNamespace::new("ms-adm-target").await?;
    let dev = Tenant::new(gefyra.name(), "dev")?;
    dev.grant(
        gefyra.name(),
        "make-mounts",
        json!([{ "apiGroups": ["gefyra.dev"], "resources": ["gefyrabridgemounts"],
                 "verbs": ["create", "get", "delete"] }]),
    )?;
    let mount = |name: &str, ns: &str, parameters: serde_json::Value| {
        mount_manifest(
            name,
            gefyra.name(),
            Some(ns),
            "deploy/web",
            json!({ "providerParameter": parameters }),
        )
    };
    let release = format!("adm-{}", &gefyra.name()[gefyra.name().len() - 6..]);
    let policies = Policies::install(
        &release,
        &[gefyra.name()],
        &dev,
        &mount("probe", target.name(), json!({})),
    )
    .await?;
    let policy = policies.mounts();
    let create_as_dev = |manifest: String| dev.kubectl(&["create", "-f", "-"], Some(&manifest));

    // May create mounts, may not patch pods in the target namespace.
    let refused = create_as_dev(mount("m1", target.name(), json!({})))?;
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "admitted without rights");
    assert!(
        stderr.contains(&policy)
            && stderr.contains(&format!(
                "you may not patch pods in namespace {}",
                target.name()
            ))
            && stderr.contains("kubectl auth can-i patch pods"),
        "kubectl says which right is missing where: {stderr}"
    );
    dev.grant(
        target.name(),
        "patch-pods",
        json!([{ "apiGroups": [""], "resources": ["pods"], "verbs": ["patch"] }]),
    )?;
    let refused = create_as_dev(mount("m1", target.name(), json!({})))?;
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains(&format!(
            "you may not exec into pods in namespace {}",
            target.name()
        )),
        "{stderr}"
    );
    dev.grant(
        target.name(),
        "exec-pods",
        json!([{ "apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"] }]),
    )?;
    // A Secret named in its TLS parameters must be readable by its creator.
    let tls = json!({ "tls": {
        "certificate": { "secret": { "name": "web-tls", "key": "tls.crt" } },
        "key": { "secret": { "name": "web-tls", "key": "tls.key" } }
    } });
    let refused = create_as_dev(mount("m1", target.name(), tls.clone()))?;
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains(&format!(
            "you may not read every Secret the mount's providerParameter names in namespace {} \
             (it names web-tls, web-tls)",
            target.name()
        )),
        "{stderr}"
    );
    // Without TLS parameters it is admitted now.
    let admitted = create_as_dev(mount("m1", target.name(), json!({})))?;
    assert!(
        admitted.status.success(),
        "{}",
        String::from_utf8_lossy(&admitted.stderr)
    );
    dev.grant(
        target.name(),
        "read-tls",
        json!([{ "apiGroups": [""], "resources": ["secrets"], "resourceNames": ["web-tls"],
                 "verbs": ["get"] }]),
    )?;
    let admitted = create_as_dev(mount("m2", target.name(), tls))?;
    assert!(
        admitted.status.success(),
        "{}",
        String::from_utf8_lossy(&admitted.stderr)
    );

    // Never kube-system, nor the operator's namespace, whoever asks.
    for ns in ["kube-system", gefyra.name()] {
        let refused = kubectl(&["create", "-f", "-"], Some(&mount("m3", ns, json!({}))))?;
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(
            !refused.status.success()
                && stderr.contains(&format!("mounts may not target namespace {ns}"))
                && stderr.contains("mounts.targetNamespaces"),
            "{ns}: {stderr}"
        );
    }
    // The cluster-wide objects go with `policies`.
    drop(policies);
    let mounts: Api<GefyraBridgeMount> = gefyra.api();
    for name in ["m1", "m2"] {
        // No operator runs here: the mounts have no finalizer to wait for.
        let _ = mounts.delete(name, &DeleteParams::default()).await;
    }
    Ok(())
}

#[tokio::test]
async fn each_mount_keeps_its_own_restore_record_and_one_too_big_for_it_is_refused_up_front()
-> anyhow::Result<()> {
    let bed = Bed::new("ms-record").await?;
    bed.deployments(&["web", "api", "huge"]).await?;
    // An HPA may scale `huge` to 5000 pods: their originals could not fit.
    let mut scaler = hpa("huge")?;
    scaler.spec.min_replicas = Some(1);
    scaler.spec.max_replicas = 5000;
    bed.target
        .api::<k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler>()
        .create(&PostParams::default(), &scaler)
        .await?;
    let before = Before::take(&bed.target, "app=huge").await?;
    bed.mount("huge-mount", "deploy/huge", "app").await?;
    let refused = bed.wait_state("huge-mount", "ERROR").await?;
    let (reason, message) = Bed::ready(&refused);
    assert_eq!(reason, "InvalidInput", "{message}");
    assert!(
        message.contains("deploy/huge")
            && message.contains("may run up to 6250 pods")
            && message.contains("more than the 512 KiB one mount keeps"),
        "says why and what to change: {message}"
    );
    assert_eq!(
        inventory(&bed.target).await?,
        before.objects,
        "nothing made"
    );

    // Two mounts, two records, each in its own ConfigMap carrying its mark.
    for name in ["web", "api"] {
        bed.mount(&format!("{name}-mount"), &format!("deploy/{name}"), "app")
            .await?;
    }
    let config_maps = bed.gefyra.api::<ConfigMap>();
    for name in ["web", "api"] {
        let mount = bed.wait_state(&format!("{name}-mount"), "ACTIVE").await?;
        let record = config_maps
            .get(&bed.restore_config_map(&format!("{name}-mount")).await?)
            .await?;
        let entries = record.data.clone().unwrap_or_default();
        assert_eq!(entries.len(), 1, "{name}: {entries:?}");
        assert!(
            entries
                .values()
                .all(|e| e.contains(&format!("\"target\":\"deploy/{name}\""))),
            "{name}'s record holds {name}'s pods only: {entries:?}"
        );
        assert!(
            record.labels().get("pontoon.dev/mount-uid").is_some() && mount.uid().is_some(),
            "marked as the mount's"
        );
    }
    for name in ["web", "api", "huge"] {
        bed.delete_mount(&format!("{name}-mount")).await?;
    }
    assert!(
        bed.restore_entries().await?.is_empty(),
        "each record went with its mount"
    );
    let left: Vec<String> = config_maps
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .map(|c| c.name_any())
        .filter(|n| n.starts_with("gefyra-carrier2-restore-"))
        .collect();
    assert!(left.is_empty(), "no record left: {left:?}");
    Ok(())
}

#[tokio::test]
async fn a_statefulset_shadow_never_takes_over_a_claim_it_did_not_make() -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::PersistentVolumeClaim;
    let bed = Bed::new("ms-claims").await?;
    let mut db = statefulset("db", 1)?;
    if let Some(spec) = db.spec.as_mut() {
        spec.volume_claim_templates = Some(vec![serde_json::from_value(json!({
            "metadata": { "name": "data" },
            "spec": { "accessModes": ["ReadWriteOnce"], "storageClassName": "manual",
                      "resources": { "requests": { "storage": "1Gi" } } }
        }))?]);
    }
    bed.target
        .api::<StatefulSet>()
        .create(&PostParams::default(), &db)
        .await?;
    // A claim of the name the shadow's first pod would use, made by a user.
    let claims = bed.target.api::<PersistentVolumeClaim>();
    claims
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": { "name": "data-db-gefyra-0", "labels": { "team": "db" } },
                "spec": { "accessModes": ["ReadWriteOnce"], "storageClassName": "manual",
                          "resources": { "requests": { "storage": "1Gi" } } }
            }))?,
        )
        .await?;
    bed.mount("db-mount", "sts/db", "app").await?;
    let refused = bed.wait_state("db-mount", "ERROR").await?;
    let (_, message) = Bed::ready(&refused);
    assert!(
        message.contains("PersistentVolumeClaim `data-db-gefyra-0`")
            && message.contains("was not made by this mount"),
        "names the claim: {message}"
    );
    assert!(
        bed.target
            .api::<StatefulSet>()
            .get_opt("db-gefyra")
            .await?
            .is_none(),
        "no shadow that could take the claim"
    );
    bed.delete_mount("db-mount").await?;
    let claim = claims.get("data-db-gefyra-0").await?;
    assert!(
        claim.metadata.deletion_timestamp.is_none()
            && claim.labels().get("team").map(String::as_str) == Some("db")
            && claim.metadata.owner_references.is_none(),
        "the user's claim is as it was: {claim:?}"
    );
    Ok(())
}

#[tokio::test]
async fn terminate_mounts_closes_admission_before_it_ends_every_mount() -> anyhow::Result<()> {
    let bed = Bed::new("ms-close").await?;
    bed.deployments(&["web", "api"]).await?;
    let api_before = Before::take(&bed.target, "app=api").await?;
    bed.mount("web-mount", "deploy/web", "app").await?;
    bed.wait_state("web-mount", "ACTIVE").await?;
    let args = [
        "terminate-mounts".to_string(),
        "--kubeconfig".into(),
        pontoon_tests::kubeconfig_path().display().to_string(),
        "--namespace".into(),
        bed.gefyra.name().into(),
        "--watch-namespace".into(),
        bed.gefyra.name().into(),
        "--timeout".into(),
        "60".into(),
    ];
    let hook = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_pontoon"))
            .args(args)
            .output()
    });
    let config_maps = bed.gefyra.api::<ConfigMap>();
    let closing = async {
        wait_for(
            &config_maps,
            "pontoon-admission-closed",
            |c: Option<&ConfigMap>| c.is_some(),
            TIMEOUT,
        )
        .await?;
        // A mount made while the hook runs: never served, ended with the rest.
        bed.mount("late-mount", "deploy/api", "app").await?;
        anyhow::Ok(())
    };
    let (out, closed) = tokio::join!(hook, closing);
    closed?;
    let out = out??;
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        said.contains("admission closed")
            && said.contains("late-mount")
            && said.contains("2 mount(s) terminated, every target restored"),
        "{said}"
    );
    assert_eq!(
        inventory(&bed.target)
            .await?
            .into_iter()
            .filter(|(k, _)| k.contains("api"))
            .collect::<BTreeMap<_, _>>(),
        api_before
            .objects
            .into_iter()
            .filter(|(k, _)| k.contains("api"))
            .collect(),
        "the late mount's target was never touched"
    );
    // Closed until the marker expires: a mount made now is refused, saying why.
    bed.mount("after-mount", "deploy/api", "app").await?;
    let refused = bed.wait_state("after-mount", "ERROR").await?;
    let (reason, message) = Bed::ready(&refused);
    assert_eq!(reason, "AdmissionClosed", "{message}");
    assert!(
        message.contains("terminate-mounts") && message.contains("pontoon-admission-closed"),
        "{message}"
    );
    bed.delete_mount("after-mount").await?;
    Ok(())
}
