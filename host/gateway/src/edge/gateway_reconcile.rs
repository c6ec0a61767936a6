//! Gateway: for a Gateway of one of our classes, judge its listeners, gather
//! the routes that attach to it, generate the Praxis config, apply the data
//! plane (ConfigMap, Deployment, Service) and report status. Another
//! controller's Gateway is never touched, not even with a finalizer.
//!
//! This is the I/O edge: the claim and the finalizer, the Secrets fetched,
//! the translations, the writes and the Events. The decisions are pure and
//! live beside it: the Gateway judged and its model built in `judgement`,
//! which children to write in `apply_plan`, the status in `status`.

use pontoon_support::controller_support::{key, trace_id};
use std::{collections::BTreeMap, sync::Arc, time::Duration};

use gateway_api::{
    gateways::{Gateway, GatewayListeners},
    listenersets::ListenerSet,
};
use k8s_openapi::{api::core::v1::Secret, jiff::Timestamp};
use kube::{
    Api, ResourceExt,
    api::{Patch, PatchParams},
    runtime::{
        controller::Action,
        finalizer::{self, finalizer},
        reflector::ObjectRef,
    },
};
use serde_json::json;

use crate::{
    Error,
    data_plane::certificates::CertificateSecret,
    edge::backend_tls_policies,
    edge::context::{Fetched, GatewayContext, StoreView},
    edge::data_plane_writes::{ExtraFiles, Served, serve},
    edge::fetch::get_into,
    edge::route_reconcile,
    judgement::one_gateway,
    judgement::resolve::{
        self, attach, ca_bundles,
        issue::Issue,
        listener_sets::{self, Candidate},
        listeners::{self, ListenerState},
    },
    judgement::routes,
    judgement::status::{self, DataPlane, GatewayStatusUpdate, SetVerdict},
};

/// Our finalizer, only ever on Gateways of our classes.
pub const FINALIZER: &str = "gateway.pontoon.dev/finalizer";
/// Which Pontoon (by controllerName) put the finalizer on a Gateway.
pub const CONTROLLER_ANNOTATION: &str = "gateway.pontoon.dev/controller";

/// The safety net: a Gateway is looked at this often even when nothing changes.
const RESYNC: Duration = Duration::from_secs(300);
/// A data plane that is not serving yet is looked at again this soon (its
/// children's events usually come first).
const PENDING: Duration = Duration::from_secs(10);

#[tracing::instrument(name = "reconcile", skip_all, fields(gateway = %key(&*gateway), trace_id = %trace_id()))]
pub async fn reconcile(
    gateway: Arc<Gateway>,
    ctx: Arc<GatewayContext>,
) -> Result<Action, finalizer::Error<Error>> {
    let api: Api<Gateway> =
        Api::namespaced(ctx.client.clone(), &gateway.namespace().unwrap_or_default());
    if !ctx.serves(&gateway) {
        // Not ours (or no longer): leave it as it is, but take back a
        // finalizer this controller put on it (every Pontoon uses the same
        // finalizer name; the annotation says which one added it).
        let mine =
            gateway.annotations().get(CONTROLLER_ANNOTATION) == Some(&ctx.settings.controller_name);
        if mine && gateway.finalizers().iter().any(|f| f == FINALIZER) {
            cleanup(&gateway, &ctx)
                .await
                .map_err(finalizer::Error::CleanupFailed)?;
            release(&api, &gateway)
                .await
                .map_err(finalizer::Error::CleanupFailed)?;
        }
        return Ok(Action::await_change());
    }
    let claimed =
        gateway.annotations().get(CONTROLLER_ANNOTATION) == Some(&ctx.settings.controller_name);
    let has_finalizer = gateway.finalizers().iter().any(|f| f == FINALIZER);
    if (!claimed || !has_finalizer) && gateway.metadata.deletion_timestamp.is_none() {
        // Mark and finalizer in one write, made while the data plane is
        // applied: a new Gateway's Deployment starts rolling out at once,
        // not a round trip (or two watch events) later.
        let claim = tokio::spawn(claim(
            api.clone(),
            Arc::clone(&gateway),
            ctx.settings.controller_name.clone(),
        ));
        return apply(&gateway, &ctx, Some(claim))
            .await
            .map_err(finalizer::Error::ApplyFailed);
    }
    finalizer(&api, FINALIZER, gateway, |event| async {
        match event {
            finalizer::Event::Apply(gateway) => apply(&gateway, &ctx, None).await,
            finalizer::Event::Cleanup(gateway) => {
                cleanup(&gateway, &ctx).await?;
                Ok(Action::await_change())
            }
        }
    })
    .await
}

/// Marks a Gateway as served by this controller and puts the finalizer on it.
async fn claim(api: Api<Gateway>, gateway: Arc<Gateway>, controller: String) -> Result<(), Error> {
    let mut finalizers: Vec<&String> = gateway.finalizers().iter().collect();
    let ours = FINALIZER.to_string();
    if !finalizers.contains(&&ours) {
        finalizers.push(&ours);
    }
    write_mark(&api, &gateway, &finalizers, Some(&controller)).await
}

/// Removes our finalizer (and mark) from a Gateway that is no longer ours.
async fn release(api: &Api<Gateway>, gateway: &Gateway) -> Result<(), Error> {
    let kept: Vec<&String> = gateway
        .finalizers()
        .iter()
        .filter(|f| *f != FINALIZER)
        .collect();
    write_mark(api, gateway, &kept, None).await
}

/// Writes a Gateway's finalizers and our controller mark (`None` removes
/// it). The finalizer list is replaced whole, so the write is bound to the
/// version read (a conflict retries).
async fn write_mark(
    api: &Api<Gateway>,
    gateway: &Gateway,
    finalizers: &[&String],
    controller: Option<&str>,
) -> Result<(), Error> {
    let body = json!({ "metadata": {
        "finalizers": finalizers,
        "annotations": { CONTROLLER_ANNOTATION: controller },
        "resourceVersion": gateway.resource_version(),
    } });
    api.patch(
        &gateway.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&body),
    )
    .await?;
    Ok(())
}

/// The Gateway is going away (or is no longer ours): its entries leave every
/// route's `status.parents`; its children go with it by owner reference.
async fn cleanup(gateway: &Gateway, ctx: &GatewayContext) -> Result<(), Error> {
    ctx.forget(&ObjectRef::from_obj(gateway));
    for route in ctx.stores.routes.state() {
        route_reconcile::forget_gateway(&route, gateway, ctx).await?;
    }
    for route in ctx.stores.grpc_routes.state() {
        route_reconcile::forget_gateway(&route, gateway, ctx).await?;
    }
    for route in ctx.stores.tls_routes.state() {
        route_reconcile::forget_gateway(&route, gateway, ctx).await?;
    }
    for route in ctx.stores.tcp_routes.state() {
        route_reconcile::forget_gateway(&route, gateway, ctx).await?;
    }
    backend_tls_policies::forget_gateway(gateway, ctx).await?;
    Ok(())
}

/// The Secrets and CA ConfigMaps the listeners refer to, fetched for this
/// reconcile (only these are read: the operator does not keep every Secret
/// and ConfigMap of the cluster).
async fn fetch(
    gateway: &Gateway,
    set_candidates: &[Candidate],
    ctx: &GatewayContext,
) -> Result<Fetched, Error> {
    let gateway_namespace = gateway.namespace().unwrap_or_default();
    let mut fetched = Fetched::default();
    // The Gateway's listeners, then those of the ListenerSets it takes
    // (their certificates' default namespace is the set's).
    let mut declared: Vec<(String, GatewayListeners)> = gateway
        .spec
        .listeners
        .iter()
        .map(|l| (gateway_namespace.clone(), l.clone()))
        .collect();
    for candidate in set_candidates {
        if candidate.allowed.is_ok() {
            let namespace = candidate.reference().namespace;
            declared.extend(
                listener_sets::listeners(&candidate.set)
                    .into_iter()
                    .map(|l| (namespace.clone(), l)),
            );
        }
    }
    for (namespace, listener) in &declared {
        let namespace = namespace.clone();
        let refs = listener
            .tls
            .as_ref()
            .and_then(|t| t.certificate_refs.clone())
            .unwrap_or_default();
        for r in refs {
            if !r.group.as_deref().unwrap_or("").is_empty()
                || r.kind.as_deref().unwrap_or("Secret") != "Secret"
            {
                continue;
            }
            let ns = r.namespace.clone().unwrap_or_else(|| namespace.clone());
            get_into(ctx, &mut fetched.secrets, ns, &r.name).await?;
        }
        let port = u16::try_from(listener.port).unwrap_or(0);
        for r in ca_bundles::frontend_validation(gateway, port)
            .into_iter()
            .flat_map(|v| v.refs)
            .filter(|r| r.group.is_empty() && r.kind == "ConfigMap")
        {
            let ns = r
                .namespace
                .clone()
                .unwrap_or_else(|| gateway_namespace.clone());
            get_into(ctx, &mut fetched.config_maps, ns, &r.name).await?;
        }
    }
    if let Some((ns, name)) = resolve::backend_tls::client_certificate_ref(gateway) {
        get_into(ctx, &mut fetched.secrets, ns, &name).await?;
    }
    Ok(fetched)
}

/// Judges the Gateway, applies its data plane and writes its status; a
/// `claim` under way is waited for before the status is written (the claim
/// is bound to the version it read, which a status write would change).
async fn apply(
    gateway: &Gateway,
    ctx: &GatewayContext,
    claim: Option<tokio::task::JoinHandle<Result<(), Error>>>,
) -> Result<Action, Error> {
    let now = Timestamp::now();
    // The ListenerSets naming the Gateway, judged once (they depend on the
    // stores alone) for every step below: what to fetch, the listeners,
    // the references remembered and the sets' status.
    let set_candidates =
        listener_sets::candidates(gateway, &StoreView::new(&ctx.stores, Fetched::default()));
    let fetched = fetch(gateway, &set_candidates, ctx).await?;
    let secrets = fetched.secrets.clone();
    let mut view = StoreView::new(&ctx.stores, fetched);
    let states = listeners::evaluate_with(gateway, &set_candidates, &view);
    let accepted = one_gateway::acceptance(gateway, &view, &states);
    let client_certificate = resolve::backend_tls::client_certificate(gateway, &view);

    let routed = if accepted.is_ok() {
        judge_and_serve(
            gateway,
            ctx,
            &states,
            &mut view,
            &secrets,
            client_certificate.as_ref(),
        )
        .await?
    } else {
        Routed::refused(states.len())
    };
    let Routed {
        verdicts,
        judged_policies,
        attached,
        served,
    } = routed;
    let mut references = one_gateway::references(gateway, &states, secrets.keys(), &verdicts);
    references
        .config_maps
        .extend(backend_tls_policies::config_maps(&judged_policies));
    references
        .secrets
        .extend(resolve::backend_tls::client_certificate_ref(gateway));
    references.listener_sets = set_candidates.iter().map(Candidate::reference).collect();
    ctx.remember(ObjectRef::from_obj(gateway), references);
    if let Some(claim) = claim {
        claim.await.map_err(|e| Error::Claim(e.to_string()))??;
    }
    let Served {
        data_plane,
        addresses,
        recheck,
    } = served;
    // The sets' status first: a client that sees the Gateway's status
    // current finds its ListenerSets' current too.
    let attached_listener_sets = write_listener_sets(
        ctx,
        &set_candidates,
        accepted.is_ok(),
        &states,
        &attached,
        &data_plane,
        now,
    )
    .await?;
    let update = GatewayStatusUpdate {
        accepted,
        attached_listener_sets,
        states: &states,
        attached: &attached,
        data_plane: &data_plane,
        addresses,
        generation: gateway.metadata.generation,
        now,
        resolved_refs: client_certificate.map(|c| c.map(|_| ())),
    };
    write_status(gateway, ctx, update).await?;
    backend_tls_policies::write_status(gateway, ctx, &judged_policies).await?;
    tracing::debug!(?data_plane, "reconciled");
    let next = match data_plane {
        DataPlane::Pending(_) | DataPlane::AddressNotUsable(_) => PENDING,
        _ => RESYNC,
    };
    Ok(Action::requeue(recheck.map_or(next, |r| r.min(next))))
}

/// What an accepted Gateway's routes and policies came to.
struct Routed {
    verdicts: Vec<routes::RouteVerdict>,
    judged_policies: Vec<resolve::backend_tls::Judged>,
    /// Routes attached, per listener.
    attached: Vec<i32>,
    served: Served,
}

impl Routed {
    /// A Gateway not accepted: no route judged, no data plane.
    fn refused(listeners: usize) -> Self {
        Self {
            verdicts: Vec::new(),
            judged_policies: Vec::new(),
            attached: vec![0; listeners],
            served: Served {
                data_plane: DataPlane::Absent,
                addresses: Vec::new(),
                recheck: None,
            },
        }
    }
}

/// An accepted Gateway: its routes judged in precedence order, the model
/// built from them, BackendTLSPolicies applied to it, and its data plane
/// written.
async fn judge_and_serve(
    gateway: &Gateway,
    ctx: &GatewayContext,
    states: &[ListenerState],
    view: &mut StoreView<'_>,
    secrets: &BTreeMap<(String, String), Arc<Secret>>,
    client_certificate: Option<&Result<CertificateSecret, Issue>>,
) -> Result<Routed, Error> {
    let stores = &ctx.stores;
    let candidates = one_gateway::routes_in_precedence(
        gateway,
        &attach::sets_of(states),
        stores.routes.state(),
        stores.grpc_routes.state(),
        stores.tls_routes.state(),
        stores.tcp_routes.state(),
    );
    let verdicts = routes::evaluate_all(
        &candidates,
        gateway,
        states,
        view,
        &ctx.translator,
        ctx.settings.data_plane,
    )
    .await;
    let built = one_gateway::build(gateway, states, &verdicts);
    let mut model = built.model;
    let client = client_certificate.and_then(|c| c.as_ref().ok());
    let files = client.map(CertificateSecret::files);
    let outcome = backend_tls_policies::apply(ctx, &mut model, files.as_ref(), view).await?;
    let extra = ExtraFiles {
        ca_files: outcome.ca_files,
        client_certificate: client.cloned(),
    };
    let served = serve(gateway, ctx, &model, states, secrets, &extra).await?;
    Ok(Routed {
        verdicts,
        judged_policies: outcome.judged,
        attached: built.attached,
        served,
    })
}

/// Writes the status of every ListenerSet naming the Gateway; how many are
/// Accepted (the Gateway's `attachedListenerSets`).
async fn write_listener_sets(
    ctx: &GatewayContext,
    candidates: &[Candidate],
    gateway_accepted: bool,
    states: &[ListenerState],
    attached: &[i32],
    data_plane: &DataPlane,
    now: Timestamp,
) -> Result<i32, Error> {
    let mut accepted = 0;
    for candidate in candidates {
        let set = &candidate.set;
        let reference = candidate.reference();
        let verdict = match (&candidate.allowed, gateway_accepted) {
            (Err(issue), _) => SetVerdict::Refused(issue.clone()),
            (Ok(()), false) => SetVerdict::Refused(Issue::new(
                "ParentNotAccepted",
                "the Gateway is not accepted; see its conditions",
            )),
            (Ok(()), true) => {
                let mine: Vec<usize> = (0..states.len())
                    .filter(|&i| states[i].set.as_ref() == Some(&reference))
                    .collect();
                if mine.is_empty() {
                    // Created while this reconcile ran: its own event brings
                    // the next one, which judges it. Until then its status
                    // says so, and is of its current generation.
                    SetVerdict::Refused(Issue::new(
                        "Pending",
                        "the Gateway has not judged this ListenerSet yet",
                    ))
                } else {
                    SetVerdict::Taken {
                        states: mine.iter().map(|&i| &states[i]).collect(),
                        attached: mine
                            .iter()
                            .map(|&i| attached.get(i).copied().unwrap_or(0))
                            .collect(),
                    }
                }
            }
        };
        let status = status::listener_set(
            set.status.as_ref(),
            &verdict,
            data_plane,
            set.metadata.generation,
            now,
        );
        let is_accepted = status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Accepted" && c.status == "True");
        if is_accepted {
            accepted += 1;
        }
        if set.status.as_ref() == Some(&status) {
            continue;
        }
        let api: Api<ListenerSet> = Api::namespaced(ctx.client.clone(), &reference.namespace);
        let body = json!({ "status": status });
        match api
            .patch_status(
                &reference.name,
                &PatchParams::default(),
                &Patch::Merge(&body),
            )
            .await
        {
            Ok(_) => {}
            // Deleted meanwhile: nothing to report on.
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(err) => return Err(err.into()),
        }
    }
    Ok(accepted)
}

/// Writes the Gateway's status, unless it is already as `update` says.
async fn write_status(
    gateway: &Gateway,
    ctx: &GatewayContext,
    update: GatewayStatusUpdate<'_>,
) -> Result<(), Error> {
    let Some(body) = update.patch(gateway.status.as_ref()) else {
        return Ok(());
    };
    tracing::debug!("writing status");
    let api: Api<Gateway> =
        Api::namespaced(ctx.client.clone(), &gateway.namespace().unwrap_or_default());
    api.patch_status(
        &gateway.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&body),
    )
    .await?;
    Ok(())
}
