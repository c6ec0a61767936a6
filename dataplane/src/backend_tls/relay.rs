//! The relays: one loopback listener per address a config names, each
//! connection dialled to the backend in TLS and then copied both ways. They
//! run on a small runtime of their own, beside Praxis's.

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{Arc, LazyLock, Mutex, PoisonError, RwLock},
    time::Duration,
};

use rustls::{
    ClientConfig,
    crypto::CryptoProvider,
    pki_types::{CertificateDer, PrivateKeyDer, ServerName, TrustAnchor, pem::PemObject},
};
use tokio::{
    net::{TcpListener, TcpStream},
    runtime::Runtime,
    sync::Semaphore,
};
use tokio_rustls::TlsConnector;

use super::{RelayConfig, verify::SanVerifier};

/// Dialling the backend, and then its TLS handshake, each give up after this.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections relayed at once, over every relay: past it a connection is
/// closed at once (Praxis answers 502), so no number of rules can make the
/// relays hold unbounded sockets and buffers.
const MAX_CONNECTIONS: usize = 4096;

/// Where one relay sends its connections, and how.
pub struct Target {
    upstream: SocketAddr,
    server_name: ServerName<'static>,
    connector: TlsConnector,
}

impl Target {
    /// Reads the CA and client certificate files the relay names.
    pub fn build(config: &RelayConfig) -> Result<Self, String> {
        if config.subject_alt_names.is_empty() {
            return Err(
                "subject_alt_names is empty: nothing to check the certificate against".into(),
            );
        }
        let server_name = ServerName::try_from(config.server_name.clone())
            .map_err(|e| format!("server_name {:?}: {e}", config.server_name))?;
        let provider = CryptoProvider::get_default()
            .cloned()
            .ok_or("no TLS crypto provider is installed")?;
        let verifier = SanVerifier::new(
            roots(config.ca_path.as_deref())?,
            config.subject_alt_names.clone(),
            provider.clone(),
        );
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(verifier));
        let tls = match &config.client_cert {
            None => builder.with_no_client_auth(),
            Some(pair) => {
                let chain = CertificateDer::pem_file_iter(&pair.cert_path)
                    .and_then(Iterator::collect::<Result<Vec<_>, _>>)
                    .map_err(|e| format!("client certificate {}: {e}", pair.cert_path))?;
                let key = PrivateKeyDer::from_pem_file(&pair.key_path)
                    .map_err(|e| format!("client key {}: {e}", pair.key_path))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| format!("client certificate {}: {e}", pair.cert_path))?
            }
        };
        Ok(Self {
            upstream: config.upstream,
            server_name,
            connector: TlsConnector::from(Arc::new(tls)),
        })
    }
}

/// The trust anchors of a PEM file, or the system's.
fn roots(ca_path: Option<&str>) -> Result<Vec<TrustAnchor<'static>>, String> {
    let certs: Vec<CertificateDer<'static>> = match ca_path {
        Some(path) => CertificateDer::pem_file_iter(path)
            .and_then(Iterator::collect::<Result<Vec<_>, _>>)
            .map_err(|e| format!("CA certificates {path}: {e}"))?,
        None => rustls_native_certs::load_native_certs().certs,
    };
    let anchors: Vec<TrustAnchor<'static>> = certs
        .iter()
        .filter_map(|der| webpki::anchor_from_trusted_cert(der).ok())
        .map(|anchor| anchor.to_owned())
        .collect();
    if anchors.is_empty() {
        return Err(format!(
            "no CA certificate in {}",
            ca_path.unwrap_or("the system's store")
        ));
    }
    Ok(anchors)
}

type Slot = Arc<RwLock<Arc<Target>>>;

/// The relays of this process, by address: each listener keeps reading its
/// slot, so a reload that changes a relay's settings needs no new socket.
static RELAYS: LazyLock<Mutex<HashMap<SocketAddr, Slot>>> = LazyLock::new(Mutex::default);

static RUNTIME: LazyLock<Result<Runtime, String>> = LazyLock::new(|| {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("pontoon-backend-tls")
        .enable_all()
        .build()
        .map_err(|e| format!("the relays' runtime: {e}"))
});

static CONNECTIONS: LazyLock<Arc<Semaphore>> =
    LazyLock::new(|| Arc::new(Semaphore::new(MAX_CONNECTIONS)));

/// Serves `target` at `listen`: binds it the first time, else replaces what
/// the relay there sends to.
pub fn start(listen: SocketAddr, target: Target) -> Result<(), String> {
    let mut relays = RELAYS.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(slot) = relays.get(&listen) {
        *slot.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(target);
        return Ok(());
    }
    let runtime = RUNTIME.as_ref().map_err(Clone::clone)?;
    let listener = crate::serving::bind(runtime, listen)?;
    let slot: Slot = Arc::new(RwLock::new(Arc::new(target)));
    runtime.spawn(accept(listener, slot.clone()));
    relays.insert(listen, slot);
    Ok(())
}

async fn accept(listener: TcpListener, slot: Slot) {
    loop {
        let (downstream, _) = crate::serving::next_connection(&listener, super::NAME).await;
        let Ok(permit) = CONNECTIONS.clone().try_acquire_owned() else {
            tracing::warn!(
                "{}: {MAX_CONNECTIONS} connections relayed already; closing one",
                super::NAME
            );
            continue;
        };
        let target = slot.read().unwrap_or_else(PoisonError::into_inner).clone();
        tokio::spawn(async move {
            if let Err(error) = relay(downstream, &target).await {
                tracing::warn!(
                    upstream = %target.upstream,
                    server_name = ?target.server_name,
                    %error,
                    "{}: backend connection failed",
                    super::NAME
                );
            }
            drop(permit);
        });
    }
}

/// One connection: TLS to the backend, verified, then both ways until either
/// side closes.
async fn relay(mut downstream: TcpStream, target: &Target) -> std::io::Result<()> {
    let timed_out = || std::io::Error::new(std::io::ErrorKind::TimedOut, "timed out");
    let upstream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(target.upstream))
        .await
        .map_err(|_| timed_out())??;
    upstream.set_nodelay(true)?;
    downstream.set_nodelay(true)?;
    let mut upstream = tokio::time::timeout(
        CONNECT_TIMEOUT,
        target
            .connector
            .connect(target.server_name.clone(), upstream),
    )
    .await
    .map_err(|_| timed_out())??;
    tokio::io::copy_bidirectional(&mut downstream, &mut upstream).await?;
    Ok(())
}
