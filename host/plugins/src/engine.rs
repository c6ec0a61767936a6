//! The wasmtime engine shared by every module, and its epoch clock.

use std::path::Path;

use wasmtime::{
    Cache, CacheConfig, Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig,
};

use super::limits::{EPOCH_TICK, Limits};

/// Builds the engine: component model, async calls, epoch interruption, and a
/// pooling allocator sized for `limits` (instances come from pre-reserved
/// slots, which is what keeps instantiation well under a millisecond). Falls
/// back to on-demand allocation where the pool's address space cannot be had.
///
/// With `cache_dir`, compiled modules are kept there by wasmtime's own cache,
/// keyed by the module's content and the engine's version and settings, so a
/// restart loads them without compiling.
pub fn new_engine(
    limits: Limits,
    cache_dir: Option<&Path>,
) -> wasmtime::Result<(Engine, Option<Cache>)> {
    let cache = match cache_dir {
        Some(dir) => {
            let mut config = CacheConfig::new();
            config.with_directory(dir);
            Some(Cache::new(config)?)
        }
        None => None,
    };
    let mut pool = PoolingAllocationConfig::default();
    pool.total_component_instances(256)
        .total_core_instances(1024)
        .total_memories(256)
        .total_tables(512)
        .max_memory_size(limits.memory_bytes);
    let pooled = config(InstanceAllocationStrategy::Pooling(pool), cache.clone());
    match Engine::new(&pooled) {
        Ok(engine) => Ok((engine, cache)),
        Err(err) => {
            tracing::warn!(error = %err, "pooling allocator unavailable; instantiating on demand");
            let engine = Engine::new(&config(InstanceAllocationStrategy::OnDemand, cache.clone()))?;
            Ok((engine, cache))
        }
    }
}

fn config(strategy: InstanceAllocationStrategy, cache: Option<Cache>) -> Config {
    let mut config = Config::new();
    config
        .wasm_component_model(true)
        .epoch_interruption(true)
        .allocation_strategy(strategy)
        .cache(cache);
    config
}

/// Advances the engine's epoch every [`EPOCH_TICK`] on a thread of its own
/// (a busy tokio runtime must not delay the deadlines it enforces). The
/// thread ends when the engine is dropped.
pub fn start_epoch_clock(engine: &Engine) -> std::io::Result<()> {
    // A weak handle: the clock must not keep the engine alive.
    let handle = engine.weak();
    std::thread::Builder::new()
        .name("wasm-epoch".into())
        .spawn(move || {
            while let Some(engine) = handle.upgrade() {
                engine.increment_epoch();
                drop(engine);
                std::thread::sleep(EPOCH_TICK);
            }
        })?;
    Ok(())
}
