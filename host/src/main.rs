use std::{
    path::{Path, PathBuf},
    process::ExitCode,
    time::Duration,
};

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use pontoon::{
    bridge_mount::{self, WatchScope},
    conformance, crds,
    gateway::{
        data_plane::{config::GenerateOptions, program::DataPlane},
        edge::context::GatewaySettings,
    },
    operator,
    plugins::Limits,
    telemetry::{self, LogFormat},
};

mod connection_args;

/// Pontoon: a Kubernetes operator whose providers are WebAssembly components.
#[derive(Parser, Debug)]
// A flag given twice takes its last value (a wrapper's default, then the user's).
#[command(name = "pontoon", version, about, long_about = None, args_override_self = true)]
struct Cli {
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, env = "PONTOON_LOG_FORMAT", global = true)]
    log_format: LogFormat,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the operator: every controller, until SIGTERM or Ctrl-C.
    Run(Box<RunArgs>),
    /// Bring your requests to a workload to this machine: `pontoon bridge -n
    /// shop deploy/api --port 8080:80 --header x-dev=alice` (through the
    /// Kubernetes API server only; Ctrl-C puts everything back).
    Bridge(Box<pontoon::developer::args::BridgeArgs>),
    /// Serve one developer's bridges in the cluster (the `tunnel`
    /// connection provider's relay pod runs this).
    Relay(pontoon::developer::relay::RelayArgs),
    /// Print every CRD Pontoon ships, as YAML (`pontoon crds | kubectl apply -f -`).
    Crds {
        /// Which CRDs: Pontoon's own (`gefyra`), the Gateway API's, or all.
        #[arg(long, value_enum, default_value = "all")]
        set: crds::CrdSet,
        /// The Gateway API's channel: `standard`, or `experimental` for
        /// its fields (an HTTPRoute rule's `retry`).
        #[arg(long, value_enum, default_value = "standard")]
        channel: crds::Channel,
        /// Write one file per CRD into this directory instead (the chart's `crds/`).
        #[arg(long, value_name = "DIR")]
        out_dir: Option<PathBuf>,
    },
    /// End every mount and wait until the operator has uninstalled each, so
    /// every target runs its original again (the chart's pre-delete hook).
    TerminateMounts {
        /// Cluster to use; default: in-cluster config or KUBECONFIG (~/.kube/config).
        #[arg(long, value_name = "FILE")]
        kubeconfig: Option<PathBuf>,
        /// The operator's namespace, where admission is closed first.
        #[arg(long, default_value = "gefyra", env = "PONTOON_NAMESPACE")]
        namespace: String,
        /// Only the mounts of this namespace (default: every namespace).
        #[arg(long, value_name = "NAMESPACE", env = "PONTOON_WATCH_NAMESPACE")]
        watch_namespace: Option<String>,
        /// How long to wait for the mounts to be gone.
        #[arg(long, value_name = "SECONDS", default_value_t = 300)]
        timeout: u64,
    },
    /// Fail, naming them, when live mounts target namespaces the given
    /// lists no longer allow (the chart's pre-upgrade hook: an upgrade that
    /// narrows `mounts.targetNamespaces` would strand them).
    CheckUpgrade {
        /// Cluster to use; default: in-cluster config or KUBECONFIG (~/.kube/config).
        #[arg(long, value_name = "FILE")]
        kubeconfig: Option<PathBuf>,
        /// The operator's namespace (never a target).
        #[arg(long, default_value = "gefyra", env = "PONTOON_NAMESPACE")]
        namespace: String,
        /// Only the mounts of this namespace (default: every namespace).
        #[arg(long, value_name = "NAMESPACE", env = "PONTOON_WATCH_NAMESPACE")]
        watch_namespace: Option<String>,
        /// The namespaces mounts may target after the upgrade, as
        /// `pontoon run --mount-namespaces` will be given them.
        #[arg(
            long,
            value_name = "NAMESPACES",
            value_delimiter = ',',
            required = true
        )]
        mount_namespaces: Vec<String>,
        /// Likewise `--mount-excluded-namespaces`.
        #[arg(
            long,
            value_name = "NAMESPACES",
            value_delimiter = ',',
            default_value = "kube-system"
        )]
        mount_excluded_namespaces: Vec<String>,
    },
    /// Check a module offline, before deploying it: its world, name, version
    /// and declared scope; with --grants, whether the operator would load it
    /// (non-zero exit, naming each capability in excess, when it would not).
    Check {
        /// The module (a bridge-mount provider or a config filter).
        #[arg(long, value_name = "PATH.wasm")]
        provider: PathBuf,
        /// The grants file the operator will run with (`--grants`; the
        /// chart's `grants` value, with the bundled grants for bundled modules).
        #[arg(long, value_name = "FILE")]
        grants: Option<PathBuf>,
    },
    /// Check that a bridge-mount or connection provider module keeps the
    /// contract, on a real cluster.
    Conformance {
        /// The provider module to check (a bridge-mount or a connection provider).
        #[arg(long, value_name = "PATH.wasm")]
        provider: PathBuf,
        /// Cluster to use; default: KUBECONFIG if set, else the test bed's
        /// (.testbed/kubeconfig) if present, else in-cluster or ~/.kube/config.
        #[arg(long, value_name = "FILE")]
        kubeconfig: Option<PathBuf>,
        /// How long each waiting check may take.
        #[arg(long, value_name = "SECONDS", default_value_t = 60)]
        timeout: u64,
        /// Keep the scratch namespaces for inspection.
        #[arg(long)]
        keep_namespaces: bool,
        /// Carrier2 image passed to the provider in the mount's settings.
        #[arg(long, default_value = DEFAULT_CARRIER_IMAGE)]
        carrier_image: String,
        /// The kinds of target to check, e.g. `deployment,pod` (deployment,
        /// statefulset, pod); each is then required. Default: every kind the
        /// provider does not decline in `validate` (an invalid-input naming
        /// the kind), the declined ones reported as skipped.
        #[arg(long, value_name = "KIND,...", value_delimiter = ',')]
        kinds: Option<Vec<conformance::TargetKind>>,
    },
}

const DEFAULT_CARRIER_IMAGE: &str = "quay.io/gefyra/carrier2:latest";

#[derive(Args, Debug)]
struct RunArgs {
    /// Cluster to use; default: in-cluster config or KUBECONFIG (~/.kube/config).
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// The namespace the operator runs in; it keeps its restore ConfigMap there.
    #[arg(long, default_value = "gefyra", env = "PONTOON_NAMESPACE")]
    namespace: String,
    /// Only serve mounts of this namespace (default: every namespace).
    #[arg(long, value_name = "NAMESPACE", env = "PONTOON_WATCH_NAMESPACE")]
    watch_namespace: Option<String>,
    /// Directory of provider modules (*.wasm); default: dist/providers when it
    /// exists, else /usr/lib/pontoon/providers.
    #[arg(long, value_name = "DIR", env = "PONTOON_PROVIDERS")]
    providers: Option<PathBuf>,
    /// Further directories of provider modules (an administrator's own),
    /// loaded after `--providers`; a module whose name is taken is rejected.
    /// Repeat the flag, or separate directories with `:`.
    #[arg(
        long,
        value_name = "DIR",
        value_delimiter = ':',
        env = "PONTOON_CUSTOM_PROVIDERS"
    )]
    custom_providers: Vec<PathBuf>,
    /// What each provider module may declare (YAML: module name -> capabilities);
    /// a module declaring more is refused at load. Default: what it declares.
    #[arg(long, value_name = "FILE", env = "PONTOON_GRANTS")]
    grants: Option<PathBuf>,
    /// Keep compiled provider modules here (keyed by content and engine
    /// version), so a restart loads them without compiling.
    #[arg(long, value_name = "DIR", env = "PONTOON_CACHE_DIR")]
    cache_dir: Option<PathBuf>,
    /// The Carrier2 image put into the original pods of a mount.
    #[arg(long, default_value = DEFAULT_CARRIER_IMAGE, env = "PONTOON_CARRIER_IMAGE")]
    carrier_image: String,
    /// Seconds a mount whose target disappeared waits for it (a mount's
    /// `missingGracePeriod` overrides it).
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = 86400,
        env = "PONTOON_MISSING_GRACE_PERIOD"
    )]
    missing_grace_period: u64,
    /// Seconds between two looks at a mount when nothing changes (a safety net:
    /// changes of mounts, workloads and pods are watched).
    #[arg(long, value_name = "SECONDS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..), env = "PONTOON_RECONCILE_INTERVAL")]
    reconcile_interval: u64,
    /// Wall-clock seconds one provider call may take before it is stopped.
    #[arg(long, value_name = "SECONDS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..), env = "PONTOON_PROVIDER_DEADLINE")]
    provider_deadline: u64,
    /// Which controllers run; `all` runs every one whose CRDs the cluster has.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "all",
        env = "PONTOON_CONTROLLERS"
    )]
    controllers: Vec<operator::ControllerSet>,
    /// The `controllerName` of the GatewayClasses this operator serves.
    #[arg(
        long,
        default_value = "pontoon.dev/gateway-controller",
        env = "PONTOON_GATEWAY_CONTROLLER_NAME"
    )]
    gateway_controller_name: String,
    /// The image each Gateway's pods run: Pontoon's data plane (Praxis with
    /// Pontoon's filters, which serve the features Praxis lacks).
    #[arg(long, default_value = DataPlane::DEFAULT_IMAGE, env = "PONTOON_DATA_PLANE_IMAGE")]
    data_plane_image: String,
    /// Run stock Praxis from this image instead (e.g.
    /// ghcr.io/praxis-proxy/praxis:0.7.5): the GatewayClass then claims only
    /// what Praxis serves, and rules needing Pontoon's filters are refused.
    #[arg(long, env = "PRAXIS_IMAGE", conflicts_with = "data_plane_image")]
    praxis_image: Option<String>,
    /// Generated Praxis configs allow running as root (`insecure_options.allow_root`).
    /// Only for tests that run praxis as root; never in a cluster.
    #[arg(long, hide = true)]
    praxis_allow_root: bool,
    /// Provider calls that run at once; the others wait their turn. Their
    /// instances' memory together stays within `--provider-memory-budget`.
    #[arg(long, value_name = "N", default_value_t = 6, value_parser = clap::value_parser!(u64).range(1..=64), env = "PONTOON_MAX_PROVIDER_CALLS")]
    max_provider_calls: u64,
    /// Memory (MiB) the instances of the provider calls running at once hold
    /// together; a call's growth past it waits for another call to end.
    /// Keep it, plus about 64 MiB for the operator, under the operator's
    /// memory limit (the chart checks it). At least `--provider-memory`.
    #[arg(long, value_name = "MIB", default_value_t = 192, value_parser = clap::value_parser!(u64).range(1..=65536), env = "PONTOON_PROVIDER_MEMORY_BUDGET")]
    provider_memory_budget: u64,
    /// Namespaces mounts may target, comma-separated, or `*` for every
    /// namespace but the excluded ones. A mount targeting any other goes to
    /// ERROR before anything is touched. Default: `*` with --single-tenant,
    /// else none (an administrator of a shared cluster says which).
    #[arg(
        long,
        value_name = "NAMESPACES",
        value_delimiter = ',',
        env = "PONTOON_MOUNT_NAMESPACES"
    )]
    mount_namespaces: Option<Vec<String>>,
    /// The cluster is single-tenant: whoever may create a mount or a bridge
    /// may also patch and exec every pod it could target, so mounts and
    /// bridges are served without the admission policies that judge their
    /// creators' rights (which are then not required). Without it, and
    /// without those policies in force, every mount and bridge is refused.
    #[arg(
        long,
        value_name = "BOOL",
        num_args = 0..=1,
        default_missing_value = "true",
        default_value_t = false,
        action = clap::ArgAction::Set,
        env = "PONTOON_SINGLE_TENANT"
    )]
    single_tenant: bool,
    /// The ValidatingAdmissionPolicy that judges who may create or change a
    /// mount (the chart's `<release>-mounts`); mounts are served only while
    /// it is bound with Deny (unless --single-tenant).
    #[arg(
        long,
        value_name = "NAME",
        default_value = "pontoon-mounts",
        env = "PONTOON_MOUNT_ADMISSION_POLICY"
    )]
    mount_admission_policy: String,
    /// The most bridges a mount renders: its oldest; the others are refused
    /// (their judgement is work of the operator's at every look at the mount).
    #[arg(long, value_name = "N", default_value_t = pontoon::bridge::MAX_BRIDGES_PER_MOUNT as u64, value_parser = clap::value_parser!(u64).range(1..=1000), env = "PONTOON_MAX_BRIDGES_PER_MOUNT")]
    max_bridges_per_mount: u64,
    /// Where bridges may send requests, comma-separated: `cluster` (the
    /// cluster's pod and Service networks and its Services' names), networks
    /// (`192.168.101.0/24`), host names (`dev.example.com`, `*.example.com`).
    #[arg(
        long,
        value_name = "DESTINATIONS",
        value_delimiter = ',',
        default_value = "cluster",
        env = "PONTOON_BRIDGE_DESTINATIONS"
    )]
    bridge_destinations: Vec<String>,
    #[command(flatten)]
    connections: connection_args::ConnectionArgs,
    /// The cluster's DNS domain, for Service names as bridge destinations.
    #[arg(long, default_value = "cluster.local", env = "PONTOON_CLUSTER_DOMAIN")]
    cluster_domain: String,
    /// The ValidatingAdmissionPolicy that judges who may create or change a
    /// bridge (the chart's `<release>-bridges`).
    #[arg(
        long,
        value_name = "NAME",
        default_value = "pontoon-bridges",
        env = "PONTOON_BRIDGE_ADMISSION_POLICY"
    )]
    bridge_admission_policy: String,
    /// Namespaces mounts may never target, comma-separated; the operator's
    /// own (`--namespace`) always is one.
    #[arg(
        long,
        value_name = "NAMESPACES",
        value_delimiter = ',',
        default_value = "kube-system",
        env = "PONTOON_MOUNT_EXCLUDED_NAMESPACES"
    )]
    mount_excluded_namespaces: Vec<String>,
    /// Memory (MiB) one provider instance may use before it is stopped.
    #[arg(long, value_name = "MIB", default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=4096), env = "PONTOON_PROVIDER_MEMORY")]
    provider_memory: u64,
    /// Where `/healthz`, `/readyz` and `/metrics` are served (port 0: any free port, logged).
    #[arg(
        long,
        value_name = "ADDR:PORT",
        default_value = "0.0.0.0:8080",
        env = "PONTOON_METRICS_ADDR"
    )]
    metrics_addr: std::net::SocketAddr,
    /// Reconcile only while holding the Lease `--leader-elect-lease` in
    /// `--namespace`, so that of several replicas one acts at a time.
    #[arg(long, env = "PONTOON_LEADER_ELECT")]
    leader_elect: bool,
    /// The Lease's name.
    #[arg(
        long,
        default_value = "pontoon-leader",
        env = "PONTOON_LEADER_ELECT_LEASE"
    )]
    leader_elect_lease: String,
    /// Seconds a leader's Lease is valid without renewal: a standby takes
    /// over at most this long after the leader died (at once when it stopped
    /// cleanly). Must exceed the renew deadline plus the longest provider
    /// call (`--provider-deadline` and 5 s to stop it).
    #[arg(long, value_name = "SECONDS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(2..=3600), env = "PONTOON_LEADER_ELECT_LEASE_DURATION")]
    leader_elect_lease_duration: u64,
    /// Seconds the leader keeps leading without a successful renewal; from
    /// then on it writes nothing and exits, to come back as a standby.
    #[arg(long, value_name = "SECONDS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600), env = "PONTOON_LEADER_ELECT_RENEW_DEADLINE")]
    leader_elect_renew_deadline: u64,
    /// Seconds between two tries to renew the Lease (or, as a standby, to
    /// take it).
    #[arg(long, value_name = "SECONDS", default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=3600), env = "PONTOON_LEADER_ELECT_RETRY_PERIOD")]
    leader_elect_retry_period: u64,
}

/// This replica's name in the Lease: the pod's (`POD_NAME`, set by the
/// chart from the downward API), else host and process.
fn identity() -> String {
    std::env::var("POD_NAME").unwrap_or_else(|_| {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "pontoon".into());
        format!("{host}-{}", std::process::id())
    })
}

// jemalloc, configured in .cargo/config.toml to give freed memory back.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    // A relay runs once per developer in a shared cluster and carries one session (one
    // port-forward stream): one thread serves it, and a second thread's allocator arena and
    // stack would only add to its resident size.
    let mut runtime = match cli.command {
        Command::Relay(_) => tokio::runtime::Builder::new_current_thread(),
        _ => tokio::runtime::Builder::new_multi_thread(),
    };
    runtime.enable_all().build()?.block_on(run(cli))
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    // The provider check's output is its report: a denied call or a failed
    // step is in a FAIL line already, and is not printed twice by the logs.
    let default_level = match cli.command {
        Command::Conformance { .. } | Command::Check { .. } => "error",
        // A developer's terminal: the command's own lines, not logs.
        Command::Bridge(_) => "warn",
        _ => "info",
    };
    telemetry::init(cli.log_format, default_level);
    match cli.command {
        Command::Run(args) => {
            let identity = identity();
            let leader_election = args.leader_elect.then(|| pontoon::leader::Settings {
                lease_duration: Duration::from_secs(args.leader_elect_lease_duration),
                renew_deadline: Duration::from_secs(args.leader_elect_renew_deadline),
                retry_period: Duration::from_secs(args.leader_elect_retry_period),
                ..pontoon::leader::Settings::new(
                    &args.namespace,
                    &args.leader_elect_lease,
                    &identity,
                )
            });
            if let Some(settings) = &leader_election {
                settings
                    .check(Duration::from_secs(args.provider_deadline))
                    .map_err(anyhow::Error::msg)?;
            }
            if args.provider_memory_budget < args.provider_memory {
                anyhow::bail!(
                    "--provider-memory-budget ({} MiB) is less than --provider-memory ({} MiB): \
                     the provider calls' budget must hold at least one call",
                    args.provider_memory_budget,
                    args.provider_memory
                );
            }
            let mut config = config(args.kubeconfig, false).await?;
            // The API server's audit log names the replica that sent each request.
            config.headers.push((
                http::header::USER_AGENT,
                http::HeaderValue::from_str(&format!(
                    "pontoon/{} ({identity})",
                    env!("CARGO_PKG_VERSION")
                ))?,
            ));
            let (data_plane, data_plane_image) =
                DataPlane::chosen(args.praxis_image, args.data_plane_image);
            let options = operator::Options {
                providers: args.providers,
                custom_providers: args.custom_providers,
                grants: args.grants,
                settings: bridge_mount::MountSettings {
                    target_namespaces: match &args.mount_namespaces {
                        Some(allowed) => bridge_mount::TargetNamespaces::new(
                            allowed.iter().map(String::as_str),
                            args.mount_excluded_namespaces.iter().map(String::as_str),
                            &args.namespace,
                        ),
                        None if args.single_tenant => bridge_mount::TargetNamespaces::new(
                            ["*"],
                            args.mount_excluded_namespaces.iter().map(String::as_str),
                            &args.namespace,
                        ),
                        None => bridge_mount::TargetNamespaces::unset(),
                    },
                    guard: bridge_mount::GuardSettings {
                        single_tenant: args.single_tenant,
                        mount_policy: args.mount_admission_policy,
                        bridge_policy: args.bridge_admission_policy,
                    },
                    bridges: pontoon::bridge::BridgeSettings {
                        max_per_mount: usize::try_from(args.max_bridges_per_mount)?,
                        destinations: std::sync::Arc::new(
                            pontoon::bridge::Destinations::parse(
                                &args.bridge_destinations,
                                &args.cluster_domain,
                            )
                            .map_err(anyhow::Error::msg)?,
                        ),
                        connections: args.connections.settings(),
                        sessions: Default::default(),
                    },
                    operator_namespace: args.namespace,
                    carrier_image: args.carrier_image,
                    missing_grace_period: Duration::from_secs(args.missing_grace_period),
                    reconcile_interval: Duration::from_secs(args.reconcile_interval),
                },
                limits: Limits {
                    deadline: Duration::from_secs(args.provider_deadline),
                    memory_bytes: usize::try_from(args.provider_memory)? * 1024 * 1024,
                    concurrent_calls: usize::try_from(args.max_provider_calls)?,
                    memory_budget_bytes: usize::try_from(args.provider_memory_budget)?
                        * 1024
                        * 1024,
                },
                cache_dir: args.cache_dir,
                controllers: args.controllers,
                gateway: GatewaySettings {
                    controller_name: args.gateway_controller_name,
                    data_plane,
                    data_plane_image,
                    config: GenerateOptions {
                        health_address: Some(std::net::SocketAddr::from((
                            [0, 0, 0, 0],
                            u16::try_from(pontoon::gateway::data_plane::children::ADMIN_PORT)?,
                        ))),
                        allow_root: args.praxis_allow_root,
                        data_plane,
                        ..GenerateOptions::default()
                    },
                },
                scope: WatchScope {
                    watch_namespace: args.watch_namespace,
                },
                metrics_addr: Some(args.metrics_addr),
                leader_election,
            };
            operator::run(config, options).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Bridge(args) => pontoon::developer::bridge::run(*args).await,
        Command::Relay(args) => {
            pontoon::developer::relay::run(args).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Crds {
            set,
            channel,
            out_dir,
        } => {
            crds::print_or_write(set, channel, out_dir.as_deref())?;
            Ok(ExitCode::SUCCESS)
        }
        Command::TerminateMounts {
            kubeconfig,
            namespace,
            watch_namespace,
            timeout,
        } => {
            let client = client(kubeconfig, false).await?;
            bridge_mount::terminate::terminate_all(
                client,
                &namespace,
                watch_namespace.as_deref(),
                Duration::from_secs(timeout),
                |line| println!("{line}"),
            )
            .await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::CheckUpgrade {
            kubeconfig,
            namespace,
            watch_namespace,
            mount_namespaces,
            mount_excluded_namespaces,
        } => {
            let allowed = bridge_mount::TargetNamespaces::new(
                mount_namespaces.iter().map(String::as_str),
                mount_excluded_namespaces.iter().map(String::as_str),
                &namespace,
            );
            let client = client(kubeconfig, false).await?;
            let looked_at = bridge_mount::upgrade_check::check(
                client,
                &namespace,
                watch_namespace.as_deref(),
                &allowed,
            )
            .await?;
            println!(
                "{looked_at} mount(s), none outside the namespaces mounts may target after the \
                 upgrade ({allowed})"
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Check { provider, grants } => check_module(&provider, grants.as_deref()).await,
        Command::Conformance {
            provider,
            kubeconfig,
            timeout,
            keep_namespaces,
            carrier_image,
            kinds,
        } => {
            let client = client(kubeconfig, true).await?;
            let options = conformance::Options {
                timeout: Duration::from_secs(timeout),
                keep_namespaces,
                carrier_image,
                kinds,
                // The generic suite: no provider's own format is read.
                bridge_read_back: None,
            };
            println!("conformance of {}", provider.display());
            let checks =
                conformance::run(client, &provider, options, |check| println!("{check}")).await?;
            let passed = checks.iter().filter(|c| c.passed()).count();
            let failed = checks.iter().filter(|c| c.failed()).count();
            let skipped = checks.len() - passed - failed;
            println!("{passed} passed, {failed} failed, {skipped} skipped");
            Ok(if failed == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
    }
}

/// `pontoon check`: what the operator would make of `module` at load.
async fn check_module(module: &Path, grants: Option<&Path>) -> anyhow::Result<ExitCode> {
    use pontoon::plugins::{Limits, LoadError, LoadedModule, PluginRuntime, grants};
    let grants = grants.map(grants::Grants::read).transpose()?;
    let runtime = PluginRuntime::new(Limits::default())?;
    let loaded = match runtime.load_file(module).await {
        Ok(loaded) => loaded,
        Err(err) => {
            println!("refused at load: {err}");
            return Ok(ExitCode::FAILURE);
        }
    };
    let (name, scope) = match &loaded {
        LoadedModule::Provider(m) => {
            println!(
                "bridge-mount provider `{}` {} ({})",
                m.metadata.name,
                m.metadata.version,
                module.display()
            );
            (m.metadata.name.clone(), m.metadata.scope.clone())
        }
        LoadedModule::Connection(m) => {
            println!(
                "connection provider `{}` {} ({})",
                m.metadata.name,
                m.metadata.version,
                module.display()
            );
            (m.metadata.name.clone(), m.metadata.scope.clone())
        }
        LoadedModule::Filter(m) => {
            println!(
                "config filter `{}` {} ({})",
                m.metadata.name,
                m.metadata.version,
                module.display()
            );
            println!("handles: {}", m.metadata.handles.join(", "));
            // A filter makes no cluster calls: it has no scope and needs no grant.
            return Ok(ExitCode::SUCCESS);
        }
    };
    let lines = grants::describe_scope(&scope);
    if lines.is_empty() {
        println!("scope: none (every cluster call is denied)");
    } else {
        println!("scope:");
        for line in &lines {
            println!("  {line}");
        }
    }
    let Some(grants) = grants else {
        println!("no --grants: the operator without a grants file loads it with this scope");
        return Ok(ExitCode::SUCCESS);
    };
    match grants.check(&name, &scope) {
        Ok(()) => {
            println!("granted: the operator loads it with these grants");
            Ok(ExitCode::SUCCESS)
        }
        Err(excess) => {
            let refusal = LoadError::NotGranted {
                path: module.to_path_buf(),
                module: name,
                excess,
            };
            println!("refused at load: {refusal}");
            Ok(ExitCode::FAILURE)
        }
    }
}

/// A client from `kubeconfig`; without one, from `KUBECONFIG` when it is set
/// (a user's explicit choice wins, as with kubectl); else the test bed's when
/// `prefer_testbed` and it exists; else in-cluster or ~/.kube/config.
async fn client(kubeconfig: Option<PathBuf>, prefer_testbed: bool) -> anyhow::Result<kube::Client> {
    Ok(kube::Client::try_from(
        config(kubeconfig, prefer_testbed).await?,
    )?)
}

async fn config(kubeconfig: Option<PathBuf>, prefer_testbed: bool) -> anyhow::Result<kube::Config> {
    use kube::config::{KubeConfigOptions, Kubeconfig};
    let from_env = std::env::var_os("KUBECONFIG").is_some_and(|v| !v.is_empty());
    let path = kubeconfig.or_else(|| {
        let testbed = PathBuf::from(".testbed/kubeconfig");
        (prefer_testbed && !from_env && testbed.exists()).then_some(testbed)
    });
    let config = match path {
        Some(path) => {
            let file = Kubeconfig::read_from(&path).with_context(|| {
                format!(
                    "cannot read kubeconfig {} (--kubeconfig; the test bed's is \
                     .testbed/kubeconfig once `make testbed-up` ran)",
                    path.display()
                )
            })?;
            kube::Config::from_custom_kubeconfig(file, &KubeConfigOptions::default()).await?
        }
        None => kube::Config::infer().await.context(
            "no kubeconfig given and none found (KUBECONFIG, in-cluster, ~/.kube/config): \
             pass --kubeconfig FILE (the test bed's is .testbed/kubeconfig, after `make testbed-up`)",
        )?,
    };
    Ok(config)
}
