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
        let started = std::time::Instant::now();
        let ended = tokio::time::timeout(runtime.hard_deadline(), call).await;
        let metadata = runtime.loaded_metadata(&store, &path, started, ended, |m| &m.name)?;
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
        let started = std::time::Instant::now();
        let ended = tokio::time::timeout(self.runtime.hard_deadline(), call).await;
        self.runtime
            .settle(&store, "translate", started, ended)?
            .map_err(|error| CallError::Filter {
                module: self.name.to_string(),
                error,
            })
    }

    /// Translates many filters in one instance (one store for the batch, as
    /// a reconcile does): a pure module keeps no state between calls, so
    /// this gives the same results as one instance per call at a fraction of
    /// the cost. A call that traps poisons only its instance: the rest of the
    /// batch continues in a fresh one. Results are in `items`' order.
    pub async fn translate_all(
        &self,
        items: &[(String, RouteContext)],
    ) -> Vec<Result<Vec<String>, CallError>> {
        let mut results = Vec::with_capacity(items.len());
        let mut rest = items;
        while !rest.is_empty() {
            let subject: Arc<str> = format!("{} filters", rest.len()).into();
            let mut store = self.runtime.store(self.name.clone(), subject, None);
            let instantiated = tokio::time::timeout(
                self.runtime.hard_deadline(),
                self.pre.instantiate_async(&mut store),
            )
            .await;
            let bindings = match instantiated {
                Ok(Ok(bindings)) => bindings,
                Ok(Err(trap)) => {
                    let failure = self.runtime.failure(&store, "instantiate", trap);
                    self.fail_all(&mut results, rest.len(), &failure);
                    return results;
                }
                Err(_) => {
                    let failure = CallError::Deadline {
                        module: self.name.to_string(),
                        step: "instantiate",
                        deadline: self.runtime.limits().deadline,
                    };
                    self.fail_all(&mut results, rest.len(), &failure);
                    return results;
                }
            };
            let mut poisoned = false;
            let mut done = 0;
            for (filter, context) in rest {
                let call = bindings
                    .pontoon_provider_config_filter()
                    .call_translate(&mut store, filter, context);
                let started = std::time::Instant::now();
                let ended = tokio::time::timeout(self.runtime.hard_deadline(), call).await;
                let outcome = self.runtime.settle(&store, "translate", started, ended);
                done += 1;
                match outcome {
                    Ok(result) => results.push(result.map_err(|error| CallError::Filter {
                        module: self.name.to_string(),
                        error,
                    })),
                    Err(err) => {
                        results.push(Err(err));
                        poisoned = true;
                        break;
                    }
                }
            }
            rest = &rest[done..];
            if !poisoned {
                break;
            }
        }
        results
    }

    /// Every remaining item of a batch fails the way its instance did.
    fn fail_all(
        &self,
        results: &mut Vec<Result<Vec<String>, CallError>>,
        count: usize,
        failure: &CallError,
    ) {
        let message = failure.to_string();
        results.extend((0..count).map(|_| {
            Err(CallError::Trap {
                module: self.name.to_string(),
                step: "translate",
                message: message.clone(),
            })
        }));
    }
}
