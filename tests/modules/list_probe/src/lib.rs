//! Test provider for the host's `list`: `prepare` lists the ConfigMaps of
//! the target namespace (parameter `{"selector": "..."}`, a label selector)
//! and records how many came back, and how many distinct names, in
//! ConfigMap `list-result`; a refused list fails the step with the host's
//! message. A test so sees the host follow every page, and stop at its cap.

use std::collections::BTreeSet;

use pontoon_provider_sdk::{
    bridge_mount::{Capability, Error, Metadata, Mount, NamespaceScope, Progress, Verb},
    cluster,
    k8s_openapi::{api::core::v1::ConfigMap, apimachinery::pkg::apis::meta::v1::ObjectMeta},
};
use serde::Deserialize;
use test_provider::Steps;

struct ListProbe;

#[derive(Deserialize)]
struct Parameters {
    #[serde(default)]
    selector: String,
}

impl Steps for ListProbe {
    fn metadata() -> Metadata {
        Metadata {
            name: "list-probe".into(),
            version: "0.1.0".into(),
            description: "Test provider: list ConfigMaps and record how many".into(),
            scope: vec![Capability::of::<ConfigMap>(
                &[Verb::List, Verb::Apply],
                NamespaceScope::Target,
            )],
        }
    }

    fn prepare(mount: Mount) -> Result<Progress, Error> {
        let p: Parameters = mount.parse_parameters()?.unwrap_or(Parameters {
            selector: String::new(),
        });
        let ns = &mount.target_namespace;
        let listed: Vec<ConfigMap> = cluster::list(ns, &p.selector)?;
        let names: BTreeSet<&str> = listed
            .iter()
            .filter_map(|c| c.metadata.name.as_deref())
            .collect();
        let result = ConfigMap {
            metadata: ObjectMeta {
                name: Some("list-result".into()),
                namespace: Some(ns.clone()),
                ..Default::default()
            },
            data: Some(
                [
                    ("count".to_string(), listed.len().to_string()),
                    ("distinct".to_string(), names.len().to_string()),
                ]
                .into(),
            ),
            ..Default::default()
        };
        cluster::apply(ns, &result)?;
        Ok(Progress::Done)
    }
}

test_provider::export!(ListProbe);
