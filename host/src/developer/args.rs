//! What a developer gives `pontoon bridge` on its command line.

use std::path::PathBuf;

use clap::Args;

#[derive(Args, Debug)]
pub struct BridgeArgs {
    /// The workload whose requests to take: deploy/NAME, sts/NAME or pod/NAME.
    #[arg(value_name = "WORKLOAD")]
    pub(super) workload: String,
    /// The workload's namespace (default: the kubeconfig context's).
    #[arg(short = 'n', long)]
    pub(super) namespace: Option<String>,
    /// The container whose port to take (default: the only one).
    #[arg(short = 'c', long)]
    pub(super) container: Option<String>,
    /// LOCAL:REMOTE: requests to the container's port REMOTE that match go
    /// to port LOCAL of this machine. Repeatable.
    #[arg(
        short = 'p',
        long = "port",
        value_name = "LOCAL:REMOTE",
        required = true
    )]
    pub(super) ports: Vec<String>,
    /// Take requests with this header value (exact). Repeatable; every
    /// match given must hold.
    #[arg(long = "header", value_name = "NAME=VALUE")]
    pub(super) headers: Vec<String>,
    /// Take requests whose header starts with VALUE.
    #[arg(long = "header-prefix", value_name = "NAME=VALUE")]
    pub(super) header_prefixes: Vec<String>,
    /// Take requests whose header matches the regular expression.
    #[arg(long = "header-regex", value_name = "NAME=REGEX")]
    pub(super) header_regexes: Vec<String>,
    /// Take requests for exactly this path.
    #[arg(long = "path", value_name = "PATH")]
    pub(super) paths: Vec<String>,
    /// Take requests whose path starts with PATH.
    #[arg(long = "path-prefix", value_name = "PATH")]
    pub(super) path_prefixes: Vec<String>,
    /// Where on this side requests go: HOST (with each LOCAL port) or, with
    /// one --port, HOST:PORT.
    #[arg(long, value_name = "HOST[:PORT]", default_value = "127.0.0.1")]
    pub(super) to: String,
    /// The kubeconfig (default: KUBECONFIG, else ~/.kube/config).
    #[arg(long, value_name = "FILE")]
    pub(super) kubeconfig: Option<PathBuf>,
    /// The kubeconfig context (default: its current one).
    #[arg(long, value_name = "NAME")]
    pub(super) context: Option<String>,
    /// Where mounts and bridges live (Gefyra's namespace).
    #[arg(long, default_value = "gefyra", env = "PONTOON_MOUNT_NAMESPACE")]
    pub(super) mount_namespace: String,
    /// The connection provider that reaches this machine.
    #[arg(long, default_value = "tunnel")]
    pub(super) connection_provider: String,
    /// How long each wait (mount, bridge, relay) may take.
    #[arg(long, value_name = "SECONDS", default_value_t = 120)]
    pub(super) timeout: u64,
    /// Print only the result line and errors, even on a terminal.
    #[arg(short, long)]
    pub(super) quiet: bool,
    /// A command to run with the container's environment; the bridge ends
    /// when it exits, with its exit code.
    #[arg(last = true, value_name = "COMMAND")]
    pub(super) command: Vec<String>,
}
