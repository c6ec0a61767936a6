//! `install`: for each original pod, save its container's original, put the
//! Carrier2 image in, and once Carrier2 runs, give it its config. Each call
//! does what is possible now and returns; nothing waits inside the guest.

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use pontoon_provider_sdk::{
    TargetKind,
    bridge_mount::{
        Error, Progress, TRANSIENT_RETRY_SECONDS,
        bridges::{self, Bridge},
    },
    cluster::{self, ClusterError, EventType, ExecOutput, PatchType},
    info,
    k8s_openapi::api::core::v1::{Container, Pod, Secret, Service},
    warn,
};
use serde_json::json;

use crate::{
    api::{self, Ctx},
    carrier_config::CarrierConfig,
    configured, names, original, pods,
    prepare::{check_container, tls_parameters},
    probes, put_back,
    restore::{self, Entry, OriginalConfig, Store},
    scripts,
    tls::{SecretRef, TlsParameters},
    workload::Workload,
};

/// Seconds to wait while the pods of a target belong to more than one
/// controller (a rollout).
const ROLLOUT_RETRY_SECONDS: u32 = 10;
/// A step stops starting new work after this long, well inside the host's
/// deadline, and asks to be called again.
const WORK_BUDGET: Duration = Duration::from_secs(5);

/// Where one pod stands.
enum PodState {
    Configured,
    /// Carrier2 took this call's config (it reloaded with it).
    Reconfigured,
    /// Its container was patched to Carrier2 now and restarts on it.
    Patched,
    /// Its container is restarting (with Carrier2) or the pod changed.
    Waiting,
    /// It runs Carrier2, which gets its config from this commit.
    Commit(Commit),
}

/// The script that gives one pod's Carrier2 its config, and what its
/// outcome is reported with.
struct Commit {
    pod: String,
    index: usize,
    container: String,
    ports: Vec<i32>,
    script: String,
}

/// What every pod of one call shares.
struct Plan<'a> {
    ctx: &'a Ctx<'a>,
    workload: &'a Workload,
    template_container: &'a Container,
    tls: TlsParameters,
    store: Store,
    service: String,
    total: usize,
    /// The mount's bridges, rendered into every pod's config.
    bridges: Vec<Bridge>,
}

pub fn install(ctx: &Ctx) -> Result<Progress, Error> {
    let started = Instant::now();
    // Restore entries are written again: an earlier uninstall's note that
    // it dropped them no longer holds.
    put_back::forget();
    let workload = ctx.require_workload()?;
    let template_container = check_container(ctx, &workload)?;
    let ns = ctx.target_namespace();
    let service = names::shadow_service(&workload.name, ctx.container());
    if cluster::get::<Service>(ns, &service)?.is_none() {
        return Err(Error::temporary(
            format!(
                "the shadow Service `{service}` does not exist in namespace `{ns}`; \
                 prepare has not completed"
            ),
            TRANSIENT_RETRY_SECONDS,
        ));
    }
    let pods = ctx.original_pods(&workload)?;
    if pods.is_empty() {
        info!("no pods of {} to patch yet", workload.describe());
        return Ok(Progress::WhenPodsChange);
    }
    let owners = pods::owners(&pods);
    if owners.len() > 1 {
        return Err(Error::temporary(
            format!(
                "the pods of {} belong to {}: a rollout is under way; waiting for it to finish",
                workload.describe(),
                owners.into_iter().collect::<Vec<_>>().join(" and ")
            ),
            ROLLOUT_RETRY_SECONDS,
        ));
    }
    let plan = Plan {
        ctx,
        workload: &workload,
        template_container: &template_container,
        tls: tls_parameters(ctx)?,
        store: Store::of(ctx.mount),
        service,
        total: pods.len(),
        bridges: bridges::list(),
    };
    // The original of every pod is in both places before (and while) it
    // runs Carrier2: first each pod's restore entry, all in one write, and
    // only then any pod patched.
    let mut data = plan.store.data()?;
    restore::report_ignored(
        &plan.store,
        &restore::misplaced_entries(&data, ctx.target_namespace()),
    );
    let mut unsaved = BTreeMap::new();
    let containers = pods
        .iter()
        .map(|pod| {
            let container = plan.container(pod)?;
            plan.keep_original(pod, container, &mut data, &mut unsaved)?;
            Ok(container)
        })
        .collect::<Result<Vec<_>, Error>>()?;
    plan.store.save_all(&unsaved, &data)?;
    let mut waiting = false;
    let mut commits = Vec::new();
    let mut patched = Vec::new();
    let mut out_of_time = false;
    for (index, (pod, container)) in pods.iter().zip(containers).enumerate() {
        if started.elapsed() > WORK_BUDGET {
            out_of_time = true;
            break;
        }
        match plan.pod(pod, container, index)? {
            PodState::Configured => {}
            PodState::Patched => {
                patched.push(pods::name(pod));
                waiting = true;
            }
            PodState::Reconfigured | PodState::Waiting => waiting = true,
            PodState::Commit(commit) => commits.push(commit),
        }
    }
    plan.patched_event(&patched);
    if out_of_time {
        return Ok(Progress::RetryAfter(1));
    }
    // Every pod's config at once: the pods answer in parallel.
    let scripts: Vec<(&str, &str)> = commits
        .iter()
        .map(|c| (c.pod.as_str(), c.script.as_str()))
        .collect();
    let outputs = ctx.run_scripts(&scripts);
    let mut failure = None;
    let mut seen_configured = Vec::new();
    let mut reconfigured: BTreeMap<Vec<i32>, Vec<&str>> = BTreeMap::new();
    for (commit, output) in commits.into_iter().zip(outputs) {
        let pod = &pods[commit.index];
        let ports = commit.ports.clone();
        match plan.committed(commit, output) {
            Ok(state @ (PodState::Configured | PodState::Reconfigured)) => {
                seen_configured.extend(configured::instance(pod, ctx.container()));
                if matches!(state, PodState::Reconfigured) {
                    reconfigured.entry(ports).or_default().push(pods::name(pod));
                }
            }
            Ok(_) => waiting = true,
            // Each pod's outcome is reported; the first failure is returned.
            Err(err) => {
                failure.get_or_insert(err);
            }
        }
    }
    for (ports, names) in &reconfigured {
        plan.configured_event(names, ports);
    }
    // What `ready` may take for done without reading it back at once.
    configured::record(&seen_configured);
    if let Some(err) = failure {
        return Err(err);
    }
    Ok(if waiting {
        Progress::WhenPodsChange
    } else {
        Progress::Done
    })
}

impl Plan<'_> {
    /// One Event for the pods this call patched to Carrier2.
    fn patched_event(&self, patched: &[&str]) {
        api::pods_event(
            EventType::Normal,
            "PodPatched",
            self.ctx.target_namespace(),
            patched,
            &format!(
                "container `{}` now runs {} ({} of the {} pods of {})",
                self.ctx.container(),
                self.ctx.carrier_image(),
                patched.len(),
                self.total,
                self.ctx.target
            ),
        );
    }

    /// One Event for the pods whose Carrier2 took this call's config.
    fn configured_event(&self, pods: &[&str], ports: &[i32]) {
        let ports: Vec<String> = ports.iter().map(i32::to_string).collect();
        api::pods_event(
            EventType::Normal,
            "CarrierConfigured",
            self.ctx.target_namespace(),
            pods,
            &format!(
                "Carrier2 proxies port(s) {} to Service `{}`",
                ports.join(", "),
                self.service
            ),
        );
    }

    /// The target container of `pod`.
    fn container<'p>(&self, pod: &'p Pod) -> Result<&'p Container, Error> {
        pods::container(pod, self.ctx.container()).ok_or_else(|| {
            Error::invalid_input(format!(
                "container `{}` not found in pod `{}` of {}",
                self.ctx.container(),
                pods::name(pod),
                self.workload.describe()
            ))
        })
    }

    /// Puts Carrier2 into `pod` (whose original is kept already), or, once
    /// it runs, the commit of its config.
    fn pod(&self, pod: &Pod, container: &Container, index: usize) -> Result<PodState, Error> {
        let ctx = self.ctx;
        let (ns, name, carrier) = (ctx.target_namespace(), pods::name(pod), ctx.carrier_image());
        let spec_runs_carrier = container
            .image
            .as_deref()
            .is_some_and(|image| pontoon_provider_sdk::image::same_image(image, carrier));
        if !spec_runs_carrier {
            // The pod's own copy of its original comes with the image swap,
            // in one patch: it carries it exactly as long as it runs Carrier2.
            // The resourceVersion makes the patch fail if the pod changed
            // since it was read, so both copies are of what it really ran.
            let patch = json!({
                "metadata": {
                    "resourceVersion": pod.metadata.resource_version,
                    "annotations": {
                        original::ANNOTATION:
                            original::annotation_value(&container.name, &current_config(container)),
                        original::MOUNT_ANNOTATION: ctx.mount.uid,
                    },
                },
                "spec": { "containers": [{ "name": container.name, "image": carrier }] },
            });
            match cluster::patch::<Pod>(ns, name, PatchType::Strategic, &patch) {
                Ok(_) => {}
                // Gone or changed meanwhile: the next call sees the new state.
                Err(ClusterError::NotFound(_) | ClusterError::Conflict(_)) => {
                    return Ok(PodState::Waiting);
                }
                Err(err) => return Err(err.into()),
            }
            return Ok(PodState::Patched);
        }
        match pods::running_image(pod, &container.name) {
            Some(running) if pontoon_provider_sdk::image::same_image(running, carrier) => {}
            _ => return Ok(PodState::Waiting),
        }
        self.commit(pod, container, index).map(PodState::Commit)
    }

    /// Makes sure the original of `container` is in the restore ConfigMap
    /// and, once the pod runs Carrier2, on the pod too. A pod that does not
    /// run Carrier2 yet runs its original: that is what is saved. One that
    /// does has its original in one or both places; a place that lost it
    /// (the ConfigMap deleted, say) gets it again. Copies that disagree or do
    /// not read are refused: nothing is patched.
    fn keep_original(
        &self,
        pod: &Pod,
        container: &Container,
        data: &mut BTreeMap<String, String>,
        unsaved: &mut BTreeMap<String, String>,
    ) -> Result<(), Error> {
        let ctx = self.ctx;
        let (ns, name, carrier) = (ctx.target_namespace(), pods::name(pod), ctx.carrier_image());
        let found = restore::lookup(data, ns, name, &container.name);
        let runs_carrier = container
            .image
            .as_deref()
            .is_some_and(|image| pontoon_provider_sdk::image::same_image(image, carrier));
        if !runs_carrier {
            let entry = self.entry(pod, &container.name, current_config(container));
            return match found {
                Some((key, Err(why))) => Err(Error::failed(format!(
                    "restore entry `{key}` in {} cannot be read ({why}); fix or remove it by hand",
                    self.store.describe()
                ))),
                Some((key, Ok(stored)))
                    if key == entry_key(ns, name, &container.name) && stored == entry =>
                {
                    Ok(())
                }
                _ => {
                    self.save(data, unsaved, &entry);
                    Ok(())
                }
            };
        }
        let stored = original::from_entry(found.map(|(_, e)| e), pod, carrier);
        let annotated = original::from_pod(pod, &container.name, carrier);
        let choice = original::choose(stored, annotated).map_err(|why| {
            Error::failed(format!(
                "pod `{name}` in namespace `{ns}` runs {carrier}, but its original container \
                 `{}` cannot be trusted: {why}; fix or remove the entry in {} (or the pod's \
                 annotation `{}`), carrier2mount will not guess",
                container.name,
                self.store.describe(),
                original::ANNOTATION
            ))
        })?;
        let (original, save_entry, annotate) = match choice {
            original::Choice::Use {
                original,
                missing: None,
            } => (original, false, false),
            original::Choice::Use {
                original,
                missing: Some(original::Place::ConfigMap),
            } => {
                warn!(
                    "pod {name} lost its restore entry; saving it again from the pod's annotation"
                );
                (original, true, false)
            }
            original::Choice::Use {
                original,
                missing: Some(original::Place::Pod),
            } => (original, false, true),
            original::Choice::Unknown => (self.template_original(pod, container)?, true, true),
        };
        if save_entry {
            self.save(
                data,
                unsaved,
                &self.entry(pod, &container.name, original.clone()),
            );
        }
        if annotate {
            let patch = json!({ "metadata": { "annotations": {
                original::ANNOTATION: original::annotation_value(&container.name, &original),
                original::MOUNT_ANNOTATION: ctx.mount.uid,
            } } });
            match cluster::patch::<Pod>(ns, name, PatchType::Merge, &patch) {
                // Gone meanwhile: nothing left to keep.
                Ok(_) | Err(ClusterError::NotFound(_)) => {}
                Err(err) => return Err(err.into()),
            }
        }
        Ok(())
    }

    /// The restore entry of a container of this pod.
    fn entry(&self, pod: &Pod, container: &str, original: OriginalConfig) -> Entry {
        let ctx = self.ctx;
        Entry {
            original_config: original,
            container: Some(container.to_string()),
            pod: Some(pods::name(pod).to_string()),
            pod_uid: pod.metadata.uid.clone(),
            target_namespace: Some(ctx.target_namespace().to_string()),
            target: Some(ctx.target_name()),
            mount: Some(format!("{}/{}", ctx.mount.namespace, ctx.mount.name)),
        }
    }

    /// Notes `entry` as saved in `data` and as still to be written in
    /// `unsaved` (written, all at once, before any pod is patched).
    fn save(
        &self,
        data: &mut BTreeMap<String, String>,
        unsaved: &mut BTreeMap<String, String>,
        entry: &Entry,
    ) {
        let key = entry_key(
            self.ctx.target_namespace(),
            entry.pod.as_deref().unwrap_or_default(),
            entry.container.as_deref().unwrap_or_default(),
        );
        data.insert(key.clone(), entry.encode());
        unsaved.insert(key, entry.encode());
    }

    /// The original of a container that runs Carrier2 with its original
    /// nowhere (both copies lost): a Deployment's or StatefulSet's template
    /// says what its pods run; for a bare Pod there is no template to ask.
    fn template_original(&self, pod: &Pod, container: &Container) -> Result<OriginalConfig, Error> {
        let carrier = self.ctx.carrier_image();
        if self.workload.kind == TargetKind::Pod {
            return Err(Error::failed(format!(
                "pod `{}` in namespace `{}` already runs {carrier} and neither {} nor the pod \
                 has its original container `{}`; carrier2mount will not guess it (recreate \
                 the pod from its manifest)",
                pods::name(pod),
                self.ctx.target_namespace(),
                self.store.describe(),
                container.name
            )));
        }
        warn!(
            "pod {} runs {carrier} without its original anywhere; saving the template's container",
            pods::name(pod)
        );
        Ok(current_config(self.template_container))
    }

    /// The script that writes the Carrier2 config (and TLS files) into the
    /// pod unless it holds them already, and reloads Carrier2.
    fn commit(&self, pod: &Pod, container: &Container, index: usize) -> Result<Commit, Error> {
        let ctx = self.ctx;
        let (ns, name) = (ctx.target_namespace(), pods::name(pod));
        let ports = probes::container_ports(container);
        let (tls, tls_files) = self.tls.resolve(&ports, |secret| read_secret(ns, secret))?;
        let config =
            CarrierConfig::for_container(container, &tls, &self.service, ns, &self.bridges)
                .map_err(|why| {
                    Error::invalid_input(format!("{why} (pod `{name}` in namespace `{ns}`)"))
                })?;
        let files = scripts::desired_files(&config, &tls_files);
        Ok(Commit {
            pod: name.to_string(),
            index,
            container: container.name.clone(),
            ports,
            script: scripts::configure_script(&files),
        })
    }

    /// What the commit's script did in its pod.
    fn committed(
        &self,
        commit: Commit,
        output: Result<ExecOutput, ClusterError>,
    ) -> Result<PodState, Error> {
        let ns = self.ctx.target_namespace();
        let name = &commit.pod;
        let output = match output {
            Ok(output) => output,
            Err(ClusterError::NotFound(_)) => return Ok(PodState::Waiting),
            Err(err) => return Err(err.into()),
        };
        if output.exit_code == 0
            && String::from_utf8_lossy(&output.stdout).trim_end() == scripts::UNCHANGED_MARK
        {
            return Ok(PodState::Configured);
        }
        let stdout = String::from_utf8_lossy(&output.stdout);
        if scripts::reload_succeeded(output.exit_code, &stdout) {
            return Ok(PodState::Reconfigured);
        }
        let all = format!("{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
        let tail = scripts::tail(&all, 4);
        if all.contains(scripts::PANIC_MARK) {
            return Err(Error::failed(format!(
                "Carrier2 in pod `{name}` (namespace `{ns}`, container `{}`) refused its config: {tail}",
                commit.container
            )));
        }
        Err(Error::temporary(
            format!(
                "Carrier2 in pod `{name}` (namespace `{ns}`, container `{}`) did not start with \
                 its config (exit code {}): {tail}",
                commit.container, output.exit_code
            ),
            TRANSIENT_RETRY_SECONDS,
        ))
    }
}

/// What a container runs now, as a restore entry keeps it.
fn current_config(container: &Container) -> OriginalConfig {
    OriginalConfig {
        image: container.image.clone(),
        command: container.command.clone(),
        args: container.args.clone(),
    }
}

fn entry_key(namespace: &str, pod: &str, container: &str) -> String {
    restore::key(namespace, pod, container)
}

/// One value of a Secret in the target namespace, as text.
fn read_secret(namespace: &str, secret: &SecretRef) -> Result<String, Error> {
    let Some(found) = cluster::get::<Secret>(namespace, &secret.name)? else {
        return Err(Error::temporary(
            format!(
                "Secret `{}` named in the mount's TLS parameters does not exist in namespace `{namespace}`",
                secret.name
            ),
            ROLLOUT_RETRY_SECONDS,
        ));
    };
    let Some(value) = found.data.as_ref().and_then(|d| d.get(&secret.key)) else {
        return Err(Error::temporary(
            format!(
                "Secret `{}` in namespace `{namespace}` has no key `{}` (named in the mount's TLS parameters)",
                secret.name, secret.key
            ),
            ROLLOUT_RETRY_SECONDS,
        ));
    };
    String::from_utf8(value.0.clone()).map_err(|_| {
        Error::invalid_input(format!(
            "key `{}` of Secret `{}` in namespace `{namespace}` is not text (PEM expected)",
            secret.key, secret.name
        ))
    })
}
