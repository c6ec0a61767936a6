//! Requests to the test bed's Services, from inside its network namespace
//! (where kube-proxy serves them), as independent clients send them: one
//! connection each. Answered by echo servers (the suite's echo-basic), each
//! answer names the pod that served it.

use std::{process::Command, time::Duration};

use anyhow::{Context, ensure};

use crate::testbed_dir;

/// One request: a path (with its query) and an optional header line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Request {
    pub path: &'static str,
    pub header: Option<&'static str>,
}

/// The pod that answered (echo-basic's `pod`), or why nobody did.
pub type Answer = Result<String, String>;

/// The test bed's network namespace.
#[derive(Clone, Debug)]
pub struct TestbedNet {
    netns: String,
}

impl TestbedNet {
    /// The namespace, or why the test bed has none (not run as root).
    pub fn of_testbed() -> Result<Self, String> {
        match std::fs::read_to_string(testbed_dir().join("run/netns")) {
            Ok(name) => Ok(Self {
                netns: name.trim().to_string(),
            }),
            Err(_) => Err(
                "the test bed runs no process pods here (up.sh makes its network namespace only as root)"
                    .into(),
            ),
        }
    }

    /// The network namespace of a process pod (pod-runner names it after
    /// the test bed's and the first 12 hex digits of the pod's uid): what
    /// the pod's own process sees.
    pub fn of_pod(&self, pod: &k8s_openapi::api::core::v1::Pod) -> anyhow::Result<Self> {
        let uid: String = pod
            .metadata
            .uid
            .as_deref()
            .context("the pod has no uid")?
            .chars()
            .filter(|c| *c != '-')
            .take(12)
            .collect();
        let netns = format!("{}-{uid}", self.netns);
        ensure!(
            std::path::Path::new("/run/netns").join(&netns).exists(),
            "no network namespace {netns}: is the pod a running process pod?"
        );
        Ok(Self { netns })
    }

    /// `GET url` from inside the namespace: the body, or why there is none.
    pub fn get(&self, url: &str) -> anyhow::Result<String> {
        let output = Command::new("nsenter")
            .arg(format!("--net=/run/netns/{}", self.netns))
            .args(["--", "curl", "--silent", "--show-error", "--fail"])
            .args(["--noproxy", "*", "--max-time", "3", url])
            .output()
            .context("cannot run curl in the test bed's network namespace")?;
        ensure!(
            output.status.success(),
            "GET {url}: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        );
        Ok(String::from_utf8(output.stdout)?)
    }

    /// `curl ARGS...` from inside the namespace (no proxy); its output,
    /// whether it succeeded or not.
    pub fn curl(&self, args: &[&str]) -> anyhow::Result<std::process::Output> {
        Command::new("nsenter")
            .arg(format!("--net=/run/netns/{}", self.netns))
            .args(["--", "curl", "--noproxy", "*"])
            .args(args)
            .output()
            .context("cannot run curl in the test bed's network namespace")
    }

    /// Sends `requests` to `authority` (`IP:PORT`) in one curl run, in
    /// order, each within `timeout`; who answered each.
    pub fn send(
        &self,
        authority: &str,
        requests: &[Request],
        timeout: Duration,
    ) -> anyhow::Result<Vec<Answer>> {
        let mut command = Command::new("nsenter");
        command
            .arg(format!("--net=/run/netns/{}", self.netns))
            .args(["--", "curl"]);
        let max_time = format!("{:.3}", timeout.as_secs_f64());
        for (i, request) in requests.iter().enumerate() {
            if i > 0 {
                command.arg("--next");
            }
            // A connection per request (curl reuses one across `--next`
            // otherwise): each goes through kube-proxy's balancing anew.
            command.args(["--silent", "--noproxy", "*", "--max-time", &max_time]);
            command.args(["--header", "Connection: close"]);
            command.args(["--write-out", "\n@@%{http_code}@@\n"]);
            if let Some(header) = request.header {
                command.args(["--header", header]);
            }
            command.arg(format!("http://{authority}{}", request.path));
        }
        let output = command
            .output()
            .context("cannot run curl in the test bed's network namespace")?;
        let answers = parse(&String::from_utf8_lossy(&output.stdout))?;
        ensure!(
            answers.len() == requests.len(),
            "curl answered {} of {} requests: {}",
            answers.len(),
            requests.len(),
            String::from_utf8_lossy(&output.stderr)
        );
        Ok(answers)
    }
}

/// curl's output: each body followed by `@@<status>@@`.
fn parse(text: &str) -> anyhow::Result<Vec<Answer>> {
    let mut answers = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("\n@@") {
        let body = &rest[..at];
        let after = &rest[at + 3..];
        let end = after.find("@@").context("unterminated status marker")?;
        let code = &after[..end];
        // Exactly the write-out's newline: an empty body (a failed
        // request) starts right with the next marker.
        rest = after[end + 2..]
            .strip_prefix('\n')
            .unwrap_or(&after[end + 2..]);
        answers.push(if code == "200" {
            serde_json::from_str::<serde_json::Value>(body)
                .ok()
                .and_then(|v| v["pod"].as_str().map(str::to_string))
                .ok_or_else(|| format!("200 without an echo body: {body:.200}"))
        } else {
            Err(format!("HTTP {code}: {body:.200}"))
        });
    }
    Ok(answers)
}

/// An echo-basic container (the image the test bed runs) named `name`,
/// listening on `port`, ready once it answers there, reporting its pod.
pub fn echo_container(name: &str, port: u16) -> serde_json::Value {
    serde_json::json!({
        "name": name,
        "image": ECHO_IMAGE,
        "ports": [{ "name": "http", "containerPort": port }],
        "readinessProbe": { "httpGet": { "path": "/", "port": port }, "periodSeconds": 1 },
        "env": [
            { "name": "HTTP_PORT", "value": port.to_string() },
            { "name": "POD_NAME", "valueFrom": { "fieldRef": { "fieldPath": "metadata.name" } } },
            { "name": "NAMESPACE", "valueFrom": { "fieldRef": { "fieldPath": "metadata.namespace" } } }
        ]
    })
}

/// The Gateway API suite's echo server, a process image of the test bed.
pub const ECHO_IMAGE: &str = "gcr.io/k8s-staging-gateway-api/echo-basic:v1.5.1";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_and_statuses_are_split_per_request() {
        let out =
            "{\n \"pod\": \"web-1\"\n}\n@@200@@\n\n@@000@@\n\n@@000@@\nbad gateway\n@@502@@\n";
        let answers = parse(out).unwrap();
        assert_eq!(answers.len(), 4);
        assert_eq!(answers[0], Ok("web-1".to_string()));
        assert!(answers[1].as_ref().unwrap_err().starts_with("HTTP 000"));
        assert!(answers[2].as_ref().unwrap_err().starts_with("HTTP 000"));
        assert!(answers[3].as_ref().unwrap_err().contains("bad gateway"));
    }
}
