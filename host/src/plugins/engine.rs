//! The wasmtime engine shared by every module, and its epoch clock.

use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use super::limits::{EPOCH_TICK, Limits};

/// Builds the engine: component model, async calls, epoch interruption, and a
/// pooling allocator sized for `limits` (instances come from pre-reserved
/// slots, which is what keeps instantiation well under a millisecond). Falls
/// back to on-demand allocation where the pool's address space cannot be had.
pub fn new_engine(limits: Limits) -> wasmtime::Result<Engine> {
    let mut pool = PoolingAllocationConfig::default();
    pool.total_component_instances(256)
        .total_core_instances(1024)
        .total_memories(256)
        .total_tables(512)
        .max_memory_size(limits.memory_bytes);
    match Engine::new(&config(InstanceAllocationStrategy::Pooling(pool))) {
        Ok(engine) => Ok(engine),
        Err(err) => {
            tracing::warn!(error = %err, "pooling allocator unavailable; instantiating on demand");
            Engine::new(&config(InstanceAllocationStrategy::OnDemand))
        }
    }
}

fn config(strategy: InstanceAllocationStrategy) -> Config {
    let mut config = Config::new();
    config
        .wasm_component_model(true)
        .epoch_interruption(true)
        .allocation_strategy(strategy);
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
