//! `pontoon conformance` on the test bed: passes a provider that keeps the
//! contract (the sample test provider, labelmount, the provider template, and
//! the bundled carrier2mount against the test bed's Carrier2 stand-in),
//! skips the kinds a provider declines, and fails each deliberately broken
//! provider (labelmount's broken copies, one that skips its cleanup) naming
//! the check and what is wrong. Connection providers too: the bundled
//! tunnel passes, a sloppy one fails naming what it breaks.

mod support;

use std::{path::Path, process::Command, sync::Arc, time::Duration};

use pontoon::conformance::{self, TargetKind};
use pontoon_tests::{kubeconfig_path, modules::test_module, providers::bundled_provider};
use support::carrier2::Carrier2Config;

fn conformance(module: &str) -> anyhow::Result<(bool, String)> {
    conformance_of(&test_module(module)?)
}

fn conformance_of(module: &Path) -> anyhow::Result<(bool, String)> {
    conformance_within(module, 60)
}

/// With `timeout` seconds for each waiting check.
fn conformance_within(module: &Path, timeout: u32) -> anyhow::Result<(bool, String)> {
    conformance_with(module, timeout, &[])
}

/// With `timeout` seconds for each waiting check and more arguments.
fn conformance_with(module: &Path, timeout: u32, more: &[&str]) -> anyhow::Result<(bool, String)> {
    let output = Command::new(env!("CARGO_BIN_EXE_pontoon"))
        .args([
            "conformance",
            "--timeout",
            &timeout.to_string(),
            "--provider",
        ])
        .arg(module)
        .args(more)
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
    bridges_skipped_only(&output);
    assert!(!output.contains("FAIL"), "{output}");
    Ok(())
}

/// Every check, for the sample provider and for carrier2mount alike.
const EVERY_CHECK: &[&str] = &[
    "PASS  validate accepts a well-formed mount",
    "PASS  validate rejects an empty target",
    "PASS  validate rejects an empty container",
    "PASS  target-exists is true for an existing target",
    "PASS  prepared is false before prepare",
    "PASS  prepare completes",
    "PASS  prepare twice gives the same cluster state",
    "PASS  prepared becomes true",
    "PASS  ready is not all true before install",
    "PASS  install completes",
    "PASS  install twice is harmless",
    "PASS  ready reports every condition true after install",
    "PASS  ready is true because install did something (a write or an exec)",
    "PASS  uninstall completes",
    "PASS  uninstall leaves nothing the provider created",
    "PASS  uninstall leaves the target as it was (image, command, args, labels)",
    "PASS  uninstall restores the target exactly (whole pod template; live pods' containers are the template's)",
    "PASS  uninstall puts back every object the provider wrote (created: gone; patched, applied, deleted: labels, annotations, spec as before)",
    "PASS  prepared and ready turn false after uninstall",
    "PASS  uninstall twice is harmless",
    "PASS  uninstall in the middle of install restores the target (prepare, one install call, uninstall)",
    "PASS  target-exists is false after the target is deleted",
];

/// What a provider keeps for GefyraBridges (the Deployment round).
const BRIDGE_CHECKS: &[&str] = &[
    "install with a bridge does work for it (a write or an exec)",
    "install after a pod was replaced completes and ready reports every condition true",
    "install without the bridge does work to take it out (a write or an exec)",
];

/// A module that does not import `bridges` has the bridge checks skipped,
/// saying so; nothing else is skipped.
fn bridges_skipped_only(output: &str) {
    for check in BRIDGE_CHECKS {
        let line = format!(
            "SKIP  {check}: the module does not import pontoon:provider/bridges@0.1.0: it renders no GefyraBridges"
        );
        assert!(output.contains(&line), "missing `{line}` in:\n{output}");
    }
    assert!(output.contains("0 failed, 3 skipped"), "{output}");
}

#[test]
fn the_bundled_carrier2mount_passes() -> anyhow::Result<()> {
    let (success, output) = conformance_of(&bundled_provider("carrier2mount")?)?;
    assert!(success, "conformance of carrier2mount failed:\n{output}");
    for check in EVERY_CHECK {
        assert!(output.contains(check), "missing `{check}` in:\n{output}");
    }
    for check in BRIDGE_CHECKS {
        let line = format!("PASS  {check}");
        assert!(output.contains(&line), "missing `{line}` in:\n{output}");
    }
    // The StatefulSet and bare-Pod targets run too.
    for target in ["StatefulSet", "Pod"] {
        for check in [
            "prepare completes",
            "install completes",
            "ready reports every condition true after install",
            "uninstall leaves nothing the provider created",
            "uninstall restores the target exactly (whole pod template; live pods' containers are the template's)",
            "uninstall puts back every object the provider wrote (created: gone; patched, applied, deleted: labels, annotations, spec as before)",
            "prepared and ready turn false after uninstall",
            "target-exists is false after the target is deleted",
        ] {
            let line = format!("PASS  {target} target: {check}");
            assert!(output.contains(&line), "missing `{line}` in:\n{output}");
        }
    }
    assert!(!output.contains("FAIL"), "{output}");
    Ok(())
}

/// carrier2mount's own read-back: beyond what the generic suite sees, the
/// sample bridge is in every pod's Carrier2 config, in the pod that
/// replaced a deleted one, and gone once no longer listed.
#[tokio::test]
async fn carrier2mount_keeps_the_bridge_in_every_pods_carrier2_config() -> anyhow::Result<()> {
    let client = pontoon_tests::client().await?;
    let options = conformance::Options {
        timeout: Duration::from_secs(60),
        keep_namespaces: false,
        carrier_image: "quay.io/gefyra/carrier2:latest".into(),
        kinds: Some(vec![TargetKind::Deployment]),
        bridge_read_back: Some(Arc::new(Carrier2Config)),
    };
    let provider = bundled_provider("carrier2mount")?;
    let checks = conformance::run(client, &provider, options, |_| {}).await?;
    let shown: Vec<String> = checks.iter().map(ToString::to_string).collect();
    let shown = shown.join("\n");
    for check in [
        "every pod holds the bridge after install (its endpoint on its port)",
        "the pod that replaced a deleted one holds the bridge",
        "no pod holds the bridge after install without it",
    ]
    .iter()
    .chain(BRIDGE_CHECKS)
    {
        let line = format!("PASS  {check}");
        assert!(shown.contains(&line), "missing `{line}` in:\n{shown}");
    }
    assert!(!checks.iter().any(|c| c.failed()), "{shown}");
    Ok(())
}

#[test]
fn a_provider_that_skips_cleanup_fails_naming_the_check() -> anyhow::Result<()> {
    // Every check that waits for its ConfigMap to go waits in vain: a short timeout.
    let (success, output) = conformance_within(&test_module("skips_cleanup")?, 10)?;
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
    bridges_skipped_only(&output);
    // The size the guide promises (docs/writing-a-provider.md).
    let size = std::fs::metadata(&module)?.len();
    assert!(size <= 300 * 1024, "provider_template.wasm is {size} bytes");
    Ok(())
}

/// The first line of `output` that fails `check` (any round), if any.
fn failing<'a>(output: &'a str, check: &str) -> Option<&'a str> {
    output.lines().find(|l| {
        l.strip_prefix("FAIL  ").is_some_and(|rest| {
            let rest = rest
                .strip_prefix("StatefulSet target: ")
                .or_else(|| rest.strip_prefix("Pod target: "))
                .unwrap_or(rest);
            rest.starts_with(check)
        })
    })
}

/// Runs conformance of a broken copy of labelmount: it must fail, with
/// each `(check, words)` failing and its line naming each of `words`.
fn fails_naming(module: &str, timeout: u32, expected: &[(&str, &[&str])]) -> anyhow::Result<()> {
    let (success, output) = conformance_within(&test_module(module)?, timeout)?;
    assert!(!success, "conformance passed {module}:\n{output}");
    for (check, words) in expected {
        let line = failing(&output, check)
            .unwrap_or_else(|| panic!("{module}: `{check}` did not fail in:\n{output}"));
        for word in *words {
            assert!(
                line.contains(word),
                "{module}: `{word}` missing from: {line}"
            );
        }
    }
    Ok(())
}

#[test]
fn labelmount_which_labels_the_pods_and_takes_the_labels_off_passes() -> anyhow::Result<()> {
    let (success, output) = conformance("labelmount")?;
    assert!(success, "conformance of labelmount failed:\n{output}");
    for check in EVERY_CHECK {
        assert!(output.contains(check), "missing `{check}` in:\n{output}");
    }
    bridges_skipped_only(&output);
    Ok(())
}

#[test]
fn uninstall_that_leaves_a_label_on_the_pods_fails_naming_pod_and_label() -> anyhow::Result<()> {
    fails_naming(
        "broken_leaves_label",
        8,
        &[(
            "uninstall puts back every object the provider wrote",
            &[
                "Pod conformance-",
                "(patched)",
                "/metadata/labels/labelmount.pontoon.dev/mount",
            ],
        )],
    )
}

#[test]
fn uninstall_that_leaves_an_annotation_fails_naming_it() -> anyhow::Result<()> {
    fails_naming(
        "broken_leaves_annotation",
        8,
        &[(
            "uninstall puts back every object the provider wrote",
            &[
                "Pod conformance-",
                "/metadata/annotations/labelmount.pontoon.dev/note",
            ],
        )],
    )
}

#[test]
fn ready_without_install_fails_before_install_after_install_and_after_uninstall()
-> anyhow::Result<()> {
    fails_naming(
        "broken_ready_without_install",
        8,
        &[
            (
                "ready is not all true before install",
                &["every condition is true before install", "PodsLabelled"],
            ),
            (
                "ready is true because install did something (a write or an exec)",
                &["install wrote nothing and ran nothing on the cluster"],
            ),
            (
                "prepared and ready turn false after uninstall",
                &["after uninstall: ready reports every condition true"],
            ),
        ],
    )
}

#[test]
fn prepare_that_is_not_idempotent_fails_naming_what_changed() -> anyhow::Result<()> {
    fails_naming(
        "broken_prepare_not_idempotent",
        20,
        &[(
            "prepare twice gives the same cluster state",
            &["ConfigMap", "-labelmount changed"],
        )],
    )
}

#[test]
fn install_that_creates_an_object_each_call_fails_naming_it() -> anyhow::Result<()> {
    fails_naming(
        "broken_install_duplicates",
        20,
        &[(
            "install twice is harmless",
            &["ConfigMap", "-extra-1 appeared"],
        )],
    )
}

#[test]
fn target_exists_that_is_always_true_fails() -> anyhow::Result<()> {
    fails_naming(
        "broken_target_always_exists",
        5,
        &[(
            "target-exists is false after the target is deleted",
            &["target-exists was still false"],
        )],
    )
}

#[test]
fn uninstall_that_fails_when_called_twice_fails_naming_its_error() -> anyhow::Result<()> {
    fails_naming(
        "broken_uninstall_twice_fails",
        20,
        &[(
            "uninstall twice is harmless",
            &["the ConfigMap is already gone"],
        )],
    )
}

#[test]
fn a_scope_too_narrow_fails_install_naming_the_verb_and_kind() -> anyhow::Result<()> {
    fails_naming(
        "broken_scope_too_narrow",
        20,
        &[(
            "install completes",
            &[
                "denied: patch Pod",
                "api-group `\"\"` (core)",
                "verb `patch`",
            ],
        )],
    )
}

#[test]
fn kinds_a_provider_declines_are_skipped_unless_asked_for() -> anyhow::Result<()> {
    let module = test_module("labelmount_deployments_only")?;
    let (success, output) = conformance_of(&module)?;
    assert!(
        success,
        "declining kinds is the provider's choice:\n{output}"
    );
    assert!(
        output.contains("PASS  uninstall puts back every object"),
        "{output}"
    );
    for kind in ["StatefulSet", "Pod"] {
        let line = format!(
            "SKIP  {kind} target: prepare completes: the provider does not serve this kind: \
             labelmount-deployments-only serves Deployment targets only; a {kind} is not one"
        );
        assert!(output.contains(&line), "missing `{line}` in:\n{output}");
        assert!(
            !output.contains(&format!("PASS  {kind} target:")),
            "{output}"
        );
    }

    // Asked for with --kinds, a declined kind is a failure.
    let (success, output) = conformance_with(&module, 20, &["--kinds", "deployment,pod"])?;
    assert!(!success, "{output}");
    let line = failing(&output, "validate accepts a well-formed mount")
        .unwrap_or_else(|| panic!("no failing validate in:\n{output}"));
    assert!(
        line.starts_with("FAIL  Pod target: ") && line.contains("which --kinds asks to check"),
        "{line}"
    );
    assert!(
        output.contains(
            "SKIP  StatefulSet target: prepare completes: StatefulSet targets not selected (--kinds)"
        ),
        "{output}"
    );
    Ok(())
}

/// Every check of a connection provider, in the order they run.
const CONNECTION_CHECKS: &[&str] = &[
    "metadata names the module and asks for the operator namespace only",
    "connect for a new client gives each requested port an endpoint (host:port, distinct)",
    "connect again with the same ports keeps every endpoint",
    "connect without one of the ports keeps the other's endpoint",
    "everything connect wrote is in the operator namespace and the client's (labelled pontoon.dev/connection-client: <id> or named with the id; pods labelled)",
    "session answers for a connected client",
    "session of a client never connected is gone, not live",
    "clients lists a connected client's id",
    "disconnect completes (true within the timeout)",
    "disconnect leaves nothing connect wrote",
    "clients no longer lists a disconnected client",
    "session of a disconnected client is gone, not live",
    "disconnect again is true",
    "disconnect leaves another client's objects alone (still there, still listed)",
    "disconnect of a client id never connected is harmless (true, never an error)",
];

#[test]
fn the_bundled_tunnel_passes_as_a_connection_provider() -> anyhow::Result<()> {
    let (success, output) = conformance_of(&bundled_provider("tunnel")?)?;
    assert!(success, "conformance of tunnel failed:\n{output}");
    let lines: Vec<&str> = output
        .lines()
        .filter(|l| {
            ["PASS  ", "FAIL  ", "SKIP  "]
                .iter()
                .any(|s| l.starts_with(s))
        })
        .collect();
    let expected: Vec<String> = CONNECTION_CHECKS
        .iter()
        .map(|check| format!("PASS  {check}"))
        .collect();
    assert_eq!(lines, expected, "{output}");
    assert!(
        output.contains("15 passed, 0 failed, 0 skipped"),
        "{output}"
    );
    Ok(())
}

#[test]
fn a_connection_provider_that_moves_endpoints_and_leaves_objects_fails_naming_them()
-> anyhow::Result<()> {
    // Its leftovers never go: the checks that wait for them wait in vain.
    let (success, output) = conformance_within(&test_module("sloppy_connection")?, 5)?;
    assert!(!success, "conformance passed sloppy_connection:\n{output}");
    let expected: &[(&str, &[&str])] = &[
        (
            "connect without one of the ports keeps the other's endpoint",
            &[
                "bridge conformance/api",
                "port 8080 moved from",
                ":10001 to ",
                ":10000",
            ],
        ),
        (
            "disconnect leaves nothing connect wrote",
            &[
                "ConfigMap conformance-",
                "/sloppy-",
                "created by the provider and still there",
            ],
        ),
        (
            "clients no longer lists a disconnected client",
            &["clients still lists"],
        ),
    ];
    for (check, words) in expected {
        let line = failing(&output, check)
            .unwrap_or_else(|| panic!("`{check}` did not fail in:\n{output}"));
        for word in *words {
            assert!(line.contains(word), "`{word}` missing from: {line}");
        }
    }
    // What it keeps, it passes: every other check is there and passes.
    for check in CONNECTION_CHECKS {
        if !expected.iter().any(|(failed, _)| failed == check) {
            let line = format!("PASS  {check}");
            assert!(output.contains(&line), "missing `{line}` in:\n{output}");
        }
    }
    assert!(
        output.contains("12 passed, 3 failed, 0 skipped"),
        "{output}"
    );
    Ok(())
}
