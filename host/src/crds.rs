//! `pontoon crds`: every CRD the project ships, as one YAML stream.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

use crate::bridge_mount::crd::{bridge_crd, bridge_mount_crd};

/// The CRDs, in the order they are printed.
pub fn all() -> Result<Vec<CustomResourceDefinition>, serde_json::Error> {
    Ok(vec![bridge_mount_crd()?, bridge_crd()?])
}

/// Each CRD by name (`gefyrabridgemounts.gefyra.dev`) with its YAML document.
pub fn documents() -> anyhow::Result<Vec<(String, String)>> {
    all()?
        .into_iter()
        .map(|crd| {
            let name = crd.metadata.name.clone().unwrap_or_default();
            Ok((name, yaml_serde::to_string(&crd)?))
        })
        .collect()
}

/// The CRDs as one multi-document YAML stream.
pub fn yaml() -> anyhow::Result<String> {
    Ok(documents()?
        .into_iter()
        .map(|(_, doc)| format!("---\n{doc}"))
        .collect())
}

/// Writes each CRD to `<dir>/<name>.yaml` (the chart's `crds/`).
pub fn write_dir(dir: &std::path::Path) -> anyhow::Result<Vec<std::path::PathBuf>> {
    std::fs::create_dir_all(dir)?;
    documents()?
        .into_iter()
        .map(|(name, doc)| {
            let path = dir.join(format!("{name}.yaml"));
            std::fs::write(&path, doc)?;
            Ok(path)
        })
        .collect()
}
