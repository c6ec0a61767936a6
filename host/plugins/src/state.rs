//! What a store holds for one call: the sandbox (WASI without files, network
//! or environment; limits), and the cluster access granted to that call.

use std::sync::Arc;

use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView, p2::pipe::MemoryOutputPipe};

use super::{
    access::ClusterAccess,
    limits::{CallLimiter, Limits},
};

/// Guest stderr kept for error messages (a Rust guest prints its panic there).
const STDERR_CAPACITY: usize = 16 * 1024;

pub struct CallState {
    pub(super) module: Arc<str>,
    /// Context for log lines, e.g. the mount `shop/web`.
    pub(super) subject: Arc<str>,
    pub(super) cluster: Option<ClusterAccess>,
    pub(super) limiter: CallLimiter,
    /// The post of the call's last Event, which the next one follows (they
    /// are posted in the background, in the order the guest sent them).
    pub(super) last_event: Option<tokio::task::JoinHandle<()>>,
    wasi: WasiCtx,
    table: ResourceTable,
    stderr: MemoryOutputPipe,
}

impl CallState {
    pub fn new(
        module: Arc<str>,
        subject: Arc<str>,
        limits: Limits,
        cluster: Option<ClusterAccess>,
    ) -> Self {
        let stderr = MemoryOutputPipe::new(STDERR_CAPACITY);
        // Nothing inherited: no preopened directories, environment, args or network.
        let wasi = WasiCtx::builder().stderr(stderr.clone()).build();
        Self {
            module,
            subject,
            cluster,
            limiter: CallLimiter::new(limits),
            last_event: None,
            wasi,
            table: ResourceTable::new(),
            stderr,
        }
    }

    /// Counts data the host holds for the call against its limits (see
    /// [`CallLimiter::hold_host`]); a refusal is the cluster call's error.
    pub(super) async fn hold_host(
        &mut self,
        bytes: usize,
        what: impl FnOnce() -> String,
    ) -> Result<(), crate::bindings::ClusterError> {
        self.limiter
            .hold_host(bytes, what)
            .await
            .map_err(crate::bindings::ClusterError::Denied)
    }

    /// The last lines the guest wrote to stderr (its panic message, typically).
    pub fn stderr_tail(&self) -> String {
        let bytes = self.stderr.contents();
        let text = String::from_utf8_lossy(&bytes);
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        lines[lines.len().saturating_sub(3)..].join(" | ")
    }
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}
