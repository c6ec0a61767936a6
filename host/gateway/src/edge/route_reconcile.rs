//! HTTPRoute, GRPCRoute, TLSRoute and TCPRoute: an entry in `status.parents` for each
//! parent reference to a Gateway of ours, judged exactly as the Gateway
//! controller judges it; entries of other controllers are kept, ours for
//! Gateways that are gone (or no longer ours, or no longer referenced) are
//! removed.

use pontoon_support::controller_support::{key, trace_id};
use std::sync::Arc;

use crate::httproutes::HttpRouteStatusParents;
use gateway_api::gateways::Gateway;
use k8s_openapi::jiff::Timestamp;
use kube::{
    Api, ResourceExt,
    api::{Patch, PatchParams},
    runtime::{controller::Action, reflector::ObjectRef},
};
use serde_json::json;

use crate::{
    Error,
    edge::context::{GatewayContext, StoreView},
    judgement::resolve::{attach, listener_sets, listeners},
    judgement::route_kinds::{AnyRoute, RouteResource},
    judgement::routes,
    judgement::status::{route_parent, same_parent},
};

#[tracing::instrument(name = "reconcile", skip_all, fields(route = %format!("{}/{}", K::kind(&()), key(&*resource)), trace_id = %trace_id()))]
pub async fn reconcile<K: RouteResource>(
    resource: Arc<K>,
    ctx: Arc<GatewayContext>,
) -> Result<Action, Error> {
    let any = resource.to_any();
    let route = &any.route;
    let namespace = route.namespace().unwrap_or_default();
    let view = StoreView::new(&ctx.stores, Default::default());
    let now = Timestamp::now();
    let previous = route
        .status
        .as_ref()
        .map(|s| s.parents.clone())
        .unwrap_or_default();
    let controller = ctx.settings.controller_name.clone();

    // The Gateways of ours this route names, directly or through one of
    // their ListenerSets, each once.
    let mut gateways: Vec<Arc<Gateway>> = Vec::new();
    for parent in route.spec.parent_refs.iter().flatten() {
        if parent
            .group
            .as_deref()
            .unwrap_or(crate::data_plane::model::GATEWAY_GROUP)
            != crate::data_plane::model::GATEWAY_GROUP
        {
            continue;
        }
        let reference = match parent.kind.as_deref().unwrap_or("Gateway") {
            "Gateway" => ObjectRef::new(&parent.name)
                .within(parent.namespace.as_deref().unwrap_or(&namespace)),
            listener_sets::KIND => {
                let Some(set) = listener_sets::named_by(parent, &namespace) else {
                    continue;
                };
                let Some(reference) = ctx.gateway_of_listener_set(&set) else {
                    continue;
                };
                reference
            }
            _ => continue,
        };
        let Some(gateway) = ctx.stores.gateways.get(&reference) else {
            continue;
        };
        if !ctx.serves(&gateway) || gateway.metadata.deletion_timestamp.is_some() {
            continue;
        }
        if !gateways
            .iter()
            .any(|g| g.metadata.uid == gateway.metadata.uid)
        {
            gateways.push(gateway);
        }
    }

    let mut ours: Vec<HttpRouteStatusParents> = Vec::new();
    for gateway in &gateways {
        let states = listeners::evaluate(gateway, &view);
        let verdicts = routes::evaluate_all(
            std::slice::from_ref(&any),
            gateway,
            &states,
            &view,
            &ctx.translator,
            ctx.settings.data_plane,
        )
        .await;
        let judged = verdicts
            .iter()
            .flat_map(|verdict| verdict.parents.iter().map(move |p| (verdict, p)));
        for (verdict, parent) in judged {
            let before = previous.iter().find(|p| {
                p.controller_name == controller
                    && same_parent(&p.parent_ref, &parent.parent, &namespace)
            });
            ours.push(route_parent(
                before,
                parent,
                &controller,
                verdict.rules.len(),
                &verdict.refused_rules,
                &verdict.unresolved,
                route.metadata.generation,
                now,
            ));
        }
    }
    let mut parents: Vec<HttpRouteStatusParents> = previous
        .iter()
        .filter(|p| p.controller_name != controller)
        .cloned()
        .collect();
    parents.extend(ours);
    write::<K>(&any, &ctx, parents, &previous).await?;
    Ok(Action::await_change())
}

/// Removes this route's entries for `gateway` (the Gateway is going away).
pub async fn forget_gateway<K: RouteResource>(
    resource: &Arc<K>,
    gateway: &Gateway,
    ctx: &GatewayContext,
) -> Result<(), Error> {
    let any = resource.to_any();
    let route = &any.route;
    let namespace = route.namespace().unwrap_or_default();
    let previous = route
        .status
        .as_ref()
        .map(|s| s.parents.clone())
        .unwrap_or_default();
    let controller = &ctx.settings.controller_name;
    let sets = listener_sets::naming(gateway, ctx.stores.listener_sets.state());
    let kept: Vec<HttpRouteStatusParents> = previous
        .iter()
        .filter(|p| {
            p.controller_name != *controller
                || !route.spec.parent_refs.iter().flatten().any(|r| {
                    attach::names_gateway_or_set(r, &namespace, gateway, &sets)
                        && same_parent(&p.parent_ref, r, &namespace)
                })
        })
        .cloned()
        .collect();
    write::<K>(&any, ctx, kept, &previous).await
}

async fn write<K: RouteResource>(
    any: &AnyRoute,
    ctx: &GatewayContext,
    parents: Vec<HttpRouteStatusParents>,
    previous: &[HttpRouteStatusParents],
) -> Result<(), Error> {
    if parents == previous {
        return Ok(());
    }
    let route = &any.route;
    let api: Api<K> = Api::namespaced(ctx.client.clone(), &route.namespace().unwrap_or_default());
    // The whole list is replaced: the precondition keeps other controllers'
    // entries written meanwhile from being lost (a conflict retries).
    let body = json!({
        "metadata": { "resourceVersion": route.resource_version() },
        "status": { "parents": parents },
    });
    api.patch_status(
        &route.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&body),
    )
    .await?;
    Ok(())
}
