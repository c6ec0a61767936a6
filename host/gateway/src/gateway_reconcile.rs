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
use std::{
    collections::BTreeMap,
    sync::Arc,
    time::{Duration, Instant},
};

use gateway_api::{
    gateways::{Gateway, GatewayListeners, GatewayStatusAddresses},
    listenersets::ListenerSet,
};
use k8s_openapi::{
    api::{
        apps::v1::Deployment,
        core::v1::{ConfigMap, Secret, Service},
    },
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
    jiff::Timestamp,
};
use kube::{
    Api, Resource, ResourceExt,
    api::{Patch, PatchParams},
    runtime::{
        controller::Action,
        events::{Event, EventType},
        finalizer::{self, finalizer},
        reflector::ObjectRef,
    },
};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::json;

use super::{
    Error, addresses,
    apply_plan::{self, Applied, Desired, Order, Shown},
    backend_tls, children,
    config::{self, ConfigError},
    context::{Fetched, GatewayContext, StoreView},
    fetch::get_into,
    judgement,
    model::GatewayModel,
    resolve::{
        self, attach, ca_bundles,
        issue::Issue,
        listener_sets::{self, Candidate},
        listeners::{self, ListenerState},
    },
    route_reconcile, routes,
    status::{self, DataPlane, GatewayStatusUpdate, SetVerdict},
};

/// Our finalizer, only ever on Gateways of our classes.
pub const FINALIZER: &str = "gateway.pontoon.dev/finalizer";
/// Which Pontoon (by controllerName) put the finalizer on a Gateway.
pub const CONTROLLER_ANNOTATION: &str = "gateway.pontoon.dev/controller";
/// Field manager of everything the Gateway controller applies.
pub const FIELD_MANAGER: &str = "pontoon-gateway";
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
    backend_tls::forget_gateway(gateway, ctx).await?;
    Ok(())
}

/// The Secrets and CA ConfigMaps the listeners refer to, fetched for this
/// reconcile (only these are read: the operator does not keep every Secret
/// and ConfigMap of the cluster).
async fn fetch(gateway: &Gateway, ctx: &GatewayContext) -> Result<Fetched, Error> {
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
    let view = StoreView::new(&ctx.stores, Fetched::default());
    for candidate in listener_sets::candidates(gateway, &view) {
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
    let fetched = fetch(gateway, ctx).await?;
    let secrets = fetched.secrets.clone();
    let mut view = StoreView::new(&ctx.stores, fetched);
    let states = listeners::evaluate(gateway, &view);
    let accepted = judgement::acceptance(gateway, &view, &states);
    let client_certificate = resolve::backend_tls::client_certificate(gateway, &view);

    let mut verdicts = Vec::new();
    let mut judged_policies = Vec::new();
    let mut attached = vec![0_i32; states.len()];
    let mut served = Served {
        data_plane: DataPlane::Absent,
        addresses: Vec::new(),
        recheck: None,
    };
    if accepted.is_ok() {
        let stores = &ctx.stores;
        let sets = attach::sets_of(&states);
        let mut candidates = judgement::candidate_routes(gateway, &sets, stores.routes.state());
        candidates.extend(judgement::candidate_routes(
            gateway,
            &sets,
            stores.grpc_routes.state(),
        ));
        candidates.extend(judgement::candidate_routes(
            gateway,
            &sets,
            stores.tls_routes.state(),
        ));
        judgement::in_precedence_order(&mut candidates);
        verdicts =
            routes::evaluate_all(&candidates, gateway, &states, &view, &ctx.translator).await;
        let built = judgement::build(gateway, &states, &verdicts);
        attached = built.attached;
        let mut model = built.model;
        let client = client_certificate.as_ref().and_then(|c| c.as_ref().ok());
        let files = client.map(listeners::CertificateSecret::files);
        let outcome = backend_tls::apply(ctx, &mut model, files.as_ref(), &mut view).await?;
        let extra = ExtraFiles {
            ca_files: outcome.ca_files,
            client_certificate: client.cloned(),
        };
        judged_policies = outcome.judged;
        served = serve(gateway, ctx, &model, &states, &secrets, &extra).await?;
    }
    let mut references = judgement::references(gateway, &states, secrets.keys(), &verdicts);
    references
        .config_maps
        .extend(backend_tls::config_maps(&judged_policies));
    references
        .secrets
        .extend(resolve::backend_tls::client_certificate_ref(gateway));
    let set_candidates = listener_sets::candidates(gateway, &view);
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
    backend_tls::write_status(gateway, ctx, &judged_policies).await?;
    tracing::debug!(?data_plane, "reconciled");
    let next = match data_plane {
        DataPlane::Pending(_) | DataPlane::AddressNotUsable(_) => PENDING,
        _ => RESYNC,
    };
    Ok(Action::requeue(recheck.map_or(next, |r| r.min(next))))
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

/// What the data plane serves, once its config was generated and applied.
struct Served {
    data_plane: DataPlane,
    /// The Service's load-balancer addresses.
    addresses: Vec<GatewayStatusAddresses>,
    /// When to look again: the stores did not yet show the last apply.
    recheck: Option<Duration>,
}

impl Served {
    /// Not served, for the reason given (the status says why).
    fn pending(why: String) -> Self {
        Self {
            data_plane: DataPlane::Pending(why),
            addresses: Vec::new(),
            recheck: None,
        }
    }
}

/// Generates the Praxis config of `model` and applies the data plane. A
/// config that cannot be generated, or a data plane the API server refuses,
/// is reported (an Event, and the status says why), not retried at once.
async fn serve(
    gateway: &Gateway,
    ctx: &GatewayContext,
    model: &GatewayModel,
    states: &[ListenerState],
    secrets: &BTreeMap<(String, String), Arc<Secret>>,
    extra: &ExtraFiles,
) -> Result<Served, Error> {
    // Rules Praxis cannot express were left out by `routes::evaluate_all`
    // (and reported on their routes), with `config::check_rule`.
    let yaml = match config::generate(model, &ctx.settings.config) {
        Ok(yaml) => yaml,
        Err(err) => {
            publish(
                ctx,
                gateway,
                EventType::Warning,
                "ConfigInvalid",
                config_message(&err),
            )
            .await;
            return Ok(Served::pending(format!(
                "the Praxis config cannot be generated: {err}"
            )));
        }
    };
    match apply_children(gateway, ctx, &yaml, states, secrets, extra).await {
        Ok(served) => Ok(served),
        // Refused for what it is (invalid, forbidden): trying again at once
        // would be refused again; the status says why.
        Err(Error::Kube(kube::Error::Api(refusal))) if matches!(refusal.code, 400 | 403 | 422) => {
            let why = format!("the API server refused the data plane: {}", refusal.message);
            publish(
                ctx,
                gateway,
                EventType::Warning,
                "DataPlaneRefused",
                why.clone(),
            )
            .await;
            Ok(Served::pending(why))
        }
        Err(err) => Err(err),
    }
}

fn config_message(err: &ConfigError) -> String {
    format!("cannot generate the Praxis config: {err}")
}

async fn publish(
    ctx: &GatewayContext,
    gateway: &Gateway,
    type_: EventType,
    reason: &str,
    note: String,
) {
    let event = Event {
        type_,
        reason: reason.into(),
        note: Some(pontoon_support::controller_support::event_note(note)),
        action: "Reconcile".into(),
        secondary: None,
    };
    if let Err(err) = ctx.recorder.publish(&event, &gateway.object_ref(&())).await {
        tracing::debug!(error = %err, "cannot post an event");
    }
}

/// Files the data plane needs besides its listeners' certificates and CAs:
/// what BackendTLSPolicies trust, and the Gateway's backend client certificate.
#[derive(Debug, Default)]
struct ExtraFiles {
    ca_files: BTreeMap<String, String>,
    client_certificate: Option<listeners::CertificateSecret>,
}

/// A Gateway's children as this reconcile would write them.
struct Children {
    config_map: ConfigMap,
    /// The certificates of the programmable listeners, when there are any.
    certificates: Option<Secret>,
    deployment: Deployment,
    service: Service,
    /// The data plane's hash: of the config and the certificates.
    hash: String,
}

impl Children {
    fn new(
        gateway: &Gateway,
        ctx: &GatewayContext,
        config: &str,
        states: &[ListenerState],
        secrets: &BTreeMap<(String, String), Arc<Secret>>,
        extra: &ExtraFiles,
    ) -> Self {
        let mut certificates: Vec<_> = states
            .iter()
            .filter(|s| s.programmable())
            .flat_map(|s| s.certificates.iter().cloned())
            .chain(extra.client_certificate.iter().cloned())
            .collect();
        certificates.sort();
        certificates.dedup();
        let ca_files: BTreeMap<String, String> = states
            .iter()
            .filter(|s| s.programmable())
            .filter_map(|s| {
                Some((
                    listeners::client_ca_file(s.port),
                    s.client_ca.as_ref().ok()?.as_ref()?.pem.clone(),
                ))
            })
            .chain(extra.ca_files.clone())
            .collect();
        let certificate_secret = children::certificates(gateway, &certificates, secrets, &ca_files);
        let hash = children::data_plane_hash(config, certificate_secret.as_ref());
        Self {
            config_map: children::config_map(gateway, config),
            deployment: children::deployment(
                gateway,
                &ctx.settings.praxis_image,
                &hash,
                states,
                certificate_secret.is_some(),
            ),
            service: children::service(gateway, states),
            certificates: certificate_secret,
            hash,
        }
    }
}

/// Applies the children `apply_plan` says must be written, in its order;
/// returns whether the data plane is ready, and the addresses of its Service.
async fn apply_children(
    gateway: &Gateway,
    ctx: &GatewayContext,
    config: &str,
    states: &[ListenerState],
    secrets: &BTreeMap<(String, String), Arc<Secret>>,
    extra: &ExtraFiles,
) -> Result<Served, Error> {
    let namespace = gateway.namespace().unwrap_or_default();
    let name = children::name(gateway);
    let Children {
        config_map,
        certificates,
        deployment,
        service,
        hash,
    } = Children::new(gateway, ctx, config, states, secrets, extra);
    let desired = Desired {
        data_plane: &hash,
        deployment: apply_plan::fingerprint(&deployment)?,
        service: apply_plan::fingerprint(&service)?,
    };
    let key = ObjectRef::from_obj(gateway);
    let stores = &ctx.stores;
    let stored_config_map = stores
        .config_maps
        .get(&ObjectRef::new(&name).within(&namespace));
    let stored_deployment = stores
        .deployments
        .get(&ObjectRef::new(&name).within(&namespace));
    let stored_service = stores
        .services
        .get(&ObjectRef::new(&name).within(&namespace));
    let last = ctx.last_applied(&key);
    let shown = Shown {
        config_map: stored_config_map.as_ref().map(|c| &c.metadata),
        deployment: stored_deployment.as_deref(),
        service: stored_service.as_deref(),
    };
    let plan = apply_plan::plan(&desired, &shown, last.as_ref(), Instant::now());
    if let Some(blocked) = blocked(gateway, ctx, &plan, &shown, certificates.is_some()).await? {
        publish(
            ctx,
            gateway,
            EventType::Warning,
            "DataPlaneBlocked",
            blocked.clone(),
        )
        .await;
        return Ok(Served::pending(blocked));
    }
    tracing::debug!(
        config_stale = plan.config,
        deployment_stale = plan.deployment,
        service_stale = plan.service,
        recheck = ?plan.recheck,
        "data plane"
    );

    let config = async {
        if !plan.config {
            return Ok(None);
        }
        let config_maps: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &namespace);
        let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);
        let certificates = async {
            match &certificates {
                Some(secret) => {
                    apply_child(&secrets, &children::certificates_name(gateway), secret)
                        .await
                        .map(drop)
                }
                None => Ok(()),
            }
        };
        let (config_map, ()) =
            tokio::try_join!(apply_child(&config_maps, &name, &config_map), certificates)?;
        Ok::<_, kube::Error>(Some(config_map.resource_version()))
    };
    let workload = async {
        let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), &namespace);
        let services: Api<Service> = Api::namespaced(ctx.client.clone(), &namespace);
        let kept_deployment = kept(
            plan.deployment,
            stored_deployment,
            last.as_ref().map(|l| &l.deployment),
        );
        let kept_service = kept(
            plan.service,
            stored_service,
            last.as_ref().map(|l| &l.service),
        );
        tokio::try_join!(
            apply_unless_current(&deployments, &name, &deployment, kept_deployment),
            apply_unless_current(&services, &name, &service, kept_service),
        )
    };
    let (config_map_version, ((deployment, deployment_applied), (service, service_applied))) =
        match plan.order {
            Order::AllAtOnce => tokio::try_join!(config, workload)?,
            Order::ConfigFirst => {
                let config_map_version = config.await?;
                (config_map_version, workload.await?)
            }
        };

    if plan.config || deployment_applied || service_applied {
        let config_map_version = match (config_map_version, &last) {
            (Some(version), _) => version,
            (None, Some(last)) => last.config_map_version.clone(),
            (None, None) => None,
        };
        ctx.record_applied(
            key,
            Applied {
                data_plane: hash.clone(),
                config_map_version,
                deployment_hash: desired.deployment,
                service_hash: desired.service,
                at: Instant::now(),
                deployment: deployment.clone(),
                service: service.clone(),
            },
        );
    }

    Ok(Served {
        recheck: plan.recheck,
        ..serving(ctx, gateway, &deployment, &service, &hash)
    })
}

/// Why the children `plan` writes may not be written, if they may not: an
/// object of a child's name that is not the Gateway's (a child the stores
/// do not show is looked up), or `infrastructure.labels` that would put the
/// data plane's pods behind another Service.
async fn blocked(
    gateway: &Gateway,
    ctx: &GatewayContext,
    plan: &apply_plan::Plan,
    shown: &Shown<'_>,
    certificates: bool,
) -> Result<Option<String>, Error> {
    let lured = children::services_lured(gateway, ctx.stores.services.state().iter().map(|s| &**s));
    if !lured.is_empty() {
        return Ok(Some(format!(
            "infrastructure.labels would put the data plane's pods behind Service(s) {} of \
             namespace `{}`, whose selector they would then match: choose labels no other \
             Service selects",
            lured.join(", "),
            gateway.namespace().unwrap_or_default()
        )));
    }
    let namespace = gateway.namespace().unwrap_or_default();
    let name = children::name(gateway);
    let foreign = |kind: &str, child: &str, meta: Option<&ObjectMeta>| {
        meta.filter(|m| !children::owned_by(m, gateway))
            .map(|_| children::not_ours(kind, &namespace, child, gateway))
    };
    // What the stores show is the cluster, as far as they see it: the
    // Service store sees every Service; the ConfigMap and Deployment stores
    // see only objects labelled as data planes, so a child they do not show
    // may be someone's unlabelled object, and is read.
    if plan.service
        && let Some(why) = foreign("Service", &name, shown.service.map(|s| &s.metadata))
    {
        return Ok(Some(why));
    }
    let config_maps: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &namespace);
    let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), &namespace);
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);
    let certificates_name = children::certificates_name(gateway);
    let (config_map, deployment, secret) = tokio::try_join!(
        async {
            match (plan.config, shown.config_map) {
                (false, _) => Ok(None),
                (true, Some(meta)) => Ok(Some(meta.clone())),
                (true, None) => config_maps
                    .get_metadata_opt(&name)
                    .await
                    .map(|m| m.map(|m| m.metadata)),
            }
        },
        async {
            match (plan.deployment, shown.deployment) {
                (false, _) => Ok(None),
                (true, Some(d)) => Ok(Some(d.metadata.clone())),
                (true, None) => deployments
                    .get_metadata_opt(&name)
                    .await
                    .map(|m| m.map(|m| m.metadata)),
            }
        },
        async {
            if plan.config && certificates {
                secrets
                    .get_metadata_opt(&certificates_name)
                    .await
                    .map(|m| m.map(|m| m.metadata))
            } else {
                Ok(None)
            }
        },
    )?;
    Ok(foreign("ConfigMap", &name, config_map.as_ref())
        .or_else(|| foreign("Deployment", &name, deployment.as_ref()))
        .or_else(|| foreign("Secret", &certificates_name, secret.as_ref())))
}

/// Whether the data plane serves: an available pod, with this config or
/// (during a rolling update to it) the one before; the Gateway stays
/// Programmed while its config rolls out, as its traffic is served
/// throughout. And the addresses of its Service.
fn serving(
    ctx: &GatewayContext,
    gateway: &Gateway,
    deployment: &Deployment,
    service: &Service,
    config_hash: &str,
) -> Served {
    let name = children::name(gateway);
    let available = deployment
        .status
        .as_ref()
        .is_some_and(|s| s.available_replicas.unwrap_or(0) >= 1)
        || pods_serve(ctx, gateway, config_hash);
    if !available {
        return Served::pending(format!("waiting for Deployment {name} to be available"));
    }
    let addresses = status::addresses(service);
    if addresses.is_empty() {
        return Served::pending(format!(
            "waiting for Service {name} to get a load-balancer address"
        ));
    }
    if let Err(why) = addresses::usable(&addresses::requested(gateway), &addresses) {
        return Served {
            data_plane: DataPlane::AddressNotUsable(why),
            addresses,
            recheck: None,
        };
    }
    Served {
        data_plane: DataPlane::Ready,
        addresses,
        recheck: None,
    }
}

/// Server-side applies a child as this controller, taking over its fields.
async fn apply_child<K>(api: &Api<K>, name: &str, child: &K) -> Result<K, kube::Error>
where
    K: Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    let params = PatchParams::apply(FIELD_MANAGER).force();
    api.patch(name, &params, &Patch::Apply(child)).await
}

/// What a child the plan does not write counts as: the stores' copy of it,
/// or until they show it, what the API server returned at its last apply
/// (`None`: it is to be applied).
fn kept<K>(write: bool, stored: Option<Arc<K>>, last: Option<&Arc<K>>) -> Option<Arc<K>> {
    match last {
        Some(last) if !write => Some(stored.unwrap_or_else(|| last.clone())),
        _ => None,
    }
}

/// The child after this reconcile, and whether it was applied now: `current`
/// when there is one, else `child` applied.
async fn apply_unless_current<K>(
    api: &Api<K>,
    name: &str,
    child: &K,
    current: Option<Arc<K>>,
) -> Result<(Arc<K>, bool), kube::Error>
where
    K: Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    match current {
        Some(current) => Ok((current, false)),
        None => Ok((Arc::new(apply_child(api, name, child).await?), true)),
    }
}

/// Whether the Gateway's pods all serve the current config: at least one,
/// every one not going away Ready, with this config and the Praxis image.
/// True as soon as a first rollout's pod is Ready (the ReplicaSet and then
/// the Deployment report it a controller round or two later).
fn pods_serve(ctx: &GatewayContext, gateway: &Gateway, config_hash: &str) -> bool {
    let namespace = gateway.metadata.namespace.as_deref();
    let instance = children::instance(gateway);
    let instance = Some(instance.as_str());
    let mut pods = ctx
        .stores
        .pods
        .state()
        .into_iter()
        .filter(|p| {
            p.metadata.namespace.as_deref() == namespace
                && p.labels().get(children::INSTANCE_LABEL).map(String::as_str) == instance
                && p.metadata.deletion_timestamp.is_none()
        })
        .peekable();
    pods.peek().is_some()
        && pods.all(|pod| {
            let current = pod
                .annotations()
                .get(children::CONFIG_HASH_ANNOTATION)
                .map(String::as_str)
                == Some(config_hash)
                && pod.spec.as_ref().is_some_and(|s| {
                    s.containers
                        .iter()
                        .any(|c| c.image.as_deref() == Some(&ctx.settings.praxis_image))
                });
            let ready = pod
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            current && ready
        })
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
