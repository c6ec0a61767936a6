//! Test provider whose scope asks for `{mount}*` and `{target}-*`: names a
//! mount `web` would share with `web-db-credentials`, a target `web` with
//! `web-db`. The host must refuse it at load, naming both.

use pontoon_provider_sdk::{
    bridge_mount::{Capability, Metadata, NamespaceScope, Verb},
    k8s_openapi::api::core::v1::Secret,
};
use test_provider::Steps;

struct GreedyNames;

impl Steps for GreedyNames {
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
}

test_provider::export!(GreedyNames);
