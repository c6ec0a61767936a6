//! The `notes` interface: the mount's notes (see `plugins::notes`); a call
//! that serves no mount (conformance of a filter, say) reads none and
//! keeps none.

use crate::{bindings::provider_notes::Note, state::CallState};

impl crate::bindings::provider_notes::Host for CallState {
    async fn read(&mut self, key: String) -> Option<Note> {
        let notes = self.cluster.as_ref()?.notes.as_ref()?;
        let (value, age) = notes.notes.read(&notes.mount, &key)?;
        Some(Note {
            value,
            age_ms: u64::try_from(age.as_millis()).unwrap_or(u64::MAX),
        })
    }

    async fn write(&mut self, key: String, value: String) {
        let Some(notes) = self.cluster.as_ref().and_then(|c| c.notes.as_ref()) else {
            return;
        };
        if let Err(why) = notes.notes.write(&notes.mount, &key, value) {
            tracing::debug!(module = %self.module, subject = %self.subject, key, "note not kept: {why}");
        }
    }

    async fn forget(&mut self, key: String) {
        if let Some(notes) = self.cluster.as_ref().and_then(|c| c.notes.as_ref()) {
            notes.notes.forget(&notes.mount, &key);
        }
    }
}
