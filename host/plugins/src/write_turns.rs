//! One write at a time to each object.
//!
//! The API server applies a patch that names no resource version by reading
//! the object, patching it and writing it back, and starts over from a fresh
//! read when another write got in first. Writers racing on one object thus
//! cost it a decode, patch, managed-fields update and encode each per lost
//! race. For most objects that is nothing (a mount's pods and shadow are its
//! own), but Gefyra's restore ConfigMap is one object for every mount, of
//! ≈200 KB with 200 mounts' entries. In `make bench-mounts`' floor (200
//! mounts' writes, 32 in flight) the API server took 62.0 CPU-s when the
//! ConfigMap's patches raced and 28.7 when they went one at a time. The
//! host queues a provider's writes to the same object, so each is applied
//! about once.
//!
//! Objects share a lane when their names hash alike; with far more lanes
//! than provider turns that rarely queues writes to different objects, and
//! then only for the time of one write.

use std::{
    hash::{BuildHasher, Hash},
    sync::Arc,
};

use tokio::sync::{Mutex, OwnedMutexGuard};

/// Lanes of writes: many more than the provider turns (6 by default).
const LANES: usize = 256;

/// The write lanes of one process, shared by every provider call.
pub struct WriteTurns {
    lanes: Vec<Arc<Mutex<()>>>,
    hasher: std::collections::hash_map::RandomState,
}

impl Default for WriteTurns {
    fn default() -> Self {
        Self {
            lanes: (0..LANES).map(|_| Arc::new(Mutex::new(()))).collect(),
            hasher: std::collections::hash_map::RandomState::new(),
        }
    }
}

impl WriteTurns {
    /// Waits until no other write to the object is in flight; the write
    /// goes while the returned guard lives (it borrows nothing, so a call
    /// holds it across its own awaits).
    pub async fn turn(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> OwnedMutexGuard<()> {
        let lane = self.lane(&(api_version, kind, namespace, name));
        self.lanes[lane].clone().lock_owned().await
    }

    fn lane(&self, object: &impl Hash) -> usize {
        // The modulo keeps the value below LANES, so it fits usize.
        #[allow(clippy::cast_possible_truncation)]
        let lane = (self.hasher.hash_one(object) % LANES as u64) as usize;
        lane
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_second_write_to_the_same_object_waits_for_the_first() {
        let turns = WriteTurns::default();
        let first = turns.turn("v1", "ConfigMap", "gefyra", "restore").await;
        let second = turns.turn("v1", "ConfigMap", "gefyra", "restore");
        assert!(
            tokio::time::timeout(Duration::from_millis(50), second)
                .await
                .is_err(),
            "the second write went while the first was in flight"
        );
        drop(first);
        let second = turns.turn("v1", "ConfigMap", "gefyra", "restore");
        assert!(
            tokio::time::timeout(Duration::from_millis(50), second)
                .await
                .is_ok(),
            "the second write still waits after the first is done"
        );
    }

    #[tokio::test]
    async fn writes_to_other_objects_go_at_once_unless_their_lane_is_shared() {
        let turns = WriteTurns::default();
        let held = turns.turn("v1", "ConfigMap", "gefyra", "restore").await;
        let held_lane = turns.lane(&("v1", "ConfigMap", "gefyra", "restore"));
        let mut went = 0;
        for i in 0..50 {
            let name = format!("web-{i}");
            if turns.lane(&("v1", "Pod", "demo", name.as_str())) == held_lane {
                continue;
            }
            let other = turns.turn("v1", "Pod", "demo", &name);
            assert!(
                tokio::time::timeout(Duration::from_millis(50), other)
                    .await
                    .is_ok(),
                "a write to pod {name} waited for the ConfigMap's"
            );
            went += 1;
        }
        assert!(went >= 40, "only {went} of 50 pods had a lane of their own");
        drop(held);
    }
}
