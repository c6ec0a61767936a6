//! `pontoon bridge` as developers run it: a separate process on the host,
//! outside the test bed's network (as a laptop is), with a kubeconfig of
//! their own (a ServiceAccount's identity), reaching its relay pod (the real
//! `pontoon relay`, a process pod) through the API server's port-forward.
//! Requests sent to the workload's Service inside the test bed land on the
//! developer's local echo server when they carry the developer's header,
//! on the shadow otherwise.
//!
//! Runs as root (the test bed's network namespace); otherwise reported as
//! skipped, saying why (a failure under `CI=true`, see `pontoon_tests::skip`).

mod support;

use std::{
    io::{BufRead, BufReader},
    path::PathBuf,
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use anyhow::{Context, bail, ensure};
use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{Pod, Service},
};
use kube::{
    Api, ResourceExt,
    api::{ListParams, PostParams},
};
use pontoon::{
    bridge::connections::CLIENT_LABEL,
    bridge_mount::{GefyraBridge, GefyraBridgeMount},
};
use pontoon_tests::{
    TestNamespace, kubeconfig_path,
    traffic::{Answer, Request, TestbedNet, echo_container},
};
use serde_json::json;
use support::{
    mounts::{Bed, TIMEOUT, on_carrier, ready_pods},
    tenants::Tenant,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const ECHO_PORT: u16 = 3000;
const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);
/// The operator's `--session-grace` in these tests.
const GRACE: Duration = Duration::from_secs(3);

const PLAIN: Request = Request {
    path: "/plain",
    header: None,
};
const ALICE: Request = Request {
    path: "/mine",
    header: Some("x-dev: alice"),
};
const BOB: Request = Request {
    path: "/mine",
    header: Some("x-dev: bob"),
};

/// `pontoon` where the test bed's pods find it (the relay's image runs it),
/// once per test process: the tests run in parallel.
fn install_relay_program() -> anyhow::Result<()> {
    static INSTALLED: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    INSTALLED
        .get_or_init(|| install_pontoon_in_pod_bin().map_err(|e| format!("{e:#}")))
        .clone()
        .map_err(anyhow::Error::msg)
}

fn install_pontoon_in_pod_bin() -> anyhow::Result<()> {
    let dir = pontoon_tests::pod_bin("carrier2")?
        .parent()
        .context("pod-bin has no parent")?
        .to_path_buf();
    let staged = dir.join(format!(".pontoon.{}", std::process::id()));
    std::fs::copy(env!("CARGO_BIN_EXE_pontoon"), &staged)?;
    std::fs::rename(&staged, dir.join("pontoon"))?;
    Ok(())
}

/// A bed whose operator runs the relay as the test bed's process image.
async fn bed(prefix: &str) -> anyhow::Result<Bed> {
    bed_with(prefix, &[]).await
}

/// The same with more operator flags.
async fn bed_with(prefix: &str, flags: &[&str]) -> anyhow::Result<Bed> {
    install_relay_program()?;
    let grace = GRACE.as_secs().to_string();
    let mut all = vec![
        "--relay-image",
        "testbed.pontoon.dev/pontoon:relay",
        "--session-grace",
        &grace,
    ];
    all.extend_from_slice(flags);
    Bed::with_flags(prefix, &all).await
}

/// Deployment `echo` (2 echo servers, a variable from a ConfigMap and one
/// from a Secret) and its Service `echo` (port 80 → 3000); the Service's
/// address in the test bed's network.
async fn workload(ns: &TestNamespace) -> anyhow::Result<String> {
    support::tenants::apply(json!([
        { "apiVersion": "v1", "kind": "ConfigMap",
          "metadata": { "name": "echo-settings", "namespace": ns.name() },
          "data": { "GREETING": "hello from the cluster" } },
        { "apiVersion": "v1", "kind": "Secret",
          "metadata": { "name": "echo-secret", "namespace": ns.name() },
          "stringData": { "token": "s3cret" } },
    ]))?;
    let mut container = echo_container("echo", ECHO_PORT);
    let env = container["env"]
        .as_array_mut()
        .context("echo's container has env")?;
    env.push(json!({ "name": "PLAIN_SETTING", "value": "plain" }));
    env.push(json!({ "name": "API_TOKEN", "valueFrom": { "secretKeyRef": { "name": "echo-secret", "key": "token" } } }));
    container["envFrom"] = json!([{ "configMapRef": { "name": "echo-settings" } }]);
    let d: Deployment = serde_json::from_value(json!({
        "metadata": { "name": "echo" },
        "spec": { "replicas": 2, "selector": { "matchLabels": { "app": "echo" } },
                  "template": { "metadata": { "labels": { "app": "echo" } },
                                "spec": { "containers": [container] } } }
    }))?;
    ns.api::<Deployment>()
        .create(&PostParams::default(), &d)
        .await?;
    let service: Service = serde_json::from_value(json!({
        "metadata": { "name": "echo" },
        "spec": { "selector": { "app": "echo" },
                  "ports": [{ "name": "http", "port": 80, "targetPort": ECHO_PORT }] }
    }))?;
    let service = ns
        .api::<Service>()
        .create(&PostParams::default(), &service)
        .await?;
    ready_pods(ns, "app=echo", 2).await?;
    let ip = service
        .spec
        .and_then(|s| s.cluster_ip)
        .context("the Service has no ClusterIP")?;
    Ok(format!("{ip}:80"))
}

/// A developer's local service: answers every request with its name, as
/// echo-basic names its pod.
async fn laptop(name: &'static str) -> anyhow::Result<u16> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut seen = Vec::new();
                let mut buf = [0u8; 4096];
                while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => seen.extend_from_slice(&buf[..n]),
                    }
                }
                let body = format!("{{\"pod\": \"{name}\"}}\n");
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = conn.write_all(answer.as_bytes()).await;
                let _ = conn.shutdown().await;
            });
        }
    });
    Ok(port)
}

/// A developer: a ServiceAccount with the rights `pontoon bridge` needs (the
/// chart's developer role in the mounts' namespace, reading the workload
/// and its configuration in the target's), and a kubeconfig that is it.
struct Developer {
    tenant: Tenant,
    kubeconfig: PathBuf,
}

impl Developer {
    fn new(bed: &Bed, name: &str) -> anyhow::Result<Self> {
        let tenant = Tenant::new(bed.target.name(), name)?;
        tenant.grant(
            bed.gefyra.name(),
            &format!("{name}-developer"),
            json!([{ "apiGroups": ["gefyra.dev"], "resources": ["gefyrabridgemounts", "gefyrabridges"],
                     "verbs": ["get", "list", "watch", "create", "delete"] }]),
        )?;
        tenant.grant(
            bed.target.name(),
            &format!("{name}-reader"),
            json!([
                { "apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get"] },
                { "apiGroups": [""], "resources": ["configmaps", "secrets"], "verbs": ["get"] },
            ]),
        )?;
        Self::with_identity(tenant)
    }

    fn with_identity(tenant: Tenant) -> anyhow::Result<Self> {
        let kubeconfig = std::env::temp_dir().join(format!(
            "pontoon-dev-{}-{}-{}.kubeconfig",
            tenant.namespace,
            tenant.name,
            std::process::id()
        ));
        // The admin's kubeconfig, impersonating the tenant (`as`), as a
        // developer's own kubeconfig would be them.
        let mut config: serde_json::Value =
            yaml_serde::from_str(&std::fs::read_to_string(kubeconfig_path())?)?;
        for user in config["users"]
            .as_array_mut()
            .context("a kubeconfig without users")?
        {
            user["user"]["as"] = json!(tenant.user());
        }
        std::fs::write(&kubeconfig, yaml_serde::to_string(&config)?)?;
        Ok(Self { tenant, kubeconfig })
    }

    /// `pontoon bridge ARGS` as this developer, started.
    fn bridge(&self, bed: &Bed, args: &[&str]) -> anyhow::Result<Cli> {
        let mut command = Command::new(env!("CARGO_BIN_EXE_pontoon"));
        command
            .arg("bridge")
            .args(["--kubeconfig", &self.kubeconfig.display().to_string()])
            .args(["--mount-namespace", bed.gefyra.name()])
            .args(["-n", bed.target.name()])
            .args(["--timeout", "60"])
            .args(args)
            .env_remove("KUBECONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        Cli::start(command)
    }
}

impl Drop for Developer {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.kubeconfig);
    }
}

/// A running `pontoon bridge`: its output lines as they come.
struct Cli {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Cli {
    fn start(mut command: Command) -> anyhow::Result<Self> {
        let mut child = command.spawn()?;
        let (tx, lines) = mpsc::channel();
        for stream in [
            child
                .stdout
                .take()
                .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
            child
                .stderr
                .take()
                .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
        ]
        .into_iter()
        .flatten()
        {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        Ok(Self {
            child,
            lines,
            seen: Vec::new(),
        })
    }

    /// Waits for a line containing `text`; fails with everything printed
    /// when the command ends or the wait is over first.
    fn wait_line(&mut self, text: &str, within: Duration) -> anyhow::Result<String> {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left.max(Duration::from_millis(1))) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if line.contains(text) {
                        // Said only when requests would be refused after the ready line.
                        ensure!(
                            !self.seen.iter().any(|l| l.contains("could not confirm")),
                            "`pontoon bridge` said it was ready before the cluster reached its relay:\n{}\n{}",
                            self.seen.join("\n"),
                            relay_view(&self.seen)
                        );
                        return Ok(line);
                    }
                }
                Err(_) => bail!(
                    "`pontoon bridge` printed no line with `{text}` within {within:?} (exit: {:?}); it printed:\n{}",
                    self.child.try_wait()?,
                    self.seen.join("\n")
                ),
            }
            if Instant::now() > deadline {
                bail!(
                    "no line with `{text}` within {within:?}; printed:\n{}",
                    self.seen.join("\n")
                );
            }
        }
    }

    fn signal(&self, signal: &str) -> anyhow::Result<()> {
        let status = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()?;
        ensure!(status.success(), "kill {signal} failed");
        Ok(())
    }

    /// Waits for the command to end; its exit code and everything it printed.
    fn finish(mut self, within: Duration) -> anyhow::Result<(Option<i32>, String)> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait()? {
                while let Ok(line) = self.lines.recv_timeout(Duration::from_millis(200)) {
                    self.seen.push(line);
                }
                return Ok((status.code(), self.seen.join("\n")));
            }
            while let Ok(line) = self.lines.try_recv() {
                self.seen.push(line);
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                bail!(
                    "`pontoon bridge` did not end within {within:?}; printed:\n{}",
                    self.seen.join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Cli {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Who answered each request: a developer's machine or a pod group.
fn who(answer: &Answer) -> String {
    match answer {
        Ok(pod) if pod.starts_with("laptop-") => pod.clone(),
        Ok(pod) if pod.starts_with("echo-gefyra") => "shadow".into(),
        Ok(pod) if pod.starts_with("echo-") => "original".into(),
        Ok(other) => format!("someone else ({other})"),
        Err(why) => format!("failed ({why})"),
    }
}

fn send(net: &TestbedNet, service: &str, requests: &[Request]) -> anyhow::Result<Vec<String>> {
    Ok(net
        .send(service, requests, REQUEST_TIMEOUT)?
        .iter()
        .map(who)
        .collect())
}

/// Sends `requests` until every answer is what `want` says, or fails with
/// the last answers.
async fn until(
    net: &TestbedNet,
    service: &str,
    requests: &[Request],
    within: Duration,
    want: impl Fn(&Request, &str) -> bool,
) -> anyhow::Result<Duration> {
    let started = Instant::now();
    loop {
        let answers = send(net, service, requests)?;
        if requests.iter().zip(&answers).all(|(r, a)| want(r, a)) {
            return Ok(started.elapsed());
        }
        if started.elapsed() > within {
            bail!("not as wanted within {within:?}: {answers:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn mounts_left(bed: &Bed) -> anyhow::Result<Vec<String>> {
    Ok(bed
        .gefyra
        .api::<GefyraBridgeMount>()
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .map(|m| m.name_any())
        .collect())
}

async fn bridges_left(bed: &Bed) -> anyhow::Result<Vec<String>> {
    Ok(bed
        .gefyra
        .api::<GefyraBridge>()
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .map(|b| b.name_any())
        .collect())
}

/// Two developers on one mount (made by the first `pontoon bridge`), each
/// getting exactly their requests among 200 mixed ones; a third with the
/// first's header refused, naming the first; Ctrl-C puts everything back.
#[tokio::test(flavor = "multi_thread")]
async fn developers_get_their_requests_on_their_machines_and_ctrl_c_puts_everything_back()
-> anyhow::Result<()> {
    let prefix = "dev-bridge";
    let net = match TestbedNet::of_testbed() {
        Ok(net) => net,
        Err(reason) => return pontoon_tests::skip::skip(prefix, &reason),
    };
    // Relays kept for none: the end shows them going with the last bridge.
    let bed = bed_with(prefix, &["--client-keep", "0"]).await?;
    let service = workload(&bed.target).await?;
    let originals: Vec<String> = ready_pods(&bed.target, "app=echo", 2)
        .await?
        .iter()
        .map(|p| format!("{:?}", p.spec))
        .collect();
    let (alice, bob, carol) = (
        Developer::new(&bed, "alice")?,
        Developer::new(&bed, "bob")?,
        Developer::new(&bed, "carol")?,
    );
    let (alice_port, bob_port) = (laptop("laptop-alice").await?, laptop("laptop-bob").await?);

    let started = Instant::now();
    let mut alice_cli = alice.bridge(
        &bed,
        &[
            "deploy/echo",
            "--port",
            &format!("{alice_port}:{ECHO_PORT}"),
            "--header",
            "x-dev=alice",
        ],
    )?;
    let line = alice_cli.wait_line("now reach this machine", TIMEOUT)?;
    println!(
        "alice bridged in {:.2}s: {line}",
        started.elapsed().as_secs_f64()
    );
    ensure!(
        line.contains(&format!("127.0.0.1:{alice_port}")) && line.contains("x-dev: alice"),
        "the line says which requests reach which local port: {line}"
    );
    let mut bob_cli = bob.bridge(
        &bed,
        &[
            "deploy/echo",
            "--port",
            &format!("{bob_port}:{ECHO_PORT}"),
            "--header",
            "x-dev=bob",
        ],
    )?;
    bob_cli.wait_line("now reach this machine", TIMEOUT)?;
    ensure!(
        mounts_left(&bed).await?.len() == 1,
        "bob's run used the mount alice's made"
    );

    let mixed: Vec<Request> = (0..200).map(|i| [PLAIN, ALICE, BOB][i % 3]).collect();
    let answers = send(&net, &service, &mixed)?;
    let wrong: Vec<(usize, &String)> = answers
        .iter()
        .enumerate()
        .filter(|(i, a)| {
            let want = match i % 3 {
                0 => "shadow",
                1 => "laptop-alice",
                _ => "laptop-bob",
            };
            a.as_str() != want
        })
        .collect();
    ensure!(
        wrong.is_empty(),
        "{} of 200 requests landed elsewhere than their rules say: {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(10)]
    );

    // Carol asks for alice's header: refused, naming alice.
    let carol_cli = carol.bridge(
        &bed,
        &[
            "deploy/echo",
            "--port",
            &format!("{alice_port}:{ECHO_PORT}"),
            "--header",
            "x-dev=alice",
        ],
    )?;
    let (code, printed) = carol_cli.finish(TIMEOUT)?;
    ensure!(
        code == Some(1) && printed.contains("clash") && printed.contains(&alice.tenant.user()),
        "carol's clashing rule is refused naming alice's client (exit {code:?}):\n{printed}"
    );
    let answers = send(&net, &service, &[ALICE, BOB, PLAIN])?;
    ensure!(
        answers == ["laptop-alice", "laptop-bob", "shadow"],
        "carol's refused run changed nothing: {answers:?}"
    );

    // Ctrl-C: bob's bridge goes, alice keeps hers and the mount.
    bob_cli.signal("-INT")?;
    let (code, printed) = bob_cli.finish(TIMEOUT)?;
    ensure!(code == Some(0), "bob's Ctrl-C exits 0:\n{printed}");
    let answers = send(&net, &service, &[BOB, ALICE])?;
    ensure!(
        answers == ["shadow", "laptop-alice"],
        "after bob's Ctrl-C his requests are the shadow's at once: {answers:?}"
    );
    ensure!(
        mounts_left(&bed).await?.len() == 1,
        "alice's bridge still uses the mount"
    );

    // alice's Ctrl-C: her bridge and the mount made by `pontoon bridge` go,
    // the pods run their originals again, exactly.
    alice_cli.signal("-INT")?;
    let (code, printed) = alice_cli.finish(TIMEOUT)?;
    ensure!(code == Some(0), "alice's Ctrl-C exits 0:\n{printed}");
    ensure!(
        mounts_left(&bed).await?.is_empty() && bridges_left(&bed).await?.is_empty(),
        "no mount or bridge is left: {:?} {:?}",
        mounts_left(&bed).await?,
        bridges_left(&bed).await?
    );
    ensure!(
        !on_carrier(&bed.target, "app=echo").await?,
        "no pod runs Carrier2 any more"
    );
    let restored: Vec<String> = ready_pods(&bed.target, "app=echo", 2)
        .await?
        .iter()
        .map(|p| format!("{:?}", p.spec))
        .collect();
    ensure!(
        restored.len() == originals.len(),
        "the workload has its pods again"
    );
    let answers = send(&net, &service, &[ALICE, PLAIN])?;
    ensure!(
        answers == ["original", "original"],
        "every request reaches the original again: {answers:?}"
    );
    // No bridge names alice or bob any more: their relays go too, at the
    // next sweep with this bed's `--client-keep 0`.
    let relays: Api<Pod> = bed.gefyra.api();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = relays
            .list(&ListParams::default().labels("pontoon.dev/connection-client"))
            .await?
            .items;
        if left.is_empty() {
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "relays left 30 s after their last bridge: {:?}",
            left.iter().map(|p| p.name_any()).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok(())
}

/// A client gone for longer than `--session-limit` loses its bridges.
#[tokio::test(flavor = "multi_thread")]
async fn a_bridge_whose_developer_stays_away_past_the_limit_is_deleted() -> anyhow::Result<()> {
    let prefix = "dev-limit";
    if let Err(reason) = TestbedNet::of_testbed() {
        return pontoon_tests::skip::skip(prefix, &reason);
    }
    install_relay_program()?;
    let bed = Bed::with_flags(
        prefix,
        &[
            "--relay-image",
            "testbed.pontoon.dev/pontoon:relay",
            "--session-grace",
            "2",
            "--session-limit",
            "10",
        ],
    )
    .await?;
    workload(&bed.target).await?;
    let alice = Developer::new(&bed, "alice")?;
    let port = laptop("laptop-alice").await?;
    let mut cli = alice.bridge(
        &bed,
        &[
            "deploy/echo",
            "--port",
            &format!("{port}:{ECHO_PORT}"),
            "--header",
            "x-dev=alice",
        ],
    )?;
    cli.wait_line("now reach this machine", TIMEOUT)?;
    cli.signal("-KILL")?;
    let killed = Instant::now();
    drop(cli);
    while !bridges_left(&bed).await?.is_empty() {
        ensure!(
            killed.elapsed() < Duration::from_secs(30),
            "the bridge of a client gone for 10 s is still there after 30 s"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    ensure!(
        killed.elapsed() >= Duration::from_secs(9),
        "the bridge went after {:?}, before the limit",
        killed.elapsed()
    );
    // The mount the killed run made is the next run's to delete; no run
    // comes here, so the test deletes it while its operator still runs
    // (left behind, it would hold its namespace, and every `helm uninstall`
    // in the shared test bed would wait for it).
    end_mounts(&bed).await
}

/// Deletes the bed's mounts and waits until its operator has uninstalled them.
async fn end_mounts(bed: &Bed) -> anyhow::Result<()> {
    let mounts = bed.gefyra.api::<GefyraBridgeMount>();
    for name in mounts_left(bed).await? {
        mounts.delete(&name, &Default::default()).await?;
    }
    let deadline = Instant::now() + TIMEOUT;
    while !mounts_left(bed).await?.is_empty() {
        ensure!(
            Instant::now() < deadline,
            "the operator did not uninstall the bed's mounts within {TIMEOUT:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Ok(())
}

/// A `pontoon bridge` killed with SIGKILL: within the grace and a second
/// the developer's requests reach the shadow, the bridge says why; a new
/// run brings them back to the laptop.
#[tokio::test(flavor = "multi_thread")]
async fn a_killed_bridge_falls_back_to_the_shadow_within_the_grace_and_a_new_run_takes_over()
-> anyhow::Result<()> {
    let prefix = "dev-kill";
    let net = match TestbedNet::of_testbed() {
        Ok(net) => net,
        Err(reason) => return pontoon_tests::skip::skip(prefix, &reason),
    };
    let bed = bed(prefix).await?;
    let service = workload(&bed.target).await?;
    let alice = Developer::new(&bed, "alice")?;
    let port = laptop("laptop-alice").await?;
    let args = [
        "deploy/echo".to_string(),
        "--port".into(),
        format!("{port}:{ECHO_PORT}"),
        "--header".into(),
        "x-dev=alice".into(),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut cli = alice.bridge(&bed, &args)?;
    cli.wait_line("now reach this machine", TIMEOUT)?;
    ensure!(send(&net, &service, &[ALICE])? == ["laptop-alice"]);

    cli.signal("-KILL")?;
    let killed = Instant::now();
    drop(cli);
    let fallback = until(&net, &service, &[ALICE], TIMEOUT, |_, a| a == "shadow").await?;
    let fallback = killed.elapsed().min(fallback);
    println!(
        "killed → shadow in {:.2}s (grace {}s)",
        fallback.as_secs_f64(),
        GRACE.as_secs()
    );
    ensure!(
        fallback <= GRACE + Duration::from_secs(1) + Duration::from_millis(500),
        "the developer's requests reached the shadow {fallback:?} after the kill; grace is {GRACE:?}"
    );
    let bridge = bed
        .gefyra
        .api::<GefyraBridge>()
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .next()
        .context("the killed run's bridge stays")?;
    let message = bridge
        .bridge
        .status
        .as_ref()
        .and_then(|s| s.get("message"))
        .and_then(|m| m.as_str())
        .unwrap_or_default()
        .to_string();
    ensure!(
        message.contains("gone since") && message.contains("shadow"),
        "the bridge says why: {message}"
    );

    let mut again = alice.bridge(&bed, &args)?;
    again.wait_line("now reach this machine", TIMEOUT)?;
    until(&net, &service, &[ALICE, PLAIN], TIMEOUT, |r, a| {
        (r.header.is_some() && a == "laptop-alice") || (r.header.is_none() && a == "shadow")
    })
    .await?;
    again.signal("-TERM")?;
    let (code, printed) = again.finish(TIMEOUT)?;
    ensure!(code == Some(0), "SIGTERM exits 0:\n{printed}");
    ensure!(
        mounts_left(&bed).await?.is_empty() && bridges_left(&bed).await?.is_empty(),
        "the second run cleaned up after the first too: {:?} {:?}",
        mounts_left(&bed).await?,
        bridges_left(&bed).await?
    );

    // No bridge names alice now. Past her grace and a sweep (every 10 s),
    // her relay is still there (`--client-keep`, 10 min by default), and
    // her next run is served by that same pod, away as her session is.
    let relay = relays(&bed).await?;
    ensure!(
        relay.len() == 1,
        "alice's relay stays after her last bridge: {relay:?}"
    );
    tokio::time::sleep(GRACE + Duration::from_secs(11)).await;
    ensure!(
        relays(&bed).await? == relay,
        "alice's relay was removed or replaced within the keep: {relay:?} → {:?}",
        relays(&bed).await?
    );
    let mut third = alice.bridge(&bed, &args)?;
    third.wait_line("now reach this machine", TIMEOUT)?;
    ensure!(send(&net, &service, &[ALICE])? == ["laptop-alice"]);
    ensure!(
        relays(&bed).await? == relay,
        "the next run made a new relay instead of using the kept one: {relay:?} → {:?}",
        relays(&bed).await?
    );
    third.signal("-TERM")?;
    let (code, printed) = third.finish(TIMEOUT)?;
    ensure!(code == Some(0), "SIGTERM exits 0:\n{printed}");
    Ok(())
}

/// The relay pods in the operator's namespace (the mounts' in these tests),
/// by name and uid.
async fn relays(bed: &Bed) -> anyhow::Result<Vec<(String, String)>> {
    let pods = bed
        .gefyra
        .api::<Pod>()
        .list(&ListParams::default().labels(CLIENT_LABEL))
        .await?;
    Ok(pods
        .items
        .iter()
        .map(|p| (p.name_any(), p.uid().unwrap_or_default()))
        .collect())
}

/// `-- COMMAND` runs with the target container's environment, read with the
/// developer's rights (what they may not read is named); the bridge ends
/// with the command, with its exit code.
#[tokio::test(flavor = "multi_thread")]
async fn a_command_after_dashes_sees_the_containers_environment() -> anyhow::Result<()> {
    let prefix = "dev-cmd";
    if let Err(reason) = TestbedNet::of_testbed() {
        return pontoon_tests::skip::skip(prefix, &reason);
    }
    let bed = bed(prefix).await?;
    workload(&bed.target).await?;
    let alice = Developer::new(&bed, "alice")?;
    let port = laptop("laptop-alice").await?;
    let out = std::env::temp_dir().join(format!("pontoon-dev-env-{}", std::process::id()));
    let script = format!(
        "echo \"$GREETING|$PLAIN_SETTING|$API_TOKEN\" > {}; exit 7",
        out.display()
    );
    let cli = alice.bridge(
        &bed,
        &[
            "deploy/echo",
            "--port",
            &format!("{port}:{ECHO_PORT}"),
            "--header",
            "x-dev=alice",
            "--",
            "sh",
            "-c",
            &script,
        ],
    )?;
    let (code, printed) = cli.finish(TIMEOUT)?;
    let seen = std::fs::read_to_string(&out).unwrap_or_default();
    let _ = std::fs::remove_file(&out);
    ensure!(
        code == Some(7),
        "the run ends with the command's exit code (got {code:?}):\n{printed}"
    );
    ensure!(
        seen.trim() == "hello from the cluster|plain|s3cret",
        "the command saw the container's env: {seen:?}"
    );
    ensure!(
        mounts_left(&bed).await?.is_empty() && bridges_left(&bed).await?.is_empty(),
        "the command's end put everything back"
    );

    // Without rights to read the Secret, the variable is named.
    alice.tenant.grant(
        bed.target.name(),
        "alice-reader",
        json!([
            { "apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get"] },
            { "apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"] },
        ]),
    )?;
    let cli = alice.bridge(
        &bed,
        &[
            "deploy/echo",
            "--port",
            &format!("{port}:{ECHO_PORT}"),
            "--header",
            "x-dev=alice",
            "--",
            "true",
        ],
    )?;
    let (code, printed) = cli.finish(TIMEOUT)?;
    ensure!(
        code == Some(0) && printed.contains("API_TOKEN") && printed.contains("echo-secret"),
        "the unreadable Secret is named (exit {code:?}):\n{printed}"
    );
    Ok(())
}

/// A developer without rights in the mounts' namespace is told what they
/// lack, and nothing is created; a port the container does not declare and
/// a workload that does not exist are refused the same way.
#[tokio::test(flavor = "multi_thread")]
async fn a_developer_without_rights_is_refused_and_nothing_changes() -> anyhow::Result<()> {
    let prefix = "dev-norights";
    if let Err(reason) = TestbedNet::of_testbed() {
        return pontoon_tests::skip::skip(prefix, &reason);
    }
    let bed = bed(prefix).await?;
    workload(&bed.target).await?;
    let nobody = Tenant::new(bed.target.name(), "nobody")?;
    nobody.grant(
        bed.target.name(),
        "nobody-reader",
        json!([{ "apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get"] }]),
    )?;
    let nobody = Developer::with_identity(nobody)?;
    let (code, printed) = nobody
        .bridge(
            &bed,
            &["deploy/echo", "--port", "8080:3000", "--header", "x-dev=me"],
        )?
        .finish(TIMEOUT)?;
    ensure!(
        code == Some(1) && printed.contains("you may not") && printed.contains("pontoon-developer"),
        "a clear refusal (exit {code:?}):\n{printed}"
    );
    ensure!(
        mounts_left(&bed).await?.is_empty() && bridges_left(&bed).await?.is_empty(),
        "nothing was created"
    );
    ensure!(!on_carrier(&bed.target, "app=echo").await?);

    let alice = Developer::new(&bed, "alice")?;
    for (args, says) in [
        (
            vec!["deploy/echo", "--port", "8080:81", "--header", "x-dev=a"],
            "port 81 is not declared by container `echo`",
        ),
        (
            vec!["deploy/nope", "--port", "8080:3000", "--header", "x-dev=a"],
            "there is no deployment `nope`",
        ),
    ] {
        let (code, printed) = alice.bridge(&bed, &args)?.finish(TIMEOUT)?;
        ensure!(
            code == Some(1) && printed.contains(says),
            "{args:?}: exit {code:?}, wanted `{says}`:\n{printed}"
        );
    }
    ensure!(
        mounts_left(&bed).await?.is_empty(),
        "refusals create nothing"
    );
    // The relay of a developer is theirs alone: nobody may port-forward.
    let pods: Api<Pod> = bed.gefyra.api();
    ensure!(
        pods.list(&ListParams::default().labels("pontoon.dev/connection-client"))
            .await?
            .items
            .is_empty(),
        "no relay was made for a refused run"
    );
    Ok(())
}

/// What the cluster shows of the relay a warning names (`your relay NS/NAME`), for a failure's
/// message: its pod, Service and EndpointSlices, and whether the test bed's network reaches its
/// health port through the Service and straight at the pod.
fn relay_view(seen: &[String]) -> String {
    let Some((ns, name)) = seen.iter().find_map(|line| {
        let rest = line.split("your relay ").nth(1)?;
        let relay = rest.split_whitespace().next()?;
        relay
            .split_once('/')
            .map(|(n, p)| (n.to_string(), p.to_string()))
    }) else {
        return String::new();
    };
    let kubectl = |args: &[&str]| -> String {
        let Ok(bin) = pontoon_tests::testbed_bin("kubectl") else {
            return "no kubectl".into();
        };
        match std::process::Command::new(bin)
            .arg("--kubeconfig")
            .arg(pontoon_tests::kubeconfig_path())
            .args(args)
            .output()
        {
            Ok(out) => format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
            Err(err) => err.to_string(),
        }
    };
    let objects = kubectl(&["-n", &ns, "get", "pod,svc,endpointslices", "-o", "wide"]);
    let cluster_ip = kubectl(&[
        "-n",
        &ns,
        "get",
        "svc",
        &name,
        "-o",
        "jsonpath={.spec.clusterIP}",
    ]);
    let pod_ip = kubectl(&[
        "-n",
        &ns,
        "get",
        "pod",
        &name,
        "-o",
        "jsonpath={.status.podIP}",
    ]);
    let netns =
        std::fs::read_to_string(pontoon_tests::testbed_dir().join("run/netns")).unwrap_or_default();
    let reach = |ip: &str| -> String {
        let out = std::process::Command::new("nsenter")
            .arg(format!("--net=/run/netns/{}", netns.trim()))
            .args([
                "curl",
                "-sS",
                "-m",
                "1",
                &format!("http://{}:7001/healthz", ip.trim()),
            ])
            .output();
        match out {
            Ok(out) => format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout).trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            ),
            Err(err) => err.to_string(),
        }
    };
    format!(
        "--- the relay now ---\n{objects}\nService {cluster_ip}:7001 from the test bed: {}\n\
         pod {pod_ip}:7001 from the test bed: {}",
        reach(&cluster_ip),
        reach(&pod_ip)
    )
}
