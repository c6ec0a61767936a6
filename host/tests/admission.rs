//! No way around admission: what a mount or a bridge asks for is judged
//! once, against its creator's rights, and cannot change afterwards; an
//! operator with no admission policy in force serves neither unless the
//! cluster is single-tenant; a pod takes one mount, whatever the kind of
//! target; and a `state` written by hand skips none of the operator's own
//! checks. Driven as users drive it: kubectl, as other tenants
//! (impersonation), on the test bed.

use anyhow::Context;
use k8s_openapi::api::{
    apps::v1::{Deployment, StatefulSet},
    core::v1::Pod,
};
use kube::{
    Api, ResourceExt,
    api::{ListParams, PostParams},
};
use pontoon::bridge_mount::GefyraBridge;
use pontoon_tests::{TestNamespace, wait_for};
use serde_json::json;

mod support;

use support::{mounts::*, tenants::*};

#[tokio::test]
async fn what_a_mount_asks_for_cannot_be_added_changed_or_removed() -> anyhow::Result<()> {
    install_crds().await?;
    let ns = TestNamespace::new("adm-fixed").await?;
    let created = kubectl(
        &["create", "-f", "-"],
        Some(&mount_manifest(
            "m",
            ns.name(),
            None,
            "deploy/web",
            json!({}),
        )),
    )?;
    admitted(created, "a mount without targetNamespace")?;
    // And one asking for nothing yet: each field, from absent to present.
    let bare = json!({
        "apiVersion": "gefyra.dev/v1", "kind": "gefyrabridgemount",
        "metadata": { "name": "bare", "namespace": ns.name() },
    });
    admitted(
        kubectl(&["create", "-f", "-"], Some(&bare.to_string()))?,
        "a mount asking for nothing yet",
    )?;
    for (mount, patch, field) in [
        // The audit's path: absent, then another tenant's namespace.
        (
            "m",
            json!({ "targetNamespace": "kube-system" }),
            "targetNamespace",
        ),
        ("m", json!({ "target": "deploy/bank" }), "target"),
        ("m", json!({ "targetContainer": null }), "targetContainer"),
        ("m", json!({ "provider": "other" }), "provider"),
        (
            "bare",
            json!({ "targetNamespace": "kube-system" }),
            "targetNamespace",
        ),
        ("bare", json!({ "target": "deploy/bank" }), "target"),
        (
            "bare",
            json!({ "targetContainer": "app" }),
            "targetContainer",
        ),
        ("bare", json!({ "provider": "other" }), "provider"),
    ] {
        let said = refused(
            merge_patch(ns.name(), "gefyrabridgemount", mount, patch)?,
            &format!("a change of {field} of {mount}"),
        )?;
        assert!(
            said.contains(&format!(
                "{field} cannot be added, changed or removed once the mount exists"
            )) && said.contains("delete the mount and create a new one"),
            "{field} of {mount}: {said}"
        );
    }
    // What it does not ask for may change.
    admitted(
        merge_patch(
            ns.name(),
            "gefyrabridgemount",
            "m",
            json!({ "sunset": "2030-01-01T00:00:00Z", "providerParameter": { "x": 1 } }),
        )?,
        "a change of sunset and providerParameter",
    )?;
    let mount: Api<pontoon::bridge_mount::GefyraBridgeMount> = ns.api();
    let now = mount.get("m").await?;
    assert_eq!(now.fields.target_namespace, None, "still none");
    assert_eq!(now.fields.target.as_deref(), Some("deploy/web"));
    Ok(())
}

#[tokio::test]
async fn a_tenant_may_not_point_its_mount_or_bridge_where_it_has_no_rights_nor_write_state()
-> anyhow::Result<()> {
    install_crds().await?;
    let gefyra = TestNamespace::new("adm-g").await?;
    let own = TestNamespace::new("adm-d").await?;
    let other = TestNamespace::new("adm-s").await?;
    let (g, d, s) = (gefyra.name(), own.name(), other.name());
    let dev = Tenant::new(g, "dev")?;
    dev.may_write_gefyra(g, &["gefyrabridgemounts", "gefyrabridges"])?;
    dev.may_write_gefyra(d, &["gefyrabridgemounts", "gefyrabridges"])?;
    dev.may_patch_and_exec_pods(d)?;
    // Bridges only, in `gefyra`: no rights anywhere else.
    let bridger = Tenant::new(g, "bridger")?;
    bridger.grant(
        g,
        "bridges-only",
        json!([{ "apiGroups": ["gefyra.dev"], "resources": ["gefyrabridges"],
                 "verbs": ["create", "get", "patch"] }]),
    )?;
    let probe = mount_manifest("probe", g, Some(s), "deploy/x", json!({}));
    let policies =
        Policies::install(&format!("adm-{}", &g[g.len() - 6..]), &[g, d], &dev, &probe).await?;

    // A mount in its own namespace, no targetNamespace: admitted; pointed at
    // another namespace afterwards: refused.
    let mount = mount_manifest("m", d, None, "deploy/web", json!({}));
    admitted(dev.create(&mount)?, "dev's mount in its own namespace")?;
    let said = refused(
        dev.patch(d, "gefyrabridgemount", "m", json!({ "targetNamespace": s }))?,
        "targetNamespace added afterwards",
    )?;
    assert!(
        said.contains("targetNamespace cannot be added, changed or removed"),
        "{said}"
    );

    // `state` and its bookkeeping are the operator's, from the first write.
    for extra in [
        json!({ "state": "ACTIVE" }),
        json!({ "state": "PREPARING" }),
        json!({ "stateTransitions": { "PREPARING": "2026-12-01T00:00:00Z" } }),
        json!({ "status": { "conditions": [] , "x": 1 } }),
    ] {
        let forged = mount_manifest("s", d, None, "deploy/web", extra.clone());
        let said = refused(
            dev.create(&forged)?,
            &format!("a mount created with {extra}"),
        )?;
        assert!(
            said.contains(&policies.mounts())
                && said.contains("a new mount starts REQUESTED")
                && said.contains("written by the operator alone"),
            "{extra}: {said}"
        );
    }
    let said = refused(
        dev.patch(
            d,
            "gefyrabridgemount",
            "m",
            json!({ "state": "ACTIVE", "stateTransitions": { "ACTIVE": "2026-12-01T00:00:00Z" } }),
        )?,
        "state written by a tenant",
    )?;
    assert!(
        said.contains(
            "state, stateTransitions and status of a mount are written by the operator alone"
        ),
        "{said}"
    );
    // A cluster administrator (system:masters, who may change or remove the
    // policy anyway, as the test bed's own kubeconfig is) may write it; the
    // operator still runs its own checks whatever the state says.
    admitted(
        merge_patch(d, "gefyrabridgemount", "m", json!({ "state": "ERROR" }))?,
        "state written by an administrator",
    )?;

    // A bridge asks for the rights of a mount in the namespace it names.
    let theirs = |ns: &str| bridge_manifest("b1", g, "their-mount", ns, json!({}));
    let said = refused(
        bridger.create(&theirs(s))?,
        "a bridge by someone without rights in its target namespace",
    )?;
    assert!(
        said.contains(&policies.bridges())
            && said.contains(&format!("you may not patch pods in namespace {s}")),
        "{said}"
    );
    let said = refused(
        bridger.create(&theirs(g))?,
        "a bridge naming its own namespace, the operator's",
    )?;
    assert!(
        said.contains(&format!("bridges may not target namespace {g}")),
        "the namespace a bridge names is judged like a mount's: {said}"
    );
    admitted(
        dev.create(&bridge_manifest("b2", g, "m", d, json!({})))?,
        "dev's bridge into its own namespace",
    )?;
    // ... and every change is judged again.
    let said = refused(
        dev.patch(g, "gefyrabridge", "b2", json!({ "targetNamespace": s }))?,
        "a bridge pointed at another namespace",
    )?;
    assert!(
        said.contains(&format!("you may not patch pods in namespace {s}")),
        "{said}"
    );
    let said = refused(
        dev.patch(g, "gefyrabridge", "b2", json!({ "state": "ACTIVE" }))?,
        "a bridge's state written by a tenant",
    )?;
    assert!(
        said.contains(
            "state, stateTransitions and status of a bridge are written by the operator alone"
        ),
        "{said}"
    );
    drop(policies);
    Ok(())
}

#[tokio::test]
async fn without_a_policy_in_force_mounts_and_bridges_are_refused_until_one_is()
-> anyhow::Result<()> {
    let release = format!("unguarded-{}", std::process::id());
    let mounts_policy = format!("{release}-pontoon-mounts");
    let bridges_policy = format!("{release}-pontoon-bridges");
    // Namespaces given: a shared cluster's operator allows none by default.
    let flags = [
        "--single-tenant=false".to_string(),
        format!("--mount-admission-policy={mounts_policy}"),
        format!("--bridge-admission-policy={bridges_policy}"),
        "--mount-namespaces=*".to_string(),
    ];
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let bed = Bed::with_flags("adm-ung", &flags).await?;
    bed.deploy_web(1).await?;
    let before = Before::take(&bed.target, "app=web").await?;
    bed.mount("web-mount", "deploy/web", "app").await?;
    let refused_mount = bed.wait_state("web-mount", "ERROR").await?;
    let (reason, message) = Bed::ready(&refused_mount);
    assert_eq!(reason, "Unguarded", "{message}");
    assert!(
        message.contains(&format!(
            "ValidatingAdmissionPolicy `{mounts_policy}` does not exist"
        )) && message.contains("--single-tenant")
            && message.contains("mounts.admissionPolicy"),
        "says what is missing and what to do: {message}"
    );
    let log = bed.operator.log();
    assert!(
        log.contains("mounts are not served") && log.contains("bridges are not served"),
        "said at start:\n{log}"
    );
    assert_eq!(
        inventory(&bed.target).await?,
        before.objects,
        "nothing was made"
    );
    let bridges: Api<GefyraBridge> = bed.gefyra.api();
    kubectl(
        &["create", "-f", "-"],
        Some(&bridge_manifest(
            "b",
            bed.gefyra.name(),
            "web-mount",
            bed.target.name(),
            json!({ "destinationIP": "10.96.0.1" }),
        )),
    )
    .map(|o| admitted(o, "a bridge"))??;
    let said = wait_for(
        &bridges,
        "b",
        |b: Option<&GefyraBridge>| b.is_some_and(|b| b.bridge.state.as_deref() == Some("ERROR")),
        TIMEOUT,
    )
    .await?
    .and_then(|b| b.bridge.status)
    .and_then(|s| {
        s.get("message")
            .and_then(|m| m.as_str())
            .map(str::to_string)
    })
    .unwrap_or_default();
    assert!(
        said.contains("bridges are not served")
            && said.contains(&format!("`{bridges_policy}` does not exist")),
        "{said}"
    );

    // The administrator installs the policies: the mount waiting for them is
    // admitted at once (the operator watches them).
    let tenant = Tenant::new(bed.gefyra.name(), "probe")?;
    tenant.may_write_gefyra(bed.gefyra.name(), &["gefyrabridgemounts"])?;
    let probe = mount_manifest(
        "probe",
        bed.gefyra.name(),
        Some(bed.target.name()),
        "deploy/web",
        json!({}),
    );
    let _policies = Policies::install(&release, &[bed.gefyra.name()], &tenant, &probe).await?;
    bed.wait_state("web-mount", "ACTIVE").await?;
    bed.delete_mount("web-mount").await?;
    assert_restored(&bed, &before, "app=web", 1).await?;
    Ok(())
}

#[tokio::test]
async fn a_pod_takes_one_mount_whatever_the_kind_of_target() -> anyhow::Result<()> {
    let bed = Bed::new("adm-pod").await?;
    bed.deploy_web(2).await?;
    bed.mount("first", "deploy/web", "app").await?;
    bed.wait_state("first", "ACTIVE").await?;
    let entries = bed.restore_entries().await?;
    let pod = live(
        bed.target
            .api::<Pod>()
            .list(&ListParams::default().labels("app=web"))
            .await?
            .items,
    )
    .first()
    .map(|p| p.name_any())
    .context("a pod of web")?;
    assert!(
        bed.target
            .api::<Pod>()
            .get(&pod)
            .await?
            .annotations()
            .get("pontoon.dev/mount-uid")
            == bed.mounts().get("first").await?.uid().as_ref(),
        "a patched pod names its mount"
    );
    bed.mount("second", &format!("pod/{pod}"), "app").await?;
    let second = bed.wait_state("second", "ERROR").await?;
    let (reason, message) = Bed::ready(&second);
    assert_eq!(reason, "DuplicateMount", "{message}");
    assert!(
        message.contains("/first (ACTIVE, container `app`)")
            && message.contains(&format!("which holds pod {pod}"))
            && message.contains("a pod takes one mount at a time"),
        "names the holder and the pod: {message}"
    );
    assert_eq!(
        bed.restore_entries().await?,
        entries,
        "nothing of the second"
    );
    bed.delete_mount("second").await?;
    assert_eq!(
        bed.mounts().get("first").await?.fields.state.as_deref(),
        Some("ACTIVE")
    );
    assert!(
        on_carrier(&bed.target, "app=web").await?,
        "deleting the refused mount undid nothing of the first"
    );

    // The other way round: a StatefulSet's pod first, then the StatefulSet.
    bed.target
        .api::<StatefulSet>()
        .create(&PostParams::default(), &statefulset("db", 1)?)
        .await?;
    ready_pods(&bed.target, "app=db", 1).await?;
    bed.mount("pod-first", "pod/db-0", "app").await?;
    bed.wait_state("pod-first", "ACTIVE").await?;
    bed.mount("sts-second", "sts/db", "app").await?;
    let refused = bed.wait_state("sts-second", "ERROR").await?;
    let (reason, message) = Bed::ready(&refused);
    assert_eq!(reason, "DuplicateMount", "{message}");
    assert!(message.contains("which holds pod db-0"), "{message}");
    bed.delete_mount("sts-second").await?;
    assert!(on_carrier(&bed.target, "app=db").await?);
    bed.delete_mount("pod-first").await?;

    // The order: the StatefulSet first, then its pod.
    bed.mount("sts-first", "sts/db", "app").await?;
    bed.wait_state("sts-first", "ACTIVE").await?;
    bed.mount("pod-second", "pod/db-0", "app").await?;
    let refused = bed.wait_state("pod-second", "ERROR").await?;
    let (reason, message) = Bed::ready(&refused);
    assert_eq!(reason, "DuplicateMount", "{message}");
    assert!(
        message.contains("/sts-first (ACTIVE, container `app`)")
            && message.contains("which holds pod db-0"),
        "{message}"
    );
    bed.delete_mount("pod-second").await?;
    assert!(
        on_carrier(&bed.target, "app=db").await?,
        "deleting the refused pod mount undid nothing of the StatefulSet's"
    );
    bed.delete_mount("sts-first").await?;
    bed.delete_mount("first").await?;
    Ok(())
}

#[tokio::test]
async fn a_state_written_by_hand_skips_no_check_and_undoes_nothing() -> anyhow::Result<()> {
    let bed = Bed::new("adm-state").await?;
    bed.deploy_web(1).await?;
    bed.mount("holder", "deploy/web", "app").await?;
    bed.wait_state("holder", "ACTIVE").await?;
    let entries = bed.restore_entries().await?;
    // On a single-tenant cluster anyone may write what Gefyra's wire format
    // allows, a state and its transitions among it.
    let written = |state: &str| pontoon::bridge_mount::crd::BridgeMountFields {
        state: Some(state.into()),
        state_transitions: Some(
            [
                ("PREPARING".to_string(), "2026-12-01T00:00:00Z".to_string()),
                (state.to_string(), "2026-12-01T00:00:01Z".to_string()),
            ]
            .into(),
        ),
        ..Default::default()
    };
    bed.mount_with("forged", "deploy/web", "app", written("ACTIVE"))
        .await?;
    let forged = bed.wait_state("forged", "ERROR").await?;
    let (reason, message) = Bed::ready(&forged);
    assert_eq!(reason, "DuplicateMount", "{message}");
    assert!(message.contains("/holder (ACTIVE"), "{message}");
    bed.delete_mount("forged").await?;
    assert_eq!(
        bed.mounts().get("holder").await?.fields.state.as_deref(),
        Some("ACTIVE")
    );
    assert!(
        on_carrier(&bed.target, "app=web").await?,
        "the forged mount's deletion undid nothing of the holder's"
    );
    assert_eq!(bed.restore_entries().await?, entries);

    // A namespace mounts may not target (the operator's own), whatever the
    // state says.
    let mount = pontoon::bridge_mount::GefyraBridgeMount {
        metadata: kube::api::ObjectMeta {
            name: Some("outside".into()),
            namespace: Some(bed.gefyra.name().into()),
            ..Default::default()
        },
        fields: pontoon::bridge_mount::crd::BridgeMountFields {
            target_namespace: Some(bed.gefyra.name().into()),
            target: Some("deploy/web".into()),
            target_container: Some("app".into()),
            ..written("INSTALLING")
        },
    };
    bed.mounts().create(&PostParams::default(), &mount).await?;
    let outside = bed.wait_state("outside", "ERROR").await?;
    assert_eq!(Bed::ready(&outside).0, "NamespaceNotAllowed");
    bed.delete_mount("outside").await?;
    bed.delete_mount("holder").await?;
    let deployment = bed.target.api::<Deployment>().get("web").await?;
    assert!(deployment.metadata.deletion_timestamp.is_none());
    Ok(())
}

/// A bridge whose connection provider runs in Pontoon (`tunnel`, what
/// `pontoon bridge` creates) goes to its client's relay: its `client` must be
/// whoever creates it, and its endpoints are the operator's to write. So no
/// tenant can send a bridge's requests to another developer's relay, or make
/// the operator set a relay up for someone else.
#[tokio::test(flavor = "multi_thread")]
async fn a_tunnel_bridge_belongs_to_its_creator_and_its_endpoints_to_the_operator()
-> anyhow::Result<()> {
    install_crds().await?;
    let gefyra = TestNamespace::new("adm-tg").await?;
    let target = TestNamespace::new("adm-tt").await?;
    let (g, t) = (gefyra.name(), target.name());
    let dev = Tenant::new(g, "dev")?;
    dev.may_write_gefyra(g, &["gefyrabridgemounts", "gefyrabridges"])?;
    dev.may_patch_and_exec_pods(t)?;
    // Refused by the mounts' policy (no rights there) once it is enforced.
    let probe = mount_manifest("probe", g, Some("kube-public"), "deploy/x", json!({}));
    let policies =
        Policies::install(&format!("adm-{}", &g[g.len() - 6..]), &[g], &dev, &probe).await?;
    let tunnel = |name: &str, client: &str| {
        bridge_manifest(
            name,
            g,
            "m",
            t,
            json!({ "connectionProvider": "tunnel", "client": client }),
        )
    };

    let said = refused(
        dev.create(&tunnel("someone-elses", "system:serviceaccount:x:alice"))?,
        "a tunnel bridge naming another client",
    )?;
    assert!(
        said.contains(&policies.bridges())
            && said.contains("its client must be you")
            && said.contains(&dev.user()),
        "{said}"
    );
    let said = refused(
        dev.create(&bridge_manifest(
            "forged",
            g,
            "m",
            t,
            json!({ "connectionProvider": "tunnel", "client": dev.user(),
                    "clusterEndpoint": { "80": "elsewhere.example.com:80" } }),
        ))?,
        "a tunnel bridge with its own clusterEndpoint",
    )?;
    assert!(said.contains("written by the operator alone"), "{said}");

    admitted(
        dev.create(&tunnel("mine", &dev.user()))?,
        "dev's own tunnel bridge",
    )?;
    let said = refused(
        dev.patch(
            g,
            "gefyrabridge",
            "mine",
            json!({ "clusterEndpoint": { "80": "elsewhere.example.com:80" } }),
        )?,
        "clusterEndpoint written by a tenant",
    )?;
    assert!(said.contains("written by the operator alone"), "{said}");
    let said = refused(
        dev.patch(
            g,
            "gefyrabridge",
            "mine",
            json!({ "client": "system:serviceaccount:x:alice" }),
        )?,
        "the client changed afterwards",
    )?;
    assert!(said.contains("its client must be you"), "{said}");
    // Gefyra's own bridges name their endpoints, as before.
    admitted(
        dev.create(&bridge_manifest(
            "gefyras",
            g,
            "m",
            t,
            json!({ "destinationIP": "10.0.0.9" }),
        ))?,
        "a stowaway bridge",
    )?;
    Ok(())
}
