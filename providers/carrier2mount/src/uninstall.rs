//! `uninstall`: gives the original pods back what they ran, then, once none
//! runs Carrier2 any more (which sends to the shadow), removes the shadow.
//! Safe in any state and repeatable; `Done` only when all is back.

use std::{
    collections::BTreeMap,
    time::{SystemTime, UNIX_EPOCH},
};

use pontoon_provider_sdk::{
    TargetKind,
    bridge_mount::{CONFLICT_RETRY_SECONDS, Error, Progress},
    cluster::{self, ClusterError, EventType, ObjectRef, PatchType},
    info,
    k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, Service},
    warn,
};
use serde_json::{Value, json};

use crate::{
    api::{self, Ctx},
    configured, mark, names, original, pods, put_back,
    restore::{self, Entry, OriginalConfig, Store},
    shadow,
    workload::Workload,
};

/// The annotation `kubectl rollout restart` sets; a new value rolls the pods.
pub const RESTARTED_AT: &str = "kubectl.kubernetes.io/restartedAt";

pub fn uninstall(ctx: &Ctx) -> Result<Progress, Error> {
    // The pods are being put back: what install saw them take is over.
    configured::forget();
    let workload = ctx.workload()?;
    let target = ctx.target_name();
    if let Some(workload) = &workload
        && put_back::recently(&target)
    {
        // An earlier call put every original back and dropped the entries:
        // what is left is waiting, unless a pod asks for Carrier2 again.
        let pods = ctx.original_pods(workload)?;
        if pods
            .iter()
            .all(|pod| put_back::settled(pod, ctx.container(), ctx.carrier_image()))
        {
            return done_when_back(ctx, &pods);
        }
        info!("a pod of {target} asks for Carrier2 again; planning the restore anew");
    }
    // Decided before anything is touched: an original that cannot be
    // trusted stops the uninstall with the shadow still serving.
    let plan = restore_plan(ctx, workload.as_ref())?;
    let unrestorable = plan.unrestorable.clone();
    let others_kept = plan.others_kept;
    let applied = plan.apply(ctx, workload.as_ref())?;
    if let Some(left) = &applied.legacy_left {
        // Gefyra's shared ConfigMap, emptied of this target's entries by
        // earlier versions' mounts: deleted only when nothing is left.
        Store::legacy(ctx.mount).delete_if_empty_as(left)?;
    }
    let store = Store::of(ctx.mount);
    match applied.left {
        // What the removal of this target's entries left: no read needed.
        Some(left) => {
            store.delete_if_empty_as(&left)?;
        }
        // Nothing removed, and other entries there when the plan read it:
        // not empty; whoever removes the last of those deletes it.
        None if others_kept => {}
        None => {
            store.delete_if_empty()?;
        }
    }
    if !unrestorable.is_empty() {
        remove_shadow(ctx)?;
        return Err(Error::failed(format!(
            "cannot restore {}: {}",
            ctx.target,
            unrestorable.join("; ")
        )));
    }
    let Some(workload) = workload else {
        remove_shadow(ctx)?;
        put_back::forget();
        info!("target {} is gone: nothing to restore", ctx.target);
        return Ok(Progress::Done);
    };
    put_back::record(&target);
    if applied.images > 0 {
        // Those pods restart onto their originals now; none can be back
        // yet, so there is nothing to list until they change.
        info!(
            "gave {} pod(s) of {target} their original image back; waiting for them to run it",
            applied.images
        );
        return Ok(Progress::WhenPodsChange);
    }
    done_when_back(ctx, &ctx.original_pods(&workload)?)
}

/// Done once every pod of `pods` runs its original: only then is the
/// shadow removed, since a pod still running Carrier2 sends its traffic to
/// the shadow's Service, and would answer 502 without it.
fn done_when_back(ctx: &Ctx, pods: &[Pod]) -> Result<Progress, Error> {
    let lagging = lagging_pods(ctx, pods);
    if lagging.is_empty() {
        remove_shadow(ctx)?;
        // The note stays, renewed: the host often calls once more before
        // the mount is gone (its own status write wakes the mount again),
        // and that call then finds nothing to do from the pods alone,
        // without reading the shared restore ConfigMap (two reads of up
        // to ≈200 KB a mount in a burst of 200).
        put_back::record(&ctx.target_name());
        Ok(Progress::Done)
    } else {
        info!("waiting for original pods: {}", lagging.join("; "));
        Ok(Progress::WhenPodsChange)
    }
}

/// Deletes the shadow workload, the HPA copy and the shadow Service, each
/// only if it carries this mount's mark and is unchanged since it was read;
/// an object of the same name that someone else made is left alone.
fn remove_shadow(ctx: &Ctx) -> Result<(), Error> {
    let (ns, uid) = (ctx.target_namespace(), ctx.mount.uid.as_str());
    let shadow_name = names::shadow_workload(&ctx.target.name);
    let kind = ctx.target.kind;
    if let Some(shadow) = ctx.shadow()? {
        if !mark::is_ours(&shadow, uid) {
            info!(
                "{} {shadow_name} in {ns} is not this mount's; leaving it",
                kind.kind()
            );
        } else if delete_unchanged(&ctx.shadow_ref(), &shadow)? {
            api::event(
                EventType::Normal,
                "ShadowDeleted",
                &format!(
                    "Deleted shadow {}/{shadow_name} in namespace `{ns}`",
                    kind.short_name()
                ),
            );
        }
    }
    if kind == TargetKind::StatefulSet {
        // The shadow's claims (kept by its controller: Retain), exactly
        // those carrying this mount's mark.
        let selector = format!("{}={}", mark::MOUNT_LABEL, mark::value(uid));
        for claim in cluster::raw::list("v1", "PersistentVolumeClaim", ns, &selector)? {
            let claim: Value = serde_json::from_str(&claim).unwrap_or_default();
            let Some(name) = claim.pointer("/metadata/name").and_then(Value::as_str) else {
                continue;
            };
            if mark::is_ours(&claim, uid) {
                let reference = api::object_ref("v1", "PersistentVolumeClaim", ns, name);
                delete_unchanged(&reference, &claim)?;
            }
        }
    }
    if kind == TargetKind::Deployment {
        for hpa in api::list("autoscaling/v2", "HorizontalPodAutoscaler", ns)? {
            if !shadow::hpa_scales(&hpa, &shadow_name)
                || !shadow::hpa_is_ours(&hpa, &ctx.target.name, uid)
            {
                continue;
            }
            let Some(name) = hpa.pointer("/metadata/name").and_then(Value::as_str) else {
                continue;
            };
            let reference = api::object_ref("autoscaling/v2", "HorizontalPodAutoscaler", ns, name);
            delete_unchanged(&reference, &hpa)?;
        }
    }
    let service = names::shadow_service(&ctx.target.name, ctx.container());
    if let Some(found) = cluster::get::<Service>(ns, &service)? {
        let json = serde_json::to_value(&found).unwrap_or_default();
        let reference = api::object_ref("v1", "Service", ns, &service);
        if !mark::is_ours(&json, uid) {
            info!("Service {service} in {ns} is not this mount's; leaving it");
        } else if delete_unchanged(&reference, &json)? {
            api::event(
                EventType::Normal,
                "ShadowServiceDeleted",
                &format!("Deleted Service `{service}` in namespace `{ns}`"),
            );
        }
    }
    Ok(())
}

/// Deletes `object` if it is still the version read (so a mark that was
/// checked is the mark of what is deleted); `false` when it was gone.
fn delete_unchanged(reference: &ObjectRef, object: &Value) -> Result<bool, Error> {
    let Some(version) = object
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
    else {
        return Err(Error::failed(format!(
            "{} `{}` in namespace `{}` has no resourceVersion",
            reference.kind, reference.name, reference.namespace
        )));
    };
    match cluster::raw::delete_if_unchanged(reference, version) {
        Ok(deleted) => Ok(deleted),
        Err(ClusterError::Conflict(_)) => Err(Error::temporary(
            format!(
                "{} `{}` in namespace `{}` changed while being deleted; looking again",
                reference.kind, reference.name, reference.namespace
            ),
            CONFLICT_RETRY_SECONDS,
        )),
        Err(err) => Err(err.into()),
    }
}

/// What restoring the target means, decided before anything is touched.
struct RestorePlan {
    /// Pods to give their original back (image, and the annotation removed).
    restore: Vec<(Pod, OriginalConfig)>,
    /// Pods that run their original already but still carry the annotation.
    unannotate: Vec<Pod>,
    /// Entries to drop once done: this target's, for the mount's container.
    entries: Vec<String>,
    /// Those of them in Gefyra's shared ConfigMap (written by earlier
    /// versions).
    legacy: Vec<String>,
    /// Pods on Carrier2 whose original is known nowhere (a bare Pod's).
    unrestorable: Vec<String>,
    /// The ConfigMap held entries besides those to drop when it was read.
    others_kept: bool,
}

/// Looks at every pod of the target (and every pod an entry names): one that
/// runs Carrier2 gets its original from the ConfigMap or its own annotation,
/// checked against each other. A copy that is malformed, or two that
/// disagree, refuse the whole restore: `failed`, nothing patched.
fn restore_plan(ctx: &Ctx, workload: Option<&Workload>) -> Result<RestorePlan, Error> {
    let (ns, container, carrier) = (ctx.target_namespace(), ctx.container(), ctx.carrier_image());
    let store = Store::of(ctx.mount);
    let own = store.data()?;
    // Entries of earlier versions in Gefyra's shared ConfigMap count too
    // (the mount's own win where both have one).
    let legacy = Store::legacy(ctx.mount).data()?;
    let mut data: BTreeMap<String, String> = legacy
        .iter()
        .filter(|(key, _)| key.starts_with(&format!("{ns}.")))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    data.extend(own.iter().map(|(k, v)| (k.clone(), v.clone())));
    let (entries, unreadable) = restore::of_target(&data, ns, &ctx.target_name());
    restore::report_ignored(&store, &unreadable);
    let entries: BTreeMap<String, Entry> = entries
        .into_iter()
        .filter(|(_, e)| e.container.as_deref().is_none_or(|c| c == container))
        .collect();
    let mut pods: BTreeMap<String, Pod> = BTreeMap::new();
    if let Some(workload) = workload {
        for pod in ctx.original_pods(workload)? {
            pods.insert(pods::name(&pod).to_string(), pod);
        }
    }
    for entry in entries.values() {
        let Some(name) = entry.pod.as_deref() else {
            continue;
        };
        if !pods.contains_key(name)
            && let Some(pod) = cluster::get::<Pod>(ns, name)?
            && !pods::is_terminating(&pod)
        {
            pods.insert(name.to_string(), pod);
        }
    }
    let template = workload
        .filter(|w| w.kind != TargetKind::Pod)
        .and_then(|w| w.container(container).ok());
    let mut plan = RestorePlan {
        restore: Vec::new(),
        unannotate: Vec::new(),
        entries: entries.keys().cloned().collect(),
        legacy: Vec::new(),
        unrestorable: Vec::new(),
        others_kept: false,
    };
    let mut refused = Vec::new();
    for (name, pod) in pods {
        let annotated = original::from_pod(&pod, container, carrier);
        // What `put_back::settled` takes for nothing to do is what this
        // skips: no Carrier2 asked for and no copy of the original.
        if !pods::asks_for(&pod, container, carrier) {
            if annotated != original::Copy::Absent || original::carries_patch_annotations(&pod) {
                plan.unannotate.push(pod);
            }
            continue;
        }
        let found = restore::lookup(&data, ns, &name, container);
        if let Some((key, _)) = &found
            && !plan.entries.contains(key)
        {
            plan.entries.push(key.clone());
        }
        let stored = original::from_entry(found.map(|(_, e)| e), &pod, carrier);
        match original::choose(stored, annotated) {
            Err(why) => refused.push(format!("pod `{name}`: {why}")),
            Ok(original::Choice::Use { original, .. }) => plan.restore.push((pod, original)),
            // No copy anywhere: a template knows what its pods run.
            Ok(original::Choice::Unknown) => match &template {
                Some(template) => plan.restore.push((
                    pod,
                    OriginalConfig {
                        image: template.image.clone(),
                        command: template.command.clone(),
                        args: template.args.clone(),
                    },
                )),
                None => plan.unrestorable.push(format!(
                    "pod `{name}` runs {carrier} and neither {} nor the pod has its original",
                    store.describe()
                )),
            },
        }
    }
    plan.others_kept = own.keys().any(|key| !plan.entries.contains(key));
    plan.legacy = plan
        .entries
        .iter()
        .filter(|key| legacy.contains_key(*key))
        .cloned()
        .collect();
    if !refused.is_empty() {
        return Err(Error::failed(format!(
            "refusing to restore {} in namespace `{ns}`, nothing was changed: {}; fix or remove \
             the entry in {} (the pod's annotation `{}` is the other copy) so that one \
             trustworthy copy is left",
            ctx.target,
            refused.join("; "),
            store.describe(),
            original::ANNOTATION
        )));
    }
    Ok(plan)
}

impl RestorePlan {
    /// Puts every original back in its pod, and only then drops the
    /// entries, all in one write. The ConfigMap as that write left it, if
    /// there was one.
    ///
    /// Each pod gets its original image back in place (its container
    /// restarts on it), which makes it again exactly what it was: Carrier2
    /// changed the image and nothing else. A Deployment or StatefulSet is
    /// restarted (as `kubectl rollout restart`, Gefyra's restore) only when
    /// some pod cannot be made exact in place (its command or args differ
    /// from the saved original, and those cannot change in a pod): its
    /// template makes new ones. Restarting always would roll every pod a
    /// second time, stamp the user's template, and, for 200 mounts at once,
    /// more than double the API server's work of the restore.
    fn apply(self, ctx: &Ctx, workload: Option<&Workload>) -> Result<Applied, Error> {
        let has_template = workload.is_some_and(|w| w.kind != TargetKind::Pod);
        // The pods given their image back, by image: one Event each.
        let mut restored: BTreeMap<String, Vec<&str>> = BTreeMap::new();
        let outcome = self
            .actions(ctx.container(), has_template)
            .into_iter()
            .try_for_each(|action| match action {
                Action::Restart => workload.map_or(Ok(()), restart_workload),
                Action::Restore(pod, original) => {
                    if let Some(image) = restore_pod(ctx, pod, ctx.container(), Some(original))? {
                        restored.entry(image).or_default().push(pods::name(pod));
                    }
                    Ok(())
                }
                Action::Unannotate(pod) => restore_pod(ctx, pod, ctx.container(), None).map(drop),
            });
        // What was done is said even when a later write failed.
        for (image, pods) in &restored {
            api::pods_event(
                EventType::Normal,
                "PodRestored",
                ctx.target_namespace(),
                pods,
                &format!("container `{}` runs {image} again", ctx.container()),
            );
        }
        outcome?;
        Ok(Applied {
            images: restored.values().map(Vec::len).sum(),
            left: Store::of(ctx.mount).remove_all(&self.entries)?,
            legacy_left: Store::legacy(ctx.mount).remove_all(&self.legacy)?,
        })
    }

    /// The writes to the pods and the workload, in an order that leaves a
    /// later call able to finish whatever write the operator dies before:
    /// the restart comes first, since patching a pod back takes away what
    /// shows that one is needed (a pod on Carrier2 whose saved original
    /// runs another command); the entries go after all of these.
    fn actions(&self, container: &str, has_template: bool) -> Vec<Action<'_>> {
        let inexact = self.restore.iter().any(|(pod, original)| {
            pods::container(pod, container)
                .is_some_and(|current| runs_another_command(current, original))
        });
        let restart = (has_template && inexact).then_some(Action::Restart);
        restart
            .into_iter()
            .chain(
                self.restore
                    .iter()
                    .map(|(pod, original)| Action::Restore(pod, original)),
            )
            .chain(self.unannotate.iter().map(Action::Unannotate))
            .collect()
    }
}

/// One write of a restore.
#[derive(Debug, PartialEq)]
enum Action<'a> {
    /// Roll the workload's pods from its template.
    Restart,
    /// Give the pod its original image back and drop its copy of it.
    Restore(&'a Pod, &'a OriginalConfig),
    /// Drop the copy from a pod that runs its original already.
    Unannotate(&'a Pod),
}

/// What applying a restore plan did.
struct Applied {
    /// Pods whose image was patched back (they restart onto it).
    images: usize,
    /// The ConfigMap as the removal of the entries left it, if there was one.
    left: Option<ConfigMap>,
    /// Gefyra's shared ConfigMap as the removal of this target's entries
    /// left it, if it had any.
    legacy_left: Option<ConfigMap>,
}

/// Whether `current` runs a command or args other than its original's:
/// those cannot change in a pod, so no patch makes it exact again.
fn runs_another_command(current: &Container, original: &OriginalConfig) -> bool {
    current.command != original.command || current.args != original.args
}

/// Patches the container's image back and drops the pod's copy of its
/// original in the same patch (`original` `None`: only the copy); command
/// and args cannot change in a pod, so they are only compared. The image
/// when it was patched.
fn restore_pod(
    ctx: &Ctx,
    pod: &Pod,
    container: &str,
    original: Option<&OriginalConfig>,
) -> Result<Option<String>, Error> {
    let (ns, name) = (ctx.target_namespace(), pods::name(pod));
    let Some(current) = pods::container(pod, container) else {
        warn!("pod {name} has no container {container}; nothing to restore in it");
        return Ok(None);
    };
    if let Some(original) = original
        && runs_another_command(current, original)
    {
        api::event(
            EventType::Warning,
            "RestoreMismatch",
            &format!(
                "Pod `{name}` in namespace `{ns}`: container `{container}` runs command {:?} \
                 args {:?}, the saved original has {:?} {:?}; a pod's command cannot change in \
                 place: a Deployment or StatefulSet is restarted to make new pods from its \
                 template, a bare Pod keeps it (recreate it if this matters)",
                current.command, current.args, original.command, original.args
            ),
        );
    }
    let image = original
        .and_then(|o| o.image.as_deref())
        .filter(|image| current.image.as_deref() != Some(*image));
    if image.is_none() && !original::carries_patch_annotations(pod) {
        return Ok(None);
    }
    let mut patch = json!({ "metadata": { "annotations": {
        original::ANNOTATION: null,
        original::MOUNT_ANNOTATION: null,
    } } });
    if let Some(image) = image {
        patch["spec"] = json!({ "containers": [{ "name": container, "image": image }] });
    }
    match cluster::patch::<Pod>(ns, name, PatchType::Strategic, &patch) {
        Ok(_) => Ok(image.map(str::to_string)),
        // Deleted meanwhile: nothing left to restore.
        Err(ClusterError::NotFound(_)) => Ok(None),
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
fn lagging_pods(ctx: &Ctx, original_pods: &[Pod]) -> Vec<String> {
    let carrier = ctx.carrier_image();
    let mut lagging = Vec::new();
    for pod in original_pods {
        let name = pods::name(pod);
        let Some(spec) = pods::spec_image(pod, ctx.container()) else {
            continue;
        };
        if pontoon_provider_sdk::image::same_image(spec, carrier) {
            lagging.push(format!("{name} still asks for {carrier}"));
            continue;
        }
        match pods::running_image(pod, ctx.container()) {
            Some(running) if pontoon_provider_sdk::image::same_image(running, spec) => {}
            Some(running) => lagging.push(format!("{name} runs {running}, not {spec} yet")),
            None => lagging.push(format!("{name} has not started {spec} yet")),
        }
    }
    lagging
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

    use crate::pods::tests::pod;

    const CARRIER: &str = "quay.io/gefyra/carrier2:latest";

    fn original(command: &str) -> OriginalConfig {
        OriginalConfig {
            image: Some("nginx".into()),
            command: Some(vec![command.into()]),
            args: None,
        }
    }

    fn on_carrier(name: &str, command: &str) -> Pod {
        let mut p = pod(name, CARRIER, Some(CARRIER), true);
        p.spec.as_mut().unwrap().containers[0].command = Some(vec![command.into()]);
        p
    }

    fn plan(restore: Vec<(Pod, OriginalConfig)>, unannotate: Vec<Pod>) -> RestorePlan {
        RestorePlan {
            restore,
            unannotate,
            entries: Vec::new(),
            legacy: Vec::new(),
            unrestorable: Vec::new(),
            others_kept: false,
        }
    }

    #[test]
    fn a_restart_comes_before_the_patches_that_would_hide_its_reason() {
        let plan = plan(
            vec![
                (on_carrier("web-1", "serve"), original("serve")),
                (on_carrier("web-2", "serve"), original("serve --old")),
            ],
            vec![pod("web-3", "nginx", Some("nginx"), true)],
        );
        let actions = plan.actions("app", true);
        assert_eq!(actions.len(), 4);
        assert_eq!(actions[0], Action::Restart, "{actions:?}");
        assert!(matches!(actions[1], Action::Restore(p, _) if pods::name(p) == "web-1"));
        assert!(matches!(actions[2], Action::Restore(p, _) if pods::name(p) == "web-2"));
        assert!(matches!(actions[3], Action::Unannotate(p) if pods::name(p) == "web-3"));
        // A bare Pod has no template to restart from: it keeps its command.
        assert!(!plan.actions("app", false).contains(&Action::Restart));
    }

    #[test]
    fn pods_that_can_be_made_exact_in_place_are_not_restarted() {
        let plan = plan(
            vec![(on_carrier("web-1", "serve"), original("serve"))],
            Vec::new(),
        );
        let actions = plan.actions("app", true);
        assert_eq!(actions.len(), 1);
        assert!(matches!(actions[0], Action::Restore(..)));
    }

    #[test]
    fn timestamps_are_rfc3339_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_772_366_400), "2026-03-01T12:00:00Z");
        assert_eq!(rfc3339(4_102_444_799), "2099-12-31T23:59:59Z");
    }
}
