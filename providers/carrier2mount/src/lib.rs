//! carrier2mount: Pontoon's bundled bridge-mount provider, Gefyra's
//! `carrier2mount` as a WebAssembly component.
//!
//! `prepare` copies the target workload into a shadow (`<name>-gefyra`, every
//! label value suffixed `-gefyra`, pods labelled with a duplication id) with a
//! Service in front of it (`<name>-<container>-gefyra-svc`) and, for a
//! Deployment scaled by an HPA, a copy of the HPA. `install` saves each
//! original pod's container (image, command, args) in the restore ConfigMap,
//! then swaps its image for Carrier2's and, once Carrier2 runs, writes its
//! config (every container port proxied to the shadow Service) by exec.
//! `uninstall` deletes the shadow and puts the originals back.
//!
//! The module's scope allows the restore ConfigMap by its default name,
//! `gefyra-carrier2-restore-configmap`, only: an operator configured with
//! another name is refused by `validate`.
//!
//! Pure logic lives in the modules by concept, with unit tests beside it
//! (`cargo test -p carrier2mount` runs them natively); the steps call the
//! host only from `api`, `prepare`, `install`, `ready`, `uninstall` and
//! `restore::Store`.

// Natively (unit tests) nothing exports the steps, so the code only they
// reach looks dead; the component build checks it.
#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]

mod api;
pub mod carrier_config;
mod configured;
mod install;
mod mark;
pub mod names;
mod original;
mod pods;
mod prepare;
pub mod probes;
mod put_back;
mod ready;
mod restore;
mod scripts;
mod selector;
mod shadow;
mod tls;
mod uninstall;
mod workload;

use pontoon_provider_sdk::{
    bridge_mount::{
        Capability, Condition, Error, Guest, Metadata, Mount, NamespaceScope, Progress, Verb,
    },
    info,
    k8s_openapi::Resource as _,
    k8s_openapi::api::{
        apps::v1::{Deployment, StatefulSet},
        autoscaling::v2::HorizontalPodAutoscaler,
        core::v1::{ConfigMap, PersistentVolumeClaim, Pod, Secret, Service},
    },
};

use crate::api::Ctx;

pub use restore::{CONFIG_MAP_PREFIX, LEGACY_CONFIG_MAP};

struct Carrier2Mount;

/// Exactly what the steps use: the target namespace's workloads, pods,
/// Services, HPAs, a shadow StatefulSet's claims and (for TLS) Secrets; in
/// the operator namespace the restore ConfigMap and nothing else.
pub fn scope() -> Vec<Capability> {
    use NamespaceScope::{Operator, Target};
    use Verb::*;
    vec![
        Capability::new(
            "apps",
            &[Deployment::KIND, StatefulSet::KIND],
            &[Get, Apply, Patch, Delete],
            Target,
        ),
        Capability::of::<Pod>(&[Get, List, Apply, Patch, Delete, Exec], Target),
        Capability::of::<Service>(&[Get, Apply, Delete], Target),
        Capability::of::<HorizontalPodAutoscaler>(&[List, Apply, Delete], Target),
        Capability::of::<Secret>(&[Get], Target),
        // A shadow StatefulSet's claims: checked before it is made, and
        // deleted (those marked as the mount's) with it.
        Capability::of::<PersistentVolumeClaim>(&[List, Delete], Target),
        // The mount's own restore ConfigMap ({mount}: its uid), and Gefyra's
        // shared one, where earlier versions wrote: read and emptied.
        Capability::of::<ConfigMap>(&[Get, Create, Patch, Delete], Operator)
            .named(&["gefyra-carrier2-restore-{mount}"]),
        Capability::of::<ConfigMap>(&[Get, Patch, Delete], Operator).named(&[LEGACY_CONFIG_MAP]),
    ]
}

impl Guest for Carrier2Mount {
    fn metadata() -> Metadata {
        Metadata {
            name: "carrier2mount".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            description: "Shadow copy of the target workload, Carrier2 in its original pods \
                          (Gefyra's carrier2mount)"
                .into(),
            scope: scope(),
        }
    }

    fn validate(mount: Mount) -> Result<(), Error> {
        prepare::validate(&Ctx::new(&mount)?)
    }

    fn prepare(mount: Mount) -> Result<Progress, Error> {
        prepare::prepare(&Ctx::new(&mount)?)
    }

    fn prepared(mount: Mount) -> Result<bool, Error> {
        prepare::prepared(&Ctx::new(&mount)?)
    }

    fn install(mount: Mount) -> Result<Progress, Error> {
        install::install(&Ctx::new(&mount)?)
    }

    fn ready(mount: Mount) -> Result<Vec<Condition>, Error> {
        ready::ready(&Ctx::new(&mount)?)
    }

    fn uninstall(mount: Mount) -> Result<Progress, Error> {
        match Ctx::new(&mount) {
            Ok(ctx) => uninstall::uninstall(&ctx),
            // Nothing can have been made for a mount that never validated.
            Err(Error::InvalidInput(why)) => {
                info!("nothing to uninstall for mount {}: {why}", mount.name);
                Ok(Progress::Done)
            }
            Err(err) => Err(err),
        }
    }

    fn target_exists(mount: Mount) -> Result<bool, Error> {
        let target = mount.parsed_target()?;
        let ctx = Ctx {
            mount: &mount,
            target,
        };
        Ok(ctx.workload()?.is_some())
    }
}

// Only the component exports it: a native build (unit tests) would have to
// link symbols named after WIT functions, which native linkers refuse.
#[cfg(target_arch = "wasm32")]
pontoon_provider_sdk::export_bridge_mount!(Carrier2Mount);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scope_names_the_restore_config_maps_only_in_the_operator_namespace() {
        let scope = scope();
        let operator: Vec<&Capability> = scope
            .iter()
            .filter(|c| matches!(c.namespace, NamespaceScope::Operator))
            .collect();
        assert_eq!(operator.len(), 2);
        assert!(operator.iter().all(|c| c.kinds == ["ConfigMap"]));
        assert_eq!(
            operator[0].names,
            [format!("{CONFIG_MAP_PREFIX}{{mount}}")],
            "the mount's own, by its uid"
        );
        assert_eq!(operator[1].names, [LEGACY_CONFIG_MAP]);
        assert!(
            !operator[1].verbs.iter().any(|v| matches!(v, Verb::Create)),
            "the shared one is never made again"
        );
        let secrets = scope.iter().find(|c| c.kinds == ["Secret"]).unwrap();
        assert!(matches!(secrets.verbs.as_slice(), [Verb::Get]));
        assert!(
            scope
                .iter()
                .any(|c| c.kinds == ["Pod"] && c.verbs.contains(&Verb::Exec))
        );
    }
}
