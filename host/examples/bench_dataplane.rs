//! `make bench-gateway` (third part): Pontoon's data plane against stock
//! Praxis, on the same config and the same backend. Prints figures; asserts
//! nothing about time.
//!
//! Both proxies run, one at a time, in the test bed's network namespace,
//! in front of the test bed's echo backend, with one config (a router
//! entry, a load balancer, `request_id`: a route without Pontoon's filters,
//! which is what both can serve). Both are built alike: release, opt-level
//! 1 (scripts/praxis.sh builds stock Praxis so; the Makefile builds
//! `pontoon-dataplane` so for this bench, `BENCH_DATAPLANE_BIN`). A load
//! generator (this program again, `load`, run inside the namespace) keeps
//! `CONNECTIONS` keep-alive connections busy for `SECONDS` after a warm-up,
//! and reports requests per second and p50/p99 latency. Rounds alternate
//! the two proxies; the median round of each is compared.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::{client::legacy::Client, rt::TokioExecutor};
use pontoon_tests::{
    bench::percentile,
    netns::{self, NetNs},
    praxis,
};

const ROUNDS: usize = 5;
const CONNECTIONS: usize = 16;
const SECONDS: u64 = 8;
const WARM_UP: Duration = Duration::from_secs(2);
const BACKEND: &str = "10.244.250.10:8080";

#[derive(Clone, Copy, Debug, serde::Serialize, serde::Deserialize)]
struct Load {
    requests: u64,
    errors: u64,
    rps: f64,
    p50_us: u64,
    p99_us: u64,
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("load") {
        let url = args.get(2).context("load URL")?.clone();
        let load = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?
            .block_on(generate(url))?;
        println!("{}", serde_json::to_string(&load)?);
        return Ok(());
    }
    if let Some(reason) = netns::unavailable() {
        bail!("bench_dataplane needs the test bed's network namespace: {reason}");
    }
    let ours = match std::env::var_os("BENCH_DATAPLANE_BIN") {
        Some(path) => PathBuf::from(path),
        None => praxis::binary()?,
    };
    let stock = praxis::stock_binary()?;
    println!("pontoon-dataplane: {}", ours.display());
    println!("stock praxis:      {}", stock.display());

    let mut net = NetNs::create("bench-dp")?;
    let backend: SocketAddr = BACKEND.parse()?;
    net.start_echo_backend("web", &[backend])?;
    let config = net.logs_dir().join("bench.yaml");
    std::fs::write(&config, proxy_config(backend))?;
    praxis::check_config(&config)?;
    praxis::check_stock_config(&config)?;

    let me = std::env::current_exe()?;
    let mut results: Vec<(&str, Vec<Load>)> =
        vec![("pontoon-dataplane", Vec::new()), ("praxis", Vec::new())];
    for round in 0..ROUNDS {
        // Alternate which goes first, so neither always meets a warmer machine.
        let order: [usize; 2] = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for which in order {
            let binary: &Path = if which == 0 { &ours } else { &stock };
            let id = net.start_proxy(binary, &config)?;
            let output = net
                .command(&me)
                .args(["load", "http://127.0.0.1:18080/bench"])
                .output()
                .context("the load generator")?;
            net.stop(id)?;
            if !output.status.success() {
                bail!(
                    "the load generator failed: {}",
                    String::from_utf8_lossy(&output.stderr)
                );
            }
            let load: Load = serde_json::from_slice(&output.stdout)
                .with_context(|| String::from_utf8_lossy(&output.stdout).to_string())?;
            println!(
                "round {}: {:<17} {:>8.0} req/s  p50 {:>5} us  p99 {:>5} us  ({} requests, {} errors)",
                round + 1,
                results[which].0,
                load.rps,
                load.p50_us,
                load.p99_us,
                load.requests,
                load.errors
            );
            results[which].1.push(load);
        }
    }
    let median = |loads: &[Load]| {
        let mut sorted = loads.to_vec();
        sorted.sort_by(|a, b| a.rps.total_cmp(&b.rps));
        sorted[sorted.len() / 2]
    };
    let ours = median(&results[0].1);
    let stock = median(&results[1].1);
    println!(
        "\n{CONNECTIONS} connections, {SECONDS} s per round, median of {ROUNDS} rounds (by req/s):"
    );
    for (name, load) in [("pontoon-dataplane", ours), ("praxis (stock)", stock)] {
        println!(
            "  {name:<18} {:>8.0} req/s  p50 {:>5} us  p99 {:>5} us",
            load.rps, load.p50_us, load.p99_us
        );
    }
    println!(
        "  pontoon-dataplane / praxis: req/s {:+.1} %, p50 {:+.1} %, p99 {:+.1} % (goal: within 5 %)",
        (ours.rps / stock.rps - 1.0) * 100.0,
        (ours.p50_us as f64 / stock.p50_us.max(1) as f64 - 1.0) * 100.0,
        (ours.p99_us as f64 / stock.p99_us.max(1) as f64 - 1.0) * 100.0,
    );
    Ok(())
}

/// The config both proxies serve: what the operator writes for one HTTPRoute
/// rule without filters, on port 18080.
fn proxy_config(backend: SocketAddr) -> String {
    format!(
        r#"admin:
  metrics_address: "127.0.0.1:9902"
insecure_options:
  allow_root: true
  allow_private_endpoints: true
listeners:
  - name: web
    address: "127.0.0.1:18080"
    filter_chains: [main]
filter_chains:
  - name: main
    filters:
      - filter: request_id
      - filter: router
        routes:
          - path_prefix: "/bench"
            cluster: web
      - filter: load_balancer
        clusters:
          - name: web
            load_balancer_strategy: round_robin
            endpoints: ["{backend}"]
"#
    )
}

/// `CONNECTIONS` workers, each one request at a time on its own keep-alive
/// connection, for `WARM_UP` unmeasured and then `SECONDS` measured.
async fn generate(url: String) -> anyhow::Result<Load> {
    let uri: hyper::Uri = url.parse()?;
    let start = Instant::now();
    let measured_from = start + WARM_UP;
    let end = measured_from + Duration::from_secs(SECONDS);
    let url = Arc::new(uri);
    let workers: Vec<_> = (0..CONNECTIONS)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move {
                // One pooled connection per worker: the pool keeps it alive.
                let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new())
                    .pool_max_idle_per_host(1)
                    .build_http();
                let (mut latencies, mut errors) = (Vec::new(), 0_u64);
                while Instant::now() < end {
                    let sent = Instant::now();
                    let ok = match client.get((*url).clone()).await {
                        Ok(response) => {
                            let status = response.status();
                            response.into_body().collect().await.is_ok() && status.is_success()
                        }
                        Err(_) => false,
                    };
                    if sent >= measured_from {
                        if ok {
                            latencies.push(sent.elapsed());
                        } else {
                            errors += 1;
                        }
                    }
                }
                (latencies, errors)
            })
        })
        .collect();
    let mut latencies = Vec::new();
    let mut errors = 0;
    for worker in workers {
        let (l, e) = worker.await?;
        latencies.extend(l);
        errors += e;
    }
    // percentile() gives seconds.
    let micros = |seconds: f64| (seconds * 1e6).round() as u64;
    Ok(Load {
        requests: latencies.len() as u64,
        errors,
        rps: latencies.len() as f64 / SECONDS as f64,
        p50_us: micros(percentile(&latencies, 50)),
        p99_us: micros(percentile(&latencies, 99)),
    })
}
