//! Whether a client's session is live, read from its relay pod.
//!
//! The relay is Ready exactly while a client is connected (its readiness
//! probe asks it), and the Service sends requests to Ready pods only: so a
//! Ready relay means requests reach the client, and anything else means
//! they do not. The contract wants that honesty.

use pontoon_provider_sdk::{
    connection::SessionState,
    k8s_openapi::{api::core::v1::Pod, apimachinery::pkg::apis::meta::v1::Time},
};

/// The session as the relay pod shows it (`None`: there is no relay).
///
/// - no pod: gone, since an unknown time;
/// - a pod being deleted: gone since its deletion (the Service already
///   left it, whatever its Ready condition still says);
/// - Ready: live;
/// - otherwise gone since Ready last changed, or since the pod was made
///   when it never had the condition.
pub fn state(pod: Option<&Pod>) -> SessionState {
    let Some(pod) = pod else {
        return SessionState::Gone(None);
    };
    if let Some(deleted) = &pod.metadata.deletion_timestamp {
        return SessionState::Gone(Some(rfc3339(deleted)));
    }
    let ready = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|conditions| conditions.iter().find(|c| c.type_ == "Ready"));
    match ready {
        Some(condition) if condition.status == "True" => SessionState::Live,
        _ => SessionState::Gone(
            ready
                .and_then(|c| c.last_transition_time.as_ref())
                .or(pod.metadata.creation_timestamp.as_ref())
                .map(rfc3339),
        ),
    }
}

/// A Kubernetes time as the API server writes it (RFC 3339, UTC).
fn rfc3339(time: &Time) -> String {
    match serde_json::to_value(time) {
        Ok(serde_json::Value::String(text)) => text,
        _ => time.0.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(value: serde_json::Value) -> Pod {
        serde_json::from_value(value).unwrap()
    }

    fn gone_since(state: SessionState) -> Option<String> {
        match state {
            SessionState::Gone(since) => since,
            SessionState::Live => panic!("live"),
        }
    }

    #[test]
    fn no_relay_no_session() {
        assert_eq!(gone_since(state(None)), None);
    }

    #[test]
    fn a_ready_relay_is_a_live_session() {
        let ready = pod(json!({
            "metadata": {"name": "r", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "status": {"conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:01:00Z"}
            ]}
        }));
        assert!(matches!(state(Some(&ready)), SessionState::Live));
    }

    #[test]
    fn a_relay_not_ready_is_gone_since_ready_changed() {
        let not_ready = pod(json!({
            "metadata": {"name": "r", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "status": {"conditions": [
                {"type": "Ready", "status": "False", "lastTransitionTime": "2026-01-01T00:05:00Z"}
            ]}
        }));
        assert_eq!(
            gone_since(state(Some(&not_ready))).as_deref(),
            Some("2026-01-01T00:05:00Z")
        );
    }

    #[test]
    fn a_relay_without_the_condition_is_gone_since_it_was_made() {
        let pending = pod(json!({
            "metadata": {"name": "r", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "status": {"phase": "Pending"}
        }));
        assert_eq!(
            gone_since(state(Some(&pending))).as_deref(),
            Some("2026-01-01T00:00:00Z")
        );
        let unknown = pod(json!({
            "metadata": {"name": "r", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}
        }));
        assert_eq!(
            gone_since(state(Some(&unknown))).as_deref(),
            Some("2026-01-01T00:00:00Z")
        );
        assert_eq!(gone_since(state(Some(&Pod::default()))), None);
    }

    #[test]
    fn a_relay_being_deleted_is_gone_even_if_still_ready() {
        let going = pod(json!({
            "metadata": {"name": "r", "creationTimestamp": "2026-01-01T00:00:00Z",
                         "deletionTimestamp": "2026-01-01T00:09:00Z"},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}
        }));
        assert_eq!(
            gone_since(state(Some(&going))).as_deref(),
            Some("2026-01-01T00:09:00Z")
        );
    }
}
