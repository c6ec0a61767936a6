//! The lifecycle of a GefyraBridgeMount: Gefyra's eight states and eight
//! events, with the transition table written once, as data.
//!
//! Pure: no Kubernetes, no wasmtime. The controller asks [`fire`] whether an
//! event may happen in a state and writes the answer to the mount.

use std::{fmt, str::FromStr};

/// Where a mount is in its lifecycle; spelled on the wire as Gefyra spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum State {
    Requested,
    Preparing,
    Installing,
    Active,
    Restoring,
    Error,
    Missing,
    Terminated,
}

impl State {
    pub const ALL: [State; 8] = [
        State::Requested,
        State::Preparing,
        State::Installing,
        State::Active,
        State::Restoring,
        State::Error,
        State::Missing,
        State::Terminated,
    ];

    /// The value of the mount's `state` field.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Requested => "REQUESTED",
            State::Preparing => "PREPARING",
            State::Installing => "INSTALLING",
            State::Active => "ACTIVE",
            State::Restoring => "RESTORING",
            State::Error => "ERROR",
            State::Missing => "MISSING",
            State::Terminated => "TERMINATED",
        }
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A `state` value that is none of the eight.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown state `{0}`; expected one of REQUESTED, PREPARING, INSTALLING, ACTIVE, RESTORING, ERROR, MISSING, TERMINATED"
)]
pub struct UnknownState(pub String);

impl FromStr for State {
    type Err = UnknownState;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        State::ALL
            .into_iter()
            .find(|state| state.as_str() == s)
            .ok_or_else(|| UnknownState(s.to_string()))
    }
}

/// What can happen to a mount (Gefyra's event names).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Event {
    Arrange,
    Install,
    Activate,
    Restore,
    Impair,
    MarkMissing,
    Recover,
    Terminate,
}

impl Event {
    pub const ALL: [Event; 8] = [
        Event::Arrange,
        Event::Install,
        Event::Activate,
        Event::Restore,
        Event::Impair,
        Event::MarkMissing,
        Event::Recover,
        Event::Terminate,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Event::Arrange => "arrange",
            Event::Install => "install",
            Event::Activate => "activate",
            Event::Restore => "restore",
            Event::Impair => "impair",
            Event::MarkMissing => "mark_missing",
            Event::Recover => "recover",
            Event::Terminate => "terminate",
        }
    }
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

use State::*;

/// Gefyra's lifecycle table: each event, the states it may fire from, and where it leads.
const TRANSITIONS: [(Event, &[State], State); 8] = [
    (
        Event::Arrange,
        &[Requested, Restoring, Error, Preparing],
        Preparing,
    ),
    (
        Event::Install,
        &[Preparing, Installing, Restoring],
        Installing,
    ),
    (Event::Activate, &[Installing, Active], Active),
    (
        Event::Restore,
        &[Active, Error, Installing, Preparing, Restoring],
        Restoring,
    ),
    (
        Event::Impair,
        &[Preparing, Requested, Installing, Active, Error],
        Error,
    ),
    (
        Event::MarkMissing,
        &[Active, Error, Restoring, Preparing, Installing, Requested],
        Missing,
    ),
    (Event::Recover, &[Missing], Preparing),
    (
        Event::Terminate,
        &[
            Requested, Preparing, Installing, Active, Restoring, Error, Missing,
        ],
        Terminated,
    ),
];

/// An event that the table does not allow in a state; never applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("transition `{event}` is not allowed from state {from}")]
pub struct TransitionNotAllowed {
    pub from: State,
    pub event: Event,
}

/// The state `event` leads to from `from`, if the table allows it.
pub fn fire(from: State, event: Event) -> Result<State, TransitionNotAllowed> {
    TRANSITIONS
        .iter()
        .find(|(e, sources, _)| *e == event && sources.contains(&from))
        .map(|(_, _, to)| *to)
        .ok_or(TransitionNotAllowed { from, event })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Gefyra's lifecycle table, transcribed independently of [`TRANSITIONS`]
    /// as (event, "valid from" as Gefyra writes it, destination).
    const GEFYRA_TABLE: [(&str, &str, &str); 8] = [
        (
            "arrange",
            "REQUESTED, RESTORING, ERROR, PREPARING",
            "PREPARING",
        ),
        ("install", "PREPARING, INSTALLING, RESTORING", "INSTALLING"),
        ("activate", "INSTALLING, ACTIVE", "ACTIVE"),
        (
            "restore",
            "ACTIVE, ERROR, INSTALLING, PREPARING, RESTORING",
            "RESTORING",
        ),
        (
            "impair",
            "PREPARING, REQUESTED, INSTALLING, ACTIVE, ERROR",
            "ERROR",
        ),
        (
            "mark_missing",
            "ACTIVE, ERROR, RESTORING, PREPARING, INSTALLING, REQUESTED",
            "MISSING",
        ),
        ("recover", "MISSING", "PREPARING"),
        ("terminate", "Any non-TERMINATED state", "TERMINATED"),
    ];

    fn gefyra_says(from: State, event: Event) -> Option<State> {
        let (_, sources, to) = GEFYRA_TABLE.iter().find(|(e, _, _)| *e == event.as_str())?;
        let allowed = if *sources == "Any non-TERMINATED state" {
            from != Terminated
        } else {
            sources.split(", ").any(|s| s == from.as_str())
        };
        allowed.then(|| to.parse().unwrap())
    }

    #[test]
    fn every_state_and_event_pair_follows_gefyras_table() {
        let mut allowed = 0;
        for from in State::ALL {
            for event in Event::ALL {
                let expected = gefyra_says(from, event);
                match (fire(from, event), expected) {
                    (Ok(to), Some(expected)) => {
                        assert_eq!(to, expected, "{event} from {from}");
                        allowed += 1;
                    }
                    (Err(err), None) => {
                        assert_eq!(err, TransitionNotAllowed { from, event });
                    }
                    (got, expected) => {
                        panic!("{event} from {from}: table gives {got:?}, Gefyra says {expected:?}")
                    }
                }
            }
        }
        // 4 + 3 + 2 + 5 + 5 + 6 + 1 + 7 pairs are in Gefyra's table.
        assert_eq!(allowed, 33);
    }

    #[test]
    fn terminated_is_final() {
        for event in Event::ALL {
            assert!(fire(Terminated, event).is_err(), "{event} left TERMINATED");
        }
    }

    #[test]
    fn states_round_trip_through_their_wire_names() {
        for state in State::ALL {
            assert_eq!(state.as_str().parse::<State>(), Ok(state));
        }
        let err = "active".parse::<State>().unwrap_err();
        assert!(err.to_string().contains("unknown state `active`"));
    }

    #[test]
    fn a_refused_transition_names_state_and_event() {
        let err = fire(Missing, Event::Activate).unwrap_err();
        assert_eq!(
            err.to_string(),
            "transition `activate` is not allowed from state MISSING"
        );
    }
}
