//! The `log` interface: a module's log lines, relayed into the operator's
//! tracing.

use crate::{bindings::Level, state::CallState};

impl crate::bindings::provider::pontoon::provider::log::Host for CallState {
    /// Asked for the target the lines go to (`provider`), so that
    /// `RUST_LOG=provider=debug` alone turns a module's debug lines on.
    async fn enabled(&mut self, level: Level) -> bool {
        match level {
            Level::Trace => tracing::enabled!(target: "provider", tracing::Level::TRACE),
            Level::Debug => tracing::enabled!(target: "provider", tracing::Level::DEBUG),
            Level::Info => tracing::enabled!(target: "provider", tracing::Level::INFO),
            Level::Warn => tracing::enabled!(target: "provider", tracing::Level::WARN),
            Level::Error => tracing::enabled!(target: "provider", tracing::Level::ERROR),
        }
    }

    async fn log(&mut self, level: Level, message: String) {
        // Tagged with the module, not with the host code that relays it.
        let (module, subject) = (&*self.module, &*self.subject);
        match level {
            Level::Trace => tracing::trace!(target: "provider", subject, "{module}: {message}"),
            Level::Debug => tracing::debug!(target: "provider", subject, "{module}: {message}"),
            Level::Info => tracing::info!(target: "provider", subject, "{module}: {message}"),
            Level::Warn => tracing::warn!(target: "provider", subject, "{module}: {message}"),
            Level::Error => tracing::error!(target: "provider", subject, "{module}: {message}"),
        }
    }
}
