//! The I/O edge of a reconcile: the mount's conditions as this reconcile
//! sees them, written back to the mount (with its state on a transition),
//! and the Events about it. Every write applies only while the mount's state
//! is the one the reconcile read, so no step acts on a stale mount.

use std::{sync::Arc, time::Duration};

use k8s_openapi::{
    api::core::v1::ObjectReference, apimachinery::pkg::apis::meta::v1::Condition, jiff::Timestamp,
};
use kube::{
    Api, Resource, ResourceExt,
    api::{DeleteParams, Patch, PatchParams},
    runtime::events::{Event as KubeEvent, Recorder},
};

use super::{
    error::Error,
    report::{Notice, Report},
    transition::{Plan, Transition, plan},
};
use crate::{
    crd::GefyraBridgeMount,
    reason::ReadyReason,
    state::State,
    status::{Observed, ReadAs, UNINSTALLED, conditions_patch, set_condition, transition_patch},
};

pub(super) struct Writer {
    cr: Arc<GefyraBridgeMount>,
    api: Api<GefyraBridgeMount>,
    recorder: Recorder,
    reference: ObjectReference,
    read: ReadAs,
    conditions: Vec<Condition>,
    now: Timestamp,
}

impl Writer {
    pub fn new(client: kube::Client, recorder: Recorder, cr: Arc<GefyraBridgeMount>) -> Self {
        Self {
            api: Api::namespaced(client, &cr.namespace().unwrap_or_default()),
            recorder,
            reference: cr.object_ref(&()),
            read: ReadAs::of(&cr),
            conditions: cr.conditions().to_vec(),
            cr,
            now: Timestamp::now(),
        }
    }

    /// The time this reconcile acts at.
    pub fn now(&self) -> Timestamp {
        self.now
    }

    pub fn reference(&self) -> &ObjectReference {
        &self.reference
    }

    pub fn ready_reason(&self) -> ReadyReason {
        ReadyReason::of(&self.conditions)
    }

    /// Whether the provider's work is recorded as undone.
    pub fn uninstalled(&self) -> bool {
        self.conditions
            .iter()
            .any(|c| c.type_ == UNINSTALLED && c.status == "True")
    }

    fn observe(&mut self, observed: &Observed) -> bool {
        set_condition(&mut self.conditions, observed, self.now)
    }

    /// Records conditions that are written with whatever is written next.
    pub fn record(&mut self, observed: impl IntoIterator<Item = Observed>) {
        for o in observed {
            self.observe(&o);
        }
    }

    /// Records the report's condition; when that changed, writes the
    /// conditions and posts the report's Event.
    pub async fn report(&mut self, report: Report) -> Result<(), Error> {
        if self.observe(&report.observed) {
            self.write_conditions().await?;
            if let Some(notice) = report.notice {
                self.publish(notice).await;
            }
        }
        Ok(())
    }

    /// Fires `transition` from `from`: writes the new state with its
    /// timestamp and the conditions, posts an Event. A transition the table
    /// refuses is logged and recorded, never applied. Returns when to look
    /// at the mount again.
    pub async fn fire(
        &mut self,
        from: State,
        transition: Transition,
        interval: Duration,
    ) -> Result<Duration, Error> {
        if let Some(also) = &transition.also {
            self.observe(also);
        }
        match plan(from, &transition, self.uninstalled()) {
            Plan::Refused {
                refused,
                report,
                retry,
            } => {
                tracing::warn!(
                    state = %from, event = %transition.event,
                    "{refused}; retrying in {} s ({})", retry.as_secs(), transition.message
                );
                self.report(report).await?;
                Ok(retry)
            }
            Plan::Move { to, observed } => {
                for o in &observed {
                    self.observe(o);
                }
                if to == from {
                    self.write_conditions().await?;
                } else {
                    let body = transition_patch(&self.read, to, self.now, &self.conditions);
                    pontoon_support::chaos::point(format_args!("write state {to}"));
                    self.patch(body).await?;
                    pontoon_support::chaos::point(format_args!("wrote state {to}"));
                    tracing::info!(from = %from, to = %to, "{}", transition.message);
                }
                self.publish(transition.notice()).await;
                // The write wakes the controller up again; this is the safety net.
                Ok(interval)
            }
        }
    }

    /// Posts an Event about the mount; one that cannot be posted is logged.
    pub async fn publish(&self, notice: Notice) {
        let event = KubeEvent {
            type_: notice.type_,
            reason: notice.reason.as_str().into(),
            note: Some(pontoon_support::controller_support::event_note(notice.note)),
            action: notice.action.into(),
            secondary: None,
        };
        if let Err(err) = self.recorder.publish(&event, &self.reference).await {
            tracing::warn!(error = %err, "cannot post event {}", notice.reason);
        }
    }

    /// Deletes the mount (its finalizer still holds it until cleanup).
    pub async fn delete(&self) -> Result<(), Error> {
        self.api
            .delete(&self.cr.name_any(), &DeleteParams::default())
            .await?;
        Ok(())
    }

    async fn write_conditions(&mut self) -> Result<(), Error> {
        let body = conditions_patch(&self.read, &self.conditions);
        pontoon_support::chaos::point("write conditions");
        self.patch(body).await
    }

    async fn patch(&mut self, body: serde_json::Value) -> Result<(), Error> {
        let patch: Patch<()> = Patch::Json(serde_json::from_value(body)?);
        let patched = self
            .api
            .patch(&self.cr.name_any(), &PatchParams::default(), &patch)
            .await?;
        // Later writes of this reconcile build on what this one left.
        self.read = ReadAs::of(&patched);
        Ok(())
    }
}
