//! Runs one filter's request phase the way Praxis's pipeline calls it: an
//! `HttpFilterContext` as the protocol layer builds one for a plain HTTP
//! request (no TLS, no cluster chosen yet), so that each filter's unit tests
//! see what it would see in the server; and what the filters' tests share
//! besides (the crypto provider, a free loopback port).

use std::collections::HashMap;

use http::{HeaderMap, HeaderName, HeaderValue, Method, Uri};
use praxis_core::{id::IdGenerator, time::SystemTimeSource};
use praxis_filter::{
    BodyMode, FilterAction, HttpFilter, HttpFilterContext, Request, RequestExtensions, Response,
    SubRequestResponseMode,
};

/// The TLS crypto provider Praxis installs, as the server has it.
pub fn crypto_provider() -> std::sync::Arc<rustls::crypto::CryptoProvider> {
    praxis::install_crypto_provider();
    rustls::crypto::CryptoProvider::get_default()
        .unwrap()
        .clone()
}

/// A loopback address with a port free a moment ago, for a test's listener.
pub fn free_loopback() -> std::net::SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
}

/// A filter's YAML config.
pub fn config(yaml: &str) -> serde_yaml::Value {
    serde_yaml::from_str(yaml).unwrap()
}

/// A GET of `uri` with `headers`.
pub fn request(uri: &str, headers: &[(&str, &str)]) -> Request {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        map.append(
            HeaderName::try_from(*name).unwrap(),
            HeaderValue::from_str(value).unwrap(),
        );
    }
    Request {
        method: Method::GET,
        uri: uri.parse::<Uri>().unwrap(),
        headers: map,
    }
}

/// The filter's `on_request` for a GET of `uri` without headers: its action
/// and the request headers it asked to set.
pub fn run_request(
    filter: &dyn HttpFilter,
    uri: &str,
) -> (FilterAction, Vec<(HeaderName, HeaderValue)>) {
    run(filter, &request(uri, &[]))
}

/// The filter's `on_request` for `request`.
pub fn run(
    filter: &dyn HttpFilter,
    request: &Request,
) -> (FilterAction, Vec<(HeaderName, HeaderValue)>) {
    let ids = IdGenerator::with_seed(0);
    let mut ctx = context(request, &ids);
    let action = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(filter.on_request(&mut ctx))
        .unwrap();
    (action, ctx.request_headers_to_set)
}

/// The filter's `on_response` for `request`, answered 200 by the backend:
/// the response's headers after it.
pub fn run_response(filter: &dyn HttpFilter, request: &Request) -> HeaderMap {
    let ids = IdGenerator::with_seed(0);
    let mut response = Response {
        headers: HeaderMap::new(),
        status: http::StatusCode::OK,
    };
    {
        let mut ctx = context(request, &ids);
        ctx.response_header = Some(&mut response);
        let action = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(filter.on_response(&mut ctx))
            .unwrap();
        assert!(matches!(action, FilterAction::Continue));
    }
    response.headers
}

/// The context Praxis's pipeline hands a filter for `request`.
pub fn context_for<'a>(request: &'a Request, ids: &'a IdGenerator) -> HttpFilterContext<'a> {
    context(request, ids)
}

fn context<'a>(request: &'a Request, ids: &'a IdGenerator) -> HttpFilterContext<'a> {
    HttpFilterContext {
        buffered_request_body: None,
        body_done_indices: Vec::new(),
        branch_iterations: HashMap::new(),
        client_addr: None,
        cluster: None,
        current_filter_id: None,
        downstream_tls: false,
        metrics_route: None,
        peer_identity: None,
        extensions: RequestExtensions::default(),
        executed_branch_filters: Vec::new(),
        executed_filter_indices: Vec::new(),
        extra_request_headers: Vec::new(),
        request_headers_to_remove: Vec::new(),
        request_headers_to_set: Vec::new(),
        filter_metadata: HashMap::new(),
        grpc_completion: None,
        prior_pre_read_mutations: Vec::new(),
        pre_read_mutations: Vec::new(),
        structured_metadata: HashMap::new(),
        filter_results: HashMap::new(),
        filter_state: HashMap::new(),
        health_registry: None,
        id_generator: ids,
        kv_stores: None,
        session_stores: None,
        subrequest_client: None,
        subrequest_response_mode: SubRequestResponseMode::Buffered,
        request,
        request_body_bytes: 0,
        request_body_mode: BodyMode::Stream,
        request_start: std::time::Instant::now(),
        response_body_bytes: 0,
        response_body_mode: BodyMode::Stream,
        response_header: None,
        response_headers_modified: false,
        upstream_reached: false,
        selected_endpoint_index: None,
        attempted_endpoints: Vec::new(),
        retry_policy: None,
        route_retry_policy: None,
        hedge_policy: None,
        cluster_retry_state: None,
        cluster_retry_state_released: false,
        endpoint_reselector: None,
        pinned_endpoint_address: None,
        time_source: &SystemTimeSource,
        rewritten_path: None,
        upstream: None,
    }
}
