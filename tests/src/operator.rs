//! An operator process (`pontoon run`) started by a test, serving only the
//! mounts of the test's own namespace, killed when dropped.

use std::{
    fs::File,
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::Context;

use crate::{kubeconfig_path, providers};

pub struct Operator {
    binary: PathBuf,
    args: Vec<String>,
    child: Option<Child>,
    log: PathBuf,
    /// Environment of the next start on top of the test's own.
    env: Vec<(String, String)>,
}

impl Operator {
    /// Starts `binary run` with operator namespace `namespace`, serving the
    /// mounts of `namespace` only (tests run in parallel, each with its own
    /// operator), single-tenant, the bundled providers and a module cache
    /// shared by the test run; `extra` are further flags.
    pub fn start(binary: &Path, namespace: &str, extra: &[&str]) -> anyhow::Result<Self> {
        let providers = providers::bundled_providers_dir()?;
        Self::start_with_providers(binary, namespace, &providers, extra)
    }

    /// [`Self::start`] as a second replica beside another operator of the
    /// same namespace: `instance` names its log.
    pub fn start_replica(
        binary: &Path,
        namespace: &str,
        instance: &str,
        extra: &[&str],
    ) -> anyhow::Result<Self> {
        let providers = providers::bundled_providers_dir()?;
        Self::start_logged(
            binary,
            namespace,
            &providers,
            extra,
            &format!("{namespace}-{instance}"),
        )
    }

    pub fn start_with_providers(
        binary: &Path,
        namespace: &str,
        providers: &Path,
        extra: &[&str],
    ) -> anyhow::Result<Self> {
        Self::start_logged(binary, namespace, providers, extra, namespace)
    }

    fn start_logged(
        binary: &Path,
        namespace: &str,
        providers: &Path,
        extra: &[&str],
        log_name: &str,
    ) -> anyhow::Result<Self> {
        let mut args: Vec<String> = vec![
            "run".into(),
            "--kubeconfig".into(),
            kubeconfig_path().display().to_string(),
            "--namespace".into(),
            namespace.into(),
            "--watch-namespace".into(),
            namespace.into(),
            "--providers".into(),
            providers.display().to_string(),
            "--cache-dir".into(),
            providers::module_cache_dir().display().to_string(),
            // Tests run operators side by side: each on a free port.
            "--metrics-addr".into(),
            "127.0.0.1:0".into(),
            // No admission policy guards the test bed's mounts (a test that
            // wants one passes `--single-tenant=false` after this).
            "--single-tenant".into(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let logs = providers::target_dir().join("operator-logs");
        std::fs::create_dir_all(&logs)?;
        let mut operator = Self {
            binary: binary.into(),
            args,
            child: None,
            log: logs.join(format!("{log_name}.log")),
            env: Vec::new(),
        };
        operator.spawn()?;
        Ok(operator)
    }

    fn spawn(&mut self) -> anyhow::Result<()> {
        let log = File::options()
            .create(true)
            .append(true)
            .open(&self.log)
            .with_context(|| format!("cannot open {}", self.log.display()))?;
        let child = Command::new(&self.binary)
            .args(&self.args)
            .env("RUST_LOG", "info,pontoon=debug")
            .env("NO_COLOR", "1")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("cannot start {}", self.binary.display()))?;
        self.child = Some(child);
        Ok(())
    }

    /// Kills the process with SIGKILL, as a crash would: nothing is finished.
    pub fn kill(&mut self) -> anyhow::Result<()> {
        if let Some(mut child) = self.child.take() {
            child.kill()?;
            child.wait()?;
        }
        Ok(())
    }

    /// Asks the operator to stop (SIGTERM, as Kubernetes does) and waits up
    /// to `timeout` for it; returns its exit status.
    pub fn terminate(
        &mut self,
        timeout: std::time::Duration,
    ) -> anyhow::Result<std::process::ExitStatus> {
        let mut child = self.child.take().context("the operator is not running")?;
        let signalled = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()?;
        anyhow::ensure!(signalled.success(), "kill -TERM failed");
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if let Some(status) = child.try_wait()? {
                return Ok(status);
            }
            if std::time::Instant::now() > deadline {
                child.kill()?;
                child.wait()?;
                anyhow::bail!("the operator did not stop within {timeout:?} of SIGTERM");
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// The running process's id (`None` once it was killed or exited and
    /// was waited for).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Sends `signal` (`STOP`, `CONT`, ...) to the process, as `kill -<signal>`.
    pub fn signal(&self, signal: &str) -> anyhow::Result<()> {
        let pid = self.pid().context("the operator is not running")?;
        let sent = Command::new("kill")
            .args([format!("-{signal}"), pid.to_string()])
            .status()?;
        anyhow::ensure!(sent.success(), "kill -{signal} {pid} failed");
        Ok(())
    }

    /// Waits up to `timeout` for the process to exit on its own; its status,
    /// or `None` if it still runs.
    pub fn wait_exit(
        &mut self,
        timeout: Duration,
    ) -> anyhow::Result<Option<std::process::ExitStatus>> {
        let child = self.child.as_mut().context("the operator is not running")?;
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = child.try_wait()? {
                return Ok(Some(status));
            }
            if Instant::now() > deadline {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Sets (`Some`) or removes (`None`) an environment variable for the
    /// next start ([`Self::restart`]).
    pub fn set_env(&mut self, key: &str, value: Option<&str>) {
        self.env.retain(|(k, _)| k != key);
        if let Some(value) = value {
            self.env.push((key.into(), value.into()));
        }
    }

    /// Whether the process has exited (it is then waited for), with its
    /// status; `None` while it runs or when it was never started.
    pub fn exited(&mut self) -> anyhow::Result<Option<std::process::ExitStatus>> {
        let Some(child) = self.child.as_mut() else {
            return Ok(None);
        };
        let status = child.try_wait()?;
        if status.is_some() {
            self.child = None;
        }
        Ok(status)
    }

    /// Starts the operator again with the same flags.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.kill()?;
        self.spawn()
    }

    /// The operator's log so far (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last `lines` lines of the log.
    pub fn log_tail(&self, lines: usize) -> String {
        let log = self.log();
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// Where this run of the operator serves `/healthz`, `/readyz` and
    /// `/metrics` (from its log), waiting up to `timeout` for it to bind.
    pub fn metrics_addr(&self, timeout: Duration) -> anyhow::Result<SocketAddr> {
        const LINE: &str = "serving /healthz, /readyz and /metrics";
        let deadline = Instant::now() + timeout;
        loop {
            let log = self.log();
            // The log is appended across restarts: the last run's line.
            let found = log
                .lines()
                .rev()
                .find(|l| l.contains(LINE))
                .and_then(|l| l.split("addr=").nth(1))
                .and_then(|a| a.split_whitespace().next())
                .and_then(|a| a.parse().ok());
            if let Some(addr) = found {
                return Ok(addr);
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "the operator did not log its metrics address within {timeout:?}:\n{}",
                self.log_tail(20)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `GET path` on the operator's metrics port: status and body.
    pub async fn get(&self, path: &str) -> anyhow::Result<(u16, String)> {
        http_get(self.metrics_addr(Duration::from_secs(30))?, path).await
    }
}

/// A plain HTTP/1.0 GET: status code and body.
pub async fn http_get(addr: SocketAddr, path: &str) -> anyhow::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .with_context(|| format!("cannot connect to {addr}"))?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .with_context(|| format!("no HTTP response from {addr}: {response:?}"))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("no status line: {head:?}"))?;
    Ok((status, body.to_string()))
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.kill();
    }
}

/// The value of `metric` (its name and labels exactly as exposed) in a
/// Prometheus text exposition.
pub fn sample(metrics: &str, metric: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(metric)?.trim().parse().ok())
}
