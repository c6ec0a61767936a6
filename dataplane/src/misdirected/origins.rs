//! Who is behind each connection the front hands to Praxis. Praxis's
//! listener sees every such connection come from the pod's loopback, and a
//! filter sees only the peer's IP address, not its port: so the front dials
//! each connection from a loopback address of its own (the whole of
//! `127.0.0.0/8` is the loopback's), and this table says, for that address,
//! the client's real address and the server name its ClientHello sent.
//! An entry lives as long as its connection.

use std::{
    collections::HashMap,
    net::{IpAddr, Ipv4Addr},
    sync::{Arc, LazyLock, PoisonError, RwLock},
};

/// Connections carried at once, over every front of the process: past it a
/// new connection is closed at once, so no client can make the table (or
/// the sockets behind it) grow without bound.
pub const MAX_CONNECTIONS: usize = 65_536;

/// The addresses handed out: `127.1.0.1` to `127.255.255.254`, leaving
/// `127.0.0.0/16` (where the pod's own listeners are) alone.
const FIRST: u32 = u32::from_be_bytes([127, 1, 0, 1]);
const LAST: u32 = u32::from_be_bytes([127, 255, 255, 254]);

/// One client connection, as the front met it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Origin {
    /// The client's address.
    pub client: IpAddr,
    /// The server name of its ClientHello, lower case; `None` without one.
    pub server_name: Option<String>,
    /// Whether the front ended the connection's TLS (Praxis gets it plain).
    pub tls_ended: bool,
}

#[derive(Default)]
struct Table {
    next: u32,
    by_address: HashMap<Ipv4Addr, Arc<Origin>>,
}

static TABLE: LazyLock<RwLock<Table>> = LazyLock::new(RwLock::default);

/// A connection's loopback address, held while it is open: dropping it
/// frees the address and forgets the origin.
#[derive(Debug)]
pub struct Registration {
    address: Ipv4Addr,
}

impl Registration {
    /// The address to dial Praxis's listener from.
    pub fn address(&self) -> Ipv4Addr {
        self.address
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        TABLE
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .by_address
            .remove(&self.address);
    }
}

/// A loopback address for `origin`'s connection; `None` when
/// [`MAX_CONNECTIONS`] are open already.
pub fn register(origin: Origin) -> Option<Registration> {
    let mut table = TABLE.write().unwrap_or_else(PoisonError::into_inner);
    if table.by_address.len() >= MAX_CONNECTIONS {
        return None;
    }
    // Round the range rather than reuse the lowest free address, so an
    // address comes back only after some sixteen million others: a
    // request still in flight on a closed connection never meets another
    // client's origin.
    loop {
        let candidate = if (FIRST..=LAST).contains(&table.next) {
            table.next
        } else {
            FIRST
        };
        table.next = candidate + 1;
        let address = Ipv4Addr::from(candidate);
        let last_octet = address.octets()[3];
        if last_octet == 0 || last_octet == 255 || table.by_address.contains_key(&address) {
            continue;
        }
        table.by_address.insert(address, Arc::new(origin));
        return Some(Registration { address });
    }
}

/// The origin of the connection Praxis sees coming from `address`, if the
/// front made it.
pub fn lookup(address: IpAddr) -> Option<Arc<Origin>> {
    let IpAddr::V4(address) = address else {
        return None;
    };
    TABLE
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .by_address
        .get(&address)
        .cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin(client: &str) -> Origin {
        Origin {
            client: client.parse().unwrap(),
            server_name: Some("example.org".into()),
            tls_ended: false,
        }
    }

    #[test]
    fn each_connection_gets_an_address_of_its_own_until_it_closes() {
        let first = register(origin("10.0.0.1")).unwrap();
        let second = register(origin("10.0.0.2")).unwrap();
        assert_ne!(first.address(), second.address());
        for registration in [&first, &second] {
            let address = registration.address();
            assert!(
                address.is_loopback() && address.octets()[1] != 0,
                "{address}"
            );
        }
        let seen = lookup(IpAddr::V4(second.address())).unwrap();
        assert_eq!(*seen, origin("10.0.0.2"));
        let address = IpAddr::V4(first.address());
        drop(first);
        assert_eq!(lookup(address), None, "a closed connection is forgotten");
        // Praxis's own loopback peers, and IPv6, were never the front's.
        assert_eq!(lookup("127.0.0.1".parse().unwrap()), None);
        assert_eq!(lookup("::1".parse().unwrap()), None);
    }
}
