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

use std::time::{Duration, Instant};

use super::moments::Moments;

pub struct Uninstalled {
    /// When each mount's uninstall said `done`.
    at: Moments,
}

impl Default for Uninstalled {
    fn default() -> Self {
        Self {
            at: Moments::new(Self::FOR),
        }
    }
}

impl Uninstalled {
    /// How long after its uninstall's `done` a mount's cleanup skips the
    /// provider's call.
    pub const FOR: Duration = Duration::from_secs(30);

    /// Mount `uid`'s uninstall said `done`.
    pub fn record(&self, uid: &str) {
        self.record_at(uid, Instant::now());
    }

    fn record_at(&self, uid: &str, now: Instant) {
        self.at.record_at(uid, now);
    }

    /// Whether mount `uid`'s uninstall said `done` less than [`Self::FOR`] ago.
    pub fn recently(&self, uid: &str) -> bool {
        self.recently_at(uid, Instant::now())
    }

    fn recently_at(&self, uid: &str, now: Instant) -> bool {
        self.at
            .since(uid, now)
            .is_some_and(|since| since < Self::FOR)
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
}
