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
//! controllers run and says when it is lost. Each renewal keeps the
//! [`Fence`] open for the renew deadline; the controllers' client writes
//! only through it ([`fence`]), so a leader that stalled past its deadline
//! writes nothing even before it notices the loss.

pub mod fence;

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

pub use self::fence::{Fence, FenceLayer};
use crate::metrics::METRICS;

// Time a provider call may take beyond its deadline before it is stopped
// regardless (the plugin runtime's hard bound).
use pontoon_plugins::HARD_DEADLINE_GRACE as PROVIDER_CALL_GRACE;

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
    /// 30 s, 10 s, 2 s: client-go's renew deadline and retry period, and a
    /// lease long enough that the renew deadline plus the longest provider
    /// call (10 s plus the 5 s to stop it) ends before it.
    pub fn new(namespace: &str, name: &str, identity: &str) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
            identity: identity.into(),
            lease_duration: Duration::from_secs(30),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }

    /// Refuses timings under which two replicas could write at once: a
    /// leader must give up (renew deadline) and finish its longest provider
    /// call before a standby may take the Lease (lease duration), and must
    /// try to renew more than once within the deadline.
    pub fn check(&self, provider_deadline: Duration) -> Result<(), String> {
        let longest_call = provider_deadline + PROVIDER_CALL_GRACE;
        let secs = |d: Duration| d.as_secs_f64();
        if self.renew_deadline + longest_call >= self.lease_duration {
            return Err(format!(
                "--leader-elect-lease-duration ({} s) must be longer than --leader-elect-renew-deadline ({} s) \
                 plus the longest provider call ({} s: --provider-deadline {} s and {} s to stop it), \
                 or a leader that stalled could still be writing when a standby takes over: \
                 raise the lease duration or lower the others",
                secs(self.lease_duration),
                secs(self.renew_deadline),
                secs(longest_call),
                secs(provider_deadline),
                secs(PROVIDER_CALL_GRACE),
            ));
        }
        if self.retry_period.is_zero() || self.retry_period * 2 > self.renew_deadline {
            return Err(format!(
                "--leader-elect-retry-period ({} s) must be above 0 and at most half of --leader-elect-renew-deadline ({} s), \
                 so that one failed renewal does not end leading",
                secs(self.retry_period),
                secs(self.renew_deadline),
            ));
        }
        Ok(())
    }
}

pub struct LeaderElector {
    api: Api<Lease>,
    settings: Settings,
    /// The Lease's holder and renew time as last seen, and when they were
    /// seen to change (by this process's clock).
    observed: Option<(Option<String>, Option<MicroTime>, Instant)>,
    /// Open while this replica leads; see [`fence`].
    fence: Fence,
    /// Whether this process took the Lease: from then on an expired fence
    /// means the Lease may be another's, and it is not renewed.
    led: bool,
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
    /// `client` must not write through `fence`: the elector writes the
    /// Lease to take it while the fence is closed.
    pub fn new(client: Client, settings: Settings, fence: Fence) -> Self {
        Self {
            api: Api::namespaced(client, &settings.namespace),
            settings,
            observed: None,
            fence,
            led: false,
        }
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Takes or renews the Lease if this replica may.
    pub async fn try_acquire_or_renew(&mut self) -> kube::Result<Attempt> {
        let began = Instant::now();
        let attempt = self.attempt().await;
        if attempt.as_ref().is_ok_and(|a| *a == Attempt::Leading) {
            self.led = true;
            self.fence.renewed(began, self.settings.renew_deadline);
        }
        attempt
    }

    async fn attempt(&mut self) -> kube::Result<Attempt> {
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
        if ours && self.led && !self.fence.is_open() {
            // Stalled past the renew deadline: a standby may hold the Lease
            // by its own clock already, so leading ends without a write.
            return self.following(Some(
                "(unknown: this replica's renew deadline passed)".into(),
            ));
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
        if !elector.fence.is_open() {
            tracing::error!("the leader Lease was not renewed within the renew deadline");
            break;
        }
        // A renewal hanging on an unreachable API server must not outlast
        // the fence unnoticed.
        match tokio::time::timeout(settings.renew_deadline, elector.try_acquire_or_renew()).await {
            Ok(Ok(Attempt::Leading)) => {}
            Ok(Ok(Attempt::Following { holder })) => {
                tracing::error!(%holder, "another replica took the leader Lease");
                break;
            }
            Ok(Err(err)) => tracing::warn!(error = %err, "cannot renew the leader Lease"),
            Err(_) => {
                tracing::warn!("renewing the leader Lease took longer than the renew deadline")
            }
        }
    }
    elector.fence.close();
    METRICS.leader.set(0);
    let _ = lost.send(());
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(lease: u64, renew: u64, retry: u64) -> Settings {
        Settings {
            lease_duration: Duration::from_secs(lease),
            renew_deadline: Duration::from_secs(renew),
            retry_period: Duration::from_secs(retry),
            ..Settings::new("pontoon", "pontoon-leader", "a")
        }
    }

    #[test]
    fn the_defaults_let_the_longest_provider_call_end_before_a_take_over() {
        assert_eq!(
            Settings::new("pontoon", "pontoon-leader", "a").check(Duration::from_secs(10)),
            Ok(())
        );
    }

    #[test]
    fn a_lease_shorter_than_renew_deadline_plus_longest_call_is_refused_naming_the_flags() {
        // 10 s renew deadline + 10 s provider deadline + 5 s to stop it = 25 s.
        let err = settings(25, 10, 2)
            .check(Duration::from_secs(10))
            .unwrap_err();
        for named in [
            "--leader-elect-lease-duration (25 s)",
            "--leader-elect-renew-deadline (10 s)",
            "longest provider call (15 s",
            "--provider-deadline 10 s",
        ] {
            assert!(err.contains(named), "{named}: {err}");
        }
        assert_eq!(settings(26, 10, 2).check(Duration::from_secs(10)), Ok(()));
        // A shorter provider deadline allows a shorter lease: 2 + 1 + 5 < 9.
        assert_eq!(settings(9, 2, 1).check(Duration::from_secs(1)), Ok(()));
        assert!(settings(8, 2, 1).check(Duration::from_secs(1)).is_err());
    }

    #[test]
    fn a_retry_period_above_half_the_renew_deadline_is_refused() {
        let err = settings(30, 10, 6)
            .check(Duration::from_secs(10))
            .unwrap_err();
        assert!(err.contains("--leader-elect-retry-period (6 s)"), "{err}");
        assert_eq!(settings(30, 10, 5).check(Duration::from_secs(10)), Ok(()));
    }
}
