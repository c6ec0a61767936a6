//! What a mount shows its users: `state` and `stateTransitions` as Gefyra
//! writes them, and `status.conditions` as kubectl users expect them.
//! Pure functions; the controller sends what they build.

use k8s_openapi::{apimachinery::pkg::apis::meta::v1::Condition, jiff::Timestamp};
use serde_json::{Value, json};

use super::{crd::GefyraBridgeMount, reason::Reason, state::State, timestamps::gefyra_timestamp};

// The condition types are spelled beside the reasons; what a mount shows
// names them from here too.
pub use super::reason::{ADMITTED, READY, UNINSTALLED};

pub use pontoon_support::conditions::Observed;

/// Sets `observed` in `conditions`; `lastTransitionTime` moves only when the
/// condition's status changes. Returns whether anything changed. (A mount's
/// every write bumps its generation, Gefyra's schema having no status
/// subresource, so its conditions carry no `observedGeneration`.)
pub fn set_condition(conditions: &mut Vec<Condition>, observed: &Observed, now: Timestamp) -> bool {
    pontoon_support::conditions::set(conditions, observed, None, now)
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

/// What a status write was computed from: the mount as its reconcile read
/// it. A write guarded by it applies only while `state` is still what was
/// read, so no step acts on a stale state; edits by others that leave the
/// state alone (labels, their own fields and conditions) do not stop it.
/// (A resourceVersion precondition did: a second writer editing a label in
/// a loop kept mounts in PREPARING for good.)
#[derive(Debug, Clone, PartialEq)]
pub struct ReadAs {
    /// `state` as read: absent, or its exact text.
    pub state: Option<String>,
    pub has_transitions: bool,
    pub has_status: bool,
}

impl ReadAs {
    pub fn of(mount: &GefyraBridgeMount) -> Self {
        Self {
            state: mount.fields.state.clone(),
            has_transitions: mount.fields.state_transitions.is_some(),
            has_status: mount.fields.status.is_some(),
        }
    }
}

/// The JSON patch that moves a mount to `to`: state, its timestamp and the
/// conditions in one write, applied only if the state is still as `read`
/// (a failed `test` is a 422, which the controller treats as a lost race).
pub fn transition_patch(
    read: &ReadAs,
    to: State,
    at: Timestamp,
    conditions: &[Condition],
) -> Value {
    let mut ops = vec![
        json!({ "op": "test", "path": "/state", "value": read.state }),
        json!({ "op": "add", "path": "/state", "value": to.as_str() }),
    ];
    let at = gefyra_timestamp(at);
    if read.has_transitions {
        ops.push(json!({ "op": "add", "path": format!("/stateTransitions/{}", to.as_str()), "value": at }));
    } else {
        // `test` against null holds for an absent member: a map someone
        // added meanwhile is not replaced by this one-entry map.
        ops.push(json!({ "op": "test", "path": "/stateTransitions", "value": null }));
        ops.push(json!({ "op": "add", "path": "/stateTransitions", "value": { to.as_str(): at } }));
    }
    ops.extend(conditions_ops(read, conditions));
    Value::Array(ops)
}

/// The JSON patch that only updates the conditions, applied only if the
/// state is still as `read` (conditions describe that state).
pub fn conditions_patch(read: &ReadAs, conditions: &[Condition]) -> Value {
    let mut ops = vec![json!({ "op": "test", "path": "/state", "value": read.state })];
    ops.extend(conditions_ops(read, conditions));
    Value::Array(ops)
}

fn conditions_ops(read: &ReadAs, conditions: &[Condition]) -> Vec<Value> {
    if read.has_status {
        vec![json!({ "op": "add", "path": "/status/conditions", "value": conditions })]
    } else {
        vec![
            json!({ "op": "test", "path": "/status", "value": null }),
            json!({ "op": "add", "path": "/status", "value": { "conditions": conditions } }),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    fn read(state: Option<&str>, has_transitions: bool, has_status: bool) -> ReadAs {
        ReadAs {
            state: state.map(String::from),
            has_transitions,
            has_status,
        }
    }

    /// Applies `patch` as kube-apiserver's JSON patch does (a `test` of
    /// null holds for an absent member), or None when a `test` fails.
    fn apply(doc: &Value, patch: &Value) -> Option<Value> {
        let mut doc = doc.clone();
        for op in patch.as_array().unwrap() {
            let pointer = op["path"].as_str().unwrap();
            match op["op"].as_str().unwrap() {
                "test" => {
                    if doc.pointer(pointer).unwrap_or(&Value::Null) != &op["value"] {
                        return None;
                    }
                }
                "add" => {
                    let (parent, key) = pointer.rsplit_once('/').unwrap();
                    let parent = if parent.is_empty() {
                        &mut doc
                    } else {
                        doc.pointer_mut(parent)?
                    };
                    parent
                        .as_object_mut()?
                        .insert(key.into(), op["value"].clone());
                }
                other => panic!("unexpected op {other}"),
            }
        }
        Some(doc)
    }

    #[test]
    fn a_transition_applies_only_to_the_state_it_was_decided_on() {
        let at = at("2026-11-29T18:43:12Z");
        let mount = json!({
            "metadata": { "labels": { "edited": "by someone else" } },
            "state": "PREPARING",
            "stateTransitions": { "REQUESTED": "x", "PREPARING": "y" },
            "status": { "conditions": [], "theirs": 1 },
        });
        let patch = transition_patch(
            &read(Some("PREPARING"), true, true),
            State::Installing,
            at,
            &[],
        );
        let moved = apply(&mount, &patch).expect("the state is as read");
        assert_eq!(moved["state"], "INSTALLING");
        assert_eq!(moved["stateTransitions"]["PREPARING"], "y");
        assert_eq!(
            moved["stateTransitions"]["INSTALLING"],
            "2026-11-29T18:43:12.000000Z"
        );
        assert_eq!(moved["status"]["theirs"], 1, "others' status fields stay");
        assert_eq!(moved["metadata"]["labels"]["edited"], "by someone else");

        // Decided on a stale PREPARING after the mount moved on: refused.
        let moved_on = json!({ "state": "INSTALLING", "stateTransitions": {}, "status": {} });
        assert_eq!(apply(&moved_on, &patch), None);
        assert_eq!(
            apply(
                &moved_on,
                &conditions_patch(&read(Some("PREPARING"), true, true), &[])
            ),
            None
        );
    }

    #[test]
    fn a_first_transition_creates_what_is_absent_but_never_replaces_it() {
        let at = at("2026-11-29T18:43:12Z");
        let patch = transition_patch(&read(None, false, false), State::Preparing, at, &[]);
        let fresh = json!({ "metadata": {} });
        let moved = apply(&fresh, &patch).expect("a fresh mount");
        assert_eq!(moved["state"], "PREPARING");
        assert_eq!(moved["status"]["conditions"], json!([]));
        // Someone wrote transitions since the read: this patch would drop
        // theirs, so it is refused instead.
        let written = json!({ "stateTransitions": { "REQUESTED": "x" } });
        assert_eq!(apply(&written, &patch), None);
    }
}
