//! What a reconcile judges before the step of the mount's state: how often
//! to look at the mount, a state it cannot read, its sunset, and a provider
//! that is not loaded. Pure.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use super::{outcome::Next, report::Report, transition::Transition};
use crate::{
    reason::{ReadyReason, Reason},
    state::{State, UnknownState},
    timestamps::parse_timestamp,
};

/// How long a mount may go unlooked-at: the reconcile interval, or less
/// when its sunset comes sooner (a moment after it, so it has passed).
pub fn interval(
    reconcile_interval: Duration,
    sunset: Option<Timestamp>,
    now: Timestamp,
) -> Duration {
    let until_sunset = sunset
        .filter(|sunset| *sunset > now)
        .map(|sunset| sunset.duration_since(now).unsigned_abs() + Duration::from_millis(100));
    until_sunset.map_or(reconcile_interval, |d| d.min(reconcile_interval))
}

/// A `state` that is none of the eight: nothing can be done but say so.
pub fn unknown_state(err: &UnknownState) -> Report {
    Report::not_ready(Reason::UnknownState, "Reconcile", err.to_string())
}

/// `None` when the mount has no sunset or it lies ahead; a past sunset
/// terminates the mount, a malformed one is invalid input.
pub fn sunset(
    state: State,
    sunset: Option<&str>,
    ready: ReadyReason,
    now: Timestamp,
    interval: Duration,
) -> Option<Next> {
    let text = sunset.filter(|s| !s.trim().is_empty())?;
    let Some(at) = parse_timestamp(text) else {
        if state == State::Error && ready == ReadyReason::Known(Reason::InvalidInput) {
            return Some(Next::Requeue(interval));
        }
        return Some(Next::Fire(Transition::impair(
            Reason::InvalidInput,
            format!("sunset `{text}` is not a timestamp; use RFC 3339, e.g. 2026-12-01T12:00:00Z"),
        )));
    };
    (at <= now).then(|| {
        Next::Fire(Transition::sunset_reached(format!(
            "sunset {text} reached; terminating"
        )))
    })
}

/// The mount's provider is not loaded: ERROR from the states that may go
/// there (ERROR's retry then waits for the module); RESTORING and MISSING
/// only say so, keeping their state.
pub fn provider_not_found(
    state: State,
    provider: &str,
    loaded: &[&str],
    ready: ReadyReason,
    interval: Duration,
) -> Next {
    if state == State::Error && ready == ReadyReason::Known(Reason::ProviderNotFound) {
        return Next::Requeue(interval);
    }
    let message = format!(
        "provider `{provider}` is not loaded (loaded: {}); add its module to the operator's provider directory",
        if loaded.is_empty() {
            "none".to_string()
        } else {
            loaded.join(", ")
        }
    );
    match state {
        State::Requested | State::Preparing | State::Installing | State::Active | State::Error => {
            Next::Fire(Transition::impair(Reason::ProviderNotFound, message))
        }
        State::Restoring | State::Missing | State::Terminated => Next::Report(
            Report::not_ready(Reason::ProviderNotFound, "Reconcile", message),
            interval,
        ),
    }
}

#[cfg(test)]
mod tests {
    use kube::runtime::events::EventType;

    use super::{super::fixtures::*, *};
    use crate::{
        state::{Event, fire},
        status::{Observed, READY},
    };

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    const NOW: &str = "2026-11-29T18:00:00Z";

    #[test]
    fn the_interval_is_shortened_by_a_sunset_that_comes_sooner() {
        let now = at(NOW);
        assert_eq!(interval(INTERVAL, None, now), INTERVAL);
        assert_eq!(
            interval(INTERVAL, Some(at("2026-11-29T18:00:10Z")), now),
            Duration::from_millis(10_100),
            "a moment after the sunset"
        );
        assert_eq!(
            interval(INTERVAL, Some(at("2026-11-29T19:00:00Z")), now),
            INTERVAL,
            "a sunset later than the interval"
        );
        assert_eq!(
            interval(INTERVAL, Some(at("2026-11-29T17:00:00Z")), now),
            INTERVAL,
            "a sunset that has passed is the sunset step's business"
        );
        assert_eq!(interval(INTERVAL, Some(now), now), INTERVAL);
    }

    #[test]
    fn an_unknown_state_is_said_with_a_warning() {
        let report = unknown_state(&UnknownState("SLEEPING".into()));
        assert_eq!(report.observed.type_, READY);
        assert!(!report.observed.status);
        assert_eq!(report.observed.reason, "UnknownState");
        assert!(report.observed.message.contains("unknown state `SLEEPING`"));
        let notice = report.notice.unwrap();
        assert_eq!(
            (notice.type_, notice.reason, notice.action),
            (EventType::Warning, Reason::UnknownState, "Reconcile")
        );
    }

    #[test]
    fn no_sunset_or_one_ahead_lets_the_step_run() {
        let now = at(NOW);
        for text in [None, Some(""), Some("  "), Some("2026-11-29T19:00:00Z")] {
            assert_eq!(
                sunset(State::Active, text, ReadyReason::Unset, now, INTERVAL),
                None,
                "{text:?}"
            );
        }
    }

    #[test]
    fn a_past_sunset_terminates_from_every_state_the_step_runs_in() {
        let now = at(NOW);
        for state in State::ALL.into_iter().filter(|s| *s != State::Terminated) {
            for text in ["2026-11-29T18:00:00Z", "2026-11-29T17:00:00"] {
                let next = sunset(state, Some(text), ReadyReason::Unset, now, INTERVAL).unwrap();
                let t = fired(&next);
                assert_eq!(
                    (t.event, t.reason),
                    (Event::Terminate, Reason::SunsetReached)
                );
                assert_eq!(t.type_, EventType::Normal);
                assert_eq!(t.message, format!("sunset {text} reached; terminating"));
                assert_eq!(fire(state, t.event), Ok(State::Terminated));
            }
        }
    }

    #[test]
    fn a_malformed_sunset_is_invalid_input_said_once() {
        let now = at(NOW);
        for state in State::ALL.into_iter().filter(|s| *s != State::Terminated) {
            let next = sunset(state, Some("tomorrow"), ReadyReason::Unset, now, INTERVAL).unwrap();
            let t = fired(&next);
            assert_eq!((t.event, t.reason), (Event::Impair, Reason::InvalidInput));
            assert_eq!(
                t.message,
                "sunset `tomorrow` is not a timestamp; use RFC 3339, e.g. 2026-12-01T12:00:00Z"
            );
            // RESTORING and MISSING cannot go to ERROR: the refusal is recorded
            // instead, and retried.
            let allowed = !matches!(state, State::Restoring | State::Missing);
            assert_eq!(fire(state, t.event).is_ok(), allowed, "{state}");
        }
        let said = ReadyReason::Known(Reason::InvalidInput);
        assert_eq!(
            sunset(State::Error, Some("tomorrow"), said, now, INTERVAL),
            Some(Next::Requeue(INTERVAL)),
            "ERROR for this reason already"
        );
        let other = ReadyReason::Known(Reason::ProviderFailed);
        assert!(matches!(
            sunset(State::Error, Some("tomorrow"), other, now, INTERVAL),
            Some(Next::Fire(_))
        ));
    }

    #[test]
    fn a_missing_provider_impairs_where_it_may_and_is_reported_elsewhere() {
        for state in State::ALL {
            let next = provider_not_found(
                state,
                "teleporter",
                &["carrier2mount", "other"],
                ReadyReason::Unset,
                INTERVAL,
            );
            let message = "provider `teleporter` is not loaded (loaded: carrier2mount, other); add its module to the operator's provider directory";
            match state {
                State::Restoring | State::Missing | State::Terminated => {
                    let Next::Report(report, after) = next else {
                        panic!("{state} keeps its state");
                    };
                    assert_eq!(after, INTERVAL);
                    assert_eq!(
                        report.observed,
                        Observed::new(READY, false, "ProviderNotFound", message)
                    );
                    let notice = report.notice.unwrap();
                    assert_eq!(
                        (notice.type_, notice.reason, notice.action),
                        (EventType::Warning, Reason::ProviderNotFound, "Reconcile")
                    );
                }
                _ => {
                    let t = fired(&next);
                    assert_eq!(
                        (t.event, t.reason),
                        (Event::Impair, Reason::ProviderNotFound)
                    );
                    assert_eq!(t.message, message);
                    // The reconcile then looks again after the interval, which
                    // is what a fired transition does: it must not be refused.
                    assert_eq!(fire(state, t.event), Ok(State::Error), "{state}");
                }
            }
        }
        let none = provider_not_found(State::Requested, "x", &[], ReadyReason::Unset, INTERVAL);
        assert!(fired(&none).message.contains("(loaded: none)"));
    }

    #[test]
    fn a_mount_in_error_for_its_missing_provider_waits_quietly() {
        let said = ReadyReason::Known(Reason::ProviderNotFound);
        assert_eq!(
            provider_not_found(State::Error, "x", &[], said, INTERVAL),
            Next::Requeue(INTERVAL)
        );
        assert_eq!(
            provider_not_found(State::Missing, "x", &[], said, INTERVAL),
            provider_not_found(State::Missing, "x", &[], ReadyReason::Unset, INTERVAL),
            "only ERROR is quiet about it"
        );
    }
}
