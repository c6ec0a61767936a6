use std::sync::Arc;

use praxis_core::{
    connectivity::{ConnectionOptions, Upstream},
    id::IdGenerator,
};
use praxis_filter::Response;

use super::*;
use crate::test_context::{config, context_for, request};

fn filter() -> Box<dyn HttpFilter> {
    BackendHeaders::from_config(&config(
        "backends:
           - endpoints: ['10.0.0.1:8080', '10.0.0.2:8080']
             request: {set: [{name: backend, value: v1}], add: [{name: x-add, value: one}], remove: [x-gone]}
             response: {set: [{name: x-served, value: v1}], remove: [x-internal]}
           - endpoints: ['10.0.0.3:8080']
             request: {set: [{name: backend, value: v2}]}",
    ))
    .unwrap()
}

fn upstream(address: &str) -> Upstream {
    Upstream {
        address: Arc::from(address),
        authority: None,
        base_path: None,
        connection: Arc::new(ConnectionOptions::default()),
        tls: None,
    }
}

/// The request changes and the response headers after the filter, for a
/// request the load balancer sent to `address`.
fn through(address: Option<&str>) -> (Vec<(String, String)>, Vec<String>, http::HeaderMap) {
    let filter = filter();
    let request = request("/", &[]);
    let ids = IdGenerator::with_seed(0);
    let mut ctx = context_for(&request, &ids);
    ctx.current_filter_id = Some(7);
    ctx.upstream = address.map(upstream);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let action = runtime.block_on(filter.on_request(&mut ctx)).unwrap();
    assert!(matches!(action, FilterAction::Continue));
    let mut set: Vec<(String, String)> = ctx
        .request_headers_to_set
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_string()))
        .collect();
    set.extend(
        ctx.extra_request_headers
            .iter()
            .map(|(n, v)| (format!("+{n}"), v.clone())),
    );
    let removed = ctx
        .request_headers_to_remove
        .iter()
        .map(|n| n.to_string())
        .collect();
    let mut response = Response {
        headers: http::HeaderMap::new(),
        status: http::StatusCode::OK,
    };
    response
        .headers
        .insert("x-internal", http::HeaderValue::from_static("secret"));
    ctx.response_header = Some(&mut response);
    let action = runtime.block_on(filter.on_response(&mut ctx)).unwrap();
    assert!(matches!(action, FilterAction::Continue));
    drop(ctx);
    (set, removed, response.headers)
}

#[test]
fn each_backend_gets_its_own_changes() {
    let (set, removed, response) = through(Some("10.0.0.2:8080"));
    assert_eq!(
        set,
        [
            ("backend".to_string(), "v1".to_string()),
            ("+x-add".to_string(), "one".to_string())
        ]
    );
    assert_eq!(removed, ["x-gone"]);
    assert_eq!(response["x-served"], "v1");
    assert!(response.get("x-internal").is_none());

    let (set, removed, response) = through(Some("10.0.0.3:8080"));
    assert_eq!(set, [("backend".to_string(), "v2".to_string())]);
    assert!(removed.is_empty());
    assert_eq!(
        response["x-internal"], "secret",
        "v2 has no response changes"
    );
}

#[test]
fn an_endpoint_of_no_listed_backend_is_left_alone() {
    for address in [Some("10.0.0.9:8080"), None, Some("not an address")] {
        let (set, removed, response) = through(address);
        assert!(set.is_empty() && removed.is_empty(), "{address:?}");
        assert_eq!(response["x-internal"], "secret");
    }
}

#[test]
fn backends_sharing_an_endpoint_or_bad_names_are_refused() {
    for yaml in [
        "backends: [{endpoints: ['10.0.0.1:80']}, {endpoints: ['10.0.0.1:80']}]",
        "backends: [{endpoints: ['10.0.0.1:80'], request: {set: [{name: 'bad name', value: x}]}}]",
        "backends: [{endpoints: ['10.0.0.1:80'], response: {remove: ['bad name']}}]",
        "backends: [{endpoints: ['nowhere']}]",
    ] {
        assert!(
            BackendHeaders::from_config(&config(yaml)).is_err(),
            "{yaml}"
        );
    }
}
