//! `labelmount`: the provider of a new user's trial, built from
//! `providers/template`. On install it labels and annotates the target's
//! pods, on uninstall it takes both off again; like the template it keeps
//! one ConfigMap per mount, `<mount uid>-labelmount`, in the target
//! namespace.
//!
//! Its examples are components: `labelmount` keeps the contract, the others
//! each break it in one [`Flaw`], and `pontoon conformance` must fail each
//! of those naming what is wrong (host/tests/conformance.rs). Objects go
//! through the SDK's raw JSON calls, as in the template, so the components
//! stay small and compile fast in the host.

use std::marker::PhantomData;

use pontoon_provider_sdk::{
    TargetKind,
    bridge_mount::{
        Capability, Condition, Error, Guest, Metadata, Mount, NamespaceScope, Progress, Verb,
    },
    cluster::{ObjectRef, PatchType, raw},
    serde_json::{self, Value, json},
};

/// The label put on the target's pods while mounted.
pub const LABEL: &str = "labelmount.pontoon.dev/mount";
/// The annotation put on them with it.
pub const ANNOTATION: &str = "labelmount.pontoon.dev/note";

/// How a copy breaks the contract.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Flaw {
    /// None: the well-behaved provider.
    Nothing,
    /// Serves Deployment targets only (declines the others in `validate`):
    /// not a flaw, a choice conformance must respect.
    DeploymentsOnly,
    /// Uninstall leaves the label on the pods.
    LeavesLabel,
    /// Uninstall leaves the annotation on the pods.
    LeavesAnnotation,
    /// Install does nothing; ready always reports every condition true.
    ReadyWithoutInstall,
    /// Each prepare changes the ConfigMap again (a counter).
    PrepareNotIdempotent,
    /// Each install creates one more ConfigMap.
    InstallDuplicates,
    /// target-exists is always true.
    TargetAlwaysExists,
    /// A second uninstall fails (its ConfigMap is gone).
    UninstallTwiceFails,
    /// Declares no `patch` on pods, which install needs.
    ScopeTooNarrow,
}

/// What tells the copies apart.
pub trait Variant {
    /// The module's name in its metadata.
    const NAME: &'static str;
    const FLAW: Flaw;
}

/// The provider; export it as a `type` alias of one variant.
pub struct LabelMount<V>(PhantomData<V>);

fn object_ref(api_version: &str, kind: &str, namespace: &str, name: String) -> ObjectRef {
    ObjectRef {
        api_version: api_version.into(),
        kind: kind.into(),
        namespace: namespace.into(),
        name,
    }
}

fn config_map(mount: &Mount) -> ObjectRef {
    let name = mount.own_name("labelmount");
    object_ref("v1", "ConfigMap", &mount.target_namespace, name)
}

/// The `index`th extra ConfigMap of [`Flaw::InstallDuplicates`].
fn extra(mount: &Mount, index: usize) -> ObjectRef {
    let name = mount.own_name(&format!("extra-{index}"));
    object_ref("v1", "ConfigMap", &mount.target_namespace, name)
}

fn parse(text: &str) -> Result<Value, Error> {
    serde_json::from_str(text).map_err(|e| Error::failed(format!("not JSON: {e}")))
}

fn read(object: &ObjectRef) -> Result<Option<Value>, Error> {
    raw::get(object)?.map(|text| parse(&text)).transpose()
}

fn target(mount: &Mount) -> Result<(TargetKind, ObjectRef), Error> {
    let target = mount.parsed_target()?;
    let reference = object_ref(
        target.kind.api_version(),
        target.kind.kind(),
        &mount.target_namespace,
        target.name,
    );
    Ok((target.kind, reference))
}

/// The target's live pods: a bare Pod itself, else those its selector picks.
fn pods(mount: &Mount) -> Result<Vec<Value>, Error> {
    let (kind, reference) = target(mount)?;
    let Some(object) = read(&reference)? else {
        return Ok(Vec::new());
    };
    let pods = if kind == TargetKind::Pod {
        vec![object]
    } else {
        let labels = object["spec"]["selector"]["matchLabels"]
            .as_object()
            .ok_or_else(|| Error::failed("the target's selector has no matchLabels"))?;
        let selector: Vec<String> = labels
            .iter()
            .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
            .collect();
        raw::list("v1", "Pod", &mount.target_namespace, &selector.join(","))?
            .iter()
            .map(|text| parse(text))
            .collect::<Result<_, _>>()?
    };
    Ok(pods
        .into_iter()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .collect())
}

fn pod_ref(mount: &Mount, pod: &Value) -> ObjectRef {
    let name = pod["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    object_ref("v1", "Pod", &mount.target_namespace, name)
}

fn labelled(pod: &Value, mount: &Mount) -> bool {
    pod["metadata"]["labels"][LABEL] == mount.name.as_str()
}

impl<V: Variant> Guest for LabelMount<V> {
    fn metadata() -> Metadata {
        use Verb::*;
        let pod_verbs: &[Verb] = if V::FLAW == Flaw::ScopeTooNarrow {
            &[Get, List]
        } else {
            &[Get, List, Patch]
        };
        Metadata {
            name: V::NAME.into(),
            version: "0.1.0".into(),
            description: "Labels and annotates the target's pods while mounted".into(),
            scope: vec![
                Capability::new(
                    "",
                    &["ConfigMap"],
                    &[Get, Apply, Delete, Patch],
                    NamespaceScope::Target,
                )
                .named(&["{mount}-labelmount", "{mount}-extra-*"]),
                Capability::new(
                    "apps",
                    &["Deployment", "StatefulSet"],
                    &[Get],
                    NamespaceScope::Target,
                ),
                Capability::new("", &["Pod"], pod_verbs, NamespaceScope::Target),
            ],
        }
    }

    fn validate(mount: Mount) -> Result<(), Error> {
        let target = mount.check_target()?;
        if V::FLAW == Flaw::DeploymentsOnly && target.kind != TargetKind::Deployment {
            return Err(Error::invalid_input(format!(
                "{} serves Deployment targets only; a {} is not one",
                V::NAME,
                target.kind.kind()
            )));
        }
        Ok(())
    }

    fn target_exists(mount: Mount) -> Result<bool, Error> {
        if V::FLAW == Flaw::TargetAlwaysExists {
            return Ok(true);
        }
        let (_, reference) = target(&mount)?;
        Ok(raw::get(&reference)?.is_some())
    }

    fn prepare(mount: Mount) -> Result<Progress, Error> {
        let object = config_map(&mount);
        let mut data = json!({ "target": mount.target });
        if V::FLAW == Flaw::PrepareNotIdempotent {
            let count = read(&object)?
                .and_then(|cm| cm["data"]["prepared"].as_str()?.parse::<u32>().ok())
                .unwrap_or_default();
            data["prepared"] = json!((count + 1).to_string());
        }
        let config_map = json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": { "name": object.name },
            "data": data,
        });
        raw::apply(&mount.target_namespace, &config_map.to_string())?;
        Ok(Progress::Done)
    }

    fn prepared(mount: Mount) -> Result<bool, Error> {
        Ok(read(&config_map(&mount))?.is_some())
    }

    fn install(mount: Mount) -> Result<Progress, Error> {
        if V::FLAW == Flaw::ReadyWithoutInstall {
            return Ok(Progress::Done);
        }
        let pods = pods(&mount)?;
        if pods.is_empty() {
            return Ok(Progress::WhenPodsChange);
        }
        for pod in pods.iter().filter(|p| !labelled(p, &mount)) {
            let patch = json!({ "metadata": {
                "labels": { LABEL: mount.name },
                "annotations": { ANNOTATION: format!("mounted by {}", mount.name) },
            } });
            raw::patch(&pod_ref(&mount, pod), PatchType::Merge, &patch.to_string())?;
        }
        if V::FLAW == Flaw::InstallDuplicates {
            let free = (0..)
                .find_map(|i| match raw::get(&extra(&mount, i)) {
                    Ok(None) => Some(Ok(i)),
                    Ok(Some(_)) => None,
                    Err(err) => Some(Err(err)),
                })
                .unwrap_or(Ok(0))?;
            let copy = json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": { "name": extra(&mount, free).name },
            });
            raw::apply(&mount.target_namespace, &copy.to_string())?;
        }
        let installed = json!({ "data": { "installed": "true" } }).to_string();
        raw::patch(&config_map(&mount), PatchType::Merge, &installed)?;
        Ok(Progress::Done)
    }

    fn ready(mount: Mount) -> Result<Vec<Condition>, Error> {
        if V::FLAW == Flaw::ReadyWithoutInstall {
            return Ok(vec![
                Condition::new("ConfigMapInstalled", true, "trust me"),
                Condition::new("PodsLabelled", true, "trust me"),
            ]);
        }
        let installed =
            read(&config_map(&mount))?.is_some_and(|cm| cm["data"]["installed"] == "true");
        let pods = pods(&mount)?;
        let unlabelled = pods.iter().filter(|p| !labelled(p, &mount)).count();
        Ok(vec![
            Condition::new("ConfigMapInstalled", installed, "the mount's ConfigMap"),
            Condition::new(
                "PodsLabelled",
                !pods.is_empty() && unlabelled == 0,
                format!("{unlabelled} of {} pods lack the label", pods.len()),
            ),
        ])
    }

    fn uninstall(mount: Mount) -> Result<Progress, Error> {
        let mut removed = serde_json::Map::new();
        if V::FLAW != Flaw::LeavesLabel {
            removed.insert("labels".into(), json!({ LABEL: null }));
        }
        if V::FLAW != Flaw::LeavesAnnotation {
            removed.insert("annotations".into(), json!({ ANNOTATION: null }));
        }
        let patch = json!({ "metadata": removed }).to_string();
        for pod in pods(&mount)?
            .iter()
            .filter(|p| labelled(p, &mount) || !p["metadata"]["annotations"][ANNOTATION].is_null())
        {
            raw::patch(&pod_ref(&mount, pod), PatchType::Merge, &patch)?;
        }
        // Extras (of the duplicating copy) go first, the ConfigMap last: it
        // is what says the mount is prepared.
        let mut index = 0;
        while raw::delete(&extra(&mount, index))? {
            index += 1;
        }
        let deleted = raw::delete(&config_map(&mount))?;
        if !deleted && V::FLAW == Flaw::UninstallTwiceFails {
            return Err(Error::failed("the ConfigMap is already gone"));
        }
        Ok(Progress::Done)
    }
}

/// Exports `LabelMount` of a variant named `$name` with `$flaw`.
#[macro_export]
macro_rules! export_variant {
    ($name:literal, $flaw:expr) => {
        struct Chosen;

        impl $crate::Variant for Chosen {
            const NAME: &'static str = $name;
            const FLAW: $crate::Flaw = $flaw;
        }

        type Provider = $crate::LabelMount<Chosen>;

        pontoon_provider_sdk::export_bridge_mount!(Provider);
    };
}
