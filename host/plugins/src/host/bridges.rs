//! The `bridges` interface: the GefyraBridges of the mount a call serves,
//! validated by the host before the call (see `bridge`).

use crate::{bindings::provider_bridges::Bridge, state::CallState};

impl crate::bindings::provider_bridges::Host for CallState {
    async fn list(&mut self) -> Vec<Bridge> {
        self.cluster
            .as_ref()
            .map(|access| access.bridges.to_vec())
            .unwrap_or_default()
    }
}
