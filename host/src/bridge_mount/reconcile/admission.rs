//! Admission: REQUESTED, and ERROR's retry, which goes back through it.
//! The target namespace must be one mounts may target, the provider
//! validates the mount, a second mount of the same workload is refused (one
//! mount per workload, whatever the container), the target must exist; then
//! the mount starts PREPARING.

use std::{sync::Arc, time::Duration};

use kube::{ResourceExt, runtime::controller::Action};
use pontoon_provider_sdk::Target;

use super::{
    Error, Reconcile,
    outcome::{ERROR_RETRY, Next, Step, failure, target_present},
    transition::Transition,
};
use crate::{
    bridge_mount::{
        crd::GefyraBridgeMount,
        reason::{ReadyReason, Reason},
        state::State,
    },
    plugins::{ProviderModule, bindings::Mount},
};

impl Reconcile<'_> {
    /// REQUESTED (and a retry from ERROR): refuse a namespace outside the
    /// administrator's list and a second mount of the same workload, let the
    /// provider validate, check the target exists, then start preparing.
    pub(super) async fn admit(
        &mut self,
        from: State,
        provider: &ProviderModule,
        request: &Mount,
    ) -> Result<Action, Error> {
        let ready = self.writer.ready_reason();
        let allowed = self
            .ctx
            .settings
            .target_namespaces
            .permit(&request.target_namespace);
        if let Some(next) = namespace_refused(from, ready, allowed, self.interval) {
            return self.execute(from, next).await;
        }
        if let Some(refusal) = oversized_parameters(request) {
            let next = Next::Fire(Transition::impair(Reason::InvalidInput, refusal));
            return self.execute(from, next).await;
        }
        // Before the provider looks: a second mount would find the first
        // one's shadow and take it for a user's object.
        let holder = earlier_mount_of_same_target(&self.cr, &self.ctx.mounts.state());
        if let Some(next) = duplicate(from, ready, request, holder, self.interval) {
            return self.execute(from, next).await;
        }
        let valid = provider
            .validate(Some(self.access(provider, request)), request)
            .await;
        if let Err(err) = valid {
            return self
                .execute(from, failure(from, Step::Validate, &err))
                .await;
        }
        let exists = provider
            .target_exists(self.access(provider, request), request)
            .await;
        if let Some(next) = target_present(from, request, &exists) {
            return self.execute(from, next).await;
        }
        let next = Next::Fire(admitted(request, provider.name()));
        self.execute(from, next).await
    }

    /// ERROR: a mount stays here until what caused it can have changed.
    pub(super) async fn retry_error(
        &mut self,
        provider: &ProviderModule,
        request: &Mount,
    ) -> Result<Action, Error> {
        let waited = self.cr.time_in(State::Error, self.writer.now());
        let pause = failure_pause(provider.stopped_in_a_row());
        match error_retry(self.writer.ready_reason(), waited, pause, self.interval) {
            Retry::Admit => self.admit(State::Error, provider, request).await,
            Retry::After(after) => Ok(Action::requeue(after)),
        }
    }
}

/// Whether ERROR goes back through admission now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retry {
    Admit,
    After(Duration),
}

/// ERROR, by the reason it was entered for: the provider may have been
/// loaded, the other mount of the target gone, or the operator restarted
/// with other namespaces allowed (admission answers those at once); a
/// provider failure may pass after `pause`. Invalid input stays: the
/// fields that decide it cannot change, the mount must be recreated.
pub fn error_retry(
    ready: ReadyReason,
    waited: Duration,
    pause: Duration,
    interval: Duration,
) -> Retry {
    match ready {
        ReadyReason::Known(
            Reason::ProviderNotFound | Reason::DuplicateMount | Reason::NamespaceNotAllowed,
        ) => Retry::Admit,
        ReadyReason::Known(Reason::ProviderFailed) | ReadyReason::Unset => {
            if waited >= pause {
                Retry::Admit
            } else {
                Retry::After(pause.saturating_sub(waited))
            }
        }
        ReadyReason::Known(_) | ReadyReason::Other => Retry::After(interval),
    }
}

/// How long a mount in ERROR for a provider failure waits before it is
/// tried again: [`ERROR_RETRY`], doubled for each call of the provider in
/// a row that the sandbox stopped (deadline, memory, trap), up to 16 times
/// as long. A module that runs out its deadline at every call would
/// otherwise hold a turn for its deadline every [`ERROR_RETRY`].
pub fn failure_pause(stopped_in_a_row: u32) -> Duration {
    ERROR_RETRY * 2u32.pow(stopped_in_a_row.saturating_sub(1).min(4))
}

/// The most `providerParameter` JSON a mount may carry: it is handed to the
/// provider at every step of every reconcile, inside the provider's memory
/// limit. Gefyra's own parameters (TLS settings) are a few hundred bytes.
pub const MAX_PARAMETER_BYTES: usize = 64 * 1024;

/// Why the mount's `providerParameter` is refused, if it is: too large.
pub fn oversized_parameters(request: &Mount) -> Option<String> {
    let bytes = request.parameters.as_ref().map_or(0, String::len);
    (bytes > MAX_PARAMETER_BYTES).then(|| {
        format!(
            "providerParameter is {bytes} bytes of JSON and a mount may carry at most \
             {MAX_PARAMETER_BYTES}: keep large data in a ConfigMap or Secret and name it in \
             providerParameter, and recreate the mount"
        )
    })
}

/// A mount targeting a namespace outside the administrator's list goes to
/// ERROR before anything is read or written there; one in ERROR for that
/// already waits quietly (the list changes only with a restart).
pub fn namespace_refused(
    from: State,
    ready: ReadyReason,
    allowed: Result<(), String>,
    interval: Duration,
) -> Option<Next> {
    let refusal = allowed.err()?;
    if from == State::Error && ready == ReadyReason::Known(Reason::NamespaceNotAllowed) {
        return Some(Next::Requeue(interval));
    }
    Some(Next::Fire(Transition::impair(
        Reason::NamespaceNotAllowed,
        refusal,
    )))
}

/// A second mount of a mounted workload is refused, naming the first; a
/// mount in ERROR for that already waits quietly for the first to go.
pub fn duplicate(
    from: State,
    ready: ReadyReason,
    request: &Mount,
    holder: Option<String>,
    interval: Duration,
) -> Option<Next> {
    let holder = holder?;
    if from == State::Error && ready == ReadyReason::Known(Reason::DuplicateMount) {
        return Some(Next::Requeue(interval));
    }
    Some(Next::Fire(Transition::impair(
        Reason::DuplicateMount,
        format!(
            "`{}` in namespace `{}` is already mounted by {holder}; a workload takes one mount \
             at a time, whatever the container (its shadow copy is one per workload): delete \
             one of the two mounts",
            request.target, request.target_namespace
        ),
    )))
}

/// Admitted: the provider starts duplicating the target.
pub fn admitted(request: &Mount, provider: &str) -> Transition {
    Transition::arrange(format!(
        "duplicating `{}` in namespace `{}` with provider `{provider}`",
        request.target, request.target_namespace
    ))
}

/// Another mount among `mounts`, older than `cr` (by creation, then
/// namespace and name), of the same workload, whatever its container, as
/// `namespace/name (STATE, container C)`. The oldest one is named.
pub fn earlier_mount_of_same_target(
    cr: &GefyraBridgeMount,
    mounts: &[Arc<GefyraBridgeMount>],
) -> Option<String> {
    let key = |mount: &GefyraBridgeMount| {
        let fields = &mount.fields;
        Target::parse(fields.target.as_deref().unwrap_or_default())
            .ok()
            .map(|target| (mount.target_namespace(), target))
    };
    let order = |mount: &GefyraBridgeMount| {
        (
            mount.creation_timestamp(),
            mount.namespace(),
            mount.name_any(),
        )
    };
    let own = key(cr)?;
    let own_order = order(cr);
    mounts
        .iter()
        .filter(|other| other.uid() != cr.uid())
        .filter(|other| key(other).as_ref() == Some(&own))
        .filter(|other| order(other) < own_order)
        .min_by_key(|other| order(other))
        .map(|other| {
            format!(
                "{} ({}, container `{}`)",
                other.qualified_name(),
                other.fields.state.as_deref().unwrap_or("REQUESTED"),
                other.fields.target_container.as_deref().unwrap_or_default()
            )
        })
}

#[cfg(test)]
mod tests {
    use super::{super::fixtures::*, *};
    use crate::bridge_mount::state::{Event, fire};

    fn mount(
        namespace: &str,
        name: &str,
        created: &str,
        fields: serde_json::Value,
    ) -> Arc<GefyraBridgeMount> {
        let mut object = serde_json::json!({
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": format!("uid-{namespace}-{name}"),
                "creationTimestamp": created,
            },
            "target": "deploy/web",
            "targetContainer": "app",
            "targetNamespace": "shop",
        });
        if let (Some(object), Some(fields)) = (object.as_object_mut(), fields.as_object()) {
            object.extend(fields.clone());
        }
        Arc::new(serde_json::from_value(object).unwrap())
    }

    #[test]
    fn a_provider_parameter_over_64_kib_is_refused_saying_its_size() {
        let mut request = request();
        request.parameters = Some(format!(
            "{{\"tls\":\"{}\"}}",
            "x".repeat(MAX_PARAMETER_BYTES)
        ));
        let refusal = oversized_parameters(&request).unwrap();
        assert!(
            refusal.starts_with(
                "providerParameter is 65546 bytes of JSON and a mount may carry at most 65536"
            ),
            "{refusal}"
        );
        request.parameters = Some("{\"tls\":{}}".into());
        assert_eq!(oversized_parameters(&request), None);
        request.parameters = None;
        assert_eq!(oversized_parameters(&request), None);
    }

    const EARLY: &str = "2026-11-29T10:00:00Z";
    const LATE: &str = "2026-11-29T11:00:00Z";

    #[test]
    fn an_older_mount_of_the_same_container_holds_the_target() {
        let first = mount(
            "gefyra",
            "first",
            EARLY,
            serde_json::json!({ "state": "ACTIVE" }),
        );
        let second = mount("gefyra", "second", LATE, serde_json::json!({}));
        let all = [first.clone(), second.clone()];
        assert_eq!(
            earlier_mount_of_same_target(&second, &all),
            Some("gefyra/first (ACTIVE, container `app`)".into())
        );
        assert_eq!(
            earlier_mount_of_same_target(&first, &all),
            None,
            "the newer one does not hold it"
        );
    }

    #[test]
    fn a_holder_that_never_got_a_state_is_requested() {
        let first = mount("gefyra", "first", EARLY, serde_json::json!({}));
        let second = mount("gefyra", "second", LATE, serde_json::json!({}));
        assert_eq!(
            earlier_mount_of_same_target(&second, &[first]),
            Some("gefyra/first (REQUESTED, container `app`)".into())
        );
    }

    #[test]
    fn a_mount_does_not_hold_its_own_target() {
        let own = mount("gefyra", "web-mount", LATE, serde_json::json!({}));
        let mut same_uid = (*mount("gefyra", "older-copy", EARLY, serde_json::json!({}))).clone();
        same_uid.metadata.uid = own.metadata.uid.clone();
        assert_eq!(
            earlier_mount_of_same_target(&own, &[own.clone(), Arc::new(same_uid)]),
            None
        );
    }

    #[test]
    fn same_creation_time_is_decided_by_namespace_then_name() {
        let a = mount("gefyra", "a", EARLY, serde_json::json!({}));
        let b = mount("gefyra", "b", EARLY, serde_json::json!({}));
        let all = [a.clone(), b.clone()];
        assert_eq!(
            earlier_mount_of_same_target(&b, &all),
            Some("gefyra/a (REQUESTED, container `app`)".into())
        );
        assert_eq!(earlier_mount_of_same_target(&a, &all), None);
    }

    #[test]
    fn another_container_of_the_same_workload_is_the_same_target() {
        let first = mount(
            "gefyra",
            "first",
            EARLY,
            serde_json::json!({ "targetContainer": "sidecar", "state": "ACTIVE" }),
        );
        let second = mount("gefyra", "second", LATE, serde_json::json!({}));
        assert_eq!(
            earlier_mount_of_same_target(&second, &[first]),
            Some("gefyra/first (ACTIVE, container `sidecar`)".into())
        );
    }

    #[test]
    fn the_oldest_holder_is_named_whatever_the_store_order() {
        let oldest = mount(
            "gefyra",
            "oldest",
            "2026-11-29T09:00:00Z",
            serde_json::json!({}),
        );
        let older = mount("gefyra", "older", EARLY, serde_json::json!({}));
        let second = mount("gefyra", "second", LATE, serde_json::json!({}));
        assert_eq!(
            earlier_mount_of_same_target(&second, &[older, oldest]),
            Some("gefyra/oldest (REQUESTED, container `app`)".into())
        );
    }

    #[test]
    fn a_namespace_outside_the_list_is_refused_once_then_waited_on() {
        let refused = Err("mounts may not target namespace `x`".to_string());
        match namespace_refused(
            State::Requested,
            ReadyReason::Unset,
            refused.clone(),
            INTERVAL,
        ) {
            Some(Next::Fire(t)) => {
                assert_eq!(t.reason, Reason::NamespaceNotAllowed);
                assert_eq!(t.message, "mounts may not target namespace `x`");
                assert!(fire(State::Requested, t.event).is_ok());
                assert!(fire(State::Error, t.event).is_ok());
            }
            other => panic!("expected ERROR, got {other:?}"),
        }
        let said = ReadyReason::Known(Reason::NamespaceNotAllowed);
        assert_eq!(
            namespace_refused(State::Error, said, refused, INTERVAL),
            Some(Next::Requeue(INTERVAL))
        );
        assert_eq!(
            namespace_refused(State::Requested, ReadyReason::Unset, Ok(()), INTERVAL),
            None
        );
        assert_eq!(
            error_retry(said, Duration::ZERO, ERROR_RETRY, INTERVAL),
            Retry::Admit,
            "a restart with other namespaces allowed is answered at once"
        );
    }

    #[test]
    fn other_workloads_and_namespaces_are_other_targets() {
        let second = mount("gefyra", "second", LATE, serde_json::json!({}));
        for fields in [
            serde_json::json!({ "target": "deploy/shop" }),
            serde_json::json!({ "target": "sts/web" }),
            serde_json::json!({ "targetNamespace": "other" }),
            serde_json::json!({ "target": "" }),
        ] {
            let first = mount("gefyra", "first", EARLY, fields.clone());
            assert_eq!(
                earlier_mount_of_same_target(&second, &[first]),
                None,
                "{fields}"
            );
        }
    }

    #[test]
    fn spellings_of_one_workload_are_one_target() {
        let second = mount("gefyra", "second", LATE, serde_json::json!({}));
        for target in ["deployment/web", "deployments/web", "web"] {
            let first = mount(
                "gefyra",
                "first",
                EARLY,
                serde_json::json!({ "target": target }),
            );
            assert!(
                earlier_mount_of_same_target(&second, &[first]).is_some(),
                "{target} is deploy/web"
            );
        }
    }

    #[test]
    fn an_unset_target_namespace_is_the_mounts_own() {
        // `first` lives in `shop` and targets its own namespace; `second`
        // lives elsewhere and names `shop`: the same container.
        let first = mount(
            "shop",
            "first",
            EARLY,
            serde_json::json!({ "targetNamespace": null }),
        );
        let second = mount("gefyra", "second", LATE, serde_json::json!({}));
        assert_eq!(
            earlier_mount_of_same_target(&second, &[first]),
            Some("shop/first (REQUESTED, container `app`)".into())
        );
        let elsewhere = mount(
            "other",
            "first",
            EARLY,
            serde_json::json!({ "targetNamespace": "" }),
        );
        assert_eq!(earlier_mount_of_same_target(&second, &[elsewhere]), None);
    }

    #[test]
    fn an_unparsable_target_holds_nothing_and_is_held_by_nothing() {
        let first = mount("gefyra", "first", EARLY, serde_json::json!({}));
        let bad = mount(
            "gefyra",
            "bad",
            LATE,
            serde_json::json!({ "target": "frobnicator/web" }),
        );
        assert_eq!(earlier_mount_of_same_target(&bad, &[first]), None);
    }

    #[test]
    fn a_duplicate_is_refused_naming_the_holder() {
        let request = request();
        assert_eq!(
            duplicate(
                State::Requested,
                ReadyReason::Unset,
                &request,
                None,
                INTERVAL
            ),
            None
        );
        for from in [State::Requested, State::Error] {
            let next = duplicate(
                from,
                ReadyReason::Unset,
                &request,
                Some("gefyra/first (ACTIVE, container `app`)".into()),
                INTERVAL,
            )
            .unwrap();
            let t = fired(&next);
            assert_eq!((t.event, t.reason), (Event::Impair, Reason::DuplicateMount));
            assert_eq!(
                t.message,
                "`deploy/web` in namespace `shop` is already mounted by gefyra/first (ACTIVE, \
                 container `app`); a workload takes one mount at a time, whatever the container \
                 (its shadow copy is one per workload): delete one of the two mounts"
            );
            assert_eq!(fire(from, t.event), Ok(State::Error));
        }
        assert_eq!(
            duplicate(
                State::Error,
                ReadyReason::Known(Reason::DuplicateMount),
                &request,
                Some("gefyra/first (ACTIVE, container `app`)".into()),
                INTERVAL,
            ),
            Some(Next::Requeue(INTERVAL)),
            "said already"
        );
    }

    #[test]
    fn an_admitted_mount_starts_preparing() {
        let t = admitted(&request(), "carrier2mount");
        assert_eq!((t.event, t.reason), (Event::Arrange, Reason::Preparing));
        assert_eq!(
            t.message,
            "duplicating `deploy/web` in namespace `shop` with provider `carrier2mount`"
        );
        for from in [State::Requested, State::Error] {
            assert_eq!(fire(from, t.event), Ok(State::Preparing));
        }
    }

    #[test]
    fn admission_maps_every_provider_error_in_requested_and_error() {
        let request = request();
        for from in [State::Requested, State::Error] {
            for err in provider_errors() {
                // Validation and the target check share the mapping; both
                // ways out (ERROR, MISSING) are open from either state.
                let next = failure(from, Step::Validate, &err);
                if let Next::Fire(t) = &next {
                    assert!(fire(from, t.event).is_ok(), "{} from {from}", t.event);
                }
                let next = target_present(from, &request, &Err(copy(&err))).unwrap();
                if let Next::Fire(t) = &next {
                    assert!(fire(from, t.event).is_ok(), "{} from {from}", t.event);
                }
            }
        }
    }

    #[test]
    fn a_provider_stopped_again_and_again_is_retried_ever_less_often() {
        let secs = Duration::from_secs;
        let pauses: Vec<Duration> = (0..8).map(failure_pause).collect();
        assert_eq!(
            pauses,
            [15, 15, 30, 60, 120, 240, 240, 240].map(secs).to_vec()
        );
    }

    #[test]
    fn error_retries_by_the_reason_it_was_entered_for() {
        let secs = Duration::from_secs;
        for reason in [Reason::ProviderNotFound, Reason::DuplicateMount] {
            assert_eq!(
                error_retry(
                    ReadyReason::Known(reason),
                    Duration::ZERO,
                    ERROR_RETRY,
                    INTERVAL
                ),
                Retry::Admit,
                "{reason}: at once"
            );
        }
        for ready in [
            ReadyReason::Known(Reason::ProviderFailed),
            ReadyReason::Unset,
        ] {
            assert_eq!(
                error_retry(ready, secs(0), ERROR_RETRY, INTERVAL),
                Retry::After(secs(15))
            );
            assert_eq!(
                error_retry(ready, secs(10), ERROR_RETRY, INTERVAL),
                Retry::After(secs(5))
            );
            assert_eq!(
                error_retry(ready, secs(15), ERROR_RETRY, INTERVAL),
                Retry::Admit
            );
            assert_eq!(
                error_retry(ready, secs(600), ERROR_RETRY, INTERVAL),
                Retry::Admit
            );
            // A provider stopped three times in a row: four times the pause.
            assert_eq!(
                error_retry(ready, secs(15), failure_pause(3), INTERVAL),
                Retry::After(secs(45))
            );
        }
        for ready in [
            ReadyReason::Known(Reason::InvalidInput),
            ReadyReason::Known(Reason::TransitionNotAllowed),
            ReadyReason::Other,
        ] {
            assert_eq!(
                error_retry(ready, secs(600), ERROR_RETRY, INTERVAL),
                Retry::After(INTERVAL),
                "{ready:?} stays"
            );
        }
    }
}
