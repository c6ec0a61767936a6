//! `pontoon conformance`: runs the provider contract against a real cluster
//! and says, check by check, whether a bridge-mount provider keeps it (a
//! connection provider: see `connection`).
//!
//! It works in scratch namespaces with a sample Deployment (two replicas, a
//! container port, an HTTP readiness probe), then a StatefulSet and a bare
//! Pod of the same container (the steps, the cleanup and the exact restore
//! again, with a mount each; a kind the provider declines in `validate` is
//! skipped), and compares what is on the cluster before and after each
//! step: idempotent steps leave the same state, `prepared` and `ready` say
//! false until the work is done and again after uninstall, `uninstall`
//! leaves nothing behind and the target exactly as it was (its whole pod
//! template, and live pods whose containers are the template's), also when
//! it interrupts an install that never finished. The host records every
//! object the provider writes (the plugin runtime's journal), and each must
//! be back as it was, field by field, after uninstall.
//!
//! Rooms: `report` (what a check prints), `fixtures` (the scratch
//! namespaces and sample targets on the cluster), `compare` (pure verdicts
//! on what the cluster shows), `writes` (pure verdicts on what the provider
//! wrote), `suite` (the ordered checks), `waits` (its polling and the
//! cluster state it compares) and `bridge_steps` (GefyraBridges, judged by
//! what install does, and by a provider's own read-back of its pods when
//! its tests hand one in: the suite knows no provider's format); `connection` holds the checks
//! of a connection provider (`wit/connection.wit`), which share the report,
//! the scratch namespaces and the verdicts on what was written.

mod bridge_steps;
mod compare;
mod connection;
mod connection_answers;
mod fixtures;
mod options;
mod read_back;
mod report;
mod snapshot;
mod suite;
mod waits;
mod writes;

use std::{path::Path, sync::Arc};

use anyhow::bail;
use kube::Client;

pub use fixtures::TargetKind;
pub use options::Options;
pub use read_back::{BridgeReadBack, HeldBridge, SAMPLE_BRIDGE, SAMPLE_ENDPOINT, SAMPLE_PORT};
pub use report::Check;

use crate::plugins::{LoadedModule, PluginRuntime};

/// Runs every check; returns them all (the caller decides the exit status).
pub async fn run(
    client: Client,
    provider_path: &Path,
    options: Options,
    report: impl FnMut(&Check) + Send + 'static,
) -> anyhow::Result<Vec<Check>> {
    let runtime = PluginRuntime::new(crate::plugins::Limits::default())?;
    let provider = match runtime.load_file(provider_path).await? {
        LoadedModule::Provider(p) => Arc::new(p),
        LoadedModule::Connection(c) => {
            return connection::run(client, Arc::new(c), &options, Box::new(report)).await;
        }
        LoadedModule::Filter(f) => bail!(
            "{} is a config filter (`{}`), not a bridge-mount or connection provider",
            provider_path.display(),
            f.name()
        ),
    };
    let suffix = fixtures::random_suffix();
    let target_ns = format!("conformance-{suffix}");
    let operator_ns = format!("conformance-{suffix}-operator");
    for ns in [&target_ns, &operator_ns] {
        fixtures::create_namespace(&client, ns).await?;
    }
    let mount = fixtures::sample_mount(&suffix, &target_ns, &operator_ns, &options.carrier_image);
    let mut run = suite::Run::new(
        client.clone(),
        provider,
        mount,
        operator_ns.clone(),
        &options,
        Box::new(report),
    );
    let outcome = run.all().await;
    if !options.keep_namespaces {
        for ns in [&target_ns, &operator_ns] {
            let _ = fixtures::delete_namespace(&client, ns).await;
        }
    }
    outcome?;
    Ok(run.into_checks())
}
