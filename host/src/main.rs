use clap::{Parser, Subcommand};
use pontoon::telemetry::{self, LogFormat};

/// Pontoon: a Kubernetes operator whose providers are WebAssembly components.
#[derive(Parser, Debug)]
#[command(name = "pontoon", version, about, long_about = None)]
struct Cli {
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, env = "PONTOON_LOG_FORMAT", global = true)]
    log_format: LogFormat,

    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    telemetry::init(cli.log_format);
    match cli.command {
        None => {
            tracing::info!("no command given; see `pontoon --help`");
            Ok(())
        }
    }
}
