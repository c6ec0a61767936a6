//! The Praxis proxy (crates.io `praxis-proxy`, binary `praxis`), built once
//! per machine by `scripts/praxis.sh` into the per-user cache.
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

/// The `praxis` binary: `PRAXIS_BIN` if set, else the one scripts/praxis.sh
/// built (building it first, about 7 minutes on two cores, if this machine never
/// did; `make test` does that before the tests). Once per process.
pub fn binary() -> anyhow::Result<PathBuf> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT
        .get_or_init(|| find().map_err(|err| format!("{err:#}")))
        .clone()
        .map_err(|message| anyhow!(message))
}

fn find() -> anyhow::Result<PathBuf> {
    if let Some(path) = std::env::var_os("PRAXIS_BIN").filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        if !path.is_file() {
            bail!("PRAXIS_BIN={} does not exist", path.display());
        }
        return Ok(path);
    }
    let script = repo_root().join("scripts/praxis.sh");
    let output = Command::new(&script)
        .output()
        .with_context(|| format!("cannot run {}", script.display()))?;
    if !output.status.success() {
        bail!(
            "scripts/praxis.sh failed ({}):\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let path = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
    if !path.is_file() {
        bail!(
            "scripts/praxis.sh printed {}, which does not exist",
            path.display()
        );
    }
    Ok(path)
}

/// Checks a config with `praxis -t -c FILE` (on the host; it binds nothing).
/// The error carries what praxis said.
pub fn check_config(config: &Path) -> anyhow::Result<()> {
    let praxis = binary()?;
    let output = Command::new(&praxis)
        .arg("-t")
        .arg("-c")
        .arg(config)
        .output()
        .with_context(|| format!("cannot run {}", praxis.display()))?;
    if !output.status.success() {
        bail!(
            "`praxis -t -c {}` failed ({}): {}{}",
            config.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim(),
            String::from_utf8_lossy(&output.stdout).trim()
        );
    }
    Ok(())
}
