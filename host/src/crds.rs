//! `pontoon crds`: every CRD the project ships, as one YAML stream.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

use crate::bridge_mount::crd::{bridge_crd, bridge_mount_crd};

/// The CRDs, in the order they are printed.
pub fn all() -> Result<Vec<CustomResourceDefinition>, serde_json::Error> {
    Ok(vec![bridge_mount_crd()?, bridge_crd()?])
}

/// The CRDs as a multi-document YAML stream, each with apiVersion and kind.
pub fn yaml() -> anyhow::Result<String> {
    let mut out = String::new();
    for crd in all()? {
        out.push_str("---\n");
        out.push_str(&yaml_serde::to_string(&crd)?);
    }
    Ok(out)
}
