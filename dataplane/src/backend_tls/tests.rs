use std::{net::SocketAddr, sync::Arc};

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, SanType};
use rustls::{
    CertificateError, ServerConfig,
    client::danger::ServerCertVerifier,
    pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime},
};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use super::{
    BackendTls, KeyPair as Pair, RelayConfig, SubjectAltName,
    relay::{self, Target},
    verify::SanVerifier,
};
use crate::test_context::{config, crypto_provider, free_loopback};

const SPIFFE: &str = "spiffe://abc.example.com/test-identity";

/// A CA, and a server certificate it signed for `names` (DNS) and `uris`.
struct Pki {
    ca: CertificateDer<'static>,
    ca_pem: String,
    leaf: CertificateDer<'static>,
    key: PrivateKeyDer<'static>,
}

fn pki(names: &[&str], uris: &[&str]) -> Pki {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    // A name of its own: two test CAs are told apart as two real ones are.
    ca_params.distinguished_name.push(
        rcgen::DnType::CommonName,
        format!("test CA {}", fastrand::u64(..)),
    );
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().unwrap();
    let mut params =
        CertificateParams::new(names.iter().map(ToString::to_string).collect::<Vec<_>>()).unwrap();
    for uri in uris {
        params
            .subject_alt_names
            .push(SanType::URI((*uri).try_into().unwrap()));
    }
    let leaf = params.signed_by(&key, &issuer).unwrap();
    Pki {
        ca_pem: ca.pem(),
        ca: ca.der().clone(),
        leaf: leaf.der().clone(),
        key: PrivatePkcs8KeyDer::from(key.serialize_der()).into(),
    }
}

fn verifier(pki: &Pki, names: Vec<SubjectAltName>) -> SanVerifier {
    let anchor = webpki::anchor_from_trusted_cert(&pki.ca)
        .unwrap()
        .to_owned();
    SanVerifier::new(vec![anchor], names, crypto_provider())
}

fn check(verifier: &SanVerifier, leaf: &CertificateDer<'_>) -> Result<(), rustls::Error> {
    // The server name sent is the policy's hostname; the names checked are
    // the verifier's own.
    let sent = ServerName::try_from("abc.example.com").unwrap();
    verifier
        .verify_server_cert(leaf, &[], &sent, &[], UnixTime::now())
        .map(|_| ())
}

fn host(name: &str) -> SubjectAltName {
    SubjectAltName::Hostname(name.into())
}

fn uri(uri: &str) -> SubjectAltName {
    SubjectAltName::Uri(uri.into())
}

const NOT_FOR_NAME: rustls::Error =
    rustls::Error::InvalidCertificate(CertificateError::NotValidForName);

#[test]
fn the_certificate_must_carry_one_of_the_policys_names_not_the_server_name() {
    let pki = pki(&["abc.example.com"], &[SPIFFE]);
    let cases = [
        (vec![host("abc.example.com")], Ok(())),
        (vec![host("dce.example.com")], Err(NOT_FOR_NAME)),
        (vec![uri(SPIFFE)], Ok(())),
        (
            vec![uri("spiffe://def.example.com/test-identity")],
            Err(NOT_FOR_NAME),
        ),
        (
            vec![uri("spiffe://def.example.com/x"), host("abc.example.com")],
            Ok(()),
        ),
        (
            vec![uri("spiffe://def.example.com/x"), host("dce.example.com")],
            Err(NOT_FOR_NAME),
        ),
        // A hostname is not a URI, nor the other way round.
        (vec![uri("abc.example.com")], Err(NOT_FOR_NAME)),
    ];
    for (names, expected) in cases {
        let verifier = verifier(&pki, names.clone());
        assert_eq!(check(&verifier, &pki.leaf), expected, "{names:?}");
    }
}

#[test]
fn a_wildcard_certificate_serves_a_hostname_under_it_only() {
    let pki = pki(&["*.example.com"], &[]);
    assert_eq!(
        check(&verifier(&pki, vec![host("abc.example.com")]), &pki.leaf),
        Ok(())
    );
    assert_eq!(
        check(&verifier(&pki, vec![host("a.b.example.com")]), &pki.leaf),
        Err(NOT_FOR_NAME)
    );
}

#[test]
fn a_certificate_of_another_ca_is_refused_whatever_names_it_carries() {
    let trusted = pki(&["abc.example.com"], &[]);
    let rogue = pki(&["abc.example.com"], &[SPIFFE]);
    let verifier = verifier(&trusted, vec![host("abc.example.com"), uri(SPIFFE)]);
    assert_eq!(
        check(&verifier, &rogue.leaf),
        Err(rustls::Error::InvalidCertificate(
            CertificateError::UnknownIssuer
        ))
    );
}

#[test]
fn entries_that_cannot_be_served_are_refused_saying_why() {
    let cases = [
        (
            "relays: [{listen: '10.0.0.1:15100', upstream: '10.96.0.1:443', server_name: a.example.com, subject_alt_names: [{hostname: a.example.com}]}]",
            "not a loopback address",
        ),
        (
            "relays: [{listen: '127.0.0.1:15100', upstream: '10.96.0.1:443', server_name: a.example.com, subject_alt_names: []}]",
            "subject_alt_names is empty",
        ),
        (
            "relays: [{listen: '127.0.0.1:15100', upstream: '10.96.0.1:443', server_name: a.example.com, subject_alt_names: [{ip: 10.0.0.1}]}]",
            "unknown field `ip`",
        ),
        (
            "relays: [{listen: '127.0.0.1:15100', upstream: '10.96.0.1:443', server_name: a.example.com, subject_alt_names: [{hostname: a.example.com, uri: 'spiffe://a'}]}]",
            "one of `hostname` or `uri`",
        ),
        (
            "relays: [{listen: '127.0.0.1:15100', upstream: '10.96.0.1:443', server_name: a.example.com, ca_path: /nonexistent/ca.pem, subject_alt_names: [{hostname: a.example.com}]}]",
            "CA certificates /nonexistent/ca.pem",
        ),
    ];
    crypto_provider();
    for (yaml, why) in cases {
        let error = match BackendTls::from_config(&config(yaml)) {
            Ok(_) => panic!("{yaml} was accepted"),
            Err(error) => error.to_string(),
        };
        assert!(error.contains(why), "{yaml}: {error}");
    }
}

/// A TLS backend with `pki`'s certificate: answers each connection's first
/// line with the SNI it was sent and that line.
async fn backend(pki: &Pki) -> SocketAddr {
    let config = ServerConfig::builder_with_provider(crypto_provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![pki.leaf.clone()], pki.key.clone_key())
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(stream) = acceptor.accept(stream).await else {
                    return;
                };
                let sni = stream.get_ref().1.server_name().unwrap_or("").to_owned();
                let mut stream = BufReader::new(stream);
                let mut line = String::new();
                stream.read_line(&mut line).await.unwrap();
                let answer = format!("sni={sni} got={line}");
                stream.get_mut().write_all(answer.as_bytes()).await.unwrap();
                stream.get_mut().shutdown().await.unwrap();
            });
        }
    });
    address
}

/// What a plain client of the relay at `listen` gets for one line.
async fn through(listen: SocketAddr) -> String {
    let mut stream = tokio::net::TcpStream::connect(listen).await.unwrap();
    stream.write_all(b"hello\n").await.unwrap();
    let mut answer = String::new();
    // A refused backend closes the connection: nothing, or a reset.
    let _ = stream.read_to_string(&mut answer).await;
    answer
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_carries_a_connection_to_a_backend_whose_names_match_and_drops_one_whose_do_not()
{
    let pki = pki(&["abc.example.com"], &[SPIFFE]);
    let upstream = backend(&pki).await;
    let dir = std::env::temp_dir().join(format!("pontoon-backend-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ca_path = dir.join("ca.pem");
    std::fs::write(&ca_path, &pki.ca_pem).unwrap();
    let relay_for = |names: Vec<SubjectAltName>| RelayConfig {
        listen: free_loopback(),
        upstream,
        server_name: "abc.example.com".into(),
        ca_path: Some(ca_path.to_string_lossy().into_owned()),
        subject_alt_names: names,
        client_cert: None::<Pair>,
    };
    crypto_provider();

    let matching = relay_for(vec![uri(SPIFFE)]);
    relay::start(matching.listen, Target::build(&matching).unwrap()).unwrap();
    assert_eq!(
        through(matching.listen).await,
        "sni=abc.example.com got=hello\n"
    );

    let mismatched = relay_for(vec![host("dce.example.com")]);
    relay::start(mismatched.listen, Target::build(&mismatched).unwrap()).unwrap();
    assert_eq!(through(mismatched.listen).await, "");

    // A reload that changes a relay's names takes effect on its next
    // connection, on the same address.
    let fixed = RelayConfig {
        subject_alt_names: vec![host("abc.example.com")],
        ..mismatched.clone()
    };
    relay::start(fixed.listen, Target::build(&fixed).unwrap()).unwrap();
    assert_eq!(
        through(fixed.listen).await,
        "sni=abc.example.com got=hello\n"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
