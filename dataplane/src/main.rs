//! `pontoon-dataplane`: the program each Gateway's pods run. It is the
//! `praxis` binary's command line (`-c FILE`, `-t`, `PRAXIS_CONFIG`) over
//! Praxis's own server, with Pontoon's filters added to the registry.

use std::process::ExitCode;

use clap::Parser;
use praxis_core::config::{Config, ConfigFile, DEFAULT_CONFIG};

#[cfg(unix)]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Praxis with Pontoon's Gateway API filters.
#[derive(Parser)]
#[command(name = "pontoon-dataplane", version)]
struct Cli {
    /// The Praxis configuration file (YAML).
    #[arg(short = 'c', long = "config")]
    config: Option<String>,
    /// Check the configuration, as the server would at start, and exit.
    #[arg(short = 't', long = "validate")]
    validate: bool,
}

fn main() -> ExitCode {
    // Before anything builds a TLS configuration (validation does too).
    praxis::install_crypto_provider();
    let cli = Cli::parse();
    let explicit = cli.config.or_else(|| {
        std::env::var("PRAXIS_CONFIG")
            .ok()
            .filter(|value| !value.is_empty())
    });

    if cli.validate {
        let checked = praxis::with_bootstrap_logging(|| {
            let config = praxis::load_config(explicit.as_deref())?;
            pontoon_dataplane::validate(&config)
        });
        return match checked {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("invalid configuration: {error}");
                ExitCode::FAILURE
            }
        };
    }

    // The text that runs is the text the reload watcher compares against.
    let config_file = match praxis::resolve_config_path(explicit.as_deref())
        .as_deref()
        .map(ConfigFile::read)
        .transpose()
    {
        Ok(file) => file,
        Err(error) => praxis::fatal(&error),
    };
    // Serving, not checking: the config's relays and fronts start as it loads.
    pontoon_dataplane::serving::start();
    let config = praxis::with_bootstrap_logging(|| {
        Config::from_config_file_or(config_file.as_ref(), DEFAULT_CONFIG)
    })
    .unwrap_or_else(|error| praxis::fatal(&error));
    let tracing = praxis::init_tracing(&config).unwrap_or_else(|error| praxis::fatal(&error));
    let log_output = config.runtime.logging.output;
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        "starting pontoon-dataplane"
    );
    let log_level = Some(tracing.log_level_state());
    praxis::try_run_server_with_registry(
        config,
        pontoon_dataplane::registry(),
        config_file,
        log_level,
    )
    .map_or_else(
        |error| praxis::report_fatal(&error, log_output),
        |()| ExitCode::SUCCESS,
    )
}
