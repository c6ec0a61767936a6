//! `pontoon terminate-mounts`: closes admission, then ends every mount and
//! waits until each is gone, that is until the running operator has
//! uninstalled it (its finalizer) and the target runs its original again.
//! The chart runs it as a pre-delete hook, so that `helm uninstall` never
//! removes the operator while targets are still patched with Carrier2.
//!
//! Admission is closed first (the ConfigMap [`CLOSED_MARKER`] in the
//! operator's namespace): a mount created while the hook runs is refused,
//! its provider never called, and ended with the others. The marker
//! expires on its own a while after the hook's deadline, so a failed
//! uninstall or a later install is not kept closed; a failed hook also
//! removes it at once.

use std::time::Duration;

use k8s_openapi::{api::core::v1::ConfigMap, jiff::Timestamp};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams},
};

use super::{admitted::CLOSED_MARKER, crd::GefyraBridgeMount};

/// How long after the hook's own deadline the marker still closes
/// admission: the operator is deleted right after the hook succeeds.
const MARKER_GRACE: Duration = Duration::from_secs(120);

/// How often the mounts are listed while waiting.
const POLL: Duration = Duration::from_millis(500);

/// Deletes every mount (of `namespace`, or of every namespace) and waits up
/// to `timeout` for all of them to be gone. Returns the mounts deleted;
/// an error names those still there, and what they report.
pub async fn terminate_all(
    client: Client,
    operator_namespace: &str,
    namespace: Option<&str>,
    timeout: Duration,
    mut said: impl FnMut(&str),
) -> anyhow::Result<Vec<String>> {
    let markers: Api<ConfigMap> = Api::namespaced(client.clone(), operator_namespace);
    close_admission(&markers, timeout).await?;
    said(&format!(
        "admission closed (ConfigMap {CLOSED_MARKER} in namespace {operator_namespace})"
    ));
    let ended = end_every_mount(&client, namespace, timeout, &mut said).await;
    if ended.is_err() {
        // The operator stays installed: let it admit mounts again.
        let _ = markers
            .delete(CLOSED_MARKER, &DeleteParams::default())
            .await;
    }
    ended
}

/// Writes the marker that closes admission until the hook's deadline and
/// [`MARKER_GRACE`] after it.
async fn close_admission(markers: &Api<ConfigMap>, timeout: Duration) -> anyhow::Result<()> {
    let until = Timestamp::now()
        .checked_add(timeout + MARKER_GRACE)
        .unwrap_or_else(|_| Timestamp::now());
    let marker = ConfigMap {
        metadata: ObjectMeta {
            name: Some(CLOSED_MARKER.into()),
            labels: Some(
                [(
                    "app.kubernetes.io/managed-by".to_string(),
                    "pontoon".to_string(),
                )]
                .into(),
            ),
            ..Default::default()
        },
        data: Some(
            [
                (
                    "reason".to_string(),
                    "`pontoon terminate-mounts` (the chart's pre-delete hook) is ending every \
                     mount"
                        .to_string(),
                ),
                ("until".to_string(), until.to_string()),
            ]
            .into(),
        ),
        ..Default::default()
    };
    markers
        .patch(
            CLOSED_MARKER,
            &PatchParams::apply("pontoon-terminate-mounts").force(),
            &Patch::Apply(&marker),
        )
        .await
        .map_err(|err| {
            anyhow::Error::new(err).context(format!("cannot write ConfigMap {CLOSED_MARKER}"))
        })?;
    Ok(())
}

/// Deletes every mount and waits for all to be gone; a mount that appears
/// meanwhile is deleted too.
async fn end_every_mount(
    client: &Client,
    namespace: Option<&str>,
    timeout: Duration,
    said: &mut impl FnMut(&str),
) -> anyhow::Result<Vec<String>> {
    let mounts: Api<GefyraBridgeMount> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let mut deleted = Vec::new();
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let listed = mounts.list(&ListParams::default()).await?.items;
        let fresh: Vec<&GefyraBridgeMount> = listed
            .iter()
            .filter(|m| m.metadata.deletion_timestamp.is_none())
            .collect();
        delete_each(client, &fresh, &mut deleted, said).await?;
        if listed.is_empty() {
            said(&format!(
                "{} mount(s) terminated, every target restored",
                deleted.len()
            ));
            return Ok(deleted);
        }
        if tokio::time::Instant::now() >= deadline {
            anyhow::bail!(
                "after {} s, {} mount(s) are not uninstalled yet (is the operator running?): {}",
                timeout.as_secs(),
                listed.len(),
                listed.iter().map(describe).collect::<Vec<_>>().join("; ")
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Deletes `mounts`, adding each to `deleted` (once).
async fn delete_each(
    client: &Client,
    mounts: &[&GefyraBridgeMount],
    deleted: &mut Vec<String>,
    said: &mut impl FnMut(&str),
) -> anyhow::Result<()> {
    for mount in mounts {
        let name = mount.qualified_name();
        let api: Api<GefyraBridgeMount> =
            Api::namespaced(client.clone(), &mount.namespace().unwrap_or_default());
        match api
            .delete(&mount.name_any(), &DeleteParams::default())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.is_not_found() => {}
            Err(err) => {
                return Err(anyhow::Error::new(err).context(format!("cannot delete {name}")));
            }
        }
        if !deleted.contains(&name) {
            said(&format!(
                "terminating {name} ({})",
                mount.fields.state.as_deref().unwrap_or("REQUESTED")
            ));
            deleted.push(name);
        }
    }
    Ok(())
}

/// `gefyra/web-mount (TERMINATED: restoring the target)`, for messages.
fn describe(mount: &GefyraBridgeMount) -> String {
    let ready = mount
        .conditions()
        .iter()
        .find(|c| c.type_ == super::status::READY)
        .map(|c| c.message.clone())
        .unwrap_or_default();
    format!(
        "{} ({}: {ready})",
        mount.qualified_name(),
        mount.fields.state.as_deref().unwrap_or("REQUESTED")
    )
}
