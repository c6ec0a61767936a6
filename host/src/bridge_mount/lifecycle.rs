//! One reconcile of one mount: read its state, run the provider step that
//! state calls for, and write the outcome back as a transition of the state
//! machine, with conditions and an Event saying what happened.
//!
//! Steps never wait: a provider that is not done says when to look again,
//! and pod changes wake the mount up (see `controller.rs`).

use std::{sync::Arc, time::Duration};

use k8s_openapi::{
    api::core::v1::ObjectReference, apimachinery::pkg::apis::meta::v1::Condition, jiff::Timestamp,
};
use kube::{
    Api, Resource, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams},
    runtime::{
        controller::Action,
        events::{Event as KubeEvent, EventType},
    },
};
use pontoon_provider_sdk::Target;

use super::{
    context::Context,
    crd::{GefyraBridge, GefyraBridgeMount},
    state::{Event, State, fire},
    status::{
        Observed, READY, UNINSTALLED, conditions_patch, parse_timestamp, progress_reason,
        set_condition, transition_patch,
    },
};
use crate::plugins::{
    CallError, ClusterAccess, EventSubject, ProviderModule,
    bindings::{Condition as ProviderCondition, Mount, Progress, ProviderError},
};

/// How long an illegal transition waits before it is tried again (Gefyra: 15 s).
const ILLEGAL_TRANSITION_RETRY: Duration = Duration::from_secs(15);
/// How long a mount in ERROR for a reason that may pass waits before retrying.
const ERROR_RETRY: Duration = Duration::from_secs(15);
/// How often INSTALLING looks at readiness that no watch reports (exec'd config).
const READINESS_POLL: Duration = Duration::from_secs(1);
/// How often PREPARING looks again while the shadow pods start (they are watched, too).
const PREPARED_POLL: Duration = Duration::from_secs(2);
/// Label Gefyra puts on the bridges of a mount.
const BRIDGE_MOUNT_LABEL: &str = "gefyra.dev/bridge-mount";

// Ready reasons that tell why a mount is in ERROR; the ERROR step reads them back.
const INVALID_INPUT: &str = "InvalidInput";
const PROVIDER_NOT_FOUND: &str = "ProviderNotFound";
const DUPLICATE_MOUNT: &str = "DuplicateMount";
const PROVIDER_FAILED: &str = "ProviderFailed";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("cannot encode a patch: {0}")]
    Encode(#[from] serde_json::Error),
    /// Deletion waits for the provider's uninstall; the finalizer stays.
    #[error("uninstall not finished: {message}")]
    CleanupPending { message: String, retry: Duration },
}

pub(super) struct Reconcile<'a> {
    ctx: &'a Context,
    api: Api<GefyraBridgeMount>,
    mount: Arc<GefyraBridgeMount>,
    reference: ObjectReference,
    resource_version: Option<String>,
    conditions: Vec<Condition>,
    now: Timestamp,
}

impl<'a> Reconcile<'a> {
    pub fn new(ctx: &'a Context, mount: Arc<GefyraBridgeMount>) -> Self {
        let namespace = mount.namespace().unwrap_or_default();
        Self {
            ctx,
            api: Api::namespaced(ctx.client.clone(), &namespace),
            reference: mount.object_ref(&()),
            resource_version: mount.resource_version(),
            conditions: mount.conditions().to_vec(),
            mount,
            now: Timestamp::now(),
        }
    }

    /// How long a mount may go unlooked-at: the reconcile interval, or less
    /// when its sunset comes sooner.
    fn interval(&self) -> Duration {
        let interval = self.ctx.settings.reconcile_interval;
        let until_sunset = self
            .mount
            .sunset()
            .filter(|sunset| *sunset > self.now)
            .map(|sunset| {
                sunset.duration_since(self.now).unsigned_abs() + Duration::from_millis(100)
            });
        until_sunset.map_or(interval, |d| d.min(interval))
    }

    fn provider(&self) -> Option<Arc<ProviderModule>> {
        self.ctx.registry.provider(self.mount.provider_name())
    }

    fn access(&self, provider: &ProviderModule, mount: &Mount) -> ClusterAccess {
        ClusterAccess {
            client: self.ctx.client.clone(),
            discovery: self.ctx.discovery.clone(),
            scope: provider.scope_for(mount),
            field_manager: provider.name().to_string(),
            events: Some(EventSubject {
                recorder: self.ctx.recorder.clone(),
                object: self.reference.clone(),
            }),
        }
    }

    fn ready_reason(&self) -> Option<&str> {
        self.conditions
            .iter()
            .find(|c| c.type_ == READY)
            .map(|c| c.reason.as_str())
    }

    fn observe(&mut self, observed: Observed) -> bool {
        set_condition(&mut self.conditions, &observed, self.now)
    }

    async fn publish(&self, type_: EventType, reason: &str, action: &str, note: String) {
        let event = KubeEvent {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: action.into(),
            secondary: None,
        };
        if let Err(err) = self.ctx.recorder.publish(&event, &self.reference).await {
            tracing::warn!(mount = %self.reference_name(), error = %err, "cannot post event {reason}");
        }
    }

    fn reference_name(&self) -> String {
        self.mount.qualified_name()
    }

    async fn patch(&mut self, body: serde_json::Value) -> Result<(), Error> {
        let patched = self
            .api
            .patch(
                &self.mount.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&body),
            )
            .await?;
        self.resource_version = patched.resource_version();
        Ok(())
    }

    async fn write_conditions(&mut self) -> Result<(), Error> {
        let body = conditions_patch(self.resource_version.as_deref(), &self.conditions);
        self.patch(body).await
    }

    /// Fires `event`: writes the new state with its timestamp and the
    /// conditions, posts an Event. A transition the table refuses is logged
    /// and retried after 15 s, never applied.
    async fn fire(
        &mut self,
        from: State,
        event: Event,
        type_: EventType,
        reason: &str,
        message: String,
    ) -> Result<Action, Error> {
        let to = match fire(from, event) {
            Ok(to) => to,
            Err(refused) => {
                tracing::warn!(mount = %self.reference_name(), state = %from, event = %event, "{refused}; retrying in 15 s ({message})");
                let changed = self.observe(Observed::new(
                    READY,
                    false,
                    "TransitionNotAllowed",
                    format!("{refused}: {message}"),
                ));
                if changed {
                    self.write_conditions().await?;
                }
                return Ok(Action::requeue(ILLEGAL_TRANSITION_RETRY));
            }
        };
        let ready_reason = match event {
            Event::Impair => reason,
            _ => progress_reason(to).as_str(),
        };
        self.observe(Observed::new(
            READY,
            to == State::Active,
            ready_reason,
            message.clone(),
        ));
        if matches!(to, State::Preparing | State::Installing | State::Restoring)
            && self.uninstalled()
        {
            // Work is about to be put in place again; MISSING must uninstall it anew.
            self.observe(Observed::new(
                UNINSTALLED,
                false,
                "Installing",
                "the provider is putting its work in place",
            ));
        }
        if to == from {
            self.write_conditions().await?;
        } else {
            let body = transition_patch(
                self.resource_version.as_deref(),
                to,
                self.now,
                &self.conditions,
            );
            self.patch(body).await?;
            tracing::info!(mount = %self.reference_name(), from = %from, to = %to, "{message}");
        }
        self.publish(type_, reason, event.as_str(), message).await;
        // The write wakes the controller up again; this is the safety net.
        Ok(Action::requeue(self.interval()))
    }

    /// Maps a provider's error to Gefyra's lifecycle table: invalid input → ERROR, target
    /// missing → MISSING, temporary → retry after its hint, anything else → ERROR.
    async fn failed(&mut self, from: State, step: &str, err: CallError) -> Result<Action, Error> {
        match err.provider_error() {
            Some(ProviderError::InvalidInput(message)) => {
                let message = format!("{step}: {message}");
                self.fire(
                    from,
                    Event::Impair,
                    EventType::Warning,
                    INVALID_INPUT,
                    message,
                )
                .await
            }
            Some(ProviderError::TargetMissing(message)) => {
                let message = message.clone();
                self.fire(
                    from,
                    Event::MarkMissing,
                    EventType::Warning,
                    "TargetMissing",
                    message,
                )
                .await
            }
            Some(ProviderError::Temporary(t)) => {
                let retry = Duration::from_secs(t.retry_after_seconds.max(1).into());
                let message = format!("{step}: {} (retrying in {} s)", t.message, retry.as_secs());
                let changed = self.observe(Observed::new(
                    READY,
                    false,
                    progress_reason(from).as_str(),
                    message.clone(),
                ));
                if changed {
                    self.write_conditions().await?;
                    self.publish(EventType::Normal, "Waiting", step, message)
                        .await;
                }
                Ok(Action::requeue(retry))
            }
            Some(ProviderError::Failed(_)) | None => {
                self.fire(
                    from,
                    Event::Impair,
                    EventType::Warning,
                    PROVIDER_FAILED,
                    err.to_string(),
                )
                .await
            }
        }
    }

    /// The reconcile of a mount that is not being deleted.
    pub async fn apply(mut self) -> Result<Action, Error> {
        let state = match self.mount.state() {
            Ok(state) => state,
            Err(unknown) => {
                let message = unknown.to_string();
                if self.observe(Observed::new(READY, false, "UnknownState", message.clone())) {
                    self.write_conditions().await?;
                    self.publish(EventType::Warning, "UnknownState", "Reconcile", message)
                        .await;
                }
                return Ok(Action::requeue(self.interval()));
            }
        };
        if state == State::Terminated {
            return self.finish().await;
        }
        if let Some(action) = self.check_sunset(state).await? {
            return Ok(action);
        }
        let Some(provider) = self.provider() else {
            return self.provider_not_found(state).await;
        };
        let mount = self.mount.provider_request(&self.ctx.settings);
        match state {
            State::Requested => self.admit(state, &provider, &mount).await,
            State::Preparing => self.prepare(&provider, &mount).await,
            State::Installing => self.install(&provider, &mount).await,
            State::Active => self.check_intact(&provider, &mount).await,
            State::Restoring => self.restore(&provider, &mount).await,
            State::Error => self.retry_error(&provider, &mount).await,
            State::Missing => self.missing(&provider, &mount).await,
            State::Terminated => self.finish().await,
        }
    }

    /// A past `sunset` terminates the mount; a malformed one is invalid input.
    async fn check_sunset(&mut self, state: State) -> Result<Option<Action>, Error> {
        let Some(text) = self
            .mount
            .fields
            .sunset
            .clone()
            .filter(|s| !s.trim().is_empty())
        else {
            return Ok(None);
        };
        let Some(sunset) = parse_timestamp(&text) else {
            if state == State::Error && self.ready_reason() == Some(INVALID_INPUT) {
                return Ok(Some(Action::requeue(self.interval())));
            }
            let message = format!(
                "sunset `{text}` is not a timestamp; use RFC 3339, e.g. 2026-12-01T12:00:00Z"
            );
            return self
                .fire(
                    state,
                    Event::Impair,
                    EventType::Warning,
                    INVALID_INPUT,
                    message,
                )
                .await
                .map(Some);
        };
        if sunset <= self.now {
            let message = format!("sunset {text} reached; terminating");
            return self
                .fire(
                    state,
                    Event::Terminate,
                    EventType::Normal,
                    "SunsetReached",
                    message,
                )
                .await
                .map(Some);
        }
        Ok(None)
    }

    async fn provider_not_found(&mut self, state: State) -> Result<Action, Error> {
        let loaded: Vec<&str> = self.ctx.registry.provider_names().collect();
        let message = format!(
            "provider `{}` is not loaded (loaded: {}); add its module to the operator's provider directory",
            self.mount.provider_name(),
            if loaded.is_empty() {
                "none".to_string()
            } else {
                loaded.join(", ")
            }
        );
        if state == State::Error && self.ready_reason() == Some(PROVIDER_NOT_FOUND) {
            return Ok(Action::requeue(self.interval()));
        }
        match state {
            State::Requested
            | State::Preparing
            | State::Installing
            | State::Active
            | State::Error => {
                self.fire(
                    state,
                    Event::Impair,
                    EventType::Warning,
                    PROVIDER_NOT_FOUND,
                    message,
                )
                .await?;
            }
            _ => {
                if self.observe(Observed::new(
                    READY,
                    false,
                    PROVIDER_NOT_FOUND,
                    message.clone(),
                )) {
                    self.write_conditions().await?;
                    self.publish(EventType::Warning, PROVIDER_NOT_FOUND, "Reconcile", message)
                        .await;
                }
            }
        }
        Ok(Action::requeue(self.interval()))
    }

    /// REQUESTED (and a retry from ERROR): validate, refuse a second mount of
    /// the same target, check the target exists, then start preparing.
    async fn admit(
        &mut self,
        from: State,
        provider: &ProviderModule,
        mount: &Mount,
    ) -> Result<Action, Error> {
        if let Err(err) = provider
            .validate(Some(self.access(provider, mount)), mount)
            .await
        {
            return self.failed(from, "validate", err).await;
        }
        if let Some(holder) = self.earlier_mount_of_same_target(mount) {
            let message = format!(
                "container `{}` of `{}` in namespace `{}` is already mounted by {holder}; delete one of the two mounts",
                mount.target_container, mount.target, mount.target_namespace
            );
            if from == State::Error && self.ready_reason() == Some(DUPLICATE_MOUNT) {
                return Ok(Action::requeue(self.interval()));
            }
            return self
                .fire(
                    from,
                    Event::Impair,
                    EventType::Warning,
                    DUPLICATE_MOUNT,
                    message,
                )
                .await;
        }
        if let Some(missing) = self.unless_target_exists(from, provider, mount).await? {
            return Ok(missing);
        }
        let message = format!(
            "duplicating `{}` in namespace `{}` with provider `{}`",
            mount.target,
            mount.target_namespace,
            provider.name()
        );
        self.fire(
            from,
            Event::Arrange,
            EventType::Normal,
            "Preparing",
            message,
        )
        .await
    }

    /// Another mount, older than this one, of the same container of the same workload.
    fn earlier_mount_of_same_target(&self, mount: &Mount) -> Option<String> {
        let key = |ns: &str, target: &str, container: &str| {
            Target::parse(target)
                .ok()
                .map(|t| (ns.to_string(), t, container.to_string()))
        };
        let own = key(
            &mount.target_namespace,
            &mount.target,
            &mount.target_container,
        )?;
        let own_order = (
            self.mount.creation_timestamp(),
            self.mount.namespace(),
            self.mount.name_any(),
        );
        self.ctx
            .mounts
            .state()
            .iter()
            .filter(|other| other.uid() != self.mount.uid())
            .filter(|other| {
                let m = &other.fields;
                key(
                    &other.target_namespace(),
                    m.target.as_deref().unwrap_or_default(),
                    m.target_container.as_deref().unwrap_or_default(),
                )
                .as_ref()
                    == Some(&own)
            })
            .filter(|other| {
                (
                    other.creation_timestamp(),
                    other.namespace(),
                    other.name_any(),
                ) < own_order
            })
            .map(|other| {
                format!(
                    "{}/{} ({})",
                    other.namespace().unwrap_or_default(),
                    other.name_any(),
                    other.fields.state.as_deref().unwrap_or("REQUESTED")
                )
            })
            .next()
    }

    /// PREPARING: the provider duplicates the target; once it is usable, install.
    async fn prepare(&mut self, provider: &ProviderModule, mount: &Mount) -> Result<Action, Error> {
        let from = State::Preparing;
        match provider.prepare(self.access(provider, mount), mount).await {
            Ok(Progress::Done) => {}
            Ok(progress) => return Ok(self.wait(progress)),
            Err(err) => return self.failed(from, "prepare", err).await,
        }
        match provider.prepared(self.access(provider, mount), mount).await {
            Ok(true) => {
                let message = "prepared (shadow workload ready); installing".to_string();
                self.fire(
                    from,
                    Event::Install,
                    EventType::Normal,
                    "Installing",
                    message,
                )
                .await
            }
            Ok(false) => {
                let message =
                    "prepared; waiting for the shadow workload to become ready".to_string();
                if self.observe(Observed::new(READY, false, "Preparing", message)) {
                    self.write_conditions().await?;
                }
                Ok(Action::requeue(PREPARED_POLL))
            }
            Err(err) => self.failed(from, "prepared", err).await,
        }
    }

    fn wait(&self, progress: Progress) -> Action {
        match progress {
            Progress::Done => Action::requeue(Duration::ZERO),
            Progress::RetryAfter(seconds) => {
                Action::requeue(Duration::from_secs(seconds.max(1).into()))
            }
            // Pod changes wake the mount up; the interval is the safety net.
            Progress::WhenPodsChange => Action::requeue(self.interval()),
        }
    }

    /// INSTALLING: the provider puts the interception in place; once every
    /// readiness condition holds, the mount is ACTIVE.
    async fn install(&mut self, provider: &ProviderModule, mount: &Mount) -> Result<Action, Error> {
        let from = State::Installing;
        match provider.install(self.access(provider, mount), mount).await {
            Ok(Progress::Done) => {}
            Ok(progress) => return Ok(self.wait(progress)),
            Err(err) => return self.failed(from, "install", err).await,
        }
        let conditions = match provider.ready(self.access(provider, mount), mount).await {
            Ok(conditions) => conditions,
            Err(err) => return self.failed(from, "ready", err).await,
        };
        let missing = self.observe_readiness(&conditions);
        if missing.is_empty() {
            self.observe(Observed::new(
                UNINSTALLED,
                false,
                "Installed",
                "the provider's work is in place",
            ));
            let message = format!(
                "intercepting: {}",
                conditions
                    .iter()
                    .map(|c| c.reason.as_str())
                    .collect::<Vec<_>>()
                    .join("; ")
            );
            return self
                .fire(from, Event::Activate, EventType::Normal, "Active", message)
                .await;
        }
        let message = format!("installed; waiting for: {}", missing.join("; "));
        if self.observe(Observed::new(READY, false, "Installing", message)) {
            self.write_conditions().await?;
        }
        Ok(Action::requeue(READINESS_POLL))
    }

    /// Records the provider's readiness conditions; returns the ones not met.
    fn observe_readiness(&mut self, conditions: &[ProviderCondition]) -> Vec<String> {
        let mut missing = Vec::new();
        if conditions.is_empty() {
            missing.push("the provider reported no readiness conditions".to_string());
        }
        for c in conditions {
            let reason = if c.ready { "Ready" } else { "NotReady" };
            self.observe(Observed::new(&c.name, c.ready, reason, c.reason.clone()));
            if !c.ready {
                missing.push(format!("{} ({})", c.name, c.reason));
            }
        }
        missing
    }

    /// `None` when the target exists; otherwise what marking it MISSING (or
    /// the provider's error) leads to.
    async fn unless_target_exists(
        &mut self,
        from: State,
        provider: &ProviderModule,
        mount: &Mount,
    ) -> Result<Option<Action>, Error> {
        match provider
            .target_exists(self.access(provider, mount), mount)
            .await
        {
            Ok(true) => Ok(None),
            Ok(false) => {
                let message = format!(
                    "target `{}` not found in namespace `{}`",
                    mount.target, mount.target_namespace
                );
                self.fire(
                    from,
                    Event::MarkMissing,
                    EventType::Warning,
                    "TargetMissing",
                    message,
                )
                .await
                .map(Some)
            }
            Err(err) => self.failed(from, "target-exists", err).await.map(Some),
        }
    }

    /// ACTIVE: still intact? The shadow must be usable and every readiness
    /// condition hold; otherwise the mount goes RESTORING and installs again.
    async fn check_intact(
        &mut self,
        provider: &ProviderModule,
        mount: &Mount,
    ) -> Result<Action, Error> {
        let from = State::Active;
        if let Some(missing) = self.unless_target_exists(from, provider, mount).await? {
            return Ok(missing);
        }
        let broken = match provider.prepared(self.access(provider, mount), mount).await {
            Ok(true) => match provider.ready(self.access(provider, mount), mount).await {
                Ok(conditions) => self.observe_readiness(&conditions),
                Err(err) => return self.failed(from, "ready", err).await,
            },
            Ok(false) => vec!["the shadow workload is not ready".to_string()],
            Err(err) => return self.failed(from, "prepared", err).await,
        };
        if broken.is_empty() {
            if self.observe(Observed::new(
                READY,
                true,
                "Active",
                "intercepting; every readiness condition holds",
            )) {
                self.write_conditions().await?;
            }
            return Ok(Action::requeue(self.interval()));
        }
        let message = format!("not intact: {}; restoring", broken.join("; "));
        self.fire(
            from,
            Event::Restore,
            EventType::Warning,
            "Restoring",
            message,
        )
        .await
    }

    /// RESTORING: back through INSTALLING, or through PREPARING when the
    /// shadow is gone too.
    async fn restore(&mut self, provider: &ProviderModule, mount: &Mount) -> Result<Action, Error> {
        let from = State::Restoring;
        match provider.prepared(self.access(provider, mount), mount).await {
            Ok(true) => {
                let message = "shadow workload intact; installing again".to_string();
                self.fire(
                    from,
                    Event::Install,
                    EventType::Normal,
                    "Installing",
                    message,
                )
                .await
            }
            Ok(false) => {
                let message = "shadow workload not ready; preparing again".to_string();
                self.fire(
                    from,
                    Event::Arrange,
                    EventType::Normal,
                    "Preparing",
                    message,
                )
                .await
            }
            Err(err) => self.failed(from, "prepared", err).await,
        }
    }

    /// ERROR: a mount stays here until what caused it can have changed: the
    /// provider was loaded, the other mount of its target went away, or (for
    /// a provider failure) some time has passed. Invalid input stays: the
    /// fields that decide it cannot change, the mount must be recreated.
    async fn retry_error(
        &mut self,
        provider: &ProviderModule,
        mount: &Mount,
    ) -> Result<Action, Error> {
        match self.ready_reason() {
            Some(PROVIDER_NOT_FOUND | DUPLICATE_MOUNT) => {
                self.admit(State::Error, provider, mount).await
            }
            Some(PROVIDER_FAILED) | None => {
                let waited = self.mount.time_in(State::Error, self.now);
                if waited >= ERROR_RETRY {
                    self.admit(State::Error, provider, mount).await
                } else {
                    Ok(Action::requeue(ERROR_RETRY.saturating_sub(waited)))
                }
            }
            Some(_) => Ok(Action::requeue(self.interval())),
        }
    }

    fn uninstalled(&self) -> bool {
        self.conditions
            .iter()
            .any(|c| c.type_ == UNINSTALLED && c.status == "True")
    }

    /// MISSING: clean up once, then wait for the target within the grace
    /// period: back → PREPARING (and prepare runs again); expired → TERMINATED.
    async fn missing(&mut self, provider: &ProviderModule, mount: &Mount) -> Result<Action, Error> {
        let from = State::Missing;
        if !self.uninstalled() {
            match provider
                .uninstall(self.access(provider, mount), mount)
                .await
            {
                Ok(Progress::Done) => {
                    let message = "target missing: shadow workload and Service removed, nothing left to restore".to_string();
                    self.observe(Observed::new(
                        UNINSTALLED,
                        true,
                        "Uninstalled",
                        message.clone(),
                    ));
                    self.write_conditions().await?;
                    self.publish(EventType::Normal, "Uninstalled", "uninstall", message)
                        .await;
                }
                Ok(progress) => return Ok(self.wait(progress)),
                Err(err) => return self.failed(from, "uninstall", err).await,
            }
        }
        match provider
            .target_exists(self.access(provider, mount), mount)
            .await
        {
            Ok(true) => {
                let message = format!("target `{}` is back; preparing again", mount.target);
                return self
                    .fire(
                        from,
                        Event::Recover,
                        EventType::Normal,
                        "Recovered",
                        message,
                    )
                    .await;
            }
            Ok(false) => {}
            Err(err) => return self.failed(from, "target-exists", err).await,
        }
        let grace = self
            .mount
            .missing_grace_period(self.ctx.settings.missing_grace_period);
        let waited = self.mount.time_in(State::Missing, self.now);
        if waited >= grace {
            let message = format!(
                "target `{}` missing for {} s, longer than the grace period of {} s; terminating",
                mount.target,
                waited.as_secs(),
                grace.as_secs()
            );
            return self
                .fire(
                    from,
                    Event::Terminate,
                    EventType::Warning,
                    "GracePeriodExpired",
                    message,
                )
                .await;
        }
        Ok(Action::requeue(self.interval().min(grace - waited)))
    }

    /// TERMINATED (sunset, grace expiry): uninstall, then delete the mount;
    /// the finalizer's cleanup finishes the rest.
    async fn finish(&mut self) -> Result<Action, Error> {
        match self.uninstall_all().await {
            Ok(()) => {}
            Err(Error::CleanupPending { retry, .. }) => return Ok(Action::requeue(retry)),
            Err(err) => return Err(err),
        }
        self.api
            .delete(&self.mount.name_any(), &DeleteParams::default())
            .await?;
        self.publish(
            EventType::Normal,
            "Deleted",
            "terminate",
            "mount terminated and deleted".into(),
        )
        .await;
        Ok(Action::await_change())
    }

    /// Deletion of the mount (the finalizer): TERMINATED, uninstall until
    /// done, the mount's GefyraBridges deleted; only then may it go.
    pub async fn cleanup(mut self) -> Result<Action, Error> {
        match self.mount.state() {
            Ok(State::Terminated) => {}
            Ok(from) => {
                self.fire(
                    from,
                    Event::Terminate,
                    EventType::Normal,
                    "Terminating",
                    "mount deleted; uninstalling".into(),
                )
                .await?;
            }
            Err(_) => {}
        }
        self.uninstall_all().await?;
        Ok(Action::await_change())
    }

    async fn uninstall_all(&mut self) -> Result<(), Error> {
        let pending = |message: String, retry: Duration| Error::CleanupPending { message, retry };
        let Some(provider) = self.provider() else {
            if !self.mount.ever_prepared() {
                return self.delete_bridges().await;
            }
            let message = format!(
                "provider `{}` is not loaded, so the mount cannot be uninstalled; load it again (or remove the finalizer by hand, leaving the target patched)",
                self.mount.provider_name()
            );
            if self.observe(Observed::new(
                READY,
                false,
                PROVIDER_NOT_FOUND,
                message.clone(),
            )) {
                self.write_conditions().await?;
                self.publish(
                    EventType::Warning,
                    PROVIDER_NOT_FOUND,
                    "uninstall",
                    message.clone(),
                )
                .await;
            }
            return Err(pending(message, self.interval()));
        };
        let mount = self.mount.provider_request(&self.ctx.settings);
        match provider
            .uninstall(self.access(&provider, &mount), &mount)
            .await
        {
            Ok(Progress::Done) => {}
            Ok(Progress::RetryAfter(seconds)) => {
                return Err(pending(
                    "restoring the target".into(),
                    Duration::from_secs(seconds.max(1).into()),
                ));
            }
            Ok(Progress::WhenPodsChange) => {
                return Err(pending(
                    "waiting for the target's pods".into(),
                    self.interval(),
                ));
            }
            Err(err) => {
                let retry = match err.provider_error() {
                    Some(ProviderError::InvalidInput(_)) if !self.mount.ever_prepared() => {
                        return self.delete_bridges().await;
                    }
                    Some(ProviderError::Temporary(t)) => {
                        Duration::from_secs(t.retry_after_seconds.max(1).into())
                    }
                    _ => ERROR_RETRY,
                };
                let message = format!("uninstall: {err}");
                if self.observe(Observed::new(
                    READY,
                    false,
                    "UninstallFailed",
                    message.clone(),
                )) {
                    self.write_conditions().await?;
                    self.publish(
                        EventType::Warning,
                        "UninstallFailed",
                        "uninstall",
                        message.clone(),
                    )
                    .await;
                }
                return Err(pending(message, retry));
            }
        }
        if !self.uninstalled() {
            let message = "shadow workload and Service removed, target restored".to_string();
            self.observe(Observed::new(
                UNINSTALLED,
                true,
                "Uninstalled",
                message.clone(),
            ));
            self.write_conditions().await?;
            self.publish(EventType::Normal, "Uninstalled", "uninstall", message)
                .await;
        }
        self.delete_bridges().await
    }

    /// Deletes the GefyraBridges labelled with this mount (none when the
    /// GefyraBridge CRD is not installed).
    async fn delete_bridges(&mut self) -> Result<(), Error> {
        let bridges: Api<GefyraBridge> = Api::namespaced(
            self.ctx.client.clone(),
            &self.mount.namespace().unwrap_or_default(),
        );
        let selector = format!("{BRIDGE_MOUNT_LABEL}={}", self.mount.name_any());
        let listed = match bridges
            .list_metadata(&ListParams::default().labels(&selector))
            .await
        {
            Ok(list) => list,
            Err(kube::Error::Api(status)) if status.is_not_found() => return Ok(()),
            Err(err) => return Err(err.into()),
        };
        if listed.items.is_empty() {
            return Ok(());
        }
        let names: Vec<String> = listed.items.iter().map(|b| b.name_any()).collect();
        bridges
            .delete_collection(
                &DeleteParams::background(),
                &ListParams::default().labels(&selector),
            )
            .await?;
        self.publish(
            EventType::Normal,
            "BridgesDeleted",
            "terminate",
            format!("deleted GefyraBridges {}", names.join(", ")),
        )
        .await;
        Ok(())
    }
}
