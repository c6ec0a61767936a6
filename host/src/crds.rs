//! `pontoon crds`: every CRD the project ships, as one YAML stream: the
//! GefyraBridgeMount and GefyraBridge CRDs generated from Pontoon's types,
//! and the Gateway API's standard channel (v1.6.3; the `gateway-api` crate is
//! generated from v1.5.1, and Pontoon's own types carry what v1.6 adds), vendored in `charts/pontoon/files/gateway-api/`.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

use crate::bridge_mount::definitions::{bridge_crd, bridge_mount_crd};

/// Which CRDs to print.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum CrdSet {
    /// All of them.
    #[default]
    All,
    /// GefyraBridgeMount and GefyraBridge (the chart's `crds/`).
    Gefyra,
    /// The Gateway API's standard channel.
    GatewayApi,
}

/// The Gateway API standard-channel CRDs, as the Gateway API project ships them.
const GATEWAY_API: &[(&str, &str)] = &[
    (
        "gatewayclasses.gateway.networking.k8s.io",
        include_str!(
            "../../charts/pontoon/files/gateway-api/standard/gateway.networking.k8s.io_gatewayclasses.yaml"
        ),
    ),
    (
        "gateways.gateway.networking.k8s.io",
        include_str!(
            "../../charts/pontoon/files/gateway-api/standard/gateway.networking.k8s.io_gateways.yaml"
        ),
    ),
    (
        "httproutes.gateway.networking.k8s.io",
        include_str!(
            "../../charts/pontoon/files/gateway-api/standard/gateway.networking.k8s.io_httproutes.yaml"
        ),
    ),
    (
        "grpcroutes.gateway.networking.k8s.io",
        include_str!(
            "../../charts/pontoon/files/gateway-api/standard/gateway.networking.k8s.io_grpcroutes.yaml"
        ),
    ),
    (
        "referencegrants.gateway.networking.k8s.io",
        include_str!(
            "../../charts/pontoon/files/gateway-api/standard/gateway.networking.k8s.io_referencegrants.yaml"
        ),
    ),
    (
        "backendtlspolicies.gateway.networking.k8s.io",
        include_str!(
            "../../charts/pontoon/files/gateway-api/standard/gateway.networking.k8s.io_backendtlspolicies.yaml"
        ),
    ),
    (
        "listenersets.gateway.networking.k8s.io",
        include_str!(
            "../../charts/pontoon/files/gateway-api/standard/gateway.networking.k8s.io_listenersets.yaml"
        ),
    ),
    (
        "tcproutes.gateway.networking.k8s.io",
        include_str!(
            "../../charts/pontoon/files/gateway-api/standard/gateway.networking.k8s.io_tcproutes.yaml"
        ),
    ),
    (
        "tlsroutes.gateway.networking.k8s.io",
        include_str!(
            "../../charts/pontoon/files/gateway-api/standard/gateway.networking.k8s.io_tlsroutes.yaml"
        ),
    ),
    (
        "udproutes.gateway.networking.k8s.io",
        include_str!(
            "../../charts/pontoon/files/gateway-api/standard/gateway.networking.k8s.io_udproutes.yaml"
        ),
    ),
];

/// Pontoon's own CRDs, in the order they are printed.
pub fn all() -> Result<Vec<CustomResourceDefinition>, serde_json::Error> {
    Ok(vec![bridge_mount_crd()?, bridge_crd()?])
}

/// The Gateway API CRDs, parsed.
pub fn gateway_api() -> anyhow::Result<Vec<CustomResourceDefinition>> {
    GATEWAY_API
        .iter()
        .map(|(name, text)| {
            yaml_serde::from_str(text).map_err(|e| anyhow::anyhow!("vendored CRD {name}: {e}"))
        })
        .collect()
}

/// Each CRD of `set` by name with its YAML document.
pub fn documents(set: CrdSet) -> anyhow::Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    if set != CrdSet::GatewayApi {
        for crd in all()? {
            let name = crd.metadata.name.clone().unwrap_or_default();
            out.push((name, yaml_serde::to_string(&crd)?));
        }
    }
    if set != CrdSet::Gefyra {
        for (name, text) in GATEWAY_API {
            out.push((
                name.to_string(),
                text.trim_start_matches("---\n").to_string(),
            ));
        }
    }
    Ok(out)
}

/// The CRDs of `set` as one multi-document YAML stream.
pub fn yaml(set: CrdSet) -> anyhow::Result<String> {
    Ok(documents(set)?
        .into_iter()
        .map(|(_, doc)| format!("---\n{doc}"))
        .collect())
}

/// Writes each CRD of `set` to `<dir>/<name>.yaml` (the chart's `crds/`).
pub fn write_dir(set: CrdSet, dir: &std::path::Path) -> anyhow::Result<Vec<std::path::PathBuf>> {
    std::fs::create_dir_all(dir)?;
    documents(set)?
        .into_iter()
        .map(|(name, doc)| {
            let path = dir.join(format!("{name}.yaml"));
            std::fs::write(&path, doc)?;
            Ok(path)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vendored_gateway_api_crds_parse_and_are_v1_6_3() {
        let crds = gateway_api().unwrap();
        assert_eq!(crds.len(), GATEWAY_API.len());
        for (crd, (name, _)) in crds.iter().zip(GATEWAY_API) {
            assert_eq!(crd.metadata.name.as_deref(), Some(*name));
            let version = crd
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("gateway.networking.k8s.io/bundle-version"));
            assert_eq!(version.map(String::as_str), Some("v1.6.3"), "{name}");
        }
    }
}
