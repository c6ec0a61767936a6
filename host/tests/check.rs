//! `pontoon check`: a module looked at offline, as an administrator does
//! before a `helm upgrade` (no cluster: nothing here reads a kubeconfig).

use std::{path::Path, process::Command};

use pontoon_tests::{modules::test_module, providers::bundled_provider, repo_root};

/// `pontoon check --provider MODULE [--grants GRANTS]`: success, and stdout.
fn check(module: &Path, grants: Option<&Path>) -> anyhow::Result<(bool, String)> {
    let mut command = Command::new(env!("CARGO_BIN_EXE_pontoon"));
    command.arg("check").arg("--provider").arg(module);
    if let Some(grants) = grants {
        command.arg("--grants").arg(grants);
    }
    // No cluster may be needed: a kubeconfig that cannot be read.
    let output = command.env("KUBECONFIG", "/nonexistent").output()?;
    Ok((
        output.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    ))
}

fn grants_file(text: &str) -> anyhow::Result<tempfile::NamedTempFile> {
    let file = tempfile::NamedTempFile::new()?;
    std::fs::write(file.path(), text)?;
    Ok(file)
}

#[test]
fn a_provider_shows_its_metadata_and_scope() -> anyhow::Result<()> {
    let (ok, out) = check(&bundled_provider("carrier2mount")?, None)?;
    assert!(ok, "{out}");
    assert!(
        out.contains("bridge-mount provider `carrier2mount` 0.1.0"),
        "{out}"
    );
    for line in [
        "get, apply, patch, delete Deployment (apps) in the target namespace, any name",
        "get, list, apply, patch, delete, exec Pod (core) in the target namespace, any name",
        "get, create, patch, delete ConfigMap (core) in the operator namespace, names gefyra-carrier2-restore-{mount}",
        "get, patch, delete ConfigMap (core) in the operator namespace, names gefyra-carrier2-restore-configmap",
    ] {
        assert!(out.contains(line), "missing `{line}` in:\n{out}");
    }
    assert!(out.contains("no --grants"), "{out}");
    Ok(())
}

#[test]
fn the_charts_bundled_grants_let_carrier2mount_load() -> anyhow::Result<()> {
    let grants = repo_root().join("charts/pontoon/files/grants/bundled.yaml");
    let (ok, out) = check(&bundled_provider("carrier2mount")?, Some(&grants))?;
    assert!(ok, "{out}");
    assert!(out.contains("granted: the operator loads it"), "{out}");
    Ok(())
}

#[test]
fn a_narrow_or_misnamed_grant_is_refused_naming_the_excess() -> anyhow::Result<()> {
    let module = bundled_provider("carrier2mount")?;
    // Everything but the Deployments' and StatefulSets' `delete`.
    let bundled =
        std::fs::read_to_string(repo_root().join("charts/pontoon/files/grants/bundled.yaml"))?;
    let narrow = bundled.replacen(
        "verbs: [get, apply, patch, delete]",
        "verbs: [get, apply, patch]",
        1,
    );
    assert_ne!(narrow, bundled, "the bundled grants changed shape");
    let narrow = grants_file(&narrow)?;
    let (ok, out) = check(&module, Some(narrow.path()))?;
    assert!(!ok, "{out}");
    assert!(
        out.contains("refused at load:")
            && out.contains("(provider `carrier2mount`) declares capabilities its grant does not allow: delete Deployment (apps) in the target namespace, any name; delete StatefulSet (apps) in the target namespace, any name; add them"),
        "{out}"
    );
    // A grant under another name than the module's metadata name is no grant.
    let misnamed = grants_file(&bundled.replacen("carrier2mount:", "carrier2-mount:", 1))?;
    let (ok, out) = check(&module, Some(misnamed.path()))?;
    assert!(!ok, "{out}");
    assert!(
        out.contains("get, list, apply, patch, delete, exec Pod (core)"),
        "{out}"
    );
    // A grants file that is not one says so.
    let broken = grants_file("carrier2mount: [{kinds: [Pod], verbs: [frob], namespace: target}]")?;
    let (ok, out) = check(&module, Some(broken.path()))?;
    assert!(!ok, "{out}");
    assert!(
        out.contains("is not valid") && out.contains("frob"),
        "{out}"
    );
    Ok(())
}

#[test]
fn a_file_that_is_no_module_is_refused_and_a_filter_needs_no_grant() -> anyhow::Result<()> {
    let (ok, out) = check(&test_module("not_a_provider")?, None)?;
    assert!(!ok, "{out}");
    assert!(out.contains("refused at load:"), "{out}");
    let (ok, out) = check(&bundled_provider("standard_filters")?, None)?;
    assert!(ok, "{out}");
    assert!(
        out.contains("config filter `standard-filters`") && out.contains("RequestHeaderModifier"),
        "{out}"
    );
    Ok(())
}
