//! A cluster whose GefyraBridgeMount CRD is older than the operator (Helm
//! never upgrades the CRDs of a chart's `crds/`), so nothing stops a user
//! from pointing a live mount at another namespace: the operator keeps
//! serving what it admitted, says the fields drifted, and restores exactly
//! what it mounted. Its own test binary: it changes the cluster-wide CRD
//! for its duration (cargo runs test binaries one after another).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api, ResourceExt,
    api::{Patch, PatchParams},
};
use pontoon_tests::{TestNamespace, wait_for};
use serde_json::json;

mod support;

use support::mounts::*;

const CRD: &str = "gefyrabridgemounts.gefyra.dev";

/// The CRD as `pontoon crds` makes it, put back when dropped.
struct OlderCrd;

impl OlderCrd {
    /// Takes the CRD's rules that fix a mount's request after creation.
    async fn install() -> anyhow::Result<Self> {
        install_crds().await?;
        let crds: Api<CustomResourceDefinition> = Api::all(pontoon_tests::client().await?);
        crds.patch(
            CRD,
            &PatchParams::default(),
            &Patch::<()>::Json(serde_json::from_value(json!([{
                "op": "remove",
                "path": "/spec/versions/0/schema/openAPIV3Schema/x-kubernetes-validations"
            }]))?),
        )
        .await?;
        Ok(Self)
    }
}

impl Drop for OlderCrd {
    fn drop(&mut self) {
        // A client of its own runtime: the test's runtime is blocked here.
        let put_back = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            runtime.block_on(async move {
                let crds: Api<CustomResourceDefinition> = Api::all(pontoon_tests::client().await?);
                for crd in pontoon::crds::all()? {
                    if kube::ResourceExt::name_any(&crd) == CRD {
                        crds.patch(
                            CRD,
                            &PatchParams::apply("pontoon-tests").force(),
                            &Patch::Apply(&crd),
                        )
                        .await?;
                    }
                }
                anyhow::Ok(())
            })
        })
        .join();
        if let Ok(Err(err)) = put_back {
            eprintln!("warning: could not put the mount CRD back: {err:#}");
        }
    }
}

#[tokio::test]
async fn a_mount_pointed_elsewhere_after_admission_keeps_serving_what_was_admitted()
-> anyhow::Result<()> {
    let _older = OlderCrd::install().await?;
    let bed = Bed::new("old-crd").await?;
    let other = TestNamespace::new("old-crd-other").await?;
    bed.deploy_web(1).await?;
    other
        .api::<k8s_openapi::api::apps::v1::Deployment>()
        .create(&Default::default(), &deployment("web", 1)?)
        .await?;
    ready_pods(&other, "app=web", 1).await?;
    let before = Before::take(&bed.target, "app=web").await?;
    let elsewhere = Before::take(&other, "app=web").await?;
    bed.mount("web-mount", "deploy/web", "app").await?;
    bed.wait_state("web-mount", "ACTIVE").await?;

    // Nothing in this CRD stops the change.
    bed.mounts()
        .patch(
            "web-mount",
            &PatchParams::default(),
            &Patch::Merge(json!({ "targetNamespace": other.name() })),
        )
        .await?;
    let drifted = |m: Option<&pontoon::bridge_mount::GefyraBridgeMount>| {
        m.is_some_and(|m| {
            m.conditions()
                .iter()
                .any(|c| c.type_ == "Admitted" && c.status == "False" && c.reason == "Drifted")
        })
    };
    let mount = wait_for(&bed.mounts(), "web-mount", drifted, TIMEOUT)
        .await?
        .ok_or_else(|| anyhow::anyhow!("the mount is gone"))?;
    let said = mount
        .conditions()
        .iter()
        .find(|c| c.type_ == "Admitted")
        .map(|c| c.message.clone())
        .unwrap_or_default();
    assert!(
        said.contains(&format!(
            "targetNamespace: admitted `{}`, now `{}`",
            bed.target.name(),
            other.name()
        )) && said.contains("keeps serving what it admitted")
            && said.contains("delete the mount and create a new one"),
        "{said}"
    );
    assert!(
        on_carrier(&bed.target, "app=web").await?,
        "the admitted target stays mounted"
    );
    assert_eq!(
        inventory(&other).await?,
        elsewhere.objects,
        "the namespace it was pointed at is untouched"
    );
    // It still holds the pods it was admitted for: a second mount of the
    // same workload, or of one of its pods, is refused naming it, and its
    // deletion undoes nothing of the first.
    let pods = bed
        .target
        .api::<k8s_openapi::api::core::v1::Pod>()
        .list(&kube::api::ListParams::default().labels("app=web"))
        .await?;
    let pod = live(pods.items)
        .first()
        .map(|p| p.name_any())
        .ok_or_else(|| anyhow::anyhow!("no pod of web"))?;
    for (second, target) in [
        ("second", "deploy/web".to_string()),
        ("third", format!("pod/{pod}")),
    ] {
        bed.mount(second, &target, "app").await?;
        let refused = bed.wait_state(second, "ERROR").await?;
        let (reason, message) = Bed::ready(&refused);
        assert_eq!(reason, "DuplicateMount", "{target}: {message}");
        assert!(
            message.contains("/web-mount (ACTIVE, container `app`)"),
            "{target}: names the drifted mount: {message}"
        );
        bed.delete_mount(second).await?;
        assert!(
            on_carrier(&bed.target, "app=web").await?,
            "{target}: the first mount's pods stay mounted"
        );
    }
    // Deleting it restores what was mounted, and touches nothing else.
    bed.delete_mount("web-mount").await?;
    assert_restored(&bed, &before, "app=web", 1).await?;
    assert_eq!(inventory(&other).await?, elsewhere.objects);
    Ok(())
}
