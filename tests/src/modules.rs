//! The test provider modules (`tests/modules`), built on first use.
//!
//! They are a separate cargo workspace for `wasm32-wasip2`; building them
//! here, once per test process, keeps `cargo test` a single command. Parallel
//! test processes are serialised by cargo's own lock on the target directory.

use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::OnceLock,
};

use anyhow::{Context, bail};

use crate::repo_root;

const TARGET: &str = "wasm32-wasip2";

/// The directory holding the modules' `.wasm` files, building them first if
/// this process has not yet.
pub fn test_modules_dir() -> anyhow::Result<PathBuf> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    crate::built_once(&BUILT, build)
}

/// Path of one module, by crate or example name without extension
/// (`sample_provider`; `broken_leaves_label`, an example of `labelmount`).
pub fn test_module(name: &str) -> anyhow::Result<PathBuf> {
    let dir = test_modules_dir()?;
    let file = format!("{name}.wasm");
    let path = dir.join(&file);
    if path.is_file() {
        return Ok(path);
    }
    let example = dir.join("examples").join(&file);
    if !example.is_file() {
        bail!(
            "test module {} does not exist; is `{name}` a crate or an example in tests/modules?",
            path.display()
        );
    }
    Ok(example)
}

fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir).join("test-modules"),
        _ => repo_root().join("target/test-modules"),
    }
}

fn build() -> anyhow::Result<PathBuf> {
    let manifest = repo_root().join("tests/modules/Cargo.toml");
    let target_dir = target_dir();
    // The cargo running the tests, so the same toolchain builds the modules.
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(&cargo)
        // Libraries (the crates that are components), binaries (command
        // components, such as not_a_provider) and examples (the components
        // of crates that hold several, such as labelmount's).
        .args([
            "build",
            "--release",
            "--locked",
            "--lib",
            "--bins",
            "--examples",
        ])
        .args(["--target", TARGET])
        .arg("--manifest-path")
        .arg(&manifest)
        .arg("--target-dir")
        .arg(&target_dir)
        // Flags meant for the host build (coverage, sanitizers) break wasm.
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .output()
        .with_context(|| format!("cannot run {}", Path::new(&cargo).display()))?;
    if !output.status.success() {
        bail!(
            "building the test modules failed ({}; `rustup target add {TARGET}` if the target is missing):\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let dir = target_dir.join(TARGET).join("release");
    if !dir.is_dir() {
        bail!("cargo succeeded but {} does not exist", dir.display());
    }
    Ok(dir)
}
