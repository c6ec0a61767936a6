//! One watch per kind, shared by every controller that reads the kind: its
//! store, and a stream of changes per subscriber.
//!
//! kube-runtime's own shared streams (`store_shared` + `ReflectHandle`) are
//! not used. A `ReflectHandle` (kube-runtime 4.2) that receives the reference
//! of an object already deleted from the store answers `Pending` without
//! asking to be woken again (tried: the next broadcast wakes nobody). Inside a
//! controller's trigger `SelectAll` that subscriber is then never polled
//! again, its bounded queue fills, and the watch, with every controller it
//! feeds, waits for good: objects written and then deleted at once (as the
//! conformance suite does) could stop the Gateway controllers.
//! Here every subscriber gets the objects themselves over its own
//! unbounded channel: a subscriber never loses a wake-up, and a slow one never
//! holds the watch up (the controllers drain their triggers into a scheduler
//! that keeps one entry per object, so the channels stay short).

use std::sync::Arc;

use futures::{Stream, StreamExt, channel::mpsc};
use kube::{
    Api, Resource, ResourceExt,
    runtime::{
        WatchStreamExt,
        reflector::{self, ObjectRef, Store, store::Writer},
        watcher,
    },
};
use serde::de::DeserializeOwned;

use pontoon_support::controller_support::watch_backoff;

/// A watch shared by several controllers: its store and one stream per subscriber.
pub struct SharedWatch<K: Resource + Clone + 'static>
where
    K::DynamicType: Eq + std::hash::Hash + Clone + Default,
{
    pub store: Store<K>,
    writer: Option<Writer<K>>,
    fanout: Fanout<K>,
}

impl<K> Default for SharedWatch<K>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Default,
{
    fn default() -> Self {
        let (store, writer) = reflector::store();
        Self {
            store,
            writer: Some(writer),
            fanout: Fanout::default(),
        }
    }
}

impl<K> SharedWatch<K>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Default,
{
    pub fn new() -> Self {
        Self::default()
    }

    /// Every object as it is applied (created or changed, and each one again
    /// after the watch lists anew): what a controller of this kind reconciles.
    pub fn subscribe(&mut self) -> impl Stream<Item = Arc<K>> + Send + 'static {
        let (tx, rx) = mpsc::unbounded();
        self.fanout.applied.push(tx);
        rx
    }

    /// Every object applied or deleted: what a controller watching this kind
    /// must hear of (a ReferenceGrant or route going away changes a config
    /// as much as one arriving).
    pub fn changes(&mut self) -> impl Stream<Item = Arc<K>> + Send + 'static {
        let (tx, rx) = mpsc::unbounded();
        self.fanout.deleted.push(tx);
        futures::stream::select(self.subscribe(), rx)
    }

    /// Starts the watch (after every subscription was taken: a subscriber
    /// added later would miss what came before).
    pub fn start(&mut self, api: Api<K>, config: watcher::Config) {
        let Some(writer) = self.writer.take() else {
            return;
        };
        let mut fanout = std::mem::take(&mut self.fanout);
        let store = self.store.clone();
        // Nothing reads managedFields, and parsed they are most of a small
        // object's memory (1000 routes: several MiB).
        let objects = watcher(api, config).modify(|o| o.managed_fields_mut().clear());
        let stream = reflector::reflector(writer, objects)
            .backoff(watch_backoff())
            .for_each(move |event| {
                if let Ok(event) = event {
                    fanout.pass_on(&event, &store);
                }
                std::future::ready(())
            });
        tokio::spawn(stream);
    }
}

/// Passes a watch's events on to its subscribers, once the store holds them.
struct Fanout<K: Resource + Clone + 'static>
where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    applied: Vec<mpsc::UnboundedSender<Arc<K>>>,
    deleted: Vec<mpsc::UnboundedSender<Arc<K>>>,
    /// While the watch lists anew: what the store held before, so objects
    /// deleted while the watch was down are passed on as deleted.
    before_relist: Option<Vec<Arc<K>>>,
}

impl<K> Default for Fanout<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    fn default() -> Self {
        Self {
            applied: Vec::new(),
            deleted: Vec::new(),
            before_relist: None,
        }
    }
}

impl<K> Fanout<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Default,
{
    /// Called after the reflector applied `event` to `store`.
    fn pass_on(&mut self, event: &watcher::Event<K>, store: &Store<K>) {
        match event {
            watcher::Event::Apply(object) => {
                // The store's copy: the event's own would be a second one.
                let shared = store
                    .get(&ObjectRef::from_obj(object))
                    .unwrap_or_else(|| Arc::new(object.clone()));
                send(&mut self.applied, &shared);
            }
            watcher::Event::Delete(object) => send(&mut self.deleted, &Arc::new(object.clone())),
            // A listing fills the store only when it is done (InitDone).
            watcher::Event::Init => self.before_relist = Some(store.state()),
            watcher::Event::InitApply(_) => {}
            watcher::Event::InitDone => {
                for object in self.before_relist.take().unwrap_or_default() {
                    if store.get(&ObjectRef::from_obj(&*object)).is_none() {
                        send(&mut self.deleted, &object);
                    }
                }
                for object in store.state() {
                    send(&mut self.applied, &object);
                }
            }
        }
    }
}

/// Sends to every subscriber still listening (a controller that stopped
/// dropped its receiver).
fn send<K>(subscribers: &mut Vec<mpsc::UnboundedSender<Arc<K>>>, object: &Arc<K>) {
    subscribers.retain(|s| s.unbounded_send(object.clone()).is_ok());
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;
    use k8s_openapi::api::core::v1::Service;
    use kube::api::ObjectMeta;

    fn service(name: &str, version: &str) -> Service {
        Service {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                resource_version: Some(version.into()),
                ..ObjectMeta::default()
            },
            ..Service::default()
        }
    }

    /// What a subscriber has been sent so far, as name@resourceVersion.
    fn received(rx: &mut (impl Stream<Item = Arc<Service>> + Unpin)) -> Vec<String> {
        let mut seen = Vec::new();
        while let Some(Some(s)) = rx.next().now_or_never() {
            seen.push(format!(
                "{}@{}",
                s.metadata.name.as_deref().unwrap_or_default(),
                s.metadata.resource_version.as_deref().unwrap_or_default()
            ));
        }
        seen
    }

    struct Bed {
        writer: Writer<Service>,
        store: Store<Service>,
        fanout: Fanout<Service>,
    }

    impl Bed {
        fn new() -> Self {
            let (store, writer) = reflector::store();
            Self {
                writer,
                store,
                fanout: Fanout::default(),
            }
        }
        fn event(&mut self, event: watcher::Event<Service>) {
            self.writer.apply_watcher_event(&event);
            self.fanout.pass_on(&event, &self.store);
        }
        fn list(&mut self, objects: Vec<Service>) {
            self.event(watcher::Event::Init);
            for o in objects {
                self.event(watcher::Event::InitApply(o));
            }
            self.event(watcher::Event::InitDone);
        }
    }

    #[test]
    fn an_object_deleted_before_its_change_is_read_does_not_silence_the_subscriber() {
        // kube-runtime's ReflectHandle went quiet for good here.
        let mut bed = Bed::new();
        let (tx, mut applied) = mpsc::unbounded();
        bed.fanout.applied.push(tx);
        let (tx, mut deleted) = mpsc::unbounded();
        bed.fanout.deleted.push(tx);
        bed.list(vec![]);
        bed.event(watcher::Event::Apply(service("a", "1")));
        bed.event(watcher::Event::Delete(service("a", "1")));
        bed.event(watcher::Event::Apply(service("b", "2")));
        assert_eq!(received(&mut applied), ["a@1", "b@2"]);
        assert_eq!(received(&mut deleted), ["a@1"]);
        bed.event(watcher::Event::Apply(service("b", "3")));
        assert_eq!(received(&mut applied), ["b@3"]);
    }

    #[test]
    fn a_listing_passes_on_every_object_once_the_store_holds_them() {
        let mut bed = Bed::new();
        let (tx, mut applied) = mpsc::unbounded();
        bed.fanout.applied.push(tx);
        bed.event(watcher::Event::Init);
        bed.event(watcher::Event::InitApply(service("a", "1")));
        assert_eq!(received(&mut applied), Vec::<String>::new());
        bed.event(watcher::Event::InitApply(service("b", "1")));
        bed.event(watcher::Event::InitDone);
        let mut seen = received(&mut applied);
        seen.sort();
        assert_eq!(seen, ["a@1", "b@1"]);
        for name in ["a", "b"] {
            let key = ObjectRef::new(name).within("default");
            assert!(bed.store.get(&key).is_some(), "{name} is in the store");
        }
    }

    #[test]
    fn objects_deleted_while_the_watch_was_down_are_passed_on_as_deleted() {
        let mut bed = Bed::new();
        let (tx, mut deleted) = mpsc::unbounded();
        bed.fanout.deleted.push(tx);
        bed.list(vec![service("a", "1"), service("b", "1")]);
        bed.list(vec![service("b", "2")]);
        assert_eq!(received(&mut deleted), ["a@1"]);
    }

    #[test]
    fn a_subscriber_that_went_away_is_forgotten_and_the_others_still_hear() {
        let mut bed = Bed::new();
        let (tx, gone) = mpsc::unbounded();
        bed.fanout.applied.push(tx);
        let (tx, mut applied) = mpsc::unbounded();
        bed.fanout.applied.push(tx);
        drop(gone);
        bed.list(vec![]);
        bed.event(watcher::Event::Apply(service("a", "1")));
        assert_eq!(bed.fanout.applied.len(), 1);
        assert_eq!(received(&mut applied), ["a@1"]);
    }
}
