//! `uninstall`: removes the shadow and gives the original pods back what they
//! ran. Safe in any state and repeatable; `Done` only when all is back.

use std::time::{SystemTime, UNIX_EPOCH};

use pontoon_provider_sdk::{
    TargetKind,
    bridge_mount::{Error, Progress},
    cluster::{self, ClusterError, EventType, PatchType},
    info,
    k8s_openapi::api::core::v1::{Pod, Service},
    warn,
};
use serde_json::{Value, json};

use crate::{
    api::{self, Ctx},
    names, pods,
    restore::{self, OriginalConfig, Store},
    shadow,
    workload::Workload,
};

/// The annotation `kubectl rollout restart` sets; a new value rolls the pods.
pub const RESTARTED_AT: &str = "kubectl.kubernetes.io/restartedAt";

pub fn uninstall(ctx: &Ctx) -> Result<Progress, Error> {
    remove_shadow(ctx)?;
    let workload = ctx.workload()?;
    let unrestorable = restore_originals(ctx, workload.as_ref())?;
    let store = Store::of(ctx.mount);
    store.delete_if_empty()?;
    if !unrestorable.is_empty() {
        return Err(Error::failed(format!(
            "cannot restore {}: {}",
            ctx.target,
            unrestorable.join("; ")
        )));
    }
    let Some(workload) = workload else {
        info!("target {} is gone: nothing to restore", ctx.target);
        return Ok(Progress::Done);
    };
    let lagging = lagging_pods(ctx, &workload)?;
    if lagging.is_empty() {
        Ok(Progress::Done)
    } else {
        info!("waiting for original pods: {}", lagging.join("; "));
        Ok(Progress::WhenPodsChange)
    }
}

/// Deletes the shadow workload, the HPA copy and the shadow Service.
fn remove_shadow(ctx: &Ctx) -> Result<(), Error> {
    let ns = ctx.target_namespace();
    let shadow_name = names::shadow_workload(&ctx.target.name);
    if ctx.delete_shadow()? {
        api::event(
            EventType::Normal,
            "ShadowDeleted",
            &format!(
                "Deleted shadow {}/{shadow_name} in namespace `{ns}`",
                ctx.target.kind.short_name()
            ),
        );
    }
    if ctx.target.kind == TargetKind::Deployment {
        for hpa in api::list("autoscaling/v2", "HorizontalPodAutoscaler", ns)? {
            if !shadow::hpa_scales(&hpa, &shadow_name) {
                continue;
            }
            let Some(name) = hpa.pointer("/metadata/name").and_then(Value::as_str) else {
                continue;
            };
            let reference = api::object_ref("autoscaling/v2", "HorizontalPodAutoscaler", ns, name);
            cluster::raw::delete(&reference)?;
        }
    }
    let service = names::shadow_service(&ctx.target.name, ctx.container());
    if cluster::delete::<Service>(ns, &service)? {
        api::event(
            EventType::Normal,
            "ShadowServiceDeleted",
            &format!("Deleted Service `{service}` in namespace `{ns}`"),
        );
    }
    Ok(())
}

/// Puts every saved original back, restarts a Deployment or StatefulSet
/// once for it, and only then drops the entries. Returns what cannot be
/// restored (a bare Pod running Carrier2 whose original is unknown).
fn restore_originals(ctx: &Ctx, workload: Option<&Workload>) -> Result<Vec<String>, Error> {
    let ns = ctx.target_namespace();
    let store = Store::of(ctx.mount);
    let data = store.data()?;
    let (entries, unreadable) = restore::of_target(&data, ns, &ctx.target_name());
    for problem in unreadable {
        warn!(
            "ignoring an unreadable restore entry in {}: {problem}",
            store.describe()
        );
    }
    let has_template = workload.is_some_and(|w| w.kind != TargetKind::Pod);
    let mut restart = false;
    let mut applied = Vec::new();
    for (key, entry) in &entries {
        let pod_name = entry.pod.clone().unwrap_or_default();
        let container = entry.container.as_deref().unwrap_or(ctx.container());
        match cluster::get::<Pod>(ns, &pod_name)? {
            Some(pod) if !pods::is_terminating(&pod) => {
                restore_pod(ctx, &pod, container, &entry.original_config)?;
                restart |= has_template;
            }
            // Gone or going: its replacement comes from the unchanged template.
            _ => info!("pod {pod_name} is gone; dropping its restore entry"),
        }
        applied.push(key.clone());
    }

    // Pods running Carrier2 with no entry (it was lost): a template knows
    // what they ran; a bare Pod's original is unknown.
    let mut unrestorable = Vec::new();
    if let Some(workload) = workload {
        let template = workload.container(ctx.container()).ok();
        for pod in ctx.original_pods(workload)? {
            let name = pods::name(&pod);
            if entries.contains_key(&restore::key(ns, name)) {
                continue;
            }
            let runs_carrier = pods::spec_image(&pod, ctx.container())
                .is_some_and(|image| pods::same_image(image, ctx.carrier_image()));
            if !runs_carrier {
                continue;
            }
            match &template {
                Some(template) if has_template => {
                    let original = OriginalConfig {
                        image: template.image.clone(),
                        command: template.command.clone(),
                        args: template.args.clone(),
                    };
                    restore_pod(ctx, &pod, ctx.container(), &original)?;
                    restart = true;
                }
                _ => unrestorable.push(format!(
                    "pod `{name}` runs {} and {} has no entry with its original",
                    ctx.carrier_image(),
                    store.describe()
                )),
            }
        }
    }

    if restart && let Some(workload) = workload {
        restart_workload(workload)?;
    }
    for key in applied {
        store.remove(&key)?;
    }
    Ok(unrestorable)
}

/// Patches the container's image back; command and args cannot change in a
/// pod, so they are only compared.
fn restore_pod(
    ctx: &Ctx,
    pod: &Pod,
    container: &str,
    original: &OriginalConfig,
) -> Result<(), Error> {
    let (ns, name) = (ctx.target_namespace(), pods::name(pod));
    let Some(current) = pods::container(pod, container) else {
        warn!("pod {name} has no container {container}; nothing to restore in it");
        return Ok(());
    };
    if current.command != original.command || current.args != original.args {
        api::event(
            EventType::Warning,
            "RestoreMismatch",
            &format!(
                "Pod `{name}` in namespace `{ns}`: container `{container}` runs command {:?} \
                 args {:?}, the saved original has {:?} {:?}; a pod's command cannot change, \
                 recreate the pod if this matters",
                current.command, current.args, original.command, original.args
            ),
        );
    }
    let Some(image) = &original.image else {
        return Ok(());
    };
    if current.image.as_deref() == Some(image.as_str()) {
        return Ok(());
    }
    let patch = json!({ "spec": { "containers": [{ "name": container, "image": image }] } });
    match cluster::patch::<Pod>(ns, name, PatchType::Strategic, &patch) {
        Ok(_) => {
            api::event(
                EventType::Normal,
                "PodRestored",
                &format!(
                    "Pod `{name}` in namespace `{ns}`: container `{container}` runs {image} again"
                ),
            );
            Ok(())
        }
        // Deleted meanwhile: nothing left to restore.
        Err(ClusterError::NotFound(_)) => Ok(()),
        Err(err) => Err(err.into()),
    }
}

/// Rolls the workload's pods, as `kubectl rollout restart` does.
fn restart_workload(workload: &Workload) -> Result<(), Error> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    let patch = json!({ "spec": { "template": { "metadata": { "annotations": {
        RESTARTED_AT: rfc3339(now)
    } } } } });
    let reference = api::object_ref(
        workload.kind.api_version(),
        workload.kind.kind(),
        &workload.namespace,
        &workload.name,
    );
    match cluster::raw::patch(&reference, PatchType::Merge, &patch.to_string()) {
        Ok(_) => {
            api::event(
                EventType::Normal,
                "TargetRestarted",
                &format!(
                    "Restarted {} to bring back its original pods",
                    workload.describe()
                ),
            );
            Ok(())
        }
        Err(ClusterError::NotFound(_)) => Ok(()),
        Err(err) => Err(err.into()),
    }
}

/// Original pods that are not back yet: still asking for or running Carrier2,
/// or not running what their spec asks for.
fn lagging_pods(ctx: &Ctx, workload: &Workload) -> Result<Vec<String>, Error> {
    let carrier = ctx.carrier_image();
    let mut lagging = Vec::new();
    for pod in ctx.original_pods(workload)? {
        let name = pods::name(&pod);
        let Some(spec) = pods::spec_image(&pod, ctx.container()) else {
            continue;
        };
        if pods::same_image(spec, carrier) {
            lagging.push(format!("{name} still asks for {carrier}"));
            continue;
        }
        match pods::running_image(&pod, ctx.container()) {
            Some(running) if pods::same_image(running, spec) => {}
            Some(running) => lagging.push(format!("{name} runs {running}, not {spec} yet")),
            None => lagging.push(format!("{name} has not started {spec} yet")),
        }
    }
    Ok(lagging)
}

/// `2026-03-01T12:00:00Z` for seconds since the Unix epoch.
pub fn rfc3339(seconds: u64) -> String {
    let days = seconds / 86_400;
    let rest = seconds % 86_400;
    let (year, month, day) = civil_from_days(days as i64);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's
/// algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc3339_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_772_366_400), "2026-03-01T12:00:00Z");
        assert_eq!(rfc3339(4_102_444_799), "2099-12-31T23:59:59Z");
    }
}
