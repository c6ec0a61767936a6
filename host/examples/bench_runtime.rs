//! `make bench-runtime`: what the plugin runtime costs, in figures.
//! Prints; asserts nothing (speed is measured here, not in tests).
//!
//! - compile: Cranelift compiling a provider component (done once per content).
//! - instantiate: a fresh instance from the pre-instantiated component (every call pays it).
//! - call: instantiate + one export call that returns at once.
//! - host call: one guest -> host import round trip (`log.enabled`), from the
//!   difference between a call making N of them and one making none.

use std::time::{Duration, Instant};

use pontoon::plugins::{
    Limits, LoadedModule, PluginRuntime,
    bindings::{Mount, Settings},
};
use pontoon_tests::modules::test_module;
use wasmtime::component::Component;

fn mount(calls: u64) -> Mount {
    Mount {
        name: "bench".into(),
        namespace: "bench".into(),
        uid: "bench".into(),
        target: "deploy/bench".into(),
        target_namespace: "bench".into(),
        target_container: "bench".into(),
        parameters: Some(format!("{{\"calls\":{calls}}}")),
        settings: Settings {
            operator_namespace: "pontoon".into(),
            carrier_image: "carrier2".into(),
            restore_config_map: "restore".into(),
        },
    }
}

fn per_iteration(total: Duration, n: u32) -> String {
    let each = total / n;
    if each < Duration::from_micros(10) {
        format!("{:.3} µs", total.as_secs_f64() * 1e6 / f64::from(n))
    } else {
        format!("{each:.3?}")
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let runtime = PluginRuntime::new(Limits::default())?;
    let bench_path = test_module("bench")?;
    let sample_path = test_module("sample_provider")?;

    for path in [&sample_path, &bench_path] {
        let bytes = std::fs::read(path)?;
        let rounds = 5;
        let started = Instant::now();
        for _ in 0..rounds {
            Component::new(runtime.engine(), &bytes)?;
        }
        println!(
            "compile      {:<22} {:>8} KiB  {} per compile",
            path.file_name()
                .map(|n| n.to_string_lossy())
                .unwrap_or_default(),
            bytes.len() / 1024,
            per_iteration(started.elapsed(), rounds)
        );
    }

    let LoadedModule::Provider(bench) = runtime.load_file(&bench_path).await? else {
        anyhow::bail!("bench.wasm is not a provider");
    };
    // Warm up the allocator's slots and the code pages.
    for _ in 0..200 {
        bench.instantiate_only().await?;
    }
    let rounds = 2_000;
    let started = Instant::now();
    for _ in 0..rounds {
        bench.instantiate_only().await?;
    }
    println!("instantiate  {}", per_iteration(started.elapsed(), rounds));

    let empty = mount(0);
    let started = Instant::now();
    for _ in 0..rounds {
        bench.validate(None, &empty).await?;
    }
    let baseline = started.elapsed() / rounds;
    println!(
        "call         {} (instantiate + an export call that returns at once)",
        per_iteration(baseline * rounds, rounds)
    );

    let n: u32 = 1_000_000;
    let busy = mount(n.into());
    let mut best = Duration::MAX;
    for _ in 0..5 {
        let started = Instant::now();
        bench.validate(None, &busy).await?;
        best = best.min(started.elapsed());
    }
    println!(
        "host call    {} per guest -> host round trip (best of 5 runs of {n} calls)",
        per_iteration(best.saturating_sub(baseline), n)
    );
    Ok(())
}
