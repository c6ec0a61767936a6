//! The subset of praxis-proxy 0.7.5's configuration that Pontoon writes, as
//! typed structs: field names and nesting follow `praxis-proxy-core`'s
//! `config` module, so serde gives the YAML Praxis parses. Output only; the
//! unit tests parse every generated config back with praxis-proxy-core.

use std::collections::BTreeMap;

use super::conditions::Condition;

use serde::Serialize;

#[derive(Debug, Serialize)]
pub struct Config<'a> {
    pub listeners: Vec<Listener>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admin: Option<Admin>,
    pub filter_chains: Vec<FilterChain<'a>>,
    pub insecure_options: InsecureOptions,
}

#[derive(Debug, Serialize)]
pub struct Admin {
    /// Where `/healthy`, `/ready` and `/metrics` are served.
    pub metrics_address: String,
}

#[derive(Debug, Serialize)]
pub struct Listener {
    pub name: String,
    pub address: String,
    /// `tcp` for TLS passthrough and TCP; absent (HTTP) otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protocol: Option<&'static str>,
    /// How long a TCP session may last, whatever its traffic (Praxis's
    /// default: 300 000 ms; at most 3 600 000).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcp_session_timeout_ms: Option<u64>,
    /// Where a TCP listener sends every connection (`ip:port`), dialled at
    /// once, before the client has sent anything.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<Tls>,
    pub filter_chains: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct Tls {
    pub certificates: Vec<Certificate>,
    /// The CA certificates client certificates must chain to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_ca: Option<CaFile>,
    /// `require` or `request` (a certificate is asked for, not required).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_cert_mode: Option<&'static str>,
}

#[derive(Debug, Serialize)]
pub struct CaFile {
    pub ca_path: String,
}

#[derive(Debug, Serialize)]
pub struct Certificate {
    pub cert_path: String,
    pub key_path: String,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub default: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub server_names: Vec<String>,
}

#[derive(Debug, Default, Serialize)]
pub struct InsecureOptions {
    /// Pod addresses are private (RFC 1918): without this Praxis refuses them
    /// as endpoints.
    pub allow_private_endpoints: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub allow_root: bool,
    /// A TCP listener dials its upstreams itself and refuses private
    /// addresses (Service cluster IPs are) without this.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub allow_private_upstreams: bool,
    #[serde(skip_serializing_if = "SkipPipelineChecks::is_empty")]
    pub skip_pipeline_checks: SkipPipelineChecks,
}

#[derive(Debug, Default, Serialize)]
pub struct SkipPipelineChecks {
    /// Rule filters are gated on their rule by design; a security filter
    /// (from a custom ExtensionRef module) gated like that is reported as a
    /// bypass risk unless this is set.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub conditional_security: bool,
}

impl SkipPipelineChecks {
    fn is_empty(&self) -> bool {
        !self.conditional_security
    }
}

#[derive(Debug, Serialize)]
pub struct FilterChain<'a> {
    pub name: String,
    pub filters: Vec<Filter<'a>>,
}

/// One filter entry. The built-in ones Pontoon writes itself are typed; the
/// entries config filter modules return are written from the model as they
/// are serialized (placeholders filled, gated on their rule).
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum Filter<'a> {
    RequestId(RequestId),
    Headers(Headers),
    Guardrails(Guardrails),
    Router(Router),
    LoadBalancer(LoadBalancer),
    StaticResponse(StaticResponse),
    Timeout(Timeout),
    SniRouter(SniRouter),
    QueryParams(QueryParams),
    BackendHeaders(BackendHeadersEntry<'a>),
    BackendTls(BackendTlsEntry<'a>),
    Misdirected(MisdirectedEntry),
    TcpWeights(TcpWeights),
    Module(super::module_entry::ModuleEntry<'a>),
}

/// Pontoon's data plane's `pontoon_backend_headers` (`dataplane/`): the
/// header changes of the backend whose endpoint the load balancer picked.
#[derive(Debug, Serialize)]
pub struct BackendHeadersEntry<'a> {
    pub filter: &'static str,
    pub conditions: Vec<Condition>,
    pub backends: Vec<OneBackend<'a>>,
}

#[derive(Debug, Serialize)]
pub struct OneBackend<'a> {
    pub endpoints: Vec<String>,
    pub request: &'a crate::data_plane::model::HeaderChanges,
    pub response: &'a crate::data_plane::model::HeaderChanges,
}

/// Pontoon's data plane's `pontoon_tcp_weights` (`dataplane/`): a TCP
/// connect filter that draws the backend by weight.
#[derive(Debug, Serialize)]
pub struct TcpWeights {
    pub filter: &'static str,
    pub backends: Vec<TcpWeight>,
}

#[derive(Debug, Serialize)]
pub struct TcpWeight {
    pub address: String,
    pub weight: u32,
}

/// Pontoon's data plane's `pontoon_misdirected` (`dataplane/`): the front
/// that holds a shared HTTPS port's public address and hands its
/// connections to the port's Praxis listener at `hop`, and the listeners'
/// hostnames it tells a misdirected request by.
#[derive(Debug, Serialize)]
pub struct MisdirectedEntry {
    pub filter: &'static str,
    pub listen: String,
    pub hop: String,
    pub listener_hostnames: Vec<String>,
    /// The port's TLS, when the front ends it (the Praxis listener then has
    /// none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<Tls>,
}

/// Pontoon's data plane's `pontoon_backend_tls` (`dataplane/`): the relays
/// a rule's backends are spoken to through, which open TLS to them and
/// check their certificates' subject alternative names.
#[derive(Debug, Serialize)]
pub struct BackendTlsEntry<'a> {
    pub filter: &'static str,
    pub conditions: Vec<Condition>,
    pub relays: Vec<RelayEntry<'a>>,
}

#[derive(Debug, Serialize)]
pub struct RelayEntry<'a> {
    pub listen: String,
    pub upstream: String,
    pub server_name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca_path: Option<&'a str>,
    pub subject_alt_names: &'a [crate::data_plane::model::SubjectAltName],
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_cert: Option<KeyPair>,
}

/// Pontoon's data plane's `pontoon_query_params` (`dataplane/`): query
/// parameters into internal headers, for the router.
#[derive(Debug, Serialize)]
pub struct QueryParams {
    pub filter: &'static str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub copy: Vec<QueryCopy>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub test: Vec<QueryTest>,
}

#[derive(Debug, Serialize)]
pub struct QueryCopy {
    pub name: String,
    pub header: String,
}

#[derive(Debug, Serialize)]
pub struct QueryTest {
    pub name: String,
    pub pattern: String,
    pub header: String,
}

#[derive(Debug, Serialize)]
pub struct RequestId {
    pub filter: &'static str,
}

impl RequestId {
    pub fn new() -> Self {
        Self {
            filter: "request_id",
        }
    }
}

#[derive(Debug, Serialize)]
pub struct Headers {
    pub filter: &'static str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    pub request_set: Vec<HeaderPair>,
}

impl Headers {
    /// A `headers` filter that sets request headers (internal flags).
    pub fn set(conditions: Vec<Condition>, request_set: Vec<HeaderPair>) -> Self {
        Self {
            filter: "headers",
            conditions,
            request_set,
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct HeaderPair {
    pub name: String,
    pub value: String,
}

/// `guardrails` in `flag` mode: a classifier, never a gate. It records
/// `blocked` when a rule matches; the branch sets an internal flag header.
#[derive(Debug, Serialize)]
pub struct Guardrails {
    pub filter: &'static str,
    pub action: &'static str,
    pub rules: Vec<GuardrailsRule>,
    pub branch_chains: Vec<Branch>,
}

#[derive(Debug, Serialize)]
pub struct GuardrailsRule {
    pub target: &'static str,
    pub name: String,
    pub pattern: String,
}

#[derive(Debug, Serialize)]
pub struct Branch {
    pub name: String,
    pub on_result: OnResult,
    pub chains: Vec<InlineChain>,
}

#[derive(Debug, Serialize)]
pub struct OnResult {
    pub filter: &'static str,
    pub key: &'static str,
    pub result: ResultMatch,
}

#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum ResultMatch {
    Exact(&'static str),
    Not { not: &'static str },
}

#[derive(Debug, Serialize)]
pub struct InlineChain {
    pub name: String,
    pub filters: Vec<Headers>,
}

#[derive(Debug, Serialize)]
pub struct Router {
    pub filter: &'static str,
    /// Gateway API wildcards match any number of labels.
    pub multi_level_subdomain_matching: bool,
    pub routes: Vec<Route>,
}

#[derive(Debug, Serialize)]
pub struct Route {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path_prefix: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    pub cluster: String,
}

#[derive(Debug, Serialize)]
pub struct LoadBalancer {
    pub filter: &'static str,
    pub clusters: Vec<Cluster>,
}

#[derive(Debug, Serialize)]
pub struct Cluster {
    pub name: String,
    pub load_balancer_strategy: &'static str,
    pub endpoints: Vec<Endpoint>,
    pub http: ClusterHttp,
    /// Per read from the upstream: before the response starts, the client
    /// gets 504 when it passes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_timeout_ms: Option<u64>,
    /// TLS to the endpoints (a BackendTLSPolicy): absent, plain.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<ClusterTls>,
    /// The rule's `retry`: absent, Praxis's own default (a failed connect
    /// tried again on the same endpoint, idempotent requests only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_policy: Option<RetryPolicy>,
}

/// A cluster's `retry_policy`: when Praxis sends a request again, to
/// another endpoint where there is one, after a jittered backoff.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RetryPolicy {
    /// Retries after the first attempt (absent: Praxis's 3; at most 15).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_retries: Option<u32>,
    /// Response statuses retried (100..=599).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub retriable_status_codes: Vec<u16>,
    /// `connect_failure`, `reset` (a connection closed, a read or write
    /// failed or timed out), `refused_stream`, `status_5xx`.
    pub retriable_conditions: Vec<&'static str>,
    /// Each attempt's connect, read and write timeout (at most one hour).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_try_timeout_ms: Option<u64>,
    /// No retry starts once this long has passed since the request came
    /// (at most one hour).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_timeout_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backoff: Option<Backoff>,
    /// Whether POST and PATCH requests are retried too.
    pub allow_non_idempotent: bool,
}

/// Praxis's backoff: before retry n, a wait drawn at random between 0 and
/// `base_interval_ms` × 2^(n-1), capped at `max_interval_ms` (> 0 and at
/// least the base).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Backoff {
    pub base_interval_ms: u64,
    pub max_interval_ms: u64,
}

/// A cluster's `tls`: the certificate is verified (Praxis's default) against
/// `sni`, with `ca` as the trust (else the system's roots).
#[derive(Debug, Serialize)]
pub struct ClusterTls {
    pub sni: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca: Option<CaFile>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_cert: Option<KeyPair>,
}

#[derive(Debug, Serialize)]
pub struct KeyPair {
    pub cert_path: String,
    pub key_path: String,
}

impl From<&crate::data_plane::model::CertificateFiles> for KeyPair {
    fn from(files: &crate::data_plane::model::CertificateFiles) -> Self {
        Self {
            cert_path: files.cert_path.clone(),
            key_path: files.key_path.clone(),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct Endpoint {
    pub address: String,
    pub weight: u32,
}

/// The tags rule filters are gated on (`selected_upstream`), and the HTTP
/// version spoken to the endpoints.
#[derive(Debug, Serialize)]
pub struct ClusterHttp {
    /// `h2`: HTTP/2 with prior knowledge (cleartext); absent: HTTP/1.1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<&'static str>,
    pub application_protocol: String,
    pub application_provider: String,
}

#[derive(Debug, Serialize)]
pub struct StaticResponse {
    pub filter: &'static str,
    pub conditions: Vec<Condition>,
    pub status: u16,
}

/// `timeout`: 504 when the upstream's response headers come later than
/// `timeout_ms` after the request.
#[derive(Debug, Serialize)]
pub struct Timeout {
    pub filter: &'static str,
    pub conditions: Vec<Condition>,
    pub timeout_ms: u64,
}

/// `sni_router` (TCP): a TLS stream to an address by the ClientHello's
/// server name (exact names first, then the longest wildcard suffix); with
/// neither a match nor `default_upstream`, the connection is closed.
#[derive(Debug, Serialize)]
pub struct SniRouter {
    pub filter: &'static str,
    /// Required by Praxis, empty or not.
    pub routes: Vec<SniRoute>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_upstream: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct SniRoute {
    pub server_names: Vec<String>,
    pub upstream: String,
}
