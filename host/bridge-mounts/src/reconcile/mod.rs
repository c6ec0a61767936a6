//! One reconcile of one mount: read its state, run the provider step that
//! state calls for, and write the outcome back as a transition of the state
//! machine, with conditions and an Event saying what happened.
//!
//! Steps never wait: a provider that is not done says when to look again,
//! and pod changes wake the mount up (see `controller.rs`). Each step asks
//! a pure function of its family what the provider's answer leads to
//! ([`outcome::Next`]) and carries that out through the [`writer::Writer`].
//!
//! Names: `cr` is the GefyraBridgeMount resource, `cr.fields` its
//! top-level fields, `request` the mount as the provider sees it (the WIT
//! record).

mod admission;
mod cleanup;
mod error;
#[cfg(test)]
mod fixtures;
mod forward;
mod gate;
mod outcome;
mod recovery;
mod report;
mod transition;
mod writer;

use std::{sync::Arc, time::Duration};

use kube::runtime::controller::Action;

pub use self::error::Error;
use self::{outcome::Next, transition::Transition, writer::Writer};
use super::{
    admitted::Admitted,
    context::Context,
    crd::GefyraBridgeMount,
    guard::Guarded,
    reason::Reason,
    state::State,
    status::{ADMITTED, Observed},
};
use crate::bridges as bridge;
use pontoon_plugins::{
    ClusterAccess, EventSubject, MountNotes, ProviderModule,
    bindings::{Mount, provider_bridges::Bridge},
};

pub(super) struct Reconcile<'a> {
    ctx: &'a Context,
    cr: Arc<GefyraBridgeMount>,
    writer: Writer,
    /// How long the mount may go unlooked-at (see [`gate::interval`]).
    interval: Duration,
    /// The mount's valid bridges, which `install` renders (read in the
    /// states that install).
    bridges: Arc<[Bridge]>,
    /// What the mount was admitted for; before it is admitted, what its
    /// fields ask for. The provider is told this, never the fields.
    request: Admitted,
    /// Whether the operator holds a record of admitting it.
    recorded: bool,
}

impl<'a> Reconcile<'a> {
    pub fn new(ctx: &'a Context, cr: Arc<GefyraBridgeMount>) -> Self {
        let writer = Writer::new(ctx.client.clone(), ctx.recorder.clone(), cr.clone());
        let interval = gate::interval(ctx.settings.reconcile_interval, cr.sunset(), writer.now());
        Self {
            ctx,
            request: Admitted::of(&cr),
            recorded: false,
            cr,
            writer,
            interval,
            bridges: Arc::from([]),
        }
    }

    /// Takes what the operator recorded of the mount's admission; a mount
    /// whose fields no longer say it is told so (the operator keeps serving
    /// what it admitted).
    async fn read_admission(&mut self) -> Result<(), Error> {
        let Some(admitted) = self.ctx.admissions.of(&self.uid()).await? else {
            return Ok(());
        };
        let drift = admitted.drift(&self.cr);
        self.request = admitted;
        self.recorded = true;
        if !drift.is_empty() {
            let message = format!(
                "the mount's fields changed after it was admitted ({}); the operator keeps \
                 serving what it admitted, {}: delete the mount and create a new one for \
                 another target",
                drift.join("; "),
                self.request.describe()
            );
            let observed = Observed::new(ADMITTED, false, Reason::Drifted.as_str(), message);
            self.writer
                .report(report::Report {
                    notice: Some(report::Notice {
                        type_: kube::runtime::events::EventType::Warning,
                        reason: Reason::Drifted,
                        action: "Admit",
                        note: observed.message.clone(),
                    }),
                    observed,
                })
                .await?;
        }
        Ok(())
    }

    /// The reconcile of a mount that is not being deleted.
    pub async fn apply(mut self) -> Result<Action, Error> {
        pontoon_support::chaos::point("reconcile");
        self.read_admission().await?;
        let state = match self.cr.state() {
            Ok(state) => state,
            Err(unknown) => {
                self.writer.report(gate::unknown_state(&unknown)).await?;
                return Ok(Action::requeue(self.interval));
            }
        };
        if state == State::Terminated {
            return self.finish().await;
        }
        let ready = self.writer.ready_reason();
        let sunset = self.cr.fields.sunset.as_deref();
        if let Some(next) = gate::sunset(state, sunset, ready, self.writer.now(), self.interval) {
            return self.execute(state, next).await;
        }
        let Some(provider) = self.provider() else {
            let loaded: Vec<&str> = self.ctx.registry.provider_names().collect();
            let provider = self.request.provider.as_str();
            let next = gate::provider_not_found(state, provider, &loaded, ready, self.interval);
            return self.execute(state, next).await;
        };
        if !self.recorded && !matches!(state, State::Requested | State::Error) {
            // Not admitted by this operator, whatever the state says.
            if let Some(refused) = self.adopt(state).await? {
                return Ok(refused);
            }
        }
        let request = self.request.mount(&self.cr, &self.ctx.settings);
        if matches!(state, State::Installing | State::Active) {
            // Read before installing, never guessed: installing with a list
            // that lacks a bridge takes it out of the pods. None while no
            // admission policy judges bridges (see `guard`).
            self.bridges = if self.ctx.guard.check(Guarded::Bridges).await.is_ok() {
                bridge::lookup::valid_bridges(
                    &self.ctx.client,
                    &self.ctx.bridges,
                    &self.cr,
                    &self.request,
                    &self.ctx.settings.bridges,
                )
                .await?
                .into()
            } else {
                Arc::from([])
            };
        }
        match state {
            State::Requested => self.admit(state, &provider, &request).await,
            State::Preparing => self.prepare(&provider, &request).await,
            State::Installing => self.install(&provider, &request).await,
            State::Active => self.check_intact(&provider, &request).await,
            State::Restoring => self.restore(&provider, &request).await,
            State::Error => self.retry_error(&provider, &request).await,
            State::Missing => self.missing(&provider, &request).await,
            State::Terminated => self.finish().await,
        }
    }

    /// Deletion of the mount (the finalizer): TERMINATED, uninstall until
    /// done, the mount's GefyraBridges deleted; only then may it go.
    pub async fn cleanup(mut self) -> Result<Action, Error> {
        pontoon_support::chaos::point("reconcile");
        if self.ctx.uninstalled.recently(&self.uid()) {
            // Woken again before the deletion reached the cache: the
            // uninstall said done a moment ago (see `Uninstalled`). Left:
            // a bridge labelled since, and the finalizer's removal.
            self.delete_bridges().await?;
            return Ok(Action::await_change());
        }
        self.read_admission().await?;
        if let Ok(from) = self.cr.state()
            && from != State::Terminated
        {
            let interval = self.interval;
            self.writer
                .fire(from, Transition::mount_deleted(), interval)
                .await?;
        }
        self.uninstall_all(cleanup::Record::EventOnly).await?;
        self.ctx.admissions.forget(&self.uid()).await?;
        self.ctx.uninstalled.record(&self.uid());
        self.ctx.book.forget(&self.uid());
        self.ctx.seen_whole.forget(&self.uid());
        self.ctx.notes.forget_mount(&self.uid());
        // What is left is the finalizer's removal.
        pontoon_support::chaos::point("uninstalled");
        Ok(Action::await_change())
    }

    /// Carries out what a step ended with.
    async fn execute(&mut self, from: State, next: Next) -> Result<Action, Error> {
        let after = match next {
            Next::Fire(transition) => self.writer.fire(from, transition, self.interval).await?,
            Next::Report(report, after) => {
                self.writer.report(report).await?;
                after
            }
            Next::Requeue(after) => after,
        };
        Ok(Action::requeue(after))
    }

    fn uid(&self) -> String {
        self.cr.metadata.uid.clone().unwrap_or_default()
    }

    /// The pods now hold the mount's current bridges: the book says so, and
    /// the bridge controller looks at the bridges that came or went.
    fn rendered_bridges(&self) {
        let ns = self.cr.metadata.namespace.as_deref().unwrap_or_default();
        self.ctx.book.record(&self.uid(), ns, &self.bridges);
    }

    fn provider(&self) -> Option<Arc<ProviderModule>> {
        self.ctx.registry.provider(&self.request.provider)
    }

    /// What the provider may do on the cluster while serving `request`.
    fn access(&self, provider: &ProviderModule, request: &Mount) -> ClusterAccess {
        ClusterAccess {
            client: self.ctx.client.clone(),
            discovery: self.ctx.discovery.clone(),
            freshness: self.ctx.freshness.clone(),
            writes: self.ctx.writes.clone(),
            scope: provider.scope_for(request),
            field_manager: provider.name().to_string(),
            events: Some(EventSubject {
                recorder: self.ctx.recorder.clone(),
                object: self.writer.reference().clone(),
            }),
            journal: None,
            bridges: self.bridges.clone(),
            notes: Some(MountNotes {
                notes: self.ctx.notes.clone(),
                mount: self.uid(),
            }),
        }
    }
}
