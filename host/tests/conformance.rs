//! `pontoon conformance` on the test bed: passes a provider that keeps the
//! contract (the sample test provider, and the bundled carrier2mount against
//! the test bed's Carrier2 stand-in), and fails, naming the check, one that
//! skips its cleanup.

use std::{path::Path, process::Command};

use pontoon_tests::{kubeconfig_path, modules::test_module, providers::bundled_provider};

fn conformance(module: &str) -> anyhow::Result<(bool, String)> {
    conformance_of(&test_module(module)?)
}

fn conformance_of(module: &Path) -> anyhow::Result<(bool, String)> {
    conformance_within(module, 60)
}

/// With `timeout` seconds for each waiting check.
fn conformance_within(module: &Path, timeout: u32) -> anyhow::Result<(bool, String)> {
    let output = Command::new(env!("CARGO_BIN_EXE_pontoon"))
        .args([
            "conformance",
            "--timeout",
            &timeout.to_string(),
            "--provider",
        ])
        .arg(module)
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
    for check in EVERY_CHECK {
        assert!(output.contains(check), "missing `{check}` in:\n{output}");
    }
    assert!(!output.contains("FAIL"), "{output}");
    Ok(())
}

/// Every check, for the sample provider and for carrier2mount alike.
const EVERY_CHECK: &[&str] = &[
    "PASS  validate accepts a well-formed mount",
    "PASS  validate rejects an empty target",
    "PASS  validate rejects an empty container",
    "PASS  target-exists is true for an existing target",
    "PASS  prepare completes",
    "PASS  prepare twice gives the same cluster state",
    "PASS  prepared becomes true",
    "PASS  install completes",
    "PASS  install twice is harmless",
    "PASS  ready reports every condition true after install",
    "PASS  uninstall completes",
    "PASS  uninstall leaves nothing the provider created",
    "PASS  uninstall leaves the target as it was (image, command, args, labels)",
    "PASS  uninstall restores the target exactly (whole pod template; live pods' containers are the template's)",
    "PASS  uninstall twice is harmless",
    "PASS  uninstall in the middle of install restores the target (prepare, one install call, uninstall)",
    "PASS  target-exists is false after the target is deleted",
];

#[test]
fn the_bundled_carrier2mount_passes() -> anyhow::Result<()> {
    let (success, output) = conformance_of(&bundled_provider("carrier2mount")?)?;
    assert!(success, "conformance of carrier2mount failed:\n{output}");
    for check in EVERY_CHECK {
        assert!(output.contains(check), "missing `{check}` in:\n{output}");
    }
    // The StatefulSet and bare-Pod targets run too.
    for target in ["StatefulSet", "Pod"] {
        for check in [
            "prepare completes",
            "install completes",
            "ready reports every condition true after install",
            "uninstall leaves nothing the provider created",
            "uninstall restores the target exactly (whole pod template; live pods' containers are the template's)",
            "target-exists is false after the target is deleted",
        ] {
            let line = format!("PASS  {target} target: {check}");
            assert!(output.contains(&line), "missing `{line}` in:\n{output}");
        }
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

#[test]
fn checks_that_cannot_run_are_skipped_not_dropped() -> anyhow::Result<()> {
    // Its prepare fails (it wants parameters no conformance mount has); its
    // target-exists stays true, a check that waits: a short timeout.
    let (success, output) = conformance_within(&test_module("out_of_scope")?, 5)?;
    assert!(!success, "{output}");
    assert!(output.contains("FAIL  prepare completes"), "{output}");
    assert!(
        output.contains(
            "SKIP  prepare twice gives the same cluster state: `prepare completes` failed"
        ),
        "{output}"
    );
    assert!(
        output.contains("SKIP  install completes: `prepare completes` failed"),
        "{output}"
    );
    // Every check is there, run or not: the total never shrinks.
    for check in EVERY_CHECK {
        let name = &check[6..];
        assert!(
            ["PASS  ", "FAIL  ", "SKIP  "]
                .iter()
                .any(|status| output.contains(&format!("{status}{name}"))),
            "`{name}` missing from:\n{output}"
        );
    }
    let summary = output
        .lines()
        .find(|l| l.ends_with(" skipped"))
        .unwrap_or_default();
    let counted: usize = summary
        .split(", ")
        .filter_map(|part| part.split_whitespace().next()?.parse::<usize>().ok())
        .sum();
    let listed = output
        .lines()
        .filter(|l| {
            ["PASS  ", "FAIL  ", "SKIP  "]
                .iter()
                .any(|s| l.starts_with(s))
        })
        .count();
    assert_eq!(counted, listed, "{summary}\n{output}");
    Ok(())
}

#[test]
fn the_provider_template_passes_as_it_is_and_stays_small() -> anyhow::Result<()> {
    let module = pontoon_tests::providers::template_provider()?;
    let (success, output) = conformance_of(&module)?;
    assert!(
        success,
        "conformance of providers/template failed:\n{output}"
    );
    assert!(output.contains("0 failed, 0 skipped"), "{output}");
    // The size the guide promises (docs/writing-a-provider.md).
    let size = std::fs::metadata(&module)?.len();
    assert!(size <= 300 * 1024, "provider_template.wasm is {size} bytes");
    Ok(())
}
