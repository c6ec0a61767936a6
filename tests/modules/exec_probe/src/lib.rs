//! Test provider for the host's `exec`: `prepare` runs a command in a pod of
//! the target namespace (parameters `{"pod", "container", "command", "stdin"}`)
//! and records stdout, stderr and the exit code in ConfigMap `exec-result`,
//! so a test can check what went through API server, kwok and back.

use pontoon_provider_sdk::{
    bridge_mount::{Capability, Error, Metadata, Mount, NamespaceScope, Progress, Verb},
    cluster,
    k8s_openapi::{
        api::core::v1::{ConfigMap, Pod},
        apimachinery::pkg::apis::meta::v1::ObjectMeta,
    },
};
use serde::Deserialize;
use test_provider::Steps;

struct ExecProbe;

#[derive(Deserialize)]
struct Parameters {
    pod: String,
    container: String,
    command: Vec<String>,
    stdin: Option<String>,
}

impl Steps for ExecProbe {
    fn metadata() -> Metadata {
        Metadata {
            name: "exec-probe".into(),
            version: "0.1.0".into(),
            description: "Test provider: exec into a pod and record the output".into(),
            scope: vec![
                Capability::of::<Pod>(&[Verb::Exec], NamespaceScope::Target),
                Capability::of::<ConfigMap>(&[Verb::Apply], NamespaceScope::Target),
            ],
        }
    }

    fn prepare(mount: Mount) -> Result<Progress, Error> {
        let p: Parameters = mount
            .parse_parameters()?
            .ok_or_else(|| Error::invalid_input("exec-probe needs parameters"))?;
        let command: Vec<&str> = p.command.iter().map(String::as_str).collect();
        let ns = &mount.target_namespace;
        let output = cluster::exec(
            ns,
            &p.pod,
            &p.container,
            &command,
            p.stdin.as_deref().map(str::as_bytes),
        )?;
        let result = ConfigMap {
            metadata: ObjectMeta {
                name: Some("exec-result".into()),
                namespace: Some(ns.clone()),
                ..Default::default()
            },
            data: Some(
                [
                    (
                        "stdout".to_string(),
                        String::from_utf8_lossy(&output.stdout).into_owned(),
                    ),
                    (
                        "stderr".to_string(),
                        String::from_utf8_lossy(&output.stderr).into_owned(),
                    ),
                    ("exitCode".to_string(), output.exit_code.to_string()),
                ]
                .into(),
            ),
            ..Default::default()
        };
        cluster::apply(ns, &result)?;
        Ok(Progress::Done)
    }
}

test_provider::export!(ExecProbe);
