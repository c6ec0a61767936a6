//! The relay's check of a backend's certificate: its chain against the
//! trusted CA certificates, as any TLS client's, and its names against the
//! policy's `subjectAltNames` (any one of them) instead of the server name
//! sent. Hostnames match as rustls matches a server name (wildcards
//! included); URIs match a URI SAN exactly.

use std::sync::Arc;

use rustls::{
    CertificateError, DigitallySignedStruct, SignatureScheme,
    client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier},
    crypto::CryptoProvider,
    pki_types::{CertificateDer, ServerName, TrustAnchor, UnixTime},
};
use serde::Deserialize;
use x509_parser::{extensions::GeneralName, prelude::FromDer};

/// One of a BackendTLSPolicy's `subjectAltNames`: `{hostname: ...}` or
/// `{uri: ...}`.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(try_from = "RawSubjectAltName")]
pub enum SubjectAltName {
    Hostname(String),
    Uri(String),
}

/// As written (Praxis hands a filter its entry as a YAML value, in which an
/// enum is a tag, not a key).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSubjectAltName {
    hostname: Option<String>,
    uri: Option<String>,
}

impl TryFrom<RawSubjectAltName> for SubjectAltName {
    type Error = String;

    fn try_from(raw: RawSubjectAltName) -> Result<Self, String> {
        match (raw.hostname, raw.uri) {
            (Some(hostname), None) => Ok(Self::Hostname(hostname)),
            (None, Some(uri)) => Ok(Self::Uri(uri)),
            _ => Err("a subject alt name is one of `hostname` or `uri`".into()),
        }
    }
}

impl SubjectAltName {
    fn matches(&self, cert: &webpki::EndEntityCert<'_>, der: &CertificateDer<'_>) -> bool {
        match self {
            Self::Hostname(name) => ServerName::try_from(name.as_str())
                .is_ok_and(|name| cert.verify_is_valid_for_subject_name(&name).is_ok()),
            Self::Uri(uri) => uris(der).iter().any(|u| u == uri),
        }
    }
}

/// The URI SANs of a certificate (none if it does not parse).
fn uris(der: &CertificateDer<'_>) -> Vec<String> {
    let Ok((_, cert)) = x509_parser::certificate::X509Certificate::from_der(der) else {
        return Vec::new();
    };
    let Ok(Some(sans)) = cert.subject_alternative_name() else {
        return Vec::new();
    };
    sans.value
        .general_names
        .iter()
        .filter_map(|n| match n {
            GeneralName::URI(uri) => Some((*uri).to_owned()),
            _ => None,
        })
        .collect()
}

#[derive(Debug)]
pub struct SanVerifier {
    roots: Vec<TrustAnchor<'static>>,
    names: Vec<SubjectAltName>,
    provider: Arc<CryptoProvider>,
}

impl SanVerifier {
    pub fn new(
        roots: Vec<TrustAnchor<'static>>,
        names: Vec<SubjectAltName>,
        provider: Arc<CryptoProvider>,
    ) -> Self {
        Self {
            roots,
            names,
            provider,
        }
    }
}

impl ServerCertVerifier for SanVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let cert = webpki::EndEntityCert::try_from(end_entity).map_err(certificate_error)?;
        cert.verify_for_usage(
            self.provider.signature_verification_algorithms.all,
            &self.roots,
            intermediates,
            now,
            webpki::KeyUsage::server_auth(),
            None,
            None,
        )
        .map_err(certificate_error)?;
        if self.names.iter().any(|n| n.matches(&cert, end_entity)) {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// webpki's verdict as rustls reports it (and the relay logs it).
fn certificate_error(error: webpki::Error) -> rustls::Error {
    let error = match error {
        webpki::Error::UnknownIssuer => CertificateError::UnknownIssuer,
        webpki::Error::CertExpired { .. } => CertificateError::Expired,
        webpki::Error::CertNotValidYet { .. } => CertificateError::NotValidYet,
        webpki::Error::BadDer | webpki::Error::BadDerTime => CertificateError::BadEncoding,
        webpki::Error::InvalidSignatureForPublicKey => CertificateError::BadSignature,
        other => CertificateError::Other(rustls::OtherError(Arc::new(other))),
    };
    rustls::Error::InvalidCertificate(error)
}
