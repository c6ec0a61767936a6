//! GatewayClass: `Accepted` for the classes with our `controllerName`, with
//! the features Pontoon supports on the data plane it runs; other classes
//! are left alone.

use pontoon_support::controller_support::trace_id;
use std::sync::Arc;

use gateway_api::gatewayclasses::{GatewayClass, GatewayClassStatusSupportedFeatures};
use k8s_openapi::jiff::Timestamp;
use kube::{
    Api, ResourceExt,
    api::{Patch, PatchParams},
    runtime::controller::Action,
};
use serde_json::json;

use crate::{Error, edge::context::GatewayContext};
use pontoon_support::conditions::{Observed, merged};

#[tracing::instrument(name = "reconcile", skip_all, fields(class = %class.metadata.name.as_deref().unwrap_or_default(), trace_id = %trace_id()))]
pub async fn reconcile(
    class: Arc<GatewayClass>,
    ctx: Arc<GatewayContext>,
) -> Result<Action, Error> {
    if class.spec.controller_name != ctx.settings.controller_name {
        return Ok(Action::await_change());
    }
    let observed = match &class.spec.parameters_ref {
        None => Observed::new("Accepted", true, "Accepted", "served by Pontoon"),
        Some(p) => Observed::new(
            "Accepted",
            false,
            "InvalidParameters",
            format!(
                "parametersRef ({}/{} {}) is not supported: Pontoon takes no class parameters",
                p.group, p.kind, p.name
            ),
        ),
    };
    let previous = class
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let conditions = merged(
        &previous,
        &[observed],
        class.metadata.generation,
        Timestamp::now(),
    );
    // The features of the data plane the Gateways run (data_plane::program),
    // each shown by the tests and the official suite.
    let features: Vec<GatewayClassStatusSupportedFeatures> = ctx
        .settings
        .data_plane
        .supported_features()
        .iter()
        .map(|name| GatewayClassStatusSupportedFeatures {
            name: (*name).into(),
        })
        .collect();
    let current = class.status.as_ref();
    let unchanged = current.and_then(|s| s.conditions.as_ref()) == Some(&conditions)
        && current.and_then(|s| s.supported_features.as_ref()) == Some(&features);
    if !unchanged {
        let api: Api<GatewayClass> = Api::all(ctx.client.clone());
        let body = json!({ "status": { "conditions": conditions, "supportedFeatures": features } });
        api.patch_status(
            &class.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&body),
        )
        .await?;
    }
    Ok(Action::await_change())
}
