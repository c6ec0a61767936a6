//! The note `uninstall` leaves for its own later calls (the host's
//! `notes`): it gave every pod of the target its original back and dropped
//! the target's restore entries. The calls after it only wait for the pods
//! to run their originals and then remove the shadow; with the note they
//! need not read the shared restore ConfigMap again (the largest read of an
//! uninstall, and one that grows with every mount on the cluster).
//!
//! The note is a hint: a call without it (the operator restarted, a host
//! without notes, the note older than [`TRUST`]) plans the restore from the
//! ConfigMap as the first call did, and so does a call that finds a pod on
//! Carrier2 or carrying its saved original again. `install` drops the note,
//! since it writes restore entries again (a MISSING mount that comes back);
//! an uninstall that is done renews it for the call the host may still
//! make before the mount is gone; the host drops it with the mount.

use std::time::Duration;

use pontoon_provider_sdk::{bridge_mount::notes, k8s_openapi::api::core::v1::Pod};

use crate::{original, pods};

/// The note's key.
pub const KEY: &str = "originals-put-back";
/// How long after the first call put the originals back a later call takes
/// that for the restore entries without reading them. A restore that takes
/// longer (pods slow to start their original) reads them again: cheap for
/// such a rare case, and it finds whatever changed meanwhile.
pub const TRUST: Duration = Duration::from_secs(30);

/// Notes that the originals of `target`'s pods are back in their specs and
/// its restore entries gone.
pub fn record(target: &str) {
    notes::write(KEY, target);
}

/// Drops the note.
pub fn forget() {
    notes::forget(KEY);
}

/// Whether a call of this mount put `target`'s originals back less than
/// [`TRUST`] ago.
pub fn recently(target: &str) -> bool {
    notes::read_fresh(KEY, TRUST).is_some_and(|note| note.value == target)
}

/// Whether a pod needs nothing from a restore: it does not ask for Carrier2
/// and carries no saved original of `container`.
pub fn settled(pod: &Pod, container: &str, carrier_image: &str) -> bool {
    !pods::asks_for(pod, container, carrier_image)
        && original::from_pod(pod, container, carrier_image) == original::Copy::Absent
        && !original::carries_patch_annotations(pod)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pods::tests::pod;

    const CARRIER: &str = "quay.io/gefyra/carrier2:latest";

    #[test]
    fn a_pod_on_carrier2_or_with_its_saved_original_is_not_settled() {
        assert!(settled(
            &pod("web-1", "nginx", Some("nginx"), true),
            "app",
            CARRIER
        ));
        // Still restarting onto the original: nothing left to restore.
        assert!(settled(
            &pod("web-1", "nginx", Some(CARRIER), false),
            "app",
            CARRIER
        ));
        assert!(!settled(
            &pod("web-1", CARRIER, Some(CARRIER), true),
            "app",
            CARRIER
        ));
        let mut annotated = pod("web-1", "nginx", Some("nginx"), true);
        annotated.metadata.annotations = Some(
            [(
                original::ANNOTATION.to_string(),
                original::annotation_value(
                    "app",
                    &crate::restore::OriginalConfig {
                        image: Some("nginx".into()),
                        command: None,
                        args: None,
                    },
                ),
            )]
            .into(),
        );
        assert!(!settled(&annotated, "app", CARRIER));
    }
}
