//! GRPCRoute, TLSRoute passthrough, h2c backends and timeouts as a client
//! meets them: `pontoon run` on the test bed makes each Gateway's data plane,
//! whose praxis really runs (a process pod), and so do the backends (the
//! Gateway API suite's echo-basic, as a gRPC server, an h2c server and an
//! HTTPS server with a certificate of its own). Requests go from the test
//! bed's network namespace to the Gateway's load-balancer address, through
//! kube-proxy, as a client in the cluster would send them. Runs as root;
//! otherwise reported as skipped (a failure under `CI=true`).

use std::{path::Path, process::Output, time::Duration};

use anyhow::{Context, ensure};
use gateway_api::{
    apis::standard::gateways::Gateway, backendtlspolicies::BackendTlsPolicy, grpcroutes::GrpcRoute,
    httproutes::HttpRoute, tlsroutes::TlsRoute,
};
use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{ConfigMap, Secret, Service},
};
use kube::{
    Api, Resource,
    api::{PostParams, ResourceExt},
};
use pontoon_tests::{
    TestNamespace, backends, gateway_api as crds, operator::Operator, traffic::TestbedNet, wait_for,
};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::json;

/// Process pods start, become Ready, and the data plane rolls out.
const TIMEOUT: Duration = Duration::from_secs(120);
const ECHO_IMAGE: &str = pontoon_tests::traffic::ECHO_IMAGE;
/// The suite's echo service (gRPC reflection names it so).
const ECHO_SERVICE: &str = "gateway_api_conformance.echo_basic.grpcecho.GrpcEcho";

struct Bed {
    net: TestbedNet,
    ns: TestNamespace,
    class: String,
    operator: Operator,
}

impl Bed {
    async fn new(prefix: &str, net: TestbedNet) -> anyhow::Result<Self> {
        crds::install_crds().await?;
        let ns = TestNamespace::new(prefix).await?;
        let class = ns.name().to_string();
        let controller_name = format!("pontoon.dev/{class}");
        let operator = Operator::start(
            Path::new(env!("CARGO_BIN_EXE_pontoon")),
            ns.name(),
            &[
                "--controllers",
                "gateway-api",
                "--gateway-controller-name",
                &controller_name,
            ],
        )?;
        crds::create_class(&class, &controller_name, None).await?;
        Ok(Self {
            net,
            ns,
            class,
            operator,
        })
    }

    async fn create<K>(&self, object: serde_json::Value) -> anyhow::Result<()>
    where
        K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
            + Clone
            + std::fmt::Debug
            + Serialize
            + DeserializeOwned,
    {
        let object: K = serde_json::from_value(object)?;
        self.ns
            .api::<K>()
            .create(&PostParams::default(), &object)
            .await
            .with_context(|| format!("creating {}", object.name_any()))?;
        Ok(())
    }

    /// Creates a Gateway of the test's class and waits until it is
    /// Programmed with an address; returns the address.
    async fn gateway(&self, name: &str, listeners: serde_json::Value) -> anyhow::Result<String> {
        self.gateway_with(name, json!({ "listeners": listeners }))
            .await
    }

    /// [`Self::gateway`] with more of the spec than its listeners.
    async fn gateway_with(&self, name: &str, spec: serde_json::Value) -> anyhow::Result<String> {
        let mut spec = spec;
        spec["gatewayClassName"] = json!(self.class);
        self.create::<Gateway>(json!({ "metadata": { "name": name }, "spec": spec }))
            .await?;
        let programmed = |g: Option<&Gateway>| {
            g.and_then(|g| g.status.as_ref()).is_some_and(|s| {
                s.conditions
                    .iter()
                    .flatten()
                    .any(|c| c.type_ == "Programmed" && c.status == "True")
                    && s.addresses.as_ref().is_some_and(|a| !a.is_empty())
            })
        };
        let gateways: Api<Gateway> = self.ns.api();
        let gateway = match wait_for(&gateways, name, programmed, TIMEOUT).await {
            Ok(g) => g.context("the Gateway is gone")?,
            Err(err) => {
                let now = gateways.get_opt(name).await?;
                anyhow::bail!(
                    "{err:#}: Gateway {name} is not Programmed: {:?}\n--- operator ---\n{}",
                    now.and_then(|g| g.status),
                    self.operator.log_tail(30)
                );
            }
        };
        let addresses = gateway.status.and_then(|s| s.addresses).unwrap_or_default();
        Ok(addresses[0].value.clone())
    }

    /// Waits until the route's condition `type_` is `status` for every parent.
    async fn route_condition<K>(&self, name: &str, type_: &str, status: &str) -> anyhow::Result<()>
    where
        K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
            + Clone
            + std::fmt::Debug
            + Serialize
            + DeserializeOwned
            + Send
            + 'static,
    {
        let holds = |r: Option<&K>| {
            let Some(r) = r else { return false };
            let value = serde_json::to_value(r).unwrap_or_default();
            let parents = value["status"]["parents"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            !parents.is_empty()
                && parents.iter().all(|p| {
                    p["conditions"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|c| c["type"] == type_ && c["status"] == status)
                })
        };
        wait_for(&self.ns.api::<K>(), name, holds, TIMEOUT)
            .await
            .with_context(|| format!("route {name}: {type_} never became {status}"))?;
        Ok(())
    }

    /// A Deployment of `replicas` echo-basic pods and its Service.
    async fn echo(
        &self,
        name: &str,
        replicas: usize,
        env: serde_json::Value,
        service_port: serde_json::Value,
        extra_pod_spec: serde_json::Value,
    ) -> anyhow::Result<()> {
        let mut env_list = vec![
            json!({ "name": "POD_NAME", "valueFrom": { "fieldRef": { "fieldPath": "metadata.name" } } }),
            json!({ "name": "NAMESPACE", "valueFrom": { "fieldRef": { "fieldPath": "metadata.namespace" } } }),
        ];
        env_list.extend(env.as_array().cloned().unwrap_or_default());
        let mut spec = json!({
            "containers": [{
                "name": "echo",
                "image": ECHO_IMAGE,
                "env": env_list,
                "volumeMounts": extra_pod_spec["volumeMounts"].clone(),
            }],
        });
        if let Some(volumes) = extra_pod_spec.get("volumes") {
            spec["volumes"] = volumes.clone();
        }
        if spec["containers"][0]["volumeMounts"].is_null() {
            spec["containers"][0]
                .as_object_mut()
                .context("container")?
                .remove("volumeMounts");
        }
        self.create::<Deployment>(json!({
            "metadata": { "name": name },
            "spec": {
                "replicas": replicas,
                "selector": { "matchLabels": { "app": name } },
                "template": { "metadata": { "labels": { "app": name } }, "spec": spec }
            }
        }))
        .await?;
        self.create::<Service>(json!({
            "metadata": { "name": name },
            "spec": { "selector": { "app": name }, "ports": [service_port] }
        }))
        .await?;
        backends::wait_for_endpoints(&self.ns, name, replicas, TIMEOUT).await?;
        Ok(())
    }

    /// curl in the test bed's network namespace; its output, whatever it was.
    fn curl(&self, args: &[&str]) -> anyhow::Result<Output> {
        self.net.curl(args)
    }

    /// Polls `check` until the data plane serves as it says, and stays so:
    /// a first right answer (the new config's pods serve), the Gateway's
    /// rollout over (as `kubectl rollout status` says: only the new pods
    /// left), then five right answers in a row (kube-proxy drops a pod a
    /// moment after it is gone; the old pods serve the old config until
    /// then). `check` says what was wrong when it was.
    async fn steadily(
        &self,
        gateway: &str,
        what: &str,
        mut check: impl FnMut() -> anyhow::Result<Result<(), String>>,
    ) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + TIMEOUT;
        let mut rolled_out = false;
        let mut in_a_row = 0;
        while in_a_row < 5 {
            match check()? {
                Ok(()) if rolled_out => in_a_row += 1,
                Ok(()) => {
                    let deployments: Api<Deployment> = self.ns.api();
                    wait_for(
                        &deployments,
                        &format!("praxis-{gateway}"),
                        |d: Option<&Deployment>| d.is_some_and(backends::rollout_complete),
                        deadline.saturating_duration_since(tokio::time::Instant::now()),
                    )
                    .await
                    .with_context(|| format!("{what}: the data plane never rolled out"))?;
                    rolled_out = true;
                }
                Err(wrong) => {
                    in_a_row = 0;
                    ensure!(
                        tokio::time::Instant::now() < deadline,
                        "{what}: {wrong}\n--- operator ---\n{}",
                        self.operator.log_tail(30)
                    );
                    tokio::time::sleep(Duration::from_millis(400)).await;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        crds::remove_gateways_blocking(self.ns.name(), std::slice::from_ref(&self.class));
    }
}

fn testbed() -> Option<TestbedNet> {
    TestbedNet::of_testbed().ok()
}

/// One unary gRPC call (an empty `EchoRequest`) over h2c with prior
/// knowledge, as a gRPC client makes it: the HTTP status, the response's
/// headers and body as text (the `EchoResponse` names the pod and method).
fn grpc_call(
    bed: &Bed,
    address: &str,
    method: &str,
    metadata: &[(&str, &str)],
) -> anyhow::Result<(u16, String)> {
    // A gRPC message frame: not compressed, length 0 (an empty EchoRequest).
    let frame = tempfile::NamedTempFile::new()?;
    std::fs::write(frame.path(), [0_u8; 5])?;
    let frame = frame.into_temp_path();
    let data = format!("@{}", frame.to_string_lossy());
    grpc_request(bed, address, method, metadata, &["--data-binary", &data])
}

/// A call that ends with its headers (no message). Praxis answers a call it
/// has no route for before reading the request, and resets a stream the
/// client is still sending on; when that reset overtakes the response curl
/// shows nothing (error 92). A request already ended has nothing to reset,
/// so the status a client reads is what the test sees.
fn grpc_call_without_message(bed: &Bed, address: &str, method: &str) -> anyhow::Result<u16> {
    grpc_request(bed, address, method, &[], &["--request", "POST"]).map(|(status, _)| status)
}

fn grpc_request(
    bed: &Bed,
    address: &str,
    method: &str,
    metadata: &[(&str, &str)],
    body: &[&str],
) -> anyhow::Result<(u16, String)> {
    let url = format!("http://{address}/{ECHO_SERVICE}/{method}");
    let headers: Vec<String> = metadata.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    let mut args = vec![
        "--silent",
        "--show-error",
        "--max-time",
        "5",
        "--http2-prior-knowledge",
        "--include",
        "--header",
        "content-type: application/grpc",
        "--header",
        "te: trailers",
    ];
    args.extend_from_slice(body);
    for h in &headers {
        args.extend(["--header", h.as_str()]);
    }
    args.push(&url);
    let output = bed.curl(&args)?;
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .with_context(|| {
            format!(
                "gRPC {method}: no response: {}",
                String::from_utf8_lossy(&output.stderr)
            )
        })?;
    Ok((status, text))
}

#[tokio::test]
async fn grpc_calls_go_where_their_routes_send_them_over_http2() -> anyhow::Result<()> {
    let Some(net) = testbed() else {
        return pontoon_tests::skip!("the test bed runs no process pods here (not root)");
    };
    let bed = Bed::new("gwp-grpc", net).await?;
    let grpc = json!([
        { "name": "GRPC_ECHO_SERVER", "value": "1" },
        { "name": "HTTP_PORT", "value": "3000" }
    ]);
    // One Service says it speaks h2c, the other says nothing: a GRPCRoute's
    // backends speak HTTP/2 either way.
    bed.echo(
        "grpc-one",
        2,
        grpc.clone(),
        json!({ "name": "grpc", "port": 8080, "targetPort": 3000, "appProtocol": "kubernetes.io/h2c" }),
        json!({}),
    )
    .await?;
    bed.echo(
        "grpc-two",
        1,
        grpc,
        json!({ "name": "grpc", "port": 8080, "targetPort": 3000 }),
        json!({}),
    )
    .await?;
    let address = bed
        .gateway(
            "grpc",
            json!([{ "name": "http", "protocol": "HTTP", "port": 80 }]),
        )
        .await?;
    let method = |m: &str| json!({ "service": ECHO_SERVICE, "method": m });
    bed.create::<GrpcRoute>(json!({
        "metadata": { "name": "echo" },
        "spec": {
            "parentRefs": [{ "name": "grpc" }],
            "rules": [
                { "matches": [{ "method": method("Echo") }],
                  "backendRefs": [{ "name": "grpc-one", "port": 8080 }] },
                { "matches": [{ "method": method("EchoTwo") }],
                  "backendRefs": [{ "name": "grpc-two", "port": 8080 }] },
                // More header matches win over fewer (the spec's precedence).
                { "matches": [{ "method": method("Echo"),
                                "headers": [{ "name": "version", "value": "two" }] }],
                  "backendRefs": [{ "name": "grpc-two", "port": 8080 }] },
                // Refused, named on the status; the other rules are served.
                { "matches": [{ "method": { "method": "Echo" } }],
                  "backendRefs": [{ "name": "grpc-two", "port": 8080 }] }
            ]
        }
    }))
    .await?;
    bed.route_condition::<GrpcRoute>("echo", "Accepted", "True")
        .await?;
    bed.route_condition::<GrpcRoute>("echo", "PartiallyInvalid", "True")
        .await?;

    // The config reaches the data plane's pods a moment after the route is
    // accepted, and they roll.
    bed.steadily("grpc", "Echo never reached grpc-one", || {
        Ok(match grpc_call(&bed, &address, "Echo", &[]) {
            Ok((200, text)) if text.contains("grpc-one-") => Ok(()),
            last => Err(format!("{last:?}")),
        })
    })
    .await?;
    for _ in 0..6 {
        let (status, text) = grpc_call(&bed, &address, "Echo", &[])?;
        ensure!(
            status == 200 && text.contains("grpc-one-"),
            "Echo: {text:.400}"
        );
        ensure!(
            text.contains("grpc-status: 0"),
            "Echo ends with OK: {text:.400}"
        );
        ensure!(
            text.contains(&format!("/{ECHO_SERVICE}/Echo")),
            "the server saw the method called: {text:.400}"
        );
        let (status, text) = grpc_call(&bed, &address, "EchoTwo", &[])?;
        ensure!(
            status == 200 && text.contains("grpc-two-"),
            "EchoTwo: {text:.400}"
        );
        let (status, text) = grpc_call(&bed, &address, "Echo", &[("version", "two")])?;
        ensure!(
            status == 200 && text.contains("grpc-two-"),
            "Echo with version: two: {text:.400}"
        );
    }
    // No rule for it: HTTP 404, which gRPC clients read as UNIMPLEMENTED.
    let status = grpc_call_without_message(&bed, &address, "EchoThree")?;
    ensure!(status == 404, "EchoThree has no route: got {status}");
    Ok(())
}

#[tokio::test]
async fn tls_passthrough_reaches_the_backend_which_shows_its_own_certificate_and_termination_shares_its_port()
-> anyhow::Result<()> {
    let Some(net) = testbed() else {
        return pontoon_tests::skip!("the test bed runs no process pods here (not root)");
    };
    let bed = Bed::new("gwp-tls", net).await?;
    // The backend's own certificate: the Gateway never has its key.
    let dir = tempfile::tempdir()?;
    let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    let made = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
        ])
        .args(["-nodes", "-days", "2", "-subj", "/CN=secure.example.com"])
        .args(["-addext", "subjectAltName=DNS:secure.example.com"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()?;
    ensure!(
        made.status.success(),
        "openssl: {}",
        String::from_utf8_lossy(&made.stderr)
    );
    let pem = |p: &Path| -> anyhow::Result<String> { Ok(std::fs::read_to_string(p)?) };
    bed.create::<Secret>(json!({
        "metadata": { "name": "secure-cert" },
        "type": "kubernetes.io/tls",
        "stringData": { "tls.crt": pem(&cert)?, "tls.key": pem(&key)? }
    }))
    .await?;
    // The Gateway's own certificate, for the listener that terminates.
    let (gateway_ca, gateway_cert, gateway_key) =
        signed(dir.path(), "gateway-ca", "plain.example.com")?;
    bed.create::<Secret>(json!({
        "metadata": { "name": "gateway-cert" },
        "type": "kubernetes.io/tls",
        "stringData": { "tls.crt": gateway_cert, "tls.key": gateway_key }
    }))
    .await?;
    std::fs::write(dir.path().join("gateway-ca.pem"), &gateway_ca)?;
    bed.echo(
        "secure",
        2,
        json!([
            { "name": "HTTP_PORT", "value": "3000" },
            { "name": "HTTPS_PORT", "value": "8443" },
            { "name": "TLS_SERVER_CERT", "value": "/etc/secret-volume/crt" },
            { "name": "TLS_SERVER_PRIVKEY", "value": "/etc/secret-volume/key" }
        ]),
        json!({ "name": "https", "port": 443, "targetPort": 8443 }),
        json!({
            "volumeMounts": [{ "name": "cert", "mountPath": "/etc/secret-volume" }],
            "volumes": [{ "name": "cert", "secret": { "secretName": "secure-cert", "items": [
                { "key": "tls.crt", "path": "crt" }, { "key": "tls.key", "path": "key" }
            ] } }]
        }),
    )
    .await?;
    // The same pods in plain HTTP, for the terminated stream.
    bed.create::<Service>(json!({
        "metadata": { "name": "secure-plain" },
        "spec": { "selector": { "app": "secure" }, "ports": [{ "port": 80, "targetPort": 3000 }] }
    }))
    .await?;
    backends::wait_for_endpoints(&bed.ns, "secure-plain", 2, TIMEOUT).await?;
    let address = bed
        .gateway(
            "tls",
            json!([{ "name": "tls", "protocol": "TLS", "port": 443, "hostname": "*.example.com",
                     "tls": { "mode": "Passthrough" } },
                   { "name": "plain", "protocol": "TLS", "port": 443, "hostname": "plain.example.com",
                     "tls": { "mode": "Terminate", "certificateRefs": [{ "name": "gateway-cert" }] } }]),
        )
        .await?;
    bed.create::<TlsRoute>(json!({
        "metadata": { "name": "secure" },
        "spec": {
            "parentRefs": [{ "name": "tls" }],
            "hostnames": ["secure.example.com"],
            "rules": [{ "backendRefs": [{ "name": "secure", "port": 443 }] }]
        }
    }))
    .await?;
    bed.route_condition::<TlsRoute>("secure", "Accepted", "True")
        .await?;
    bed.route_condition::<TlsRoute>("secure", "ResolvedRefs", "True")
        .await?;
    bed.create::<TlsRoute>(json!({
        "metadata": { "name": "plain" },
        "spec": {
            "parentRefs": [{ "name": "tls", "sectionName": "plain" }],
            "hostnames": ["plain.example.com"],
            "rules": [{ "backendRefs": [{ "name": "secure-plain", "port": 80 }] }]
        }
    }))
    .await?;
    bed.route_condition::<TlsRoute>("plain", "Accepted", "True")
        .await?;

    let resolve = format!("secure.example.com:443:{address}");
    let cacert = cert.display().to_string();
    let https_trusting = |name: &str, cacert: &str| -> anyhow::Result<Output> {
        let resolve = format!("{name}:443:{address}");
        let url = format!("https://{name}/passthrough");
        bed.curl(&[
            "--silent",
            "--show-error",
            "--max-time",
            "5",
            "--resolve",
            &resolve,
            "--cacert",
            cacert,
            &url,
        ])
    };
    let https = |name: &str| https_trusting(name, &cacert);
    // The body `name` answers once it does (trusting `cacert`), as the
    // Gateway's data plane rolls out.
    let served = |name: &'static str, cacert: String| {
        let https_trusting = &https_trusting;
        let operator = &bed.operator;
        let resolve = &resolve;
        async move {
            let deadline = tokio::time::Instant::now() + TIMEOUT;
            loop {
                let out = https_trusting(name, &cacert)?;
                if out.status.success() {
                    return anyhow::Ok(String::from_utf8_lossy(&out.stdout).into_owned());
                }
                ensure!(
                    tokio::time::Instant::now() < deadline,
                    "{name} never answered through the Gateway ({resolve}): {}\n--- operator ---\n{}",
                    String::from_utf8_lossy(&out.stderr),
                    operator.log_tail(30)
                );
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    };
    let body = served("secure.example.com", cacert.clone()).await?;
    // curl trusted only the backend's own certificate: the handshake was
    // the backend's, end to end; and the backend saw the client's server name.
    let echo: serde_json::Value = serde_json::from_str(&body).context(body.clone())?;
    ensure!(
        echo["pod"]
            .as_str()
            .is_some_and(|p| p.starts_with("secure-")),
        "answered by a secure pod: {body}"
    );
    ensure!(
        echo["tls"]["serverName"] == "secure.example.com",
        "the backend saw the SNI: {body}"
    );
    // A name no route takes: the connection is closed, no certificate shown.
    let other = https("other.example.com")?;
    ensure!(
        !other.status.success(),
        "other.example.com has no route, yet: {}",
        String::from_utf8_lossy(&other.stdout)
    );
    // The terminating listener on the same port: the Gateway's certificate
    // (curl trusts only its CA), and the backend gets plain HTTP.
    let gateway_ca = dir.path().join("gateway-ca.pem").display().to_string();
    let body = served("plain.example.com", gateway_ca.clone()).await?;
    let echo: serde_json::Value = serde_json::from_str(&body).context(body.clone())?;
    ensure!(
        echo["pod"]
            .as_str()
            .is_some_and(|p| p.starts_with("secure-")),
        "answered by a secure pod: {body}"
    );
    ensure!(
        echo["tls"].is_null(),
        "the backend got the stream in plain text: {body}"
    );
    // The passthrough name still shows the backend's own certificate.
    ensure!(
        !https_trusting("secure.example.com", &gateway_ca)?
            .status
            .success(),
        "the passthrough listener showed the Gateway's certificate"
    );
    Ok(())
}

#[tokio::test]
async fn h2c_backends_and_timeouts_of_http_routes() -> anyhow::Result<()> {
    let Some(net) = testbed() else {
        return pontoon_tests::skip!("the test bed runs no process pods here (not root)");
    };
    let bed = Bed::new("gwp-h2c", net).await?;
    // echo-basic answers HTTP/1.1 on 3000 and only h2c on 3001 ("Expected
    // h2c request" otherwise), and sleeps for `?delay=`.
    bed.echo(
        "web",
        1,
        json!([{ "name": "HTTP_PORT", "value": "3000" }, { "name": "H2C_PORT", "value": "3001" }]),
        json!({ "name": "http", "port": 8080, "targetPort": 3000 }),
        json!({}),
    )
    .await?;
    bed.create::<Service>(json!({
        "metadata": { "name": "web-h2c" },
        "spec": { "selector": { "app": "web" }, "ports": [
            { "name": "h2c", "port": 8081, "targetPort": 3001, "appProtocol": "kubernetes.io/h2c" }
        ] }
    }))
    .await?;
    backends::wait_for_endpoints(&bed.ns, "web-h2c", 1, TIMEOUT).await?;
    let address = bed
        .gateway(
            "web",
            json!([{ "name": "http", "protocol": "HTTP", "port": 80 }]),
        )
        .await?;
    let prefix = |p: &str| json!([{ "path": { "type": "PathPrefix", "value": p } }]);
    bed.create::<HttpRoute>(json!({
        "metadata": { "name": "web" },
        "spec": {
            "parentRefs": [{ "name": "web" }],
            "rules": [
                { "matches": prefix("/h2c"), "backendRefs": [{ "name": "web-h2c", "port": 8081 }] },
                { "matches": prefix("/slow"), "timeouts": { "request": "500ms" },
                  "backendRefs": [{ "name": "web", "port": 8080 }] },
                { "matches": prefix("/backend-slow"), "timeouts": { "backendRequest": "500ms" },
                  "backendRefs": [{ "name": "web", "port": 8080 }] },
                { "matches": prefix("/patient"), "timeouts": { "request": "0s" },
                  "backendRefs": [{ "name": "web", "port": 8080 }] }
            ]
        }
    }))
    .await?;
    bed.route_condition::<HttpRoute>("web", "Accepted", "True")
        .await?;
    let status = |path: &str, h2: bool| -> anyhow::Result<(u16, String)> {
        let url = format!("http://{address}{path}");
        let mut args = vec![
            "--silent",
            "--max-time",
            "8",
            "--write-out",
            "\n@@%{http_code}",
        ];
        if h2 {
            args.push("--http2-prior-knowledge");
        }
        args.push(&url);
        let out = bed.curl(&args)?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, code) = text.rsplit_once("\n@@").context("no status")?;
        Ok((code.parse().unwrap_or(0), body.to_string()))
    };
    bed.steadily("web", "/h2c never answered 200", || {
        let (code, body) = status("/h2c", false)?;
        Ok(if code == 200 {
            Ok(())
        } else {
            Err(format!("{code} {body:.300}"))
        })
    })
    .await?;
    // Both an HTTP/1.1 client and an HTTP/2 (prior knowledge) client reach
    // the h2c-only port: Praxis speaks h2c to it.
    for h2 in [false, true] {
        let (code, body) = status("/h2c/x", h2)?;
        ensure!(
            code == 200,
            "h2c backend, client h2={h2}: {code} {body:.300}"
        );
    }
    let (code, _) = status("/slow?delay=2s", false)?;
    ensure!(
        code == 504,
        "a request past its 500ms timeout gets 504, got {code}"
    );
    let (code, _) = status("/slow?delay=10ms", false)?;
    ensure!(code == 200, "within its timeout it is served, got {code}");
    let (code, _) = status("/backend-slow?delay=2s", false)?;
    ensure!(
        code == 504,
        "a backend request past 500ms gets 504, got {code}"
    );
    let (code, _) = status("/patient?delay=2s", false)?;
    ensure!(
        code == 200,
        "timeout 0s is none: served after 2 s, got {code}"
    );
    Ok(())
}

/// `openssl` with `args`; fails with its stderr.
fn openssl(args: &[&str]) -> anyhow::Result<()> {
    let out = std::process::Command::new("openssl").args(args).output()?;
    ensure!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// A CA, and a certificate for `name` it signs: (CA PEM, cert PEM, key PEM).
fn signed(dir: &Path, ca: &str, name: &str) -> anyhow::Result<(String, String, String)> {
    let at = |f: &str| dir.join(f).display().to_string();
    if !dir.join(format!("{ca}.crt")).exists() {
        openssl(&[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-days",
            "2",
            "-subj",
            &format!("/CN={ca}"),
            "-keyout",
            &at(&format!("{ca}.key")),
            "-out",
            &at(&format!("{ca}.crt")),
        ])?;
    }
    openssl(&[
        "req",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-subj",
        &format!("/CN={name}"),
        "-keyout",
        &at(&format!("{name}.key")),
        "-out",
        &at(&format!("{name}.csr")),
    ])?;
    std::fs::write(
        dir.join(format!("{name}.ext")),
        format!("subjectAltName=DNS:{name}\nextendedKeyUsage=serverAuth,clientAuth\n"),
    )?;
    openssl(&[
        "x509",
        "-req",
        "-in",
        &at(&format!("{name}.csr")),
        "-CA",
        &at(&format!("{ca}.crt")),
        "-CAkey",
        &at(&format!("{ca}.key")),
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        &at(&format!("{name}.ext")),
        "-out",
        &at(&format!("{name}.crt")),
    ])?;
    let read = |f: String| std::fs::read_to_string(dir.join(f));
    Ok((
        read(format!("{ca}.crt"))?,
        read(format!("{name}.crt"))?,
        read(format!("{name}.key"))?,
    ))
}

#[tokio::test]
async fn backend_tls_policies_make_the_data_plane_speak_verified_tls_to_the_backend()
-> anyhow::Result<()> {
    let Some(net) = testbed() else {
        return pontoon_tests::skip!("the test bed runs no process pods here (not root)");
    };
    let bed = Bed::new("gwp-btls", net).await?;
    let dir = tempfile::tempdir()?;
    let (ca, server_cert, server_key) = signed(dir.path(), "backend-ca", "abc.example.com")?;
    let (_, client_cert, client_key) = signed(dir.path(), "backend-ca", "gateway.example.com")?;
    let (other_ca, _, _) = signed(dir.path(), "other-ca", "abc.other.com")?;
    for (name, cert, key) in [
        ("server-cert", &server_cert, &server_key),
        ("client-cert", &client_cert, &client_key),
    ] {
        bed.create::<Secret>(json!({
            "metadata": { "name": name },
            "type": "kubernetes.io/tls",
            "stringData": { "tls.crt": cert, "tls.key": key }
        }))
        .await?;
    }
    for (name, pem) in [("backend-ca", &ca), ("other-ca", &other_ca)] {
        bed.create::<k8s_openapi::api::core::v1::ConfigMap>(json!({
            "metadata": { "name": name }, "data": { "ca.crt": pem }
        }))
        .await?;
    }
    // An HTTPS-only backend that asks for a client certificate (and checks
    // it against the CA) and echoes what it saw of the TLS connection.
    bed.echo(
        "secure",
        2,
        json!([
            { "name": "HTTP_PORT", "value": "3000" },
            { "name": "HTTPS_PORT", "value": "8443" },
            { "name": "TLS_SERVER_CERT", "value": "/etc/secret-volume/crt" },
            { "name": "TLS_SERVER_PRIVKEY", "value": "/etc/secret-volume/key" },
            { "name": "TLS_CLIENT_CACERTS", "value": "/etc/ca-volume/ca.crt" }
        ]),
        json!({ "name": "https", "port": 443, "targetPort": 8443 }),
        json!({
            "volumeMounts": [
                { "name": "cert", "mountPath": "/etc/secret-volume" },
                { "name": "ca", "mountPath": "/etc/ca-volume" }
            ],
            "volumes": [
                { "name": "cert", "secret": { "secretName": "server-cert", "items": [
                    { "key": "tls.crt", "path": "crt" }, { "key": "tls.key", "path": "key" }
                ] } },
                { "name": "ca", "configMap": { "name": "backend-ca" } }
            ]
        }),
    )
    .await?;
    let address = bed
        .gateway_with(
            "web",
            json!({
                "listeners": [{ "name": "http", "protocol": "HTTP", "port": 80 }],
                "tls": { "backend": { "clientCertificateRef": { "name": "client-cert" } } }
            }),
        )
        .await?;
    bed.create::<HttpRoute>(json!({
        "metadata": { "name": "secure" },
        "spec": {
            "parentRefs": [{ "name": "web" }],
            "rules": [{ "matches": [{ "path": { "type": "PathPrefix", "value": "/secure" } }],
                        "backendRefs": [{ "name": "secure", "port": 443 }] }]
        }
    }))
    .await?;
    let policies: Api<BackendTlsPolicy> = bed.ns.api();
    let policy: BackendTlsPolicy = serde_json::from_value(json!({
        "metadata": { "name": "secure" },
        "spec": {
            "targetRefs": [{ "group": "", "kind": "Service", "name": "secure", "sectionName": "https" }],
            "validation": {
                "hostname": "abc.example.com",
                "caCertificateRefs": [{ "group": "", "kind": "ConfigMap", "name": "backend-ca" }]
            }
        }
    }))?;
    policies.create(&PostParams::default(), &policy).await?;
    let condition = |type_: &'static str, status: &'static str, reason: &'static str| {
        move |p: Option<&BackendTlsPolicy>| {
            p.and_then(|p| p.status.as_ref()).is_some_and(|s| {
                s.ancestors.iter().any(|a| {
                    a.ancestor_ref.name == "web"
                        && a.conditions
                            .iter()
                            .any(|c| c.type_ == type_ && c.status == status && c.reason == reason)
                })
            })
        }
    };
    wait_for(
        &policies,
        "secure",
        condition("Accepted", "True", "Accepted"),
        TIMEOUT,
    )
    .await
    .context("the policy is never Accepted for Gateway web")?;
    let gateways: Api<Gateway> = bed.ns.api();
    let resolved = |g: Option<&Gateway>| {
        g.and_then(|g| g.status.as_ref()).is_some_and(|s| {
            s.conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == "ResolvedRefs" && c.status == "True")
        })
    };
    wait_for(&gateways, "web", resolved, TIMEOUT)
        .await
        .context("the Gateway's client certificate never resolved")?;

    let get = |path: &str| -> anyhow::Result<(u16, String)> {
        let url = format!("http://{address}{path}");
        let out = bed.curl(&[
            "--silent",
            "--max-time",
            "5",
            "--write-out",
            "\n%{http_code}",
            &url,
        ])?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
        Ok((code.trim().parse().unwrap_or(0), body.to_string()))
    };
    // Until the data plane answers as the policy says (it rolls out).
    let until = |want: fn(u16) -> bool, what: &'static str| {
        let get = &get;
        let operator = &bed.operator;
        async move {
            let deadline = tokio::time::Instant::now() + TIMEOUT;
            loop {
                let (code, body) = get("/secure")?;
                if want(code) {
                    return anyhow::Ok(body);
                }
                ensure!(
                    tokio::time::Instant::now() < deadline,
                    "{what}: still {code} {body}\n--- operator ---\n{}",
                    operator.log_tail(30)
                );
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        }
    };
    let body = until(|c| c == 200, "TLS to the backend never answered 200").await?;
    let echo: serde_json::Value = serde_json::from_str(&body).context(body.clone())?;
    ensure!(
        echo["pod"]
            .as_str()
            .is_some_and(|p| p.starts_with("secure-")),
        "answered by a secure pod: {body}"
    );
    ensure!(
        echo["tls"]["serverName"] == "abc.example.com",
        "the backend saw the policy's hostname as SNI: {body}"
    );
    let peer = echo["tls"]["peerCertificates"].to_string();
    let client_body: String = client_cert
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .collect();
    ensure!(
        peer.replace("\\n", "").contains(&client_body),
        "the backend saw the Gateway's client certificate: {body}"
    );

    // The backend's certificate is not for the policy's hostname: refused,
    // never sent in the clear instead.
    let mut wrong_host = policies.get("secure").await?;
    wrong_host.spec.validation.hostname = "mismatch.example.com".into();
    policies
        .replace("secure", &PostParams::default(), &wrong_host)
        .await?;
    until(
        |c| c >= 500,
        "a certificate not for the hostname was accepted",
    )
    .await?;
    // The right hostname again: served again.
    let mut right_host = policies.get("secure").await?;
    right_host.spec.validation.hostname = "abc.example.com".into();
    policies
        .replace("secure", &PostParams::default(), &right_host)
        .await?;
    until(|c| c == 200, "the right hostname again never answered 200").await?;
    // subjectAltNames: the certificate must carry one of them, whatever the
    // hostname (still the SNI). Pontoon's data plane checks them in a relay
    // of its own, which also presents the Gateway's client certificate.
    let mut sans = policies.get("secure").await?;
    sans.spec.validation.hostname = "other.example.com".into();
    sans.spec.validation.subject_alt_names = Some(serde_json::from_value(json!([
        { "type": "Hostname", "hostname": "dce.example.com" }
    ]))?);
    policies
        .replace("secure", &PostParams::default(), &sans)
        .await?;
    until(
        |c| c >= 500,
        "a certificate without any of the policy's subjectAltNames was accepted",
    )
    .await?;
    let mut sans = policies.get("secure").await?;
    sans.spec.validation.subject_alt_names = Some(serde_json::from_value(json!([
        { "type": "URI", "uri": "spiffe://example.com/nobody" },
        { "type": "Hostname", "hostname": "abc.example.com" }
    ]))?);
    policies
        .replace("secure", &PostParams::default(), &sans)
        .await?;
    let body = until(
        |c| c == 200,
        "a certificate with one of the subjectAltNames never answered 200",
    )
    .await?;
    let echo: serde_json::Value = serde_json::from_str(&body).context(body.clone())?;
    ensure!(
        echo["tls"]["serverName"] == "other.example.com",
        "through the relay the backend saw the policy's hostname as SNI: {body}"
    );
    ensure!(
        echo["tls"]["peerCertificates"]
            .to_string()
            .replace("\\n", "")
            .contains(&client_body),
        "through the relay the backend saw the Gateway's client certificate: {body}"
    );
    // Trusting another CA (the names still match): refused by the relay.
    let mut wrong_ca = policies.get("secure").await?;
    wrong_ca.spec.validation.ca_certificate_refs = Some(serde_json::from_value(json!([
        { "group": "", "kind": "ConfigMap", "name": "other-ca" }
    ]))?);
    policies
        .replace("secure", &PostParams::default(), &wrong_ca)
        .await?;
    until(
        |c| c >= 500,
        "a certificate of an untrusted CA was accepted",
    )
    .await?;
    // A CA ConfigMap that does not exist: the policy says so, and the
    // requests get 5xx.
    let mut missing = policies.get("secure").await?;
    missing.spec.validation.ca_certificate_refs = Some(serde_json::from_value(json!([
        { "group": "", "kind": "ConfigMap", "name": "no-such-ca" }
    ]))?);
    policies
        .replace("secure", &PostParams::default(), &missing)
        .await?;
    wait_for(
        &policies,
        "secure",
        condition("ResolvedRefs", "False", "InvalidCACertificateRef"),
        TIMEOUT,
    )
    .await
    .context("a missing CA ConfigMap is never reported")?;
    wait_for(
        &policies,
        "secure",
        condition("Accepted", "False", "NoValidCACertificate"),
        TIMEOUT,
    )
    .await?;
    until(|c| c >= 500, "a policy without a CA let requests through").await?;
    // Deleting the route: the Gateway's entry leaves the policy's status.
    bed.ns
        .api::<HttpRoute>()
        .delete("secure", &Default::default())
        .await?;
    let unlisted = |p: Option<&BackendTlsPolicy>| {
        p.is_some_and(|p| {
            p.status
                .as_ref()
                .is_none_or(|s| s.ancestors.iter().all(|a| a.ancestor_ref.name != "web"))
        })
    };
    wait_for(&policies, "secure", unlisted, TIMEOUT)
        .await
        .context("the Gateway's entry stays in the policy's status after its route went")?;
    Ok(())
}

/// A rule's `retry` (the experimental channel's HTTPRoute) as a client
/// meets it: an attempt past `backendRequest` is retried
/// (HTTPRouteRetryBackendTimeout), a refused connection is retried on
/// another endpoint, and without `retry` neither is. v1.6.3's conformance
/// suite tests retried statuses only (HTTPRouteRetry, which it runs).
/// echo-basic's `/retry/` handler counts attempts per `uuid` and fails the
/// first `succeedAfter` of them: with `delayRetry`, late. (Its default
/// failure, a connection reset after the request, Praxis 0.7.5 does not
/// retry on a fresh connection: HTTPRouteRetryConnectionError is not
/// claimed.)
#[tokio::test]
async fn retries_of_http_routes() -> anyhow::Result<()> {
    use pontoon::gateway::httproutes::HttpRoute as ExperimentalHttpRoute;
    let Some(net) = testbed() else {
        return pontoon_tests::skip!("the test bed runs no process pods here (not root)");
    };
    crds::install_experimental_http_route().await?;
    let bed = Bed::new("gwp-retry", net).await?;
    // `pair`: two pods, one of which listens on another port than the
    // Service sends to, so a connection to it is refused.
    for (name, port) in [("pair-live", 3000), ("pair-dead", 3005)] {
        bed.create::<Deployment>(json!({
            "metadata": { "name": name },
            "spec": {
                "replicas": 1,
                "selector": { "matchLabels": { "app": name } },
                "template": {
                    "metadata": { "labels": { "app": name, "tier": "pair" } },
                    "spec": { "containers": [{
                        "name": "echo",
                        "image": ECHO_IMAGE,
                        "env": [{ "name": "HTTP_PORT", "value": port.to_string() }],
                        "readinessProbe": {
                            "httpGet": { "path": "/health", "port": port }, "periodSeconds": 1
                        }
                    }] }
                }
            }
        }))
        .await?;
    }
    bed.create::<Service>(json!({
        "metadata": { "name": "pair" },
        "spec": { "selector": { "tier": "pair" },
                  "ports": [{ "name": "http", "port": 8080, "targetPort": 3000 }] }
    }))
    .await?;
    backends::wait_for_endpoints(&bed.ns, "pair", 2, TIMEOUT).await?;
    // `one`: a single pod, so every attempt of a request reaches the same
    // attempt counter.
    bed.echo(
        "one",
        1,
        json!([{ "name": "HTTP_PORT", "value": "3000" }]),
        json!({ "name": "http", "port": 8080, "targetPort": 3000 }),
        json!({}),
    )
    .await?;
    let address = bed
        .gateway(
            "web",
            json!([{ "name": "http", "protocol": "HTTP", "port": 80 }]),
        )
        .await?;
    let prefix = |p: &str| json!([{ "path": { "type": "PathPrefix", "value": p } }]);
    let pair = json!([{ "name": "pair", "port": 8080 }]);
    let one = json!([{ "name": "one", "port": 8080 }]);
    let slow = json!({ "backendRequest": "500ms" });
    bed.create::<ExperimentalHttpRoute>(json!({
        "metadata": { "name": "web" },
        "spec": {
            "parentRefs": [{ "name": "web" }],
            "rules": [
                { "matches": prefix("/pair/retried"), "retry": { "attempts": 2 },
                  "backendRefs": pair },
                { "matches": prefix("/pair/plain"), "backendRefs": pair },
                { "matches": prefix("/retry/timed-retried"), "retry": { "attempts": 2 },
                  "timeouts": slow, "backendRefs": one },
                { "matches": prefix("/retry/timed-plain"), "timeouts": slow,
                  "backendRefs": one }
            ]
        }
    }))
    .await?;
    bed.route_condition::<ExperimentalHttpRoute>("web", "Accepted", "True")
        .await?;
    let stored: ExperimentalHttpRoute = bed.ns.api().get("web").await?;
    ensure!(
        stored
            .spec
            .rules
            .as_ref()
            .and_then(|r| r[0].retry.as_ref())
            .is_some(),
        "the API server dropped the rule's retry: {:?}",
        stored.spec.rules
    );
    let status = |path: &str| -> anyhow::Result<u16> {
        let url = format!("http://{address}{path}");
        let out = bed.curl(&[
            "--silent",
            "--output",
            "/dev/null",
            "--max-time",
            "8",
            "--write-out",
            "%{http_code}",
            &url,
        ])?;
        Ok(String::from_utf8_lossy(&out.stdout).parse().unwrap_or(0))
    };
    // The config with the retries is served: round robin sends every
    // other request to the pod that refuses, and each is retried on the
    // other pod.
    bed.steadily("web", "/pair/retried never answered 200", || {
        let code = status("/pair/retried")?;
        Ok(if code == 200 {
            Ok(())
        } else {
            Err(format!("{code}"))
        })
    })
    .await?;
    let codes: Vec<u16> = (0..6)
        .map(|_| status("/pair/retried"))
        .collect::<anyhow::Result<_>>()?;
    ensure!(
        codes.iter().all(|c| *c == 200),
        "connections refused by one endpoint are retried on the other: {codes:?}"
    );
    // Without `retry`, Praxis tries a refused connect again on the same
    // endpoint only: the requests round robin gives the refusing pod fail.
    let codes: Vec<u16> = (0..6)
        .map(|_| status("/pair/plain"))
        .collect::<anyhow::Result<_>>()?;
    ensure!(
        codes.contains(&502) && codes.contains(&200),
        "without retry, the refusing endpoint's share fails: {codes:?}"
    );

    let uuid = |case: &str| format!("{case}-{}", std::process::id());
    // The first attempt outlasts backendRequest (500ms) and is cut off; the
    // retry is answered (the counter, held while the first one sleeps,
    // lets it through at 800ms).
    let late = "succeedAfter=1&responseCode=500&delayRetry=800ms";
    let code = status(&format!(
        "/retry/timed-retried?uuid={}&{late}",
        uuid("timed-1")
    ))?;
    ensure!(
        code == 200,
        "an attempt past backendRequest is retried, got {code}"
    );
    let code = status(&format!(
        "/retry/timed-plain?uuid={}&{late}",
        uuid("timed-2")
    ))?;
    ensure!(code == 504, "without retry it is a 504, got {code}");
    // More slow attempts than `attempts` allows: the last one's 504.
    let code = status(&format!(
        "/retry/timed-retried?uuid={}&succeedAfter=4&responseCode=500&delayRetry=800ms",
        uuid("timed-3")
    ))?;
    ensure!(code == 504, "retries spent, the timeout's 504, got {code}");
    Ok(())
}

/// What a request over HTTP/2 and TLS gets, as `<HTTP version> <status>`
/// (then curl's error, if any): a connection to `address`:443 asking for
/// `server_name` (trusting only `cacert`), for `host`, presenting
/// `client` (certificate, key) if given.
fn h2_status(
    bed: &Bed,
    address: &str,
    cacert: &str,
    server_name: &str,
    host: &str,
    client: Option<(&str, &str)>,
) -> anyhow::Result<String> {
    let resolve = format!("{server_name}:443:{address}");
    let url = format!("https://{server_name}/");
    let host = format!("Host: {host}");
    let mut args = vec![
        "--silent",
        "--show-error",
        "--http2",
        "--max-time",
        "5",
        "--cacert",
        cacert,
        "--resolve",
        &resolve,
        "-H",
        &host,
        "--output",
        "/dev/null",
        "--write-out",
        "%{http_version} %{http_code}",
    ];
    if let Some((cert, key)) = client {
        args.extend(["--cert", cert, "--key", key]);
    }
    args.push(&url);
    let out = bed.curl(&args)?;
    Ok(format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    ))
}

#[tokio::test]
async fn https_listeners_sharing_a_port_answer_421_to_a_host_of_another_listener()
-> anyhow::Result<()> {
    let Some(net) = testbed() else {
        return pontoon_tests::skip!("the test bed runs no process pods here (not root)");
    };
    let bed = Bed::new("gwp-421", net).await?;
    let dir = tempfile::tempdir()?;
    // One CA signs both listeners' certificates, so a client that trusts
    // it would take either connection for either name: the case 421 is for.
    let mut ca = String::new();
    for name in ["a.example.com", "b.example.com"] {
        let (ca_pem, cert, key) = signed(dir.path(), "gateway-ca", name)?;
        ca = ca_pem;
        bed.create::<Secret>(json!({
            "metadata": { "name": name },
            "type": "kubernetes.io/tls",
            "stringData": { "tls.crt": cert, "tls.key": key }
        }))
        .await?;
    }
    let cacert = dir.path().join("ca.pem");
    std::fs::write(&cacert, ca)?;
    let cacert = cacert.display().to_string();
    bed.echo(
        "web",
        1,
        json!([{ "name": "HTTP_PORT", "value": "3000" }]),
        json!({ "name": "http", "port": 8080, "targetPort": 3000 }),
        json!({}),
    )
    .await?;
    let address = bed
        .gateway(
            "shared",
            json!([{ "name": "any", "protocol": "HTTPS", "port": 443,
                     "tls": { "certificateRefs": [{ "name": "a.example.com" }] } },
                   { "name": "b", "protocol": "HTTPS", "port": 443, "hostname": "b.example.com",
                     "tls": { "certificateRefs": [{ "name": "b.example.com" }] } }]),
        )
        .await?;
    for (route, listener, hostnames) in [
        ("a", "any", json!(["a.example.com"])),
        ("b", "b", json!([])),
    ] {
        bed.create::<HttpRoute>(json!({
            "metadata": { "name": route },
            "spec": {
                "parentRefs": [{ "name": "shared", "sectionName": listener }],
                "hostnames": hostnames,
                "rules": [{ "backendRefs": [{ "name": "web", "port": 8080 }] }]
            }
        }))
        .await?;
        bed.route_condition::<HttpRoute>(route, "Accepted", "True")
            .await?;
    }
    let status =
        |server_name: &str, host: &str| h2_status(&bed, &address, &cacert, server_name, host, None);
    let cases = [
        // Each listener's own host: served.
        ("a.example.com", "a.example.com", "2 200"),
        ("b.example.com", "b.example.com", "2 200"),
        // The other listener's host on a connection made for this one.
        ("a.example.com", "b.example.com", "2 421"),
        ("b.example.com", "a.example.com", "2 421"),
        // A host only the listener without hostname takes, on its own
        // connection: not misdirected, just not routed.
        ("a.example.com", "c.example.com", "2 404"),
        ("b.example.com", "c.example.com", "2 421"),
    ];
    bed.steadily("shared", "a shared HTTPS port", || {
        for (server_name, host, expected) in cases {
            let got = status(server_name, host)?;
            if got != expected {
                return Ok(Err(format!(
                    "server name {server_name}, Host {host}: {got:?}, not {expected:?}"
                )));
            }
        }
        Ok(Ok(()))
    })
    .await?;

    // AllowInsecureFallback (one listener, so no misdirection to judge):
    // a certificate is asked for, and a client with one no CA of the
    // Gateway's signed, or with none, gets in all the same.
    let (clients_ca, _, _) = signed(dir.path(), "clients-ca", "unused.example.com")?;
    let (_, stranger_cert, stranger_key) = signed(dir.path(), "stranger-ca", "stranger")?;
    bed.create::<ConfigMap>(json!({
        "metadata": { "name": "clients" },
        "data": { "ca.crt": clients_ca }
    }))
    .await?;
    let fallback = bed
        .gateway_with(
            "fallback",
            json!({
                "listeners": [{ "name": "https", "protocol": "HTTPS", "port": 443,
                                "tls": { "certificateRefs": [{ "name": "a.example.com" }] } }],
                "tls": { "frontend": { "default": { "validation": {
                    "mode": "AllowInsecureFallback",
                    "caCertificateRefs": [{ "group": "", "kind": "ConfigMap", "name": "clients" }]
                } } } }
            }),
        )
        .await?;
    bed.create::<HttpRoute>(json!({
        "metadata": { "name": "fallback" },
        "spec": {
            "parentRefs": [{ "name": "fallback" }],
            "rules": [{ "backendRefs": [{ "name": "web", "port": 8080 }] }]
        }
    }))
    .await?;
    bed.route_condition::<HttpRoute>("fallback", "Accepted", "True")
        .await?;
    let cert = dir.path().join("stranger.crt").display().to_string();
    let key = dir.path().join("stranger.key").display().to_string();
    ensure!(stranger_cert.contains("CERTIFICATE") && stranger_key.contains("KEY"));
    let fetch = |client_cert: bool| {
        let client = client_cert.then_some((cert.as_str(), key.as_str()));
        h2_status(
            &bed,
            &fallback,
            &cacert,
            "a.example.com",
            "a.example.com",
            client,
        )
    };
    bed.steadily("fallback", "AllowInsecureFallback", || {
        for client_cert in [true, false] {
            let got = fetch(client_cert)?;
            if got != "2 200" {
                return Ok(Err(format!(
                    "with a certificate of another CA: {client_cert}: {got:?}"
                )));
            }
        }
        Ok(Ok(()))
    })
    .await
}
