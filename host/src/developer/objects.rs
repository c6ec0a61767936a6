//! The objects `pontoon bridge` makes: a GefyraBridgeMount when none serves
//! the workload (marked as made by `pontoon bridge`, so that a later run may
//! remove it once no bridge uses it) and the developer's GefyraBridge.

use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::jiff::Timestamp;
use kube::{
    Api, Client, ResourceExt,
    api::{ApiResource, DeleteParams, DynamicObject, ListParams, PostParams},
};
use pontoon_provider_sdk::target::Target;
use serde_json::{Value, json};

use crate::{
    bridge::MOUNT_LABEL,
    bridge_mount::crd::{GefyraBridge, GefyraBridgeMount},
    controller_support::not_found,
};

/// The label that marks what `pontoon bridge` made.
pub const MADE_BY_LABEL: &str = "pontoon.dev/made-by";
pub const MADE_BY: &str = "pontoon-bridge";

/// How old a mount made by `pontoon bridge` with no bridge must be before
/// another run removes it: a run that has just made one has not yet made
/// its bridge.
const UNUSED_MOUNT_AGE: Duration = Duration::from_secs(60);

/// The mount serving `target` in `target_namespace`, if any.
pub async fn find_mount(
    mounts: &Api<GefyraBridgeMount>,
    target_namespace: &str,
    target: &Target,
) -> anyhow::Result<Option<GefyraBridgeMount>> {
    let all = mounts
        .list(&ListParams::default())
        .await
        .map_err(|err| refused(err, "list GefyraBridgeMounts", namespace_of(mounts)))?;
    Ok(all.items.into_iter().find(|m| {
        m.metadata.deletion_timestamp.is_none()
            && m.fields.target_namespace.as_deref() == Some(target_namespace)
            && m.fields
                .target
                .as_deref()
                .and_then(|t| Target::parse(t).ok())
                .as_ref()
                == Some(target)
    }))
}

/// A mount for the workload, marked as made by `pontoon bridge`.
pub async fn create_mount(
    client: &Client,
    namespace: &str,
    target_namespace: &str,
    target: &Target,
    container: &str,
) -> anyhow::Result<GefyraBridgeMount> {
    let mount: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "gefyra.dev/v1",
        "kind": "gefyrabridgemount",
        "metadata": {
            "generateName": format!("{}-{}-", short(&target.name, 40), target.kind.short_name()),
            "labels": {MADE_BY_LABEL: MADE_BY},
        },
        "provider": "carrier2mount",
        "targetNamespace": target_namespace,
        "target": target.to_string(),
        "targetContainer": container,
    }))?;
    let created = dynamic(client, namespace, "GefyraBridgeMount", "gefyrabridgemounts")
        .create(&PostParams::default(), &mount)
        .await
        .map_err(|err| refused(err, "create GefyraBridgeMounts", namespace))?;
    Ok(serde_json::from_value(serde_json::to_value(created)?)?)
}

/// A 403 as what the developer lacks and whom to ask.
fn refused(err: kube::Error, what: &str, namespace: &str) -> anyhow::Error {
    match &err {
        kube::Error::Api(status) if status.code == 403 => anyhow::anyhow!(
            "you may not {what} in namespace `{namespace}`; ask your cluster's administrator \
             to bind you the `pontoon-developer` ClusterRole there (see the README's \
             \"Work on a service on your machine\")"
        ),
        kube::Error::Api(status) => anyhow::anyhow!(
            "cannot {what} in namespace `{namespace}`: {} ({})",
            status.message,
            status.reason
        ),
        _ => anyhow::Error::new(err).context(format!("cannot {what} in namespace `{namespace}`")),
    }
}

/// The namespace an `Api` was made for (the request URL says it).
fn namespace_of<K: kube::Resource>(api: &Api<K>) -> &str {
    api.namespace().unwrap_or_default()
}

/// The same namespace and client as `api`, for kinds Pontoon only reads.
fn dynamic(client: &Client, namespace: &str, kind: &str, plural: &str) -> Api<DynamicObject> {
    let resource = ApiResource {
        group: "gefyra.dev".into(),
        version: "v1".into(),
        api_version: "gefyra.dev/v1".into(),
        kind: kind.into(),
        plural: plural.into(),
    };
    Api::namespaced_with(client.clone(), namespace, &resource)
}

/// What the developer's bridge asks for.
pub struct BridgeRequest<'a> {
    pub mount: &'a str,
    pub client: &'a str,
    pub connection_provider: &'a str,
    pub target_namespace: &'a str,
    pub container: &'a str,
    pub port_mappings: Vec<String>,
    pub matches: Vec<Value>,
}

pub async fn create_bridge(
    client: &Client,
    namespace: &str,
    request: &BridgeRequest<'_>,
) -> anyhow::Result<GefyraBridge> {
    let object = json!({
        "apiVersion": "gefyra.dev/v1",
        "kind": "gefyrabridge",
        "metadata": {
            "generateName": format!("{}-", short(&dns_label(request.client), 40)),
            "labels": {MOUNT_LABEL: request.mount, MADE_BY_LABEL: MADE_BY},
        },
        "provider": "carrier2",
        "connectionProvider": request.connection_provider,
        "client": request.client,
        "targetNamespace": request.target_namespace,
        "targetContainer": request.container,
        "portMappings": request.port_mappings,
        "providerParameter": {"rules": [{"match": request.matches}]},
    });
    let object: DynamicObject = serde_json::from_value(object)?;
    let created = dynamic(client, namespace, "GefyraBridge", "gefyrabridges")
        .create(&PostParams::default(), &object)
        .await
        .map_err(|err| refused(err, "create GefyraBridges", namespace))?;
    Ok(serde_json::from_value(serde_json::to_value(created)?)?)
}

/// A bridge an earlier run of the same developer left (killed before it
/// could delete it) asking exactly the same: taken over, so that its
/// requests come back without waiting for it to be judged again.
pub async fn find_own_bridge(
    bridges: &Api<GefyraBridge>,
    request: &BridgeRequest<'_>,
) -> anyhow::Result<Option<GefyraBridge>> {
    let made = bridges
        .list(&ListParams::default().labels(&format!(
            "{MADE_BY_LABEL}={MADE_BY},{MOUNT_LABEL}={}",
            request.mount
        )))
        .await
        .map_err(|err| refused(err, "list GefyraBridges", namespace_of(bridges)))?;
    let rules = json!([{"match": request.matches}]);
    Ok(made.items.into_iter().find(|b| {
        let f = &b.bridge;
        b.metadata.deletion_timestamp.is_none()
            && f.client.as_deref() == Some(request.client)
            && f.connection_provider.as_deref() == Some(request.connection_provider)
            && f.port_mappings.as_deref() == Some(request.port_mappings.as_slice())
            && f.provider_parameter.as_ref().and_then(|p| p.get("rules")) == Some(&rules)
    }))
}

/// Deletes the bridge and waits until it is gone (its mount has taken it out
/// of the pods' config by then, or is about to).
pub async fn delete_bridge(bridges: &Api<GefyraBridge>, name: &str) -> anyhow::Result<()> {
    match bridges.delete(name, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(err) if not_found(&err) => return Ok(()),
        Err(err) => return Err(err).context(format!("cannot delete GefyraBridge `{name}`")),
    }
    wait_gone(bridges, name).await
}

/// The mounts made by `pontoon bridge` that no bridge uses: `own` (the one
/// this run used) at once, others once they are old enough.
pub async fn unused_mounts(
    mounts: &Api<GefyraBridgeMount>,
    bridges: &Api<GefyraBridge>,
    own: Option<&str>,
) -> anyhow::Result<Vec<String>> {
    let made = mounts
        .list(&ListParams::default().labels(&format!("{MADE_BY_LABEL}={MADE_BY}")))
        .await
        .context("cannot list GefyraBridgeMounts")?;
    let used: Vec<String> = bridges
        .list(&ListParams::default())
        .await
        .context("cannot list GefyraBridges")?
        .items
        .iter()
        .filter_map(|b| b.labels().get(MOUNT_LABEL).cloned())
        .collect();
    let now = Timestamp::now();
    Ok(made
        .items
        .iter()
        .filter(|m| m.metadata.deletion_timestamp.is_none())
        .map(|m| (m.name_any(), m.creation_timestamp()))
        .filter(|(name, _)| !used.contains(name))
        .filter(|(name, created)| {
            Some(name.as_str()) == own
                || created
                    .as_ref()
                    .is_some_and(|at| now.duration_since(at.0).unsigned_abs() > UNUSED_MOUNT_AGE)
        })
        .map(|(name, _)| name)
        .collect())
}

/// Deletes a mount and waits until the operator has put its workload back.
pub async fn delete_mount(mounts: &Api<GefyraBridgeMount>, name: &str) -> anyhow::Result<()> {
    match mounts.delete(name, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(err) if not_found(&err) => return Ok(()),
        Err(err) => {
            return Err(err).context(format!("cannot delete GefyraBridgeMount `{name}`"));
        }
    }
    wait_gone(mounts, name).await
}

async fn wait_gone<K>(api: &Api<K>, name: &str) -> anyhow::Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    loop {
        match api.get_metadata_opt(name).await {
            Ok(None) => return Ok(()),
            Ok(Some(_)) => tokio::time::sleep(Duration::from_millis(100)).await,
            Err(err) => return Err(err).context(format!("cannot read `{name}`")),
        }
    }
}

/// `text` cut to `max` bytes, without a trailing dash.
fn short(text: &str, max: usize) -> String {
    let cut: String = text.chars().take(max).collect();
    cut.trim_end_matches('-').to_string()
}

/// A user name as a DNS label (`alice@example.com` → `alice-example-com`).
pub fn dns_label(name: &str) -> String {
    let mut label: String = name
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    label = label.trim_matches('-').to_string();
    if label.is_empty() {
        "developer".into()
    } else {
        label
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_names_become_names_of_objects() {
        assert_eq!(dns_label("alice@example.com"), "alice-example-com");
        assert_eq!(
            dns_label("system:serviceaccount:dev:alice"),
            "system-serviceaccount-dev-alice"
        );
        assert_eq!(dns_label("@@"), "developer");
        assert_eq!(short("abcdef-", 7), "abcdef");
    }
}
