use std::{path::PathBuf, process::ExitCode, time::Duration};

use anyhow::Context;
use clap::{Parser, Subcommand};
use pontoon::{
    conformance,
    telemetry::{self, LogFormat},
};

/// Pontoon: a Kubernetes operator whose providers are WebAssembly components.
#[derive(Parser, Debug)]
#[command(name = "pontoon", version, about, long_about = None)]
struct Cli {
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, env = "PONTOON_LOG_FORMAT", global = true)]
    log_format: LogFormat,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Check that a bridge-mount provider module keeps the contract, on a real cluster.
    Conformance {
        /// The provider module to check.
        #[arg(long, value_name = "PATH.wasm")]
        provider: PathBuf,
        /// Cluster to use; default: the test bed's (.testbed/kubeconfig) if present, else KUBECONFIG.
        #[arg(long, value_name = "FILE")]
        kubeconfig: Option<PathBuf>,
        /// How long each waiting check may take.
        #[arg(long, value_name = "SECONDS", default_value_t = 60)]
        timeout: u64,
        /// Keep the scratch namespaces for inspection.
        #[arg(long)]
        keep_namespaces: bool,
        /// Carrier2 image passed to the provider in the mount's settings.
        #[arg(long, default_value = "quay.io/gefyra/carrier2:latest")]
        carrier_image: String,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    telemetry::init(cli.log_format);
    match cli.command {
        Command::Conformance {
            provider,
            kubeconfig,
            timeout,
            keep_namespaces,
            carrier_image,
        } => {
            let client = client(kubeconfig).await?;
            let options = conformance::Options {
                timeout: Duration::from_secs(timeout),
                keep_namespaces,
                carrier_image,
            };
            println!("conformance of {}", provider.display());
            let checks =
                conformance::run(client, &provider, options, |check| println!("{check}")).await?;
            let failed = checks.iter().filter(|c| c.result.is_err()).count();
            println!("{} passed, {failed} failed", checks.len() - failed);
            Ok(if failed == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
    }
}

async fn client(kubeconfig: Option<PathBuf>) -> anyhow::Result<kube::Client> {
    use kube::config::{KubeConfigOptions, Kubeconfig};
    let path = kubeconfig.or_else(|| {
        let testbed = PathBuf::from(".testbed/kubeconfig");
        testbed.exists().then_some(testbed)
    });
    let config = match path {
        Some(path) => {
            let file = Kubeconfig::read_from(&path)
                .with_context(|| format!("cannot read kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(file, &KubeConfigOptions::default()).await?
        }
        None => kube::Config::infer()
            .await
            .context("no kubeconfig given and none found (KUBECONFIG, ~/.kube/config)")?,
    };
    Ok(kube::Client::try_from(config)?)
}
