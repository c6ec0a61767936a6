//! HTTPRoute filters through the config filter modules: each filter goes to
//! the module that declares its type (`ExtensionRef:GROUP/KIND` for
//! extension filters), one instance per module and batch, and every outcome
//! is cached by its input (translations are pure), so a reconcile only calls
//! a module for filters it has not seen. A large batch (a Gateway's first
//! reconcile) is split into one part per core, each part looked up,
//! translated and parsed on its own task (the first on the caller's).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use crate::httproutes::{HttpRouteRulesFilters, HttpRouteRulesFiltersType as FilterType};
use serde_json::Value;

use crate::{data_plane::model::TranslatedFilter, judgement::resolve::issue::Issue};
use pontoon_plugins::{CallError, FilterModule, Registry, bindings::RouteContext};

/// Reason on a route whose filter cannot be used.
pub const UNSUPPORTED_VALUE: &str = "UnsupportedValue";
/// Reason kept for a module that trapped or ran out of time (not cached).
const MODULE_FAILED: &str = "ModuleFailed";
/// Cached outcomes kept at most; past that the cache starts over.
const CACHE_LIMIT: usize = 50_000;
/// Below this many filters per core a batch is one part: a part costs a
/// task and an instance per module, which only pays off for a large batch.
const PART_SIZE: usize = 256;

/// A translation's input: the module, the filter's JSON and where it stands.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    module: Arc<str>,
    filter: String,
    /// The route context's fields, one per line (names cannot hold one).
    context: String,
}

/// A module and the requests it is to translate (index in the part, key).
type ModuleMisses = (Arc<FilterModule>, Vec<(usize, Key)>);

/// The cache's hasher: fast on the long keys above; the keys come from the
/// cluster's own objects, hashed per process with a random seed.
type Cache = HashMap<Key, Outcome, foldhash::fast::RandomState>;

#[derive(Clone, Debug)]
enum Outcome {
    Entries(Arc<[Value]>),
    Refused(Issue),
}

pub struct Translator {
    modules: Arc<CachedModules>,
}

/// The filter modules and the cache of their outcomes: what every part of
/// a batch translates with, each on its own task.
struct CachedModules {
    registry: Arc<Registry>,
    cache: Mutex<Cache>,
}

/// One HTTPRoute filter to translate, and where it stands.
#[derive(Clone, Debug)]
pub struct FilterRequest {
    /// The type a module declares it handles: the filter's `type`, or for
    /// an extension filter `ExtensionRef:GROUP/KIND`.
    pub kind: String,
    /// The filter object as JSON, as the module receives it.
    pub filter: String,
    pub context: RouteContext,
}

impl FilterRequest {
    pub fn new(filter: &HttpRouteRulesFilters, context: RouteContext) -> Self {
        let kind = match (&filter.r#type, &filter.extension_ref) {
            (FilterType::ExtensionRef, Some(ext)) => {
                format!("ExtensionRef:{}/{}", ext.group, ext.kind)
            }
            (kind, _) => serde_json::to_value(kind)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default(),
        };
        Self {
            kind,
            // serde_json's writer, several times faster than `Display`.
            filter: serde_json::to_string(filter).unwrap_or_default(),
            context,
        }
    }
}

fn key(module: Arc<str>, filter: String, c: &RouteContext) -> Key {
    let (rule, index) = (c.rule_index.to_string(), c.filter_index.to_string());
    Key {
        module,
        filter,
        context: [
            c.route_namespace.as_str(),
            &c.route_name,
            &rule,
            &index,
            &c.gateway_namespace,
            &c.gateway_name,
        ]
        .join("\n"),
    }
}

impl Translator {
    pub fn new(registry: Arc<Registry>) -> Self {
        Self {
            modules: Arc::new(CachedModules {
                registry,
                cache: Mutex::default(),
            }),
        }
    }

    /// Translates every request; results in the same order.
    pub async fn translate(
        &self,
        requests: Arc<[FilterRequest]>,
    ) -> Vec<Result<TranslatedFilter, Issue>> {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let parts = cores.min(requests.len() / PART_SIZE).max(1);
        if parts == 1 {
            return self.modules.translate_part(&requests).await;
        }
        let size = requests.len().div_ceil(parts);
        // The other parts on tasks of their own, for idle workers to take;
        // the first on this task, which would otherwise only wait.
        let tasks: Vec<_> = (size..requests.len())
            .step_by(size)
            .map(|start| {
                let (modules, requests) = (self.modules.clone(), requests.clone());
                let end = (start + size).min(requests.len());
                let task =
                    tokio::spawn(
                        async move { modules.translate_part(&requests[start..end]).await },
                    );
                (end - start, task)
            })
            .collect();
        let mut results = self.modules.translate_part(&requests[..size]).await;
        results.reserve(requests.len() - size);
        for (count, task) in tasks {
            match task.await {
                Ok(part) => results.extend(part),
                // The task ended abnormally: its part fails like a trapped
                // call (not cached, so the next reconcile tries again).
                Err(err) => results.extend((0..count).map(|_| {
                    Err(Issue::new(
                        UNSUPPORTED_VALUE,
                        format!("config filters were not run: the host task ended: {err}"),
                    ))
                })),
            }
        }
        results
    }
}

impl CachedModules {
    fn cache(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One part of a batch: cache lookups, one instance per module for the
    /// misses, their outcomes parsed and cached.
    async fn translate_part(&self, part: &[FilterRequest]) -> Vec<Result<TranslatedFilter, Issue>> {
        let mut results: Vec<Option<Result<TranslatedFilter, Issue>>> = vec![None; part.len()];
        let mut keyed = Vec::with_capacity(part.len());
        for (i, request) in part.iter().enumerate() {
            let Some(module) = self.registry.filter_for(&request.kind) else {
                results[i] = Some(Err(Issue::new(
                    UNSUPPORTED_VALUE,
                    format!(
                        "filter {} of rule {} is not supported: no config filter module handles it",
                        request.kind, request.context.rule_index
                    ),
                )));
                continue;
            };
            let key = key(
                module.shared_name(),
                request.filter.clone(),
                &request.context,
            );
            keyed.push((module, i, key));
        }
        // Misses, grouped by module (a handful of modules at most).
        let mut misses: Vec<ModuleMisses> = Vec::new();
        {
            let cache = self.cache();
            for (module, i, key) in keyed {
                if let Some(outcome) = cache.get(&key) {
                    results[i] = Some(finish(outcome, &part[i].kind, &key.module));
                    continue;
                }
                match misses.iter_mut().find(|(m, _)| Arc::ptr_eq(m, &module)) {
                    Some((_, list)) => list.push((i, key)),
                    None => misses.push((module, vec![(i, key)])),
                }
            }
        }
        for (module, list) in misses {
            let batch: Vec<(&str, &RouteContext)> = list
                .iter()
                .map(|&(i, _)| (part[i].filter.as_str(), &part[i].context))
                .collect();
            let outcomes = module.translate_all(&batch).await;
            let mut fresh = Vec::with_capacity(list.len());
            for ((i, key), outcome) in list.into_iter().zip(outcomes) {
                let outcome = match outcome {
                    Ok(entries) => parse_entries(&entries, module.name()),
                    Err(err) => Outcome::Refused(refusal(&err)),
                };
                results[i] = Some(finish(&outcome, &part[i].kind, module.name()));
                // A deadline or a trap may pass; only a module's own answer is pure.
                if !matches!(&outcome, Outcome::Refused(issue) if issue.reason == MODULE_FAILED) {
                    fresh.push((key, outcome));
                }
            }
            let mut cache = self.cache();
            if cache.len() + fresh.len() > CACHE_LIMIT {
                cache.clear();
            }
            cache.extend(fresh);
        }
        results
            .into_iter()
            .map(|r| {
                r.unwrap_or_else(|| Err(Issue::new(UNSUPPORTED_VALUE, "filter was not translated")))
            })
            .collect()
    }
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
        _ => Issue::new(MODULE_FAILED, err.to_string()),
    }
}
