//! Relay ports: which port of the relay Service serves which requested
//! bridge port.
//!
//! An endpoint must stay the same from call to call (the host writes it
//! into the bridge, and Carrier2's config points at it), yet a call keeps
//! no state: the allocation is kept on the Service itself, in the
//! annotation [`ANNOTATION`] (`{"<bridge-uid>/<port>": <relay port>}`),
//! read at the start of each `connect` and written back with the ports.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use pontoon_provider_sdk::connection::PortRequest;

/// Where the allocation is kept, on the Service.
pub const ANNOTATION: &str = "pontoon.dev/relay-ports";
/// The relay ports: 1000 of them, above the relay's own 7000/7001.
pub const FIRST: u16 = 10000;
pub const LAST: u16 = 10999;
/// How many requests one client's relay can serve.
pub const CAPACITY: usize = (LAST - FIRST) as usize + 1;

/// Relay port by request key ([`key`]).
pub type Allocation = BTreeMap<String, u16>;

/// The key of one requested port: a bridge's uid, not its name, so a
/// bridge deleted and made again under the same name gets a new endpoint.
pub fn key(bridge_uid: &str, port: u16) -> String {
    format!("{bridge_uid}/{port}")
}

/// The distinct keys of `requests` (a request listed twice needs one port).
pub fn keys(requests: &[PortRequest]) -> BTreeSet<String> {
    requests
        .iter()
        .map(|r| key(&r.bridge_uid, r.port))
        .collect()
}

/// More distinct requests than a relay has ports.
#[derive(Debug, PartialEq, Eq)]
pub struct TooManyPorts {
    pub requested: usize,
}

impl fmt::Display for TooManyPorts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the client's bridges ask for {} ports; one relay serves at most {CAPACITY} \
             (ports {FIRST}-{LAST}): bridge fewer ports at once",
            self.requested
        )
    }
}

/// The allocation for `wanted`, from the `previous` one: a request still
/// wanted keeps its port, a request no longer wanted frees its port, and a
/// new request gets the smallest free port (new requests in key order, so
/// that the result does not depend on the order the host lists them in).
///
/// An entry of `previous` outside the range, or sharing its port with an
/// earlier entry (an annotation someone edited), is treated as new.
pub fn allocate(
    previous: &Allocation,
    wanted: &BTreeSet<String>,
) -> Result<Allocation, TooManyPorts> {
    if wanted.len() > CAPACITY {
        return Err(TooManyPorts {
            requested: wanted.len(),
        });
    }
    let mut allocation = Allocation::new();
    let mut taken = BTreeSet::new();
    for (key, &port) in previous {
        if wanted.contains(key) && (FIRST..=LAST).contains(&port) && taken.insert(port) {
            allocation.insert(key.clone(), port);
        }
    }
    // Walks the range once: the free ports come in order.
    let mut free = (FIRST..=LAST).filter(|port| !taken.contains(port));
    for key in wanted {
        if !allocation.contains_key(key) {
            // At most CAPACITY keys, and each taken port belongs to one of
            // them: a free port is left for every key without one.
            let port = free.next().ok_or(TooManyPorts {
                requested: wanted.len(),
            })?;
            allocation.insert(key.clone(), port);
        }
    }
    Ok(allocation)
}

/// The allocation as the annotation holds it.
pub fn to_annotation(allocation: &Allocation) -> String {
    // A map of strings to numbers always serialises.
    serde_json::to_string(allocation).unwrap_or_default()
}

/// The allocation an annotation holds; unreadable text is an error for the
/// caller to report (and start afresh from).
pub fn from_annotation(text: &str) -> Result<Allocation, serde_json::Error> {
    serde_json::from_str(text)
}

/// The Service port name of a relay port: `r10000` (port names are at
/// most 15 characters).
pub fn port_name(relay_port: u16) -> String {
    format!("r{relay_port}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wanted(keys: &[&str]) -> BTreeSet<String> {
        keys.iter().map(|k| k.to_string()).collect()
    }

    fn alloc(entries: &[(&str, u16)]) -> Allocation {
        entries.iter().map(|(k, p)| (k.to_string(), *p)).collect()
    }

    #[test]
    fn new_requests_get_the_first_ports() {
        let got = allocate(&Allocation::new(), &wanted(&["b/80", "a/80", "a/443"])).unwrap();
        assert_eq!(
            got,
            alloc(&[("a/443", 10000), ("a/80", 10001), ("b/80", 10002)])
        );
    }

    #[test]
    fn ports_stay_from_call_to_call() {
        let first = allocate(&Allocation::new(), &wanted(&["a/80", "b/80"])).unwrap();
        let again = allocate(&first, &wanted(&["a/80", "b/80"])).unwrap();
        assert_eq!(first, again);
        // A new request does not move the others, even one sorting first.
        let more = allocate(&again, &wanted(&["0/80", "a/80", "b/80"])).unwrap();
        assert_eq!(more["a/80"], first["a/80"]);
        assert_eq!(more["b/80"], first["b/80"]);
        assert_eq!(more["0/80"], 10002);
    }

    #[test]
    fn dropped_requests_free_their_ports_and_the_smallest_gap_is_filled() {
        let previous = alloc(&[("a/80", 10000), ("b/80", 10001), ("c/80", 10002)]);
        let got = allocate(&previous, &wanted(&["a/80", "c/80", "d/80"])).unwrap();
        assert_eq!(
            got,
            alloc(&[("a/80", 10000), ("c/80", 10002), ("d/80", 10001)])
        );
        assert!(
            allocate(&previous, &BTreeSet::new()).unwrap().is_empty(),
            "nothing wanted: nothing kept"
        );
    }

    #[test]
    fn edited_entries_are_allocated_afresh() {
        let previous = alloc(&[
            ("a/80", 10005),
            ("b/80", 10005),
            ("c/80", 80),
            ("d/80", 11000),
        ]);
        let got = allocate(&previous, &wanted(&["a/80", "b/80", "c/80", "d/80"])).unwrap();
        assert_eq!(got["a/80"], 10005, "the first keeps it");
        assert_eq!(got["b/80"], 10000);
        assert_eq!(got["c/80"], 10001);
        assert_eq!(got["d/80"], 10002);
    }

    #[test]
    fn a_relay_serves_up_to_a_thousand_ports() {
        let all: BTreeSet<String> = (0..CAPACITY).map(|i| key("u", i as u16)).collect();
        let full = allocate(&Allocation::new(), &all).unwrap();
        let ports: BTreeSet<u16> = full.values().copied().collect();
        assert_eq!(ports.len(), CAPACITY);
        assert_eq!(ports.first(), Some(&FIRST));
        assert_eq!(ports.last(), Some(&LAST));

        let mut too_many = all.clone();
        too_many.insert(key("v", 1));
        let err = allocate(&full, &too_many).unwrap_err();
        assert_eq!(err, TooManyPorts { requested: 1001 });
        let message = err.to_string();
        assert!(
            message.contains("1001 ports") && message.contains("at most 1000"),
            "{message}"
        );
    }

    #[test]
    fn a_full_relay_reuses_a_freed_port() {
        let all: BTreeSet<String> = (0..CAPACITY).map(|i| key("u", i as u16)).collect();
        let full = allocate(&Allocation::new(), &all).unwrap();
        let freed = full[&key("u", 7)];
        let mut next = all.clone();
        next.remove(&key("u", 7));
        next.insert(key("w", 1));
        let got = allocate(&full, &next).unwrap();
        assert_eq!(got[&key("w", 1)], freed);
    }

    #[test]
    fn the_annotation_round_trips() {
        let allocation = alloc(&[("uid-1/80", 10000), ("uid-2/8443", 10001)]);
        let text = to_annotation(&allocation);
        assert_eq!(text, r#"{"uid-1/80":10000,"uid-2/8443":10001}"#);
        assert_eq!(from_annotation(&text).unwrap(), allocation);
        assert!(from_annotation("not json").is_err());
        assert!(from_annotation(r#"{"a/80": 70000}"#).is_err(), "not a port");
    }

    #[test]
    fn keys_are_per_bridge_uid_and_port() {
        let request = |uid: &str, port| PortRequest {
            bridge_uid: uid.into(),
            bridge: "shop/web".into(),
            port,
            local_port: 8080,
        };
        let keys = keys(&[request("u1", 80), request("u1", 80), request("u2", 80)]);
        assert_eq!(keys, wanted(&["u1/80", "u2/80"]));
        assert_eq!(port_name(LAST), "r10999");
        assert!(port_name(LAST).len() <= 15);
    }
}
