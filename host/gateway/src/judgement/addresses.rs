//! A Gateway's `spec.addresses`: what it asks of its data plane's
//! LoadBalancer Service, and whether the address the load balancer gave is
//! the one asked for. Pure.
//!
//! A LoadBalancer Service is asked for an address with `spec.loadBalancerIP`
//! (one address; the field is deprecated upstream in favour of each load
//! balancer's own annotations, but it is the one request every load balancer
//! may honour, and the ones that do not leave the address they chose, which
//! the Gateway then reports as not usable). So a Gateway may ask for one IP
//! address; an address without a value asks for none (the load balancer
//! chooses); hostnames and other types cannot be asked for.

use std::net::IpAddr;

use gateway_api::gateways::{Gateway, GatewayStatusAddresses};

const IP_ADDRESS: &str = "IPAddress";

/// The addresses a Gateway asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Requested {
    /// None: whichever address the load balancer chooses.
    Any,
    /// One IP address, which the Service asks the load balancer for.
    One(IpAddr),
    /// More than a Service can ask for: the load balancer chooses, and the
    /// Gateway is not programmed until all but one are taken out.
    Several(Vec<IpAddr>),
}

impl Requested {
    /// What the Service's `spec.loadBalancerIP` is set to.
    pub fn load_balancer_ip(&self) -> Option<String> {
        match self {
            Requested::One(ip) => Some(ip.to_string()),
            Requested::Any | Requested::Several(_) => None,
        }
    }
}

/// Why the Gateway's addresses make it unacceptable (`UnsupportedAddress`),
/// if they do: a type other than IPAddress, or a value that is no IP address.
pub fn unsupported(gateway: &Gateway) -> Option<String> {
    gateway.spec.addresses.iter().flatten().find_map(|a| {
        let value = a.value.as_deref().unwrap_or_default();
        let kind = a.r#type.as_deref().unwrap_or(IP_ADDRESS);
        if kind != IP_ADDRESS {
            return Some(format!(
                "spec.addresses: type {kind} ({value}) cannot be asked of the data plane's \
                 LoadBalancer Service, which takes an IPAddress (or leave the value out to \
                 take the address the load balancer chooses)"
            ));
        }
        (!value.is_empty() && value.parse::<IpAddr>().is_err())
            .then(|| format!("spec.addresses: {value} is not an IP address"))
    })
}

/// The IP addresses the Gateway asks for (an accepted Gateway: see
/// [`unsupported`]).
pub fn requested(gateway: &Gateway) -> Requested {
    let mut ips: Vec<IpAddr> = gateway
        .spec
        .addresses
        .iter()
        .flatten()
        .filter(|a| a.r#type.as_deref().unwrap_or(IP_ADDRESS) == IP_ADDRESS)
        .filter_map(|a| a.value.as_deref()?.parse().ok())
        .collect();
    ips.dedup();
    match ips.len() {
        0 => Requested::Any,
        1 => Requested::One(ips[0]),
        _ => Requested::Several(ips),
    }
}

/// Whether the addresses the load balancer gave (`assigned`, not empty)
/// serve the request; `Err` says why not (`AddressNotUsable`).
pub fn usable(requested: &Requested, assigned: &[GatewayStatusAddresses]) -> Result<(), String> {
    let given = || {
        assigned
            .iter()
            .map(|a| a.value.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    match requested {
        Requested::Any => Ok(()),
        Requested::One(ip) => {
            if assigned
                .iter()
                .any(|a| a.value.parse::<IpAddr>().is_ok_and(|v| v == *ip))
            {
                Ok(())
            } else {
                Err(format!(
                    "the load balancer did not give the requested address {ip} (it gave {}); \
                     it may be outside the load balancer's range or in use",
                    given()
                ))
            }
        }
        Requested::Several(ips) => Err(format!(
            "spec.addresses asks for {}: a LoadBalancer Service can be asked for one address; \
             keep one (the load balancer chose {})",
            ips.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(" and "),
            given()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn gateway(addresses: serde_json::Value) -> Gateway {
        serde_json::from_value(json!({
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "Gateway",
            "metadata": { "name": "g", "namespace": "n" },
            "spec": {
                "gatewayClassName": "pontoon",
                "addresses": addresses,
                "listeners": [{ "name": "http", "port": 80, "protocol": "HTTP" }]
            }
        }))
        .unwrap()
    }

    fn assigned(ip: &str) -> Vec<GatewayStatusAddresses> {
        vec![GatewayStatusAddresses {
            r#type: Some(IP_ADDRESS.into()),
            value: ip.into(),
        }]
    }

    #[test]
    fn hostnames_other_types_and_values_that_are_no_ip_are_not_supported() {
        let hostname = gateway(json!([{ "type": "Hostname", "value": "gw.example.com" }]));
        let message = unsupported(&hostname).unwrap();
        assert!(
            message.contains("type Hostname (gw.example.com)"),
            "{message}"
        );
        let fake = gateway(json!([
            { "type": "test/fake-invalid-type", "value": "fake" },
            { "type": "IPAddress", "value": "10.97.255.254" }
        ]));
        assert!(
            unsupported(&fake)
                .unwrap()
                .contains("test/fake-invalid-type")
        );
        let garbage = gateway(json!([{ "value": "not-an-ip" }]));
        assert_eq!(
            unsupported(&garbage).unwrap(),
            "spec.addresses: not-an-ip is not an IP address"
        );
        for fine in [
            json!([{ "type": "IPAddress", "value": "192.0.2.1" }]),
            json!([{ "type": "IPAddress" }]),
            json!([{ "value": "2001:db8::1" }]),
        ] {
            assert_eq!(unsupported(&gateway(fine.clone())), None, "{fine}");
        }
    }

    #[test]
    fn one_ip_address_is_asked_of_the_service_and_several_are_not() {
        assert_eq!(requested(&gateway(json!(null))), Requested::Any);
        assert_eq!(
            requested(&gateway(json!([{ "type": "IPAddress" }]))),
            Requested::Any
        );
        let one = requested(&gateway(json!([{ "value": "10.97.255.254" }])));
        assert_eq!(one.load_balancer_ip().as_deref(), Some("10.97.255.254"));
        let several = requested(&gateway(json!([
            { "type": "IPAddress", "value": "10.98.0.1" },
            { "type": "IPAddress", "value": "10.97.255.254" }
        ])));
        assert!(matches!(several, Requested::Several(ref ips) if ips.len() == 2));
        assert_eq!(several.load_balancer_ip(), None);
    }

    #[test]
    fn the_address_the_load_balancer_gave_is_usable_only_if_it_is_the_one_asked_for() {
        assert_eq!(usable(&Requested::Any, &assigned("10.97.0.12")), Ok(()));
        let one = Requested::One("10.97.255.254".parse().unwrap());
        assert_eq!(usable(&one, &assigned("10.97.255.254")), Ok(()));
        let why = usable(&one, &assigned("10.97.0.12")).unwrap_err();
        assert!(
            why.contains("did not give the requested address 10.97.255.254 (it gave 10.97.0.12)"),
            "{why}"
        );
        let several = requested(&gateway(json!([
            { "value": "10.98.0.1" },
            { "value": "10.97.255.254" }
        ])));
        let why = usable(&several, &assigned("10.97.0.12")).unwrap_err();
        assert!(
            why.contains("asks for 10.98.0.1 and 10.97.255.254") && why.contains("keep one"),
            "{why}"
        );
    }
}
