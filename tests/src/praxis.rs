//! The Gateways' data plane: Pontoon's (`dataplane/`, binary
//! `pontoon-dataplane`, Praxis with Pontoon's filters), built from the
//! checkout by `scripts/dataplane.sh`, as [`binary`]; and stock Praxis
//! (crates.io `praxis-proxy`, binary `praxis`), built once per machine by
//! `scripts/praxis.sh` into the per-user cache, as [`stock_binary`]. Both
//! take the same command line and config.
//!
//! `praxis -c FILE` serves FILE; `praxis -t -c FILE` only checks it (exit
//! status 1 and `invalid configuration: ...` on stderr otherwise). Run as
//! root, it refuses to start unless the config says
//! `insecure_options: { allow_root: true }`. Cluster endpoints in private
//! ranges (pod addresses) need `allow_private_endpoints: true`. The admin
//! listener (`admin.address`) serves `/api/*`; its metrics listener
//! (`admin.metrics_address`) serves `/healthy`, `/ready` and `/metrics`.
//! Start it in a network namespace with [`crate::netns::NetNs::start_praxis`].

use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::OnceLock,
};

use anyhow::{Context, anyhow, bail};

use crate::repo_root;

/// The praxis-proxy release scripts/praxis.sh builds.
pub const VERSION: &str = "0.7.5";

/// The `pontoon-dataplane` binary, what the Gateways run by default:
/// `PONTOON_DATAPLANE_BIN` if set, else the one scripts/dataplane.sh builds
/// from the checkout (the test bed's `up.sh` runs it first). Once per process.
pub fn binary() -> anyhow::Result<PathBuf> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            find("PONTOON_DATAPLANE_BIN", "scripts/dataplane.sh").map_err(|err| format!("{err:#}"))
        })
        .clone()
        .map_err(|message| anyhow!(message))
}

/// The stock `praxis` binary: `PRAXIS_BIN` if set, else the one
/// scripts/praxis.sh built (building it first, about 7 minutes on two cores,
/// if this machine never did; `make test` does that before the tests). Once
/// per process.
pub fn stock_binary() -> anyhow::Result<PathBuf> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT
        .get_or_init(|| find("PRAXIS_BIN", "scripts/praxis.sh").map_err(|err| format!("{err:#}")))
        .clone()
        .map_err(|message| anyhow!(message))
}

/// `$env` if set, else what `script` (which builds the binary) prints.
fn find(env: &str, script: &str) -> anyhow::Result<PathBuf> {
    if let Some(path) = std::env::var_os(env).filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        if !path.is_file() {
            bail!("{env}={} does not exist", path.display());
        }
        return Ok(path);
    }
    let script = repo_root().join(script);
    let output = Command::new(&script)
        .output()
        .with_context(|| format!("cannot run {}", script.display()))?;
    if !output.status.success() {
        bail!(
            "{} failed ({}):\n{}",
            script.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let path = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
    if !path.is_file() {
        bail!(
            "{} printed {}, which does not exist",
            script.display(),
            path.display()
        );
    }
    Ok(path)
}

/// Checks a config with `pontoon-dataplane -t -c FILE` (on the host; it
/// binds nothing), which checks as `praxis -t` does, with Pontoon's filters
/// known. The error carries what it said.
pub fn check_config(config: &Path) -> anyhow::Result<()> {
    check_config_with(&binary()?, config)
}

/// Checks a config with stock `praxis -t -c FILE`.
pub fn check_stock_config(config: &Path) -> anyhow::Result<()> {
    check_config_with(&stock_binary()?, config)
}

fn check_config_with(praxis: &Path, config: &Path) -> anyhow::Result<()> {
    let output = Command::new(praxis)
        .arg("-t")
        .arg("-c")
        .arg(config)
        .output()
        .with_context(|| format!("cannot run {}", praxis.display()))?;
    if !output.status.success() {
        bail!(
            "`{} -t -c {}` failed ({}): {}{}",
            praxis.display(),
            config.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim(),
            String::from_utf8_lossy(&output.stdout).trim()
        );
    }
    Ok(())
}
