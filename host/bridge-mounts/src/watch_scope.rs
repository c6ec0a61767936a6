//! Where the domain's controllers look for mounts and bridges.

/// Where the controllers look for mounts and bridges.
#[derive(Clone, Debug, Default)]
pub struct WatchScope {
    /// Only mounts of this namespace; all namespaces when `None`.
    pub watch_namespace: Option<String>,
}
