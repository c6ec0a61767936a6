//! The CustomResourceDefinitions Pontoon serves (`pontoon crds`, the Helm
//! chart): generated from the types of `crd`, with Gefyra's names, the
//! printer columns, and the rules that keep a mount's request fixed.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceColumnDefinition, CustomResourceDefinition, CustomResourceDefinitionNames,
    CustomResourceDefinitionSpec, CustomResourceDefinitionVersion, CustomResourceValidation,
    JSONSchemaProps,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::Resource;
use schemars::JsonSchema;

use super::crd::{
    BridgeFields, BridgeMountFields, GROUP, GefyraBridge, GefyraBridgeMount, VERSION,
};

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
