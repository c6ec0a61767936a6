//! `pontoon run`: the operator process. Loads the provider modules, then runs
//! every controller in this one process until SIGTERM or Ctrl-C.

use std::{path::PathBuf, sync::Arc};

use anyhow::Context as _;
use futures::FutureExt;
use kube::{
    Client,
    runtime::events::{Recorder, Reporter},
};

use crate::{
    bridge_mount::{self, controller::Scope},
    gateway::{self, context::GatewaySettings},
    plugins::{Limits, PluginRuntime},
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
    pub settings: bridge_mount::Settings,
    pub limits: Limits,
    /// Where compiled modules are kept across restarts; `None` compiles at every start.
    pub cache_dir: Option<PathBuf>,
    pub scope: Scope,
    pub gateway: GatewaySettings,
    pub controllers: Vec<ControllerSet>,
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

pub async fn run(client: Client, options: Options) -> anyhow::Result<()> {
    let dir = provider_dir(options.providers);
    let runtime = match &options.cache_dir {
        Some(dir) => PluginRuntime::with_cache_dir(options.limits, dir)?,
        None => PluginRuntime::new(options.limits)?,
    };
    let started = std::time::Instant::now();
    let registry = runtime
        .load_dir(&dir)
        .await
        .with_context(|| format!("cannot load provider modules from {}", dir.display()))?;
    let providers: Vec<&str> = registry.provider_names().collect();
    let filters: Vec<&str> = registry.filter_names().collect();
    tracing::info!(
        dir = %dir.display(),
        providers = ?providers,
        filters = ?filters,
        rejected = registry.rejected.len(),
        seconds = started.elapsed().as_secs_f64(),
        "provider modules loaded"
    );
    if providers.is_empty() {
        tracing::warn!(dir = %dir.display(), "no bridge-mount provider loaded: every mount will report ProviderNotFound");
    }
    let reporter = Reporter {
        controller: "pontoon".into(),
        instance: std::env::var("POD_NAME").ok(),
    };
    let recorder = Recorder::new(client.clone(), reporter);
    let all = options.controllers.is_empty() || options.controllers.contains(&ControllerSet::All);
    let wanted = |set| all || options.controllers.contains(&set);
    tracing::info!(
        namespace = options.settings.operator_namespace,
        watch_namespace = options.scope.watch_namespace.as_deref().unwrap_or("(all)"),
        "pontoon operator starting"
    );
    let registry = Arc::new(registry);
    let shutdown = shutdown_signal().shared();
    let mounts = async {
        if !wanted(ControllerSet::BridgeMounts) {
            return Ok(());
        }
        let run = bridge_mount::controller::run(
            client.clone(),
            registry.clone(),
            recorder.clone(),
            options.settings.clone(),
            options.scope.clone(),
            shutdown.clone(),
        );
        skippable(all, "bridge-mount", run.await)
    };
    let gateways = async {
        if !wanted(ControllerSet::GatewayApi) {
            return Ok(());
        }
        let run = gateway::controller::run(
            client.clone(),
            registry.clone(),
            recorder.clone(),
            options.gateway.clone(),
            shutdown.clone(),
        );
        skippable(all, "Gateway API", run.await)
    };
    let (mounts, gateways) = tokio::join!(mounts, gateways);
    mounts.and(gateways)
}

/// A controller's CRDs are not installed; the message says how to install them.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct MissingCrds(pub String);

/// Whether an API error says the resource does not exist. When a whole API
/// group is missing the server answers a plain-text 404, which kube turns
/// into a `Status` with the code but without the `NotFound` reason.
pub fn not_found(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(status) if status.is_not_found() || status.code == 404)
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
async fn shutdown_signal() {
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
