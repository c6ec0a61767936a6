//! The test bed behaves like a cluster: what an operator relies on works.
//! Run against `make testbed-up` (or any cluster named by KUBECONFIG).

use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::{
    apps::v1::{Deployment, StatefulSet},
    autoscaling::v2::HorizontalPodAutoscaler,
    core::v1::{Pod, Service},
};
use kube::{
    Api, ResourceExt,
    api::{AttachParams, DeleteParams, Patch, PatchParams, PostParams},
};
use pontoon_tests::{TestNamespace, wait_for, wait_for_list};
use serde_json::json;
use tokio::io::AsyncReadExt;

const TIMEOUT: Duration = Duration::from_secs(60);

fn deployment(name: &str, replicas: i32) -> anyhow::Result<Deployment> {
    Ok(serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": {
            "replicas": replicas,
            "selector": { "matchLabels": { "app": name } },
            "template": {
                "metadata": { "labels": { "app": name } },
                "spec": { "containers": [{ "name": "web", "image": "nginx:1.27" }] }
            }
        }
    }))?)
}

fn pod(name: &str, image: &str) -> anyhow::Result<Pod> {
    Ok(serde_json::from_value(json!({
        "metadata": { "name": name, "labels": { "app": name } },
        "spec": { "containers": [
            { "name": "main", "image": image },
            { "name": "sidecar", "image": "busybox:1.36" }
        ] }
    }))?)
}

fn is_pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

async fn create_ready_pod(ns: &TestNamespace, name: &str, image: &str) -> anyhow::Result<Pod> {
    let pods: Api<Pod> = ns.api();
    pods.create(&PostParams::default(), &pod(name, image)?)
        .await?;
    let ready = |p: Option<&Pod>| p.is_some_and(is_pod_ready);
    wait_for(&pods, name, ready, TIMEOUT)
        .await?
        .with_context(|| format!("pod {name} vanished"))
}

/// Runs `command` in a container over the API server's exec endpoint; returns stdout.
async fn exec(
    pods: &Api<Pod>,
    pod: &str,
    container: &str,
    command: &[&str],
) -> anyhow::Result<String> {
    let params = AttachParams::default().container(container).stderr(false);
    let mut attached = pods.exec(pod, command.iter().copied(), &params).await?;
    let mut stdout = String::new();
    attached
        .stdout()
        .context("exec gave no stdout stream")?
        .read_to_string(&mut stdout)
        .await?;
    let status = attached
        .take_status()
        .context("exec gave no status")?
        .await
        .context("exec ended without a status")?;
    anyhow::ensure!(
        status.status.as_deref() == Some("Success"),
        "`{}` in {pod}/{container} failed: {status:?}",
        command.join(" ")
    );
    attached.join().await?;
    Ok(stdout)
}

#[tokio::test]
async fn deployment_pods_become_running_and_ready() -> anyhow::Result<()> {
    let ns = TestNamespace::new("tb-deploy").await?;
    let deployments: Api<Deployment> = ns.api();
    deployments
        .create(&PostParams::default(), &deployment("web", 3)?)
        .await?;

    let three_ready = |d: Option<&Deployment>| {
        d.and_then(|d| d.status.as_ref())
            .and_then(|s| s.ready_replicas)
            == Some(3)
    };
    wait_for(&deployments, "web", three_ready, TIMEOUT).await?;

    let pods: Vec<Pod> = wait_for_list(&ns.api(), "app=web", |ps| ps.len() == 3, TIMEOUT).await?;
    for pod in &pods {
        let status = pod.status.as_ref().context("pod has no status")?;
        assert_eq!(
            status.phase.as_deref(),
            Some("Running"),
            "pod {} phase",
            pod.name_any()
        );
        assert!(status.pod_ip.is_some(), "pod {} has no IP", pod.name_any());
        assert!(
            pod.spec
                .as_ref()
                .and_then(|s| s.node_name.as_ref())
                .is_some(),
            "pod {} unscheduled",
            pod.name_any()
        );
        let container = &status
            .container_statuses
            .as_ref()
            .context("no containerStatuses")?[0];
        assert!(container.ready, "container of {} not ready", pod.name_any());
        assert_eq!(container.started, Some(true));
        assert_eq!(
            container.image, "nginx:1.27",
            "status image follows the spec"
        );
        assert!(
            container
                .state
                .as_ref()
                .and_then(|s| s.running.as_ref())
                .and_then(|r| r.started_at.as_ref())
                .is_some(),
            "container of {} has no running.startedAt",
            pod.name_any()
        );
    }
    Ok(())
}

#[tokio::test]
async fn statefulset_pods_become_ready() -> anyhow::Result<()> {
    let ns = TestNamespace::new("tb-sts").await?;
    let sets: Api<StatefulSet> = ns.api();
    let set: StatefulSet = serde_json::from_value(json!({
        "metadata": { "name": "db" },
        "spec": {
            "replicas": 2,
            "serviceName": "db",
            "selector": { "matchLabels": { "app": "db" } },
            "template": {
                "metadata": { "labels": { "app": "db" } },
                "spec": { "containers": [{ "name": "db", "image": "postgres:17" }] }
            }
        }
    }))?;
    sets.create(&PostParams::default(), &set).await?;
    let two_ready = |s: Option<&StatefulSet>| {
        s.and_then(|s| s.status.as_ref())
            .and_then(|s| s.ready_replicas)
            == Some(2)
    };
    wait_for(&sets, "db", two_ready, TIMEOUT).await?;
    let pods: Api<Pod> = ns.api();
    assert!(is_pod_ready(&pods.get("db-0").await?), "db-0 is Ready");
    assert!(is_pod_ready(&pods.get("db-1").await?), "db-1 is Ready");
    Ok(())
}

#[tokio::test]
async fn changing_an_image_restarts_only_that_container() -> anyhow::Result<()> {
    let ns = TestNamespace::new("tb-restart").await?;
    let pods: Api<Pod> = ns.api();
    create_ready_pod(&ns, "app", "nginx:1.27").await?;

    let patch = json!({ "spec": { "containers": [{ "name": "main", "image": "quay.io/gefyra/carrier2:latest" }] } });
    pods.patch("app", &PatchParams::default(), &Patch::Strategic(patch))
        .await?;

    let restarted = |p: Option<&Pod>| {
        p.and_then(|p| p.status.as_ref())
            .and_then(|s| s.container_statuses.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.name == "main"))
            .is_some_and(|c| c.restart_count == 1)
    };
    let pod = wait_for(&pods, "app", restarted, TIMEOUT)
        .await?
        .context("pod vanished")?;
    let statuses = pod
        .status
        .and_then(|s| s.container_statuses)
        .context("no containerStatuses")?;
    let main = statuses
        .iter()
        .find(|c| c.name == "main")
        .context("no status for main")?;
    assert_eq!(
        main.image, "quay.io/gefyra/carrier2:latest",
        "status image follows the patched spec"
    );
    assert!(main.ready, "restarted container is ready again");
    let sidecar = statuses
        .iter()
        .find(|c| c.name == "sidecar")
        .context("no status for sidecar")?;
    assert_eq!(
        sidecar.restart_count, 0,
        "untouched container keeps running"
    );
    assert_eq!(sidecar.image, "busybox:1.36");
    Ok(())
}

#[tokio::test]
async fn exec_runs_commands_through_the_api_server() -> anyhow::Result<()> {
    let ns = TestNamespace::new("tb-exec").await?;
    let pods: Api<Pod> = ns.api();
    create_ready_pod(&ns, "shell", "busybox:1.36").await?;

    let out = exec(
        &pods,
        "shell",
        "main",
        &["sh", "-c", "echo hi > /tmp/x && cat /tmp/x"],
    )
    .await?;
    assert_eq!(out, "hi\n");
    let out = exec(
        &pods,
        "shell",
        "sidecar",
        &["busybox", "sh", "-c", "echo from-busybox"],
    )
    .await?;
    assert_eq!(out, "from-busybox\n");
    let out = exec(&pods, "shell", "main", &["sh", "-c", "echo $POD_NAME"]).await?;
    assert_eq!(out, "shell\n", "exec'd commands know their pod");
    Ok(())
}

#[tokio::test]
async fn exec_in_different_pods_does_not_share_tmp() -> anyhow::Result<()> {
    let ns = TestNamespace::new("tb-exec-iso").await?;
    let pods: Api<Pod> = ns.api();
    let names = ["iso-a", "iso-b", "iso-c"];
    for name in names {
        create_ready_pod(&ns, name, "busybox:1.36").await?;
    }
    // Write in parallel, each pod its own content to the same path.
    let writes = names.map(|name| {
        let pods = pods.clone();
        async move {
            let script = format!("echo {name} > /tmp/owner && pwd");
            exec(&pods, name, "main", &["sh", "-c", &script]).await
        }
    });
    let dirs = futures::future::try_join_all(writes).await?;
    let mut unique = dirs.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(
        unique.len(),
        names.len(),
        "each pod has its own working directory: {dirs:?}"
    );
    for name in names {
        let out = exec(&pods, name, "main", &["cat", "/tmp/owner"]).await?;
        assert_eq!(out, format!("{name}\n"), "pod {name} reads its own /tmp");
    }
    Ok(())
}

#[tokio::test]
async fn load_balancer_services_get_a_loopback_address() -> anyhow::Result<()> {
    let ns = TestNamespace::new("tb-lb").await?;
    let services: Api<Service> = ns.api();
    let svc: Service = serde_json::from_value(json!({
        "metadata": { "name": "front" },
        "spec": {
            "type": "LoadBalancer",
            "selector": { "app": "front" },
            "ports": [{ "port": 80, "targetPort": 8080 }]
        }
    }))?;
    services.create(&PostParams::default(), &svc).await?;
    let has_ingress = |s: Option<&Service>| {
        s.and_then(|s| s.status.as_ref())
            .and_then(|s| s.load_balancer.as_ref())
            .and_then(|lb| lb.ingress.as_ref())
            .is_some_and(|i| !i.is_empty())
    };
    let svc = wait_for(&services, "front", has_ingress, TIMEOUT)
        .await?
        .context("service vanished")?;
    let ip = svc
        .status
        .and_then(|s| s.load_balancer)
        .and_then(|lb| lb.ingress)
        .and_then(|i| i.into_iter().next())
        .and_then(|i| i.ip)
        .context("ingress has no ip")?;
    let addr: std::net::Ipv4Addr = ip.parse().with_context(|| format!("ingress ip {ip}"))?;
    assert!(addr.is_loopback(), "ingress {addr} is in 127.0.0.0/8");
    Ok(())
}

#[tokio::test]
async fn deleting_a_deployment_deletes_its_pods() -> anyhow::Result<()> {
    let ns = TestNamespace::new("tb-gc").await?;
    let deployments: Api<Deployment> = ns.api();
    deployments
        .create(&PostParams::default(), &deployment("gone", 2)?)
        .await?;
    let pods: Api<Pod> = ns.api();
    wait_for_list(
        &pods,
        "app=gone",
        |ps| ps.len() == 2 && ps.iter().all(is_pod_ready),
        TIMEOUT,
    )
    .await?;

    deployments
        .delete("gone", &DeleteParams::background())
        .await?;
    wait_for_list(&pods, "app=gone", |ps| ps.is_empty(), TIMEOUT)
        .await
        .context("pods of a deleted Deployment are garbage-collected")?;
    Ok(())
}

#[tokio::test]
async fn horizontal_pod_autoscalers_can_be_created() -> anyhow::Result<()> {
    let ns = TestNamespace::new("tb-hpa").await?;
    let hpas: Api<HorizontalPodAutoscaler> = ns.api();
    let hpa: HorizontalPodAutoscaler = serde_json::from_value(json!({
        "metadata": { "name": "web" },
        "spec": {
            "scaleTargetRef": { "apiVersion": "apps/v1", "kind": "Deployment", "name": "web" },
            "minReplicas": 1,
            "maxReplicas": 4,
            "metrics": [{ "type": "Resource", "resource": {
                "name": "cpu", "target": { "type": "Utilization", "averageUtilization": 80 } } }]
        }
    }))?;
    hpas.create(&PostParams::default(), &hpa).await?;
    let stored = hpas.get("web").await?;
    assert_eq!(stored.spec.max_replicas, 4);
    Ok(())
}
