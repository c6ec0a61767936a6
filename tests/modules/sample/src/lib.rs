//! The steps of the well-behaved test provider, shared by `sample_provider`
//! and `skips_cleanup`, which differ only in their [`Flavor`].
//!
//! Its whole footprint is one ConfigMap, `<mount>-sample`, in the target
//! namespace: prepare applies it, install marks it installed, uninstall
//! deletes it.

use std::marker::PhantomData;

use pontoon_provider_sdk::{
    TargetKind,
    bridge_mount::{
        Capability, Condition, Error, Guest, Metadata, Mount, NamespaceScope, Progress, Verb,
    },
    cluster::{self, ClusterError, EventType, PatchType},
    info,
    k8s_openapi::{
        api::{
            apps::v1::{Deployment, StatefulSet},
            core::v1::{ConfigMap, Pod},
        },
        apimachinery::pkg::apis::meta::v1::ObjectMeta,
    },
    serde_json::json,
    warn,
};

/// What tells the two test providers apart.
pub trait Flavor {
    /// The module's name in its metadata.
    const NAME: &'static str;
    const DESCRIPTION: &'static str;
    /// Whether uninstall deletes the ConfigMap.
    const CLEANS_UP: bool;
}

/// The provider; export it as a `type` alias, e.g. `type P = Sample<Plain>;`.
pub struct Sample<F>(PhantomData<F>);

/// Name of the ConfigMap a mount owns.
pub fn config_map_name(mount: &Mount) -> String {
    format!("{}-sample", mount.name)
}

fn get_config_map(mount: &Mount) -> Result<Option<ConfigMap>, Error> {
    Ok(cluster::get::<ConfigMap>(
        &mount.target_namespace,
        &config_map_name(mount),
    )?)
}

impl<F: Flavor> Guest for Sample<F> {
    fn metadata() -> Metadata {
        use Verb::*;
        Metadata {
            name: F::NAME.into(),
            version: "0.1.0".into(),
            description: F::DESCRIPTION.into(),
            scope: vec![
                Capability::of::<ConfigMap>(
                    &[Get, List, Create, Apply, Patch, Delete],
                    NamespaceScope::Target,
                ),
                Capability::new(
                    "apps",
                    &["Deployment", "StatefulSet"],
                    &[Get, List],
                    NamespaceScope::Target,
                ),
                Capability::of::<Pod>(&[Get, List], NamespaceScope::Target),
            ],
        }
    }

    fn validate(mount: Mount) -> Result<(), Error> {
        mount.check_target().map(drop)
    }

    fn target_exists(mount: Mount) -> Result<bool, Error> {
        let target = mount.parsed_target()?;
        let (ns, name) = (mount.target_namespace.as_str(), target.name.as_str());
        Ok(match target.kind {
            TargetKind::Deployment => cluster::get::<Deployment>(ns, name)?.is_some(),
            TargetKind::StatefulSet => cluster::get::<StatefulSet>(ns, name)?.is_some(),
            TargetKind::Pod => cluster::get::<Pod>(ns, name)?.is_some(),
        })
    }

    fn prepare(mount: Mount) -> Result<Progress, Error> {
        let name = config_map_name(&mount);
        let config_map = ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(mount.target_namespace.clone()),
                labels: Some(
                    [
                        (
                            "app.kubernetes.io/managed-by".to_string(),
                            "sample".to_string(),
                        ),
                        ("pontoon.dev/mount".to_string(), mount.name.clone()),
                    ]
                    .into(),
                ),
                ..Default::default()
            },
            data: Some([("target".to_string(), mount.target.clone())].into()),
            ..Default::default()
        };
        cluster::apply(&mount.target_namespace, &config_map)?;
        info!("applied ConfigMap {}/{name}", mount.target_namespace);
        // Events are for humans; losing one must not fail (and so repeat) the step.
        if let Err(err) = cluster::event(
            EventType::Normal,
            "Prepared",
            &format!("ConfigMap {name} applied"),
        ) {
            warn!("could not post event Prepared: {err}");
        }
        Ok(Progress::Done)
    }

    fn prepared(mount: Mount) -> Result<bool, Error> {
        Ok(get_config_map(&mount)?.is_some())
    }

    fn install(mount: Mount) -> Result<Progress, Error> {
        let name = config_map_name(&mount);
        let patch = json!({ "data": { "installed": "true" } });
        match cluster::patch::<ConfigMap>(&mount.target_namespace, &name, PatchType::Merge, &patch)
        {
            Ok(_) => Ok(Progress::Done),
            Err(ClusterError::NotFound(_)) => Err(Error::temporary(
                format!("ConfigMap {name} does not exist yet (prepare first)"),
                2,
            )),
            Err(err) => Err(err.into()),
        }
    }

    fn ready(mount: Mount) -> Result<Vec<Condition>, Error> {
        let name = config_map_name(&mount);
        let config_map = get_config_map(&mount)?;
        let installed = config_map
            .as_ref()
            .and_then(|cm| cm.data.as_ref())
            .and_then(|data| data.get("installed"))
            .is_some_and(|value| value == "true");
        Ok(vec![
            match &config_map {
                Some(_) => {
                    Condition::new("ConfigMapPresent", true, format!("ConfigMap {name} exists"))
                }
                None => Condition::new(
                    "ConfigMapPresent",
                    false,
                    format!("ConfigMap {name} is missing"),
                ),
            },
            if installed {
                Condition::new(
                    "Installed",
                    true,
                    format!("ConfigMap {name} has installed=true"),
                )
            } else {
                Condition::new(
                    "Installed",
                    false,
                    format!("ConfigMap {name} is not marked installed"),
                )
            },
        ])
    }

    fn uninstall(mount: Mount) -> Result<Progress, Error> {
        let name = config_map_name(&mount);
        if !F::CLEANS_UP {
            info!("leaving ConfigMap {name} behind on purpose");
            return Ok(Progress::Done);
        }
        // Already gone is fine: uninstall may run repeatedly.
        let deleted = cluster::delete::<ConfigMap>(&mount.target_namespace, &name)?;
        info!("ConfigMap {name}: deleted={deleted}");
        Ok(Progress::Done)
    }
}
