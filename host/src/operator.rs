//! `pontoon run`: the operator process. Loads the provider modules, then runs
//! every controller in this one process until SIGTERM or Ctrl-C.

use std::{net::SocketAddr, path::PathBuf, sync::Arc};

use anyhow::Context as _;
use futures::FutureExt;
use kube::{
    Client,
    client::ClientBuilder,
    runtime::events::{Recorder, Reporter},
};

use crate::{
    bridge_mount::{self, WatchScope},
    controller_support::MissingCrds,
    gateway::{self, edge::context::GatewaySettings},
    health::{self, Health},
    leader::{self, Fence, FenceLayer, LeaderElector, keep_leading, lead},
    metrics::METRICS,
    plugins::{Limits, PluginRuntime, Worlds, grants::Grants},
};

/// The controllers `pontoon run` can run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ControllerSet {
    /// Every controller whose CRDs the cluster has (the others are skipped with a warning).
    All,
    /// GefyraBridgeMounts.
    BridgeMounts,
    /// GatewayClass, Gateway and HTTPRoute.
    GatewayApi,
}

/// Where the operator image keeps its bundled provider modules.
pub const IMAGE_PROVIDER_DIR: &str = "/usr/lib/pontoon/providers";
/// Where `make providers` puts them in a checkout.
pub const CHECKOUT_PROVIDER_DIR: &str = "dist/providers";

pub struct Options {
    /// Provider directory; `None` for the default.
    pub providers: Option<PathBuf>,
    /// Directories of further modules, loaded after `providers`.
    pub custom_providers: Vec<PathBuf>,
    /// What each provider module may declare; `None`: what it declares.
    pub grants: Option<PathBuf>,
    pub settings: bridge_mount::MountSettings,
    pub limits: Limits,
    /// Where compiled modules are kept across restarts; `None` compiles at every start.
    pub cache_dir: Option<PathBuf>,
    pub scope: WatchScope,
    pub gateway: GatewaySettings,
    pub controllers: Vec<ControllerSet>,
    /// Where `/healthz`, `/readyz` and `/metrics` are served; `None`: nowhere.
    pub metrics_addr: Option<SocketAddr>,
    /// Only the holder of this Lease reconciles; `None`: this process always does.
    pub leader_election: Option<leader::Settings>,
}

/// The readiness part for the provider modules.
const PROVIDERS: &str = "provider modules";
/// The readiness part for reaching the API server.
const API_SERVER: &str = "API server";
/// How often, and how patiently, the API server is asked whether it answers.
const API_SERVER_PROBE: std::time::Duration = std::time::Duration::from_secs(1);
const API_SERVER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// Keeps the `API server` part of `/readyz` current: an operator that
/// cannot reach the API server acts on nothing, and says so (the
/// controllers' watches retry by themselves and resume where they were).
async fn probe_api_server(client: Client, health: Arc<Health>) {
    let mut reached_before = None;
    loop {
        let reached = tokio::time::timeout(API_SERVER_TIMEOUT, client.apiserver_version())
            .await
            .is_ok_and(|answer| answer.is_ok());
        if reached_before != Some(reached) {
            if reached {
                tracing::info!("the API server answers");
            } else {
                tracing::warn!("cannot reach the API server: not ready until it answers");
            }
            reached_before = Some(reached);
        }
        health.set_ready(API_SERVER, reached);
        tokio::time::sleep(API_SERVER_PROBE).await;
    }
}

/// The provider directory to use: the one given, else `dist/providers` when it
/// exists (a checkout), else the image's.
pub fn provider_dir(given: Option<PathBuf>) -> PathBuf {
    given.unwrap_or_else(|| {
        let checkout = PathBuf::from(CHECKOUT_PROVIDER_DIR);
        if checkout.is_dir() {
            checkout
        } else {
            PathBuf::from(IMAGE_PROVIDER_DIR)
        }
    })
}

/// The controllers' client: with leader election, one that writes only
/// while this replica's [`Fence`] is open; and the client of the election
/// itself, which takes the Lease while the fence is closed.
fn clients(config: kube::Config, fence: Option<&Fence>) -> anyhow::Result<(Client, Client)> {
    let election = Client::try_from(config.clone())?;
    let controllers = match fence {
        Some(fence) => ClientBuilder::try_from(config)?
            .with_layer(&FenceLayer::new(fence.clone()))
            .build(),
        None => election.clone(),
    };
    Ok((controllers, election))
}

pub async fn run(config: kube::Config, options: Options) -> anyhow::Result<()> {
    let fence = options.leader_election.as_ref().map(|_| Fence::closed());
    let (client, election_client) = clients(config, fence.as_ref())?;
    let health = Arc::new(Health::default());
    health.expect(PROVIDERS);
    health.expect(API_SERVER);
    tokio::spawn(probe_api_server(election_client.clone(), health.clone()));
    if let Some(addr) = options.metrics_addr {
        let listener = health::bind(addr).await?;
        let addr = listener.local_addr().unwrap_or(addr);
        tracing::info!(%addr, "serving /healthz, /readyz and /metrics");
        tokio::spawn(health::serve(listener, health.clone()));
    }
    let dir = provider_dir(options.providers);
    let runtime = match &options.cache_dir {
        Some(dir) => PluginRuntime::with_cache_dir(options.limits, dir)?,
        None => PluginRuntime::new(options.limits)?,
    };
    let started = std::time::Instant::now();
    let mut dirs = vec![dir.as_path()];
    dirs.extend(options.custom_providers.iter().map(PathBuf::as_path));
    let all = options.controllers.is_empty() || options.controllers.contains(&ControllerSet::All);
    let wanted = |set| all || options.controllers.contains(&set);
    let worlds = Worlds {
        providers: wanted(ControllerSet::BridgeMounts),
        filters: wanted(ControllerSet::GatewayApi),
    };
    let mut registry = runtime
        .load_worlds(&dirs, worlds)
        .await
        .context("cannot load the provider modules")?;
    match &options.grants {
        Some(path) => registry.refuse_ungranted(&Grants::read(path)?),
        None => {
            tracing::info!("no --grants file: each provider module may use the scope it declares")
        }
    }
    let providers: Vec<&str> = registry.provider_names().collect();
    let filters: Vec<&str> = registry.filter_names().collect();
    let (from_cache, compiled) = runtime
        .disk_cache_counts()
        .unwrap_or((0, runtime.compiled_count()));
    tracing::info!(
        dir = %dir.display(),
        custom = ?options.custom_providers,
        providers = ?providers,
        filters = ?filters,
        rejected = registry.rejected.len(),
        skipped = registry.skipped.len(),
        from_cache,
        compiled,
        seconds = started.elapsed().as_secs_f64(),
        "provider modules loaded"
    );
    if providers.is_empty() && worlds.providers {
        tracing::warn!(dir = %dir.display(), "no bridge-mount provider loaded: every mount will report ProviderNotFound");
    }
    health.set_ready(PROVIDERS, true);
    let shutdown = shutdown_signal().shared();
    // A standby is ready (it can take over); it starts the controllers, and
    // waits for their caches, once it leads.
    let elector = match (options.leader_election, fence) {
        (Some(settings), Some(fence)) => {
            let mut elector = LeaderElector::new(election_client, settings, fence);
            if !lead(&mut elector, shutdown.clone()).await? {
                return Ok(());
            }
            Some(elector)
        }
        _ => None,
    };
    METRICS.leader.set(1);
    let (lost_tx, lost_rx) = tokio::sync::oneshot::channel::<()>();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let renewing = elector.map(|elector| tokio::spawn(keep_leading(elector, lost_tx, stop_rx)));
    let lost = async move {
        // Without leader election the sender is dropped at once: never lost.
        if lost_rx.await.is_ok() {
            tracing::error!(
                "lost the leader Lease: stopping so that this replica restarts as a standby"
            );
        } else {
            std::future::pending::<()>().await;
        }
    };
    // A shutdown lets the reconciles in flight finish; a lost Lease does not
    // (below): they are cancelled, and the fence refuses their writes
    // meanwhile.
    let stop = shutdown.clone();
    let reporter = Reporter {
        controller: "pontoon".into(),
        instance: std::env::var("POD_NAME").ok(),
    };
    let recorder = Recorder::new(client.clone(), reporter);
    tracing::info!(
        namespace = options.settings.operator_namespace,
        watch_namespace = options.scope.watch_namespace.as_deref().unwrap_or("(all)"),
        "pontoon operator starting"
    );
    let registry = Arc::new(registry);
    let mounts = async {
        if !wanted(ControllerSet::BridgeMounts) {
            return Ok(());
        }
        // Without the mounts' CRD none of the domain's controllers runs.
        if let Err(err) = bridge_mount::controller::ensure_crds(&client, &options.scope).await {
            return skippable(all, "bridge-mount", Err(err));
        }
        let (shared, rendered) = bridge_mount::Shared::new(&client, &options.settings);
        let bridges = options.settings.bridges.clone();
        let (mounts, bridges, connections) = tokio::join!(
            bridge_mount::controller::run(
                client.clone(),
                registry.clone(),
                recorder.clone(),
                options.settings.clone(),
                options.scope.clone(),
                health.clone(),
                shared.clone(),
                stop.clone(),
            ),
            bridge_mount::bridges::controller::run(
                client.clone(),
                bridges.clone(),
                registry.clone(),
                shared,
                rendered,
                recorder.clone(),
                options.scope.clone(),
                stop.clone(),
            ),
            bridge_mount::bridges::connections::run(
                client.clone(),
                bridges,
                options.settings.operator_namespace.clone(),
                registry.clone(),
                options.scope.clone(),
                stop.clone(),
            ),
        );
        mounts.and(bridges).and(connections)
    };
    let gateways = async {
        if !wanted(ControllerSet::GatewayApi) {
            return Ok(());
        }
        let run = gateway::edge::controller::run(
            client.clone(),
            registry.clone(),
            recorder.clone(),
            options.gateway.clone(),
            health.clone(),
            stop.clone(),
        );
        skippable(all, "Gateway API", run.await)
    };
    let (mounts, gateways) = tokio::select! {
        ran = async { tokio::join!(mounts, gateways) } => ran,
        () = lost => anyhow::bail!(
            "lost the leader Lease: the reconciles in flight were cancelled; exiting so that this replica restarts as a standby"
        ),
    };
    if let Some(renewing) = renewing {
        let _ = stop_tx.send(());
        if !renewing.await.unwrap_or(false) {
            anyhow::bail!(
                "lost the leader Lease; exiting so that this replica restarts as a standby"
            );
        }
    }
    mounts.and(gateways)
}

/// With every controller asked for, one whose CRDs are missing is skipped
/// (with a warning saying how to install them); named explicitly, it fails.
fn skippable(all: bool, what: &str, outcome: anyhow::Result<()>) -> anyhow::Result<()> {
    match outcome {
        Err(err) if all && err.downcast_ref::<MissingCrds>().is_some() => {
            tracing::warn!("{what} controllers not started: {err:#}");
            Ok(())
        }
        other => other,
    }
}

/// Completes on SIGTERM (Kubernetes stopping the pod) or Ctrl-C.
pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = ctrl_c => {},
                    _ = term.recv() => {},
                }
            }
            Err(_) => {
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
    tracing::info!("shutting down: finishing the reconciles in flight");
}
