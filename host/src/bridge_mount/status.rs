//! What a mount shows its users: `state` and `stateTransitions` as Gefyra
//! writes them, and `status.conditions` as kubectl users expect them.
//! Pure functions; the controller sends what they build.

use k8s_openapi::{apimachinery::pkg::apis::meta::v1::Condition, jiff::Timestamp};
use serde_json::{Value, json};

use super::{reason::Reason, state::State};

/// The overall condition: True only when the mount is ACTIVE and intact.
pub const READY: &str = "Ready";
/// True once the provider's uninstall completed (the target is restored);
/// False while the provider's work is (being) put in place.
pub const UNINSTALLED: &str = "Uninstalled";

/// A timestamp as Gefyra writes it in `stateTransitions`: UTC, microseconds, `Z`.
pub fn gefyra_timestamp(at: Timestamp) -> String {
    at.strftime("%Y-%m-%dT%H:%M:%S.%6fZ").to_string()
}

/// Reads a timestamp of `stateTransitions` or `sunset`: RFC 3339, or an ISO
/// 8601 date-time without offset, taken as UTC (what Gefyra's clients write).
pub fn parse_timestamp(text: &str) -> Option<Timestamp> {
    let text = text.trim();
    if let Ok(at) = text.parse::<Timestamp>() {
        return Some(at);
    }
    let civil: k8s_openapi::jiff::civil::DateTime = text.parse().ok()?;
    civil
        .to_zoned(k8s_openapi::jiff::tz::TimeZone::UTC)
        .ok()
        .map(|z| z.timestamp())
}

pub use crate::conditions::Observed;

/// Sets `observed` in `conditions`; `lastTransitionTime` moves only when the
/// condition's status changes. Returns whether anything changed. (A mount's
/// every write bumps its generation, Gefyra's schema having no status
/// subresource, so its conditions carry no `observedGeneration`.)
pub fn set_condition(conditions: &mut Vec<Condition>, observed: &Observed, now: Timestamp) -> bool {
    crate::conditions::set(conditions, observed, None, now)
}

/// The reason of `Ready` for a mount that is on its way in `state`.
pub fn progress_reason(state: State) -> Reason {
    match state {
        State::Requested => Reason::Requested,
        State::Preparing => Reason::Preparing,
        State::Installing => Reason::Installing,
        State::Active => Reason::Active,
        State::Restoring => Reason::Restoring,
        State::Error => Reason::Error,
        State::Missing => Reason::TargetMissing,
        State::Terminated => Reason::Terminated,
    }
}

/// The merge patch that moves a mount to `to`: state, its timestamp and the
/// conditions in one write. `resource_version` makes it fail (409) if the
/// mount changed since it was read, so no step acts on a stale state.
pub fn transition_patch(
    resource_version: Option<&str>,
    to: State,
    at: Timestamp,
    conditions: &[Condition],
) -> Value {
    json!({
        "metadata": { "resourceVersion": resource_version },
        "state": to.as_str(),
        "stateTransitions": { to.as_str(): gefyra_timestamp(at) },
        "status": { "conditions": conditions },
    })
}

/// The merge patch that only updates the conditions.
pub fn conditions_patch(resource_version: Option<&str>, conditions: &[Condition]) -> Value {
    json!({
        "metadata": { "resourceVersion": resource_version },
        "status": { "conditions": conditions },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    #[test]
    fn timestamps_look_like_gefyras() {
        assert_eq!(
            gefyra_timestamp(at("2026-11-29T18:43:12.5Z")),
            "2026-11-29T18:43:12.500000Z"
        );
    }

    #[test]
    fn timestamps_are_read_with_or_without_offset() {
        let expected = at("2026-11-29T18:43:12Z");
        assert_eq!(parse_timestamp("2026-11-29T18:43:12Z"), Some(expected));
        assert_eq!(parse_timestamp("2026-11-29T19:43:12+01:00"), Some(expected));
        assert_eq!(parse_timestamp("2026-11-29T18:43:12"), Some(expected));
        assert_eq!(
            parse_timestamp("2026-11-29T18:43:12.000000Z"),
            Some(expected)
        );
        assert_eq!(parse_timestamp("tomorrow"), None);
    }

    #[test]
    fn a_transition_is_one_patch_with_a_precondition() {
        let patch = transition_patch(
            Some("42"),
            State::Preparing,
            at("2026-11-29T18:43:12Z"),
            &[],
        );
        assert_eq!(patch["metadata"]["resourceVersion"], "42");
        assert_eq!(patch["state"], "PREPARING");
        assert_eq!(
            patch["stateTransitions"]["PREPARING"],
            "2026-11-29T18:43:12.000000Z"
        );
    }
}
