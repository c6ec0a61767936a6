//! The bundled provider modules (`make providers`), built on first use.

use std::{path::PathBuf, process::Command, sync::OnceLock};

use anyhow::{Context, bail};

use crate::repo_root;

/// The shared cargo target directory the tests run from.
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => repo_root().join("target"),
    }
}

/// A directory holding exactly the bundled providers (what an operator's
/// `--providers` points at), built by `scripts/providers.sh` once per process.
pub fn bundled_providers_dir() -> anyhow::Result<PathBuf> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    crate::built_once(&BUILT, build)
}

/// Path of one bundled module, e.g. `bundled_provider("carrier2mount")`.
pub fn bundled_provider(name: &str) -> anyhow::Result<PathBuf> {
    let path = bundled_providers_dir()?.join(format!("{name}.wasm"));
    if !path.is_file() {
        bail!("{} was not built by scripts/providers.sh", path.display());
    }
    Ok(path)
}

/// Where operators started by tests keep compiled modules, so only the
/// first start of a test run compiles.
pub fn module_cache_dir() -> PathBuf {
    target_dir().join("pontoon-module-cache")
}

fn build() -> anyhow::Result<PathBuf> {
    let out = target_dir().join("test-providers");
    let output = Command::new(repo_root().join("scripts/providers.sh"))
        .arg(&out)
        .env("CARGO_TARGET_DIR", target_dir())
        .output()
        .context("cannot run scripts/providers.sh")?;
    if !output.status.success() {
        bail!(
            "building the bundled providers failed ({}):\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(out)
}

/// `providers/template` built as a provider author builds it (release
/// profile for modules, wasm32-wasip2), once per process.
pub fn template_provider() -> anyhow::Result<PathBuf> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    crate::built_once(&BUILT, build_template)
}

fn build_template() -> anyhow::Result<PathBuf> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(cargo)
        .current_dir(repo_root())
        .args([
            "build",
            "--quiet",
            "--locked",
            "--profile",
            "wasm-release",
            "--target",
            "wasm32-wasip2",
            "-p",
            "provider-template",
        ])
        .env("CARGO_TARGET_DIR", target_dir())
        // Flags meant for the host build break wasm.
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .output()
        .context("cannot run cargo")?;
    if !output.status.success() {
        bail!(
            "building providers/template failed ({}):\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(target_dir().join("wasm32-wasip2/wasm-release/provider_template.wasm"))
}
