//! Kubernetes status conditions as kubectl users read them: one entry per
//! type, `lastTransitionTime` moving exactly when the status changes,
//! reasons in UpperCamelCase, `observedGeneration` where the resource has a
//! spec generation to observe.

use k8s_openapi::{
    apimachinery::pkg::apis::meta::v1::{Condition, Time},
    jiff::Timestamp,
};

/// One condition as a controller means it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    pub type_: String,
    pub status: bool,
    pub reason: String,
    pub message: String,
}

impl Observed {
    pub fn new(type_: &str, status: bool, reason: &str, message: impl Into<String>) -> Self {
        Self {
            type_: type_.into(),
            status,
            reason: reason.into(),
            message: message.into(),
        }
    }
}

/// Sets `observed` in `conditions`, with `observed_generation` when given;
/// `lastTransitionTime` moves only when the condition's status changes.
/// Returns whether anything changed.
pub fn set(
    conditions: &mut Vec<Condition>,
    observed: &Observed,
    observed_generation: Option<i64>,
    now: Timestamp,
) -> bool {
    let status = if observed.status { "True" } else { "False" };
    let reason = upper_camel(&observed.reason);
    match conditions.iter_mut().find(|c| c.type_ == observed.type_) {
        Some(existing) => {
            let changed = existing.status != status
                || existing.reason != reason
                || existing.message != observed.message
                || existing.observed_generation != observed_generation;
            if existing.status != status {
                existing.last_transition_time = Time(now);
            }
            existing.status = status.into();
            existing.reason = reason;
            existing.message = observed.message.clone();
            existing.observed_generation = observed_generation;
            changed
        }
        None => {
            conditions.push(Condition {
                type_: observed.type_.clone(),
                status: status.into(),
                reason,
                message: observed.message.clone(),
                last_transition_time: Time(now),
                observed_generation,
            });
            true
        }
    }
}

/// `conditions` as `observed` says, in its order, each keeping its
/// `lastTransitionTime` from `previous` unless its status changed.
pub fn merged(
    previous: &[Condition],
    observed: &[Observed],
    observed_generation: Option<i64>,
    now: Timestamp,
) -> Vec<Condition> {
    let mut out = Vec::with_capacity(observed.len());
    for o in observed {
        let mut one: Vec<Condition> = previous
            .iter()
            .filter(|c| c.type_ == o.type_)
            .take(1)
            .cloned()
            .collect();
        set(&mut one, o, observed_generation, now);
        out.extend(one);
    }
    out
}

/// Kubernetes requires condition reasons in UpperCamelCase (`^[A-Za-z]...`);
/// a free-form reason (a provider's, say) is made to fit rather than refused.
pub fn upper_camel(reason: &str) -> String {
    let cleaned: String = reason
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(|w| {
            let mut chars = w.chars();
            chars
                .next()
                .map(|f| f.to_ascii_uppercase().to_string() + chars.as_str())
                .unwrap_or_default()
        })
        .collect();
    match cleaned.chars().next() {
        Some(c) if c.is_ascii_alphabetic() => cleaned,
        Some(_) => format!("R{cleaned}"),
        None => "Unknown".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    #[test]
    fn last_transition_time_moves_only_when_the_status_flips() {
        let mut conditions = Vec::new();
        let (t0, t1, t2) = (
            at("2026-01-01T00:00:00Z"),
            at("2026-01-01T00:01:00Z"),
            at("2026-01-01T00:02:00Z"),
        );
        assert!(set(
            &mut conditions,
            &Observed::new("Ready", false, "Preparing", "duplicating"),
            None,
            t0
        ));
        assert!(set(
            &mut conditions,
            &Observed::new("Ready", false, "Installing", "patching pods"),
            None,
            t1
        ));
        assert_eq!(conditions[0].last_transition_time, Time(t0));
        assert_eq!(conditions[0].reason, "Installing");
        assert!(!set(
            &mut conditions,
            &Observed::new("Ready", false, "Installing", "patching pods"),
            None,
            t2
        ));
        assert!(set(
            &mut conditions,
            &Observed::new("Ready", true, "Active", "intercepting"),
            None,
            t2
        ));
        assert_eq!(conditions[0].last_transition_time, Time(t2));
        assert_eq!(conditions[0].status, "True");
        assert_eq!(conditions.len(), 1);
    }

    #[test]
    fn a_new_generation_is_a_change_but_not_a_transition() {
        let t0 = at("2026-01-01T00:00:00Z");
        let t1 = at("2026-01-01T00:01:00Z");
        let observed = Observed::new("Accepted", true, "Accepted", "ok");
        let first = merged(&[], std::slice::from_ref(&observed), Some(1), t0);
        let second = merged(&first, std::slice::from_ref(&observed), Some(2), t1);
        assert_eq!(second[0].observed_generation, Some(2));
        assert_eq!(second[0].last_transition_time, Time(t0));
    }

    #[test]
    fn merged_keeps_the_observed_order_and_drops_the_rest() {
        let t0 = at("2026-01-01T00:00:00Z");
        let old = merged(
            &[],
            &[
                Observed::new("A", true, "Yes", ""),
                Observed::new("Gone", true, "Yes", ""),
            ],
            None,
            t0,
        );
        let now = merged(
            &old,
            &[
                Observed::new("B", false, "No", ""),
                Observed::new("A", true, "Yes", ""),
            ],
            None,
            t0,
        );
        let types: Vec<&str> = now.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(types, ["B", "A"]);
    }

    #[test]
    fn reasons_are_made_upper_camel_case() {
        assert_eq!(upper_camel("ShadowPodsReady"), "ShadowPodsReady");
        assert_eq!(upper_camel("shadow pods ready"), "ShadowPodsReady");
        assert_eq!(upper_camel("3 pods"), "R3Pods");
        assert_eq!(upper_camel(""), "Unknown");
    }
}
