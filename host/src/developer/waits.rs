//! What `pontoon bridge` waits for before it tells the developer that
//! requests reach them: the relay Ready, the bridge ACTIVE, and the relay
//! and the shadow reached through their Services.

use std::time::{Duration, Instant};

use anyhow::bail;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::{Api, ResourceExt, api::ListParams};

use super::{
    bridge::{REACHABLE_WAIT, Relay, Run, SHADOW_MARK, message, relay_health_port},
    reachable::{self, Reach},
};
use crate::bridge_mount::crd::GefyraBridgeMount;

impl Run {
    /// The relay pod is Ready once it serves the session: the operator then
    /// knows the developer is connected.
    pub(super) async fn wait_relay_ready(&self, relay: &Relay) -> anyhow::Result<()> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &relay.namespace);
        let deadline = Instant::now() + self.wait;
        loop {
            let pod = pods.get(&relay.pod).await?;
            let ready = pod
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            if ready {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "your relay {}/{} did not become ready within {}s",
                    relay.namespace,
                    relay.pod,
                    self.wait.as_secs()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Until cluster clients reach the relay through its Service; past
    /// [`REACHABLE_WAIT`] the developer is told, and the run goes on (a
    /// cluster whose pods cannot reach their own Service still serves
    /// everyone else's pods).
    pub(super) async fn wait_reachable(&self, relay: &Relay) {
        self.progress.step(
            "waiting for the cluster to reach your relay, and the shadow, through their Services",
        );
        let deadline = Instant::now() + REACHABLE_WAIT.min(self.wait);
        // The relay's own Service first; then the shadow's (everyone else's
        // requests), whose pods may have turned Ready a moment ago.
        let mut targets = vec![None];
        targets.extend(self.shadows().await.into_iter().map(Some));
        for to in &targets {
            let reach = reachable::wait(
                &self.forwarding,
                &relay.namespace,
                &relay.pod,
                relay_health_port(),
                to.as_deref(),
                deadline,
            )
            .await;
            if let Reach::NotYet(why) = reach {
                let what = match to {
                    None => format!("your relay {}/{}", relay.namespace, relay.pod),
                    Some(to) => format!("the shadow at {to}"),
                };
                self.progress.warn(format_args!(
                    "could not confirm within {}s that the cluster reaches {what} ({why}); \
                     requests may be refused until it does",
                    REACHABLE_WAIT.as_secs(),
                ));
            }
        }
    }

    /// The shadow Service addresses of the bridged ports (`host:port`), as
    /// the mount's provider marks them (carrier2mount labels what a mount
    /// made with its uid); none when the provider marks none or the
    /// developer may not list Services there.
    async fn shadows(&self) -> Vec<String> {
        let mounts: Api<GefyraBridgeMount> =
            Api::namespaced(self.client.clone(), &self.mount_namespace);
        let uid = match mounts.get(&self.mount).await {
            Ok(mount) => mount.metadata.uid.unwrap_or_default(),
            Err(err) => {
                tracing::debug!(error = %err, "reading the mount for its shadow");
                return Vec::new();
            }
        };
        let services: Api<Service> = Api::namespaced(self.client.clone(), &self.namespace);
        let listed = services
            .list(&ListParams::default().labels(&format!("{SHADOW_MARK}={uid}")))
            .await;
        let services = match listed {
            Ok(list) => list.items,
            Err(err) => {
                tracing::debug!(error = %err, "listing the mount's shadow Services");
                return Vec::new();
            }
        };
        let remote: Vec<u16> = self.plan.ports.iter().map(|(_, remote)| *remote).collect();
        services
            .iter()
            .flat_map(|service| {
                let ports = service.spec.iter().flat_map(|s| s.ports.iter().flatten());
                ports
                    .filter(|p| remote.iter().any(|r| i32::from(*r) == p.port))
                    .map(|p| {
                        format!(
                            "{}.{}.svc.cluster.local:{}",
                            service.name_any(),
                            self.namespace,
                            p.port
                        )
                    })
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    pub(super) async fn wait_active(&self) -> anyhow::Result<()> {
        let deadline = Instant::now() + self.wait;
        let mut shown = String::new();
        loop {
            let bridge = self.bridges.get(&self.bridge).await?;
            self.refused(&bridge).await?;
            let state = bridge.bridge.state.clone().unwrap_or_default();
            if state == "ACTIVE" {
                return Ok(());
            }
            let now = format!("{state}: {}", message(&bridge));
            if now != shown {
                self.progress.step(format_args!("bridge {now}"));
                shown = now;
            }
            if Instant::now() > deadline {
                bail!(
                    "GefyraBridge `{}` was not ACTIVE within {}s; it is {shown}",
                    self.bridge,
                    self.wait.as_secs()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
