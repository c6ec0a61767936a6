//! Connections: how the requests of a bridge that names a connection
//! provider module in `connectionProvider` (`tunnel`, `pontoon bridge`'s
//! relay) reach its client, a developer's machine.
//!
//! The bridges of one client (same provider, same `client`) are served
//! together: the provider sets up what the client needs (`connect`, with
//! every port of every bridge) and says whether the client's session is
//! live (`session`). This controller writes the endpoints into each
//! bridge's `clusterEndpoint` while the session is live or gone for less
//! than the grace (`--session-grace`), and removes them after: the judge
//! then finds no endpoint, the mount renders the bridge no more, and its
//! requests go to the shadow until the client comes back. A client gone for
//! longer than the limit (`--session-limit`) has its bridges deleted, each
//! judged from its own creation when that is later ([`Standing::of_bridge`]).
//! What no bridge names any more is removed (`disconnect`) once idle for
//! `--client-keep` ([`Idle`]), after a restart too.
//!
//! The session's standing is kept in [`Sessions`] for the bridge
//! controller, which says in each bridge's status why it waits.

use pontoon_support::controller_support::{key, trace_id};
use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    sync::Arc,
    time::Duration,
};

use futures::StreamExt;
use k8s_openapi::{api::core::v1::Pod, jiff::Timestamp};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, Patch, PatchParams},
    runtime::{
        Controller,
        controller::Action,
        reflector::{ObjectRef, Store},
    },
};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::{
    BridgeSettings,
    idle::Idle,
    sessions::{Sessions, Standing},
};
use crate::{crd::GefyraBridge, watch_scope::WatchScope};
use pontoon_plugins::{
    ClusterAccess, ConnectionModule, Registry,
    bindings::connection_world::{Client as ConnClient, PortRequest, Settings},
};
use pontoon_support::controller_support::{ApiFailure, watch_backoff, watch_config};
use pontoon_support::metrics::{METRICS, ReconcileResult};

/// The label a connection provider puts on the pods that show whether a
/// client is connected (`wit/connection.wit`).
pub const CLIENT_LABEL: &str = "pontoon.dev/connection-client";

/// Where a bridge's endpoints are, whether or not they are in
/// `clusterEndpoint` now (JSON: remote port → `host:port`): what `pontoon
/// bridge` connects to when its client comes back after the grace, while
/// the bridge is out of Carrier2's config. Only the client's own command
/// reads it; a value written by hand misleads no one else.
pub const ENDPOINTS_ANNOTATION: &str = "pontoon.dev/endpoints";

/// How often what no bridge names is looked for.
const SWEEP_EVERY: Duration = Duration::from_secs(10);
/// How soon an incomplete connection is tried again.
const INCOMPLETE_RETRY: Duration = Duration::from_secs(2);
/// The safety net: a live client's bridges are looked at this often.
const LIVE_RECHECK: Duration = Duration::from_secs(60);

/// A client's id: what its objects are named after (lower-case hex, 16
/// characters, the start of the name's SHA-256). `pontoon bridge` computes
/// the same to find its relay.
pub fn client_id(name: &str) -> String {
    let digest = Sha256::digest(name.as_bytes());
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// The connection module a bridge names, if it names a loaded one.
pub fn module_of(registry: &Registry, bridge: &GefyraBridge) -> Option<Arc<ConnectionModule>> {
    registry.connection(bridge.bridge.connection_provider.as_deref()?)
}

/// The client a bridge names, if any.
pub fn client_of(bridge: &GefyraBridge) -> Option<&str> {
    bridge
        .bridge
        .client
        .as_deref()
        .map(str::trim)
        .filter(|c| !c.is_empty())
}

struct Context {
    client: Client,
    registry: Arc<Registry>,
    settings: BridgeSettings,
    operator_namespace: String,
    bridges: Store<GefyraBridge>,
    discovery: Arc<pontoon_plugins::Discovery>,
    freshness: Arc<pontoon_plugins::Freshness>,
    writes: Arc<pontoon_plugins::WriteTurns>,
    idle: Idle,
}

impl Context {
    fn provider_settings(&self) -> Settings {
        Settings {
            operator_namespace: self.operator_namespace.clone(),
            relay_image: self.settings.connections.relay_image.clone(),
        }
    }

    fn access(&self, module: &ConnectionModule, id: &str) -> ClusterAccess {
        ClusterAccess {
            client: self.client.clone(),
            discovery: self.discovery.clone(),
            freshness: self.freshness.clone(),
            writes: self.writes.clone(),
            scope: module.scope_for(&self.provider_settings(), id),
            field_manager: module.name().to_string(),
            events: None,
            journal: None,
            bridges: Arc::new([]),
            notes: None,
        }
    }
}

/// Runs the controller until `shutdown` completes. Does nothing (and says
/// so once) when no connection provider is loaded.
pub async fn run(
    client: Client,
    settings: BridgeSettings,
    operator_namespace: String,
    registry: Arc<Registry>,
    scope: WatchScope,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) -> anyhow::Result<()> {
    if registry.connection_names().next().is_none() {
        tracing::info!("no connection provider loaded: bridges name their endpoints themselves");
        return Ok(());
    }
    let bridges: Api<GefyraBridge> = match &scope.watch_namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let pods: Api<Pod> = Api::namespaced(client.clone(), &operator_namespace);
    let controller = Controller::new(bridges, watch_config()).trigger_backoff(watch_backoff());
    let store = controller.store();
    let ctx = Arc::new(Context {
        client,
        registry,
        settings,
        operator_namespace,
        bridges: store.clone(),
        discovery: Arc::default(),
        freshness: Arc::default(),
        writes: Arc::default(),
        idle: Idle::default(),
    });
    let shutdown = futures::FutureExt::shared(Box::pin(shutdown));
    let sweeper = tokio::spawn(sweep(ctx.clone(), shutdown.clone()));
    let by_pod = store.clone();
    controller
        .watches(pods, watch_config().labels(CLIENT_LABEL), move |pod| {
            let id = pod.labels().get(CLIENT_LABEL).cloned().unwrap_or_default();
            by_pod
                .state()
                .into_iter()
                .filter(|b| client_of(b).map(client_id).as_deref() == Some(id.as_str()))
                .map(|b| ObjectRef::from_obj(&*b))
                .collect::<Vec<_>>()
        })
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|outcome| async move {
            match outcome {
                Ok(_) => METRICS.reconciled("connection", ReconcileResult::Ok),
                Err(err) => {
                    METRICS.reconciled("connection", ReconcileResult::of(Some(&err)));
                    tracing::debug!(error = %err, "connection reconcile did not complete")
                }
            }
        })
        .await;
    sweeper.abort();
    tracing::info!("connection controller stopped");
    Ok(())
}

#[derive(Debug, thiserror::Error)]
enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("{0}")]
    Provider(#[from] pontoon_plugins::CallError),
}

/// The bridges served with `bridge`: those of the same provider and client
/// that are not being deleted, `bridge` included.
fn group_of(store: &Store<GefyraBridge>, bridge: &GefyraBridge) -> Vec<GefyraBridge> {
    let key = |b: &GefyraBridge| {
        (
            b.bridge.connection_provider.clone(),
            client_of(b).map(str::to_string),
        )
    };
    let wanted = key(bridge);
    let mut group: Vec<GefyraBridge> = store
        .state()
        .into_iter()
        .filter(|b| key(b) == wanted && b.metadata.deletion_timestamp.is_none())
        .map(|b| (*b).clone())
        .collect();
    if bridge.metadata.deletion_timestamp.is_none()
        && !group.iter().any(|b| b.uid() == bridge.uid())
    {
        group.push(bridge.clone());
    }
    group.sort_by_key(|b| (b.namespace(), b.name_any()));
    group
}

/// The ports of a bridge that need an endpoint: one per `local:remote`
/// mapping (those the judge would refuse are asked for anyway; the judge
/// says what is wrong with them).
fn port_requests(bridge: &GefyraBridge) -> Vec<PortRequest> {
    let uid = bridge.uid().unwrap_or_default();
    let name = format!(
        "{}/{}",
        bridge.namespace().unwrap_or_default(),
        bridge.name_any()
    );
    let mut seen = BTreeSet::new();
    bridge
        .bridge
        .port_mappings
        .iter()
        .flatten()
        .filter_map(|mapping| {
            let (local, remote) = super::judge::parse_mapping(mapping)?;
            seen.insert(remote).then(|| PortRequest {
                bridge_uid: uid.clone(),
                bridge: name.clone(),
                port: remote,
                local_port: local,
            })
        })
        .collect()
}

#[tracing::instrument(name = "connect", skip_all, fields(bridge = %key(&*bridge), trace_id = %trace_id()))]
async fn reconcile(bridge: Arc<GefyraBridge>, ctx: Arc<Context>) -> Result<Action, Error> {
    let Some(module) = module_of(&ctx.registry, &bridge) else {
        return Ok(Action::await_change());
    };
    let Some(name) = client_of(&bridge).map(str::to_string) else {
        return Ok(Action::await_change());
    };
    let group = group_of(&ctx.bridges, &bridge);
    if group.is_empty() {
        // Its last bridge is being deleted: the sweep removes the rest.
        return Ok(Action::await_change());
    }
    let id = client_id(&name);
    let client = ConnClient {
        name: name.clone(),
        id: id.clone(),
        settings: ctx.provider_settings(),
    };
    let ports: Vec<PortRequest> = group.iter().flat_map(port_requests).collect();
    let connection = module
        .connect(ctx.access(&module, &id), &client, &ports)
        .await?;
    let session = module.session(ctx.access(&module, &id), &client).await?;
    let now = Timestamp::now();
    let settings = &ctx.settings.connections;
    ctx.sessions().set(module.name(), &name, session.clone());
    let mut endpoints: HashMap<String, BTreeMap<String, String>> = HashMap::new();
    for endpoint in &connection.endpoints {
        endpoints
            .entry(endpoint.bridge_uid.clone())
            .or_default()
            .insert(endpoint.port.to_string(), endpoint.address.clone());
    }
    let mut next = None;
    let mut expired = 0;
    for b in &group {
        let made = b.metadata.creation_timestamp.as_ref().map(|t| t.0);
        let own = Standing::of_bridge(&session, made, now, settings);
        if own == Standing::Expired {
            delete(&ctx, b, settings.limit).await?;
            expired += 1;
            continue;
        }
        let known = endpoints
            .remove(&b.uid().unwrap_or_default())
            .unwrap_or_default();
        let served = if own.serves() {
            known.clone()
        } else {
            BTreeMap::new()
        };
        write_endpoints(&ctx, b, served, &known).await?;
        next = next.into_iter().chain(own.next_change(settings, now)).min();
    }
    if expired == group.len() {
        ctx.sessions().forget(module.name(), &name);
        return Ok(Action::await_change());
    }
    if !connection.complete {
        next = Some(INCOMPLETE_RETRY);
    }
    Ok(Action::requeue(
        next.unwrap_or(LIVE_RECHECK).min(LIVE_RECHECK),
    ))
}

impl Context {
    fn sessions(&self) -> &Sessions {
        &self.settings.sessions
    }
}

/// Makes the bridge's `clusterEndpoint` exactly `wanted` (merge patch:
/// keys no longer wanted are set to null) and its [`ENDPOINTS_ANNOTATION`]
/// `known`, bound to the version read.
async fn write_endpoints(
    ctx: &Context,
    bridge: &GefyraBridge,
    wanted: BTreeMap<String, String>,
    known: &BTreeMap<String, String>,
) -> Result<(), Error> {
    let current = bridge.bridge.cluster_endpoint.clone().unwrap_or_default();
    let same = current.len() == wanted.len()
        && wanted
            .iter()
            .all(|(k, v)| current.get(k).and_then(Value::as_str) == Some(v.as_str()));
    let known_text = serde_json::to_string(known).unwrap_or_default();
    let annotated = bridge.annotations().get(ENDPOINTS_ANNOTATION) == Some(&known_text);
    if same && annotated {
        return Ok(());
    }
    let value = if wanted.is_empty() {
        Value::Null
    } else {
        let mut map: serde_json::Map<String, Value> = current
            .keys()
            .filter(|k| !wanted.contains_key(*k))
            .map(|k| (k.clone(), Value::Null))
            .collect();
        map.extend(wanted.iter().map(|(k, v)| (k.clone(), json!(v))));
        Value::Object(map)
    };
    let mut patch = json!({
        "metadata": {
            "resourceVersion": bridge.resource_version(),
            "annotations": {ENDPOINTS_ANNOTATION: known_text},
        },
    });
    if !same {
        patch["clusterEndpoint"] = value;
    }
    let api: Api<GefyraBridge> =
        Api::namespaced(ctx.client.clone(), &bridge.namespace().unwrap_or_default());
    let name = bridge.name_any();
    let mut tries = 0;
    loop {
        match api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => break,
            // Bound to the version read, so that endpoints asked for by an
            // older set of ports are never written. A bridge's creation races
            // its status (the bridge controller writes it at the same time):
            // when what the endpoints were asked from is unchanged, the write
            // is made again on the newer version at once, instead of a
            // requeue that let the mount install Carrier2 without the bridge.
            Err(err) if tries < WRITE_TRIES && ApiFailure::of(&err) == ApiFailure::Raced => {
                tries += 1;
                let Some(fresh) = api.get_opt(&name).await? else {
                    return Ok(());
                };
                if !asks_the_same(bridge, &fresh) {
                    return Err(err.into());
                }
                patch["metadata"]["resourceVersion"] = json!(fresh.resource_version());
            }
            Err(err) => return Err(err.into()),
        }
    }
    tracing::info!(
        bridge = %key(bridge),
        endpoints = ?wanted,
        "bridge endpoints"
    );
    Ok(())
}

async fn delete(ctx: &Context, bridge: &GefyraBridge, limit: Duration) -> Result<(), Error> {
    let api: Api<GefyraBridge> =
        Api::namespaced(ctx.client.clone(), &bridge.namespace().unwrap_or_default());
    let params = DeleteParams {
        preconditions: bridge.uid().map(|uid| kube::api::Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(&bridge.name_any(), &params).await {
        Ok(_) => {
            tracing::info!(
                bridge = %key(bridge),
                "deleted: its client was gone for longer than {}s",
                limit.as_secs()
            );
            Ok(())
        }
        Err(err) if pontoon_support::controller_support::not_found(&err) => Ok(()),
        Err(err) => Err(err.into()),
    }
}

/// How often an endpoint write that lost a race to another write of the
/// bridge is made again at once.
const WRITE_TRIES: usize = 3;

/// Whether `fresh` is the bridge `read` was, asking for the same endpoints:
/// same object, provider, client and ports.
fn asks_the_same(read: &GefyraBridge, fresh: &GefyraBridge) -> bool {
    read.uid() == fresh.uid()
        && fresh.metadata.deletion_timestamp.is_none()
        && read.bridge.connection_provider == fresh.bridge.connection_provider
        && client_of(read) == client_of(fresh)
        && read.bridge.port_mappings == fresh.bridge.port_mappings
}

/// Removes, every [`SWEEP_EVERY`], what the connection providers set up for
/// clients no bridge names any more. Only once the bridges are all known:
/// an empty cache at start would make every client look unnamed.
async fn sweep(ctx: Arc<Context>, shutdown: impl std::future::Future<Output = ()>) {
    let run = async {
        // Polled again and again: the store wakes only its last waiter, and
        // the controller waits on it too.
        loop {
            match tokio::time::timeout(Duration::from_millis(100), ctx.bridges.wait_until_ready())
                .await
            {
                Ok(Ok(())) => break,
                Ok(Err(_)) => return,
                Err(_) => {}
            }
        }
        let mut every = tokio::time::interval(SWEEP_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            sweep_once(&ctx).await;
        }
    };
    tokio::select! {
        () = run => {}
        () = shutdown => {}
    }
}

async fn sweep_once(ctx: &Context) {
    let settings = ctx.provider_settings();
    let names: Vec<String> = ctx
        .registry
        .connection_names()
        .map(str::to_string)
        .collect();
    for name in names {
        let Some(module) = ctx.registry.connection(&name) else {
            continue;
        };
        let named: BTreeSet<String> = ctx
            .bridges
            .state()
            .iter()
            .filter(|b| b.bridge.connection_provider.as_deref() == Some(name.as_str()))
            .filter_map(|b| client_of(b).map(client_id))
            .collect();
        let access = ctx.access(&module, "");
        let ids = match module.clients(access, &settings).await {
            Ok(ids) => ids,
            Err(err) => {
                tracing::warn!(module = %name, error = %err, "cannot list the clients set up");
                continue;
            }
        };
        let unnamed: Vec<String> = ids.into_iter().filter(|id| !named.contains(id)).collect();
        let keep = ctx.settings.connections.keep;
        for id in ctx
            .idle
            .due(&name, &unnamed, std::time::Instant::now(), keep)
        {
            match module
                .disconnect(ctx.access(&module, &id), &settings, &id)
                .await
            {
                Ok(done) => {
                    tracing::info!(module = %name, client_id = %id, done, keep_s = keep.as_secs(), "disconnected: no bridge has named the client for the keep (or too many idle clients are kept)")
                }
                Err(err) => {
                    tracing::warn!(module = %name, client_id = %id, error = %err, "cannot disconnect")
                }
            }
        }
    }
}

fn error_policy(bridge: Arc<GefyraBridge>, err: &Error, _ctx: Arc<Context>) -> Action {
    let name = format!(
        "{}/{}",
        bridge.namespace().unwrap_or_default(),
        bridge.name_any()
    );
    match err {
        Error::Kube(e) => ApiFailure::of(e).action(&name, err),
        Error::Provider(_) => {
            tracing::warn!(bridge = %name, error = %err, "connection provider call failed");
            Action::requeue(Duration::from_secs(5))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clients_id_is_stable_short_hex() {
        let id = client_id("alice@example.com");
        assert_eq!(id.len(), 16);
        assert!(
            id.chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        );
        assert_eq!(id, client_id("alice@example.com"));
        assert_ne!(id, client_id("bob@example.com"));
    }

    #[test]
    fn each_remote_port_of_a_bridge_is_asked_for_once() {
        let bridge: GefyraBridge = serde_json::from_value(json!({
            "metadata": {"name": "b", "namespace": "gefyra", "uid": "u1"},
            "portMappings": ["8080:80", "9090:80", "bad", "8443:443"],
        }))
        .unwrap();
        let ports: Vec<(u16, u16)> = port_requests(&bridge)
            .iter()
            .map(|p| (p.port, p.local_port))
            .collect();
        assert_eq!(ports, [(80, 8080), (443, 8443)]);
    }

    #[test]
    fn an_endpoint_write_is_made_again_only_for_the_same_request() {
        let bridge = |rv: &str, uid: &str, client: &str, ports: &[&str], status: &str| {
            serde_json::from_value::<GefyraBridge>(json!({
                "metadata": {"name": "b", "namespace": "gefyra", "uid": uid, "resourceVersion": rv},
                "connectionProvider": "tunnel", "client": client, "portMappings": ports,
                "state": status,
            }))
            .unwrap()
        };
        let read = bridge("1", "u1", "alice", &["8080:80"], "REQUESTED");
        // Only its status changed meanwhile: the same request.
        assert!(asks_the_same(
            &read,
            &bridge("2", "u1", "alice", &["8080:80"], "ACTIVE")
        ));
        // Its ports, its client, or the object itself changed: read afresh.
        assert!(!asks_the_same(
            &read,
            &bridge("2", "u1", "alice", &["8080:81"], "REQUESTED")
        ));
        assert!(!asks_the_same(
            &read,
            &bridge("2", "u1", "bob", &["8080:80"], "REQUESTED")
        ));
        assert!(!asks_the_same(
            &read,
            &bridge("2", "u2", "alice", &["8080:80"], "REQUESTED")
        ));
    }
}
