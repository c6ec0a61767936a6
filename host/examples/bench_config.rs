//! `cargo run --release -p pontoon --example bench_config`: what generating a
//! Gateway's Praxis config costs, in figures. Prints; asserts nothing.
//!
//! 1000 HTTPRoutes, each one rule with two filters (RequestHeaderModifier,
//! ResponseHeaderModifier), 2000 filter translations, then `generate`:
//!
//! - native: the filters translated by `standard-filters` compiled into the
//!   host (the baseline);
//! - wasm, instance per call: `FilterModule::translate`, a fresh instance
//!   for each of the 2000 filters;
//! - wasm, batch: `gateway::judgement::translate::Translator` on a cold cache, as a
//!   Gateway's first reconcile calls it: all routes' filters in one batch,
//!   split in one part per core (one instance per module and part); the
//!   native baseline runs on one core, so the same batch is also timed on
//!   a one-thread runtime;
//! - wasm, cached: the same `Translator` again, every filter a cache hit,
//!   as every later reconcile does.
//!
//! Each figure is the best of several rounds; the native and WASM rounds
//! take turns.

use std::{
    net::SocketAddr,
    sync::Arc,
    time::{Duration, Instant},
};

use pontoon::{
    gateway::{
        data_plane::config::{GenerateOptions, generate},
        data_plane::model::{
            Backend, BackendProtocol, GatewayModel, Listener, Match, PathMatch, Protocol, Route,
            RouteKind, Rule, Timeouts, TranslatedFilter,
        },
        judgement::translate::{FilterRequest, Translator},
    },
    plugins::{Limits, LoadedModule, PluginRuntime, Registry, bindings::RouteContext},
};
use pontoon_tests::providers::bundled_provider;
use serde_json::{Value, json};

const ROUTES: usize = 1000;
const ROUNDS: usize = 15;

/// One route's filters as the controller hands them over.
fn filters(i: usize) -> [Value; 2] {
    [
        json!({"type": "RequestHeaderModifier", "requestHeaderModifier": {
            "set": [{"name": "x-route", "value": format!("route-{i}")}],
            "remove": ["x-debug"]}}),
        json!({"type": "ResponseHeaderModifier", "responseHeaderModifier": {
            "add": [{"name": "x-served-by", "value": "praxis"}]}}),
    ]
}

fn context(i: usize, filter: u32) -> RouteContext {
    RouteContext {
        route_namespace: "bench".into(),
        route_name: format!("route-{i}"),
        rule_index: 0,
        filter_index: filter,
        gateway_namespace: "bench".into(),
        gateway_name: "edge".into(),
    }
}

fn requests() -> Vec<(Value, RouteContext)> {
    (0..ROUTES)
        .flat_map(|i| {
            let [a, b] = filters(i);
            [(a, context(i, 0)), (b, context(i, 1))]
        })
        .collect()
}

/// The model, given each route's two translated filters.
fn model(translated: Vec<TranslatedFilter>) -> GatewayModel {
    let endpoints: Vec<SocketAddr> = ["10.244.1.10:8080", "10.244.1.11:8080"]
        .iter()
        .filter_map(|e| e.parse().ok())
        .collect();
    let mut translated = translated.into_iter();
    let routes = (0..ROUTES)
        .map(|i| Route {
            kind: RouteKind::Http,
            namespace: "bench".into(),
            name: format!("route-{i}"),
            hostnames: vec![format!("h{}.example.com", i % 50)],
            rules: vec![Rule {
                index: 0,
                matches: vec![Match {
                    path: Some(PathMatch::Prefix(format!("/svc-{i}"))),
                    ..Match::default()
                }],
                backends: vec![Backend {
                    cluster: format!("bench/svc-{i}:80"),
                    weight: 1,
                    endpoints: endpoints.clone(),
                    protocol: BackendProtocol::Http1,
                    service_address: None,
                    ..Backend::default()
                }],
                filters: translated.by_ref().take(2).collect(),
                timeouts: Timeouts::default(),
            }],
        })
        .collect();
    GatewayModel {
        namespace: "bench".into(),
        name: "edge".into(),
        listeners: vec![Listener {
            name: "web".into(),
            port: 80,
            protocol: Protocol::Http,
            hostname: None,
            certificates: Vec::new(),
            client_validation: None,
            routes,
        }],
    }
}

/// `model` with GRPCRoutes for its HTTPRoutes: each a method of its own (an
/// exact path), the same filters, h2c backends.
fn as_grpc(mut model: GatewayModel) -> GatewayModel {
    let grpc: Vec<Route> = model.listeners[0]
        .routes
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let mut route = r.clone();
            route.kind = RouteKind::Grpc;
            route.name = format!("grpc-{i}");
            for rule in &mut route.rules {
                rule.matches = vec![Match {
                    path: Some(PathMatch::Exact(format!("/bench.Svc{i}/Call"))),
                    ..Match::default()
                }];
                for backend in &mut rule.backends {
                    backend.protocol = BackendProtocol::H2c;
                }
            }
            route
        })
        .collect();
    model.listeners[0].routes = grpc;
    model
}

fn entries(module: &str, kind: &str, texts: &[String]) -> anyhow::Result<TranslatedFilter> {
    Ok(TranslatedFilter {
        kind: kind.to_string(),
        module: module.to_string(),
        entries: texts
            .iter()
            .map(|t| serde_json::from_str(t))
            .collect::<Result<Vec<_>, _>>()?
            .into(),
    })
}

fn kind(filter: &Value) -> String {
    filter["type"].as_str().unwrap_or_default().to_string()
}

fn best<F: FnMut() -> anyhow::Result<usize>>(mut f: F) -> anyhow::Result<(Duration, usize)> {
    let mut best = Duration::MAX;
    let mut size = 0;
    for _ in 0..ROUNDS {
        let started = Instant::now();
        size = f()?;
        best = best.min(started.elapsed());
    }
    Ok((best, size))
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

/// One round of `Translator` on a cold cache then on a warm one, each
/// followed by `generate`.
async fn batch_round(
    registry: &Arc<Registry>,
    requests: &[(Value, RouteContext)],
    texts: &[String],
    options: &GenerateOptions,
) -> anyhow::Result<(Duration, Duration)> {
    let translator = Translator::new(registry.clone());
    let mut took = [Duration::ZERO; 2];
    for round in &mut took {
        let started = Instant::now();
        // What a reconcile hands over, built as it builds it.
        let filters: Arc<[FilterRequest]> = requests
            .iter()
            .zip(texts)
            .map(|((filter, context), text)| FilterRequest {
                kind: kind(filter),
                filter: text.clone(),
                context: context.clone(),
            })
            .collect();
        let translated = translator
            .translate(filters)
            .await
            .into_iter()
            .collect::<Result<Vec<_>, _>>()
            .map_err(|issue| anyhow::anyhow!("{}", issue.message))?;
        generate(&model(translated), options)?;
        *round = started.elapsed();
    }
    Ok((took[0], took[1]))
}

/// Native filters and `generate`: the baseline. Returns the config's size.
fn native_round(
    requests: &[(Value, RouteContext)],
    texts: &[String],
    options: &GenerateOptions,
) -> anyhow::Result<usize> {
    let mut translated = Vec::with_capacity(requests.len());
    for ((filter, c), text) in requests.iter().zip(texts) {
        // The filter's location is written only for an error, as the
        // component does.
        let location = || {
            format!(
                "HTTPRoute {}/{} rule {} filter {}",
                c.route_namespace, c.route_name, c.rule_index, c.filter_index
            )
        };
        let out = standard_filters::translate_lazily(text, location)
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
        translated.push(entries("standard-filters", &kind(filter), &out)?);
    }
    Ok(generate(&model(translated), options)?.len())
}

// The operator binary's allocator (host/src/main.rs), so the figures are its.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

// The batch runs on a multi-threaded runtime, as the operator runs (a large
// batch spreads over the cores), and again on a one-thread runtime, since the
// native baseline uses one core. Rounds of the native and WASM paths take
// turns, so that a machine that slows down or speeds up meanwhile (other
// load) moves both alike and their ratio holds.
fn main() -> anyhow::Result<()> {
    let options = GenerateOptions::default();
    let requests = requests();
    let texts: Vec<String> = requests.iter().map(|(f, _)| f.to_string()).collect();
    let multi = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let single = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;

    // The generation alone, with the translations at hand.
    let translated_once: Vec<TranslatedFilter> = requests
        .iter()
        .zip(&texts)
        .map(|((filter, _), text)| {
            let out =
                standard_filters::translate(text, "bench").map_err(|e| anyhow::anyhow!("{e:?}"))?;
            entries("standard-filters", &kind(filter), &out)
        })
        .collect::<anyhow::Result<_>>()?;
    let (generation, _) = best(|| Ok(generate(&model(translated_once.clone()), &options)?.len()))?;
    let (grpc_generation, grpc_len) =
        best(|| Ok(generate(&as_grpc(model(translated_once.clone())), &options)?.len()))?;

    // The component.
    let runtime = PluginRuntime::new(Limits::default())?;
    let path = bundled_provider("standard_filters")?;
    let size = std::fs::metadata(&path)?.len();
    let LoadedModule::Filter(module) = multi.block_on(runtime.load_file(&path))? else {
        anyhow::bail!("standard_filters.wasm is not a config filter");
    };
    let module = Arc::new(module);
    let per_call = multi.block_on(async {
        for _ in 0..100 {
            module.translate(&texts[0], &requests[0].1).await?;
        }
        let mut per_call = Duration::MAX;
        for _ in 0..3 {
            let started = Instant::now();
            let mut translated = Vec::with_capacity(requests.len());
            for ((filter, c), text) in requests.iter().zip(&texts) {
                let out = module.translate(text, c).await?;
                translated.push(entries("standard-filters", &kind(filter), &out)?);
            }
            generate(&model(translated), &options)?;
            per_call = per_call.min(started.elapsed());
        }
        anyhow::Ok(per_call)
    })?;

    let mut registry = Registry::default();
    registry.insert(multi.block_on(runtime.load_file(&path))?);
    let registry = Arc::new(registry);
    let [mut native, mut batch, mut cached, mut one_core] = [Duration::MAX; 4];
    let mut yaml_len = 0;
    for _ in 0..ROUNDS {
        let started = Instant::now();
        yaml_len = native_round(&requests, &texts, &options)?;
        native = native.min(started.elapsed());
        let (cold, warm) = multi.block_on(batch_round(&registry, &requests, &texts, &options))?;
        (batch, cached) = (batch.min(cold), cached.min(warm));
        let (cold, _) = single.block_on(batch_round(&registry, &requests, &texts, &options))?;
        one_core = one_core.min(cold);
    }

    let ratio = |d: Duration| d.as_secs_f64() / native.as_secs_f64();
    println!(
        "{ROUTES} HTTPRoutes x 2 filters, config {} KiB, standard_filters.wasm {} KiB",
        yaml_len / 1024,
        size / 1024
    );
    println!("generate alone                  {:>10}", ms(generation));
    println!(
        "generate, {ROUTES} GRPCRoutes        {:>10}   (config {} KiB; h2c clusters, exact method paths)",
        ms(grpc_generation),
        grpc_len / 1024
    );
    println!("native filters + generate       {:>10}   1.00x", ms(native));
    println!(
        "wasm, instance per call         {:>10}  {:5.2}x",
        ms(per_call),
        ratio(per_call)
    );
    println!(
        "wasm, batch (cold cache)        {:>10}  {:5.2}x",
        ms(batch),
        ratio(batch)
    );
    println!(
        "wasm, batch on one core         {:>10}  {:5.2}x",
        ms(one_core),
        ratio(one_core)
    );
    println!(
        "wasm, cached (later reconciles) {:>10}  {:5.2}x",
        ms(cached),
        ratio(cached)
    );
    Ok(())
}
