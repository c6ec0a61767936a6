//! carrier2mount's own read-back for `pontoon conformance`'s bridge
//! checks: Carrier2's config in each pod (`/tmp/config.yaml`, over exec),
//! the one format the generic suite does not know.

use futures::{FutureExt as _, future::BoxFuture};
use k8s_openapi::api::core::v1::Pod;
use kube::{Api, Client};
use pontoon::conformance::{BridgeReadBack, HeldBridge, SAMPLE_BRIDGE, SAMPLE_PORT};
use serde_json::Value;

use super::mounts::carrier_config_in;

pub struct Carrier2Config;

impl BridgeReadBack for Carrier2Config {
    fn what(&self) -> String {
        "Carrier2's /tmp/config.yaml".into()
    }

    fn read<'a>(
        &'a self,
        client: &'a Client,
        namespace: &'a str,
        pod: &'a str,
        container: &'a str,
    ) -> BoxFuture<'a, Result<Option<HeldBridge>, String>> {
        async move {
            let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
            let config = carrier_config_in(&pods, pod, container)
                .await
                .map_err(|e| format!("{e:#}"))?;
            held(&config)
        }
        .boxed()
    }
}

/// The sample bridge on the sample port of one config: Carrier2 keeps a
/// `proxy` list by port, each with its `bridges` by name.
fn held(config: &Value) -> Result<Option<HeldBridge>, String> {
    let proxy = config["proxy"]
        .as_array()
        .and_then(|list| list.iter().find(|p| p["port"] == SAMPLE_PORT))
        .ok_or(format!("no proxy for port {SAMPLE_PORT}"))?;
    let bridge = &proxy["bridges"][SAMPLE_BRIDGE];
    if bridge.is_null() {
        return Ok(None);
    }
    Ok(Some(HeldBridge {
        endpoint: bridge["endpoint"].as_str().unwrap_or_default().to_string(),
        rules: bridge["rules"].as_array().map_or(0, Vec::len),
    }))
}
