//! What the mount controller last rendered into each mount's pods: the
//! bridge controller reads it to tell a bridge that is in place (ACTIVE)
//! from one still being rendered, and is woken when it changes.
//!
//! Kept in memory only: after a restart the book is empty, each ACTIVE
//! mount renders once more (idempotent: the provider finds its pods holding
//! the config already) and fills it; meanwhile bridges keep their state.

use std::{
    collections::{BTreeMap, HashMap, hash_map::DefaultHasher},
    hash::{Hash, Hasher},
    sync::Mutex,
};

use futures::channel::mpsc::{UnboundedReceiver, UnboundedSender, unbounded};
use kube::runtime::reflector::ObjectRef;

use crate::crd::GefyraBridge;
use pontoon_plugins::bindings::provider_bridges::Bridge;

/// Bridge name → fingerprint of the record rendered for it.
pub type Rendered = BTreeMap<String, u64>;

pub struct Book {
    /// By mount uid.
    rendered: Mutex<HashMap<String, Rendered>>,
    notify: UnboundedSender<ObjectRef<GefyraBridge>>,
}

impl Book {
    /// The book and the stream of bridges to look at again.
    pub fn new() -> (Self, UnboundedReceiver<ObjectRef<GefyraBridge>>) {
        let (notify, changed) = unbounded();
        let book = Self {
            rendered: Mutex::default(),
            notify,
        };
        (book, changed)
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<String, Rendered>> {
        // The map stays usable even if a holder panicked.
        self.rendered
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether the pods of mount `uid` hold exactly `bridges`.
    pub fn holds(&self, uid: &str, bridges: &[Bridge]) -> bool {
        self.entries().get(uid) == Some(&rendered(bridges))
    }

    /// What was rendered for mount `uid`; `None` when nothing is known.
    pub fn rendered(&self, uid: &str) -> Option<Rendered> {
        self.entries().get(uid).cloned()
    }

    /// The pods of mount `uid` (in `namespace`) now hold exactly `bridges`;
    /// the bridges that came or went are looked at again.
    pub fn record(&self, uid: &str, namespace: &str, bridges: &[Bridge]) {
        let now = rendered(bridges);
        let before = self.entries().insert(uid.to_string(), now.clone());
        if before.as_ref() == Some(&now) {
            return;
        }
        let names = before
            .into_iter()
            .flat_map(|b| b.into_keys())
            .chain(now.into_keys());
        for name in names.collect::<std::collections::BTreeSet<_>>() {
            // Nobody listening (the bridge controller stopped): nothing to wake.
            let _ = self
                .notify
                .unbounded_send(ObjectRef::new(&name).within(namespace));
        }
    }

    /// The mount is gone.
    pub fn forget(&self, uid: &str) {
        self.entries().remove(uid);
    }
}

pub fn fingerprint(bridge: &Bridge) -> u64 {
    let mut hasher = DefaultHasher::new();
    bridge.hash(&mut hasher);
    hasher.finish()
}

fn rendered(bridges: &[Bridge]) -> Rendered {
    bridges
        .iter()
        .map(|b| (b.name.clone(), fingerprint(b)))
        .collect()
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;

    use super::*;
    use pontoon_plugins::bindings::provider_bridges::PortRoute;

    fn bridge(name: &str, endpoint: &str) -> Bridge {
        Bridge {
            name: name.into(),
            rules: Vec::new(),
            ports: vec![PortRoute {
                port: 80,
                endpoint: endpoint.into(),
            }],
        }
    }

    #[tokio::test]
    async fn recording_wakes_the_bridges_that_came_and_went_and_only_on_change() {
        let (book, mut changed) = Book::new();
        let (a, b) = (bridge("a", "10.0.0.1:80"), bridge("b", "10.0.0.2:80"));
        assert!(!book.holds("m", &[]));
        book.record("m", "gefyra", std::slice::from_ref(&a));
        assert_eq!(changed.next().await.unwrap().name, "a");
        assert!(book.holds("m", std::slice::from_ref(&a)));
        book.record("m", "gefyra", std::slice::from_ref(&a));
        book.record("m", "gefyra", std::slice::from_ref(&b));
        let woken: Vec<String> = vec![
            changed.next().await.unwrap().name,
            changed.next().await.unwrap().name,
        ];
        assert_eq!(woken, ["a", "b"]);
        // A bridge whose endpoint changed is not the one rendered.
        assert!(!book.holds("m", &[bridge("b", "10.0.0.9:80")]));
        book.forget("m");
        assert_eq!(book.rendered("m"), None);
    }
}
