//! When each mount was last seen whole: every readiness condition held
//! (the shadow's pods Ready, Carrier2 in every original pod with its
//! config read back). ACTIVE's check of a mount seen whole a moment ago
//! waits until [`SeenWhole::GAP`] has passed: the status write that makes
//! a mount ACTIVE and its pods settling after the restart each wake it at
//! once, and each such check reads the target, the shadow and every pod's
//! config again (an exec per pod). With 200 mounts at once those repeats
//! were a third of the execs the cluster served.
//!
//! A check put off is never dropped: the mount is looked at when the gap
//! ends, so something broken is seen at most [`SeenWhole::GAP`] later.
//! Bridges are not held up (ACTIVE renders them before this gate).
//!
//! And while every provider turn is taken, the check of a mount seen whole
//! less than [`SeenWhole::YIELD_FOR`] ago is put off too: the steps of
//! mounts being created or deleted go first. (With 200 mounts at once, the
//! checks waiting for a turn ran after their mounts had been deleted.)
//! Past that, the check waits for its turn like any step.

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

#[derive(Default)]
pub struct SeenWhole {
    /// By mount uid.
    at: Mutex<HashMap<String, Instant>>,
}

impl SeenWhole {
    /// The shortest time between two full checks of one ACTIVE mount.
    pub const GAP: Duration = Duration::from_secs(1);
    /// How long after a mount was seen whole its check may give way to
    /// other mounts' steps while every provider turn is taken.
    pub const YIELD_FOR: Duration = Duration::from_secs(30);
    /// Entries beyond this many make a record drop the stale ones (mounts
    /// deleted while the operator was not looking leave theirs).
    const PRUNE_ABOVE: usize = 256;

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
        // The map stays usable even if a holder panicked.
        self.at
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Mount `uid` was just seen whole.
    pub fn record(&self, uid: &str) {
        self.record_at(uid, Instant::now());
    }

    fn record_at(&self, uid: &str, now: Instant) {
        let mut entries = self.entries();
        if entries.len() >= Self::PRUNE_ABOVE {
            entries.retain(|_, at| now.saturating_duration_since(*at) < Self::YIELD_FOR);
        }
        entries.insert(uid.to_string(), now);
    }

    /// How long until mount `uid` is due a full check; `None` when it is
    /// due now (never seen whole, or longer ago than the gap).
    pub fn due_in(&self, uid: &str) -> Option<Duration> {
        self.due_in_at(uid, Instant::now())
    }

    fn due_in_at(&self, uid: &str, now: Instant) -> Option<Duration> {
        let at = *self.entries().get(uid)?;
        Self::GAP
            .checked_sub(now.saturating_duration_since(at))
            .filter(|left| !left.is_zero())
    }

    /// Whether mount `uid`'s check may give way to other mounts' steps:
    /// it was seen whole less than [`Self::YIELD_FOR`] ago.
    pub fn may_yield(&self, uid: &str) -> bool {
        self.may_yield_at(uid, Instant::now())
    }

    fn may_yield_at(&self, uid: &str, now: Instant) -> bool {
        self.entries()
            .get(uid)
            .is_some_and(|at| now.saturating_duration_since(*at) < Self::YIELD_FOR)
    }

    /// The mount is gone, or no longer whole.
    pub fn forget(&self, uid: &str) {
        self.entries().remove(uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mount_seen_whole_a_moment_ago_is_checked_when_the_gap_ends() {
        let seen = SeenWhole::default();
        let t0 = Instant::now();
        assert_eq!(seen.due_in_at("a", t0), None, "never seen: due now");
        seen.record_at("a", t0);
        let later = t0 + Duration::from_millis(300);
        assert_eq!(seen.due_in_at("a", later), Some(Duration::from_millis(700)));
        assert_eq!(seen.due_in_at("b", later), None, "another mount is due");
        assert_eq!(seen.due_in_at("a", t0 + SeenWhole::GAP), None);
        assert_eq!(seen.due_in_at("a", t0 + Duration::from_secs(5)), None);
        seen.record_at("a", later);
        seen.forget("a");
        assert_eq!(seen.due_in_at("a", later), None, "forgotten: due now");
    }

    #[test]
    fn a_check_gives_way_only_for_a_while_after_the_mount_was_seen_whole() {
        let seen = SeenWhole::default();
        let t0 = Instant::now();
        assert!(
            !seen.may_yield_at("a", t0),
            "never seen whole: its check runs"
        );
        seen.record_at("a", t0);
        assert!(seen.may_yield_at("a", t0 + Duration::from_secs(29)));
        assert!(!seen.may_yield_at("a", t0 + SeenWhole::YIELD_FOR));
        seen.forget("a");
        assert!(
            !seen.may_yield_at("a", t0),
            "not whole any more: its check runs"
        );
    }

    #[test]
    fn stale_entries_are_dropped_once_there_are_many() {
        let seen = SeenWhole::default();
        let t0 = Instant::now();
        for i in 0..SeenWhole::PRUNE_ABOVE {
            seen.record_at(&format!("old-{i}"), t0);
        }
        let later = t0 + SeenWhole::YIELD_FOR;
        seen.record_at("new", later);
        assert_eq!(seen.entries().len(), 1, "only the fresh entry is kept");
        assert!(seen.due_in_at("new", later).is_some());
    }
}
