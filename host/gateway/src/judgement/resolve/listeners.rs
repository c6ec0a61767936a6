//! A Gateway's listeners as the spec judges them: supported protocols,
//! conflicts between listeners, certificate references (ReferenceGrant,
//! Secret type, PEM) and the route kinds they allow.

use std::collections::BTreeMap;

use gateway_api::gateways::{
    Gateway, GatewayListeners, GatewayListenersAllowedRoutesNamespacesFrom,
    GatewayListenersAllowedRoutesNamespacesSelector, GatewayListenersTlsMode,
};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};

use super::{
    ca_bundles,
    grants::{self, GATEWAY, GroupKind, LISTENER_SET, SECRET},
    issue::Issue,
    listener_sets::{self, SetRef},
    view::ClusterView,
};
use crate::data_plane::certificates::CertificateSecret;
use crate::data_plane::model::{GATEWAY_GROUP, Protocol, RouteKind};

/// Which namespaces may attach routes.
#[derive(Clone, Debug, PartialEq)]
pub enum AllowedNamespaces {
    Same,
    All,
    Selector(GatewayListenersAllowedRoutesNamespacesSelector),
}

/// The ports the data plane serves: those of the listeners that are
/// programmed, in their order (a port shared by listeners more than once).
pub fn served_ports(listeners: &[ListenerState]) -> Vec<u16> {
    listeners
        .iter()
        .filter(|l| l.programmable())
        .map(|l| l.port)
        .collect()
}

/// One listener, judged.
#[derive(Clone, Debug, PartialEq)]
pub struct ListenerState {
    /// The ListenerSet it comes from; `None` for the Gateway's own.
    pub set: Option<SetRef>,
    /// The namespace of the Gateway or ListenerSet that declares it: its
    /// `allowedRoutes` `Same` and its certificates' default namespace.
    pub namespace: String,
    pub name: String,
    /// `protocol` as written (`HTTP`, `TCP`, ...), for conflicts.
    pub protocol_name: String,
    pub port: u16,
    /// `None` for a protocol Pontoon does not serve.
    pub protocol: Option<Protocol>,
    pub hostname: Option<String>,
    pub allowed: AllowedNamespaces,
    /// Route kinds it takes.
    pub supported_kinds: Vec<RouteKind>,
    /// Its certificate Secrets, when all resolved.
    pub certificates: Vec<CertificateSecret>,
    /// `Err` when not accepted (unsupported protocol, conflict).
    pub accepted: Result<(), Issue>,
    /// `Some` when it conflicts with another listener.
    pub conflicted: Option<Issue>,
    /// `Err` when a reference (certificate, route kind, CA) does not resolve.
    pub resolved_refs: Result<(), Issue>,
    /// For HTTPS: the client certificates it asks for (the Gateway's
    /// `spec.tls.frontend` for its port), resolved; `Err` when they cannot
    /// be (the listener is then not Accepted, `NoValidCACertificate`, and
    /// not programmed: serving it would let in clients it must refuse).
    /// Routes still attach to it, as to a listener whose certificate is
    /// missing: the route controllers judge without the CA ConfigMaps, which
    /// only the Gateway's reconcile fetches.
    pub client_ca: Result<Option<ClientCa>, Issue>,
}

/// Client-certificate validation on a listener: the CA certificates (PEM)
/// from the ConfigMaps named, and whether clients without a valid
/// certificate are let in too.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientCa {
    pub pem: String,
    pub insecure_fallback: bool,
    /// The ConfigMaps (namespace, name) it was read from.
    pub config_maps: Vec<(String, String)>,
}

impl ListenerState {
    /// Routes may attach and it may be programmed.
    pub fn usable(&self) -> bool {
        self.accepted.is_ok() && self.conflicted.is_none()
    }

    /// It goes into the data plane's config.
    pub fn programmable(&self) -> bool {
        self.usable()
            && self.resolved_refs.is_ok()
            && self.client_ca.is_ok()
            && self.protocol.is_some()
    }

    /// Its `Accepted` condition: `Err` with why when it is not.
    pub fn accepted_condition(&self) -> Result<(), Issue> {
        self.accepted.clone()?;
        match &self.client_ca {
            Err(issue) => Err(Issue::new(
                "NoValidCACertificate",
                format!("client certificates cannot be validated: {}", issue.message),
            )),
            Ok(_) => Ok(()),
        }
    }
}

/// Who declares a listener: the Gateway or one of its ListenerSets.
struct Declarer<'a> {
    set: Option<SetRef>,
    namespace: &'a str,
    /// The kind a ReferenceGrant must name for its certificates.
    kind: GroupKind<'static>,
}

/// Judges every listener of `gateway` and then of the ListenerSets it
/// takes, in the spec's precedence order: the merged list a Gateway with
/// ListenerSets serves.
pub fn evaluate(gateway: &Gateway, view: &dyn ClusterView) -> Vec<ListenerState> {
    evaluate_with(gateway, &listener_sets::candidates(gateway, view), view)
}

/// [`evaluate`] with the ListenerSets naming `gateway` already judged
/// (`listener_sets::candidates`): a Gateway's reconcile judges them once
/// and hands them to every step that needs them.
pub fn evaluate_with(
    gateway: &Gateway,
    candidates: &[listener_sets::Candidate],
    view: &dyn ClusterView,
) -> Vec<ListenerState> {
    let namespace = gateway.metadata.namespace.clone().unwrap_or_default();
    let own = Declarer {
        set: None,
        namespace: &namespace,
        kind: GATEWAY,
    };
    let mut states: Vec<ListenerState> = gateway
        .spec
        .listeners
        .iter()
        .map(|l| one(gateway, l, &own, view))
        .collect();
    mark_conflicts(&mut states);
    for candidate in candidates {
        if candidate.allowed.is_err() {
            continue;
        }
        let set = candidate.reference();
        let declarer = Declarer {
            set: Some(set.clone()),
            namespace: &set.namespace,
            kind: LISTENER_SET,
        };
        for listener in listener_sets::listeners(&candidate.set) {
            let mut state = one(gateway, &listener, &declarer, view);
            // Unlike listeners of one Gateway, which all lose a conflict, a
            // set's listener loses to every listener before it in the
            // merged list.
            if let Some(issue) = conflict_with_earlier(&states, &state) {
                state.conflicted = Some(issue.clone());
                state.accepted = Err(issue);
            }
            states.push(state);
        }
    }
    states
}

/// Whether `state` (of a ListenerSet) conflicts with a listener before it
/// that holds its place: another protocol on its port, or the same
/// protocol, port and hostname.
fn conflict_with_earlier(earlier: &[ListenerState], state: &ListenerState) -> Option<Issue> {
    let host = |s: &ListenerState| s.hostname.clone().unwrap_or_default().to_ascii_lowercase();
    let holding = earlier
        .iter()
        .filter(|e| e.conflicted.is_none() && e.port == state.port);
    for e in holding {
        let by = match &e.set {
            None => format!("listener `{}` of the Gateway", e.name),
            Some(set) => format!("listener `{}` of ListenerSet {set}", e.name),
        };
        if !e.protocol_name.eq_ignore_ascii_case(&state.protocol_name) {
            return Some(Issue::new(
                "ProtocolConflict",
                format!(
                    "port {} is already served with {} by {by}",
                    state.port, e.protocol_name
                ),
            ));
        }
        if host(e) == host(state) {
            let shown = state.hostname.as_deref().unwrap_or("(any)");
            return Some(Issue::new(
                "HostnameConflict",
                format!(
                    "hostname {shown} on port {} is already served by {by}",
                    state.port
                ),
            ));
        }
    }
    None
}

/// The protocol a listener is served with, or why it is not.
fn protocol(listener: &GatewayListeners) -> Result<Protocol, Issue> {
    let mode = listener.tls.as_ref().and_then(|t| t.mode.as_ref());
    match (listener.protocol.as_str(), mode) {
        ("HTTP", _) => Ok(Protocol::Http),
        ("HTTPS", Some(GatewayListenersTlsMode::Passthrough)) => Err(Issue::new(
            "UnsupportedProtocol",
            "TLS passthrough is not supported on HTTPS listeners; use protocol TLS with \
             TLSRoutes",
        )),
        ("HTTPS", _) => Ok(Protocol::Https),
        ("TLS", Some(GatewayListenersTlsMode::Passthrough)) => Ok(Protocol::TlsPassthrough),
        // Terminate is the mode's default.
        ("TLS", _) => Ok(Protocol::TlsTerminate),
        ("TCP", _) => Ok(Protocol::Tcp),
        ("UDP", _) => Err(Issue::new(
            "UnsupportedProtocol",
            "protocol UDP is not supported: Praxis, Pontoon's data plane, proxies no UDP, so \
             UDPRoutes cannot be served; Pontoon serves HTTP, HTTPS, TLS and TCP listeners",
        )),
        (other, _) => Err(Issue::new(
            "UnsupportedProtocol",
            format!(
                "protocol {other} is not supported; Pontoon serves HTTP, HTTPS, TLS and TCP \
                 listeners"
            ),
        )),
    }
}

/// The route kinds a listener of `protocol` takes.
pub fn kinds_of(protocol: Protocol) -> &'static [RouteKind] {
    match protocol {
        Protocol::Http | Protocol::Https => &[RouteKind::Http, RouteKind::Grpc],
        Protocol::TlsPassthrough | Protocol::TlsTerminate => &[RouteKind::Tls],
        Protocol::Tcp => &[RouteKind::Tcp],
    }
}

fn one(
    gateway: &Gateway,
    listener: &GatewayListeners,
    declarer: &Declarer<'_>,
    view: &dyn ClusterView,
) -> ListenerState {
    let namespace = declarer.namespace;
    let port = u16::try_from(listener.port).unwrap_or(0);
    let protocol = protocol(listener);
    let allowed_routes = listener.allowed_routes.as_ref();
    let allowed = match allowed_routes
        .and_then(|a| a.namespaces.as_ref())
        .map(|n| (n.from.clone(), n.selector.clone()))
    {
        Some((Some(GatewayListenersAllowedRoutesNamespacesFrom::All), _)) => AllowedNamespaces::All,
        Some((Some(GatewayListenersAllowedRoutesNamespacesFrom::Selector), selector)) => {
            AllowedNamespaces::Selector(selector.unwrap_or_default())
        }
        _ => AllowedNamespaces::Same,
    };
    let mut state = ListenerState {
        set: declarer.set.clone(),
        namespace: namespace.to_string(),
        name: listener.name.clone(),
        protocol_name: listener.protocol.clone(),
        port,
        protocol: protocol.as_ref().ok().copied(),
        hostname: listener.hostname.clone().filter(|h| !h.is_empty()),
        allowed,
        supported_kinds: Vec::new(),
        certificates: Vec::new(),
        accepted: Ok(()),
        conflicted: None,
        resolved_refs: Ok(()),
        client_ca: Ok(None),
    };
    let protocol = match protocol {
        Ok(protocol) => protocol,
        Err(issue) => {
            state.accepted = Err(issue);
            return state;
        }
    };
    // A TCP stream carries no host name to match: the spec ignores the
    // field there, so one TCP listener takes a port whatever it names.
    if protocol == Protocol::Tcp {
        state.hostname = None;
    }
    if port == 0 {
        state.accepted = Err(Issue::new(
            "PortUnavailable",
            format!("port {} is not a TCP port", listener.port),
        ));
        return state;
    }
    // The CRD's hostname pattern admits `10.0.0.1`; the spec does not, and
    // Praxis cannot select a certificate by it.
    if let Some(ip) = state
        .hostname
        .as_deref()
        .filter(|h| h.parse::<std::net::IpAddr>().is_ok())
    {
        state.accepted = Err(Issue::new(
            "UnsupportedValue",
            format!("hostname {ip} is an IP address; a listener's hostname must be a DNS name"),
        ));
        return state;
    }

    // Route kinds: the protocol's own; anything else named is an invalid kind.
    let takes = kinds_of(protocol);
    match allowed_routes.and_then(|a| a.kinds.as_ref()) {
        None => state.supported_kinds = takes.to_vec(),
        Some(kinds) => {
            let mut invalid = Vec::new();
            for kind in kinds {
                let group = kind.group.as_deref().unwrap_or(GATEWAY_GROUP);
                match RouteKind::from_name(group, &kind.kind).filter(|k| takes.contains(k)) {
                    Some(k) if !state.supported_kinds.contains(&k) => state.supported_kinds.push(k),
                    Some(_) => {}
                    None => invalid.push(format!("{group}/{}", kind.kind)),
                }
            }
            if !invalid.is_empty() {
                let names: Vec<&str> = takes.iter().map(|k| k.name()).collect();
                state.resolved_refs = Err(Issue::new(
                    "InvalidRouteKinds",
                    format!(
                        "route kinds {} are not supported on a {} listener; it takes {}",
                        invalid.join(", "),
                        listener.protocol,
                        names.join(" and ")
                    ),
                ));
            }
        }
    }

    if matches!(protocol, Protocol::Https | Protocol::TlsTerminate) {
        let tls = listener.tls.as_ref();
        let refs = tls
            .and_then(|t| t.certificate_refs.clone())
            .unwrap_or_default();
        if refs.is_empty() {
            state.resolved_refs = Err(Issue::new(
                "InvalidCertificateRef",
                format!(
                    "a {} listener that terminates TLS needs at least one certificateRef",
                    listener.protocol
                ),
            ));
        }
        for cert in refs {
            let secret = CertificateSecret {
                namespace: cert
                    .namespace
                    .clone()
                    .unwrap_or_else(|| namespace.to_string()),
                name: cert.name.clone(),
            };
            match certificate_issue(
                &cert.group,
                &cert.kind,
                declarer.kind,
                namespace,
                &secret,
                view,
            ) {
                None => state.certificates.push(secret),
                Some(issue) => {
                    // The first problem decides the reason; RefNotPermitted wins.
                    let keep =
                        matches!(&state.resolved_refs, Err(i) if i.reason == "RefNotPermitted");
                    if !keep {
                        state.resolved_refs = Err(issue);
                    }
                }
            }
        }
        if let Some(validation) =
            ca_bundles::frontend_validation(gateway, port).filter(|_| protocol == Protocol::Https)
        {
            // The Gateway's own setting, for its ListenerSets' listeners too.
            let namespace = gateway.metadata.namespace.as_deref().unwrap_or_default();
            let config_maps = validation
                .refs
                .iter()
                .map(|r| {
                    let ns = r.namespace.clone().unwrap_or_else(|| namespace.to_string());
                    (ns, r.name.clone())
                })
                .collect();
            match ca_bundles::resolve(&validation.refs, GATEWAY, namespace, view) {
                Ok(pem) => {
                    state.client_ca = Ok(Some(ClientCa {
                        pem,
                        insecure_fallback: validation.insecure_fallback,
                        config_maps,
                    }))
                }
                Err(issue) => {
                    state.resolved_refs = Err(issue.clone());
                    state.client_ca = Err(issue);
                }
            }
        }
    }
    state
}

/// What is wrong with a certificate reference, if anything.
pub(crate) fn certificate_issue(
    group: &Option<String>,
    kind: &Option<String>,
    from: GroupKind<'static>,
    gateway_namespace: &str,
    secret: &CertificateSecret,
    view: &dyn ClusterView,
) -> Option<Issue> {
    let group = group.as_deref().unwrap_or("");
    let kind = kind.as_deref().unwrap_or("Secret");
    let label = format!("Secret {}/{}", secret.namespace, secret.name);
    if !group.is_empty() || kind != "Secret" {
        return Some(Issue::new(
            "InvalidCertificateRef",
            format!(
                "certificateRef {group}/{kind} {} is not a Secret",
                secret.name
            ),
        ));
    }
    if !grants::permitted(
        view,
        from,
        gateway_namespace,
        SECRET,
        &secret.namespace,
        &secret.name,
    ) {
        return Some(Issue::new(
            "RefNotPermitted",
            format!("{label} is in another namespace and no ReferenceGrant there allows it"),
        ));
    }
    let Some(found) = view.secret(&secret.namespace, &secret.name) else {
        return Some(Issue::new(
            "InvalidCertificateRef",
            format!("{label} does not exist"),
        ));
    };
    if found.type_.as_deref() != Some("kubernetes.io/tls") {
        return Some(Issue::new(
            "InvalidCertificateRef",
            format!(
                "{label} is of type {}, not kubernetes.io/tls",
                found.type_.as_deref().unwrap_or("Opaque")
            ),
        ));
    }
    let data = found.data.clone().unwrap_or_default();
    let (Some(cert), Some(key)) = (data.get("tls.crt"), data.get("tls.key")) else {
        return Some(Issue::new(
            "InvalidCertificateRef",
            format!("{label} lacks tls.crt or tls.key"),
        ));
    };
    let certs: Vec<_> = CertificateDer::pem_slice_iter(&cert.0).collect();
    if certs.is_empty() || certs.iter().any(|c| c.is_err()) {
        return Some(Issue::new(
            "InvalidCertificateRef",
            format!("{label}: tls.crt is not a PEM certificate"),
        ));
    }
    if PrivateKeyDer::from_pem_slice(&key.0).is_err() {
        return Some(Issue::new(
            "InvalidCertificateRef",
            format!("{label}: tls.key is not a PEM private key"),
        ));
    }
    None
}

/// Listeners on one port must agree on the protocol and differ in hostname.
fn mark_conflicts(states: &mut [ListenerState]) {
    let mut by_port: BTreeMap<u16, Vec<usize>> = BTreeMap::new();
    for (i, s) in states.iter().enumerate() {
        if s.protocol.is_some() && s.accepted.is_ok() {
            by_port.entry(s.port).or_default().push(i);
        }
    }
    for (port, group) in by_port {
        // By the protocol named: TLS listeners that pass through and that
        // terminate share a port (mixed), behind one server-name router.
        let first = states[group[0]].protocol_name.to_ascii_uppercase();
        if group
            .iter()
            .any(|&i| states[i].protocol_name.to_ascii_uppercase() != first)
        {
            for &i in &group {
                let issue = Issue::new(
                    "ProtocolConflict",
                    format!("listeners on port {port} use different protocols"),
                );
                states[i].conflicted = Some(issue.clone());
                states[i].accepted = Err(issue);
            }
            continue;
        }
        let mut by_host: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for &i in &group {
            let host = states[i]
                .hostname
                .clone()
                .unwrap_or_default()
                .to_ascii_lowercase();
            by_host.entry(host).or_default().push(i);
        }
        for (host, same) in by_host {
            if same.len() < 2 {
                continue;
            }
            let shown = if host.is_empty() {
                "(any)"
            } else {
                host.as_str()
            };
            for &i in &same {
                let issue = Issue::new(
                    "HostnameConflict",
                    format!("listeners on port {port} share the hostname {shown}"),
                );
                states[i].conflicted = Some(issue.clone());
                states[i].accepted = Err(issue);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn the_data_plane_serves_the_ports_of_programmed_listeners_only() {
        let gw: Gateway = serde_json::from_value(serde_json::json!({
            "metadata": { "name": "web", "namespace": "infra" },
            "spec": { "gatewayClassName": "pontoon", "listeners": [
                { "name": "http", "port": 80, "protocol": "HTTP" },
                { "name": "alt", "port": 80, "protocol": "HTTP", "hostname": "alt.com" },
                { "name": "udp", "port": 9000, "protocol": "UDP" },
                { "name": "tcp", "port": 9001, "protocol": "TCP" }
            ] }
        }))
        .unwrap();
        assert_eq!(
            served_ports(&evaluate(&gw, &ListView::default())),
            [80, 80, 9001]
        );
    }
    use crate::judgement::resolve::view::ListView;

    fn gateway(listeners: serde_json::Value) -> Gateway {
        serde_json::from_value(serde_json::json!({
            "metadata": { "name": "gw", "namespace": "infra" },
            "spec": { "gatewayClassName": "pontoon", "listeners": listeners }
        }))
        .unwrap()
    }

    /// A Gateway that takes ListenerSets from its namespace, and sets
    /// created one second apart in `sets`' order.
    fn with_sets(
        listeners: serde_json::Value,
        sets: &[(&str, serde_json::Value)],
    ) -> (Gateway, ListView) {
        let mut gw = gateway(listeners);
        gw.spec.allowed_listeners =
            serde_json::from_value(serde_json::json!({ "namespaces": { "from": "Same" } }))
                .unwrap();
        let listener_sets = sets
            .iter()
            .enumerate()
            .map(|(i, (name, listeners))| {
                Arc::new(
                    serde_json::from_value(serde_json::json!({
                        "metadata": { "name": name, "namespace": "infra",
                                      "creationTimestamp": format!("2026-01-01T00:00:0{i}Z") },
                        "spec": { "parentRef": { "name": "gw" }, "listeners": listeners }
                    }))
                    .unwrap(),
                )
            })
            .collect();
        let view = ListView {
            listener_sets,
            ..Default::default()
        };
        (gw, view)
    }

    fn http(name: &str, host: &str) -> serde_json::Value {
        serde_json::json!({ "name": name, "port": 80, "protocol": "HTTP", "hostname": host })
    }

    /// (declarer, listener, conflict reason) of every listener, in the merged order.
    fn merged(gw: &Gateway, view: &ListView) -> Vec<(String, String, Option<&'static str>)> {
        evaluate(gw, view)
            .iter()
            .map(|s| {
                (
                    s.set.as_ref().map_or("gw".into(), |r| r.name.clone()),
                    s.name.clone(),
                    s.conflicted.as_ref().map(|i| i.reason),
                )
            })
            .collect()
    }

    #[test]
    fn a_listener_set_loses_a_hostname_to_the_gateway_and_to_older_sets() {
        let (gw, view) = with_sets(
            serde_json::json!([http("a", "a.com"), http("taken", "taken.com")]),
            &[
                (
                    "one",
                    serde_json::json!([
                        http("b", "b.com"),
                        http("taken", "taken.com"),
                        http("c", "c.com")
                    ]),
                ),
                ("two", serde_json::json!([http("taken", "taken.com")])),
                (
                    "three",
                    serde_json::json!([http("c", "c.com"), http("d", "d.com")]),
                ),
            ],
        );
        let row = |d: &str, l: &str, c: Option<&'static str>| (d.to_string(), l.to_string(), c);
        assert_eq!(
            merged(&gw, &view),
            [
                row("gw", "a", None),
                row("gw", "taken", None),
                row("one", "b", None),
                row("one", "taken", Some("HostnameConflict")),
                row("one", "c", None),
                row("two", "taken", Some("HostnameConflict")),
                row("three", "c", Some("HostnameConflict")),
                row("three", "d", None),
            ]
        );
    }

    #[test]
    fn a_listener_set_protocol_conflict_is_reported_before_an_unsupported_protocol() {
        let tcp = serde_json::json!({ "name": "raw", "port": 80, "protocol": "TCP" });
        let (gw, view) = with_sets(
            serde_json::json!([http("a", "a.com")]),
            &[("one", serde_json::json!([http("b", "b.com"), tcp]))],
        );
        let states = evaluate(&gw, &view);
        let raw = &states[2];
        assert_eq!(
            raw.conflicted.as_ref().map(|i| i.reason),
            Some("ProtocolConflict")
        );
        assert_eq!(
            raw.accepted.as_ref().unwrap_err().reason,
            "ProtocolConflict"
        );
        assert!(states[1].programmable(), "its HTTP sibling is served");
        assert_eq!(states[1].namespace, "infra");
    }

    #[test]
    fn a_listener_set_not_allowed_adds_no_listener() {
        let (mut gw, view) = with_sets(
            serde_json::json!([http("a", "a.com")]),
            &[("one", serde_json::json!([http("b", "b.com")]))],
        );
        gw.spec.allowed_listeners = None;
        assert_eq!(evaluate(&gw, &view).len(), 1);
    }

    #[test]
    fn a_listener_sets_certificate_needs_a_grant_to_the_listener_set_kind() {
        let https = serde_json::json!({ "name": "s", "port": 443, "protocol": "HTTPS",
            "hostname": "s.example.com",
            "tls": { "certificateRefs": [{ "name": "cert", "namespace": "certs" }] } });
        let (gw, mut view) = with_sets(
            serde_json::json!([http("a", "a.com")]),
            &[("one", serde_json::json!([https]))],
        );
        view.secrets = vec![secret("certs", "cert", "kubernetes.io/tls", CERT, KEY)];
        let grant = |kind: &str| -> Arc<gateway_api::referencegrants::ReferenceGrant> {
            Arc::new(
                serde_json::from_value(serde_json::json!({
                    "metadata": { "name": kind, "namespace": "certs" },
                    "spec": { "from": [{ "group": "gateway.networking.k8s.io", "kind": kind, "namespace": "infra" }],
                              "to": [{ "group": "", "kind": "Secret" }] }
                }))
                .unwrap(),
            )
        };
        view.grants = vec![grant("Gateway")];
        let refused = evaluate(&gw, &view);
        assert_eq!(
            refused[1].resolved_refs.as_ref().unwrap_err().reason,
            "RefNotPermitted"
        );
        view.grants = vec![grant("ListenerSet")];
        assert!(evaluate(&gw, &view)[1].resolved_refs.is_ok());
    }

    // A self-signed certificate for *.example.com (openssl, EC P-256, 100 years).
    const CERT: &str = include_str!("testdata/tls.crt");
    const KEY: &str = include_str!("testdata/tls.key");

    fn secret(
        ns: &str,
        name: &str,
        type_: &str,
        cert: &str,
        key: &str,
    ) -> Arc<k8s_openapi::api::core::v1::Secret> {
        use k8s_openapi::ByteString;
        Arc::new(k8s_openapi::api::core::v1::Secret {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                namespace: Some(ns.into()),
                ..Default::default()
            },
            type_: Some(type_.into()),
            data: Some(
                [
                    ("tls.crt".to_string(), ByteString(cert.as_bytes().to_vec())),
                    ("tls.key".to_string(), ByteString(key.as_bytes().to_vec())),
                ]
                .into(),
            ),
            ..Default::default()
        })
    }

    #[test]
    fn http_https_and_tcp_are_served_other_protocols_refused() {
        let view = ListView {
            secrets: vec![secret("infra", "cert", "kubernetes.io/tls", CERT, KEY)],
            ..Default::default()
        };
        let states = evaluate(
            &gateway(serde_json::json!([
                { "name": "http", "port": 80, "protocol": "HTTP" },
                { "name": "https", "port": 443, "protocol": "HTTPS",
                  "tls": { "certificateRefs": [{ "name": "cert" }] } },
                { "name": "sctp", "port": 9000, "protocol": "SCTP" },
                { "name": "tcp", "port": 9001, "protocol": "TCP", "hostname": "ignored.example" }
            ])),
            &view,
        );
        assert!(states[0].programmable());
        assert!(states[3].programmable(), "{:?}", states[3]);
        assert_eq!(states[3].supported_kinds, [RouteKind::Tcp]);
        assert_eq!(states[3].hostname, None, "TCP ignores the hostname");
        assert!(states[1].programmable(), "{:?}", states[1]);
        assert_eq!(
            states[1].certificates,
            [CertificateSecret {
                namespace: "infra".into(),
                name: "cert".into()
            }]
        );
        assert_eq!(
            states[2].accepted.as_ref().unwrap_err().reason,
            "UnsupportedProtocol"
        );
        assert!(states[2].supported_kinds.is_empty());
        assert_eq!(
            states[0].supported_kinds,
            [RouteKind::Http, RouteKind::Grpc]
        );
    }

    #[test]
    fn a_udp_listener_is_refused_naming_what_praxis_lacks() {
        let states = evaluate(
            &gateway(serde_json::json!([
                { "name": "dns", "port": 53, "protocol": "UDP" }
            ])),
            &ListView::default(),
        );
        let issue = states[0].accepted.as_ref().unwrap_err();
        assert_eq!(issue.reason, "UnsupportedProtocol");
        assert!(
            issue.message.contains("proxies no UDP"),
            "{}",
            issue.message
        );
        assert!(states[0].supported_kinds.is_empty());
    }

    #[test]
    fn a_hostname_that_is_an_ip_address_is_not_accepted() {
        let states = evaluate(
            &gateway(serde_json::json!([
                { "name": "ip", "port": 80, "protocol": "HTTP", "hostname": "10.0.0.1" },
                { "name": "dns", "port": 80, "protocol": "HTTP", "hostname": "10.0.0.1.example" }
            ])),
            &ListView::default(),
        );
        let issue = states[0].accepted.as_ref().unwrap_err();
        assert_eq!(issue.reason, "UnsupportedValue");
        assert!(
            issue.message.contains("hostname 10.0.0.1 is an IP address"),
            "{}",
            issue.message
        );
        assert!(!states[0].programmable());
        assert!(states[1].programmable(), "{:?}", states[1]);
    }

    #[test]
    fn conflicts_are_detected_not_assumed_away() {
        let view = ListView::default();
        let states = evaluate(
            &gateway(serde_json::json!([
                { "name": "a", "port": 80, "protocol": "HTTP", "hostname": "a.com" },
                { "name": "b", "port": 80, "protocol": "HTTP", "hostname": "a.com" },
                { "name": "c", "port": 80, "protocol": "HTTP", "hostname": "c.com" },
                { "name": "d", "port": 8080, "protocol": "HTTP" },
                { "name": "e", "port": 8080, "protocol": "HTTPS",
                  "tls": { "certificateRefs": [{ "name": "x" }] } }
            ])),
            &view,
        );
        let reason = |i: usize| states[i].conflicted.as_ref().map(|c| c.reason);
        assert_eq!(reason(0), Some("HostnameConflict"));
        assert_eq!(reason(1), Some("HostnameConflict"));
        assert_eq!(reason(2), None);
        assert_eq!(reason(3), Some("ProtocolConflict"));
        assert_eq!(reason(4), Some("ProtocolConflict"));
        assert!(states[2].programmable());
        assert!(!states[0].usable());
    }

    #[test]
    fn certificate_problems_are_named() {
        let view = ListView {
            secrets: vec![
                secret("infra", "opaque", "Opaque", CERT, KEY),
                secret("infra", "garbage", "kubernetes.io/tls", "not pem", KEY),
                secret("other", "far", "kubernetes.io/tls", CERT, KEY),
            ],
            ..Default::default()
        };
        let check = |refs: serde_json::Value| {
            let states = evaluate(
                &gateway(
                    serde_json::json!([{ "name": "https", "port": 443, "protocol": "HTTPS",
                    "tls": { "certificateRefs": refs } }]),
                ),
                &view,
            );
            states[0].resolved_refs.clone().unwrap_err()
        };
        let missing = check(serde_json::json!([{ "name": "nope" }]));
        assert_eq!(missing.reason, "InvalidCertificateRef");
        assert!(
            missing.message.contains("infra/nope does not exist"),
            "{missing:?}"
        );
        let opaque = check(serde_json::json!([{ "name": "opaque" }]));
        assert!(opaque.message.contains("type Opaque"), "{opaque:?}");
        let garbage = check(serde_json::json!([{ "name": "garbage" }]));
        assert!(
            garbage.message.contains("not a PEM certificate"),
            "{garbage:?}"
        );
        let far = check(serde_json::json!([{ "name": "far", "namespace": "other" }]));
        assert_eq!(far.reason, "RefNotPermitted");
    }

    #[test]
    fn other_route_kinds_are_invalid() {
        let states = evaluate(
            &gateway(
                serde_json::json!([{ "name": "http", "port": 80, "protocol": "HTTP",
                "allowedRoutes": { "kinds": [{ "kind": "TCPRoute" }, { "kind": "HTTPRoute" }] } }]),
            ),
            &ListView::default(),
        );
        assert_eq!(
            states[0].resolved_refs.as_ref().unwrap_err().reason,
            "InvalidRouteKinds"
        );
        assert_eq!(states[0].supported_kinds, [RouteKind::Http]);
    }

    #[test]
    fn client_certificates_are_asked_for_per_port_and_a_bad_ca_unprograms_the_listener() {
        let ca: Arc<k8s_openapi::api::core::v1::ConfigMap> = Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": { "name": "clients", "namespace": "infra" },
                "data": { "ca.crt": CERT }
            }))
            .unwrap(),
        );
        let view = ListView {
            secrets: vec![secret("infra", "cert", "kubernetes.io/tls", CERT, KEY)],
            config_maps: vec![ca],
            ..Default::default()
        };
        let mut gw = gateway(serde_json::json!([
            { "name": "a", "port": 443, "protocol": "HTTPS",
              "tls": { "certificateRefs": [{ "name": "cert" }] } },
            { "name": "b", "port": 8443, "protocol": "HTTPS",
              "tls": { "certificateRefs": [{ "name": "cert" }] } },
            { "name": "plain", "port": 80, "protocol": "HTTP" }
        ]));
        gw.spec.tls = serde_json::from_value(serde_json::json!({ "frontend": {
            "default": { "validation": { "caCertificateRefs": [
                { "group": "", "kind": "ConfigMap", "name": "clients" }] } },
            "perPort": [{ "port": 8443, "tls": { "validation": { "caCertificateRefs": [
                { "group": "", "kind": "ConfigMap", "name": "missing" }] } } }]
        } }))
        .unwrap();
        let states = evaluate(&gw, &view);
        let ok = states[0].client_ca.as_ref().unwrap().as_ref().unwrap();
        assert!(ok.pem.contains("BEGIN CERTIFICATE"));
        assert!(states[0].programmable());
        let bad = &states[1];
        assert_eq!(
            bad.client_ca.as_ref().unwrap_err().reason,
            "InvalidCACertificateRef"
        );
        assert_eq!(
            bad.resolved_refs.as_ref().unwrap_err().reason,
            "InvalidCACertificateRef"
        );
        assert_eq!(
            bad.accepted_condition().unwrap_err().reason,
            "NoValidCACertificate"
        );
        assert!(
            bad.usable(),
            "routes still attach, as to a listener missing its certificate"
        );
        assert!(
            !bad.programmable(),
            "never served without the validation asked for"
        );
        assert_eq!(
            states[2].client_ca,
            Ok(None),
            "plain HTTP takes no client certificates"
        );
    }

    #[test]
    fn tls_listeners_pass_through_or_terminate_and_take_tls_routes_only() {
        let view = ListView {
            secrets: vec![secret("infra", "cert", "kubernetes.io/tls", CERT, KEY)],
            ..Default::default()
        };
        let states = evaluate(
            &gateway(serde_json::json!([
                { "name": "pass", "port": 443, "protocol": "TLS", "hostname": "*.example.com",
                  "tls": { "mode": "Passthrough" } },
                { "name": "kinds", "port": 8443, "protocol": "TLS", "tls": { "mode": "Passthrough" },
                  "allowedRoutes": { "kinds": [{ "kind": "TCPRoute" }, { "kind": "TLSRoute" }] } },
                { "name": "terminate", "port": 9443, "protocol": "TLS",
                  "tls": { "mode": "Terminate", "certificateRefs": [{ "name": "cert" }] } },
                { "name": "http-tls", "port": 80, "protocol": "HTTP",
                  "allowedRoutes": { "kinds": [{ "kind": "TLSRoute" }] } },
                // Terminate is the default mode, and needs a certificate.
                { "name": "no-cert", "port": 9444, "protocol": "TLS" },
                // Both modes on one port (mixed), told apart by hostname.
                { "name": "mixed-pass", "port": 8883, "protocol": "TLS", "hostname": "a.example.com",
                  "tls": { "mode": "Passthrough" } },
                { "name": "mixed-term", "port": 8883, "protocol": "TLS", "hostname": "b.example.com",
                  "tls": { "mode": "Terminate", "certificateRefs": [{ "name": "cert" }] } }
            ])),
            &view,
        );
        assert!(states[0].programmable(), "{:?}", states[0]);
        assert_eq!(states[0].protocol, Some(Protocol::TlsPassthrough));
        assert_eq!(states[0].supported_kinds, [RouteKind::Tls]);
        assert_eq!(states[1].supported_kinds, [RouteKind::Tls]);
        let kinds = states[1].resolved_refs.as_ref().unwrap_err();
        assert_eq!(kinds.reason, "InvalidRouteKinds");
        assert!(
            kinds.message.contains("gateway.networking.k8s.io/TCPRoute"),
            "{kinds:?}"
        );
        assert!(states[2].programmable(), "{:?}", states[2]);
        assert_eq!(states[2].protocol, Some(Protocol::TlsTerminate));
        assert_eq!(states[2].supported_kinds, [RouteKind::Tls]);
        assert_eq!(states[2].certificates.len(), 1);
        assert_eq!(states[4].protocol, Some(Protocol::TlsTerminate));
        let no_cert = states[4].resolved_refs.as_ref().unwrap_err();
        assert_eq!(no_cert.reason, "InvalidCertificateRef");
        assert!(
            no_cert
                .message
                .contains("a TLS listener that terminates TLS needs at least one certificateRef"),
            "{no_cert:?}"
        );
        assert!(states[5].programmable(), "{:?}", states[5]);
        assert!(states[6].programmable(), "{:?}", states[6]);
        assert!(states[3].supported_kinds.is_empty());
        assert_eq!(
            states[3].resolved_refs.as_ref().unwrap_err().reason,
            "InvalidRouteKinds"
        );
    }

    #[test]
    fn certificates_have_files_of_their_own_in_the_mount() {
        let cert = CertificateSecret {
            namespace: "infra".into(),
            name: "cert".into(),
        };
        assert_eq!(cert.files().cert_path, "/etc/praxis-tls/infra-cert.crt");
        assert_eq!(cert.files().key_path, "/etc/praxis-tls/infra-cert.key");
    }
}
