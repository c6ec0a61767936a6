//! `pontoon_mirror`: HTTPRoute's RequestMirror. A copy of each request (or
//! of the share a fraction asks for) goes to the mirror's backend, and its
//! answer is thrown away. The copy is fire-and-forget: it is sent from a
//! task of its own, so the real request never waits for it, and when the
//! mirror is slow the copies, not the requests, give way: at most
//! `max_in_flight` copies of one filter, and [`PROCESS_IN_FLIGHT`] of all
//! the process's mirrors together, are out at once, and a request over
//! either is simply not mirrored; a body longer than `max_body_bytes` drops
//! the copy rather than holding the request's bytes. So the memory copies
//! hold is bounded for the whole data plane, whose routes may be many
//! tenants': however many mirror rules one of them writes, at most
//! `PROCESS_IN_FLIGHT` × 64 KiB of bodies wait to be sent.
//!
//! The copy carries the request as the backend would get it from the
//! filters before this one: their header changes (set, add, remove) are
//! applied, hop-by-hop headers are not copied.
//!
//! ```yaml
//! filter: pontoon_mirror
//! backend: default/mirror:8080     # for logs
//! endpoints: ["10.244.0.7:3000"]  # ready endpoints, taken in turn
//! numerator: 20                    # share mirrored: numerator/denominator
//! denominator: 100
//! h2c: false                       # HTTP/2 with prior knowledge
//! ```

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderName, HeaderValue, header};
use praxis_core::{
    config::UpstreamHttpVersion,
    connectivity::ConnectionOptions,
    egress::PeerSpec,
    subrequest::{FrameworkHeaders, SubRequest, SubRequestClient},
};
use praxis_filter::{
    BodyAccess, FilterAction, FilterError, HttpFilter, HttpFilterContext, parse_filter_config,
};
use serde::Deserialize;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

pub const NAME: &str = "pontoon_mirror";

/// A copy's answer is read this far, then dropped.
const RESPONSE_BYTES: usize = 64 * 1024;

/// Copies out at once in the whole process, every mirror filter's together.
pub const PROCESS_IN_FLIGHT: usize = 1024;

/// The process-wide bound on copies out (see the module's comment).
fn process_in_flight() -> Arc<Semaphore> {
    static PERMITS: std::sync::LazyLock<Arc<Semaphore>> =
        std::sync::LazyLock::new(|| Arc::new(Semaphore::new(PROCESS_IN_FLIGHT)));
    PERMITS.clone()
}

/// A copy's places in the bounds: its filter's and the process's.
struct Permits {
    _filter: OwnedSemaphorePermit,
    _process: OwnedSemaphorePermit,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    backend: String,
    endpoints: Vec<SocketAddr>,
    #[serde(default = "hundred")]
    numerator: u32,
    #[serde(default = "hundred")]
    denominator: u32,
    #[serde(default)]
    h2c: bool,
    #[serde(default = "default_timeout")]
    timeout_ms: u64,
    #[serde(default = "default_max_body")]
    max_body_bytes: usize,
    #[serde(default = "default_in_flight")]
    max_in_flight: usize,
}

fn hundred() -> u32 {
    100
}
fn default_timeout() -> u64 {
    10_000
}
fn default_max_body() -> usize {
    64 * 1024
}
fn default_in_flight() -> usize {
    128
}

pub struct Mirror {
    backend: String,
    peers: Vec<PeerSpec>,
    next: AtomicUsize,
    numerator: u32,
    denominator: u32,
    timeout: Duration,
    max_body_bytes: usize,
    in_flight: Arc<Semaphore>,
}

/// A copy waiting for the rest of the request's body.
struct Pending {
    request: SubRequest,
    body: BytesMut,
    permit: Permits,
}

impl Mirror {
    pub fn from_config(config: &serde_yaml::Value) -> Result<Box<dyn HttpFilter>, FilterError> {
        let config: Config = parse_filter_config(NAME, config)?;
        if config.denominator == 0 || config.numerator > config.denominator {
            return Err(format!(
                "{NAME}: numerator {} over denominator {} is not a share (0 < denominator, numerator <= denominator)",
                config.numerator, config.denominator
            )
            .into());
        }
        if config.max_in_flight == 0 {
            return Err(format!("{NAME}: max_in_flight must be at least 1").into());
        }
        let connection = Arc::new(ConnectionOptions {
            http_version: if config.h2c {
                UpstreamHttpVersion::H2
            } else {
                UpstreamHttpVersion::H1
            },
            connection_timeout: Some(Duration::from_secs(2)),
            ..ConnectionOptions::default()
        });
        let peers = config
            .endpoints
            .iter()
            .map(|&address| PeerSpec {
                connection: connection.clone(),
                ..PeerSpec::new(address, false, "")
            })
            .collect();
        Ok(Box::new(Self {
            backend: config.backend,
            peers,
            next: AtomicUsize::new(0),
            numerator: config.numerator,
            denominator: config.denominator,
            timeout: Duration::from_millis(config.timeout_ms),
            max_body_bytes: config.max_body_bytes,
            in_flight: Arc::new(Semaphore::new(config.max_in_flight)),
        }))
    }

    /// Whether this request is in the mirrored share.
    fn picked(&self) -> bool {
        self.numerator == self.denominator || fastrand::u32(0..self.denominator) < self.numerator
    }

    /// A copy's places in both bounds, or `None` when either is full.
    fn admit(&self) -> Option<Permits> {
        let filter = self.in_flight.clone().try_acquire_owned().ok()?;
        let process = process_in_flight().try_acquire_owned().ok()?;
        Some(Permits {
            _filter: filter,
            _process: process,
        })
    }

    /// Sends `request` from a task of its own; nothing waits for it.
    fn send(&self, request: SubRequest, client: SubRequestClient, permit: Permits) {
        if self.peers.is_empty() {
            return;
        }
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.peers.len();
        let peer = self.peers[i].clone();
        let (timeout, backend) = (self.timeout, self.backend.clone());
        tokio::spawn(async move {
            let sent = client
                .execute(
                    &peer,
                    &request,
                    RESPONSE_BYTES,
                    timeout,
                    None::<&FrameworkHeaders>,
                )
                .await;
            if let Err(err) = sent {
                tracing::debug!(backend = %backend, error = %err, "mirrored request failed");
            }
            drop(permit);
        });
    }
}

#[async_trait]
impl HttpFilter for Mirror {
    fn name(&self) -> &'static str {
        NAME
    }

    async fn on_request(
        &self,
        ctx: &mut HttpFilterContext<'_>,
    ) -> Result<FilterAction, FilterError> {
        if self.peers.is_empty() || !self.picked() {
            return Ok(FilterAction::Continue);
        }
        let Some(client) = ctx.subrequest_client.cloned() else {
            return Ok(FilterAction::Continue);
        };
        // Over either bound: this request is not mirrored.
        let Some(permit) = self.admit() else {
            return Ok(FilterAction::Continue);
        };
        let request = copy(ctx);
        if has_body(&ctx.request.headers) {
            ctx.insert_filter_state(Pending {
                request,
                body: BytesMut::new(),
                permit,
            });
        } else {
            self.send(request, client, permit);
        }
        Ok(FilterAction::Continue)
    }

    fn request_body_access(&self) -> BodyAccess {
        BodyAccess::ReadOnly
    }

    async fn on_request_body(
        &self,
        ctx: &mut HttpFilterContext<'_>,
        body: &mut Option<Bytes>,
        end_of_stream: bool,
    ) -> Result<FilterAction, FilterError> {
        let Some(pending) = ctx.get_filter_state_mut::<Pending>() else {
            return Ok(FilterAction::Continue);
        };
        if let Some(chunk) = body.as_ref() {
            if pending.body.len() + chunk.len() > self.max_body_bytes {
                // Too long to copy: the copy is dropped, the request goes on.
                ctx.remove_filter_state::<Pending>();
                return Ok(FilterAction::Continue);
            }
            pending.body.extend_from_slice(chunk);
        }
        if end_of_stream
            && let Some(mut pending) = ctx.remove_filter_state::<Pending>()
            && let Some(client) = ctx.subrequest_client.cloned()
        {
            pending.request.body = pending.body.freeze();
            self.send(pending.request, client, pending.permit);
        }
        Ok(FilterAction::Continue)
    }
}

/// Whether the request says a body follows.
fn has_body(headers: &HeaderMap) -> bool {
    headers.contains_key(header::TRANSFER_ENCODING)
        || headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .is_some_and(|n| n > 0)
}

/// Headers of one connection, not of the request: never copied.
const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::CONTENT_LENGTH,
];

/// The request as the backend would get it, without its body.
fn copy(ctx: &HttpFilterContext<'_>) -> SubRequest {
    let request = ctx.request;
    let mut headers = request.headers.clone();
    for name in &HOP_BY_HOP {
        headers.remove(name);
    }
    for name in &ctx.request_headers_to_remove {
        headers.remove(name);
    }
    for (name, value) in &ctx.request_headers_to_set {
        headers.insert(name.clone(), value.clone());
    }
    for (name, value) in &ctx.extra_request_headers {
        if let (Ok(name), Ok(value)) = (
            HeaderName::try_from(name.as_ref()),
            HeaderValue::from_str(value),
        ) {
            headers.append(name, value);
        }
    }
    // An HTTP/2 request names its host in the URI only.
    if !headers.contains_key(header::HOST)
        && let Some(authority) = request.uri.authority()
        && let Ok(value) = HeaderValue::from_str(authority.as_str())
    {
        headers.insert(header::HOST, value);
    }
    let uri = request
        .uri
        .path_and_query()
        .map_or_else(|| "/".parse(), |pq| pq.as_str().parse())
        .unwrap_or_default();
    SubRequest {
        method: request.method.clone(),
        uri,
        headers,
        body: Bytes::new(),
    }
}

#[cfg(test)]
mod tests;
