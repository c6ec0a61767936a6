//! The test bed's nodes are kwok fakes: a pod of the operator's image never
//! runs there. Where a test needs such a pod to run (the chart's pre-delete
//! and pre-upgrade hook Jobs), it acts as the kubelet: runs the container's
//! arguments with the operator binary this test was built with, as the pod's
//! ServiceAccount (a real token of it, not impersonation), and reports the
//! pod's phase as a kubelet would, so that the Job completes or fails.

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use anyhow::Context;
use k8s_openapi::api::core::v1::Pod;
use kube::{
    Api, ResourceExt,
    api::{ListParams, Patch, PatchParams},
};
use serde_json::{Value, json};

use crate::{kubeconfig_path, testbed_bin};

/// The label the chart puts on the pods of its pre-delete hook Job.
pub const TERMINATE_MOUNTS_PODS: &str = "app.kubernetes.io/component=terminate-mounts";

/// The label the chart puts on the pods of its pre-upgrade hook Job.
pub const CHECK_UPGRADE_PODS: &str = "app.kubernetes.io/component=check-upgrade";

/// A kubeconfig in `dir` for the test bed's API server that authenticates
/// as ServiceAccount `namespace/name` with a token the API server issued.
pub fn as_service_account(namespace: &str, name: &str, dir: &Path) -> anyhow::Result<PathBuf> {
    let token = Command::new(testbed_bin("kubectl")?)
        .args([
            "create",
            "token",
            name,
            "--namespace",
            namespace,
            "--duration",
            "2h",
        ])
        .env("KUBECONFIG", kubeconfig_path())
        .output()?;
    anyhow::ensure!(
        token.status.success(),
        "kubectl create token: {}",
        String::from_utf8_lossy(&token.stderr)
    );
    let text = std::fs::read_to_string(kubeconfig_path())?;
    let mut config: Value = yaml_serde::from_str(&text)?;
    for user in config["users"].as_array_mut().into_iter().flatten() {
        user["user"] = json!({ "token": String::from_utf8(token.stdout.clone())?.trim() });
    }
    std::fs::create_dir_all(dir)?;
    let path = dir.join("kubeconfig");
    std::fs::write(&path, serde_json::to_string(&config)?)?;
    Ok(path)
}

/// [`run_pods`] in the background, for a test that then starts the helm
/// command whose hook waits for those pods; `work` must outlive the task.
pub fn run_pods_in_background(
    namespace: &str,
    selector: &'static str,
    binary: &Path,
    work: PathBuf,
    timeout: Duration,
) -> tokio::task::JoinHandle<anyhow::Result<Vec<String>>> {
    let (namespace, binary) = (namespace.to_string(), binary.to_path_buf());
    tokio::spawn(async move { run_pods(&namespace, selector, &binary, &work, timeout).await })
}

/// Runs each pod of `namespace` selected by `selector` that is not
/// finished, one after another, with `binary` (the container's arguments
/// and `--kubeconfig` of the pod's ServiceAccount), until one succeeds or
/// `timeout` passes. Returns what each run printed, the last being the
/// successful one.
pub async fn run_pods(
    namespace: &str,
    selector: &str,
    binary: &Path,
    work: &Path,
    timeout: Duration,
) -> anyhow::Result<Vec<String>> {
    let pods: Api<Pod> = Api::namespaced(crate::client().await?, namespace);
    let deadline = Instant::now() + timeout;
    let mut outputs = Vec::new();
    loop {
        let listed = pods.list(&ListParams::default().labels(selector)).await?;
        let pending = listed.items.into_iter().find(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.phase.as_deref())
                .is_none_or(|phase| phase == "Pending" || phase == "Running")
        });
        if let Some(pod) = pending {
            let name = pod.name_any();
            let spec = pod.spec.clone().context("a pod without spec")?;
            let account = spec.service_account_name.clone().unwrap_or_default();
            let container = spec.containers.first().context("a pod without container")?;
            let mut args = container.args.clone().unwrap_or_default();
            args.push(format!(
                "--kubeconfig={}",
                as_service_account(namespace, &account, work)?.display()
            ));
            let binary = binary.to_path_buf();
            let run =
                tokio::task::spawn_blocking(move || Command::new(binary).args(&args).output())
                    .await??;
            outputs.push(format!(
                "{}{}",
                String::from_utf8_lossy(&run.stdout),
                String::from_utf8_lossy(&run.stderr)
            ));
            let code = run.status.code().unwrap_or(1);
            let now = k8s_openapi::jiff::Timestamp::now().to_string();
            let status = json!({ "status": {
                "phase": if code == 0 { "Succeeded" } else { "Failed" },
                "conditions": [{ "type": "Ready", "status": "False", "lastTransitionTime": now }],
                "containerStatuses": [{
                    "name": container.name, "image": container.image, "imageID": "",
                    "ready": false, "restartCount": 0,
                    "state": { "terminated": {
                        "exitCode": code, "reason": if code == 0 { "Completed" } else { "Error" },
                        "startedAt": now, "finishedAt": now
                    } }
                }]
            } });
            pods.patch_status(&name, &PatchParams::default(), &Patch::Merge(status))
                .await?;
            if code == 0 {
                return Ok(outputs);
            }
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "no pod {selector} in {namespace} ran to success: {outputs:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
