//! `pontoon conformance` on the test bed: passes a provider that keeps the
//! contract, and fails, naming the check, one that skips its cleanup.

use std::process::Command;

use pontoon_tests::{kubeconfig_path, modules::test_module};

fn conformance(module: &str) -> anyhow::Result<(bool, String)> {
    let output = Command::new(env!("CARGO_BIN_EXE_pontoon"))
        .args(["conformance", "--timeout", "60", "--provider"])
        .arg(test_module(module)?)
        .arg("--kubeconfig")
        .arg(kubeconfig_path())
        .output()?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    Ok((
        output.status.success(),
        format!("{stdout}\n--- stderr ---\n{stderr}"),
    ))
}

#[test]
fn a_provider_that_keeps_the_contract_passes() -> anyhow::Result<()> {
    let (success, output) = conformance("sample_provider")?;
    assert!(success, "conformance failed:\n{output}");
    for check in [
        "PASS  validate rejects an empty target",
        "PASS  validate rejects an empty container",
        "PASS  prepare twice gives the same cluster state",
        "PASS  prepared becomes true",
        "PASS  install twice is harmless",
        "PASS  ready reports every condition true after install",
        "PASS  uninstall leaves nothing the provider created",
        "PASS  uninstall leaves the target as it was (image, command, args, labels)",
        "PASS  target-exists is false after the target is deleted",
    ] {
        assert!(output.contains(check), "missing `{check}` in:\n{output}");
    }
    assert!(!output.contains("FAIL"), "{output}");
    Ok(())
}

#[test]
fn a_provider_that_skips_cleanup_fails_naming_the_check() -> anyhow::Result<()> {
    let (success, output) = conformance("skips_cleanup")?;
    assert!(
        !success,
        "conformance passed a provider that leaves its ConfigMap behind:\n{output}"
    );
    let line = output
        .lines()
        .find(|l| l.starts_with("FAIL  uninstall leaves nothing the provider created"))
        .unwrap_or_else(|| panic!("no failing cleanup check in:\n{output}"));
    assert!(
        line.contains("ConfigMap") && line.contains("conformance-sample"),
        "names what was left: {line}"
    );
    Ok(())
}
