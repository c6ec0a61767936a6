//! The mark on what a mount creates (shadow workload, its Service, the HPA
//! copy): a label naming the mount by its uid. carrier2mount applies over,
//! and deletes, only objects that carry its own mount's mark, so an object of
//! the same name that a user made is never taken over: the mount refuses,
//! naming it.
//!
//! Shadows made before the mark existed are recognised by their duplication
//! id, which was always derived from the mount's uid.

use serde_json::{Map, Value};

use crate::names::{self, DUPLICATION_ID_LABEL};

/// The label naming the mount that made an object.
pub const MOUNT_LABEL: &str = "pontoon.dev/mount-uid";

/// The label's value for the mount with `uid` (a uid is a valid label value;
/// the cleaning only guards against hosts that pass something else).
pub fn value(uid: &str) -> String {
    names::duplication_id_from_uid(uid)
}

/// Puts the mark into an object's `metadata.labels`.
pub fn stamp(object: &mut Value, uid: &str) {
    let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let labels = metadata
        .entry("labels")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Some(labels) = labels.as_object_mut() {
        labels.insert(MOUNT_LABEL.into(), value(uid).into());
    }
}

/// Whether `object` (as JSON) was made by the mount with `uid`: it carries
/// the mark, or (made before the mark) the mount's duplication id where the
/// kind keeps it: a workload's pod labels, a Service's selector.
pub fn is_ours(object: &Value, uid: &str) -> bool {
    let label = |pointer: &str| {
        object
            .pointer(&format!("{pointer}/{}", escape(MOUNT_LABEL)))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    if let Some(mark) = label("/metadata/labels") {
        return mark == value(uid);
    }
    let id = names::duplication_id_from_uid(uid);
    [
        "/spec/template/metadata/labels",
        "/metadata/labels",
        "/spec/selector",
    ]
    .iter()
    .any(|pointer| {
        object
            .pointer(&format!("{pointer}/{}", escape(DUPLICATION_ID_LABEL)))
            .and_then(Value::as_str)
            == Some(id.as_str())
    })
}

/// A JSON pointer token for a label key (`/` and `~` escaped).
fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// The refusal for an object of our name that is not ours.
pub fn not_ours(kind: &str, name: &str, namespace: &str, uid: &str) -> String {
    format!(
        "{kind} `{name}` in namespace `{namespace}` exists and was not made by this mount (it \
         lacks label `{MOUNT_LABEL}={}`); carrier2mount will not take it over or delete it: \
         rename or delete it, and the mount tries again",
        value(uid)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const UID: &str = "6f1c2a4e-0d5b-4b8e-9a51-3c2f8d7e1b00";

    #[test]
    fn a_stamped_object_is_ours_and_no_other_mounts() {
        let mut object =
            json!({"metadata": {"name": "web-gefyra", "labels": {"app": "web-gefyra"}}});
        stamp(&mut object, UID);
        assert_eq!(object["metadata"]["labels"][MOUNT_LABEL], UID);
        assert_eq!(object["metadata"]["labels"]["app"], "web-gefyra");
        assert!(is_ours(&object, UID));
        assert!(!is_ours(&object, "another-uid"));
        let mut bare = json!({"metadata": {"name": "x"}});
        stamp(&mut bare, UID);
        assert!(is_ours(&bare, UID));
    }

    #[test]
    fn a_users_object_of_the_same_name_is_not_ours() {
        let users = json!({
            "metadata": {"name": "web-gefyra", "labels": {"app": "mine"}},
            "spec": {"template": {"metadata": {"labels": {"app": "mine"}}}}
        });
        assert!(!is_ours(&users, UID));
        // A mark of another mount wins over a matching duplication id.
        let other = json!({
            "metadata": {"labels": {MOUNT_LABEL: "other"}},
            "spec": {"template": {"metadata": {"labels": {DUPLICATION_ID_LABEL: UID}}}}
        });
        assert!(!is_ours(&other, UID));
    }

    #[test]
    fn shadows_made_before_the_mark_are_known_by_their_duplication_id() {
        let deployment =
            json!({"spec": {"template": {"metadata": {"labels": {DUPLICATION_ID_LABEL: UID}}}}});
        let pod = json!({"metadata": {"labels": {DUPLICATION_ID_LABEL: UID}}});
        let service = json!({"spec": {"selector": {DUPLICATION_ID_LABEL: UID}}});
        for object in [deployment, pod, service] {
            assert!(is_ours(&object, UID), "{object}");
            assert!(!is_ours(&object, "another-uid"), "{object}");
        }
    }

    #[test]
    fn the_refusal_names_the_object_and_what_to_do() {
        assert_eq!(
            not_ours("Deployment", "web-gefyra", "shop", UID),
            format!(
                "Deployment `web-gefyra` in namespace `shop` exists and was not made by this \
                 mount (it lacks label `pontoon.dev/mount-uid={UID}`); carrier2mount will not \
                 take it over or delete it: rename or delete it, and the mount tries again"
            )
        );
    }
}
