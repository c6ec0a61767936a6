//! Cleanup: TERMINATED (sunset, grace expiry) and the deletion of a mount
//! (the finalizer) uninstall the provider's work until it is done and delete
//! the mount's GefyraBridges; only then may the mount go.

use std::time::Duration;

use kube::{
    Api, ResourceExt,
    api::{DeleteParams, ListParams},
    runtime::{controller::Action, events::EventType},
};

use super::{
    Error, Reconcile,
    admission::Checks,
    outcome::{ERROR_RETRY, retry_after},
    report::{Notice, Report, Step},
};
use crate::{crd::GefyraBridge, reason::Reason};
use pontoon_plugins::{
    CallError,
    bindings::{Progress, ProviderError},
};

/// Label Gefyra puts on the bridges of a mount.
const BRIDGE_MOUNT_LABEL: &str = "gefyra.dev/bridge-mount";

impl Reconcile<'_> {
    /// TERMINATED: uninstall, then delete the mount; the finalizer's cleanup
    /// finishes the rest.
    pub(super) async fn finish(&mut self) -> Result<Action, Error> {
        match self.uninstall_all(Record::Condition).await {
            Ok(()) => {}
            Err(Error::CleanupPending { retry, .. }) => return Ok(Action::requeue(retry)),
            Err(err) => return Err(err),
        }
        self.writer.delete().await?;
        self.writer
            .publish(Notice {
                type_: EventType::Normal,
                reason: Reason::Deleted,
                action: "terminate",
                note: "mount terminated and deleted".into(),
            })
            .await;
        Ok(Action::await_change())
    }

    /// Uninstalls until the provider is done, then deletes the bridges; an
    /// uninstall that is not done yet is [`Error::CleanupPending`]. `record`
    /// says how the end of the uninstall is told (its Event is posted
    /// either way).
    pub(super) async fn uninstall_all(&mut self, record: Record) -> Result<(), Error> {
        let ever_prepared = self.cr.ever_prepared();
        let undo = self.recorded || (ever_prepared && self.refusal(Checks::Undo).await?.is_none());
        if !undo {
            // Never admitted by this operator, so its provider never acted
            // for it; an uninstall could undo what another mount did to the
            // same pods. (A mount an earlier version admitted, which kept
            // no record, reached PREPARING and is undone, unless another
            // mount holds its pods.)
            return self.delete_bridges().await;
        }
        let uninstall = match self.provider() {
            None => provider_gone(&self.request.provider, ever_prepared, self.interval),
            Some(provider) => {
                let request = self.request.mount(&self.cr, &self.ctx.settings);
                let answer = provider
                    .uninstall(self.access(&provider, &request), &request)
                    .await;
                uninstalled(&answer, ever_prepared, self.interval)
            }
        };
        match uninstall {
            Uninstall::Done => {
                if !self.writer.uninstalled() {
                    match record {
                        Record::Condition => self.writer.report(target_restored()).await?,
                        Record::EventOnly => {
                            if let Some(notice) = target_restored().notice {
                                self.writer.publish(notice).await;
                            }
                        }
                    }
                }
            }
            Uninstall::NothingToUndo => {}
            Uninstall::Pending {
                report,
                message,
                retry,
            } => {
                if let Some(report) = report {
                    self.writer.report(report).await?;
                }
                return Err(Error::CleanupPending { message, retry });
            }
        }
        self.delete_bridges().await
    }

    /// Deletes the GefyraBridges labelled with this mount (none when the
    /// GefyraBridge CRD is not installed).
    pub(super) async fn delete_bridges(&mut self) -> Result<(), Error> {
        let bridges: Api<GefyraBridge> = Api::namespaced(
            self.ctx.client.clone(),
            &self.cr.namespace().unwrap_or_default(),
        );
        let selector = format!("{BRIDGE_MOUNT_LABEL}={}", self.cr.name_any());
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
        self.writer
            .publish(Notice {
                type_: EventType::Normal,
                reason: Reason::BridgesDeleted,
                action: "terminate",
                note: format!("deleted GefyraBridges {}", names.join(", ")),
            })
            .await;
        Ok(())
    }
}

/// How a finished uninstall is told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Record {
    /// The `Uninstalled` condition written, with its Event: the mount stays
    /// for a moment (TERMINATED deletes it next) and the state machine
    /// reads the condition.
    Condition,
    /// Its Event only: the finalizer goes next and the mount with it, so
    /// nobody could read the condition, and writing it would only wake the
    /// mount for one more uninstall call before it is gone (in a burst of
    /// 200 deletions, a status write and a provider call a mount).
    EventOnly,
}

/// Where an uninstall stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Uninstall {
    /// The provider's work is undone; the bridges go next.
    Done,
    /// The provider never did anything; only the bridges go.
    NothingToUndo,
    /// Not yet: say so (when `report` is given) and try again after `retry`.
    Pending {
        report: Option<Report>,
        message: String,
        retry: Duration,
    },
}

/// The mount's provider is not loaded: a mount it never prepared has
/// nothing to undo; any other stays until the module is back.
pub fn provider_gone(provider: &str, ever_prepared: bool, interval: Duration) -> Uninstall {
    if !ever_prepared {
        return Uninstall::NothingToUndo;
    }
    let message = format!(
        "provider `{provider}` is not loaded, so the mount cannot be uninstalled; load it again (or remove the finalizer by hand, leaving the target patched)"
    );
    Uninstall::Pending {
        report: Some(Report::not_ready(
            Reason::ProviderNotFound,
            Step::Uninstall.as_str(),
            message.clone(),
        )),
        message,
        retry: interval,
    }
}

/// What the provider's `uninstall` answered.
pub fn uninstalled(
    answer: &Result<Progress, CallError>,
    ever_prepared: bool,
    interval: Duration,
) -> Uninstall {
    let err = match answer {
        Ok(Progress::Done) => return Uninstall::Done,
        Ok(Progress::RetryAfter(seconds)) => {
            return Uninstall::Pending {
                report: None,
                message: "restoring the target".into(),
                retry: retry_after(*seconds),
            };
        }
        Ok(Progress::WhenPodsChange) => {
            return Uninstall::Pending {
                report: None,
                message: "waiting for the target's pods".into(),
                retry: interval,
            };
        }
        Err(err) => err,
    };
    let retry = match err.provider_error() {
        // A mount refused before PREPARING (a bad target) has nothing to undo.
        Some(ProviderError::InvalidInput(_)) if !ever_prepared => {
            return Uninstall::NothingToUndo;
        }
        Some(ProviderError::Temporary(t)) => retry_after(t.retry_after_seconds),
        _ => ERROR_RETRY,
    };
    let message = format!("uninstall: {err}");
    Uninstall::Pending {
        report: Some(Report::not_ready(
            Reason::UninstallFailed,
            Step::Uninstall.as_str(),
            message.clone(),
        )),
        message,
        retry,
    }
}

/// The provider's work is undone; recorded once.
pub fn target_restored() -> Report {
    Report::uninstalled("shadow workload and Service removed, target restored")
}

#[cfg(test)]
mod tests {
    use super::{super::fixtures::*, *};
    use crate::status::{Observed, READY};

    fn pending(uninstall: Uninstall) -> (Option<Report>, String, Duration) {
        match uninstall {
            Uninstall::Pending {
                report,
                message,
                retry,
            } => (report, message, retry),
            other => panic!("expected pending, got {other:?}"),
        }
    }

    #[test]
    fn a_missing_provider_blocks_only_a_mount_it_prepared() {
        assert_eq!(
            provider_gone("teleporter", false, INTERVAL),
            Uninstall::NothingToUndo
        );
        let (report, message, retry) = pending(provider_gone("teleporter", true, INTERVAL));
        assert_eq!(retry, INTERVAL);
        assert_eq!(
            message,
            "provider `teleporter` is not loaded, so the mount cannot be uninstalled; load it again (or remove the finalizer by hand, leaving the target patched)"
        );
        let report = report.unwrap();
        assert_eq!(
            report.observed,
            Observed::new(READY, false, "ProviderNotFound", message.clone())
        );
        let notice = report.notice.unwrap();
        assert_eq!(
            (notice.type_, notice.reason, notice.action),
            (EventType::Warning, Reason::ProviderNotFound, "uninstall")
        );
    }

    #[test]
    fn every_uninstall_progress() {
        for ever_prepared in [false, true] {
            assert_eq!(
                uninstalled(&Ok(Progress::Done), ever_prepared, INTERVAL),
                Uninstall::Done
            );
            assert_eq!(
                pending(uninstalled(
                    &Ok(Progress::RetryAfter(0)),
                    ever_prepared,
                    INTERVAL
                )),
                (None, "restoring the target".into(), Duration::from_secs(1))
            );
            assert_eq!(
                pending(uninstalled(
                    &Ok(Progress::RetryAfter(8)),
                    ever_prepared,
                    INTERVAL
                ))
                .2,
                Duration::from_secs(8)
            );
            assert_eq!(
                pending(uninstalled(
                    &Ok(Progress::WhenPodsChange),
                    ever_prepared,
                    INTERVAL
                )),
                (None, "waiting for the target's pods".into(), INTERVAL)
            );
        }
    }

    #[test]
    fn invalid_input_before_preparing_has_nothing_to_undo() {
        assert_eq!(
            uninstalled(&Err(invalid("bad target")), false, INTERVAL),
            Uninstall::NothingToUndo
        );
        let (report, message, retry) =
            pending(uninstalled(&Err(invalid("bad target")), true, INTERVAL));
        assert_eq!(retry, Duration::from_secs(15));
        assert_eq!(
            message,
            "uninstall: provider `carrier2mount` install: invalid input: bad target"
        );
        assert_eq!(report.unwrap().observed.reason, "UninstallFailed");
    }

    #[test]
    fn a_failed_uninstall_is_said_and_retried() {
        for ever_prepared in [false, true] {
            for (err, retry) in [
                (temporary("pods restarting", 6), 6),
                (temporary("now", 0), 1),
                (target_missing("gone"), 15),
                (failed("boom"), 15),
                (trapped(), 15),
            ] {
                let (report, message, after) =
                    pending(uninstalled(&Err(copy(&err)), ever_prepared, INTERVAL));
                assert_eq!(after, Duration::from_secs(retry), "{err}");
                assert_eq!(message, format!("uninstall: {err}"));
                assert_eq!(
                    report,
                    Some(Report::not_ready(
                        Reason::UninstallFailed,
                        "uninstall",
                        message.clone()
                    ))
                );
            }
        }
    }

    #[test]
    fn a_restored_target_is_recorded() {
        assert_eq!(
            target_restored(),
            Report::uninstalled("shadow workload and Service removed, target restored")
        );
    }
}
