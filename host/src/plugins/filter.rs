//! A loaded config filter: HTTPRoute filter in, Praxis filter entries out.

use std::{path::PathBuf, sync::Arc};

use super::{
    bindings::{FilterMetadata, RouteContext, filter::ConfigFilterProviderPre},
    error::{CallError, LoadError},
    runtime::{PluginRuntime, file_label},
    state::CallState,
};

pub struct FilterModule {
    runtime: Arc<PluginRuntime>,
    pre: ConfigFilterProviderPre<CallState>,
    name: Arc<str>,
    pub metadata: FilterMetadata,
    pub path: PathBuf,
}

impl FilterModule {
    pub(super) async fn load(
        runtime: Arc<PluginRuntime>,
        path: PathBuf,
        pre: ConfigFilterProviderPre<CallState>,
    ) -> Result<Self, LoadError> {
        let label: Arc<str> = file_label(&path).into();
        let mut store = runtime.store(label.clone(), "load".into(), None);
        let call = async {
            let bindings = pre.instantiate_async(&mut store).await?;
            bindings
                .pontoon_provider_config_filter()
                .call_metadata(&mut store)
                .await
        };
        let metadata = match tokio::time::timeout(runtime.hard_deadline(), call).await {
            Ok(Ok(metadata)) => metadata,
            Ok(Err(trap)) => {
                let reason = runtime.failure(&store, "metadata", trap).to_string();
                return Err(LoadError::Metadata { path, reason });
            }
            Err(_) => {
                let reason = runtime.deadline_error(&label, "metadata").to_string();
                return Err(LoadError::Metadata { path, reason });
            }
        };
        if metadata.name.trim().is_empty() {
            return Err(LoadError::Metadata {
                path,
                reason: "its metadata has an empty name".into(),
            });
        }
        Ok(Self {
            runtime,
            pre,
            name: metadata.name.clone().into(),
            metadata,
            path,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Translates one HTTPRoute filter (JSON) into Praxis filter entries (JSON each).
    pub async fn translate(
        &self,
        filter: &str,
        context: &RouteContext,
    ) -> Result<Vec<String>, CallError> {
        let subject: Arc<str> =
            format!("{}/{}", context.route_namespace, context.route_name).into();
        let mut store = self.runtime.store(self.name.clone(), subject, None);
        let call = async {
            let bindings = self.pre.instantiate_async(&mut store).await?;
            bindings
                .pontoon_provider_config_filter()
                .call_translate(&mut store, filter, context)
                .await
        };
        match tokio::time::timeout(self.runtime.hard_deadline(), call).await {
            Err(_) => Err(self.runtime.deadline_error(&self.name, "translate")),
            Ok(Err(trap)) => Err(self.runtime.failure(&store, "translate", trap)),
            Ok(Ok(Err(error))) => Err(CallError::Filter {
                module: self.name.to_string(),
                error,
            }),
            Ok(Ok(Ok(entries))) => Ok(entries),
        }
    }
}
