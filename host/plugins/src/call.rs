//! The mechanics of one call into a module, whatever its world: a fresh
//! store with the sandbox's limits armed, a backstop timer, and the naming
//! of what stopped a call (deadline, memory, trap) in a [`CallError`],
//! counted in the call metrics.

use std::{
    path::Path,
    sync::Arc,
    time::{Duration, Instant},
};

use wasmtime::{Engine, Store};

use super::{
    access::ClusterAccess,
    budget::MemoryBudget,
    error::{CallError, LoadError},
    limits::{CallLimiter, Limits},
    state::CallState,
};
use pontoon_support::metrics::METRICS;

/// Time a call may run past its guest deadline before the backstop timer
/// abandons it: room for a hung API request the guest is waiting on, which
/// the epoch deadline cannot interrupt.
pub const HARD_DEADLINE_GRACE: Duration = Duration::from_secs(5);

/// What every call of every module runs in: the engine and the limits.
/// Cheap to clone (the engine is shared), so each loaded module keeps one.
#[derive(Clone)]
pub(super) struct Sandbox {
    engine: Engine,
    limits: Limits,
    /// Turns for provider calls, shared by every module of the runtime.
    turns: Arc<tokio::sync::Semaphore>,
    /// The memory provider calls hold together, shared the same way.
    budget: Arc<MemoryBudget>,
}

/// How a call ended, as [`tokio::time::timeout`] around it reports it.
pub(super) type Ended<T> = Result<wasmtime::Result<T>, tokio::time::error::Elapsed>;

impl Sandbox {
    pub(super) fn new(engine: Engine, limits: Limits) -> Self {
        Self {
            engine,
            limits,
            turns: Arc::new(tokio::sync::Semaphore::new(limits.concurrent_calls.max(1))),
            budget: MemoryBudget::new(limits.memory_budget_bytes, limits.memory_bytes),
        }
    }

    /// Waits for a turn to run a provider call: at most
    /// `limits.concurrent_calls` run at once. The turn ends when the
    /// returned permit is dropped.
    pub(super) async fn turn(&self) -> Option<tokio::sync::SemaphorePermit<'_>> {
        // The semaphore is never closed; were it, calls would run unbounded
        // rather than never.
        self.turns.acquire().await.ok()
    }

    /// Whether a turn is free now.
    pub(super) fn turn_free(&self) -> bool {
        self.turns.available_permits() > 0
    }

    pub(super) fn engine(&self) -> &Engine {
        &self.engine
    }

    pub(super) fn limits(&self) -> Limits {
        self.limits
    }

    /// A store for one call, with limits armed.
    pub(super) fn store(
        &self,
        module: Arc<str>,
        subject: Arc<str>,
        cluster: Option<ClusterAccess>,
    ) -> Store<CallState> {
        let mut store = Store::new(
            &self.engine,
            CallState::new(module, subject, self.limits, cluster),
        );
        store.limiter_async(|state| &mut state.limiter);
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(|mut ctx| ctx.data_mut().limiter.on_epoch());
        store
    }

    /// A store for one provider call: its memory comes from the budget the
    /// provider calls share, and goes back to it when the store is dropped.
    pub(super) fn provider_store(
        &self,
        module: Arc<str>,
        subject: Arc<str>,
        cluster: Option<ClusterAccess>,
    ) -> Store<CallState> {
        let mut store = self.store(module, subject, cluster);
        store.data_mut().limiter.account = Some(self.budget.account());
        store
    }

    /// Bound on a whole call, host calls included: the guest's own deadline
    /// plus time for a hung API request to be abandoned.
    pub(super) fn hard_deadline(&self) -> Duration {
        self.limits.deadline + HARD_DEADLINE_GRACE
    }

    /// Turns how a call ended into the caller's error, naming the cause.
    pub(super) fn failure(
        &self,
        store: &Store<CallState>,
        step: &'static str,
        err: wasmtime::Error,
    ) -> CallError {
        let state = store.data();
        let stop = Stop::of(&state.limiter);
        METRICS.sandbox_stop(&state.module, stop.cause());
        stop.error(state.module.to_string(), step, self.limits, || {
            trap_message(&err, &state.stderr_tail())
        })
    }

    /// The error of a call that did not finish within its deadline.
    pub(super) fn deadline(&self, module: &str, step: &'static str) -> CallError {
        Stop::Deadline.error(module.to_string(), step, self.limits, String::new)
    }

    /// How a call run under [`Self::hard_deadline`] ended: its value, or the
    /// error naming the module and the cause.
    /// The call is counted (`pontoon_provider_calls_total`, by module, step
    /// and whether the module returned or was stopped) and timed from
    /// `started`.
    pub(super) fn settle<T>(
        &self,
        store: &Store<CallState>,
        step: &'static str,
        started: Instant,
        ended: Ended<T>,
    ) -> Result<T, CallError> {
        let module = &store.data().module;
        METRICS.provider_memory(module, store.data().limiter.peak_bytes);
        let result = if matches!(ended, Ok(Ok(_))) {
            "returned"
        } else {
            "stopped"
        };
        METRICS.provider_call(module, step, result, started.elapsed());
        match ended {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(trap)) => Err(self.failure(store, step, trap)),
            Err(_) => {
                METRICS.sandbox_stop(module, Stop::Deadline.cause());
                Err(self.deadline(module, step))
            }
        }
    }

    /// Reads a module's metadata as part of loading it, in a store of its
    /// own labelled with the file (the module has not named itself yet).
    pub(super) async fn load_metadata<W: World>(
        &self,
        path: &Path,
        pre: &W,
    ) -> Result<W::Metadata, LoadError> {
        let mut store = self.store(file_label(path).into(), "load".into(), None);
        let call = pre.metadata(&mut store);
        let started = Instant::now();
        let ended = tokio::time::timeout(self.hard_deadline(), call).await;
        let metadata = self
            .settle(&store, "metadata", started, ended)
            .map_err(|e| LoadError::Metadata {
                path: path.into(),
                reason: e.to_string(),
            })?;
        if W::name(&metadata).trim().is_empty() {
            return Err(LoadError::Metadata {
                path: path.into(),
                reason: "its metadata has an empty name".into(),
            });
        }
        Ok(metadata)
    }
}

/// A world as loading sees it: a pre-instantiated component that, in a fresh
/// instance, reports metadata naming the module.
pub(super) trait World {
    type Metadata;

    /// Instantiates the component in `store` and calls its `metadata` export.
    fn metadata(
        &self,
        store: &mut Store<CallState>,
    ) -> impl Future<Output = wasmtime::Result<Self::Metadata>> + Send;

    /// The name the module gives itself in its metadata.
    fn name(metadata: &Self::Metadata) -> &str;
}

/// [`World`] for a generated `*Pre` of a world whose interface (reached
/// through `$export`) has a `metadata` function returning `$metadata`, a
/// record with a `name`: the same for every world but for those names.
macro_rules! world {
    ($pre:ty, $metadata:ty, $export:ident) => {
        impl $crate::call::World for $pre {
            type Metadata = $metadata;

            async fn metadata(
                &self,
                store: &mut ::wasmtime::Store<$crate::state::CallState>,
            ) -> ::wasmtime::Result<$metadata> {
                let bindings = self.instantiate_async(&mut *store).await?;
                bindings.$export().call_metadata(store).await
            }

            fn name(metadata: &$metadata) -> &str {
                &metadata.name
            }
        }
    };
}
pub(super) use world;

/// What stopped a call, as the call's limiter saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    Deadline,
    Memory,
    /// Anything else: the guest trapped (a panic, an unreachable) or a host
    /// import failed in a way the guest cannot be told about.
    Trap,
}

impl Stop {
    /// Either limit ends the call where it is hit, so at most one of them
    /// is set.
    fn of(limiter: &CallLimiter) -> Self {
        if limiter.deadline_exceeded {
            Self::Deadline
        } else if limiter.memory_exceeded {
            Self::Memory
        } else {
            Self::Trap
        }
    }

    /// The `cause` label of `pontoon_sandbox_stops_total`.
    fn cause(self) -> &'static str {
        match self {
            Self::Deadline => "deadline",
            Self::Memory => "memory",
            Self::Trap => "trap",
        }
    }

    /// The error naming `module`, `step` and the limit that stopped it;
    /// `message` is asked for only when there is no limit to name.
    fn error(
        self,
        module: String,
        step: &'static str,
        limits: Limits,
        message: impl FnOnce() -> String,
    ) -> CallError {
        match self {
            Self::Deadline => CallError::Deadline {
                module,
                step,
                deadline: limits.deadline,
            },
            Self::Memory => CallError::OutOfMemory {
                module,
                step,
                limit_mib: limits.memory_bytes / (1024 * 1024),
            },
            Self::Trap => CallError::Trap {
                module,
                step,
                message: message(),
            },
        }
    }
}

/// A trap's message, with the guest's last stderr lines (where a Rust guest
/// prints its panic) if it wrote any.
fn trap_message(err: &wasmtime::Error, stderr: &str) -> String {
    let message = format!("{err:#}");
    if stderr.is_empty() {
        message
    } else {
        format!("{message}; guest stderr: {stderr}")
    }
}

/// A short label of a module for messages: its file name.
fn file_label(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

#[cfg(test)]
mod tests {
    use wasmtime::Config;

    use super::*;
    use crate::limits::EPOCH_TICK;

    const MIB: usize = 1024 * 1024;

    fn sandbox() -> Sandbox {
        let engine = Engine::new(Config::new().epoch_interruption(true)).unwrap();
        let limits = Limits {
            deadline: Duration::from_secs(10),
            memory_bytes: 32 * MIB,
            concurrent_calls: 2,
            memory_budget_bytes: 64 * MIB,
        };
        Sandbox::new(engine, limits)
    }

    /// A store of `module` (each test its own, as the metrics are global).
    fn store(sandbox: &Sandbox, module: &str) -> Store<CallState> {
        sandbox.store(module.into(), "shop/web".into(), None)
    }

    fn metrics_show(line: &str) {
        let text = METRICS.render();
        assert!(text.contains(line), "expected `{line}` in\n{text}");
    }

    #[test]
    fn a_call_stopped_at_its_deadline_names_the_deadline() {
        let sandbox = sandbox();
        let mut store = store(&sandbox, "call-test-spin");
        store.data_mut().limiter.deadline_exceeded = true;
        let err = sandbox.failure(&store, "install", wasmtime::Error::msg("interrupt"));
        assert!(
            matches!(err, CallError::Deadline { deadline, .. } if deadline == Duration::from_secs(10)),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "module `call-test-spin` did not finish `install` within its deadline of 10s and was stopped"
        );
        metrics_show(r#"pontoon_sandbox_stops_total{module="call-test-spin",cause="deadline"} 1"#);
    }

    #[test]
    fn a_call_refused_memory_names_the_limit_in_mib() {
        let sandbox = sandbox();
        let mut store = store(&sandbox, "call-test-hog");
        store.data_mut().limiter.memory_exceeded = true;
        let err = sandbox.failure(&store, "ready", wasmtime::Error::msg("grow refused"));
        assert!(
            matches!(err, CallError::OutOfMemory { limit_mib: 32, .. }),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "module `call-test-hog` exceeded its memory limit of 32 MiB in `ready` and was stopped"
        );
        metrics_show(r#"pontoon_sandbox_stops_total{module="call-test-hog",cause="memory"} 1"#);
    }

    #[test]
    fn any_other_failure_is_a_trap_with_the_whole_error_chain() {
        let sandbox = sandbox();
        let store = store(&sandbox, "call-test-trap");
        let err = wasmtime::Error::msg("wasm trap: unreachable").context("error while executing");
        let err = sandbox.failure(&store, "prepare", err);
        assert_eq!(
            err.to_string(),
            "module `call-test-trap` trapped in `prepare`: error while executing: wasm trap: unreachable"
        );
        metrics_show(r#"pontoon_sandbox_stops_total{module="call-test-trap",cause="trap"} 1"#);
    }

    #[test]
    fn a_trap_message_ends_with_what_the_guest_wrote_to_stderr() {
        let err = wasmtime::Error::msg("wasm trap: unreachable");
        assert_eq!(trap_message(&err, ""), "wasm trap: unreachable");
        assert_eq!(
            trap_message(&err, "panicked at src/lib.rs:3:5: | on purpose"),
            "wasm trap: unreachable; guest stderr: panicked at src/lib.rs:3:5: | on purpose"
        );
    }

    #[tokio::test]
    async fn a_call_that_returned_is_counted_as_returned() {
        let sandbox = sandbox();
        let store = store(&sandbox, "call-test-ok");
        let value = sandbox.settle(&store, "install", Instant::now(), Ok(Ok(7)));
        assert_eq!(value.unwrap(), 7);
        metrics_show(
            r#"pontoon_provider_calls_total{module="call-test-ok",step="install",result="returned"} 1"#,
        );
    }

    #[tokio::test]
    async fn a_call_past_the_backstop_timer_is_a_deadline_stop() {
        let sandbox = sandbox();
        let store = store(&sandbox, "call-test-hung");
        let elapsed = tokio::time::timeout(Duration::ZERO, std::future::pending::<()>())
            .await
            .unwrap_err();
        let err = sandbox
            .settle::<()>(&store, "uninstall", Instant::now(), Err(elapsed))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "module `call-test-hung` did not finish `uninstall` within its deadline of 10s and was stopped"
        );
        metrics_show(
            r#"pontoon_provider_calls_total{module="call-test-hung",step="uninstall",result="stopped"} 1"#,
        );
        metrics_show(r#"pontoon_sandbox_stops_total{module="call-test-hung",cause="deadline"} 1"#);
    }

    #[test]
    fn the_backstop_timer_leaves_the_guest_deadline_to_fire_first() {
        let sandbox = sandbox();
        assert!(sandbox.hard_deadline() > sandbox.limits().deadline + EPOCH_TICK);
    }

    /// A world whose metadata is a name, or a failure, without a component.
    struct Named(Result<&'static str, &'static str>);

    impl World for Named {
        type Metadata = String;

        async fn metadata(&self, _store: &mut Store<CallState>) -> wasmtime::Result<String> {
            self.0.map(String::from).map_err(wasmtime::Error::msg)
        }

        fn name(metadata: &String) -> &str {
            metadata
        }
    }

    #[tokio::test]
    async fn metadata_loads_with_the_name_the_module_gives_itself() {
        let path = Path::new("/modules/call-test-sample.wasm");
        let metadata = sandbox().load_metadata(path, &Named(Ok("sample"))).await;
        assert_eq!(metadata.unwrap(), "sample");
        // Counted under the file's name: the module has not named itself yet.
        metrics_show(
            r#"pontoon_provider_calls_total{module="call-test-sample.wasm",step="metadata",result="returned"} 1"#,
        );
    }

    #[tokio::test]
    async fn metadata_with_an_empty_name_is_refused_naming_the_file() {
        let path = Path::new("/modules/blank.wasm");
        let err = sandbox()
            .load_metadata(path, &Named(Ok(" ")))
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "/modules/blank.wasm failed while reporting its metadata: its metadata has an empty name"
        );
    }

    #[tokio::test]
    async fn metadata_that_traps_is_refused_naming_the_file_and_the_trap() {
        let path = Path::new("/modules/call-test-broken.wasm");
        let err = sandbox()
            .load_metadata(path, &Named(Err("wasm trap: unreachable")))
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "/modules/call-test-broken.wasm failed while reporting its metadata: module \
             `call-test-broken.wasm` trapped in `metadata`: wasm trap: unreachable"
        );
    }

    #[test]
    fn a_module_is_labelled_by_its_file_name() {
        assert_eq!(
            file_label(Path::new("/modules/carrier2mount.wasm")),
            "carrier2mount.wasm"
        );
        assert_eq!(file_label(Path::new("/")), "/");
    }

    #[tokio::test]
    async fn at_most_the_limit_of_provider_calls_take_their_turn_at_once() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let sandbox = sandbox();
        let (now, most) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let call = || async {
            let _turn = sandbox.turn().await;
            let running = now.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(running, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(20)).await;
            now.fetch_sub(1, Ordering::SeqCst);
        };
        futures::future::join_all((0..8).map(|_| call())).await;
        assert_eq!(most.load(Ordering::SeqCst), 2, "two turns, eight callers");
    }
}
