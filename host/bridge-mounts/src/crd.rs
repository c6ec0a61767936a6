//! The `gefyra.dev/v1` resources in Gefyra's wire format: no `spec`, every
//! field at the top level, `state` and `stateTransitions` beside them, kinds
//! spelled in lower case. Existing Gefyra clients create these objects as
//! they are, so the Rust types follow the wire, not kube's `spec`/`status`
//! convention; the CRDs are generated from these types (`pontoon crds`).

use std::{collections::BTreeMap, time::Duration};

use k8s_openapi::{
    apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta},
    jiff::Timestamp,
};
use kube::{
    ResourceExt,
    core::{NamespaceResourceScope, Resource},
};
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

use super::{
    state::{State, UnknownState},
    timestamps::parse_timestamp,
};

pub const GROUP: &str = "gefyra.dev";
pub const VERSION: &str = "v1";
pub const API_VERSION: &str = "gefyra.dev/v1";

/// A request to intercept a workload: it is duplicated into a shadow copy
/// and its pods get the Carrier2 proxy in front of the target container.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct GefyraBridgeMount {
    pub metadata: ObjectMeta,
    #[serde(flatten)]
    pub fields: BridgeMountFields,
}

/// The provider a mount gets when it names none (Gefyra's only one).
pub const DEFAULT_PROVIDER: &str = "carrier2mount";

impl GefyraBridgeMount {
    /// `namespace/name`, as logs and messages name a mount.
    pub fn qualified_name(&self) -> String {
        format!(
            "{}/{}",
            self.namespace().unwrap_or_default(),
            self.name_any()
        )
    }

    /// Where the target lives: `targetNamespace`, or the mount's own
    /// namespace when that is unset or empty.
    pub fn target_namespace(&self) -> String {
        match self.fields.target_namespace.as_deref() {
            Some(ns) if !ns.is_empty() => ns.to_string(),
            _ => self.namespace().unwrap_or_default(),
        }
    }

    /// The provider module serving the mount: `provider`, or
    /// [`DEFAULT_PROVIDER`] when that is unset or blank.
    pub fn provider_name(&self) -> &str {
        match self.fields.provider.as_deref() {
            Some(name) if !name.trim().is_empty() => name,
            _ => DEFAULT_PROVIDER,
        }
    }

    /// Where the mount is in its lifecycle; no `state` (or an empty one) is
    /// REQUESTED, as for a mount Gefyra's client just created.
    pub fn state(&self) -> Result<State, UnknownState> {
        match self.fields.state.as_deref() {
            None | Some("") => Ok(State::Requested),
            Some(text) => text.parse(),
        }
    }

    /// When the mount entered `state`, as `stateTransitions` records it.
    pub fn entered(&self, state: State) -> Option<Timestamp> {
        self.fields
            .state_transitions
            .as_ref()
            .and_then(|t| t.get(state.as_str()))
            .and_then(|text| parse_timestamp(text))
    }

    /// How long the mount has been in `state` at `now`; zero when
    /// `stateTransitions` does not say.
    pub fn time_in(&self, state: State, now: Timestamp) -> Duration {
        let since = self.entered(state).unwrap_or(now);
        now.duration_since(since).unsigned_abs()
    }

    /// Whether the provider can have done anything yet: only from PREPARING
    /// on. A PREPARING entry counts even when its timestamp is unreadable.
    pub fn ever_prepared(&self) -> bool {
        self.fields
            .state_transitions
            .as_ref()
            .is_some_and(|t| t.contains_key(State::Preparing.as_str()))
    }

    /// `sunset`, when it is a timestamp.
    pub fn sunset(&self) -> Option<Timestamp> {
        self.fields.sunset.as_deref().and_then(parse_timestamp)
    }

    /// How long the mount waits for a target that is gone: its own
    /// `missingGracePeriod` (a negative one as zero), else `default`.
    pub fn missing_grace_period(&self, default: Duration) -> Duration {
        match self.fields.missing_grace_period {
            Some(seconds) => Duration::from_secs(seconds.max(0).unsigned_abs()),
            None => default,
        }
    }

    /// The conditions as last written.
    pub fn conditions(&self) -> &[Condition] {
        self.fields
            .status
            .as_ref()
            .map(|status| status.conditions.as_slice())
            .unwrap_or_default()
    }
}

/// The top-level fields of a GefyraBridgeMount.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BridgeMountFields {
    /// Namespace of the target workload (default: the mount's own namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub target_namespace: Option<String>,
    /// The workload to intercept: `deploy/NAME`, `sts/NAME`, `pod/NAME` (or their long forms), or `NAME` for a Deployment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    // `statefulsets/` and a 253-character name fit.
    #[schemars(length(max = 320))]
    pub target: Option<String>,
    /// The container of the target's pods that Carrier2 replaces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub target_container: Option<String>,
    /// Name of the provider module serving the mount (`carrier2mount`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub provider: Option<String>,
    /// Provider-specific parameters (for carrier2mount: TLS settings).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserved_object")]
    pub provider_parameter: Option<serde_json::Map<String, serde_json::Value>>,
    /// When the mount is to be removed (RFC 3339, e.g. `2026-12-01T12:00:00Z`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub sunset: Option<String>,
    /// Seconds a mount whose target disappeared waits for it before it is
    /// terminated; 0 terminates at once, unset uses the operator's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub missing_grace_period: Option<i64>,
    /// Where the mount is in its lifecycle (written by the operator).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "REQUESTED"))]
    pub state: Option<String>,
    /// When each state was entered: STATE -> timestamp (written by the operator).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserved_object")]
    pub state_transitions: Option<BTreeMap<String, String>>,
    /// Observations of the operator, for kubectl users.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<BridgeMountStatus>,
}

/// `status` of a mount: conditions for kubectl users; other fields are kept
/// as clients wrote them (Gefyra's schema preserves them).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct BridgeMountStatus {
    /// `Ready` and the provider's readiness conditions, with reasons.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// A bridge of a local container into a mount's target (created by Gefyra's
/// client; rendered through the mount's provider, see `crate::bridge`, and
/// removed with the mount).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct GefyraBridge {
    pub metadata: ObjectMeta,
    #[serde(flatten)]
    pub bridge: BridgeFields,
}

/// The top-level fields of a GefyraBridge, as Gefyra defines them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BridgeFields {
    /// The bridge provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<BridgeProvider>,
    /// Provider-specific parameters of the bridge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserved_object")]
    pub provider_parameter: Option<serde_json::Map<String, serde_json::Value>>,
    /// How the bridge reaches the client: a connection provider module by
    /// name (`tunnel`, bundled: `pontoon bridge`'s relay; or one of the
    /// administrator's), or Gefyra's `stowaway`, which Pontoon does not run
    /// (its bridges name their endpoint in `destinationIP`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), pattern(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))]
    pub connection_provider: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_namespace: Option<String>,
    /// The GefyraBridgeMount this bridge attaches to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_container: Option<String>,
    /// The Gefyra client the traffic goes to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    /// Address of the local container at that client.
    #[serde(
        rename = "destinationIP",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub destination_ip: Option<String>,
    /// `local:remote` port pairs, e.g. `8080:80`: requests to the target
    /// container's port `remote` that match go to the client's port `local`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = []))]
    pub port_mappings: Option<Vec<String>>,
    /// Sent by Gefyra's client (its legacy "also handle probes" switch):
    /// kept so that its objects validate strictly; Carrier2 answers the
    /// target's probe ports itself either way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handle_probes: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserved_object")]
    pub cluster_endpoint: Option<serde_json::Map<String, serde_json::Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub sunset: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "REQUESTED"))]
    pub state: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserved_object")]
    pub state_transitions: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserved_object")]
    pub status: Option<serde_json::Map<String, serde_json::Value>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum BridgeProvider {
    Carrier,
    Carrier2,
}

/// An object whose fields are kept as written.
fn preserved_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "object", "x-kubernetes-preserve-unknown-fields": true })
}

macro_rules! gefyra_resource {
    ($ty:ident, $fields:ident, $field:ident, $kind:literal, $plural:literal) => {
        /// Always with apiVersion and kind, as the API server wants objects sent.
        impl Serialize for $ty {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                #[derive(Serialize)]
                struct Wire<'a> {
                    #[serde(rename = "apiVersion")]
                    api_version: &'a str,
                    kind: &'a str,
                    metadata: &'a ObjectMeta,
                    #[serde(flatten)]
                    fields: &'a $fields,
                }
                Wire {
                    api_version: API_VERSION,
                    kind: $kind,
                    metadata: &self.metadata,
                    fields: &self.$field,
                }
                .serialize(serializer)
            }
        }

        impl Resource for $ty {
            type DynamicType = ();
            type Scope = NamespaceResourceScope;

            fn kind(_: &()) -> std::borrow::Cow<'_, str> {
                $kind.into()
            }
            fn group(_: &()) -> std::borrow::Cow<'_, str> {
                GROUP.into()
            }
            fn version(_: &()) -> std::borrow::Cow<'_, str> {
                VERSION.into()
            }
            fn plural(_: &()) -> std::borrow::Cow<'_, str> {
                $plural.into()
            }
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

gefyra_resource!(
    GefyraBridgeMount,
    BridgeMountFields,
    fields,
    "gefyrabridgemount",
    "gefyrabridgemounts"
);
gefyra_resource!(
    GefyraBridge,
    BridgeFields,
    bridge,
    "gefyrabridge",
    "gefyrabridges"
);

#[cfg(test)]
mod tests {
    use super::*;

    fn mount_in(namespace: &str, fields: serde_json::Value) -> GefyraBridgeMount {
        let mut object = serde_json::json!({
            "metadata": { "name": "web-mount", "namespace": namespace, "uid": "u-1" },
        });
        if let (Some(object), Some(fields)) = (object.as_object_mut(), fields.as_object()) {
            object.extend(fields.clone());
        }
        serde_json::from_value(object).unwrap()
    }

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    #[test]
    fn the_target_namespace_defaults_to_the_mounts_own() {
        let own = mount_in("gefyra", serde_json::json!({}));
        assert_eq!(own.target_namespace(), "gefyra");
        let empty = mount_in("gefyra", serde_json::json!({ "targetNamespace": "" }));
        assert_eq!(empty.target_namespace(), "gefyra");
        let shop = mount_in("gefyra", serde_json::json!({ "targetNamespace": "shop" }));
        assert_eq!(shop.target_namespace(), "shop");
    }

    #[test]
    fn a_mount_naming_no_provider_gets_carrier2mount() {
        for fields in [
            serde_json::json!({}),
            serde_json::json!({ "provider": "" }),
            serde_json::json!({ "provider": "  " }),
        ] {
            assert_eq!(mount_in("g", fields).provider_name(), "carrier2mount");
        }
        let named = mount_in("g", serde_json::json!({ "provider": "teleporter" }));
        assert_eq!(named.provider_name(), "teleporter");
    }

    #[test]
    fn no_state_is_requested_and_a_foreign_state_is_refused() {
        assert_eq!(
            mount_in("g", serde_json::json!({})).state(),
            Ok(State::Requested)
        );
        assert_eq!(
            mount_in("g", serde_json::json!({ "state": "" })).state(),
            Ok(State::Requested)
        );
        assert_eq!(
            mount_in("g", serde_json::json!({ "state": "MISSING" })).state(),
            Ok(State::Missing)
        );
        assert_eq!(
            mount_in("g", serde_json::json!({ "state": "Active" })).state(),
            Err(UnknownState("Active".into()))
        );
    }

    #[test]
    fn entered_reads_state_transitions_as_gefyra_writes_them() {
        let mount = mount_in(
            "g",
            serde_json::json!({ "stateTransitions": {
                "PREPARING": "2026-11-29T18:43:12.000000Z",
                "MISSING": "2026-11-29T18:43:12",
                "ERROR": "yesterday",
            } }),
        );
        let expected = at("2026-11-29T18:43:12Z");
        assert_eq!(mount.entered(State::Preparing), Some(expected));
        assert_eq!(mount.entered(State::Missing), Some(expected));
        assert_eq!(mount.entered(State::Error), None, "unreadable");
        assert_eq!(mount.entered(State::Active), None, "never entered");
        let later = at("2026-11-29T18:44:12Z");
        assert_eq!(
            mount.time_in(State::Missing, later),
            Duration::from_secs(60)
        );
        assert_eq!(mount.time_in(State::Error, later), Duration::ZERO);
    }

    #[test]
    fn only_a_mount_that_reached_preparing_was_ever_prepared() {
        assert!(!mount_in("g", serde_json::json!({})).ever_prepared());
        let requested = mount_in(
            "g",
            serde_json::json!({ "stateTransitions": { "REQUESTED": "2026-11-29T18:43:12Z", "ERROR": "2026-11-29T18:43:13Z" } }),
        );
        assert!(!requested.ever_prepared());
        let prepared = mount_in(
            "g",
            serde_json::json!({ "stateTransitions": { "PREPARING": "2026-11-29T18:43:12Z" } }),
        );
        assert!(prepared.ever_prepared());
        let unreadable = mount_in(
            "g",
            serde_json::json!({ "stateTransitions": { "PREPARING": "at some point" } }),
        );
        assert!(
            unreadable.ever_prepared(),
            "the entry, not its timestamp, counts"
        );
    }

    #[test]
    fn the_grace_period_is_the_mounts_own_or_the_default() {
        let default = Duration::from_secs(300);
        assert_eq!(
            mount_in("g", serde_json::json!({})).missing_grace_period(default),
            default
        );
        assert_eq!(
            mount_in("g", serde_json::json!({ "missingGracePeriod": 0 }))
                .missing_grace_period(default),
            Duration::ZERO
        );
        assert_eq!(
            mount_in("g", serde_json::json!({ "missingGracePeriod": 20 }))
                .missing_grace_period(default),
            Duration::from_secs(20)
        );
        assert_eq!(
            mount_in("g", serde_json::json!({ "missingGracePeriod": -5 }))
                .missing_grace_period(default),
            Duration::ZERO
        );
    }

    #[test]
    fn a_mount_as_gefyras_client_sends_it_decodes() {
        let mount: GefyraBridgeMount = serde_json::from_value(serde_json::json!({
            "apiVersion": "gefyra.dev/v1",
            "kind": "gefyrabridgemount",
            "metadata": { "name": "web-mount", "namespace": "gefyra" },
            "targetNamespace": "shop",
            "target": "deployment/web",
            "targetContainer": "app",
            "provider": "carrier2mount",
            "providerParameter": { "tls": { "certificate": "/c.pem" } }
        }))
        .unwrap();
        assert_eq!(mount.fields.target.as_deref(), Some("deployment/web"));
        assert_eq!(mount.fields.target_namespace.as_deref(), Some("shop"));
        assert_eq!(mount.fields.provider.as_deref(), Some("carrier2mount"));
        assert!(mount.fields.state.is_none());
        let back = serde_json::to_value(&mount).unwrap();
        assert_eq!(back["providerParameter"]["tls"]["certificate"], "/c.pem");
        assert!(back.get("spec").is_none(), "fields stay at the top level");
        assert_eq!(back["apiVersion"], "gefyra.dev/v1");
        assert_eq!(back["kind"], "gefyrabridgemount");
    }
}
