//! Test provider that calls the cluster outside its scope (ConfigMap get and
//! create in the target namespace only). Both attempts must come back
//! `denied`; the step then fails with "denied: ..." so the host's tests can
//! tell enforcement ("denied: ...") from its absence ("scope was not enforced: ...").

use pontoon_provider_sdk::{
    bridge_mount::{Capability, Error, Metadata, Mount, NamespaceScope, Progress, Verb},
    cluster::{self, ClusterError},
    k8s_openapi::{
        api::core::v1::{ConfigMap, Secret},
        apimachinery::pkg::apis::meta::v1::ObjectMeta,
    },
};
use serde::Deserialize;
use test_provider::Steps;

struct OutOfScope;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SecretParameters {
    secret_namespace: String,
    secret_name: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct EscapeParameters {
    other_namespace: String,
}

fn parameters<T: serde::de::DeserializeOwned>(mount: &Mount) -> Result<T, Error> {
    mount
        .parse_parameters()?
        .ok_or_else(|| Error::invalid_input("out-of-scope needs parameters"))
}

/// Turns the outcome of a call that must be denied into the step's error.
fn expect_denied<T>(call: &str, outcome: Result<T, ClusterError>) -> Error {
    match outcome {
        Err(ClusterError::Denied(message)) => Error::failed(format!("denied: {message}")),
        Ok(_) => Error::failed(format!("scope was not enforced: {call} succeeded")),
        Err(other) => Error::failed(format!(
            "scope was not enforced: {call} failed with {other}"
        )),
    }
}

impl Steps for OutOfScope {
    fn metadata() -> Metadata {
        Metadata {
            name: "out-of-scope".into(),
            version: "0.1.0".into(),
            description: "Test provider: reads a Secret and writes to another namespace".into(),
            scope: vec![Capability::of::<ConfigMap>(
                &[Verb::Get, Verb::Create],
                NamespaceScope::Target,
            )],
        }
    }

    fn prepare(mount: Mount) -> Result<Progress, Error> {
        let p: SecretParameters = parameters(&mount)?;
        let outcome = cluster::get::<Secret>(&p.secret_namespace, &p.secret_name);
        let call = format!("get Secret {}/{}", p.secret_namespace, p.secret_name);
        Err(expect_denied(&call, outcome))
    }

    fn install(mount: Mount) -> Result<Progress, Error> {
        let p: EscapeParameters = parameters(&mount)?;
        let escaped = ConfigMap {
            metadata: ObjectMeta {
                name: Some("escaped".into()),
                namespace: Some(p.other_namespace.clone()),
                ..Default::default()
            },
            ..Default::default()
        };
        let outcome = cluster::create(&p.other_namespace, &escaped);
        let call = format!("create ConfigMap {}/escaped", p.other_namespace);
        Err(expect_denied(&call, outcome))
    }
}

test_provider::export!(OutOfScope);
