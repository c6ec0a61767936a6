//! A loaded connection provider and its functions, each in a fresh
//! instance: the cluster side of how a bridge reaches its client.

use std::{path::PathBuf, sync::Arc};

use super::{
    access::ClusterAccess,
    bindings::{
        Metadata, NamespaceScope,
        connection::ConnectionProviderPre,
        connection_world::{Client, Connection, PortRequest, SessionState, Settings},
    },
    call::Sandbox,
    error::{CallError, LoadError},
    scope::{CLIENT_PLACEHOLDER, MOUNT_PLACEHOLDER, Namespaces, Placeholders, Scope},
    state::CallState,
};

pub struct ConnectionModule {
    sandbox: Sandbox,
    pre: ConnectionProviderPre<CallState>,
    name: Arc<str>,
    pub metadata: Metadata,
    pub path: PathBuf,
}

/// Runs one function in a fresh instance, as a provider step runs.
macro_rules! call {
    ($self:ident, $cluster:expr, $subject:expr, $step:literal, $method:ident $(, $arg:expr)*) => {{
        let _turn = $self.sandbox.turn().await;
        let mut store = $self
            .sandbox
            .provider_store($self.name.clone(), $subject, Some($cluster));
        let call = async {
            let bindings = $self.pre.instantiate_async(&mut store).await?;
            bindings
                .pontoon_provider_connection()
                .$method(&mut store $(, $arg)*)
                .await
        };
        let started = std::time::Instant::now();
        let ended = tokio::time::timeout($self.sandbox.hard_deadline(), call).await;
        let settled = $self.sandbox.settle(&store, $step, started, ended);
        tracing::debug!(
            module = &*$self.name,
            subject = &*store.data().subject,
            step = $step,
            ms = format_args!("{:.1}", started.elapsed().as_secs_f64() * 1e3),
            "connection provider call"
        );
        settled?.map_err(|error| CallError::Provider {
            module: $self.name.to_string(),
            step: $step,
            error,
        })
    }};
}

super::call::world!(
    ConnectionProviderPre<CallState>,
    Metadata,
    pontoon_provider_connection
);

impl ConnectionModule {
    pub(super) async fn load(
        sandbox: Sandbox,
        path: PathBuf,
        pre: ConnectionProviderPre<CallState>,
    ) -> Result<Self, LoadError> {
        let metadata = sandbox.load_metadata(&path, &pre).await?;
        let problems = scope_problems(&metadata);
        if !problems.is_empty() {
            return Err(LoadError::Metadata {
                path,
                reason: format!(
                    "its scope asks for what a connection provider cannot be held to: {}",
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
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The module's declared scope resolved for one client (by its id).
    pub fn scope_for(&self, settings: &Settings, client_id: &str) -> Scope {
        let namespaces = Namespaces {
            // Refused at load: kept empty so that nothing could match.
            target: String::new(),
            operator: settings.operator_namespace.clone(),
        };
        Scope::resolve(
            &self.metadata.scope,
            &namespaces,
            Placeholders {
                mount: "",
                target: "",
                client: client_id,
            },
        )
    }

    pub async fn connect(
        &self,
        cluster: ClusterAccess,
        client: &Client,
        ports: &[PortRequest],
    ) -> Result<Connection, CallError> {
        let subject = subject(&client.name);
        call!(
            self,
            cluster,
            subject,
            "connect",
            call_connect,
            client,
            ports
        )
    }

    pub async fn session(
        &self,
        cluster: ClusterAccess,
        client: &Client,
    ) -> Result<SessionState, CallError> {
        let subject = subject(&client.name);
        call!(self, cluster, subject, "session", call_session, client)
    }

    pub async fn clients(
        &self,
        cluster: ClusterAccess,
        settings: &Settings,
    ) -> Result<Vec<String>, CallError> {
        call!(
            self,
            cluster,
            "clients".into(),
            "clients",
            call_clients,
            settings
        )
    }

    pub async fn disconnect(
        &self,
        cluster: ClusterAccess,
        settings: &Settings,
        id: &str,
    ) -> Result<bool, CallError> {
        let subject: Arc<str> = format!("client id {id}").into();
        call!(
            self,
            cluster,
            subject,
            "disconnect",
            call_disconnect,
            settings,
            id
        )
    }
}

fn subject(client: &str) -> Arc<str> {
    format!("client {client}").into()
}

/// What a connection module's scope asks that it could not be held to: the
/// target namespace (it serves clients, not mounts) and names it may not use.
fn scope_problems(metadata: &Metadata) -> Vec<String> {
    let mut problems = Vec::new();
    for capability in &metadata.scope {
        if capability.namespace == NamespaceScope::Target {
            problems.push(format!(
                "{} {:?} in the target namespace: a connection provider works in the operator \
                 namespace only",
                capability.api_group, capability.kinds
            ));
        }
        for name in &capability.names {
            if name.contains(MOUNT_PLACEHOLDER) || name.contains(super::scope::TARGET_PLACEHOLDER) {
                problems.push(format!(
                    "name `{name}`: a connection provider serves clients: name its objects \
                     after `{CLIENT_PLACEHOLDER}`"
                ));
            }
            if let Some(problem) = super::scope::name_problem(name) {
                problems.push(problem);
            }
        }
    }
    problems
}
