//! Whether cluster clients reach a developer's relay yet, and the shadow
//! that takes everyone else's requests: asked of the relay itself (`GET
//! /reachable` on its health port, through a port-forward), which dials its
//! own Service, or the address it is given.
//!
//! The relay pod turning Ready is not yet traffic: the EndpointSlice, then
//! every node's kube-proxy (at most one sync a second) must catch up, and in
//! between a request for the developer is refused. Measured on the test bed
//! when two developers bridge one after the other: the second's first
//! requests were refused for a moment after the pod was Ready. So `pontoon
//! bridge` says "now reach this machine" only once the relay has been reached
//! through its Service.

use std::time::{Duration, Instant};

use kube::Client;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::forward;

/// What the relay said about its Service.
#[derive(Debug, PartialEq, Eq)]
pub enum Reach {
    /// A connection through the Service reached the relay.
    Reached,
    /// A relay made before it could tell (no `--service`): nothing to wait for.
    CannotTell,
    /// Not reached by the deadline; the last reason.
    NotYet(String),
}

/// How often the relay is asked again while its Service does not reach it.
const AGAIN: Duration = Duration::from_millis(100);

/// Asks until the relay is reached through its Service, it cannot tell, or
/// `deadline` passes.
/// `to`: another address the relay dials (`host:port`) instead of its own
/// Service.
pub async fn wait(
    client: &Client,
    namespace: &str,
    pod: &str,
    health_port: u16,
    to: Option<&str>,
    deadline: Instant,
) -> Reach {
    loop {
        let why = match ask(client, namespace, pod, health_port, to).await {
            Ok((200, _)) => return Reach::Reached,
            Ok((404, _)) => return Reach::CannotTell,
            Ok((_, body)) => body.trim().to_string(),
            Err(error) => format!("{error:#}"),
        };
        if Instant::now() + AGAIN > deadline {
            return Reach::NotYet(why);
        }
        tracing::debug!(%why, "relay not reached through its Service yet");
        tokio::time::sleep(AGAIN).await;
    }
}

/// One `GET /reachable`: its status code and body.
async fn ask(
    client: &Client,
    namespace: &str,
    pod: &str,
    health_port: u16,
    to: Option<&str>,
) -> anyhow::Result<(u16, String)> {
    let mut stream = forward::open(client, namespace, pod, health_port).await?;
    let target = match to {
        Some(to) => format!("/reachable?to={to}"),
        None => "/reachable".to_string(),
    };
    let request = format!("GET {target} HTTP/1.1\r\nHost: relay\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    // Read up to the body's length: a port-forward does not end when the pod's side closes.
    let mut answer = Vec::with_capacity(512);
    let read = async {
        let mut chunk = [0u8; 1024];
        loop {
            if let Some(complete) = parse(&answer)? {
                return anyhow::Ok(complete);
            }
            if answer.len() > MAX_ANSWER {
                anyhow::bail!("the relay's answer is longer than {MAX_ANSWER} bytes");
            }
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                anyhow::bail!("the port-forward ended before the relay's answer did");
            }
            answer.extend_from_slice(&chunk[..n]);
        }
    };
    tokio::time::timeout(ANSWER_TIMEOUT, read).await?
}

/// The relay answers at once, or within its own one-second dial of its Service.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(3);

/// The relay's answers are a line or two.
const MAX_ANSWER: usize = 16 * 1024;

/// The status code and body of an HTTP/1.1 answer once all of it (by its
/// `Content-Length`) is there; `None` while it is not.
fn parse(answer: &[u8]) -> anyhow::Result<Option<(u16, String)>> {
    let Some(end) = answer.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Ok(None);
    };
    let head = String::from_utf8_lossy(&answer[..end]);
    let code = head
        .split_ascii_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("the relay's answer is not HTTP: {head:?}"))?;
    let length = head
        .lines()
        .filter_map(|line| line.split_once(':'))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, value)| value.trim().parse::<usize>().ok())
        .unwrap_or(0);
    let body = &answer[end + 4..];
    if body.len() < length {
        return Ok(None);
    }
    Ok(Some((
        code,
        String::from_utf8_lossy(&body[..length]).into_owned(),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_code_and_the_body_once_all_of_it_is_there() {
        let answer = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 5\r\n\r\nnope\n";
        assert_eq!(parse(answer).unwrap(), Some((503, "nope\n".to_string())));
        assert_eq!(parse(&answer[..answer.len() - 1]).unwrap(), None);
        let empty = b"HTTP/1.1 200 OK\r\n\r\n";
        assert_eq!(parse(empty).unwrap(), Some((200, String::new())));
        assert_eq!(parse(b"HTTP/1.1 200 OK\r\n").unwrap(), None);
        assert!(parse(b"garbage\r\n\r\n").is_err());
    }
}
