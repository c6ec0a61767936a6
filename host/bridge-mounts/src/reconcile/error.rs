//! Why a reconcile of a mount did not complete, as its error policy reads it.

use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("cannot encode a patch: {0}")]
    Encode(#[from] serde_json::Error),
    /// Deletion waits for the provider's uninstall; the finalizer stays.
    #[error("uninstall not finished: {message}")]
    CleanupPending { message: String, retry: Duration },
}
