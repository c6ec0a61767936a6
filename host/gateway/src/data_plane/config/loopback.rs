//! Ports on the pod's loopback for the data plane's own hops (TLS
//! termination behind a server-name router): from
//! [`LOOPBACK_PORTS_FROM`] up, skipping the Gateway's listener ports, the
//! health port and the ports the backend TLS relays already took.

use std::{collections::BTreeSet, net::SocketAddr};

use crate::data_plane::model::{GatewayModel, LOOPBACK_PORTS_FROM};

pub struct LoopbackPorts {
    busy: BTreeSet<u16>,
    next: u16,
}

impl LoopbackPorts {
    pub fn new(model: &GatewayModel, health: Option<SocketAddr>) -> Self {
        let mut busy: BTreeSet<u16> = model.listeners.iter().map(|l| l.port).collect();
        busy.extend(health.map(|a| a.port()));
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
