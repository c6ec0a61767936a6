//! Every condition type and reason Pontoon writes on a mount, in its
//! conditions and its Events, spelled once. The ERROR step reads the Ready condition's reason back to
//! learn why the mount is there, so the spelling is part of the contract
//! with mounts written by earlier versions.

use std::{fmt, str::FromStr};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

/// The overall condition: True only when the mount is ACTIVE and intact.
pub const READY: &str = "Ready";
/// True once the provider's uninstall completed (the target is restored);
/// False while the provider's work is (being) put in place.
pub const UNINSTALLED: &str = "Uninstalled";
/// True once the operator admitted the mount, saying for what; False when
/// its fields no longer say what was admitted (the operator keeps serving
/// what it admitted).
pub const ADMITTED: &str = "Admitted";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    // On the way through the lifecycle (Ready's reason in each state).
    Requested,
    Preparing,
    Installing,
    Active,
    Restoring,
    Error,
    TargetMissing,
    Terminated,
    // Why a mount is in ERROR.
    InvalidInput,
    ProviderNotFound,
    DuplicateMount,
    ProviderFailed,
    NamespaceNotAllowed,
    Unguarded,
    AdmissionClosed,
    // The `Admitted` condition.
    Admitted,
    Drifted,
    // What holds a mount up without moving it.
    TransitionNotAllowed,
    UnknownState,
    UninstallFailed,
    Waiting,
    // The `Uninstalled` condition.
    Installed,
    Uninstalled,
    // A provider's readiness condition.
    Ready,
    NotReady,
    // Events only.
    Recovered,
    GracePeriodExpired,
    SunsetReached,
    Terminating,
    Deleted,
    BridgesDeleted,
}

impl Reason {
    pub const ALL: [Reason; 31] = [
        Reason::Requested,
        Reason::Preparing,
        Reason::Installing,
        Reason::Active,
        Reason::Restoring,
        Reason::Error,
        Reason::TargetMissing,
        Reason::Terminated,
        Reason::InvalidInput,
        Reason::ProviderNotFound,
        Reason::DuplicateMount,
        Reason::ProviderFailed,
        Reason::NamespaceNotAllowed,
        Reason::Unguarded,
        Reason::AdmissionClosed,
        Reason::Admitted,
        Reason::Drifted,
        Reason::TransitionNotAllowed,
        Reason::UnknownState,
        Reason::UninstallFailed,
        Reason::Waiting,
        Reason::Installed,
        Reason::Uninstalled,
        Reason::Ready,
        Reason::NotReady,
        Reason::Recovered,
        Reason::GracePeriodExpired,
        Reason::SunsetReached,
        Reason::Terminating,
        Reason::Deleted,
        Reason::BridgesDeleted,
    ];

    /// The reason as it is written (UpperCamelCase, as conditions require).
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Requested => "Requested",
            Reason::Preparing => "Preparing",
            Reason::Installing => "Installing",
            Reason::Active => "Active",
            Reason::Restoring => "Restoring",
            Reason::Error => "Error",
            Reason::TargetMissing => "TargetMissing",
            Reason::Terminated => "Terminated",
            Reason::InvalidInput => "InvalidInput",
            Reason::ProviderNotFound => "ProviderNotFound",
            Reason::DuplicateMount => "DuplicateMount",
            Reason::ProviderFailed => "ProviderFailed",
            Reason::NamespaceNotAllowed => "NamespaceNotAllowed",
            Reason::Unguarded => "Unguarded",
            Reason::AdmissionClosed => "AdmissionClosed",
            Reason::Admitted => "Admitted",
            Reason::Drifted => "Drifted",
            Reason::TransitionNotAllowed => "TransitionNotAllowed",
            Reason::UnknownState => "UnknownState",
            Reason::UninstallFailed => "UninstallFailed",
            Reason::Waiting => "Waiting",
            Reason::Installed => "Installed",
            Reason::Uninstalled => "Uninstalled",
            Reason::Ready => "Ready",
            Reason::NotReady => "NotReady",
            Reason::Recovered => "Recovered",
            Reason::GracePeriodExpired => "GracePeriodExpired",
            Reason::SunsetReached => "SunsetReached",
            Reason::Terminating => "Terminating",
            Reason::Deleted => "Deleted",
            Reason::BridgesDeleted => "BridgesDeleted",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A reason Pontoon does not write (someone edited the condition).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown reason `{0}`")]
pub struct UnknownReason(pub String);

impl FromStr for Reason {
    type Err = UnknownReason;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Reason::ALL
            .into_iter()
            .find(|reason| reason.as_str() == s)
            .ok_or_else(|| UnknownReason(s.to_string()))
    }
}

/// What a mount's Ready condition says about why it is where it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadyReason {
    /// No Ready condition yet.
    Unset,
    Known(Reason),
    /// A reason Pontoon does not write.
    Other,
}

impl ReadyReason {
    /// The reason of the first Ready condition in `conditions`.
    pub fn of(conditions: &[Condition]) -> Self {
        match conditions.iter().find(|c| c.type_ == READY) {
            None => ReadyReason::Unset,
            Some(ready) => ready
                .reason
                .parse()
                .map_or(ReadyReason::Other, ReadyReason::Known),
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;

    fn condition(type_: &str, reason: &str) -> Condition {
        Condition {
            type_: type_.into(),
            status: "False".into(),
            reason: reason.into(),
            message: String::new(),
            last_transition_time: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
            observed_generation: None,
        }
    }

    #[test]
    fn reasons_round_trip_through_their_wire_names() {
        for reason in Reason::ALL {
            assert_eq!(reason.as_str().parse::<Reason>(), Ok(reason));
            assert_eq!(
                pontoon_support::conditions::upper_camel(reason.as_str()),
                reason.as_str(),
                "a condition would store {reason} differently"
            );
        }
        assert_eq!(
            "invalidInput".parse::<Reason>(),
            Err(UnknownReason("invalidInput".into()))
        );
    }

    #[test]
    fn the_wire_names_of_error_reasons_stay_as_earlier_versions_wrote_them() {
        assert_eq!(Reason::InvalidInput.as_str(), "InvalidInput");
        assert_eq!(Reason::ProviderNotFound.as_str(), "ProviderNotFound");
        assert_eq!(Reason::DuplicateMount.as_str(), "DuplicateMount");
        assert_eq!(Reason::ProviderFailed.as_str(), "ProviderFailed");
        assert_eq!(Reason::UninstallFailed.as_str(), "UninstallFailed");
        assert_eq!(Reason::TargetMissing.as_str(), "TargetMissing");
    }

    #[test]
    fn the_ready_reason_is_read_back_from_the_ready_condition() {
        assert_eq!(ReadyReason::of(&[]), ReadyReason::Unset);
        assert_eq!(
            ReadyReason::of(&[condition("ShadowPodsReady", "DuplicateMount")]),
            ReadyReason::Unset,
            "only the Ready condition counts"
        );
        assert_eq!(
            ReadyReason::of(&[
                condition("ShadowPodsReady", "NotReady"),
                condition(READY, "DuplicateMount"),
            ]),
            ReadyReason::Known(Reason::DuplicateMount)
        );
        assert_eq!(
            ReadyReason::of(&[condition(READY, "SomethingElse")]),
            ReadyReason::Other
        );
    }
}
