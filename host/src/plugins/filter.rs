//! A loaded config filter: HTTPRoute filter in, Praxis filter entries out.

use std::{path::PathBuf, sync::Arc, time::Instant};

use wasmtime::{Store, component::InstancePre};

use super::{
    bindings::{
        CONFIG_FILTER_BATCH_EXPORT, FilterMetadata, FilterRequest, RouteContext,
        filter::exports::pontoon::provider::{config_filter, config_filter_batch},
    },
    error::{CallError, LoadError},
    runtime::{PluginRuntime, file_label},
    state::CallState,
};
use crate::metrics::METRICS;

/// Filters in one `translate-batch` call at most: bounds what one instance
/// holds, and what is translated again one by one when a call fails.
const BATCH_CALL_SIZE: usize = 1024;

/// Where a filter module's functions are, looked up once when it loads.
pub(super) struct FilterExports {
    single: config_filter::GuestIndices,
    /// Present when the module exports `config-filter-batch`.
    batch: Option<config_filter_batch::GuestIndices>,
}

impl FilterExports {
    pub(super) fn new(pre: &InstancePre<CallState>) -> wasmtime::Result<Self> {
        let batch = match pre
            .component()
            .get_export_index(None, CONFIG_FILTER_BATCH_EXPORT)
        {
            Some(_) => Some(config_filter_batch::GuestIndices::new(pre)?),
            None => None,
        };
        Ok(Self {
            single: config_filter::GuestIndices::new(pre)?,
            batch,
        })
    }
}

/// A module's functions in one fresh instance.
struct Functions {
    single: config_filter::Guest,
    batch: Option<config_filter_batch::Guest>,
}

/// Instantiates the module in `store`; a `translate-batch` of the wrong type
/// fails here, at load, like any other export.
async fn instantiate(
    pre: &InstancePre<CallState>,
    exports: &FilterExports,
    store: &mut Store<CallState>,
) -> wasmtime::Result<Functions> {
    let instance = pre.instantiate_async(&mut *store).await?;
    Ok(Functions {
        single: exports.single.load(&mut *store, &instance)?,
        batch: exports
            .batch
            .as_ref()
            .map(|batch| batch.load(&mut *store, &instance))
            .transpose()?,
    })
}

pub struct FilterModule {
    runtime: Arc<PluginRuntime>,
    pre: InstancePre<CallState>,
    exports: FilterExports,
    name: Arc<str>,
    pub metadata: FilterMetadata,
    pub path: PathBuf,
}

impl FilterModule {
    pub(super) async fn load(
        runtime: Arc<PluginRuntime>,
        path: PathBuf,
        pre: InstancePre<CallState>,
        exports: FilterExports,
    ) -> Result<Self, LoadError> {
        let mut store = runtime.store(file_label(&path).into(), "load".into(), None);
        let call = async {
            let functions = instantiate(&pre, &exports, &mut store).await?;
            functions.single.call_metadata(&mut store).await
        };
        let started = Instant::now();
        let ended = tokio::time::timeout(runtime.hard_deadline(), call).await;
        let metadata = runtime.loaded_metadata(&store, &path, started, ended, |m| &m.name)?;
        Ok(Self {
            runtime,
            pre,
            exports,
            name: metadata.name.clone().into(),
            metadata,
            path,
        })
    }

    /// Whether the module exports `config-filter-batch`.
    pub fn takes_batches(&self) -> bool {
        self.exports.batch.is_some()
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
        let mut store = self.runtime.store(self.name.clone(), subject, None);
        let call = async {
            let functions = instantiate(&self.pre, &self.exports, &mut store).await?;
            functions
                .single
                .call_translate(&mut store, filter, context)
                .await
        };
        let started = Instant::now();
        let ended = tokio::time::timeout(self.runtime.hard_deadline(), call).await;
        self.runtime
            .settle(&store, "translate", started, ended)?
            .map_err(|error| CallError::Filter {
                module: self.name.to_string(),
                error,
            })
    }

    /// Translates many filters, results in `items`' order: through
    /// `translate-batch` where the module has it (a call per
    /// [`BATCH_CALL_SIZE`] filters), otherwise [`Self::translate_each`]. A
    /// batch call that fails (a trap, the deadline, the memory limit, a wrong
    /// number of answers) is done again one filter at a time in fresh
    /// instances, so that only the filter at fault fails.
    pub async fn translate_all(
        &self,
        items: &[(&str, &RouteContext)],
    ) -> Vec<Result<Vec<String>, CallError>> {
        if self.exports.batch.is_none() {
            return self.translate_each(items).await;
        }
        let mut results = Vec::with_capacity(items.len());
        for chunk in items.chunks(BATCH_CALL_SIZE) {
            match self.translate_batch(chunk).await {
                Ok(answers) => results.extend(answers),
                Err(failure) => {
                    tracing::debug!(
                        module = %self.name,
                        error = %failure,
                        filters = chunk.len(),
                        "batch call failed; translating its filters one by one"
                    );
                    results.extend(self.translate_each(chunk).await);
                }
            }
        }
        results
    }

    /// One `translate-batch` call in a fresh instance: the answers, or how
    /// the call failed.
    async fn translate_batch(
        &self,
        chunk: &[(&str, &RouteContext)],
    ) -> Result<Vec<Result<Vec<String>, CallError>>, CallError> {
        let requests: Vec<FilterRequest> = chunk
            .iter()
            .map(|&(filter, context)| FilterRequest {
                filter: filter.to_string(),
                context: context.clone(),
            })
            .collect();
        let subject: Arc<str> = format!("{} filters", chunk.len()).into();
        let mut store = self.runtime.store(self.name.clone(), subject, None);
        let call = async {
            let functions = instantiate(&self.pre, &self.exports, &mut store).await?;
            let batch = functions.batch.ok_or_else(|| {
                wasmtime::format_err!("the module exports no config-filter-batch")
            })?;
            batch.call_translate_batch(&mut store, &requests).await
        };
        let started = Instant::now();
        let ended = tokio::time::timeout(self.runtime.hard_deadline(), call).await;
        let answers = self
            .runtime
            .settle(&store, "translate-batch", started, ended)?;
        if answers.len() != chunk.len() {
            let message = format!(
                "answered {} of a batch of {} filters; the contract asks one answer per filter",
                answers.len(),
                chunk.len()
            );
            tracing::warn!(module = %self.name, "{message}");
            return Err(CallError::Trap {
                module: self.name.to_string(),
                step: "translate-batch",
                message,
            });
        }
        Ok(answers
            .into_iter()
            .map(|answer| {
                answer.map_err(|error| CallError::Filter {
                    module: self.name.to_string(),
                    error,
                })
            })
            .collect())
    }

    /// Translates many filters with `translate`, in one instance (one store
    /// for the batch, as a reconcile does): a pure module keeps no state
    /// between calls, so this gives the same results as one instance per
    /// call at a fraction of the cost. A call that traps poisons only its
    /// instance: the rest of the batch continues in a fresh one. Results are
    /// in `items`' order.
    pub async fn translate_each(
        &self,
        items: &[(&str, &RouteContext)],
    ) -> Vec<Result<Vec<String>, CallError>> {
        // Looked up once: a batch may be thousands of calls.
        let (returned, seconds) = METRICS.returned_calls(&self.name, "translate");
        let mut results = Vec::with_capacity(items.len());
        while results.len() < items.len() {
            let rest = &items[results.len()..];
            let subject: Arc<str> = format!("{} filters", rest.len()).into();
            let mut store = self.runtime.store(self.name.clone(), subject, None);
            let mut started = Instant::now();
            let mut instantiated = false;
            // One backstop timer for the instance's run: its store's epoch
            // deadline already counts from the start of the batch.
            let run = tokio::time::timeout(self.runtime.hard_deadline(), async {
                let filter = instantiate(&self.pre, &self.exports, &mut store)
                    .await?
                    .single;
                instantiated = true;
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
                    let failure = self.runtime.failure(&store, "instantiate", trap);
                    self.fail_all(&mut results, items.len(), &failure);
                    break;
                }
                Err(_) if !instantiated => {
                    let failure = CallError::Deadline {
                        module: self.name.to_string(),
                        step: "instantiate",
                        deadline: self.runtime.limits().deadline,
                    };
                    self.fail_all(&mut results, items.len(), &failure);
                    break;
                }
                Ok(Err(trap)) => {
                    self.runtime
                        .settle::<()>(&store, "translate", started, Ok(Err(trap)))
                }
                Err(elapsed) => {
                    self.runtime
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
