//! The GefyraBridge controller: reports each bridge's state. It judges the
//! bridge (fields, its mount, its ports), and a valid bridge of an ACTIVE
//! mount is ACTIVE once the mount controller has rendered it into every pod
//! of the mount (the [`Book`]), INSTALLING until then; a bridge whose mount
//! is not ACTIVE waits in REQUESTED and comes back with it. It is the only
//! writer of a bridge's `state`; rendering is the mount controller's.

use pontoon_support::controller_support::{key, trace_id};
use std::{sync::Arc, time::Duration};

use futures::StreamExt;
use k8s_openapi::{api::core::v1::ObjectReference, jiff::Timestamp};
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{Patch, PatchParams},
    runtime::{
        Controller,
        controller::Action,
        events::{Event, EventType, Recorder},
        reflector::{ObjectRef, Store},
    },
};
use serde_json::json;

use super::{
    BridgeSettings,
    book::{Book, fingerprint},
    connections,
    lookup::{self, MOUNT_LABEL},
    sessions,
};
use crate::{
    admitted::{Admissions, Admitted},
    crd::{GefyraBridge, GefyraBridgeMount},
    guard::{Guard, Guarded},
    shared::{Rendered, Shared},
    state::State as MountState,
    timestamps::gefyra_timestamp,
    watch_scope::WatchScope,
};
use pontoon_plugins::Registry;
use pontoon_support::controller_support::{
    ApiFailure, event_note, not_found, watch_backoff, watch_config,
};
use pontoon_support::metrics::{METRICS, ReconcileResult};

/// A bridge's states as Gefyra names them (those Pontoon reports).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BridgeState {
    Requested,
    Installing,
    Active,
    Error,
}

impl BridgeState {
    pub fn as_str(self) -> &'static str {
        match self {
            BridgeState::Requested => "REQUESTED",
            BridgeState::Installing => "INSTALLING",
            BridgeState::Active => "ACTIVE",
            BridgeState::Error => "ERROR",
        }
    }
}

/// Where a bridge stands, with the message its `status` shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub state: BridgeState,
    pub message: String,
}

impl Verdict {
    fn new(state: BridgeState, message: impl Into<String>) -> Self {
        Self {
            state,
            message: message.into(),
        }
    }
}

/// How often a refused bridge is judged again without any change: the
/// target's ports may change without touching the bridge.
const ERROR_RECHECK: Duration = Duration::from_secs(60);

struct Context {
    client: Client,
    settings: BridgeSettings,
    book: Arc<Book>,
    registry: Arc<Registry>,
    guard: Arc<Guard>,
    admissions: Arc<Admissions>,
    recorder: Recorder,
    bridges: Store<GefyraBridge>,
}

/// Runs the controller until `shutdown` completes; a cluster without the
/// GefyraBridge CRD has no bridges to report, and the controller says so
/// and stops.
#[allow(clippy::too_many_arguments)]
pub async fn run(
    client: Client,
    settings: BridgeSettings,
    registry: Arc<Registry>,
    shared: Shared,
    changed: Rendered,
    recorder: Recorder,
    scope: WatchScope,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) -> anyhow::Result<()> {
    let Shared {
        book,
        guard,
        admissions,
    } = shared;
    let (bridges, mounts): (Api<GefyraBridge>, Api<GefyraBridgeMount>) =
        match &scope.watch_namespace {
            Some(ns) => (
                Api::namespaced(client.clone(), ns),
                Api::namespaced(client.clone(), ns),
            ),
            None => (Api::all(client.clone()), Api::all(client.clone())),
        };
    if let Err(err) = bridges.list_metadata(&Default::default()).await
        && not_found(&err)
    {
        tracing::warn!(
            "the cluster has no CRD gefyrabridges.gefyra.dev: no bridge is rendered; \
             install it with `pontoon crds | kubectl apply -f -` (or the Helm chart)"
        );
        return Ok(());
    }
    let controller = Controller::new(bridges, watch_config()).trigger_backoff(watch_backoff());
    let store = controller.store();
    let changes = guard.changes();
    let ctx = Arc::new(Context {
        client,
        settings,
        book,
        registry,
        guard,
        admissions,
        recorder,
        bridges: store.clone(),
    });
    controller
        .watches(mounts, watch_config(), move |mount| {
            bridges_of(&store, &mount)
        })
        .reconcile_on(changed)
        .reconcile_all_on(changes)
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|outcome| async move {
            match outcome {
                Ok(_) => METRICS.reconciled("bridge", ReconcileResult::Ok),
                Err(err) => {
                    METRICS.reconciled("bridge", ReconcileResult::of(Some(&err)));
                    tracing::debug!(error = %err, "bridge reconcile did not complete")
                }
            }
        })
        .await;
    tracing::info!("bridge controller stopped");
    Ok(())
}

fn bridges_of(
    store: &Store<GefyraBridge>,
    mount: &GefyraBridgeMount,
) -> Vec<ObjectRef<GefyraBridge>> {
    lookup::labelled_in(store, mount)
        .iter()
        .map(|b| ObjectRef::from_obj(&**b))
        .collect()
}

#[derive(Debug, thiserror::Error)]
enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
}

#[tracing::instrument(name = "reconcile", skip_all, fields(bridge = %key(&*bridge), trace_id = %trace_id()))]
async fn reconcile(bridge: Arc<GefyraBridge>, ctx: Arc<Context>) -> Result<Action, Error> {
    if bridge.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let verdict = verdict(&bridge, &ctx).await?;
    write(&bridge, &verdict, &ctx).await?;
    Ok(match verdict.state {
        BridgeState::Error => Action::requeue(ERROR_RECHECK),
        _ => Action::await_change(),
    })
}

async fn verdict(bridge: &GefyraBridge, ctx: &Context) -> Result<Verdict, Error> {
    if let Err(why) = ctx.guard.check(Guarded::Bridges).await {
        return Ok(Verdict::new(BridgeState::Error, why));
    }
    let ns = bridge.namespace().unwrap_or_default();
    let Some(mount_name) = bridge.labels().get(MOUNT_LABEL).filter(|m| !m.is_empty()) else {
        return Ok(Verdict::new(
            BridgeState::Error,
            format!(
                "label {MOUNT_LABEL} is missing: set it to the name of the GefyraBridgeMount (in namespace `{ns}`) to bridge"
            ),
        ));
    };
    let mounts: Api<GefyraBridgeMount> = Api::namespaced(ctx.client.clone(), &ns);
    let Some(mount) = mounts.get_opt(mount_name).await? else {
        return Ok(Verdict::new(
            BridgeState::Error,
            format!(
                "GefyraBridgeMount `{mount_name}` (label {MOUNT_LABEL}) does not exist in namespace `{ns}`"
            ),
        ));
    };
    // What the mount was admitted for, or (not yet admitted) what it asks.
    let request = match ctx.admissions.of(&mount.uid().unwrap_or_default()).await? {
        Some(admitted) => admitted,
        None => Admitted::of(&mount),
    };
    let provider = request.provider.as_str();
    if let Some(module) = ctx.registry.provider(provider)
        && !module.renders_bridges()
    {
        return Ok(Verdict::new(
            BridgeState::Error,
            format!(
                "GefyraBridgeMount `{mount_name}` is served by provider `{provider}`, which renders \
                 no bridges (it does not import pontoon:provider/bridges); use a mount of carrier2mount"
            ),
        ));
    }
    if let Some(waiting) = connection_verdict(bridge, ctx) {
        return Ok(waiting);
    }
    let siblings: Vec<GefyraBridge> = lookup::labelled_in(&ctx.bridges, &mount)
        .iter()
        .map(|b| (**b).clone())
        .collect();
    let siblings = if siblings.iter().any(|b| b.name_any() == bridge.name_any()) {
        siblings
    } else {
        // The store has not seen it yet.
        siblings.into_iter().chain([bridge.clone()]).collect()
    };
    let ports = lookup::container_ports(&ctx.client, &request).await;
    let mut judged = lookup::judge_all_off_executor(
        &mount,
        &request,
        siblings,
        ports,
        ctx.settings.max_per_mount,
    )
    .await;
    lookup::refuse_outside(&ctx.client, &ctx.settings.destinations, &mut judged).await;
    let Some((_, judgement)) = judged.into_iter().find(|(n, _)| *n == bridge.name_any()) else {
        return Ok(Verdict::new(BridgeState::Requested, "being judged"));
    };
    let record = match judgement {
        Ok(record) => record,
        Err(why) => return Ok(Verdict::new(BridgeState::Error, why)),
    };
    let mount_state = mount.state().ok();
    if mount_state != Some(MountState::Active) {
        let is = mount
            .fields
            .state
            .as_deref()
            .unwrap_or(MountState::Requested.as_str());
        return Ok(Verdict::new(
            BridgeState::Requested,
            format!(
                "waiting for GefyraBridgeMount `{mount_name}` to be ACTIVE (it is {is}); the bridge comes back with it"
            ),
        ));
    }
    let current = bridge.bridge.state.as_deref();
    let uid = mount.uid().unwrap_or_default();
    let rendered = ctx.book.rendered(&uid);
    let active = Verdict::new(
        BridgeState::Active,
        format!("in the Carrier2 config of every pod of GefyraBridgeMount `{mount_name}`"),
    );
    Ok(match rendered {
        Some(rendered) if rendered.get(&record.name) == Some(&fingerprint(&record)) => active,
        // Nothing known since the operator started: a bridge already
        // ACTIVE stays so until the mount has rendered once more.
        None if current == Some(BridgeState::Active.as_str()) => active,
        _ => Verdict::new(
            BridgeState::Installing,
            format!("being rendered into the pods of GefyraBridgeMount `{mount_name}`"),
        ),
    })
}

/// For a bridge naming a connection provider: a refusal when the provider
/// is unknown or the client missing, a wait while its client has no
/// endpoint (not connected yet, or gone for longer than the grace).
fn connection_verdict(bridge: &GefyraBridge, ctx: &Context) -> Option<Verdict> {
    let provider = bridge.bridge.connection_provider.as_deref()?;
    // Gefyra's own: its bridges name their endpoint in `destinationIP`.
    if provider == STOWAWAY {
        return None;
    }
    if ctx.registry.connection(provider).is_none() {
        let loaded: Vec<&str> = ctx.registry.connection_names().collect();
        return Some(Verdict::new(
            BridgeState::Error,
            format!(
                "connectionProvider `{provider}` is not a loaded connection provider (loaded: {}); \
                 name one of them, or `{STOWAWAY}` with destinationIP",
                if loaded.is_empty() {
                    "none".to_string()
                } else {
                    loaded.join(", ")
                }
            ),
        ));
    }
    let Some(client) = connections::client_of(bridge) else {
        return Some(Verdict::new(
            BridgeState::Error,
            format!(
                "client is missing: connectionProvider `{provider}` connects the bridge to the \
                 client it names (for `tunnel`, your Kubernetes user name)"
            ),
        ));
    };
    let has_endpoint = bridge
        .bridge
        .cluster_endpoint
        .as_ref()
        .is_some_and(|e| !e.is_empty());
    if has_endpoint {
        return None;
    }
    let made = bridge.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let standing =
        ctx.settings
            .sessions
            .standing(provider, client, made, &ctx.settings.connections);
    let message = match standing {
        Some(sessions::Standing::Away { since, deleted_at }) => format!(
            "client `{client}` has been gone since {since}: requests go to the shadow until it \
             reconnects (`pontoon bridge`); the bridge is deleted at {deleted_at}"
        ),
        _ => format!("waiting for connection provider `{provider}` to connect client `{client}`"),
    };
    Some(Verdict::new(BridgeState::Requested, message))
}

/// Gefyra's connection provider, which Pontoon does not run.
const STOWAWAY: &str = "stowaway";

/// Writes the verdict when it differs from what the bridge shows: `state`,
/// the time it was entered in `stateTransitions`, and `status.message`;
/// bound to the version read, so a concurrent edit makes it look again.
async fn write(bridge: &GefyraBridge, verdict: &Verdict, ctx: &Context) -> Result<(), Error> {
    let fields = &bridge.bridge;
    let shown_message = fields
        .status
        .as_ref()
        .and_then(|s| s.get("message"))
        .and_then(|m| m.as_str());
    let state = verdict.state.as_str();
    if fields.state.as_deref() == Some(state) && shown_message == Some(verdict.message.as_str()) {
        return Ok(());
    }
    let entered = fields.state.as_deref() != Some(state);
    let mut patch = json!({
        "metadata": {"resourceVersion": bridge.resource_version()},
        "state": state,
        "status": {"message": verdict.message},
    });
    if entered {
        patch["stateTransitions"] = json!({ state: gefyra_timestamp(Timestamp::now()) });
    }
    let api: Api<GefyraBridge> =
        Api::namespaced(ctx.client.clone(), &bridge.namespace().unwrap_or_default());
    api.patch(
        &bridge.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    tracing::info!(
        state, message = %verdict.message, "bridge state");
    if entered {
        let (type_, reason) = match verdict.state {
            BridgeState::Error => (EventType::Warning, "BridgeInvalid"),
            BridgeState::Active => (EventType::Normal, "BridgeActive"),
            BridgeState::Installing => (EventType::Normal, "BridgeInstalling"),
            BridgeState::Requested => (EventType::Normal, "BridgeWaiting"),
        };
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(event_note(verdict.message.clone())),
            action: "Bridge".into(),
            secondary: None,
        };
        let reference: ObjectReference = bridge.object_ref(&());
        if let Err(err) = ctx.recorder.publish(&event, &reference).await {
            tracing::debug!(error = %err, "cannot publish a bridge Event");
        }
    }
    Ok(())
}

fn error_policy(bridge: Arc<GefyraBridge>, err: &Error, _ctx: Arc<Context>) -> Action {
    let name = format!(
        "{}/{}",
        bridge.namespace().unwrap_or_default(),
        bridge.name_any()
    );
    let Error::Kube(e) = err;
    ApiFailure::of(e).action(&name, err)
}
