//! The Gateway API CRDs the project vendors (`charts/pontoon/files/gateway-api/standard/`,
//! the standard channel of Gateway API v1.6.3). The test bed does not install
//! them; tests that need them call [`install_crds`].

use std::{path::PathBuf, time::Duration};

use anyhow::{Context, anyhow, bail};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api,
    api::{Patch, PatchParams},
    runtime::wait::conditions::is_crd_established,
};
use tokio::sync::OnceCell;

use crate::{repo_root, wait_for};

/// The Gateway API release the CRDs come from.
pub const VERSION: &str = "v1.6.3";

/// The field manager of the CRDs' server-side apply.
const FIELD_MANAGER: &str = "pontoon-tests";

/// Directory of the vendored standard-channel CRDs, one file per CRD.
pub fn crds_dir() -> PathBuf {
    repo_root().join("charts/pontoon/files/gateway-api/standard")
}

/// The vendored CRDs, parsed, sorted by file name.
pub fn crds() -> anyhow::Result<Vec<serde_json::Value>> {
    let dir = crds_dir();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .with_context(|| format!("cannot read {}", dir.display()))?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    files.retain(|path| path.extension().is_some_and(|ext| ext == "yaml"));
    files.sort();
    if files.is_empty() {
        bail!(
            "no CRDs in {} (scripts/gateway-api-crds.sh writes them)",
            dir.display()
        );
    }
    files
        .iter()
        .map(|path| {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            let crd: serde_json::Value = yaml_serde::from_str(&text)
                .with_context(|| format!("{} is not YAML", path.display()))?;
            if crd["kind"] != "CustomResourceDefinition" {
                bail!("{} is not a CustomResourceDefinition", path.display());
            }
            Ok(crd)
        })
        .collect()
}

/// Installs the Gateway API CRDs on the test cluster (server-side apply,
/// forcing conflicts) and waits until each is `Established`. Done once per
/// process: later calls return the first call's outcome.
pub async fn install_crds() -> anyhow::Result<()> {
    // anyhow::Error is not Clone: keep the message so every caller sees it.
    static INSTALLED: OnceCell<Result<(), String>> = OnceCell::const_new();
    INSTALLED
        .get_or_init(|| async { install().await.map_err(|err| format!("{err:#}")) })
        .await
        .clone()
        .map_err(|message| anyhow!(message))
}

/// [`install_crds`], then the experimental channel's HTTPRoute CRD
/// (`charts/pontoon/files/gateway-api/experimental/`) over the standard one,
/// for tests of its fields (a rule's `retry`); returns once the API server
/// keeps a rule's `retry`. The experimental HTTPRoute is the standard one
/// plus fields, so the other tests of the process are served alike; as
/// [`install_crds`] is done once per process, none of them puts the
/// standard one back. Done once per process.
pub async fn install_experimental_http_route() -> anyhow::Result<()> {
    install_crds().await?;
    static INSTALLED: OnceCell<Result<(), String>> = OnceCell::const_new();
    INSTALLED
        .get_or_init(|| async {
            experimental_http_route()
                .await
                .map_err(|err| format!("{err:#}"))
        })
        .await
        .clone()
        .map_err(|message| anyhow!(message))
}

async fn experimental_http_route() -> anyhow::Result<()> {
    let path = repo_root().join(
        "charts/pontoon/files/gateway-api/experimental/gateway.networking.k8s.io_httproutes.yaml",
    );
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let crd: serde_json::Value = yaml_serde::from_str(&text)?;
    let client = crate::client().await?;
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = "httproutes.gateway.networking.k8s.io";
    api.patch(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&crd),
    )
    .await
    .with_context(|| format!("applying the experimental CRD {name}"))?;
    // The API server takes up a CRD's new schema a moment later: until then
    // it drops the field. Asked with a dry run, so nothing is stored.
    let resource = kube::api::ApiResource {
        group: "gateway.networking.k8s.io".into(),
        version: "v1".into(),
        api_version: "gateway.networking.k8s.io/v1".into(),
        kind: "HTTPRoute".into(),
        plural: "httproutes".into(),
    };
    let routes: Api<kube::api::DynamicObject> = Api::namespaced_with(client, "default", &resource);
    let probe: kube::api::DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": { "name": "pontoon-tests-retry-probe" },
        "spec": { "rules": [{ "retry": { "attempts": 1 } }] }
    }))?;
    let dry_run = kube::api::PostParams {
        dry_run: true,
        ..Default::default()
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let kept = routes
            .create(&dry_run, &probe)
            .await
            .map(|r| !r.data["spec"]["rules"][0]["retry"].is_null())
            .unwrap_or(false);
        if kept {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            bail!(
                "the API server still drops an HTTPRoute rule's `retry` 30 s after {name} was applied"
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn install() -> anyhow::Result<()> {
    let client = crate::client().await?;
    let api: Api<CustomResourceDefinition> = Api::all(client);
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let mut names = Vec::new();
    for crd in crds()? {
        let name = crd["metadata"]["name"]
            .as_str()
            .context("a vendored CRD has no metadata.name")?
            .to_string();
        api.patch(&name, &params, &Patch::Apply(&crd))
            .await
            .with_context(|| format!("applying CRD {name}"))?;
        names.push(name);
    }
    for name in &names {
        wait_for(&api, name, is_crd_established(), Duration::from_secs(30))
            .await
            .with_context(|| format!("CRD {name} never became Established"))?;
    }
    Ok(())
}

/// A test's teardown while its operator still runs: deletes the Gateways of
/// `namespace` (they carry the operator's finalizer; left for after the
/// operator stopped, the namespace would never finish deleting), waits up
/// to 10 s for them to go, then deletes the cluster-scoped `classes`.
/// Blocking, so a `Drop` can call it; errors are ignored (best effort).
pub fn remove_gateways_blocking(namespace: &str, classes: &[String]) {
    use kube::{
        api::{DeleteParams, DynamicObject, ListParams},
        core::{ApiResource, GroupVersionKind},
    };
    let resource = |kind| {
        ApiResource::from_gvk(&GroupVersionKind::gvk(
            "gateway.networking.k8s.io",
            "v1",
            kind,
        ))
    };
    let (namespace, classes) = (namespace.to_string(), classes.to_vec());
    let _ = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        runtime.block_on(async move {
            let client = crate::client().await?;
            let gateways: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), &namespace, &resource("Gateway"));
            gateways
                .delete_collection(&DeleteParams::background(), &ListParams::default())
                .await?;
            for _ in 0..100 {
                if gateways
                    .list_metadata(&ListParams::default())
                    .await?
                    .items
                    .is_empty()
                {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let gateway_classes: Api<DynamicObject> =
                Api::all_with(client, &resource("GatewayClass"));
            for class in &classes {
                gateway_classes
                    .delete(class, &DeleteParams::background())
                    .await?;
            }
            anyhow::Ok(())
        })
    })
    .join();
}

/// Creates GatewayClass `name` for the controller `controller_name`, with
/// `parameters_ref` (a `spec.parametersRef`) when given.
pub async fn create_class(
    name: &str,
    controller_name: &str,
    parameters_ref: Option<serde_json::Value>,
) -> anyhow::Result<()> {
    use kube::{
        api::{DynamicObject, PostParams},
        core::{ApiResource, GroupVersionKind},
    };
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "gateway.networking.k8s.io",
        "v1",
        "GatewayClass",
    ));
    let class: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "GatewayClass",
        "metadata": { "name": name },
        "spec": { "controllerName": controller_name, "parametersRef": parameters_ref }
    }))?;
    Api::<DynamicObject>::all_with(crate::client().await?, &resource)
        .create(&PostParams::default(), &class)
        .await
        .with_context(|| format!("creating GatewayClass {name}"))?;
    Ok(())
}
