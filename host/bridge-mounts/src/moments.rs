//! When something last happened to each mount, by uid: what `SeenWhole`
//! and `Uninstalled` remember. An entry goes when its holder forgets it or,
//! once there are many, when it is older than anything its holder still
//! asks about (nothing tells the controller of mounts deleted while it
//! was not looking).

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

pub struct Moments {
    /// By mount uid.
    at: Mutex<HashMap<String, Instant>>,
    /// How long an entry can still matter to its holder.
    keep: Duration,
}

impl Moments {
    /// Entries beyond this many make a record drop those older than `keep`.
    pub const PRUNE_ABOVE: usize = 256;

    pub fn new(keep: Duration) -> Self {
        Self {
            at: Mutex::default(),
            keep,
        }
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
        // The map stays usable even if a holder panicked.
        self.at
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// It happened to mount `uid` at `now`.
    pub fn record_at(&self, uid: &str, now: Instant) {
        let mut entries = self.entries();
        if entries.len() >= Self::PRUNE_ABOVE {
            entries.retain(|_, at| now.saturating_duration_since(*at) < self.keep);
        }
        entries.insert(uid.to_string(), now);
    }

    /// How long before `now` it last happened to mount `uid`, if it did.
    pub fn since(&self, uid: &str, now: Instant) -> Option<Duration> {
        let at = *self.entries().get(uid)?;
        Some(now.saturating_duration_since(at))
    }

    pub fn forget(&self, uid: &str) {
        self.entries().remove(uid);
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_entries_are_dropped_once_there_are_many() {
        let moments = Moments::new(Duration::from_secs(30));
        let t0 = Instant::now();
        for i in 0..Moments::PRUNE_ABOVE {
            moments.record_at(&format!("old-{i}"), t0);
        }
        assert_eq!(
            moments.len(),
            Moments::PRUNE_ABOVE,
            "none dropped below the mark"
        );
        let later = t0 + Duration::from_secs(30);
        moments.record_at("new", later);
        assert_eq!(moments.len(), 1, "only the fresh entry is kept");
        assert_eq!(moments.since("new", later), Some(Duration::ZERO));
        assert_eq!(moments.since("old-0", later), None);
    }
}
