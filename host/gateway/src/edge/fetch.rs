//! Reading the objects a Gateway's listeners and policies name (certificate
//! Secrets, CA ConfigMaps), each once per reconcile.

use std::{collections::BTreeMap, sync::Arc};

use kube::Api;

use crate::{Error, edge::context::GatewayContext};

/// Reads `namespace/name` into `into`, once; a missing one, or one the
/// operator may not read, stays out (the listener says what is wrong).
pub async fn get_into<K>(
    ctx: &GatewayContext,
    into: &mut BTreeMap<(String, String), Arc<K>>,
    namespace: String,
    name: &str,
) -> Result<(), Error>
where
    K: kube::Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let key = (namespace, name.to_string());
    if into.contains_key(&key) {
        return Ok(());
    }
    let api: Api<K> = Api::namespaced(ctx.client.clone(), &key.0);
    match api.get_opt(name).await {
        Ok(Some(object)) => {
            into.insert(key, Arc::new(object));
        }
        Ok(None) => {}
        Err(kube::Error::Api(status)) if status.code == 403 => {
            tracing::warn!(object = %format!("{}/{name}", key.0), kind = %K::kind(&()), "not allowed to read an object a listener names");
        }
        Err(err) => return Err(err.into()),
    }
    Ok(())
}
