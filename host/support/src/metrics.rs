//! The operator's Prometheus metrics: one registry for the process, written
//! by the controllers and the provider runtime, read by `/metrics`
//! ([`crate::health`]).

use std::{
    sync::{LazyLock, Mutex},
    time::Duration,
};

use prometheus_client::{
    encoding::{EncodeLabelSet, text::encode},
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReconcileLabels {
    /// `bridge-mount`, `gateway-class`, `gateway` or `http-route`.
    pub controller: &'static str,
    /// `ok`, `conflict` (a write lost a race with another writer; the
    /// object is looked at again) or `error`.
    pub result: &'static str,
}

/// How a reconcile ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReconcileResult {
    Ok,
    Conflict,
    Error,
}

impl ReconcileResult {
    /// A reconcile that failed on an API error that means another writer
    /// changed the object first (409, or a JSON patch `test` that failed:
    /// 422) is a conflict; found anywhere in the error's source chain.
    pub fn of(err: Option<&(dyn std::error::Error + 'static)>) -> Self {
        let Some(err) = err else {
            return Self::Ok;
        };
        let mut cause = Some(err);
        while let Some(e) = cause {
            if let Some(api) = e.downcast_ref::<kube::Error>() {
                return match crate::controller_support::ApiFailure::of(api) {
                    crate::controller_support::ApiFailure::Raced => Self::Conflict,
                    _ => Self::Error,
                };
            }
            cause = e.source();
        }
        Self::Error
    }

    fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Conflict => "conflict",
            Self::Error => "error",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    pub state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    pub module: String,
    /// `install`, `translate`, `metadata`, ...
    pub step: &'static str,
    /// `returned` (the module answered, success or its own error) or
    /// `stopped` (by the sandbox: deadline, memory, trap).
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StepLabels {
    pub module: String,
    pub step: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ModuleLabels {
    pub module: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StopLabels {
    pub module: String,
    /// `deadline`, `memory`, `trap` or `denied` (a cluster call outside the
    /// module's scope).
    pub cause: &'static str,
}

pub struct Metrics {
    registry: Registry,
    pub reconciles: Family<ReconcileLabels, Counter>,
    pub mounts: Family<StateLabels, Gauge>,
    pub provider_calls: Family<CallLabels, Counter>,
    pub provider_call_seconds: Family<StepLabels, Histogram>,
    pub sandbox_stops: Family<StopLabels, Counter>,
    pub provider_memory_peak: Family<ModuleLabels, Gauge>,
    pub leader: Gauge,
    /// Refreshes gauges that are counted from a cache when scraped.
    collectors: Mutex<Vec<Box<dyn Fn() + Send>>>,
}

/// Provider calls take from microseconds (a cached filter) to seconds (an
/// install waiting on the API server).
fn call_buckets() -> Histogram {
    Histogram::new([
        0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    ])
}

impl Metrics {
    fn new() -> Self {
        let mut registry = Registry::with_prefix("pontoon");
        let reconciles = Family::<ReconcileLabels, Counter>::default();
        registry.register(
            "reconciles",
            "Reconciles per controller and result",
            reconciles.clone(),
        );
        let mounts = Family::<StateLabels, Gauge>::default();
        registry.register(
            "bridge_mounts",
            "GefyraBridgeMounts per state",
            mounts.clone(),
        );
        let provider_calls = Family::<CallLabels, Counter>::default();
        registry.register(
            "provider_calls",
            "Calls into provider and config filter modules per module, step and result",
            provider_calls.clone(),
        );
        let provider_call_seconds =
            Family::<StepLabels, Histogram>::new_with_constructor(call_buckets as fn() -> _);
        registry.register(
            "provider_call_seconds",
            "Duration of calls into provider modules per module and step",
            provider_call_seconds.clone(),
        );
        let sandbox_stops = Family::<StopLabels, Counter>::default();
        registry.register(
            "sandbox_stops",
            "Module calls stopped by the sandbox per module and cause",
            sandbox_stops.clone(),
        );
        let provider_memory_peak = Family::<ModuleLabels, Gauge>::default();
        registry.register(
            "provider_memory_peak_bytes",
            "Most linear memory one call of the module has used since the operator started \
             (what --provider-memory must leave room for)",
            provider_memory_peak.clone(),
        );
        let leader = Gauge::default();
        registry.register(
            "leader",
            "1 while this replica holds the leader Lease (or runs without leader election)",
            leader.clone(),
        );
        Self {
            registry,
            reconciles,
            mounts,
            provider_calls,
            provider_call_seconds,
            sandbox_stops,
            provider_memory_peak,
            leader,
            collectors: Mutex::default(),
        }
    }

    /// Counts one reconcile.
    pub fn reconciled(&self, controller: &'static str, result: ReconcileResult) {
        self.reconciles
            .get_or_create(&ReconcileLabels {
                controller,
                result: result.as_str(),
            })
            .inc();
    }

    /// Counts one module call and its duration.
    pub fn provider_call(
        &self,
        module: &str,
        step: &'static str,
        result: &'static str,
        took: Duration,
    ) {
        let (calls, seconds) = self.call_series(module, step, result);
        calls.inc();
        seconds.observe(took.as_secs_f64());
    }

    /// The counter and timer of `module`'s calls of `step` that returned,
    /// looked up once for a batch of many calls.
    pub fn returned_calls(&self, module: &str, step: &'static str) -> (Counter, Histogram) {
        self.call_series(module, step, "returned")
    }

    /// The call counter for `result` and the step's timer.
    fn call_series(
        &self,
        module: &str,
        step: &'static str,
        result: &'static str,
    ) -> (Counter, Histogram) {
        let calls = self
            .provider_calls
            .get_or_create(&CallLabels {
                module: module.to_string(),
                step,
                result,
            })
            .clone();
        let seconds = self
            .provider_call_seconds
            .get_or_create(&StepLabels {
                module: module.to_string(),
                step,
            })
            .clone();
        (calls, seconds)
    }

    /// Counts a call the sandbox stopped.
    pub fn sandbox_stop(&self, module: &str, cause: &'static str) {
        self.sandbox_stops
            .get_or_create(&StopLabels {
                module: module.to_string(),
                cause,
            })
            .inc();
    }

    /// Notes that a call of `module` used `bytes` of linear memory at most.
    pub fn provider_memory(&self, module: &str, bytes: usize) {
        let bytes = i64::try_from(bytes).unwrap_or(i64::MAX);
        self.provider_memory_peak
            .get_or_create(&ModuleLabels {
                module: module.to_string(),
            })
            .inner()
            .fetch_max(bytes, std::sync::atomic::Ordering::Relaxed);
    }

    /// Runs `refresh` before every scrape (gauges counted from a cache).
    pub fn on_scrape(&self, refresh: impl Fn() + Send + 'static) {
        self.collectors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Box::new(refresh));
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        for refresh in self
            .collectors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            refresh();
        }
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

/// The process's metrics.
pub static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_race_anywhere_in_the_chain_is_a_conflict() {
        #[derive(Debug, thiserror::Error)]
        #[error("reconcile failed")]
        struct Wrapper(#[source] kube::Error);
        let api = |code: u16, reason: &str| {
            kube::Error::Api(Box::new(
                kube::core::Status::failure("refused", reason).with_code(code),
            ))
        };
        let of = |e: &Wrapper| ReconcileResult::of(Some(e));
        assert_eq!(
            of(&Wrapper(api(409, "Conflict"))),
            ReconcileResult::Conflict
        );
        assert_eq!(of(&Wrapper(api(422, "Invalid"))), ReconcileResult::Conflict);
        assert_eq!(of(&Wrapper(api(403, "Forbidden"))), ReconcileResult::Error);
        assert_eq!(ReconcileResult::of(None), ReconcileResult::Ok);
    }

    #[test]
    fn counts_show_in_the_exposition() {
        let metrics = Metrics::new();
        metrics.reconciled("bridge-mount", ReconcileResult::Ok);
        metrics.reconciled("bridge-mount", ReconcileResult::Error);
        metrics.reconciled("bridge-mount", ReconcileResult::Ok);
        metrics.provider_call(
            "carrier2mount",
            "install",
            "returned",
            Duration::from_millis(3),
        );
        metrics.sandbox_stop("spin", "deadline");
        metrics.provider_memory("carrier2mount", 3 << 20);
        metrics.provider_memory("carrier2mount", 2 << 20);
        let text = metrics.render();
        assert!(
            text.contains(r#"pontoon_reconciles_total{controller="bridge-mount",result="ok"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(r#"pontoon_provider_calls_total{module="carrier2mount",step="install",result="returned"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"pontoon_provider_call_seconds_bucket{le="0.005",module="carrier2mount",step="install"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"pontoon_sandbox_stops_total{module="spin",cause="deadline"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"pontoon_provider_memory_peak_bytes{module="carrier2mount"} 3145728"#),
            "the most any call used: {text}"
        );
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[test]
    fn scrape_refreshes_counted_gauges() {
        let metrics = Metrics::new();
        let mounts = metrics.mounts.clone();
        metrics.on_scrape(move || {
            mounts.clear();
            mounts
                .get_or_create(&StateLabels {
                    state: "ACTIVE".into(),
                })
                .set(3);
        });
        assert!(
            metrics
                .render()
                .contains(r#"pontoon_bridge_mounts{state="ACTIVE"} 3"#)
        );
    }
}
