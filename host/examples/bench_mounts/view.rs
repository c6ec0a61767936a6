//! One watch of a kind across all the bench's targets, looked at while
//! waiting: waiting for 200 targets adds one watch to the test bed, not one
//! a target, and the floor and the burst wait the same way, so neither is
//! charged for the bench's own watching more than the other.

use std::{fmt::Debug, hash::Hash, sync::Arc, time::Duration};

use futures::StreamExt;
use kube::{
    Api, Resource,
    runtime::{WatchStreamExt, reflector, reflector::Store, watcher},
};
use serde::de::DeserializeOwned;

/// How often a view is looked at while waiting.
const LOOK: Duration = Duration::from_millis(50);

pub struct View<K>
where
    K: Resource + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    store: Store<K>,
    watch: tokio::task::JoinHandle<()>,
}

impl<K> View<K>
where
    K: Resource + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone,
{
    /// Starts the watch; returns once its first listing is in the view.
    pub async fn start(api: Api<K>, config: watcher::Config) -> anyhow::Result<Self> {
        let (store, writer) = reflector::store();
        let stream = reflector(writer, watcher(api, config));
        let watch = tokio::spawn(stream.applied_objects().for_each(|_| async {}));
        store.wait_until_ready().await?;
        Ok(Self { store, watch })
    }

    pub fn state(&self) -> Vec<Arc<K>> {
        self.store.state()
    }

    /// Until `missing` finds nothing missing in the view, which it says in
    /// words otherwise (the error's text once `timeout` has passed).
    pub async fn until(
        &self,
        timeout: Duration,
        mut missing: impl FnMut(&[Arc<K>]) -> Option<String>,
    ) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let Some(what) = missing(&self.store.state()) else {
                return Ok(());
            };
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "after {timeout:?}: {what}"
            );
            tokio::time::sleep(LOOK).await;
        }
    }
}

impl<K> Drop for View<K>
where
    K: Resource + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    fn drop(&mut self) {
        self.watch.abort();
    }
}
