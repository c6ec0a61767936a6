//! TLS from the data plane to a backend: the BackendTLSPolicy that applies
//! to a Service port, what it asks for (the server name to send and verify,
//! the CA certificates to trust), and the client certificate a Gateway
//! presents to its backends (`spec.tls.backend.clientCertificateRef`).
//!
//! A policy that cannot be kept (its CA certificates do not resolve, it asks
//! for subject alternative names stock Praxis cannot check) is never
//! weakened to plain HTTP: its backends are left out of their rules, whose
//! requests then get 5xx, as the spec requires. Subject alternative names
//! are checked by Pontoon's data plane, in a relay of its own on loopback
//! (`pontoon_backend_tls`): such a backend's endpoint becomes its relay.

use std::{cmp::Ordering, collections::BTreeMap, net::SocketAddr, sync::Arc};

use gateway_api::{
    backendtlspolicies::{
        BackendTlsPolicy, BackendTlsPolicyStatusAncestors,
        BackendTlsPolicyStatusAncestorsAncestorRef,
    },
    gateways::Gateway,
};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use super::{
    ca_bundles::{self, CaRef},
    grants::GroupKind,
    issue::Issue,
    listeners,
    view::ClusterView,
};
use crate::data_plane::{
    certificates::CertificateSecret,
    loopback::LoopbackPorts,
    model::{BackendTls, CertificateFiles, GatewayModel, Relay, RouteKind, SubjectAltName},
    program::DataPlane,
};
use pontoon_support::conditions::{Observed, merged};

pub const BACKEND_TLS_POLICY: GroupKind<'static> = GroupKind {
    group: "gateway.networking.k8s.io",
    kind: "BackendTLSPolicy",
};

/// `wellKnownCACertificates` Praxis can trust: its own system roots.
const SYSTEM: &str = "System";

/// What a policy that applies asks the data plane for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trust {
    /// Sent as SNI, and verified against the backend's certificate when
    /// there are no `subject_alt_names`.
    pub hostname: String,
    /// The CA certificates (PEM) to trust; `None`: the system's roots.
    pub ca_pem: Option<String>,
    /// The names the certificate must carry one of instead (`subjectAltNames`).
    pub subject_alt_names: Vec<SubjectAltName>,
}

/// A policy, judged: `Ok` when it can be kept, else why not, as the
/// `Accepted` reason and the `ResolvedRefs` problem (if it is one of its
/// references).
#[derive(Clone, Debug, PartialEq)]
pub struct Judged {
    pub policy: Arc<BackendTlsPolicy>,
    pub verdict: Result<Trust, Refusal>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The `Accepted: False` reason: `Conflicted`, `NoValidCACertificate`, `Invalid`.
    pub accepted_reason: &'static str,
    /// `ResolvedRefs: False` when a CA reference is the problem.
    pub unresolved: Option<Issue>,
    pub message: String,
}

/// Whether `policy` names `service`'s port `port_name` (its `sectionName`),
/// or the whole Service; `None` when it does not target the Service.
fn specificity(policy: &BackendTlsPolicy, service: &str, port_name: Option<&str>) -> Option<u8> {
    policy
        .spec
        .target_refs
        .iter()
        .filter(|t| t.group.is_empty() && t.kind == "Service" && t.name == service)
        .filter_map(|t| match t.section_name.as_deref() {
            None => Some(0),
            Some(section) if Some(section) == port_name => Some(1),
            Some(_) => None,
        })
        .max()
}

/// Older first, then by name: the spec's order among conflicting policies.
fn precedence(a: &BackendTlsPolicy, b: &BackendTlsPolicy) -> Ordering {
    let created = |p: &BackendTlsPolicy| p.metadata.creation_timestamp.clone().map(|t| t.0);
    created(a)
        .cmp(&created(b))
        .then_with(|| a.name_any().cmp(&b.name_any()))
}

/// The policy that applies to a Service port: the one naming the port
/// (`sectionName`) over one naming the whole Service, the oldest among equals.
pub fn applying(
    policies: &[Arc<BackendTlsPolicy>],
    service: &str,
    port_name: Option<&str>,
) -> Option<Arc<BackendTlsPolicy>> {
    policies
        .iter()
        .filter_map(|p| Some((specificity(p, service, port_name)?, p)))
        .min_by(|(sa, a), (sb, b)| sb.cmp(sa).then_with(|| precedence(a, b)))
        .map(|(_, p)| Arc::clone(p))
}

/// The policy, if any, that wins every target `policy` shares with an
/// older one (same Service, same `sectionName` or both none): `policy` is
/// then `Conflicted`.
pub fn conflicting_with(
    policy: &BackendTlsPolicy,
    policies: &[Arc<BackendTlsPolicy>],
) -> Option<Arc<BackendTlsPolicy>> {
    let targets: Vec<_> = policy
        .spec
        .target_refs
        .iter()
        .filter(|t| t.group.is_empty() && t.kind == "Service")
        .collect();
    policies
        .iter()
        .filter(|other| {
            other.metadata.uid != policy.metadata.uid || other.name_any() != policy.name_any()
        })
        .filter(|other| precedence(other, policy) == Ordering::Less)
        .find(|other| {
            other.spec.target_refs.iter().any(|o| {
                targets.iter().any(|t| {
                    o.group == t.group
                        && o.kind == t.kind
                        && o.name == t.name
                        && o.section_name == t.section_name
                })
            })
        })
        .cloned()
}

/// Judges a policy: the CA certificates it names (ConfigMaps of its own
/// namespace, key `ca.crt`) or the system's, its hostname, and what Praxis
/// cannot check.
pub fn judge(
    policy: &Arc<BackendTlsPolicy>,
    policies: &[Arc<BackendTlsPolicy>],
    view: &dyn ClusterView,
    plane: DataPlane,
) -> Judged {
    let verdict = verdict(policy, policies, view, plane);
    Judged {
        policy: Arc::clone(policy),
        verdict,
    }
}

fn verdict(
    policy: &BackendTlsPolicy,
    policies: &[Arc<BackendTlsPolicy>],
    view: &dyn ClusterView,
    plane: DataPlane,
) -> Result<Trust, Refusal> {
    if let Some(winner) = conflicting_with(policy, policies) {
        return Err(Refusal {
            accepted_reason: "Conflicted",
            unresolved: None,
            message: format!(
                "BackendTLSPolicy {} is older (or first by name) and targets the same Service \
                 port; it applies instead",
                winner.name_any()
            ),
        });
    }
    let validation = &policy.spec.validation;
    let namespace = policy.namespace().unwrap_or_default();
    let refs: Vec<CaRef> = validation
        .ca_certificate_refs
        .iter()
        .flatten()
        .map(|r| CaRef {
            group: r.group.clone(),
            kind: r.kind.clone(),
            namespace: None,
            name: r.name.clone(),
        })
        .collect();
    let ca_pem = match (
        refs.is_empty(),
        validation.well_known_ca_certificates.as_deref(),
    ) {
        (false, Some(_)) => {
            return Err(invalid(
                "set either caCertificateRefs or wellKnownCACertificates, not both",
            ));
        }
        (true, Some(SYSTEM)) => None,
        (true, Some(other)) => {
            return Err(invalid(format!(
                "wellKnownCACertificates {other:?} is not supported; only {SYSTEM:?} (the data \
                 plane's system roots)"
            )));
        }
        (true, None) => {
            return Err(invalid(
                "neither caCertificateRefs nor wellKnownCACertificates is set: nothing to trust",
            ));
        }
        (false, None) => match ca_bundles::resolve(&refs, BACKEND_TLS_POLICY, &namespace, view) {
            Ok(pem) => Some(pem),
            Err(issue) => {
                let reason = match issue.reason {
                    "InvalidCACertificateKind" => "InvalidKind",
                    other => other,
                };
                let message = issue.message.clone();
                return Err(Refusal {
                    accepted_reason: "NoValidCACertificate",
                    unresolved: Some(Issue::new(reason, message.clone())),
                    message,
                });
            }
        },
    };
    let subject_alt_names = subject_alt_names(policy)?;
    if !subject_alt_names.is_empty()
        && let Some(why) = plane.lacks("subjectAltNames")
    {
        return Err(invalid(format!(
            "{why}: Praxis verifies a backend's certificate against the hostname (SNI) only; \
             remove subjectAltNames to have the hostname verified"
        )));
    }
    Ok(Trust {
        hostname: validation.hostname.clone(),
        ca_pem,
        subject_alt_names,
    })
}

/// The policy's `subjectAltNames`, each with the value its type names.
fn subject_alt_names(policy: &BackendTlsPolicy) -> Result<Vec<SubjectAltName>, Refusal> {
    use gateway_api::backendtlspolicies::BackendTlsPolicyValidationSubjectAltNamesType as Type;
    let mut names: Vec<SubjectAltName> = Vec::new();
    for (i, san) in policy
        .spec
        .validation
        .subject_alt_names
        .iter()
        .flatten()
        .enumerate()
    {
        let name = match (&san.r#type, &san.hostname, &san.uri) {
            (Type::Hostname, Some(hostname), _) if !hostname.is_empty() => {
                SubjectAltName::Hostname(hostname.clone())
            }
            (Type::Uri, _, Some(uri)) if !uri.is_empty() => SubjectAltName::Uri(uri.clone()),
            (Type::Hostname, ..) => {
                return Err(invalid(format!(
                    "subjectAltNames[{i}] is of type Hostname but has no hostname"
                )));
            }
            (Type::Uri, ..) => {
                return Err(invalid(format!(
                    "subjectAltNames[{i}] is of type URI but has no uri"
                )));
            }
        };
        names.push(name);
    }
    Ok(names)
}

fn invalid(message: impl Into<String>) -> Refusal {
    Refusal {
        accepted_reason: "Invalid",
        unresolved: None,
        message: message.into(),
    }
}

/// The Secret (namespace, name) a Gateway names as its backend client
/// certificate, if it names one (whatever its kind: it is read only if it
/// turns out to be a Secret).
pub fn client_certificate_ref(gateway: &Gateway) -> Option<(String, String)> {
    let r = gateway
        .spec
        .tls
        .as_ref()?
        .backend
        .as_ref()?
        .client_certificate_ref
        .as_ref()?;
    let group = r.group.as_deref().unwrap_or("");
    let kind = r.kind.as_deref().unwrap_or("Secret");
    if !group.is_empty() || kind != "Secret" {
        return None;
    }
    let namespace = r
        .namespace
        .clone()
        .unwrap_or_else(|| gateway.namespace().unwrap_or_default());
    Some((namespace, r.name.clone()))
}

/// The client certificate a Gateway presents to backends that ask for one,
/// `None` when it names none; `Err` says why the reference does not resolve
/// (the Gateway's `ResolvedRefs: False` reason: `InvalidClientCertificateRef`
/// or `RefNotPermitted`).
pub fn client_certificate(
    gateway: &Gateway,
    view: &dyn ClusterView,
) -> Option<Result<CertificateSecret, Issue>> {
    let r = gateway
        .spec
        .tls
        .as_ref()?
        .backend
        .as_ref()?
        .client_certificate_ref
        .as_ref()?;
    let gateway_namespace = gateway.namespace().unwrap_or_default();
    let secret = CertificateSecret {
        namespace: r
            .namespace
            .clone()
            .unwrap_or_else(|| gateway_namespace.clone()),
        name: r.name.clone(),
    };
    Some(
        match listeners::certificate_issue(
            &r.group,
            &r.kind,
            super::grants::GATEWAY,
            &gateway_namespace,
            &secret,
            view,
        ) {
            None => Ok(secret),
            Some(issue) => Err(match issue.reason {
                "RefNotPermitted" => issue,
                _ => Issue::new("InvalidClientCertificateRef", issue.message),
            }),
        },
    )
}

/// The file (in the Gateway's certificate Secret, mounted at
/// [`crate::data_plane::certificates::TLS_MOUNT_ROOT`]) with the CA certificates a policy trusts.
pub fn ca_file(namespace: &str, policy: &str) -> String {
    format!("backend-ca.{namespace}.{policy}.pem")
}

/// What applying the BackendTLSPolicies to one Gateway's model did.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Every policy naming a Service the Gateway's rules send to, judged:
    /// the Gateway is one of their ancestors.
    pub judged: Vec<Judged>,
    /// The CA files the kept policies need: file name -> PEM.
    pub ca_files: BTreeMap<String, String>,
}

/// Gives each backend of `model` the TLS its applying policy asks for (with
/// the Gateway's `client_certificate`), and leaves out of their rules the
/// backends whose policy cannot be kept: never plain HTTP instead.
pub fn apply(
    model: &mut GatewayModel,
    policies: &[Arc<BackendTlsPolicy>],
    client_certificate: Option<&CertificateFiles>,
    view: &dyn ClusterView,
    plane: DataPlane,
) -> Outcome {
    let mut outcome = Outcome::default();
    if policies.is_empty() {
        return outcome;
    }
    let mut judged: BTreeMap<(String, String), Judged> = BTreeMap::new();
    let mut relays = Relays::new(model);
    for listener in &mut model.listeners {
        for route in &mut listener.routes {
            if route.kind == RouteKind::Tls {
                // A passed-through stream is the client's TLS, not ours.
                continue;
            }
            let tcp = route.kind == RouteKind::Tcp;
            for rule in &mut route.rules {
                // A mirror's copies are plain HTTP: a mirror to a Service a
                // policy names would send them unprotected, so it is not
                // mirrored to at all.
                rule.filters.retain(|filter| {
                    mirror_service(filter).is_none_or(|(namespace, service)| {
                        !policies.iter().any(|p| {
                            p.namespace().as_deref() == Some(namespace)
                                && specificity_any(p, service)
                        })
                    })
                });
                rule.backends.retain_mut(|backend| {
                    let same_namespace: Vec<Arc<BackendTlsPolicy>> = policies
                        .iter()
                        .filter(|p| p.namespace().as_deref() == Some(backend.namespace.as_str()))
                        .cloned()
                        .collect();
                    for p in &same_namespace {
                        if specificity_any(p, &backend.service) {
                            judged
                                .entry((backend.namespace.clone(), p.name_any()))
                                .or_insert_with(|| judge(p, &same_namespace, view, plane));
                        }
                    }
                    let Some(policy) = applying(
                        &same_namespace,
                        &backend.service,
                        backend.port_name.as_deref(),
                    ) else {
                        return true;
                    };
                    let key = (backend.namespace.clone(), policy.name_any());
                    let Some(verdict) = judged.get(&key).map(|j| j.verdict.clone()) else {
                        return true;
                    };
                    if tcp {
                        // Praxis's TCP proxying dials its upstream in plain
                        // TCP: a stream the policy says must be TLS is not
                        // sent at all (the connection is refused).
                        return false;
                    }
                    match verdict {
                        Ok(trust) => {
                            // Sent to the Service's address, not its pods':
                            // Praxis (Pingora) pools upstream connections by
                            // address and server name, not by the CA that
                            // verified them, so a connection another policy
                            // verified could otherwise serve this one. A
                            // Service port has one applying policy, so its
                            // address has one trust (kube-proxy spreads the
                            // connections). Without ready endpoints the rule
                            // still answers 503.
                            if let (Some(address), false) =
                                (backend.service_address, backend.endpoints.is_empty())
                            {
                                backend.endpoints = vec![address];
                            }
                            let ca_path = trust.ca_pem.map(|pem| {
                                let file = ca_file(&key.0, &key.1);
                                let path = format!(
                                    "{}/{file}",
                                    crate::data_plane::certificates::TLS_MOUNT_ROOT
                                );
                                outcome.ca_files.insert(file, pem);
                                path
                            });
                            let mut tls = BackendTls {
                                sni: trust.hostname,
                                ca_path,
                                client_certificate: client_certificate.cloned(),
                                subject_alt_names: trust.subject_alt_names,
                                relays: Vec::new(),
                            };
                            if tls.relayed() {
                                // Praxis cannot check these names: relays
                                // do, and Praxis speaks to them.
                                let Some(relayed) = relays.of(&backend.endpoints, &tls) else {
                                    return false;
                                };
                                backend.endpoints = relayed.iter().map(|r| r.listen).collect();
                                tls.relays = relayed;
                            }
                            backend.tls = Some(tls);
                            true
                        }
                        Err(_) => false,
                    }
                });
            }
        }
    }
    outcome.judged = judged.into_values().collect();
    outcome
}

/// The relays one Gateway's data plane runs: one per backend address and
/// trust, each on a loopback port of its own that no listener takes.
struct Relays {
    taken: Vec<(Relay, BackendTls)>,
    ports: LoopbackPorts,
}

impl Relays {
    fn new(model: &GatewayModel) -> Self {
        let health = u16::try_from(crate::data_plane::children::ADMIN_PORT).ok();
        Self {
            taken: Vec::new(),
            ports: LoopbackPorts::new(model, health),
        }
    }

    /// A relay to each of `endpoints` with `tls`; `None` when no loopback
    /// port is left (the backend is then left out).
    fn of(&mut self, endpoints: &[SocketAddr], tls: &BackendTls) -> Option<Vec<Relay>> {
        endpoints.iter().map(|e| self.one(*e, tls)).collect()
    }

    fn one(&mut self, upstream: SocketAddr, tls: &BackendTls) -> Option<Relay> {
        if let Some((relay, _)) = self
            .taken
            .iter()
            .find(|(r, t)| r.upstream == upstream && t.trust() == tls.trust())
        {
            return Some(*relay);
        }
        let relay = Relay {
            listen: self.ports.take()?,
            upstream,
        };
        self.taken.push((relay, tls.clone()));
        Some(relay)
    }
}

/// The Service (namespace, name) a RequestMirror filter copies to.
fn mirror_service(filter: &crate::data_plane::model::TranslatedFilter) -> Option<(&str, &str)> {
    if filter.kind != super::mirrors::KIND {
        return None;
    }
    super::backends::service_of_cluster(filter.entries.first()?.get("backend")?.as_str()?)
}

/// Whether `policy` names `service` at all (any port).
fn specificity_any(policy: &BackendTlsPolicy, service: &str) -> bool {
    policy
        .spec
        .target_refs
        .iter()
        .any(|t| t.group.is_empty() && t.kind == "Service" && t.name == service)
}

/// A policy's status with this controller's entry for `gateway` set to
/// `judged` (`None`: removed, the Gateway no longer uses the policy); `None`
/// when that is what it already says. Other controllers' entries stay.
pub fn ancestors(
    policy: &BackendTlsPolicy,
    gateway: &Gateway,
    judged: Option<&Judged>,
    controller_name: &str,
    now: Timestamp,
) -> Option<Vec<BackendTlsPolicyStatusAncestors>> {
    let current = policy
        .status
        .as_ref()
        .map(|s| s.ancestors.clone())
        .unwrap_or_default();
    let gateway_namespace = gateway.namespace().unwrap_or_default();
    let gateway_name = gateway.name_any();
    let is_ours = |a: &BackendTlsPolicyStatusAncestors| {
        a.controller_name == controller_name
            && a.ancestor_ref
                .group
                .as_deref()
                .unwrap_or(crate::data_plane::model::GATEWAY_GROUP)
                == crate::data_plane::model::GATEWAY_GROUP
            && a.ancestor_ref.kind.as_deref().unwrap_or("Gateway") == "Gateway"
            && a.ancestor_ref.name == gateway_name
            && a.ancestor_ref.namespace.as_deref() == Some(gateway_namespace.as_str())
    };
    let previous = current.iter().find(|a| is_ours(a));
    let mut out: Vec<BackendTlsPolicyStatusAncestors> =
        current.iter().filter(|a| !is_ours(a)).cloned().collect();
    let Some(judged) = judged else {
        return previous.is_some().then_some(out);
    };
    let observed = match &judged.verdict {
        Ok(_) => vec![
            Observed::new(
                "Accepted",
                true,
                "Accepted",
                "the data plane speaks TLS to the backend as the policy asks",
            ),
            Observed::new(
                "ResolvedRefs",
                true,
                "ResolvedRefs",
                "the CA certificates resolved",
            ),
        ],
        Err(refusal) => vec![
            Observed::new(
                "Accepted",
                false,
                refusal.accepted_reason,
                refusal.message.clone(),
            ),
            match &refusal.unresolved {
                Some(issue) => {
                    Observed::new("ResolvedRefs", false, issue.reason, issue.message.clone())
                }
                None => Observed::new(
                    "ResolvedRefs",
                    true,
                    "ResolvedRefs",
                    "the CA certificates resolved",
                ),
            },
        ],
    };
    let conditions = merged(
        previous
            .map(|p| p.conditions.as_slice())
            .unwrap_or_default(),
        &observed,
        judged.policy.metadata.generation,
        now,
    );
    let entry = BackendTlsPolicyStatusAncestors {
        ancestor_ref: BackendTlsPolicyStatusAncestorsAncestorRef {
            group: Some(crate::data_plane::model::GATEWAY_GROUP.into()),
            kind: Some("Gateway".into()),
            name: gateway_name,
            namespace: Some(gateway_namespace),
            port: None,
            section_name: None,
        },
        conditions,
        controller_name: controller_name.into(),
    };
    if previous == Some(&entry) {
        return None;
    }
    out.push(entry);
    Some(out)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use k8s_openapi::api::core::v1::ConfigMap;
    use serde_json::json;

    use super::*;
    use crate::judgement::resolve::view::ListView;

    const CA: &str = "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUZ2VyYXJkAAAAAAAAAAAAAAAAAAAwCgYIKoZIzj0EAwIw\n-----END CERTIFICATE-----\n";

    fn policy(
        name: &str,
        created: &str,
        targets: serde_json::Value,
        validation: serde_json::Value,
    ) -> Arc<BackendTlsPolicy> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "gateway.networking.k8s.io/v1",
                "kind": "BackendTLSPolicy",
                "metadata": { "name": name, "namespace": "shop", "uid": name,
                              "creationTimestamp": created },
                "spec": { "targetRefs": targets, "validation": validation }
            }))
            .unwrap(),
        )
    }

    fn web(section: Option<&str>) -> serde_json::Value {
        match section {
            Some(s) => json!([{ "group": "", "kind": "Service", "name": "web", "sectionName": s }]),
            None => json!([{ "group": "", "kind": "Service", "name": "web" }]),
        }
    }

    fn with_ca(hostname: &str, map: &str) -> serde_json::Value {
        json!({ "hostname": hostname,
                "caCertificateRefs": [{ "group": "", "kind": "ConfigMap", "name": map }] })
    }

    fn view() -> ListView {
        let map: ConfigMap = serde_json::from_value(json!({
            "metadata": { "name": "ca", "namespace": "shop" },
            "data": { "ca.crt": CA }
        }))
        .unwrap();
        ListView {
            config_maps: vec![Arc::new(map)],
            ..Default::default()
        }
    }

    #[test]
    fn the_policy_naming_the_port_applies_over_the_whole_service_and_the_oldest_among_equals() {
        let whole = policy(
            "whole",
            "2026-01-01T00:00:00Z",
            web(None),
            with_ca("a.example.com", "ca"),
        );
        let port = policy(
            "port",
            "2026-01-03T00:00:00Z",
            web(Some("https")),
            with_ca("b.example.com", "ca"),
        );
        let newer = policy(
            "newer",
            "2026-01-04T00:00:00Z",
            web(Some("https")),
            with_ca("c.example.com", "ca"),
        );
        let all = vec![whole.clone(), newer.clone(), port.clone()];
        assert_eq!(
            applying(&all, "web", Some("https")).unwrap().name_any(),
            "port"
        );
        assert_eq!(
            applying(&all, "web", Some("http")).unwrap().name_any(),
            "whole"
        );
        assert_eq!(applying(&all, "web", None).unwrap().name_any(), "whole");
        assert!(applying(&all, "other", None).is_none());
        assert_eq!(conflicting_with(&newer, &all).unwrap().name_any(), "port");
        assert!(conflicting_with(&port, &all).is_none());
        assert!(
            conflicting_with(&whole, &all).is_none(),
            "another section is no conflict"
        );
        let judged = judge(&newer, &all, &view(), DataPlane::Pontoon);
        assert_eq!(judged.verdict.unwrap_err().accepted_reason, "Conflicted");
    }

    #[test]
    fn equal_age_goes_by_name() {
        let b = policy(
            "b",
            "2026-01-01T00:00:00Z",
            web(None),
            with_ca("b.example.com", "ca"),
        );
        let a = policy(
            "a",
            "2026-01-01T00:00:00Z",
            web(None),
            with_ca("a.example.com", "ca"),
        );
        let all = vec![b.clone(), a.clone()];
        assert_eq!(applying(&all, "web", None).unwrap().name_any(), "a");
        assert_eq!(conflicting_with(&b, &all).unwrap().name_any(), "a");
    }

    #[test]
    fn a_good_policy_trusts_its_ca_and_names_its_host() {
        let p = policy(
            "p",
            "2026-01-01T00:00:00Z",
            web(None),
            with_ca("abc.example.com", "ca"),
        );
        let trust = judge(&p, std::slice::from_ref(&p), &view(), DataPlane::Pontoon)
            .verdict
            .unwrap();
        assert_eq!(trust.hostname, "abc.example.com");
        assert_eq!(trust.ca_pem.as_deref(), Some(CA));
        let system = policy(
            "s",
            "2026-01-01T00:00:00Z",
            web(None),
            json!({ "hostname": "abc.example.com", "wellKnownCACertificates": "System" }),
        );
        assert_eq!(
            judge(
                &system,
                std::slice::from_ref(&system),
                &view(),
                DataPlane::Pontoon
            )
            .verdict
            .unwrap()
            .ca_pem,
            None
        );
    }

    fn gateway(name: &str) -> Gateway {
        serde_json::from_value(json!({
            "metadata": { "name": name, "namespace": "infra" },
            "spec": { "gatewayClassName": "c", "listeners": [] }
        }))
        .unwrap()
    }

    #[test]
    fn each_gateway_writes_its_own_ancestor_entry_and_takes_it_out() {
        let now: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let mut p = (*policy(
            "p",
            "2026-01-01T00:00:00Z",
            web(None),
            with_ca("abc.example.com", "ca"),
        ))
        .clone();
        p.metadata.generation = Some(4);
        let p = Arc::new(p);
        let judged = judge(&p, std::slice::from_ref(&p), &view(), DataPlane::Pontoon);
        let ancestors = ancestors(&p, &gateway("a"), Some(&judged), "pontoon.dev/c", now).unwrap();
        assert_eq!(ancestors.len(), 1);
        assert_eq!(ancestors[0].ancestor_ref.name, "a");
        assert_eq!(
            ancestors[0].ancestor_ref.namespace.as_deref(),
            Some("infra")
        );
        let accepted = ancestors[0]
            .conditions
            .iter()
            .find(|c| c.type_ == "Accepted")
            .unwrap();
        assert_eq!(
            (accepted.status.as_str(), accepted.observed_generation),
            ("True", Some(4))
        );
        // Written once, it is not written again; a second Gateway adds its own.
        let mut written = (*p).clone();
        written.status = Some(serde_json::from_value(json!({ "ancestors": ancestors })).unwrap());
        assert!(
            super::ancestors(&written, &gateway("a"), Some(&judged), "pontoon.dev/c", now)
                .is_none()
        );
        let both =
            super::ancestors(&written, &gateway("b"), Some(&judged), "pontoon.dev/c", now).unwrap();
        assert_eq!(both.len(), 2);
        // Another controller's entry stays when ours goes.
        let mut shared = (*p).clone();
        let mut theirs = both.clone();
        theirs[1].controller_name = "example.com/other".into();
        shared.status = Some(serde_json::from_value(json!({ "ancestors": theirs })).unwrap());
        let left = super::ancestors(&shared, &gateway("a"), None, "pontoon.dev/c", now).unwrap();
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].controller_name, "example.com/other");
        assert!(super::ancestors(&p, &gateway("a"), None, "pontoon.dev/c", now).is_none());
    }

    fn model(backends: Vec<(&str, Option<&str>)>) -> GatewayModel {
        use crate::data_plane::model::{Backend, Listener, Protocol, Route, Rule, Timeouts};
        GatewayModel {
            namespace: "infra".into(),
            name: "edge".into(),
            listeners: vec![Listener {
                name: "http".into(),
                port: 80,
                protocol: Protocol::Http,
                hostname: None,
                certificates: Vec::new(),
                client_validation: None,
                routes: vec![Route {
                    kind: RouteKind::Http,
                    namespace: "shop".into(),
                    name: "r".into(),
                    hostnames: Vec::new(),
                    rules: backends
                        .into_iter()
                        .enumerate()
                        .map(|(index, (service, port_name))| Rule {
                            index,
                            matches: Vec::new(),
                            backends: vec![Backend {
                                cluster: format!("shop/{service}:443"),
                                endpoints: vec!["10.244.0.5:8443".parse().unwrap()],
                                service_address: Some("10.96.0.10:443".parse().unwrap()),
                                namespace: "shop".into(),
                                service: service.into(),
                                port_name: port_name.map(Into::into),
                                weight: 1,
                                ..Backend::default()
                            }],
                            filters: Vec::new(),
                            timeouts: Timeouts::default(),
                        })
                        .collect(),
                }],
            }],
        }
    }

    #[test]
    fn applied_policies_give_backends_tls_and_a_policy_that_cannot_be_kept_takes_them_out() {
        let good = policy(
            "good",
            "2026-01-01T00:00:00Z",
            web(Some("https")),
            with_ca("abc.example.com", "ca"),
        );
        let broken = policy(
            "broken",
            "2026-01-01T00:00:00Z",
            json!([{ "group": "", "kind": "Service", "name": "api" }]),
            with_ca("api.example.com", "gone"),
        );
        let mut m = model(vec![
            ("web", Some("https")),
            ("api", Some("https")),
            ("plain", None),
        ]);
        // Rule 2 mirrors to `web` (a policy names it) and to `plain`.
        let mirror = |service: &str| crate::data_plane::model::TranslatedFilter {
            kind: super::super::mirrors::KIND.into(),
            module: "host".into(),
            entries: vec![
                json!({ "filter": "pontoon_mirror", "backend": format!("shop/{service}:80") }),
            ]
            .into(),
        };
        m.listeners[0].routes[0].rules[2].filters = vec![mirror("web"), mirror("plain")];
        let client = CertificateFiles {
            cert_path: "/etc/praxis-tls/infra-client.crt".into(),
            key_path: "/etc/praxis-tls/infra-client.key".into(),
        };
        let outcome = apply(
            &mut m,
            &[good, broken],
            Some(&client),
            &view(),
            DataPlane::Pontoon,
        );
        let mirrored: Vec<&serde_json::Value> = m.listeners[0].routes[0].rules[2]
            .filters
            .iter()
            .map(|f| &f.entries[0]["backend"])
            .collect();
        assert_eq!(
            mirrored,
            ["shop/plain:80"],
            "no plain-HTTP copies to a policy's Service"
        );
        // A TCPRoute's backend a policy names is not dialled in plain TCP.
        let mut tcp = model(vec![("web", Some("https")), ("plain", None)]);
        tcp.listeners[0].routes[0].kind = RouteKind::Tcp;
        let good_again = policy(
            "good",
            "2026-01-01T00:00:00Z",
            web(Some("https")),
            with_ca("abc.example.com", "ca"),
        );
        apply(&mut tcp, &[good_again], None, &view(), DataPlane::Pontoon);
        let tcp_rules = &tcp.listeners[0].routes[0].rules;
        assert!(
            tcp_rules[0].backends.is_empty(),
            "never plain TCP where TLS was asked"
        );
        assert_eq!(tcp_rules[1].backends.len(), 1);
        let rules = &m.listeners[0].routes[0].rules;
        let tls = rules[0].backends[0].tls.clone().unwrap();
        assert_eq!(tls.sni, "abc.example.com");
        assert_eq!(
            tls.ca_path.as_deref(),
            Some("/etc/praxis-tls/backend-ca.shop.good.pem")
        );
        assert_eq!(tls.client_certificate, Some(client));
        assert_eq!(
            rules[0].backends[0].endpoints,
            ["10.96.0.10:443".parse().unwrap()],
            "one trust per pooled address: the Service's"
        );
        assert_eq!(
            rules[2].backends[0].endpoints,
            ["10.244.0.5:8443".parse().unwrap()]
        );
        assert_eq!(outcome.ca_files["backend-ca.shop.good.pem"], CA);
        assert!(
            rules[1].backends.is_empty(),
            "never plain HTTP where a policy cannot be kept"
        );
        assert!(rules[2].backends[0].tls.is_none());
        let names: Vec<String> = outcome.judged.iter().map(|j| j.policy.name_any()).collect();
        assert_eq!(names, ["broken", "good"]);
    }

    #[test]
    fn what_cannot_be_kept_says_why() {
        let refusal_on = |validation, plane| {
            let p = policy("p", "2026-01-01T00:00:00Z", web(None), validation);
            judge(&p, std::slice::from_ref(&p), &view(), plane)
                .verdict
                .unwrap_err()
        };
        let refusal = |validation| refusal_on(validation, DataPlane::Pontoon);
        let missing = refusal(with_ca("abc.example.com", "gone"));
        assert_eq!(missing.accepted_reason, "NoValidCACertificate");
        assert_eq!(
            missing.unresolved.unwrap().reason,
            "InvalidCACertificateRef"
        );
        let kind = refusal(json!({ "hostname": "h",
            "caCertificateRefs": [{ "group": "", "kind": "InvalidKind", "name": "ca" }] }));
        assert_eq!(kind.accepted_reason, "NoValidCACertificate");
        assert_eq!(kind.unresolved.unwrap().reason, "InvalidKind");
        // Stock Praxis checks the SNI only: a policy naming other names
        // cannot be kept there.
        let sans = refusal_on(
            json!({ "hostname": "abc.example.com",
            "caCertificateRefs": [{ "group": "", "kind": "ConfigMap", "name": "ca" }],
            "subjectAltNames": [{ "type": "Hostname", "hostname": "abc.example.com" }] }),
            DataPlane::StockPraxis,
        );
        assert_eq!(sans.accepted_reason, "Invalid");
        assert!(
            sans.message
                .contains("subjectAltNames needs Pontoon's data plane"),
            "{}",
            sans.message
        );
        assert!(sans.unresolved.is_none());
        let empty = refusal(json!({ "hostname": "abc.example.com",
            "caCertificateRefs": [{ "group": "", "kind": "ConfigMap", "name": "ca" }],
            "subjectAltNames": [{ "type": "URI" }] }));
        assert_eq!(empty.accepted_reason, "Invalid");
        assert_eq!(
            empty.message,
            "subjectAltNames[0] is of type URI but has no uri"
        );
    }

    #[test]
    fn subject_alt_names_send_the_backend_through_a_relay_on_a_port_no_listener_takes() {
        use crate::data_plane::loopback::LOOPBACK_PORTS_FROM;
        let sans = |service: &str, names: serde_json::Value| {
            policy(
                service,
                "2026-01-01T00:00:00Z",
                json!([{ "group": "", "kind": "Service", "name": service }]),
                json!({ "hostname": "abc.example.com",
                    "caCertificateRefs": [{ "group": "", "kind": "ConfigMap", "name": "ca" }],
                    "subjectAltNames": names }),
            )
        };
        let dns = sans(
            "web",
            json!([{ "type": "Hostname", "hostname": "dce.example.com" }]),
        );
        let uri = sans(
            "api",
            json!([{ "type": "URI", "uri": "spiffe://abc.example.com/id" }]),
        );
        // Rules 0 and 2 send to `web`, rule 1 to `api`; a listener takes
        // the first relay port.
        let mut m = model(vec![("web", None), ("api", None), ("web", None)]);
        m.listeners[0].port = LOOPBACK_PORTS_FROM;
        let outcome = apply(&mut m, &[dns, uri], None, &view(), DataPlane::Pontoon);
        assert!(outcome.judged.iter().all(|j| j.verdict.is_ok()));
        let rules = &m.listeners[0].routes[0].rules;
        let relay = |port: u16| Relay {
            listen: SocketAddr::from(([127, 0, 0, 1], port)),
            upstream: "10.96.0.10:443".parse().unwrap(),
        };
        let web = rules[0].backends[0].tls.clone().unwrap();
        assert_eq!(web.sni, "abc.example.com", "the hostname is still the SNI");
        assert_eq!(
            web.subject_alt_names,
            [SubjectAltName::Hostname("dce.example.com".into())]
        );
        assert_eq!(web.relays, [relay(LOOPBACK_PORTS_FROM + 1)]);
        assert_eq!(
            rules[0].backends[0].endpoints,
            [relay(LOOPBACK_PORTS_FROM + 1).listen],
            "Praxis sends to the relay"
        );
        let api = rules[1].backends[0].tls.clone().unwrap();
        assert_eq!(api.relays, [relay(LOOPBACK_PORTS_FROM + 2)]);
        assert_eq!(
            rules[2].backends[0].tls.as_ref().unwrap().relays,
            web.relays,
            "one relay per address and trust"
        );
        // Stock Praxis: the policy is refused and its backends left out.
        let mut stock = model(vec![("web", None)]);
        let dns = sans(
            "web",
            json!([{ "type": "Hostname", "hostname": "dce.example.com" }]),
        );
        let outcome = apply(&mut stock, &[dns], None, &view(), DataPlane::StockPraxis);
        assert!(outcome.judged[0].verdict.is_err());
        assert!(stock.listeners[0].routes[0].rules[0].backends.is_empty());
    }
}
