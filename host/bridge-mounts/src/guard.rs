//! Whether the cluster judges mounts and bridges at admission.
//!
//! Who created a mount is known only to the API server: the operator sees
//! the object, not its creator. The chart's ValidatingAdmissionPolicies let
//! a mount (and a bridge) in only when its creator may patch and exec pods
//! in its target namespace; without them, anyone allowed to create a mount
//! would borrow the operator's rights everywhere. So mounts and bridges are
//! served only while those policies are in force (each exists, is bound
//! with `Deny`, and covers creation and changes of its kind), or when the
//! administrator says the cluster is single-tenant (`--single-tenant`:
//! whoever may create a mount may patch and exec any pod anyway).
//!
//! The policies are watched: one that appears lets the mounts that waited
//! for it in at once, one that goes stops new mounts and every bridge.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use futures::{Stream, StreamExt};
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use kube::{
    Api, Client, ResourceExt,
    runtime::{WatchStreamExt, reflector, reflector::Store, watcher},
};
use tokio::sync::watch;

use pontoon_support::controller_support::{watch_backoff, watch_config};

/// The kinds a policy guards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Guarded {
    Mounts,
    Bridges,
}

impl Guarded {
    fn resource(self) -> &'static str {
        match self {
            Guarded::Mounts => "gefyrabridgemounts",
            Guarded::Bridges => "gefyrabridges",
        }
    }

    fn plural(self) -> &'static str {
        match self {
            Guarded::Mounts => "mounts",
            Guarded::Bridges => "bridges",
        }
    }
}

/// How the administrator set the operator up (`--single-tenant`,
/// `--mount-admission-policy`, `--bridge-admission-policy`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuardSettings {
    /// Serve mounts and bridges without any admission policy.
    pub single_tenant: bool,
    /// The ValidatingAdmissionPolicy that judges mounts.
    pub mount_policy: String,
    /// The one that judges bridges.
    pub bridge_policy: String,
}

impl Default for GuardSettings {
    /// The chart's names for a release called `pontoon`.
    fn default() -> Self {
        Self {
            single_tenant: false,
            mount_policy: "pontoon-mounts".into(),
            bridge_policy: "pontoon-bridges".into(),
        }
    }
}

impl GuardSettings {
    /// For a cluster where everyone who may create a mount may do what it
    /// does anyway (tests, `make run`).
    pub fn single_tenant() -> Self {
        Self {
            single_tenant: true,
            ..Self::default()
        }
    }

    fn policy(&self, kind: Guarded) -> &str {
        match kind {
            Guarded::Mounts => &self.mount_policy,
            Guarded::Bridges => &self.bridge_policy,
        }
    }
}

/// Whether mounts and bridges may be served now, as the watched policies say.
pub struct Guard {
    settings: GuardSettings,
    policies: Option<(
        Store<ValidatingAdmissionPolicy>,
        Store<ValidatingAdmissionPolicyBinding>,
    )>,
    /// Why the policies cannot be read, while they cannot.
    unreadable: Mutex<Option<String>>,
    changed: watch::Sender<u64>,
}

/// How long a judgement waits for the policies to be listed once.
const FIRST_LIST: Duration = Duration::from_secs(10);

impl Guard {
    /// A guard that serves everything (`--single-tenant`): nothing is watched.
    pub fn open(settings: GuardSettings) -> Arc<Self> {
        Arc::new(Self {
            settings,
            policies: None,
            unreadable: Mutex::default(),
            changed: watch::channel(0).0,
        })
    }

    /// Watches the policies and their bindings (unless single-tenant) until
    /// the operator stops; logs at start whether mounts are served.
    pub fn watch(client: Client, settings: GuardSettings) -> Arc<Self> {
        if settings.single_tenant {
            tracing::warn!(
                "--single-tenant: mounts and bridges are served without an admission policy; \
                 anyone allowed to create one acts with the operator's rights in every \
                 namespace mounts may target"
            );
            return Self::open(settings);
        }
        let (policies, policy_writer) = reflector::store();
        let (bindings, binding_writer) = reflector::store();
        let guard = Arc::new(Self {
            settings,
            policies: Some((policies, bindings)),
            unreadable: Mutex::default(),
            changed: watch::channel(0).0,
        });
        let events = futures::stream::select(
            reflected::<ValidatingAdmissionPolicy>(&client, policy_writer),
            reflected::<ValidatingAdmissionPolicyBinding>(&client, binding_writer),
        );
        let watching = guard.clone();
        tokio::spawn(async move {
            let mut events = std::pin::pin!(events);
            let mut said: Option<(bool, bool)> = None;
            let guard = watching;
            while let Some(event) = events.next().await {
                match event {
                    Err(message) => {
                        *guard.unreadable_slot() = Some(message);
                        continue;
                    }
                    Ok(()) => *guard.unreadable_slot() = None,
                }
                let now = (
                    guard.judge_now(Guarded::Mounts).is_ok(),
                    guard.judge_now(Guarded::Bridges).is_ok(),
                );
                if said != Some(now) {
                    if said.is_none() || now != (true, true) {
                        for kind in [Guarded::Mounts, Guarded::Bridges] {
                            match guard.judge_now(kind) {
                                Ok(()) => tracing::info!(
                                    policy = guard.settings.policy(kind),
                                    "{} are judged at admission: serving them",
                                    kind.plural()
                                ),
                                Err(why) => tracing::warn!("{why}"),
                            }
                        }
                    }
                    said = Some(now);
                    guard.changed.send_modify(|n| *n += 1);
                }
            }
        });
        guard
    }

    /// A stream that yields each time what is served changes.
    pub fn changes(&self) -> impl Stream<Item = ()> + Send + 'static {
        futures::stream::unfold(self.changed.subscribe(), |mut seen| async move {
            seen.changed().await.ok()?;
            Some(((), seen))
        })
    }

    fn unreadable_slot(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        self.unreadable.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `Ok` when `kind` may be served; else what is missing and what to do.
    /// Waits for the policies' first listing (at most [`FIRST_LIST`]).
    pub async fn check(&self, kind: Guarded) -> Result<(), String> {
        if let Some((policies, bindings)) = &self.policies {
            let listed = async {
                policies.wait_until_ready().await.ok();
                bindings.wait_until_ready().await.ok();
            };
            if tokio::time::timeout(FIRST_LIST, listed).await.is_err() {
                let why = self
                    .unreadable_slot()
                    .clone()
                    .unwrap_or_else(|| "they were not listed in time".into());
                return Err(format!(
                    "{} are not served: the operator cannot read the ValidatingAdmissionPolicies \
                     that must judge them ({why}); it needs list and watch of \
                     validatingadmissionpolicies and validatingadmissionpolicybindings",
                    kind.plural()
                ));
            }
        }
        self.judge_now(kind)
    }

    fn judge_now(&self, kind: Guarded) -> Result<(), String> {
        let Some((policies, bindings)) = &self.policies else {
            return Ok(());
        };
        let name = self.settings.policy(kind);
        let policy = policies.state().into_iter().find(|p| p.name_any() == name);
        let bindings: Vec<_> = bindings
            .state()
            .into_iter()
            .filter(|b| b.spec.policy_name == name)
            .collect();
        judge(kind, name, policy.as_deref(), &bindings)
    }
}

/// The reflector of `K` (every object, cluster-wide): `Ok` for each event,
/// `Err` with a message while the watch fails.
fn reflected<K>(
    client: &Client,
    writer: reflector::store::Writer<K>,
) -> impl Stream<Item = Result<(), String>> + Send + 'static
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let api: Api<K> = Api::all(client.clone());
    watcher(api, watch_config())
        .backoff(watch_backoff())
        .reflect(writer)
        .map(|event| event.map(drop).map_err(|err| err.to_string()))
}

/// Whether `policy`, with `bindings` naming it, guards `kind`: it exists,
/// fails closed, covers CREATE and UPDATE of the kind, and one binding
/// denies what it refuses.
pub fn judge(
    kind: Guarded,
    name: &str,
    policy: Option<&ValidatingAdmissionPolicy>,
    bindings: &[Arc<ValidatingAdmissionPolicyBinding>],
) -> Result<(), String> {
    let missing = |what: String| {
        Err(format!(
            "{} are not served: {what}, so nothing checks that whoever creates or changes one may \
             patch and exec pods in its target namespace. Install the chart's admission policies \
             (Helm value mounts.admissionPolicy), or, if everyone who may create {} may also \
             patch and exec every pod they could target, start the operator with \
             --single-tenant (Helm value mounts.singleTenant)",
            kind.plural(),
            kind.plural()
        ))
    };
    let Some(policy) = policy else {
        return missing(format!("ValidatingAdmissionPolicy `{name}` does not exist"));
    };
    let spec = policy.spec.clone().unwrap_or_default();
    if spec.failure_policy.as_deref() == Some("Ignore") {
        return missing(format!(
            "ValidatingAdmissionPolicy `{name}` has failurePolicy Ignore (a failed check lets \
             the object in)"
        ));
    }
    let covers = |operation: &str| {
        spec.match_constraints
            .as_ref()
            .and_then(|m| m.resource_rules.as_ref())
            .is_some_and(|rules| {
                rules.iter().any(|rule| {
                    let has = |list: &Option<Vec<String>>, value: &str| {
                        list.as_ref()
                            .is_some_and(|l| l.iter().any(|v| v == value || v == "*"))
                    };
                    has(&rule.api_groups, "gefyra.dev")
                        && has(&rule.resources, kind.resource())
                        && has(&rule.operations, operation)
                })
            })
    };
    if !covers("CREATE") || !covers("UPDATE") {
        return missing(format!(
            "ValidatingAdmissionPolicy `{name}` does not match CREATE and UPDATE of {}.gefyra.dev",
            kind.resource()
        ));
    }
    let denies = bindings.iter().any(|binding| {
        let spec = &binding.spec;
        spec.param_ref.is_none() && spec.validation_actions.iter().any(|a| a == "Deny")
    });
    if !denies {
        return missing(format!(
            "no ValidatingAdmissionPolicyBinding binds `{name}` with validationActions Deny"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(name: &str, resource: &str, failure: Option<&str>) -> ValidatingAdmissionPolicy {
        serde_json::from_value(serde_json::json!({
            "metadata": { "name": name },
            "spec": {
                "failurePolicy": failure,
                "matchConstraints": { "resourceRules": [{
                    "apiGroups": ["gefyra.dev"], "apiVersions": ["*"],
                    "operations": ["CREATE", "UPDATE"], "resources": [resource]
                }]}
            }
        }))
        .unwrap()
    }

    fn binding(policy: &str, actions: &[&str]) -> Arc<ValidatingAdmissionPolicyBinding> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": { "name": policy },
                "spec": { "policyName": policy, "validationActions": actions }
            }))
            .unwrap(),
        )
    }

    #[test]
    fn a_policy_bound_to_deny_guards_its_kind() {
        let mounts = policy("p-mounts", "gefyrabridgemounts", Some("Fail"));
        let bound = [binding("p-mounts", &["Deny"])];
        assert_eq!(
            judge(Guarded::Mounts, "p-mounts", Some(&mounts), &bound),
            Ok(())
        );
        let unset = policy("p-mounts", "gefyrabridgemounts", None);
        assert_eq!(
            judge(Guarded::Mounts, "p-mounts", Some(&unset), &bound),
            Ok(()),
            "failurePolicy defaults to Fail"
        );
    }

    #[test]
    fn each_gap_is_named_with_what_to_do() {
        let mounts = policy("p-mounts", "gefyrabridgemounts", Some("Fail"));
        let bound = [binding("p-mounts", &["Deny"])];
        let cases = [
            (
                judge(Guarded::Mounts, "p-mounts", None, &bound),
                "ValidatingAdmissionPolicy `p-mounts` does not exist",
            ),
            (
                judge(
                    Guarded::Mounts,
                    "p-mounts",
                    Some(&policy("p-mounts", "gefyrabridgemounts", Some("Ignore"))),
                    &bound,
                ),
                "has failurePolicy Ignore",
            ),
            (
                judge(Guarded::Bridges, "p-mounts", Some(&mounts), &bound),
                "does not match CREATE and UPDATE of gefyrabridges.gefyra.dev",
            ),
            (
                judge(
                    Guarded::Mounts,
                    "p-mounts",
                    Some(&mounts),
                    &[binding("p-mounts", &["Warn", "Audit"])],
                ),
                "no ValidatingAdmissionPolicyBinding binds `p-mounts` with validationActions Deny",
            ),
            (
                judge(Guarded::Mounts, "p-mounts", Some(&mounts), &[]),
                "no ValidatingAdmissionPolicyBinding",
            ),
        ];
        for (judged, says) in cases {
            let why = judged.unwrap_err();
            assert!(why.contains(says), "{why}");
            assert!(
                why.contains("--single-tenant") && why.contains("mounts.admissionPolicy"),
                "{why}"
            );
        }
    }

    #[tokio::test]
    async fn a_single_tenant_operator_serves_without_policies() {
        let guard = Guard::open(GuardSettings::single_tenant());
        assert_eq!(guard.check(Guarded::Mounts).await, Ok(()));
        assert_eq!(guard.check(Guarded::Bridges).await, Ok(()));
    }
}
