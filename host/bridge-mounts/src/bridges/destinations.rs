//! Where bridges may send requests. A bridge takes the requests of a mount's
//! pods that match its rules (a catch-all rule: all of them) to the endpoint
//! it names; an administrator says which endpoints those may be
//! (`--bridge-destinations`, Helm value `bridges.allowedDestinations`):
//! networks (`10.0.0.0/8`), host names (`dev.example.com`, `*.example.com`),
//! and `cluster`, the default: the cluster's pod and Service networks and
//! its Services' names (where connection providers set up their endpoints).
//!
//! The cluster's networks are what it says of itself: the ServiceCIDRs, the
//! nodes' pod CIDRs, and, where nodes carry none (a CNI with its own address
//! management), the addresses of its pods. A Service name is allowed only
//! for a Service that exists and is not an ExternalName (which would lead
//! out of the cluster).

use std::{
    collections::HashMap,
    net::IpAddr,
    sync::Mutex,
    time::{Duration, Instant},
};

use ipnet::IpNet;
use k8s_openapi::api::{
    core::v1::{Node, Pod, Service},
    networking::v1::ServiceCIDR,
};
use kube::{Api, Client, api::ListParams};

/// One entry of the administrator's list.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Allowed {
    /// The cluster's own networks and Service names.
    Cluster,
    Network(IpNet),
    /// A host name, exactly.
    Host(String),
    /// `*.example.com`: any name ending in `.example.com`.
    Domain(String),
}

/// How long what the cluster says of its networks (and of a pod address)
/// is taken as true before it is read again.
const CLUSTER_VIEW: Duration = Duration::from_secs(30);

/// Where bridges may send requests.
#[derive(Debug)]
pub struct Destinations {
    allowed: Vec<Allowed>,
    /// The list as given, for messages.
    listed: String,
    cluster_domain: String,
    networks: Mutex<Option<(Instant, Vec<IpNet>)>>,
    pod_addresses: Mutex<HashMap<IpAddr, (Instant, bool)>>,
}

impl Default for Destinations {
    fn default() -> Self {
        Self::parse(&["cluster".to_string()], "cluster.local").unwrap_or_else(|_| Self {
            allowed: vec![Allowed::Cluster],
            listed: "cluster".into(),
            cluster_domain: "cluster.local".into(),
            networks: Mutex::default(),
            pod_addresses: Mutex::default(),
        })
    }
}

/// What an endpoint's host is.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Host<'a> {
    Address(IpAddr),
    Name(&'a str),
}

/// The host of `host:port` or `[v6]:port`.
fn host_of(endpoint: &str) -> Option<Host<'_>> {
    let (host, _) = endpoint.rsplit_once(':')?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    Some(match host.parse::<IpAddr>() {
        Ok(address) => Host::Address(address),
        Err(_) => Host::Name(host),
    })
}

impl Destinations {
    /// The administrator's list: `cluster`, networks in CIDR notation, host
    /// names and `*.`-domains. An empty list allows nothing.
    pub fn parse(list: &[String], cluster_domain: &str) -> Result<Self, String> {
        let allowed = list
            .iter()
            .map(|entry| entry.trim())
            .filter(|entry| !entry.is_empty())
            .map(|entry| {
                if entry == "cluster" {
                    return Ok(Allowed::Cluster);
                }
                if let Ok(network) = entry.parse::<IpNet>() {
                    return Ok(Allowed::Network(network.trunc()));
                }
                if let Ok(address) = entry.parse::<IpAddr>() {
                    return Ok(Allowed::Network(IpNet::from(address)));
                }
                let lower = entry.to_ascii_lowercase();
                match lower.strip_prefix("*.") {
                    Some(domain) if super::judge::dns_name(domain) => {
                        Ok(Allowed::Domain(domain.to_string()))
                    }
                    None if super::judge::dns_name(&lower) => Ok(Allowed::Host(lower)),
                    _ => Err(format!(
                        "bridge destination `{entry}` is none of `cluster`, a network \
                         (10.0.0.0/8), an address, a host name or `*.` and a domain"
                    )),
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            listed: list.join(", "),
            allowed,
            cluster_domain: cluster_domain.trim_matches('.').to_ascii_lowercase(),
            networks: Mutex::default(),
            pod_addresses: Mutex::default(),
        })
    }

    /// `Ok` when requests may go to `endpoint` (`host:port`); else why not,
    /// naming the setting.
    pub async fn check(&self, client: &Client, endpoint: &str) -> Result<(), String> {
        let Some(host) = host_of(endpoint) else {
            return Err(format!("endpoint `{endpoint}` is not `host:port`"));
        };
        if self.listed_allows(&host) {
            return Ok(());
        }
        if self.allowed.contains(&Allowed::Cluster) {
            let inside = match &host {
                Host::Address(address) => self.in_cluster_network(client, *address).await,
                Host::Name(name) => self.names_a_service(client, name).await,
            };
            match inside {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(err) => {
                    return Err(format!(
                        "endpoint `{endpoint}`: cannot tell whether it is in the cluster ({err}); \
                         looking again"
                    ));
                }
            }
        }
        Err(format!(
            "endpoint `{endpoint}` is not a destination bridges may send requests to (the \
             administrator allows: {}; `cluster` is the cluster's pod and Service networks and \
             its Services' names); send the requests there through a connection provider, or \
             ask for the destination to be allowed (--bridge-destinations, Helm value \
             bridges.allowedDestinations)",
            if self.listed.is_empty() {
                "nothing"
            } else {
                &self.listed
            }
        ))
    }

    /// Allowed by a network or host name of the list.
    fn listed_allows(&self, host: &Host<'_>) -> bool {
        self.allowed.iter().any(|allowed| match (allowed, host) {
            (Allowed::Network(network), Host::Address(address)) => network.contains(address),
            (Allowed::Host(name), Host::Name(host)) => name.eq_ignore_ascii_case(host),
            (Allowed::Domain(domain), Host::Name(host)) => {
                let host = host.to_ascii_lowercase();
                host.strip_suffix(domain.as_str())
                    .is_some_and(|rest| rest.ends_with('.') && rest.len() > 1)
            }
            _ => false,
        })
    }

    /// Whether `address` is in a Service network, a node's pod network, or
    /// (when no node has one) is a pod's.
    async fn in_cluster_network(
        &self,
        client: &Client,
        address: IpAddr,
    ) -> Result<bool, kube::Error> {
        let networks = self.networks(client).await?;
        if networks.iter().any(|n| n.contains(&address)) {
            return Ok(true);
        }
        let known = self
            .pod_addresses
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&address)
            .filter(|(at, _)| at.elapsed() < CLUSTER_VIEW)
            .map(|(_, is)| *is);
        if let Some(is) = known {
            return Ok(is);
        }
        let pods: Api<Pod> = Api::all(client.clone());
        let is = !pods
            .list_metadata(
                &ListParams::default()
                    .fields(&format!("status.podIP={address}"))
                    .limit(1),
            )
            .await?
            .items
            .is_empty();
        let mut known = self.pod_addresses.lock().unwrap_or_else(|e| e.into_inner());
        if known.len() > 4096 {
            known.clear();
        }
        known.insert(address, (Instant::now(), is));
        Ok(is)
    }

    /// The ServiceCIDRs and the nodes' pod CIDRs, read at most every
    /// [`CLUSTER_VIEW`].
    async fn networks(&self, client: &Client) -> Result<Vec<IpNet>, kube::Error> {
        if let Some((at, networks)) = &*self.networks.lock().unwrap_or_else(|e| e.into_inner())
            && at.elapsed() < CLUSTER_VIEW
        {
            return Ok(networks.clone());
        }
        let mut networks = Vec::new();
        let service_cidrs: Api<ServiceCIDR> = Api::all(client.clone());
        match service_cidrs.list(&ListParams::default()).await {
            Ok(list) => networks.extend(
                list.items
                    .iter()
                    .filter_map(|s| s.spec.as_ref()?.cidrs.clone())
                    .flatten()
                    .filter_map(|c| c.parse::<IpNet>().ok()),
            ),
            // An API server without ServiceCIDRs (before 1.33): none known.
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(err) => return Err(err),
        }
        let nodes: Api<Node> = Api::all(client.clone());
        networks.extend(
            nodes
                .list(&ListParams::default())
                .await?
                .items
                .iter()
                .filter_map(|n| n.spec.as_ref())
                .flat_map(|s| {
                    s.pod_cidrs
                        .clone()
                        .unwrap_or_default()
                        .into_iter()
                        .chain(s.pod_cidr.clone())
                })
                .filter_map(|c| c.parse::<IpNet>().ok()),
        );
        *self.networks.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((Instant::now(), networks.clone()));
        Ok(networks)
    }

    /// Whether `name` is `<service>.<namespace>.svc` (or with the cluster
    /// domain after it) of a Service that exists and stays in the cluster.
    async fn names_a_service(&self, client: &Client, name: &str) -> Result<bool, kube::Error> {
        let Some((service, namespace)) = service_of(name, &self.cluster_domain) else {
            return Ok(false);
        };
        let services: Api<Service> = Api::namespaced(client.clone(), &namespace);
        Ok(services.get_opt(&service).await?.is_some_and(|s| {
            s.spec
                .as_ref()
                .is_none_or(|spec| spec.type_.as_deref() != Some("ExternalName"))
        }))
    }
}

/// `(service, namespace)` of an in-cluster Service name.
fn service_of(name: &str, cluster_domain: &str) -> Option<(String, String)> {
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    let local = name
        .strip_suffix(&format!(".svc.{cluster_domain}"))
        .or_else(|| name.strip_suffix(".svc"))?;
    let (service, namespace) = local.split_once('.')?;
    (!service.is_empty() && !namespace.is_empty() && !namespace.contains('.'))
        .then(|| (service.to_string(), namespace.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(entries: &[&str]) -> Destinations {
        Destinations::parse(
            &entries.iter().map(|e| e.to_string()).collect::<Vec<_>>(),
            "cluster.local",
        )
        .unwrap()
    }

    #[test]
    fn networks_hosts_and_domains_allow_what_they_say() {
        let d = listed(&[
            "192.168.101.0/24",
            "fd00::/8",
            "dev.example.com",
            "*.corp.example",
        ]);
        let allows = |endpoint: &str| d.listed_allows(&host_of(endpoint).unwrap());
        assert!(allows("192.168.101.1:8080"));
        assert!(!allows("192.168.102.1:8080"));
        assert!(allows("[fd00::1]:8080"));
        assert!(allows("dev.example.com:443"));
        assert!(allows("DEV.example.com:443"));
        assert!(!allows("evil.dev.example.com:443"));
        assert!(allows("a.corp.example:80"));
        assert!(
            !allows("corp.example:80"),
            "the domain itself is not in `*.`"
        );
        assert!(!allows("acorp.example:80"));
        assert!(!allows("10.0.0.1:80"));
    }

    #[test]
    fn an_entry_that_is_none_of_the_forms_is_refused_naming_it() {
        let refused = Destinations::parse(&["10.0.0.0/33".into()], "cluster.local").unwrap_err();
        assert!(refused.contains("`10.0.0.0/33` is none of"), "{refused}");
        assert!(Destinations::parse(&["*".into()], "cluster.local").is_err());
        assert!(Destinations::parse(&["cluster".into(), "10.1.2.3".into()], "c").is_ok());
    }

    #[test]
    fn service_names_are_in_the_cluster_by_their_form() {
        assert_eq!(
            service_of(
                "stowaway-port-10001.gefyra.svc.cluster.local",
                "cluster.local"
            ),
            Some(("stowaway-port-10001".into(), "gefyra".into()))
        );
        assert_eq!(
            service_of("api.shop.svc", "cluster.local"),
            Some(("api".into(), "shop".into()))
        );
        for outside in [
            "api.shop.svc.evil.com",
            "shop.svc",
            "a.b.c.svc",
            "example.com",
            "api.shop.svc.other.local",
        ] {
            assert_eq!(service_of(outside, "cluster.local"), None, "{outside}");
        }
    }
}
