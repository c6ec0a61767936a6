//! Typed access to the `cluster` import with k8s-openapi structs.
//!
//! Every call is checked by the host against the provider's scope; a call
//! outside it fails with [`ClusterError::Denied`] before reaching the API
//! server. Objects travel as JSON, so a kind k8s-openapi lacks (a CRD) can be
//! handled with the untyped functions in [`raw`].

use k8s_openapi::{NamespaceResourceScope, Resource};
use serde::{Serialize, de::DeserializeOwned};

#[cfg(any(feature = "bridge-mount", test))]
use crate::bridge_mount::bindings::pontoon::provider::cluster as imports;
#[cfg(all(feature = "connection", not(any(feature = "bridge-mount", test))))]
use crate::connection::bindings::pontoon::provider::cluster as imports;

pub use imports::{ClusterError, EventType, ExecOutput, ExecRequest, ObjectRef, PatchType};

/// The generated, JSON-text functions of the `cluster` interface.
pub mod raw {
    pub use super::imports::*;
}

/// Names one object of kind `K`.
pub fn object_ref<K>(namespace: &str, name: &str) -> ObjectRef
where
    K: Resource<Scope = NamespaceResourceScope>,
{
    ObjectRef {
        api_version: K::API_VERSION.to_string(),
        kind: K::KIND.to_string(),
        namespace: namespace.to_string(),
        name: name.to_string(),
    }
}

/// Reads one object; `None` when it does not exist.
pub fn get<K>(namespace: &str, name: &str) -> Result<Option<K>, ClusterError>
where
    K: Resource<Scope = NamespaceResourceScope> + DeserializeOwned,
{
    imports::get(&object_ref::<K>(namespace, name))?
        .map(|json| decode::<K>(&json))
        .transpose()
}

/// Lists the objects of kind `K` in `namespace` matching `label_selector`
/// (Kubernetes syntax; empty for all).
pub fn list<K>(namespace: &str, label_selector: &str) -> Result<Vec<K>, ClusterError>
where
    K: Resource<Scope = NamespaceResourceScope> + DeserializeOwned,
{
    imports::list(K::API_VERSION, K::KIND, namespace, label_selector)?
        .iter()
        .map(|json| decode::<K>(json))
        .collect()
}

/// Creates `object` in `namespace`; fails with `conflict` if it exists.
pub fn create<K>(namespace: &str, object: &K) -> Result<K, ClusterError>
where
    K: Resource<Scope = NamespaceResourceScope> + Serialize + DeserializeOwned,
{
    decode(&imports::create(namespace, &encode(object)?)?)
}

/// Server-side apply (forced, the provider's name as field manager). Only
/// the fields set in `object` are owned, so build it from `Default` with just
/// what the provider manages rather than from an object read back.
pub fn apply<K>(namespace: &str, object: &K) -> Result<K, ClusterError>
where
    K: Resource<Scope = NamespaceResourceScope> + Serialize + DeserializeOwned,
{
    decode(&imports::apply(namespace, &encode(object)?)?)
}

/// Patches one object; `patch` is serialised to JSON (a `serde_json::Value`
/// from `json!` is the usual choice), in the form `patch_type` says.
pub fn patch<K>(
    namespace: &str,
    name: &str,
    patch_type: PatchType,
    patch: &impl Serialize,
) -> Result<K, ClusterError>
where
    K: Resource<Scope = NamespaceResourceScope> + DeserializeOwned,
{
    let body = serde_json::to_string(patch)
        .map_err(|e| ClusterError::Invalid(format!("cannot encode patch: {e}")))?;
    decode(&imports::patch(
        &object_ref::<K>(namespace, name),
        patch_type,
        &body,
    )?)
}

/// Deletes one object; `false` when it was already gone.
pub fn delete<K>(namespace: &str, name: &str) -> Result<bool, ClusterError>
where
    K: Resource<Scope = NamespaceResourceScope>,
{
    imports::delete(&object_ref::<K>(namespace, name))
}

/// Deletes one object only if its `metadata.resourceVersion` is still
/// `resource_version`: `Ok(false)` when it was already gone,
/// [`ClusterError::Conflict`] when it changed since it was read. For a shared
/// object found empty (a ConfigMap of entries, say) that another writer may
/// fill at the same moment: read, decide, delete if unchanged, else read again.
pub fn delete_if_unchanged<K>(
    namespace: &str,
    name: &str,
    resource_version: &str,
) -> Result<bool, ClusterError>
where
    K: Resource<Scope = NamespaceResourceScope>,
{
    imports::delete_if_unchanged(&object_ref::<K>(namespace, name), resource_version)
}

/// Runs `command` (no shell unless you call one) in a container of a pod and
/// waits for it; a non-zero exit is in [`ExecOutput::exit_code`], not an error.
pub fn exec(
    namespace: &str,
    pod: &str,
    container: &str,
    command: &[&str],
    stdin: Option<&[u8]>,
) -> Result<ExecOutput, ClusterError> {
    let command: Vec<String> = command.iter().map(|s| s.to_string()).collect();
    imports::exec(namespace, pod, container, &command, stdin)
}

/// Runs several commands at once, each as [`exec`] would; the results in
/// the order of `requests`. The same work in every pod of a workload takes
/// about as long as the slowest pod instead of the sum of all.
pub fn exec_all(requests: &[ExecRequest]) -> Vec<Result<ExecOutput, ClusterError>> {
    imports::exec_all(requests)
}

/// Posts an Event on the mount being served.
pub fn event(event_type: EventType, reason: &str, message: &str) -> Result<(), ClusterError> {
    imports::event(event_type, reason, message)
}

fn encode<K: Resource + Serialize>(object: &K) -> Result<String, ClusterError> {
    serde_json::to_string(object)
        .map_err(|e| ClusterError::Invalid(format!("cannot encode {}: {e}", K::KIND)))
}

// A body that does not decode means host and guest disagree about the kind,
// which is not the API server rejecting anything: report it as `api`.
fn decode<K: Resource + DeserializeOwned>(json: &str) -> Result<K, ClusterError> {
    serde_json::from_str(json)
        .map_err(|e| ClusterError::Api(format!("cannot decode {} from the host: {e}", K::KIND)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::{apps::v1::Deployment, core::v1::ConfigMap};

    #[test]
    fn object_ref_uses_the_kind_of_the_type() {
        let r = object_ref::<Deployment>("ns", "web");
        assert_eq!(
            (
                r.api_version.as_str(),
                r.kind.as_str(),
                r.namespace.as_str(),
                r.name.as_str()
            ),
            ("apps/v1", "Deployment", "ns", "web")
        );
        assert_eq!(object_ref::<ConfigMap>("a", "b").api_version, "v1");
    }

    #[test]
    fn encoded_objects_carry_api_version_and_kind() {
        let json = encode(&ConfigMap::default()).unwrap();
        let value: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(value["apiVersion"], "v1");
        assert_eq!(value["kind"], "ConfigMap");
    }

    #[test]
    fn decode_failure_names_the_kind() {
        let err = decode::<ConfigMap>("{\"kind\": 3}").unwrap_err();
        assert!(matches!(&err, ClusterError::Api(m) if m.contains("cannot decode ConfigMap")));
    }
}
