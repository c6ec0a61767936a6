//! How fresh the lists a provider makes must be.
//!
//! A list without a resource version is a consistent read: the API server
//! (1.31 and later) answers it from its watch cache only once the cache has
//! caught up with etcd, which it learns by asking etcd for a progress
//! notification. On the test bed that took 30–90 ms after any write, and
//! such waits were a third of a mount's time from create to ACTIVE.
//!
//! What a provider must see is what the operator wrote itself: its pods
//! patched, its shadow applied (read-your-writes). Anything else it reads
//! can change right after the read whatever the read's freshness, which is
//! why its writes are conditional (resource versions, delete-if-unchanged).
//! So a list asks for data not older than the operator's last write of that
//! resource (`resourceVersionMatch=NotOlderThan`), which the watch cache
//! holds as soon as it has seen that write; a resource the operator has not
//! written is read from the cache as it is (resource version 0), as an
//! informer would.

use std::{collections::HashMap, sync::Mutex};

use kube::api::ListParams;

/// The newest resource version the operator wrote, by resource; one per
/// process, shared by every call.
#[derive(Debug, Default)]
pub struct Freshness {
    /// By `apiVersion` and `kind`; `None` once a version was not a number.
    written: Mutex<HashMap<(String, String), Option<u64>>>,
    /// Every list a consistent read.
    consistent: bool,
}

impl Freshness {
    /// Every list a consistent read: for `pontoon conformance`, which
    /// drives a provider step by step right after its own writes and must
    /// not fail one for a cache a moment behind.
    pub fn consistent() -> Self {
        Self {
            consistent: true,
            ..Self::default()
        }
    }

    fn written(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Option<u64>>> {
        // One assignment per change: usable even if a holder panicked.
        self.written
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A write of `kind` answered with `resource_version`. Resource versions
    /// are etcd revisions, so the newest is the largest; one that is not a
    /// number (another storage) makes this resource's lists consistent reads.
    pub fn wrote(&self, api_version: &str, kind: &str, resource_version: Option<&str>) {
        let key = (api_version.to_string(), kind.to_string());
        let mut written = self.written();
        match resource_version.map(str::parse::<u64>) {
            Some(Ok(version)) => {
                let newest = written.entry(key).or_insert(Some(version));
                *newest = newest.map(|newest| newest.max(version));
            }
            Some(Err(_)) => {
                written.insert(key, None);
            }
            None => {}
        }
    }

    /// How a list of `kind` is asked for.
    pub fn list_params(&self, api_version: &str, kind: &str) -> ListParams {
        if self.consistent {
            return ListParams::default();
        }
        match self
            .written()
            .get(&(api_version.to_string(), kind.to_string()))
        {
            None => ListParams::default().match_any(),
            Some(None) => ListParams::default(),
            Some(Some(version)) => ListParams::default()
                .at(&version.to_string())
                .matching(kube::api::VersionMatch::NotOlderThan),
        }
    }
}

#[cfg(test)]
mod tests {
    use kube::api::VersionMatch;

    use super::*;

    fn asked(params: &ListParams) -> (Option<&str>, Option<&VersionMatch>) {
        (
            params.resource_version.as_deref(),
            params.version_match.as_ref(),
        )
    }

    #[test]
    fn a_list_is_not_older_than_the_operators_last_write_of_its_resource() {
        let freshness = Freshness::default();
        let pods = freshness.list_params("v1", "Pod");
        assert_eq!(
            asked(&pods),
            (Some("0"), Some(&VersionMatch::NotOlderThan)),
            "never written: the cache as it is"
        );
        freshness.wrote("v1", "Pod", Some("120"));
        freshness.wrote("v1", "Pod", Some("95"));
        freshness.wrote("apps/v1", "Deployment", Some("130"));
        let pods = freshness.list_params("v1", "Pod");
        assert_eq!(
            asked(&pods),
            (Some("120"), Some(&VersionMatch::NotOlderThan)),
            "the newest write of pods, not the last to answer nor another resource's"
        );
        freshness.wrote("v1", "Pod", None);
        assert_eq!(asked(&freshness.list_params("v1", "Pod")).0, Some("120"));
    }

    #[test]
    fn conformance_reads_consistently() {
        let freshness = Freshness::consistent();
        freshness.wrote("v1", "Pod", Some("120"));
        assert_eq!(asked(&freshness.list_params("v1", "Pod")), (None, None));
        assert_eq!(asked(&freshness.list_params("v1", "Secret")), (None, None));
    }

    #[test]
    fn a_resource_version_that_is_not_a_number_makes_lists_consistent() {
        let freshness = Freshness::default();
        freshness.wrote("v1", "Pod", Some("120"));
        freshness.wrote("v1", "Pod", Some("opaque"));
        assert_eq!(asked(&freshness.list_params("v1", "Pod")), (None, None));
        freshness.wrote("v1", "Pod", Some("130"));
        assert_eq!(
            asked(&freshness.list_params("v1", "Pod")),
            (None, None),
            "stays consistent: the versions cannot be ordered"
        );
    }
}
