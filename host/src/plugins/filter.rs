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
        let mut store = runtime.store(file_label(&path).into(), "load".into(), None);
        let call = async {
            let bindings = pre.instantiate_async(&mut store).await?;
            bindings
                .pontoon_provider_config_filter()
                .call_metadata(&mut store)
                .await
        };
        let ended = tokio::time::timeout(runtime.hard_deadline(), call).await;
        let metadata = runtime.loaded_metadata(&store, &path, ended, |m| &m.name)?;
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
        let ended = tokio::time::timeout(self.runtime.hard_deadline(), call).await;
        self.runtime
            .settle(&store, "translate", ended)?
            .map_err(|error| CallError::Filter {
                module: self.name.to_string(),
                error,
            })
    }
}
