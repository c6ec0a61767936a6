//! Restoring and missing: RESTORING goes back through INSTALLING (or
//! PREPARING when the shadow is gone too); MISSING cleans up once, then
//! waits for the target within its grace period.

use std::time::Duration;

use kube::runtime::controller::Action;

use super::{
    Error, Reconcile,
    outcome::{Next, failure, progress},
    report::{Report, Step},
    transition::Transition,
};
use crate::state::State;
use pontoon_plugins::{CallError, ProviderModule, bindings::Mount};

impl Reconcile<'_> {
    /// RESTORING: back through INSTALLING, or through PREPARING when the
    /// shadow is gone too.
    pub(super) async fn restore(
        &mut self,
        provider: &ProviderModule,
        request: &Mount,
    ) -> Result<Action, Error> {
        let from = State::Restoring;
        let usable = provider
            .prepared(self.access(provider, request), request)
            .await;
        self.execute(from, restoring_shadow(&usable)).await
    }

    /// MISSING: clean up once, then wait for the target within the grace
    /// period: back → PREPARING (and prepare runs again); expired → TERMINATED.
    pub(super) async fn missing(
        &mut self,
        provider: &ProviderModule,
        request: &Mount,
    ) -> Result<Action, Error> {
        let from = State::Missing;
        if !self.writer.uninstalled() {
            let uninstalled = provider
                .uninstall(self.access(provider, request), request)
                .await;
            if let Some(next) = progress(from, Step::Uninstall, &uninstalled, self.interval) {
                return self.execute(from, next).await;
            }
            self.writer.report(target_gone_uninstalled()).await?;
        }
        let exists = provider
            .target_exists(self.access(provider, request), request)
            .await;
        if let Some(next) = missing_target(request, &exists) {
            return self.execute(from, next).await;
        }
        let grace = self
            .cr
            .missing_grace_period(self.ctx.settings.missing_grace_period);
        let waited = self.cr.time_in(from, self.writer.now());
        let next = missing_grace(request, waited, grace, self.interval);
        self.execute(from, next).await
    }
}

/// RESTORING: install again over a usable shadow, or prepare it again.
pub fn restoring_shadow(usable: &Result<bool, CallError>) -> Next {
    match usable {
        Ok(true) => Next::Fire(Transition::install(
            "shadow workload intact; installing again".into(),
        )),
        Ok(false) => Next::Fire(Transition::arrange(
            "shadow workload not ready; preparing again".into(),
        )),
        Err(err) => failure(State::Restoring, Step::Prepared, err),
    }
}

/// MISSING's cleanup is done; recorded, so it is not repeated.
pub fn target_gone_uninstalled() -> Report {
    Report::uninstalled(
        "target missing: shadow workload and Service removed, nothing left to restore",
    )
}

/// MISSING: `None` while the target is still gone; a target that is back
/// is prepared again.
pub fn missing_target(request: &Mount, exists: &Result<bool, CallError>) -> Option<Next> {
    match exists {
        Ok(true) => Some(Next::Fire(Transition::recover(format!(
            "target `{}` is back; preparing again",
            request.target
        )))),
        Ok(false) => None,
        Err(err) => Some(failure(State::Missing, Step::TargetExists, err)),
    }
}

/// MISSING, the target still gone after `waited`: terminated once the
/// grace period is over, else looked at again by its end at the latest.
pub fn missing_grace(
    request: &Mount,
    waited: Duration,
    grace: Duration,
    interval: Duration,
) -> Next {
    if waited >= grace {
        return Next::Fire(Transition::grace_period_expired(format!(
            "target `{}` missing for {} s, longer than the grace period of {} s; terminating",
            request.target,
            waited.as_secs(),
            grace.as_secs()
        )));
    }
    Next::Requeue(interval.min(grace - waited))
}

#[cfg(test)]
mod tests {
    use super::{
        super::{fixtures::*, transition::Plan, transition::plan},
        *,
    };
    use kube::runtime::events::EventType;

    use crate::{
        reason::Reason,
        state::{Event, fire},
    };

    #[test]
    fn restoring_installs_over_a_usable_shadow_and_prepares_a_broken_one() {
        let t = fired(&restoring_shadow(&Ok(true))).clone();
        assert_eq!((t.event, t.reason), (Event::Install, Reason::Installing));
        assert_eq!(t.message, "shadow workload intact; installing again");
        assert_eq!(fire(State::Restoring, t.event), Ok(State::Installing));
        let t = fired(&restoring_shadow(&Ok(false))).clone();
        assert_eq!((t.event, t.reason), (Event::Arrange, Reason::Preparing));
        assert_eq!(t.message, "shadow workload not ready; preparing again");
        assert_eq!(fire(State::Restoring, t.event), Ok(State::Preparing));
    }

    #[test]
    fn restoring_cannot_go_to_error_but_can_go_missing() {
        // Gefyra's table has no impair from RESTORING: a provider that fails
        // or says invalid input leaves the mount RESTORING, retried in 15 s.
        for err in [invalid("bad"), failed("boom"), trapped()] {
            let next = restoring_shadow(&Err(copy(&err)));
            let t = fired(&next);
            assert_eq!(t.event, Event::Impair);
            assert!(matches!(
                plan(State::Restoring, t, false),
                Plan::Refused { retry, .. } if retry == Duration::from_secs(15)
            ));
        }
        let next = restoring_shadow(&Err(target_missing("gone")));
        assert_eq!(
            fire(State::Restoring, fired(&next).event),
            Ok(State::Missing)
        );
        let Next::Report(report, retry) = restoring_shadow(&Err(temporary("soon", 3))) else {
            panic!("temporary");
        };
        assert_eq!(retry, Duration::from_secs(3));
        assert_eq!(report.observed.reason, "Restoring");
    }

    #[test]
    fn missing_records_its_cleanup_once() {
        assert_eq!(
            target_gone_uninstalled(),
            Report::uninstalled(
                "target missing: shadow workload and Service removed, nothing left to restore"
            )
        );
    }

    #[test]
    fn missing_keeps_its_state_when_the_uninstall_fails() {
        // (Its progress answers are those of every step, see `outcome`.)
        let from = State::Missing;
        // Nothing leaves MISSING for ERROR or MISSING: those answers are
        // refused by the table, recorded, and retried.
        for err in [
            invalid("bad"),
            target_missing("gone"),
            failed("boom"),
            trapped(),
        ] {
            let next = progress(from, Step::Uninstall, &Err(copy(&err)), INTERVAL).unwrap();
            let t = fired(&next);
            assert!(fire(from, t.event).is_err(), "{} from MISSING", t.event);
        }
        let Some(Next::Report(report, _)) =
            progress(from, Step::Uninstall, &Err(temporary("busy", 2)), INTERVAL)
        else {
            panic!("temporary");
        };
        assert_eq!(report.observed.reason, "TargetMissing");
        assert_eq!(report.observed.message, "uninstall: busy (retrying in 2 s)");
    }

    #[test]
    fn a_target_that_is_back_is_prepared_again() {
        let request = request();
        let t = fired(&missing_target(&request, &Ok(true)).unwrap()).clone();
        assert_eq!((t.event, t.reason), (Event::Recover, Reason::Recovered));
        assert_eq!(t.message, "target `deploy/web` is back; preparing again");
        assert_eq!(fire(State::Missing, t.event), Ok(State::Preparing));
        assert_eq!(missing_target(&request, &Ok(false)), None);
        for err in provider_errors() {
            assert_eq!(
                missing_target(&request, &Err(copy(&err))),
                Some(failure(State::Missing, Step::TargetExists, &err))
            );
        }
    }

    #[test]
    fn the_grace_period_decides_between_waiting_and_terminating() {
        let request = request();
        let secs = Duration::from_secs;
        assert_eq!(
            missing_grace(&request, secs(10), secs(300), INTERVAL),
            Next::Requeue(INTERVAL),
            "the interval comes first"
        );
        assert_eq!(
            missing_grace(&request, secs(280), secs(300), INTERVAL),
            Next::Requeue(secs(20)),
            "the end of the grace period comes first"
        );
        for (waited, grace) in [(300, 300), (301, 300), (0, 0)] {
            let next = missing_grace(&request, secs(waited), secs(grace), INTERVAL);
            let t = fired(&next);
            assert_eq!(
                (t.event, t.type_, t.reason),
                (
                    Event::Terminate,
                    EventType::Warning,
                    Reason::GracePeriodExpired
                )
            );
            assert_eq!(
                t.message,
                format!(
                    "target `deploy/web` missing for {waited} s, longer than the grace period of {grace} s; terminating"
                )
            );
            assert_eq!(fire(State::Missing, t.event), Ok(State::Terminated));
        }
    }
}
