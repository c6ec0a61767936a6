//! What a provider wrote through the `cluster` interface, for `pontoon
//! conformance`: every object it created, applied, patched or deleted, with
//! the object as it was just before the provider first wrote it.
//!
//! The host sees every call, so a check built on this cannot be fooled by a
//! provider that writes where the checks do not look: whatever it touched is
//! compared after uninstall with what was there before.

use std::{collections::BTreeMap, sync::Mutex};

use kube::{Api, api::DynamicObject};

use super::bindings::{ClusterError, ObjectRef};

/// `apiVersion`, kind, namespace and name of one object.
type Key = (String, String, String, String);

fn key(r: &ObjectRef) -> Key {
    (
        r.api_version.clone(),
        r.kind.clone(),
        r.namespace.clone(),
        r.name.clone(),
    )
}

/// One object a provider wrote.
#[derive(Clone, Debug, PartialEq)]
pub struct Written {
    pub api_version: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    /// The object just before the provider first wrote it; `None` when it
    /// did not exist, so the provider created it.
    pub before: Option<serde_json::Value>,
    /// The writes that succeeded (`create`, `apply`, `patch`, `delete`), each
    /// once, in the order first made.
    pub verbs: Vec<&'static str>,
}

impl Written {
    fn new(object: &ObjectRef, before: Option<serde_json::Value>) -> Self {
        Self {
            api_version: object.api_version.clone(),
            kind: object.kind.clone(),
            namespace: object.namespace.clone(),
            name: object.name.clone(),
            before,
            verbs: Vec::new(),
        }
    }

    /// The object, to read it again.
    pub fn reference(&self) -> ObjectRef {
        ObjectRef {
            api_version: self.api_version.clone(),
            kind: self.kind.clone(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }

    /// `Kind namespace/name`, as messages name it.
    pub fn describe(&self) -> String {
        format!("{} {}/{}", self.kind, self.namespace, self.name)
    }
}

#[derive(Default)]
struct Entries {
    objects: BTreeMap<Key, Written>,
    /// Successful writes and execs, in any object: what a call did.
    activity: u64,
}

/// A record of a provider's writes, shared by the calls of one run.
#[derive(Default)]
pub struct Journal {
    // A std mutex: never held across an await.
    entries: Mutex<Entries>,
}

impl Journal {
    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        // A panic while holding it leaves plain data behind; keep using it.
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Reads the object before its first write, so that what it was is
    /// known whatever the write does. Later writes find it recorded.
    pub(super) async fn before_write(
        &self,
        api: &Api<DynamicObject>,
        object: &ObjectRef,
    ) -> Result<(), ClusterError> {
        if self.lock().objects.contains_key(&key(object)) {
            return Ok(());
        }
        let found = api.get_opt(&object.name).await.map_err(|e| {
            ClusterError::Api(format!(
                "reading {} `{}` before the provider's write: {e}",
                object.kind, object.name
            ))
        })?;
        let before = found
            .map(serde_json::to_value)
            .transpose()
            .map_err(|e| ClusterError::Api(format!("cannot encode object: {e}")))?;
        self.lock()
            .objects
            .entry(key(object))
            .or_insert_with(|| Written::new(object, before));
        Ok(())
    }

    /// Records a write that succeeded. A `create` needs no read before it:
    /// had the object existed, the create would have failed.
    pub(super) fn wrote(&self, object: &ObjectRef, verb: &'static str) {
        let mut entries = self.lock();
        entries.activity += 1;
        let written = entries
            .objects
            .entry(key(object))
            .or_insert_with(|| Written::new(object, None));
        if !written.verbs.contains(&verb) {
            written.verbs.push(verb);
        }
    }

    /// Records a command run in a pod (a change the journal cannot undo or
    /// compare, but work done all the same).
    pub(super) fn executed(&self) {
        self.lock().activity += 1;
    }

    /// How many writes and execs have succeeded so far.
    pub fn activity(&self) -> u64 {
        self.lock().activity
    }

    /// Every object written, in a stable order.
    pub fn written(&self) -> Vec<Written> {
        self.lock()
            .objects
            .values()
            .filter(|w| !w.verbs.is_empty())
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config_map(name: &str) -> ObjectRef {
        ObjectRef {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: "shop".into(),
            name: name.into(),
        }
    }

    #[test]
    fn each_object_is_listed_once_with_its_writes_in_order() {
        let journal = Journal::default();
        journal.wrote(&config_map("b"), "create");
        journal.wrote(&config_map("a"), "apply");
        journal.wrote(&config_map("b"), "patch");
        journal.wrote(&config_map("b"), "patch");
        journal.executed();
        let written = journal.written();
        assert_eq!(
            written
                .iter()
                .map(|w| (w.describe(), w.verbs.clone()))
                .collect::<Vec<_>>(),
            [
                ("ConfigMap shop/a".to_string(), vec!["apply"]),
                ("ConfigMap shop/b".to_string(), vec!["create", "patch"]),
            ]
        );
        assert!(written.iter().all(|w| w.before.is_none()));
        assert_eq!(journal.activity(), 5);
    }
}
