//! Admission: before its provider is told of a mount, the operator judges
//! what it asks for (target namespace, target, container, provider) and
//! records what it admitted (`admitted.rs`). The checks run for every mount
//! the operator has no record of, whatever its `state` says: REQUESTED and
//! ERROR's retry go through them and start PREPARING; a mount found in a
//! later state without a record (written by hand, or admitted by an
//! earlier version of the operator, which kept no record) is adopted only
//! if it passes them, and goes to ERROR otherwise.
//!
//! The checks, in order: the cluster judges mounts at admission (or is
//! single-tenant), the operator is not being uninstalled, the target
//! namespace is one mounts may target, the parameters are of a size a
//! provider can take, and no other mount holds the target's workload or
//! any of its pods. Then the provider validates the mount and its target
//! must exist.

use std::time::Duration;

use kube::{ResourceExt, runtime::controller::Action};

use super::{
    Error, Reconcile,
    outcome::{ERROR_RETRY, Next, failure, target_present},
    report::{Report, Step},
    transition::Transition,
};
use crate::{
    admitted::Admitted,
    crd::GefyraBridgeMount,
    guard::Guarded,
    holders::{self, Candidate},
    reason::{ReadyReason, Reason},
    state::State,
    status::{ADMITTED, Observed},
};
use pontoon_plugins::{ProviderModule, bindings::Mount};

/// Why a mount is not admitted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub reason: Reason,
    pub message: String,
}

impl Refusal {
    fn new(reason: Reason, message: String) -> Self {
        Self { reason, message }
    }
}

/// Which checks a judgement runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Checks {
    /// All of them: the mount is to be served.
    Serve,
    /// Those that keep a deletion from undoing another mount's work: the
    /// namespace and the pods. (Putting a target back is never refused for
    /// want of a policy.)
    Undo,
}

impl Reconcile<'_> {
    /// Why the mount may not be admitted for `self.request`, if it may not.
    pub(super) async fn refusal(&self, checks: Checks) -> Result<Option<Refusal>, Error> {
        let request = &self.request;
        if checks == Checks::Serve {
            if let Err(why) = self.ctx.guard.check(Guarded::Mounts).await {
                return Ok(Some(Refusal::new(Reason::Unguarded, why)));
            }
            if let Some(why) = self.ctx.admissions.closed().await? {
                return Ok(Some(Refusal::new(Reason::AdmissionClosed, why)));
            }
        }
        let allowed = self
            .ctx
            .settings
            .target_namespaces
            .permit(&request.target_namespace);
        if let Err(why) = allowed {
            return Ok(Some(Refusal::new(Reason::NamespaceNotAllowed, why)));
        }
        if checks == Checks::Serve
            && let Some(why) = oversized_parameters(&self.cr)
        {
            return Ok(Some(Refusal::new(Reason::InvalidInput, why)));
        }
        let mounts = self.ctx.mounts.state();
        let mut others = Vec::new();
        for mount in &mounts {
            if mount.uid() == self.cr.uid() {
                continue;
            }
            let uid = mount.uid().unwrap_or_default();
            let asked_here = Admitted::of(mount).target_namespace == request.target_namespace;
            // A mount whose fields were pointed elsewhere after admission (a
            // CRD older than the operator's let them) still holds what its
            // record names: its record is read too when the mount is past
            // admission, and it counts where the record says.
            let admitted = if asked_here || past_admission(mount) {
                self.ctx.admissions.of(&uid).await?
            } else {
                self.ctx.admissions.cached(&uid)
            };
            let recorded_here = admitted
                .as_ref()
                .is_some_and(|a| a.target_namespace == request.target_namespace);
            if asked_here || recorded_here {
                others.push(Candidate { mount, admitted });
            }
        }
        let held = holders::holder(
            &self.ctx.client,
            &self.cr,
            request,
            &others,
            self.ctx.every_namespace,
        )
        .await?;
        Ok(held.map(|holder| {
            Refusal::new(Reason::DuplicateMount, duplicate_message(request, &holder))
        }))
    }

    /// REQUESTED (and a retry from ERROR): refuse what the checks refuse,
    /// let the provider validate, check the target exists, record the
    /// admission, then start preparing.
    pub(super) async fn admit(
        &mut self,
        from: State,
        provider: &ProviderModule,
        request: &Mount,
    ) -> Result<Action, Error> {
        if let Some(refusal) = self.refusal(Checks::Serve).await? {
            let next = refused(from, self.writer.ready_reason(), refusal, self.interval);
            return self.execute(from, next).await;
        }
        let valid = provider
            .validate(Some(self.access(provider, request)), request)
            .await;
        if let Err(err) = valid {
            return self
                .execute(from, failure(from, Step::Validate, &err))
                .await;
        }
        let exists = provider
            .target_exists(self.access(provider, request), request)
            .await;
        if let Some(next) = target_present(from, request, &exists) {
            return self.execute(from, next).await;
        }
        self.record_admission().await?;
        let next = Next::Fire(admitted(request, provider.name()));
        self.execute(from, next).await
    }

    /// A mount found beyond REQUESTED and ERROR without a record of its
    /// admission: adopted (recorded, its state's step follows) when it
    /// passes the checks; refused otherwise, its provider never called.
    /// `None` when adopted.
    pub(super) async fn adopt(&mut self, from: State) -> Result<Option<Action>, Error> {
        if let Some(refusal) = self.refusal(Checks::Serve).await? {
            let ready = self.writer.ready_reason();
            let next = match from {
                State::Preparing | State::Installing | State::Active => {
                    refused(from, ready, refusal, self.interval)
                }
                // ERROR is not a way out of these: say why nothing is done.
                _ => Next::Report(
                    Report::not_ready(refusal.reason, "Admit", not_admitted(from, &refusal)),
                    self.interval,
                ),
            };
            return self.execute(from, next).await.map(Some);
        }
        tracing::info!(state = %from,
            "adopting a mount in {from} with no record of its admission: it passes admission now");
        self.record_admission().await?;
        Ok(None)
    }

    /// Records that the mount is admitted for `self.request`, unless it is
    /// already (a retry from ERROR keeps what was admitted first).
    async fn record_admission(&mut self) -> Result<(), Error> {
        let uid = self.uid();
        if self.ctx.admissions.of(&uid).await?.is_none() {
            self.ctx.admissions.record(&self.cr, &self.request).await?;
        }
        self.writer.record([Observed::new(
            ADMITTED,
            true,
            Reason::Admitted.as_str(),
            format!("admitted for {}", self.request.describe()),
        )]);
        Ok(())
    }

    /// ERROR: a mount stays here until what caused it can have changed.
    pub(super) async fn retry_error(
        &mut self,
        provider: &ProviderModule,
        request: &Mount,
    ) -> Result<Action, Error> {
        let waited = self.cr.time_in(State::Error, self.writer.now());
        let pause = failure_pause(provider.stopped_in_a_row());
        match error_retry(self.writer.ready_reason(), waited, pause, self.interval) {
            Retry::Admit => self.admit(State::Error, provider, request).await,
            Retry::After(after) => Ok(Action::requeue(after)),
        }
    }
}

/// Whether ERROR goes back through admission now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retry {
    Admit,
    After(Duration),
}

/// ERROR, by the reason it was entered for: the provider may have been
/// loaded, the other mount of the target gone, the admission policies
/// installed, or the operator restarted with other namespaces allowed
/// (admission answers those at once); a provider failure may pass after
/// `pause`. Invalid input stays: the fields that decide it cannot change,
/// the mount must be recreated.
pub fn error_retry(
    ready: ReadyReason,
    waited: Duration,
    pause: Duration,
    interval: Duration,
) -> Retry {
    match ready {
        ReadyReason::Known(
            Reason::ProviderNotFound
            | Reason::DuplicateMount
            | Reason::NamespaceNotAllowed
            | Reason::Unguarded
            | Reason::AdmissionClosed,
        ) => Retry::Admit,
        ReadyReason::Known(Reason::ProviderFailed) | ReadyReason::Unset => {
            if waited >= pause {
                Retry::Admit
            } else {
                Retry::After(pause.saturating_sub(waited))
            }
        }
        ReadyReason::Known(_) | ReadyReason::Other => Retry::After(interval),
    }
}

/// How long a mount in ERROR for a provider failure waits before it is
/// tried again: [`ERROR_RETRY`], doubled for each call of the provider in
/// a row that the sandbox stopped (deadline, memory, trap), up to 16 times
/// as long. A module that runs out its deadline at every call would
/// otherwise hold a turn for its deadline every [`ERROR_RETRY`].
pub fn failure_pause(stopped_in_a_row: u32) -> Duration {
    ERROR_RETRY * 2u32.pow(stopped_in_a_row.saturating_sub(1).min(4))
}

/// The most `providerParameter` JSON a mount may carry: it is handed to the
/// provider at every step of every reconcile, inside the provider's memory
/// limit. Gefyra's own parameters (TLS settings) are a few hundred bytes.
pub const MAX_PARAMETER_BYTES: usize = 64 * 1024;

/// Why the mount's `providerParameter` is refused, if it is: too large.
pub fn oversized_parameters(cr: &GefyraBridgeMount) -> Option<String> {
    let bytes = cr.fields.provider_parameter.as_ref().map_or(0, |p| {
        serde_json::Value::Object(p.clone()).to_string().len()
    });
    (bytes > MAX_PARAMETER_BYTES).then(|| {
        format!(
            "providerParameter is {bytes} bytes of JSON and a mount may carry at most \
             {MAX_PARAMETER_BYTES}: keep large data in a ConfigMap or Secret and name it in \
             providerParameter, and recreate the mount"
        )
    })
}

/// A refused mount goes to ERROR saying why, before anything is read or
/// written for it; one in ERROR for that reason already waits quietly.
pub fn refused(from: State, ready: ReadyReason, refusal: Refusal, interval: Duration) -> Next {
    if from == State::Error && ready == ReadyReason::Known(refusal.reason) {
        return Next::Requeue(interval);
    }
    Next::Fire(Transition::impair(refusal.reason, refusal.message))
}

/// The refusal of a mount in a state ERROR cannot be reached from.
fn not_admitted(from: State, refusal: &Refusal) -> String {
    format!(
        "not admitted, so nothing is done for it although its state says {from}: {}",
        refusal.message
    )
}

/// Whether `mount` says it is past admission (any state the operator
/// writes after admitting it). Said by the mount itself, so only used to
/// decide whether its record is worth reading.
fn past_admission(mount: &GefyraBridgeMount) -> bool {
    !matches!(mount.state(), Ok(State::Requested) | Err(_))
}

/// The refusal of a mount whose target another mount holds.
pub fn duplicate_message(request: &Admitted, holder: &str) -> String {
    format!(
        "`{}` in namespace `{}` is already mounted by {holder}; a pod takes one mount at a \
         time, whatever the kind of target or the container (its interception and its shadow \
         are one per workload): delete one of the two mounts",
        request.target, request.target_namespace
    )
}

/// Admitted: the provider starts duplicating the target.
pub fn admitted(request: &Mount, provider: &str) -> Transition {
    Transition::arrange(format!(
        "duplicating `{}` in namespace `{}` with provider `{provider}`",
        request.target, request.target_namespace
    ))
}

#[cfg(test)]
mod tests {
    use super::{super::fixtures::*, *};
    use crate::state::{Event, fire};

    fn mount_with(parameters: Option<String>) -> GefyraBridgeMount {
        let mut object = serde_json::json!({
            "metadata": { "name": "web-mount", "namespace": "gefyra", "uid": "u-1" },
            "target": "deploy/web",
        });
        if let Some(text) = parameters {
            object["providerParameter"] = serde_json::from_str(&text).unwrap();
        }
        serde_json::from_value(object).unwrap()
    }

    #[test]
    fn a_provider_parameter_over_64_kib_is_refused_saying_its_size() {
        let big = mount_with(Some(format!(
            "{{\"tls\":\"{}\"}}",
            "x".repeat(MAX_PARAMETER_BYTES)
        )));
        let refusal = oversized_parameters(&big).unwrap();
        assert!(
            refusal.starts_with(
                "providerParameter is 65546 bytes of JSON and a mount may carry at most 65536"
            ),
            "{refusal}"
        );
        assert_eq!(
            oversized_parameters(&mount_with(Some("{\"tls\":{}}".into()))),
            None
        );
        assert_eq!(oversized_parameters(&mount_with(None)), None);
    }

    #[test]
    fn a_refusal_goes_to_error_once_then_waits() {
        let refusal = Refusal::new(
            Reason::NamespaceNotAllowed,
            "mounts may not target namespace `x`".into(),
        );
        for from in [
            State::Requested,
            State::Error,
            State::Preparing,
            State::Installing,
            State::Active,
        ] {
            let next = refused(from, ReadyReason::Unset, refusal.clone(), INTERVAL);
            let t = fired(&next);
            assert_eq!(
                (t.event, t.reason),
                (Event::Impair, Reason::NamespaceNotAllowed)
            );
            assert_eq!(t.message, "mounts may not target namespace `x`");
            assert_eq!(fire(from, t.event), Ok(State::Error), "from {from}");
        }
        let said = ReadyReason::Known(Reason::NamespaceNotAllowed);
        assert_eq!(
            refused(State::Error, said, refusal.clone(), INTERVAL),
            Next::Requeue(INTERVAL)
        );
        // Another reason in ERROR is said anew.
        let other = ReadyReason::Known(Reason::Unguarded);
        assert!(matches!(
            refused(State::Error, other, refusal, INTERVAL),
            Next::Fire(_)
        ));
    }

    #[test]
    fn a_duplicate_names_the_holder_and_what_to_do() {
        let request = Admitted {
            mount: "gefyra/second".into(),
            target_namespace: "shop".into(),
            target: "pod/web-1".into(),
            target_container: "app".into(),
            provider: "carrier2mount".into(),
        };
        assert_eq!(
            duplicate_message(
                &request,
                "gefyra/first (ACTIVE, container `app`) on `deploy/web`, which holds pod web-1"
            ),
            "`pod/web-1` in namespace `shop` is already mounted by gefyra/first (ACTIVE, \
             container `app`) on `deploy/web`, which holds pod web-1; a pod takes one mount at \
             a time, whatever the kind of target or the container (its interception and its \
             shadow are one per workload): delete one of the two mounts"
        );
    }

    #[test]
    fn a_mount_not_admitted_in_restoring_says_nothing_is_done() {
        let refusal = Refusal::new(Reason::Unguarded, "mounts are not served: …".into());
        assert_eq!(
            not_admitted(State::Restoring, &refusal),
            "not admitted, so nothing is done for it although its state says RESTORING: \
             mounts are not served: …"
        );
    }

    #[test]
    fn an_admitted_mount_starts_preparing() {
        let t = admitted(&request(), "carrier2mount");
        assert_eq!((t.event, t.reason), (Event::Arrange, Reason::Preparing));
        assert_eq!(
            t.message,
            "duplicating `deploy/web` in namespace `shop` with provider `carrier2mount`"
        );
        for from in [State::Requested, State::Error] {
            assert_eq!(fire(from, t.event), Ok(State::Preparing));
        }
    }

    #[test]
    fn admission_maps_every_provider_error_in_requested_and_error() {
        let request = request();
        for from in [State::Requested, State::Error] {
            for err in provider_errors() {
                // Validation and the target check share the mapping; both
                // ways out (ERROR, MISSING) are open from either state.
                let next = failure(from, Step::Validate, &err);
                if let Next::Fire(t) = &next {
                    assert!(fire(from, t.event).is_ok(), "{} from {from}", t.event);
                }
                let next = target_present(from, &request, &Err(copy(&err))).unwrap();
                if let Next::Fire(t) = &next {
                    assert!(fire(from, t.event).is_ok(), "{} from {from}", t.event);
                }
            }
        }
    }

    #[test]
    fn a_provider_stopped_again_and_again_is_retried_ever_less_often() {
        let secs = Duration::from_secs;
        let pauses: Vec<Duration> = (0..8).map(failure_pause).collect();
        assert_eq!(
            pauses,
            [15, 15, 30, 60, 120, 240, 240, 240].map(secs).to_vec()
        );
    }

    #[test]
    fn error_retries_by_the_reason_it_was_entered_for() {
        let secs = Duration::from_secs;
        for reason in [
            Reason::ProviderNotFound,
            Reason::DuplicateMount,
            Reason::NamespaceNotAllowed,
            Reason::Unguarded,
            Reason::AdmissionClosed,
        ] {
            assert_eq!(
                error_retry(
                    ReadyReason::Known(reason),
                    Duration::ZERO,
                    ERROR_RETRY,
                    INTERVAL
                ),
                Retry::Admit,
                "{reason}: at once"
            );
        }
        for ready in [
            ReadyReason::Known(Reason::ProviderFailed),
            ReadyReason::Unset,
        ] {
            assert_eq!(
                error_retry(ready, secs(0), ERROR_RETRY, INTERVAL),
                Retry::After(secs(15))
            );
            assert_eq!(
                error_retry(ready, secs(10), ERROR_RETRY, INTERVAL),
                Retry::After(secs(5))
            );
            assert_eq!(
                error_retry(ready, secs(15), ERROR_RETRY, INTERVAL),
                Retry::Admit
            );
            assert_eq!(
                error_retry(ready, secs(600), ERROR_RETRY, INTERVAL),
                Retry::Admit
            );
            // A provider stopped three times in a row: four times the pause.
            assert_eq!(
                error_retry(ready, secs(15), failure_pause(3), INTERVAL),
                Retry::After(secs(45))
            );
        }
        for ready in [
            ReadyReason::Known(Reason::InvalidInput),
            ReadyReason::Known(Reason::TransitionNotAllowed),
            ReadyReason::Other,
        ] {
            assert_eq!(
                error_retry(ready, secs(600), ERROR_RETRY, INTERVAL),
                Retry::After(INTERVAL),
                "{ready:?} stays"
            );
        }
    }
}
