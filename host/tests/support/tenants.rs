//! Other tenants and administrators, as kubectl drives them: the chart's
//! admission policies (bound to a test's namespaces only), ServiceAccounts
//! with exactly the rights a test gives them, and kubectl as one of them
//! (impersonation).

use std::{process::Command, time::Duration};

use anyhow::Context;
use pontoon_tests::{kubeconfig_path, testbed_bin};
use serde_json::json;

/// `kubectl ARGS` against the test bed, `stdin` written to it.
pub fn kubectl(args: &[&str], stdin: Option<&str>) -> anyhow::Result<std::process::Output> {
    use std::io::Write;
    let mut child = Command::new(testbed_bin("kubectl")?)
        .args(args)
        .env("KUBECONFIG", kubeconfig_path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    if let (Some(text), Some(mut input)) = (stdin, child.stdin.take()) {
        input.write_all(text.as_bytes())?;
    }
    Ok(child.wait_with_output()?)
}

/// The arguments of a merge patch of `resource` `name` in `namespace`.
fn merge_patch_args(
    namespace: &str,
    resource: &str,
    name: &str,
    patch: &serde_json::Value,
) -> Vec<String> {
    [
        "-n",
        namespace,
        "patch",
        resource,
        name,
        "--type=merge",
        "-p",
        &patch.to_string(),
    ]
    .map(String::from)
    .to_vec()
}

/// A merge patch of `resource` `name` in `namespace` as the test bed's
/// administrator (its own kubeconfig, in system:masters).
pub fn merge_patch(
    namespace: &str,
    resource: &str,
    name: &str,
    patch: serde_json::Value,
) -> anyhow::Result<std::process::Output> {
    let args = merge_patch_args(namespace, resource, name, &patch);
    kubectl(&args.iter().map(String::as_str).collect::<Vec<_>>(), None)
}

/// `kubectl apply` of `items` (as one List), failing with kubectl's words.
pub fn apply(items: serde_json::Value) -> anyhow::Result<()> {
    let list = json!({ "apiVersion": "v1", "kind": "List", "items": items });
    let out = kubectl(&["apply", "-f", "-"], Some(&list.to_string()))?;
    anyhow::ensure!(
        out.status.success(),
        "kubectl apply: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// The chart's admission policies of a release, bound only to the mounts
/// and bridges of some namespaces (the policies are cluster-wide; other
/// tests' objects must not meet them); removed when dropped.
pub struct Policies {
    pub release: String,
}

impl Policies {
    /// Renders the chart's policies as release `release` and applies them,
    /// their bindings limited to `namespaces`; waits until the API server
    /// enforces them (a dry run of `probe`, as `tenant`, is refused by
    /// the mounts' policy).
    pub async fn install(
        release: &str,
        namespaces: &[&str],
        tenant: &Tenant,
        probe: &str,
    ) -> anyhow::Result<Self> {
        let chart = pontoon_tests::repo_root().join("charts/pontoon");
        let output = Command::new(testbed_bin("helm")?)
            .args([
                "template",
                release,
                chart.to_str().context("chart path")?,
                "--namespace",
                namespaces[0],
                "--kube-version",
                "1.36.0",
                "--show-only",
                "templates/admission-policy.yaml",
            ])
            .output()?;
        anyhow::ensure!(
            output.status.success(),
            "helm template: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let rendered = String::from_utf8(output.stdout)?;
        let mut documents = Vec::new();
        for document in rendered.split("\n---") {
            let mut value: serde_json::Value = match yaml_serde::from_str(document) {
                Ok(v) if !serde_json::Value::is_null(&v) => v,
                _ => continue,
            };
            if value["kind"] == "ValidatingAdmissionPolicyBinding" {
                value["spec"]["matchResources"] = json!({ "namespaceSelector": {
                    "matchExpressions": [{
                        "key": "kubernetes.io/metadata.name",
                        "operator": "In",
                        "values": namespaces,
                    }]
                } });
            }
            documents.push(value);
        }
        let policies = Self {
            release: release.to_string(),
        };
        let list = json!({ "apiVersion": "v1", "kind": "List", "items": documents });
        let applied = kubectl(
            &["apply", "--server-side", "-f", "-"],
            Some(&list.to_string()),
        )?;
        anyhow::ensure!(
            applied.status.success(),
            "kubectl apply: {}",
            String::from_utf8_lossy(&applied.stderr)
        );
        // A new policy takes the API server a moment to enforce.
        let deadline = std::time::Instant::now() + Duration::from_secs(90);
        loop {
            let tried = tenant.kubectl(&["create", "--dry-run=server", "-f", "-"], Some(probe))?;
            if String::from_utf8_lossy(&tried.stderr).contains(&policies.mounts()) {
                return Ok(policies);
            }
            anyhow::ensure!(
                std::time::Instant::now() < deadline,
                "the admission policy was never enforced: {}",
                String::from_utf8_lossy(&tried.stderr)
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The policy that judges mounts (`--mount-admission-policy`).
    pub fn mounts(&self) -> String {
        format!("{}-pontoon-mounts", self.release)
    }

    /// The policy that judges bridges (`--bridge-admission-policy`).
    pub fn bridges(&self) -> String {
        format!("{}-pontoon-bridges", self.release)
    }
}

impl Drop for Policies {
    fn drop(&mut self) {
        for name in [self.mounts(), self.bridges()] {
            for kind in [
                "validatingadmissionpolicybinding",
                "validatingadmissionpolicy",
            ] {
                let _ = kubectl(&["delete", kind, &name, "--ignore-not-found"], None);
            }
        }
    }
}

/// A ServiceAccount acting as a user of the cluster.
pub struct Tenant {
    pub namespace: String,
    pub name: String,
}

impl Tenant {
    /// ServiceAccount `name` in `namespace`, with no rights yet.
    pub fn new(namespace: &str, name: &str) -> anyhow::Result<Self> {
        apply(json!([{ "apiVersion": "v1", "kind": "ServiceAccount",
                       "metadata": { "name": name, "namespace": namespace } }]))?;
        Ok(Self {
            namespace: namespace.into(),
            name: name.into(),
        })
    }

    /// The user name the API server knows it by.
    pub fn user(&self) -> String {
        format!("system:serviceaccount:{}:{}", self.namespace, self.name)
    }

    /// Gives it `rules` in `namespace` (a Role and its RoleBinding named `role`).
    pub fn grant(
        &self,
        namespace: &str,
        role: &str,
        rules: serde_json::Value,
    ) -> anyhow::Result<()> {
        apply(json!([
            { "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
              "metadata": { "name": role, "namespace": namespace }, "rules": rules },
            { "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
              "metadata": { "name": role, "namespace": namespace },
              "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role },
              "subjects": [{ "kind": "ServiceAccount", "name": self.name, "namespace": self.namespace }] }
        ]))
    }

    /// What a mount's creator must be allowed in its target namespace.
    pub fn may_patch_and_exec_pods(&self, namespace: &str) -> anyhow::Result<()> {
        self.grant(
            namespace,
            &format!("{}-pods", self.name),
            json!([
                { "apiGroups": [""], "resources": ["pods"], "verbs": ["patch"] },
                { "apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"] }
            ]),
        )
    }

    /// Rights on mounts and bridges in `namespace`.
    pub fn may_write_gefyra(&self, namespace: &str, resources: &[&str]) -> anyhow::Result<()> {
        self.grant(
            namespace,
            &format!("{}-gefyra", self.name),
            json!([{ "apiGroups": ["gefyra.dev"], "resources": resources,
                     "verbs": ["create", "get", "list", "patch", "update", "delete"] }]),
        )
    }

    /// `kubectl create` of `manifest` as this tenant.
    pub fn create(&self, manifest: &str) -> anyhow::Result<std::process::Output> {
        self.kubectl(&["create", "-f", "-"], Some(manifest))
    }

    /// A merge patch of `resource` `name` in `namespace` as this tenant.
    pub fn patch(
        &self,
        namespace: &str,
        resource: &str,
        name: &str,
        patch: serde_json::Value,
    ) -> anyhow::Result<std::process::Output> {
        let args = merge_patch_args(namespace, resource, name, &patch);
        self.kubectl(&args.iter().map(String::as_str).collect::<Vec<_>>(), None)
    }

    /// `kubectl ARGS` as this tenant.
    pub fn kubectl(
        &self,
        args: &[&str],
        stdin: Option<&str>,
    ) -> anyhow::Result<std::process::Output> {
        let user = format!("--as={}", self.user());
        let mut all = vec![user.as_str()];
        all.extend(args);
        kubectl(&all, stdin)
    }
}

/// A mount as JSON text, as Gefyra's client sends it (no `targetNamespace`
/// when `target_namespace` is `None`), with `extra` fields on top.
pub fn mount_manifest(
    name: &str,
    namespace: &str,
    target_namespace: Option<&str>,
    target: &str,
    extra: serde_json::Value,
) -> String {
    let mut mount = json!({
        "apiVersion": "gefyra.dev/v1", "kind": "gefyrabridgemount",
        "metadata": { "name": name, "namespace": namespace },
        "target": target, "targetContainer": "app",
        "provider": "carrier2mount", "providerParameter": {}
    });
    if let Some(ns) = target_namespace {
        mount["targetNamespace"] = json!(ns);
    }
    if let (Some(mount), Some(extra)) = (mount.as_object_mut(), extra.as_object()) {
        mount.extend(extra.clone());
    }
    mount.to_string()
}

/// A bridge of mount `mount` as JSON text, as Gefyra's client writes it.
pub fn bridge_manifest(
    name: &str,
    namespace: &str,
    mount: &str,
    target_namespace: &str,
    extra: serde_json::Value,
) -> String {
    let mut bridge = json!({
        "apiVersion": "gefyra.dev/v1", "kind": "gefyrabridge",
        "metadata": { "name": name, "namespace": namespace,
                      "labels": { "gefyra.dev/bridge-mount": mount, "gefyra.dev/client": "client-a" } },
        "provider": "carrier2",
        "providerParameter": { "rules": [{ "match": [{ "matchHeader": {
            "name": "x-gefyra", "value": "alice", "type": "exact" } }] }] },
        "connectionProvider": "stowaway",
        "client": "client-a",
        "targetNamespace": target_namespace,
        "target": mount,
        "targetContainer": "app",
        "portMappings": ["8080:80"]
    });
    if let (Some(bridge), Some(extra)) = (bridge.as_object_mut(), extra.as_object()) {
        bridge.extend(extra.clone());
    }
    bridge.to_string()
}

/// What a refused kubectl said; fails when it was not refused.
pub fn refused(out: std::process::Output, what: &str) -> anyhow::Result<String> {
    anyhow::ensure!(
        !out.status.success(),
        "{what} was let in: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    Ok(String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Fails with kubectl's words when it was refused.
pub fn admitted(out: std::process::Output, what: &str) -> anyhow::Result<()> {
    anyhow::ensure!(
        out.status.success(),
        "{what} was refused: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}
