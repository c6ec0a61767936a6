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

/// Installs the global subscriber; the level comes from `RUST_LOG` (default `info`).
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
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
