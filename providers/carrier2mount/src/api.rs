//! The cluster calls the steps share, with the contract's errors: a missing
//! target is `target-missing`, a workload carrier2mount cannot serve is
//! `invalid-input`, messages name the object and its namespace.

use pontoon_provider_sdk::{
    Target, TargetKind,
    bridge_mount::{Error, Mount},
    cluster::{self, ClusterError, EventType, ExecOutput, ExecRequest, ObjectRef},
    k8s_openapi::api::core::v1::Pod,
    warn,
};
use serde_json::Value;

use crate::{
    names, selector,
    workload::{Problem, Workload},
};

/// The mount being served, with its target parsed.
pub struct Ctx<'a> {
    pub mount: &'a Mount,
    pub target: Target,
}

impl<'a> Ctx<'a> {
    pub fn new(mount: &'a Mount) -> Result<Self, Error> {
        Ok(Self {
            mount,
            target: mount.check_target()?,
        })
    }

    pub fn target_namespace(&self) -> &str {
        &self.mount.target_namespace
    }

    pub fn container(&self) -> &str {
        &self.mount.target_container
    }

    pub fn carrier_image(&self) -> &str {
        &self.mount.settings.carrier_image
    }

    /// `deploy/web`, as the restore entries and messages write the target.
    pub fn target_name(&self) -> String {
        self.target.to_string()
    }

    pub fn shadow_ref(&self) -> ObjectRef {
        object_ref(
            self.target.kind.api_version(),
            self.target.kind.kind(),
            self.target_namespace(),
            &names::shadow_workload(&self.target.name),
        )
    }

    /// The target workload, or `None` when it (or its namespace) does not exist.
    pub fn workload(&self) -> Result<Option<Workload>, Error> {
        let reference = object_ref(
            self.target.kind.api_version(),
            self.target.kind.kind(),
            self.target_namespace(),
            &self.target.name,
        );
        let Some(json) = cluster::raw::get(&reference)? else {
            return Ok(None);
        };
        let object = parse(&json, &reference)?;
        Ok(Some(Workload::new(
            &self.target,
            self.target_namespace(),
            object,
        )))
    }

    /// The target workload; `target-missing` when it does not exist.
    pub fn require_workload(&self) -> Result<Workload, Error> {
        self.workload()?.ok_or_else(|| {
            Error::target_missing(format!(
                "target `{}` not found in namespace `{}`",
                self.target,
                self.target_namespace()
            ))
        })
    }

    /// The shadow workload as stored, if it exists.
    pub fn shadow(&self) -> Result<Option<Value>, Error> {
        let reference = self.shadow_ref();
        cluster::raw::get(&reference)?
            .map(|json| parse(&json, &reference))
            .transpose()
    }

    /// The original pods of the target that are not going away: a Pod
    /// target's own pod, or the pods its selector matches (never the shadow's).
    pub fn original_pods(&self, workload: &Workload) -> Result<Vec<Pod>, Error> {
        let pods = match workload.selector().map_err(invalid)? {
            None => cluster::get::<Pod>(self.target_namespace(), &workload.name)?
                .into_iter()
                .collect(),
            Some(selector) => {
                let selector = selector::original_pods(&selector).map_err(|why| {
                    Error::invalid_input(format!("{}: {why}", workload.describe()))
                })?;
                cluster::list::<Pod>(self.target_namespace(), &selector)?
            }
        };
        Ok(pods
            .into_iter()
            .filter(|p| !crate::pods::is_terminating(p))
            .collect())
    }

    /// The pods of the shadow workload that are not going away.
    pub fn shadow_pods(&self, shadow: &Value) -> Result<Vec<Pod>, Error> {
        let pods = match self.target.kind {
            TargetKind::Pod => cluster::get::<Pod>(
                self.target_namespace(),
                &names::shadow_workload(&self.target.name),
            )?
            .into_iter()
            .collect(),
            TargetKind::Deployment | TargetKind::StatefulSet => {
                match crate::shadow::duplication_id_of(shadow, self.target.kind) {
                    Some(id) => {
                        cluster::list::<Pod>(self.target_namespace(), &selector::shadow_pods(&id))?
                    }
                    None => Vec::new(),
                }
            }
        };
        Ok(pods
            .into_iter()
            .filter(|p| !crate::pods::is_terminating(p))
            .collect())
    }

    /// Runs `busybox sh` scripts (on stdin) in the target container of
    /// pods, all at once: `(pod, script)` each; the results in that order.
    pub fn run_scripts(&self, scripts: &[(&str, &str)]) -> Vec<Result<ExecOutput, ClusterError>> {
        let requests: Vec<ExecRequest> = scripts
            .iter()
            .map(|(pod, script)| ExecRequest {
                namespace: self.target_namespace().to_string(),
                pod: pod.to_string(),
                container: self.container().to_string(),
                command: vec!["busybox".into(), "sh".into()],
                stdin: Some(script.as_bytes().to_vec()),
            })
            .collect();
        cluster::exec_all(&requests)
    }
}

pub fn object_ref(api_version: &str, kind: &str, namespace: &str, name: &str) -> ObjectRef {
    ObjectRef {
        api_version: api_version.to_string(),
        kind: kind.to_string(),
        namespace: namespace.to_string(),
        name: name.to_string(),
    }
}

fn parse(json: &str, reference: &ObjectRef) -> Result<Value, Error> {
    serde_json::from_str(json).map_err(|e| {
        Error::failed(format!(
            "{} `{}` in namespace `{}` came back unreadable: {e}",
            reference.kind, reference.name, reference.namespace
        ))
    })
}

/// Server-side apply of an object given as JSON.
pub fn apply(namespace: &str, object: &Value) -> Result<(), Error> {
    cluster::raw::apply(namespace, &object.to_string())?;
    Ok(())
}

/// Every object of a kind in a namespace, as JSON.
pub fn list(api_version: &str, kind: &str, namespace: &str) -> Result<Vec<Value>, Error> {
    cluster::raw::list(api_version, kind, namespace, "")?
        .iter()
        .map(|json| {
            serde_json::from_str(json).map_err(|e| {
                Error::failed(format!(
                    "a {kind} in namespace `{namespace}` came back unreadable: {e}"
                ))
            })
        })
        .collect()
}

/// A workload problem is the user's to fix: `invalid-input`.
pub fn invalid(problem: Problem) -> Error {
    Error::invalid_input(problem.0)
}

/// Posts an Event; Events are for humans, so failing to post one is logged
/// and does not fail (and thus repeat) the step.
pub fn event(event_type: EventType, reason: &str, message: &str) {
    if let Err(err) = cluster::event(event_type, reason, message) {
        warn!("could not post event {reason} ({message}): {err}");
    }
}

/// Posts one Event for what a step did to several pods alike, naming them
/// all (none: no Event). One a pod would not read better: the operator's
/// recorder folds Events of the same reason about a mount into one series
/// that keeps only the first one's message, so the other pods' names were
/// lost, and each was one more write to the API server.
pub fn pods_event(event_type: EventType, reason: &str, namespace: &str, pods: &[&str], what: &str) {
    if !pods.is_empty() {
        event(event_type, reason, &pods_message(namespace, pods, what));
    }
}

/// Most pods an Event names; the rest are counted.
const NAMED_PODS: usize = 10;

/// "Pods `a`, `b` and `c` in namespace `ns`: what".
pub fn pods_message(namespace: &str, pods: &[&str], what: &str) -> String {
    let quoted: Vec<String> = pods
        .iter()
        .take(NAMED_PODS)
        .map(|pod| format!("`{pod}`"))
        .collect();
    let names = match (quoted.as_slice(), pods.len() - quoted.len()) {
        ([one], 0) => format!("Pod {one}"),
        ([first @ .., last], 0) => format!("Pods {} and {last}", first.join(", ")),
        (named, more) => format!("Pods {} and {more} more", named.join(", ")),
    };
    format!("{names} in namespace `{namespace}`: {what}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_about_pods_names_each_up_to_ten() {
        assert_eq!(
            pods_message("shop", &["web-1"], "runs nginx again"),
            "Pod `web-1` in namespace `shop`: runs nginx again"
        );
        assert_eq!(
            pods_message("shop", &["web-1", "web-2", "web-3"], "runs nginx again"),
            "Pods `web-1`, `web-2` and `web-3` in namespace `shop`: runs nginx again"
        );
        let many: Vec<String> = (0..12).map(|i| format!("web-{i}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        let message = pods_message("shop", &many, "x");
        assert!(
            message.starts_with("Pods `web-0`, `web-1`, ")
                && message.ends_with("`web-9` and 2 more in namespace `shop`: x"),
            "{message}"
        );
    }
}
