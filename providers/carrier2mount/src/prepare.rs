//! `validate`, `prepare` and `prepared`: checks, and the shadow workload,
//! Service and HPA copy.

use pontoon_provider_sdk::{
    TargetKind,
    bridge_mount::{Error, Progress},
    cluster::{self, EventType},
    info,
    k8s_openapi::api::core::v1::{Container, Service},
};
use serde_json::Value;

use crate::{
    api::{self, Ctx, invalid},
    carrier_config, names, pods,
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
    carrier_config::check_probes(&container)
        .map_err(|why| Error::invalid_input(format!("{why} ({})", workload.describe())))?;
    Ok(container)
}

/// The mount's TLS settings; malformed ones are `invalid-input`.
pub fn tls_parameters(ctx: &Ctx) -> Result<tls::TlsParameters, Error> {
    let parameters: Option<Value> = ctx.mount.parse_parameters()?;
    tls::parse(parameters.as_ref(), ctx.target_namespace())
        .map_err(|why| Error::invalid_input(format!("mount {}: {why}", ctx.mount.name)))
}

pub fn validate(ctx: &Ctx) -> Result<(), Error> {
    tls_parameters(ctx)?;
    if ctx.mount.settings.restore_config_map != restore::DEFAULT_CONFIG_MAP {
        return Err(Error::failed(format!(
            "carrier2mount keeps restore entries only in ConfigMap `{}` (the one name its \
             capability scope allows), but the operator is configured with `{}`",
            restore::DEFAULT_CONFIG_MAP,
            ctx.mount.settings.restore_config_map
        )));
    }
    // The target may not exist yet, and a host may call validate without
    // cluster access: only a target that is there and unusable fails.
    match ctx.workload() {
        Ok(Some(workload)) => check_container(ctx, &workload).map(drop),
        Ok(None) => Ok(()),
        Err(err) => {
            info!("validate could not read the target, skipping its checks: {err:?}");
            Ok(())
        }
    }
}

/// For a bare Pod that already runs Carrier2, the copy must run the original:
/// its image, command and args come from the restore entry.
fn original_of_patched_pod(
    ctx: &Ctx,
    workload: &Workload,
    container: &Container,
) -> Result<Option<OriginalConfig>, Error> {
    let runs_carrier = container
        .image
        .as_deref()
        .is_some_and(|image| pods::same_image(image, ctx.carrier_image()));
    if workload.kind != TargetKind::Pod || !runs_carrier {
        return Ok(None);
    }
    let store = Store::of(ctx.mount);
    let key = restore::key(ctx.target_namespace(), &workload.name);
    match store.entry(&store.data()?, &key)? {
        Some(entry) => Ok(Some(entry.original_config)),
        None => Err(Error::failed(format!(
            "pod `{}` in namespace `{}` runs {} and {} has no entry `{key}` with its original \
             container; carrier2mount cannot copy a pod whose original it does not know",
            workload.name,
            ctx.target_namespace(),
            ctx.carrier_image(),
            store.describe()
        ))),
    }
}

pub fn prepare(ctx: &Ctx) -> Result<Progress, Error> {
    let workload = ctx.require_workload()?;
    let container = check_container(ctx, &workload)?;
    let original = original_of_patched_pod(ctx, &workload, &container)?;
    let ns = ctx.target_namespace();

    let existing = ctx.shadow()?;
    // Keep the id of a shadow that exists: a new one would re-roll its pods
    // and leave the Service pointing at nothing meanwhile.
    let duplication_id = existing
        .as_ref()
        .and_then(|s| shadow::duplication_id_of(s, workload.kind))
        .unwrap_or_else(|| names::duplication_id_from_uid(&ctx.mount.uid));
    let copy = shadow::workload_copy(
        &workload,
        &duplication_id,
        original.as_ref().map(|o| (ctx.container(), o)),
    )
    .map_err(invalid)?;
    api::apply(ns, &copy)?;
    let shadow_name = names::shadow_workload(&workload.name);
    if existing.is_none() {
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
    let service_name = names::shadow_service(&workload.name, &container.name);
    let service_existed = cluster::get::<Service>(ns, &service_name)?.is_some();
    cluster::apply(ns, &service)?;
    if !service_existed {
        api::event(
            EventType::Normal,
            "ShadowServiceCreated",
            &format!("Created Service `{service_name}` for the shadow pods in namespace `{ns}`"),
        );
    }

    if workload.kind == TargetKind::Deployment {
        copy_hpa(ctx, &workload)?;
    }
    Ok(Progress::Done)
}

/// If an HPA scales the target Deployment, one like it scales the shadow.
fn copy_hpa(ctx: &Ctx, workload: &Workload) -> Result<(), Error> {
    let ns = ctx.target_namespace();
    let hpas = api::list("autoscaling/v2", "HorizontalPodAutoscaler", ns)?;
    let Some(original) = hpas.iter().find(|h| shadow::hpa_scales(h, &workload.name)) else {
        return Ok(());
    };
    let name = names::shadow_hpa(&workload.name);
    let existed = hpas
        .iter()
        .any(|h| h.pointer("/metadata/name").and_then(Value::as_str) == Some(name.as_str()));
    api::apply(ns, &shadow::hpa_copy(original, workload))?;
    if !existed {
        api::event(
            EventType::Normal,
            "ShadowAutoscalerCreated",
            &format!("Created HorizontalPodAutoscaler `{name}` for the shadow in namespace `{ns}`"),
        );
    }
    Ok(())
}

/// At least one shadow pod is running and ready.
pub fn prepared(ctx: &Ctx) -> Result<bool, Error> {
    ctx.require_workload()?;
    let Some(shadow) = ctx.shadow()? else {
        return Ok(false);
    };
    Ok(ctx
        .shadow_pods(&shadow)?
        .iter()
        .any(|pod| pods::running_and_ready(pod, ctx.container())))
}
