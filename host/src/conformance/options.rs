//! What a run of `pontoon conformance` is asked to do.

use std::{sync::Arc, time::Duration};

use super::{fixtures::TargetKind, read_back::BridgeReadBack};

pub struct Options {
    pub timeout: Duration,
    pub keep_namespaces: bool,
    pub carrier_image: String,
    /// The kinds of target to check (`--kinds`); `None`: each kind the
    /// provider does not decline in `validate`.
    pub kinds: Option<Vec<TargetKind>>,
    /// A provider's own reading of its pods (carrier2mount's tests hand
    /// in Carrier2's): with one, the bridge checks also read every pod.
    pub bridge_read_back: Option<Arc<dyn BridgeReadBack>>,
}
