//! What a provider keeps for GefyraBridges, checked without knowing where
//! it keeps them: install with a bridge does work for it, install after a
//! pod was replaced brings every condition back, install without the
//! bridge does work to take it out. With a provider's own
//! [`BridgeReadBack`] (carrier2mount's tests hand in Carrier2's), every
//! live pod is also read, and must hold the bridge, or no longer hold it.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::{Api, ResourceExt};

use super::{
    read_back::{BridgeReadBack, held_problem, sample_bridge},
    suite::{BRIDGE_AFTER_RESTART, BRIDGE_LET_GO, BRIDGE_TAKEN_UP, Run},
};
use crate::plugins::bindings::BRIDGES_IMPORT;

/// Checks run only with a provider's read-back, by their place.
const HELD: &str = "every pod holds the bridge after install (its endpoint on its port)";
const HELD_AFTER_RESTART: &str = "the pod that replaced a deleted one holds the bridge";
const GONE: &str = "no pod holds the bridge after install without it";

impl Run {
    /// The bridge checks of the Deployment round.
    pub(super) async fn bridge_steps(&mut self, read_back: Option<&Arc<dyn BridgeReadBack>>) {
        let neutral = [BRIDGE_TAKEN_UP, BRIDGE_AFTER_RESTART, BRIDGE_LET_GO];
        let held = [HELD, HELD_AFTER_RESTART, GONE];
        let held: &[&str] = if read_back.is_some() { &held } else { &[] };
        if !self.provider.renders_bridges() {
            let why =
                format!("the module does not import {BRIDGES_IMPORT}: it renders no GefyraBridges");
            self.skip_for(&neutral, &why);
            self.skip_for(held, &why);
            return;
        }
        self.bridges = Arc::from([sample_bridge()]);
        let taken_up = self.install_does_work("a new bridge").await;
        if !self.record(BRIDGE_TAKEN_UP, taken_up) {
            self.skip(&neutral[1..], BRIDGE_TAKEN_UP);
            self.skip(held, BRIDGE_TAKEN_UP);
            self.bridges = Arc::from([]);
            return;
        }
        if let Some(read_back) = read_back {
            let in_pods = self.wait_held(read_back.as_ref(), true).await;
            self.record(HELD, in_pods);
        }
        let restarted = match self.replace_a_pod().await {
            Ok(()) => match self.drive("install").await {
                Ok(()) => self.wait_all_ready().await,
                Err(err) => Err(err),
            },
            Err(err) => Err(err),
        };
        self.record(BRIDGE_AFTER_RESTART, restarted);
        if let Some(read_back) = read_back {
            let in_pods = self.wait_held(read_back.as_ref(), true).await;
            self.record(HELD_AFTER_RESTART, in_pods);
        }
        self.bridges = Arc::from([]);
        let let_go = self.install_does_work("a bridge no longer listed").await;
        self.record(BRIDGE_LET_GO, let_go);
        if let Some(read_back) = read_back {
            let in_pods = self.wait_held(read_back.as_ref(), false).await;
            self.record(GONE, in_pods);
        }
    }

    /// Install completes, and wrote or ran something: with a change in the
    /// bridges it lists, a provider that renders them has work to do.
    async fn install_does_work(&self, change: &str) -> Result<(), String> {
        let activity = self.journal.activity();
        self.drive("install").await?;
        if self.journal.activity() > activity {
            return Ok(());
        }
        Err(format!(
            "install with {change} wrote nothing and ran nothing on the cluster: the change \
             cannot have reached the pods"
        ))
    }

    /// Deletes one pod of the target and waits for all its replicas to be
    /// back and ready.
    async fn replace_a_pod(&self) -> Result<(), String> {
        let ns = self.mount.target_namespace.clone();
        let pods = self.kind.pods(&self.client, &ns).await?;
        let victim = pods.first().ok_or("the target has no pods")?.name_any();
        Api::<Pod>::namespaced(self.client.clone(), &ns)
            .delete(&victim, &Default::default())
            .await
            .map_err(|e| e.to_string())?;
        let victim = &victim;
        self.until(|run| async move {
            let ns = run.mount.target_namespace.clone();
            let pods = run.kind.pods(&run.client, &ns).await?;
            let live: Vec<&Pod> = pods
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .collect();
            Ok(
                (live.iter().any(|p| p.name_any() == *victim) || live.len() < 2)
                    .then(|| format!("pod {victim} was not replaced")),
            )
        })
        .await
    }

    /// Reads every live pod until each holds the sample bridge (`present`)
    /// or none does.
    async fn wait_held(&self, read_back: &dyn BridgeReadBack, present: bool) -> Result<(), String> {
        self.until(|run| async move {
            let ns = run.mount.target_namespace.clone();
            let pods = run.kind.pods(&run.client, &ns).await?;
            for pod in pods
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
            {
                let name = pod.name_any();
                let held = read_back
                    .read(&run.client, &ns, &name, &run.mount.target_container)
                    .await;
                if let Some(problem) = held_problem(&name, &read_back.what(), held, present) {
                    return Ok(Some(problem));
                }
            }
            Ok(None)
        })
        .await
    }
}
