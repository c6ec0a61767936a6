//! Ports on the pod's loopback for the data plane's own listeners: the
//! backend TLS relays (taken while BackendTLSPolicies are applied) and the
//! TLS termination hops behind a server-name router (taken while the config
//! is written). Both take them from [`LOOPBACK_PORTS_FROM`] up, skipping
//! the Gateway's listener ports, the health port and the relays' ports.

use std::{collections::BTreeSet, net::SocketAddr};

use super::model::GatewayModel;

/// The first port the data plane's own listeners on the pod's loopback take.
pub const LOOPBACK_PORTS_FROM: u16 = 15100;

pub struct LoopbackPorts {
    busy: BTreeSet<u16>,
    next: u16,
}

impl LoopbackPorts {
    /// The ports free in `model`'s data plane, whose health port (if any)
    /// is `health`.
    pub fn new(model: &GatewayModel, health: Option<u16>) -> Self {
        let mut busy: BTreeSet<u16> = model.listeners.iter().map(|l| l.port).collect();
        busy.extend(health);
        busy.extend(
            model
                .listeners
                .iter()
                .flat_map(|l| &l.routes)
                .flat_map(|r| &r.rules)
                .flat_map(|r| &r.backends)
                .filter_map(|b| b.tls.as_ref())
                .flat_map(|t| &t.relays)
                .map(|r| r.listen.port()),
        );
        Self {
            busy,
            next: LOOPBACK_PORTS_FROM,
        }
    }

    /// The next free address, `None` when the ports ran out.
    pub fn take(&mut self) -> Option<SocketAddr> {
        while self.busy.contains(&self.next) {
            self.next = self.next.checked_add(1)?;
        }
        self.busy.insert(self.next);
        Some(SocketAddr::from(([127, 0, 0, 1], self.next)))
    }
}
