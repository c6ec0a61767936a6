//! The note `install` leaves for `ready` (the host's `notes`): the
//! container instances whose Carrier2 `install` saw take its config, so that
//! the `ready` right after it need not read the config back from every pod
//! (an exec each, as costly as the commit itself).
//!
//! A pod counts as configured by the note only while the very container
//! instance `install` saw runs (same pod uid, container id, restart count
//! and start), and only for [`TRUST`]: a container that restarted since, a
//! pod replaced, or any pod once the note is older is read back as before,
//! so `ACTIVE`'s periodic checks still read what every pod holds. Without
//! the note (the operator restarted, a host without notes) every pod is
//! read back.

use std::time::Duration;

use pontoon_provider_sdk::{bridge_mount::notes, k8s_openapi::api::core::v1::Pod};

use crate::pods;

/// The note's key.
pub const KEY: &str = "carrier-configured";
/// How long after `install` saw a container take its config `ready` takes
/// that for the container's config without reading it.
pub const TRUST: Duration = Duration::from_secs(30);

/// The running instance of `container` in `pod`, as one line of the note;
/// `None` when it does not run.
pub fn instance(pod: &Pod, container: &str) -> Option<String> {
    let status = pods::container_status(pod, container)?;
    let running = status.state.as_ref()?.running.as_ref()?;
    let field = |value: Option<&str>| match value {
        Some(v) if !v.is_empty() => v.to_string(),
        _ => "-".to_string(),
    };
    Some(format!(
        "{} {container} {} {} {}",
        field(pod.metadata.uid.as_deref()),
        status.restart_count,
        field(status.container_id.as_deref()),
        field(
            running
                .started_at
                .as_ref()
                .map(|t| t.0.to_string())
                .as_deref()
        ),
    ))
}

/// The note naming `instances`.
pub fn note(instances: &[String]) -> String {
    let mut lines = instances.to_vec();
    lines.sort();
    lines.dedup();
    lines.join("\n")
}

/// Leaves the note for these instances; none leaves the note as it was.
pub fn record(instances: &[String]) {
    if !instances.is_empty() {
        notes::write(KEY, &note(instances));
    }
}

/// Drops the note: the pods are being put back.
pub fn forget() {
    notes::forget(KEY);
}

/// What `install` saw, if it saw it less than [`TRUST`] ago: the note and
/// its age.
pub fn recent() -> Option<Seen> {
    let note = notes::read_fresh(KEY, TRUST)?;
    Some(Seen {
        note: note.value,
        age: Duration::from_millis(note.age_ms),
    })
}

/// A note `install` left, and how long ago.
pub struct Seen {
    pub note: String,
    pub age: Duration,
}

impl Seen {
    /// Whether `install` saw the instance of `container` that runs in `pod`
    /// now take its config.
    pub fn configured(&self, pod: &Pod, container: &str) -> bool {
        instance(pod, container).is_some_and(|line| self.note.lines().any(|l| l == line))
    }
}

#[cfg(test)]
mod tests {
    use pontoon_provider_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use crate::pods::tests::pod;

    fn running(name: &str, uid: &str, restarts: i32, started: u32) -> Pod {
        let mut p = pod(name, "carrier2", Some("carrier2"), true);
        p.metadata.uid = Some(uid.into());
        let status = &mut p
            .status
            .as_mut()
            .unwrap()
            .container_statuses
            .as_mut()
            .unwrap()[0];
        status.restart_count = restarts;
        status.container_id = Some(format!("kwok://{name}"));
        let started: Time =
            serde_json::from_value(serde_json::json!(format!("2026-12-05T00:00:{started:02}Z")))
                .unwrap();
        status
            .state
            .as_mut()
            .unwrap()
            .running
            .as_mut()
            .unwrap()
            .started_at = Some(started);
        p
    }

    #[test]
    fn only_the_instance_install_saw_counts() {
        let seen_pod = running("web-1", "u1", 1, 10);
        let seen = Seen {
            note: note(&[instance(&seen_pod, "app").unwrap()]),
            age: Duration::from_secs(1),
        };
        assert!(seen.configured(&seen_pod, "app"));
        // Restarted since (a new instance: its /tmp is new, its config gone).
        assert!(!seen.configured(&running("web-1", "u1", 2, 10), "app"));
        assert!(!seen.configured(&running("web-1", "u1", 1, 16), "app"));
        // The pod replaced under the same name.
        assert!(!seen.configured(&running("web-1", "u2", 1, 10), "app"));
        // Another pod, another container, or one that does not run.
        assert!(!seen.configured(&running("web-2", "u3", 1, 10), "app"));
        assert!(!seen.configured(&seen_pod, "sidecar"));
        assert!(!seen.configured(&pod("web-1", "carrier2", None, false), "app"));
    }

    #[test]
    fn the_note_lists_each_instance_once_in_order() {
        let a = instance(&running("web-a", "ua", 0, 1), "app").unwrap();
        let b = instance(&running("web-b", "ub", 0, 1), "app").unwrap();
        assert_eq!(
            note(&[b.clone(), a.clone(), b.clone()]),
            format!("{a}\n{b}")
        );
        assert!(a.starts_with("ua app 0 kwok://web-a "), "{a}");
        // A pod whose status lacks fields still gives a line that matches only itself.
        let bare = pod("web-c", "carrier2", Some("carrier2"), true);
        assert_eq!(instance(&bare, "app").unwrap(), "- app 0 - -");
    }
}
