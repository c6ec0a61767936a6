//! `pontoon check-upgrade`: the chart's pre-upgrade and pre-rollback hook.
//!
//! With names in `mounts.targetNamespaces`, the operator's rights on pods
//! and workloads are bound in those namespaces only, and go with the
//! values. A live mount left outside the new list could never be put back:
//! its uninstall would be refused, its pods left on Carrier2. So before
//! Helm changes anything, the hook lists every mount and fails, naming
//! those the new values would strand.
//!
//! The chart refuses such values while rendering too (`lookup`), but
//! `lookup` reads nothing under `helm template`, `--dry-run=client` or a
//! GitOps tool that renders that way; those run the hook as a pre-sync
//! step instead.

use kube::{Api, Client, ResourceExt, api::ListParams};

use crate::{
    admitted::{Admissions, Admitted},
    crd::GefyraBridgeMount,
    namespaces::TargetNamespaces,
};

/// Each of `mounts` (with what the operator admitted it for, when it did)
/// whose target namespace `allowed` no longer permits, as
/// `gefyra/web-mount (target namespace shop)`, sorted. The recorded
/// namespace counts beside the one the fields say (they differ only when a
/// CRD older than the operator's let the fields change). A mount already
/// being deleted counts: its uninstall still needs the rights.
pub fn stranded<'a>(
    mounts: impl IntoIterator<Item = (&'a GefyraBridgeMount, Option<&'a Admitted>)>,
    allowed: &TargetNamespaces,
) -> Vec<String> {
    let mut stranded: Vec<String> = mounts
        .into_iter()
        .flat_map(|(mount, admitted)| {
            let mut namespaces = vec![mount.target_namespace()];
            if let Some(admitted) = admitted
                && admitted.target_namespace != namespaces[0]
            {
                namespaces.push(admitted.target_namespace.clone());
            }
            namespaces
                .into_iter()
                .filter(|namespace| allowed.permit(namespace).is_err())
                .map(|namespace| {
                    format!("{} (target namespace {namespace})", mount.qualified_name())
                })
                .collect::<Vec<_>>()
        })
        .collect();
    stranded.sort();
    stranded
}

/// What the hook says when `stranded` is not empty: the mounts, and what
/// to do (the same words as the chart's render-time refusal).
pub fn refusal(stranded: &[String]) -> String {
    format!(
        "these mounts would be left outside the namespaces mounts may target \
         (mounts.targetNamespaces, mounts.excludedNamespaces), where the operator could no \
         longer restore them: {}; delete them first (kubectl delete gbridgemount), or keep \
         their target namespaces allowed",
        stranded.join(", ")
    )
}

/// Lists the mounts (of `namespace`, or of every namespace), with their
/// admission records in `operator_namespace`, and fails with [`refusal`]
/// when any would be stranded under `allowed`. Returns how many mounts
/// were looked at.
pub async fn check(
    client: Client,
    operator_namespace: &str,
    namespace: Option<&str>,
    allowed: &TargetNamespaces,
) -> anyhow::Result<usize> {
    let admissions = Admissions::new(client.clone(), operator_namespace);
    let mounts: Api<GefyraBridgeMount> = match namespace {
        Some(ns) => Api::namespaced(client, ns),
        None => Api::all(client),
    };
    // Every page: a refusal must not miss a mount past the first.
    let mut listed = Vec::new();
    let mut params = ListParams::default().limit(500);
    loop {
        let page = mounts.list(&params).await?;
        listed.extend(page.items);
        match page.metadata.continue_.filter(|token| !token.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    let mut records = Vec::with_capacity(listed.len());
    for mount in &listed {
        records.push(admissions.of(&mount.uid().unwrap_or_default()).await?);
    }
    let stranded = stranded(
        listed.iter().zip(records.iter().map(Option::as_ref)),
        allowed,
    );
    anyhow::ensure!(stranded.is_empty(), "{}", refusal(&stranded));
    Ok(listed.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mount(namespace: &str, name: &str, target_namespace: Option<&str>) -> GefyraBridgeMount {
        let mut object = serde_json::json!({
            "metadata": { "name": name, "namespace": namespace },
            "target": "deploy/web",
        });
        if let Some(target) = target_namespace {
            object["targetNamespace"] = target.into();
        }
        serde_json::from_value(object).unwrap()
    }

    #[test]
    fn a_mount_whose_target_namespace_the_new_values_drop_is_named() {
        let mounts = [
            mount("gefyra", "kept", Some("shop")),
            mount("gefyra", "web-mount", Some("dev")),
            // No targetNamespace: the target lives beside the mount.
            mount("team", "own", None),
        ];
        let narrowed = TargetNamespaces::new(["shop"], ["kube-system"], "pontoon");
        let unrecorded = || mounts.iter().map(|m| (m, None));
        assert_eq!(
            stranded(unrecorded(), &narrowed),
            [
                "gefyra/web-mount (target namespace dev)",
                "team/own (target namespace team)"
            ]
        );
        let message = refusal(&stranded(unrecorded(), &narrowed));
        assert!(
            message.contains("gefyra/web-mount (target namespace dev), team/own")
                && message.contains("delete them first"),
            "{message}"
        );
    }

    #[test]
    fn an_excluded_namespace_strands_too_and_every_namespace_strands_none() {
        let mounts = [mount("gefyra", "web-mount", Some("dev"))];
        let unrecorded = || mounts.iter().map(|m| (m, None));
        let everywhere = TargetNamespaces::new(["*"], ["kube-system"], "pontoon");
        assert!(stranded(unrecorded(), &everywhere).is_empty());
        let excluding = TargetNamespaces::new(["*"], ["kube-system", "dev"], "pontoon");
        assert_eq!(
            stranded(unrecorded(), &excluding),
            ["gefyra/web-mount (target namespace dev)"]
        );
    }

    #[test]
    fn a_mount_pointed_elsewhere_after_admission_strands_where_it_was_admitted() {
        // Admitted for `dev`, its fields (under an old CRD) now say `shop`:
        // its pods in `dev` still need the operator's rights there.
        let drifted = mount("gefyra", "web-mount", Some("shop"));
        let mut admitted = Admitted::of(&mount("gefyra", "web-mount", Some("dev")));
        let narrowed = TargetNamespaces::new(["shop"], ["kube-system"], "pontoon");
        assert_eq!(
            stranded([(&drifted, Some(&admitted))], &narrowed),
            ["gefyra/web-mount (target namespace dev)"]
        );
        admitted.target_namespace = "shop".into();
        assert!(stranded([(&drifted, Some(&admitted))], &narrowed).is_empty());
    }
}
