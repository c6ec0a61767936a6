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
        let mut channels = Channels::default();
        while let Some(message) = messages.next().await {
            let bytes = match message {
                Ok(Message::Binary(bytes)) if !bytes.is_empty() => bytes,
                Ok(Message::Close(_)) | Err(_) => break,
                Ok(_) => continue,
            };
            match channels.read(&bytes) {
                Incoming::Data(payload) => {
                    let written = to_session.write_all(payload).await;
                    if written.is_err() {
                        break;
                    }
                }
                Incoming::Error(text) => {
                    tracing::warn!(%pod, error = %String::from_utf8_lossy(text), "port-forward");
                }
                Incoming::Nothing => {}
            }
        }
        let _ = to_session.shutdown().await;
    });
    Ok(mine)
}

/// What one message from the API server carries for the session.
#[derive(Debug, PartialEq, Eq)]
enum Incoming<'a> {
    Data(&'a [u8]),
    Error(&'a [u8]),
    Nothing,
}

/// Which of the port's two channels have had their opening port number.
#[derive(Default)]
struct Channels {
    started: [bool; 2],
}

impl Channels {
    /// Reads one binary message: its channel byte, and on a channel's first message the port
    /// number (2 bytes) before any payload; other channels are not this port's.
    fn read<'a>(&mut self, message: &'a [u8]) -> Incoming<'a> {
        let Some((&channel, mut payload)) = message.split_first() else {
            return Incoming::Nothing;
        };
        let Some(started) = self.started.get_mut(usize::from(channel)) else {
            return Incoming::Nothing;
        };
        if !*started {
            *started = true;
            payload = payload.get(2..).unwrap_or_default();
        }
        match channel {
            _ if payload.is_empty() => Incoming::Nothing,
            DATA => Incoming::Data(payload),
            ERROR => Incoming::Error(payload),
            _ => Incoming::Nothing,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_channel_opens_with_its_port_and_then_carries_its_bytes() {
        let mut channels = Channels::default();
        // Port 7000, little-endian, on each channel first.
        assert_eq!(channels.read(&[DATA, 0x58, 0x1b]), Incoming::Nothing);
        assert_eq!(channels.read(&[ERROR, 0x58, 0x1b]), Incoming::Nothing);
        assert_eq!(channels.read(&[DATA, b'h', b'i']), Incoming::Data(b"hi"));
        // Two bytes of data are data once the port was read: not taken for a port again.
        assert_eq!(
            channels.read(&[DATA, 0x58, 0x1b]),
            Incoming::Data(&[0x58, 0x1b])
        );
        assert_eq!(channels.read(&[ERROR, b'n', b'o']), Incoming::Error(b"no"));
    }

    #[test]
    fn a_port_and_bytes_in_one_message_keep_the_bytes() {
        let mut channels = Channels::default();
        assert_eq!(
            channels.read(&[DATA, 0x58, 0x1b, b'o', b'k']),
            Incoming::Data(b"ok")
        );
    }

    #[test]
    fn empty_messages_and_other_channels_carry_nothing() {
        let mut channels = Channels::default();
        assert_eq!(channels.read(&[]), Incoming::Nothing);
        assert_eq!(channels.read(&[2, 0x58, 0x1b, b'x']), Incoming::Nothing);
        assert_eq!(channels.read(&[255, b'x']), Incoming::Nothing);
        assert_eq!(channels.read(&[DATA]), Incoming::Nothing);
        assert_eq!(channels.read(&[DATA, b'x']), Incoming::Data(b"x"));
    }
}
