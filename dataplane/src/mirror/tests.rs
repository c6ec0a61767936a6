use http::{HeaderName, HeaderValue};

use super::*;
use crate::test_context::{config, context_for, request};

fn mirror(yaml: &str) -> Box<dyn HttpFilter> {
    Mirror::from_config(&config(yaml)).unwrap()
}

/// A mirror without endpoints, for what it decides before it sends.
fn bare(numerator: u32, denominator: u32, in_flight: usize) -> Mirror {
    Mirror {
        backend: "b".into(),
        peers: Vec::new(),
        next: AtomicUsize::new(0),
        numerator,
        denominator,
        timeout: Duration::from_secs(1),
        max_body_bytes: 1,
        in_flight: Arc::new(Semaphore::new(in_flight)),
    }
}

#[test]
fn a_share_must_be_one() {
    for yaml in [
        "{backend: b, endpoints: [], numerator: 1, denominator: 0}",
        "{backend: b, endpoints: [], numerator: 3, denominator: 2}",
        "{backend: b, endpoints: [], max_in_flight: 0}",
        "{backend: b, endpoints: [], colour: red}",
    ] {
        assert!(Mirror::from_config(&config(yaml)).is_err(), "{yaml}");
    }
    mirror("{backend: b, endpoints: ['10.0.0.1:80'], numerator: 0, denominator: 1}");
}

#[test]
fn the_share_mirrored_is_the_fraction_asked() {
    let share = bare(20, 100, 1);
    let picked = (0..20_000).filter(|_| share.picked()).count();
    // 20 % of 20 000 is 4 000; five standard deviations (~283) either side.
    assert!((3_717..=4_283).contains(&picked), "{picked}");
    let all = Mirror {
        numerator: 7,
        denominator: 7,
        ..share
    };
    assert!((0..1_000).all(|_| all.picked()));
}

#[test]
fn the_copy_is_the_request_as_the_backend_gets_it() {
    let request = request(
        "/a/b?x=1",
        &[
            ("host", "example.com"),
            ("connection", "keep-alive"),
            ("content-length", "0"),
            ("x-remove", "gone"),
            ("x-set", "old"),
            ("x-add", "one"),
        ],
    );
    let ids = praxis_core::id::IdGenerator::with_seed(0);
    let mut ctx = context_for(&request, &ids);
    ctx.request_headers_to_remove
        .push(HeaderName::from_static("x-remove"));
    ctx.request_headers_to_set.push((
        HeaderName::from_static("x-set"),
        HeaderValue::from_static("new"),
    ));
    ctx.extra_request_headers
        .push(("x-add".into(), "two".to_string()));
    let copy = copy(&ctx);
    assert_eq!(copy.uri, "/a/b?x=1");
    assert_eq!(copy.method, http::Method::GET);
    let h = &copy.headers;
    assert_eq!(h["host"], "example.com");
    assert!(h.get("connection").is_none() && h.get("content-length").is_none());
    assert!(h.get("x-remove").is_none());
    assert_eq!(h["x-set"], "new");
    let added: Vec<_> = h.get_all("x-add").iter().collect();
    assert_eq!(added, ["one", "two"]);
}

#[test]
fn an_http2_request_names_its_host_in_the_uri() {
    let request = request("http://example.com:8080/p", &[]);
    let ids = praxis_core::id::IdGenerator::with_seed(0);
    let ctx = context_for(&request, &ids);
    let copy = copy(&ctx);
    assert_eq!(copy.headers["host"], "example.com:8080");
    assert_eq!(copy.uri, "/p");
}

#[test]
fn a_body_is_announced_by_its_length_or_its_encoding() {
    let headers = |pairs: &[(&'static str, &'static str)]| {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_static(value));
        }
        map
    };
    assert!(!has_body(&headers(&[])));
    assert!(!has_body(&headers(&[("content-length", "0")])));
    assert!(has_body(&headers(&[("content-length", "12")])));
    assert!(has_body(&headers(&[("transfer-encoding", "chunked")])));
}

#[test]
fn the_real_request_goes_on_whatever_the_mirror() {
    // No sub-request client here (as when Praxis has none): the request is
    // let through untouched.
    let filter = mirror("{backend: b, endpoints: ['10.0.0.1:80']}");
    let (action, set) = crate::test_context::run_request(filter.as_ref(), "/x");
    assert!(matches!(action, FilterAction::Continue));
    assert!(set.is_empty());
}

#[test]
fn copies_out_are_bounded_per_filter_and_for_the_whole_process() {
    let mirror = |in_flight: usize| bare(1, 1, in_flight);
    let one = mirror(2);
    let (a, b) = (one.admit(), one.admit());
    assert!(a.is_some() && b.is_some());
    assert!(one.admit().is_none(), "the filter's bound");
    drop(a);
    assert!(one.admit().is_some(), "a copy done frees its place");

    // Many filters (many tenants' rules) share the process's bound.
    let filters: Vec<Mirror> = (0..PROCESS_IN_FLIGHT / 128 + 1)
        .map(|_| mirror(128))
        .collect();
    let held: Vec<Permits> = filters
        .iter()
        .flat_map(|f| (0..128).map_while(|_| f.admit()))
        .collect();
    // `b` still holds one place; no other test admits a copy.
    assert_eq!(held.len() + 1, PROCESS_IN_FLIGHT);
    assert!(mirror(1).admit().is_none(), "the process's bound");
    drop(b);
    assert!(mirror(1).admit().is_some());
}
