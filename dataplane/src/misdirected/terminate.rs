//! The TLS of a shared HTTPS port whose listeners let in a client
//! certificate that does not validate (`AllowInsecureFallback`): there the
//! front, not Praxis, ends the TLS, and hands Praxis's listener on loopback
//! the plain stream. Praxis's `client_cert_mode: request` asks for a
//! certificate and lets a client without one in, but refuses, in the
//! handshake, one whose certificate does not chain to the CA; the Gateway
//! API's fallback lets both in. The front asks for a certificate (naming
//! the CA's subjects, as Praxis would), checks one it gets against the CA,
//! and lets the connection in either way, logging the verdict.
//!
//! The certificate served is chosen by server name as Praxis chooses it: an
//! exact name, then the longest wildcard, then the default (or the only)
//! certificate. The config is the Praxis listener's own `tls`.

use std::sync::Arc;

use rustls::{
    DigitallySignedStruct, DistinguishedName, Error, RootCertStore, ServerConfig, SignatureScheme,
    client::danger::HandshakeSignatureValid,
    crypto::CryptoProvider,
    pki_types::{CertificateDer, PrivateKeyDer, UnixTime, pem::PemObject},
    server::{
        ClientHello, ResolvesServerCert, WebPkiClientVerifier,
        danger::{ClientCertVerified, ClientCertVerifier},
    },
    sign::CertifiedKey,
};
use serde::Deserialize;

use super::Pattern;

/// A Praxis listener's `tls`, as the operator writes it.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    certificates: Vec<CertificateFiles>,
    client_ca: CaFile,
    /// `request`: the only mode the front serves (a required certificate
    /// has no fallback, and Praxis serves it itself).
    client_cert_mode: String,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CertificateFiles {
    cert_path: String,
    key_path: String,
    #[serde(default)]
    default: bool,
    #[serde(default)]
    server_names: Vec<String>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CaFile {
    ca_path: String,
}

/// The front's TLS server: its certificates read, its CA loaded.
pub fn server_config(config: &TlsConfig) -> Result<ServerConfig, String> {
    if config.client_cert_mode != "request" {
        return Err(format!(
            "tls.client_cert_mode {:?}: the front ends TLS only for `request` (a certificate \
             asked for, and let in whatever it is)",
            config.client_cert_mode
        ));
    }
    let provider = CryptoProvider::get_default()
        .cloned()
        .ok_or("no TLS crypto provider is installed")?;
    let mut resolver = ByServerName::default();
    for files in &config.certificates {
        let chain = CertificateDer::pem_file_iter(&files.cert_path)
            .and_then(Iterator::collect::<Result<Vec<_>, _>>)
            .map_err(|e| format!("certificate {}: {e}", files.cert_path))?;
        let key = PrivateKeyDer::from_pem_file(&files.key_path)
            .map_err(|e| format!("key {}: {e}", files.key_path))?;
        let key = provider
            .key_provider
            .load_private_key(key)
            .map_err(|e| format!("key {}: {e}", files.key_path))?;
        let certified = Arc::new(CertifiedKey::new(chain, key));
        if files.default || files.server_names.is_empty() {
            resolver.default.get_or_insert_with(|| certified.clone());
        }
        for name in &files.server_names {
            resolver
                .by_name
                .push((Pattern::parse(name)?, certified.clone()));
        }
    }
    let mut roots = RootCertStore::empty();
    for ca in CertificateDer::pem_file_iter(&config.client_ca.ca_path)
        .and_then(Iterator::collect::<Result<Vec<_>, _>>)
        .map_err(|e| format!("client CA {}: {e}", config.client_ca.ca_path))?
    {
        roots
            .add(ca)
            .map_err(|e| format!("client CA {}: {e}", config.client_ca.ca_path))?;
    }
    let checked = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .allow_unauthenticated()
        .build()
        .map_err(|e| format!("client CA {}: {e}", config.client_ca.ca_path))?;
    let mut server = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_client_cert_verifier(Arc::new(AnyClientCertificate { checked }))
        .with_cert_resolver(Arc::new(resolver));
    server.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(server)
}

#[derive(Debug, Default)]
struct ByServerName {
    by_name: Vec<(Pattern, Arc<CertifiedKey>)>,
    default: Option<Arc<CertifiedKey>>,
}

impl ResolvesServerCert for ByServerName {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let chosen = hello.server_name().and_then(|name| {
            let patterns = self.by_name.iter().map(|(p, _)| p);
            super::most_specific(patterns, name).map(|i| self.by_name[i].1.clone())
        });
        chosen.or_else(|| self.default.clone())
    }
}

/// Asks for a client certificate and lets every connection in: one that
/// does not chain to the CA, or none, is logged, not refused. The handshake
/// signature is still checked: a client must hold the key of what it shows.
#[derive(Debug)]
struct AnyClientCertificate {
    checked: Arc<dyn ClientCertVerifier>,
}

impl ClientCertVerifier for AnyClientCertificate {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.checked.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, Error> {
        if let Err(error) = self
            .checked
            .verify_client_cert(end_entity, intermediates, now)
        {
            tracing::debug!(
                %error,
                "{}: a client certificate that does not validate let in (AllowInsecureFallback)",
                super::NAME
            );
        }
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.checked.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.checked.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.checked.supported_verify_schemes()
    }
}
