//! The memory all provider instances hold together.
//!
//! Each call may grow its instance up to `--provider-memory`; the calls that
//! run at once share `--provider-memory-budget` between them. Provider calls
//! spend most of their time waiting for the API server with a few MiB of
//! memory, so counting every call as if it held its whole limit let a
//! handful run at once where many fit.
//!
//! A growth the budget cannot cover waits until another call returns
//! memory. So that calls never wait on each other in a circle, a growth is
//! granted only while what stays free would still let the call holding the
//! most grow to its limit (the banker's rule, with one limit for all): that
//! call can always finish and return what it holds, and then any other can.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard},
};

use tokio::sync::Notify;

/// Memory shared by the provider calls of one runtime.
#[derive(Debug)]
pub struct MemoryBudget {
    /// What one call may hold at most.
    per_call: usize,
    state: Mutex<Holdings>,
    returned: Notify,
}

#[derive(Debug)]
struct Holdings {
    free: usize,
    /// What each call that holds memory holds, by account id.
    held: HashMap<u64, usize>,
    next_id: u64,
}

impl Holdings {
    /// Whether `account`, holding `now`, may take `more`.
    fn grants(&self, per_call: usize, now: usize, more: usize) -> bool {
        let Some(free) = self.free.checked_sub(more) else {
            return false;
        };
        let largest = self
            .held
            .values()
            .copied()
            .max()
            .unwrap_or(0)
            .max(now + more);
        free >= per_call.saturating_sub(largest)
    }
}

impl MemoryBudget {
    /// A budget of `total` bytes for calls that may each hold `per_call`.
    /// `total` is raised to `per_call` if smaller: one call must always fit.
    pub fn new(total: usize, per_call: usize) -> Arc<Self> {
        Arc::new(Self {
            per_call,
            state: Mutex::new(Holdings {
                free: total.max(per_call),
                held: HashMap::new(),
                next_id: 0,
            }),
            returned: Notify::new(),
        })
    }

    /// An account for one call, holding nothing yet.
    pub fn account(self: &Arc<Self>) -> Account {
        let mut state = self.lock();
        let id = state.next_id;
        state.next_id += 1;
        Account {
            budget: self.clone(),
            id,
            held: 0,
        }
    }

    /// Bytes no call holds.
    #[cfg(test)]
    pub fn free(&self) -> usize {
        self.lock().free
    }

    fn lock(&self) -> MutexGuard<'_, Holdings> {
        // The holdings stay consistent whatever a panicking holder did:
        // every change is one assignment under the lock.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What one call holds of the budget; returned when dropped.
#[derive(Debug)]
pub struct Account {
    budget: Arc<MemoryBudget>,
    id: u64,
    held: usize,
}

impl Account {
    /// What the call holds.
    #[cfg(test)]
    pub fn held(&self) -> usize {
        self.held
    }

    /// Takes `more` bytes, waiting while the budget cannot grant them.
    /// `more` beyond the call's own limit is the caller's to refuse first.
    pub async fn take(&mut self, more: usize) {
        if more == 0 {
            return;
        }
        loop {
            let returned = self.budget.returned.notified();
            let mut returned = std::pin::pin!(returned);
            {
                let mut state = self.budget.lock();
                if state.grants(self.budget.per_call, self.held, more) {
                    state.free -= more;
                    self.held += more;
                    state.held.insert(self.id, self.held);
                    return;
                }
                // Registered before the lock is let go, so a return in
                // between is not missed.
                returned.as_mut().enable();
            }
            returned.await;
        }
    }
}

impl Drop for Account {
    fn drop(&mut self) {
        if self.held == 0 {
            return;
        }
        let mut state = self.budget.lock();
        state.free += self.held;
        state.held.remove(&self.id);
        drop(state);
        self.budget.returned.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const MIB: usize = 1 << 20;

    async fn within<T>(what: impl Future<Output = T>) -> Option<T> {
        tokio::time::timeout(Duration::from_millis(200), what)
            .await
            .ok()
    }

    #[tokio::test]
    async fn calls_of_a_few_mib_share_a_budget_many_times_their_number() {
        // 192 MiB for calls of up to 64 MiB: with 2 MiB each, 64 run at once.
        let budget = MemoryBudget::new(192 * MIB, 64 * MIB);
        let mut accounts = Vec::new();
        for _ in 0..64 {
            let mut account = budget.account();
            within(account.take(2 * MIB))
                .await
                .expect("granted at once");
            accounts.push(account);
        }
        assert_eq!(budget.free(), 64 * MIB);
        drop(accounts);
        assert_eq!(budget.free(), 192 * MIB, "all returned");
    }

    #[tokio::test]
    async fn a_growth_that_would_leave_the_largest_unable_to_finish_waits_for_a_return() {
        let budget = MemoryBudget::new(128 * MIB, 64 * MIB);
        let mut big = budget.account();
        within(big.take(40 * MIB)).await.unwrap();
        let mut other = budget.account();
        within(other.take(40 * MIB)).await.unwrap();
        // 48 MiB free; the largest holds 40 and may need 24 more: a third
        // call may take 24, not 25.
        let mut third = budget.account();
        assert!(within(third.take(25 * MIB)).await.is_none(), "waits");
        assert_eq!(third.held(), 0);
        within(third.take(24 * MIB)).await.expect("fits the rule");
        // The largest can still reach its limit.
        within(big.take(24 * MIB))
            .await
            .expect("the largest always can");
        // Another growth of `other` waits until `big` returns its memory.
        let waiting = tokio::spawn(async move {
            other.take(20 * MIB).await;
            other
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "waits while the budget is short");
        drop(big);
        let other = within(waiting)
            .await
            .expect("granted once memory returned")
            .unwrap();
        assert_eq!(other.held(), 60 * MIB);
    }

    #[tokio::test]
    async fn a_budget_smaller_than_one_call_still_runs_one() {
        let budget = MemoryBudget::new(MIB, 64 * MIB);
        let mut account = budget.account();
        within(account.take(64 * MIB)).await.expect("one call fits");
        assert_eq!(budget.free(), 0);
    }
}
