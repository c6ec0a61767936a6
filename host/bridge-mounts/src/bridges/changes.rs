//! The bridge changes a mount renders: a bridge that comes, goes, or
//! changes what it asks for. A bridge's `state`, `stateTransitions` and
//! `status` are the bridge controller's report of that rendering; they wake
//! no mount. Were they to, each report would run the mount's whole check
//! again (an exec into every pod), and a bridge deleted meanwhile would
//! wait behind it before leaving the pods.

use std::{
    collections::{HashMap, hash_map::DefaultHasher},
    hash::{Hash, Hasher},
};

use futures::{Stream, TryStreamExt, stream};
use kube::{
    Api, ResourceExt,
    runtime::{WatchStreamExt, reflector::store::Writer, watcher},
};

use crate::crd::GefyraBridge;
use pontoon_support::controller_support::{watch_backoff, watch_config};

/// The bridges of `api` whose request changed, came or went; after a
/// re-list every bridge (one deleted during a watch gap has no event of its
/// own, but wakes its mount through a sibling or the mount's own re-list).
///
/// The same watch keeps `store`, which a mount reads its bridges from: a
/// bridge is in it before the change it wakes its mount with, so the mount
/// never renders without the bridge that woke it. A re-list replaces the
/// store only once it is complete, so its bridges wake their mounts then.
pub fn rendering_changes(
    api: Api<GefyraBridge>,
    store: Writer<GefyraBridge>,
) -> impl Stream<Item = Result<GefyraBridge, watcher::Error>> + Send + 'static {
    let mut seen = Seen::default();
    watcher(api, watch_config())
        .backoff(watch_backoff())
        .reflect(store)
        .map_ok(move |event| stream::iter(seen.wakes(event).into_iter().map(Ok)))
        .try_flatten()
}

/// What the watch has seen of each bridge: the fingerprint of its request.
#[derive(Default)]
struct Seen {
    requests: HashMap<String, u64>,
    /// While a re-list runs: what it has seen so far, which replaces
    /// `requests` when it is done (bridges gone meanwhile drop out), and
    /// the bridges to wake their mounts with then.
    relisted: Option<(HashMap<String, u64>, Vec<GefyraBridge>)>,
}

impl Seen {
    /// The bridges whose mounts are to look again after `event`.
    fn wakes(&mut self, event: watcher::Event<GefyraBridge>) -> Vec<GefyraBridge> {
        match event {
            watcher::Event::Init => {
                self.relisted = Some(Default::default());
                Vec::new()
            }
            watcher::Event::InitApply(bridge) => {
                let (requests, bridges) = self.relisted.get_or_insert_with(Default::default);
                requests.insert(key(&bridge), request(&bridge));
                bridges.push(bridge);
                Vec::new()
            }
            watcher::Event::InitDone => match self.relisted.take() {
                Some((requests, bridges)) => {
                    self.requests = requests;
                    bridges
                }
                None => Vec::new(),
            },
            watcher::Event::Apply(bridge) => {
                let print = request(&bridge);
                if self.requests.insert(key(&bridge), print) == Some(print) {
                    Vec::new()
                } else {
                    vec![bridge]
                }
            }
            watcher::Event::Delete(bridge) => {
                self.requests.remove(&key(&bridge));
                vec![bridge]
            }
        }
    }
}

fn key(bridge: &GefyraBridge) -> String {
    format!(
        "{}/{}/{}",
        bridge.namespace().unwrap_or_default(),
        bridge.name_any(),
        bridge.uid().unwrap_or_default()
    )
}

/// Fingerprint of everything of a bridge that its mount may render or
/// judge: its fields without the report, its labels (the mount it names)
/// and whether it is being deleted.
fn request(bridge: &GefyraBridge) -> u64 {
    let mut fields = bridge.bridge.clone();
    fields.state = None;
    fields.state_transitions = None;
    fields.status = None;
    let deleting = bridge.metadata.deletion_timestamp.is_some();
    let mut hasher = DefaultHasher::new();
    // Serialized, so that a field added to the CRD later counts too.
    serde_json::to_string(&fields)
        .unwrap_or_default()
        .hash(&mut hasher);
    bridge.labels().hash(&mut hasher);
    deleting.hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn bridge(rules_value: &str, state: Option<&str>) -> GefyraBridge {
        let mut value = json!({
            "metadata": { "name": "b", "namespace": "ns", "uid": "u1",
                          "labels": { "gefyra.dev/bridge-mount": "m" } },
            "provider": "carrier2",
            "providerParameter": { "rules": [{ "match": [{ "matchHeader": {
                "name": "x-gefyra", "value": rules_value, "type": "exact" } }] }] },
            "portMappings": ["8080:80"],
            "destinationIP": "10.0.0.1",
        });
        if let Some(state) = state {
            value["state"] = json!(state);
            value["stateTransitions"] = json!({ state: "2026-12-04T00:00:00.000000Z" });
            value["status"] = json!({ "message": format!("now {state}") });
        }
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn the_bridge_controllers_report_wakes_no_mount_but_a_new_request_does() {
        let mut seen = Seen::default();
        assert!(seen.wakes(watcher::Event::Apply(bridge("a", None))).len() == 1);
        assert!(
            seen.wakes(watcher::Event::Apply(bridge("a", Some("INSTALLING"))))
                .is_empty()
        );
        assert!(
            seen.wakes(watcher::Event::Apply(bridge("a", Some("ACTIVE"))))
                .is_empty()
        );
        assert!(
            seen.wakes(watcher::Event::Apply(bridge("b", Some("ACTIVE"))))
                .len()
                == 1,
            "new rules must be rendered"
        );
        let mut relabelled = bridge("b", Some("ACTIVE"));
        relabelled
            .metadata
            .labels
            .as_mut()
            .unwrap()
            .insert("gefyra.dev/bridge-mount".into(), "other".into());
        assert!(seen.wakes(watcher::Event::Apply(relabelled)).len() == 1);
    }

    #[test]
    fn deletion_wakes_the_mount_whether_marked_or_done() {
        let mut seen = Seen::default();
        seen.wakes(watcher::Event::Apply(bridge("a", Some("ACTIVE"))));
        let mut marked = bridge("a", Some("ACTIVE"));
        marked.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        assert!(seen.wakes(watcher::Event::Apply(marked.clone())).len() == 1);
        assert!(seen.wakes(watcher::Event::Delete(marked)).len() == 1);
        // Recreated with the same request after its deletion: rendered again.
        assert!(seen.wakes(watcher::Event::Apply(bridge("a", None))).len() == 1);
    }

    #[test]
    fn a_relist_wakes_every_bridge_and_forgets_the_ones_gone() {
        let mut seen = Seen::default();
        seen.wakes(watcher::Event::Apply(bridge("a", None)));
        let mut other = bridge("a", None);
        other.metadata.name = Some("gone".into());
        seen.wakes(watcher::Event::Apply(other));
        assert!(seen.wakes(watcher::Event::Init).is_empty());
        // Woken only once the re-list is whole (the store is replaced then).
        assert!(
            seen.wakes(watcher::Event::InitApply(bridge("a", None)))
                .is_empty()
        );
        let woken = seen.wakes(watcher::Event::InitDone);
        assert_eq!(
            woken.iter().map(|b| b.name_any()).collect::<Vec<_>>(),
            ["b"]
        );
        assert_eq!(seen.requests.len(), 1);
        assert!(
            seen.wakes(watcher::Event::Apply(bridge("a", Some("ACTIVE"))))
                .is_empty()
        );
    }
}
