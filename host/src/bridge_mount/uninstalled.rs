//! Which mounts' deletions finished their uninstall a moment ago. Once the
//! provider said `done`, the finalizer goes; but the pods settling onto
//! their originals and the shadow going away wake the mount again, and
//! until the mount's deletion reaches the controller's cache that wake
//! runs the deletion's cleanup once more. The host had dropped the
//! provider's notes with the uninstall, so that call planned the restore
//! from scratch: the shared restore ConfigMap read twice (≈200 KB each with
//! 200 mounts), the pods listed, the shadow looked up. In a burst of 200
//! deletions under load, up to 0.8 such calls a mount, each holding a
//! provider turn the deletions still restoring waited for.
//!
//! A cleanup within [`Uninstalled::FOR`] of the uninstall's `done` skips the
//! provider's call and only removes the finalizer (again). That is what
//! the mount's deletion would have done at that moment had it been seen,
//! and the uninstall it skips would have found nothing to restore: every
//! original was back and no restore entry left when the provider said so.
//! After [`Uninstalled::FOR`] (a finalizer that could not be removed for
//! that long) or after a restart, cleanup calls the provider as always.

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

#[derive(Default)]
pub struct Uninstalled {
    /// By mount uid: when its uninstall said `done`.
    at: Mutex<HashMap<String, Instant>>,
}

impl Uninstalled {
    /// How long after its uninstall's `done` a mount's cleanup skips the
    /// provider's call.
    pub const FOR: Duration = Duration::from_secs(30);
    /// Entries beyond this many make a record drop the stale ones (the
    /// mounts are gone; nothing tells the controller so).
    const PRUNE_ABOVE: usize = 256;

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
        self.at
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Mount `uid`'s uninstall said `done`.
    pub fn record(&self, uid: &str) {
        self.record_at(uid, Instant::now());
    }

    fn record_at(&self, uid: &str, now: Instant) {
        let mut entries = self.entries();
        if entries.len() >= Self::PRUNE_ABOVE {
            entries.retain(|_, at| now.saturating_duration_since(*at) < Self::FOR);
        }
        entries.insert(uid.to_string(), now);
    }

    /// Whether mount `uid`'s uninstall said `done` less than [`Self::FOR`] ago.
    pub fn recently(&self, uid: &str) -> bool {
        self.recently_at(uid, Instant::now())
    }

    fn recently_at(&self, uid: &str, now: Instant) -> bool {
        self.entries()
            .get(uid)
            .is_some_and(|at| now.saturating_duration_since(*at) < Self::FOR)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_mount_uninstalled_a_moment_ago_skips_the_call() {
        let done = Uninstalled::default();
        let t0 = Instant::now();
        assert!(!done.recently_at("a", t0), "never uninstalled: call");
        done.record_at("a", t0);
        assert!(done.recently_at("a", t0 + Duration::from_secs(29)));
        assert!(!done.recently_at("b", t0), "another mount: call");
        assert!(
            !done.recently_at("a", t0 + Uninstalled::FOR),
            "long ago (a finalizer that would not go): call again"
        );
    }

    #[test]
    fn stale_entries_are_dropped_once_there_are_many() {
        let done = Uninstalled::default();
        let t0 = Instant::now();
        for i in 0..Uninstalled::PRUNE_ABOVE {
            done.record_at(&format!("old-{i}"), t0);
        }
        let later = t0 + Uninstalled::FOR;
        done.record_at("new", later);
        assert_eq!(done.entries().len(), 1, "only the fresh entry is kept");
        assert!(done.recently_at("new", later));
    }
}
