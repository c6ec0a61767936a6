use std::{borrow::Cow, collections::BTreeMap, time::Instant};

use praxis_filter::{TcpFilter, TcpFilterContext};

use super::TcpWeights;
use crate::test_context::config;

/// Where `filter` sends `n` connections, by address.
fn spread(filter: &dyn TcpFilter, n: usize) -> BTreeMap<String, usize> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let mut counts = BTreeMap::new();
    for _ in 0..n {
        let mut ctx = TcpFilterContext {
            remote_addr: "10.0.0.9:40000",
            local_addr: "0.0.0.0:5432",
            sni: None,
            upstream_addr: Some(Cow::Borrowed("10.96.0.20:5432")),
            cluster: None,
            health_registry: None,
            kv_stores: None,
            connect_time: Instant::now(),
            bytes_in: 0,
            bytes_out: 0,
        };
        let action = runtime.block_on(filter.on_connect(&mut ctx)).unwrap();
        assert!(matches!(action, praxis_filter::FilterAction::Continue));
        *counts
            .entry(ctx.upstream_addr.unwrap().into_owned())
            .or_default() += 1;
    }
    counts
}

#[test]
fn connections_are_spread_by_weight_and_none_go_to_a_backend_of_weight_zero() {
    let filter = TcpWeights::from_config(&config(
        "backends: [{address: '10.96.0.20:5432', weight: 70}, {address: '10.96.0.21:5432', weight: 30}, {address: '10.96.0.22:5432', weight: 0}]",
    ))
    .unwrap();
    let counts = spread(filter.as_ref(), 2000);
    let a = counts.get("10.96.0.20:5432").copied().unwrap_or(0);
    let b = counts.get("10.96.0.21:5432").copied().unwrap_or(0);
    assert_eq!(a + b, 2000, "{counts:?}");
    // 70 % of 2000 is 1400; a fair draw stays well within ±100.
    assert!((1300..=1500).contains(&a), "{counts:?}");
    assert!(!counts.contains_key("10.96.0.22:5432"), "{counts:?}");
}

#[test]
fn a_filter_without_weight_is_refused() {
    let error = match TcpWeights::from_config(&config(
        "backends: [{address: '10.96.0.20:5432', weight: 0}]",
    )) {
        Ok(_) => panic!("accepted"),
        Err(error) => error.to_string(),
    };
    assert!(error.contains("no backend has a weight above 0"), "{error}");
}
