//! The Helm chart (`charts/pontoon`), with the test bed's `helm`: it lints
//! and renders for default and other values, refuses bad values saying
//! which, installs its objects, and its RBAC is enough for what the
//! operator does: the operator binary runs locally as the chart's
//! ServiceAccount (a token of its own), with the arguments and provider volumes
//! of the Deployment the chart made, takes a mount to ACTIVE with a custom
//! provider added through values, and a Gateway to Programmed.

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
        rbac::v1::{ClusterRole, Role, RoleBinding},
    },
};
use kube::{
    Api,
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

/// `helm template` with `args`: every object, as JSON.
fn render(args: &[&str]) -> anyhow::Result<Vec<Value>> {
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
    let yaml = ok(helm(&all)?, "helm template")?;
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
                // The operator's, and carrier2mount's rights in target
                // namespaces (cluster-wide: every namespace by default).
                ("ClusterRole", 2),
                ("ClusterRoleBinding", 2),
                ("ConfigMap", 1),
                ("Deployment", 1),
                // The pre-delete hook that ends every mount.
                ("Job", 1),
                ("Role", 1),
                ("RoleBinding", 1),
                ("Service", 1),
                ("ServiceAccount", 1),
                ("ValidatingAdmissionPolicy", 1),
                ("ValidatingAdmissionPolicyBinding", 1),
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
        "--praxis-image=ghcr.io/praxis-proxy/praxis:0.7.5",
        "--grants=/etc/pontoon/grants.yaml",
        "--max-provider-calls=3",
        "--mount-namespaces=*",
        "--mount-excluded-namespaces=kube-system",
    ] {
        assert!(args.iter().any(|a| a == expected), "{expected} in {args:?}");
    }
    assert!(
        !args.iter().any(|a| a == "--leader-elect"),
        "one replica: no election"
    );
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    let container = &pod["containers"][0];
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
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
    assert_eq!(kinds(&objects)["CustomResourceDefinition"], 8);
    let deployment = deployment_of(&objects)?;
    let args = args_of(deployment);
    for expected in [
        "--leader-elect",
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
            "sandbox.concurrentCalls=8",
            "sandbox.concurrentCalls (8) x sandbox.memoryMiB (64) + 64 MiB for the operator is 576 MiB, more than resources.limits.memory (256Mi)",
        ),
    ] {
        let output = helm(&[
            "template",
            "t",
            chart,
            "--kube-version",
            "1.34.0",
            "--set",
            set,
        ])?;
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{set} was accepted");
        assert!(stderr.contains(says), "{set}: {stderr}");
    }
    let output = helm(&[
        "template",
        "t",
        chart,
        "--kube-version",
        "1.34.0",
        "--set-json",
        r#"providers.custom=[{"name":"x"}]"#,
    ])?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("missing property 'configMap'")
            && stderr.contains("missing property 'image'"),
        "a custom provider needs a source: {stderr}"
    );
    Ok(())
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
    let module = std::fs::read(test_module("sample_provider")?)?;
    let config_map: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "sample-provider-wasm"},
    }))?;
    let config_map = ConfigMap {
        binary_data: Some(BTreeMap::from([(
            "sample_provider.wasm".to_string(),
            ByteString(module),
        )])),
        ..config_map
    };
    ns.api::<ConfigMap>()
        .create(&PostParams::default(), &config_map)
        .await?;

    let controller_name = format!("pontoon.dev/{release}");
    let chart = chart();
    let values = [
        format!("watchNamespace={release}"),
        format!("gateway.controllerName={controller_name}"),
    ]
    .join(",");
    ok(
        helm(&[
            "install",
            &release,
            chart.to_str().context("chart path")?,
            "--namespace",
            &release,
            "--set",
            &values,
            "--set-json",
            r#"providers.custom=[{"name":"sample","configMap":{"name":"sample-provider-wasm","key":"sample_provider.wasm"}}]"#,
            // What the sample provider declares (tests/modules/sample).
            "--set-json",
            r#"grants={"sample":[{"kinds":["ConfigMap"],"verbs":["get","list","create","apply","patch","delete"],"namespace":"target"},{"apiGroup":"apps","kinds":["Deployment","StatefulSet"],"verbs":["get","list"],"namespace":"target"},{"kinds":["Pod"],"verbs":["get","list"],"namespace":"target"}]}"#,
        ])?,
        "helm install",
    )?;
    let work = tempfile::tempdir()?;
    let granted = granted_rules(&release).await?;
    let installed = run_installed(&ns, &release, &controller_name, work.path()).await?;

    // `helm uninstall` with a mount ACTIVE: its pre-delete hook ends the
    // mount while the operator still runs, and the target is restored.
    let hook = tokio::spawn({
        let (release, work) = (release.clone(), work.path().join("hook"));
        async move {
            kubelet::run_pods(
                &release,
                kubelet::TERMINATE_MOUNTS_PODS,
                Path::new(env!("CARGO_BIN_EXE_pontoon")),
                &work,
                Duration::from_secs(120),
            )
            .await
        }
    });
    let uninstalled = tokio::task::spawn_blocking({
        let release = release.clone();
        move || {
            helm(&[
                "uninstall",
                &release,
                "--namespace",
                &release,
                "--wait",
                "--timeout",
                "180s",
            ])
        }
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
        .map(kube::ResourceExt::name_any)
        .collect())
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

    // The operator as the Deployment runs it: its arguments, the modules
    // its volumes hold, the ServiceAccount's rights. Only what differs
    // outside a pod is replaced: where the bundled and custom modules are,
    // the cache, the port.
    let custom = work.join("custom");
    std::fs::create_dir_all(&custom)?;
    materialise_configmap_providers(&deployment, ns.name(), &custom).await?;
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
        ])
        .collect();
    let local: Vec<&str> = local.iter().map(String::as_str).collect();
    // The kubeconfig is the ServiceAccount: Nodes are not its to read.
    let kubeconfig = kube::config::Kubeconfig::read_from(work.join("kubeconfig"))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(kube::Client::try_from(config)?);
    match nodes.list(&ListParams::default()).await {
        Err(kube::Error::Api(status)) if status.code == 403 => {}
        other => bail!("the ServiceAccount token is not in effect: listing Nodes gave {other:?}"),
    }
    let operator = Operator::start(Path::new(env!("CARGO_BIN_EXE_pontoon")), ns.name(), &local)?;

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
    }
    let mounts: Api<GefyraBridgeMount> = ns.api();
    for (name, workload, provider) in [
        ("web-mount", "deploy/web", "sample"),
        ("shop-mount", "deploy/shop", "carrier2mount"),
    ] {
        let mount = GefyraBridgeMount {
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
        };
        mounts.create(&PostParams::default(), &mount).await?;
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
    let active = |m: Option<&GefyraBridgeMount>| {
        m.is_some_and(|m| m.fields.state.as_deref() == Some("ACTIVE"))
    };
    for name in ["web-mount", "shop-mount"] {
        if let Err(err) = wait_for(&mounts, name, active, TIMEOUT).await {
            let now = mounts.get_opt(name).await?;
            bail!(
                "{err}: {name} is {:?} {:#?}\n--- operator ---\n{}",
                now.as_ref().and_then(|m| m.fields.state.clone()),
                now.as_ref().and_then(|m| m.fields.status.clone()),
                operator.log_tail(40)
            );
        }
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
                    "listeners": [{"name": "web", "port": 80, "protocol": "HTTP"}]
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
    let accepted = |r: Option<&gateway_api::apis::standard::httproutes::HttpRoute>| {
        r.and_then(|r| r.status.as_ref()).is_some_and(|s| {
            s.parents.iter().any(|p| {
                p.conditions
                    .iter()
                    .any(|c| c.type_ == "Accepted" && c.status == "True")
            })
        })
    };
    let programmed = |g: Option<&gateway_api::apis::standard::gateways::Gateway>| {
        g.and_then(|g| g.status.as_ref())
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c.type_ == "Programmed" && c.status == "True")
            })
    };
    let reached = match wait_for(&gateways, "edge", programmed, TIMEOUT).await {
        Ok(_) => wait_for(&routes, "web", accepted, TIMEOUT).await.map(drop),
        Err(err) => Err(err),
    };
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
    mounts
        .delete("web-mount", &kube::api::DeleteParams::default())
        .await?;
    wait_for(
        &mounts,
        "web-mount",
        |m: Option<&GefyraBridgeMount>| m.is_none(),
        TIMEOUT,
    )
    .await
    .with_context(|| format!("web-mount was not removed\n{}", operator.log_tail(30)))?;
    Ok(Installed { operator, target })
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
        rules.extend(role.rules.unwrap_or_default());
    }
    for role in Api::<Role>::all(client).list(&params).await? {
        rules.extend(role.rules.unwrap_or_default());
    }
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
    Ok(granted)
}

/// The chart's RBAC is exactly what the operator (and its providers, and
/// the hook) called as the chart's ServiceAccount, as the test bed's audit
/// log recorded it: nothing was refused, and every right granted was used
/// on the paths this test runs, or is named below with the path that uses it.
fn rbac_is_what_was_called(
    namespace: &str,
    account: &str,
    granted: &std::collections::BTreeSet<Rule>,
) -> anyhow::Result<()> {
    let user = format!("system:serviceaccount:{namespace}:{account}");
    let log = std::fs::read_to_string(pontoon_tests::testbed_dir().join("logs/audit.log"))
        .context("the test bed's audit log")?;
    let mut used = std::collections::BTreeSet::new();
    let mut refused = Vec::new();
    for line in log.lines() {
        let Ok(event) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if event["user"]["username"] != user.as_str() {
            continue;
        }
        let object = &event["objectRef"];
        let resource = match object["subresource"].as_str() {
            Some(sub) => format!("{}/{sub}", object["resource"].as_str().unwrap_or_default()),
            None => object["resource"].as_str().unwrap_or_default().to_string(),
        };
        let rule = (
            object["apiGroup"].as_str().unwrap_or_default().to_string(),
            resource,
            event["verb"].as_str().unwrap_or_default().to_string(),
        );
        // The test's own probe that the token is the ServiceAccount's.
        if rule == (String::new(), "nodes".to_string(), "list".to_string()) {
            continue;
        }
        if event["responseStatus"]["code"] == 403 {
            refused.push(format!("{rule:?}: {}", event["responseStatus"]["message"]));
        }
        used.insert(rule);
    }
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
        ("", "secrets", "create", "a Gateway's certificate Secret (HTTPS listener), first applied"),
        ("", "secrets", "patch", "a Gateway's certificate Secret (HTTPS listener)"),
        ("", "services", "create", "server-side apply of a Service that does not exist yet is authorized as create too (the audit log records the patch)"),
        ("apps", "deployments", "create", "the same for a Deployment"),
        ("apps", "statefulsets", "create", "a StatefulSet target: its shadow, first applied"),
        ("apps", "statefulsets", "delete", "a StatefulSet target: its shadow"),
        ("apps", "statefulsets", "get", "a StatefulSet target"),
        ("apps", "statefulsets", "patch", "a StatefulSet target: its shadow, and the restart at restore"),
        ("autoscaling", "horizontalpodautoscalers", "create", "a target an HPA scales: the HPA's copy"),
        ("autoscaling", "horizontalpodautoscalers", "delete", "a target an HPA scales: the HPA's copy"),
        ("autoscaling", "horizontalpodautoscalers", "patch", "a target an HPA scales: the HPA's copy"),
        ("coordination.k8s.io", "leases", "create", "leader election (replicaCount > 1)"),
        ("coordination.k8s.io", "leases", "get", "leader election"),
        ("coordination.k8s.io", "leases", "update", "leader election"),
        ("events.k8s.io", "events", "patch", "an Event repeated (the recorder counts it on the first)"),
    ]
    .into_iter()
    .map(|(g, r, v, why)| ((g.to_string(), r.to_string(), v.to_string()), why))
    .collect();
    let unused: Vec<&Rule> = granted
        .iter()
        .filter(|r| !used.contains(*r) && !elsewhere.contains_key(*r))
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
