//! BackendTLSPolicy for the Gateway controller: the I/O around
//! `resolve::backend_tls`. A Gateway's reconcile reads the policies naming
//! the Services its rules send to (and their CA ConfigMaps, fetched for the
//! reconcile), gives its backends their TLS, and writes its own entry into
//! each such policy's `status.ancestors`; a policy it no longer uses, or a
//! Gateway going away, loses that entry.

use std::{collections::BTreeSet, sync::Arc};

use gateway_api::{backendtlspolicies::BackendTlsPolicy, gateways::Gateway};
use k8s_openapi::{api::core::v1::ConfigMap, jiff::Timestamp};
use kube::{
    Api, ResourceExt,
    api::{Patch, PatchParams},
};
use serde_json::json;

use crate::data_plane::model::CertificateFiles;
use crate::{
    Error,
    data_plane::model::GatewayModel,
    edge::context::{Fetched, GatewayContext, StoreView},
    judgement::resolve::backend_tls::{self, Judged, Outcome},
};

/// The policies in the namespaces of `model`'s backends.
fn candidates(ctx: &GatewayContext, model: &GatewayModel) -> Vec<Arc<BackendTlsPolicy>> {
    let namespaces: BTreeSet<&str> = model
        .listeners
        .iter()
        .flat_map(|l| &l.routes)
        .flat_map(|r| &r.rules)
        .flat_map(|r| &r.backends)
        .map(|b| b.namespace.as_str())
        .collect();
    if namespaces.is_empty() {
        return Vec::new();
    }
    ctx.stores
        .backend_tls_policies
        .state()
        .into_iter()
        .filter(|p| {
            p.namespace()
                .is_some_and(|ns| namespaces.contains(ns.as_str()))
        })
        .collect()
}

/// Applies the policies to `model` (see `resolve::backend_tls::apply`),
/// fetching the ConfigMaps they name into `view` first.
pub async fn apply(
    ctx: &GatewayContext,
    model: &mut GatewayModel,
    client_certificate: Option<&CertificateFiles>,
    view: &mut StoreView<'_>,
) -> Result<Outcome, Error> {
    let policies = candidates(ctx, model);
    let mut fetched = Fetched::default();
    for policy in &policies {
        let namespace = policy.namespace().unwrap_or_default();
        for r in policy.spec.validation.ca_certificate_refs.iter().flatten() {
            if r.group.is_empty() && r.kind == "ConfigMap" {
                crate::edge::fetch::get_into::<ConfigMap>(
                    ctx,
                    &mut fetched.config_maps,
                    namespace.clone(),
                    &r.name,
                )
                .await?;
            }
        }
    }
    view.add(fetched);
    Ok(backend_tls::apply(
        model,
        &policies,
        client_certificate,
        view,
        ctx.settings.data_plane,
    ))
}

/// The ConfigMaps the policies in `judged` name (found or not): a change of
/// one wakes the Gateway.
pub fn config_maps(judged: &[Judged]) -> Vec<(String, String)> {
    judged
        .iter()
        .flat_map(|j| {
            let namespace = j.policy.namespace().unwrap_or_default();
            j.policy
                .spec
                .validation
                .ca_certificate_refs
                .iter()
                .flatten()
                .map(move |r| (namespace.clone(), r.name.clone()))
        })
        .collect()
}

/// Writes this Gateway's entry into every policy in `judged`, and takes it
/// out of every other policy that has one.
pub async fn write_status(
    gateway: &Gateway,
    ctx: &GatewayContext,
    judged: &[Judged],
) -> Result<(), Error> {
    let now = Timestamp::now();
    for policy in ctx.stores.backend_tls_policies.state() {
        let mine = judged.iter().find(|j| {
            j.policy.namespace() == policy.namespace() && j.policy.name_any() == policy.name_any()
        });
        let Some(ancestors) =
            backend_tls::ancestors(&policy, gateway, mine, &ctx.settings.controller_name, now)
        else {
            continue;
        };
        patch(ctx, &policy, ancestors).await?;
    }
    Ok(())
}

/// The Gateway is going away: its entries leave every policy's status.
pub async fn forget_gateway(gateway: &Gateway, ctx: &GatewayContext) -> Result<(), Error> {
    write_status(gateway, ctx, &[]).await
}

/// Replaces `status.ancestors`, on the version the store showed: a policy
/// that changed since (another Gateway wrote its entry) gives a conflict,
/// and the reconcile runs again on the new version rather than dropping
/// that entry.
async fn patch(
    ctx: &GatewayContext,
    policy: &BackendTlsPolicy,
    ancestors: Vec<gateway_api::backendtlspolicies::BackendTlsPolicyStatusAncestors>,
) -> Result<(), Error> {
    let api: Api<BackendTlsPolicy> =
        Api::namespaced(ctx.client.clone(), &policy.namespace().unwrap_or_default());
    let body = json!({
        "metadata": { "resourceVersion": policy.resource_version() },
        "status": { "ancestors": ancestors },
    });
    match api
        .patch_status(
            &policy.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&body),
        )
        .await
    {
        Ok(_) => Ok(()),
        // Deleted meanwhile: nothing to report on.
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(err) => Err(err.into()),
    }
}
