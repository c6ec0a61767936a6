//! HTTPRoute filters through the config filter modules: each filter goes to
//! the module that declares its type (`ExtensionRef:GROUP/KIND` for
//! extension filters), one instance per module and batch, and every outcome
//! is cached by its input (translations are pure), so a reconcile only calls
//! a module for filters it has not seen.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use serde_json::Value;

use super::{model::TranslatedFilter, resolve::listeners::Issue};
use crate::plugins::{CallError, FilterModule, Registry, bindings::RouteContext};

/// Reason on a route whose filter cannot be used.
pub const UNSUPPORTED_VALUE: &str = "UnsupportedValue";
/// Cached outcomes kept at most; past that the cache starts over.
const CACHE_LIMIT: usize = 50_000;

/// A translation's input: the module, the filter's JSON and where it stands.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    module: String,
    filter: String,
    /// The route context's fields, one per line (names cannot hold one).
    context: String,
}

/// The cache's hasher: fast on the long keys above; the keys come from the
/// cluster's own objects, hashed per process with a random seed.
type Cache = HashMap<Key, Outcome, foldhash::fast::RandomState>;

#[derive(Clone, Debug)]
enum Outcome {
    Entries(Arc<[Value]>),
    Refused(Issue),
}

pub struct Translator {
    registry: Arc<Registry>,
    cache: Mutex<Cache>,
}

/// The type a filter is handled by: its `type`, or for an extension filter
/// `ExtensionRef:GROUP/KIND`.
pub fn filter_kind(filter: &Value) -> String {
    let kind = filter["type"].as_str().unwrap_or_default();
    if kind == "ExtensionRef" {
        let ext = &filter["extensionRef"];
        format!(
            "ExtensionRef:{}/{}",
            ext["group"].as_str().unwrap_or_default(),
            ext["kind"].as_str().unwrap_or_default()
        )
    } else {
        kind.to_string()
    }
}

fn key(module: &str, filter: String, c: &RouteContext) -> Key {
    Key {
        module: module.to_string(),
        filter,
        context: [
            c.route_namespace.as_str(),
            &c.route_name,
            &c.rule_index.to_string(),
            &c.filter_index.to_string(),
            &c.gateway_namespace,
            &c.gateway_name,
        ]
        .join("\n"),
    }
}

/// A filter to translate: its place in the request list, its type and key.
struct Miss {
    index: usize,
    kind: String,
    key: Key,
}

impl Translator {
    pub fn new(registry: Arc<Registry>) -> Self {
        Self {
            registry,
            cache: Mutex::default(),
        }
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Translates every `(filter, where)`; results in the same order.
    pub async fn translate(
        &self,
        requests: &[(Value, RouteContext)],
    ) -> Vec<Result<TranslatedFilter, Issue>> {
        let mut results: Vec<Option<Result<TranslatedFilter, Issue>>> = vec![None; requests.len()];
        // Misses, grouped by module.
        let mut misses: HashMap<String, Vec<Miss>> = HashMap::new();
        {
            let cache = self.cache();
            for (i, (filter, context)) in requests.iter().enumerate() {
                let kind = filter_kind(filter);
                let Some(module) = self.registry.filter_for(&kind) else {
                    results[i] = Some(Err(Issue::new(
                        UNSUPPORTED_VALUE,
                        format!(
                            "filter {kind} of rule {} is not supported: no config filter module handles it",
                            context.rule_index
                        ),
                    )));
                    continue;
                };
                // serde_json's writer, several times faster than `Display`.
                let text = serde_json::to_string(filter).unwrap_or_default();
                let key = key(module.name(), text, context);
                match cache.get(&key) {
                    Some(outcome) => results[i] = Some(finish(outcome, &kind, module.name())),
                    None => misses
                        .entry(module.name().to_string())
                        .or_default()
                        .push(Miss {
                            index: i,
                            kind,
                            key,
                        }),
                }
            }
        }
        for (module_name, items) in misses {
            let Some(module) = self.registry.filter(&module_name) else {
                continue;
            };
            let batch: Arc<[(String, RouteContext)]> = items
                .iter()
                .map(|miss| (miss.key.filter.clone(), requests[miss.index].1.clone()))
                .collect();
            let outcomes = translate_in_parallel(&module, batch).await;
            let mut cache = self.cache();
            if cache.len() + outcomes.len() > CACHE_LIMIT {
                cache.clear();
            }
            cache.reserve(items.len());
            for (miss, outcome) in items.into_iter().zip(outcomes) {
                let outcome = match outcome {
                    Ok(entries) => parse_entries(&entries, &module_name),
                    Err(err) => Outcome::Refused(refusal(&err)),
                };
                results[miss.index] = Some(finish(&outcome, &miss.kind, &module_name));
                // A deadline or a trap may pass; only a module's own answer is pure.
                if !matches!(&outcome, Outcome::Refused(issue) if issue.reason == "ModuleFailed") {
                    cache.insert(miss.key, outcome);
                }
            }
        }
        results
            .into_iter()
            .map(|r| {
                r.unwrap_or_else(|| Err(Issue::new(UNSUPPORTED_VALUE, "filter was not translated")))
            })
            .collect()
    }
}

/// Below this many misses a batch runs in one instance: splitting costs an
/// instance per part, which only pays off for a large batch (the first
/// reconcile of a Gateway with many routes).
const PARALLEL_BATCH: usize = 256;

/// Translates `batch` in up to one instance per core, each on its own task,
/// results in `batch`'s order.
async fn translate_in_parallel(
    module: &Arc<FilterModule>,
    batch: Arc<[(String, RouteContext)]>,
) -> Vec<Result<Vec<String>, CallError>> {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let parts = cores.min(batch.len() / PARALLEL_BATCH).max(1);
    if parts == 1 {
        return module.translate_all(&batch).await;
    }
    let size = batch.len().div_ceil(parts);
    // Each task takes its part of the shared batch, not a copy of it.
    let tasks: Vec<_> = (0..batch.len())
        .step_by(size)
        .map(|start| {
            let (module, batch) = (module.clone(), batch.clone());
            let end = (start + size).min(batch.len());
            tokio::spawn(async move { module.translate_all(&batch[start..end]).await })
        })
        .collect();
    let mut outcomes = Vec::with_capacity(batch.len());
    for (task, chunk) in tasks.into_iter().zip(batch.chunks(size)) {
        match task.await {
            Ok(part) => outcomes.extend(part),
            // The task ended abnormally: its part fails like a trapped
            // call (not cached, so the next reconcile tries again).
            Err(err) => outcomes.extend(chunk.iter().map(|_| {
                Err(CallError::Trap {
                    module: module.name().to_string(),
                    step: "translate",
                    message: format!("the host task ended: {err}"),
                })
            })),
        }
    }
    outcomes
}

fn finish(outcome: &Outcome, kind: &str, module: &str) -> Result<TranslatedFilter, Issue> {
    match outcome {
        Outcome::Entries(entries) => Ok(TranslatedFilter {
            kind: kind.to_string(),
            module: module.to_string(),
            entries: entries.clone(),
        }),
        Outcome::Refused(issue) => Err(Issue::new(UNSUPPORTED_VALUE, issue.message.clone())),
    }
}

fn parse_entries(entries: &[String], module: &str) -> Outcome {
    let mut parsed = Vec::with_capacity(entries.len());
    for entry in entries {
        match serde_json::from_str::<Value>(entry) {
            Ok(value) if value.is_object() => parsed.push(value),
            _ => {
                return Outcome::Refused(Issue::new(
                    UNSUPPORTED_VALUE,
                    format!(
                        "config filter `{module}` returned an entry that is not a JSON object: {entry}"
                    ),
                ));
            }
        }
    }
    Outcome::Entries(parsed.into())
}

fn refusal(err: &CallError) -> Issue {
    match err {
        CallError::Filter { .. } => Issue::new(UNSUPPORTED_VALUE, err.to_string()),
        _ => Issue::new("ModuleFailed", err.to_string()),
    }
}
