//! The test bed behaves like a cluster: what an operator relies on works.
//! Run against `make testbed-up` (or any cluster named by KUBECONFIG).

use std::{
    io::Write,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Duration,
};

use anyhow::Context;
use k8s_openapi::api::{
    apps::v1::{Deployment, StatefulSet},
    autoscaling::v2::HorizontalPodAutoscaler,
    core::v1::{Pod, Service},
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use kube::{
    Api, ResourceExt,
    api::{AttachParams, DeleteParams, Patch, PatchParams, PostParams},
    config::Kubeconfig,
};
use pontoon_tests::{TestNamespace, kubeconfig_path, wait_for, wait_for_list};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

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

/// What an exec'd command left: its output and exit status.
#[derive(Debug)]
struct ExecOutput {
    stdout: String,
    stderr: String,
    /// 0 on success; from kwok's "exit status N" message (or a kubelet's
    /// `ExitCode` cause) otherwise; -1 when neither says.
    code: i32,
}

/// Runs `command` in a container over the API server's exec endpoint, with
/// `stdin` as its input (closed at the end) when given.
async fn run(
    pods: &Api<Pod>,
    pod: &str,
    container: &str,
    command: &[&str],
    stdin: Option<&str>,
) -> anyhow::Result<ExecOutput> {
    let params = AttachParams::default()
        .container(container)
        .stdin(stdin.is_some())
        .stderr(true);
    let mut attached = pods.exec(pod, command.iter().copied(), &params).await?;
    if let (Some(input), Some(mut writer)) = (stdin, attached.stdin()) {
        writer.write_all(input.as_bytes()).await?;
        // Dropping the writer closes stdin: the command sees the end of its input.
    }
    let status = attached.take_status().context("exec gave no status")?;
    let (mut stdout, mut stderr) = (String::new(), String::new());
    let out = attached.stdout().context("exec gave no stdout stream")?;
    let err = attached.stderr().context("exec gave no stderr stream")?;
    tokio::try_join!(read_into(out, &mut stdout), read_into(err, &mut stderr))?;
    let status = status.await;
    attached.join().await?;
    Ok(ExecOutput {
        stdout,
        stderr,
        code: exit_code(status.as_ref()),
    })
}

async fn read_into(
    mut reader: impl tokio::io::AsyncRead + Unpin,
    into: &mut String,
) -> std::io::Result<()> {
    reader.read_to_string(into).await.map(|_| ())
}

fn exit_code(status: Option<&Status>) -> i32 {
    let Some(status) = status else { return -1 };
    if status.status.as_deref() == Some("Success") {
        return 0;
    }
    let from_cause = status
        .details
        .as_ref()
        .and_then(|d| d.causes.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.reason.as_deref() == Some("ExitCode")))
        .and_then(|c| c.message.as_deref())
        .and_then(|m| m.trim().parse().ok());
    let from_message = || {
        status
            .message
            .as_deref()
            .and_then(|m| m.trim_end().rsplit_once("exit status "))
            .and_then(|(_, code)| code.parse().ok())
    };
    from_cause.or_else(from_message).unwrap_or(-1)
}

/// Runs `command` in a container over the API server's exec endpoint; returns
/// stdout, failing unless the command succeeded.
async fn exec(
    pods: &Api<Pod>,
    pod: &str,
    container: &str,
    command: &[&str],
) -> anyhow::Result<String> {
    let out = run(pods, pod, container, command, None).await?;
    anyhow::ensure!(
        out.code == 0,
        "`{}` in {pod}/{container} failed: {out:?}",
        command.join(" ")
    );
    Ok(out.stdout)
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
async fn exec_stdin_ends_when_the_client_closes_it() -> anyhow::Result<()> {
    let ns = TestNamespace::new("tb-exec-stdin").await?;
    let pods: Api<Pod> = ns.api();
    create_ready_pod(&ns, "reader", "busybox:1.36").await?;
    // `cat` returns only at the end of its input, as a shell reading a script does.
    let command = ["sh", "-c", "cat; echo end"];
    let out = tokio::time::timeout(
        Duration::from_secs(30),
        run(&pods, "reader", "main", &command, Some("a\nb\n")),
    )
    .await
    .context("the command never saw the end of its stdin")??;
    assert_eq!(out.stdout, "a\nb\nend\n", "{out:?}");
    assert_eq!(out.code, 0, "{out:?}");
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
async fn load_balancer_services_get_an_address_of_the_load_balancer_range() -> anyhow::Result<()> {
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
    // 10.97.<the ClusterIP's last two octets>: unique per Service, and routed
    // to kube-proxy in the test bed's network namespace.
    let cluster_ip: std::net::Ipv4Addr = svc
        .spec
        .and_then(|s| s.cluster_ip)
        .context("no ClusterIP")?
        .parse()?;
    let [_, _, c, d] = cluster_ip.octets();
    assert_eq!(addr, std::net::Ipv4Addr::new(10, 97, c, d));
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

// --- certificates ----------------------------------------------------------

/// The test bed's directory when the tests' kubeconfig is a test bed's (its
/// `pki/` beside it); for any other cluster, why it is not.
fn testbed_dir() -> Result<PathBuf, String> {
    let kubeconfig = kubeconfig_path();
    match kubeconfig.parent() {
        Some(dir) if dir.join("pki/ca.crt").is_file() => Ok(dir.to_path_buf()),
        _ => Err(format!(
            "{} is not a test bed's kubeconfig (no pki/ beside it)",
            kubeconfig.display()
        )),
    }
}

/// A scratch directory, removed when dropped.
struct ScratchDir(PathBuf);

impl ScratchDir {
    fn new(prefix: &str) -> anyhow::Result<Self> {
        let suffix: u64 = rand::random();
        let dir = std::env::temp_dir().join(format!("pontoon-{prefix}-{suffix:016x}"));
        std::fs::create_dir_all(&dir)?;
        Ok(Self(dir))
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `python3 -c SCRIPT ARGS...` with `stdin`; returns its status and output.
fn python(script: &str, args: &[&str], stdin: &str) -> anyhow::Result<std::process::Output> {
    let mut child = Command::new("python3")
        .arg("-c")
        .arg(script)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("running python3 (scripts/deps.sh installs it)")?;
    child
        .stdin
        .take()
        .context("python3 has no stdin")?
        .write_all(stdin.as_bytes())?;
    Ok(child.wait_with_output()?)
}

fn openssl(dir: &Path, args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "openssl {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// A client as strict as Python 3.13's default (`VERIFY_X509_STRICT`, set
/// explicitly: this is 3.11), with the credentials of the kubeconfig on stdin
/// (as JSON): GET /version, then who the API server takes it for.
const STRICT_CLIENT: &str = r#"
import base64, json, os, ssl, sys, tempfile, urllib.request
config, pki = json.load(sys.stdin), sys.argv[1]
named = lambda items, name, key: next(i[key] for i in items if i["name"] == name)
context = named(config["contexts"], config["current-context"], "context")
cluster = named(config["clusters"], context["cluster"], "cluster")
user = named(config["users"], context["user"], "user")
files = {}
with tempfile.TemporaryDirectory() as tmp:
    for name, field, source in (("ca", "certificate-authority-data", cluster),
                                ("cert", "client-certificate-data", user),
                                ("key", "client-key-data", user)):
        files[name] = os.path.join(tmp, name + ".pem")
        with open(files[name], "wb") as f:
            f.write(base64.b64decode(source[field]))
    with open(files["ca"], "rb") as f, open(os.path.join(pki, "ca.crt"), "rb") as g:
        if f.read() != g.read():
            sys.exit("the kubeconfig's CA is not " + os.path.join(pki, "ca.crt"))
    ctx = ssl.create_default_context(cafile=files["ca"])
    ctx.verify_flags |= ssl.VERIFY_X509_STRICT
    ctx.load_cert_chain(files["cert"], files["key"])
    server = cluster["server"]
    version = json.load(urllib.request.urlopen(server + "/version", context=ctx, timeout=10))
    review = urllib.request.Request(
        server + "/apis/authentication.k8s.io/v1/selfsubjectreviews", method="POST",
        data=json.dumps({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}).encode(),
        headers={"Content-Type": "application/json"})
    info = json.load(urllib.request.urlopen(review, context=ctx, timeout=10))["status"]["userInfo"]
print(json.dumps({"gitVersion": version["gitVersion"], "user": info["username"], "groups": info.get("groups", [])}))
"#;

#[tokio::test]
async fn strict_tls_clients_accept_the_api_server() -> anyhow::Result<()> {
    let dir = match testbed_dir() {
        Ok(dir) => dir,
        Err(reason) => return pontoon_tests::skip!("{reason}"),
    };
    let kubeconfig = Kubeconfig::read_from(kubeconfig_path())?;
    let out = python(
        STRICT_CLIENT,
        &[&dir.join("pki").to_string_lossy()],
        &serde_json::to_string(&kubeconfig)?,
    )?;
    anyhow::ensure!(
        out.status.success(),
        "a strict TLS client cannot talk to the test bed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    assert!(
        seen["gitVersion"]
            .as_str()
            .is_some_and(|v| v.starts_with("v1.")),
        "/version: {seen}"
    );
    assert_eq!(
        seen["user"], "testbed-admin",
        "the client certificate is used"
    );
    assert!(
        seen["groups"]
            .as_array()
            .is_some_and(|gs| gs.iter().any(|g| g == "system:masters")),
        "groups: {seen}"
    );
    Ok(())
}

/// A TLS handshake in memory between a server with CERT/KEY and a client
/// trusting CA, strict (VERIFY_X509_STRICT) or not: prints `ok`, or exits 3
/// with the verification error.
const HANDSHAKE: &str = r#"
import ssl, sys
ca, cert, key, mode = sys.argv[1:5]
server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
server.load_cert_chain(cert, key)
client = ssl.create_default_context(cafile=ca)
if mode == "strict":
    client.verify_flags |= ssl.VERIFY_X509_STRICT
c_in, c_out, s_in, s_out = (ssl.MemoryBIO() for _ in range(4))
ends = [(client.wrap_bio(c_in, c_out, server_hostname="127.0.0.1"), c_out, s_in),
        (server.wrap_bio(s_in, s_out, server_side=True), s_out, c_in)]
done = set()
try:
    for _ in range(20):
        for i, (end, out, peer) in enumerate(ends):
            if i not in done:
                try:
                    end.do_handshake()
                    done.add(i)
                except ssl.SSLWantReadError:
                    pass
            peer.write(out.read())
        if len(done) == 2:
            break
except ssl.SSLCertVerificationError as e:
    print(e.verify_message)
    sys.exit(3)
print("ok" if len(done) == 2 else "handshake did not finish")
"#;

/// The check above means something: certificates issued as the test bed
/// did before (a CA from a bare `openssl req -x509`, without keyUsage) are
/// refused by the same strict client, and accepted by a lenient one.
#[test]
fn strict_tls_clients_refuse_certificates_issued_the_old_way() -> anyhow::Result<()> {
    let scratch = ScratchDir::new("old-pki")?;
    let dir = scratch.0.as_path();
    openssl(dir, &["genrsa", "-out", "ca.key", "2048"])?;
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-new",
            "-key",
            "ca.key",
            "-subj",
            "/CN=old-ca",
            "-days",
            "1",
            "-out",
            "ca.crt",
        ],
    )?;
    openssl(dir, &["genrsa", "-out", "server.key", "2048"])?;
    openssl(
        dir,
        &[
            "req",
            "-new",
            "-key",
            "server.key",
            "-subj",
            "/CN=old-server",
            "-out",
            "server.csr",
        ],
    )?;
    std::fs::write(
        dir.join("server.ext"),
        "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n\
         extendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=IP:127.0.0.1\n",
    )?;
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "1",
            "-extfile",
            "server.ext",
            "-out",
            "server.crt",
        ],
    )?;
    let handshake = |mode: &str| {
        let args = ["ca.crt", "server.crt", "server.key"].map(|f| dir.join(f));
        let args = args.iter().map(|p| p.to_string_lossy()).collect::<Vec<_>>();
        let args: Vec<&str> = args.iter().map(|a| a.as_ref()).chain([mode]).collect();
        python(HANDSHAKE, &args, "")
    };
    let lenient = handshake("lenient")?;
    assert_eq!(
        String::from_utf8_lossy(&lenient.stdout).trim(),
        "ok",
        "a lenient client accepts the old certificates: {}",
        String::from_utf8_lossy(&lenient.stderr)
    );
    let strict = handshake("strict")?;
    assert_eq!(
        strict.status.code(),
        Some(3),
        "a strict client refuses them"
    );
    let reason = String::from_utf8_lossy(&strict.stdout);
    assert!(
        reason.contains("key usage"),
        "refused for the CA's missing keyUsage: {reason}"
    );
    Ok(())
}

// --- the Carrier2 stand-in -------------------------------------------------

/// A configuration as Gefyra's operator writes it (Carrier2Config), with a
/// TLS listener whose files the script creates first.
const CARRIER2_CONFIG: &str = "version: 1
threads: 4
error_log: /tmp/carrier.log
pid_file: /tmp/carrier2.pid
upgrade_sock: /tmp/carrier2.sock
upstream_keepalive_pool_size: 100
probes:
  httpGet:
  - 8001
  httpsGet: []
proxy:
- port: 8080
  clusterUpstream:
  - web-0.web.default.svc.cluster.local:8080
  bridges:
    user-1:
      endpoint: stowaway-port-10001.gefyra.svc.cluster.local:10001
      rules:
      - match:
        - matchHeader:
            name: x-gefyra
            value: user-1
            type: exact
        - matchPath:
            path: /api
            type: prefix
- port: 8443
  tls:
    certificate: /tmp/tls.crt
    key: /tmp/tls.key
  clusterUpstream:
  - 10.244.0.7:8443
";

/// A real certificate and key for the config's TLS port: the pod's Carrier2
/// serves, so it loads them when the configuration is handed over.
const TLS_CERT: &str = include_str!("../../host/gateway/src/judgement/resolve/testdata/tls.crt");
const TLS_KEY: &str = include_str!("../../host/gateway/src/judgement/resolve/testdata/tls.key");

/// The script the bridge-mount operator feeds `busybox sh`: write the
/// configuration, (re)start carrier2 on it, show its log.
fn carrier2_script(config: &str) -> String {
    format!(
        "cat <<'EOF' > /tmp/tls.crt\n{TLS_CERT}EOF\n\
         cat <<'EOF' > /tmp/tls.key\n{TLS_KEY}EOF\n\
         cat <<'EOF' > /tmp/config.yaml\n{config}EOF\n\
         carrier2 -c /tmp/config.yaml -u -d\n\
         cat /tmp/carrier.log\n"
    )
}

#[tokio::test]
async fn carrier2_stand_in_bootstraps_on_a_good_config() -> anyhow::Result<()> {
    if let Err(reason) = testbed_dir() {
        return pontoon_tests::skip!("{reason}");
    }
    let ns = TestNamespace::new("tb-carrier2").await?;
    let pods: Api<Pod> = ns.api();
    create_ready_pod(&ns, "proxy", "quay.io/gefyra/carrier2:latest").await?;
    let sh = ["busybox", "sh"];

    let script = carrier2_script(CARRIER2_CONFIG);
    let out = run(&pods, "proxy", "main", &sh, Some(&script)).await?;
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("Bootstrap starting"), "{out:?}");
    assert!(!out.stdout.contains("thread 'main' panicked"), "{out:?}");

    let pid = exec(&pods, "proxy", "main", &["cat", "/tmp/carrier2.pid"]).await?;
    let pid: u32 = pid
        .trim()
        .parse()
        .with_context(|| format!("pid file holds {pid:?}"))?;
    let read_back = run(&pods, "proxy", "main", &sh, Some("cat /tmp/config.yaml\n")).await?;
    assert_eq!(
        read_back.stdout, CARRIER2_CONFIG,
        "the config reads back as written"
    );

    // The operator's next reload is an upgrade from the pid it left.
    let out = run(&pods, "proxy", "main", &sh, Some(&script)).await?;
    assert!(
        out.stdout.contains(&format!("upgrading from pid {pid}")),
        "{out:?}"
    );

    // A direct exec finds it too; -t only checks.
    let test = run(
        &pods,
        "proxy",
        "main",
        &["carrier2", "-t", "-c", "/tmp/config.yaml"],
        None,
    )
    .await?;
    assert_eq!(test.code, 0, "{test:?}");
    assert!(test.stdout.contains("Server Test passed"), "{test:?}");
    Ok(())
}

#[tokio::test]
async fn carrier2_stand_in_panics_on_a_malformed_config() -> anyhow::Result<()> {
    if let Err(reason) = testbed_dir() {
        return pontoon_tests::skip!("{reason}");
    }
    let ns = TestNamespace::new("tb-carrier2-bad").await?;
    let pods: Api<Pod> = ns.api();
    create_ready_pod(&ns, "proxy", "quay.io/gefyra/carrier2:latest").await?;
    let head = "version: 1\nerror_log: /tmp/carrier.log\npid_file: /tmp/carrier2.pid\n";
    let cases = [
        (
            "unknown field",
            format!("{head}port: 8080\nproxy:\n- port: 8080\n"),
            "port: unknown field",
        ),
        (
            "missing proxy",
            head.to_string(),
            "proxy: missing (required)",
        ),
        (
            "bad upstream port",
            format!("{head}proxy:\n- port: 8080\n  clusterUpstream:\n  - web:http\n"),
            "proxy[0].clusterUpstream[0]: port \"http\" of \"web:http\" is not a number",
        ),
        (
            "unreadable TLS file",
            format!(
                "{head}proxy:\n- port: 8443\n  tls:\n    certificate: /tmp/absent.crt\n    key: /tmp/tls.key\n"
            ),
            "proxy[0].tls.certificate: cannot read \"/tmp/absent.crt\"",
        ),
    ];
    for (case, config, problem) in cases {
        let script = format!("rm -f /tmp/carrier.log\n{}", carrier2_script(&config));
        let out = run(&pods, "proxy", "main", &["busybox", "sh"], Some(&script)).await?;
        let panic_line = out
            .stdout
            .lines()
            .find(|l| l.starts_with("thread 'main' panicked at src/main.rs:"));
        assert!(
            panic_line.is_some_and(|l| l.contains(problem)),
            "{case}: the log names {problem:?}: {out:?}"
        );
        assert!(
            !out.stdout.contains("Bootstrap starting"),
            "{case}: {out:?}"
        );

        let direct = run(
            &pods,
            "proxy",
            "main",
            &["carrier2", "-c", "/tmp/config.yaml", "-u", "-d"],
            None,
        )
        .await?;
        assert_eq!(direct.code, 1, "{case}: exit status: {direct:?}");
        assert!(
            direct.stderr.contains(problem),
            "{case}: stderr: {direct:?}"
        );
    }
    let flag = run(&pods, "proxy", "main", &["carrier2", "--bogus"], None).await?;
    assert_eq!(flag.code, 1, "a bad flag: {flag:?}");
    assert!(
        flag.stderr.contains("unexpected argument '--bogus'"),
        "{flag:?}"
    );
    Ok(())
}
