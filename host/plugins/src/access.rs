//! The cluster as one call may reach it: the client, the call's capability
//! scope, where its Events go, and the kinds the cluster serves.

use std::{collections::HashMap, sync::Arc};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject, GroupVersionKind},
    runtime::events::{Recorder, Reporter},
};
use tokio::sync::Mutex;

use super::{
    bindings::{ClusterError, ObjectRef, provider_bridges::Bridge},
    freshness::Freshness,
    journal::Journal,
    notes::MountNotes,
    scope::Scope,
    write_turns::WriteTurns,
};

/// Maps `apiVersion` + `kind` to API resources (plural names) once per
/// process, so providers name kinds the way they appear in objects.
#[derive(Default)]
pub struct Discovery {
    resources: Mutex<HashMap<(String, String), ApiResource>>,
}

impl Discovery {
    async fn resolve(
        &self,
        client: &Client,
        api_version: &str,
        kind: &str,
    ) -> Result<ApiResource, ClusterError> {
        let key = (api_version.to_string(), kind.to_string());
        if let Some(resource) = self.resources.lock().await.get(&key) {
            return Ok(resource.clone());
        }
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let (resource, _) = kube::discovery::pinned_kind(client, &gvk)
            .await
            .map_err(|err| match err {
                kube::Error::Discovery(_) => ClusterError::NotFound(format!(
                    "the cluster has no kind {kind} in {api_version}"
                )),
                other => api_error(other),
            })?;
        self.resources.lock().await.insert(key, resource.clone());
        Ok(resource)
    }
}

/// Where a call's Events go.
#[derive(Clone)]
pub struct EventSubject {
    pub recorder: Recorder,
    pub object: ObjectReference,
}

impl EventSubject {
    pub fn new(client: Client, controller: &str, object: ObjectReference) -> Self {
        let reporter = Reporter {
            controller: controller.to_string(),
            instance: std::env::var("POD_NAME").ok(),
        };
        Self {
            recorder: Recorder::new(client, reporter),
            object,
        }
    }
}

/// The cluster as one call of one provider may see it.
#[derive(Clone)]
pub struct ClusterAccess {
    pub client: Client,
    pub discovery: Arc<Discovery>,
    /// The operator's own writes, which its lists must not be older than.
    pub freshness: Arc<Freshness>,
    /// One write at a time to each object, over every call of the process.
    pub writes: Arc<WriteTurns>,
    pub scope: Scope,
    /// Server-side apply field manager: the provider's name.
    pub field_manager: String,
    pub events: Option<EventSubject>,
    /// Where the call's writes are recorded (`pontoon conformance`); `None`
    /// in the operator, which keeps no such record.
    pub journal: Option<Arc<Journal>>,
    /// The mount's valid GefyraBridges, what the call's `bridges` import
    /// lists; empty when the mount has none (and for every filter call).
    pub bridges: Arc<[Bridge]>,
    /// The notes of the mount the call serves (the `notes` import); `None`
    /// where there is no mount to keep them for.
    pub notes: Option<MountNotes>,
}

impl ClusterAccess {
    pub(super) async fn api(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
    ) -> Result<Api<DynamicObject>, ClusterError> {
        let resource = self
            .discovery
            .resolve(&self.client, api_version, kind)
            .await?;
        Ok(Api::namespaced_with(
            self.client.clone(),
            namespace,
            &resource,
        ))
    }

    /// The object as JSON, read with the host's own rights, not the
    /// provider's scope: for checks of what a provider did.
    pub async fn host_read(
        &self,
        object: &ObjectRef,
    ) -> Result<Option<serde_json::Value>, ClusterError> {
        let api = self
            .api(&object.api_version, &object.kind, &object.namespace)
            .await?;
        api.get_opt(&object.name)
            .await
            .map_err(api_error)?
            .map(serde_json::to_value)
            .transpose()
            .map_err(|e| ClusterError::Api(format!("cannot encode object: {e}")))
    }
}

/// A failed API request as the guest is told it: the `cluster-error` cases
/// a provider can act on (not found, conflict, invalid), the rest as text.
pub(super) fn api_error(err: kube::Error) -> ClusterError {
    match err {
        kube::Error::Api(status) if status.is_not_found() => ClusterError::NotFound(status.message),
        kube::Error::Api(status) if status.is_conflict() || status.is_already_exists() => {
            ClusterError::Conflict(status.message)
        }
        kube::Error::Api(status) if matches!(status.code, 400 | 422) => {
            ClusterError::Invalid(status.message)
        }
        kube::Error::Api(status) => {
            ClusterError::Api(format!("{} ({})", status.message, status.code))
        }
        other => ClusterError::Api(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use kube::core::Status;

    use super::*;

    fn api(code: u16, reason: &str, message: &str) -> ClusterError {
        api_error(kube::Error::Api(
            Status::failure(message, reason).with_code(code).boxed(),
        ))
    }

    #[test]
    fn a_provider_is_told_the_api_errors_it_can_act_on() {
        let not_found = api(404, "NotFound", "gone");
        assert!(
            matches!(&not_found, ClusterError::NotFound(m) if m == "gone"),
            "{not_found:?}"
        );
        let exists = api(409, "AlreadyExists", "taken");
        assert!(
            matches!(&exists, ClusterError::Conflict(m) if m == "taken"),
            "{exists:?}"
        );
        // A failed resource-version precondition.
        let changed = api(409, "Conflict", "changed");
        assert!(
            matches!(&changed, ClusterError::Conflict(m) if m == "changed"),
            "{changed:?}"
        );
        for code in [400, 422] {
            let invalid = api(code, "Invalid", "bad spec");
            assert!(
                matches!(&invalid, ClusterError::Invalid(m) if m == "bad spec"),
                "{invalid:?}"
            );
        }
    }

    #[test]
    fn other_api_errors_keep_their_code() {
        assert!(matches!(
            api(403, "Forbidden", "pods is forbidden"),
            ClusterError::Api(m) if m == "pods is forbidden (403)"
        ));
    }
}
