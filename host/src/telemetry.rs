//! Logging set-up shared by every subcommand.

use tracing_subscriber::{EnvFilter, fmt, prelude::*};

/// Output format of the operator's logs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

/// Installs the global subscriber; the level comes from `RUST_LOG`, else
/// `default` (`info` for the operator; a command whose output is a report
/// passes `error`, so that what the report says is not said again by logs).
pub fn init(format: LogFormat, default: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let registry = tracing_subscriber::registry().with(filter);
    match format {
        LogFormat::Text => registry
            .with(
                fmt::layer()
                    .with_writer(std::io::stderr)
                    // Colours only for a person at a terminal, not in log files.
                    .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())),
            )
            .init(),
        LogFormat::Json => registry
            .with(fmt::layer().json().with_writer(std::io::stderr))
            .init(),
    }
}
