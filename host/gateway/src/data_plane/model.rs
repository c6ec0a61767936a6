//! What the Gateway controller resolved for one Gateway, in the terms config
//! generation needs: listeners with their attached routes, each rule's
//! matches, its backends resolved to ready endpoints, and its filters already
//! translated (by the WASM config filters) into Praxis filter entries.
//!
//! The controller fills it; `config` turns it into Praxis configuration. No
//! Kubernetes client and no wasmtime here: plain data, easy to build in tests.

use std::net::SocketAddr;

/// The Gateway API's group, as references spell it.
pub const GATEWAY_GROUP: &str = "gateway.networking.k8s.io";

/// A kind of route.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RouteKind {
    Http,
    Grpc,
    Tls,
    Tcp,
}

impl RouteKind {
    pub const ALL: [RouteKind; 4] = [
        RouteKind::Http,
        RouteKind::Grpc,
        RouteKind::Tls,
        RouteKind::Tcp,
    ];

    /// The kind's name, as routes, listeners and ReferenceGrants spell it.
    pub fn name(self) -> &'static str {
        match self {
            RouteKind::Http => "HTTPRoute",
            RouteKind::Grpc => "GRPCRoute",
            RouteKind::Tls => "TLSRoute",
            RouteKind::Tcp => "TCPRoute",
        }
    }

    pub fn from_name(group: &str, kind: &str) -> Option<Self> {
        if group != GATEWAY_GROUP {
            return None;
        }
        Self::ALL.into_iter().find(|k| k.name() == kind)
    }

    /// Whether its requests are HTTP (served by an HTTP or HTTPS listener's
    /// router) rather than streams (TLS routed by server name, or TCP).
    pub fn is_http(self) -> bool {
        matches!(self, RouteKind::Http | RouteKind::Grpc)
    }
}

impl std::fmt::Display for RouteKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One Gateway's data plane.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GatewayModel {
    pub namespace: String,
    pub name: String,
    /// Listeners in the Gateway's order (only the ones that are programmed:
    /// conflicted or unsupported listeners are left out by the controller).
    pub listeners: Vec<Listener>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Http,
    Https,
    /// TLS passed through to the backend, routed by the ClientHello's
    /// server name (TLSRoutes).
    TlsPassthrough,
    /// TLS terminated with the listener's certificate and the plain stream
    /// sent to the backend of the TLSRoute whose hostname the ClientHello
    /// names. It shares a port with passthrough listeners (mixed).
    TlsTerminate,
    /// TCP streams sent to the backend of the listener's TCPRoute.
    Tcp,
}

impl Protocol {
    /// The scheme a listener of this protocol serves, as Praxis's listener
    /// names and the filters' `${pontoon_listener_scheme}` spell it.
    pub fn scheme(self) -> &'static str {
        match self {
            Protocol::Http => "http",
            Protocol::Https => "https",
            Protocol::TlsPassthrough | Protocol::TlsTerminate => "tls",
            Protocol::Tcp => "tcp",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Listener {
    /// The listener's `name` (a route's `sectionName`).
    pub name: String,
    pub port: u16,
    pub protocol: Protocol,
    /// The listener's hostname (may be a wildcard `*.example.com`); `None` for any.
    pub hostname: Option<String>,
    /// For HTTPS: the certificates, as files where the Deployment mounts each
    /// `kubernetes.io/tls` Secret (first one is the default).
    pub certificates: Vec<CertificateFiles>,
    /// For HTTPS: the client certificates asked for (the same for every
    /// listener of a port, as the Gateway API sets them per port).
    pub client_validation: Option<ClientValidation>,
    /// The routes attached to this listener, in the Gateway API's precedence
    /// order for ties (oldest first, then by namespace/name).
    pub routes: Vec<Route>,
}

/// Client certificates checked against the CA certificates in `ca_path`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientValidation {
    pub ca_path: String,
    /// Without a valid certificate a client is refused; otherwise
    /// (`AllowInsecureFallback`) let in without one, or with one that does
    /// not chain to the CA (on Pontoon's data plane, whose front ends such
    /// a port's TLS; stock Praxis verifies every certificate presented).
    pub required: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertificateFiles {
    pub cert_path: String,
    pub key_path: String,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Route {
    /// HTTPRoute and GRPCRoute on HTTP(S) listeners, TLSRoute on TLS ones.
    pub kind: RouteKind,
    pub namespace: String,
    pub name: String,
    /// Effective hostnames: the route's hostnames intersected with the
    /// listener's (Gateway API rules, wildcards included); empty means any host.
    pub hostnames: Vec<String>,
    pub rules: Vec<Rule>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Rule {
    /// Index of the rule in the HTTPRoute's `spec.rules`.
    pub index: usize,
    /// ORed; an empty list means the spec's default (PathPrefix `/`).
    pub matches: Vec<Match>,
    /// Weighted backends; a rule whose backends all failed to resolve has
    /// none and must answer 500 (the spec's behaviour for invalid backends).
    pub backends: Vec<Backend>,
    /// The rule's filters, each translated into Praxis filter entries, in order.
    pub filters: Vec<TranslatedFilter>,
    pub timeouts: Timeouts,
}

/// A rule's `timeouts`, in milliseconds (`None` when unset or `0s`: none),
/// and its `retry`, which travels with them: GEP-1731 bounds each attempt
/// by `backendRequest` and all of them together by `request`, and Praxis's
/// retry policy holds the three together.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Timeouts {
    /// From the request's arrival until the response's headers.
    pub request_ms: Option<u64>,
    /// For each request to a backend.
    pub backend_request_ms: Option<u64>,
    /// The rule's `retry` (experimental channel); `None`: not retried.
    pub retry: Option<Retry>,
}

/// A rule's `retry` (GEP-1731): a failed request to a backend is sent
/// again, to another endpoint where the backends have one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Retry {
    /// How many times a request may be sent again after its first attempt
    /// (`attempts`, at least 1); `None`: the data plane's default.
    pub attempts: Option<u32>,
    /// The response statuses retried (`codes`, 400 to 599), sorted, each
    /// once; besides them, connection errors and a `backendRequest`
    /// timeout are always retried.
    pub codes: Vec<u16>,
    /// The least wait before a retry, in milliseconds (`backoff`); `None`:
    /// the data plane's default.
    pub backoff_ms: Option<u64>,
}

/// One HTTPRoute match: every present part must hold (AND).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Match {
    pub path: Option<PathMatch>,
    pub headers: Vec<ValueMatch>,
    pub query_params: Vec<ValueMatch>,
    /// An HTTP method (`GET`, ...).
    pub method: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PathMatch {
    Exact(String),
    /// With the spec's segment semantics: `/foo` matches `/foo` and `/foo/bar`, not `/foobar`.
    Prefix(String),
    RegularExpression(String),
}

/// A header or query parameter match.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValueMatch {
    pub name: String,
    pub value: String,
    pub kind: MatchKind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatchKind {
    Exact,
    RegularExpression,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Backend {
    /// A cluster name unique within the config: `<namespace>/<service>:<port>`.
    pub cluster: String,
    /// The Service's namespace and name, and its port's name (what a
    /// BackendTLSPolicy's `targetRefs` and `sectionName` name).
    pub namespace: String,
    pub service: String,
    pub port_name: Option<String>,
    pub weight: u32,
    /// Ready endpoint addresses from the Service's EndpointSlices.
    pub endpoints: Vec<SocketAddr>,
    /// What the backend speaks (the Service port's `appProtocol`, else the
    /// route kind's default).
    pub protocol: BackendProtocol,
    /// The Service's cluster address and port, where it has one: a TLS
    /// stream is sent there whole (kube-proxy spreads the connections).
    pub service_address: Option<SocketAddr>,
    /// TLS to the backend, when a BackendTLSPolicy applies to its port.
    pub tls: Option<BackendTls>,
    /// The backend's own filters (`backendRefs[].filters`): header changes
    /// for the requests sent to it and their responses.
    pub headers: Option<BackendHeaders>,
}

/// A backend's own RequestHeaderModifier and ResponseHeaderModifier.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BackendHeaders {
    pub request: HeaderChanges,
    pub response: HeaderChanges,
}

/// What a header modifier does: set (replace), add (append), remove.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct HeaderChanges {
    pub set: Vec<HeaderValuePair>,
    pub add: Vec<HeaderValuePair>,
    pub remove: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct HeaderValuePair {
    pub name: String,
    pub value: String,
}

/// TLS from the data plane to a backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackendTls {
    /// The server name sent, and verified against the backend's certificate
    /// unless `subject_alt_names` says otherwise.
    pub sni: String,
    /// The CA certificates trusted; `None`: the data plane's system roots.
    pub ca_path: Option<String>,
    /// The Gateway's client certificate, for backends that ask for one.
    pub client_certificate: Option<CertificateFiles>,
    /// The names the certificate must carry one of, instead of `sni`
    /// (BackendTLSPolicy `subjectAltNames`); checked by Pontoon's data
    /// plane's relay, as Praxis checks the SNI only.
    pub subject_alt_names: Vec<SubjectAltName>,
    /// The relays that check them, one per endpoint of the backend: its
    /// endpoints are then their loopback addresses, spoken to in plain HTTP.
    pub relays: Vec<Relay>,
}

impl BackendTls {
    /// What must be the same for backends to share one cluster: all of it
    /// but the relays (each backend has its own).
    pub fn trust(
        &self,
    ) -> (
        &str,
        Option<&str>,
        Option<&CertificateFiles>,
        &[SubjectAltName],
    ) {
        (
            &self.sni,
            self.ca_path.as_deref(),
            self.client_certificate.as_ref(),
            &self.subject_alt_names,
        )
    }

    /// Whether the data plane speaks to this backend through relays (plain
    /// HTTP to them), not in TLS itself.
    pub fn relayed(&self) -> bool {
        !self.subject_alt_names.is_empty()
    }
}

/// One of a BackendTLSPolicy's `subjectAltNames`, as the relay's entry
/// spells it (`{hostname: ...}` or `{uri: ...}`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SubjectAltName {
    Hostname(String),
    Uri(String),
}

/// A relay of Pontoon's data plane: it listens on loopback and opens TLS to
/// `upstream` itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Relay {
    pub listen: SocketAddr,
    pub upstream: SocketAddr,
}

/// The application protocol a backend speaks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BackendProtocol {
    /// HTTP/1.1 (WebSocket upgrades included).
    #[default]
    Http1,
    /// HTTP/2 over cleartext, with prior knowledge (`kubernetes.io/h2c`;
    /// every gRPC backend).
    H2c,
}

/// One HTTPRoute filter after translation by a config filter module.
#[derive(Clone, Debug, PartialEq)]
pub struct TranslatedFilter {
    /// The Gateway API filter type (`RequestHeaderModifier`, `ExtensionRef:GROUP/KIND`, ...).
    pub kind: String,
    /// The module that translated it.
    pub module: String,
    /// Praxis filter entries (JSON objects), applied in order; shared with
    /// the translation cache, which hands the same entries to every reconcile.
    pub entries: std::sync::Arc<[serde_json::Value]>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_named_as_the_api_names_them() {
        for kind in RouteKind::ALL {
            assert_eq!(RouteKind::from_name(GATEWAY_GROUP, kind.name()), Some(kind));
        }
        assert_eq!(RouteKind::from_name("other.io", "HTTPRoute"), None);
        assert_eq!(RouteKind::from_name(GATEWAY_GROUP, "UDPRoute"), None);
    }
}
