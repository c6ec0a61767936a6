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
    /// Where it serves `/metrics`.
    pub metrics_addr: std::net::SocketAddr,
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
        // A port free now (the operator binds it a moment later): the
        // bench reads the operator's metrics there.
        let metrics_addr = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
        let mut child = Command::new(&binary)
            .arg("run")
            // The test bed is one tenant's: no admission policy to wait for.
            .arg("--single-tenant")
            .args(args)
            .arg("--kubeconfig")
            .arg(kubeconfig_path())
            .arg("--providers")
            .arg(&providers)
            .arg("--cache-dir")
            .arg(target_dir().join("pontoon-module-cache"))
            .arg("--metrics-addr")
            .arg(metrics_addr.to_string())
            // `BENCH_OPERATOR_LOG=info,pontoon::plugins=debug` times every
            // provider and cluster call in the operator's log.
            .env(
                "RUST_LOG",
                std::env::var("BENCH_OPERATOR_LOG").unwrap_or_else(|_| "warn".into()),
            )
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
        Ok(Self {
            child,
            log,
            metrics_addr,
        })
    }

    /// Its Prometheus exposition, as scraped now.
    pub fn metrics(&self) -> anyhow::Result<Metrics> {
        use std::io::{Read, Write};
        let mut stream =
            std::net::TcpStream::connect_timeout(&self.metrics_addr, Duration::from_secs(5))?;
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        stream.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")?;
        let mut text = String::new();
        stream.read_to_string(&mut text)?;
        let (head, body) = text
            .split_once("\r\n\r\n")
            .context("no HTTP answer from the operator's /metrics")?;
        anyhow::ensure!(
            head.starts_with("HTTP/1.1 200") || head.starts_with("HTTP/1.0 200"),
            "/metrics answered {}",
            head.lines().next().unwrap_or_default()
        );
        Ok(Metrics(body.to_string()))
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

/// A benchmark that fails half-way leaves no operator behind: one would keep
/// serving (and fighting over) the test bed's mounts.
impl Drop for BenchOperator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A scrape of an operator's metrics.
pub struct Metrics(pub String);

impl Metrics {
    /// The sum of every sample of `name` whose labels contain each of
    /// `labels` (e.g. `module="carrier2mount"`).
    pub fn sum(&self, name: &str, labels: &[&str]) -> f64 {
        self.samples(name)
            .filter(|(rest, _)| labels.iter().all(|want| rest.contains(want)))
            .map(|(_, value)| value)
            .sum()
    }

    /// Every sample of `name`: its labels as written (`a="x",b="y"}`, empty
    /// without labels) and its value.
    fn samples<'a>(&'a self, name: &'a str) -> impl Iterator<Item = (&'a str, f64)> + 'a {
        self.0
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(move |l| {
                let (series, value) = l.rsplit_once(' ')?;
                let (metric, labels) = series.split_once('{').unwrap_or((series, ""));
                (metric == name).then(|| Some((labels, value.parse::<f64>().ok()?)))?
            })
    }

    /// The API server's own metrics (`/metrics`), as the test bed's admin
    /// reads them.
    pub async fn of_api_server(client: &kube::Client) -> anyhow::Result<Self> {
        let request = http::Request::get("/metrics").body(Vec::new())?;
        Ok(Self(client.request_text(request).await?))
    }

    /// How much each series of counter `name` grew since `before`, summed
    /// by the values of the labels `keys` (a missing label counts as ""),
    /// the most first; series that did not grow are left out.
    pub fn growth_by(
        &self,
        before: &Metrics,
        name: &str,
        keys: &[&str],
    ) -> Vec<(Vec<String>, f64)> {
        let mut by_key = std::collections::BTreeMap::<Vec<String>, f64>::new();
        for (sign, scrape) in [(1.0, self), (-1.0, before)] {
            for (labels, value) in scrape.samples(name) {
                let key = keys.iter().map(|k| label(labels, k)).collect();
                *by_key.entry(key).or_default() += sign * value;
            }
        }
        let mut rows: Vec<_> = by_key.into_iter().filter(|(_, v)| *v > 0.0).collect();
        rows.sort_by(|a, b| b.1.total_cmp(&a.1));
        rows
    }

    /// How much `name` (summed as [`Self::sum`]) grew since `before`.
    pub fn since(&self, before: &Metrics, name: &str, labels: &[&str]) -> f64 {
        self.sum(name, labels) - before.sum(name, labels)
    }
}

/// The value of label `key` in a series' labels (`a="x",b="y"}`), or "".
fn label(labels: &str, key: &str) -> String {
    labels
        .trim_end_matches('}')
        .split(',')
        .filter_map(|pair| pair.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v.trim_matches('"').to_string())
        .unwrap_or_default()
}

/// The machine's CPU time so far, in clock ticks: (busy, total), from the
/// first line of /proc/stat (busy: all but idle and iowait).
pub fn machine_cpu() -> anyhow::Result<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat")?;
    let ticks: Vec<u64> = stat
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("cpu "))
        .context("no cpu line in /proc/stat")?
        .split_whitespace()
        .filter_map(|v| v.parse().ok())
        .collect();
    anyhow::ensure!(ticks.len() >= 5, "short cpu line in /proc/stat");
    let total: u64 = ticks.iter().sum();
    Ok((total - ticks[3] - ticks[4], total))
}

/// CPU time of every process on the machine, in clock ticks, by command
/// name: its own and that of its children it has reaped (so a command that
/// forks one process a request, as the test bed's kwok does for each exec,
/// is charged with them). A process that ended before the later snapshot
/// counts only through the parent that reaped it.
#[derive(Debug, Clone, Default)]
pub struct CpuByCommand(std::collections::BTreeMap<u32, (String, u64)>);

impl CpuByCommand {
    pub fn now() -> Self {
        let mut by_pid = std::collections::BTreeMap::new();
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return Self(by_pid);
        };
        for entry in dir.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            if let Some(ticks) = ProcessTicks::parse(&stat) {
                by_pid.insert(pid, (ticks.command, ticks.own + ticks.reaped));
            }
        }
        Self(by_pid)
    }

    /// CPU seconds since `earlier` by command name, the most first.
    pub fn since(&self, earlier: &Self, ticks_per_second: f64) -> Vec<(String, f64)> {
        let mut by_command = std::collections::BTreeMap::<String, u64>::new();
        for (pid, (command, ticks)) in &self.0 {
            let before = earlier
                .0
                .get(pid)
                .filter(|(c, _)| c == command)
                .map_or(0, |(_, t)| *t);
            *by_command.entry(command.clone()).or_default() += ticks.saturating_sub(before);
        }
        let mut rows: Vec<(String, f64)> = by_command
            .into_iter()
            .filter(|(_, ticks)| *ticks > 0)
            .map(|(c, ticks)| (c, ticks as f64 / ticks_per_second))
            .collect();
        rows.sort_by(|a, b| b.1.total_cmp(&a.1));
        rows
    }
}

/// A process's CPU time in clock ticks, from its /proc/PID/stat line.
#[derive(Debug, PartialEq, Eq)]
pub struct ProcessTicks {
    pub command: String,
    /// utime + stime: its own.
    pub own: u64,
    /// cutime + cstime: that of the children it has reaped.
    pub reaped: u64,
}

impl ProcessTicks {
    pub fn parse(stat: &str) -> Option<Self> {
        // The command (which may hold spaces and parentheses) ends at the last `)`.
        let (head, rest) = stat.rsplit_once(')')?;
        let command = head.split_once('(')?.1.to_string();
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // utime, stime, cutime, cstime: fields 14-17 of stat, 11-14 after `)`.
        let field = |i: usize| fields.get(i).and_then(|v| v.parse::<u64>().ok());
        Some(Self {
            command,
            own: field(11)? + field(12)?,
            reaped: field(13)? + field(14)?,
        })
    }

    /// Those of the process `pid` now.
    pub fn of(pid: u32) -> anyhow::Result<Self> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
        Self::parse(&stat).with_context(|| format!("unreadable /proc/{pid}/stat: {stat}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_give_command_and_all_cpu_ticks() {
        let line = "4242 (kube apiserver) S 1 2 3 0 -1 4194560 100 0 0 0 700 300 20 5 20 0 12 0";
        assert_eq!(
            ProcessTicks::parse(line),
            Some(ProcessTicks {
                command: "kube apiserver".to_string(),
                own: 1000,
                reaped: 25
            })
        );
        assert_eq!(ProcessTicks::parse("4242 (short) S 1"), None);
    }

    #[test]
    fn counters_grow_by_label_values() {
        let before = Metrics(
            "# HELP x\nreq_total{verb=\"GET\",resource=\"pods\",code=\"200\"} 5\n".to_string(),
        );
        let after = Metrics(
            [
                "req_total{verb=\"GET\",resource=\"pods\",code=\"200\"} 7",
                "req_total{verb=\"GET\",resource=\"pods\",code=\"404\"} 1",
                "req_total{verb=\"PATCH\",resource=\"pods\",code=\"200\"} 3",
                "req_total{verb=\"LIST\",resource=\"events\",code=\"200\"} 0",
                "other_total{verb=\"GET\"} 9",
            ]
            .join("\n"),
        );
        assert_eq!(
            after.growth_by(&before, "req_total", &["verb", "resource", "subresource"]),
            vec![
                (vec!["GET".into(), "pods".into(), "".into()], 3.0),
                (vec!["PATCH".into(), "pods".into(), "".into()], 3.0),
            ]
        );
    }

    #[test]
    fn nearest_rank() {
        let samples: Vec<Duration> = (1..=10).rev().map(Duration::from_secs).collect();
        assert_eq!(percentile(&samples, 50), 5.0);
        assert_eq!(percentile(&samples, 99), 10.0);
        assert!(percentile(&[], 50).is_nan());
    }

    #[test]
    fn metric_sums_filter_by_name_and_labels() {
        let m = Metrics(
            "# TYPE x counter\n\
             pontoon_provider_call_seconds_sum{module=\"a\",step=\"install\"} 1.5\n\
             pontoon_provider_call_seconds_sum{module=\"a\",step=\"ready\"} 0.5\n\
             pontoon_provider_call_seconds_sum{module=\"b\",step=\"ready\"} 7\n\
             pontoon_provider_call_seconds_count{module=\"a\",step=\"ready\"} 3\n"
                .into(),
        );
        assert_eq!(
            m.sum("pontoon_provider_call_seconds_sum", &[r#"module="a""#]),
            2.0
        );
        assert_eq!(m.sum("pontoon_provider_call_seconds_count", &[]), 3.0);
        assert_eq!(m.sum("nothing", &[]), 0.0);
    }
}
