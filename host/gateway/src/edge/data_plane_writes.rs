//! A Gateway's data plane written: its children (ConfigMap and certificate
//! Secret, Deployment, Service) in the apply plan's order, never over an
//! object that is not the Gateway's, and whether its pods serve the config.

use std::{
    collections::BTreeMap,
    sync::Arc,
    time::{Duration, Instant},
};

use gateway_api::gateways::{Gateway, GatewayStatusAddresses};
use k8s_openapi::{
    api::{
        apps::v1::Deployment,
        core::v1::{ConfigMap, Secret, Service},
    },
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};
use kube::{
    Api, Resource, ResourceExt,
    api::{Patch, PatchParams},
    runtime::{
        events::{Event, EventType},
        reflector::ObjectRef,
    },
};
use serde::{Serialize, de::DeserializeOwned};

use crate::{
    Error,
    data_plane::apply_plan::{self, Applied, Desired, Order, Shown},
    data_plane::children,
    data_plane::config::{self, ConfigError},
    data_plane::model::GatewayModel,
    data_plane::ownership,
    edge::context::GatewayContext,
    judgement::addresses,
    judgement::resolve::listeners::{self, ListenerState},
    judgement::status::{self, DataPlane},
};

/// Field manager of everything the Gateway controller applies.
pub const FIELD_MANAGER: &str = "pontoon-gateway";

/// What the data plane serves, once its config was generated and applied.
pub(super) struct Served {
    pub(super) data_plane: DataPlane,
    /// The Service's load-balancer addresses.
    pub(super) addresses: Vec<GatewayStatusAddresses>,
    /// When to look again: the stores did not yet show the last apply.
    pub(super) recheck: Option<Duration>,
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
pub(super) async fn serve(
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
pub(super) struct ExtraFiles {
    pub(super) ca_files: BTreeMap<String, String>,
    pub(super) client_certificate: Option<crate::data_plane::certificates::CertificateSecret>,
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
                    crate::data_plane::certificates::client_ca_file(s.port),
                    s.client_ca.as_ref().ok()?.as_ref()?.pem.clone(),
                ))
            })
            .chain(extra.ca_files.clone())
            .collect();
        let certificate_secret = children::certificates(gateway, &certificates, secrets, &ca_files);
        let hash = children::data_plane_hash(config, certificate_secret.as_ref());
        let served_ports = listeners::served_ports(states);
        Self {
            config_map: children::config_map(gateway, config),
            deployment: children::deployment(
                gateway,
                &ctx.settings.data_plane_image,
                &hash,
                &served_ports,
                certificate_secret.is_some(),
            ),
            service: children::service(
                gateway,
                &served_ports,
                addresses::requested(gateway).load_balancer_ip(),
            ),
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
    let lured =
        ownership::services_lured(gateway, ctx.stores.services.state().iter().map(|s| &**s));
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
        meta.filter(|m| !ownership::owned_by(m, gateway))
            .map(|_| ownership::not_ours(kind, &namespace, child, gateway))
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
                        .any(|c| c.image.as_deref() == Some(&ctx.settings.data_plane_image))
                });
            let ready = pod
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            current && ready
        })
}
