//! Per-call sandbox limits: a wall-clock deadline enforced through epoch
//! interruption, and a memory cap enforced by a `ResourceLimiterAsync`,
//! which also takes a provider call's memory from the shared budget.

use std::time::{Duration, Instant};

use wasmtime::ResourceLimiterAsync;

use super::budget::Account;

/// Limits applied to every call into a module.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Wall-clock time one call may take, host calls included.
    pub deadline: Duration,
    /// Linear memory one instance may grow to.
    pub memory_bytes: usize,
    /// Provider calls that run at once (the others wait their turn).
    /// Filter calls are bounded by the cores instead.
    pub concurrent_calls: usize,
    /// Linear memory the instances of the provider calls running at once
    /// hold together (see [`super::budget`]).
    pub memory_budget_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            deadline: Duration::from_secs(10),
            memory_bytes: 64 * 1024 * 1024,
            concurrent_calls: 6,
            // The chart's default: 192 MiB for provider instances and the
            // operator's own 64 MiB fit its 256 MiB memory limit.
            memory_budget_bytes: 192 * 1024 * 1024,
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
    /// The most linear memory the instance has had (all its memories).
    pub(super) peak_bytes: usize,
    /// What the host holds for the call: data the cluster returned (exec
    /// output, list results) on its way into the guest.
    pub(super) host_bytes: usize,
    /// What a provider call holds of the shared budget; `None` for calls
    /// outside it (filters, loading).
    pub(super) account: Option<Account>,
}

impl CallLimiter {
    pub fn new(limits: Limits) -> Self {
        Self {
            memory_bytes: limits.memory_bytes,
            deadline_at: Instant::now() + limits.deadline,
            memory_exceeded: false,
            deadline_exceeded: false,
            peak_bytes: 0,
            host_bytes: 0,
            account: None,
        }
    }

    /// Counts `bytes` the host holds for the call (`what`, for the message)
    /// against its memory limit and takes them from the shared budget, as
    /// the guest's own memory is, until the call ends. `Err` when they do
    /// not fit the call's limit, or the budget has no room before the
    /// call's deadline.
    pub async fn hold_host(
        &mut self,
        bytes: usize,
        what: impl FnOnce() -> String,
    ) -> Result<(), String> {
        if bytes == 0 {
            return Ok(());
        }
        let total = self.peak_bytes + self.host_bytes + bytes;
        if total > self.memory_bytes {
            self.memory_exceeded = true;
            return Err(format!(
                "{} ({} KiB) does not fit the call's memory limit of {} MiB beside what it \
                 holds already",
                what(),
                bytes.div_ceil(1024),
                self.memory_bytes / (1024 * 1024)
            ));
        }
        if let Some(account) = &mut self.account {
            let deadline = tokio::time::Instant::from_std(self.deadline_at);
            if tokio::time::timeout_at(deadline, account.take(bytes))
                .await
                .is_err()
            {
                self.deadline_exceeded = true;
                return Err(format!(
                    "{}: the call's deadline came while waiting for memory other calls hold",
                    what()
                ));
            }
        }
        self.host_bytes += bytes;
        Ok(())
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

#[async_trait::async_trait]
impl ResourceLimiterAsync for CallLimiter {
    async fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        // The limit is the instance's, whatever number of memories it has.
        let more = desired.saturating_sub(current);
        let total = self.peak_bytes + more;
        if total + self.host_bytes > self.memory_bytes {
            // Trap instead of failing the grow: a guest allocator that
            // cannot grow aborts anyway, and this way the cause is known.
            self.memory_exceeded = true;
            wasmtime::bail!(
                "memory limit of {} MiB exceeded (asked for {} MiB)",
                self.memory_bytes / (1024 * 1024),
                total.div_ceil(1024 * 1024)
            );
        }
        if let Some(account) = &mut self.account {
            let deadline = tokio::time::Instant::from_std(self.deadline_at);
            if tokio::time::timeout_at(deadline, account.take(more))
                .await
                .is_err()
            {
                self.deadline_exceeded = true;
                wasmtime::bail!("deadline reached while waiting for memory other calls hold");
            }
        }
        // Memories only grow, so the sum so far is the peak.
        self.peak_bytes = total;
        Ok(true)
    }

    async fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 100_000)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::budget::MemoryBudget;

    const MIB: usize = 1024 * 1024;

    fn limiter(budget: &std::sync::Arc<MemoryBudget>, deadline: Duration) -> CallLimiter {
        let mut limiter = CallLimiter::new(Limits {
            deadline,
            memory_bytes: 64 * MIB,
            concurrent_calls: 16,
            memory_budget_bytes: 128 * MIB,
        });
        limiter.account = Some(budget.account());
        limiter
    }

    #[tokio::test]
    async fn a_provider_instance_grows_from_the_budget_and_gives_it_back() {
        let budget = MemoryBudget::new(128 * MIB, 64 * MIB);
        let mut first = limiter(&budget, Duration::from_secs(10));
        // Two memories of one instance count together against its limit.
        assert!(first.memory_growing(0, 40 * MIB, None).await.unwrap());
        assert!(first.memory_growing(0, 20 * MIB, None).await.unwrap());
        assert_eq!(first.peak_bytes, 60 * MIB);
        let refused = first.memory_growing(20 * MIB, 25 * MIB, None).await;
        assert!(refused.is_err() && first.memory_exceeded, "65 MiB in all");
        assert_eq!(budget.free(), 68 * MIB);
        drop(first);
        assert_eq!(
            budget.free(),
            128 * MIB,
            "returned when the call's store goes"
        );
    }

    #[tokio::test]
    async fn what_the_host_holds_for_a_call_counts_like_its_memory() {
        let budget = MemoryBudget::new(128 * MIB, 64 * MIB);
        let mut call = limiter(&budget, Duration::from_secs(10));
        assert!(call.memory_growing(0, 40 * MIB, None).await.unwrap());
        call.hold_host(16 * MIB, || "a list".into()).await.unwrap();
        assert_eq!(budget.free(), 72 * MIB, "taken from the budget");
        let refused = call
            .hold_host(9 * MIB, || "the output of exec in pod `web-1`".into())
            .await
            .unwrap_err();
        assert!(
            refused.starts_with("the output of exec in pod `web-1` (9216 KiB) does not fit")
                && call.memory_exceeded,
            "{refused}"
        );
        assert!(
            call.memory_growing(40 * MIB, 49 * MIB, None).await.is_err(),
            "the guest's growth counts what the host holds"
        );
        drop(call);
        assert_eq!(budget.free(), 128 * MIB);
    }

    #[tokio::test]
    async fn a_growth_the_budget_cannot_cover_waits_at_most_until_the_deadline() {
        let budget = MemoryBudget::new(64 * MIB, 64 * MIB);
        let mut holder = limiter(&budget, Duration::from_secs(10));
        assert!(holder.memory_growing(0, 60 * MIB, None).await.unwrap());
        let mut starved = limiter(&budget, Duration::from_millis(100));
        let stopped = starved.memory_growing(0, 8 * MIB, None).await;
        assert!(stopped.is_err(), "no memory came back before its deadline");
        assert!(starved.deadline_exceeded && !starved.memory_exceeded);
        assert_eq!(budget.free(), 4 * MIB, "nothing taken by the stopped call");
    }
}
