//! One mount per pod, whatever the kind: which other mount already holds a
//! pod of a mount's target. `deploy/web` and `pod/web-7d9c-x2` (one of its
//! pods), or `sts/db` and `pod/db-0`, are the same workload for this rule:
//! two mounts on one pod would each commit their own Carrier2 config into
//! it, and each one's uninstall would put back what the other patched.
//!
//! A pod is held by another mount when that mount's target selects it, the
//! other mount being admitted by the operator or older than this one (so
//! that of two mounts judged at the same moment the older one wins), or
//! when the pod says so itself (annotation [`MOUNT_ANNOTATION`], set by the
//! provider that patched it).

use std::collections::BTreeMap;

use k8s_openapi::{
    api::{
        apps::v1::{Deployment, StatefulSet},
        core::v1::Pod,
    },
    apimachinery::pkg::apis::meta::v1::LabelSelector,
};
use kube::{Api, Client, ResourceExt, api::ListParams, core::PartialObjectMeta};
use pontoon_provider_sdk::{Target, TargetKind};

use super::{admitted::Admitted, crd::GefyraBridgeMount};

/// The annotation on a patched pod naming the uid of the mount that
/// patched it (removed when the pod gets its original back).
pub const MOUNT_ANNOTATION: &str = "pontoon.dev/mount-uid";

/// The label a shadow's pods carry (carrier2mount's duplication id): they
/// belong to a mount's shadow, never to the original workload.
const DUPLICATION_ID_LABEL: &str = "bridge.gefyra.dev/duplication-id";

/// Which pods a target takes.
#[derive(Clone, Debug, PartialEq)]
pub enum Selection {
    /// A bare pod, by name.
    Pod(String),
    /// A workload's pods, by its selector (never its shadow's).
    Selector(LabelSelector),
}

impl Selection {
    /// Whether the pod `name` with `labels` is one of the target's.
    pub fn takes(&self, name: &str, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Selection::Pod(pod) => pod == name,
            Selection::Selector(selector) => {
                !labels.contains_key(DUPLICATION_ID_LABEL) && selects(selector, labels)
            }
        }
    }
}

/// Whether `selector` selects `labels`; an empty selector selects nothing
/// here (a workload's selector is never empty, and "every pod" is no
/// workload's pods).
pub fn selects(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let pairs = selector.match_labels.iter().flatten();
    let expressions = selector.match_expressions.iter().flatten();
    let mut any = false;
    for (key, value) in pairs {
        any = true;
        if labels.get(key) != Some(value) {
            return false;
        }
    }
    for expression in expressions {
        any = true;
        let values = expression.values.as_deref().unwrap_or_default();
        let value = labels.get(&expression.key);
        let holds = match expression.operator.as_str() {
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            _ => false,
        };
        if !holds {
            return false;
        }
    }
    any
}

/// What `target` in `namespace` takes; `None` when it does not parse or
/// its workload does not exist (it then holds no pod).
pub async fn selection(
    client: &Client,
    namespace: &str,
    target: &str,
) -> Result<Option<Selection>, kube::Error> {
    let Ok(target) = Target::parse(target) else {
        return Ok(None);
    };
    let selector = match target.kind {
        TargetKind::Pod => return Ok(Some(Selection::Pod(target.name))),
        TargetKind::Deployment => Api::<Deployment>::namespaced(client.clone(), namespace)
            .get_opt(&target.name)
            .await?
            .and_then(|d| d.spec)
            .map(|s| s.selector),
        TargetKind::StatefulSet => Api::<StatefulSet>::namespaced(client.clone(), namespace)
            .get_opt(&target.name)
            .await?
            .and_then(|s| s.spec)
            .map(|s| s.selector),
    };
    Ok(selector.map(Selection::Selector))
}

/// A mount that may hold pods, as the rule sees it.
pub struct Candidate<'a> {
    pub mount: &'a GefyraBridgeMount,
    /// What it was admitted for, when the operator admitted it.
    pub admitted: Option<Admitted>,
}

/// The other mounts that may hold pods of `own`'s target in `namespace`:
/// those the operator admitted, and the older ones (by creation, then
/// namespace and name), oldest first.
pub fn rivals<'a, 'b>(
    own: &GefyraBridgeMount,
    namespace: &str,
    others: &'b [Candidate<'a>],
) -> Vec<&'b Candidate<'a>> {
    let order = |m: &GefyraBridgeMount| (m.creation_timestamp(), m.namespace(), m.name_any());
    let own_order = order(own);
    let mut rivals: Vec<&Candidate<'_>> = others
        .iter()
        .filter(|c| c.mount.uid() != own.uid())
        .filter(|c| c.admitted.is_some() || order(c.mount) < own_order)
        .filter(|c| request_of(c).target_namespace == namespace)
        .collect();
    rivals.sort_by_key(|c| order(c.mount));
    rivals
}

/// The first of `rivals` whose target is the same workload as `target`,
/// however spelled (`deploy/web`, `deployment/web`, `web`), as a message.
pub fn same_workload(target: &str, rivals: &[&Candidate<'_>]) -> Option<String> {
    let own = Target::parse(target).ok()?;
    rivals
        .iter()
        .find(|c| Target::parse(&request_of(c).target).ok().as_ref() == Some(&own))
        .map(|c| describe(c, &[]))
}

/// The other mount that holds a pod of `own`'s target (`own_request`, the
/// request being admitted), as a message naming it and the pods; `None`
/// when no other mount holds any. `every_mount_seen`: the operator sees the
/// mounts of every namespace, so a pod's annotation naming none of them is
/// a leftover (a mount deleted with its finalizer removed by hand), not a
/// holder.
pub async fn holder(
    client: &Client,
    own: &GefyraBridgeMount,
    own_request: &Admitted,
    others: &[Candidate<'_>],
    every_mount_seen: bool,
) -> Result<Option<String>, kube::Error> {
    let ns = own_request.target_namespace.as_str();
    let rivals = rivals(own, ns, others);
    if let Some(held) = same_workload(&own_request.target, &rivals) {
        return Ok(Some(held));
    }
    let Some(own_selection) = selection(client, ns, &own_request.target).await? else {
        return Ok(None);
    };
    let pods = Api::<Pod>::namespaced(client.clone(), ns)
        .list_metadata(&ListParams::default())
        .await?
        .items;
    let own_pods: Vec<&PartialObjectMeta<Pod>> = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| own_selection.takes(&p.name_any(), p.labels()))
        .collect();
    if own_pods.is_empty() {
        return Ok(None);
    }
    // A pod that names its mount: patched by that one.
    let own_uid = own.uid().unwrap_or_default();
    for pod in &own_pods {
        if let Some(uid) = pod.annotations().get(MOUNT_ANNOTATION)
            && *uid != own_uid
        {
            let named = others
                .iter()
                .find(|c| c.mount.uid().as_deref() == Some(uid.as_str()));
            let pods = [pod.name_any()];
            match named {
                Some(candidate) => return Ok(Some(describe(candidate, &pods))),
                None if !every_mount_seen => {
                    return Ok(Some(format!(
                        "the mount with uid `{uid}` (pod {} carries its annotation \
                         `{MOUNT_ANNOTATION}`)",
                        pods[0]
                    )));
                }
                None => {}
            }
        }
    }
    for rival in rivals {
        let request = request_of(rival);
        let Some(theirs) = selection(client, ns, &request.target).await? else {
            continue;
        };
        let shared: Vec<String> = own_pods
            .iter()
            .filter(|p| theirs.takes(&p.name_any(), p.labels()))
            .map(|p| p.name_any())
            .collect();
        if !shared.is_empty() {
            return Ok(Some(describe(rival, &shared)));
        }
    }
    Ok(None)
}

fn request_of(candidate: &Candidate<'_>) -> Admitted {
    candidate
        .admitted
        .clone()
        .unwrap_or_else(|| Admitted::of(candidate.mount))
}

/// `gefyra/first (ACTIVE, container `app`) on `deploy/web`, which holds
/// pod web-1`.
fn describe(candidate: &Candidate<'_>, pods: &[String]) -> String {
    let request = request_of(candidate);
    let held = match pods {
        [] => String::new(),
        [one] => format!(", which holds pod {one}"),
        many => format!(", which holds pods {}", many.join(", ")),
    };
    format!(
        "{} ({}, container `{}`) on `{}`{held}",
        candidate.mount.qualified_name(),
        candidate
            .mount
            .fields
            .state
            .as_deref()
            .unwrap_or("REQUESTED"),
        request.target_container,
        request.target,
    )
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn requirement(key: &str, operator: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: operator.into(),
            values: Some(values.iter().map(|v| v.to_string()).collect()),
        }
    }

    #[test]
    fn a_selector_takes_what_kubernetes_would() {
        let selector = LabelSelector {
            match_labels: Some(labels(&[("app", "web")])),
            match_expressions: Some(vec![
                requirement("tier", "In", &["front", "back"]),
                requirement("track", "NotIn", &["canary"]),
                requirement("team", "Exists", &[]),
                requirement("legacy", "DoesNotExist", &[]),
            ]),
        };
        let pod = labels(&[("app", "web"), ("tier", "front"), ("team", "a")]);
        assert!(selects(&selector, &pod));
        for (key, value) in [
            ("app", "api"),
            ("tier", "db"),
            ("track", "canary"),
            ("legacy", "yes"),
        ] {
            let mut other = pod.clone();
            other.insert(key.into(), value.into());
            assert!(!selects(&selector, &other), "{key}={value}");
        }
        let mut unowned = pod.clone();
        unowned.remove("team");
        assert!(!selects(&selector, &unowned));
        assert!(
            !selects(&LabelSelector::default(), &pod),
            "an empty selector takes no pod"
        );
    }

    fn mount(name: &str, created: &str, target: &str) -> GefyraBridgeMount {
        serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": name, "namespace": "gefyra", "uid": format!("uid-{name}"),
                "creationTimestamp": created,
            },
            "target": target, "targetContainer": "app", "targetNamespace": "shop",
            "state": "ACTIVE",
        }))
        .unwrap()
    }

    #[test]
    fn older_or_admitted_mounts_of_the_namespace_are_rivals_oldest_first() {
        let own = mount("own", "2026-11-29T11:00:00Z", "deploy/web");
        let older = mount("older", "2026-11-29T10:00:00Z", "deploy/web");
        let oldest = mount("oldest", "2026-11-29T09:00:00Z", "pod/web-1");
        let younger = mount("younger", "2026-11-29T12:00:00Z", "deploy/web");
        let admitted_younger = mount("admitted", "2026-11-29T12:00:00Z", "sts/db");
        let mut elsewhere = mount("elsewhere", "2026-11-29T08:00:00Z", "deploy/web");
        elsewhere.fields.target_namespace = Some("bank".into());
        let candidates = [
            Candidate {
                mount: &older,
                admitted: None,
            },
            Candidate {
                mount: &younger,
                admitted: None,
            },
            Candidate {
                mount: &oldest,
                admitted: None,
            },
            Candidate {
                mount: &elsewhere,
                admitted: None,
            },
            Candidate {
                mount: &own,
                admitted: None,
            },
            Candidate {
                mount: &admitted_younger,
                admitted: Some(Admitted::of(&admitted_younger)),
            },
        ];
        let rivals: Vec<String> = rivals(&own, "shop", &candidates)
            .iter()
            .map(|c| c.mount.name_any())
            .collect();
        assert_eq!(rivals, ["oldest", "older", "admitted"]);
        let all = super::rivals(&own, "shop", &candidates);
        for spelling in ["deploy/web", "deployment/web", "web"] {
            assert_eq!(
                same_workload(spelling, &all).as_deref(),
                Some("gefyra/older (ACTIVE, container `app`) on `deploy/web`"),
                "{spelling}"
            );
        }
        assert_eq!(same_workload("deploy/shop", &all), None);
        assert_eq!(same_workload("frobnicator/web", &all), None);
    }

    #[test]
    fn a_workload_never_takes_a_shadow_pod_and_a_bare_pod_takes_itself() {
        let web = Selection::Selector(LabelSelector {
            match_labels: Some(labels(&[("app", "web")])),
            match_expressions: None,
        });
        assert!(web.takes("web-1", &labels(&[("app", "web")])));
        assert!(!web.takes(
            "web-gefyra-1",
            &labels(&[("app", "web"), (DUPLICATION_ID_LABEL, "x")])
        ));
        let pod = Selection::Pod("web-1".into());
        assert!(pod.takes("web-1", &BTreeMap::new()));
        assert!(!pod.takes("web-2", &labels(&[("app", "web")])));
    }
}
