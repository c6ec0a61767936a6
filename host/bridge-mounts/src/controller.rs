//! The GefyraBridgeMount controller: kube-runtime's `Controller` over the
//! mounts, woken by changes of the target workloads and their pods (watched
//! as metadata only, mapped back to the mounts of their namespace), with a
//! finalizer that makes deletion uninstall.

use pontoon_support::controller_support::{key, trace_id};
use std::{future::Future, sync::Arc, time::Duration};

use futures::StreamExt;
use k8s_openapi::api::{
    apps::v1::{Deployment, StatefulSet},
    core::v1::Pod,
};
use kube::{
    Api, Client, Resource, ResourceExt,
    core::PartialObjectMeta,
    runtime::{
        Controller,
        controller::Action,
        events::Recorder,
        finalizer::{self, finalizer},
        reflector::{ObjectRef, Store},
    },
};
use pontoon_provider_sdk::Target;

use super::{
    admitted::{Admissions, Admitted},
    context::Context,
    crd::{GefyraBridge, GefyraBridgeMount},
    reconcile::{Error, Reconcile},
    settings::MountSettings,
    shared::Shared,
    state::State,
    watch_scope::WatchScope,
};
use crate::bridges::{MOUNT_LABEL, changes::rendering_changes};
use pontoon_plugins::{Discovery, Registry};
use pontoon_support::chaos;
use pontoon_support::controller_support::{
    ApiFailure, ensure_crd, metadata_watch, other_failure, watch_backoff, watch_config,
};
use pontoon_support::health::Health;
use pontoon_support::metrics::{METRICS, ReconcileResult, StateLabels};

/// Our finalizer on every mount: deletion waits for `uninstall`.
pub const FINALIZER: &str = "gefyra.dev/bridge-mount-cleanup";

/// Whether the cluster serves GefyraBridgeMounts: without them none of the
/// domain's controllers runs.
pub async fn ensure_crds(client: &Client, scope: &WatchScope) -> anyhow::Result<()> {
    ensure_crd(
        &mounts_api(client, scope),
        "the cluster has no CRD gefyrabridgemounts.gefyra.dev; install it with `pontoon crds | kubectl apply -f -` (or the Helm chart)",
        "GefyraBridgeMounts",
    )
    .await
}

fn mounts_api(client: &Client, scope: &WatchScope) -> Api<GefyraBridgeMount> {
    match &scope.watch_namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// Runs the controller until `shutdown` completes. The bridge controller,
/// which reads what this one renders, is started beside it with the same
/// [`Shared`].
#[allow(clippy::too_many_arguments)]
pub async fn run(
    client: Client,
    registry: Arc<Registry>,
    recorder: Recorder,
    settings: MountSettings,
    scope: WatchScope,
    health: Arc<Health>,
    shared: Shared,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) -> anyhow::Result<()> {
    let mounts = mounts_api(&client, &scope);
    let controller = Controller::new(mounts, watch_config()).trigger_backoff(watch_backoff());
    let store = controller.store();
    health.expect(CACHE);
    let ready = store.clone();
    tokio::spawn(async move {
        // Polled again and again: the store wakes only its last waiter, and
        // the controller waits on it too.
        loop {
            match tokio::time::timeout(Duration::from_millis(100), ready.wait_until_ready()).await {
                Ok(Ok(())) => break health.set_ready(CACHE, true),
                Ok(Err(_)) => break,
                Err(_) => {}
            }
        }
    });
    let counted = store.clone();
    METRICS.on_scrape(move || count_states(&counted));
    let (bridges_seen, bridges_writer) = kube::runtime::reflector::store();
    let Shared {
        book,
        guard,
        admissions,
    } = shared;
    prune_records(
        admissions.clone(),
        store.clone(),
        scope.watch_namespace.clone(),
    );
    let ctx = Arc::new(Context {
        client: client.clone(),
        registry,
        discovery: Arc::new(Discovery::default()),
        freshness: Arc::default(),
        writes: Arc::default(),
        recorder,
        settings,
        mounts: store.clone(),
        bridges: bridges_seen,
        book,
        seen_whole: Default::default(),
        uninstalled: Default::default(),
        notes: Arc::default(),
        admissions: admissions.clone(),
        guard: guard.clone(),
        every_namespace: scope.watch_namespace.is_none(),
    });
    let bridge_api: Api<GefyraBridge> = match &scope.watch_namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let targets = Targets {
        mounts: store,
        admissions,
    };
    let (pods, deployments, sets) = (targets.clone(), targets.clone(), targets);
    let mounts = controller
        .watches_stream(metadata_watch::<Pod>(&client), move |pod| {
            pods.affected_by(&pod)
        })
        .watches_stream(metadata_watch::<Deployment>(&client), move |d| {
            deployments.affected_by(&d)
        })
        .watches_stream(metadata_watch::<StatefulSet>(&client), move |s| {
            sets.affected_by(&s)
        })
        // A bridge that comes, goes or changes its request is rendered by
        // its mount; the bridge controller's reports wake no mount.
        .watches_stream(rendering_changes(bridge_api, bridges_writer), |bridge| {
            let mount = bridge.labels().get(MOUNT_LABEL)?;
            Some(ObjectRef::new(mount).within(&bridge.namespace()?))
        })
        // Policies that came (or went) decide anew for the mounts that
        // waited for them.
        .reconcile_all_on(guard.changes())
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|outcome| async move {
            match outcome {
                Ok((mount, _)) => {
                    METRICS.reconciled("bridge-mount", ReconcileResult::Ok);
                    tracing::debug!(mount = %mount, "reconciled")
                }
                Err(err) => {
                    METRICS.reconciled("bridge-mount", ReconcileResult::of(Some(&err)));
                    tracing::debug!(error = %err, "reconcile did not complete")
                }
            }
        });
    mounts.await;
    tracing::info!("bridge-mount controller stopped");
    Ok(())
}

/// Once every mount is listed: deletes the admission records of mounts
/// that are gone (a finalizer removed by hand takes a mount away without
/// its cleanup). Only the records of the namespaces it watches: another's
/// are not its to judge.
fn prune_records(
    admissions: Arc<Admissions>,
    mounts: Store<GefyraBridgeMount>,
    namespace: Option<String>,
) {
    tokio::spawn(async move {
        if mounts.wait_until_ready().await.is_err() {
            return;
        }
        let live = mounts.state().iter().filter_map(|m| m.uid()).collect();
        match admissions.prune(&live, namespace.as_deref()).await {
            Ok(0) => {}
            Ok(pruned) => tracing::info!(
                pruned,
                "deleted the admission records of mounts that are gone"
            ),
            Err(err) => tracing::warn!(error = %err, "cannot prune admission records"),
        }
    });
}

/// The readiness part this controller reports (`/readyz`).
const CACHE: &str = "bridge-mount cache";

/// `pontoon_bridge_mounts{state}` from the cache, at each scrape.
fn count_states(store: &Store<GefyraBridgeMount>) {
    let mut counts: std::collections::BTreeMap<String, i64> = State::ALL
        .iter()
        .map(|s| (s.as_str().to_string(), 0))
        .collect();
    for mount in store.state() {
        let state = mount
            .fields
            .state
            .clone()
            .unwrap_or_else(|| State::Requested.as_str().into());
        *counts.entry(state).or_default() += 1;
    }
    for (state, count) in counts {
        METRICS
            .mounts
            .get_or_create(&StateLabels { state })
            .set(count);
    }
}

/// What the watches of targets map their objects to mounts by: the mounts,
/// and what each was admitted for.
#[derive(Clone)]
struct Targets {
    mounts: Store<GefyraBridgeMount>,
    admissions: Arc<Admissions>,
}

impl Targets {
    /// The mounts an object may concern: those targeting its namespace
    /// whose target name starts its name (the workload itself, its pods,
    /// and the provider's copies, which are named after it), by what they
    /// were admitted for (their fields, before admission).
    fn affected_by<K: Resource>(
        &self,
        object: &PartialObjectMeta<K>,
    ) -> Vec<ObjectRef<GefyraBridgeMount>> {
        let Some(namespace) = object.namespace() else {
            return Vec::new();
        };
        let name = object.name_any();
        self.mounts
            .state()
            .iter()
            .filter(|mount| {
                let request = mount
                    .uid()
                    .and_then(|uid| self.admissions.cached(&uid))
                    .unwrap_or_else(|| Admitted::of(mount));
                request.target_namespace == namespace
                    && Target::parse(&request.target)
                        .is_ok_and(|target| name.starts_with(name_stem(&target.name)))
            })
            .map(|mount| ObjectRef::from_obj(&**mount))
            .collect()
    }
}

/// The part of a workload's name its pods and copies keep, however long the
/// name is (Kubernetes and providers cut names to fit 63 characters).
fn name_stem(name: &str) -> &str {
    let end = name
        .char_indices()
        .nth(40)
        .map_or(name.len(), |(index, _)| index);
    &name[..end]
}

#[tracing::instrument(name = "reconcile", skip_all, fields(mount = %key(&*mount), trace_id = %trace_id()))]
async fn reconcile(
    mount: Arc<GefyraBridgeMount>,
    ctx: Arc<Context>,
) -> Result<Action, finalizer::Error<Error>> {
    let api: Api<GefyraBridgeMount> =
        Api::namespaced(ctx.client.clone(), &mount.namespace().unwrap_or_default());
    finalizer(&api, FINALIZER, mount, |event| async {
        match event {
            finalizer::Event::Apply(mount) => {
                let phase = mount.state().map_or("unknown", |s| s.as_str());
                chaos::in_phase(phase, Reconcile::new(&ctx, mount).apply()).await
            }
            finalizer::Event::Cleanup(mount) => {
                chaos::in_phase("DELETING", Reconcile::new(&ctx, mount).cleanup()).await
            }
        }
    })
    .await
}

fn error_policy(
    mount: Arc<GefyraBridgeMount>,
    err: &finalizer::Error<Error>,
    _ctx: Arc<Context>,
) -> Action {
    let name = format!(
        "{}/{}",
        mount.namespace().unwrap_or_default(),
        mount.name_any()
    );
    let kube_error = match err {
        finalizer::Error::CleanupFailed(Error::CleanupPending { message, retry }) => {
            tracing::debug!(mount = %name, "deletion waits: {message}");
            return Action::requeue(*retry);
        }
        finalizer::Error::ApplyFailed(Error::Kube(e))
        | finalizer::Error::CleanupFailed(Error::Kube(e))
        | finalizer::Error::AddFinalizer(e)
        | finalizer::Error::RemoveFinalizer(e) => Some(e),
        _ => None,
    };
    match kube_error {
        Some(e) => ApiFailure::of(e).action(&name, err),
        None => other_failure(&name, err),
    }
}

#[cfg(test)]
mod tests {
    use super::name_stem;

    #[test]
    fn stems_keep_short_names_and_cut_long_ones() {
        assert_eq!(name_stem("web"), "web");
        let long = "a".repeat(60);
        assert_eq!(name_stem(&long).len(), 40);
    }
}
