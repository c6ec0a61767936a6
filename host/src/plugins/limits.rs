//! Per-call sandbox limits: a wall-clock deadline enforced through epoch
//! interruption, and a memory cap enforced by a `ResourceLimiter`.

use std::time::{Duration, Instant};

use wasmtime::ResourceLimiter;

/// Limits applied to every call into a module.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Wall-clock time one call may take, host calls included.
    pub deadline: Duration,
    /// Linear memory one instance may grow to.
    pub memory_bytes: usize,
    /// Provider calls that run at once (the others wait their turn), so
    /// that this many times `memory_bytes` bounds what provider instances
    /// can take together. Filter calls are bounded by the cores instead.
    pub concurrent_calls: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            deadline: Duration::from_secs(10),
            memory_bytes: 64 * 1024 * 1024,
            // The chart's default: 3 × 64 MiB and the operator's own 64 MiB
            // fit its 256 MiB memory limit.
            concurrent_calls: 3,
        }
    }
}

/// How often the engine's epoch advances; a looping guest notices its
/// deadline (and yields to the executor) at this granularity.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Tracks one call's limits and remembers which one was hit, so a trap can be
/// reported as "deadline" or "out of memory" rather than a bare trap.
#[derive(Debug)]
pub struct CallLimiter {
    memory_bytes: usize,
    deadline_at: Instant,
    pub(super) memory_exceeded: bool,
    pub(super) deadline_exceeded: bool,
    /// The most linear memory the instance has had.
    pub(super) peak_bytes: usize,
}

impl CallLimiter {
    pub fn new(limits: Limits) -> Self {
        Self {
            memory_bytes: limits.memory_bytes,
            deadline_at: Instant::now() + limits.deadline,
            memory_exceeded: false,
            deadline_exceeded: false,
            peak_bytes: 0,
        }
    }

    /// Called at every epoch tick while the guest runs: keep going (after
    /// letting other tasks run) or stop the guest.
    pub fn on_epoch(&mut self) -> wasmtime::Result<wasmtime::UpdateDeadline> {
        if Instant::now() >= self.deadline_at {
            self.deadline_exceeded = true;
            return Ok(wasmtime::UpdateDeadline::Interrupt);
        }
        Ok(wasmtime::UpdateDeadline::Yield(1))
    }
}

impl ResourceLimiter for CallLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.memory_bytes {
            // Trap instead of failing the grow: a guest allocator that
            // cannot grow aborts anyway, and this way the cause is known.
            self.memory_exceeded = true;
            wasmtime::bail!(
                "memory limit of {} MiB exceeded (asked for {} MiB)",
                self.memory_bytes / (1024 * 1024),
                desired.div_ceil(1024 * 1024)
            );
        }
        self.peak_bytes = self.peak_bytes.max(desired);
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 100_000)
    }
}
