//! The restore ConfigMap: the original image, command and args of every
//! patched container, written before the pod is touched, read back to undo.
//!
//! One ConfigMap per mount, `gefyra-carrier2-restore-<mount uid>` in the
//! operator's namespace (where tenants write nothing), so that no tenant can
//! fill or block another's: Gefyra's one ConfigMap for every mount of the
//! cluster is an object of at most 1 MiB that a few workloads with
//! thousands of pods fill, failing every other tenant's install. A mount
//! whose pods could not fit [`MAX_RECORD_BYTES`] is refused up front
//! ([`too_big`]). Entries written by earlier versions into Gefyra's shared
//! ConfigMap ([`LEGACY_CONFIG_MAP`]) are still read, and dropped once used.
//!
//! One key per pod and container, `<namespace>.<pod>.<container>` (neither a
//! namespace nor a container name has dots, so the key splits unambiguously),
//! whose value is JSON in Gefyra's shape plus where it came from:
//!
//! ```json
//! {"originalConfig": {"image": "nginx:1.27", "command": ["nginx"], "args": null},
//!  "container": "app", "pod": "web-7d9c-x2", "podUid": "0c1f…",
//!  "targetNamespace": "shop", "target": "deploy/web", "mount": "gefyra/web-mount"}
//! ```
//!
//! Entries of earlier versions are keyed `<namespace>.<pod>` and are still
//! read ([`legacy_key`]). The pod carries a second copy (`original.rs`).
//!
//! Writers touch one key at a time (merge patches), so mounts sharing the
//! ConfigMap never overwrite each other's entries, and the ConfigMap is
//! deleted only if unchanged since it was seen empty.

use std::collections::BTreeMap;

use pontoon_provider_sdk::{
    bridge_mount::{CONFLICT_RETRY_SECONDS, Error, Mount},
    cluster::{self, ClusterError, EventType, PatchType},
    k8s_openapi::{api::core::v1::ConfigMap, apimachinery::pkg::apis::meta::v1::ObjectMeta},
};
use serde::{Deserialize, Serialize};
use serde_json::json;

/// Gefyra's shared restore ConfigMap, where earlier versions kept every
/// mount's entries: read and emptied at uninstall, never written to.
pub const LEGACY_CONFIG_MAP: &str = "gefyra-carrier2-restore-configmap";

/// What a mount's own restore ConfigMap is called, before its uid.
pub const CONFIG_MAP_PREFIX: &str = "gefyra-carrier2-restore-";

/// The restore ConfigMap of the mount with `uid`.
pub fn config_map_of(uid: &str) -> String {
    format!("{CONFIG_MAP_PREFIX}{uid}")
}

/// The most entries (key and value, in bytes) one mount's ConfigMap
/// holds: half of what Kubernetes allows an object, the rest left for
/// what the estimate up front cannot know (longer pod names, a scale-up).
pub const MAX_RECORD_BYTES: usize = 512 * 1024;

/// Why a target is refused up front, when the entries of `pods` pods like
/// `sample` could not fit [`MAX_RECORD_BYTES`].
pub fn too_big(pods: usize, sample: &Entry, target: &str) -> Option<String> {
    let key_bytes = key(
        sample.target_namespace.as_deref().unwrap_or_default(),
        sample.pod.as_deref().unwrap_or_default(),
        sample.container.as_deref().unwrap_or_default(),
    )
    .len();
    let each = sample.encode().len() + key_bytes;
    let needed = pods.saturating_mul(each);
    (needed > MAX_RECORD_BYTES).then(|| {
        format!(
            "{target} may run up to {pods} pods, whose restore entries (the original of each \
             patched container, about {each} bytes each) would take {} KiB, more than the {} KiB \
             one mount keeps: mount a workload with fewer replicas, or lower its maxReplicas",
            needed / 1024,
            MAX_RECORD_BYTES / 1024
        )
    })
}

/// Longest ConfigMap key Kubernetes accepts.
const MAX_KEY: usize = 253;

/// What a container ran before Carrier2 replaced it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OriginalConfig {
    pub image: Option<String>,
    pub command: Option<Vec<String>>,
    pub args: Option<Vec<String>>,
}

/// One restore entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    pub original_config: OriginalConfig,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    /// The uid of the pod it was saved from: a pod recreated under the same
    /// name (a StatefulSet's) is another pod with its own original.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_uid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_namespace: Option<String>,
    /// The mount's target in short form (`deploy/web`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// `<namespace>/<name>` of the mount that wrote it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mount: Option<String>,
}

impl Entry {
    pub fn encode(&self) -> String {
        // Plain data with string keys: serialising cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    pub fn decode(text: &str) -> Result<Self, String> {
        serde_json::from_str(text).map_err(|e| e.to_string())
    }

    /// Whether the entry was written for this pod of this target.
    pub fn belongs_to(&self, namespace: &str, target: &str) -> bool {
        self.target_namespace.as_deref() == Some(namespace)
            && self.target.as_deref() == Some(target)
    }

    /// Why the entry may not be under `key`, if it may not: its namespace,
    /// pod and container (those it names) give another key. An entry put
    /// under another pod's key would drag that pod into a restore.
    pub fn misplaced(&self, key: &str) -> Option<String> {
        let (Some(namespace), Some(pod)) = (self.target_namespace.as_deref(), self.pod.as_deref())
        else {
            return None;
        };
        let expected = match self.container.as_deref() {
            Some(container) => vec![
                self::key(namespace, pod, container),
                legacy_key(namespace, pod),
            ],
            None => vec![legacy_key(namespace, pod)],
        };
        (!expected.iter().any(|k| k == key)).then(|| {
            format!(
                "entry `{key}` is for pod `{pod}` of namespace `{namespace}`, whose key is \
                 `{}`: ignored",
                expected[0]
            )
        })
    }
}

/// The key of the entry of a pod's container. Keys longer than Kubernetes
/// allows (a very long pod name) keep a readable prefix and end in a hash of
/// the pod and container names.
pub fn key(namespace: &str, pod: &str, container: &str) -> String {
    fitted(namespace, &format!("{pod}.{container}"))
}

/// The key earlier versions wrote, one per pod whatever the container.
pub fn legacy_key(namespace: &str, pod: &str) -> String {
    fitted(namespace, pod)
}

fn fitted(namespace: &str, rest: &str) -> String {
    let plain = format!("{namespace}.{rest}");
    if plain.len() <= MAX_KEY {
        return plain;
    }
    let hash = format!("{:016x}", fnv1a(rest.as_bytes()));
    let room = MAX_KEY - namespace.len() - hash.len() - 2;
    let prefix: String = rest.chars().take(room).collect();
    format!("{namespace}.{prefix}.{hash}")
}

/// The entry of `container` of `pod` as stored (`None`: none), and the key
/// it is under: the current key, else an earlier version's key whose entry
/// names this container (or none). An entry that does not decode is
/// `Some(Err)`: it may be someone's only copy, so it is never written over.
pub fn lookup(
    data: &BTreeMap<String, String>,
    namespace: &str,
    pod: &str,
    container: &str,
) -> Option<(String, Result<Entry, String>)> {
    let current = key(namespace, pod, container);
    if let Some(text) = data.get(&current) {
        return match Entry::decode(text) {
            Ok(entry) if entry.misplaced(&current).is_some() => None,
            decoded => Some((current, decoded)),
        };
    }
    let legacy = legacy_key(namespace, pod);
    let text = data.get(&legacy)?;
    match Entry::decode(text) {
        Ok(entry) if entry.container.as_deref().is_some_and(|c| c != container) => None,
        Ok(entry) if entry.misplaced(&legacy).is_some() => None,
        decoded => Some((legacy, decoded)),
    }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Every entry of `namespace` in `data` kept under a key its own pod and
/// container do not give (an edit, or a copy put under another pod's key),
/// as why each is ignored: no step uses them, and each step that reads the
/// entries reports them ([`IGNORED_REASON`]).
pub fn misplaced_entries(data: &BTreeMap<String, String>, namespace: &str) -> Vec<String> {
    let prefix = format!("{namespace}.");
    data.iter()
        .filter(|(key, _)| key.starts_with(&prefix))
        .filter_map(|(key, value)| Entry::decode(value).ok()?.misplaced(key))
        .collect()
}

/// The reason of the Warning Event that names ignored restore entries.
pub const IGNORED_REASON: &str = "RestoreEntryIgnored";

/// Says on the mount (a Warning Event) which entries of `store` no step
/// uses, and why each; nothing when there are none. They stay where they
/// are: an entry may be the only copy of something.
pub fn report_ignored(store: &Store, problems: &[String]) {
    if !problems.is_empty() {
        crate::api::event(
            EventType::Warning,
            IGNORED_REASON,
            &format!(
                "in {}: {}; left in place (remove them by hand)",
                store.describe(),
                problems.join("; ")
            ),
        );
    }
}

/// The entries of one target among all entries of the ConfigMap, by key;
/// entries of this namespace that do not decode are reported with their error
/// (never removed: they may be someone's only copy).
pub fn of_target(
    data: &BTreeMap<String, String>,
    namespace: &str,
    target: &str,
) -> (BTreeMap<String, Entry>, Vec<String>) {
    let prefix = format!("{namespace}.");
    let mut entries = BTreeMap::new();
    let mut unreadable = Vec::new();
    for (key, value) in data.iter().filter(|(k, _)| k.starts_with(&prefix)) {
        match Entry::decode(value) {
            Ok(entry) if entry.belongs_to(namespace, target) => match entry.misplaced(key) {
                Some(why) => unreadable.push(why),
                None => {
                    entries.insert(key.clone(), entry);
                }
            },
            Ok(_) => {}
            Err(e) => unreadable.push(format!("{key}: {e}")),
        }
    }
    (entries, unreadable)
}

/// A restore ConfigMap: a mount's own, or Gefyra's shared one.
pub struct Store {
    namespace: String,
    name: String,
    /// The mount's mark, on the ConfigMap it creates.
    mark: Option<String>,
}

impl Store {
    /// The mount's own restore ConfigMap.
    pub fn of(mount: &Mount) -> Self {
        Self {
            namespace: mount.settings.operator_namespace.clone(),
            name: mount.settings.restore_config_map.clone(),
            mark: Some(crate::mark::value(&mount.uid)),
        }
    }

    /// Gefyra's shared ConfigMap, as earlier versions wrote it.
    pub fn legacy(mount: &Mount) -> Self {
        Self {
            namespace: mount.settings.operator_namespace.clone(),
            name: LEGACY_CONFIG_MAP.to_string(),
            mark: None,
        }
    }

    pub fn describe(&self) -> String {
        format!(
            "ConfigMap `{}` in namespace `{}`",
            self.name, self.namespace
        )
    }

    pub fn read(&self) -> Result<Option<ConfigMap>, Error> {
        Ok(cluster::get::<ConfigMap>(&self.namespace, &self.name)?)
    }

    /// The data of the ConfigMap, empty when it does not exist.
    pub fn data(&self) -> Result<BTreeMap<String, String>, Error> {
        Ok(self.read()?.and_then(|cm| cm.data).unwrap_or_default())
    }

    /// Writes `entries` (key -> encoded entry) in one write, creating the
    /// ConfigMap if needed; nothing to write is no write.
    /// Writes `entries` (key -> encoded entry) in one write, creating the
    /// ConfigMap if needed; nothing to write is no write. `data` is what
    /// the ConfigMap holds besides: refused (`failed`, nothing written) when
    /// the two together would pass [`MAX_RECORD_BYTES`].
    pub fn save_all(
        &self,
        entries: &BTreeMap<String, String>,
        data: &BTreeMap<String, String>,
    ) -> Result<(), Error> {
        if entries.is_empty() {
            return Ok(());
        }
        let size = |m: &BTreeMap<String, String>, skip: &BTreeMap<String, String>| -> usize {
            m.iter()
                .filter(|(k, _)| !skip.contains_key(*k))
                .map(|(k, v)| k.len() + v.len())
                .sum()
        };
        let total = size(entries, &BTreeMap::new()) + size(data, entries);
        if total > MAX_RECORD_BYTES {
            return Err(Error::failed(format!(
                "{} would hold {} KiB of restore entries, more than the {} KiB one mount keeps: \
                 the target has more pods than one mount can restore; scale it down",
                self.describe(),
                total / 1024,
                MAX_RECORD_BYTES / 1024
            )));
        }
        let patch = json!({ "data": entries });
        match self.merge(&patch) {
            Err(ClusterError::NotFound(_)) => {}
            other => return other.map_err(Error::from),
        }
        let config_map = ConfigMap {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                namespace: Some(self.namespace.clone()),
                labels: self
                    .mark
                    .as_ref()
                    .map(|mark| [(crate::mark::MOUNT_LABEL.to_string(), mark.clone())].into()),
                ..Default::default()
            },
            data: Some(entries.clone()),
            ..Default::default()
        };
        match cluster::create(&self.namespace, &config_map) {
            Ok(_) => Ok(()),
            // Another writer created it first: add to theirs.
            Err(ClusterError::Conflict(_)) => self.merge(&patch).map_err(Error::from),
            Err(err) => Err(err.into()),
        }
    }

    /// Removes `keys` in one write; gone already is fine. The ConfigMap as
    /// the write left it; `None` when there was nothing to remove or no
    /// ConfigMap.
    pub fn remove_all(&self, keys: &[String]) -> Result<Option<ConfigMap>, Error> {
        if keys.is_empty() {
            return Ok(None);
        }
        let removed: serde_json::Map<String, serde_json::Value> = keys
            .iter()
            .map(|key| (key.clone(), serde_json::Value::Null))
            .collect();
        match cluster::patch::<ConfigMap>(
            &self.namespace,
            &self.name,
            PatchType::Merge,
            &json!({ "data": removed }),
        ) {
            Ok(left) => Ok(Some(left)),
            Err(ClusterError::NotFound(_)) => Ok(None),
            Err(err) => Err(err.into()),
        }
    }

    /// Deletes the ConfigMap if it holds no entries and nobody wrote to it
    /// since it was read. `true` when it is gone.
    pub fn delete_if_empty(&self) -> Result<bool, Error> {
        match self.read()? {
            Some(config_map) => self.delete_if_empty_as(&config_map),
            None => Ok(true),
        }
    }

    /// Deletes the ConfigMap if `config_map`, its state as last read or
    /// written, holds no entries and nobody wrote to it since. `true` when
    /// it is gone.
    pub fn delete_if_empty_as(&self, config_map: &ConfigMap) -> Result<bool, Error> {
        let empty = config_map.data.as_ref().is_none_or(BTreeMap::is_empty)
            && config_map
                .binary_data
                .as_ref()
                .is_none_or(BTreeMap::is_empty);
        if !empty {
            return Ok(false);
        }
        let Some(version) = config_map.metadata.resource_version.as_deref() else {
            return Err(Error::failed(format!(
                "{} has no resourceVersion",
                self.describe()
            )));
        };
        match cluster::delete_if_unchanged::<ConfigMap>(&self.namespace, &self.name, version) {
            Ok(_) => Ok(true),
            Err(ClusterError::Conflict(_)) => Err(Error::temporary(
                format!(
                    "{} changed while being deleted; looking again",
                    self.describe()
                ),
                CONFLICT_RETRY_SECONDS,
            )),
            Err(err) => Err(err.into()),
        }
    }

    fn merge(&self, patch: &serde_json::Value) -> Result<(), ClusterError> {
        cluster::patch::<ConfigMap>(&self.namespace, &self.name, PatchType::Merge, patch).map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> Entry {
        Entry {
            original_config: OriginalConfig {
                image: Some("nginx:1.27".into()),
                command: Some(vec!["nginx".into()]),
                args: None,
            },
            container: Some("app".into()),
            pod: Some("web-1".into()),
            pod_uid: None,
            target_namespace: Some("shop".into()),
            target: Some("deploy/web".into()),
            mount: Some("gefyra/m".into()),
        }
    }

    #[test]
    fn entries_round_trip_in_gefyras_shape() {
        let text = entry().encode();
        assert_eq!(
            text,
            r#"{"originalConfig":{"image":"nginx:1.27","command":["nginx"],"args":null},"container":"app","pod":"web-1","targetNamespace":"shop","target":"deploy/web","mount":"gefyra/m"}"#
        );
        assert_eq!(Entry::decode(&text).unwrap(), entry());
    }

    #[test]
    fn a_gefyra_entry_decodes_too() {
        let gefyra = r#"{"originalConfig": {"image": "nginx", "command": null, "args": ["-v"]}}"#;
        let decoded = Entry::decode(gefyra).unwrap();
        assert_eq!(decoded.original_config.args, Some(vec!["-v".to_string()]));
        assert_eq!(decoded.target, None);
        assert!(Entry::decode("{}").is_err());
        assert!(Entry::decode("not json").is_err());
    }

    #[test]
    fn keys_are_namespace_pod_and_container_and_fit_the_limit() {
        assert_eq!(key("shop", "web-7d9c-x2", "app"), "shop.web-7d9c-x2.app");
        assert_ne!(key("shop", "web-1", "app"), key("shop", "web-1", "api"));
        assert_eq!(legacy_key("shop", "web-7d9c-x2"), "shop.web-7d9c-x2");
        let long_pod = "p".repeat(250);
        let long = key("shop", &long_pod, "app");
        assert_eq!(long.len(), 253);
        assert!(long.starts_with("shop.ppp"));
        assert_ne!(long, key("shop", &long_pod, "api"));
        assert_ne!(long, key("shop", &format!("{}q", "p".repeat(249)), "app"));
        assert!(
            long.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
        );
    }

    #[test]
    fn lookup_finds_the_containers_entry_or_an_earlier_versions() {
        let mut api = entry();
        api.container = Some("api".into());
        api.pod = Some("web-2".into());
        let data: BTreeMap<String, String> = [
            ("shop.web-1.app".to_string(), entry().encode()),
            ("shop.web-2".to_string(), api.encode()),
            ("shop.web-3.app".to_string(), "{".to_string()),
        ]
        .into();
        let (key, found) = lookup(&data, "shop", "web-1", "app").unwrap();
        assert_eq!((key.as_str(), found), ("shop.web-1.app", Ok(entry())));
        // An earlier version's entry is this container's only if it says so.
        let (key, found) = lookup(&data, "shop", "web-2", "api").unwrap();
        assert_eq!(
            (key.as_str(), found.unwrap().container.as_deref()),
            ("shop.web-2", Some("api"))
        );
        assert_eq!(lookup(&data, "shop", "web-2", "app"), None);
        assert!(matches!(
            lookup(&data, "shop", "web-3", "app"),
            Some((_, Err(_)))
        ));
        assert_eq!(lookup(&data, "shop", "web-4", "app"), None);
    }

    #[test]
    fn an_entry_under_another_pods_key_is_ignored_and_reported() {
        let moved = entry().encode();
        let data: BTreeMap<String, String> = [
            // web-1's entry under web-2's key.
            ("shop.web-2.app".to_string(), moved.clone()),
            ("shop.web-1.app".to_string(), moved),
        ]
        .into();
        assert_eq!(lookup(&data, "shop", "web-2", "app"), None);
        assert!(lookup(&data, "shop", "web-1", "app").is_some());
        let (entries, reported) = of_target(&data, "shop", "deploy/web");
        assert_eq!(entries.keys().collect::<Vec<_>>(), ["shop.web-1.app"]);
        assert_eq!(
            reported,
            [
                "entry `shop.web-2.app` is for pod `web-1` of namespace `shop`, whose key is \
              `shop.web-1.app`: ignored"
            ]
        );
        // Install reads every entry of the namespace: the same report.
        assert_eq!(misplaced_entries(&data, "shop"), reported);
        assert!(misplaced_entries(&data, "dev").is_empty());
    }

    #[test]
    fn a_target_whose_entries_could_not_fit_is_refused_up_front() {
        let sample = entry();
        assert_eq!(too_big(100, &sample, "deploy/web"), None);
        let refused = too_big(5000, &sample, "deploy/web").unwrap();
        assert!(
            refused.starts_with("deploy/web may run up to 5000 pods")
                && refused.contains("more than the 512 KiB one mount keeps"),
            "{refused}"
        );
        assert_eq!(config_map_of("u-1"), "gefyra-carrier2-restore-u-1");
    }

    #[test]
    fn of_target_picks_this_targets_entries_and_reports_unreadable_ones() {
        let mut other_target = entry();
        other_target.target = Some("deploy/api".into());
        let data: BTreeMap<String, String> = [
            ("shop.web-1".to_string(), entry().encode()),
            ("shop.api-1".to_string(), other_target.encode()),
            ("shop.broken".to_string(), "{".to_string()),
            ("other.broken".to_string(), "{".to_string()),
            ("shopfront.web-1".to_string(), entry().encode()),
        ]
        .into();
        let (entries, unreadable) = of_target(&data, "shop", "deploy/web");
        assert_eq!(entries.keys().collect::<Vec<_>>(), ["shop.web-1"]);
        assert_eq!(unreadable.len(), 1);
        assert!(unreadable[0].starts_with("shop.broken: "));
    }
}
