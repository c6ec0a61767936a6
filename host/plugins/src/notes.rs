//! The mounts' notes (the `notes` import): hints a provider keeps for one
//! mount from a call to a later one. In memory only and bounded: a note too
//! large, or one too many for its mount, is not kept (the provider then does
//! the work the note would have spared it), so the operator's memory grows
//! with its mounts by at most `MAX_NOTES * MAX_NOTE_BYTES` each.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

/// The largest note kept, in bytes.
pub const MAX_NOTE_BYTES: usize = 8 * 1024;
/// The most notes kept for one mount.
pub const MAX_NOTES: usize = 8;

/// One mount's notes: each key's value and when it was written.
type MountNotesMap = HashMap<String, (String, Instant)>;

/// Every mount's notes, by mount uid.
#[derive(Default)]
pub struct Notes {
    by_mount: Mutex<HashMap<String, MountNotesMap>>,
}

/// Why a note was not kept.
#[derive(Debug, PartialEq, Eq)]
pub enum NotKept {
    TooLarge(usize),
    TooMany,
}

impl std::fmt::Display for NotKept {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::TooLarge(bytes) => write!(
                f,
                "the note has {bytes} bytes, more than the {MAX_NOTE_BYTES} kept"
            ),
            Self::TooMany => write!(f, "the mount has {MAX_NOTES} notes already"),
        }
    }
}

impl Notes {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, MountNotesMap>> {
        // A panic elsewhere while holding the lock leaves plain data behind.
        self.by_mount
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The note under `key` of `mount`, with its age.
    pub fn read(&self, mount: &str, key: &str) -> Option<(String, Duration)> {
        let notes = self.lock();
        let (value, written) = notes.get(mount)?.get(key)?;
        Some((value.clone(), written.elapsed()))
    }

    /// Keeps `value` under `key` of `mount`, replacing what was there.
    pub fn write(&self, mount: &str, key: &str, value: String) -> Result<(), NotKept> {
        if value.len() > MAX_NOTE_BYTES {
            return Err(NotKept::TooLarge(value.len()));
        }
        let mut notes = self.lock();
        let of_mount = notes.entry(mount.to_string()).or_default();
        if of_mount.len() >= MAX_NOTES && !of_mount.contains_key(key) {
            return Err(NotKept::TooMany);
        }
        of_mount.insert(key.to_string(), (value, Instant::now()));
        Ok(())
    }

    pub fn forget(&self, mount: &str, key: &str) {
        let mut notes = self.lock();
        if let Some(of_mount) = notes.get_mut(mount) {
            of_mount.remove(key);
            if of_mount.is_empty() {
                notes.remove(mount);
            }
        }
    }

    /// Drops every note of a mount that is gone.
    pub fn forget_mount(&self, mount: &str) {
        self.lock().remove(mount);
    }
}

/// The notes one call may read and write: those of the mount it serves.
#[derive(Clone)]
pub struct MountNotes {
    pub notes: Arc<Notes>,
    /// The mount's uid.
    pub mount: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_are_kept_per_mount_and_replaced() {
        let notes = Notes::default();
        notes.write("a", "k", "one".into()).unwrap();
        notes.write("a", "k", "two".into()).unwrap();
        notes.write("b", "k", "other".into()).unwrap();
        let (value, age) = notes.read("a", "k").unwrap();
        assert_eq!(value, "two");
        assert!(age < Duration::from_secs(5));
        notes.forget("a", "k");
        assert_eq!(notes.read("a", "k"), None);
        assert_eq!(notes.read("b", "k").unwrap().0, "other");
        notes.forget_mount("b");
        assert_eq!(notes.read("b", "k"), None);
    }

    #[test]
    fn notes_past_the_bounds_are_not_kept() {
        let notes = Notes::default();
        let large = "x".repeat(MAX_NOTE_BYTES + 1);
        assert_eq!(
            notes.write("a", "big", large),
            Err(NotKept::TooLarge(MAX_NOTE_BYTES + 1))
        );
        assert_eq!(notes.read("a", "big"), None);
        for i in 0..MAX_NOTES {
            notes.write("a", &format!("k{i}"), "v".into()).unwrap();
        }
        assert_eq!(
            notes.write("a", "one-more", "v".into()),
            Err(NotKept::TooMany)
        );
        // A note already there may still be replaced.
        notes.write("a", "k0", "w".into()).unwrap();
        assert_eq!(notes.read("a", "k0").unwrap().0, "w");
    }
}
