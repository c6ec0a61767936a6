//! The Gateway API controllers on the test bed, as a user sees them through
//! status: an operator per test (its own GatewayClass and controllerName, so
//! tests never share a Gateway), and what kubectl would show for classes,
//! Gateways, listeners, routes and the data plane's objects.

use std::{collections::BTreeMap, path::Path, time::Duration};

use anyhow::Context;
use futures::TryStreamExt;
use gateway_api::{
    gatewayclasses::GatewayClass,
    gateways::Gateway,
    httproutes::{HttpRoute, HttpRouteStatusParents},
    listenersets::ListenerSet,
    referencegrants::ReferenceGrant,
};
use k8s_openapi::{
    ByteString,
    api::{
        apps::v1::Deployment,
        core::v1::{ConfigMap, Namespace, Secret, Service},
    },
    apimachinery::pkg::apis::meta::v1::Condition,
};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, Patch, PatchParams, PostParams},
    runtime::{WatchStreamExt, watcher},
};
use pontoon_tests::{
    TestNamespace, gateway_api as crds,
    operator::{Operator, sample},
    wait_for,
};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(60);

/// An operator serving one GatewayClass of its own.
struct Bed {
    ns: TestNamespace,
    class: String,
    controller_name: String,
    operator: Operator,
}

impl Bed {
    async fn new(prefix: &str) -> anyhow::Result<Self> {
        Self::with_args(prefix, &[]).await
    }

    /// A Bed whose operator gets `extra` arguments too.
    async fn with_args(prefix: &str, extra: &[&str]) -> anyhow::Result<Self> {
        crds::install_crds().await?;
        let ns = TestNamespace::new(prefix).await?;
        let class = ns.name().to_string();
        let controller_name = format!("pontoon.dev/{class}");
        let operator = Operator::start(
            Path::new(env!("CARGO_BIN_EXE_pontoon")),
            ns.name(),
            &[
                &[
                    "--controllers",
                    "gateway-api",
                    "--gateway-controller-name",
                    &controller_name,
                ],
                extra,
            ]
            .concat(),
        )?;
        let bed = Self {
            ns,
            class,
            controller_name,
            operator,
        };
        bed.create_class(&bed.class, &bed.controller_name, None)
            .await?;
        Ok(bed)
    }

    async fn create_class(
        &self,
        name: &str,
        controller: &str,
        parameters: Option<serde_json::Value>,
    ) -> anyhow::Result<()> {
        crds::create_class(name, controller, parameters).await
    }

    fn gateways(&self) -> Api<Gateway> {
        self.ns.api()
    }

    fn routes(&self) -> Api<HttpRoute> {
        self.ns.api()
    }

    async fn gateway(&self, name: &str, listeners: serde_json::Value) -> anyhow::Result<Gateway> {
        let gw: Gateway = serde_json::from_value(json!({
            "metadata": { "name": name },
            "spec": { "gatewayClassName": self.class, "listeners": listeners }
        }))?;
        Ok(self.gateways().create(&PostParams::default(), &gw).await?)
    }

    /// Service `web` and an HTTP Gateway on port 80, waited for until Programmed.
    async fn programmed_http_gateway(&self, name: &str) -> anyhow::Result<Gateway> {
        service(&self.ns, "web").await?;
        self.gateway(
            name,
            json!([{ "name": "http", "port": 80, "protocol": "HTTP" }]),
        )
        .await?;
        self.wait_gateway(name, "Programmed", "True").await
    }

    /// Waits until the Gateway's condition `type_` has `status`; on timeout
    /// shows the status and the operator's log.
    async fn wait_gateway(&self, name: &str, type_: &str, status: &str) -> anyhow::Result<Gateway> {
        self.wait_gateway_condition(name, type_, &format!("{type_}={status}"), |c| {
            c.status == status
        })
        .await
    }

    /// Waits until the Gateway's `type_` condition has `status` and `reason`
    /// and a message containing `says`; that condition.
    async fn wait_gateway_reason(
        &self,
        name: &str,
        (type_, status, reason): (&str, &str, &str),
        says: &str,
    ) -> anyhow::Result<Condition> {
        let matches =
            |c: &Condition| c.status == status && c.reason == reason && c.message.contains(says);
        let what = format!("{type_}={status} ({reason}, saying {says:?})");
        let gw = self
            .wait_gateway_condition(name, type_, &what, matches)
            .await?;
        let conditions = gw.status.and_then(|s| s.conditions).unwrap_or_default();
        condition(&conditions, type_)
            .cloned()
            .context("the condition waited for")
    }

    /// Waits until the Gateway has a `type_` condition that `matches`
    /// (`what` names it); on timeout shows the status and the operator's log.
    async fn wait_gateway_condition(
        &self,
        name: &str,
        type_: &str,
        what: &str,
        matches: impl Fn(&Condition) -> bool,
    ) -> anyhow::Result<Gateway> {
        let ok = |g: Option<&Gateway>| {
            g.and_then(|g| g.status.as_ref())
                .and_then(|s| s.conditions.as_ref())
                .and_then(|cs| condition(cs, type_))
                .is_some_and(&matches)
        };
        match wait_for(&self.gateways(), name, ok, TIMEOUT).await {
            Ok(Some(g)) => Ok(g),
            other => {
                let now = self.gateways().get_opt(name).await?;
                anyhow::bail!(
                    "Gateway {name} never had {what} ({:?}); status: {:#?}\n--- operator ---\n{}",
                    other.err(),
                    now.and_then(|g| g.status),
                    self.operator.log_tail(30)
                )
            }
        }
    }

    async fn route(
        &self,
        ns: &str,
        name: &str,
        spec: serde_json::Value,
    ) -> anyhow::Result<HttpRoute> {
        let route: HttpRoute = serde_json::from_value(json!({
            "metadata": { "name": name, "namespace": ns },
            "spec": spec
        }))?;
        let api: Api<HttpRoute> = Api::namespaced(self.ns.client.clone(), ns);
        Ok(api.create(&PostParams::default(), &route).await?)
    }

    /// Waits until the route's entry of ours for Gateway `gateway` satisfies `ok`.
    async fn wait_route(
        &self,
        ns: &str,
        name: &str,
        what: &str,
        ok: impl Fn(&[Condition]) -> bool,
    ) -> anyhow::Result<HttpRouteStatusParents> {
        let api: Api<HttpRoute> = Api::namespaced(self.ns.client.clone(), ns);
        let controller = self.controller_name.clone();
        let ours = move |r: &HttpRoute| {
            r.status
                .as_ref()
                .and_then(|s| s.parents.iter().find(|p| p.controller_name == controller))
                .cloned()
        };
        let found = {
            let ours = ours.clone();
            let cond =
                move |r: Option<&HttpRoute>| r.and_then(&ours).is_some_and(|p| ok(&p.conditions));
            wait_for(&api, name, cond, TIMEOUT).await
        };
        match found {
            Ok(Some(route)) => ours(&route).context("no entry of ours"),
            other => {
                let now = api.get_opt(name).await?;
                anyhow::bail!(
                    "route {ns}/{name} never showed {what} ({:?}); status: {:#?}\n--- operator ---\n{}",
                    other.err(),
                    now.and_then(|r| r.status),
                    self.operator.log_tail(30)
                )
            }
        }
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        crds::remove_gateways_blocking(self.ns.name(), std::slice::from_ref(&self.class));
    }
}

fn condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

fn is(conditions: &[Condition], type_: &str, status: &str, reason: &str) -> bool {
    condition(conditions, type_).is_some_and(|c| c.status == status && c.reason == reason)
}

fn listener_conditions(gw: &Gateway, name: &str) -> Vec<Condition> {
    gw.status
        .as_ref()
        .and_then(|s| s.listeners.as_ref())
        .and_then(|ls| ls.iter().find(|l| l.name == name))
        .map(|l| l.conditions.clone())
        .unwrap_or_default()
}

fn tls_secret(name: &str, cert: &str, key: &str, type_: &str) -> Secret {
    Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        type_: Some(type_.into()),
        data: Some(BTreeMap::from([
            ("tls.crt".to_string(), ByteString(cert.as_bytes().to_vec())),
            ("tls.key".to_string(), ByteString(key.as_bytes().to_vec())),
        ])),
        ..Default::default()
    }
}

const CERT: &str = include_str!("../gateway/src/judgement/resolve/testdata/tls.crt");
const KEY: &str = include_str!("../gateway/src/judgement/resolve/testdata/tls.key");

/// A Service with no pods behind it: enough for a backendRef to resolve.
async fn service(ns: &TestNamespace, name: &str) -> anyhow::Result<()> {
    let svc: Service = serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": { "selector": { "app": name }, "ports": [{ "name": "http", "port": 80, "targetPort": 8080 }] }
    }))?;
    ns.api::<Service>()
        .create(&PostParams::default(), &svc)
        .await?;
    Ok(())
}

#[tokio::test]
async fn the_class_is_accepted_with_the_features_pontoon_supports() -> anyhow::Result<()> {
    let bed = Bed::new("gw-class").await?;
    let classes: Api<GatewayClass> = Api::all(bed.ns.client.clone());
    let accepted = |c: Option<&GatewayClass>| {
        c.and_then(|c| c.status.as_ref())
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| is(cs, "Accepted", "True", "Accepted"))
    };
    let class = wait_for(&classes, &bed.class, accepted, TIMEOUT)
        .await?
        .context("class vanished")?;
    let status = class.status.context("no status")?;
    let accepted = condition(status.conditions.as_deref().unwrap_or_default(), "Accepted")
        .cloned()
        .context("no Accepted")?;
    assert_eq!(accepted.observed_generation, class.metadata.generation);
    let features: Vec<String> = status
        .supported_features
        .unwrap_or_default()
        .into_iter()
        .map(|f| f.name)
        .collect();
    assert!(features.contains(&"Gateway".to_string()), "{features:?}");
    assert!(features.contains(&"HTTPRoute".to_string()), "{features:?}");
    // What gateway_traffic.rs shows (through Pontoon's data plane, the
    // default), and not what it cannot do.
    for shown in [
        "HTTPRouteMethodMatching",
        "HTTPRoutePathRewrite",
        "HTTPRouteQueryParamMatching",
        "HTTPRoute303RedirectStatusCode",
        "HTTPRoutePathRedirect",
        "HTTPRouteCORS",
        "HTTPRouteRequestMirror",
        "HTTPRouteRequestMultipleMirrors",
        "HTTPRouteRequestPercentageMirror",
        "HTTPRouteBackendRequestHeaderModification",
        "ReferenceGrant",
        // gateway_protocols.rs and the conformance suite show these.
        "HTTPRouteRetry",
        "HTTPRouteRetryBackendTimeout",
        "BackendTLSPolicySANValidation",
        "GatewayHTTPSListenerDetectMisdirectedRequests",
        "GatewayFrontendClientCertificateValidationInsecureFallback",
        "TLSRouteModeTerminate",
        "TLSRouteModeMixed",
    ] {
        assert!(features.iter().any(|f| f == shown), "{shown}: {features:?}");
    }
    // Retries of a connection reset after the request went out need a
    // change to Praxis (docs/gateway-api-support.md).
    assert!(
        !features
            .iter()
            .any(|f| f == "HTTPRouteRetryConnectionError"),
        "{features:?}"
    );
    let mut sorted = features.clone();
    sorted.sort();
    assert_eq!(features, sorted, "supportedFeatures are sorted");

    // A class with parameters is refused; another controller's class is left alone.
    let with_params = format!("{}-params", bed.class);
    bed.create_class(
        &with_params,
        &bed.controller_name,
        Some(json!({ "group": "example.com", "kind": "Config", "name": "x" })),
    )
    .await?;
    let other = format!("{}-other", bed.class);
    bed.create_class(&other, "example.com/someone-else", None)
        .await?;
    let refused = |c: Option<&GatewayClass>| {
        c.and_then(|c| c.status.as_ref())
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| is(cs, "Accepted", "False", "InvalidParameters"))
    };
    wait_for(&classes, &with_params, refused, TIMEOUT).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let untouched = classes.get(&other).await?;
    let touched = untouched
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .iter()
        .any(|c| c.reason == "Accepted");
    assert!(
        !touched,
        "another controller's class gets no status from Pontoon"
    );
    for name in [with_params, other] {
        classes.delete(&name, &DeleteParams::default()).await?;
    }
    Ok(())
}

#[tokio::test]
async fn a_gateway_with_http_and_https_listeners_is_programmed_with_an_address()
-> anyhow::Result<()> {
    let bed = Bed::new("gw-prog").await?;
    bed.ns
        .api::<Secret>()
        .create(
            &PostParams::default(),
            &tls_secret("site", CERT, KEY, "kubernetes.io/tls"),
        )
        .await?;
    bed.gateway(
        "web",
        json!([
            { "name": "http", "port": 80, "protocol": "HTTP" },
            { "name": "https", "port": 443, "protocol": "HTTPS", "hostname": "*.example.com",
              "tls": { "certificateRefs": [{ "name": "site" }] } }
        ]),
    )
    .await?;
    let gw = bed.wait_gateway("web", "Programmed", "True").await?;
    let status = gw.status.clone().context("no status")?;
    let conditions = status.conditions.clone().unwrap_or_default();
    assert!(
        is(&conditions, "Accepted", "True", "Accepted"),
        "{conditions:#?}"
    );
    for c in &conditions {
        assert_eq!(c.observed_generation, gw.metadata.generation, "{c:?}");
    }
    let addresses = status.addresses.unwrap_or_default();
    assert!(!addresses.is_empty(), "the Gateway reports its address");
    for name in ["http", "https"] {
        let cs = listener_conditions(&gw, name);
        assert!(
            is(&cs, "Programmed", "True", "Programmed"),
            "{name}: {cs:#?}"
        );
        assert!(
            is(&cs, "ResolvedRefs", "True", "ResolvedRefs"),
            "{name}: {cs:#?}"
        );
        assert!(
            is(&cs, "Conflicted", "False", "NoConflicts"),
            "{name}: {cs:#?}"
        );
    }
    let gw = bed.gateways().get("web").await?;
    assert!(
        gw.finalizers()
            .contains(&"gateway.pontoon.dev/finalizer".to_string()),
        "our Gateway carries our finalizer: {:?} {:?}",
        gw.finalizers(),
        gw.annotations()
    );

    // The data plane: config, hardened Deployment, LoadBalancer Service.
    let cm = bed.ns.api::<ConfigMap>().get("praxis-web").await?;
    let config = cm
        .data
        .unwrap_or_default()
        .remove("config.yaml")
        .context("no config.yaml")?;
    let parsed: serde_json::Value = yaml_serde::from_str(&config)?;
    assert!(parsed.is_object(), "config.yaml is YAML: {config}");
    assert!(
        config.contains("/etc/praxis-tls/"),
        "the HTTPS listener uses the mounted certificate:\n{config}"
    );
    let d = bed.ns.api::<Deployment>().get("praxis-web").await?;
    let pod = d
        .spec
        .context("no spec")?
        .template
        .spec
        .context("no pod spec")?;
    let container = &pod.containers[0];
    let sc = container
        .security_context
        .clone()
        .context("no securityContext")?;
    assert_eq!(sc.run_as_user, Some(100));
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    // The certificate, copied into the Gateway's own Secret (pods mount
    // Secrets of their namespace only), is what the pods mount.
    let mounted: Vec<String> = pod
        .volumes
        .unwrap_or_default()
        .iter()
        .filter_map(|v| v.secret.as_ref()?.secret_name.clone())
        .collect();
    assert_eq!(mounted, ["praxis-web-certificates"]);
    let copy = bed
        .ns
        .api::<Secret>()
        .get("praxis-web-certificates")
        .await?;
    let keys: Vec<String> = copy.data.unwrap_or_default().into_keys().collect();
    let site = format!("{}-site", bed.ns.name());
    assert_eq!(keys, [format!("{site}.crt"), format!("{site}.key")]);
    assert!(
        config.contains(&format!("/etc/praxis-tls/{site}.crt")),
        "{config}"
    );
    let svc = bed.ns.api::<Service>().get("praxis-web").await?;
    let spec = svc.spec.context("no spec")?;
    assert_eq!(spec.type_.as_deref(), Some("LoadBalancer"));
    let mut ports: Vec<i32> = spec
        .ports
        .unwrap_or_default()
        .iter()
        .map(|p| p.port)
        .collect();
    ports.sort();
    assert_eq!(ports, [80, 443]);
    for object in [cm.metadata.labels.clone(), svc.metadata.labels.clone()] {
        let labels = object.unwrap_or_default();
        assert_eq!(
            labels.get("app.kubernetes.io/instance").map(String::as_str),
            Some("web")
        );
        assert_eq!(
            labels
                .get("app.kubernetes.io/managed-by")
                .map(String::as_str),
            Some("pontoon")
        );
    }
    Ok(())
}

#[tokio::test]
async fn listener_problems_are_reported_on_the_listener() -> anyhow::Result<()> {
    let bed = Bed::new("gw-listen").await?;
    let secrets = bed.ns.api::<Secret>();
    secrets
        .create(
            &PostParams::default(),
            &tls_secret("opaque", CERT, KEY, "Opaque"),
        )
        .await?;
    secrets
        .create(
            &PostParams::default(),
            &tls_secret("garbage", "not a certificate", KEY, "kubernetes.io/tls"),
        )
        .await?;
    bed.gateway(
        "mixed",
        json!([
            { "name": "ok", "port": 80, "protocol": "HTTP", "hostname": "ok.example.com" },
            { "name": "proto-a", "port": 9000, "protocol": "HTTP" },
            { "name": "proto-b", "port": 9000, "protocol": "HTTPS", "tls": { "certificateRefs": [{ "name": "opaque" }] } },
            { "name": "udp", "port": 53, "protocol": "UDP" },
            { "name": "missing", "port": 8443, "protocol": "HTTPS", "tls": { "certificateRefs": [{ "name": "nope" }] } },
            { "name": "wrong-type", "port": 8444, "protocol": "HTTPS", "tls": { "certificateRefs": [{ "name": "opaque" }] } },
            { "name": "bad-pem", "port": 8445, "protocol": "HTTPS", "tls": { "certificateRefs": [{ "name": "garbage" }] } }
        ]),
    )
    .await?;
    // Two listeners with the same port, protocol and hostname never get this
    // far: the API server refuses them (a HostnameConflict is unit-tested).
    let duplicate = bed
        .gateway(
            "duplicate",
            json!([
                { "name": "a", "port": 80, "protocol": "HTTP", "hostname": "same.example.com" },
                { "name": "b", "port": 80, "protocol": "HTTP", "hostname": "same.example.com" }
            ]),
        )
        .await;
    assert!(
        duplicate.is_err(),
        "the API server refuses duplicate listeners"
    );
    let gw = bed.wait_gateway("mixed", "Accepted", "True").await?;
    // Accepted, and its reason says not every listener is (Gateway API v1.6).
    let own = gw.status.as_ref().and_then(|s| s.conditions.clone());
    let accepted = condition(own.as_deref().unwrap_or_default(), "Accepted").cloned();
    let accepted = accepted.expect("the Gateway has an Accepted condition");
    assert_eq!(accepted.reason, "ListenersNotValid", "{accepted:?}");
    assert!(accepted.message.contains("udp"), "{accepted:?}");
    let listener = |name: &str| listener_conditions(&gw, name);
    assert!(is(&listener("ok"), "Conflicted", "False", "NoConflicts"));
    assert!(is(
        &listener("proto-a"),
        "Conflicted",
        "True",
        "ProtocolConflict"
    ));
    assert!(is(
        &listener("proto-b"),
        "Conflicted",
        "True",
        "ProtocolConflict"
    ));
    assert!(is(
        &listener("udp"),
        "Accepted",
        "False",
        "UnsupportedProtocol"
    ));
    for name in ["missing", "wrong-type", "bad-pem"] {
        assert!(
            is(
                &listener(name),
                "ResolvedRefs",
                "False",
                "InvalidCertificateRef"
            ),
            "{name}: {:#?}",
            listener(name)
        );
        assert!(
            is(&listener(name), "Programmed", "False", "Invalid"),
            "{name}"
        );
    }
    let message = |name: &str, type_: &str| {
        condition(&listener(name), type_)
            .map(|c| c.message.clone())
            .unwrap_or_default()
    };
    assert!(message("missing", "ResolvedRefs").contains("does not exist"));
    assert!(message("wrong-type", "ResolvedRefs").contains("Opaque"));
    assert!(message("bad-pem", "ResolvedRefs").contains("PEM"));

    // Creating the missing Secret fixes its listener without touching the Gateway.
    secrets
        .create(
            &PostParams::default(),
            &tls_secret("nope", CERT, KEY, "kubernetes.io/tls"),
        )
        .await?;
    let resolved = |g: Option<&Gateway>| {
        g.is_some_and(|g| {
            is(
                &listener_conditions(g, "missing"),
                "ResolvedRefs",
                "True",
                "ResolvedRefs",
            )
        })
    };
    wait_for(&bed.gateways(), "mixed", resolved, TIMEOUT)
        .await
        .with_context(|| bed.operator.log_tail(20))?;
    Ok(())
}

#[tokio::test]
async fn routes_attach_or_are_refused_with_the_specs_reasons() -> anyhow::Result<()> {
    let bed = Bed::new("gw-routes").await?;
    let own = bed.ns.name().to_string();
    let other = TestNamespace::new("gw-routes-other").await?;
    let labelled = TestNamespace::new("gw-routes-team").await?;
    Api::<Namespace>::all(bed.ns.client.clone())
        .patch(
            labelled.name(),
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "labels": { "team": "web" } } })),
        )
        .await?;
    service(&bed.ns, "web").await?;
    service(&other, "web").await?;
    service(&labelled, "web").await?;
    bed.gateway(
        "gw",
        json!([
            { "name": "same", "port": 80, "protocol": "HTTP", "hostname": "same.example.com" },
            { "name": "team", "port": 81, "protocol": "HTTP",
              "allowedRoutes": { "namespaces": { "from": "Selector", "selector": { "matchLabels": { "team": "web" } } } } },
            { "name": "all", "port": 82, "protocol": "HTTP", "hostname": "*.all.com",
              "allowedRoutes": { "namespaces": { "from": "All" } } }
        ]),
    )
    .await?;
    bed.wait_gateway("gw", "Programmed", "True").await?;
    let parent =
        |section: Option<&str>| json!({ "name": "gw", "namespace": own, "sectionName": section });
    let backend = json!([{ "backendRefs": [{ "name": "web", "port": 80 }] }]);

    bed.route(
        &own,
        "mine",
        json!({ "parentRefs": [parent(Some("same"))], "rules": backend }),
    )
    .await?;
    bed.route(
        other.name(),
        "stranger",
        json!({ "parentRefs": [parent(Some("same"))], "rules": backend }),
    )
    .await?;
    bed.route(
        labelled.name(),
        "teammate",
        json!({ "parentRefs": [parent(Some("team"))], "rules": backend }),
    )
    .await?;
    bed.route(
        other.name(),
        "anyone",
        json!({ "parentRefs": [parent(Some("all"))],
        "hostnames": ["shop.all.com"], "rules": backend }),
    )
    .await?;
    bed.route(
        &own,
        "wrong-host",
        json!({ "parentRefs": [parent(Some("same"))],
        "hostnames": ["elsewhere.com"], "rules": backend }),
    )
    .await?;
    bed.route(
        &own,
        "no-section",
        json!({ "parentRefs": [parent(Some("nope"))], "rules": backend }),
    )
    .await?;
    bed.route(
        &own,
        "missing-backend",
        json!({ "parentRefs": [parent(Some("same"))],
        "rules": [{ "backendRefs": [{ "name": "ghost", "port": 80 }] }] }),
    )
    .await?;
    bed.route(&own, "bucket", json!({ "parentRefs": [parent(Some("same"))],
        "rules": [{ "backendRefs": [{ "group": "storage.example.com", "kind": "Bucket", "name": "b" }] }] })).await?;
    bed.route(
        &own,
        "cross",
        json!({ "parentRefs": [parent(Some("same"))],
        "rules": [{ "backendRefs": [{ "name": "web", "namespace": other.name(), "port": 80 }] }] }),
    )
    .await?;

    let accepted = |cs: &[Condition]| is(cs, "Accepted", "True", "Accepted");
    bed.wait_route(&own, "mine", "Accepted", accepted).await?;
    bed.wait_route(labelled.name(), "teammate", "Accepted", accepted)
        .await?;
    bed.wait_route(other.name(), "anyone", "Accepted", accepted)
        .await?;
    let refused =
        |reason: &'static str| move |cs: &[Condition]| is(cs, "Accepted", "False", reason);
    bed.wait_route(
        other.name(),
        "stranger",
        "NotAllowedByListeners",
        refused("NotAllowedByListeners"),
    )
    .await?;
    bed.wait_route(
        &own,
        "wrong-host",
        "NoMatchingListenerHostname",
        refused("NoMatchingListenerHostname"),
    )
    .await?;
    bed.wait_route(
        &own,
        "no-section",
        "NoMatchingParent",
        refused("NoMatchingParent"),
    )
    .await?;
    let unresolved =
        |reason: &'static str| move |cs: &[Condition]| is(cs, "ResolvedRefs", "False", reason);
    bed.wait_route(
        &own,
        "missing-backend",
        "BackendNotFound",
        unresolved("BackendNotFound"),
    )
    .await?;
    bed.wait_route(&own, "bucket", "InvalidKind", unresolved("InvalidKind"))
        .await?;
    let before = bed
        .wait_route(
            &own,
            "cross",
            "RefNotPermitted",
            unresolved("RefNotPermitted"),
        )
        .await?;

    // A new ReferenceGrant admits the route at once; lastTransitionTime moves.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let grant: ReferenceGrant = serde_json::from_value(json!({
        "metadata": { "name": "from-gw-routes", "namespace": other.name() },
        "spec": {
            "from": [{ "group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "namespace": own }],
            "to": [{ "group": "", "kind": "Service" }]
        }
    }))?;
    other
        .api::<ReferenceGrant>()
        .create(&PostParams::default(), &grant)
        .await?;
    let after = bed
        .wait_route(&own, "cross", "ResolvedRefs after the grant", |cs| {
            is(cs, "ResolvedRefs", "True", "ResolvedRefs")
        })
        .await?;
    let time = |p: &HttpRouteStatusParents| {
        condition(&p.conditions, "ResolvedRefs").map(|c| c.last_transition_time.clone())
    };
    assert!(
        time(&after) > time(&before),
        "lastTransitionTime moved when the status flipped"
    );
    let accepted_time = |p: &HttpRouteStatusParents| {
        condition(&p.conditions, "Accepted").map(|c| c.last_transition_time.clone())
    };
    assert_eq!(
        accepted_time(&after),
        accepted_time(&before),
        "an unchanged condition keeps its time"
    );

    // Deleting the grant takes the permission away again, at once (a
    // deletion is a change as much as a creation).
    other
        .api::<ReferenceGrant>()
        .delete("from-gw-routes", &Default::default())
        .await?;
    bed.wait_route(
        &own,
        "cross",
        "RefNotPermitted once the grant is gone",
        |cs| is(cs, "ResolvedRefs", "False", "RefNotPermitted"),
    )
    .await?;

    // A namespace that loses the selector's label loses its route's
    // attachment, and gets it back with the label.
    let namespaces = Api::<Namespace>::all(bed.ns.client.clone());
    let label = |value: Option<&str>| {
        let (namespaces, name) = (namespaces.clone(), labelled.name().to_string());
        let body = json!({ "metadata": { "labels": { "team": value } } });
        async move {
            namespaces
                .patch(&name, &PatchParams::default(), &Patch::Merge(body))
                .await
        }
    };
    label(None).await?;
    bed.wait_route(
        labelled.name(),
        "teammate",
        "NotAllowedByListeners once its namespace lost the label",
        refused("NotAllowedByListeners"),
    )
    .await?;
    label(Some("web")).await?;
    bed.wait_route(
        labelled.name(),
        "teammate",
        "Accepted once the label is back",
        accepted,
    )
    .await?;

    // attachedRoutes counts what attached.
    let attached = |g: Option<&Gateway>| {
        g.and_then(|g| g.status.as_ref())
            .and_then(|s| s.listeners.as_ref())
            .is_some_and(|ls| {
                let count = |n: &str| ls.iter().find(|l| l.name == n).map(|l| l.attached_routes);
                // same: mine, missing-backend, bucket, cross (backend problems still attach).
                count("same") == Some(4) && count("team") == Some(1) && count("all") == Some(1)
            })
    };
    wait_for(&bed.gateways(), "gw", attached, TIMEOUT)
        .await
        .with_context(|| format!("{:#?}", bed.operator.log_tail(20)))?;
    Ok(())
}

/// Which child of a Gateway a write was of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Child {
    Config,
    Rollout,
}

#[tokio::test]
async fn a_route_change_changes_the_config_and_rolls_the_pods() -> anyhow::Result<()> {
    let bed = Bed::new("gw-change").await?;
    let own = bed.ns.name().to_string();
    bed.programmed_http_gateway("gw").await?;
    bed.route(
        &own,
        "r",
        json!({ "parentRefs": [{ "name": "gw" }],
        "rules": [{ "matches": [{ "path": { "type": "PathPrefix", "value": "/v1" } }],
                    "backendRefs": [{ "name": "web", "port": 80 }] }] }),
    )
    .await?;
    let configmaps = bed.ns.api::<ConfigMap>();
    let deployments = bed.ns.api::<Deployment>();
    let config_with = |needle: &'static str| {
        move |c: Option<&ConfigMap>| {
            c.and_then(|c| c.data.as_ref())
                .and_then(|d| d.get("config.yaml"))
                .is_some_and(|y| y.contains(needle))
        }
    };
    wait_for(&configmaps, "praxis-gw", config_with("/v1"), TIMEOUT).await?;
    let hash = |d: &Deployment| {
        d.spec
            .as_ref()
            .and_then(|s| s.template.metadata.as_ref())
            .and_then(|m| m.annotations.as_ref())
            .and_then(|a| a.get("gateway.pontoon.dev/config-hash"))
            .cloned()
    };
    let first = hash(&deployments.get("praxis-gw").await?);
    assert!(first.is_some(), "the pods carry the config's hash");

    // Every write of either child, with its revision: the ConfigMap's as
    // the hash of the config it holds, the Deployment's as the hash its
    // pods carry. Both are revisions of the test bed's one etcd, so their
    // order is the order of the writes.
    let writes = std::sync::Arc::new(std::sync::Mutex::new(Vec::<(Child, u64, String)>::new()));
    let record = {
        let writes = writes.clone();
        move |kind: Child, rv: Option<String>, hash: Option<String>| {
            if let (Some(rv), Some(hash)) = (rv.and_then(|v| v.parse().ok()), hash) {
                writes.lock().unwrap().push((kind, rv, hash));
            }
        }
    };
    let only = || watcher::Config::default().fields("metadata.name=praxis-gw");
    let config_hash = |c: &ConfigMap| {
        c.data
            .as_ref()
            .and_then(|d| d.get("config.yaml"))
            .map(|y| pontoon::gateway::data_plane::children::data_plane_hash(y, None))
    };
    let watches = {
        let record_rollout = record.clone();
        let configs = watcher(configmaps.clone(), only())
            .applied_objects()
            .try_for_each(move |c| {
                record(Child::Config, c.resource_version(), config_hash(&c));
                std::future::ready(Ok(()))
            });
        let rollouts = watcher(deployments.clone(), only())
            .applied_objects()
            .try_for_each(move |d| {
                record_rollout(Child::Rollout, d.resource_version(), hash(&d));
                std::future::ready(Ok(()))
            });
        tokio::spawn(async move { futures::try_join!(configs, rollouts) })
    };
    bed.routes()
        .patch(
            "r",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "rules": [{
                "matches": [{ "path": { "type": "PathPrefix", "value": "/v2" } }],
                "backendRefs": [{ "name": "web", "port": 80 }] }] } })),
        )
        .await?;
    wait_for(&configmaps, "praxis-gw", config_with("/v2"), TIMEOUT).await?;
    let config = configmaps.get("praxis-gw").await?;
    let current = config_hash(&config).context("the ConfigMap holds a config")?;
    let rolled = |d: Option<&Deployment>| d.is_some_and(|d| hash(d).as_ref() == Some(&current));
    wait_for(&deployments, "praxis-gw", rolled, TIMEOUT).await?;

    // No pod of the rollout may start with the old config (Praxis reads it
    // once): the ConfigMap holding the new config is written before the
    // Deployment whose pods carry its hash.
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    let (config, rollout) = loop {
        let seen = writes.lock().unwrap().clone();
        let first_of = |kind: Child| {
            seen.iter()
                .filter(|(k, _, h)| *k == kind && *h == current)
                .map(|(_, rv, _)| *rv)
                .min()
        };
        if let (Some(config), Some(rollout)) = (first_of(Child::Config), first_of(Child::Rollout)) {
            break (config, rollout);
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "the watches did not see both writes of config {current}: {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    watches.abort();
    assert!(
        config < rollout,
        "the new config (revision {config}) is written before the rollout starts (revision {rollout})"
    );
    Ok(())
}

/// The children are not written again while nothing changes (every status
/// change of one wakes the Gateway), but a child someone deleted or edited
/// is put back as the Gateway says it should be.
#[tokio::test]
async fn a_child_deleted_or_edited_by_hand_is_put_back() -> anyhow::Result<()> {
    let bed = Bed::new("gw-heal").await?;
    bed.programmed_http_gateway("gw").await?;
    let configmaps = bed.ns.api::<ConfigMap>();
    let deployments = bed.ns.api::<Deployment>();
    let config = |c: &ConfigMap| {
        c.data
            .as_ref()
            .and_then(|d| d.get("config.yaml"))
            .cloned()
            .unwrap_or_default()
    };
    let original = config(&configmaps.get("praxis-gw").await?);
    assert!(original.contains("listeners"), "{original}");

    configmaps
        .delete("praxis-gw", &DeleteParams::default())
        .await?;
    let restored = |c: Option<&ConfigMap>| c.is_some_and(|c| config(c) == original);
    wait_for(&configmaps, "praxis-gw", restored, TIMEOUT)
        .await
        .context("a deleted ConfigMap comes back")?;

    configmaps
        .patch(
            "praxis-gw",
            &PatchParams::default(),
            &Patch::Merge(json!({ "data": { "config.yaml": "edited: by hand\n" } })),
        )
        .await?;
    wait_for(&configmaps, "praxis-gw", restored, TIMEOUT)
        .await
        .context("an edited config is written back")?;

    let image = |d: &Deployment| {
        d.spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .and_then(|p| p.containers.first())
            .and_then(|c| c.image.clone())
            .unwrap_or_default()
    };
    let praxis = image(&deployments.get("praxis-gw").await?);
    deployments
        .patch(
            "praxis-gw",
            &PatchParams::default(),
            &Patch::Strategic(json!({ "spec": { "template": { "spec": {
                "containers": [{ "name": "praxis", "image": "example.org/not-praxis:1" }] } } } })),
        )
        .await?;
    let back = |d: Option<&Deployment>| d.is_some_and(|d| image(d) == praxis);
    wait_for(&deployments, "praxis-gw", back, TIMEOUT)
        .await
        .context("an edited Deployment is put back")?;

    // A Service's status changes (its load-balancer address) are not edits;
    // its selector is.
    let services = bed.ns.api::<Service>();
    let selector = |s: &Service| s.spec.as_ref().and_then(|s| s.selector.clone());
    let wanted = selector(&services.get("praxis-gw").await?);
    assert!(
        wanted.is_some(),
        "the data plane's Service selects its pods"
    );
    services
        .patch(
            "praxis-gw",
            &PatchParams::default(),
            &Patch::Merge(
                json!({ "spec": { "selector": { "app.kubernetes.io/instance": "elsewhere" } } }),
            ),
        )
        .await?;
    let selects = |s: Option<&Service>| s.is_some_and(|s| selector(s) == wanted);
    wait_for(&services, "praxis-gw", selects, TIMEOUT)
        .await
        .context("an edited Service is put back")?;
    bed.wait_gateway("gw", "Programmed", "True").await?;
    Ok(())
}

#[tokio::test]
async fn deleting_a_gateway_removes_its_children_and_its_route_entries() -> anyhow::Result<()> {
    let bed = Bed::new("gw-delete").await?;
    let own = bed.ns.name().to_string();
    bed.programmed_http_gateway("gw").await?;
    bed.route(
        &own,
        "r",
        json!({ "parentRefs": [{ "name": "gw" }],
        "rules": [{ "backendRefs": [{ "name": "web", "port": 80 }] }] }),
    )
    .await?;
    bed.wait_route(&own, "r", "Accepted", |cs| {
        is(cs, "Accepted", "True", "Accepted")
    })
    .await?;

    bed.gateways()
        .delete("gw", &DeleteParams::foreground())
        .await?;
    let gone = |g: Option<&Gateway>| g.is_none();
    wait_for(&bed.gateways(), "gw", gone, TIMEOUT)
        .await
        .with_context(|| bed.operator.log_tail(20))?;
    for kind in ["ConfigMap", "Deployment", "Service"] {
        let present = match kind {
            "ConfigMap" => bed
                .ns
                .api::<ConfigMap>()
                .get_opt("praxis-gw")
                .await?
                .is_some(),
            "Deployment" => bed
                .ns
                .api::<Deployment>()
                .get_opt("praxis-gw")
                .await?
                .is_some(),
            _ => bed
                .ns
                .api::<Service>()
                .get_opt("praxis-gw")
                .await?
                .is_some(),
        };
        assert!(!present, "{kind} praxis-gw is gone with the Gateway");
    }
    let entry_gone = |r: Option<&HttpRoute>| {
        r.is_some_and(|r| {
            r.status.as_ref().is_none_or(|s| {
                s.parents
                    .iter()
                    .all(|p| p.controller_name != bed.controller_name)
            })
        })
    };
    wait_for(&bed.routes(), "r", entry_gone, TIMEOUT).await?;
    Ok(())
}

#[tokio::test]
async fn other_controllers_gateways_and_refused_parameters() -> anyhow::Result<()> {
    let bed = Bed::new("gw-others").await?;
    let foreign_class = format!("{}-foreign", bed.class);
    bed.create_class(&foreign_class, "example.com/someone-else", None)
        .await?;
    let foreign: Gateway = serde_json::from_value(json!({
        "metadata": { "name": "foreign" },
        "spec": { "gatewayClassName": foreign_class, "listeners": [{ "name": "http", "port": 80, "protocol": "HTTP" }] }
    }))?;
    bed.gateways()
        .create(&PostParams::default(), &foreign)
        .await?;
    let with_params: Gateway = serde_json::from_value(json!({
        "metadata": { "name": "params" },
        "spec": { "gatewayClassName": bed.class,
                  "infrastructure": { "parametersRef": { "group": "example.com", "kind": "Config", "name": "x" } },
                  "listeners": [{ "name": "http", "port": 80, "protocol": "HTTP" }] }
    }))?;
    bed.gateways()
        .create(&PostParams::default(), &with_params)
        .await?;
    let gw = bed.wait_gateway("params", "Accepted", "False").await?;
    let conditions = gw.status.and_then(|s| s.conditions).unwrap_or_default();
    assert!(
        is(&conditions, "Accepted", "False", "InvalidParameters"),
        "{conditions:#?}"
    );
    assert!(
        bed.ns
            .api::<Deployment>()
            .get_opt("praxis-params")
            .await?
            .is_none(),
        "a refused Gateway gets no data plane"
    );
    let foreign = bed.gateways().get("foreign").await?;
    assert!(
        foreign.finalizers().is_empty(),
        "another controller's Gateway gets no finalizer"
    );
    assert!(
        foreign
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .all(|c| c.reason != "Accepted" || c.status != "True")
    );
    assert!(
        bed.ns
            .api::<Deployment>()
            .get_opt("praxis-foreign")
            .await?
            .is_none()
    );
    Api::<GatewayClass>::all(bed.ns.client.clone())
        .delete(&foreign_class, &DeleteParams::default())
        .await?;
    Ok(())
}

#[tokio::test]
async fn with_stock_praxis_the_class_claims_less_and_routes_needing_pontoons_filters_are_refused()
-> anyhow::Result<()> {
    let bed = Bed::with_args(
        "gw-stock",
        &["--praxis-image", "ghcr.io/praxis-proxy/praxis:0.7.5"],
    )
    .await?;
    let classes: Api<GatewayClass> = Api::all(bed.ns.client.clone());
    let has_features = |c: Option<&GatewayClass>| {
        c.and_then(|c| c.status.as_ref())
            .is_some_and(|s| s.supported_features.is_some())
    };
    let class = wait_for(&classes, &bed.class, has_features, TIMEOUT)
        .await?
        .context("class vanished")?;
    let features: Vec<String> = class
        .status
        .and_then(|s| s.supported_features)
        .unwrap_or_default()
        .into_iter()
        .map(|f| f.name)
        .collect();
    assert!(features.iter().any(|f| f == "HTTPRoute"), "{features:?}");
    for missing in [
        "HTTPRouteQueryParamMatching",
        "HTTPRoute303RedirectStatusCode",
        "HTTPRoutePathRedirect",
        "HTTPRouteCORS",
        "HTTPRouteRequestMirror",
        "HTTPRouteRequestMultipleMirrors",
        "HTTPRouteRequestPercentageMirror",
        "HTTPRouteBackendRequestHeaderModification",
        "BackendTLSPolicySANValidation",
        "GatewayHTTPSListenerDetectMisdirectedRequests",
        "GatewayFrontendClientCertificateValidationInsecureFallback",
    ] {
        assert!(
            !features.iter().any(|f| f == missing),
            "{missing}: {features:?}"
        );
    }
    // Plain Praxis config: stock Praxis serves these as well.
    for shown in [
        "TLSRouteModeTerminate",
        "TLSRouteModeMixed",
        "HTTPRouteRetry",
    ] {
        assert!(features.iter().any(|f| f == shown), "{shown}: {features:?}");
    }

    let own = bed.ns.name().to_string();
    service(&bed.ns, "web").await?;
    bed.gateway(
        "gw",
        json!([{ "name": "http", "port": 80, "protocol": "HTTP" }]),
    )
    .await?;
    bed.route(
        &own,
        "by-query",
        json!({ "parentRefs": [{ "name": "gw" }],
        "rules": [{ "matches": [{ "queryParams": [{ "name": "animal", "value": "whale" }] }],
                    "backendRefs": [{ "name": "web", "port": 80 }] }] }),
    )
    .await?;
    bed.route(
        &own,
        "see-other",
        json!({ "parentRefs": [{ "name": "gw" }],
        "rules": [{ "matches": [{ "path": { "type": "PathPrefix", "value": "/old" } }],
                    "filters": [{ "type": "RequestRedirect",
                                  "requestRedirect": { "statusCode": 303 } }] }] }),
    )
    .await?;
    bed.route(
        &own,
        "copied",
        json!({ "parentRefs": [{ "name": "gw" }],
        "rules": [{ "filters": [{ "type": "RequestMirror",
                                  "requestMirror": { "backendRef": { "name": "web", "port": 80 } } }],
                    "backendRefs": [{ "name": "web", "port": 80 }] }] }),
    )
    .await?;
    for (route, names) in [
        ("by-query", "queryParams (animal)"),
        ("see-other", "RequestRedirect"),
        ("copied", "RequestMirror"),
    ] {
        let entry = bed
            .wait_route(&own, route, "Accepted=False", |c| {
                is(c, "Accepted", "False", "UnsupportedValue")
            })
            .await?;
        let accepted = condition(&entry.conditions, "Accepted").context("Accepted")?;
        assert!(
            accepted.message.contains(names)
                && accepted.message.contains("needs Pontoon's data plane")
                && accepted.message.contains("--praxis-image"),
            "{route}: {}",
            accepted.message
        );
    }
    // The Gateway's pods run stock Praxis.
    let deployments = bed.ns.api::<Deployment>();
    let deployment = wait_for(
        &deployments,
        "praxis-gw",
        |d: Option<&Deployment>| d.is_some(),
        TIMEOUT,
    )
    .await?
    .context("no data plane")?;
    let image = deployment
        .spec
        .and_then(|s| s.template.spec)
        .and_then(|s| s.containers.into_iter().next())
        .and_then(|c| c.image);
    assert_eq!(image.as_deref(), Some("ghcr.io/praxis-proxy/praxis:0.7.5"));
    Ok(())
}

#[tokio::test]
async fn an_extension_ref_without_its_module_is_refused_naming_the_filter() -> anyhow::Result<()> {
    let bed = Bed::new("gw-ext").await?;
    let own = bed.ns.name().to_string();
    service(&bed.ns, "web").await?;
    bed.gateway(
        "gw",
        json!([{ "name": "http", "port": 80, "protocol": "HTTP" }]),
    )
    .await?;
    // This operator loads only the bundled modules: none handles HeaderStamp.
    bed.route(
        &own,
        "stamped",
        json!({ "parentRefs": [{ "name": "gw" }],
        "rules": [{ "filters": [{ "type": "ExtensionRef", "extensionRef": {
                        "group": "stamp.pontoon.dev", "kind": "HeaderStamp", "name": "x" } }],
                    "backendRefs": [{ "name": "web", "port": 80 }] }] }),
    )
    .await?;
    let entry = bed
        .wait_route(&own, "stamped", "Accepted=False", |c| {
            is(c, "Accepted", "False", "UnsupportedValue")
        })
        .await?;
    let accepted = condition(&entry.conditions, "Accepted").context("Accepted")?;
    assert!(
        accepted.message.contains("ExtensionRef")
            && accepted.message.contains("stamp.pontoon.dev/HeaderStamp"),
        "names the filter: {}",
        accepted.message
    );
    // Nothing of it reaches the config, which serves a route made after it.
    bed.route(
        &own,
        "plain",
        json!({ "parentRefs": [{ "name": "gw" }],
        "rules": [{ "matches": [{ "path": { "type": "PathPrefix", "value": "/plain" } }],
                    "backendRefs": [{ "name": "web", "port": 80 }] }] }),
    )
    .await?;
    let serves_plain = |c: Option<&ConfigMap>| {
        c.and_then(|c| c.data.as_ref()?.get("config.yaml"))
            .is_some_and(|config| config.contains("/plain"))
    };
    let config = wait_for(
        &bed.ns.api::<ConfigMap>(),
        "praxis-gw",
        serves_plain,
        TIMEOUT,
    )
    .await?
    .and_then(|c| c.data?.get("config.yaml").cloned())
    .unwrap_or_default();
    assert!(!config.contains("stamp"), "{config}");
    Ok(())
}

#[tokio::test]
async fn hostname_addresses_and_gateways_without_a_valid_listener_are_refused() -> anyhow::Result<()>
{
    let bed = Bed::new("gw-refused").await?;
    let addressed: Gateway = serde_json::from_value(json!({
        "metadata": { "name": "addressed" },
        "spec": { "gatewayClassName": bed.class,
                  "addresses": [{ "type": "Hostname", "value": "gw.example.com" }],
                  "listeners": [{ "name": "http", "port": 80, "protocol": "HTTP" }] }
    }))?;
    bed.gateways()
        .create(&PostParams::default(), &addressed)
        .await?;
    bed.gateway(
        "udp-only",
        json!([{ "name": "dns", "port": 53, "protocol": "UDP" }]),
    )
    .await?;
    for (name, reason) in [
        ("addressed", "UnsupportedAddress"),
        ("udp-only", "ListenersNotValid"),
    ] {
        let gw = bed.wait_gateway(name, "Accepted", "False").await?;
        let conditions = gw.status.and_then(|s| s.conditions).unwrap_or_default();
        assert!(
            is(&conditions, "Accepted", "False", reason),
            "{name}: {conditions:#?}"
        );
        assert!(
            bed.ns
                .api::<Deployment>()
                .get_opt(&format!("praxis-{name}"))
                .await?
                .is_none(),
            "{name}: a refused Gateway gets no data plane"
        );
    }
    Ok(())
}

/// A Gateway may ask for its address: the one IP address a LoadBalancer
/// Service can ask its load balancer for. An address the load balancer does
/// not give, or more than one, leaves the Gateway accepted and served, but
/// not Programmed (AddressNotUsable), saying what to change.
#[tokio::test]
async fn a_static_address_is_asked_of_the_load_balancer_and_served_there() -> anyhow::Result<()> {
    let bed = Bed::new("gw-address").await?;
    service(&bed.ns, "web").await?;
    // The test bed's load balancer gives addresses in 10.97.0.0/16 only.
    let (usable, unusable) = ("10.97.255.253", "10.98.0.1");
    let addressed = |values: &[&str]| -> anyhow::Result<Gateway> {
        let addresses: Vec<_> = values
            .iter()
            .map(|v| json!({ "type": "IPAddress", "value": v }))
            .collect();
        Ok(serde_json::from_value(json!({
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "Gateway",
            "metadata": { "name": "static" },
            "spec": { "gatewayClassName": bed.class, "addresses": addresses,
                      "listeners": [{ "name": "http", "port": 80, "protocol": "HTTP" }] }
        }))?)
    };
    bed.gateways()
        .create(&PostParams::default(), &addressed(&[unusable, usable])?)
        .await?;
    bed.wait_gateway_reason("static", ("Accepted", "True", "Accepted"), "")
        .await?;
    bed.wait_gateway_reason(
        "static",
        ("Programmed", "False", "AddressNotUsable"),
        &format!("asks for {unusable} and {usable}: a LoadBalancer Service can be asked for one address; keep one"),
    )
    .await?;

    let apply = |values: &[&str]| {
        let gateway = addressed(values);
        let api = bed.gateways();
        async move {
            let params = PatchParams::apply("pontoon-tests").force();
            api.patch("static", &params, &Patch::Apply(&gateway?))
                .await?;
            anyhow::Ok(())
        }
    };
    apply(&[unusable]).await?;
    bed.wait_gateway_reason(
        "static",
        ("Programmed", "False", "AddressNotUsable"),
        &format!("did not give the requested address {unusable}"),
    )
    .await?;

    apply(&[usable]).await?;
    bed.wait_gateway_reason("static", ("Programmed", "True", "Programmed"), "")
        .await?;
    let gw = bed.gateways().get("static").await?;
    let addresses = gw.status.and_then(|s| s.addresses).unwrap_or_default();
    assert_eq!(
        addresses
            .iter()
            .map(|a| (a.r#type.as_deref(), a.value.as_str()))
            .collect::<Vec<_>>(),
        [(Some("IPAddress"), usable)],
        "the Gateway reports the address it asked for"
    );
    let service = bed.ns.api::<Service>().get("praxis-static").await?;
    assert_eq!(
        service.spec.and_then(|s| s.load_balancer_ip).as_deref(),
        Some(usable)
    );
    // And the data plane answers there (Praxis's 404: no route yet).
    if let Ok(net) = pontoon_tests::traffic::TestbedNet::of_testbed() {
        let root = [pontoon_tests::traffic::Request {
            path: "/",
            header: None,
        }];
        let authority = format!("{usable}:80");
        let deadline = tokio::time::Instant::now() + TIMEOUT;
        loop {
            let answers = net.send(&authority, &root, Duration::from_secs(3))?;
            if answers[0]
                .as_ref()
                .is_err_and(|why| why.starts_with("HTTP 404"))
            {
                break;
            }
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "GET http://{authority}/: {answers:?}"
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
    Ok(())
}

/// ListenerSets, as a team that may not edit the Gateway adds listeners to
/// it: the Gateway takes sets from its own namespace only; a set there adds
/// a listener (served, with its routes) and loses one whose hostname the
/// Gateway already serves; a set elsewhere is refused; a route naming the
/// set attaches to its listener only; and the set's listener reaches the
/// data plane's config.
#[tokio::test]
async fn listener_sets_add_listeners_the_gateway_allows_and_report_each_one() -> anyhow::Result<()>
{
    let bed = Bed::new("gw-sets").await?;
    let own = bed.ns.name().to_string();
    let elsewhere = TestNamespace::new("gw-sets-other").await?;
    service(&bed.ns, "web").await?;
    let gw: Gateway = serde_json::from_value(json!({
        "metadata": { "name": "shared" },
        "spec": { "gatewayClassName": bed.class,
                  "allowedListeners": { "namespaces": { "from": "Same" } },
                  "listeners": [{ "name": "main", "port": 80, "protocol": "HTTP",
                                  "hostname": "main.example.com" }] }
    }))?;
    bed.gateways().create(&PostParams::default(), &gw).await?;
    let set = |name: &str, listeners: serde_json::Value| -> anyhow::Result<ListenerSet> {
        Ok(serde_json::from_value(json!({
            "metadata": { "name": name },
            "spec": { "parentRef": { "name": "shared", "namespace": own }, "listeners": listeners }
        }))?)
    };
    let http = |name: &str, host: &str| json!({ "name": name, "port": 80, "protocol": "HTTP", "hostname": host });
    let sets: Api<ListenerSet> = bed.ns.api();
    sets.create(
        &PostParams::default(),
        &set(
            "team",
            json!([
                http("api", "api.example.com"),
                http("main", "main.example.com")
            ]),
        )?,
    )
    .await?;
    elsewhere
        .api::<ListenerSet>()
        .create(
            &PostParams::default(),
            &set("stranger", json!([http("x", "x.example.com")]))?,
        )
        .await?;
    bed.route(
        &own,
        "api",
        json!({ "parentRefs": [{ "group": "gateway.networking.k8s.io", "kind": "ListenerSet",
                                 "name": "team", "sectionName": "api" }],
                "rules": [{ "matches": [{ "path": { "type": "PathPrefix", "value": "/api" } }],
                            "backendRefs": [{ "name": "web", "port": 80 }] }] }),
    )
    .await?;

    // The set's status: Accepted and Programmed, one listener served, the
    // other in conflict with the Gateway's.
    let status_of = |api: Api<ListenerSet>, name: &'static str| async move {
        let ok = |s: Option<&ListenerSet>| {
            s.and_then(|s| s.status.as_ref())
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| {
                    condition(cs, "Programmed").is_some_and(|c| c.observed_generation == Some(1))
                        && (is(cs, "Programmed", "True", "Programmed")
                            || is(cs, "Programmed", "False", "NotAllowed"))
                })
        };
        match wait_for(&api, name, ok, TIMEOUT).await {
            Ok(Some(set)) => anyhow::Ok(set.status.unwrap_or_default()),
            other => anyhow::bail!(
                "ListenerSet {name} never settled ({:?}): {:#?}",
                other.err(),
                api.get_opt(name).await?.and_then(|s| s.status)
            ),
        }
    };
    let team = status_of(sets.clone(), "team").await?;
    let conditions = team.conditions.unwrap_or_default();
    assert!(
        is(&conditions, "Accepted", "True", "Accepted"),
        "{conditions:#?}"
    );
    let listeners = team.listeners.unwrap_or_default();
    let listener = |name: &str| listeners.iter().find(|l| l.name == name).cloned();
    let api = listener("api").context("listener api in the set's status")?;
    assert!(
        is(&api.conditions, "Accepted", "True", "Accepted"),
        "{api:#?}"
    );
    assert!(
        is(&api.conditions, "Programmed", "True", "Programmed"),
        "{api:#?}"
    );
    let kinds: Vec<&str> = api
        .supported_kinds
        .iter()
        .flatten()
        .map(|k| k.kind.as_str())
        .collect();
    assert_eq!(kinds, ["HTTPRoute", "GRPCRoute"]);
    let main = listener("main").context("listener main in the set's status")?;
    assert!(
        is(&main.conditions, "Conflicted", "True", "HostnameConflict"),
        "{main:#?}"
    );
    assert!(
        is(&main.conditions, "Accepted", "False", "HostnameConflict"),
        "{main:#?}"
    );
    assert_eq!(listeners.len(), 2, "the set's own listeners only");

    let stranger = status_of(elsewhere.api(), "stranger").await?;
    let conditions = stranger.conditions.unwrap_or_default();
    assert!(
        is(&conditions, "Accepted", "False", "NotAllowed"),
        "{conditions:#?}"
    );

    // The route attaches through the set, to its listener.
    let parent = bed
        .wait_route(&own, "api", "Accepted=True", |cs| {
            is(cs, "Accepted", "True", "Accepted")
        })
        .await?;
    assert_eq!(parent.parent_ref.kind.as_deref(), Some("ListenerSet"));
    let attached = |api: &Api<ListenerSet>| {
        let api = api.clone();
        async move {
            let ok = |s: Option<&ListenerSet>| {
                s.and_then(|s| s.status.as_ref())
                    .and_then(|s| s.listeners.as_ref())
                    .and_then(|ls| ls.iter().find(|l| l.name == "api"))
                    .is_some_and(|l| l.attached_routes == 1)
            };
            wait_for(&api, "team", ok, TIMEOUT).await
        }
    };
    attached(&sets)
        .await
        .context("listener api counts the route")?;

    // The Gateway: its own listener in its status, one set attached.
    let gw = bed.wait_gateway("shared", "Programmed", "True").await?;
    let status = gw.status.unwrap_or_default();
    assert_eq!(status.attached_listener_sets, Some(1));
    let names: Vec<String> = status
        .listeners
        .iter()
        .flatten()
        .map(|l| l.name.clone())
        .collect();
    assert_eq!(names, ["main"]);

    // The data plane serves the set's listener: its route's host is in the config.
    let configmaps = bed.ns.api::<ConfigMap>();
    let has_route = |c: Option<&ConfigMap>| {
        c.and_then(|c| c.data.as_ref())
            .and_then(|d| d.get("config.yaml"))
            .is_some_and(|config| config.contains("api.example.com") && config.contains("/api"))
    };
    wait_for(&configmaps, "praxis-shared", has_route, TIMEOUT)
        .await
        .context("the set's route in the Praxis config")?;

    // Taking the set away from the Gateway's allowed namespaces refuses it.
    bed.gateways()
        .patch(
            "shared",
            &PatchParams::default(),
            &Patch::Merge(
                json!({ "spec": { "allowedListeners": { "namespaces": { "from": "None" } } } }),
            ),
        )
        .await?;
    let refused = |s: Option<&ListenerSet>| {
        s.and_then(|s| s.status.as_ref())
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| is(cs, "Accepted", "False", "NotAllowed"))
    };
    wait_for(&sets, "team", refused, TIMEOUT)
        .await
        .context("the set refused once the Gateway takes none")?;
    let gone = |c: Option<&ConfigMap>| {
        c.and_then(|c| c.data.as_ref())
            .and_then(|d| d.get("config.yaml"))
            .is_some_and(|config| !config.contains("api.example.com"))
    };
    wait_for(&configmaps, "praxis-shared", gone, TIMEOUT)
        .await
        .context("the set's route gone from the Praxis config")?;
    Ok(())
}

/// A Gateway name may be a 253-character DNS subdomain; a Service name is a
/// 63-character DNS label without dots. Such a Gateway (the conformance
/// suite has one of 57 characters) still gets its data plane and status.
#[tokio::test]
async fn a_gateway_with_a_long_dotted_name_is_programmed() -> anyhow::Result<()> {
    let bed = Bed::new("gw-long-name").await?;
    let name = format!("edge.{}", "very-long-gateway-name-".repeat(3));
    let name = name.trim_end_matches('-');
    assert!(name.len() > 63);
    let gw = bed.programmed_http_gateway(name).await?;
    let addresses = gw.status.and_then(|s| s.addresses).unwrap_or_default();
    assert!(!addresses.is_empty(), "a Programmed Gateway has an address");

    // Its children: one of each kind, found by the Praxis operator's standard labels, all under
    // one name that is a valid Service name.
    let labels = kube::api::ListParams::default().labels("app.kubernetes.io/name=praxis");
    let services = bed.ns.api::<Service>().list(&labels).await?.items;
    let [service] = services.as_slice() else {
        anyhow::bail!("expected one Service, got {}", services.len());
    };
    let child = service.name_any();
    assert!(
        child.starts_with("praxis-edge-very-long-gateway-name-") && child.len() <= 63,
        "{child}"
    );
    assert!(!child.contains('.'), "{child}");
    let config = bed.ns.api::<ConfigMap>().get(&child).await?;
    assert!(
        config
            .data
            .as_ref()
            .is_some_and(|d| d.contains_key("config.yaml")),
        "ConfigMap {child} has the config"
    );
    let deployment = bed.ns.api::<Deployment>().get(&child).await?;
    let instance = deployment.labels()["app.kubernetes.io/instance"].clone();
    assert!(instance.len() <= 63, "{instance}");
    Ok(())
}

/// `infrastructure.labels` and `annotations` reach the data plane's objects
/// and its pods, which also carry the Gateway API's gateway-name label.
#[tokio::test]
async fn infrastructure_metadata_reaches_the_children_and_pods() -> anyhow::Result<()> {
    let bed = Bed::new("gw-infra").await?;
    service(&bed.ns, "web").await?;
    let gw: Gateway = serde_json::from_value(json!({
        "metadata": { "name": "gw" },
        "spec": {
            "gatewayClassName": bed.class,
            "infrastructure": {
                "labels": { "team": "edge" },
                "annotations": { "example.com/owner": "ops" }
            },
            "listeners": [{ "name": "http", "port": 80, "protocol": "HTTP" }]
        }
    }))?;
    bed.gateways().create(&PostParams::default(), &gw).await?;
    bed.wait_gateway("gw", "Programmed", "True").await?;

    let by_gateway =
        kube::api::ListParams::default().labels("gateway.networking.k8s.io/gateway-name=gw");
    let pods = bed
        .ns
        .api::<k8s_openapi::api::core::v1::Pod>()
        .list(&by_gateway)
        .await?
        .items;
    anyhow::ensure!(!pods.is_empty(), "no pod has the gateway-name label");
    let services = bed.ns.api::<Service>().list(&by_gateway).await?.items;
    anyhow::ensure!(
        services.len() == 1,
        "one Service has the gateway-name label"
    );
    let config_map = bed.ns.api::<ConfigMap>().get("praxis-gw").await?;
    for (what, meta) in [
        ("pod", &pods[0].metadata),
        ("Service", &services[0].metadata),
        ("ConfigMap", &config_map.metadata),
    ] {
        let labels = meta.labels.clone().unwrap_or_default();
        let annotations = meta.annotations.clone().unwrap_or_default();
        assert_eq!(
            labels.get("team").map(String::as_str),
            Some("edge"),
            "{what}"
        );
        assert_eq!(
            annotations.get("example.com/owner").map(String::as_str),
            Some("ops"),
            "{what}"
        );
    }
    Ok(())
}

/// What the churn test's writer did to route `r{i:04}`.
#[derive(Clone, Default)]
struct Churned {
    /// Every path version the route had, the last one current.
    versions: Vec<usize>,
    /// Whether another controller keeps an entry in its status.
    foreign_entry: bool,
}

/// 1000 routes on one Gateway, changed, deleted and recreated in bursts
/// while another controller writes its own entries into some routes'
/// status: once the churn stops, every route's status, the Gateway's
/// attachedRoutes and the config are current, and no other controller's
/// entry was lost. (Every status write of the operator is bound to the
/// version it read: the churn makes many of them conflict.)
#[tokio::test]
async fn status_and_config_converge_after_a_thousand_routes_churn() -> anyhow::Result<()> {
    use futures::StreamExt;
    const ROUTES: usize = 1000;
    const ROUNDS: usize = 5;
    const OTHER: &str = "example.com/other-controller";
    let bed = Bed::new("gw-churn").await?;
    let own = bed.ns.name().to_string();
    bed.programmed_http_gateway("gw").await?;
    let name = |i: usize| format!("r{i:04}");
    // Fixed width: no path is a prefix of another.
    let path = |i: usize, v: usize| format!("/r{i:04}v{v:03}");
    let spec = |i: usize, v: usize| {
        json!({ "parentRefs": [{ "name": "gw" }],
                "rules": [{ "matches": [{ "path": { "type": "PathPrefix", "value": path(i, v) } }],
                            "backendRefs": [{ "name": "web", "port": 80 }] }] })
    };
    let routes = bed.routes();
    let mut churned = vec![Churned::default(); ROUTES];
    futures::stream::iter(0..ROUTES)
        .map(|i| {
            let (bed, own) = (&bed, &own);
            async move { bed.route(own, &name(i), spec(i, 0)).await }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<_>>()
        .await?;
    for c in &mut churned {
        c.versions.push(0);
    }

    // Another controller's entry in a route's status, written as a
    // controller would: read, add, replace bound to the version read,
    // again on a conflict.
    let foreign = |i: usize| {
        let routes = routes.clone();
        let name = name(i);
        async move {
            let mut conflicts = 0u32;
            loop {
                let mut route = routes.get_status(&name).await?;
                let status = route.status.get_or_insert_with(Default::default);
                status.parents.retain(|p| p.controller_name != OTHER);
                status.parents.push(serde_json::from_value(json!({
                    "controllerName": OTHER,
                    "parentRef": { "name": "elsewhere" },
                    "conditions": [{ "type": "Accepted", "status": "True", "reason": "Accepted",
                                     "message": "", "lastTransitionTime": "2026-12-01T00:00:00Z" }],
                }))?);
                match routes
                    .replace_status(&name, &PostParams::default(), &route)
                    .await
                {
                    Ok(_) => return Ok::<_, anyhow::Error>(conflicts),
                    Err(kube::Error::Api(s)) if s.code == 409 => conflicts += 1,
                    Err(err) => return Err(err.into()),
                }
            }
        }
    };
    let gone = |i: usize| i % 100 == 1;
    let mut writer_conflicts = 0u32;
    for round in 1..=ROUNDS {
        // A fifth of the routes change their path, every round another fifth.
        let changed: Vec<usize> = (0..ROUTES)
            .filter(|i| i % ROUNDS == round % ROUNDS && !gone(*i))
            .collect();
        let patch = |i: usize| {
            let routes = routes.clone();
            let body = json!({ "spec": spec(i, round) });
            async move {
                routes
                    .patch(&name(i), &PatchParams::default(), &Patch::Merge(&body))
                    .await
            }
        };
        futures::stream::iter(changed.iter().copied().map(patch))
            .buffer_unordered(16)
            .try_collect::<Vec<_>>()
            .await?;
        for i in changed {
            churned[i].versions.push(round);
        }
        match round {
            // Every tenth route gets the other controller's entry.
            1 => {
                let counts: Vec<u32> = futures::stream::iter((0..ROUTES).step_by(10).map(foreign))
                    .buffer_unordered(16)
                    .try_collect()
                    .await?;
                writer_conflicts += counts.iter().sum::<u32>();
                for i in (0..ROUTES).step_by(10) {
                    churned[i].foreign_entry = true;
                }
            }
            // Ten routes go, and come back two rounds later on a new path.
            2 => {
                for i in (0..ROUTES).filter(|i| gone(*i)) {
                    routes.delete(&name(i), &DeleteParams::default()).await?;
                }
            }
            4 => {
                for i in (0..ROUTES).filter(|i| gone(*i)) {
                    bed.route(&own, &name(i), spec(i, round)).await?;
                    churned[i].versions.push(round);
                }
            }
            _ => {}
        }
    }

    // Converged: polled until everything is current, or the deadline.
    let configmaps = bed.ns.api::<ConfigMap>();
    let controller = bed.controller_name.clone();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let mut stale = Vec::new();
        let listed = routes.list(&Default::default()).await?;
        if listed.items.len() != ROUTES {
            stale.push(format!("{} routes listed", listed.items.len()));
        }
        for route in &listed.items {
            let parents = route.status.as_ref().map(|s| &s.parents[..]).unwrap_or(&[]);
            let ours = parents.iter().find(|p| p.controller_name == controller);
            let current = ours.is_some_and(|p| {
                p.conditions.iter().any(|c| {
                    c.type_ == "Accepted"
                        && c.status == "True"
                        && c.observed_generation == route.metadata.generation
                })
            });
            if !current {
                stale.push(format!("{}: {ours:?}", route.name_any()));
            }
            let i: usize = route.name_any()[1..].parse()?;
            let has_foreign = parents.iter().any(|p| p.controller_name == OTHER);
            assert_eq!(
                has_foreign,
                churned[i].foreign_entry,
                "{}: the other controller's entry {}",
                route.name_any(),
                if has_foreign { "appeared" } else { "was lost" }
            );
        }
        let gateway = bed.gateways().get("gw").await?;
        let attached = gateway
            .status
            .as_ref()
            .and_then(|s| s.listeners.as_ref())
            .and_then(|ls| ls.iter().find(|l| l.name == "http"))
            .map(|l| l.attached_routes);
        if attached != Some(ROUTES as i32) {
            stale.push(format!("attachedRoutes {attached:?}"));
        }
        let config = configmaps
            .get("praxis-gw")
            .await?
            .data
            .and_then(|d| d.get("config.yaml").cloned())
            .unwrap_or_default();
        for (i, c) in churned.iter().enumerate() {
            let (last, earlier) = c.versions.split_last().context("a version")?;
            if !config.contains(&path(i, *last)) {
                stale.push(format!("config lacks {}", path(i, *last)));
            }
            for v in earlier {
                if config.contains(&path(i, *v)) {
                    stale.push(format!("config still has {}", path(i, *v)));
                }
            }
        }
        if stale.is_empty() {
            break;
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "not converged 120 s after the churn: {} stale, e.g. {:?}\n--- operator ---\n{}",
            stale.len(),
            &stale[..stale.len().min(5)],
            bed.operator.log_tail(20)
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let (_, metrics) = bed.operator.get("/metrics").await?;
    let count = |controller: &str, result: &str| {
        sample(
            &metrics,
            &format!(r#"pontoon_reconciles_total{{controller="{controller}",result="{result}"}}"#),
        )
        .unwrap_or(0.0)
    };
    println!(
        "churn: {ROUTES} routes, {} path changes, 10 deleted and recreated, 100 foreign entries ({writer_conflicts} conflicts for their writer); operator: http-route {} ok / {} conflict, gateway {} ok / {} conflict",
        churned.iter().map(|c| c.versions.len() - 1).sum::<usize>(),
        count("http-route", "ok"),
        count("http-route", "conflict"),
        count("gateway", "ok"),
        count("gateway", "conflict"),
    );
    Ok(())
}

#[tokio::test]
async fn a_users_object_of_a_data_planes_name_is_never_taken_over_nor_its_service_joined()
-> anyhow::Result<()> {
    let bed = Bed::new("gw-foreign").await?;
    // The user's ConfigMap, made before the Gateway of that name.
    let config_maps = bed.ns.api::<ConfigMap>();
    let users: ConfigMap = serde_json::from_value(json!({
        "metadata": { "name": "praxis-edge" },
        "data": { "mine": "yes" }
    }))?;
    config_maps.create(&PostParams::default(), &users).await?;
    bed.gateway(
        "edge",
        json!([{ "name": "http", "port": 80, "protocol": "HTTP" }]),
    )
    .await?;
    let blocked = bed
        .wait_gateway_reason(
            "edge",
            ("Programmed", "False", "Pending"),
            "ConfigMap `praxis-edge`",
        )
        .await?;
    assert!(
        blocked.message.contains("is not this Gateway's")
            && blocked.message.contains("rename or delete it"),
        "{}",
        blocked.message
    );
    let kept = config_maps.get("praxis-edge").await?;
    assert_eq!(
        kept.data
            .unwrap_or_default()
            .get("mine")
            .map(String::as_str),
        Some("yes"),
        "the user's data is as it was"
    );
    assert!(
        kept.metadata.owner_references.is_none(),
        "not made the Gateway's"
    );
    assert!(
        bed.ns
            .api::<Deployment>()
            .get_opt("praxis-edge")
            .await?
            .is_none(),
        "no data plane beside an object it would not own"
    );
    bed.gateways()
        .delete("edge", &DeleteParams::default())
        .await?;
    wait_for(
        &bed.gateways(),
        "edge",
        |g: Option<&Gateway>| g.is_none(),
        TIMEOUT,
    )
    .await?;
    // The garbage collector had nothing of the Gateway's to take with it.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        config_maps.get_opt("praxis-edge").await?.is_some(),
        "the user's ConfigMap outlives the Gateway"
    );

    // The same for the user's Deployment and Service of a data plane's name:
    // neither applied over nor taken by the Gateway's deletion.
    let users_deployment: Deployment = serde_json::from_value(json!({
        "metadata": { "name": "praxis-api" },
        "spec": {
            "replicas": 1,
            "selector": { "matchLabels": { "app": "users-api" } },
            "template": {
                "metadata": { "labels": { "app": "users-api" } },
                "spec": { "containers": [{ "name": "api", "image": "example.com/users-api:1" }] }
            }
        }
    }))?;
    let users_service: Service = serde_json::from_value(json!({
        "metadata": { "name": "praxis-web" },
        "spec": { "selector": { "app": "users-web" }, "ports": [{ "port": 8080 }] }
    }))?;
    let deployments = bed.ns.api::<Deployment>();
    let services = bed.ns.api::<Service>();
    deployments
        .create(&PostParams::default(), &users_deployment)
        .await?;
    services
        .create(&PostParams::default(), &users_service)
        .await?;
    for (gateway, kind) in [("api", "Deployment"), ("web", "Service")] {
        bed.gateway(
            gateway,
            json!([{ "name": "http", "port": 80, "protocol": "HTTP" }]),
        )
        .await?;
        let blocked = bed
            .wait_gateway_reason(
                gateway,
                ("Programmed", "False", "Pending"),
                &format!("{kind} `praxis-{gateway}`"),
            )
            .await?;
        assert!(
            blocked.message.contains("is not this Gateway's"),
            "{kind}: {}",
            blocked.message
        );
        bed.gateways()
            .delete(gateway, &DeleteParams::default())
            .await?;
        wait_for(
            &bed.gateways(),
            gateway,
            |g: Option<&Gateway>| g.is_none(),
            TIMEOUT,
        )
        .await?;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let kept = deployments.get("praxis-api").await?;
    let template = kept.spec.as_ref().map(|s| &s.template);
    assert_eq!(
        (
            template
                .and_then(|t| t.spec.as_ref())
                .and_then(|s| s.containers.first())
                .and_then(|c| c.image.as_deref()),
            template
                .and_then(|t| t.metadata.as_ref())
                .and_then(|m| m.labels.as_ref())
                .map(|l| l.len()),
            kept.metadata.owner_references.as_ref()
        ),
        (Some("example.com/users-api:1"), Some(1), None),
        "the user's Deployment is as it was, and outlives the Gateway"
    );
    let kept = services.get("praxis-web").await?;
    assert_eq!(
        (
            kept.spec.as_ref().and_then(|s| s.selector.as_ref()),
            kept.metadata.owner_references.as_ref()
        ),
        (
            users_service
                .spec
                .as_ref()
                .and_then(|s| s.selector.as_ref()),
            None
        ),
        "the user's Service is as it was, and outlives the Gateway"
    );

    // infrastructure.labels that would put Praxis behind another Service.
    let shop: Service = serde_json::from_value(json!({
        "metadata": { "name": "shop" },
        "spec": { "selector": { "app": "shop" }, "ports": [{ "port": 80 }] }
    }))?;
    bed.ns
        .api::<Service>()
        .create(&PostParams::default(), &shop)
        .await?;
    let lure: Gateway = serde_json::from_value(json!({
        "metadata": { "name": "lure" },
        "spec": {
            "gatewayClassName": bed.class,
            "infrastructure": { "labels": { "app": "shop" } },
            "listeners": [{ "name": "http", "port": 80, "protocol": "HTTP" }]
        }
    }))?;
    bed.gateways().create(&PostParams::default(), &lure).await?;
    let blocked = bed
        .wait_gateway_reason(
            "lure",
            ("Programmed", "False", "Pending"),
            "Service(s) shop (app=shop)",
        )
        .await?;
    assert!(
        blocked
            .message
            .contains("choose labels no other Service selects"),
        "{}",
        blocked.message
    );
    assert!(
        bed.ns
            .api::<Deployment>()
            .get_opt("praxis-lure")
            .await?
            .is_none(),
        "no pods that would join Service shop"
    );
    Ok(())
}
