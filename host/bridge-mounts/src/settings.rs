//! The operator's settings for bridge mounts, as `pontoon run` takes them.

use std::time::Duration;

use super::{guard::GuardSettings, namespaces::TargetNamespaces};
use pontoon_plugins::bindings::Settings as ProviderSettings;

/// Gefyra's one ConfigMap (in the operator namespace) holding the original
/// container configuration of patched pods, which earlier versions shared
/// between every mount; carrier2mount still reads and empties it.
pub const RESTORE_CONFIG_MAP: &str = "gefyra-carrier2-restore-configmap";

/// The restore ConfigMap of one mount (in the operator namespace): its own,
/// so that no tenant's pods fill or block another's.
pub fn restore_config_map(uid: &str) -> String {
    format!("gefyra-carrier2-restore-{uid}")
}

/// The operator's settings for bridge mounts.
#[derive(Clone, Debug)]
pub struct MountSettings {
    /// Where the operator runs (and keeps its restore ConfigMap).
    pub operator_namespace: String,
    /// The Carrier2 image put into original pods.
    pub carrier_image: String,
    /// How long a mount whose target is gone waits for it, unless the mount says otherwise.
    pub missing_grace_period: Duration,
    /// The safety net: every mount is looked at least this often.
    pub reconcile_interval: Duration,
    /// Where mounts may reach (`--mount-namespaces`).
    pub target_namespaces: TargetNamespaces,
    /// Which admission policies must judge mounts and bridges, or none
    /// (`--single-tenant`).
    pub guard: GuardSettings,
    /// How many bridges a mount renders, and where they may send requests.
    pub bridges: crate::bridges::BridgeSettings,
}

impl MountSettings {
    /// The part of the settings every provider call for the mount with
    /// `uid` carries.
    pub fn for_provider(&self, uid: &str) -> ProviderSettings {
        ProviderSettings {
            operator_namespace: self.operator_namespace.clone(),
            carrier_image: self.carrier_image.clone(),
            restore_config_map: restore_config_map(uid),
        }
    }
}
