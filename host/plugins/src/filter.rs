//! A loaded config filter: HTTPRoute filter in, Praxis filter entries out.

use std::{path::PathBuf, sync::Arc, time::Instant};

use super::{
    bindings::{FilterMetadata, RouteContext, filter::ConfigFilterProviderPre},
    call::Sandbox,
    error::{CallError, LoadError},
    state::CallState,
};
use pontoon_support::metrics::METRICS;

pub struct FilterModule {
    sandbox: Sandbox,
    pre: ConfigFilterProviderPre<CallState>,
    name: Arc<str>,
    pub metadata: FilterMetadata,
    pub path: PathBuf,
}

super::call::world!(
    ConfigFilterProviderPre<CallState>,
    FilterMetadata,
    pontoon_provider_config_filter
);

impl FilterModule {
    pub(super) async fn load(
        sandbox: Sandbox,
        path: PathBuf,
        pre: ConfigFilterProviderPre<CallState>,
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

    /// The name, shared rather than copied (it keys every cached translation).
    pub fn shared_name(&self) -> Arc<str> {
        self.name.clone()
    }

    /// Translates one HTTPRoute filter (JSON) into Praxis filter entries (JSON each).
    pub async fn translate(
        &self,
        filter: &str,
        context: &RouteContext,
    ) -> Result<Vec<String>, CallError> {
        let subject: Arc<str> =
            format!("{}/{}", context.route_namespace, context.route_name).into();
        let mut store = self.sandbox.store(self.name.clone(), subject, None);
        let call = async {
            let bindings = self.pre.instantiate_async(&mut store).await?;
            bindings
                .pontoon_provider_config_filter()
                .call_translate(&mut store, filter, context)
                .await
        };
        let started = Instant::now();
        let ended = tokio::time::timeout(self.sandbox.hard_deadline(), call).await;
        self.sandbox
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
        items: &[(&str, &RouteContext)],
    ) -> Vec<Result<Vec<String>, CallError>> {
        // Looked up once: a batch may be thousands of calls.
        let (returned, seconds) = METRICS.returned_calls(&self.name, "translate");
        let mut results = Vec::with_capacity(items.len());
        while results.len() < items.len() {
            let rest = &items[results.len()..];
            let subject: Arc<str> = format!("{} filters", rest.len()).into();
            let mut store = self.sandbox.store(self.name.clone(), subject, None);
            let mut started = Instant::now();
            let mut instantiated = false;
            // One backstop timer for the instance's run: its store's epoch
            // deadline already counts from the start of the batch.
            let run = tokio::time::timeout(self.sandbox.hard_deadline(), async {
                let bindings = self.pre.instantiate_async(&mut store).await?;
                instantiated = true;
                let filter = bindings.pontoon_provider_config_filter();
                started = Instant::now();
                for (text, context) in rest {
                    let result = filter.call_translate(&mut store, text, context).await?;
                    let now = Instant::now();
                    returned.inc();
                    seconds.observe((now - started).as_secs_f64());
                    started = now;
                    results.push(result.map_err(|error| CallError::Filter {
                        module: self.name.to_string(),
                        error,
                    }));
                }
                wasmtime::Result::Ok(())
            })
            .await;
            let stopped = match run {
                Ok(Ok(())) => break,
                // It would fail again: so does the rest of the batch.
                Ok(Err(trap)) if !instantiated => {
                    let failure = self.sandbox.failure(&store, "instantiate", trap);
                    self.fail_all(&mut results, items.len(), &failure);
                    break;
                }
                Err(_) if !instantiated => {
                    let failure = self.sandbox.deadline(&self.name, "instantiate");
                    self.fail_all(&mut results, items.len(), &failure);
                    break;
                }
                Ok(Err(trap)) => {
                    self.sandbox
                        .settle::<()>(&store, "translate", started, Ok(Err(trap)))
                }
                Err(elapsed) => {
                    self.sandbox
                        .settle::<()>(&store, "translate", started, Err(elapsed))
                }
            };
            // The call in flight fails; the rest go on in a fresh instance.
            if let Err(failure) = stopped {
                results.push(Err(failure));
            }
        }
        results
    }

    /// Every remaining item of a batch, up to `total`, fails the way its
    /// instance did.
    fn fail_all(
        &self,
        results: &mut Vec<Result<Vec<String>, CallError>>,
        total: usize,
        failure: &CallError,
    ) {
        let message = failure.to_string();
        results.extend((results.len()..total).map(|_| {
            Err(CallError::Trap {
                module: self.name.to_string(),
                step: "translate",
                message: message.clone(),
            })
        }));
    }
}
