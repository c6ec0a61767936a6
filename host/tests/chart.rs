//! The Helm chart (`charts/pontoon`), with the test bed's `helm`: it lints
//! and renders for default and other values, refuses bad values saying
//! which, installs its objects, and its RBAC is enough for what the
//! operator does: the operator binary runs locally as the chart's
//! ServiceAccount (a token of its own), with the arguments and provider volumes
//! of the Deployment the chart made, takes a mount to ACTIVE with a custom
//! provider added through values, and a Gateway to Programmed. A custom
//! provider's grant becomes the operator's RBAC rules, and is enough for
//! the README's example provider with the bridge-mount controller alone.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::{Command, Output},
    time::Duration,
};

use anyhow::{Context, bail};
use k8s_openapi::{
    ByteString,
    api::{
        apps::v1::Deployment,
        core::v1::{ConfigMap, Service, ServiceAccount},
        rbac::v1::{ClusterRole, PolicyRule, Role, RoleBinding},
    },
};
use kube::{
    Api, ResourceExt,
    api::{ListParams, PostParams},
};
use pontoon::bridge_mount::{GefyraBridge, GefyraBridgeMount, crd::BridgeMountFields};
use pontoon_tests::{
    TestNamespace, kubeconfig_path, kubelet, modules::test_module, operator::Operator, repo_root,
    testbed_bin, wait_for,
};
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(90);

fn chart() -> PathBuf {
    repo_root().join("charts/pontoon")
}

/// `helm ARGS`, with its own config and cache directories (not the user's).
fn helm(args: &[&str]) -> anyhow::Result<Output> {
    let home = pontoon_tests::providers::target_dir().join("helm-home");
    Ok(Command::new(testbed_bin("helm")?)
        .args(args)
        .env("KUBECONFIG", kubeconfig_path())
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_DATA_HOME", home.join("data"))
        .output()?)
}

fn ok(output: Output, what: &str) -> anyhow::Result<String> {
    if !output.status.success() {
        bail!(
            "{what} failed ({}):\n{}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(String::from_utf8(output.stdout)?)
}

/// `helm template` of release `t` in namespace `ops` with `args`.
fn template(args: &[&str]) -> anyhow::Result<Output> {
    let chart = chart();
    let mut all = vec![
        "template",
        "t",
        chart.to_str().context("chart path")?,
        "--namespace",
        "ops",
        "--kube-version",
        "1.34.0",
    ];
    all.extend_from_slice(args);
    helm(&all)
}

/// `helm template` with `args`: every object, as JSON.
fn render(args: &[&str]) -> anyhow::Result<Vec<Value>> {
    let yaml = ok(template(args)?, "helm template")?;
    let mut objects = Vec::new();
    for document in yaml_serde::Deserializer::from_str(&yaml) {
        let value: Value = serde::Deserialize::deserialize(document)?;
        if !value.is_null() {
            objects.push(value);
        }
    }
    Ok(objects)
}

fn kinds(objects: &[Value]) -> BTreeMap<String, usize> {
    let mut kinds = BTreeMap::new();
    for o in objects {
        *kinds
            .entry(o["kind"].as_str().unwrap_or_default().to_string())
            .or_default() += 1;
    }
    kinds
}

fn deployment_of(objects: &[Value]) -> anyhow::Result<&Value> {
    objects
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .context("the chart renders no Deployment")
}

fn args_of(deployment: &Value) -> Vec<String> {
    deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a.as_str().map(String::from))
        .collect()
}

#[test]
fn the_chart_lints_and_renders_for_default_and_other_values() -> anyhow::Result<()> {
    let chart = chart();
    let chart = chart.to_str().context("chart path")?;
    ok(helm(&["lint", chart])?, "helm lint")?;
    ok(
        helm(&[
            "lint",
            chart,
            "--set",
            "replicaCount=3,gateway.installCRDs=true,logFormat=text",
        ])?,
        "helm lint with values",
    )?;

    let objects = render(&[])?;
    assert_eq!(
        kinds(&objects),
        BTreeMap::from(
            [
                // The operator's, carrier2mount's rights in target
                // namespaces (cluster-wide: every namespace by default),
                // and the developers' (`pontoon bridge`).
                ("ClusterRole", 3),
                ("ClusterRoleBinding", 2),
                ("ConfigMap", 1),
                ("Deployment", 1),
                // The pre-delete hook that ends every mount, and the
                // pre-upgrade hook that refuses to strand one.
                ("Job", 2),
                ("Role", 1),
                ("RoleBinding", 1),
                ("Service", 1),
                ("ServiceAccount", 1),
                // Who may create or change a mount, and a bridge.
                ("ValidatingAdmissionPolicy", 2),
                ("ValidatingAdmissionPolicyBinding", 2),
            ]
            .map(|(k, n)| (k.to_string(), n))
        )
    );
    let deployment = deployment_of(&objects)?;
    let args = args_of(deployment);
    for expected in [
        "--namespace=ops",
        "--controllers=all",
        "--metrics-addr=0.0.0.0:8080",
        "--providers=/usr/lib/pontoon/providers",
        "--carrier-image=quay.io/gefyra/carrier2:latest",
        "--data-plane-image=ghcr.io/pontoon-operator/pontoon-dataplane:0.1.0",
        "--grants=/etc/pontoon/grants.yaml",
        "--max-provider-calls=6",
        "--provider-memory-budget=192",
        "--mount-namespaces=*",
        "--mount-excluded-namespaces=kube-system",
        "--mount-admission-policy=t-pontoon-mounts",
        "--bridge-admission-policy=t-pontoon-bridges",
        "--bridge-destinations=cluster",
        "--max-bridges-per-mount=16",
    ] {
        assert!(args.iter().any(|a| a == expected), "{expected} in {args:?}");
    }
    assert!(
        !args.iter().any(|a| a.starts_with("--praxis-image")),
        "{args:?}"
    );
    // Stock Praxis instead of Pontoon's data plane, and only with a tag.
    let stock = render(&[
        "--set",
        "gateway.praxis.repository=ghcr.io/praxis-proxy/praxis,gateway.praxis.tag=0.7.5",
    ])?;
    let stock_args = args_of(deployment_of(&stock)?);
    assert!(
        stock_args
            .iter()
            .any(|a| a == "--praxis-image=ghcr.io/praxis-proxy/praxis:0.7.5"),
        "{stock_args:?}"
    );
    assert!(
        !stock_args
            .iter()
            .any(|a| a.starts_with("--data-plane-image")),
        "{stock_args:?}"
    );
    let untagged = template(&["--set", "gateway.praxis.repository=example.org/praxis"])?;
    assert!(
        !untagged.status.success(),
        "a Praxis image without a tag renders"
    );
    assert!(
        !args.iter().any(|a| a == "--leader-elect"),
        "one replica: no election"
    );
    assert!(
        !args.iter().any(|a| a.starts_with("--single-tenant")),
        "a shared cluster's operator by default"
    );
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    let container = &pod["containers"][0];
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    // The pre-upgrade hook judges the new values as the operator will.
    let check = objects
        .iter()
        .find(|o| o["kind"] == "Job" && o["metadata"]["name"] == "t-pontoon-check-upgrade")
        .context("the check-upgrade hook")?;
    assert_eq!(
        check["metadata"]["annotations"]["helm.sh/hook"],
        "pre-upgrade,pre-rollback"
    );
    assert_eq!(
        check["spec"]["template"]["spec"]["containers"][0]["args"],
        json!([
            "check-upgrade",
            "--namespace=ops",
            "--mount-namespaces=*",
            "--mount-excluded-namespaces=kube-system",
            "--log-format=json"
        ])
    );
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");

    // Not the defaults: two replicas elect a leader; the Gateway API CRDs;
    // custom providers from a ConfigMap and from an image.
    let custom = r#"providers.custom=[{"name":"mine","configMap":{"name":"mine-wasm","key":"mine.wasm"}},{"name":"theirs","image":{"repository":"registry.example/theirs","tag":"1.0","path":"/theirs.wasm"}}]"#;
    let objects = render(&[
        "--set",
        "replicaCount=2,gateway.installCRDs=true,sandbox.memoryMiB=128,sandbox.concurrentCalls=1,controllers={bridge-mounts}",
        "--set-json",
        custom,
    ])?;
    // Gateway API v1.6.3's standard channel: ten CRDs (TCPRoute and UDPRoute among them).
    assert_eq!(kinds(&objects)["CustomResourceDefinition"], 10);
    let deployment = deployment_of(&objects)?;
    let args = args_of(deployment);
    for expected in [
        "--leader-elect",
        "--leader-elect-lease-duration=30",
        "--leader-elect-renew-deadline=10",
        "--leader-elect-retry-period=2",
        "--provider-memory=128",
        "--controllers=bridge-mounts",
        "--custom-providers=/var/lib/pontoon/providers/from-configmaps",
        "--custom-providers=/var/lib/pontoon/providers/from-images",
    ] {
        assert!(args.iter().any(|a| a == expected), "{expected} in {args:?}");
    }
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(
        pod["initContainers"][0]["image"],
        "registry.example/theirs:1.0"
    );
    assert_eq!(
        pod["initContainers"][0]["command"],
        json!(["cp", "/theirs.wasm", "/providers/theirs.wasm"])
    );
    let projected = pod["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|v| v["name"] == "providers-from-configmaps")
        .context("a volume for the ConfigMap modules")?;
    assert_eq!(
        projected["projected"]["sources"][0]["configMap"],
        json!({"name": "mine-wasm", "items": [{"key": "mine.wasm", "path": "mine.wasm"}]})
    );
    let cluster_role = objects
        .iter()
        .find(|o| o["kind"] == "ClusterRole")
        .context("ClusterRole")?;
    let groups: Vec<&Value> = cluster_role["rules"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|r| r["apiGroups"].as_array().into_iter().flatten())
        .collect();
    assert!(
        !groups.contains(&&json!("gateway.networking.k8s.io")),
        "bridge mounts only: no Gateway API rights"
    );

    // An allow-list of namespaces: carrier2mount's rights are bound there
    // only, and the admission policy and the operator know the list.
    let objects = render(&["--set", "mounts.targetNamespaces={shop,dev}"])?;
    let bound: Vec<(String, String)> = objects
        .iter()
        .filter(|o| o["kind"] == "RoleBinding" && o["roleRef"]["name"] == "t-pontoon-mount-targets")
        .map(|o| {
            (
                o["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                o["subjects"][0]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect();
    assert_eq!(
        bound,
        [
            ("shop".to_string(), "t-pontoon".to_string()),
            ("dev".to_string(), "t-pontoon".to_string())
        ]
    );
    assert!(
        !objects.iter().any(|o| o["kind"] == "ClusterRoleBinding"
            && o["metadata"]["name"] == "t-pontoon-mount-targets"),
        "no cluster-wide binding of the pod-level rights"
    );
    let args = args_of(deployment_of(&objects)?);
    assert!(
        args.iter().any(|a| a == "--mount-namespaces=shop,dev"),
        "{args:?}"
    );
    let policy = objects
        .iter()
        .find(|o| o["kind"] == "ValidatingAdmissionPolicy")
        .context("the admission policy")?;
    let allow = policy["spec"]["validations"][0]["expression"]
        .as_str()
        .unwrap_or_default();
    assert!(
        allow.contains(r#"!(variables.ns in ["kube-system","ops"])"#)
            && allow.contains(r#"variables.ns in ["shop","dev"]"#),
        "{allow}"
    );
    let off = render(&["--set", "mounts.admissionPolicy=false"])?;
    assert!(!kinds(&off).contains_key("ValidatingAdmissionPolicy"));
    // Without policies, a single-tenant cluster says so; its operator then
    // needs no rights on the policies.
    let single = render(&[
        "--set",
        "mounts.admissionPolicy=false,mounts.singleTenant=true,bridges.allowedDestinations={cluster,192.168.101.0/24}",
    ])?;
    let args = args_of(deployment_of(&single)?);
    assert!(
        args.iter().any(|a| a == "--single-tenant")
            && args
                .iter()
                .any(|a| a == "--bridge-destinations=cluster,192.168.101.0/24"),
        "{args:?}"
    );
    let watches_policies = |objects: &[Value]| {
        objects.iter().any(|o| {
            o["kind"] == "ClusterRole"
                && o["rules"].as_array().into_iter().flatten().any(|r| {
                    r["resources"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|x| x == "validatingadmissionpolicies")
                })
        })
    };
    assert!(watches_policies(&render(&[])?));
    assert!(!watches_policies(&single));
    // The bindings of an operator serving one namespace judge that one.
    let watching = render(&["--set", "watchNamespace=team"])?;
    for binding in watching
        .iter()
        .filter(|o| o["kind"] == "ValidatingAdmissionPolicyBinding")
    {
        assert_eq!(
            binding["spec"]["matchResources"]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
            "team",
            "{binding}"
        );
    }

    // Bad values are refused, naming the value.
    for (set, says) in [
        ("sandbox.memoryMiB=0", "/sandbox/memoryMiB"),
        ("controllers={bridges}", "/controllers/0"),
        ("logFormat=xml", "/logFormat"),
        ("replicas=2", "replicas"),
        (
            "mounts.targetNamespaces={Shop}",
            "/mounts/targetNamespaces/0",
        ),
        (
            "sandbox.memoryBudgetMiB=256",
            "sandbox.memoryBudgetMiB (256) + 64 MiB for the operator is 320 MiB, more than resources.limits.memory (256Mi)",
        ),
        (
            "sandbox.memoryMiB=128,sandbox.memoryBudgetMiB=96",
            "sandbox.memoryBudgetMiB (96) is less than sandbox.memoryMiB (128): the provider calls' budget must hold at least one call",
        ),
        // A stalled leader's longest provider call must end before a
        // standby may take over.
        (
            "replicaCount=2,leaderElection.leaseDurationSeconds=25",
            "leaderElection.leaseDurationSeconds (25) must be longer than leaderElection.renewDeadlineSeconds (10) plus the longest provider call (15 s",
        ),
        (
            "leaderElection.enabled=true,sandbox.deadlineSeconds=20",
            "plus the longest provider call (25 s",
        ),
        (
            "replicaCount=2,leaderElection.retryPeriodSeconds=6",
            "leaderElection.retryPeriodSeconds (6) must be at most half of leaderElection.renewDeadlineSeconds (10)",
        ),
    ] {
        let stderr = refusal(&["--set", set])?;
        assert!(stderr.contains(says), "{set}: {stderr}");
    }
    let stderr = refusal(&["--set-json", r#"providers.custom=[{"name":"x"}]"#])?;
    assert!(
        stderr.contains("missing property 'configMap'")
            && stderr.contains("missing property 'image'"),
        "a custom provider needs a source: {stderr}"
    );
    Ok(())
}

/// What `helm template` with `args` says on stderr; it must fail.
fn refusal(args: &[&str]) -> anyhow::Result<String> {
    let output = template(args)?;
    anyhow::ensure!(!output.status.success(), "{args:?} was accepted");
    Ok(String::from_utf8(output.stderr)?)
}

/// The values of the README's example custom provider ("Install with
/// Helm"): its `providers.custom` and its grant, which is exactly what
/// `providers/template` declares.
fn readme_values() -> anyhow::Result<Value> {
    let readme = std::fs::read_to_string(repo_root().join("README.md"))?;
    let values = readme
        .split_once("cat >/tmp/my-values.yaml <<'YAML'\n")
        .and_then(|(_, rest)| rest.split_once("\nYAML\n"))
        .map(|(values, _)| values)
        .context("README.md writes no /tmp/my-values.yaml")?;
    let values: Value = yaml_serde::from_str(values)?;
    anyhow::ensure!(
        values["grants"]["my-provider"].is_array(),
        "the README's values grant my-provider nothing: {values}"
    );
    Ok(values)
}

/// The rules of `kind` `name` in `objects`; none names resources (RBAC
/// cannot express a grant's `names`, the operator enforces them).
fn rules_of(
    objects: &[Value],
    kind: &str,
    name: &str,
) -> anyhow::Result<std::collections::BTreeSet<Rule>> {
    let role = objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .with_context(|| format!("the chart renders no {kind} {name}"))?;
    let rules: Vec<PolicyRule> = serde_json::from_value(role["rules"].clone())?;
    assert!(
        rules.iter().all(|r| r.resource_names.is_none()),
        "{kind} {name} limits by name: {rules:?}"
    );
    Ok(rule_set(rules))
}

/// `(kind, namespace)` of each binding of `role` in `objects`, each of the
/// operator's ServiceAccount.
fn bindings_of(objects: &[Value], role: &str) -> Vec<(String, String)> {
    objects
        .iter()
        .filter(|o| {
            (o["kind"] == "ClusterRoleBinding" || o["kind"] == "RoleBinding")
                && o["roleRef"]["name"] == role
        })
        .inspect(|o| {
            assert_eq!(
                o["subjects"],
                json!([{"kind": "ServiceAccount", "name": "t-pontoon", "namespace": "ops"}])
            );
        })
        .map(|o| {
            (
                o["kind"].as_str().unwrap_or_default().to_string(),
                o["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect()
}

/// `(apiGroup, resource, verb)` for each verb of each `(group, resource, verbs)`.
fn rules(rules: &[(&str, &str, &[&str])]) -> std::collections::BTreeSet<Rule> {
    rules
        .iter()
        .flat_map(|(group, resource, verbs)| {
            verbs
                .iter()
                .map(|verb| (group.to_string(), resource.to_string(), verb.to_string()))
        })
        .collect()
}

#[test]
fn each_custom_grant_becomes_the_operators_rbac_rules() -> anyhow::Result<()> {
    let grant = readme_values()?["grants"]["my-provider"].clone();
    let grants = |g: &Value| format!("grants={g}");

    // The README's example provider with the bridge-mount controller only:
    // its grant, and nothing else of the chart, lets the operator write
    // ConfigMaps in target namespaces. Apply is create (a new object) and
    // patch; the names (`{mount}-template`) are the operator's to check.
    let readme = json!({"my-provider": grant});
    let objects = render(&[
        "--set",
        "controllers={bridge-mounts}",
        "--set-json",
        &grants(&readme),
    ])?;
    assert_eq!(
        rules_of(&objects, "ClusterRole", "t-pontoon-custom-targets")?,
        rules(&[
            ("", "configmaps", &["get", "create", "patch", "delete"]),
            ("apps", "deployments", &["get"]),
            ("apps", "statefulsets", &["get"]),
            ("", "pods", &["get"]),
        ])
    );
    assert_eq!(
        bindings_of(&objects, "t-pontoon-custom-targets"),
        [("ClusterRoleBinding".to_string(), String::new())],
        "bound cluster-wide, as mounts may target every namespace"
    );
    for role in ["t-pontoon", "t-pontoon-mount-targets"] {
        let writes_config_maps = rules_of(&objects, "ClusterRole", role)?
            .iter()
            .any(|(g, r, v)| g.is_empty() && r == "configmaps" && v != "list");
        assert!(!writes_config_maps, "{role} is not what grants them");
    }
    assert!(
        !objects
            .iter()
            .any(|o| o["metadata"]["name"] == "t-pontoon-custom"),
        "nothing granted in the operator's namespace: no Role for it"
    );

    // An allow-list of namespaces: bound in each, not cluster-wide.
    let objects = render(&[
        "--set",
        "controllers={bridge-mounts},mounts.targetNamespaces={a,b}",
        "--set-json",
        &grants(&readme),
    ])?;
    assert_eq!(
        bindings_of(&objects, "t-pontoon-custom-targets"),
        [
            ("RoleBinding".to_string(), "a".to_string()),
            ("RoleBinding".to_string(), "b".to_string())
        ]
    );

    // A capability in the operator's namespace, exec, and kinds becoming
    // resources (regular plurals, Endpoints, every kind of a group); with
    // every controller, bridge-mounts included.
    let mut mine = grant.as_array().cloned().unwrap_or_default();
    mine.push(json!({"kinds": ["ConfigMap"], "verbs": ["get", "apply"], "namespace": "operator", "names": ["my-provider-state"]}));
    let more = json!({
        "my-provider": mine,
        "debugger": [
            {"kinds": ["Pod"], "verbs": ["get", "exec"], "namespace": "target"},
            {"apiGroup": "networking.k8s.io", "kinds": ["Ingress", "NetworkPolicy", "IngressClass"], "verbs": ["list"], "namespace": "target"},
            {"kinds": ["Endpoints"], "verbs": ["get"], "namespace": "target"},
            {"apiGroup": "batch", "kinds": ["*"], "verbs": ["delete"], "namespace": "target"},
        ],
    });
    let objects = render(&["--set-json", &grants(&more)])?;
    assert_eq!(
        rules_of(&objects, "Role", "t-pontoon-custom")?,
        rules(&[("", "configmaps", &["get", "create", "patch"])])
    );
    let role = objects
        .iter()
        .find(|o| o["kind"] == "Role" && o["metadata"]["name"] == "t-pontoon-custom")
        .context("Role t-pontoon-custom")?;
    assert_eq!(role["metadata"]["namespace"], "ops");
    assert_eq!(
        bindings_of(&objects, "t-pontoon-custom"),
        [("RoleBinding".to_string(), "ops".to_string())]
    );
    let targets = rules_of(&objects, "ClusterRole", "t-pontoon-custom-targets")?;
    let expected = rules(&[
        ("", "pods", &["get"]),
        ("", "pods/exec", &["create", "get"]),
        ("networking.k8s.io", "ingresses", &["list"]),
        ("networking.k8s.io", "networkpolicies", &["list"]),
        ("networking.k8s.io", "ingressclasses", &["list"]),
        ("", "endpoints", &["get"]),
        ("batch", "*", &["delete"]),
    ]);
    let missing: Vec<&Rule> = expected.difference(&targets).collect();
    assert!(missing.is_empty(), "{missing:?} not in {targets:?}");
    assert!(
        !targets
            .iter()
            .any(|(_, _, verb)| verb == "exec" || verb == "apply"),
        "grant verbs are not RBAC verbs: {targets:?}"
    );

    // Grants are bridge-mount providers' rights: none without that controller.
    let objects = render(&[
        "--set",
        "controllers={gateway-api}",
        "--set-json",
        &grants(&more),
    ])?;
    assert!(
        !objects.iter().any(|o| o["metadata"]["name"]
            .as_str()
            .is_some_and(|n| n.starts_with("t-pontoon-custom"))),
        "gateway-api only: no custom provider's rights"
    );
    assert!(
        !objects.iter().any(|o| o["kind"] == "Job"),
        "gateway-api only: no mounts, so no hook ends or guards them"
    );

    // Bad grants are refused, saying which module and entry, and what to write.
    let ok_entry = json!({"kinds": ["ConfigMap"], "verbs": ["get"], "namespace": "target"});
    for (grant, says) in [
        (
            json!({"my-provider": [ok_entry, {"kinds": ["ConfigMap"], "verbs": ["get", "exe"], "namespace": "target"}]}),
            r#"grants.my-provider[1] (module my-provider, entry 2): verb "exe" is not one a provider module can be granted; write some of get, list, create, apply, patch, delete, exec"#,
        ),
        (
            json!({"my-provider": [{"kinds": ["ConfigMap"], "verbs": ["get"], "namespace": "mount"}]}),
            r#"grants.my-provider[0] (module my-provider, entry 1): namespace "mount" is neither target nor operator; write namespace: target (the mount's target namespace) or namespace: operator (the operator's own)"#,
        ),
        (
            json!({"my-provider": [{"verbs": ["get"], "namespace": "target"}]}),
            r#"grants.my-provider[0] (module my-provider, entry 1) has no kinds: add the kinds it grants, e.g. kinds: [ConfigMap], or kinds: ["*"] for every kind of its apiGroup"#,
        ),
        (
            json!({"carrier2mount": [ok_entry]}),
            "grants.carrier2mount: the bundled carrier2mount's grant ships with the chart (files/grants/bundled.yaml) and values cannot change it; remove grants.carrier2mount from your values",
        ),
        (
            json!({"my-provider": [{"apiGroup": "apps", "kinds": ["Deployment"], "verbs": ["exec"], "namespace": "target"}]}),
            r#"grants.my-provider[0] (module my-provider, entry 1): exec is exec into a pod, but this entry grants kinds ["Deployment"] of apiGroup "apps"; move exec to an entry with apiGroup: "" and kinds: [Pod]"#,
        ),
        (
            json!({"my-provider": [{"apiGroup": "*", "kinds": ["*"], "verbs": ["get"], "namespace": "target"}]}),
            r#"grants.my-provider[0] (module my-provider, entry 1): apiGroup "*" matches no call of a module"#,
        ),
    ] {
        // With any controllers: the operator reads the grants whichever runs.
        let stderr = refusal(&[
            "--set",
            "controllers={gateway-api}",
            "--set-json",
            &grants(&grant),
        ])?;
        assert!(stderr.contains(says), "{grant}: {stderr}");
    }
    Ok(())
}

/// `helm install` of the chart as `release` in the namespace of that name,
/// with `--set set` and a `--set-json` of each of `json`.
fn install(release: &str, set: &str, json: &[&str]) -> anyhow::Result<()> {
    let chart = chart();
    let mut args = vec![
        "install",
        release,
        chart.to_str().context("chart path")?,
        "--namespace",
        release,
        "--set",
        set,
    ];
    for value in json {
        args.extend(["--set-json", value]);
    }
    ok(helm(&args)?, "helm install").map(drop)
}

/// `helm uninstall` of `release`, waiting for its objects to be gone.
fn uninstall(release: &str) -> anyhow::Result<Output> {
    helm(&[
        "uninstall",
        release,
        "--namespace",
        release,
        "--wait",
        "--timeout",
        "180s",
    ])
}

/// What the kubelet would put at the Deployment's ConfigMap provider
/// volume: each projected item, from the ConfigMap, in `dir`.
async fn materialise_configmap_providers(
    deployment: &Deployment,
    namespace: &str,
    dir: &Path,
) -> anyhow::Result<()> {
    let config_maps: Api<ConfigMap> = Api::namespaced(pontoon_tests::client().await?, namespace);
    let volumes = deployment
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|s| s.volumes.clone())
        .unwrap_or_default();
    let volume = volumes
        .iter()
        .find(|v| v.name == "providers-from-configmaps")
        .context("the Deployment has no ConfigMap provider volume")?;
    for source in volume
        .projected
        .as_ref()
        .and_then(|p| p.sources.clone())
        .unwrap_or_default()
    {
        let Some(cm) = source.config_map else {
            continue;
        };
        let data = config_maps
            .get(&cm.name)
            .await?
            .binary_data
            .unwrap_or_default();
        for item in cm.items.unwrap_or_default() {
            let ByteString(bytes) = data
                .get(&item.key)
                .with_context(|| format!("ConfigMap {} has no key {}", cm.name, item.key))?;
            std::fs::write(dir.join(&item.path), bytes)?;
        }
    }
    Ok(())
}

#[tokio::test]
async fn installed_the_chart_runs_the_operator_within_its_rbac() -> anyhow::Result<()> {
    pontoon_tests::gateway_api::install_crds().await?;
    let ns = TestNamespace::new("chart").await?;
    let release = ns.name().to_string();
    let client = pontoon_tests::client().await?;
    // The custom provider, as an administrator ships it: a ConfigMap.
    ship_module(
        &ns,
        "sample-provider-wasm",
        "sample_provider.wasm",
        &test_module("sample_provider")?,
    )
    .await?;

    let controller_name = format!("pontoon.dev/{release}");
    let values = [
        format!("watchNamespace={release}"),
        format!("gateway.controllerName={controller_name}"),
    ]
    .join(",");
    install(
        &release,
        &values,
        &[
            r#"providers.custom=[{"name":"sample","configMap":{"name":"sample-provider-wasm","key":"sample_provider.wasm"}}]"#,
            // What the sample provider declares (tests/modules/sample).
            r#"grants={"sample":[{"kinds":["ConfigMap"],"verbs":["get","list","create","apply","patch","delete"],"namespace":"target"},{"apiGroup":"apps","kinds":["Deployment","StatefulSet"],"verbs":["get","list"],"namespace":"target"},{"kinds":["Pod"],"verbs":["get","list"],"namespace":"target"}]}"#,
        ],
    )?;
    let work = tempfile::tempdir()?;
    let granted = granted_rules(&release).await?;
    let installed = run_installed(&ns, &release, &controller_name, work.path()).await?;

    // `helm uninstall` with a mount ACTIVE: its pre-delete hook ends the
    // mount while the operator still runs, and the target is restored.
    let hook = kubelet::run_pods_in_background(
        &release,
        kubelet::TERMINATE_MOUNTS_PODS,
        Path::new(env!("CARGO_BIN_EXE_pontoon")),
        work.path().join("hook"),
        Duration::from_secs(120),
    );
    let uninstalled = tokio::task::spawn_blocking({
        let release = release.clone();
        move || uninstall(&release)
    })
    .await?;
    let hook_output = hook.await?;
    ok(uninstalled?, "helm uninstall")
        .with_context(|| format!("--- operator ---\n{}", installed.operator.log_tail(40)))?;
    let hook_output = hook_output?;
    assert!(
        hook_output
            .last()
            .is_some_and(|o| o.contains("1 mount(s) terminated, every target restored")),
        "{hook_output:?}"
    );
    let mounts: Api<GefyraBridgeMount> = ns.api();
    assert!(
        mounts.get_opt("shop-mount").await?.is_none(),
        "no mount is left"
    );
    let bridges: Api<GefyraBridge> = ns.api();
    assert!(
        bridges.get_opt("to-shop").await?.is_none(),
        "the bridge went with its mount"
    );
    let target = &installed.target;
    let pods = target
        .api::<k8s_openapi::api::core::v1::Pod>()
        .list(&ListParams::default().labels("app=shop"))
        .await?;
    for pod in pods
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
    {
        let image = pod
            .spec
            .as_ref()
            .and_then(|s| s.containers[0].image.clone());
        assert_eq!(
            image.as_deref(),
            Some("nginx:1.27"),
            "no pod is left on Carrier2"
        );
    }
    assert!(
        target
            .api::<Deployment>()
            .get_opt("shop-gefyra")
            .await?
            .is_none()
            && target
                .api::<Service>()
                .get_opt("shop-app-gefyra-svc")
                .await?
                .is_none(),
        "no shadow is left"
    );
    let log = installed.operator.log();
    assert!(!log.contains("forbidden"), "a missing RBAC rule:\n{log}");
    rbac_is_what_was_called(&release, &format!("{release}-pontoon"), &granted)?;

    // Nothing of the release is left.
    let selector = format!("app.kubernetes.io/instance={release}");
    let params = ListParams::default().labels(&selector);
    let left = [
        ("Deployment", names(ns.api::<Deployment>(), &params).await?),
        ("Service", names(ns.api::<Service>(), &params).await?),
        (
            "ServiceAccount",
            names(ns.api::<ServiceAccount>(), &params).await?,
        ),
        ("Role", names(ns.api::<Role>(), &params).await?),
        (
            "RoleBinding",
            names(ns.api::<RoleBinding>(), &params).await?,
        ),
        (
            "ClusterRole",
            names(Api::<ClusterRole>::all(client), &params).await?,
        ),
    ];
    for (kind, names) in left {
        assert!(names.is_empty(), "helm uninstall left {kind} {names:?}");
    }
    Ok(())
}

#[tokio::test]
async fn installed_a_custom_providers_grant_is_what_the_operator_may_do() -> anyhow::Result<()> {
    let ns = TestNamespace::new("chart-custom").await?;
    let release = ns.name().to_string();
    let account = format!("{release}-pontoon");
    // The README's example custom provider: providers/template, shipped as
    // the README ships it (a ConfigMap named by its `providers.custom`).
    let values = readme_values()?;
    let custom = &values["providers"]["custom"];
    let source = &custom[0]["configMap"];
    ship_module(
        &ns,
        source["name"].as_str().context("the README's ConfigMap")?,
        source["key"].as_str().context("the README's key")?,
        &pontoon_tests::providers::template_provider()?,
    )
    .await?;
    // A grant is keyed by the module's metadata name, its crate name: the
    // README's module (`make new-provider NAME=my-provider`) is
    // `my-provider`, providers/template as it is `provider-template`.
    let grants = json!({"provider-template": values["grants"]["my-provider"]});
    install(
        &release,
        // No pre-delete hook: the mount is deleted before uninstall.
        &format!(
            "watchNamespace={release},controllers={{bridge-mounts}},mounts.terminateOnUninstall=false"
        ),
        &[
            &format!("providers.custom={custom}"),
            &format!("grants={grants}"),
        ],
    )?;
    let work = tempfile::tempdir()?;
    let deployment = ns.api::<Deployment>().get(&account).await?;
    let mut operator = start_as_the_chart_runs_it(&ns, &deployment, work.path()).await?;

    let target = TestNamespace::new("chart-custom-target").await?;
    create_deployment(
        &target,
        "web",
        json!([{"name": "app", "image": "nginx:1.27"}]),
    )
    .await?;
    let mounts: Api<GefyraBridgeMount> = ns.api();
    let created = mounts
        .create(
            &PostParams::default(),
            &mount_of("web-mount", &target, "deploy/web", "provider-template"),
        )
        .await?;
    wait_active(&mounts, "web-mount", &operator).await?;
    // Named by the mount's uid (`{mount}-template` in its scope).
    let owned = format!("{}-template", created.uid().context("the mount's uid")?);
    let config_maps = target.api::<ConfigMap>();
    assert!(
        config_maps.get_opt(&owned).await?.is_some(),
        "the provider's ConfigMap {owned} in the target namespace"
    );
    delete_mount(&mounts, "web-mount", &operator).await?;
    assert!(
        config_maps.get_opt(&owned).await?.is_none(),
        "the provider's uninstall deleted its ConfigMap"
    );
    let log = operator.log();
    assert!(!log.contains("forbidden"), "a missing RBAC rule:\n{log}");
    assert!(
        log.contains(r#"providers=["carrier2mount", "provider-template"]"#)
            && log.contains("rejected=0"),
        "the provider is within its grant:\n{log}"
    );
    // Stopped before its rights go with the release.
    operator.terminate(Duration::from_secs(30))?;
    ok(uninstall(&release)?, "helm uninstall")?;
    let roles: Api<ClusterRole> = Api::all(pontoon_tests::client().await?);
    assert!(
        roles
            .get_opt(&format!("{account}-custom-targets"))
            .await?
            .is_none(),
        "helm uninstall removes the grant's ClusterRole"
    );

    // Nothing the operator asked for was refused, and the provider's
    // ConfigMap writes passed by its grant's ClusterRole.
    let requests = audited_requests(&release, &account)?;
    let refused = refused(&requests);
    assert!(
        refused.is_empty(),
        "refused for want of a right: {refused:#?}"
    );
    let by_grant = format!(r#"of ClusterRole "{account}-custom-targets""#);
    for verb in ["patch", "delete"] {
        assert!(
            requests.iter().any(|r| r.rule
                == (String::new(), "configmaps".to_string(), verb.to_string())
                && r.namespace == target.name()
                && r.reason.contains(&by_grant)),
            "no {verb} of a ConfigMap in {} allowed {by_grant}",
            target.name()
        );
    }
    Ok(())
}

/// The names of the objects `params` selects.
async fn names<K>(api: Api<K>, params: &ListParams) -> anyhow::Result<Vec<String>>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    Ok(api
        .list(params)
        .await?
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect())
}

/// The operator as the chart's Deployment (in `ns`) runs it: its
/// arguments, the modules its volumes hold, the ServiceAccount's rights.
/// Only what differs outside a pod is replaced: where the bundled and
/// custom modules are, the cache, the port.
async fn start_as_the_chart_runs_it(
    ns: &TestNamespace,
    deployment: &Deployment,
    work: &Path,
) -> anyhow::Result<Operator> {
    let name = deployment
        .metadata
        .name
        .clone()
        .context("the Deployment's name")?;
    let custom = work.join("custom");
    std::fs::create_dir_all(&custom)?;
    materialise_configmap_providers(deployment, ns.name(), &custom).await?;
    // The grants, as the Deployment's `grants` volume holds them.
    let grants = ns
        .api::<ConfigMap>()
        .get(&format!("{name}-grants"))
        .await?
        .data
        .unwrap_or_default();
    let grants_file = work.join("grants.yaml");
    std::fs::write(
        &grants_file,
        grants
            .get("grants.yaml")
            .context("no grants.yaml in the grants ConfigMap")?,
    )?;
    let args: Vec<String> = deployment
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .map(|s| s.containers[0].args.clone().unwrap_or_default())
        .unwrap_or_default();
    // The tests' operators are single-tenant unless told otherwise: as the
    // chart runs it, this one is only when the chart says so.
    let single_tenant = args.iter().any(|a| a == "--single-tenant");
    let local: Vec<String> = args
        .into_iter()
        .skip(1) // `run`: Operator::start adds it
        .filter(|a| {
            ![
                "--providers=",
                "--custom-providers=",
                "--cache-dir=",
                "--metrics-addr=",
                "--grants=",
            ]
            .iter()
            .any(|p| a.starts_with(p))
        })
        .chain([
            "--custom-providers".to_string(),
            custom.display().to_string(),
            format!("--grants={}", grants_file.display()),
            "--kubeconfig".to_string(),
            kubelet::as_service_account(ns.name(), &name, work)?
                .display()
                .to_string(),
            // Logs a person reads in the test's failure message.
            "--log-format=text".to_string(),
            format!("--single-tenant={single_tenant}"),
        ])
        .collect();
    let local: Vec<&str> = local.iter().map(String::as_str).collect();
    // The kubeconfig is the ServiceAccount: ClusterRoles are not its to read.
    let kubeconfig = kube::config::Kubeconfig::read_from(work.join("kubeconfig"))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    let roles: Api<ClusterRole> = Api::all(kube::Client::try_from(config)?);
    match roles.list(&ListParams::default()).await {
        Err(kube::Error::Api(status)) if status.code == 403 => {}
        other => bail!(
            "the ServiceAccount token is not in effect: listing ClusterRoles gave {:?}",
            other.map(|l| l.items.len())
        ),
    }
    Operator::start(Path::new(env!("CARGO_BIN_EXE_pontoon")), ns.name(), &local)
}

async fn run_installed(
    ns: &TestNamespace,
    release: &str,
    controller_name: &str,
    work: &Path,
) -> anyhow::Result<Installed> {
    let name = format!("{release}-pontoon");
    // What the chart made.
    assert!(ns.api::<ServiceAccount>().get_opt(&name).await?.is_some());
    assert!(ns.api::<Role>().get_opt(&name).await?.is_some());
    let deployment = ns.api::<Deployment>().get(&name).await?;
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(pontoon_tests::client().await?);
    assert!(
        crds.get_opt("gefyrabridgemounts.gefyra.dev")
            .await?
            .is_some()
    );

    let operator = start_as_the_chart_runs_it(ns, &deployment, work).await?;

    // Mounts live in the release's namespace, their targets in another one
    // (the operator's own namespace is never a target).
    let target = TestNamespace::new("chart-target").await?;
    // A mount with the custom provider, and one with the bundled
    // carrier2mount (its shadow, Carrier2 in the pod, exec) carrying a
    // GefyraBridge, which its deletion removes.
    for (name, containers) in [
        ("web", json!([{"name": "app", "image": "nginx:1.27"}])),
        (
            "shop",
            json!([{
                "name": "app", "image": "nginx:1.27",
                "ports": [{"containerPort": 80}],
                "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8081}}
            }]),
        ),
    ] {
        create_deployment(&target, name, containers).await?;
    }
    let mounts: Api<GefyraBridgeMount> = ns.api();
    for (name, workload, provider) in [
        ("web-mount", "deploy/web", "sample"),
        ("shop-mount", "deploy/shop", "carrier2mount"),
    ] {
        mounts
            .create(
                &PostParams::default(),
                &mount_of(name, &target, workload, provider),
            )
            .await?;
    }
    let bridges: Api<GefyraBridge> = ns.api();
    let bridge: GefyraBridge = serde_json::from_value(json!({
        "metadata": { "name": "to-shop", "labels": { "gefyra.dev/bridge-mount": "shop-mount" } },
        "provider": "carrier2",
        "target": "shop-mount",
        "targetNamespace": target.name(),
        "portMappings": ["8080:80"]
    }))?;
    bridges.create(&PostParams::default(), &bridge).await?;
    for name in ["web-mount", "shop-mount"] {
        wait_active(&mounts, name, &operator).await?;
    }
    // The bridge judged and its state written (the operator's rights on
    // bridges and their mounts used; it names no rules, so it is ERROR,
    // saying so) before anything ends them: without this wait, a busy
    // machine's uninstall could take the mount, and the bridge with it,
    // before the bridge controller ever got to it.
    let judged = |b: Option<&GefyraBridge>| {
        b.is_some_and(|b| {
            b.bridge.state.as_deref() == Some("ERROR")
                && b.bridge
                    .status
                    .as_ref()
                    .and_then(|s| s.get("message")?.as_str())
                    .is_some_and(|m| m.contains("providerParameter.rules is missing"))
        })
    };
    if let Err(err) = wait_for(&bridges, "to-shop", judged, TIMEOUT).await {
        let now = bridges.get_opt("to-shop").await?;
        bail!(
            "{err}: the bridge is {:?} {:?}\n--- operator ---\n{}",
            now.as_ref().and_then(|b| b.bridge.state.clone()),
            now.as_ref().and_then(|b| b.bridge.status.clone()),
            operator.log_tail(40)
        );
    }

    // A Gateway of the chart's controllerName.
    pontoon_tests::gateway_api::create_class(release, controller_name, None).await?;
    let gateways: Api<gateway_api::apis::standard::gateways::Gateway> = ns.api();
    gateways
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "edge"},
                "spec": {
                    "gatewayClassName": release,
                    "listeners": [
                        {"name": "web", "port": 80, "protocol": "HTTP"},
                        {"name": "tls", "port": 443, "protocol": "TLS",
                         "tls": {"mode": "Passthrough"}},
                        {"name": "tcp", "port": 5432, "protocol": "TCP"}
                    ]
                }
            }))?,
        )
        .await?;
    // With a route: its status is the operator's to write.
    let routes: Api<gateway_api::apis::standard::httproutes::HttpRoute> = ns.api();
    routes
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "web"},
                "spec": {
                    "parentRefs": [{"name": "edge"}],
                    "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]
                }
            }))?,
        )
        .await?;
    // And one of each other route kind.
    let grpc_routes: Api<gateway_api::grpcroutes::GrpcRoute> = ns.api();
    grpc_routes
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "grpc"},
                "spec": {
                    "parentRefs": [{"name": "edge", "sectionName": "web"}],
                    "rules": [{"matches": [{"method": {"service": "echo.Echo", "method": "Ping"}}],
                               "backendRefs": [{"name": "web", "port": 80}]}]
                }
            }))?,
        )
        .await?;
    let tls_routes: Api<gateway_api::tlsroutes::TlsRoute> = ns.api();
    tls_routes
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "tls"},
                "spec": {
                    "parentRefs": [{"name": "edge", "sectionName": "tls"}],
                    "hostnames": ["db.example.com"],
                    "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]
                }
            }))?,
        )
        .await?;
    let tcp_routes: Api<pontoon::gateway::judgement::tcp_route::TcpRoute> = ns.api();
    tcp_routes
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "tcp"},
                "spec": {
                    "parentRefs": [{"name": "edge", "sectionName": "tcp"}],
                    "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]
                }
            }))?,
        )
        .await?;
    fn accepted<K: serde::Serialize>(r: Option<&K>) -> bool {
        let status = r
            .and_then(|r| serde_json::to_value(r).ok())
            .unwrap_or_default();
        status["status"]["parents"]
            .as_array()
            .is_some_and(|parents| {
                parents.iter().any(|p| {
                    p["conditions"].as_array().is_some_and(|cs| {
                        cs.iter()
                            .any(|c| c["type"] == "Accepted" && c["status"] == "True")
                    })
                })
            })
    }
    let programmed = |g: Option<&gateway_api::apis::standard::gateways::Gateway>| {
        g.and_then(|g| g.status.as_ref())
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c.type_ == "Programmed" && c.status == "True")
            })
    };
    let reached = async {
        wait_for(&gateways, "edge", programmed, TIMEOUT).await?;
        wait_for(&routes, "web", accepted, TIMEOUT).await?;
        wait_for(&grpc_routes, "grpc", accepted, TIMEOUT).await?;
        wait_for(&tls_routes, "tls", accepted, TIMEOUT).await?;
        wait_for(&tcp_routes, "tcp", accepted, TIMEOUT).await?;
        anyhow::Ok(())
    }
    .await;
    if let Err(err) = reached {
        bail!(
            "{err}: the Gateway is not Programmed\n--- operator ---\n{}",
            operator.log_tail(40)
        );
    }
    // Nothing was refused for want of a right, and both providers are
    // within their grants.
    let log = operator.log();
    assert!(!log.contains("forbidden"), "a missing RBAC rule:\n{log}");
    assert!(
        log.contains(r#"providers=["carrier2mount", "sample"]"#) && log.contains("rejected=0"),
        "{log}"
    );
    // The user deletes one mount while the operator runs (its finalizer);
    // the other, with its bridge, stays ACTIVE for `helm uninstall`.
    pontoon_tests::gateway_api::remove_gateways_blocking(ns.name(), &[release.to_string()]);
    delete_mount(&mounts, "web-mount", &operator).await?;
    Ok(Installed { operator, target })
}

/// A module shipped as an administrator ships it for `providers.custom`: in
/// ConfigMap `name` of `ns`, as `binaryData` key `key`.
async fn ship_module(
    ns: &TestNamespace,
    name: &str,
    key: &str,
    module: &Path,
) -> anyhow::Result<()> {
    let config_map: ConfigMap = serde_json::from_value(json!({"metadata": {"name": name}}))?;
    let config_map = ConfigMap {
        binary_data: Some(BTreeMap::from([(
            key.to_string(),
            ByteString(std::fs::read(module)?),
        )])),
        ..config_map
    };
    ns.api::<ConfigMap>()
        .create(&PostParams::default(), &config_map)
        .await?;
    Ok(())
}

/// A Deployment `name` of one replica in `target` (pods labelled `app=name`).
async fn create_deployment(
    target: &TestNamespace,
    name: &str,
    containers: Value,
) -> anyhow::Result<()> {
    target
        .api::<Deployment>()
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": name},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": {"app": name}},
                    "template": {
                        "metadata": {"labels": {"app": name}},
                        "spec": {"containers": containers}
                    }
                }
            }))?,
        )
        .await?;
    Ok(())
}

/// A mount of container `app` of `workload` in `target` with `provider`.
fn mount_of(
    name: &str,
    target: &TestNamespace,
    workload: &str,
    provider: &str,
) -> GefyraBridgeMount {
    GefyraBridgeMount {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        fields: BridgeMountFields {
            target_namespace: Some(target.name().into()),
            target: Some(workload.into()),
            target_container: Some("app".into()),
            provider: Some(provider.into()),
            ..Default::default()
        },
    }
}

/// Waits for mount `name` to be ACTIVE; else fails with its state, status
/// and the operator's log.
async fn wait_active(
    mounts: &Api<GefyraBridgeMount>,
    name: &str,
    operator: &Operator,
) -> anyhow::Result<()> {
    let active = |m: Option<&GefyraBridgeMount>| {
        m.is_some_and(|m| m.fields.state.as_deref() == Some("ACTIVE"))
    };
    if let Err(err) = wait_for(mounts, name, active, TIMEOUT).await {
        let now = mounts.get_opt(name).await?;
        bail!(
            "{err}: {name} is {:?} {:#?}\n--- operator ---\n{}",
            now.as_ref().and_then(|m| m.fields.state.clone()),
            now.as_ref().and_then(|m| m.fields.status.clone()),
            operator.log_tail(40)
        );
    }
    Ok(())
}

/// Deletes mount `name`, as a user does while the operator runs, and waits
/// until it is gone (the operator's finalizer let it go).
async fn delete_mount(
    mounts: &Api<GefyraBridgeMount>,
    name: &str,
    operator: &Operator,
) -> anyhow::Result<()> {
    mounts
        .delete(name, &kube::api::DeleteParams::default())
        .await?;
    wait_for(
        mounts,
        name,
        |m: Option<&GefyraBridgeMount>| m.is_none(),
        TIMEOUT,
    )
    .await
    .with_context(|| format!("{name} was not removed\n{}", operator.log_tail(30)))?;
    Ok(())
}

/// `(apiGroup, resource, verb)` the release's ClusterRoles and Roles grant.
type Rule = (String, String, String);

async fn granted_rules(release: &str) -> anyhow::Result<std::collections::BTreeSet<Rule>> {
    let client = pontoon_tests::client().await?;
    let selector = format!("app.kubernetes.io/instance={release}");
    let params = ListParams::default().labels(&selector);
    let mut rules = Vec::new();
    for role in Api::<ClusterRole>::all(client.clone())
        .list(&params)
        .await?
    {
        // `<release>-developer` is for people running `pontoon bridge`,
        // bound by an administrator; the operator holds none of it.
        if role.name_any().ends_with("-developer") {
            continue;
        }
        rules.extend(role.rules.unwrap_or_default());
    }
    for role in Api::<Role>::all(client).list(&params).await? {
        rules.extend(role.rules.unwrap_or_default());
    }
    Ok(rule_set(rules))
}

/// Every `(apiGroup, resource, verb)` that `rules` grant.
fn rule_set(rules: impl IntoIterator<Item = PolicyRule>) -> std::collections::BTreeSet<Rule> {
    let mut granted = std::collections::BTreeSet::new();
    for rule in rules {
        for group in rule.api_groups.unwrap_or_default() {
            for resource in rule.resources.clone().unwrap_or_default() {
                for verb in &rule.verbs {
                    granted.insert((group.clone(), resource.clone(), verb.clone()));
                }
            }
        }
    }
    granted
}

/// One request of a ServiceAccount, as the test bed's audit log recorded it.
struct Audited {
    rule: Rule,
    namespace: String,
    code: i64,
    message: String,
    /// Which binding allowed it (`RBAC: allowed by ClusterRoleBinding ...`).
    reason: String,
}

/// Every request the ServiceAccount `namespace/account` made (the test's
/// own probe that its token is in effect, listing ClusterRoles, left out).
fn audited_requests(namespace: &str, account: &str) -> anyhow::Result<Vec<Audited>> {
    let user = format!("system:serviceaccount:{namespace}:{account}");
    let log = std::fs::read_to_string(pontoon_tests::testbed_dir().join("logs/audit.log"))
        .context("the test bed's audit log")?;
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let mut requests = Vec::new();
    for line in log.lines() {
        let Ok(event) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if event["user"]["username"] != user.as_str() {
            continue;
        }
        let object = &event["objectRef"];
        let resource = match object["subresource"].as_str() {
            Some(sub) => format!("{}/{sub}", text(&object["resource"])),
            None => text(&object["resource"]),
        };
        let rule = (text(&object["apiGroup"]), resource, text(&event["verb"]));
        if rule
            == (
                "rbac.authorization.k8s.io".to_string(),
                "clusterroles".to_string(),
                "list".to_string(),
            )
        {
            continue;
        }
        requests.push(Audited {
            rule,
            namespace: text(&object["namespace"]),
            code: event["responseStatus"]["code"].as_i64().unwrap_or_default(),
            message: text(&event["responseStatus"]["message"]),
            reason: text(&event["annotations"]["authorization.k8s.io/reason"]),
        });
    }
    Ok(requests)
}

/// The requests the API server refused for want of a right (403).
fn refused(requests: &[Audited]) -> Vec<String> {
    requests
        .iter()
        .filter(|r| r.code == 403)
        .map(|r| format!("{:?} in {:?}: {}", r.rule, r.namespace, r.message))
        .collect()
}

/// The chart's RBAC is exactly what the operator (and its providers, and
/// the hook) called as the chart's ServiceAccount, as the test bed's audit
/// log recorded it: nothing was refused, and every right granted was used
/// on the paths this test runs, or is named below with the path that uses it
/// (or, for a right these paths take only on some runs, with why).
fn rbac_is_what_was_called(
    namespace: &str,
    account: &str,
    granted: &std::collections::BTreeSet<Rule>,
) -> anyhow::Result<()> {
    let user = format!("system:serviceaccount:{namespace}:{account}");
    let requests = audited_requests(namespace, account)?;
    let used: std::collections::BTreeSet<Rule> = requests.iter().map(|r| r.rule.clone()).collect();
    let refused = refused(&requests);
    anyhow::ensure!(!used.is_empty(), "no request of {user} in the audit log");
    assert!(
        refused.is_empty(),
        "refused for want of a right: {refused:#?}"
    );
    // Rights this test's paths do not take, each with the path that does.
    let elsewhere: std::collections::BTreeMap<Rule, &str> = [
        ("", "pods", "create", "a bare Pod target: its shadow is a Pod"),
        ("", "pods", "delete", "a bare Pod target: its shadow is a Pod"),
        ("", "pods", "get", "a bare Pod target, and restoring a pod a restore entry names"),
        ("", "pods/exec", "create", "exec over a WebSocket is a GET; API servers that authorize the upgrade as create (AuthorizePodWebsocketUpgradeCreatePermission) need it too"),
        ("", "secrets", "get", "TLS parameters of a mount; a listener's certificate"),
        ("", "nodes", "list", "a bridge sending requests to an IP address: the nodes' pod networks (bridges.allowedDestinations: cluster)"),
        ("networking.k8s.io", "servicecidrs", "list", "a bridge sending requests to an IP address: the cluster's Service networks"),
        ("", "persistentvolumeclaims", "list", "a StatefulSet target with volumeClaimTemplates: the claims its shadow would use, checked before it is made"),
        ("", "persistentvolumeclaims", "delete", "a StatefulSet target with volumeClaimTemplates: its shadow's claims, at uninstall"),
        ("", "secrets", "create", "a Gateway's certificate Secret (HTTPS listener), first applied"),
        ("", "secrets", "patch", "a Gateway's certificate Secret (HTTPS listener)"),
        ("", "services", "create", "server-side apply of a Service that does not exist yet is authorized as create too (the audit log records the patch)"),
        ("apps", "deployments", "create", "the same for a Deployment"),
        ("apps", "statefulsets", "create", "a StatefulSet target: its shadow, first applied"),
        ("apps", "statefulsets", "delete", "a StatefulSet target: its shadow"),
        ("apps", "statefulsets", "get", "a StatefulSet target"),
        ("apps", "statefulsets", "patch", "a StatefulSet target: its shadow, and the restart at restore when a pod cannot be restored in place"),
        ("autoscaling", "horizontalpodautoscalers", "create", "a target an HPA scales: the HPA's copy"),
        ("autoscaling", "horizontalpodautoscalers", "delete", "a target an HPA scales: the HPA's copy"),
        ("autoscaling", "horizontalpodautoscalers", "patch", "a target an HPA scales: the HPA's copy"),
        ("coordination.k8s.io", "leases", "create", "leader election (replicaCount > 1)"),
        ("coordination.k8s.io", "leases", "get", "leader election"),
        ("coordination.k8s.io", "leases", "update", "leader election"),
        ("gateway.networking.k8s.io", "backendtlspolicies/status", "patch", "a Gateway whose backends a BackendTLSPolicy names writes its entry in the policy's status (gateway_protocols, the conformance suite)"),
        ("", "pods/portforward", "create", "held only to be granted: the tunnel provider's Role lets a developer port-forward to their own relay, and Kubernetes lets the operator grant only what it holds (developer_bridge)"),
        ("", "pods/portforward", "get", "the same"),
        ("rbac.authorization.k8s.io", "roles", "create", "a developer's relay (pontoon bridge): the tunnel provider's Role, first applied (developer_bridge)"),
        ("rbac.authorization.k8s.io", "roles", "get", "a developer's relay: read before it is written"),
        ("rbac.authorization.k8s.io", "roles", "patch", "a developer's relay: its Role, applied"),
        ("rbac.authorization.k8s.io", "roles", "delete", "a developer's relay, when no bridge names the developer any more"),
        ("rbac.authorization.k8s.io", "rolebindings", "create", "a developer's relay: the RoleBinding to the developer, first applied"),
        ("rbac.authorization.k8s.io", "rolebindings", "get", "a developer's relay: read before it is written"),
        ("rbac.authorization.k8s.io", "rolebindings", "patch", "a developer's relay: its RoleBinding, applied"),
        ("rbac.authorization.k8s.io", "rolebindings", "delete", "a developer's relay, when no bridge names the developer any more"),
        ("gateway.networking.k8s.io", "listenersets/status", "patch", "a Gateway writes the status of the ListenerSets naming it (gateway::listener_sets_*, the conformance suite)"),
    ]
    .into_iter()
    .map(|(g, r, v, why)| ((g.to_string(), r.to_string(), v.to_string()), why))
    .collect();
    // Rights this test's paths take or not depending on timing, so they can
    // be neither required nor called stale here.
    let by_timing: std::collections::BTreeMap<Rule, &str> = [(
        "events.k8s.io",
        "events",
        "patch",
        "an Event repeated within the recorder's window (it counts the repeat on the first one): whether a reconcile repeats one during this test depends on how its watches interleave",
    )]
    .into_iter()
    .map(|(g, r, v, why)| ((g.to_string(), r.to_string(), v.to_string()), why))
    .collect();
    let unused: Vec<&Rule> = granted
        .iter()
        .filter(|r| {
            !used.contains(*r) && !elsewhere.contains_key(*r) && !by_timing.contains_key(*r)
        })
        .collect();
    assert!(
        unused.is_empty(),
        "granted, but no path calls it (remove it from the chart, or name the path here): {unused:#?}"
    );
    let exercised: Vec<&Rule> = elsewhere.keys().filter(|r| used.contains(*r)).collect();
    assert!(
        exercised.is_empty(),
        "now used on this test's paths, no longer an exception: {exercised:#?}"
    );
    let ungranted: Vec<&Rule> = used
        .iter()
        .filter(|(g, r, _)| !(g.is_empty() && r.is_empty()))
        .filter(|r| !granted.contains(*r))
        .collect();
    assert!(
        ungranted.is_empty(),
        "called without a grant of the chart: {ungranted:#?}"
    );
    Ok(())
}

/// What `run_installed` leaves running for `helm uninstall`.
struct Installed {
    operator: Operator,
    target: TestNamespace,
}

#[test]
fn the_image_context_holds_every_file_the_containerfile_copies() -> anyhow::Result<()> {
    let out = tempfile::tempdir()?;
    let context = out.path().join("context");
    let providers = pontoon_tests::providers::bundled_providers_dir()?;
    let status = Command::new(repo_root().join("scripts/image-context.sh"))
        .arg(&context)
        .arg(env!("CARGO_BIN_EXE_pontoon"))
        .arg(&providers)
        .status()?;
    assert!(status.success(), "scripts/image-context.sh failed");
    let containerfile = std::fs::read_to_string(repo_root().join("Containerfile"))?;
    let mut copied = 0;
    for line in containerfile.lines() {
        let Some(rest) = line.strip_prefix("COPY ") else {
            continue;
        };
        let words: Vec<&str> = rest.split_whitespace().collect();
        let (sources, _destination) = words.split_at(words.len() - 1);
        for source in sources {
            let path = context.join(source);
            assert!(
                path.exists(),
                "the Containerfile copies {source}, not in the context"
            );
            copied += 1;
        }
    }
    assert!(copied >= 2, "the binary and the providers");
    let modules: Vec<String> = std::fs::read_dir(context.join("providers"))?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    for bundled in ["carrier2mount.wasm", "standard_filters.wasm"] {
        assert!(
            modules.iter().any(|m| m == bundled),
            "{bundled} in {modules:?}"
        );
    }
    // The image's user and entry point, as the chart expects them.
    assert!(containerfile.contains("USER 65532:65532"));
    assert!(containerfile.contains(r#"ENTRYPOINT ["/usr/bin/pontoon"]"#));
    assert!(containerfile.contains("COPY providers/ /usr/lib/pontoon/providers/"));
    assert_eq!(
        pontoon::operator::IMAGE_PROVIDER_DIR,
        "/usr/lib/pontoon/providers"
    );
    Ok(())
}

#[tokio::test]
async fn an_upgrade_that_would_strand_a_live_mount_is_refused_before_anything_changes()
-> anyhow::Result<()> {
    install_crds_for_mounts().await?;
    let ns = TestNamespace::new("chart-narrow").await?;
    let kept = TestNamespace::new("chart-narrow-kept").await?;
    let dropped = TestNamespace::new("chart-narrow-dropped").await?;
    let release = ns.name().to_string();
    let chart = chart();
    let chart = chart.to_str().context("chart path")?;
    let values = |namespaces: &[&str]| {
        format!(
            "watchNamespace={release},controllers={{bridge-mounts}},mounts.terminateOnUninstall=false,mounts.targetNamespaces={{{}}}",
            namespaces.join(",")
        )
    };
    ok(
        helm(&[
            "install",
            &release,
            chart,
            "--namespace",
            &release,
            "--set",
            &values(&[kept.name(), dropped.name()]),
        ])?,
        "helm install",
    )?;
    // A mount targeting the namespace the upgrade would drop (no operator
    // runs here: it is live as long as it exists).
    let mounts: Api<GefyraBridgeMount> = ns.api();
    mounts
        .create(
            &PostParams::default(),
            &mount_of("web-mount", &dropped, "deploy/web", "carrier2mount"),
        )
        .await?;
    let upgrade = |namespaces: &[&str]| {
        helm(&[
            "upgrade",
            &release,
            chart,
            "--namespace",
            &release,
            "--set",
            &values(namespaces),
        ])
    };
    let refused = upgrade(&[kept.name()])?;
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success(),
        "the upgrade went through: {said}"
    );
    assert!(
        said.contains(&format!(
            "{release}/web-mount (target namespace {})",
            dropped.name()
        )) && said.contains("delete them first"),
        "names the mount and what to do: {said}"
    );
    let bindings: Api<RoleBinding> = dropped.api();
    let still_bound = || async {
        anyhow::Ok(
            !bindings
                .list(&ListParams::default())
                .await?
                .items
                .is_empty(),
        )
    };
    assert!(
        still_bound().await?,
        "the operator's rights in the dropped namespace are still bound"
    );

    // A GitOps tool renders with `helm template`, where the chart's own
    // check reads nothing: the narrowed values render, and the pre-upgrade
    // hook (its pre-sync step there) refuses, run as the operator's
    // ServiceAccount as its Job would run it.
    let rendered = ok(
        helm(&[
            "template",
            &release,
            chart,
            "--namespace",
            &release,
            // As a GitOps tool passes the cluster's version.
            "--kube-version",
            "1.36.0",
            "--set",
            &values(&[kept.name()]),
        ])?,
        "helm template of the narrowed values",
    )?;
    let mut hook = None;
    for document in yaml_serde::Deserializer::from_str(&rendered) {
        let object: Value = serde::Deserialize::deserialize(document)?;
        if object["kind"] == "Job"
            && object["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"]
                == "check-upgrade"
        {
            hook = Some(object["spec"]["template"]["spec"].clone());
        }
    }
    let hook = hook.context("no check-upgrade hook")?;
    let hook_args: Vec<String> = serde_json::from_value(hook["containers"][0]["args"].clone())?;
    let work = tempfile::tempdir()?;
    let account = kubelet::as_service_account(
        &release,
        hook["serviceAccountName"]
            .as_str()
            .context("the hook's account")?,
        work.path(),
    )?;
    let hooked = Command::new(env!("CARGO_BIN_EXE_pontoon"))
        .args(&hook_args)
        .arg(format!("--kubeconfig={}", account.display()))
        .output()?;
    let said = String::from_utf8_lossy(&hooked.stderr);
    assert!(
        !hooked.status.success()
            && said.contains(&format!(
                "{release}/web-mount (target namespace {})",
                dropped.name()
            ))
            && said.contains("delete them first"),
        "the hook lets the narrowed values through ({}): {said}",
        hooked.status
    );
    assert!(still_bound().await?, "the hook changed nothing");

    // Once the mount is gone, the same upgrade goes through, its hook (run
    // here as a kubelet would) passing.
    mounts
        .delete("web-mount", &kube::api::DeleteParams::default())
        .await?;
    let hook = kubelet::run_pods_in_background(
        &release,
        kubelet::CHECK_UPGRADE_PODS,
        Path::new(env!("CARGO_BIN_EXE_pontoon")),
        work.path().join("hook"),
        Duration::from_secs(120),
    );
    let upgraded = tokio::task::spawn_blocking({
        let (release, chart, values) = (release.clone(), chart.to_string(), values(&[kept.name()]));
        move || {
            helm(&[
                "upgrade",
                &release,
                &chart,
                "--namespace",
                &release,
                "--set",
                &values,
            ])
        }
    })
    .await?;
    ok(upgraded?, "helm upgrade without the mount")?;
    let hook_output = hook.await??;
    assert!(
        hook_output
            .last()
            .is_some_and(|o| o.contains("none outside the namespaces mounts may target")),
        "{hook_output:?}"
    );
    assert!(
        !still_bound().await?,
        "the upgrade took the operator's rights out of the dropped namespace"
    );
    ok(uninstall(&release)?, "helm uninstall")?;
    Ok(())
}

/// Pontoon's CRDs (the chart installs them only on a first install).
async fn install_crds_for_mounts() -> anyhow::Result<()> {
    let crds = kubectl_apply_crds()?;
    anyhow::ensure!(
        crds.status.success(),
        "{}",
        String::from_utf8_lossy(&crds.stderr)
    );
    Ok(())
}

fn kubectl_apply_crds() -> anyhow::Result<Output> {
    use std::io::Write;
    let yaml = Command::new(env!("CARGO_BIN_EXE_pontoon"))
        .args(["crds", "--set", "gefyra"])
        .output()?;
    anyhow::ensure!(yaml.status.success(), "pontoon crds failed");
    let mut child = Command::new(testbed_bin("kubectl")?)
        .args(["apply", "--server-side", "--force-conflicts", "-f", "-"])
        .env("KUBECONFIG", kubeconfig_path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    child
        .stdin
        .take()
        .context("kubectl's stdin")?
        .write_all(&yaml.stdout)?;
    Ok(child.wait_with_output()?)
}
