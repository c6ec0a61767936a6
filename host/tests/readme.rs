//! The README, followed as a newcomer follows it, on the test bed: `make run`
//! in a first terminal (a process group of its own, stopped with SIGINT as
//! Ctrl-C stops it), and every other shell block of the README, in order, in
//! a second one (each block a fresh `bash -euo pipefail` in the checkout,
//! with the variables the blocks before it exported).
//!
//! A block this test does not run carries `<!-- readme-test: skip: why -->`
//! on the line above it; any other block left unrun fails the test, so a
//! command added to the README is either run here or says why it is not.
//!
//! The walk-through uses fixed names as the README does (namespaces `gefyra`,
//! `demo`, `shop`, `pontoon-system`, GatewayClass `praxis`, `/tmp/my-provider`,
//! `/tmp/custom-providers`, `/tmp/my-values.yaml`, the metrics port 8080):
//! this binary holds this one test, and cargo runs test binaries one after
//! another. What an earlier, interrupted run left is removed first.

use std::{
    io::{BufRead, BufReader},
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use anyhow::{Context, bail, ensure};
use gateway_api::{gatewayclasses::GatewayClass, gateways::Gateway};
use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{ConfigMap, Namespace},
};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, Patch, PatchParams},
};
use pontoon::bridge_mount::GefyraBridgeMount;
use pontoon::plugins::{Limits, LoadedModule, PluginRuntime, grants::Grants};
use pontoon_tests::{kubeconfig_path, repo_root};
use serde_json::json;

/// `make run` builds pontoon and the providers when cargo's cache is cold.
const MAKE_RUN_TIMEOUT: Duration = Duration::from_secs(900);
const MODULE: &str = "/tmp/my-provider/target/wasm32-wasip2/wasm-release/my_provider.wasm";

/// A fenced `sh` block of the README.
#[derive(Debug)]
struct Block {
    line: usize,
    text: String,
    /// The `readme-test:` annotation of the line above, if any.
    marker: Option<String>,
}

fn blocks(readme: &str) -> anyhow::Result<Vec<Block>> {
    let lines: Vec<&str> = readme.lines().collect();
    let mut blocks = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if line.trim_start().starts_with("```") && line.trim() != "```" {
            let lang = line.trim().trim_start_matches('`');
            let start = i;
            let end = (i + 1..lines.len())
                .find(|&j| lines[j].trim() == "```")
                .with_context(|| format!("README line {}: unclosed code block", i + 1))?;
            if matches!(lang, "sh" | "bash" | "shell" | "console") {
                ensure!(
                    !line.starts_with(' '),
                    "README line {}: a shell block inside a list; the README test runs top-level blocks only",
                    i + 1
                );
                let marker = start
                    .checked_sub(1)
                    .map(|p| lines[p].trim())
                    .and_then(|p| p.strip_prefix("<!-- readme-test:"))
                    .and_then(|p| p.strip_suffix("-->"))
                    .map(|p| p.trim().to_string());
                blocks.push(Block {
                    line: start + 1,
                    text: lines[start + 1..end].join("\n"),
                    marker,
                });
            }
            i = end + 1;
        } else {
            i += 1;
        }
    }
    Ok(blocks)
}

/// The README's blocks, handed out in order.
struct Readme {
    blocks: std::vec::IntoIter<Block>,
    skipped: Vec<String>,
}

impl Readme {
    fn load() -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(repo_root().join("README.md"))?;
        Ok(Self {
            blocks: blocks(&text)?.into_iter(),
            skipped: Vec::new(),
        })
    }

    /// Notes a block marked `skip` (which must say why); false for any other.
    fn skipped(&mut self, block: &Block) -> anyhow::Result<bool> {
        let Some(why) = block
            .marker
            .as_deref()
            .and_then(|m| m.strip_prefix("skip:"))
        else {
            return Ok(false);
        };
        ensure!(
            why.len() > 10,
            "README line {}: a skipped block must say why",
            block.line
        );
        self.skipped
            .push(format!("line {}: {}", block.line, block.text));
        Ok(true)
    }

    /// The next block that is not marked `skip`, which must contain
    /// `expected` (so that this test and the README stay in step).
    fn next(&mut self, expected: &str) -> anyhow::Result<Block> {
        while let Some(block) = self.blocks.next() {
            if self.skipped(&block)? {
                continue;
            }
            ensure!(
                block.text.contains(expected),
                "README line {}: the next block to run does not contain {expected:?}:\n{}",
                block.line,
                block.text
            );
            return Ok(block);
        }
        bail!("the README has no further block containing {expected:?}")
    }

    /// Every block was run or skipped with a reason; the skipped ones.
    fn finish(mut self) -> anyhow::Result<Vec<String>> {
        while let Some(block) = self.blocks.next() {
            ensure!(
                self.skipped(&block)?,
                "README line {}: a block neither run by this test nor marked skip:\n{}",
                block.line,
                block.text
            );
        }
        Ok(self.skipped)
    }
}

/// The exported variables, to carry into the next block (read-only ones,
/// such as an exported SHELLOPTS, cannot be set again).
const SAVE: &str = "export -p | grep -Ev '^declare -[a-zA-Z]*r'";

/// The second terminal: blocks run one after another in the checkout, the
/// variables each exports kept for the next (`source .testbed/env`).
struct Shell {
    state: tempfile::NamedTempFile,
}

impl Shell {
    fn new() -> anyhow::Result<Self> {
        Ok(Self {
            state: tempfile::NamedTempFile::new()?,
        })
    }

    fn run(&mut self, block: &Block) -> anyhow::Result<String> {
        let started = Instant::now();
        let state = self.state.path().display();
        let script = format!(
            "set -euo pipefail\nsource '{state}'\n{}\n{SAVE} >'{state}'\n",
            block.text
        );
        let output = Command::new("bash")
            .arg("-c")
            .arg(script)
            .current_dir(repo_root())
            // The README's kubectl is the one `.testbed/env` puts on the PATH.
            .env_remove("KUBECONFIG")
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("cannot run README line {}", block.line))?;
        // Where the walk-through's time goes (`--nocapture` shows it).
        eprintln!(
            "readme: line {} took {:.1} s",
            block.line,
            started.elapsed().as_secs_f64()
        );
        let out = String::from_utf8_lossy(&output.stdout).into_owned();
        let err = String::from_utf8_lossy(&output.stderr);
        ensure!(
            output.status.success(),
            "README line {} failed ({}):\n{}\n--- stdout:\n{out}\n--- stderr:\n{err}",
            block.line,
            output.status,
            block.text
        );
        Ok(format!("{out}{err}"))
    }
}

/// The first terminal: a block run in its own process group, its output
/// (stdout and stderr) collected as it comes.
struct Terminal {
    child: Child,
    output: Arc<Mutex<String>>,
}

impl Terminal {
    fn start(block: &Block) -> anyhow::Result<Self> {
        let mut child = Command::new("bash")
            .arg("-c")
            .arg(format!("exec 2>&1\n{}", block.text))
            .current_dir(repo_root())
            .env_remove("KUBECONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .process_group(0)
            .spawn()
            .with_context(|| format!("cannot run README line {}", block.line))?;
        let output = Arc::new(Mutex::new(String::new()));
        let stdout = child.stdout.take().context("no stdout")?;
        let sink = Arc::clone(&output);
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Ok(mut out) = sink.lock() {
                    out.push_str(&line);
                    out.push('\n');
                }
            }
        });
        Ok(Self { child, output })
    }

    fn output(&self) -> String {
        self.output.lock().map(|o| o.clone()).unwrap_or_default()
    }

    /// Waits until the output shows `text`; fails if the block ends first.
    fn wait_for(&mut self, text: &str, timeout: Duration) -> anyhow::Result<()> {
        let started = Instant::now();
        let deadline = started + timeout;
        loop {
            if self.output().contains(text) {
                eprintln!(
                    "readme: terminal 1 printed {text:?} after {:.1} s",
                    started.elapsed().as_secs_f64()
                );
                return Ok(());
            }
            if let Some(status) = self.child.try_wait()? {
                bail!(
                    "it ended ({status}) before printing {text:?}:\n{}",
                    self.output()
                );
            }
            if Instant::now() > deadline {
                bail!(
                    "no {text:?} after {} s:\n{}",
                    timeout.as_secs(),
                    self.output()
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Ctrl-C: SIGINT to the whole process group, as a terminal sends it.
    fn interrupt(mut self) -> anyhow::Result<(ExitStatus, String)> {
        let group = format!("-{}", self.child.id());
        let status = Command::new("kill").args(["-INT", "--", &group]).status()?;
        ensure!(status.success(), "kill -INT {group} failed");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait()? {
                // The reader thread may still be draining the pipe.
                std::thread::sleep(Duration::from_millis(200));
                return Ok((status, self.output()));
            }
            if Instant::now() > deadline {
                bail!("still running 60 s after Ctrl-C:\n{}", self.output());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", self.child.id())])
                .status();
            let _ = self.child.wait();
        }
    }
}

/// `make run` stopped: the operator is gone and says so, and the process
/// group ended as after Ctrl-C (make itself dies of the SIGINT it got).
fn stopped(terminal: Terminal) -> anyhow::Result<String> {
    let (status, output) = terminal.interrupt()?;
    use std::os::unix::process::ExitStatusExt;
    ensure!(
        // make dies of the SIGINT (2) it got, after run.sh ended cleanly.
        status.success() || status.signal() == Some(2),
        "make run ended with {status} after Ctrl-C:\n{output}"
    );
    ensure!(
        output.contains("operator stopped; the test bed keeps running"),
        "make run did not say that the operator stopped:\n{output}"
    );
    Ok(output)
}

/// The files the walk-through writes (the README's paths).
fn remove_walk_through_files() -> anyhow::Result<()> {
    for path in [
        "/tmp/bridge.out",
        "/tmp/bridge.pid",
        "/tmp/my-laptop.log",
        "/tmp/my-laptop.pid",
        "/tmp/my-provider",
        "/tmp/custom-providers",
        "/tmp/my-values.yaml",
    ] {
        let path = Path::new(path);
        if path.is_dir() {
            std::fs::remove_dir_all(path)?;
        } else if path.exists() {
            std::fs::remove_file(path)?;
        }
    }
    Ok(())
}

/// Removes what an interrupted earlier run of this test left behind.
async fn clean_up_leftovers(client: &kube::Client) -> anyhow::Result<()> {
    remove_walk_through_files()?;
    let helm = pontoon_tests::testbed_bin("helm")?;
    let _ = Command::new(helm)
        // Its hook would wait for the mounts of an operator long gone.
        .args([
            "uninstall",
            "pontoon",
            "--namespace",
            "pontoon-system",
            "--no-hooks",
        ])
        .env("KUBECONFIG", kubeconfig_path())
        .output();
    // Without a running operator nothing would remove these finalizers.
    let gateways: Api<Gateway> = Api::namespaced(client.clone(), "shop");
    if let Ok(list) = gateways.list(&Default::default()).await {
        for gateway in list {
            drop_finalizers(&gateways, &gateway.name_any()).await?;
        }
    }
    // The README's `pontoon bridge` and its local service, if still running.
    for pid_file in ["/tmp/bridge.pid", "/tmp/my-laptop.pid"] {
        if let Ok(pid) = std::fs::read_to_string(pid_file) {
            let _ = Command::new("kill").arg(pid.trim()).status();
        }
    }
    let mounts: Api<GefyraBridgeMount> = Api::namespaced(client.clone(), "gefyra");
    let made_by_bridge = mounts
        .list(&kube::api::ListParams::default().labels("pontoon.dev/made-by=pontoon-bridge"))
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    for mount in made_by_bridge {
        drop_finalizers(&mounts, &mount.name_any()).await?;
        let _ = mounts
            .delete(&mount.name_any(), &DeleteParams::default())
            .await;
    }
    for name in ["api-mount", "my-mount", "hello-mount"] {
        if mounts.get_opt(name).await.ok().flatten().is_some() {
            drop_finalizers(&mounts, name).await?;
            let _ = mounts.delete(name, &DeleteParams::default()).await;
        }
    }
    // Mounts other tests left in their namespaces, being deleted, when their
    // operators stopped: nothing will ever uninstall them, and the chart's
    // pre-delete hook, which ends every mount of the cluster, would wait
    // for them in vain.
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let all: Api<GefyraBridgeMount> = Api::all(client.clone());
    for mount in all.list(&Default::default()).await? {
        let ns = mount.namespace().unwrap_or_default();
        let deleted = namespaces
            .get_opt(&ns)
            .await?
            .is_some_and(|n| n.metadata.deletion_timestamp.is_some());
        if deleted {
            let api: Api<GefyraBridgeMount> = Api::namespaced(client.clone(), &ns);
            drop_finalizers(&api, &mount.name_any()).await?;
        }
    }
    for ns in ["shop", "hello", "dev", "pontoon-system"] {
        let _ = namespaces.delete(ns, &DeleteParams::default()).await;
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    for ns in ["shop", "hello", "dev", "pontoon-system"] {
        while namespaces.get_opt(ns).await?.is_some() {
            ensure!(
                Instant::now() < deadline,
                "namespace {ns} left by an earlier run does not go away"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    let classes: Api<GatewayClass> = Api::all(client.clone());
    let _ = classes.delete("praxis", &DeleteParams::default()).await;
    Ok(())
}

async fn drop_finalizers<K>(api: &Api<K>, name: &str) -> anyhow::Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let patch = Patch::Merge(json!({"metadata": {"finalizers": null}}));
    api.patch(name, &PatchParams::default(), &patch).await?;
    Ok(())
}

/// Where cargo really puts `/tmp/my-provider`'s build. The README builds
/// into the crate's own `target/`; under `make test` CARGO_TARGET_DIR points
/// every build at the shared cache (so the SDK's dependencies are not built
/// again), and a `target` link there keeps the README's paths true.
fn link_shared_target_dir() -> anyhow::Result<()> {
    if let Some(shared) = std::env::var_os("CARGO_TARGET_DIR").filter(|d| !d.is_empty()) {
        std::os::unix::fs::symlink(PathBuf::from(shared), "/tmp/my-provider/target")?;
    }
    Ok(())
}

/// The grants the chart rendered from `/tmp/my-values.yaml` allow the module
/// everything it declares: the operator the chart runs would load it.
async fn chart_grants_allow_the_module(client: &kube::Client) -> anyhow::Result<()> {
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "pontoon-system");
    let grants = config_maps.get("pontoon-grants").await?;
    let text = grants
        .data
        .as_ref()
        .and_then(|d| d.get("grants.yaml"))
        .context("pontoon-grants has no grants.yaml")?;
    let file = tempfile::NamedTempFile::new()?;
    std::fs::write(file.path(), text)?;
    let grants = Grants::read(file.path())?;
    let runtime = PluginRuntime::new(Limits::default())?;
    let LoadedModule::Provider(module) = runtime.load_file(Path::new(MODULE)).await? else {
        bail!("{MODULE} is not a bridge-mount provider");
    };
    ensure!(module.metadata.name == "my-provider");
    if let Err(excess) = grants.check("my-provider", &module.metadata.scope) {
        bail!(
            "the README's grant for my-provider is short of:\n{}",
            excess.join("\n")
        );
    }
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "pontoon-system");
    let deployment = serde_json::to_string(&deployments.get("pontoon").await?)?;
    ensure!(
        deployment.contains("my-provider-wasm"),
        "the chart's Deployment does not mount ConfigMap my-provider-wasm: {deployment}"
    );
    Ok(())
}

/// The IMAGE column of `kubectl get pods -o custom-columns=POD:...,IMAGE:...`
/// (the table after its `POD` header) for the pods named `prefix*` but not
/// `except*`.
fn images<'a>(output: &'a str, prefix: &str, except: &str) -> Vec<&'a str> {
    output
        .lines()
        .skip_while(|l| !l.starts_with("POD "))
        .filter(|l| l.starts_with(prefix) && !l.starts_with(except))
        .filter_map(|l| l.split_whitespace().nth(1))
        .collect()
}

fn operator_log() -> String {
    std::fs::read_to_string(pontoon_tests::testbed_dir().join("logs/operator.log"))
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_readme_walk_through_works_step_by_step() -> anyhow::Result<()> {
    let client = pontoon_tests::client().await?;
    clean_up_leftovers(&client).await?;
    let mut readme = Readme::load()?;
    let mut shell = Shell::new()?;
    // Why the bridge section did not run here, if it did not.
    let mut bridge_skipped: Option<String> = None;

    // Terminal 1.
    let mut terminal = Terminal::start(&readme.next("make run")?)?;
    terminal
        .wait_for("The operator keeps running", MAKE_RUN_TIMEOUT)
        .context("make run")?;
    ensure!(
        terminal.output().contains("ACTIVE"),
        "make run's sample mount did not reach ACTIVE:\n{}",
        terminal.output()
    );
    // It serves mounts without the chart's policies because it says the
    // test bed is single-tenant, and says so.
    ensure!(
        operator_log()
            .contains("--single-tenant: mounts and bridges are served without an admission policy"),
        "make run's operator is not --single-tenant:\n{}",
        operator_log()
    );

    // Terminal 2: the sample mount.
    let out = shell.run(&readme.next("source .testbed/env")?)?;
    ensure!(
        out.contains("kwok-node-0") && out.contains("web-mount") && out.contains("ACTIVE"),
        "nodes and the ACTIVE sample mount are not listed:\n{out}"
    );
    let originals = images(&out, "web-", "web-gefyra-");
    let shadows = images(&out, "web-gefyra-", "-");
    ensure!(
        !originals.is_empty()
            && originals
                .iter()
                .all(|i| i.starts_with("quay.io/gefyra/carrier2:"))
            && !shadows.is_empty()
            && shadows.iter().all(|i| *i == "nginx:1.27"),
        "demo/web's pods do not all run Carrier2, or its shadow's not nginx:\n{out}"
    );

    // Work on a service on one's machine: `pontoon bridge`.
    if let Some(reason) = pontoon_tests::netns::unavailable() {
        for block in [
            "kubectl create namespace dev",
            "pontoon bridge -n dev",
            "kill -TERM $(cat /tmp/bridge.pid)",
        ] {
            readme.next(block)?;
        }
        bridge_skipped = Some(reason);
    } else {
        shell.run(&readme.next("kubectl create namespace dev")?)?;
        let out = shell.run(&readme.next("pontoon bridge -n dev")?)?;
        let pods: Vec<&str> = out.lines().filter(|l| l.contains("\"pod\"")).collect();
        ensure!(
            out.contains("127.0.0.1:9080 with x-dev: me now reach this machine")
                && pods.len() == 2
                && pods[0].contains("\"my-laptop\"")
                && pods[1].contains("api-gefyra-")
                && out.contains("ACTIVE"),
            "with the header this machine must answer, without it the shadow:\n{out}"
        );
        let out = shell.run(&readme.next("kill -TERM $(cat /tmp/bridge.pid)")?)?;
        // Left: make run's own web-mount; gone: the bridge, and the mount
        // `pontoon bridge` made (`api-deploy-…`).
        ensure!(
            !out.contains("gefyrabridge.gefyra.dev/")
                && !out.contains("api-deploy-")
                && out
                    .lines()
                    .any(|l| l.contains("\"pod\"") && l.contains("api-") && !l.contains("gefyra")),
            "after the bridge, no bridge or mount of it may be left and an original must answer:\n{out}"
        );
    }

    // A mount of one's own, and its deletion.
    let out = shell.run(&readme.next("name: api-mount")?)?;
    ensure!(
        out.contains("condition met")
            && out.contains("api-gefyra")
            && out.contains("api-nginx-gefyra-svc"),
        "api-mount did not become ACTIVE with its shadow:\n{out}"
    );
    let out = shell.run(&readme.next("delete gbridgemount api-mount")?)?;
    let restored = images(&out, "api-", "api-gefyra-");
    ensure!(
        !restored.is_empty() && restored.iter().all(|i| *i == "nginx:1.27"),
        "shop/api's pods are not restored to nginx:1.27:\n{out}"
    );

    // A bridge: the shadow answers, the developer's pod answers what matches.
    if let Some(reason) = pontoon_tests::netns::unavailable() {
        for block in [
            "name: hello-mount",
            "name: hello-bridge",
            "delete gbridgemount hello-mount",
        ] {
            readme.next(block)?;
        }
        bridge_skipped = Some(reason);
    } else {
        let out = shell.run(&readme.next("name: hello-mount")?)?;
        ensure!(
            out.contains("condition met"),
            "hello-mount did not become ACTIVE:\n{out}"
        );
        let out = shell.run(&readme.next("name: hello-bridge")?)?;
        let pods: Vec<&str> = out.lines().filter(|l| l.contains("\"pod\"")).collect();
        ensure!(
            pods.len() == 2 && pods[0].contains("hello-gefyra-") && pods[1].contains("\"laptop\""),
            "without the header the shadow must answer, with it the laptop:\n{out}"
        );
        let out = shell.run(&readme.next("delete gbridgemount hello-mount")?)?;
        ensure!(
            !out.contains("hello-bridge")
                && out.lines().any(|l| l.contains("\"pod\"")
                    && l.contains("hello-")
                    && !l.contains("gefyra")),
            "after the mount, its bridge must be gone and an original pod answer:\n{out}"
        );
    }

    // The Gateway.
    let out = shell.run(&readme.next("kind: Gateway")?)?;
    ensure!(
        out.contains("Accepted=True ResolvedRefs=True"),
        "route web is not accepted with resolved refs:\n{out}"
    );
    ensure!(
        out.contains("shop.example") && out.contains("x-env") && out.contains("prod"),
        "praxis-edge's config does not hold the route and its filter:\n{out}"
    );

    // A provider of one's own: built, checked, dropped in, used.
    shell.run(&readme.next("make new-provider")?)?;
    link_shared_target_dir()?;
    let out = shell.run(&readme.next("pontoon conformance")?)?;
    ensure!(
        out.contains(" 0 failed, 3 skipped"),
        "my-provider does not pass conformance as it is (only the bridge checks skipped):\n{out}"
    );
    shell.run(&readme.next("/tmp/custom-providers/")?)?;
    ensure!(Path::new("/tmp/custom-providers/my_provider.wasm").is_file());
    stopped(terminal).context("the first make run")?;
    let mut terminal = Terminal::start(&readme.next("PONTOON_CUSTOM_PROVIDERS=")?)?;
    terminal
        .wait_for("The operator keeps running", MAKE_RUN_TIMEOUT)
        .context("make run with the custom provider")?;
    let log = operator_log();
    ensure!(
        log.contains(r#""my-provider""#) && log.contains("rejected=0"),
        "the operator did not load my-provider:\n{log}"
    );
    let out = shell.run(&readme.next("provider: my-provider")?)?;
    ensure!(
        out.contains("condition met") && out.contains("-template"),
        "my-mount did not become ACTIVE with its ConfigMap:\n{out}"
    );
    ensure!(
        out.contains(r#"gefyrabridgemount.gefyra.dev "my-mount" deleted"#),
        "my-mount was not deleted:\n{out}"
    );

    // Helm.
    let out = shell.run(&readme.next("helm install")?)?;
    ensure!(
        out.contains("successfully rolled out"),
        "the chart's operator Deployment did not roll out:\n{out}"
    );
    // The chart's pre-upgrade hook checks that no mount would be stranded:
    // its pod is run here as a kubelet would.
    let work = tempfile::tempdir()?;
    let hook = pontoon_tests::kubelet::run_pods_in_background(
        "pontoon-system",
        pontoon_tests::kubelet::CHECK_UPGRADE_PODS,
        Path::new(env!("CARGO_BIN_EXE_pontoon")),
        work.path().to_path_buf(),
        Duration::from_secs(300),
    );
    let out = tokio::task::block_in_place(|| shell.run(&readme.next("helm upgrade")?));
    let out = match out {
        Ok(out) => out,
        Err(err) => {
            hook.abort();
            return Err(err);
        }
    };
    let hook = hook.await??;
    ensure!(
        hook.last()
            .is_some_and(|o| o.contains("none outside the namespaces mounts may target")),
        "the pre-upgrade hook did not pass: {hook:?}"
    );
    ensure!(
        out.contains("successfully rolled out"),
        "the upgraded Deployment did not roll out:\n{out}"
    );
    chart_grants_allow_the_module(&client).await?;

    // Clean up, while the operator runs; then Ctrl-C.
    // The chart's pre-delete hook ends web-mount: its one pod is run here
    // as a kubelet would (the test bed's nodes run no containers).
    let work = tempfile::tempdir()?;
    let hook = pontoon_tests::kubelet::run_pods_in_background(
        "pontoon-system",
        pontoon_tests::kubelet::TERMINATE_MOUNTS_PODS,
        Path::new(env!("CARGO_BIN_EXE_pontoon")),
        work.path().to_path_buf(),
        Duration::from_secs(300),
    );
    let out = tokio::task::block_in_place(|| shell.run(&readme.next("helm uninstall")?));
    let out = match out {
        Ok(out) => out,
        Err(err) => {
            hook.abort();
            let all: Api<GefyraBridgeMount> = Api::all(client.clone());
            let left: Vec<String> = all
                .list(&Default::default())
                .await?
                .iter()
                .map(|m| format!("{} {:?}", m.qualified_name(), m.fields.state))
                .collect();
            return Err(err.context(format!("mounts in the cluster: {left:?}")));
        }
    };
    let hook = hook.await??;
    ensure!(
        hook.last()
            .is_some_and(|o| o.contains("terminating gefyra/web-mount")
                && o.contains("1 mount(s) terminated, every target restored")),
        "the pre-delete hook did not end web-mount:\n{hook:?}"
    );
    ensure!(
        out.contains("No resources found in gefyra namespace"),
        "a mount is left after helm uninstall:\n{out}"
    );
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for ns in ["shop", "demo", "hello", "dev", "pontoon-system"] {
        ensure!(
            namespaces.get_opt(ns).await?.is_none(),
            "namespace {ns} is still there after the README's clean-up"
        );
    }
    stopped(terminal).context("make run with the custom provider")?;

    // The reference sections' commands for one's own cluster.
    shell.run(&readme.next("pontoon crds | kubectl apply --server-side")?)?;
    shell.run(&readme.next("pontoon crds --set gateway-api")?)?;
    let out = shell.run(&readme.next("make testbed-up")?)?;
    ensure!(out.contains("kwok-node-1"), "get nodes:\n{out}");

    let skipped = readme.finish()?;
    remove_walk_through_files()?;
    eprintln!("README blocks not run here, each with its reason in the README:");
    for block in skipped {
        eprintln!("  {block}");
    }
    if let Some(reason) = bridge_skipped {
        return pontoon_tests::skip::skip(
            "the README's bridge section (the rest of the walk-through ran)",
            &reason,
        );
    }
    Ok(())
}
