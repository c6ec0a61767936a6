//! Figures for the benchmark examples (`make bench-*`).

use std::time::Duration;

use anyhow::Context as _;

/// The `p`th percentile of `samples` in seconds, by nearest rank: with 10
/// samples, p50 is the 5th and p99 the 10th. NaN without samples.
pub fn percentile(samples: &[Duration], p: usize) -> f64 {
    let mut sorted: Vec<f64> = samples.iter().map(Duration::as_secs_f64).collect();
    sorted.sort_by(f64::total_cmp);
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (p * sorted.len()).div_ceil(100).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// A memory figure of a process in KiB from /proc/PID/status: `VmRSS:`
/// (resident now) or `VmHWM:` (peak resident).
pub fn memory_kib(pid: u32, field: &str) -> anyhow::Result<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))?
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .with_context(|| format!("no {field} in /proc/{pid}/status"))
}

/// The release operator a benchmark measures (`PONTOON_BIN`, default
/// `release/pontoon` of the shared target directory), started with the
/// bundled modules of `dist/providers` and a module cache, logging warnings
/// to `<bench>-operator.log`.
pub struct BenchOperator {
    pub child: std::process::Child,
    pub log: std::path::PathBuf,
}

impl BenchOperator {
    /// Starts `pontoon run ARGS...` for `make <bench>`; fails, saying what to
    /// do, when `module` (e.g. `carrier2mount`) was not built or the
    /// operator exits at once.
    pub async fn start(bench: &str, module: &str, args: &[&str]) -> anyhow::Result<Self> {
        use crate::{kubeconfig_path, providers::target_dir, repo_root};
        use std::process::{Command, Stdio};

        let binary = std::env::var_os("PONTOON_BIN")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| target_dir().join("release/pontoon"));
        let providers = repo_root().join("dist/providers");
        anyhow::ensure!(
            providers.join(format!("{module}.wasm")).is_file(),
            "{} has no {module}.wasm; run `make providers`",
            providers.display()
        );
        let log = target_dir().join(format!("{bench}-operator.log"));
        let mut child = Command::new(&binary)
            .arg("run")
            .args(args)
            .arg("--kubeconfig")
            .arg(kubeconfig_path())
            .arg("--providers")
            .arg(&providers)
            .arg("--cache-dir")
            .arg(target_dir().join("pontoon-module-cache"))
            .args(["--metrics-addr", "127.0.0.1:0"])
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .with_context(|| {
                format!("cannot start {} (make {bench} builds it)", binary.display())
            })?;
        tokio::time::sleep(Duration::from_millis(500)).await;
        if let Some(status) = child.try_wait()? {
            anyhow::bail!("the operator exited ({status}); see {}", log.display());
        }
        println!(
            "{bench}: operator {} (pid {}), log {}",
            binary.display(),
            child.id(),
            log.display()
        );
        Ok(Self { child, log })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Stops it (SIGKILL: the figures are taken) and reaps it.
    pub fn kill(&mut self) -> anyhow::Result<()> {
        self.child.kill()?;
        self.child.wait()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let samples: Vec<Duration> = (1..=10).rev().map(Duration::from_secs).collect();
        assert_eq!(percentile(&samples, 50), 5.0);
        assert_eq!(percentile(&samples, 99), 10.0);
        assert!(percentile(&[], 50).is_nan());
    }
}
