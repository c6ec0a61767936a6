//! The forward steps: PREPARING duplicates the target into a shadow,
//! INSTALLING puts the interception in place, ACTIVE checks it stays intact
//! (and sends the mount RESTORING when it does not).

use std::time::Duration;

use kube::runtime::controller::Action;

use super::{
    Error, Reconcile,
    outcome::{Next, failure, progress, target_present},
    report::{Report, Step},
    transition::Transition,
};
use crate::{
    reason::Reason,
    state::State,
    status::{Observed, READY},
};
use pontoon_plugins::{
    CallError, ProviderModule,
    bindings::{Condition as ProviderCondition, Mount, Progress, ProviderError},
};

/// How often INSTALLING looks at readiness that no watch reports (exec'd config).
const READINESS_POLL: Duration = Duration::from_secs(1);
/// How often PREPARING looks again while the shadow pods start (they are watched, too).
const PREPARED_POLL: Duration = Duration::from_secs(2);
/// When ACTIVE looks again at a mount whose check gave way to other
/// mounts' steps (every provider turn was taken).
const CHECK_GIVEN_WAY: Duration = Duration::from_secs(2);

impl Reconcile<'_> {
    /// PREPARING: the provider duplicates the target; once it is usable, install.
    pub(super) async fn prepare(
        &mut self,
        provider: &ProviderModule,
        request: &Mount,
    ) -> Result<Action, Error> {
        let from = State::Preparing;
        let prepared = provider
            .prepare(self.access(provider, request), request)
            .await;
        if let Some(next) = progress(from, Step::Prepare, &prepared, self.interval) {
            return self.execute(from, next).await;
        }
        let usable = provider
            .prepared(self.access(provider, request), request)
            .await;
        self.execute(from, preparing_shadow(&usable)).await
    }

    /// INSTALLING: the provider puts the interception in place; once every
    /// readiness condition holds, the mount is ACTIVE.
    pub(super) async fn install(
        &mut self,
        provider: &ProviderModule,
        request: &Mount,
    ) -> Result<Action, Error> {
        let from = State::Installing;
        let installed = provider
            .install(self.access(provider, request), request)
            .await;
        if let Some(next) = progress(from, Step::Install, &installed, self.interval) {
            return self.execute(from, next).await;
        }
        self.rendered_bridges();
        let ready = self.readiness(provider, request).await;
        self.execute(from, installing_readiness(&ready)).await
    }

    /// ACTIVE, when the mount's bridges are not the ones its pods hold: the
    /// provider installs again with the current list (its pods already
    /// intercept, so only their configs change). While that is not done the
    /// mount stays ACTIVE, its traffic going to the shadow as before.
    async fn render_bridges(&mut self, provider: &ProviderModule, request: &Mount) -> Rendered {
        let uid = self.cr.metadata.uid.clone().unwrap_or_default();
        if self.ctx.book.holds(&uid, &self.bridges) {
            return Rendered::Unchanged;
        }
        // Nothing known (the operator just started): this render is the
        // first look at the mount (its commit compares every pod's config
        // with what it should be), and readiness is checked after it.
        let known = self.ctx.book.rendered(&uid).is_some();
        let installed = provider
            .install(self.access(provider, request), request)
            .await;
        match bridges_rendered(&installed) {
            Ok(()) => {
                self.rendered_bridges();
                if known {
                    Rendered::Now
                } else {
                    Rendered::Unchanged
                }
            }
            Err(retry) => {
                if let Err(err) = &installed {
                    tracing::warn!(error = %err,
                        "cannot render the mount's bridges; trying again in {} s", retry.as_secs());
                }
                Rendered::Again(Action::requeue(retry))
            }
        }
    }

    /// The provider's readiness, its conditions recorded for the mount's
    /// status whatever the step decides.
    async fn readiness(
        &mut self,
        provider: &ProviderModule,
        request: &Mount,
    ) -> Result<Vec<ProviderCondition>, CallError> {
        let ready = provider
            .ready(self.access(provider, request), request)
            .await;
        if let Ok(conditions) = &ready {
            self.writer.record(readiness(conditions));
            if not_ready(conditions).is_empty() {
                self.ctx.seen_whole.record(&self.uid());
            } else {
                self.ctx.seen_whole.forget(&self.uid());
            }
        }
        ready
    }

    /// ACTIVE: still intact? The target must exist, the shadow be usable and
    /// every readiness condition hold.
    pub(super) async fn check_intact(
        &mut self,
        provider: &ProviderModule,
        request: &Mount,
    ) -> Result<Action, Error> {
        let from = State::Active;
        // Bridges that came, changed or went go into the pods first: they
        // are what a developer waits for. The checks below still run, so a
        // target that is gone is seen as soon as before.
        let rendered = self.render_bridges(provider, request).await;
        // Seen whole a moment ago (it just became ACTIVE, or was checked):
        // the rest waits until the gap ends.
        if let Some(wait) = self.ctx.seen_whole.due_in(&self.uid()) {
            return Ok(match rendered {
                Rendered::Again(again) => again,
                Rendered::Unchanged | Rendered::Now => Action::requeue(wait),
            });
        }
        // Every provider turn taken: other mounts' steps go first, for a
        // while after this one was seen whole.
        if !provider.turn_free() && self.ctx.seen_whole.may_yield(&self.uid()) {
            return Ok(match rendered {
                Rendered::Again(again) => again,
                Rendered::Unchanged | Rendered::Now => Action::requeue(CHECK_GIVEN_WAY),
            });
        }
        let exists = provider
            .target_exists(self.access(provider, request), request)
            .await;
        if let Some(next) = target_present(from, request, &exists) {
            return self.execute(from, next).await;
        }
        let usable = provider
            .prepared(self.access(provider, request), request)
            .await;
        if let Some(next) = active_shadow(&usable) {
            return self.execute(from, next).await;
        }
        match rendered {
            Rendered::Unchanged => {}
            Rendered::Again(again) => return Ok(again),
            // Every pod's commit was checked as it was made: reading the
            // configs back now would only hold up the next bridge change
            // (a reconcile of this mount runs one at a time); the next
            // look at the mount reads them back.
            Rendered::Now => return Ok(Action::requeue(self.interval)),
        }
        let ready = self.readiness(provider, request).await;
        self.execute(from, active_readiness(&ready, self.interval))
            .await
    }
}

/// What rendering the mount's bridges in ACTIVE came to.
enum Rendered {
    /// The pods held the current bridges already (or nothing was known
    /// of what they held).
    Unchanged,
    /// They hold them now, changed from what they held.
    Now,
    /// Not done: look again then.
    Again(Action),
}

/// How long to wait before rendering bridges again after an `install` in
/// ACTIVE that did not finish.
const BRIDGE_RETRY: Duration = Duration::from_secs(1);
/// ... and after one that failed for good (the mount's Events say why).
const BRIDGE_FAILURE_RETRY: Duration = Duration::from_secs(30);

/// Whether an `install` in ACTIVE left the pods with the current bridges;
/// else when to try again.
pub fn bridges_rendered(installed: &Result<Progress, CallError>) -> Result<(), Duration> {
    match installed {
        Ok(Progress::Done) => Ok(()),
        Ok(Progress::RetryAfter(seconds)) => Err(Duration::from_secs(u64::from(*seconds).max(1))),
        Ok(Progress::WhenPodsChange) => Err(BRIDGE_RETRY),
        Err(CallError::Provider {
            error: ProviderError::Temporary(t),
            ..
        }) => Err(Duration::from_secs(u64::from(t.retry_after_seconds).max(1))),
        Err(_) => Err(BRIDGE_FAILURE_RETRY),
    }
}

/// The provider's readiness conditions as the mount shows them, one
/// condition each.
pub fn readiness(conditions: &[ProviderCondition]) -> Vec<Observed> {
    conditions
        .iter()
        .map(|c| {
            let reason = if c.ready {
                Reason::Ready
            } else {
                Reason::NotReady
            };
            Observed::new(&c.name, c.ready, reason.as_str(), c.reason.clone())
        })
        .collect()
}

/// What keeps the mount from being ready; a provider that reports no
/// conditions is not trusted to be.
pub fn not_ready(conditions: &[ProviderCondition]) -> Vec<String> {
    let mut missing = Vec::new();
    if conditions.is_empty() {
        missing.push("the provider reported no readiness conditions".to_string());
    }
    for c in conditions.iter().filter(|c| !c.ready) {
        missing.push(format!("{} ({})", c.name, c.reason));
    }
    missing
}

/// PREPARING, once `prepare` is done: is the shadow usable?
pub fn preparing_shadow(usable: &Result<bool, CallError>) -> Next {
    match usable {
        Ok(true) => Next::Fire(Transition::install(
            "prepared (shadow workload ready); installing".into(),
        )),
        Ok(false) => Next::Report(
            Report::silent(Observed::new(
                READY,
                false,
                Reason::Preparing.as_str(),
                "prepared; waiting for the shadow workload to become ready",
            )),
            PREPARED_POLL,
        ),
        Err(err) => failure(State::Preparing, Step::Prepared, err),
    }
}

/// INSTALLING, once `install` is done: does every readiness condition hold?
pub fn installing_readiness(ready: &Result<Vec<ProviderCondition>, CallError>) -> Next {
    let conditions = match ready {
        Ok(conditions) => conditions,
        Err(err) => return failure(State::Installing, Step::Ready, err),
    };
    let missing = not_ready(conditions);
    if missing.is_empty() {
        let reasons: Vec<&str> = conditions.iter().map(|c| c.reason.as_str()).collect();
        return Next::Fire(Transition::activate(format!(
            "intercepting: {}",
            reasons.join("; ")
        )));
    }
    Next::Report(
        Report::silent(Observed::new(
            READY,
            false,
            Reason::Installing.as_str(),
            format!("installed; waiting for: {}", missing.join("; ")),
        )),
        READINESS_POLL,
    )
}

/// ACTIVE, the target there: `None` when the shadow is usable (readiness
/// is asked next); a shadow that is not sends the mount RESTORING.
pub fn active_shadow(usable: &Result<bool, CallError>) -> Option<Next> {
    match usable {
        Ok(true) => None,
        Ok(false) => Some(broken(&["the shadow workload is not ready".to_string()])),
        Err(err) => Some(failure(State::Active, Step::Prepared, err)),
    }
}

/// ACTIVE, the shadow usable: intact while every readiness condition holds.
pub fn active_readiness(
    ready: &Result<Vec<ProviderCondition>, CallError>,
    interval: Duration,
) -> Next {
    let conditions = match ready {
        Ok(conditions) => conditions,
        Err(err) => return failure(State::Active, Step::Ready, err),
    };
    let missing = not_ready(conditions);
    if missing.is_empty() {
        return Next::Report(
            Report::silent(Observed::new(
                READY,
                true,
                Reason::Active.as_str(),
                "intercepting; every readiness condition holds",
            )),
            interval,
        );
    }
    broken(&missing)
}

/// What is broken in an ACTIVE mount, and that it goes RESTORING for it.
fn broken(what: &[String]) -> Next {
    Next::Fire(Transition::restore(format!(
        "not intact: {}; restoring",
        what.join("; ")
    )))
}

#[cfg(test)]
mod tests {
    use kube::runtime::events::EventType;

    use super::{super::fixtures::*, *};
    use crate::state::{Event, fire};

    fn condition(name: &str, ready: bool, reason: &str) -> ProviderCondition {
        ProviderCondition {
            name: name.into(),
            ready,
            reason: reason.into(),
        }
    }

    fn all_ready() -> Vec<ProviderCondition> {
        vec![
            condition("ShadowPodsReady", true, "2/2 shadow pods ready"),
            condition("CarrierInstalled", true, "carrier2 in 2 pods"),
        ]
    }

    fn partly_ready() -> Vec<ProviderCondition> {
        vec![
            condition("ShadowPodsReady", true, "2/2 shadow pods ready"),
            condition("CarrierInstalled", false, "1 of 2 pods patched"),
        ]
    }

    #[test]
    fn readiness_conditions_are_shown_one_each() {
        assert_eq!(
            readiness(&partly_ready()),
            [
                Observed::new("ShadowPodsReady", true, "Ready", "2/2 shadow pods ready"),
                Observed::new("CarrierInstalled", false, "NotReady", "1 of 2 pods patched"),
            ]
        );
        assert_eq!(not_ready(&all_ready()), Vec::<String>::new());
        assert_eq!(
            not_ready(&partly_ready()),
            ["CarrierInstalled (1 of 2 pods patched)"]
        );
        assert_eq!(
            not_ready(&[]),
            ["the provider reported no readiness conditions"]
        );
    }

    #[test]
    fn preparing_installs_once_the_shadow_is_usable() {
        let t = fired(&preparing_shadow(&Ok(true))).clone();
        assert_eq!((t.event, t.reason), (Event::Install, Reason::Installing));
        assert_eq!(t.message, "prepared (shadow workload ready); installing");
        assert_eq!(fire(State::Preparing, t.event), Ok(State::Installing));
        assert_eq!(
            preparing_shadow(&Ok(false)),
            Next::Report(
                Report::silent(Observed::new(
                    READY,
                    false,
                    "Preparing",
                    "prepared; waiting for the shadow workload to become ready"
                )),
                Duration::from_secs(2)
            )
        );
    }

    #[test]
    fn installing_activates_when_every_condition_holds() {
        let next = installing_readiness(&Ok(all_ready()));
        let t = fired(&next);
        assert_eq!((t.event, t.reason), (Event::Activate, Reason::Active));
        assert_eq!(t.type_, EventType::Normal);
        assert_eq!(
            t.message,
            "intercepting: 2/2 shadow pods ready; carrier2 in 2 pods"
        );
        assert_eq!(
            t.also.as_ref().map(|o| o.reason.as_str()),
            Some("Installed")
        );
        assert_eq!(fire(State::Installing, t.event), Ok(State::Active));
    }

    #[test]
    fn installing_waits_for_what_is_not_ready() {
        assert_eq!(
            installing_readiness(&Ok(partly_ready())),
            Next::Report(
                Report::silent(Observed::new(
                    READY,
                    false,
                    "Installing",
                    "installed; waiting for: CarrierInstalled (1 of 2 pods patched)"
                )),
                Duration::from_secs(1)
            )
        );
        let Next::Report(report, _) = installing_readiness(&Ok(Vec::new())) else {
            panic!("no conditions is not ready");
        };
        assert_eq!(
            report.observed.message,
            "installed; waiting for: the provider reported no readiness conditions"
        );
    }

    #[test]
    fn active_stays_while_intact() {
        assert_eq!(active_shadow(&Ok(true)), None);
        assert_eq!(
            active_readiness(&Ok(all_ready()), INTERVAL),
            Next::Report(
                Report::silent(Observed::new(
                    READY,
                    true,
                    "Active",
                    "intercepting; every readiness condition holds"
                )),
                INTERVAL
            )
        );
    }

    #[test]
    fn active_restores_what_broke() {
        let shadow = active_shadow(&Ok(false)).unwrap();
        let t = fired(&shadow);
        assert_eq!((t.event, t.reason), (Event::Restore, Reason::Restoring));
        assert_eq!(t.type_, EventType::Warning);
        assert_eq!(
            t.message,
            "not intact: the shadow workload is not ready; restoring"
        );
        assert_eq!(fire(State::Active, t.event), Ok(State::Restoring));
        let partly = active_readiness(&Ok(partly_ready()), INTERVAL);
        assert_eq!(
            fired(&partly).message,
            "not intact: CarrierInstalled (1 of 2 pods patched); restoring"
        );
        let none = active_readiness(&Ok(Vec::new()), INTERVAL);
        assert_eq!(
            fired(&none).message,
            "not intact: the provider reported no readiness conditions; restoring"
        );
    }

    #[test]
    fn every_provider_error_of_every_forward_call() {
        type Final = fn(&CallError) -> Next;
        let cases: [(State, Option<Step>, Step, Final); 3] = [
            (
                State::Preparing,
                Some(Step::Prepare),
                Step::Prepared,
                |err| preparing_shadow(&Err(copy(err))),
            ),
            (State::Installing, Some(Step::Install), Step::Ready, |err| {
                installing_readiness(&Err(copy(err)))
            }),
            (State::Active, None, Step::Ready, |err| {
                active_readiness(&Err(copy(err)), INTERVAL)
            }),
        ];
        for (from, progress_step, last_step, last) in cases {
            for err in provider_errors() {
                if let Some(step) = progress_step {
                    assert_eq!(
                        progress(from, step, &Err(copy(&err)), INTERVAL),
                        Some(failure(from, step, &err))
                    );
                }
                let next = last(&err);
                assert_eq!(next, failure(from, last_step, &err), "{from} {last_step}");
                if let Next::Fire(t) = &next {
                    assert!(fire(from, t.event).is_ok(), "{} from {from}", t.event);
                }
            }
        }
        for err in provider_errors() {
            let next = active_shadow(&Err(copy(&err))).unwrap();
            assert_eq!(next, failure(State::Active, Step::Prepared, &err));
            if let Next::Fire(t) = &next {
                assert!(fire(State::Active, t.event).is_ok(), "{}", t.event);
            }
        }
    }
}
