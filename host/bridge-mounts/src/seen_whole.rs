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

use std::time::{Duration, Instant};

use super::moments::Moments;

pub struct SeenWhole {
    /// When each mount was last seen whole.
    at: Moments,
}

impl Default for SeenWhole {
    fn default() -> Self {
        Self {
            at: Moments::new(Self::YIELD_FOR),
        }
    }
}

impl SeenWhole {
    /// The shortest time between two full checks of one ACTIVE mount.
    pub const GAP: Duration = Duration::from_secs(1);
    /// How long after a mount was seen whole its check may give way to
    /// other mounts' steps while every provider turn is taken.
    pub const YIELD_FOR: Duration = Duration::from_secs(30);

    /// Mount `uid` was just seen whole.
    pub fn record(&self, uid: &str) {
        self.record_at(uid, Instant::now());
    }

    fn record_at(&self, uid: &str, now: Instant) {
        self.at.record_at(uid, now);
    }

    /// How long until mount `uid` is due a full check; `None` when it is
    /// due now (never seen whole, or longer ago than the gap).
    pub fn due_in(&self, uid: &str) -> Option<Duration> {
        self.due_in_at(uid, Instant::now())
    }

    fn due_in_at(&self, uid: &str, now: Instant) -> Option<Duration> {
        Self::GAP
            .checked_sub(self.at.since(uid, now)?)
            .filter(|left| !left.is_zero())
    }

    /// Whether mount `uid`'s check may give way to other mounts' steps:
    /// it was seen whole less than [`Self::YIELD_FOR`] ago.
    pub fn may_yield(&self, uid: &str) -> bool {
        self.may_yield_at(uid, Instant::now())
    }

    fn may_yield_at(&self, uid: &str, now: Instant) -> bool {
        self.at
            .since(uid, now)
            .is_some_and(|since| since < Self::YIELD_FOR)
    }

    /// The mount is gone, or no longer whole.
    pub fn forget(&self, uid: &str) {
        self.at.forget(uid);
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
}
