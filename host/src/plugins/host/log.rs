//! The `log` interface: a module's log lines, relayed into the operator's
//! tracing.

use crate::plugins::{bindings::Level, state::CallState};

impl crate::plugins::bindings::provider::pontoon::provider::log::Host for CallState {
    async fn enabled(&mut self, level: Level) -> bool {
        match level {
            Level::Trace => tracing::enabled!(tracing::Level::TRACE),
            Level::Debug => tracing::enabled!(tracing::Level::DEBUG),
            Level::Info => tracing::enabled!(tracing::Level::INFO),
            Level::Warn => tracing::enabled!(tracing::Level::WARN),
            Level::Error => tracing::enabled!(tracing::Level::ERROR),
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
