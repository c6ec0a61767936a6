//! A bridge-mount provider to start from. It passes `pontoon conformance`
//! as it is; replace what each step does with your own work.
//!
//! Its whole footprint is one ConfigMap per mount, `<mount uid>-template`,
//! in the target namespace: `prepare` applies it, `install` marks it
//! installed, `uninstall` deletes it. Its scope allows exactly that
//! ConfigMap (`{mount}-template`, `{mount}` being the mount's uid) and
//! reading the target.
//!
//! Objects go through the SDK's raw, JSON-text calls (`cluster::raw`) rather
//! than typed k8s-openapi structs: every typed kind a module decodes adds its
//! deserializer to the component (a Pod's alone is several hundred KiB).
//! Build: `cargo build --profile wasm-release --target wasm32-wasip2 -p
//! provider-template` gives `provider_template.wasm` (about 150 KiB); `make
//! new-provider` copies this crate into one of your own.

use pontoon_provider_sdk::{
    TargetKind,
    bridge_mount::{
        Capability, Condition, Error, Guest, Metadata, Mount, NamespaceScope, Progress, Verb,
    },
    cluster::{ClusterError, EventType, ObjectRef, PatchType, raw},
    info,
    serde_json::{self, Value, json},
    warn,
};

struct Template;

/// The one object a mount owns.
fn config_map(mount: &Mount) -> ObjectRef {
    ObjectRef {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        namespace: mount.target_namespace.clone(),
        name: mount.own_name("template"),
    }
}

/// The ConfigMap as JSON, if it exists.
fn read(object: &ObjectRef) -> Result<Option<Value>, Error> {
    raw::get(object)?
        .map(|text| {
            serde_json::from_str(&text)
                .map_err(|e| Error::failed(format!("{} is not JSON: {e}", object.name)))
        })
        .transpose()
}

impl Guest for Template {
    fn metadata() -> Metadata {
        use Verb::*;
        Metadata {
            // The crate name: rename the crate and the provider follows.
            name: env!("CARGO_PKG_NAME").into(),
            version: env!("CARGO_PKG_VERSION").into(),
            description: "Provider template: owns one ConfigMap per mount".into(),
            scope: vec![
                // `apply` creates or updates (server-side apply); `delete` is
                // for uninstall; only this mount's own ConfigMap.
                Capability::new(
                    "",
                    &["ConfigMap"],
                    &[Get, Apply, Patch, Delete],
                    NamespaceScope::Target,
                )
                .named(&["{mount}-template"]),
                // target-exists reads the target, whatever its kind.
                Capability::new(
                    "apps",
                    &["Deployment", "StatefulSet"],
                    &[Get],
                    NamespaceScope::Target,
                ),
                Capability::new("", &["Pod"], &[Get], NamespaceScope::Target),
            ],
        }
    }

    fn validate(mount: Mount) -> Result<(), Error> {
        // Malformed targets and an empty container are `invalid-input`.
        mount.check_target().map(drop)
    }

    fn target_exists(mount: Mount) -> Result<bool, Error> {
        let target = mount.parsed_target()?;
        let (api_version, kind) = match target.kind {
            TargetKind::Deployment => ("apps/v1", "Deployment"),
            TargetKind::StatefulSet => ("apps/v1", "StatefulSet"),
            TargetKind::Pod => ("v1", "Pod"),
        };
        let object = ObjectRef {
            api_version: api_version.into(),
            kind: kind.into(),
            namespace: mount.target_namespace.clone(),
            name: target.name,
        };
        Ok(raw::get(&object)?.is_some())
    }

    fn prepare(mount: Mount) -> Result<Progress, Error> {
        let object = config_map(&mount);
        let config_map = json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": object.name,
                "labels": {"pontoon.dev/mount": mount.name},
            },
            "data": {"target": mount.target},
        });
        // Server-side apply: the same call creates and later updates it.
        raw::apply(&mount.target_namespace, &config_map.to_string())?;
        info!("applied ConfigMap {}/{}", object.namespace, object.name);
        // Events are for people; one lost must not fail (and repeat) the step.
        if let Err(err) = raw::event(EventType::Normal, "Prepared", "ConfigMap applied") {
            warn!("could not post event Prepared: {err}");
        }
        Ok(Progress::Done)
    }

    fn prepared(mount: Mount) -> Result<bool, Error> {
        Ok(read(&config_map(&mount))?.is_some())
    }

    fn install(mount: Mount) -> Result<Progress, Error> {
        let object = config_map(&mount);
        let patch = json!({"data": {"installed": "true"}}).to_string();
        match raw::patch(&object, PatchType::Merge, &patch) {
            Ok(_) => Ok(Progress::Done),
            // Not there yet: ask to be called again in 2 s (a temporary
            // error is for something that may pass by itself).
            Err(ClusterError::NotFound(_)) => Ok(Progress::RetryAfter(2)),
            Err(err) => Err(err.into()),
        }
    }

    fn ready(mount: Mount) -> Result<Vec<Condition>, Error> {
        let object = config_map(&mount);
        let current = read(&object)?;
        let installed = current
            .as_ref()
            .is_some_and(|cm| cm["data"]["installed"] == "true");
        Ok(vec![
            Condition::new(
                "ConfigMapPresent",
                current.is_some(),
                format!("ConfigMap {}", object.name),
            ),
            Condition::new(
                "Installed",
                installed,
                format!("ConfigMap {} installed", object.name),
            ),
        ])
    }

    fn uninstall(mount: Mount) -> Result<Progress, Error> {
        // Already gone is fine: uninstall may run again.
        let deleted = raw::delete(&config_map(&mount))?;
        info!("ConfigMap deleted: {deleted}");
        Ok(Progress::Done)
    }
}

pontoon_provider_sdk::export_bridge_mount!(Template);
