//! What every reconcile of a mount shares: the client, the loaded providers,
//! the event recorder and the operator's settings.

use std::{sync::Arc, time::Duration};

use kube::{
    Client,
    runtime::{events::Recorder, reflector::Store},
};

use super::crd::GefyraBridgeMount;
use crate::plugins::{Discovery, Registry};

/// Name of the ConfigMap (in the operator namespace) holding the original
/// container configuration of patched pods, as Gefyra names it.
pub const RESTORE_CONFIG_MAP: &str = "gefyra-carrier2-restore-configmap";

/// The operator's settings for bridge mounts.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Where the operator runs (and keeps its restore ConfigMap).
    pub operator_namespace: String,
    /// The Carrier2 image put into original pods.
    pub carrier_image: String,
    /// How long a mount whose target is gone waits for it, unless the mount says otherwise.
    pub missing_grace_period: Duration,
    /// The safety net: every mount is looked at least this often.
    pub reconcile_interval: Duration,
}

pub struct Context {
    pub client: Client,
    pub registry: Arc<Registry>,
    pub discovery: Arc<Discovery>,
    pub recorder: Recorder,
    pub settings: Settings,
    /// Every mount the controller sees (its reflector), for duplicate checks.
    pub mounts: Store<GefyraBridgeMount>,
}
