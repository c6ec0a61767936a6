//! A loaded bridge-mount provider and its steps, each in a fresh instance.

use std::{
    collections::HashMap,
    path::PathBuf,
    sync::{Arc, Mutex},
};

use super::{
    access::ClusterAccess,
    bindings::{Condition, Metadata, Mount, Progress, provider::BridgeMountProviderPre},
    call::Sandbox,
    error::{CallError, LoadError},
    scope::{Namespaces, Scope},
    state::CallState,
};

pub struct ProviderModule {
    sandbox: Sandbox,
    pre: BridgeMountProviderPre<CallState>,
    name: Arc<str>,
    pub metadata: Metadata,
    pub path: PathBuf,
    /// Whether the module imports `bridges` (renders GefyraBridges); a
    /// module that does not ignores them.
    renders_bridges: bool,
    /// Per step, its calls stopped in a row (deadline, memory limit,
    /// trap); a call of the step that returns resets it. Per step, as a
    /// module's `validate` may return while its `prepare` loops.
    stopped: Mutex<HashMap<&'static str, u32>>,
    /// While a step's last call was stopped, the module's calls of such
    /// steps run one at a time: many mounts on a module that loops cannot
    /// hold every turn of the operator.
    probation: tokio::sync::Semaphore,
}

/// Runs one step in a fresh instance: instantiate, call, and turn traps,
/// deadlines and memory exhaustion into a [`CallError`] naming the module.
macro_rules! step {
    ($self:ident, $cluster:expr, $mount:expr, $step:literal, $method:ident) => {{
        let subject: Arc<str> = format!("{}/{}", $mount.namespace, $mount.name).into();
        let asked = std::time::Instant::now();
        // Waiting for a turn is not part of the call's deadline.
        let _probation = match $self.stopped_of($step) {
            0 => None,
            _ => $self.probation.acquire().await.ok(),
        };
        let _turn = $self.sandbox.turn().await;
        let mut store = $self
            .sandbox
            .provider_store($self.name.clone(), subject, $cluster);
        let call = async {
            let bindings = $self.pre.instantiate_async(&mut store).await?;
            bindings
                .pontoon_provider_bridge_mount()
                .$method(&mut store, $mount)
                .await
        };
        let started = std::time::Instant::now();
        let ended = tokio::time::timeout($self.sandbox.hard_deadline(), call).await;
        let settled = $self.sandbox.settle(&store, $step, started, ended);
        tracing::debug!(
            module = &*$self.name,
            subject = &*store.data().subject,
            step = $step,
            waited_ms = format_args!("{:.1}", (started - asked).as_secs_f64() * 1e3),
            ms = format_args!("{:.1}", started.elapsed().as_secs_f64() * 1e3),
            "provider call"
        );
        $self.count_stop($step, settled.is_err());
        settled?.map_err(|error| CallError::Provider {
            module: $self.name.to_string(),
            step: $step,
            error,
        })
    }};
}

super::call::world!(
    BridgeMountProviderPre<CallState>,
    Metadata,
    pontoon_provider_bridge_mount
);

impl ProviderModule {
    pub(super) async fn load(
        sandbox: Sandbox,
        path: PathBuf,
        pre: BridgeMountProviderPre<CallState>,
        renders_bridges: bool,
    ) -> Result<Self, LoadError> {
        let metadata = sandbox.load_metadata(&path, &pre).await?;
        let problems: Vec<String> = metadata
            .scope
            .iter()
            .flat_map(|c| c.names.iter())
            .filter_map(|n| super::scope::name_problem(n))
            .collect();
        if !problems.is_empty() {
            return Err(LoadError::Metadata {
                path,
                reason: format!(
                    "its scope names objects it could not be held to: {}",
                    problems.join("; ")
                ),
            });
        }
        Ok(Self {
            sandbox,
            pre,
            name: metadata.name.clone().into(),
            metadata,
            path,
            renders_bridges,
            stopped: Mutex::default(),
            probation: tokio::sync::Semaphore::new(1),
        })
    }

    /// Whether the module renders GefyraBridges (imports `bridges`).
    pub fn renders_bridges(&self) -> bool {
        self.renders_bridges
    }

    /// The most calls in a row of any one step the sandbox stopped.
    pub fn stopped_in_a_row(&self) -> u32 {
        self.stops().values().copied().max().unwrap_or(0)
    }

    fn stopped_of(&self, step: &'static str) -> u32 {
        self.stops().get(step).copied().unwrap_or(0)
    }

    fn count_stop(&self, step: &'static str, stopped: bool) {
        let mut stops = self.stops();
        if stopped {
            *stops.entry(step).or_default() += 1;
        } else {
            stops.remove(step);
        }
    }

    fn stops(&self) -> std::sync::MutexGuard<'_, HashMap<&'static str, u32>> {
        // Counts stay usable even if a holder panicked.
        self.stopped.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether a provider call could start now without waiting for a turn.
    pub fn turn_free(&self) -> bool {
        self.sandbox.turn_free()
    }

    /// The module's declared scope resolved for one mount.
    pub fn scope_for(&self, mount: &Mount) -> Scope {
        let namespaces = Namespaces {
            target: mount.target_namespace.clone(),
            operator: mount.settings.operator_namespace.clone(),
        };
        let target = pontoon_provider_sdk::Target::parse(&mount.target)
            .map(|t| t.name)
            .unwrap_or_default();
        Scope::resolve(
            &self.metadata.scope,
            &namespaces,
            super::scope::Placeholders {
                mount: &mount.uid,
                target: &target,
                client: "",
            },
        )
    }

    /// Instantiates the module in a fresh store and drops it: what every call
    /// pays before its step runs (for benchmarks and health checks).
    pub async fn instantiate_only(&self) -> Result<(), CallError> {
        let mut store = self
            .sandbox
            .store(self.name.clone(), "instantiate".into(), None);
        match self.pre.instantiate_async(&mut store).await {
            Ok(_) => Ok(()),
            Err(trap) => Err(self.sandbox.failure(&store, "instantiate", trap)),
        }
    }

    pub async fn validate(
        &self,
        cluster: Option<ClusterAccess>,
        mount: &Mount,
    ) -> Result<(), CallError> {
        step!(self, cluster, mount, "validate", call_validate)
    }

    pub async fn prepare(
        &self,
        cluster: ClusterAccess,
        mount: &Mount,
    ) -> Result<Progress, CallError> {
        step!(self, Some(cluster), mount, "prepare", call_prepare)
    }

    pub async fn prepared(&self, cluster: ClusterAccess, mount: &Mount) -> Result<bool, CallError> {
        step!(self, Some(cluster), mount, "prepared", call_prepared)
    }

    pub async fn install(
        &self,
        cluster: ClusterAccess,
        mount: &Mount,
    ) -> Result<Progress, CallError> {
        step!(self, Some(cluster), mount, "install", call_install)
    }

    pub async fn ready(
        &self,
        cluster: ClusterAccess,
        mount: &Mount,
    ) -> Result<Vec<Condition>, CallError> {
        step!(self, Some(cluster), mount, "ready", call_ready)
    }

    pub async fn uninstall(
        &self,
        cluster: ClusterAccess,
        mount: &Mount,
    ) -> Result<Progress, CallError> {
        step!(self, Some(cluster), mount, "uninstall", call_uninstall)
    }

    pub async fn target_exists(
        &self,
        cluster: ClusterAccess,
        mount: &Mount,
    ) -> Result<bool, CallError> {
        step!(
            self,
            Some(cluster),
            mount,
            "target-exists",
            call_target_exists
        )
    }
}
