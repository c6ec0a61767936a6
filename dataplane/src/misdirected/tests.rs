use std::{net::SocketAddr, sync::Arc, time::Duration};

use praxis_core::id::IdGenerator;
use praxis_filter::{FilterAction, HttpFilter};
use rustls::{ClientConfig, ClientConnection, RootCertStore, pki_types::ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{
    Misdirected,
    origins::{self, Origin},
};
use crate::test_context::{config, context_for, crypto_provider, free_loopback, request};

/// The listeners of the conformance suite's Gateway
/// `same-namespace-with-https-listener` on port 443: one without a
/// hostname, an exact name, a wildcard, and an exact name under it.
fn suite_gateway() -> Box<dyn HttpFilter> {
    Misdirected::from_config(&config(
        "listen: 0.0.0.0:443\n\
         hop: 127.0.0.1:15101\n\
         listener_hostnames: [second-example.org, '*.wildcard.org', fourth-example.wildcard.org]",
    ))
    .unwrap()
}

fn misdirected(server_name: &str, host: &str) -> bool {
    let filter = Misdirected {
        listeners: [
            "second-example.org",
            "*.wildcard.org",
            "fourth-example.wildcard.org",
        ]
        .iter()
        .map(|h| super::Pattern::parse(h).unwrap())
        .collect(),
    };
    filter.misdirected(server_name, host)
}

#[test]
fn a_host_of_another_listener_than_the_server_names_is_misdirected() {
    // The suite's cases (HTTPRouteHTTPSListenerDetectMisdirectedRequests):
    // `true` is its 421; `false` is served (200) or not routed (404).
    let cases = [
        ("example.org", "example.org", false),
        ("example.org", "second-example.org", true),
        ("example.org", "unknown-example.org", false),
        ("second-example.org", "second-example.org", false),
        ("second-example.org", "example.org", true),
        ("second-example.org", "unknown-example.org", true),
        (
            "third-example.wildcard.org",
            "third-example.wildcard.org",
            false,
        ),
        (
            "third-example.wildcard.org",
            "fith-example.wildcard.org",
            false,
        ),
        (
            "third-example.wildcard.org",
            "fourth-example.wildcard.org",
            true,
        ),
        ("third-example.wildcard.org", "second-example.org", true),
        ("third-example.wildcard.org", "unknown-example.org", true),
        (
            "fourth-example.wildcard.org",
            "fourth-example.wildcard.org",
            false,
        ),
        (
            "fourth-example.wildcard.org",
            "fith-example.wildcard.org",
            true,
        ),
        ("unknown-example.org", "example.org", false),
        ("unknown-example.org", "unknown-example.org", false),
        // Names are compared as DNS does: any case, a trailing dot.
        ("Second-Example.org", "second-example.ORG.", false),
        // A wildcard needs a label of its own before its suffix.
        ("wildcard.org", "a.wildcard.org", true),
        ("a.b.wildcard.org", "c.wildcard.org", false),
    ];
    for (server_name, host, expected) in cases {
        assert_eq!(
            misdirected(server_name, host),
            expected,
            "SNI {server_name}, Host {host}"
        );
    }
}

fn run(filter: &dyn HttpFilter, host: &str, client: SocketAddr) -> (FilterAction, SocketAddr) {
    let ids = IdGenerator::with_seed(0);
    let request = request("/", &[("host", host)]);
    let mut ctx = context_for(&request, &ids);
    ctx.client_addr = Some(client.ip());
    let action = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(filter.on_request(&mut ctx))
        .unwrap();
    (action, SocketAddr::new(ctx.client_addr.unwrap(), 0))
}

#[test]
fn a_request_through_the_front_gets_its_clients_address_and_its_verdict() {
    let filter = suite_gateway();
    let registration = origins::register(Origin {
        client: "203.0.113.7".parse().unwrap(),
        server_name: Some("second-example.org".into()),
        tls_ended: false,
    })
    .unwrap();
    let via = SocketAddr::new(registration.address().into(), 0);

    let (action, client) = run(filter.as_ref(), "second-example.org:443", via);
    assert!(matches!(action, FilterAction::Continue));
    assert_eq!(client.ip().to_string(), "203.0.113.7");

    let (action, client) = run(filter.as_ref(), "example.org", via);
    let FilterAction::Reject(rejection) = action else {
        panic!("a host of another listener was let through");
    };
    assert_eq!(rejection.status, 421);
    assert_eq!(client.ip().to_string(), "203.0.113.7");

    // A peer the front did not dial (a probe, a connection straight to the
    // hop) is left as it is and never judged.
    let (action, client) = run(
        filter.as_ref(),
        "example.org",
        "127.0.0.1:1".parse().unwrap(),
    );
    assert!(matches!(action, FilterAction::Continue));
    assert_eq!(client.ip().to_string(), "127.0.0.1");
}

#[test]
fn entries_that_cannot_be_served_are_refused_saying_why() {
    for (yaml, why) in [
        (
            "listen: 0.0.0.0:443\nhop: 10.0.0.1:15101\nlistener_hostnames: []",
            "not a loopback address",
        ),
        (
            "listen: 127.0.0.1:15101\nhop: 127.0.0.1:15101\nlistener_hostnames: []",
            "listen and hop are both",
        ),
        (
            "listen: 0.0.0.0:443\nhop: 127.0.0.1:15101\nlistener_hostnames: ['*']",
            "is not a hostname",
        ),
    ] {
        let error = match Misdirected::from_config(&config(yaml)) {
            Ok(_) => panic!("{yaml} was accepted"),
            Err(error) => error.to_string(),
        };
        assert!(error.contains(why), "{yaml}: {error}");
    }
}

/// Stands for Praxis's listener: answers each connection with the origin
/// the table gives its peer, read while the connection is open.
async fn hop() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (mut stream, peer) = listener.accept().await.unwrap();
            let mut first = [0_u8; 1];
            stream.read_exact(&mut first).await.unwrap();
            let seen = format!("{:?} from {}", origins::lookup(peer.ip()), peer.ip());
            stream.write_all(seen.as_bytes()).await.unwrap();
            stream.shutdown().await.unwrap();
        }
    });
    address
}

/// What a client that sends `first` gets back through the front at `front`.
async fn through(front: SocketAddr, first: &[u8]) -> String {
    let mut stream = tokio::net::TcpStream::connect(front).await.unwrap();
    stream.write_all(first).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    answer
}

fn client_hello(server_name: &str) -> Vec<u8> {
    let config = ClientConfig::builder_with_provider(crypto_provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(RootCertStore::empty())
        .with_no_client_auth();
    let name = ServerName::try_from(server_name.to_string()).unwrap();
    let mut connection = ClientConnection::new(Arc::new(config), name).unwrap();
    let mut hello = Vec::new();
    connection.write_tls(&mut hello).unwrap();
    hello
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_front_hands_each_connection_on_from_an_address_that_names_its_origin() {
    let front = free_loopback();
    super::front::start(front, hop().await, None).unwrap();

    let answer = through(front, &client_hello("Second-Example.org")).await;
    assert!(
        answer.starts_with(
            "Some(Origin { client: 127.0.0.1, server_name: Some(\"second-example.org\"), tls_ended: false })"
        ),
        "{answer}"
    );
    // The address it came from is forgotten once the connection closed.
    let via: std::net::IpAddr = answer.rsplit(' ').next().unwrap().parse().unwrap();
    let mut forgotten = false;
    for _ in 0..100 {
        forgotten = origins::lookup(via).is_none();
        if forgotten {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(forgotten, "{via} is still in the table");

    // Not TLS: handed on all the same, for Praxis to answer, with no name.
    let answer = through(front, b"GET / HTTP/1.1\r\n\r\n").await;
    assert!(
        answer
            .starts_with("Some(Origin { client: 127.0.0.1, server_name: None, tls_ended: false })"),
        "{answer}"
    );
}

/// A CA (PEM) and a certificate it signed for `name`: (CA, cert, key) PEM.
fn signed(name: &str) -> (String, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.distinguished_name.push(
        rcgen::DnType::CommonName,
        format!("test CA {}", fastrand::u64(..)),
    );
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec![name.to_string()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    (ca.pem(), leaf.pem(), key.serialize_pem())
}

/// Stands for Praxis's plain listener behind a front that ends TLS: reads
/// a line, answers it with the origin of its peer.
async fn plain_hop() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, peer) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let mut stream = tokio::io::BufReader::new(stream);
                let mut line = String::new();
                tokio::io::AsyncBufReadExt::read_line(&mut stream, &mut line)
                    .await
                    .unwrap();
                let origin = origins::lookup(peer.ip()).unwrap();
                let answer = format!("{line:?} {:?} {}", origin.server_name, origin.tls_ended);
                stream.get_mut().write_all(answer.as_bytes()).await.unwrap();
                stream.get_mut().shutdown().await.unwrap();
            });
        }
    });
    address
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_insecure_fallback_the_front_ends_tls_asking_for_a_certificate_and_letting_any_in() {
    let provider = crypto_provider();
    let dir = std::env::temp_dir().join(format!("pontoon-front-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    let (server_ca, server_cert, server_key) = signed("example.org");
    let (client_ca, _, _) = signed("unused");
    let (_, stranger_cert, stranger_key) = signed("client.example.org");
    let yaml = format!(
        "listen: 127.0.0.1:1\nhop: 127.0.0.1:2\nlistener_hostnames: []\ntls:\n  \
         certificates: [{{cert_path: {}, key_path: {}}}]\n  client_ca: {{ca_path: {}}}\n  \
         client_cert_mode: request\n",
        file("server.crt", &server_cert),
        file("server.key", &server_key),
        file("client-ca.crt", &client_ca),
    );
    let entry: serde_yaml::Value = config(&yaml);
    let tls: super::terminate::TlsConfig = serde_yaml::from_value(entry["tls"].clone()).unwrap();
    let front = free_loopback();
    super::front::start(
        front,
        plain_hop().await,
        Some(super::terminate::server_config(&tls).unwrap()),
    )
    .unwrap();

    use rustls::pki_types::pem::PemObject as _;
    let mut roots = RootCertStore::empty();
    roots
        .add(rustls::pki_types::CertificateDer::from_pem_slice(server_ca.as_bytes()).unwrap())
        .unwrap();
    let asked = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // A client whose certificate no CA of the Gateway's signed, and one
    // without any: both get in, and both were asked.
    for with_certificate in [true, false] {
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots.clone());
        let client = if with_certificate {
            use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
            let resolver = Asked {
                asked: asked.clone(),
                key: Arc::new(
                    rustls::sign::CertifiedKey::from_der(
                        vec![CertificateDer::from_pem_slice(stranger_cert.as_bytes()).unwrap()],
                        PrivateKeyDer::from_pem_slice(stranger_key.as_bytes()).unwrap(),
                        &provider,
                    )
                    .unwrap(),
                ),
            };
            builder.with_client_cert_resolver(Arc::new(resolver))
        } else {
            builder.with_no_client_auth()
        };
        let connector = tokio_rustls::TlsConnector::from(Arc::new(client));
        let stream = tokio::net::TcpStream::connect(front).await.unwrap();
        let mut tls = connector
            .connect(ServerName::try_from("example.org").unwrap(), stream)
            .await
            .unwrap_or_else(|e| panic!("certificate {with_certificate}: refused: {e}"));
        tls.write_all(b"hello\n").await.unwrap();
        let mut answer = String::new();
        tls.read_to_string(&mut answer).await.unwrap();
        assert_eq!(answer, "\"hello\\n\" Some(\"example.org\") true");
    }
    assert!(
        asked.load(std::sync::atomic::Ordering::SeqCst),
        "no certificate was asked for"
    );

    // A required certificate is Praxis's to check, never the front's.
    let required = yaml.replace("client_cert_mode: request", "client_cert_mode: require");
    let error = match Misdirected::from_config(&config(&required)) {
        Ok(_) => panic!("the front took a required certificate"),
        Err(error) => error.to_string(),
    };
    assert!(error.contains("client_cert_mode \"require\""), "{error}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Presents `key` when asked, and notes that it was.
#[derive(Debug)]
struct Asked {
    asked: Arc<std::sync::atomic::AtomicBool>,
    key: Arc<rustls::sign::CertifiedKey>,
}

impl rustls::client::ResolvesClientCert for Asked {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[rustls::SignatureScheme],
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        self.asked.store(true, std::sync::atomic::Ordering::SeqCst);
        Some(self.key.clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}
