//! GatewayClass: `Accepted` for the classes with our `controllerName`, with
//! the features Pontoon supports; other classes are left alone.

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

/// The Gateway API features the tests show working (`host/tests/gateway.rs`,
/// `gateway_traffic.rs`, `gateway_protocols.rs`, and the official suite,
/// which `make gateway-conformance` runs for exactly these), sorted as the
/// spec asks. docs/gateway-api-support.md says why each other one is not
/// claimed (most are what Praxis 0.7.5 cannot express).
pub const SUPPORTED_FEATURES: &[&str] = &[
    "BackendTLSPolicy",
    "GRPCRoute",
    "Gateway",
    "GatewayAddressEmpty",
    "GatewayBackendClientCertificate",
    "GatewayFrontendClientCertificateValidation",
    "GatewayHTTPListenerIsolation",
    "GatewayInfrastructure",
    "GatewayPort8080",
    "GatewayStaticAddresses",
    "HTTPRoute",
    "HTTPRoute307RedirectStatusCode",
    "HTTPRoute308RedirectStatusCode",
    "HTTPRouteBackendProtocolH2C",
    "HTTPRouteBackendProtocolWebSocket",
    "HTTPRouteBackendTimeout",
    "HTTPRouteDestinationPortMatching",
    "HTTPRouteHostRewrite",
    "HTTPRouteMethodMatching",
    "HTTPRouteNamedRouteRule",
    "HTTPRouteParentRefPort",
    "HTTPRoutePathRewrite",
    "HTTPRoutePortRedirect",
    "HTTPRouteRequestTimeout",
    "HTTPRouteResponseHeaderModification",
    "HTTPRouteSchemeRedirect",
    "ListenerSet",
    "ReferenceGrant",
    "TCPRoute",
    "TLSRoute",
];

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
    let features: Vec<GatewayClassStatusSupportedFeatures> = SUPPORTED_FEATURES
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
