//! Status as the Gateway API defines it, built from what resolution found:
//! the GatewayClass's `Accepted`, a Gateway's `Accepted`/`Programmed`,
//! addresses and per-listener conditions, and a route's entry per parent.
//! Pure; every condition carries `observedGeneration`, and
//! `lastTransitionTime` moves exactly when a condition's status changes.

use crate::httproutes::{
    HttpRouteParentRefs, HttpRouteStatusParents, HttpRouteStatusParentsParentRef,
};
use gateway_api::{
    gateways::{
        GatewayStatus, GatewayStatusAddresses, GatewayStatusListeners,
        GatewayStatusListenersSupportedKinds,
    },
    listenersets::{ListenerSetStatus, ListenerSetStatusListeners},
};
use k8s_openapi::{
    api::core::v1::Service, apimachinery::pkg::apis::meta::v1::Condition, jiff::Timestamp,
};
use serde_json::json;

use crate::{
    data_plane::model::GATEWAY_GROUP,
    judgement::resolve::{issue::Issue, listeners::ListenerState},
    judgement::routes::ParentVerdict,
};
use pontoon_support::conditions::{Observed, merged};

/// What made the data plane (not) ready.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DataPlane {
    /// Deployment available and the Service has an address.
    Ready,
    /// Still coming up; the message says what is missing.
    Pending(String),
    /// Serving, but not at the address `spec.addresses` asks for; the
    /// message says why.
    AddressNotUsable(String),
    /// Not deployed (the Gateway is not accepted).
    Absent,
}

/// What a Gateway's status is written from.
#[derive(Clone, Debug)]
pub struct GatewayStatusUpdate<'a> {
    /// `Err` with the reason and message when the Gateway is not accepted.
    pub accepted: Result<(), (&'static str, String)>,
    /// Its merged listeners (its own first, then its ListenerSets'); its
    /// status lists its own only.
    pub states: &'a [ListenerState],
    /// Routes attached to each listener, in the same order.
    pub attached: &'a [i32],
    /// ListenerSets it takes that are Accepted.
    pub attached_listener_sets: i32,
    pub data_plane: &'a DataPlane,
    /// The data plane Service's load-balancer addresses.
    pub addresses: Vec<GatewayStatusAddresses>,
    pub generation: Option<i64>,
    pub now: Timestamp,
    /// The Gateway's own references (its backend client certificate):
    /// `None` when it has none, else whether they resolved.
    pub resolved_refs: Option<Result<(), Issue>>,
}

impl GatewayStatusUpdate<'_> {
    /// The merge patch that brings `current` up to date, or `None` when it
    /// already is (nothing is written then).
    pub fn patch(self, current: Option<&GatewayStatus>) -> Option<serde_json::Value> {
        let current = current.cloned().unwrap_or_default();
        let own = self.states.iter().take_while(|s| s.set.is_none()).count();
        let refused: Vec<&str> = self.states[..own]
            .iter()
            .filter(|s| s.accepted_condition().is_err())
            .map(|s| s.name.as_str())
            .collect();
        let mut insecure: Vec<u16> = self
            .states
            .iter()
            .filter(|s| matches!(&s.client_ca, Ok(Some(ca)) if ca.insecure_fallback))
            .map(|s| s.port)
            .collect();
        insecure.sort_unstable();
        insecure.dedup();
        let conditions = gateway_conditions(
            current.conditions.as_deref().unwrap_or_default(),
            self.accepted,
            OwnListeners {
                refused: &refused,
                insecure_ports: &insecure,
            },
            self.data_plane,
            self.resolved_refs,
            self.generation,
            self.now,
        );
        let listeners = listeners(
            current.listeners.as_deref().unwrap_or_default(),
            &self.states[..own],
            &self.attached[..own.min(self.attached.len())],
            self.data_plane,
            self.generation,
            self.now,
        );
        let unchanged = current.conditions.as_ref() == Some(&conditions)
            && current.listeners.as_ref() == Some(&listeners)
            && current.addresses.clone().unwrap_or_default() == self.addresses
            && current.attached_listener_sets.unwrap_or(0) == self.attached_listener_sets;
        if unchanged {
            return None;
        }
        let addresses = if self.addresses.is_empty() {
            serde_json::Value::Null
        } else {
            json!(self.addresses)
        };
        Some(json!({ "status": {
            "conditions": conditions,
            "listeners": listeners,
            "addresses": addresses,
            "attachedListenerSets": self.attached_listener_sets,
        } }))
    }
}

/// The Service's load-balancer addresses, as Gateway status lists them.
pub fn addresses(service: &Service) -> Vec<GatewayStatusAddresses> {
    service
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|i| match (&i.ip, &i.hostname) {
            (Some(ip), _) => Some(GatewayStatusAddresses {
                r#type: Some("IPAddress".into()),
                value: ip.clone(),
            }),
            (None, Some(host)) => Some(GatewayStatusAddresses {
                r#type: Some("Hostname".into()),
                value: host.clone(),
            }),
            _ => None,
        })
        .collect()
}

/// Listener conditions and attached route counts, in the Gateway's order.
pub fn listeners(
    previous: &[GatewayStatusListeners],
    states: &[ListenerState],
    attached: &[i32],
    data_plane: &DataPlane,
    generation: Option<i64>,
    now: Timestamp,
) -> Vec<GatewayStatusListeners> {
    states
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let mut observed = Vec::new();
            observed.push(match &s.accepted_condition() {
                Ok(()) => Observed::new("Accepted", true, "Accepted", "listener is valid"),
                Err(issue) => Observed::new("Accepted", false, issue.reason, issue.message.clone()),
            });
            observed.push(match &s.conflicted {
                None => Observed::new(
                    "Conflicted",
                    false,
                    "NoConflicts",
                    "no conflict with another listener",
                ),
                Some(issue) => {
                    Observed::new("Conflicted", true, issue.reason, issue.message.clone())
                }
            });
            observed.push(match &s.resolved_refs {
                Ok(()) => Observed::new(
                    "ResolvedRefs",
                    true,
                    "ResolvedRefs",
                    "all references resolved",
                ),
                Err(issue) => {
                    Observed::new("ResolvedRefs", false, issue.reason, issue.message.clone())
                }
            });
            observed.push(if !s.programmable() {
                // A ListenerSet's listener that lost a conflict says which
                // conflict (the ListenerSet API's reasons); a Gateway's, Invalid.
                let reason = match (&s.set, &s.conflicted) {
                    (Some(_), Some(issue)) => issue.reason,
                    _ => "Invalid",
                };
                Observed::new(
                    "Programmed",
                    false,
                    reason,
                    "the listener is not valid; see its other conditions",
                )
            } else {
                match data_plane {
                    // Served, if not at the address the Gateway asks for
                    // (which is the Gateway's condition).
                    DataPlane::Ready | DataPlane::AddressNotUsable(_) => Observed::new(
                        "Programmed",
                        true,
                        "Programmed",
                        "served by the Praxis data plane",
                    ),
                    DataPlane::Pending(why) => {
                        Observed::new("Programmed", false, "Pending", why.clone())
                    }
                    DataPlane::Absent => Observed::new(
                        "Programmed",
                        false,
                        "Invalid",
                        "the Gateway is not accepted",
                    ),
                }
            });
            let before = previous
                .iter()
                .find(|p| p.name == s.name)
                .map(|p| p.conditions.as_slice())
                .unwrap_or_default();
            GatewayStatusListeners {
                name: s.name.clone(),
                attached_routes: attached.get(i).copied().unwrap_or(0),
                conditions: merged(before, &observed, generation, now),
                supported_kinds: Some(
                    s.supported_kinds
                        .iter()
                        .map(|k| GatewayStatusListenersSupportedKinds {
                            group: Some(GATEWAY_GROUP.into()),
                            kind: k.name().to_string(),
                        })
                        .collect(),
                ),
            }
        })
        .collect()
}

/// A route's status entry for one parent reference of ours.
#[allow(clippy::too_many_arguments)]
pub fn route_parent(
    previous: Option<&HttpRouteStatusParents>,
    verdict: &ParentVerdict,
    controller_name: &str,
    programmed_rules: usize,
    refused_rules: &[crate::judgement::resolve::issue::Issue],
    unresolved: &[crate::judgement::resolve::issue::Issue],
    generation: Option<i64>,
    now: Timestamp,
) -> HttpRouteStatusParents {
    let mut observed = Vec::new();
    let accepted = match &verdict.accepted {
        Err(issue) => Observed::new("Accepted", false, issue.reason, issue.message.clone()),
        Ok(_) if programmed_rules == 0 && !refused_rules.is_empty() => {
            Observed::new("Accepted", false, "UnsupportedValue", join(refused_rules))
        }
        Ok(attachments) => Observed::new(
            "Accepted",
            true,
            "Accepted",
            format!("attached to {} listener(s)", attachments.len()),
        ),
    };
    observed.push(accepted);
    observed.push(match unresolved.first() {
        None => Observed::new(
            "ResolvedRefs",
            true,
            "ResolvedRefs",
            "all backend references resolved",
        ),
        Some(first) => Observed::new("ResolvedRefs", false, first.reason, join(unresolved)),
    });
    if programmed_rules > 0 && !refused_rules.is_empty() && verdict.accepted.is_ok() {
        observed.push(Observed::new(
            "PartiallyInvalid",
            true,
            "UnsupportedValue",
            format!("{}; the other rules are served", join(refused_rules)),
        ));
    }
    let before = previous
        .map(|p| p.conditions.as_slice())
        .unwrap_or_default();
    HttpRouteStatusParents {
        conditions: merged(before, &observed, generation, now),
        controller_name: controller_name.into(),
        parent_ref: parent_ref(&verdict.parent),
    }
}

fn join(issues: &[crate::judgement::resolve::issue::Issue]) -> String {
    issues
        .iter()
        .map(|i| i.message.as_str())
        .collect::<Vec<_>>()
        .join("; ")
}

/// A parent reference as status repeats it.
pub fn parent_ref(p: &HttpRouteParentRefs) -> HttpRouteStatusParentsParentRef {
    HttpRouteStatusParentsParentRef {
        group: p.group.clone(),
        kind: p.kind.clone(),
        name: p.name.clone(),
        namespace: p.namespace.clone(),
        port: p.port,
        section_name: p.section_name.clone(),
    }
}

/// Whether a status entry is for `p` (the same reference, defaults applied).
pub fn same_parent(
    entry: &HttpRouteStatusParentsParentRef,
    p: &HttpRouteParentRefs,
    route_namespace: &str,
) -> bool {
    let group = |g: &Option<String>| g.clone().unwrap_or_else(|| GATEWAY_GROUP.into());
    let kind = |k: &Option<String>| k.clone().unwrap_or_else(|| "Gateway".into());
    let ns = |n: &Option<String>| n.clone().unwrap_or_else(|| route_namespace.into());
    group(&entry.group) == group(&p.group)
        && kind(&entry.kind) == kind(&p.kind)
        && ns(&entry.namespace) == ns(&p.namespace)
        && entry.name == p.name
        && entry.section_name == p.section_name
        && entry.port == p.port
}

/// Where a ListenerSet stands with its Gateway.
#[derive(Clone, Debug)]
pub enum SetVerdict<'a> {
    /// Its Gateway's `allowedListeners` refuses it (reason NotAllowed), or
    /// the Gateway is not accepted (ParentNotAccepted).
    Refused(Issue),
    /// Taken: its listeners in the merged list, with their attached routes.
    Taken {
        states: Vec<&'a ListenerState>,
        attached: Vec<i32>,
    },
}

/// A ListenerSet's status: `Accepted`/`Programmed` and its listeners.
/// `Accepted` when at least one of its listeners is valid.
pub fn listener_set(
    previous: Option<&ListenerSetStatus>,
    verdict: &SetVerdict<'_>,
    data_plane: &DataPlane,
    generation: Option<i64>,
    now: Timestamp,
) -> ListenerSetStatus {
    let previous = previous.cloned().unwrap_or_default();
    let (observed, listeners) = match verdict {
        SetVerdict::Refused(issue) => (
            vec![
                Observed::new("Accepted", false, issue.reason, issue.message.clone()),
                Observed::new("Programmed", false, issue.reason, issue.message.clone()),
            ],
            Vec::new(),
        ),
        SetVerdict::Taken { states, attached } => {
            let before: Vec<GatewayStatusListeners> = previous
                .listeners
                .iter()
                .flatten()
                .filter_map(convert)
                .collect();
            let owned: Vec<ListenerState> = states.iter().map(|s| (*s).clone()).collect();
            let listeners: Vec<ListenerSetStatusListeners> =
                listeners(&before, &owned, attached, data_plane, generation, now)
                    .iter()
                    .filter_map(convert)
                    .collect();
            let observed = if !states.iter().any(|s| s.programmable()) {
                let why = "no listener of the ListenerSet is valid; see its listeners' conditions";
                vec![
                    Observed::new("Accepted", false, "ListenersNotValid", why),
                    Observed::new("Programmed", false, "ListenersNotValid", why),
                ]
            } else {
                let programmed = match data_plane {
                    DataPlane::Ready | DataPlane::AddressNotUsable(_) => Observed::new(
                        "Programmed",
                        true,
                        "Programmed",
                        "its valid listeners are served by the Gateway's Praxis data plane",
                    ),
                    DataPlane::Pending(why) => {
                        Observed::new("Programmed", false, "Pending", why.clone())
                    }
                    DataPlane::Absent => Observed::new(
                        "Programmed",
                        false,
                        "ParentNotProgrammed",
                        "the Gateway is not served",
                    ),
                };
                vec![
                    Observed::new(
                        "Accepted",
                        true,
                        "Accepted",
                        "the Gateway takes the ListenerSet",
                    ),
                    programmed,
                ]
            };
            (observed, listeners)
        }
    };
    ListenerSetStatus {
        conditions: Some(merged(
            previous.conditions.as_deref().unwrap_or_default(),
            &observed,
            generation,
            now,
        )),
        listeners: Some(listeners),
    }
}

/// Between the Gateway's and a ListenerSet's listener status (the same
/// fields under two names).
fn convert<From: serde::Serialize, To: serde::de::DeserializeOwned>(from: &From) -> Option<To> {
    serde_json::to_value(from)
        .ok()
        .and_then(|v| serde_json::from_value(v).ok())
}

/// What the Gateway's own listeners say of it as a whole.
#[derive(Clone, Copy, Debug, Default)]
pub struct OwnListeners<'a> {
    /// Its own listeners that are not accepted, by name.
    pub refused: &'a [&'a str],
    /// Ports whose client certificates are not required.
    pub insecure_ports: &'a [u16],
}

/// The Gateway's own conditions. `refused` names its own listeners that are
/// not accepted: an accepted Gateway with some says so in its reason
/// (`ListenersNotValid`, as Gateway API v1.6 asks), and serves the others.
/// `insecure_ports` are the ports whose client certificates are not
/// required (`AllowInsecureFallback`): the Gateway says so in
/// `InsecureFrontendValidationMode`, which is absent otherwise.
pub fn gateway_conditions(
    previous: &[Condition],
    accepted: Result<(), (&str, String)>,
    OwnListeners {
        refused,
        insecure_ports,
    }: OwnListeners<'_>,
    data_plane: &DataPlane,
    resolved_refs: Option<Result<(), Issue>>,
    generation: Option<i64>,
    now: Timestamp,
) -> Vec<Condition> {
    let accepted_ok = accepted.is_ok();
    let mut observed = vec![
        match accepted {
            Ok(()) if refused.is_empty() => Observed::new(
                "Accepted",
                true,
                "Accepted",
                "the Gateway is valid and served by Pontoon",
            ),
            Ok(()) => Observed::new(
                "Accepted",
                true,
                "ListenersNotValid",
                format!(
                    "listener(s) {} are not accepted (see their conditions); the others are \
                     served by Pontoon",
                    refused.join(", ")
                ),
            ),
            Err((reason, message)) => Observed::new("Accepted", false, reason, message),
        },
        match (accepted_ok, data_plane) {
            (true, DataPlane::Ready) => Observed::new(
                "Programmed",
                true,
                "Programmed",
                "the Praxis data plane is available at its address",
            ),
            (true, DataPlane::Pending(why)) => {
                let reason = if why.contains("address") {
                    "AddressNotAssigned"
                } else {
                    "Pending"
                };
                Observed::new("Programmed", false, reason, why.clone())
            }
            (true, DataPlane::AddressNotUsable(why)) => {
                Observed::new("Programmed", false, "AddressNotUsable", why.clone())
            }
            _ => Observed::new(
                "Programmed",
                false,
                "Invalid",
                "the Gateway is not accepted",
            ),
        },
    ];
    if !insecure_ports.is_empty() {
        let ports: Vec<String> = insecure_ports.iter().map(u16::to_string).collect();
        observed.push(Observed::new(
            "InsecureFrontendValidationMode",
            true,
            "ConfigurationChanged",
            format!(
                "port(s) {} let in clients without a valid certificate \
                 (AllowInsecureFallback: a certificate is asked for, and one missing or not \
                 chaining to the CA is let in; with stock Praxis, --praxis-image, one presented \
                 must still chain to it); set the mode to AllowValidOnly to require valid \
                 certificates",
                ports.join(", ")
            ),
        ));
    }
    // A reference that does not resolve leaves the Gateway accepted: its
    // backends that would need it are the ones that fail.
    observed.extend(resolved_refs.map(|r| match r {
        Ok(()) => Observed::new(
            "ResolvedRefs",
            true,
            "ResolvedRefs",
            "the backend client certificate resolved",
        ),
        Err(issue) => Observed::new("ResolvedRefs", false, issue.reason, issue.message),
    }));
    merged(previous, &observed, generation, now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judgement::resolve::{issue::Issue, listeners, view::ListView};

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    fn states() -> Vec<ListenerState> {
        let gw: gateway_api::gateways::Gateway = serde_json::from_value(serde_json::json!({
            "metadata": { "name": "gw", "namespace": "infra" },
            "spec": { "gatewayClassName": "pontoon", "listeners": [
                { "name": "http", "port": 80, "protocol": "HTTP" },
                { "name": "udp", "port": 53, "protocol": "UDP" }
            ] }
        }))
        .unwrap();
        listeners::evaluate(&gw, &ListView::default())
    }

    fn condition<'a>(conditions: &'a [Condition], type_: &str) -> &'a Condition {
        conditions.iter().find(|c| c.type_ == type_).unwrap()
    }

    #[test]
    fn insecure_client_validation_is_said_while_it_lasts() {
        let now = at("2026-01-01T00:00:00Z");
        let with = gateway_conditions(
            &[],
            Ok(()),
            OwnListeners {
                refused: &[],
                insecure_ports: &[443, 8443],
            },
            &DataPlane::Ready,
            None,
            Some(1),
            now,
        );
        let insecure = condition(&with, "InsecureFrontendValidationMode");
        assert_eq!(
            (insecure.status.as_str(), insecure.reason.as_str()),
            ("True", "ConfigurationChanged")
        );
        assert!(
            insecure.message.contains("443, 8443"),
            "{}",
            insecure.message
        );
        let after = gateway_conditions(
            &with,
            Ok(()),
            OwnListeners::default(),
            &DataPlane::Ready,
            None,
            Some(2),
            now,
        );
        assert!(
            after
                .iter()
                .all(|c| c.type_ != "InsecureFrontendValidationMode")
        );
    }

    #[test]
    fn listener_conditions_say_what_is_wrong() {
        let now = at("2026-01-01T00:00:00Z");
        let status = listeners(&[], &states(), &[2, 0], &DataPlane::Ready, Some(3), now);
        let http = &status[0].conditions;
        assert_eq!(condition(http, "Programmed").status, "True");
        assert_eq!(condition(http, "Conflicted").reason, "NoConflicts");
        assert_eq!(condition(http, "Accepted").observed_generation, Some(3));
        assert_eq!(status[0].attached_routes, 2);
        let udp = &status[1].conditions;
        assert_eq!(condition(udp, "Accepted").reason, "UnsupportedProtocol");
        assert_eq!(condition(udp, "Programmed").reason, "Invalid");
        assert!(status[1].supported_kinds.as_ref().unwrap().is_empty());
    }

    #[test]
    fn programmed_flips_with_its_transition_time() {
        let t0 = at("2026-01-01T00:00:00Z");
        let t1 = at("2026-01-01T00:00:05Z");
        let pending = listeners(
            &[],
            &states(),
            &[0, 0],
            &DataPlane::Pending("waiting".into()),
            Some(1),
            t0,
        );
        let ready = listeners(&pending, &states(), &[0, 0], &DataPlane::Ready, Some(1), t1);
        let before = condition(&pending[0].conditions, "Programmed");
        let after = condition(&ready[0].conditions, "Programmed");
        assert_eq!(before.last_transition_time.0, t0);
        assert_eq!(after.last_transition_time.0, t1);
        let accepted = condition(&ready[0].conditions, "Accepted");
        assert_eq!(
            accepted.last_transition_time.0, t0,
            "unchanged status keeps its time"
        );
    }

    #[test]
    fn a_route_with_some_rules_refused_is_partially_invalid() {
        let now = at("2026-01-01T00:00:00Z");
        let verdict = ParentVerdict {
            parent: serde_json::from_value(serde_json::json!({ "name": "gw" })).unwrap(),
            accepted: Ok(vec![]),
        };
        let refused = [Issue::new(
            "UnsupportedValue",
            "rule 1: regex paths are not supported",
        )];
        let entry = route_parent(
            None,
            &verdict,
            "pontoon.dev/gateway-controller",
            1,
            &refused,
            &[],
            Some(1),
            now,
        );
        assert_eq!(condition(&entry.conditions, "Accepted").status, "True");
        assert_eq!(
            condition(&entry.conditions, "PartiallyInvalid").status,
            "True"
        );
        let none_left = route_parent(None, &verdict, "c", 0, &refused, &[], Some(1), now);
        let accepted = condition(&none_left.conditions, "Accepted");
        assert_eq!(
            (accepted.status.as_str(), accepted.reason.as_str()),
            ("False", "UnsupportedValue")
        );
        let unresolved = [Issue::new(
            "BackendNotFound",
            "Service shop/web does not exist",
        )];
        let entry = route_parent(None, &verdict, "c", 1, &[], &unresolved, Some(1), now);
        assert_eq!(
            condition(&entry.conditions, "ResolvedRefs").reason,
            "BackendNotFound"
        );
    }

    /// Gateway `gw` accepted, one route on its HTTP listener.
    fn update<'a>(
        states: &'a [ListenerState],
        data_plane: &'a DataPlane,
        addresses: Vec<GatewayStatusAddresses>,
    ) -> GatewayStatusUpdate<'a> {
        GatewayStatusUpdate {
            accepted: Ok(()),
            attached_listener_sets: 0,
            states,
            attached: &[1, 0],
            data_plane,
            addresses,
            generation: Some(2),
            now: at("2026-01-01T00:00:00Z"),
            resolved_refs: None,
        }
    }

    #[test]
    fn a_status_as_written_is_not_written_again_and_a_new_address_is() {
        let states = states();
        let pending = DataPlane::Pending(
            "waiting for Service praxis-gw to get a load-balancer address".into(),
        );
        let first = update(&states, &pending, Vec::new()).patch(None).unwrap();
        assert_eq!(first["status"]["addresses"], serde_json::Value::Null);
        let written: GatewayStatus = serde_json::from_value(first["status"].clone()).unwrap();
        assert_eq!(
            condition(written.conditions.as_deref().unwrap(), "Programmed").reason,
            "AddressNotAssigned"
        );
        assert_eq!(
            update(&states, &pending, Vec::new()).patch(Some(&written)),
            None,
            "the same status again is not written"
        );

        let address = GatewayStatusAddresses {
            r#type: Some("IPAddress".into()),
            value: "192.0.2.10".into(),
        };
        let later = update(&states, &DataPlane::Ready, vec![address.clone()])
            .patch(Some(&written))
            .unwrap();
        assert_eq!(later["status"]["addresses"], json!([address]));
        assert_eq!(later["status"]["listeners"][0]["attachedRoutes"], 1);
    }

    #[test]
    fn an_address_not_asked_for_leaves_the_gateway_unprogrammed_and_its_listeners_served() {
        let states = states();
        let address = GatewayStatusAddresses {
            r#type: Some("IPAddress".into()),
            value: "10.97.0.12".into(),
        };
        let why = "the load balancer did not give the requested address 10.98.0.1";
        let unusable = DataPlane::AddressNotUsable(why.into());
        let patch = update(&states, &unusable, vec![address.clone()])
            .patch(None)
            .unwrap();
        let written: GatewayStatus = serde_json::from_value(patch["status"].clone()).unwrap();
        let programmed = condition(written.conditions.as_deref().unwrap(), "Programmed");
        assert_eq!(
            (programmed.status.as_str(), programmed.reason.as_str()),
            ("False", "AddressNotUsable")
        );
        assert_eq!(programmed.message, why);
        assert_eq!(patch["status"]["addresses"], json!([address]));
        let listener = &written.listeners.as_deref().unwrap()[0];
        assert_eq!(condition(&listener.conditions, "Programmed").status, "True");
    }

    #[test]
    fn load_balancer_ingresses_become_ip_and_hostname_addresses() {
        let service: Service = serde_json::from_value(json!({
            "metadata": { "name": "praxis-gw" },
            "status": { "loadBalancer": { "ingress": [
                { "ip": "192.0.2.10", "hostname": "ignored.example.com" },
                { "hostname": "lb.example.com" },
                { "ports": [] }
            ] } }
        }))
        .unwrap();
        let found = addresses(&service);
        let listed: Vec<(Option<&str>, &str)> = found
            .iter()
            .map(|a| (a.r#type.as_deref(), a.value.as_str()))
            .collect();
        assert_eq!(
            listed,
            [
                (Some("IPAddress"), "192.0.2.10"),
                (Some("Hostname"), "lb.example.com")
            ]
        );
        assert!(addresses(&Service::default()).is_empty());
    }
}
