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
            entries.retain(|_, at| now.saturating_duration_since(*at) < Self::GAP);
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
    fn stale_entries_are_dropped_once_there_are_many() {
        let seen = SeenWhole::default();
        let t0 = Instant::now();
        for i in 0..SeenWhole::PRUNE_ABOVE {
            seen.record_at(&format!("old-{i}"), t0);
        }
        let later = t0 + Duration::from_secs(2);
        seen.record_at("new", later);
        assert_eq!(seen.entries().len(), 1, "only the fresh entry is kept");
        assert!(seen.due_in_at("new", later).is_some());
    }
}
