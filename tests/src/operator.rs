//! An operator process (`pontoon run`) started by a test, serving only the
//! mounts of the test's own namespace, killed when dropped.

use std::{
    fs::File,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
};

use anyhow::Context;

use crate::{kubeconfig_path, providers};

pub struct Operator {
    binary: PathBuf,
    args: Vec<String>,
    child: Option<Child>,
    log: PathBuf,
}

impl Operator {
    /// Starts `binary run` with operator namespace `namespace`, serving the
    /// mounts of `namespace` only (tests run in parallel, each with its own
    /// operator), the bundled providers and a module cache shared by the test
    /// run; `extra` are further flags.
    pub fn start(binary: &Path, namespace: &str, extra: &[&str]) -> anyhow::Result<Self> {
        let providers = providers::bundled_providers_dir()?;
        Self::start_with_providers(binary, namespace, &providers, extra)
    }

    pub fn start_with_providers(
        binary: &Path,
        namespace: &str,
        providers: &Path,
        extra: &[&str],
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
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let logs = providers::target_dir().join("operator-logs");
        std::fs::create_dir_all(&logs)?;
        let mut operator = Self {
            binary: binary.into(),
            args,
            child: None,
            log: logs.join(format!("{namespace}.log")),
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
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.kill();
    }
}
