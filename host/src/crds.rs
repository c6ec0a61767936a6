//! `pontoon crds`: every CRD the project ships, as one YAML stream: the
//! GefyraBridgeMount and GefyraBridge CRDs generated from Pontoon's types,
//! and the Gateway API's (v1.6.3; the `gateway-api` crate is generated from
//! v1.5.1, and Pontoon's own types carry what v1.6 adds), vendored in
//! `charts/pontoon/files/gateway-api/`: the standard channel by default,
//! the experimental one (`--channel experimental`) for its fields.

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
    /// The Gateway API's (of the channel `--channel` names).
    GatewayApi,
}

/// Which release channel of the Gateway API's CRDs to print.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Channel {
    /// The standard channel (what the chart installs).
    #[default]
    Standard,
    /// The experimental channel: the same kinds with the experimental
    /// fields, e.g. an HTTPRoute rule's `retry`, which Pontoon serves.
    Experimental,
}

impl Channel {
    /// The channel's CRDs: (name, YAML document).
    fn crds(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Self::Standard => STANDARD,
            Self::Experimental => EXPERIMENTAL,
        }
    }
}

/// The Gateway API CRDs of one channel, as the Gateway API project ships
/// them (`charts/pontoon/files/gateway-api/{channel}/`), by name.
macro_rules! gateway_api_channel {
    ($channel:literal: $($plural:literal),* $(,)?) => {
        &[$((
            concat!($plural, ".gateway.networking.k8s.io"),
            include_str!(concat!(
                "../../charts/pontoon/files/gateway-api/",
                $channel,
                "/gateway.networking.k8s.io_",
                $plural,
                ".yaml"
            )),
        )),*]
    };
}

/// The standard channel's CRDs: what the chart installs.
const STANDARD: &[(&str, &str)] = gateway_api_channel!("standard": "gatewayclasses", "gateways", "httproutes", "grpcroutes", "referencegrants", "backendtlspolicies", "listenersets", "tcproutes", "tlsroutes", "udproutes");

/// The same kinds in the experimental channel, which adds fields (an
/// HTTPRoute rule's `retry`, for one) to them.
const EXPERIMENTAL: &[(&str, &str)] = gateway_api_channel!("experimental": "gatewayclasses", "gateways", "httproutes", "grpcroutes", "referencegrants", "backendtlspolicies", "listenersets", "tcproutes", "tlsroutes", "udproutes");

/// Pontoon's own CRDs, in the order they are printed.
pub fn all() -> Result<Vec<CustomResourceDefinition>, serde_json::Error> {
    Ok(vec![bridge_mount_crd()?, bridge_crd()?])
}

/// The Gateway API CRDs of `channel`, parsed.
pub fn gateway_api(channel: Channel) -> anyhow::Result<Vec<CustomResourceDefinition>> {
    channel
        .crds()
        .iter()
        .map(|(name, text)| {
            yaml_serde::from_str(text).map_err(|e| anyhow::anyhow!("vendored CRD {name}: {e}"))
        })
        .collect()
}

/// Each CRD of `set` by name with its YAML document, the Gateway API's of
/// `channel`.
pub fn documents(set: CrdSet, channel: Channel) -> anyhow::Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    if set != CrdSet::GatewayApi {
        for crd in all()? {
            let name = crd.metadata.name.clone().unwrap_or_default();
            out.push((name, yaml_serde::to_string(&crd)?));
        }
    }
    if set != CrdSet::Gefyra {
        for (name, text) in channel.crds() {
            out.push((
                name.to_string(),
                text.trim_start_matches("---\n").to_string(),
            ));
        }
    }
    Ok(out)
}

/// The CRDs of `set` as one multi-document YAML stream.
pub fn yaml(set: CrdSet, channel: Channel) -> anyhow::Result<String> {
    Ok(documents(set, channel)?
        .into_iter()
        .map(|(_, doc)| format!("---\n{doc}"))
        .collect())
}

/// Writes each CRD of `set` to `<dir>/<name>.yaml` (the chart's `crds/`).
pub fn write_dir(
    set: CrdSet,
    channel: Channel,
    dir: &std::path::Path,
) -> anyhow::Result<Vec<std::path::PathBuf>> {
    std::fs::create_dir_all(dir)?;
    documents(set, channel)?
        .into_iter()
        .map(|(name, doc)| {
            let path = dir.join(format!("{name}.yaml"));
            std::fs::write(&path, doc)?;
            Ok(path)
        })
        .collect()
}

/// `pontoon crds`: the CRDs of `set` on stdout, or with `out_dir` one file
/// each written there, each path said on stderr.
pub fn print_or_write(
    set: CrdSet,
    channel: Channel,
    out_dir: Option<&std::path::Path>,
) -> anyhow::Result<()> {
    match out_dir {
        None => print!("{}", yaml(set, channel)?),
        Some(dir) => {
            for path in write_dir(set, channel, dir)? {
                eprintln!("wrote {}", path.display());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vendored_gateway_api_crds_parse_and_are_v1_6_3_of_their_channel() {
        for (channel, name) in [
            (Channel::Standard, "standard"),
            (Channel::Experimental, "experimental"),
        ] {
            let crds = gateway_api(channel).unwrap();
            assert_eq!(crds.len(), channel.crds().len());
            for (crd, (crd_name, _)) in crds.iter().zip(channel.crds()) {
                assert_eq!(crd.metadata.name.as_deref(), Some(*crd_name));
                let annotations = crd.metadata.annotations.clone().unwrap_or_default();
                let version = annotations.get("gateway.networking.k8s.io/bundle-version");
                assert_eq!(version.map(String::as_str), Some("v1.6.3"), "{crd_name}");
                let of = annotations.get("gateway.networking.k8s.io/channel");
                assert_eq!(of.map(String::as_str), Some(name), "{crd_name}");
            }
        }
        // The same kinds in both, by name.
        let names = |c: Channel| c.crds().iter().map(|(n, _)| *n).collect::<Vec<_>>();
        assert_eq!(names(Channel::Standard), names(Channel::Experimental));
    }

    #[test]
    fn only_the_experimental_http_route_has_a_rules_retry() {
        let retry = |channel: Channel| {
            let (_, text) = channel
                .crds()
                .iter()
                .find(|(name, _)| name.starts_with("httproutes."))
                .unwrap();
            text.contains("\n                    retry:\n")
        };
        assert!(!retry(Channel::Standard));
        assert!(retry(Channel::Experimental));
    }
}
