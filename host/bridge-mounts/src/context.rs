//! What every reconcile of a mount shares: the client, the loaded providers,
//! the event recorder and the operator's settings.

use std::sync::Arc;

use kube::{
    Client,
    runtime::{events::Recorder, reflector::Store},
};

use super::{
    admitted::Admissions,
    crd::{GefyraBridge, GefyraBridgeMount},
    guard::Guard,
    seen_whole::SeenWhole,
    settings::MountSettings,
    uninstalled::Uninstalled,
};
use crate::bridges::Book;
use pontoon_plugins::{Discovery, Freshness, Notes, Registry, WriteTurns};

pub struct Context {
    pub client: Client,
    pub registry: Arc<Registry>,
    pub discovery: Arc<Discovery>,
    pub freshness: Arc<Freshness>,
    /// One provider write at a time to each object (the shared restore
    /// ConfigMap above all).
    pub writes: Arc<WriteTurns>,
    pub recorder: Recorder,
    pub settings: MountSettings,
    /// Every mount the controller sees (its reflector), for duplicate checks.
    pub mounts: Store<GefyraBridgeMount>,
    /// Every bridge the controller's bridge watch sees: what mounts render.
    pub bridges: Store<GefyraBridge>,
    /// What each mount's pods hold of its bridges (shared with the bridge
    /// controller).
    pub book: Arc<Book>,
    /// When each mount was last seen whole (ACTIVE's checks keep a gap).
    pub seen_whole: SeenWhole,
    /// Which mounts' deletions were uninstalled a moment ago (their
    /// cleanup, woken again before the deletion is seen, skips the call).
    pub uninstalled: Uninstalled,
    /// What providers noted for each mount between calls (the `notes` import).
    pub notes: Arc<Notes>,
    /// What the operator admitted each mount for.
    pub admissions: Arc<Admissions>,
    /// Whether the cluster judges mounts and bridges at admission.
    pub guard: Arc<Guard>,
    /// The controller sees the mounts of every namespace (no
    /// `--watch-namespace`).
    pub every_namespace: bool,
}
