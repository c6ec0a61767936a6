//! The `gefyra.dev/v1` resources in Gefyra's wire format: no `spec`, every
//! field at the top level, `state` and `stateTransitions` beside them, kinds
//! spelled in lower case. Existing Gefyra clients create these objects as
//! they are, so the Rust types follow the wire, not kube's `spec`/`status`
//! convention; the CRDs are generated from these types (`pontoon crds`).

use std::{collections::BTreeMap, time::Duration};

use k8s_openapi::{
    apiextensions_apiserver::pkg::apis::apiextensions::v1::{
        CustomResourceColumnDefinition, CustomResourceDefinition, CustomResourceDefinitionNames,
        CustomResourceDefinitionSpec, CustomResourceDefinitionVersion, CustomResourceValidation,
        JSONSchemaProps,
    },
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
    settings::MountSettings,
    state::{State, UnknownState},
    status::parse_timestamp,
};
use pontoon_plugins::bindings::Mount;

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

    /// The mount as its provider sees it, asking for what its fields say
    /// now (the reconcile uses what was admitted instead).
    pub fn provider_request(&self, settings: &MountSettings) -> Mount {
        super::admitted::Admitted::of(self).mount(self, settings)
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

/// The fields that say what a mount asks for: judged once, at creation
/// (the admission policy, the operator's own admission), so none may be
/// added, changed or removed afterwards.
pub const FIXED_FIELDS: [&str; 4] = ["targetNamespace", "target", "targetContainer", "provider"];

/// CEL rules on the whole object refusing any change of a [`FIXED_FIELDS`]
/// field, from absent to present included. A rule on the field itself
/// (`self == oldSelf`) is not evaluated when the old object lacks the
/// field, which let a mount created without `targetNamespace` be pointed at
/// another namespace afterwards; at the root both sides always exist.
fn fixed_after_creation() -> serde_json::Value {
    FIXED_FIELDS
        .iter()
        .map(|field| {
            serde_json::json!({
                "rule": format!(
                    "has(self.{field}) == has(oldSelf.{field}) && \
                     (!has(self.{field}) || self.{field} == oldSelf.{field})"
                ),
                "message": format!(
                    "{field} cannot be added, changed or removed once the mount exists (it was \
                     judged when the mount was created); delete the mount and create a new one"
                ),
                "reason": "FieldValueForbidden",
                "fieldPath": format!(".{field}"),
            })
        })
        .collect()
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

/// The schema of `T`'s fields as a CRD needs it (inline, structural, no `$schema`),
/// the way kube's derive makes it.
fn fields_schema<T: JsonSchema>(
    root_rules: Option<serde_json::Value>,
) -> Result<JSONSchemaProps, serde_json::Error> {
    let generator = schemars::generate::SchemaSettings::openapi3()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .with_transform(schemars::transform::AddNullable::default())
        .with_transform(kube::core::schema::StructuralSchemaRewriter)
        .with_transform(kube::core::schema::OptionalEnum)
        .into_generator();
    let mut schema = serde_json::to_value(generator.into_root_schema_for::<T>())?;
    if let Some(object) = schema.as_object_mut() {
        // The fields live beside apiVersion, kind and metadata at the top level.
        object.remove("title");
        object.remove("description");
        object.remove("required");
        if let Some(properties) = object.get_mut("properties").and_then(|p| p.as_object_mut()) {
            properties.insert("apiVersion".into(), serde_json::json!({ "type": "string" }));
            properties.insert("kind".into(), serde_json::json!({ "type": "string" }));
            properties.insert("metadata".into(), serde_json::json!({ "type": "object" }));
        }
        if let Some(rules) = root_rules {
            object.insert("x-kubernetes-validations".into(), rules);
        }
    }
    serde_json::from_value(schema)
}

fn column(name: &str, json_path: &str, type_: &str) -> CustomResourceColumnDefinition {
    CustomResourceColumnDefinition {
        name: name.into(),
        json_path: json_path.into(),
        type_: type_.into(),
        ..Default::default()
    }
}

fn definition<K: Resource<DynamicType = ()>>(
    short_names: &[&str],
    schema: JSONSchemaProps,
    columns: Vec<CustomResourceColumnDefinition>,
) -> CustomResourceDefinition {
    CustomResourceDefinition {
        metadata: ObjectMeta {
            name: Some(format!("{}.{GROUP}", K::plural(&()))),
            ..Default::default()
        },
        spec: CustomResourceDefinitionSpec {
            group: GROUP.into(),
            names: CustomResourceDefinitionNames {
                kind: K::kind(&()).into(),
                plural: K::plural(&()).into(),
                short_names: Some(short_names.iter().map(|s| s.to_string()).collect()),
                ..Default::default()
            },
            scope: "Namespaced".into(),
            versions: vec![CustomResourceDefinitionVersion {
                name: VERSION.into(),
                served: true,
                storage: true,
                schema: Some(CustomResourceValidation {
                    open_api_v3_schema: Some(schema),
                }),
                additional_printer_columns: (!columns.is_empty()).then_some(columns),
                // No status subresource, as in Gefyra: clients and the
                // operator write `state`, `stateTransitions` and `status`
                // in one update of the object.
                subresources: None,
                ..Default::default()
            }],
            ..Default::default()
        },
        status: None,
    }
}

/// The CRD of GefyraBridgeMount.
pub fn bridge_mount_crd() -> Result<CustomResourceDefinition, serde_json::Error> {
    Ok(definition::<GefyraBridgeMount>(
        &["gbridgemount", "gbridgemounts"],
        fields_schema::<BridgeMountFields>(Some(fixed_after_creation()))?,
        vec![
            column("State", ".state", "string"),
            column("Target", ".target", "string"),
            column("Target-NS", ".targetNamespace", "string"),
            column("Provider", ".provider", "string"),
            column("Age", ".metadata.creationTimestamp", "date"),
        ],
    ))
}

/// The CRD of GefyraBridge.
pub fn bridge_crd() -> Result<CustomResourceDefinition, serde_json::Error> {
    Ok(definition::<GefyraBridge>(
        &["gbridge", "gbridges"],
        fields_schema::<BridgeFields>(None)?,
        vec![
            column("State", ".state", "string"),
            column(
                "Mount",
                ".metadata.labels.gefyra\\.dev/bridge-mount",
                "string",
            ),
            column("Client", ".client", "string"),
            column("Ports", ".portMappings", "string"),
            CustomResourceColumnDefinition {
                priority: Some(1),
                ..column("Message", ".status.message", "string")
            },
            column("Age", ".metadata.creationTimestamp", "date"),
        ],
    ))
}

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
    fn the_provider_request_carries_the_mount_and_the_settings() {
        let mount = mount_in(
            "gefyra",
            serde_json::json!({
                "target": "deploy/web",
                "targetContainer": "app",
                "providerParameter": { "tls": { "certificate": "/c.pem" } },
            }),
        );
        let settings = MountSettings {
            operator_namespace: "pontoon".into(),
            carrier_image: "carrier2:1".into(),
            missing_grace_period: Duration::from_secs(300),
            reconcile_interval: Duration::from_secs(60),
            target_namespaces: Default::default(),
            guard: Default::default(),
            bridges: Default::default(),
        };
        let request = mount.provider_request(&settings);
        assert_eq!(request.name, "web-mount");
        assert_eq!(request.namespace, "gefyra");
        assert_eq!(request.uid, "u-1");
        assert_eq!(request.target, "deploy/web");
        assert_eq!(request.target_namespace, "gefyra");
        assert_eq!(request.target_container, "app");
        let parameters: serde_json::Value =
            serde_json::from_str(request.parameters.as_deref().unwrap()).unwrap();
        assert_eq!(parameters["tls"]["certificate"], "/c.pem");
        assert_eq!(request.settings.operator_namespace, "pontoon");
        assert_eq!(request.settings.carrier_image, "carrier2:1");
        assert_eq!(
            request.settings.restore_config_map, "gefyra-carrier2-restore-u-1",
            "the mount's own, by its uid"
        );
        let bare = mount_in("gefyra", serde_json::json!({})).provider_request(&settings);
        assert_eq!(
            (bare.target.as_str(), bare.target_container.as_str()),
            ("", "")
        );
        assert_eq!(bare.parameters, None);
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

    #[test]
    fn the_mount_crd_keeps_gefyras_names_and_fields() {
        let crd = serde_json::to_value(bridge_mount_crd().unwrap()).unwrap();
        assert_eq!(crd["metadata"]["name"], "gefyrabridgemounts.gefyra.dev");
        assert_eq!(crd["spec"]["names"]["kind"], "gefyrabridgemount");
        assert_eq!(
            crd["spec"]["names"]["shortNames"],
            serde_json::json!(["gbridgemount", "gbridgemounts"])
        );
        assert_eq!(crd["spec"]["scope"], "Namespaced");
        let version = &crd["spec"]["versions"][0];
        assert_eq!(version["name"], "v1");
        let properties = &version["schema"]["openAPIV3Schema"]["properties"];
        for field in [
            "targetNamespace",
            "target",
            "targetContainer",
            "provider",
            "providerParameter",
            "sunset",
            "missingGracePeriod",
            "state",
            "stateTransitions",
            "status",
        ] {
            assert!(properties.get(field).is_some(), "{field} in {properties}");
        }
        assert_eq!(properties["state"]["default"], "REQUESTED");
        assert_eq!(properties["missingGracePeriod"]["minimum"], 0.0);
        assert_eq!(
            properties["providerParameter"]["x-kubernetes-preserve-unknown-fields"],
            true
        );
        assert_eq!(
            properties["stateTransitions"]["x-kubernetes-preserve-unknown-fields"],
            true
        );
        assert!(version.get("subresources").is_none());
        let columns: Vec<&str> = version["additionalPrinterColumns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(columns, ["State", "Target", "Target-NS", "Provider", "Age"]);
    }

    #[test]
    fn the_bridge_crd_keeps_gefyras_names() {
        let crd = serde_json::to_value(bridge_crd().unwrap()).unwrap();
        assert_eq!(crd["metadata"]["name"], "gefyrabridges.gefyra.dev");
        assert_eq!(crd["spec"]["names"]["kind"], "gefyrabridge");
        let properties = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"];
        // Nullable, so `null` is one of the allowed values too.
        let providers: Vec<&str> = properties["provider"]["enum"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|v| v.as_str())
            .collect();
        assert_eq!(providers, ["carrier", "carrier2"]);
        assert!(properties.get("destinationIP").is_some());
    }
}
