//! How the relay's objects are named and marked as ours.
//!
//! Every object of a client is named `pontoon-relay-<id>`: what the
//! scope's `pontoon-relay-{client}` allows, so the host lets a call touch
//! that one client's objects only. The labels say the same to anyone
//! looking (and to `clients`, which finds the clients by them); an object
//! of that name without them is not ours, and is never changed or deleted.

use std::collections::BTreeMap;

use pontoon_provider_sdk::{
    connection::{CLIENT_LABEL, own_name},
    k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
};

/// The prefix of every object's name; `{client}` completes it in the scope.
pub const PREFIX: &str = "pontoon-relay";
/// The scope's name pattern for the objects.
pub const SCOPE_NAME: &str = "pontoon-relay-{client}";

pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY: &str = "pontoon";
pub const COMPONENT_LABEL: &str = "app.kubernetes.io/component";
pub const COMPONENT: &str = "relay";
/// The client's name as written in its bridges: label values cannot hold
/// a user name (`alice@example.com`, `system:serviceaccount:…`).
pub const CLIENT_NAME_ANNOTATION: &str = "pontoon.dev/connection-client-name";

/// The longest id that still makes a valid object name (a Service's name is
/// a DNS label: 63 characters).
const MAX_ID: usize = 63 - PREFIX.len() - 1;

/// The name of every object of the client with this id.
pub fn relay(id: &str) -> String {
    own_name(PREFIX, id)
}

/// Whether `id` can be a client's id: what the host makes is 16 lower-case
/// hex characters; anything that keeps `pontoon-relay-<id>` a DNS label
/// and a label value is accepted, nothing else (an id read back from a
/// label someone else wrote must not name objects we cannot make).
pub fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_ID
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

/// The labels of every object of the client.
pub fn labels(id: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (CLIENT_LABEL.to_string(), id.to_string()),
        (MANAGED_BY_LABEL.to_string(), MANAGED_BY.to_string()),
        (COMPONENT_LABEL.to_string(), COMPONENT.to_string()),
    ])
}

/// What selects the relay pod of the client (the Service's selector): the
/// client and the component, so that nothing else the client might get
/// labelled later joins its endpoints.
pub fn pod_selector(id: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (CLIENT_LABEL.to_string(), id.to_string()),
        (COMPONENT_LABEL.to_string(), COMPONENT.to_string()),
    ])
}

/// The label selector (Kubernetes syntax) of every client's objects.
pub fn all_clients_selector() -> String {
    format!("{CLIENT_LABEL},{MANAGED_BY_LABEL}={MANAGED_BY}")
}

/// The metadata every object of the client starts from.
pub fn metadata(id: &str, client_name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(relay(id)),
        labels: Some(labels(id)),
        annotations: Some(BTreeMap::from([(
            CLIENT_NAME_ANNOTATION.to_string(),
            client_name.to_string(),
        )])),
        ..ObjectMeta::default()
    }
}

/// Whether an object found under the client's name is ours for that
/// client: labelled with its id and as Pontoon's.
pub fn is_ours(meta: &ObjectMeta, id: &str) -> bool {
    let label = |key: &str| meta.labels.as_ref().and_then(|l| l.get(key));
    label(CLIENT_LABEL).is_some_and(|v| v == id)
        && label(MANAGED_BY_LABEL).is_some_and(|v| v == MANAGED_BY)
}

/// The client id of an object listed by [`all_clients_selector`], if it is
/// the relay object of that client: named after it and marked as ours.
/// Another object that merely carries the labels names no client that
/// `disconnect` could ever remove, so it would be reported again and again.
pub fn client_of(meta: &ObjectMeta) -> Option<&str> {
    let id = meta.labels.as_ref()?.get(CLIENT_LABEL)?;
    (valid_id(id) && is_ours(meta, id) && meta.name.as_deref() == Some(relay(id).as_str()))
        .then_some(id.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_are_named_after_the_client_id_as_the_scope_says() {
        assert_eq!(relay("0123456789abcdef"), "pontoon-relay-0123456789abcdef");
        assert_eq!(
            SCOPE_NAME.replace("{client}", "0123456789abcdef"),
            relay("0123456789abcdef")
        );
    }

    #[test]
    fn ids_that_cannot_name_an_object_are_refused() {
        assert!(valid_id("0123456789abcdef"));
        assert!(valid_id(&"a".repeat(MAX_ID)));
        assert_eq!(relay(&"a".repeat(MAX_ID)).len(), 63);
        for bad in ["", "ABC", "a-b", "a.b", "a/b", "ä", &"a".repeat(MAX_ID + 1)] {
            assert!(!valid_id(bad), "{bad:?}");
        }
    }

    #[test]
    fn metadata_carries_the_labels_and_the_client_name() {
        let meta = metadata("abc", "alice@example.com");
        assert_eq!(meta.name.as_deref(), Some("pontoon-relay-abc"));
        let labels = meta.labels.clone().unwrap_or_default();
        assert_eq!(labels[CLIENT_LABEL], "abc");
        assert_eq!(labels[MANAGED_BY_LABEL], "pontoon");
        assert_eq!(labels[COMPONENT_LABEL], "relay");
        assert_eq!(
            meta.annotations.clone().unwrap_or_default()[CLIENT_NAME_ANNOTATION],
            "alice@example.com"
        );
        assert!(is_ours(&meta, "abc"));
        assert!(!is_ours(&meta, "abd"), "another client's");
    }

    #[test]
    fn objects_without_both_marks_are_not_ours() {
        let mut meta = metadata("abc", "alice");
        if let Some(labels) = meta.labels.as_mut() {
            labels.remove(MANAGED_BY_LABEL);
        }
        assert!(!is_ours(&meta, "abc"));
        assert_eq!(client_of(&meta), None);
        assert!(!is_ours(&ObjectMeta::default(), "abc"));
        assert_eq!(client_of(&ObjectMeta::default()), None);
    }

    #[test]
    fn a_listed_object_names_its_client_if_the_id_is_usable() {
        assert_eq!(client_of(&metadata("abc", "alice")), Some("abc"));
        let mut meta = metadata("abc", "alice");
        if let Some(labels) = meta.labels.as_mut() {
            labels.insert(CLIENT_LABEL.into(), "Not-Ours".into());
        }
        assert_eq!(client_of(&meta), None);
    }

    #[test]
    fn the_service_selects_the_clients_relay_only() {
        let selector = pod_selector("abc");
        assert_eq!(selector.len(), 2);
        assert!(
            selector
                .iter()
                .all(|(k, v)| labels("abc").get(k) == Some(v)),
            "the pod's labels satisfy it"
        );
        assert_eq!(
            all_clients_selector(),
            "pontoon.dev/connection-client,app.kubernetes.io/managed-by=pontoon"
        );
    }
}
