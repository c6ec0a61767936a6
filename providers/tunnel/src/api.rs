//! Reading a client's objects from the cluster, told apart by whether they
//! are ours: an object named `pontoon-relay-<id>` that lacks our labels was
//! made by someone else, and every step leaves it alone.

use pontoon_provider_sdk::{
    cluster,
    connection::{CLIENT_LABEL, Error},
    k8s_openapi::{
        Metadata, NamespaceResourceScope, Resource, apimachinery::pkg::apis::meta::v1::ObjectMeta,
    },
};
use serde::de::DeserializeOwned;

use crate::names;

/// What is found under the client's name.
pub enum Found<K> {
    Absent,
    Ours(K),
    /// Someone else's object of that name.
    Foreign,
}

/// The client's object of kind `K` in `namespace`.
pub fn read<K>(namespace: &str, id: &str) -> Result<Found<K>, Error>
where
    K: Resource<Scope = NamespaceResourceScope> + Metadata<Ty = ObjectMeta> + DeserializeOwned,
{
    Ok(match cluster::get::<K>(namespace, &names::relay(id))? {
        None => Found::Absent,
        Some(object) if names::is_ours(object.metadata(), id) => Found::Ours(object),
        Some(_) => Found::Foreign,
    })
}

/// [`read`] for a step that must write the object: someone else's object
/// of that name stops it, with what to do about it.
pub fn read_own<K>(namespace: &str, id: &str, client: &str) -> Result<Option<K>, Error>
where
    K: Resource<Scope = NamespaceResourceScope> + Metadata<Ty = ObjectMeta> + DeserializeOwned,
{
    match read::<K>(namespace, id)? {
        Found::Absent => Ok(None),
        Found::Ours(object) => Ok(Some(object)),
        Found::Foreign => Err(Error::failed(format!(
            "{} `{}` in namespace `{namespace}` exists but is not Pontoon's relay for client \
             `{client}` (it lacks the labels {}={id} and {}={}); remove it so that the relay \
             can be set up",
            K::KIND,
            names::relay(id),
            CLIENT_LABEL,
            names::MANAGED_BY_LABEL,
            names::MANAGED_BY,
        ))),
    }
}
