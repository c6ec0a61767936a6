//! Test provider whose scope asks for `{mount}*` and `{target}-*`: names a
//! mount `web` would share with `web-db-credentials`, a target `web` with
//! `web-db`. The host must refuse it at load, naming both.

use pontoon_provider_sdk::{
    bridge_mount::{
        Capability, Condition, Error, Guest, Metadata, Mount, NamespaceScope, Progress, Verb,
    },
    k8s_openapi::api::core::v1::Secret,
};

struct GreedyNames;

impl Guest for GreedyNames {
    fn metadata() -> Metadata {
        Metadata {
            name: "greedy-names".into(),
            version: "0.1.0".into(),
            description: "Test provider: scope names a placeholder followed by `*`".into(),
            scope: vec![
                Capability::of::<Secret>(&[Verb::Get], NamespaceScope::Target)
                    .named(&["{mount}*", "{target}-*"]),
            ],
        }
    }

    fn validate(_: Mount) -> Result<(), Error> {
        Ok(())
    }

    fn prepare(_: Mount) -> Result<Progress, Error> {
        Ok(Progress::Done)
    }

    fn prepared(_: Mount) -> Result<bool, Error> {
        Ok(true)
    }

    fn install(_: Mount) -> Result<Progress, Error> {
        Ok(Progress::Done)
    }

    fn ready(_: Mount) -> Result<Vec<Condition>, Error> {
        Ok(Vec::new())
    }

    fn uninstall(_: Mount) -> Result<Progress, Error> {
        Ok(Progress::Done)
    }

    fn target_exists(_: Mount) -> Result<bool, Error> {
        Ok(true)
    }
}

pontoon_provider_sdk::export_bridge_mount!(GreedyNames);
