//! What a provider's own tests may hand `pontoon conformance`: a reading
//! of one pod in the provider's own format (carrier2mount's reads
//! Carrier2's config), and the sample bridge it looks for. The suite judges
//! what is read; only the reading is the provider's.

use futures::future::BoxFuture;
use kube::Client;

use crate::plugins::bindings::provider_bridges::{
    Bridge, HeaderMatch, MatchType, PortRoute, RequestMatch, Rule,
};

/// The bridge the checks list: a header rule, on the sample's port.
pub const SAMPLE_BRIDGE: &str = "conformance-bridge";
/// The sample target's container port, where the sample bridge is.
pub const SAMPLE_PORT: u16 = 80;
/// A documentation address (RFC 5737): nothing is ever sent there.
pub const SAMPLE_ENDPOINT: &str = "192.0.2.10:8080";

/// The sample bridge as one pod holds it, in the provider's own format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldBridge {
    /// Where its requests go (`host:port`).
    pub endpoint: String,
    /// How many rules it has (requests match one of them).
    pub rules: usize,
}

/// A provider's own reading of one pod: whether [`SAMPLE_BRIDGE`] on
/// [`SAMPLE_PORT`] is in what the provider put there. The suite judges
/// what it reads; the format is the provider's alone.
pub trait BridgeReadBack: Send + Sync {
    /// What is read, as a failure names it (`Carrier2's /tmp/config.yaml`).
    fn what(&self) -> String;

    /// The sample bridge in `pod` (`None`: not there), or why the pod
    /// could not be read.
    fn read<'a>(
        &'a self,
        client: &'a Client,
        namespace: &'a str,
        pod: &'a str,
        container: &'a str,
    ) -> BoxFuture<'a, Result<Option<HeldBridge>, String>>;
}

pub(super) fn sample_bridge() -> Bridge {
    Bridge {
        name: SAMPLE_BRIDGE.into(),
        rules: vec![Rule {
            matches: vec![RequestMatch::Header(HeaderMatch {
                name: "x-gefyra".into(),
                value: "conformance".into(),
                match_type: MatchType::Exact,
            })],
        }],
        ports: vec![PortRoute {
            port: SAMPLE_PORT,
            endpoint: SAMPLE_ENDPOINT.into(),
        }],
    }
}

/// What is wrong with what `pod` holds of the sample bridge, if anything.
pub(super) fn held_problem(
    pod: &str,
    what: &str,
    held: Result<Option<HeldBridge>, String>,
    present: bool,
) -> Option<String> {
    let held = match held {
        Ok(held) => held,
        Err(why) => return Some(format!("pod {pod}: reading {what}: {why}")),
    };
    match (present, held) {
        (true, None) => Some(format!(
            "pod {pod}: bridge `{SAMPLE_BRIDGE}` is not on port {SAMPLE_PORT} in {what}"
        )),
        (true, Some(held)) if held.endpoint != SAMPLE_ENDPOINT => Some(format!(
            "pod {pod}: bridge `{SAMPLE_BRIDGE}` goes to {}, not {SAMPLE_ENDPOINT}",
            held.endpoint
        )),
        (true, Some(held)) if held.rules == 0 => Some(format!(
            "pod {pod}: bridge `{SAMPLE_BRIDGE}` has no rules in {what}"
        )),
        (false, Some(_)) => Some(format!(
            "pod {pod}: bridge `{SAMPLE_BRIDGE}` is still in {what}"
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(endpoint: &str, rules: usize) -> Result<Option<HeldBridge>, String> {
        Ok(Some(HeldBridge {
            endpoint: endpoint.into(),
            rules,
        }))
    }

    #[test]
    fn a_held_bridge_must_go_where_the_bridge_says_with_its_rules() {
        assert_eq!(
            held_problem("p", "cfg", held(SAMPLE_ENDPOINT, 1), true),
            None
        );
        assert_eq!(
            held_problem("p", "cfg", Ok(None), true).as_deref(),
            Some("pod p: bridge `conformance-bridge` is not on port 80 in cfg")
        );
        assert_eq!(
            held_problem("p", "cfg", held("10.0.0.1:1", 1), true).as_deref(),
            Some("pod p: bridge `conformance-bridge` goes to 10.0.0.1:1, not 192.0.2.10:8080")
        );
        assert_eq!(
            held_problem("p", "cfg", held(SAMPLE_ENDPOINT, 0), true).as_deref(),
            Some("pod p: bridge `conformance-bridge` has no rules in cfg")
        );
    }

    #[test]
    fn a_bridge_taken_out_must_be_gone_and_an_unreadable_pod_is_a_problem() {
        assert_eq!(held_problem("p", "cfg", Ok(None), false), None);
        assert_eq!(
            held_problem("p", "cfg", held(SAMPLE_ENDPOINT, 1), false).as_deref(),
            Some("pod p: bridge `conformance-bridge` is still in cfg")
        );
        assert_eq!(
            held_problem("p", "cfg", Err("exec refused".into()), false).as_deref(),
            Some("pod p: reading cfg: exec refused")
        );
    }
}
