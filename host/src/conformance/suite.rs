//! The ordered checks: a round against the sample Deployment with every
//! check, then a shorter round each against a StatefulSet and a bare Pod.
//! Each check's name is what a provider's author reads, so names never
//! change; a check that needs an earlier one which failed is reported as
//! skipped, so that the total never shrinks.

use std::{sync::Arc, time::Duration};

use k8s_openapi::api::apps::v1::Deployment;
use kube::{Api, Client};

use super::{
    compare::TargetShape,
    fixtures::TargetKind,
    options::Options,
    read_back::BridgeReadBack,
    report::Check,
    snapshot::{Snapshot, expect_bool, leftovers, same},
    writes::put_back_problem,
};
use crate::plugins::{
    CallError, ClusterAccess, Discovery, EventSubject, Freshness, Journal, MountNotes, Notes,
    ProviderModule, WriteTurns,
    bindings::{Condition as ProviderCondition, Mount, ProviderError, provider_bridges::Bridge},
};

const VALIDATE_ACCEPTS: &str = "validate accepts a well-formed mount";
const TARGET_EXISTS: &str = "target-exists is true for an existing target";
const PREPARED_BEFORE: &str = "prepared is false before prepare";
const PREPARE_COMPLETES: &str = "prepare completes";
const PREPARE_TWICE: &str = "prepare twice gives the same cluster state";
const PREPARED_BECOMES: &str = "prepared becomes true";
const READY_BEFORE: &str = "ready is not all true before install";
const INSTALL_COMPLETES: &str = "install completes";
const INSTALL_TWICE: &str = "install twice is harmless";
const READY_AFTER_INSTALL: &str = "ready reports every condition true after install";
const READY_EARNED: &str = "ready is true because install did something (a write or an exec)";
pub(super) const BRIDGE_TAKEN_UP: &str =
    "install with a bridge does work for it (a write or an exec)";
pub(super) const BRIDGE_AFTER_RESTART: &str =
    "install after a pod was replaced completes and ready reports every condition true";
pub(super) const BRIDGE_LET_GO: &str =
    "install without the bridge does work to take it out (a write or an exec)";

const UNINSTALL_COMPLETES: &str = "uninstall completes";
const LEFTOVERS: &str = "uninstall leaves nothing the provider created";
const TARGET_AS_IT_WAS: &str =
    "uninstall leaves the target as it was (image, command, args, labels)";
const RESTORED_EXACTLY: &str = "uninstall restores the target exactly (whole pod template; live pods' containers are the template's)";
const PUT_BACK: &str = "uninstall puts back every object the provider wrote (created: gone; patched, applied, deleted: labels, annotations, spec as before)";
const NOT_READY_AFTER: &str = "prepared and ready turn false after uninstall";
const UNINSTALL_TWICE: &str = "uninstall twice is harmless";
const INTERRUPTED: &str =
    "uninstall in the middle of install restores the target (prepare, one install call, uninstall)";
const TARGET_GONE: &str = "target-exists is false after the target is deleted";

/// Every check of a round, in the order it runs: a Deployment's round runs
/// them all, the others leave out the ones marked `false`.
const ROUND: [(&str, bool); 23] = [
    (VALIDATE_ACCEPTS, true),
    (TARGET_EXISTS, true),
    (PREPARED_BEFORE, true),
    (PREPARE_COMPLETES, true),
    (PREPARE_TWICE, false),
    (PREPARED_BECOMES, true),
    (READY_BEFORE, true),
    (INSTALL_COMPLETES, true),
    (INSTALL_TWICE, false),
    (READY_AFTER_INSTALL, true),
    (READY_EARNED, true),
    (BRIDGE_TAKEN_UP, false),
    (BRIDGE_AFTER_RESTART, false),
    (BRIDGE_LET_GO, false),
    (UNINSTALL_COMPLETES, true),
    (LEFTOVERS, true),
    (TARGET_AS_IT_WAS, false),
    (RESTORED_EXACTLY, true),
    (PUT_BACK, true),
    (NOT_READY_AFTER, true),
    (UNINSTALL_TWICE, false),
    (INTERRUPTED, false),
    (TARGET_GONE, true),
];

/// The checks of `kind`'s round from `first` up to, not including, `until`
/// (`None`: to the end), by their place in [`ROUND`].
fn checks_between(kind: TargetKind, first: &str, until: Option<&str>) -> Vec<&'static str> {
    ROUND
        .into_iter()
        .skip_while(|(name, _)| *name != first)
        .take_while(|(name, _)| Some(*name) != until)
        .filter(|(_, every_round)| *every_round || kind == TargetKind::Deployment)
        .map(|(name, _)| name)
        .collect()
}

/// Whether a round ran or the provider declined its kind.
enum Served {
    Yes,
    /// The provider's `invalid-input`, which names the kind.
    Declined(String),
}

/// Everything the checks share.
pub(super) struct Run {
    pub(super) client: Client,
    pub(super) provider: Arc<ProviderModule>,
    pub(super) discovery: Arc<Discovery>,
    pub(super) freshness: Arc<Freshness>,
    pub(super) writes: Arc<WriteTurns>,
    /// What the provider wrote in the round that runs.
    pub(super) journal: Arc<Journal>,
    pub(super) mount: Mount,
    pub(super) operator_ns: String,
    /// The workload of the round that runs.
    pub(super) kind: TargetKind,
    /// The kinds asked for with `--kinds`; `None`: every kind the provider serves.
    pub(super) kinds: Option<Vec<TargetKind>>,
    pub(super) timeout: Duration,
    /// The bridges the `bridges` import lists to the provider now.
    pub(super) bridges: Arc<[Bridge]>,
    /// The provider's notes, kept as the operator keeps them.
    pub(super) notes: Arc<Notes>,
    pub(super) checks: Vec<Check>,
    /// Called with each check as it completes, so progress is visible.
    pub(super) report: Box<dyn FnMut(&Check) + Send>,
    /// A provider's own reading of its pods, for the bridge checks.
    pub(super) read_back: Option<Arc<dyn BridgeReadBack>>,
}

impl Run {
    /// A run of the first round's `mount` as `options` ask, reporting each
    /// check to `report`.
    pub(super) fn new(
        client: Client,
        provider: Arc<ProviderModule>,
        mount: Mount,
        operator_ns: String,
        options: &Options,
        report: Box<dyn FnMut(&Check) + Send>,
    ) -> Self {
        Self {
            client,
            provider,
            discovery: Arc::default(),
            freshness: Arc::new(Freshness::consistent()),
            writes: Arc::default(),
            journal: Arc::default(),
            mount,
            operator_ns,
            kind: TargetKind::Deployment,
            kinds: options.kinds.clone(),
            timeout: options.timeout,
            bridges: Arc::from([]),
            notes: Arc::default(),
            checks: Vec::new(),
            report,
            read_back: options.bridge_read_back.clone(),
        }
    }

    /// The checks recorded so far, in the order they ran.
    pub(super) fn into_checks(self) -> Vec<Check> {
        self.checks
    }

    pub(super) fn access(&self) -> ClusterAccess {
        let subject = self.kind.reference(&self.mount.target_namespace);
        ClusterAccess {
            client: self.client.clone(),
            discovery: self.discovery.clone(),
            freshness: self.freshness.clone(),
            writes: self.writes.clone(),
            scope: self.provider.scope_for(&self.mount),
            field_manager: self.provider.name().to_string(),
            events: Some(EventSubject::new(
                self.client.clone(),
                "pontoon-conformance",
                subject,
            )),
            journal: Some(self.journal.clone()),
            bridges: self.bridges.clone(),
            notes: Some(MountNotes {
                notes: self.notes.clone(),
                mount: self.mount.uid.clone(),
            }),
        }
    }

    pub(super) fn record(&mut self, name: impl Into<String>, result: Result<(), String>) -> bool {
        let check = Check {
            name: format!("{}{}", self.kind.label(), name.into()),
            result,
            skipped: None,
        };
        (self.report)(&check);
        let ok = check.result.is_ok();
        self.checks.push(check);
        ok
    }

    /// Records `names` as not run, because `because` failed.
    pub(super) fn skip(&mut self, names: &[&str], because: &str) {
        let why = format!("`{}{because}` failed", self.kind.label());
        self.skip_for(names, &why);
    }

    /// Records `names` as not run, for the reason `why`.
    pub(super) fn skip_for(&mut self, names: &[&str], why: &str) {
        for name in names {
            let check = Check {
                name: format!("{}{name}", self.kind.label()),
                result: Ok(()),
                skipped: Some(why.to_string()),
            };
            (self.report)(&check);
            self.checks.push(check);
        }
    }

    /// Every round, in order: the checks of `validate` that need no
    /// target, then a round per kind of target.
    pub(super) async fn all(&mut self) -> anyhow::Result<()> {
        self.check_validate_rejects().await;
        let first = self.mount.clone();
        let mut declined = Vec::new();
        for kind in TargetKind::ALL {
            self.kind = kind;
            if let Some(kinds) = &self.kinds
                && !kinds.contains(&kind)
            {
                let why = format!("{} targets not selected (--kinds)", kind.kind());
                let names = checks_between(kind, VALIDATE_ACCEPTS, None);
                self.skip_for(&names, &why);
                continue;
            }
            if kind != TargetKind::Deployment {
                self.mount.name = format!("conformance-{}", kind.name());
                self.mount.uid = format!("{}-{}", first.uid, kind.name());
                // A mount's restore ConfigMap is its own, by its uid.
                self.mount.settings.restore_config_map =
                    crate::bridge_mount::settings::restore_config_map(&self.mount.uid);
                self.mount.target = kind.target();
            }
            self.journal = Arc::default();
            let outcome = self.round().await;
            self.mount = first.clone();
            self.kind = TargetKind::Deployment;
            if let Served::Declined(why) = outcome? {
                declined.push(why);
            }
        }
        let asked = TargetKind::ALL
            .iter()
            .filter(|k| self.kinds.as_ref().is_none_or(|kinds| kinds.contains(k)))
            .count();
        if declined.len() == asked {
            self.record(
                "the provider serves at least one kind of target",
                Err(format!(
                    "validate declined every kind checked: {}",
                    declined.join("; ")
                )),
            );
        }
        Ok(())
    }

    /// One round against a target of the run's kind, every check of it.
    async fn round(&mut self) -> anyhow::Result<Served> {
        let kind = self.kind;
        let ns = self.mount.target_namespace.clone();
        kind.create(&self.client, &ns).await?;
        self.wait_target_ready().await?;
        let template = kind
            .template(&self.client, &ns)
            .await
            .map_err(anyhow::Error::msg)?;
        let original = match kind {
            TargetKind::Deployment => {
                let deployments: Api<Deployment> = Api::namespaced(self.client.clone(), &ns);
                Some(TargetShape::of(&deployments.get(kind.name()).await?))
            }
            _ => None,
        };
        if let Some(why) = self.check_validate_accepts().await {
            let names = checks_between(kind, VALIDATE_ACCEPTS, None);
            self.skip_for(
                &names,
                &format!("the provider does not serve this kind: {why}"),
            );
            kind.delete(&self.client, &ns).await?;
            return Ok(Served::Declined(why));
        }
        self.check_target_exists().await;
        let not_yet = self.provider.prepared(self.access(), &self.mount).await;
        self.record(PREPARED_BEFORE, expect_bool(not_yet, false));

        let before = self.snapshot().await?;
        let prepared = self.drive("prepare").await;
        if self.record(PREPARE_COMPLETES, prepared) {
            self.prepared_steps(kind).await?;
        } else {
            let names = checks_between(kind, PREPARE_TWICE, Some(UNINSTALL_COMPLETES));
            self.skip(&names, PREPARE_COMPLETES);
        }
        self.uninstall_steps(&before, original.as_ref(), &template)
            .await?;
        self.check_target_gone().await?;
        Ok(Served::Yes)
    }

    /// From a completed prepare up to uninstall.
    async fn prepared_steps(&mut self, kind: TargetKind) -> anyhow::Result<()> {
        if kind == TargetKind::Deployment {
            let after_first = self.snapshot().await?;
            let again = self.drive("prepare").await;
            let after_second = self.snapshot().await?;
            self.record(
                PREPARE_TWICE,
                again.and_then(|()| same(&after_first, &after_second)),
            );
        }
        let became_prepared = self.wait_prepared().await;
        self.record(PREPARED_BECOMES, became_prepared);
        let early = self.ready_before_install().await;
        self.record(READY_BEFORE, early);

        let activity = self.journal.activity();
        let installed = self.drive("install").await;
        let install_did_work = self.journal.activity() > activity;
        if !self.record(INSTALL_COMPLETES, installed) {
            let names = checks_between(kind, INSTALL_TWICE, Some(UNINSTALL_COMPLETES));
            self.skip(&names, INSTALL_COMPLETES);
            return Ok(());
        }
        if kind == TargetKind::Deployment {
            let first = self.snapshot().await?;
            let again = self.drive("install").await;
            let second = self.snapshot().await?;
            self.record(INSTALL_TWICE, again.and_then(|()| same(&first, &second)));
        }
        let all_ready = self.wait_all_ready().await;
        if self.record(READY_AFTER_INSTALL, all_ready) {
            let earned = if install_did_work {
                Ok(())
            } else {
                Err(
                    "install wrote nothing and ran nothing on the cluster, yet ready reports \
                     every condition true: ready must report what install did"
                        .to_string(),
                )
            };
            self.record(READY_EARNED, earned);
        } else {
            self.skip(&[READY_EARNED], READY_AFTER_INSTALL);
        }
        if kind == TargetKind::Deployment {
            let read_back = self.read_back.clone();
            self.bridge_steps(read_back.as_ref()).await;
        }
        Ok(())
    }

    /// Uninstall and what it must leave, then (for a Deployment) uninstall
    /// again and an interrupted install.
    async fn uninstall_steps(
        &mut self,
        before: &Snapshot,
        original: Option<&TargetShape>,
        template: &serde_json::Value,
    ) -> anyhow::Result<()> {
        let uninstalled = self.drive("uninstall").await;
        let completed = self.record(UNINSTALL_COMPLETES, uninstalled);
        // What is left is reported whether or not uninstall said it was done.
        let after = self.snapshot().await?;
        self.record(LEFTOVERS, leftovers(before, &after));
        if !completed {
            let names = checks_between(self.kind, TARGET_AS_IT_WAS, Some(INTERRUPTED));
            self.skip(&names, UNINSTALL_COMPLETES);
        } else {
            if let Some(original) = original {
                let restored = self.wait_target_restored(original).await;
                self.record(TARGET_AS_IT_WAS, restored);
            }
            let exact = self.wait_restored_exactly(template).await;
            self.record(RESTORED_EXACTLY, exact);
            let put_back = self.wait_written_put_back().await;
            self.record(PUT_BACK, put_back);
            let not_ready = self.wait_not_ready().await;
            self.record(NOT_READY_AFTER, not_ready);
            if original.is_some() {
                let again = self.drive("uninstall").await;
                self.record(UNINSTALL_TWICE, again);
            }
        }
        if original.is_some() {
            let interrupted = self.interrupted_install(before, template).await;
            self.record(INTERRUPTED, interrupted);
        }
        Ok(())
    }

    /// `validate` of the round's well-formed mount; `Some(why)` when the
    /// provider declines the round's kind of target (and may: `--kinds`
    /// did not ask for it).
    async fn check_validate_accepts(&mut self) -> Option<String> {
        let outcome = self
            .provider
            .validate(Some(self.access()), &self.mount)
            .await;
        let declined = match &outcome {
            Err(err) => match err.provider_error() {
                Some(ProviderError::InvalidInput(message)) if self.kind.named_in(message) => {
                    Some(message.clone())
                }
                _ => None,
            },
            Ok(()) => None,
        };
        match declined {
            Some(why) if self.kinds.is_none() => Some(why),
            Some(why) => {
                let asked = format!(
                    "declined {} targets, which --kinds asks to check: {why}",
                    self.kind.kind()
                );
                self.record(VALIDATE_ACCEPTS, Err(asked));
                None
            }
            None => {
                let accepted = outcome.map_err(|e| {
                    format!(
                        "{e} (a provider that does not serve {} targets says so in an \
                         invalid-input that names the kind; its checks are then skipped)",
                        self.kind.kind()
                    )
                });
                self.record(VALIDATE_ACCEPTS, accepted);
                None
            }
        }
    }

    async fn check_target_exists(&mut self) {
        let exists = self
            .provider
            .target_exists(self.access(), &self.mount)
            .await;
        self.record(TARGET_EXISTS, expect_bool(exists, true));
    }

    /// Deletes the round's target; `target-exists` must turn false.
    async fn check_target_gone(&mut self) -> anyhow::Result<()> {
        self.kind
            .delete(&self.client, &self.mount.target_namespace)
            .await?;
        let gone = self
            .poll("target-exists", |run| async move {
                match run.provider.target_exists(run.access(), &run.mount).await {
                    Ok(exists) => Ok(!exists),
                    Err(err) => Err(err.to_string()),
                }
            })
            .await;
        self.record(TARGET_GONE, gone);
        Ok(())
    }

    /// Polls `prepared` until it is true.
    async fn wait_prepared(&self) -> Result<(), String> {
        self.poll("prepared", |run| async move {
            run.provider
                .prepared(run.access(), &run.mount)
                .await
                .map_err(|e| e.to_string())
        })
        .await
    }

    /// An operator that crashed during install: prepare, one install call
    /// (not driven to done), then uninstall driven to done must leave the
    /// target exactly as it was and nothing behind.
    async fn interrupted_install(
        &self,
        before: &Snapshot,
        template: &serde_json::Value,
    ) -> Result<(), String> {
        self.drive("prepare")
            .await
            .map_err(|e| format!("prepare: {e}"))?;
        self.wait_prepared().await?;
        match self.provider.install(self.access(), &self.mount).await {
            Ok(_)
            | Err(CallError::Provider {
                error: ProviderError::Temporary(_),
                ..
            }) => {}
            Err(err) => return Err(format!("install: {err}")),
        }
        self.drive("uninstall")
            .await
            .map_err(|e| format!("uninstall: {e}"))?;
        self.wait_restored_exactly(template).await?;
        let after = self.snapshot().await.map_err(|e| format!("{e:#}"))?;
        leftovers(before, &after)?;
        self.wait_written_put_back().await
    }

    /// `ready` before install, with prepare done: not every condition may
    /// be true yet, since nothing is installed.
    async fn ready_before_install(&self) -> Result<(), String> {
        let conditions = self
            .provider
            .ready(self.access(), &self.mount)
            .await
            .map_err(|e| e.to_string())?;
        if every_condition_true(&conditions) {
            return Err(format!(
                "every condition is true before install ({}): ready must say what is not \
                 done yet",
                condition_names(&conditions)
            ));
        }
        Ok(())
    }

    /// Polls until `prepared` is false and not every `ready` condition is
    /// true: what they report is gone.
    async fn wait_not_ready(&self) -> Result<(), String> {
        let timeout = self.timeout;
        self.until(|run| async move {
            let (access, mount) = (run.access(), &run.mount);
            let prepared = run
                .provider
                .prepared(access.clone(), mount)
                .await
                .map_err(|e| format!("prepared: {e}"))?;
            let conditions = run
                .provider
                .ready(access, mount)
                .await
                .map_err(|e| format!("ready: {e}"))?;
            let mut still = Vec::new();
            if prepared {
                still.push("prepared is true".to_string());
            }
            if every_condition_true(&conditions) {
                still.push(format!(
                    "ready reports every condition true ({})",
                    condition_names(&conditions)
                ));
            }
            Ok((!still.is_empty())
                .then(|| format!("{timeout:?} after uninstall: {}", still.join(" and "))))
        })
        .await
    }

    /// Polls until every object the journal says the provider wrote is put
    /// back; on timeout, names each object and field that is not.
    async fn wait_written_put_back(&self) -> Result<(), String> {
        let written = self.journal.written();
        let (access, timeout) = (self.access(), self.timeout);
        self.until(|_| async {
            let mut problems = Vec::new();
            for object in &written {
                let now = access
                    .host_read(&object.reference())
                    .await
                    .map_err(|e| format!("reading {}: {e}", object.describe()))?;
                problems.extend(put_back_problem(object, now.as_ref()));
            }
            Ok((!problems.is_empty()).then(|| {
                format!(
                    "after {timeout:?}, of {} object(s) written: {}",
                    written.len(),
                    problems.join(" | ")
                )
            }))
        })
        .await
    }

    /// `validate` refuses malformed mounts, whatever kinds the provider serves.
    async fn check_validate_rejects(&mut self) {
        let cases = [
            ("validate rejects an empty target", "", "app"),
            ("validate rejects an empty container", "deploy/sample", ""),
            (
                "validate rejects a malformed target (`deploy/`)",
                "deploy/",
                "app",
            ),
            (
                "validate rejects a malformed target (`deploy/a/b`)",
                "deploy/a/b",
                "app",
            ),
            (
                "validate rejects a malformed target (`frobnicator/sample`)",
                "frobnicator/sample",
                "app",
            ),
        ];
        for (name, target, container) in cases {
            let mut mount = self.mount.clone();
            mount.target = target.into();
            mount.target_container = container.into();
            let result = match self.provider.validate(Some(self.access()), &mount).await {
                Err(err)
                    if matches!(err.provider_error(), Some(ProviderError::InvalidInput(_))) =>
                {
                    Ok(())
                }
                Err(err) => Err(format!("expected invalid-input, got: {err}")),
                Ok(()) => Err(format!(
                    "accepted target `{target}` with container `{container}`"
                )),
            };
            self.record(name, result);
        }
    }
}

fn every_condition_true(conditions: &[ProviderCondition]) -> bool {
    !conditions.is_empty() && conditions.iter().all(|c| c.ready)
}

fn condition_names(conditions: &[ProviderCondition]) -> String {
    let names: Vec<&str> = conditions.iter().map(|c| c.name.as_str()).collect();
    names.join(", ")
}
