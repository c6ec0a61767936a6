//! The CRDs the chart ships are exactly what `pontoon crds` prints, and the
//! API server accepts them.

use std::process::Command;

use pontoon_tests::repo_root;

fn printed() -> anyhow::Result<String> {
    let output = Command::new(env!("CARGO_BIN_EXE_pontoon"))
        .args(["crds", "--set", "gefyra"])
        .output()?;
    anyhow::ensure!(output.status.success(), "pontoon crds failed: {output:?}");
    Ok(String::from_utf8(output.stdout)?)
}

#[test]
fn the_chart_holds_exactly_the_printed_crds() -> anyhow::Result<()> {
    let printed = printed()?;
    let documents: Vec<&str> = printed
        .split("---\n")
        .filter(|d| !d.trim().is_empty())
        .collect();
    assert_eq!(documents.len(), 2, "one document per CRD:\n{printed}");
    let dir = repo_root().join("charts/pontoon/crds");
    let mut names = Vec::new();
    for doc in documents {
        let crd: serde_json::Value = yaml_serde::from_str(doc)?;
        let name = crd["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let committed = std::fs::read_to_string(dir.join(format!("{name}.yaml")))
            .unwrap_or_else(|e| panic!("charts/pontoon/crds/{name}.yaml: {e}"));
        assert_eq!(
            committed, doc,
            "charts/pontoon/crds/{name}.yaml differs from `pontoon crds`; run `make crds`"
        );
        names.push(name);
    }
    names.sort();
    assert_eq!(
        names,
        ["gefyrabridgemounts.gefyra.dev", "gefyrabridges.gefyra.dev"]
    );
    let files = std::fs::read_dir(&dir)?.count();
    assert_eq!(
        files,
        names.len(),
        "no stale CRD files in {}",
        dir.display()
    );
    Ok(())
}
