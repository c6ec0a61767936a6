//! CA certificates in ConfigMaps (key `ca.crt`), as the Gateway API refers
//! to them: a Gateway's client-certificate validation per port
//! (`spec.tls.frontend`), and a BackendTLSPolicy's trust for a backend.
//! Each reference is a ConfigMap, in the referrer's namespace or one whose
//! ReferenceGrant allows it, holding PEM certificates.

use gateway_api::gateways::Gateway;
use rustls_pki_types::{CertificateDer, pem::PemObject};

use super::{
    grants::{self, GroupKind},
    issue::Issue,
    view::ClusterView,
};

pub const CONFIG_MAP: GroupKind<'static> = GroupKind {
    group: "",
    kind: "ConfigMap",
};

/// The key of a CA ConfigMap that holds the certificates.
pub const CA_KEY: &str = "ca.crt";

/// A reference to a CA ConfigMap, as any of the API's reference types has it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaRef {
    pub group: String,
    pub kind: String,
    pub namespace: Option<String>,
    pub name: String,
}

/// The PEM text of the ConfigMaps `refs` name (joined, in order), or the
/// first problem: `(reason of ResolvedRefs, message)`.
pub fn resolve(
    refs: &[CaRef],
    from: GroupKind<'_>,
    from_namespace: &str,
    view: &dyn ClusterView,
) -> Result<String, Issue> {
    let mut pem = String::new();
    for r in refs {
        let namespace = r.namespace.as_deref().unwrap_or(from_namespace);
        let label = format!("{}/{}", namespace, r.name);
        if !r.group.is_empty() || r.kind != "ConfigMap" {
            return Err(Issue::new(
                "InvalidCACertificateKind",
                format!(
                    "caCertificateRef {label} is a {}{}, not a ConfigMap",
                    if r.group.is_empty() {
                        String::new()
                    } else {
                        format!("{}/", r.group)
                    },
                    r.kind
                ),
            ));
        }
        if !grants::permitted(view, from, from_namespace, CONFIG_MAP, namespace, &r.name) {
            return Err(Issue::new(
                "RefNotPermitted",
                format!(
                    "ConfigMap {label} is in another namespace and no ReferenceGrant there allows it"
                ),
            ));
        }
        let Some(map) = view.config_map(namespace, &r.name) else {
            return Err(Issue::new(
                "InvalidCACertificateRef",
                format!("ConfigMap {label} does not exist"),
            ));
        };
        let text = map
            .data
            .as_ref()
            .and_then(|d| d.get(CA_KEY))
            .cloned()
            .unwrap_or_default();
        let certs: Vec<_> = CertificateDer::pem_slice_iter(text.as_bytes()).collect();
        if certs.is_empty() || certs.iter().any(Result::is_err) {
            return Err(Issue::new(
                "InvalidCACertificateRef",
                format!("ConfigMap {label}: {CA_KEY} holds no PEM certificate"),
            ));
        }
        pem.push_str(text.trim_end());
        pem.push('\n');
    }
    Ok(pem)
}

/// A Gateway's client-certificate validation on `port`: the port's own
/// entry, else the default; `None` when neither asks for validation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FrontendValidation {
    pub refs: Vec<CaRef>,
    /// `AllowInsecureFallback`: connections without a valid certificate
    /// are let in too.
    pub insecure_fallback: bool,
}

pub fn frontend_validation(gateway: &Gateway, port: u16) -> Option<FrontendValidation> {
    let frontend = gateway.spec.tls.as_ref()?.frontend.as_ref()?;
    // Both validation types have the same fields; read them as JSON once.
    let per_port = frontend
        .per_port
        .iter()
        .flatten()
        .find(|p| i64::from(p.port) == i64::from(port))
        .map(|p| serde_json::to_value(&p.tls.validation));
    let value = match per_port {
        Some(v) => v.ok()?,
        None => serde_json::to_value(&frontend.default.validation).ok()?,
    };
    if value.is_null() {
        return None;
    }
    let refs = value["caCertificateRefs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| CaRef {
            group: r["group"].as_str().unwrap_or_default().to_string(),
            kind: r["kind"].as_str().unwrap_or("ConfigMap").to_string(),
            namespace: r["namespace"].as_str().map(str::to_string),
            name: r["name"].as_str().unwrap_or_default().to_string(),
        })
        .collect();
    Some(FrontendValidation {
        refs,
        insecure_fallback: value["mode"] == "AllowInsecureFallback",
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use k8s_openapi::api::core::v1::ConfigMap;
    use serde_json::json;

    use super::*;
    use crate::judgement::resolve::{grants::GATEWAY, view::ListView};

    const CA: &str = include_str!("testdata/tls.crt");

    fn map(ns: &str, name: &str, ca: &str) -> Arc<ConfigMap> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": { "name": name, "namespace": ns },
                "data": { "ca.crt": ca }
            }))
            .unwrap(),
        )
    }

    fn r(kind: &str, namespace: Option<&str>, name: &str) -> CaRef {
        CaRef {
            group: String::new(),
            kind: kind.into(),
            namespace: namespace.map(Into::into),
            name: name.into(),
        }
    }

    #[test]
    fn each_problem_with_a_ca_reference_has_its_reason() {
        let view = ListView {
            config_maps: vec![
                map("infra", "ca", CA),
                map("infra", "junk", "not a certificate"),
                map("other", "far", CA),
            ],
            ..Default::default()
        };
        let check = |refs: &[CaRef]| resolve(refs, GATEWAY, "infra", &view);
        let pem = check(&[r("ConfigMap", None, "ca")]).unwrap();
        assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"), "{pem}");
        let reason = |refs: &[CaRef]| check(refs).unwrap_err().reason;
        assert_eq!(
            reason(&[r("ConfigMap", None, "none")]),
            "InvalidCACertificateRef"
        );
        assert_eq!(
            reason(&[r("ConfigMap", None, "junk")]),
            "InvalidCACertificateRef"
        );
        assert_eq!(
            reason(&[r("Service", None, "ca")]),
            "InvalidCACertificateKind"
        );
        assert_eq!(
            reason(&[r("ConfigMap", Some("other"), "far")]),
            "RefNotPermitted"
        );
    }

    #[test]
    fn a_port_of_its_own_wins_over_the_default() {
        let gw: Gateway = serde_json::from_value(json!({
            "metadata": { "name": "gw", "namespace": "infra" },
            "spec": { "gatewayClassName": "c", "listeners": [], "tls": { "frontend": {
                "default": { "validation": { "caCertificateRefs": [
                    { "group": "", "kind": "ConfigMap", "name": "default-ca" }] } },
                "perPort": [{ "port": 8443, "tls": { "validation": {
                    "mode": "AllowInsecureFallback",
                    "caCertificateRefs": [{ "group": "", "kind": "ConfigMap", "name": "port-ca" }] } } }]
            } } }
        }))
        .unwrap();
        let default = frontend_validation(&gw, 443).unwrap();
        assert_eq!(default.refs[0].name, "default-ca");
        assert!(!default.insecure_fallback);
        let port = frontend_validation(&gw, 8443).unwrap();
        assert_eq!(port.refs[0].name, "port-ca");
        assert!(port.insecure_fallback);
    }
}
