//! `make gateway-conformance` files its report as Gateway API's
//! `conformance/reports/` keep them: `publish_report` of
//! scripts/gateway-conformance.sh, run on sample reports the way the suite
//! writes them.

use std::{path::Path, process::Command};

use pontoon_tests::repo_root;

fn report(version: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1
date: \"2026-12-06T22:23:39Z\"
gatewayAPIChannel: standard
gatewayAPIVersion: v1.6.3
implementation:
  contact:
  - https://github.com/pontoon-dev/pontoon/issues/new
  organization: pontoon
  project: pontoon
  url: https://github.com/pontoon-dev/pontoon
  version: {version}
kind: ConformanceReport
mode: default
profiles: []
"
    )
}

/// Sources the script and files `text` into `dir`, which it makes.
fn publish(text: &str, dir: &Path) -> anyhow::Result<()> {
    let sample =
        std::env::temp_dir().join(format!("conformance-sample-{}.yaml", std::process::id()));
    std::fs::write(&sample, text)?;
    let script = repo_root().join("scripts/gateway-conformance.sh");
    let status = Command::new("bash")
        .arg("-c")
        // Sourced, the script defines its functions and returns: $0 must
        // not be the script, or it would run the whole suite.
        .arg(r#"source "$1" && publish_report "$2" "$3""#)
        .arg("bash")
        .arg(&script)
        .arg(&sample)
        .arg(dir)
        .status()?;
    let _ = std::fs::remove_file(&sample);
    anyhow::ensure!(status.success(), "publish_report failed");
    Ok(())
}

fn files(dir: &Path) -> anyhow::Result<Vec<String>> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        names.push(entry?.file_name().to_string_lossy().into_owned());
    }
    names.sort();
    Ok(names)
}

#[test]
fn a_report_is_filed_unmodified_under_gateway_apis_name_with_a_readme() -> anyhow::Result<()> {
    let root = std::env::temp_dir().join(format!("conformance-report-{}", std::process::id()));
    let dir = root.join("v1.6/pontoon-pontoon");

    publish(&report("v0.1.0+aaaaaaa"), &dir)?;
    // A later commit of the same release replaces its report.
    let later = report("v0.1.0+bbbbbbb");
    publish(&later, &dir)?;
    assert_eq!(
        files(&dir)?,
        ["README.md", "standard-v0.1.0+bbbbbbb-default-report.yaml"]
    );
    let filed = std::fs::read_to_string(dir.join("standard-v0.1.0+bbbbbbb-default-report.yaml"))?;
    assert_eq!(filed, later, "the report is filed as the suite wrote it");

    // Another release keeps its own.
    publish(&report("v0.2.0+ccccccc"), &dir)?;
    assert_eq!(
        files(&dir)?,
        [
            "README.md",
            "standard-v0.1.0+bbbbbbb-default-report.yaml",
            "standard-v0.2.0+ccccccc-default-report.yaml"
        ]
    );
    let readme = std::fs::read_to_string(dir.join("README.md"))?;
    for row in [
        "|API channel|Implementation version|Mode|Report|",
        "|standard|v0.1.0+bbbbbbb|default|[v0.1.0+bbbbbbb report](./standard-v0.1.0+bbbbbbb-default-report.yaml)|",
        "|standard|v0.2.0+ccccccc|default|[v0.2.0+ccccccc report](./standard-v0.2.0+ccccccc-default-report.yaml)|",
        "## Reproduce",
        "make gateway-conformance",
    ] {
        assert!(readme.contains(row), "README lacks {row}:\n{readme}");
    }
    let _ = std::fs::remove_dir_all(&root);
    Ok(())
}
