//! `make bench-bridge`: what `pontoon bridge` costs a developer, on the test
//! bed's process pods (as root), with the release operator, the bundled
//! tunnel.wasm and the release `pontoon` as both the command (a process on
//! the host, outside the test bed's network, as a laptop is) and the relay
//! (a process pod). Prints figures; asserts nothing about time.
//!
//! - start → first matching request answered on this machine, 10 rounds,
//!   with the mount already ACTIVE (and answered by its shadow) and with the
//!   mount made by the command (each round ended with SIGTERM, which waits
//!   until all is back); a developer's relay is kept between their runs
//!   (`--client-keep`), so each round says whether its relay was new, and
//!   5 more rounds with the mount ACTIVE start with no relay at all (a
//!   developer's first run);
//! - latency a request gains through the tunnel: the same request answered
//!   by the shadow and by this machine, p50/p99, 1000 requests at 1 and at
//!   32 connections (sent from inside the test bed's network by this
//!   program itself, re-run there with `nsenter`);
//! - a 64 MiB body each way through one request;
//! - peak RSS of the relay and of the command;
//! - the command SIGKILLed → requests with the header answered by the
//!   shadow again (the operator's default grace, 10 s).
//!
//! Run inside the network namespace, `bench_bridge load URL HEADER CONNS
//! COUNT` prints one latency in microseconds a line (keep-alive HTTP/1.1).

use std::{
    io::{BufRead, BufReader},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, bail, ensure};
use k8s_openapi::api::{apps::v1::Deployment, core::v1::Service};
use kube::api::PostParams;
use pontoon::bridge_mount::GefyraBridgeMount;
use pontoon_tests::{
    TestNamespace,
    bench::{BenchOperator, memory_kib, percentile},
    kubeconfig_path,
    providers::target_dir,
    traffic::{TestbedNet, echo_container},
};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader as TokioBufReader};

const ECHO_PORT: u16 = 3000;
const ROUNDS: usize = 10;
/// Rounds of a developer's first run (a relay made anew each time).
const FIRST_RUNS: usize = 5;
const REQUESTS: usize = 1000;
const BIG: usize = 64 * 1024 * 1024;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    if args.get(1).map(String::as_str) == Some("load") {
        return runtime.block_on(load(&args[2..]));
    }
    runtime.block_on(bench())
}

/// The release `pontoon`, also where the test bed's pods find it.
fn pontoon() -> anyhow::Result<std::path::PathBuf> {
    let binary = std::env::var_os("PONTOON_BIN")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| target_dir().join("release/pontoon"));
    ensure!(
        binary.is_file(),
        "{} is missing: `make bench-bridge` builds it",
        binary.display()
    );
    let pod_bin = pontoon_tests::pod_bin("carrier2")?
        .parent()
        .context("pod-bin")?
        .to_path_buf();
    let staged = pod_bin.join(format!(".pontoon.{}", std::process::id()));
    std::fs::copy(&binary, &staged)?;
    std::fs::rename(&staged, pod_bin.join("pontoon"))?;
    Ok(binary)
}

async fn bench() -> anyhow::Result<()> {
    let net = match TestbedNet::of_testbed() {
        Ok(net) => net,
        Err(reason) => bail!("bench-bridge needs the test bed's process pods: {reason}"),
    };
    let binary = pontoon()?;
    install_crds().await?;
    let target = TestNamespace::new("bench-bridge").await?;
    let gefyra = TestNamespace::new("bench-bridge-gefyra").await?;
    let mut operator = BenchOperator::start(
        "bench-bridge",
        "tunnel",
        &[
            "--namespace",
            gefyra.name(),
            "--relay-image",
            "testbed.pontoon.dev/pontoon:relay",
        ],
    )
    .await?;
    let service = workload(&target).await?;
    // Requests are sent from a pod, as the workload's users in the cluster
    // send them: the test bed's own network namespace is a node's, and
    // there kube-proxy's refusal of a Service without ready endpoints (the
    // workload while Carrier2 replaces its containers) drops the connection
    // silently instead (no ICMP comes back), so a probe from there waited
    // out its timeout where a pod is refused at once and tries again.
    let client = client_pod(&target, &net).await?;
    let laptop = laptop_server().await?;
    let bridge_args: Vec<String> = {
        let mut args: Vec<String> = [
            "bridge",
            "-n",
            target.name(),
            "deploy/echo",
            "--port",
            &format!("{laptop}:{ECHO_PORT}"),
            "--header",
            "x-dev=bench",
            "--mount-namespace",
            gefyra.name(),
            "--kubeconfig",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.push(kubeconfig_path().display().to_string());
        args
    };
    let url = format!("http://{service}/bench");

    // Start → first request, the mount made by the command. Each round says
    // which relay served it: a developer's relay is kept after their run
    // (`--client-keep`), so only a first run makes one.
    let starts = Starts {
        binary: &binary,
        args: bridge_args,
        net: &client,
        url: &url,
        namespace: gefyra.name(),
    };
    // The developer's relay first: a developer's first run is measured on
    // its own below; these rounds are their later runs.
    let mut warm = spawn(&binary, &starts.args)?;
    wait_line(&mut warm, "now reach this machine")?;
    stop(&mut warm)?;
    let mut last_relay = None;
    relay_of(gefyra.name(), &mut last_relay).await?;
    let (made, made_steps) = starts
        .rounds(ROUNDS, false, Answerer::Original, &mut last_relay)
        .await?;
    // The same with the mount already ACTIVE: one made beforehand (not by
    // the command, which therefore keeps it).
    let mounts = gefyra.api::<GefyraBridgeMount>();
    let mount: kube::core::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "gefyra.dev/v1", "kind": "gefyrabridgemount",
        "metadata": { "name": "kept", "namespace": gefyra.name() },
        "targetNamespace": target.name(), "target": "deploy/echo", "targetContainer": "echo",
    }))?;
    let resource = kube::core::ApiResource {
        group: "gefyra.dev".into(),
        version: "v1".into(),
        api_version: "gefyra.dev/v1".into(),
        kind: "gefyrabridgemount".into(),
        plural: "gefyrabridgemounts".into(),
    };
    let dynamic: kube::Api<kube::core::DynamicObject> =
        kube::Api::namespaced_with(pontoon_tests::client().await?, gefyra.name(), &resource);
    dynamic.create(&PostParams::default(), &mount).await?;
    pontoon_tests::wait_for(
        &mounts,
        "kept",
        |m: Option<&GefyraBridgeMount>| {
            m.is_some_and(|m| m.fields.state.as_deref() == Some("ACTIVE"))
        },
        Duration::from_secs(120),
    )
    .await?;
    // "Already ACTIVE" means serving: the first requests after a mount turns
    // ACTIVE can wait a TCP retransmission (1 s) for kube-proxy to program
    // the new shadow Service's address, which belongs to the mount's start
    // (the series above), not to `pontoon bridge`.
    let serving = on_the_shadow(&client, &url, "x-none: 1", Instant::now()).await?;
    println!(
        "mount `kept` ACTIVE and answered by its shadow {:.2} s later",
        serving.as_secs_f64()
    );
    let (active, active_steps) = starts
        .rounds(ROUNDS, false, Answerer::Shadow, &mut last_relay)
        .await?;
    // A developer's first run, the mount ACTIVE: no relay yet (the kept one
    // removed before each round, as `--client-keep` would after 10 min), so
    // the operator makes its pod and a new Service.
    let (first, first_steps) = starts
        .rounds(FIRST_RUNS, true, Answerer::Shadow, &mut last_relay)
        .await?;
    println!(
        "start → first request answered here, a developer's first run (no relay yet), mount ACTIVE: p50 {:.3} s, slowest {:.3} s ({FIRST_RUNS} rounds: {})",
        percentile(&first, 50),
        percentile(&first, 99),
        in_order(&first)
    );
    for (round, step) in first_steps.iter().enumerate() {
        println!("  first run round {}: {step}", round + 1);
    }
    println!(
        "start → first request answered here: mount ACTIVE p50 {:.3} s p99 {:.3} s (goal ≤ 1 s); mount made by the command p50 {:.3} s p99 {:.3} s (goal ≤ 2 s); {ROUNDS} rounds each",
        percentile(&active, 50),
        percentile(&active, 99),
        percentile(&made, 50),
        percentile(&made, 99)
    );
    println!(
        "  rounds in order (s): mount ACTIVE {}; mount made {}",
        in_order(&active),
        in_order(&made)
    );
    for (case, steps) in [("mount ACTIVE", &active_steps), ("mount made", &made_steps)] {
        for (round, step) in steps.iter().enumerate() {
            println!("  {case} round {}: {step}", round + 1);
        }
    }

    // Latency and throughput, with one bridge live.
    let mut cli = spawn(&binary, &starts.args)?;
    wait_line(&mut cli, "now reach this machine")?;
    for conns in [1usize, 32] {
        let shadow = measure(&net, &url, "x-none: 1", conns).await?;
        let tunnel = measure(&net, &url, "x-dev: bench", conns).await?;
        println!(
            "latency at {conns} connection(s), {REQUESTS} requests: shadow p50 {:.2} ms p99 {:.2} ms; through the tunnel p50 {:.2} ms p99 {:.2} ms; added p50 {:.2} ms p99 {:.2} ms (goal at 1: ≤ 1 ms, ≤ 5 ms)",
            shadow.0 * 1e3,
            shadow.1 * 1e3,
            tunnel.0 * 1e3,
            tunnel.1 * 1e3,
            (tunnel.0 - shadow.0) * 1e3,
            (tunnel.1 - shadow.1) * 1e3,
        );
    }
    // curl streams the body from a file (`--upload-file`, not `--data-binary`, which reads it
    // all first) and is told not to wait for a `100 Continue` (its 1 s wait is not the
    // tunnel's); the time is curl's own, from connecting to the last byte.
    let body = tempfile::NamedTempFile::new()?;
    body.as_file().set_len(BIG as u64)?;
    let body_path = body.path().display().to_string();
    for (direction, args) in [
        (
            "up (POST to this machine)",
            vec!["-X", "POST", "--upload-file", &body_path, "-H", "Expect:"],
        ),
        (
            "down (GET from this machine)",
            vec!["-H", "x-size: 67108864"],
        ),
    ] {
        let output = net_command(&net, "curl")?
            .args(["-sS", "--fail", "--noproxy", "*", "--max-time", "120"])
            .args([
                "-H",
                "x-dev: bench",
                "-o",
                "/dev/null",
                "-w",
                "%{time_total}",
            ])
            .args(&args)
            .arg(format!("{url}/big"))
            .stdin(Stdio::null())
            .output()?;
        ensure!(
            output.status.success(),
            "the 64 MiB transfer {direction} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let secs: f64 = String::from_utf8_lossy(&output.stdout).trim().parse()?;
        println!(
            "64 MiB {direction}: {:.2} s, {:.0} MiB/s (goal ≥ 100)",
            secs,
            64.0 / secs
        );
    }
    let relay = relay_pids()?;
    for pid in &relay {
        println!(
            "relay pid {pid}: peak RSS {:.1} MiB (goal ≤ 16)",
            memory_kib(*pid, "VmHWM:")? as f64 / 1024.0
        );
    }
    println!(
        "pontoon bridge (the command): peak RSS {:.1} MiB",
        memory_kib(cli.id(), "VmHWM:")? as f64 / 1024.0
    );

    // Kill → shadow.
    cli.kill()?;
    let killed = Instant::now();
    cli.wait()?;
    let fallback = on_the_shadow(&client, &url, "x-dev: bench", killed).await?;
    println!(
        "SIGKILL → requests with the header on the shadow: {:.2} s (goal ≤ grace + 1 s = 11 s)",
        fallback.as_secs_f64()
    );
    mounts.delete("kept", &Default::default()).await?;
    pontoon_tests::wait_for(
        &mounts,
        "kept",
        |m: Option<&GefyraBridgeMount>| m.is_none(),
        Duration::from_secs(120),
    )
    .await?;
    operator.kill()?;
    Ok(())
}

/// Deployment `echo` (2 echo servers) and its Service; the Service's address.
async fn workload(ns: &TestNamespace) -> anyhow::Result<String> {
    let d: Deployment = serde_json::from_value(json!({
        "metadata": { "name": "echo" },
        "spec": { "replicas": 2, "selector": { "matchLabels": { "app": "echo" } },
                  "template": { "metadata": { "labels": { "app": "echo" } },
                                "spec": { "containers": [echo_container("echo", ECHO_PORT)] } } }
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
    pontoon_tests::backends::wait_for_endpoints(ns, "echo", 2, Duration::from_secs(120)).await?;
    let ip = service
        .spec
        .and_then(|s| s.cluster_ip)
        .context("no ClusterIP")?;
    Ok(format!("{ip}:80"))
}

/// A pod of the cluster to send requests from (an echo server, idle), and
/// its network namespace.
async fn client_pod(ns: &TestNamespace, net: &TestbedNet) -> anyhow::Result<TestbedNet> {
    use k8s_openapi::api::core::v1::Pod;
    let pod: Pod = serde_json::from_value(json!({
        "metadata": { "name": "client", "labels": { "app": "client" } },
        "spec": { "containers": [echo_container("client", ECHO_PORT)] }
    }))?;
    let pods = ns.api::<Pod>();
    pods.create(&PostParams::default(), &pod).await?;
    let running = pontoon_tests::wait_for(
        &pods,
        "client",
        |p: Option<&Pod>| p.is_some_and(pontoon_tests::pod_ready),
        Duration::from_secs(120),
    )
    .await?
    .context("the client pod is gone")?;
    net.of_pod(&running)
}

/// This machine's service: `{"pod": "laptop"}`; `x-size: N` answers N
/// bytes; a request body is read to its end.
async fn laptop_server() -> anyhow::Result<u16> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            tokio::spawn(async move {
                let _ = serve_http(conn).await;
            });
        }
    });
    Ok(port)
}

async fn serve_http(conn: tokio::net::TcpStream) -> std::io::Result<()> {
    let (read, mut write) = conn.into_split();
    let mut read = TokioBufReader::with_capacity(64 * 1024, read);
    loop {
        let mut length = 0usize;
        let mut size = None;
        let mut line = String::new();
        if read.read_line(&mut line).await? == 0 {
            return Ok(());
        }
        loop {
            line.clear();
            read.read_line(&mut line).await?;
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                match name.trim().to_ascii_lowercase().as_str() {
                    "content-length" => length = value.trim().parse().unwrap_or(0),
                    "x-size" => size = value.trim().parse::<usize>().ok(),
                    _ => {}
                }
            }
        }
        let mut left = length;
        let mut sink = vec![0u8; 64 * 1024];
        while left > 0 {
            let n = read.read(&mut sink[..left.min(64 * 1024)]).await?;
            if n == 0 {
                return Ok(());
            }
            left -= n;
        }
        match size {
            Some(size) => {
                write
                    .write_all(
                        format!("HTTP/1.1 200 OK\r\ncontent-length: {size}\r\n\r\n").as_bytes(),
                    )
                    .await?;
                let chunk = vec![b'y'; 1024 * 1024];
                let mut left = size;
                while left > 0 {
                    let n = left.min(chunk.len());
                    write.write_all(&chunk[..n]).await?;
                    left -= n;
                }
            }
            None => {
                let body = "{\"pod\": \"laptop\"}\n";
                write
                    .write_all(
                        format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                            body.len()
                        )
                        .as_bytes(),
                    )
                    .await?;
            }
        }
    }
}

/// `pontoon bridge`; its progress and log (`RUST_LOG`) are appended to the
/// file `BENCH_CLI_LOG` names, when set, to see where a slow round went.
fn spawn(binary: &std::path::Path, args: &[String]) -> anyhow::Result<Child> {
    let stderr = match std::env::var_os("BENCH_CLI_LOG") {
        Some(path) => Stdio::from(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .with_context(|| format!("BENCH_CLI_LOG {}", path.display()))?,
        ),
        None => Stdio::null(),
    };
    Ok(Command::new(binary)
        .args(args)
        .env_remove("KUBECONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()?)
}

fn wait_line(child: &mut Child, text: &str) -> anyhow::Result<()> {
    let stdout = child.stdout.take().context("stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    for line in lines.by_ref() {
        if line?.contains(text) {
            // Keep reading in the background, so the command never blocks.
            std::thread::spawn(move || for _ in lines {});
            return Ok(());
        }
    }
    bail!("`pontoon bridge` ended before printing `{text}`")
}

/// SIGTERM, and wait until the command has put everything back.
fn stop(child: &mut Child) -> anyhow::Result<()> {
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()?;
    let status = child.wait()?;
    ensure!(status.success(), "`pontoon bridge` ended with {status}");
    Ok(())
}

/// Waits for a request with the header to be answered here; the longest a
/// single try took (a try that hangs shows here, not as a slow tunnel).
async fn first_local_answer(
    net: &TestbedNet,
    url: &str,
    started: Instant,
) -> anyhow::Result<Duration> {
    let header = "x-dev: bench";
    let mut slowest = Duration::ZERO;
    loop {
        let tried = Instant::now();
        let answered = get(net, url, header).contains("\"laptop\"");
        slowest = slowest.max(tried.elapsed());
        if answered {
            return Ok(slowest);
        }
        ensure!(
            started.elapsed() < Duration::from_secs(120),
            "no request with `{header}` reached this machine within 120 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// What a round of start → first local answer needs.
struct Starts<'a> {
    binary: &'a std::path::Path,
    args: Vec<String>,
    net: &'a TestbedNet,
    url: &'a str,
    /// The operator's namespace, where the relays are.
    namespace: &'a str,
}

impl Starts<'_> {
    /// `count` rounds, each `pontoon bridge` started and ended with SIGTERM
    /// (which waits until all is back), every relay removed before each when
    /// `fresh_relay`: each round's time to the first local answer, and where
    /// it went, with whether its relay was the one `last_relay` names.
    ///
    /// A round starts once the workload answers steadily as `before` (see
    /// [`steady`]): the previous round's command put everything back, but
    /// its pods may have restarted a moment ago.
    async fn rounds(
        &self,
        count: usize,
        fresh_relay: bool,
        before: Answerer,
        last_relay: &mut Option<String>,
    ) -> anyhow::Result<(Vec<Duration>, Vec<String>)> {
        let (mut times, mut steps) = (Vec::new(), Vec::new());
        for _ in 0..count {
            if fresh_relay {
                remove_relays(self.namespace).await?;
            }
            steady(self.net, self.url, before).await?;
            let started = Instant::now();
            let milestones = Milestones::watch(self.namespace, started).await?;
            let mut cli = spawn(self.binary, &self.args)?;
            let slowest = first_local_answer(self.net, self.url, started).await?;
            times.push(started.elapsed());
            let relay = relay_of(self.namespace, last_relay).await?;
            steps.push(format!("{}; {relay}", milestones.report(slowest)));
            stop(&mut cli)?;
        }
        Ok((times, steps))
    }
}

/// Who answers a request without the header between rounds.
#[derive(Clone, Copy, Debug)]
enum Answerer {
    /// The workload's own pods (no mount).
    Original,
    /// The mount's shadow.
    Shadow,
}

impl Answerer {
    /// Whether `body` (the echo server's JSON, `pod` its name) came from this answerer.
    fn answered(self, body: &str) -> bool {
        let name = serde_json::from_str::<serde_json::Value>(body)
            .ok()
            .and_then(|v| v["pod"].as_str().map(str::to_string))
            .unwrap_or_default();
        match self {
            Self::Original => name.starts_with("echo-") && !name.starts_with("echo-gefyra"),
            Self::Shadow => name.starts_with("echo-gefyra"),
        }
    }
}

/// Waits until requests without the header are answered by `by`
/// [`STEADY`] times in a row, 100 ms apart: a second and more, so that
/// kube-proxy (one sync a second at most) has caught up with pods that
/// restarted when the previous round put them back. A developer starting
/// their next run does not do so within a moment of the last one's end;
/// back to back, a client's connection can meet the pods' restart (see the
/// README's "What it costs").
async fn steady(net: &TestbedNet, url: &str, by: Answerer) -> anyhow::Result<()> {
    let since = Instant::now();
    let mut streak = 0;
    while streak < STEADY {
        ensure!(
            since.elapsed() < Duration::from_secs(60),
            "the workload did not answer steadily ({by:?}) within 60 s"
        );
        streak = if by.answered(&get(net, url, "x-none: 1")) {
            streak + 1
        } else {
            0
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// Answers in a row that make the workload steady.
const STEADY: usize = 12;

/// Round times in seconds, in the order they ran.
fn in_order(times: &[Duration]) -> String {
    times
        .iter()
        .map(|t| format!("{:.2}", t.as_secs_f64()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// How long after `since` a request with `header` was first answered by the
/// shadow (polled every 50 ms, for at most a minute).
async fn on_the_shadow(
    net: &TestbedNet,
    url: &str,
    header: &str,
    since: Instant,
) -> anyhow::Result<Duration> {
    while !get(net, url, header).contains("echo-gefyra") {
        ensure!(
            since.elapsed() < Duration::from_secs(60),
            "requests with `{header}` never reached the shadow"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(since.elapsed())
}

/// When, within one round, the bench first saw the mount and the bridge
/// ACTIVE (polled every 20 ms, so a state reached just before the answer may
/// not be seen), and the slowest single request: where a slow round's time
/// went.
struct Milestones {
    started: Instant,
    seen: std::sync::Arc<std::sync::Mutex<[Option<Duration>; 2]>>,
    poller: tokio::task::JoinHandle<()>,
}

impl Milestones {
    async fn watch(namespace: &str, started: Instant) -> anyhow::Result<Self> {
        use pontoon::bridge_mount::GefyraBridge;
        let client = pontoon_tests::client().await?;
        let mounts: kube::Api<GefyraBridgeMount> = kube::Api::namespaced(client.clone(), namespace);
        let bridges: kube::Api<GefyraBridge> = kube::Api::namespaced(client, namespace);
        let seen = std::sync::Arc::new(std::sync::Mutex::new([None; 2]));
        let record = seen.clone();
        let poller = tokio::spawn(async move {
            loop {
                let lp = kube::api::ListParams::default();
                let mount = mounts.list(&lp).await.is_ok_and(|list| {
                    list.items
                        .iter()
                        .any(|m| m.fields.state.as_deref() == Some("ACTIVE"))
                });
                let bridge = bridges.list(&lp).await.is_ok_and(|list| {
                    list.items
                        .iter()
                        .any(|b| b.bridge.state.as_deref() == Some("ACTIVE"))
                });
                {
                    let mut at = record.lock().unwrap_or_else(|e| e.into_inner());
                    for (slot, now) in at.iter_mut().zip([mount, bridge]) {
                        if now && slot.is_none() {
                            *slot = Some(started.elapsed());
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        Ok(Self {
            started,
            seen,
            poller,
        })
    }

    fn report(self, slowest_try: Duration) -> String {
        self.poller.abort();
        let at = *self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let show = |t: Option<Duration>| {
            t.map_or_else(
                || "not seen before the answer".into(),
                |t| format!("{:.2} s", t.as_secs_f64()),
            )
        };
        format!(
            "mount ACTIVE {}, bridge ACTIVE {}, answered here {:.2} s; slowest single request {:.2} s",
            show(at[0]),
            show(at[1]),
            self.started.elapsed().as_secs_f64(),
            slowest_try.as_secs_f64()
        )
    }
}

/// Removes every relay of the operator's namespace (pod, Service, Role,
/// RoleBinding) and waits until its pod is gone.
async fn remove_relays(namespace: &str) -> anyhow::Result<()> {
    use k8s_openapi::api::{
        core::v1::Pod,
        rbac::v1::{Role, RoleBinding},
    };
    let client = pontoon_tests::client().await?;
    let lp = kube::api::ListParams::default().labels(pontoon::bridge::connections::CLIENT_LABEL);
    let dp = kube::api::DeleteParams::default();
    let pods: kube::Api<Pod> = kube::Api::namespaced(client.clone(), namespace);
    pods.delete_collection(&dp, &lp).await?;
    kube::Api::<Service>::namespaced(client.clone(), namespace)
        .delete_collection(&dp, &lp)
        .await?;
    kube::Api::<Role>::namespaced(client.clone(), namespace)
        .delete_collection(&dp, &lp)
        .await?;
    kube::Api::<RoleBinding>::namespaced(client, namespace)
        .delete_collection(&dp, &lp)
        .await?;
    let since = Instant::now();
    while !pods.list(&lp).await?.items.is_empty() {
        ensure!(
            since.elapsed() < Duration::from_secs(60),
            "the relay pod was not gone 60 s after its deletion"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// Whether the relay pod now serving (in the operator's namespace) is the
/// one `last` names: "relay new" or "relay kept".
async fn relay_of(namespace: &str, last: &mut Option<String>) -> anyhow::Result<&'static str> {
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(pontoon_tests::client().await?, namespace);
    let lp = kube::api::ListParams::default().labels(pontoon::bridge::connections::CLIENT_LABEL);
    let uid = pods
        .list(&lp)
        .await?
        .items
        .into_iter()
        .find(|p| p.metadata.deletion_timestamp.is_none())
        .and_then(|p| p.metadata.uid);
    let kept = uid.is_some() && *last == uid;
    *last = uid;
    Ok(if kept { "relay kept" } else { "relay new" })
}

/// `GET url` with `header` from inside the test bed's network: the body,
/// empty when it failed.
fn get(net: &TestbedNet, url: &str, header: &str) -> String {
    net.curl(&["--max-time", "2", "-H", header, url])
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// `program` inside the test bed's network namespace.
fn net_command(_net: &TestbedNet, program: &str) -> anyhow::Result<Command> {
    let netns = std::fs::read_to_string(pontoon_tests::testbed_dir().join("run/netns"))?;
    let mut command = Command::new("nsenter");
    command
        .arg(format!("--net=/run/netns/{}", netns.trim()))
        .arg("--")
        .arg(program);
    Ok(command)
}

/// Every CRD Pontoon ships, applied and established.
async fn install_crds() -> anyhow::Result<()> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::{
        Api, ResourceExt,
        api::{Patch, PatchParams},
    };
    let client = pontoon_tests::client().await?;
    let crds: Api<CustomResourceDefinition> = Api::all(client);
    for crd in pontoon::crds::all()? {
        crds.patch(
            &crd.name_any(),
            &PatchParams::apply("bench-bridge").force(),
            &Patch::Apply(&crd),
        )
        .await?;
    }
    for crd in pontoon::crds::all()? {
        pontoon_tests::wait_for(
            &crds,
            &crd.name_any(),
            |c: Option<&CustomResourceDefinition>| {
                c.and_then(|c| c.status.as_ref())
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| {
                        cs.iter()
                            .any(|c| c.type_ == "Established" && c.status == "True")
                    })
            },
            Duration::from_secs(60),
        )
        .await?;
    }
    Ok(())
}

/// p50 and p99 in seconds of `REQUESTS` requests at `conns` connections.
async fn measure(
    net: &TestbedNet,
    url: &str,
    header: &str,
    conns: usize,
) -> anyhow::Result<(f64, f64)> {
    let me = std::env::current_exe()?;
    let output = net_command(net, &me.display().to_string())?
        .args([
            "load",
            url,
            header,
            &conns.to_string(),
            &REQUESTS.to_string(),
        ])
        .output()?;
    ensure!(
        output.status.success(),
        "the load run failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let samples: Vec<Duration> = String::from_utf8(output.stdout)?
        .lines()
        .filter_map(|l| l.trim().parse::<u64>().ok())
        .map(Duration::from_micros)
        .collect();
    ensure!(
        samples.len() == REQUESTS,
        "{} of {REQUESTS} requests answered",
        samples.len()
    );
    Ok((percentile(&samples, 50), percentile(&samples, 99)))
}

/// Inside the network namespace: `COUNT` GETs of `URL` with `HEADER`, over
/// `CONNS` keep-alive connections; one latency (µs) a line.
async fn load(args: &[String]) -> anyhow::Result<()> {
    let [url, header, conns, count] = args else {
        bail!("usage: bench_bridge load URL HEADER CONNS COUNT");
    };
    let rest = url.strip_prefix("http://").context("http URL")?;
    let (authority, path) = rest.split_once('/').context("URL with a path")?;
    let (conns, count): (usize, usize) = (conns.parse()?, count.parse()?);
    let request = format!("GET /{path} HTTP/1.1\r\nhost: {authority}\r\n{header}\r\n\r\n");
    let mut tasks = Vec::new();
    for i in 0..conns {
        // The remainder goes to the first connections: `count` in all.
        let per = count / conns + usize::from(i < count % conns);
        let (authority, request) = (authority.to_string(), request.clone());
        tasks.push(tokio::spawn(async move {
            let mut samples = Vec::with_capacity(per);
            let mut conn = TokioBufReader::new(tokio::net::TcpStream::connect(&authority).await?);
            for _ in 0..per {
                let started = Instant::now();
                conn.get_mut().write_all(request.as_bytes()).await?;
                let mut length = 0usize;
                let mut line = String::new();
                loop {
                    line.clear();
                    if conn.read_line(&mut line).await? == 0 {
                        anyhow::bail!("the connection closed");
                    }
                    let header = line.trim_end();
                    if header.is_empty() {
                        break;
                    }
                    if let Some(value) = header.to_ascii_lowercase().strip_prefix("content-length:")
                    {
                        length = value.trim().parse()?;
                    }
                }
                let mut body = vec![0u8; length];
                conn.read_exact(&mut body).await?;
                samples.push(started.elapsed());
            }
            anyhow::Ok(samples)
        }));
    }
    for task in tasks {
        for sample in task.await?? {
            println!("{}", sample.as_micros());
        }
    }
    Ok(())
}

/// The relay processes the test bed runs (`pontoon relay`).
fn relay_pids() -> anyhow::Result<Vec<u32>> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc")? {
        let entry = entry?;
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let words: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        if words.len() > 1 && words[0].ends_with(b"pontoon") && words[1] == b"relay" {
            pids.push(pid);
        }
    }
    Ok(pids)
}
