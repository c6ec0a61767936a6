//! What a provider's answer leads to, as a value the reconcile carries out:
//! fire a transition, record a condition (announced by an Event when it
//! changed), or look again later. Pure; shared by every step family, which
//! adds the judgements of its own states.

use std::time::Duration;

use kube::runtime::events::EventType;

use super::{
    report::{Notice, Report, Step},
    transition::Transition,
};
use crate::{
    reason::Reason,
    state::State,
    status::{Observed, READY, progress_reason},
};
use pontoon_plugins::{
    CallError,
    bindings::{Mount, Progress, ProviderError},
};

/// How long a mount waits after a failure that may pass (a provider
/// failure in ERROR, a failed uninstall) before it is tried again.
pub const ERROR_RETRY: Duration = Duration::from_secs(15);

/// What a step ends with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Next {
    /// Fire the transition; the mount is looked at again after the interval.
    Fire(Transition),
    /// Record the report, look again after this long.
    Report(Report, Duration),
    /// Nothing to write; look again after this long.
    Requeue(Duration),
}

/// A provider's "retry in N s": never sooner than a second.
pub fn retry_after(seconds: u32) -> Duration {
    Duration::from_secs(seconds.max(1).into())
}

/// Maps a provider's error in `from` to Gefyra's lifecycle table: invalid
/// input → ERROR, target missing → MISSING, temporary → retry after its
/// hint, anything else (a trap, a deadline too) → ERROR.
pub fn failure(from: State, step: Step, err: &CallError) -> Next {
    match err.provider_error() {
        Some(ProviderError::InvalidInput(message)) => Next::Fire(Transition::impair(
            Reason::InvalidInput,
            format!("{step}: {message}"),
        )),
        Some(ProviderError::TargetMissing(message)) => {
            Next::Fire(Transition::mark_missing(message.clone()))
        }
        Some(ProviderError::Temporary(t)) => {
            let retry = retry_after(t.retry_after_seconds);
            let message = format!("{step}: {} (retrying in {} s)", t.message, retry.as_secs());
            let report = Report {
                observed: Observed::new(
                    READY,
                    false,
                    progress_reason(from).as_str(),
                    message.clone(),
                ),
                notice: Some(Notice {
                    type_: EventType::Normal,
                    reason: Reason::Waiting,
                    action: step.as_str(),
                    note: message,
                }),
            };
            Next::Report(report, retry)
        }
        Some(ProviderError::Failed(_)) | None => {
            Next::Fire(Transition::impair(Reason::ProviderFailed, err.to_string()))
        }
    }
}

/// A step that makes progress (prepare, install, uninstall): `None` when it
/// is done and the state's next call follows.
pub fn progress(
    from: State,
    step: Step,
    answer: &Result<Progress, CallError>,
    interval: Duration,
) -> Option<Next> {
    match answer {
        Ok(Progress::Done) => None,
        Ok(Progress::RetryAfter(seconds)) => Some(Next::Requeue(retry_after(*seconds))),
        // Pod changes wake the mount up; the interval is the safety net.
        Ok(Progress::WhenPodsChange) => Some(Next::Requeue(interval)),
        Err(err) => Some(failure(from, step, err)),
    }
}

/// Admission's and ACTIVE's check of the target: `None` when it exists;
/// otherwise MISSING (or what the provider's error leads to).
pub fn target_present(
    from: State,
    request: &Mount,
    answer: &Result<bool, CallError>,
) -> Option<Next> {
    match answer {
        Ok(true) => None,
        Ok(false) => Some(Next::Fire(Transition::mark_missing(format!(
            "target `{}` not found in namespace `{}`",
            request.target, request.target_namespace
        )))),
        Err(err) => Some(failure(from, Step::TargetExists, err)),
    }
}

#[cfg(test)]
mod tests {
    use super::{super::fixtures::*, *};
    use crate::state::{Event, fire};
    use crate::status::UNINSTALLED;

    #[test]
    fn every_provider_error_in_every_state() {
        for from in State::ALL {
            let next = failure(from, Step::Install, &invalid("container `nope` not found"));
            let t = fired(&next);
            assert_eq!((t.event, t.reason), (Event::Impair, Reason::InvalidInput));
            assert_eq!(t.message, "install: container `nope` not found");
            // The table has no way out of RESTORING, MISSING or TERMINATED to
            // ERROR: the refusal is recorded and retried (see `plan`).
            let allowed = !matches!(from, State::Restoring | State::Missing | State::Terminated);
            assert_eq!(fire(from, t.event).is_ok(), allowed, "impair from {from}");

            let t = fired(&failure(
                from,
                Step::Install,
                &target_missing("deploy/web is gone"),
            ))
            .clone();
            assert_eq!(
                (t.event, t.reason, t.message.as_str()),
                (
                    Event::MarkMissing,
                    Reason::TargetMissing,
                    "deploy/web is gone"
                )
            );
            let allowed = !matches!(from, State::Missing | State::Terminated);
            assert_eq!(
                fire(from, t.event).is_ok(),
                allowed,
                "mark_missing from {from}"
            );

            for err in [failed("boom"), trapped()] {
                let t = fired(&failure(from, Step::Install, &err)).clone();
                assert_eq!((t.event, t.reason), (Event::Impair, Reason::ProviderFailed));
                assert_eq!(t.message, err.to_string(), "the whole error, module named");
            }

            let Next::Report(report, retry) =
                failure(from, Step::Install, &temporary("pods restarting", 7))
            else {
                panic!("a temporary error in {from} moves nothing");
            };
            assert_eq!(retry, Duration::from_secs(7));
            let message = "install: pods restarting (retrying in 7 s)";
            assert_eq!(
                report.observed,
                Observed::new(READY, false, progress_reason(from).as_str(), message)
            );
            assert_eq!(
                report.notice,
                Some(Notice {
                    type_: EventType::Normal,
                    reason: Reason::Waiting,
                    action: "install",
                    note: message.into(),
                })
            );
        }
    }

    #[test]
    fn an_uninstall_is_recorded_on_its_own_condition_and_announced() {
        let report = Report::uninstalled("target restored");
        assert_eq!(
            report.observed,
            Observed::new(UNINSTALLED, true, "Uninstalled", "target restored")
        );
        assert_eq!(
            report.notice,
            Some(Notice {
                type_: EventType::Normal,
                reason: Reason::Uninstalled,
                action: "uninstall",
                note: "target restored".into(),
            })
        );
    }

    #[test]
    fn a_temporary_error_retries_after_at_least_a_second() {
        let Next::Report(report, retry) =
            failure(State::Preparing, Step::Prepare, &temporary("soon", 0))
        else {
            panic!("temporary");
        };
        assert_eq!(retry, Duration::from_secs(1));
        assert_eq!(report.observed.message, "prepare: soon (retrying in 1 s)");
        assert_eq!(report.observed.reason, "Preparing");
    }

    #[test]
    fn every_progress_answer_of_every_step_that_makes_progress() {
        for (from, step) in [
            (State::Preparing, Step::Prepare),
            (State::Installing, Step::Install),
            (State::Missing, Step::Uninstall),
        ] {
            assert_eq!(progress(from, step, &Ok(Progress::Done), INTERVAL), None);
            assert_eq!(
                progress(from, step, &Ok(Progress::RetryAfter(3)), INTERVAL),
                Some(Next::Requeue(Duration::from_secs(3)))
            );
            assert_eq!(
                progress(from, step, &Ok(Progress::RetryAfter(0)), INTERVAL),
                Some(Next::Requeue(Duration::from_secs(1)))
            );
            assert_eq!(
                progress(from, step, &Ok(Progress::WhenPodsChange), INTERVAL),
                Some(Next::Requeue(INTERVAL)),
                "pod changes wake the mount up; the interval is the safety net"
            );
            for err in provider_errors() {
                assert_eq!(
                    progress(from, step, &Err(copy(&err)), INTERVAL),
                    Some(failure(from, step, &err))
                );
            }
        }
    }

    #[test]
    fn a_target_that_is_not_found_goes_missing() {
        let request = request();
        for from in [State::Requested, State::Error, State::Active] {
            assert_eq!(target_present(from, &request, &Ok(true)), None);
            let Some(next) = target_present(from, &request, &Ok(false)) else {
                panic!("not found");
            };
            let t = fired(&next);
            assert_eq!(t.event, Event::MarkMissing);
            assert_eq!(fire(from, t.event), Ok(State::Missing), "from {from}");
            assert_eq!(
                t.message,
                "target `deploy/web` not found in namespace `shop`"
            );
            for err in provider_errors() {
                assert_eq!(
                    target_present(from, &request, &Err(copy(&err))),
                    Some(failure(from, Step::TargetExists, &err))
                );
            }
        }
    }
}
