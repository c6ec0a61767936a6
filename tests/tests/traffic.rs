//! Real HTTP through the real `praxis`, to backends on the addresses the test
//! bed gave real pods, listed by the real endpoint-slice controller: the
//! harness every Gateway traffic test builds on (see `pontoon_tests::netns`).
//! Run as root (network namespaces); otherwise reported as skipped, saying
//! why (a failure under `CI=true`, see `pontoon_tests::skip`).

use std::{
    collections::BTreeMap,
    net::{IpAddr, SocketAddr},
};

use k8s_openapi::api::core::v1::Pod;
use pontoon_tests::{
    TestNamespace, backends,
    netns::{self, NetNs},
    praxis, wait_for_list,
};

/// A config as small as praxis takes: one listener, one route, one cluster.
fn praxis_config(listen: &str, prefix: &str, endpoints: &[SocketAddr]) -> String {
    let endpoints: Vec<String> = endpoints.iter().map(|e| format!("\"{e}\"")).collect();
    format!(
        r#"admin:
  address: "127.0.0.1:9901"
  metrics_address: "127.0.0.1:9902"
insecure_options:
  # Tests run as root; pod addresses are private.
  allow_root: true
  allow_private_endpoints: true
listeners:
  - name: web
    address: "{listen}"
    filter_chains: [main]
filter_chains:
  - name: main
    filters:
      - filter: router
        routes:
          - path_prefix: "{prefix}"
            cluster: web
      - filter: load_balancer
        clusters:
          - name: web
            load_balancer_strategy: round_robin
            endpoints: [{}]
"#,
        endpoints.join(", ")
    )
}

#[test]
fn pod_addresses_are_local_in_the_namespace_and_nothing_else_is() -> anyhow::Result<()> {
    if let Some(reason) = netns::unavailable() {
        return pontoon_tests::skip!("{reason}");
    }
    let mut ns = NetNs::create("netns")?;
    let addr: SocketAddr = "10.244.3.9:8080".parse()?;
    ns.start_echo_backend("lonely", &[addr, "10.244.3.10:9090".parse()?])?;

    let response = ns.curl(&[
        "-H",
        "Host: shop.example",
        "-H",
        "X-Test: 1",
        "http://10.244.3.9:8080/a/b?c=d",
    ])?;
    assert_eq!(response.status, 200, "{response:?}");
    assert_eq!(response.header("x-echo-name"), Some("lonely"));
    let echo = response.json()?;
    assert_eq!(echo["name"], "lonely");
    assert_eq!(echo["listen"], "10.244.3.9:8080");
    assert_eq!(echo["path"], "/a/b");
    assert_eq!(echo["query"], "c=d");
    assert_eq!(echo["host"], "shop.example");
    assert_eq!(echo["headers"]["X-Test"][0], "1");
    let other = ns.get("http://10.244.3.10:9090/")?.json()?;
    assert_eq!(other["listen"], "10.244.3.10:9090");

    // Nothing outside the pod CIDR is reachable, the host's loopback services neither.
    assert!(ns.get("http://10.1.2.3:8080/").is_err());
    assert!(!ns.accepts("10.244.3.9:1".parse()?));
    assert!(ns.accepts(addr));
    println!(
        "{}: {} local, {} routed to lo",
        ns.name(),
        netns::POD_CIDR,
        netns::SERVICE_CIDR
    );
    Ok(())
}

#[test]
fn praxis_refuses_a_bad_config_when_checking() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("pontoon-praxis-{:016x}", rand::random::<u64>()));
    std::fs::create_dir_all(&dir)?;
    let good = dir.join("good.yaml");
    let bad = dir.join("bad.yaml");
    let config = praxis_config("127.0.0.1:18080", "/", &["10.244.0.9:8080".parse()?]);
    std::fs::write(&good, &config)?;
    std::fs::write(&bad, config.replace("round_robin", "sideways"))?;
    let checked = (praxis::check_config(&good), praxis::check_config(&bad));
    std::fs::remove_dir_all(&dir)?;
    checked.0?;
    let err = checked
        .1
        .expect_err("praxis -t accepted an unknown load balancer strategy");
    assert!(
        format!("{err:#}").contains("invalid configuration"),
        "{err:#}"
    );
    Ok(())
}

#[tokio::test]
async fn praxis_balances_over_the_pods_a_service_selects() -> anyhow::Result<()> {
    if let Some(reason) = netns::unavailable() {
        return pontoon_tests::skip!("{reason}");
    }
    let mut net = NetNs::create("traffic")?;
    let ns = TestNamespace::new("traffic").await?;
    let endpoints = backends::deploy(&ns, "web", 2, 80, 8080).await?;

    // The endpoints are the pods' own addresses.
    let pods: Vec<Pod> = wait_for_list(
        &ns.api(),
        "app=web",
        |pods| pods.len() == 2,
        backends::TIMEOUT,
    )
    .await?;
    let mut pod_ips: Vec<IpAddr> = pods
        .iter()
        .filter_map(|p| p.status.as_ref()?.pod_ip.as_ref()?.parse().ok())
        .collect();
    pod_ips.sort();
    assert_eq!(endpoints, pod_ips, "EndpointSlice addresses are the pods'");

    let upstreams: Vec<SocketAddr> = endpoints
        .iter()
        .map(|ip| SocketAddr::new(*ip, 8080))
        .collect();
    for (i, upstream) in upstreams.iter().enumerate() {
        net.start_echo_backend(&format!("web-{i}"), &[*upstream])?;
    }

    let config = net.logs_dir().join("praxis.yaml");
    std::fs::write(
        &config,
        praxis_config("127.0.0.1:18080", "/app", &upstreams),
    )?;
    praxis::check_config(&config)?;
    let praxis = net.start_praxis(&config)?;

    let mut answered: BTreeMap<String, usize> = BTreeMap::new();
    for i in 0..20 {
        let url = format!("http://127.0.0.1:18080/app/{i}?n={i}");
        let response = net.curl(&["-H", "Host: shop.example", &url])?;
        assert_eq!(response.status, 200, "{url}: {response:?}");
        let echo = response.json()?;
        assert_eq!(echo["path"], format!("/app/{i}"));
        assert_eq!(echo["query"], format!("n={i}"));
        assert_eq!(echo["host"], "shop.example");
        let listen = echo["listen"].as_str().unwrap_or_default();
        assert!(
            upstreams.iter().any(|u| u.to_string() == listen),
            "answered on {listen}"
        );
        *answered
            .entry(echo["name"].as_str().unwrap_or_default().to_string())
            .or_default() += 1;
    }
    println!("20 requests through praxis to {upstreams:?}: {answered:?}");
    assert_eq!(
        answered.keys().collect::<Vec<_>>(),
        ["web-0", "web-1"],
        "both backends answered"
    );

    let missing = net.get("http://127.0.0.1:18080/other")?;
    println!("/other: {} {}", missing.status, missing.body.trim());
    assert_eq!(missing.status, 404, "{missing:?}");
    assert!(
        net.exit_status(praxis)?.is_none(),
        "praxis is still running; its log:\n{}",
        net.log(praxis)
    );
    Ok(())
}
