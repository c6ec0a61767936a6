//! `pontoon bridge`: one command from "I want my requests" to "they reach
//! my machine", and back.
//!
//! 1. Who the developer is (a SelfSubjectReview), what the workload is (read
//!    with their rights: it exists, the container, its declared ports).
//! 2. The mount serving the workload, or a new one marked as made by
//!    `pontoon bridge`.
//! 3. The developer's GefyraBridge (`connectionProvider: tunnel`, `client`
//!    their user name); the operator's connection controller sets up their
//!    relay and writes its address into `clusterEndpoint`.
//! 4. A port-forward to the relay through the API server, one session over
//!    it (`pontoon-tunnel`); once the bridge is ACTIVE, one line says what
//!    now reaches which local port.
//! 5. Until Ctrl-C, SIGTERM or the command's end: relaying, reconnecting
//!    when the port-forward drops. Then the bridge (and an unused mount made
//!    by `pontoon bridge`) is deleted, and the run waits for the workload to
//!    be back as it was.

use std::{
    collections::BTreeMap,
    process::ExitCode,
    time::{Duration, Instant},
};

use anyhow::{Context as _, anyhow, bail};
use k8s_openapi::api::{authentication::v1::SelfSubjectReview, core::v1::Pod};
use kube::{Api, Client, ResourceExt, api::PostParams};
use pontoon_tunnel::{RelayConfig, Session, SessionError, SessionEvent};
use serde_json::{Value, json};

use super::{
    args::BridgeArgs,
    forward,
    interrupts::Interrupts,
    objects::{self, BridgeRequest},
    plan::Plan,
    progress::Progress,
    workload::{self, Workload},
};
use crate::{
    bridge::connections::ENDPOINTS_ANNOTATION,
    bridge_mount::crd::{GefyraBridge, GefyraBridgeMount},
};

/// Runs the command; the exit code is the run's (the command's, with one).
pub async fn run(args: BridgeArgs) -> anyhow::Result<ExitCode> {
    let progress = Progress::new(args.quiet);
    let plan = Plan::of(&args)?;
    let config = kube_config(&args).await?;
    let namespace = args
        .namespace
        .clone()
        .unwrap_or_else(|| config.default_namespace.clone());
    let forwarding = forward::client(&config)
        .context("cannot build a client for port-forwarding from your kubeconfig")?;
    let client = Client::try_from(config)?;
    let mut interrupts = Interrupts::new()?;

    progress.step("asking the API server who you are");
    let user = whoami(&client).await?;
    progress.step(format_args!(
        "reading {} in namespace `{namespace}`",
        plan.target
    ));
    let workload = Workload::read(&client, &namespace, &plan.target).await?;
    let container = workload.container(args.container.as_deref())?;
    let declared = workload::declared_ports(container);
    for (_, remote) in &plan.ports {
        if !declared.contains(remote) {
            bail!(
                "port {remote} is not declared by container `{}` of {} in namespace `{namespace}` \
                 (it declares {}); bridge one of those",
                container.name,
                plan.target,
                if declared.is_empty() {
                    "none".to_string()
                } else {
                    declared
                        .iter()
                        .map(u16::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            );
        }
    }
    let env = if args.command.is_empty() {
        None
    } else {
        let (env, unreadable) = workload::environment(&client, &namespace, container).await;
        for what in &unreadable {
            progress.warn(format_args!("not in the command's environment: {what}"));
        }
        Some(env)
    };

    let mounts: Api<GefyraBridgeMount> = Api::namespaced(client.clone(), &args.mount_namespace);
    let bridges: Api<GefyraBridge> = Api::namespaced(client.clone(), &args.mount_namespace);
    let mount = match objects::find_mount(&mounts, &namespace, &plan.target).await? {
        Some(mount) => {
            let serves = mount.fields.target_container.as_deref().unwrap_or_default();
            if serves != container.name {
                bail!(
                    "GefyraBridgeMount `{}/{}` serves container `{serves}` of {}, not `{}`; \
                     bridge that container, or ask its owner",
                    args.mount_namespace,
                    mount.name_any(),
                    plan.target,
                    container.name
                );
            }
            progress.step(format_args!(
                "using GefyraBridgeMount `{}/{}`",
                args.mount_namespace,
                mount.name_any()
            ));
            mount
        }
        None => {
            progress.step(format_args!(
                "creating a GefyraBridgeMount for {} (a shadow of it serves everyone else)",
                plan.target
            ));
            objects::create_mount(
                &client,
                &args.mount_namespace,
                &namespace,
                &plan.target,
                &container.name,
            )
            .await?
        }
    };
    let mount_name = mount.name_any();
    let request = BridgeRequest {
        mount: &mount_name,
        client: &user,
        connection_provider: &args.connection_provider,
        target_namespace: &namespace,
        container: &container.name,
        port_mappings: plan
            .ports
            .iter()
            .map(|(local, remote)| format!("{local}:{remote}"))
            .collect(),
        matches: plan.matches.clone(),
    };
    let bridge = match objects::find_own_bridge(&bridges, &request).await {
        Ok(Some(bridge)) => {
            progress.step(format_args!(
                "taking over GefyraBridge `{}` of your earlier run",
                bridge.name_any()
            ));
            Ok(bridge)
        }
        Ok(None) => objects::create_bridge(&client, &args.mount_namespace, &request).await,
        Err(err) => Err(err),
    };
    let bridge = match bridge {
        Ok(bridge) => bridge,
        Err(err) => {
            let left = cleanup(&mounts, &bridges, None, &mount_name, progress).await;
            report_left(&left, progress);
            return Err(err);
        }
    };
    let bridge_name = bridge.name_any();
    let ctx = Run {
        client: client.clone(),
        forwarding,
        bridges: bridges.clone(),
        bridge: bridge_name.clone(),
        mount: mount_name.clone(),
        user: user.clone(),
        plan,
        progress,
        wait: Duration::from_secs(args.timeout),
        namespace: namespace.clone(),
        mount_namespace: args.mount_namespace.clone(),
    };
    let outcome = ctx.serve(env, &args.command, &mut interrupts).await;
    // The session stays while the bridge goes: requests the pods still send
    // to the relay reach this machine until their config no longer has it.
    let (outcome, session) = match outcome {
        Ok((code, session)) => (Ok(code), session),
        Err(err) => {
            progress.warn(format_args!("{err:#}"));
            (Err(()), None)
        }
    };
    // Putting things back; a second interrupt leaves at once.
    progress.step("putting everything back (Ctrl-C again to leave now)");
    let cleaned = tokio::select! {
        left = cleanup(&mounts, &bridges, Some(&bridge_name), &mount_name, progress) => left,
        () = interrupts.next() => {
            let left = [
                format!("GefyraBridge {}/{bridge_name}", args.mount_namespace),
                format!("GefyraBridgeMount {}/{mount_name} (if made by `pontoon bridge` and unused)", args.mount_namespace),
            ];
            eprintln!(
                "pontoon bridge: left at once; left behind: {}; the next `pontoon bridge` removes \
                 them, or: kubectl delete gefyrabridge -n {} {bridge_name}",
                left.join(", "),
                args.mount_namespace
            );
            return Ok(ExitCode::from(130));
        }
    };
    if let Some(session) = session {
        tokio::time::sleep(SESSION_DRAIN).await;
        session.close().await;
    }
    report_left(&cleaned, progress);
    match outcome {
        Ok(code) if cleaned.is_empty() => Ok(code),
        _ => Ok(ExitCode::FAILURE),
    }
}

/// How long the session outlives its deleted bridge: the mount renders the
/// pods' config without it within this (one exec per pod).
const SESSION_DRAIN: Duration = Duration::from_secs(1);

fn report_left(left: &[String], progress: Progress) {
    if !left.is_empty() {
        progress.warn(format_args!(
            "could not remove everything: {}",
            left.join("; ")
        ));
    } else {
        progress.step("done: the workload serves as before");
    }
}

/// Deletes the bridge (when made), then every mount made by `pontoon
/// bridge` that no bridge uses (this run's at once, an earlier killed run's
/// too), each waited for; what could not be removed, described.
async fn cleanup(
    mounts: &Api<GefyraBridgeMount>,
    bridges: &Api<GefyraBridge>,
    bridge: Option<&str>,
    mount: &str,
    progress: Progress,
) -> Vec<String> {
    let mut left = Vec::new();
    if let Some(bridge) = bridge {
        progress.step(format_args!("deleting GefyraBridge `{bridge}`"));
        if let Err(err) = objects::delete_bridge(bridges, bridge).await {
            left.push(format!("{err:#}"));
        }
    }
    match objects::unused_mounts(mounts, bridges, Some(mount)).await {
        Ok(unused) => {
            for name in unused {
                progress.step(format_args!(
                    "deleting GefyraBridgeMount `{name}` (made by `pontoon bridge`, now unused); \
                     the operator puts its workload back"
                ));
                if let Err(err) = objects::delete_mount(mounts, &name).await {
                    left.push(format!("{err:#}"));
                }
            }
        }
        Err(err) => left.push(format!("{err:#}")),
    }
    left
}

async fn kube_config(args: &BridgeArgs) -> anyhow::Result<kube::Config> {
    use kube::config::{KubeConfigOptions, Kubeconfig};
    let options = KubeConfigOptions {
        context: args.context.clone(),
        ..KubeConfigOptions::default()
    };
    match &args.kubeconfig {
        Some(path) => {
            let file = Kubeconfig::read_from(path)
                .with_context(|| format!("cannot read kubeconfig {}", path.display()))?;
            Ok(kube::Config::from_custom_kubeconfig(file, &options).await?)
        }
        None => kube::Config::from_kubeconfig(&options).await.context(
            "no kubeconfig found (KUBECONFIG, ~/.kube/config); give one with --kubeconfig",
        ),
    }
}

/// The caller's user name, as the API server knows it.
async fn whoami(client: &Client) -> anyhow::Result<String> {
    let review: SelfSubjectReview = serde_json::from_value(json!({
        "apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview",
    }))?;
    let answer = Api::<SelfSubjectReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .context("cannot ask the API server who you are (SelfSubjectReview)")?;
    answer
        .status
        .and_then(|s| s.user_info)
        .and_then(|u| u.username)
        .filter(|u| !u.is_empty())
        .context("the API server did not say who you are (SelfSubjectReview without a user name)")
}

/// How long a lost or not yet listening relay is tried every 100 ms before every 2 s.
const RECONNECT_EAGER: Duration = Duration::from_secs(5);

/// How long `pontoon bridge` waits for the cluster to reach a ready relay
/// through its Service (kube-proxy syncs at most once a second).
pub(super) const REACHABLE_WAIT: Duration = Duration::from_secs(10);

/// The relay's session port and health port (`/ready`, `/reachable`):
/// `pontoon relay`'s defaults, which the tunnel provider's pod keeps.
fn relay_session_port() -> u16 {
    RelayConfig::default().session_addr.port()
}
pub(super) fn relay_health_port() -> u16 {
    RelayConfig::default().health_addr.port()
}

/// The label carrier2mount puts on what a mount made (its shadow Service
/// among them), valued with the mount's uid.
pub(super) const SHADOW_MARK: &str = "pontoon.dev/mount-uid";

/// One run's objects and settings, once its bridge exists.
pub(super) struct Run {
    pub(super) client: Client,
    /// Port-forwards to the relay (see `forward`).
    pub(super) forwarding: Client,
    pub(super) bridges: Api<GefyraBridge>,
    pub(super) bridge: String,
    pub(super) mount: String,
    pub(super) user: String,
    pub(super) plan: Plan,
    pub(super) progress: Progress,
    pub(super) wait: Duration,
    pub(super) namespace: String,
    pub(super) mount_namespace: String,
}

/// The relay serves another session of this developer.
#[derive(Debug)]
struct Refusal(String);

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "your relay refused this session: {}; is another `pontoon bridge` of yours \
             running? A developer has one session at a time",
            self.0
        )
    }
}

impl std::error::Error for Refusal {}

/// Where the relay is and which of its ports serve which local port.
pub(super) struct Relay {
    pub(super) pod: String,
    pub(super) namespace: String,
    /// relay port → `host:port` on this side
    pub(super) routes: BTreeMap<u16, String>,
}

impl Run {
    /// Until the command ends or the session cannot be had back.
    /// Until the command ends, an interrupt, or the session cannot be had
    /// back; the session, when there is one, is handed back to be closed
    /// after the bridge is gone.
    async fn serve(
        &self,
        env: Option<BTreeMap<String, String>>,
        command: &[String],
        interrupts: &mut Interrupts,
    ) -> anyhow::Result<(ExitCode, Option<Session>)> {
        let setup = async {
            self.progress.step(format_args!(
                "waiting for the operator to connect GefyraBridge `{}` (mount `{}`)",
                self.bridge, self.mount
            ));
            let relay = self.relay().await?;
            self.progress.step(format_args!(
                "connecting to your relay {}/{} through the API server",
                relay.namespace, relay.pod
            ));
            // The relay's process may still be starting: tried again.
            let connected = self.reconnect(&relay).await?;
            self.progress
                .step("tunnel connected; waiting for the relay and the bridge to be ready");
            self.wait_relay_ready(&relay).await?;
            self.wait_active().await?;
            self.wait_reachable(&relay).await;
            anyhow::Ok((relay, connected))
        };
        let (relay, (mut session, mut events)) = tokio::select! {
            ready = setup => ready?,
            () = interrupts.next() => return Ok((ExitCode::SUCCESS, None)),
        };
        let ports: Vec<String> = self
            .plan
            .ports
            .iter()
            .map(|(local, remote)| format!("{remote} → {}", self.plan.to[local]))
            .collect();
        println!(
            "Requests to {}/{} port {} with {} now reach this machine (GefyraBridge {}/{}); Ctrl-C to stop",
            self.namespace,
            self.plan.target,
            ports.join(", "),
            self.plan.described,
            self.mount_namespace,
            self.bridge
        );
        let mut child = match (&env, command.split_first()) {
            (Some(env), Some((program, args))) => Some(
                tokio::process::Command::new(program)
                    .args(args)
                    .envs(env)
                    .kill_on_drop(true)
                    .spawn()
                    .with_context(|| format!("cannot run `{program}`"))?,
            ),
            _ => None,
        };
        loop {
            tokio::select! {
                () = interrupts.next() => return Ok((ExitCode::SUCCESS, Some(session))),
                status = async {
                    match child.as_mut() {
                        Some(child) => child.wait().await,
                        None => std::future::pending().await,
                    }
                } => {
                    let status = status?;
                    self.progress.step(format_args!("`{}` exited ({status})", command[0]));
                    let code = u8::try_from(status.code().unwrap_or(1).clamp(0, 255)).unwrap_or(1);
                    return Ok((ExitCode::from(code), Some(session)));
                }
                event = events.recv() => match event {
                    Some(SessionEvent::DialFailed { port, target, error }) => self.progress.warn(format_args!(
                        "a request for relay port {port} could not reach {target}: {error} (is your service listening?)"
                    )),
                    Some(_) => {}
                    None => {
                        let reason = session.close_reason().unwrap_or_else(|| "the port-forward ended".into());
                        self.progress.warn(format_args!("lost the tunnel ({reason}); reconnecting"));
                        (session, events) = self.reconnect(&relay).await?;
                        self.progress.warn("tunnel reconnected");
                    }
                },
            }
        }
    }

    /// Waits for the relay the operator set up for this client, from the
    /// bridge's `clusterEndpoint` (`pontoon-relay-<id>.<namespace>.svc…:<port>`).
    async fn relay(&self) -> anyhow::Result<Relay> {
        let deadline = Instant::now() + self.wait;
        loop {
            let bridge = self
                .bridges
                .get(&self.bridge)
                .await
                .with_context(|| format!("cannot read GefyraBridge `{}`", self.bridge))?;
            self.refused(&bridge).await?;
            if let Some(relay) = self.relay_of(&bridge)? {
                let pods: Api<Pod> = Api::namespaced(self.client.clone(), &relay.namespace);
                match pods.get_opt(&relay.pod).await {
                    Ok(Some(pod))
                        if pod.status.as_ref().and_then(|s| s.phase.as_deref())
                            == Some("Running") =>
                    {
                        return Ok(relay);
                    }
                    Ok(_) => {}
                    Err(kube::Error::Api(status)) if status.code == 403 => bail!(
                        "you may not read your relay pod {}/{} ({}); your cluster's administrator \
                         grants it with the chart's `pontoon-developer` ClusterRole",
                        relay.namespace,
                        relay.pod,
                        status.message
                    ),
                    Err(err) => return Err(err.into()),
                }
            }
            if Instant::now() > deadline {
                bail!(
                    "the bridge was not connected within {}s; it says: {}",
                    self.wait.as_secs(),
                    message(&bridge)
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn relay_of(&self, bridge: &GefyraBridge) -> anyhow::Result<Option<Relay>> {
        // The operator's record of the endpoints, there also while the
        // bridge is out of Carrier2's config (this client was away).
        let recorded: Option<serde_json::Map<String, Value>> = bridge
            .annotations()
            .get(ENDPOINTS_ANNOTATION)
            .and_then(|text| serde_json::from_str(text).ok());
        let Some(endpoints) = recorded
            .filter(|e| !e.is_empty())
            .or_else(|| bridge.bridge.cluster_endpoint.clone())
        else {
            return Ok(None);
        };
        let mut routes = BTreeMap::new();
        let mut host = None;
        for (local, remote) in &self.plan.ports {
            let Some(address) = endpoints.get(&remote.to_string()).and_then(Value::as_str) else {
                return Ok(None);
            };
            let (h, port) = address
                .rsplit_once(':')
                .and_then(|(h, p)| Some((h.to_string(), p.parse::<u16>().ok()?)))
                .with_context(|| format!("clusterEndpoint `{address}` is not host:port"))?;
            host = Some(h);
            routes.insert(port, self.plan.to[local].clone());
        }
        let Some(host) = host else { return Ok(None) };
        let mut labels = host.split('.');
        let (Some(pod), Some(namespace)) = (labels.next(), labels.next()) else {
            bail!("clusterEndpoint host `{host}` does not name a relay Service");
        };
        Ok(Some(Relay {
            pod: pod.to_string(),
            namespace: namespace.to_string(),
            routes,
        }))
    }

    /// An ERROR bridge as what to change; a clash names the other client.
    pub(super) async fn refused(&self, bridge: &GefyraBridge) -> anyhow::Result<()> {
        if bridge.bridge.state.as_deref() != Some("ERROR") {
            return Ok(());
        }
        let why = message(bridge);
        if why.contains("duplicates bridge") {
            bail!(
                "your rules clash with another bridge on GefyraBridgeMount `{}`: {why}; choose \
                 another header value",
                self.mount
            );
        }
        bail!("the operator refused GefyraBridge `{}`: {why}", self.bridge);
    }

    async fn connect(
        &self,
        relay: &Relay,
        handshake: Duration,
    ) -> anyhow::Result<(Session, tokio::sync::mpsc::UnboundedReceiver<SessionEvent>)> {
        let stream = forward::open(
            &self.forwarding,
            &relay.namespace,
            &relay.pod,
            relay_session_port(),
        )
        .await
        .map_err(|err| match &err {
            kube::Error::Api(status) if status.code == 403 => anyhow!(
                "you may not port-forward to your relay {}/{} ({}); only the developer a relay \
                 serves may, through the Role the operator made for them",
                relay.namespace,
                relay.pod,
                status.message
            ),
            _ => anyhow::Error::new(err).context("cannot port-forward to your relay"),
        })?;
        Session::open_within(stream, &self.user, relay.routes.clone(), handshake)
            .await
            .map_err(|err| match err {
                SessionError::Refused(reason) => anyhow::Error::new(Refusal(reason)),
                other => anyhow::Error::new(other).context("cannot open a session with your relay"),
            })
    }

    async fn reconnect(
        &self,
        relay: &Relay,
    ) -> anyhow::Result<(Session, tokio::sync::mpsc::UnboundedReceiver<SessionEvent>)> {
        let started = Instant::now();
        let deadline = started + self.wait;
        // A listening relay answers the handshake within a few round trips;
        // a port-forward opened before the relay's process listened may stay
        // silent (the test bed's kwok keeps it open after the pod's port
        // refused it) and is given up sooner at first: 1 s, doubling to 10 s.
        let mut handshake = Duration::from_secs(1);
        loop {
            match self.connect(relay, handshake).await {
                Ok(session) => return Ok(session),
                Err(err) if Instant::now() > deadline || err.is::<Refusal>() => return Err(err),
                Err(err) => tracing::debug!(error = %err, "reconnect"),
            }
            handshake = (handshake * 2).min(Duration::from_secs(10));
            // A relay pod that just started listens within moments: tried
            // often at first (a developer waits on it), then gently.
            let pause = if started.elapsed() < RECONNECT_EAGER {
                Duration::from_millis(100)
            } else {
                Duration::from_secs(2)
            };
            tokio::time::sleep(pause).await;
        }
    }
}

pub(super) fn message(bridge: &GefyraBridge) -> String {
    bridge
        .bridge
        .status
        .as_ref()
        .and_then(|s| s.get("message"))
        .and_then(Value::as_str)
        .unwrap_or("(no message yet)")
        .to_string()
}
