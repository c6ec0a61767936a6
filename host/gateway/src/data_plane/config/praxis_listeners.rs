//! Gateway listeners to Praxis listeners. Praxis binds one listener per
//! address, while a Gateway may put several listeners (different hostnames)
//! on one port: those become one Praxis listener whose routes keep their
//! listener's hostname, and for HTTPS whose certificates are chosen by SNI
//! (`server_names` = the listener's hostname; the listener without a hostname
//! holds the default certificate).

use std::net::{IpAddr, SocketAddr};

use super::{
    error::ConfigError,
    praxis::{CaFile, Certificate, Tls},
};
use crate::data_plane::model::{GatewayModel, Listener, Protocol};

/// The Gateway listeners that share one port, in the Gateway's order.
pub struct PortGroup<'m> {
    pub port: u16,
    pub protocol: Protocol,
    pub listeners: Vec<&'m Listener>,
}

impl PortGroup<'_> {
    /// The Praxis listener's (and its filter chain's) name.
    pub fn name(&self) -> String {
        format!("{}-{}", self.protocol.scheme(), self.port)
    }

    pub fn address(&self, ip: IpAddr) -> String {
        SocketAddr::new(ip, self.port).to_string()
    }

    pub fn tls(&self) -> Result<Option<Tls>, ConfigError> {
        if self.protocol != Protocol::Https {
            return Ok(None);
        }
        let single = self.listeners.len() == 1;
        let mut certificates = Vec::with_capacity(self.listeners.len());
        for listener in &self.listeners {
            // A listener's further certificateRefs would need their own
            // server names (the certificates' SANs), which the model does not
            // carry: the first one serves the listener.
            let files =
                listener
                    .certificates
                    .first()
                    .ok_or_else(|| ConfigError::MissingCertificate {
                        listener: listener.name.clone(),
                    })?;
            let hostname = listener.hostname.as_deref().filter(|h| !h.is_empty());
            if let Some(h) =
                hostname.filter(|h| !single && h.starts_with("*.") && h.split('.').count() < 3)
            {
                return Err(ConfigError::ShortWildcard {
                    listener: listener.name.clone(),
                    hostname: h.to_string(),
                    port: self.port,
                });
            }
            certificates.push(Certificate {
                cert_path: files.cert_path.clone(),
                key_path: files.key_path.clone(),
                default: !single && hostname.is_none(),
                server_names: match hostname {
                    Some(h) if !single => vec![h.to_ascii_lowercase()],
                    _ => Vec::new(),
                },
            });
        }
        let validation = self
            .listeners
            .iter()
            .find_map(|l| l.client_validation.as_ref());
        Ok(Some(Tls {
            certificates,
            client_ca: validation.map(|v| CaFile {
                ca_path: v.ca_path.clone(),
            }),
            // AllowInsecureFallback: `request` asks for a certificate and
            // lets in a client without one, but refuses, in the handshake,
            // one whose certificate does not chain to the CA (Praxis 0.7.5
            // has no mode that asks and accepts any; see
            // docs/gateway-api-support.md).
            client_cert_mode: validation.map(|v| if v.required { "require" } else { "request" }),
        }))
    }
}

/// A listener's hostname as it is matched: lowercase, empty as none.
pub(super) fn host_of(listener: &Listener) -> Option<String> {
    listener
        .hostname
        .as_deref()
        .filter(|h| !h.is_empty())
        .map(str::to_ascii_lowercase)
}

/// How a port is served: TLS listeners, terminating or not, share a port
/// behind one server-name router (`passthrough.rs`).
fn port_protocol(protocol: Protocol) -> Protocol {
    match protocol {
        Protocol::TlsTerminate => Protocol::TlsPassthrough,
        other => other,
    }
}

/// Groups the model's listeners by port, ports in order of first appearance.
pub fn group(model: &GatewayModel) -> Result<Vec<PortGroup<'_>>, ConfigError> {
    let mut groups: Vec<PortGroup<'_>> = Vec::new();
    for listener in &model.listeners {
        match groups.iter_mut().find(|g| g.port == listener.port) {
            Some(group) if group.protocol != port_protocol(listener.protocol) => {
                return Err(ConfigError::PortConflict {
                    port: listener.port,
                    first: group
                        .listeners
                        .first()
                        .map(|l| l.name.clone())
                        .unwrap_or_default(),
                    second: listener.name.clone(),
                });
            }
            Some(group) => {
                // The controller leaves such listeners out as Conflicted;
                // generation still refuses them rather than hand Praxis two
                // default certificates or two routes for one host.
                let same = |l: &&&Listener| host_of(l) == host_of(listener);
                if let Some(first) = group.listeners.iter().find(same) {
                    return Err(ConfigError::HostnameConflict {
                        port: listener.port,
                        hostname: host_of(listener).unwrap_or_else(|| "(none)".into()),
                        first: first.name.clone(),
                        second: listener.name.clone(),
                    });
                }
                group.listeners.push(listener);
            }
            None => groups.push(PortGroup {
                port: listener.port,
                protocol: port_protocol(listener.protocol),
                listeners: vec![listener],
            }),
        }
    }
    Ok(groups)
}
