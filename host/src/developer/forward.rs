//! The port-forward that carries a developer's session: one pod port through the API server,
//! as a byte stream, built for many small exchanges and for bulk alike.
//!
//! kube's own `Portforwarder` is general (many ports, one task per direction behind a queue of
//! one message) and reads what it sends in 4 KiB pieces; and kube's clients open their TCP
//! connection to the API server with Nagle's algorithm on. A session interleaves small frames
//! (a request, a window update) with bulk: Nagle holds a small write until the previous one is
//! acknowledged, the API server delays that acknowledgement, and a request waits 40 ms
//! (measured on the test bed: p99 +43 ms at one connection, against p99 1–3 ms for
//! `kubectl port-forward`, whose Go socket has no delay). So the session's port-forward gets a
//! client of its own whose socket sends at once, and frames of up to [`FRAME`] bytes.
//!
//! The wire format is the API server's WebSocket port-forward (the one kube speaks): each
//! binary message starts with its channel (for the first port, 0 carries data and 1 errors);
//! each channel's first message from the server is the port number, two bytes little-endian.

use std::time::Duration;

use futures::{SinkExt as _, StreamExt as _};
use hyper_util::{client::legacy::connect::HttpConnector, rt::TokioExecutor};
use k8s_openapi::api::core::v1::Pod;
use kube::{Client, Config, Resource as _, client::ConfigExt as _, core::Request};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _, DuplexStream};
use tokio_tungstenite::tungstenite::{Bytes, Message};
use tower::{ServiceBuilder, util::MapErrLayer};

/// The most bytes one WebSocket message carries to the pod (as `kubectl` reads: 32 KiB).
const FRAME: usize = 32 * 1024;

/// What the stream buffers between the session and the WebSocket, each way.
const BUFFER: usize = 256 * 1024;

/// A TCP connect to the API server that has not answered by then will not.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

const DATA: u8 = 0;
const ERROR: u8 = 1;

/// A client for port-forwards alone: the kubeconfig's server, credentials, CA and extra headers
/// (impersonation), over a TCP connection with no send delay. Through a proxy (`proxy-url`),
/// kube's own client, which knows how to reach one.
pub fn client(config: &Config) -> anyhow::Result<Client> {
    if config.proxy_url.is_some() {
        return Ok(Client::try_from(config.clone())?);
    }
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(CONNECT_TIMEOUT));
    let https = config.rustls_https_connector_with_connector(http)?;
    let inner = hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build(https);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .layer(MapErrLayer::new(tower::BoxError::from))
        .service(inner);
    Ok(Client::new(service, config.default_namespace.clone()))
}

/// Opens a port-forward to `port` of pod `namespace/pod`: a byte stream whose end means the
/// forward ended (the pod's side closed, or the error the API server sent, logged).
pub async fn open(
    client: &Client,
    namespace: &str,
    pod: &str,
    port: u16,
) -> Result<DuplexStream, kube::Error> {
    let request = Request::new(Pod::url_path(&(), Some(namespace)))
        .portforward(pod, &[port])
        .map_err(kube::Error::BuildRequest)?;
    let socket = client.connect(request).await?.into_stream();
    let (mine, theirs) = tokio::io::duplex(BUFFER);
    let (mut from_session, mut to_session) = tokio::io::split(theirs);
    let (mut sink, mut messages) = socket.split();
    let pod = format!("{namespace}/{pod}:{port}");

    // To the pod: what the session writes, as soon as it is written.
    tokio::spawn(async move {
        let mut buffer = vec![0u8; FRAME + 1];
        buffer[0] = DATA;
        loop {
            match from_session.read(&mut buffer[1..]).await {
                Ok(0) | Err(_) => break,
                Ok(read) => {
                    let frame = Bytes::copy_from_slice(&buffer[..=read]);
                    if sink.send(Message::Binary(frame)).await.is_err() {
                        return;
                    }
                }
            }
        }
        let _ = sink.send(Message::Close(None)).await;
    });

    // From the pod: its bytes to the session; the port number each channel starts with, and
    // anything but data, are not the session's.
    tokio::spawn(async move {
        let mut started = [false; 2];
        while let Some(message) = messages.next().await {
            let bytes = match message {
                Ok(Message::Binary(bytes)) if !bytes.is_empty() => bytes,
                Ok(Message::Close(_)) | Err(_) => break,
                Ok(_) => continue,
            };
            let (channel, mut payload) = (bytes[0], &bytes[1..]);
            let Some(seen) = started.get_mut(usize::from(channel)) else {
                continue;
            };
            if !*seen {
                *seen = true;
                payload = payload.get(2..).unwrap_or_default();
            }
            match channel {
                _ if payload.is_empty() => {}
                DATA => {
                    let written = to_session.write_all(payload).await;
                    if written.is_err() {
                        break;
                    }
                }
                ERROR => {
                    tracing::warn!(%pod, error = %String::from_utf8_lossy(payload), "port-forward");
                }
                _ => {}
            }
        }
        let _ = to_session.shutdown().await;
    });
    Ok(mine)
}
