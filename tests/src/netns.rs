//! A private network namespace for traffic tests.
//!
//! The API server refuses loopback addresses in EndpointSlices, so backends
//! cannot sit on 127.0.0.x behind a real Service. Instead a test makes a
//! network namespace of its own where the pod CIDR (10.244.0.0/16) is local
//! (on `lo`), starts backends on the addresses the test bed gave its pods and
//! a proxy in front of them, and sends requests there. No traffic leaves the
//! namespace, and parallel tests never see each other's.
//!
//! ```no_run
//! # fn main() -> anyhow::Result<()> {
//! use pontoon_tests::netns::{self, NetNs};
//! if let Some(reason) = netns::unavailable() {
//!     return pontoon_tests::skip!("{reason}"); // not root, or a tool is missing
//! }
//! let mut ns = NetNs::create("traffic")?;
//! ns.start_echo_backend("web-0", &["10.244.0.7:8080".parse()?])?;
//! let response = ns.get("http://10.244.0.7:8080/hello")?;
//! assert_eq!(response.json()?["name"], "web-0");
//! # Ok(()) }
//! ```
//!
//! Made with `unshare --net` (a holder process keeps the namespace; it ends
//! when its stdin closes), entered with `nsenter --net=/proc/PID/ns/net`.
//! Needs root and `unshare`, `nsenter`, `ip` and `curl` (scripts/deps.sh):
//! a test asks [`unavailable`] first and skips ([`crate::skip!`]) with its
//! reason; without them [`NetNs::create`] fails, so a test that forgot to
//! ask does not pass without having run. Dropping the
//! [`NetNs`] kills every process started in it; the namespace goes with the
//! last of them. Each process's output is logged under the cargo target
//! directory, `netns-logs/<namespace>/<label>.log`, for a day.

use std::{
    ffi::OsStr,
    fs::File,
    io::{BufRead, BufReader, Read},
    net::{IpAddr, Ipv4Addr, SocketAddr},
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::{Child, ChildStdin, Command, ExitStatus, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use rand::distr::{Alphanumeric, SampleString};

use crate::{praxis, providers, testbed_bin};

/// The test bed's pod CIDR (up.sh): every address in it is local in the namespace.
pub const POD_CIDR: &str = "10.244.0.0/16";
/// The test bed's Service CIDR (up.sh): routed to `lo` in the namespace.
pub const SERVICE_CIDR: &str = "10.96.0.0/16";

/// How long a started process may take to listen.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// What the holder runs in the new namespace: `lo` up with the pod CIDR on
/// it and a route for the Service CIDR, `ready`, then it waits for the end
/// of its stdin (closed by [`NetNs`]'s drop, or by the test process dying).
const HOLDER_SCRIPT: &str = r#"ip link set lo up && ip addr add "$1" dev lo && ip route add "$2" dev lo || exit 1
echo ready
read -r line
"#;

const TOOLS: [&str; 4] = ["unshare", "nsenter", "ip", "curl"];

/// A private network namespace with the processes started in it.
pub struct NetNs {
    name: String,
    holder: Child,
    holder_stdin: Option<ChildStdin>,
    net: PathBuf,
    logs: PathBuf,
    processes: Vec<Process>,
}

struct Process {
    label: String,
    child: Option<Child>,
    status: Option<ExitStatus>,
    log: PathBuf,
}

/// A process started in a [`NetNs`] (an index into its processes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessId(usize);

/// Why this machine cannot make network namespaces for tests, if it cannot:
/// not root, or one of `unshare`, `nsenter`, `ip`, `curl` missing.
pub fn unavailable() -> Option<String> {
    if !is_root() {
        return Some("network namespaces need root, and the tests do not run as root".into());
    }
    TOOLS
        .iter()
        .find(|tool| !on_path(tool))
        .map(|tool| format!("`{tool}` is not installed (scripts/deps.sh installs what is missing)"))
}

fn is_root() -> bool {
    // The effective uid, the second field of `Uid:`.
    std::fs::read_to_string("/proc/self/status").is_ok_and(|status| {
        status
            .lines()
            .find_map(|line| line.strip_prefix("Uid:"))
            .and_then(|ids| ids.split_whitespace().nth(1))
            == Some("0")
    })
}

fn on_path(tool: &str) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .any(|dir| dir.join(tool).is_file())
}

impl NetNs {
    /// Makes a network namespace named `<prefix>-<random>` (the name only
    /// labels its logs). An error when this machine cannot ([`unavailable`]):
    /// a test asks that first and skips.
    pub fn create(prefix: &str) -> anyhow::Result<Self> {
        if let Some(reason) = unavailable() {
            bail!("cannot make a network namespace here: {reason}");
        }
        let suffix = Alphanumeric
            .sample_string(&mut rand::rng(), 6)
            .to_lowercase();
        let name = format!("{prefix}-{suffix}");
        let mut holder = Command::new("unshare")
            .args(["--net", "--", "sh", "-c", HOLDER_SCRIPT, "netns-holder"])
            .args([POD_CIDR, SERVICE_CIDR])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("cannot run `unshare --net`")?;
        let mut first_line = String::new();
        if let Some(stdout) = holder.stdout.take() {
            BufReader::new(stdout).read_line(&mut first_line)?;
        }
        if first_line.trim() != "ready" {
            let _ = holder.kill();
            let _ = holder.wait();
            let mut stderr = String::new();
            if let Some(mut err) = holder.stderr.take() {
                let _ = err.read_to_string(&mut stderr);
            }
            bail!(
                "cannot set up a network namespace with `unshare --net` and `ip`: {}",
                stderr.trim()
            );
        }
        let net = PathBuf::from(format!("/proc/{}/ns/net", holder.id()));
        let all_logs = providers::target_dir().join("netns-logs");
        remove_old_logs(&all_logs);
        let logs = all_logs.join(&name);
        std::fs::create_dir_all(&logs)
            .with_context(|| format!("cannot create {}", logs.display()))?;
        Ok(Self {
            name,
            holder_stdin: holder.stdin.take(),
            holder,
            net,
            logs,
            processes: Vec::new(),
        })
    }

    /// The namespace's name (`<prefix>-<random>`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The directory holding the logs of the processes started in it.
    pub fn logs_dir(&self) -> &Path {
        &self.logs
    }

    /// A command that runs `program` in the namespace (`nsenter --net=...`).
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut command = Command::new("nsenter");
        command
            .arg(format!("--net={}", self.net.display()))
            .arg("--")
            .arg(program);
        command
    }

    /// Starts `command` (made by [`NetNs::command`]) in the background, its
    /// stdout and stderr going to the log `<label>.log`; it is killed when
    /// the namespace is dropped, or by [`NetNs::stop`].
    pub fn spawn(&mut self, label: &str, mut command: Command) -> anyhow::Result<ProcessId> {
        let net_arg = format!("--net={}", self.net.display());
        if command.get_program() != "nsenter"
            || command.get_args().next() != Some(OsStr::new(&net_arg))
        {
            bail!("NetNs::spawn runs only commands made by NetNs::command ({command:?})");
        }
        let mut log = self.logs.join(format!("{label}.log"));
        if log.exists() {
            log = self
                .logs
                .join(format!("{label}-{}.log", self.processes.len()));
        }
        let file =
            File::create(&log).with_context(|| format!("cannot create {}", log.display()))?;
        let child = command
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            // Its own process group: stopping it stops whatever it started.
            .process_group(0)
            .spawn()
            .with_context(|| format!("cannot start {label}: {command:?}"))?;
        self.processes.push(Process {
            label: label.into(),
            child: Some(child),
            status: None,
            log,
        });
        Ok(ProcessId(self.processes.len() - 1))
    }

    fn process(&self, id: ProcessId) -> anyhow::Result<&Process> {
        self.processes
            .get(id.0)
            .context("no such process in this namespace")
    }

    /// What the process wrote to stdout and stderr so far.
    pub fn log(&self, id: ProcessId) -> String {
        self.process(id)
            .ok()
            .and_then(|p| std::fs::read_to_string(&p.log).ok())
            .unwrap_or_default()
    }

    /// The exit status if the process has ended.
    pub fn exit_status(&mut self, id: ProcessId) -> anyhow::Result<Option<ExitStatus>> {
        let process = self
            .processes
            .get_mut(id.0)
            .context("no such process in this namespace")?;
        if process.status.is_none()
            && let Some(child) = process.child.as_mut()
        {
            process.status = child.try_wait()?;
        }
        Ok(process.status)
    }

    /// Stops the process (SIGTERM, SIGKILL after 5 s) and returns its exit status.
    pub fn stop(&mut self, id: ProcessId) -> anyhow::Result<ExitStatus> {
        let process = self
            .processes
            .get_mut(id.0)
            .context("no such process in this namespace")?;
        if let Some(status) = process.status {
            return Ok(status);
        }
        let mut child = process.child.take().context("the process is gone")?;
        signal_group(&child, "TERM");
        let deadline = Instant::now() + Duration::from_secs(5);
        let status = loop {
            if let Some(status) = child.try_wait()? {
                break status;
            }
            if Instant::now() > deadline {
                signal_group(&child, "KILL");
                break child.wait()?;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        process.status = Some(status);
        Ok(status)
    }

    /// Polls `ready` until it holds; fails with the process's log if the
    /// process ends first or `timeout` passes.
    pub fn wait_until(
        &mut self,
        id: ProcessId,
        what: &str,
        timeout: Duration,
        mut ready: impl FnMut(&Self) -> bool,
    ) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            if ready(self) {
                return Ok(());
            }
            let label = self.process(id)?.label.clone();
            if let Some(status) = self.exit_status(id)? {
                bail!(
                    "{label} ended ({status}) before {what}; its log:\n{}",
                    self.log(id)
                );
            }
            if Instant::now() > deadline {
                bail!(
                    "{label} did not come to {what} within {timeout:?}; its log:\n{}",
                    self.log(id)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Whether something in the namespace accepts TCP connections on `addr`.
    pub fn accepts(&self, addr: SocketAddr) -> bool {
        let addr = connectable(addr);
        self.command("bash")
            .args(["-c", "exec 3<>\"/dev/tcp/$0/$1\""])
            .arg(addr.ip().to_string())
            .arg(addr.port().to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    }

    /// Starts the test bed's echo backend (tests/testbed/echo) listening on
    /// every address in `listen`, answering with `name`; returns once it listens.
    pub fn start_echo_backend(
        &mut self,
        name: &str,
        listen: &[SocketAddr],
    ) -> anyhow::Result<ProcessId> {
        self.start_echo_backend_with(name, listen, &[])
    }

    /// [`Self::start_echo_backend`] with more of its flags, e.g.
    /// `--log-requests` (each request a line `request {json}` in its log,
    /// see [`Self::log`]).
    pub fn start_echo_backend_with(
        &mut self,
        name: &str,
        listen: &[SocketAddr],
        flags: &[&str],
    ) -> anyhow::Result<ProcessId> {
        let mut command = self.command(testbed_bin("echo-backend")?);
        command.args(["--name", name]);
        command.args(flags);
        for addr in listen {
            command.arg("--listen").arg(addr.to_string());
        }
        let id = self.spawn(&format!("echo-{name}"), command)?;
        let what = format!("listen on {listen:?}");
        self.wait_until(id, &what, START_TIMEOUT, |ns| {
            let log = ns.log(id);
            log.lines()
                .filter(|line| line.starts_with("listening on "))
                .count()
                >= listen.len()
        })?;
        Ok(id)
    }

    /// Starts `praxis -c CONFIG` (see [`crate::praxis`]) and returns once
    /// every listener of CONFIG accepts connections and, when CONFIG has an
    /// `admin.metrics_address`, its `/ready` answers 200.
    pub fn start_praxis(&mut self, config: &Path) -> anyhow::Result<ProcessId> {
        self.start_proxy(&praxis::binary()?, config)
    }

    /// [`Self::start_praxis`] with another program of praxis's command line
    /// (stock `praxis`: [`praxis::stock_binary`]).
    pub fn start_proxy(&mut self, binary: &Path, config: &Path) -> anyhow::Result<ProcessId> {
        let text = std::fs::read_to_string(config)
            .with_context(|| format!("cannot read {}", config.display()))?;
        let parsed: serde_json::Value = yaml_serde::from_str(&text)
            .with_context(|| format!("{} is not YAML", config.display()))?;
        let listeners: Vec<SocketAddr> = parsed["listeners"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|listener| listener["address"].as_str())
            .map(parse_addr)
            .collect::<anyhow::Result<_>>()?;
        let ready_url = parsed["admin"]["metrics_address"]
            .as_str()
            .map(|addr| anyhow::Ok(format!("http://{}/ready", connectable(parse_addr(addr)?))))
            .transpose()?;

        let mut command = self.command(binary);
        command.arg("-c").arg(config).env("NO_COLOR", "1");
        let id = self.spawn("praxis", command)?;
        self.wait_until(id, "serve its listeners", START_TIMEOUT, |ns| {
            listeners.iter().all(|addr| ns.accepts(*addr))
                && ready_url
                    .as_ref()
                    .is_none_or(|url| ns.get(url).is_ok_and(|response| response.status == 200))
        })?;
        Ok(id)
    }

    /// Runs `curl ARGS...` in the namespace (no proxy, 10 s at most) and
    /// returns the response; an error if curl got none.
    pub fn curl<S: AsRef<OsStr>>(&self, args: &[S]) -> anyhow::Result<HttpResponse> {
        let output = self
            .command("curl")
            .args(["--silent", "--show-error", "--include"])
            .args(["--noproxy", "*", "--max-time", "10"])
            .args(args)
            .output()
            .context("cannot run curl in the network namespace")?;
        if !output.status.success() {
            let args: Vec<_> = args.iter().map(|a| a.as_ref().to_string_lossy()).collect();
            bail!(
                "`curl {}` in {} failed ({}): {}",
                args.join(" "),
                self.name,
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        HttpResponse::parse(&output.stdout)
    }

    /// `GET url` in the namespace.
    pub fn get(&self, url: &str) -> anyhow::Result<HttpResponse> {
        self.curl(&[url])
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        for process in self.processes.iter_mut().rev() {
            if let Some(mut child) = process.child.take() {
                signal_group(&child, "KILL");
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        // The end of its stdin ends the holder, and with it the namespace.
        drop(self.holder_stdin.take());
        let deadline = Instant::now() + Duration::from_secs(2);
        while matches!(self.holder.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.holder.kill();
        let _ = self.holder.wait();
    }
}

/// Logs are kept for a day, for a look after a failed test.
fn remove_old_logs(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let day = Duration::from_secs(24 * 60 * 60);
    for entry in entries.flatten() {
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|modified| modified.elapsed().is_ok_and(|age| age > day));
        if old {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Sends SIG`signal` to the child's process group (it leads one, see spawn).
fn signal_group(child: &Child, signal: &str) {
    let _ = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg("--")
        .arg(format!("-{}", child.id()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// `HOST:PORT` as a socket address (`localhost` is 127.0.0.1).
fn parse_addr(addr: &str) -> anyhow::Result<SocketAddr> {
    if let Ok(parsed) = addr.parse() {
        return Ok(parsed);
    }
    match addr.rsplit_once(':') {
        Some(("localhost", port)) => Ok(SocketAddr::new(
            Ipv4Addr::LOCALHOST.into(),
            port.parse()
                .with_context(|| format!("bad port in {addr}"))?,
        )),
        _ => bail!("cannot tell where `{addr}` listens (want IP:PORT)"),
    }
}

/// Where to connect to reach a listener bound to `addr` (0.0.0.0 is 127.0.0.1).
fn connectable(addr: SocketAddr) -> SocketAddr {
    match addr.ip() {
        ip if ip.is_unspecified() && ip.is_ipv4() => {
            SocketAddr::new(Ipv4Addr::LOCALHOST.into(), addr.port())
        }
        ip if ip.is_unspecified() => {
            SocketAddr::new(IpAddr::V6(std::net::Ipv6Addr::LOCALHOST), addr.port())
        }
        _ => addr,
    }
}

/// An HTTP response as curl received it.
#[derive(Clone, Debug)]
pub struct HttpResponse {
    pub status: u16,
    /// Header names as sent, in order.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl HttpResponse {
    /// Parses `curl --include` output: the last header block (after any
    /// 1xx ones), then the body.
    pub fn parse(raw: &[u8]) -> anyhow::Result<Self> {
        let mut rest = raw;
        loop {
            let end = rest
                .windows(4)
                .position(|w| w == b"\r\n\r\n")
                .context("curl's output has no end of headers")?;
            let head = String::from_utf8_lossy(&rest[..end]).into_owned();
            rest = &rest[end + 4..];
            let mut lines = head.split("\r\n");
            let status_line = lines.next().unwrap_or_default();
            let status: u16 = status_line
                .split_whitespace()
                .nth(1)
                .and_then(|code| code.parse().ok())
                .with_context(|| format!("bad status line `{status_line}`"))?;
            if (100..200).contains(&status) {
                continue;
            }
            let headers = lines
                .filter_map(|line| line.split_once(':'))
                .map(|(name, value)| (name.trim().to_string(), value.trim().to_string()))
                .collect();
            return Ok(Self {
                status,
                headers,
                body: String::from_utf8_lossy(rest).into_owned(),
            });
        }
    }

    /// The first value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON.
    pub fn json(&self) -> anyhow::Result<serde_json::Value> {
        serde_json::from_str(&self.body).with_context(|| {
            format!(
                "the body of a {} response is not JSON: {}",
                self.status, self.body
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_curl_output_after_interim_responses() {
        let raw = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\nX-A: b: c\r\n\r\n{\"error\":\"not found\"}";
        let response = HttpResponse::parse(raw).unwrap();
        assert_eq!(response.status, 404);
        assert_eq!(response.header("Content-Type"), Some("application/json"));
        assert_eq!(response.header("x-a"), Some("b: c"));
        assert_eq!(response.json().unwrap()["error"], "not found");
    }

    #[test]
    fn refuses_output_without_headers() {
        assert!(HttpResponse::parse(b"HTTP/1.1 200 OK\r\n").is_err());
        assert!(HttpResponse::parse(b"garbage\r\n\r\n").is_err());
    }

    #[test]
    fn listener_addresses() {
        assert_eq!(
            parse_addr("127.0.0.1:8080").unwrap(),
            "127.0.0.1:8080".parse().unwrap()
        );
        assert_eq!(
            parse_addr("localhost:9").unwrap(),
            "127.0.0.1:9".parse().unwrap()
        );
        assert!(parse_addr("example.com:80").is_err());
        assert_eq!(
            connectable("0.0.0.0:80".parse().unwrap()),
            "127.0.0.1:80".parse().unwrap()
        );
        assert_eq!(
            connectable("[::]:80".parse().unwrap()),
            "[::1]:80".parse().unwrap()
        );
    }
}
