//! Leader election through a `coordination.k8s.io/v1` Lease, so that of
//! several replicas exactly one reconciles.
//!
//! Every write of the Lease is bound to the version read (a replace with
//! its `resourceVersion`), so two candidates can never both take it. An
//! expired Lease is judged by this process's own clock: a holder is gone
//! when its Lease has not changed for `lease_duration` since this process
//! last saw it change (clocks of different nodes are never compared). The
//! holder renews every `retry_period`; a holder that has not renewed for
//! `renew_deadline` stops leading (the process exits, to come back as a
//! standby). On a clean shutdown the holder hands the Lease back, so a
//! standby takes over at its next try instead of after the duration.
//!
//! [`lead`] waits for the Lease; [`keep_leading`] renews it while the
//! controllers run and says when it is lost.

use std::time::{Duration, Instant};

use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::MicroTime,
    jiff::Timestamp,
};
use kube::{
    Api, Client,
    api::{ObjectMeta, PostParams},
};

use crate::metrics::METRICS;

#[derive(Clone, Debug)]
pub struct Settings {
    /// The Lease's namespace and name.
    pub namespace: String,
    pub name: String,
    /// Who this replica is (the pod's name in a cluster).
    pub identity: String,
    /// How long a Lease is valid without renewal.
    pub lease_duration: Duration,
    /// How long the holder keeps leading without a successful renewal.
    pub renew_deadline: Duration,
    /// Time between two tries (to renew, or to take the Lease).
    pub retry_period: Duration,
}

impl Settings {
    /// client-go's defaults: 15 s, 10 s, 2 s.
    pub fn new(namespace: &str, name: &str, identity: &str) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
            identity: identity.into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

pub struct LeaderElector {
    api: Api<Lease>,
    settings: Settings,
    /// The Lease's holder and renew time as last seen, and when they were
    /// seen to change (by this process's clock).
    observed: Option<(Option<String>, Option<MicroTime>, Instant)>,
}

/// The outcome of one try.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attempt {
    /// This replica holds the Lease (taken or renewed).
    Leading,
    /// Another replica holds it.
    Following { holder: String },
}

impl LeaderElector {
    pub fn new(client: Client, settings: Settings) -> Self {
        Self {
            api: Api::namespaced(client, &settings.namespace),
            settings,
            observed: None,
        }
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Takes or renews the Lease if this replica may.
    pub async fn try_acquire_or_renew(&mut self) -> kube::Result<Attempt> {
        let now = MicroTime(Timestamp::now());
        let Some(lease) = self.api.get_opt(&self.settings.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.settings.name.clone()),
                    namespace: Some(self.settings.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(self.spec(now.clone(), now, 0)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(Attempt::Leading),
                // Another replica created it first.
                Err(kube::Error::Api(s)) if s.code == 409 => self.following(None),
                Err(err) => Err(err),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        let ours = holder.as_deref() == Some(&self.settings.identity);
        self.observe(&spec);
        let expired = holder.is_none() || self.observed_age() >= self.lease_duration_of(&spec);
        if !ours && !expired {
            return self.following(holder);
        }
        let transitions = spec.lease_transitions.unwrap_or(0) + i32::from(!ours);
        let acquired = if ours {
            spec.acquire_time.clone().unwrap_or_else(|| now.clone())
        } else {
            now.clone()
        };
        let mut next = lease;
        next.spec = Some(self.spec(acquired, now, transitions));
        match self
            .api
            .replace(&self.settings.name, &PostParams::default(), &next)
            .await
        {
            Ok(written) => {
                if let Some(spec) = &written.spec {
                    self.observe(spec);
                }
                Ok(Attempt::Leading)
            }
            // Someone wrote the Lease since we read it: not ours this time.
            Err(kube::Error::Api(s)) if s.code == 409 => self.following(holder),
            Err(err) => Err(err),
        }
    }

    /// Hands the Lease back if this replica holds it: the next candidate's
    /// try takes it at once.
    pub async fn release(&mut self) -> kube::Result<()> {
        let Some(mut lease) = self.api.get_opt(&self.settings.name).await? else {
            return Ok(());
        };
        let Some(spec) = lease.spec.as_mut() else {
            return Ok(());
        };
        if spec.holder_identity.as_deref() != Some(&self.settings.identity) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.renew_time = Some(MicroTime(Timestamp::now()));
        match self
            .api
            .replace(&self.settings.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) | Err(kube::Error::Api(_)) => Ok(()),
            Err(err) => Err(err),
        }
    }

    fn spec(&self, acquired: MicroTime, renewed: MicroTime, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.settings.identity.clone()),
            lease_duration_seconds: Some(
                i32::try_from(self.settings.lease_duration.as_secs()).unwrap_or(i32::MAX),
            ),
            acquire_time: Some(acquired),
            renew_time: Some(renewed),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }

    fn following(&self, holder: Option<String>) -> kube::Result<Attempt> {
        Ok(Attempt::Following {
            holder: holder.unwrap_or_else(|| "(another replica)".into()),
        })
    }

    /// Notes the Lease's holder and renew time, and when they last changed.
    fn observe(&mut self, spec: &LeaseSpec) {
        let record = (spec.holder_identity.clone(), spec.renew_time.clone());
        let changed = self
            .observed
            .as_ref()
            .is_none_or(|(holder, renewed, _)| (holder, renewed) != (&record.0, &record.1));
        if changed {
            self.observed = Some((record.0, record.1, Instant::now()));
        }
    }

    fn observed_age(&self) -> Duration {
        self.observed
            .as_ref()
            .map_or(Duration::ZERO, |(_, _, at)| at.elapsed())
    }

    /// The holder's own duration, when it wrote one.
    fn lease_duration_of(&self, spec: &LeaseSpec) -> Duration {
        spec.lease_duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .map_or(self.settings.lease_duration, Duration::from_secs)
    }
}

/// Waits until this replica holds the Lease (`true`) or the process is asked
/// to stop (`false`).
pub async fn lead(
    elector: &mut LeaderElector,
    shutdown: impl std::future::Future<Output = ()> + Clone,
) -> anyhow::Result<bool> {
    let settings = elector.settings().clone();
    tracing::info!(lease = %format!("{}/{}", settings.namespace, settings.name), identity = settings.identity, "waiting to lead");
    let mut last_holder = None;
    loop {
        match elector.try_acquire_or_renew().await {
            Ok(Attempt::Leading) => {
                tracing::info!(
                    identity = settings.identity,
                    "leading: starting the controllers"
                );
                return Ok(true);
            }
            Ok(Attempt::Following { holder }) => {
                if last_holder.as_ref() != Some(&holder) {
                    tracing::info!(%holder, "standing by: another replica leads");
                    last_holder = Some(holder);
                }
            }
            Err(err) => tracing::warn!(error = %err, "cannot read or take the leader Lease"),
        }
        tokio::select! {
            () = tokio::time::sleep(settings.retry_period) => {},
            () = shutdown.clone() => return Ok(false),
        }
    }
}

/// Renews the Lease every retry period; when it is lost (another replica
/// took it, or renewals failed for the renew deadline) signals `lost`. On
/// `stop` (the controllers have stopped) hands the Lease back, so a standby
/// takes over at once; returns whether this replica still led.
pub async fn keep_leading(
    mut elector: LeaderElector,
    lost: tokio::sync::oneshot::Sender<()>,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) -> bool {
    let settings = elector.settings().clone();
    let mut renewed = std::time::Instant::now();
    loop {
        tokio::select! {
            _ = &mut stop => {
                if let Err(err) = elector.release().await {
                    tracing::warn!(error = %err, "cannot hand the leader Lease back");
                }
                return true;
            }
            () = tokio::time::sleep(settings.retry_period) => {}
        }
        match elector.try_acquire_or_renew().await {
            Ok(Attempt::Leading) => renewed = std::time::Instant::now(),
            Ok(Attempt::Following { holder }) => {
                tracing::error!(%holder, "another replica took the leader Lease");
                break;
            }
            Err(err) => tracing::warn!(error = %err, "cannot renew the leader Lease"),
        }
        if renewed.elapsed() >= settings.renew_deadline {
            break;
        }
    }
    METRICS.leader.set(0);
    let _ = lost.send(());
    false
}
