//! `disconnect`: removes a client's relay, known by the client's id only.
//!
//! Only objects marked as that client's relay are deleted, each only if
//! unchanged since it was read (a precondition on its resourceVersion: the
//! cluster interface offers no uid precondition, and this one is
//! stricter). The developer's rights go first, the Service last: until
//! the end, `clients` still finds the client and the host calls again.

use pontoon_provider_sdk::{
    cluster::{self, ClusterError},
    connection::{Error, Settings},
    k8s_openapi::{
        Metadata, NamespaceResourceScope, Resource,
        api::{
            core::v1::{Pod, Service},
            rbac::v1::{Role, RoleBinding},
        },
        apimachinery::pkg::apis::meta::v1::ObjectMeta,
    },
    warn,
};
use serde::de::DeserializeOwned;

use crate::{
    api::{self, Found},
    names,
};

/// `true` once nothing of the client's relay is left.
pub fn disconnect(settings: &Settings, id: &str) -> Result<bool, Error> {
    if !names::valid_id(id) {
        // Nothing this provider makes can be named after it.
        warn!("disconnect: `{id}` is no client id of this provider; nothing to remove");
        return Ok(true);
    }
    let namespace = settings.operator_namespace.as_str();
    let left = [
        remove::<RoleBinding>(namespace, id)?,
        remove::<Role>(namespace, id)?,
        remove::<Pod>(namespace, id)?,
        remove::<Service>(namespace, id)?,
    ];
    Ok(!left.contains(&true))
}

/// Deletes the client's object of kind `K` if it is ours; whether an object
/// of ours is still there afterwards (a pod terminates gracefully, an
/// object changed since it was read is decided anew by the next call).
fn remove<K>(namespace: &str, id: &str) -> Result<bool, Error>
where
    K: Resource<Scope = NamespaceResourceScope> + Metadata<Ty = ObjectMeta> + DeserializeOwned,
{
    let name = names::relay(id);
    let object = match api::read::<K>(namespace, id)? {
        Found::Absent => return Ok(false),
        Found::Foreign => {
            warn!(
                "{} `{name}` in namespace `{namespace}` is not marked as the relay of client id \
                 `{id}`; left alone",
                K::KIND
            );
            return Ok(false);
        }
        Found::Ours(object) => object,
    };
    let meta = object.metadata();
    if meta.deletion_timestamp.is_some() {
        return Ok(true);
    }
    let deleted = match meta.resource_version.as_deref().filter(|v| !v.is_empty()) {
        Some(version) => cluster::delete_if_unchanged::<K>(namespace, &name, version),
        // Every stored object has one; without it, as read, no
        // precondition is possible.
        None => cluster::delete::<K>(namespace, &name),
    };
    match deleted {
        Ok(false) => Ok(false),
        Ok(true) => Ok(matches!(api::read::<K>(namespace, id)?, Found::Ours(_))),
        Err(ClusterError::Conflict(_)) => Ok(true),
        Err(e) => Err(e.into()),
    }
}
