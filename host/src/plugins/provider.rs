//! A loaded bridge-mount provider and its steps, each in a fresh instance.

use std::{path::PathBuf, sync::Arc};

use wasmtime::Store;

use super::{
    access::ClusterAccess,
    bindings::{Condition, Metadata, Mount, Progress, provider::BridgeMountProviderPre},
    call::{Sandbox, World},
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
}

/// Runs one step in a fresh instance: instantiate, call, and turn traps,
/// deadlines and memory exhaustion into a [`CallError`] naming the module.
macro_rules! step {
    ($self:ident, $cluster:expr, $mount:expr, $step:literal, $method:ident) => {{
        let subject: Arc<str> = format!("{}/{}", $mount.namespace, $mount.name).into();
        // Waiting for a turn is not part of the call's deadline.
        let _turn = $self.sandbox.turn().await;
        let mut store = $self.sandbox.store($self.name.clone(), subject, $cluster);
        let call = async {
            let bindings = $self.pre.instantiate_async(&mut store).await?;
            bindings
                .pontoon_provider_bridge_mount()
                .$method(&mut store, $mount)
                .await
        };
        let started = std::time::Instant::now();
        let ended = tokio::time::timeout($self.sandbox.hard_deadline(), call).await;
        $self
            .sandbox
            .settle(&store, $step, started, ended)?
            .map_err(|error| CallError::Provider {
                module: $self.name.to_string(),
                step: $step,
                error,
            })
    }};
}

impl World for BridgeMountProviderPre<CallState> {
    type Metadata = Metadata;

    async fn metadata(&self, store: &mut Store<CallState>) -> wasmtime::Result<Metadata> {
        let bindings = self.instantiate_async(&mut *store).await?;
        bindings
            .pontoon_provider_bridge_mount()
            .call_metadata(store)
            .await
    }

    fn name(metadata: &Metadata) -> &str {
        &metadata.name
    }
}

impl ProviderModule {
    pub(super) async fn load(
        sandbox: Sandbox,
        path: PathBuf,
        pre: BridgeMountProviderPre<CallState>,
    ) -> Result<Self, LoadError> {
        let metadata = sandbox.load_metadata(&path, &pre).await?;
        Ok(Self {
            sandbox,
            pre,
            name: metadata.name.clone().into(),
            metadata,
            path,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The module's declared scope resolved for one mount.
    pub fn scope_for(&self, mount: &Mount) -> Scope {
        let namespaces = Namespaces {
            target: mount.target_namespace.clone(),
            operator: mount.settings.operator_namespace.clone(),
        };
        Scope::resolve(&self.metadata.scope, &namespaces, &mount.name)
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
