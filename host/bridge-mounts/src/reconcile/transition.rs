//! A transition as one value: the event of Gefyra's lifecycle table, and the
//! Event that tells the user about it. [`plan`] says what firing it writes,
//! or why the table refuses it.

use std::time::Duration;

use kube::runtime::events::EventType;

use super::report::{Notice, Report};
use crate::{
    reason::Reason,
    state::{Event, State, TransitionNotAllowed, fire},
    status::{Observed, READY, UNINSTALLED, progress_reason},
};

/// How long an illegal transition waits before it is tried again (Gefyra: 15 s).
pub const ILLEGAL_TRANSITION_RETRY: Duration = Duration::from_secs(15);

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transition {
    pub event: Event,
    /// Of the Event posted about it.
    pub type_: EventType,
    /// The Event's reason; Ready's too when the mount is impaired (the
    /// other transitions give Ready the reason of the state they reach).
    pub reason: Reason,
    pub message: String,
    /// A condition recorded before the transition's own.
    pub also: Option<Observed>,
}

impl Transition {
    fn new(event: Event, type_: EventType, reason: Reason, message: String) -> Self {
        Self {
            event,
            type_,
            reason,
            message,
            also: None,
        }
    }

    pub fn arrange(message: String) -> Self {
        Self::new(
            Event::Arrange,
            EventType::Normal,
            Reason::Preparing,
            message,
        )
    }

    pub fn install(message: String) -> Self {
        Self::new(
            Event::Install,
            EventType::Normal,
            Reason::Installing,
            message,
        )
    }

    /// Every readiness condition holds: the provider's work is in place,
    /// which MISSING has to undo from now on.
    pub fn activate(message: String) -> Self {
        Self {
            also: Some(Observed::new(
                UNINSTALLED,
                false,
                Reason::Installed.as_str(),
                "the provider's work is in place",
            )),
            ..Self::new(Event::Activate, EventType::Normal, Reason::Active, message)
        }
    }

    pub fn restore(message: String) -> Self {
        Self::new(
            Event::Restore,
            EventType::Warning,
            Reason::Restoring,
            message,
        )
    }

    /// To ERROR, for `reason`.
    pub fn impair(reason: Reason, message: String) -> Self {
        Self::new(Event::Impair, EventType::Warning, reason, message)
    }

    pub fn mark_missing(message: String) -> Self {
        Self::new(
            Event::MarkMissing,
            EventType::Warning,
            Reason::TargetMissing,
            message,
        )
    }

    pub fn recover(message: String) -> Self {
        Self::new(
            Event::Recover,
            EventType::Normal,
            Reason::Recovered,
            message,
        )
    }

    pub fn sunset_reached(message: String) -> Self {
        Self::new(
            Event::Terminate,
            EventType::Normal,
            Reason::SunsetReached,
            message,
        )
    }

    pub fn grace_period_expired(message: String) -> Self {
        Self::new(
            Event::Terminate,
            EventType::Warning,
            Reason::GracePeriodExpired,
            message,
        )
    }

    /// The finalizer's: the mount was deleted.
    pub fn mount_deleted() -> Self {
        Self::new(
            Event::Terminate,
            EventType::Normal,
            Reason::Terminating,
            "mount deleted; uninstalling".into(),
        )
    }

    /// The Event saying it happened.
    pub fn notice(&self) -> Notice {
        Notice {
            type_: self.type_,
            reason: self.reason,
            action: self.event.as_str(),
            note: self.message.clone(),
        }
    }
}

/// What firing a transition amounts to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    /// The table refuses it: nothing moves; the refusal is recorded and the
    /// mount looked at again after `retry`.
    Refused {
        refused: TransitionNotAllowed,
        report: Report,
        retry: Duration,
    },
    /// The mount moves to `to` (or stays, when `to` is where it is), with
    /// `observed` recorded in this order.
    Move { to: State, observed: Vec<Observed> },
}

/// What `transition` does to a mount in `from` whose provider work is
/// `uninstalled` (or not).
pub fn plan(from: State, transition: &Transition, uninstalled: bool) -> Plan {
    let to = match fire(from, transition.event) {
        Ok(to) => to,
        Err(refused) => {
            let observed = Observed::new(
                READY,
                false,
                Reason::TransitionNotAllowed.as_str(),
                format!("{refused}: {}", transition.message),
            );
            return Plan::Refused {
                refused,
                report: Report::silent(observed),
                retry: ILLEGAL_TRANSITION_RETRY,
            };
        }
    };
    let ready_reason = match transition.event {
        Event::Impair => transition.reason,
        _ => progress_reason(to),
    };
    let mut observed = vec![Observed::new(
        READY,
        to == State::Active,
        ready_reason.as_str(),
        transition.message.clone(),
    )];
    if matches!(to, State::Preparing | State::Installing | State::Restoring) && uninstalled {
        // Work is about to be put in place again; MISSING must uninstall it anew.
        observed.push(Observed::new(
            UNINSTALLED,
            false,
            Reason::Installing.as_str(),
            "the provider is putting its work in place",
        ));
    }
    Plan::Move { to, observed }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn moved(plan: Plan) -> (State, Vec<Observed>) {
        match plan {
            Plan::Move { to, observed } => (to, observed),
            refused => panic!("expected a move, got {refused:?}"),
        }
    }

    #[test]
    fn a_refused_transition_moves_nothing_and_is_retried_after_15_s() {
        let transition = Transition::impair(Reason::InvalidInput, "validate: bad".into());
        let Plan::Refused {
            refused,
            report,
            retry,
        } = plan(State::Missing, &transition, false)
        else {
            panic!("impair is not allowed from MISSING");
        };
        assert_eq!(refused.from, State::Missing);
        assert_eq!(retry, Duration::from_secs(15));
        assert_eq!(
            report,
            Report::silent(Observed::new(
                READY,
                false,
                "TransitionNotAllowed",
                "transition `impair` is not allowed from state MISSING: validate: bad",
            ))
        );
    }

    #[test]
    fn impair_keeps_its_reason_on_ready_other_events_give_the_reason_of_the_state() {
        let (to, observed) = moved(plan(
            State::Requested,
            &Transition::impair(Reason::DuplicateMount, "taken".into()),
            false,
        ));
        assert_eq!(to, State::Error);
        assert_eq!(
            observed,
            [Observed::new(READY, false, "DuplicateMount", "taken")]
        );
        let (to, observed) = moved(plan(
            State::Missing,
            &Transition::recover("back".into()),
            false,
        ));
        assert_eq!(to, State::Preparing);
        assert_eq!(observed, [Observed::new(READY, false, "Preparing", "back")]);
        let (_, observed) = moved(plan(
            State::Active,
            &Transition::sunset_reached("sunset".into()),
            false,
        ));
        assert_eq!(observed[0].reason, "Terminated");
    }

    #[test]
    fn only_active_is_ready() {
        for (from, transition) in [
            (State::Installing, Transition::activate("on".into())),
            (State::Active, Transition::activate("still on".into())),
        ] {
            let (to, observed) = moved(plan(from, &transition, false));
            assert_eq!(to, State::Active);
            assert!(observed[0].status, "{from}: Ready is True");
        }
        let (_, observed) = moved(plan(
            State::Active,
            &Transition::restore("broken".into()),
            false,
        ));
        assert!(!observed[0].status);
    }

    #[test]
    fn work_put_in_place_again_is_no_longer_uninstalled() {
        let reset = Observed::new(
            UNINSTALLED,
            false,
            "Installing",
            "the provider is putting its work in place",
        );
        for (from, transition) in [
            (State::Missing, Transition::recover("back".into())),
            (State::Preparing, Transition::install("go".into())),
            (State::Active, Transition::restore("broken".into())),
        ] {
            let (_, observed) = moved(plan(from, &transition, true));
            assert_eq!(observed.get(1), Some(&reset), "{from} {}", transition.event);
            let (_, observed) = moved(plan(from, &transition, false));
            assert_eq!(observed.len(), 1, "nothing to reset from {from}");
        }
        let (_, observed) = moved(plan(
            State::Missing,
            &Transition::grace_period_expired("gone".into()),
            true,
        ));
        assert_eq!(observed.len(), 1, "terminating puts nothing in place");
    }

    #[test]
    fn each_constructor_names_its_event_type_and_reason() {
        let cases = [
            (
                Transition::arrange(String::new()),
                Event::Arrange,
                EventType::Normal,
                Reason::Preparing,
            ),
            (
                Transition::install(String::new()),
                Event::Install,
                EventType::Normal,
                Reason::Installing,
            ),
            (
                Transition::activate(String::new()),
                Event::Activate,
                EventType::Normal,
                Reason::Active,
            ),
            (
                Transition::restore(String::new()),
                Event::Restore,
                EventType::Warning,
                Reason::Restoring,
            ),
            (
                Transition::impair(Reason::ProviderFailed, String::new()),
                Event::Impair,
                EventType::Warning,
                Reason::ProviderFailed,
            ),
            (
                Transition::mark_missing(String::new()),
                Event::MarkMissing,
                EventType::Warning,
                Reason::TargetMissing,
            ),
            (
                Transition::recover(String::new()),
                Event::Recover,
                EventType::Normal,
                Reason::Recovered,
            ),
            (
                Transition::sunset_reached(String::new()),
                Event::Terminate,
                EventType::Normal,
                Reason::SunsetReached,
            ),
            (
                Transition::grace_period_expired(String::new()),
                Event::Terminate,
                EventType::Warning,
                Reason::GracePeriodExpired,
            ),
            (
                Transition::mount_deleted(),
                Event::Terminate,
                EventType::Normal,
                Reason::Terminating,
            ),
        ];
        for (transition, event, type_, reason) in cases {
            assert_eq!(
                (transition.event, transition.type_, transition.reason),
                (event, type_, reason)
            );
            let notice = transition.notice();
            assert_eq!(notice.action, event.as_str(), "the Event's action");
            assert_eq!(notice.reason, reason);
        }
        assert_eq!(
            Transition::activate(String::new()).also,
            Some(Observed::new(
                UNINSTALLED,
                false,
                "Installed",
                "the provider's work is in place"
            ))
        );
        assert_eq!(
            Transition::mount_deleted().message,
            "mount deleted; uninstalling"
        );
    }
}
