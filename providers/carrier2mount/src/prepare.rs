//! `validate`, `prepare` and `prepared`: checks, and the shadow workload,
//! Service and HPA copy.

use pontoon_provider_sdk::{
    TargetKind,
    bridge_mount::{Error, Progress},
    cluster::{self, EventType},
    info,
    k8s_openapi::api::core::v1::{Container, Pod, Service},
};
use serde_json::Value;

use crate::{
    api::{self, Ctx, invalid},
    mark, names, original, pods, probes,
    restore::{self, OriginalConfig, Store},
    shadow, tls,
    workload::Workload,
};

/// What every step needs of the target container: it exists, it has ports
/// for Carrier2 to proxy, and its probes are ones Carrier2 can answer.
pub fn check_container(ctx: &Ctx, workload: &Workload) -> Result<Container, Error> {
    let container = workload.container(ctx.container()).map_err(invalid)?;
    if container.ports.as_ref().is_none_or(Vec::is_empty) {
        return Err(Error::invalid_input(format!(
            "container `{}` of {} declares no ports; carrier2mount proxies the container's \
             ports, so it needs at least one `containerPort`",
            container.name,
            workload.describe()
        )));
    }
    probes::check_probes(&container)
        .map_err(|why| Error::invalid_input(format!("{why} ({})", workload.describe())))?;
    Ok(container)
}

/// The mount's TLS settings; malformed ones are `invalid-input`.
pub fn tls_parameters(ctx: &Ctx) -> Result<tls::TlsParameters, Error> {
    let parameters: Option<Value> = ctx.mount.parse_parameters()?;
    tls::parse(parameters.as_ref(), ctx.target_namespace())
        .map_err(|why| Error::invalid_input(format!("mount {}: {why}", ctx.mount.name)))
}

/// What `validate` checks of the mount's own fields, without reading the
/// cluster: the names its shadow objects would get, its TLS parameters and
/// the operator's restore ConfigMap.
pub fn check_fields(ctx: &Ctx) -> Result<tls::TlsParameters, Error> {
    names::check_shadow_names(ctx.target.kind.kind(), &ctx.target.name, ctx.container())
        .map_err(|why| Error::invalid_input(format!("mount {}: {why}", ctx.mount.name)))?;
    let tls = tls_parameters(ctx)?;
    let own = restore::config_map_of(&ctx.mount.uid);
    if ctx.mount.settings.restore_config_map != own {
        return Err(Error::failed(format!(
            "carrier2mount keeps a mount's restore entries in ConfigMap `{own}` (the name its \
             capability scope allows, `{}` and the mount's uid), but the operator gave `{}`",
            restore::CONFIG_MAP_PREFIX,
            ctx.mount.settings.restore_config_map
        )));
    }
    Ok(tls)
}

/// The most pods `workload` may run at once: its replicas, or the most an
/// HPA scaling it may set, a quarter more for a Deployment's rollout.
fn most_pods(workload: &Workload, existing: &Existing) -> usize {
    let replicas = |value: Option<&Value>| {
        value
            .and_then(Value::as_i64)
            .and_then(|r| usize::try_from(r).ok())
    };
    match workload.kind {
        TargetKind::Pod => 1,
        kind => {
            let own = replicas(workload.object.pointer("/spec/replicas")).unwrap_or(1);
            let scaled = existing
                .hpas
                .iter()
                .filter(|h| shadow::hpa_scales(h, &workload.name))
                .filter_map(|h| replicas(h.pointer("/spec/maxReplicas")))
                .max()
                .unwrap_or(0);
            let most = own.max(scaled);
            if kind == TargetKind::Deployment {
                most + most.div_ceil(4)
            } else {
                most
            }
        }
    }
}

/// A mount whose restore entries could not fit its ConfigMap is refused
/// before anything is made.
fn refuse_too_big(
    ctx: &Ctx,
    workload: &Workload,
    container: &Container,
    existing: &Existing,
) -> Result<(), Error> {
    let sample = restore::Entry {
        original_config: OriginalConfig {
            image: container.image.clone(),
            command: container.command.clone(),
            args: container.args.clone(),
        },
        container: Some(container.name.clone()),
        // A generated pod name: the workload's, a template hash and a suffix.
        pod: Some(format!("{}-0123456789-abcde", workload.name)),
        pod_uid: Some("00000000-0000-0000-0000-000000000000".into()),
        target_namespace: Some(ctx.target_namespace().to_string()),
        target: Some(ctx.target_name()),
        mount: Some(format!("{}/{}", ctx.mount.namespace, ctx.mount.name)),
    };
    match restore::too_big(most_pods(workload, existing), &sample, &workload.describe()) {
        Some(why) => Err(Error::invalid_input(why)),
        None => Ok(()),
    }
}

pub fn validate(ctx: &Ctx) -> Result<(), Error> {
    check_fields(ctx)?;
    // The target may not exist yet, and a host may call validate without
    // cluster access: only a target that is there and unusable fails.
    match ctx.workload() {
        Ok(Some(workload)) => {
            let container = check_container(ctx, &workload)?;
            let existing = Existing::read(ctx, &workload)?;
            refuse_too_big(ctx, &workload, &container, &existing)?;
            existing.refuse_foreign(ctx, &workload)
        }
        Ok(None) => Ok(()),
        Err(err) => {
            info!("validate could not read the target, skipping its checks: {err:?}");
            Ok(())
        }
    }
}

/// What holds the names of this mount's shadow, its Service and its HPA
/// copy, read once and shared by the checks and the writes of one step.
struct Existing {
    shadow: Option<Value>,
    service: Option<Value>,
    /// The HPAs of the namespace (Deployments only; others get no copy).
    hpas: Vec<Value>,
    /// The claims of the namespace named as the shadow's would be
    /// (StatefulSets with claim templates only).
    claims: Vec<Value>,
}

impl Existing {
    fn read(ctx: &Ctx, workload: &Workload) -> Result<Self, Error> {
        let ns = ctx.target_namespace();
        let service_name = names::shadow_service(&workload.name, ctx.container());
        let service = cluster::get::<Service>(ns, &service_name)?
            .map(|service| serde_json::to_value(&service).unwrap_or_default());
        let hpas = if workload.kind == TargetKind::Deployment {
            api::list("autoscaling/v2", "HorizontalPodAutoscaler", ns)?
        } else {
            Vec::new()
        };
        let claims = claims_named_as_the_shadows(workload)?;
        Ok(Self {
            shadow: ctx.shadow()?,
            service,
            hpas,
            claims,
        })
    }

    fn hpa(&self, name: &str) -> Option<&Value> {
        self.hpas
            .iter()
            .find(|h| h.pointer("/metadata/name").and_then(Value::as_str) == Some(name))
    }

    /// Objects with these names that another hand made: refused (`failed`,
    /// so the mount tries again once the user renamed or deleted them),
    /// never applied over.
    fn refuse_foreign(&self, ctx: &Ctx, workload: &Workload) -> Result<(), Error> {
        let (ns, uid) = (ctx.target_namespace(), ctx.mount.uid.as_str());
        let mut foreign = Vec::new();
        if let Some(existing) = &self.shadow
            && !mark::is_ours(existing, uid)
        {
            foreign.push((workload.kind.kind(), names::shadow_workload(&workload.name)));
        }
        if let Some(service) = &self.service
            && !mark::is_ours(service, uid)
        {
            foreign.push((
                "Service",
                names::shadow_service(&workload.name, ctx.container()),
            ));
        }
        let hpa_name = names::shadow_hpa(&workload.name);
        if let Some(hpa) = self.hpa(&hpa_name)
            && !shadow::hpa_is_ours(hpa, &workload.name, uid)
        {
            foreign.push(("HorizontalPodAutoscaler", hpa_name));
        }
        for claim in self.claims.iter().filter(|c| !mark::is_ours(c, uid)) {
            let name = claim.pointer("/metadata/name").and_then(Value::as_str);
            foreign.push((
                "PersistentVolumeClaim",
                name.unwrap_or_default().to_string(),
            ));
        }
        match foreign.first() {
            None => Ok(()),
            Some((kind, name)) => Err(Error::failed(mark::not_ours(kind, name, ns, uid))),
        }
    }
}

/// The claims of the target's namespace that the shadow of a StatefulSet
/// would use (as its controller names them, for as many replicas as the
/// target has): any there already must be this mount's.
fn claims_named_as_the_shadows(workload: &Workload) -> Result<Vec<Value>, Error> {
    if workload.kind != TargetKind::StatefulSet {
        return Ok(Vec::new());
    }
    let mut copy = workload.object.clone();
    copy["metadata"]["name"] = names::shadow_workload(&workload.name).into();
    let replicas = workload
        .object
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    let names = shadow::claim_names(&copy, replicas);
    if names.is_empty() {
        return Ok(Vec::new());
    }
    Ok(
        api::list("v1", "PersistentVolumeClaim", &workload.namespace)?
            .into_iter()
            .filter(|c| {
                c.pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .is_some_and(|n| names.iter().any(|m| m == n))
            })
            .collect(),
    )
}

/// For a bare Pod that already runs Carrier2, the copy must run the original:
/// its image, command and args come from the restore entry or the pod's own
/// copy of it.
fn original_of_patched_pod(
    ctx: &Ctx,
    workload: &Workload,
    container: &Container,
) -> Result<Option<OriginalConfig>, Error> {
    let runs_carrier = container
        .image
        .as_deref()
        .is_some_and(|image| pontoon_provider_sdk::image::same_image(image, ctx.carrier_image()));
    if workload.kind != TargetKind::Pod || !runs_carrier {
        return Ok(None);
    }
    let pod: Pod = serde_json::from_value(workload.object.clone())
        .map_err(|e| Error::failed(format!("{} came back unreadable: {e}", workload.describe())))?;
    let store = Store::of(ctx.mount);
    let found = restore::lookup(
        &store.data()?,
        ctx.target_namespace(),
        &workload.name,
        ctx.container(),
    );
    let stored = original::from_entry(found.map(|(_, e)| e), &pod, ctx.carrier_image());
    let annotated = original::from_pod(&pod, ctx.container(), ctx.carrier_image());
    let refuse = |why: String| {
        Error::failed(format!(
            "pod `{}` in namespace `{}` runs {}: {why}; carrier2mount cannot copy a pod whose \
             original it does not know (fix or remove the entry in {})",
            workload.name,
            ctx.target_namespace(),
            ctx.carrier_image(),
            store.describe()
        ))
    };
    match original::choose(stored, annotated).map_err(refuse)? {
        original::Choice::Use { original, .. } => Ok(Some(original)),
        original::Choice::Unknown => Err(refuse(format!(
            "neither {} nor the pod has its original container",
            store.describe()
        ))),
    }
}

pub fn prepare(ctx: &Ctx) -> Result<Progress, Error> {
    let workload = ctx.require_workload()?;
    let container = check_container(ctx, &workload)?;
    let existing = Existing::read(ctx, &workload)?;
    existing.refuse_foreign(ctx, &workload)?;
    let original = original_of_patched_pod(ctx, &workload, &container)?;
    let ns = ctx.target_namespace();

    // Keep the id of a shadow that exists: a new one would re-roll its pods
    // and leave the Service pointing at nothing meanwhile.
    let duplication_id = existing
        .shadow
        .as_ref()
        .and_then(|s| shadow::duplication_id_of(s, workload.kind))
        .unwrap_or_else(|| names::duplication_id_from_uid(&ctx.mount.uid));
    let mut copy = shadow::workload_copy(
        &workload,
        &duplication_id,
        original.as_ref().map(|o| (ctx.container(), o)),
    )
    .map_err(invalid)?;
    mark::stamp(&mut copy, &ctx.mount.uid);
    shadow::mark_volume_claims(&mut copy, &ctx.mount.uid);
    api::apply(ns, &copy)?;
    let shadow_name = names::shadow_workload(&workload.name);
    if existing.shadow.is_none() {
        info!(
            "created shadow {}/{shadow_name} in {ns}",
            workload.kind.short_name()
        );
        api::event(
            EventType::Normal,
            "ShadowCreated",
            &format!(
                "Created shadow {}/{shadow_name} of target {} in namespace `{ns}`",
                workload.kind.short_name(),
                ctx.target
            ),
        );
    }

    let service = shadow::service(&workload, &copy, &container, &duplication_id);
    // (The copy's labels, the mark among them, are the Service's labels.)
    let service_name = names::shadow_service(&workload.name, &container.name);
    cluster::apply(ns, &service)?;
    if existing.service.is_none() {
        api::event(
            EventType::Normal,
            "ShadowServiceCreated",
            &format!("Created Service `{service_name}` for the shadow pods in namespace `{ns}`"),
        );
    }

    if workload.kind == TargetKind::Deployment {
        copy_hpa(ctx, &workload, &existing)?;
    }
    Ok(Progress::Done)
}

/// If an HPA scales the target Deployment, one like it scales the shadow.
fn copy_hpa(ctx: &Ctx, workload: &Workload, existing: &Existing) -> Result<(), Error> {
    let ns = ctx.target_namespace();
    let Some(original) = existing
        .hpas
        .iter()
        .find(|h| shadow::hpa_scales(h, &workload.name))
    else {
        return Ok(());
    };
    let name = names::shadow_hpa(&workload.name);
    let existed = existing.hpa(&name).is_some();
    let mut copy = shadow::hpa_copy(original, workload);
    mark::stamp(&mut copy, &ctx.mount.uid);
    api::apply(ns, &copy)?;
    if !existed {
        api::event(
            EventType::Normal,
            "ShadowAutoscalerCreated",
            &format!("Created HorizontalPodAutoscaler `{name}` for the shadow in namespace `{ns}`"),
        );
    }
    Ok(())
}

/// The shadow is this mount's, copies the target as it is now (a change of
/// the target's spec, e.g. a new image, makes it stale and prepare copies it
/// again), and at least one of its pods is running and ready.
pub fn prepared(ctx: &Ctx) -> Result<bool, Error> {
    let workload = ctx.require_workload()?;
    let Some(shadow) = ctx.shadow()? else {
        return Ok(false);
    };
    if !mark::is_ours(&shadow, &ctx.mount.uid) || shadow::stale(&shadow, &workload).is_some() {
        return Ok(false);
    }
    Ok(ctx
        .shadow_pods(&shadow)?
        .iter()
        .any(|pod| pods::running_and_ready(pod, ctx.container())))
}

#[cfg(test)]
mod tests {
    use pontoon_provider_sdk::bridge_mount::{Mount, Settings};
    use proptest::prelude::*;

    use super::*;

    fn mount(
        name: String,
        target: String,
        target_namespace: String,
        target_container: String,
        parameters: Option<String>,
    ) -> Mount {
        Mount {
            name,
            namespace: "gefyra".into(),
            uid: "6f1c2a4e-0d5b-4b8e-9a51-3c2f8d7e1b00".into(),
            target,
            target_namespace,
            target_container,
            parameters,
            settings: Settings {
                operator_namespace: "pontoon".into(),
                carrier_image: "quay.io/gefyra/carrier2:latest".into(),
                restore_config_map: restore::config_map_of("u-1"),
            },
        }
    }

    /// Names near and past Kubernetes' limits, valid and not.
    fn name() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-z]([-a-z0-9]{0,61}[a-z0-9])?",
            "[a-z0-9]([-a-z0-9.]{0,80}[a-z0-9])?",
            "[a-z]{56,70}",
            "\\PC{0,20}",
            Just(String::new()),
        ]
    }

    fn target() -> impl Strategy<Value = String> {
        let prefix = prop_oneof![
            Just(""),
            Just("deploy/"),
            Just("deployment/"),
            Just("deployments/"),
            Just("sts/"),
            Just("statefulset/"),
            Just("pod/"),
            Just("pods/"),
            Just("cronjob/"),
            Just("Deployment/"),
            Just("a/b/"),
        ];
        prop_oneof![
            4 => (prefix, name()).prop_map(|(p, n)| format!("{p}{n}")),
            1 => "\\PC{0,30}",
        ]
    }

    /// JSON of any shape, and TLS settings of Gefyra's shape with any values.
    fn parameters() -> impl Strategy<Value = Option<String>> {
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::from),
            any::<i64>().prop_map(serde_json::Value::from),
            "\\PC{0,12}".prop_map(serde_json::Value::from),
        ];
        let value = leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
                proptest::collection::btree_map(
                    prop_oneof![
                        Just("tls".to_string()),
                        Just("certificate".to_string()),
                        Just("key".to_string()),
                        Just("sni".to_string()),
                        Just("secret".to_string()),
                        Just("8443".to_string()),
                        "[a-z0-9]{1,6}",
                    ],
                    inner,
                    0..4
                )
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        });
        prop_oneof![
            Just(None),
            value.prop_map(|v| Some(v.to_string())),
            "\\PC{0,20}".prop_map(Some),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

        /// Any fields a user can write give a clear error naming the mount,
        /// or a plan whose every name Kubernetes accepts; never a panic.
        #[test]
        fn any_mount_fields_give_a_clear_error_or_a_valid_plan(
            name in name(),
            target in target(),
            namespace in name(),
            container in name(),
            parameters in parameters(),
        ) {
            let mount = mount(name, target, namespace, container, parameters);
            match Ctx::new(&mount).and_then(|ctx| check_fields(&ctx).map(|_| ctx)) {
                Ok(ctx) => {
                    let kind = ctx.target.kind.kind();
                    let shadow = names::shadow_workload(&ctx.target.name);
                    let service = names::shadow_service(&ctx.target.name, ctx.container());
                    prop_assert!(shadow.len() <= 63 && shadow.ends_with("-gefyra"), "{shadow}");
                    prop_assert!(
                        is_service_name(&service),
                        "{kind} {}: Service {service}", ctx.target.name
                    );
                }
                Err(Error::InvalidInput(why) | Error::Failed(why)) => {
                    prop_assert!(!why.trim().is_empty());
                    prop_assert!(
                        why.contains("mount") || why.contains("target"),
                        "the message says what to change: {why}"
                    );
                }
                Err(other) => prop_assert!(false, "unexpected error kind: {other:?}"),
            }
        }
    }

    /// An RFC 1035 label, written out: what Kubernetes requires of a Service name.
    fn is_service_name(name: &str) -> bool {
        let b = name.as_bytes();
        !b.is_empty()
            && b.len() <= 63
            && b[0].is_ascii_lowercase()
            && b[b.len() - 1].is_ascii_alphanumeric()
            && b.iter()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
    }
}
