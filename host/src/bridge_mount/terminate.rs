//! `pontoon terminate-mounts`: ends every mount and waits until each is
//! gone, that is until the running operator has uninstalled it (its
//! finalizer) and the target runs its original again. The chart runs it as
//! a pre-delete hook, so that `helm uninstall` never removes the operator
//! while targets are still patched with Carrier2.

use std::{collections::BTreeSet, time::Duration};

use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, ListParams},
};

use super::crd::GefyraBridgeMount;

/// How often the mounts are listed while waiting.
const POLL: Duration = Duration::from_millis(500);

/// Deletes every mount (of `namespace`, or of every namespace) and waits up
/// to `timeout` for all of them to be gone. Returns the mounts deleted;
/// an error names those still there, and what they report.
pub async fn terminate_all(
    client: Client,
    namespace: Option<&str>,
    timeout: Duration,
    mut said: impl FnMut(&str),
) -> anyhow::Result<Vec<String>> {
    let mounts: Api<GefyraBridgeMount> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let listed = mounts.list(&ListParams::default()).await?;
    let mut deleted = Vec::new();
    for mount in &listed.items {
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
        said(&format!(
            "terminating {name} ({})",
            mount.fields.state.as_deref().unwrap_or("REQUESTED")
        ));
        deleted.push(name);
    }
    let waiting: BTreeSet<String> = deleted.iter().cloned().collect();
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let left: Vec<GefyraBridgeMount> = mounts
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|m| waiting.contains(&m.qualified_name()))
            .collect();
        if left.is_empty() {
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
                left.len(),
                left.iter().map(describe).collect::<Vec<_>>().join("; ")
            );
        }
        tokio::time::sleep(POLL).await;
    }
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
