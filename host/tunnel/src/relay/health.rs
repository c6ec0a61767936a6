//! The relay's health endpoint, for the kubelet's probes.
//!
//! - `GET /healthz`: 200 while the process serves at all (liveness).
//! - `GET /ready`: 200 only while a laptop's session is live, else 503 (readiness). So the
//!   Pod's `Ready` condition, and `kubectl get pods`, say whether the developer is connected,
//!   and a Service in front of the relay sends traffic only while someone receives it.
//! - `GET /reachable?to=HOST:PORT`, over the port-forward only: 200 once a TCP connection
//!   to that address is accepted (the shadow Service a bridge's mount sends everyone else's
//!   requests to, which kube-proxy may not route yet either).
//! - `GET /reachable`: 200 once a connection to the relay's own Service reaches this relay,
//!   else 503 with why (404 when the relay was not told its Service). A pod turning Ready is
//!   not yet traffic: the EndpointSlice and then every node's kube-proxy must catch up (up to
//!   its one-second minimum sync period), and until then cluster clients of the Service are
//!   refused. `pontoon bridge` asks this before it tells the developer requests reach them.
//!
//! Hand-rolled HTTP/1.1: two fixed GETs from the kubelet do not justify an HTTP stack in a pod
//! that aims at a few MiB. One request per connection, answered with `Connection: close`.

use std::time::Duration;

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::watch,
};
use tokio_util::{sync::CancellationToken, task::TaskTracker};

use super::Live;

/// The longest request head read; the kubelet's is a few hundred bytes.
const MAX_REQUEST_HEAD: usize = 8 * 1024;

/// A probe that does not finish its request in this time is dropped (the kubelet's own probe
/// timeout defaults to 1 s).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// A probe of the relay's own Service that has not been answered by then has failed.
const REACH_TIMEOUT: Duration = Duration::from_secs(1);

/// The relay's own Service, as `/reachable` dials it: `host:port`.
pub(super) type OwnService = Option<String>;

pub(super) async fn serve(
    listener: TcpListener,
    live: watch::Receiver<Option<Live>>,
    service: OwnService,
    stop: CancellationToken,
) {
    let tasks = TaskTracker::new();
    loop {
        let accepted = tokio::select! {
            () = stop.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((tcp, peer)) => {
                let live = live.clone();
                let service = service.clone();
                // The port-forward arrives on loopback; anyone else in the
                // cluster through the pod's address.
                let forwarded = peer.ip().is_loopback();
                tasks.spawn(async move {
                    let answered = answer(tcp, &live, &service, forwarded);
                    if let Ok(Err(error)) = tokio::time::timeout(REQUEST_TIMEOUT, answered).await {
                        tracing::debug!(%error, "health request");
                    }
                });
            }
            Err(error) => {
                tracing::warn!(%error, "accepting a health request");
                tokio::time::sleep(super::ACCEPT_BACKOFF).await;
            }
        }
    }
    tasks.close();
    tasks.wait().await;
}

async fn answer(
    mut tcp: TcpStream,
    live: &watch::Receiver<Option<Live>>,
    service: &OwnService,
    forwarded: bool,
) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        if head.len() >= MAX_REQUEST_HEAD {
            return respond(&mut tcp, "431 Request Header Fields Too Large", "", false).await;
        }
        let n = tcp.read(&mut chunk).await?;
        if n == 0 {
            // A request line without a blank line after it is still answerable.
            break;
        }
        head.extend_from_slice(&chunk[..n]);
    }
    let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut words = line.split_ascii_whitespace();
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let head_only = method == "HEAD";
    if method != "GET" && !head_only {
        return respond(&mut tcp, "405 Method Not Allowed", "", head_only).await;
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let to = query.split('&').find_map(|pair| pair.strip_prefix("to="));
    match path {
        "/healthz" => respond(&mut tcp, "200 OK", "ok\n", head_only).await,
        "/ready" => {
            // Cloned out: the watch's lock is not held across the write.
            let current = live.borrow().clone();
            match current {
                Some(live) => {
                    let body = format!("session of {} live since {}\n", live.client, live.since);
                    respond(&mut tcp, "200 OK", &body, head_only).await
                }
                None => {
                    respond(
                        &mut tcp,
                        "503 Service Unavailable",
                        "no session\n",
                        head_only,
                    )
                    .await
                }
            }
        }
        "/reachable" => match (to, service) {
            // Another Service (the shadow a bridge's mount sends everyone
            // else's requests to): asked by the developer's own session
            // only, so the relay dials nothing for anyone else.
            (Some(_), _) if !forwarded => {
                let body = "only through a port-forward\n";
                respond(&mut tcp, "403 Forbidden", body, head_only).await
            }
            (Some(to), _) => match connect(to).await {
                Ok(()) => respond(&mut tcp, "200 OK", &format!("reached {to}\n"), head_only).await,
                Err(why) => {
                    let body = format!("not reached {to}: {why}\n");
                    respond(&mut tcp, "503 Service Unavailable", &body, head_only).await
                }
            },
            (None, None) => {
                let body = "this relay was not told its Service (--service)\n";
                respond(&mut tcp, "404 Not Found", body, head_only).await
            }
            (None, Some(service)) => match reach(service).await {
                Ok(()) => {
                    let body = format!("reached through {service}\n");
                    respond(&mut tcp, "200 OK", &body, head_only).await
                }
                Err(why) => {
                    let body = format!("not reached through {service}: {why}\n");
                    respond(&mut tcp, "503 Service Unavailable", &body, head_only).await
                }
            },
        },
        _ => respond(&mut tcp, "404 Not Found", "", head_only).await,
    }
}

/// Whether a TCP connection to `to` (`host:port`) is accepted within [`REACH_TIMEOUT`].
async fn connect(to: &str) -> Result<(), String> {
    within_reach_timeout(TcpStream::connect(to)).await.map(drop)
}

/// `attempt`'s outcome, or that it gave none within [`REACH_TIMEOUT`].
async fn within_reach_timeout<T>(
    attempt: impl Future<Output = std::io::Result<T>>,
) -> Result<T, String> {
    match tokio::time::timeout(REACH_TIMEOUT, attempt).await {
        Err(_) => Err(format!("no answer within {REACH_TIMEOUT:?}")),
        Ok(Err(error)) => Err(error.to_string()),
        Ok(Ok(value)) => Ok(value),
    }
}

/// Whether `/healthz` answers through `service` (the relay's own Service, so only this relay
/// can answer), within [`REACH_TIMEOUT`].
async fn reach(service: &str) -> Result<(), String> {
    // Resolved apart from the connection, so that a failure says which of
    // the two (cluster DNS, or kube-proxy's routing) is not there yet.
    let addresses: Vec<std::net::SocketAddr> =
        match within_reach_timeout(tokio::net::lookup_host(service)).await {
            Ok(found) => found.collect(),
            Err(why) => return Err(format!("resolving it: {why}")),
        };
    let shown = addresses
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    let attempt = async {
        let mut tcp = TcpStream::connect(addresses.as_slice()).await?;
        tcp.write_all(b"GET /healthz HTTP/1.1\r\nHost: relay\r\nConnection: close\r\n\r\n")
            .await?;
        let mut answer = Vec::with_capacity(256);
        (&mut tcp).take(4096).read_to_end(&mut answer).await?;
        std::io::Result::Ok(answer)
    };
    let answer = within_reach_timeout(attempt)
        .await
        .map_err(|why| format!("{why} (at {shown})"))?;
    if answer.starts_with(b"HTTP/1.1 200 ") {
        return Ok(());
    }
    Err(format!(
        "answered `{}`",
        String::from_utf8_lossy(answer.split(|&b| b == b'\r').next().unwrap_or_default())
    ))
}

async fn respond(
    tcp: &mut TcpStream,
    status: &str,
    body: &str,
    head_only: bool,
) -> std::io::Result<()> {
    let mut response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    if !head_only {
        response.push_str(body);
    }
    tcp.write_all(response.as_bytes()).await?;
    tcp.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn get(addr: std::net::SocketAddr, request: &str) -> String {
        let mut tcp = TcpStream::connect(addr).await.unwrap();
        tcp.write_all(request.as_bytes()).await.unwrap();
        let mut response = String::new();
        tcp.read_to_string(&mut response).await.unwrap();
        response
    }

    #[tokio::test]
    async fn answers_probes_and_rejects_the_rest() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (live_tx, live) = watch::channel(None);
        let stop = CancellationToken::new();
        let server = tokio::spawn(serve(listener, live, None, stop.clone()));

        let ready = get(addr, "GET /ready HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert!(ready.starts_with("HTTP/1.1 503 "), "{ready}");
        live_tx.send_replace(Some(Live {
            id: 1,
            client: "alice".into(),
            since: jiff::Timestamp::UNIX_EPOCH,
        }));
        let ready = get(addr, "GET /ready?verbose HTTP/1.1\r\n\r\n").await;
        assert!(ready.starts_with("HTTP/1.1 200 "), "{ready}");
        assert!(
            ready.ends_with("session of alice live since 1970-01-01T00:00:00Z\n"),
            "{ready}"
        );
        let head = get(addr, "HEAD /healthz HTTP/1.1\r\n\r\n").await;
        assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
        assert!(head.ends_with("\r\n\r\n"), "HEAD has no body: {head}");
        let other = get(addr, "GET /metrics HTTP/1.1\r\n\r\n").await;
        assert!(other.starts_with("HTTP/1.1 404 "), "{other}");
        let post = get(addr, "POST /ready HTTP/1.1\r\n\r\n").await;
        assert!(post.starts_with("HTTP/1.1 405 "), "{post}");
        let untold = get(addr, "GET /reachable HTTP/1.1\r\n\r\n").await;
        assert!(untold.starts_with("HTTP/1.1 404 "), "{untold}");
        assert!(untold.ends_with("(--service)\n"), "{untold}");

        stop.cancel();
        server.await.unwrap();
    }

    /// `/reachable` dials the Service it was given: a relay behind it answers, a refused
    /// address is reported with the reason.
    #[tokio::test]
    async fn reachable_says_whether_its_service_answers() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (_live_tx, live) = watch::channel(None);
        let stop = CancellationToken::new();
        // The relay reached through "its Service": here, itself.
        let server = tokio::spawn(serve(listener, live, Some(addr.to_string()), stop.clone()));
        let reached = get(addr, "GET /reachable HTTP/1.1\r\n\r\n").await;
        assert!(reached.starts_with("HTTP/1.1 200 "), "{reached}");
        assert!(
            reached.ends_with(&format!("reached through {addr}\n")),
            "{reached}"
        );

        let gone = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let unreachable = gone.local_addr().unwrap();
        drop(gone);
        let other = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let other_addr = other.local_addr().unwrap();
        let (_tx, live) = watch::channel(None);
        let refused = tokio::spawn(serve(
            other,
            live,
            Some(unreachable.to_string()),
            stop.clone(),
        ));
        let answer = get(other_addr, "GET /reachable HTTP/1.1\r\n\r\n").await;
        assert!(answer.starts_with("HTTP/1.1 503 "), "{answer}");
        assert!(
            answer.contains(&format!("not reached through {unreachable}: ")),
            "{answer}"
        );

        // Another address, asked over loopback (as the port-forward asks).
        let reached = get(
            other_addr,
            &format!("GET /reachable?to={addr} HTTP/1.1\r\n\r\n"),
        )
        .await;
        assert!(reached.starts_with("HTTP/1.1 200 "), "{reached}");
        let gone = get(
            other_addr,
            &format!("GET /reachable?to={unreachable} HTTP/1.1\r\n\r\n"),
        )
        .await;
        assert!(gone.starts_with("HTTP/1.1 503 "), "{gone}");

        stop.cancel();
        server.await.unwrap();
        refused.await.unwrap();
    }
}
