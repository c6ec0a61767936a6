//! Gateway API end to end: `pontoon run` on the test bed turns a Gateway and
//! its HTTPRoutes into a Praxis config; that config, exactly as the ConfigMap
//! holds it, runs in the real `praxis` with echo backends on the addresses
//! of the backends' real pods (see `pontoon_tests::netns`), and curl checks
//! what a client would see. Runs as root (network namespaces); otherwise
//! reported as skipped, saying why (a failure under `CI=true`, see
//! `pontoon_tests::skip`).

use std::{collections::BTreeMap, net::SocketAddr, path::Path, time::Duration};

use anyhow::Context as _;
use gateway_api::{
    apis::standard::gateways::Gateway, httproutes::HttpRoute, listenersets::ListenerSet,
};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use pontoon_tests::{
    TestNamespace, backends, gateway_api as crds,
    modules::test_module,
    netns::{self, HttpResponse, NetNs, ProcessId},
    operator::Operator,
    praxis, wait_for,
};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(60);
/// The Gateway's HTTP listener; praxis binds it in the network namespace
/// (not 8080: the backends listen there on the pod addresses).
const PORT: u16 = 80;

/// One operator with the bundled filters and the `header_stamp` module,
/// serving a GatewayClass of its own; the backends' pods answer as echo
/// backends named after their Deployment (`blue-0`, `blue-1`, `green-0`).
struct Bed {
    net: NetNs,
    ns: TestNamespace,
    class: String,
    operator: Operator,
    _providers: tempfile::TempDir,
}

impl Bed {
    /// The route's PartiallyInvalid condition, once written: the route's
    /// status follows the ConfigMap, so the test waits for it rather than
    /// reading it the moment the config is there.
    async fn partially_invalid(
        &self,
        route: &str,
    ) -> anyhow::Result<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
        let routes: Api<HttpRoute> = self.ns.api();
        let find = |r: &HttpRoute| {
            r.status.as_ref()?.parents.iter().find_map(|p| {
                p.conditions
                    .iter()
                    .find(|c| c.type_ == "PartiallyInvalid")
                    .cloned()
            })
        };
        let reported = move |r: Option<&HttpRoute>| r.and_then(find).is_some();
        let route = wait_for(&routes, route, reported, TIMEOUT)
            .await?
            .with_context(|| format!("route {route} is gone"))?;
        find(&route).context("the condition went again")
    }

    /// Its caller asks [`netns::unavailable`] first and skips.
    async fn new(prefix: &str) -> anyhow::Result<Self> {
        let mut net = NetNs::create(prefix)?;
        crds::install_crds().await?;
        let ns = TestNamespace::new(prefix).await?;
        for (name, replicas) in [("blue", 2), ("green", 1)] {
            let ips = backends::deploy(&ns, name, replicas, 80, 8080).await?;
            for (i, ip) in ips.iter().enumerate() {
                net.start_echo_backend(&format!("{name}-{i}"), &[SocketAddr::new(*ip, 8080)])?;
            }
        }
        // The bundled modules plus a user's own, as a user would add it.
        let providers = tempfile::tempdir()?;
        for entry in std::fs::read_dir(pontoon_tests::providers::bundled_providers_dir()?)? {
            let entry = entry?;
            std::fs::copy(entry.path(), providers.path().join(entry.file_name()))?;
        }
        std::fs::copy(
            test_module("header_stamp")?,
            providers.path().join("header_stamp.wasm"),
        )?;
        let class = ns.name().to_string();
        let controller_name = format!("pontoon.dev/{class}");
        let operator = Operator::start_with_providers(
            Path::new(env!("CARGO_BIN_EXE_pontoon")),
            ns.name(),
            providers.path(),
            &[
                "--controllers",
                "gateway-api",
                "--gateway-controller-name",
                &controller_name,
                "--praxis-allow-root",
            ],
        )?;
        crds::create_class(&class, &controller_name, None).await?;
        Ok(Self {
            net,
            ns,
            class,
            operator,
            _providers: providers,
        })
    }

    async fn gateway(&self, name: &str) -> anyhow::Result<()> {
        let gw: Gateway = serde_json::from_value(json!({
            "metadata": { "name": name },
            "spec": {
                "gatewayClassName": self.class,
                "listeners": [{ "name": "http", "protocol": "HTTP", "port": PORT }]
            }
        }))?;
        self.ns
            .api::<Gateway>()
            .create(&PostParams::default(), &gw)
            .await?;
        Ok(())
    }

    async fn route(&self, name: &str, spec: serde_json::Value) -> anyhow::Result<()> {
        let route: HttpRoute = serde_json::from_value(json!({
            "metadata": { "name": name },
            "spec": spec
        }))?;
        self.ns
            .api::<HttpRoute>()
            .create(&PostParams::default(), &route)
            .await?;
        Ok(())
    }

    /// Waits until the Gateway's ConfigMap holds a config containing every
    /// one of `markers`, and returns that config.
    async fn config(&self, gateway: &str, markers: &[&str]) -> anyhow::Result<String> {
        let maps: Api<ConfigMap> = self.ns.api();
        let name = format!("praxis-{gateway}");
        let has_all = |c: Option<&ConfigMap>| {
            config_of(c).is_some_and(|config| markers.iter().all(|m| config.contains(m)))
        };
        match wait_for(&maps, &name, has_all, TIMEOUT).await {
            Ok(map) => config_of(map.as_ref())
                .map(str::to_string)
                .context("ConfigMap vanished"),
            Err(err) => {
                let now = maps.get_opt(&name).await?;
                let config = config_of(now.as_ref()).unwrap_or("(none)").to_string();
                let missing: Vec<&&str> =
                    markers.iter().filter(|m| !config.contains(**m)).collect();
                anyhow::bail!(
                    "{err:#}: the config of {name} never contained {missing:?}:\n{config}\n--- operator ---\n{}",
                    self.operator.log_tail(30)
                )
            }
        }
    }

    /// Checks `config` with `praxis -t`, then runs it.
    fn run_praxis(&mut self, config: &str, file: &str) -> anyhow::Result<ProcessId> {
        let path = self.net.logs_dir().join(file);
        std::fs::write(&path, config)?;
        praxis::check_config(&path)?;
        self.net.start_praxis(&path)
    }

    /// `curl ARGS... http://127.0.0.1:PORT{path}` with `Host: {host}`.
    fn request(&self, host: &str, path: &str, args: &[&str]) -> anyhow::Result<HttpResponse> {
        let url = format!("http://127.0.0.1:{PORT}{path}");
        let host = format!("Host: {host}");
        let mut all = vec!["-H", &host];
        all.extend_from_slice(args);
        all.push(&url);
        self.net.curl(&all)
    }

    /// The echo backend that answered (`blue-0`, ...), with what it got.
    fn backend(&self, host: &str, path: &str, args: &[&str]) -> anyhow::Result<Echo> {
        let response = self.request(host, path, args)?;
        anyhow::ensure!(
            response.status == 200,
            "{host}{path} {args:?}: {} {}",
            response.status,
            response.body
        );
        let json = response.json()?;
        Ok(Echo { response, json })
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        crds::remove_gateways_blocking(self.ns.name(), std::slice::from_ref(&self.class));
    }
}

fn config_of(map: Option<&ConfigMap>) -> Option<&str> {
    map?.data.as_ref()?.get("config.yaml").map(String::as_str)
}

struct Echo {
    response: HttpResponse,
    json: serde_json::Value,
}

impl Echo {
    /// `blue` or `green`: the Deployment whose pod answered.
    fn app(&self) -> &str {
        let name = self.json["name"].as_str().unwrap_or_default();
        name.split('-').next().unwrap_or_default()
    }

    fn path(&self) -> &str {
        self.json["path"].as_str().unwrap_or_default()
    }

    /// A request header as the backend got it (Go's canonical spelling).
    fn header(&self, name: &str) -> Option<&str> {
        self.json["headers"][name][0].as_str()
    }
}

fn backend(name: &str) -> serde_json::Value {
    json!({ "name": name, "port": 80 })
}

fn parent(gateway: &str) -> serde_json::Value {
    json!([{ "name": gateway }])
}

/// praxis-proxy-core parses a config but leaves each filter's own keys to
/// the filter, which only the `praxis` binary builds: every golden config
/// (one per feature, `host/gateway/src/data_plane/config/testdata`) must pass `praxis -t`.
/// `praxis -t` reads a cluster's TLS files (CA, client certificate), which a
/// Gateway's pod mounts at `/etc/praxis-tls`: the check gets a directory of
/// real PEM files of those names instead.
#[test]
fn every_golden_config_loads_in_praxis() -> anyhow::Result<()> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("gateway/src/data_plane/config/testdata");
    let tls = tempfile::tempdir()?;
    let (cert, key) = (tls.path().join("cert.pem"), tls.path().join("key.pem"));
    let made = std::process::Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        ])
        .args(["-subj", "/CN=golden.example.com", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .context("cannot run openssl")?;
    anyhow::ensure!(
        made.status.success(),
        "openssl: {}",
        String::from_utf8_lossy(&made.stderr)
    );
    let mount = format!("{}/", listeners_tls_root());
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir)? {
        let path = entry?.path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path)?;
        for file in text.split(&mount).skip(1) {
            let name: String = file
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || "._-".contains(*c))
                .collect();
            let source = if name.ends_with(".key") { &key } else { &cert };
            std::fs::copy(source, tls.path().join(&name))?;
        }
        let local = tls.path().join(path.file_name().context("a file name")?);
        let dir_in_config = format!("{}/", tls.path().display());
        std::fs::write(&local, text.replace(&mount, &dir_in_config))?;
        praxis::check_config(&local).with_context(|| format!("{}", path.display()))?;
        checked += 1;
    }
    anyhow::ensure!(
        checked >= 10,
        "only {checked} golden configs in {}",
        dir.display()
    );
    Ok(())
}

/// Where a Gateway's pod mounts its certificates, as the golden configs name it.
fn listeners_tls_root() -> &'static str {
    pontoon::gateway::data_plane::certificates::TLS_MOUNT_ROOT
}

#[tokio::test]
async fn requests_reach_the_backends_their_routes_match() -> anyhow::Result<()> {
    if let Some(reason) = netns::unavailable() {
        return pontoon_tests::skip!("{reason}");
    }
    let mut bed = Bed::new("gwt-match").await?;
    bed.gateway("edge").await?;
    bed.route(
        "shop",
        json!({
            "parentRefs": parent("edge"),
            "hostnames": ["shop.example"],
            "rules": [
                { "matches": [{ "path": { "type": "PathPrefix", "value": "/" } }],
                  "backendRefs": [backend("blue")] },
                { "matches": [{ "path": { "type": "Exact", "value": "/exact" } }],
                  "backendRefs": [backend("green")] },
                { "matches": [{ "path": { "type": "PathPrefix", "value": "/api" },
                                "headers": [{ "name": "x-env", "value": "canary" }] }],
                  "backendRefs": [backend("green")] },
                { "matches": [{ "path": { "type": "PathPrefix", "value": "/api" },
                                "headers": [{ "type": "RegularExpression", "name": "x-version", "value": "v[0-9]+" }] }],
                  "backendRefs": [backend("green")] },
                { "matches": [{ "path": { "type": "PathPrefix", "value": "/submit" }, "method": "POST" }],
                  "backendRefs": [backend("green")] },
                // Query parameters (Pontoon's data plane), exact and
                // regular expression.
                { "matches": [{ "path": { "type": "PathPrefix", "value": "/q" },
                                "queryParams": [{ "name": "v", "value": "2" }] }],
                  "backendRefs": [backend("green")] },
                { "matches": [{ "path": { "type": "PathPrefix", "value": "/q" },
                                "queryParams": [{ "type": "RegularExpression", "name": "Tier",
                                                  "value": "gold|silver" }] }],
                  "backendRefs": [backend("green")] },
                // A path regular expression: refused on the status, the
                // other rules served.
                { "matches": [{ "path": { "type": "RegularExpression", "value": "/re/.*" } }],
                  "backendRefs": [backend("green")] }
            ]
        }),
    )
    .await?;
    bed.route(
        "wild",
        json!({
            "parentRefs": parent("edge"),
            "hostnames": ["*.wild.example"],
            "rules": [{ "backendRefs": [backend("green")] }]
        }),
    )
    .await?;
    let config = bed
        .config("edge", &["shop.example", "wild.example"])
        .await?;
    bed.run_praxis(&config, "match.yaml")?;

    let partially = bed
        .partially_invalid("shop")
        .await
        .context("the regular expression rule is reported")?;
    assert_eq!(partially.reason, "UnsupportedValue");
    assert!(
        partially.message.contains("rule 7"),
        "{}",
        partially.message
    );

    // Path: prefix and exact.
    let echo = bed.backend("shop.example", "/anything/else?x=1", &[])?;
    assert_eq!(echo.app(), "blue");
    assert_eq!(echo.path(), "/anything/else");
    assert_eq!(echo.json["query"], "x=1");
    assert_eq!(echo.json["host"], "shop.example");
    assert_eq!(bed.backend("shop.example", "/exact", &[])?.app(), "green");
    assert_eq!(
        bed.backend("shop.example", "/exact/more", &[])?.app(),
        "blue"
    );
    // Headers: exact and regular expression (whole value).
    assert_eq!(bed.backend("shop.example", "/api/x", &[])?.app(), "blue");
    let canary = ["-H", "x-env: canary"];
    assert_eq!(
        bed.backend("shop.example", "/api/x", &canary)?.app(),
        "green"
    );
    let other = ["-H", "x-env: canary-not"];
    assert_eq!(bed.backend("shop.example", "/api/x", &other)?.app(), "blue");
    let version = ["-H", "x-version: v12"];
    assert_eq!(
        bed.backend("shop.example", "/api", &version)?.app(),
        "green"
    );
    let not_whole = ["-H", "x-version: v12-beta"];
    assert_eq!(
        bed.backend("shop.example", "/api", &not_whole)?.app(),
        "blue"
    );
    // Method.
    assert_eq!(bed.backend("shop.example", "/submit", &[])?.app(), "blue");
    let post = bed.backend("shop.example", "/submit", &["-X", "POST"])?;
    assert_eq!(
        (post.app(), post.json["method"].as_str()),
        ("green", Some("POST"))
    );
    // Query parameters: the first of a name counts, names are
    // case-sensitive, patterns match the whole value; the query reaches the
    // backend as sent, and the data plane's internal headers do not.
    let query = bed.backend("shop.example", "/q?x=1&v=2&v=3", &[])?;
    assert_eq!(query.app(), "green");
    assert_eq!(query.json["query"], "x=1&v=2&v=3");
    let internal: Vec<&String> = query.json["headers"]
        .as_object()
        .into_iter()
        .flat_map(|h| h.keys())
        .filter(|name| name.to_ascii_lowercase().starts_with("x-praxis"))
        .collect();
    assert!(internal.is_empty(), "{internal:?}");
    for (uri, app) in [
        ("/q?v=3&v=2", "blue"),
        ("/q?V=2", "blue"),
        ("/q/deeper?v=%32", "green"),
        ("/q?Tier=silver", "green"),
        ("/q?Tier=golden", "blue"),
        ("/q?tier=gold", "blue"),
        ("/other?v=2", "blue"),
    ] {
        assert_eq!(bed.backend("shop.example", uri, &[])?.app(), app, "{uri}");
    }
    // The refused rule widens nothing: its requests go where the rest send them.
    assert_eq!(bed.backend("shop.example", "/re/x", &[])?.app(), "blue");
    // Hostnames: a wildcard covers subdomains; an unknown host gets 404.
    assert_eq!(bed.backend("a.wild.example", "/", &[])?.app(), "green");
    assert_eq!(bed.backend("a.b.wild.example", "/x", &[])?.app(), "green");
    let unknown = bed.request("nobody.example", "/", &[])?;
    assert_eq!(unknown.status, 404, "{unknown:?}");
    Ok(())
}

/// A ListenerSet's listener is served on the Gateway's port beside the
/// Gateway's own: each host reaches the routes of its own listener only (a
/// route on the Gateway does not reach the set's host, nor the set's route
/// the Gateway's), and a host the set lost to the Gateway stays the Gateway's.
#[tokio::test]
async fn a_listener_sets_routes_are_served_on_its_host_only() -> anyhow::Result<()> {
    if let Some(reason) = netns::unavailable() {
        return pontoon_tests::skip!("{reason}");
    }
    let mut bed = Bed::new("gwt-sets").await?;
    let gw: Gateway = serde_json::from_value(json!({
        "metadata": { "name": "edge" },
        "spec": {
            "gatewayClassName": bed.class,
            "allowedListeners": { "namespaces": { "from": "Same" } },
            "listeners": [{ "name": "shop", "protocol": "HTTP", "port": PORT,
                            "hostname": "shop.example" }]
        }
    }))?;
    bed.ns
        .api::<Gateway>()
        .create(&PostParams::default(), &gw)
        .await?;
    let set: ListenerSet = serde_json::from_value(json!({
        "metadata": { "name": "team" },
        "spec": {
            "parentRef": { "name": "edge" },
            "listeners": [
                { "name": "api", "protocol": "HTTP", "port": PORT, "hostname": "api.example" },
                { "name": "shop", "protocol": "HTTP", "port": PORT, "hostname": "shop.example" }
            ]
        }
    }))?;
    bed.ns
        .api::<ListenerSet>()
        .create(&PostParams::default(), &set)
        .await?;
    bed.route(
        "on-gateway",
        json!({ "parentRefs": parent("edge"),
                "rules": [{ "matches": [{ "path": { "type": "PathPrefix", "value": "/gw" } }],
                            "backendRefs": [backend("blue")] }] }),
    )
    .await?;
    bed.route(
        "on-set",
        json!({ "parentRefs": [{ "group": "gateway.networking.k8s.io", "kind": "ListenerSet",
                                 "name": "team" }],
                "rules": [{ "matches": [{ "path": { "type": "PathPrefix", "value": "/set" } }],
                            "backendRefs": [backend("green")] }] }),
    )
    .await?;
    let config = bed.config("edge", &["api.example", "/set", "/gw"]).await?;
    bed.run_praxis(&config, "sets.yaml")?;

    assert_eq!(bed.backend("shop.example", "/gw", &[])?.app(), "blue");
    assert_eq!(bed.backend("api.example", "/set", &[])?.app(), "green");
    // Each listener's host reaches its own routes only.
    let gateway_route_on_set_host = bed.request("api.example", "/gw", &[])?;
    assert_eq!(
        gateway_route_on_set_host.status, 404,
        "{gateway_route_on_set_host:?}"
    );
    // shop.example is the Gateway's: the set's listener of that host lost
    // the conflict, so the set's route is not served there.
    let set_route_on_gateway_host = bed.request("shop.example", "/set", &[])?;
    assert_eq!(
        set_route_on_gateway_host.status, 404,
        "{set_route_on_gateway_host:?}"
    );
    Ok(())
}

#[tokio::test]
async fn weights_and_filters_shape_the_traffic_of_their_rule_only() -> anyhow::Result<()> {
    if let Some(reason) = netns::unavailable() {
        return pontoon_tests::skip!("{reason}");
    }
    let mut bed = Bed::new("gwt-filters").await?;
    bed.gateway("edge").await?;
    bed.route(
        "shop",
        json!({
            "parentRefs": parent("edge"),
            "hostnames": ["shop.example"],
            "rules": [
                { "backendRefs": [backend("blue")] },
                { "matches": [{ "path": { "type": "PathPrefix", "value": "/split" } }],
                  "backendRefs": [
                      { "name": "blue", "port": 80, "weight": 3 },
                      { "name": "green", "port": 80, "weight": 1 }
                  ] },
                { "matches": [{ "path": { "type": "PathPrefix", "value": "/headers" } }],
                  "filters": [
                      { "type": "RequestHeaderModifier", "requestHeaderModifier": {
                          "set": [{ "name": "x-set", "value": "set-by-route" }],
                          "add": [{ "name": "x-add", "value": "added" }],
                          "remove": ["x-secret"] } },
                      { "type": "ResponseHeaderModifier", "responseHeaderModifier": {
                          "add": [{ "name": "x-served-by", "value": "pontoon" }],
                          "remove": ["x-echo-name"] } }
                  ],
                  "backendRefs": [backend("green")] },
                { "matches": [{ "path": { "type": "PathPrefix", "value": "/old" } }],
                  "filters": [{ "type": "RequestRedirect", "requestRedirect": {
                      "hostname": "new.example", "statusCode": 301 } }] },
                { "matches": [{ "path": { "type": "PathPrefix", "value": "/v1" } }],
                  "filters": [{ "type": "URLRewrite", "urlRewrite": {
                      "hostname": "internal.example",
                      "path": { "type": "ReplacePrefixMatch", "replacePrefixMatch": "/v2" } } }],
                  "backendRefs": [backend("green")] },
                { "matches": [{ "path": { "type": "PathPrefix", "value": "/full" } }],
                  "filters": [{ "type": "URLRewrite", "urlRewrite": {
                      "path": { "type": "ReplaceFullPath", "replaceFullPath": "/replaced" } } }],
                  "backendRefs": [backend("blue")] },
                { "matches": [{ "path": { "type": "PathPrefix", "value": "/secure" } }],
                  "filters": [{ "type": "RequestRedirect", "requestRedirect": { "scheme": "https" } }] },
                { "matches": [{ "path": { "type": "Exact", "value": "/moved" } }],
                  "filters": [{ "type": "RequestRedirect", "requestRedirect": {
                      "port": 8443, "path": { "type": "ReplaceFullPath", "replaceFullPath": "/new-home" } } }] },
                { "matches": [{ "path": { "type": "PathPrefix", "value": "/stamped" } }],
                  "filters": [{ "type": "ExtensionRef", "extensionRef": {
                      "group": "stamp.pontoon.dev", "kind": "HeaderStamp", "name": "from-module" } }],
                  "backendRefs": [backend("blue")] },
                { "matches": [{ "path": { "type": "PathPrefix", "value": "/see-other" } }],
                  "filters": [{ "type": "RequestRedirect", "requestRedirect": {
                      "statusCode": 303,
                      "path": { "type": "ReplacePrefixMatch", "replacePrefixMatch": "/elsewhere" } } }] },
                { "matches": [{ "path": { "type": "PathPrefix", "value": "/cors" } }],
                  "filters": [{ "type": "CORS", "cors": {
                      "allowOrigins": ["https://www.foo.com", "https://*.bar.com"],
                      "allowMethods": ["GET", "PUT"],
                      "allowHeaders": ["x-header-1"],
                      "exposeHeaders": ["x-header-3"],
                      "allowCredentials": true,
                      "maxAge": 600 } }],
                  "backendRefs": [backend("green")] },
                { "matches": [{ "path": { "type": "PathPrefix", "value": "/flat/" } }],
                  "filters": [{ "type": "RequestRedirect", "requestRedirect": {
                      "path": { "type": "ReplacePrefixMatch", "replacePrefixMatch": "/" } } }] },
                { "matches": [{ "path": { "type": "PathPrefix", "value": "/per-backend" } }],
                  "backendRefs": [{ "name": "blue", "port": 80, "filters": [
                      { "type": "URLRewrite", "urlRewrite": {
                          "path": { "type": "ReplaceFullPath", "replaceFullPath": "/only-blue" } } }] }] },
                { "matches": [{ "path": { "type": "PathPrefix", "value": "/each-its-own" } }],
                  "backendRefs": [
                      { "name": "blue", "port": 80, "filters": [
                          { "type": "RequestHeaderModifier", "requestHeaderModifier": {
                              "set": [{ "name": "backend", "value": "blue" }] } },
                          { "type": "ResponseHeaderModifier", "responseHeaderModifier": {
                              "add": [{ "name": "x-answered-by", "value": "blue" }] } }] },
                      { "name": "green", "port": 80, "filters": [
                          { "type": "RequestHeaderModifier", "requestHeaderModifier": {
                              "set": [{ "name": "backend", "value": "green" }] } }] }
                  ] }
            ]
        }),
    )
    .await?;
    let config = bed
        .config(
            "edge",
            &["/split", "x-set", "new.example", "/v2", "from-module"],
        )
        .await?;
    bed.run_praxis(&config, "filters.yaml")?;

    let partially = bed
        .partially_invalid("shop")
        .await
        .context("the rule with backend filters is reported")?;
    assert!(
        partially.message.contains("rule 12")
            && partially.message.contains("backendRefs[0].filters"),
        "{}",
        partially.message
    );

    // Weights 3:1 over blue (two pods) and green (one).
    let mut answered: BTreeMap<String, usize> = BTreeMap::new();
    for i in 0..200 {
        let echo = bed.backend("shop.example", &format!("/split/{i}"), &[])?;
        *answered.entry(echo.app().to_string()).or_default() += 1;
    }
    println!("/split, weights blue 3 green 1, 200 requests: {answered:?}");
    let green = answered.get("green").copied().unwrap_or_default();
    assert!(
        (30..=70).contains(&green),
        "green should get about a quarter of 200: {answered:?}"
    );

    // Header modifiers, request and response.
    let echo = bed.backend(
        "shop.example",
        "/headers",
        &[
            "-H",
            "x-set: from-client",
            "-H",
            "x-secret: s",
            "-H",
            "x-add: client",
        ],
    )?;
    assert_eq!(echo.app(), "green");
    assert_eq!(echo.header("X-Set"), Some("set-by-route"));
    // `add` appends to the client's value (the spec's `my-header: foo,bar`).
    let added: Vec<&str> = echo.json["headers"]["X-Add"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str())
        .collect();
    assert_eq!(added.join(","), "client,added");
    assert_eq!(echo.header("X-Secret"), None);
    assert_eq!(echo.response.header("x-served-by"), Some("pontoon"));
    assert_eq!(echo.response.header("x-echo-name"), None);
    // ... on their rule only.
    let plain = bed.backend("shop.example", "/plain", &["-H", "x-secret: s"])?;
    assert_eq!(plain.header("X-Secret"), Some("s"));
    assert_eq!(plain.header("X-Set"), None);
    assert_eq!(plain.response.header("x-served-by"), None);
    assert!(plain.response.header("x-echo-name").is_some());

    // Redirect: the spec's location, the given status.
    let redirect = bed.request("shop.example", "/old/page?a=1", &[])?;
    assert_eq!(redirect.status, 301, "{redirect:?}");
    assert_eq!(
        redirect.header("location"),
        Some("http://new.example/old/page?a=1")
    );

    // Rewrite: prefix replaced, query kept, Host rewritten.
    let rewritten = bed.backend("shop.example", "/v1/items/7?full=1", &[])?;
    assert_eq!(rewritten.app(), "green");
    assert_eq!(rewritten.path(), "/v2/items/7");
    assert_eq!(rewritten.json["query"], "full=1");
    assert_eq!(rewritten.json["host"], "internal.example");
    assert_eq!(bed.backend("shop.example", "/v1", &[])?.path(), "/v2");

    let full = bed.backend("shop.example", "/full/a/b?k=v", &[])?;
    assert_eq!(
        (full.path(), full.json["query"].as_str()),
        ("/replaced", Some("k=v"))
    );
    // Scheme redirect: the scheme's own port, hence none; 302 by default.
    let secure = bed.request("shop.example", "/secure/x", &[])?;
    assert_eq!(secure.status, 302, "{secure:?}");
    assert_eq!(
        secure.header("location"),
        Some("https://shop.example/secure/x")
    );
    // Port and full-path redirect.
    let moved = bed.request("shop.example", "/moved?a=b", &[])?;
    assert_eq!(moved.status, 302, "{moved:?}");
    assert_eq!(
        moved.header("location"),
        Some("http://shop.example:8443/new-home?a=b")
    );

    // Pontoon's data plane: 303, and the matched prefix replaced (at
    // segment boundaries, query kept, no `//` left by a `/` replacement).
    for (uri, status, location) in [
        (
            "/see-other/a?b=c",
            303,
            "http://shop.example/elsewhere/a?b=c",
        ),
        ("/see-other", 303, "http://shop.example/elsewhere"),
        ("/flat/x/y", 302, "http://shop.example/x/y"),
        ("/flat/", 302, "http://shop.example/"),
    ] {
        let answer = bed.request("shop.example", uri, &[])?;
        assert_eq!(answer.status, status, "{uri}: {answer:?}");
        assert_eq!(answer.header("location"), Some(location), "{uri}");
    }
    assert_eq!(
        bed.backend("shop.example", "/see-otherwise", &[])?.app(),
        "blue"
    );

    // CORS (Pontoon's data plane): a preflight from an allowed origin, any
    // depth under a `*.`, is answered here with every header; one from
    // another origin gets none; a request's answer gets the origin back.
    let preflight = |origin: &str| {
        bed.request(
            "shop.example",
            "/cors/x",
            &[
                "-X",
                "OPTIONS",
                "-H",
                &format!("origin: {origin}"),
                "-H",
                "access-control-request-method: PUT",
            ],
        )
    };
    let allowed = preflight("https://a.b.bar.com")?;
    assert_eq!(allowed.status, 204, "{allowed:?}");
    for (name, value) in [
        ("access-control-allow-origin", "https://a.b.bar.com"),
        ("access-control-allow-methods", "GET, PUT"),
        ("access-control-allow-headers", "x-header-1"),
        ("access-control-expose-headers", "x-header-3"),
        ("access-control-max-age", "600"),
        ("access-control-allow-credentials", "true"),
    ] {
        assert_eq!(allowed.header(name), Some(value), "{name}: {allowed:?}");
    }
    let foreign = preflight("https://bar.com")?;
    assert_eq!(foreign.status, 204, "{foreign:?}");
    assert_eq!(foreign.header("access-control-allow-origin"), None);
    let simple = bed.backend(
        "shop.example",
        "/cors/y",
        &["-H", "origin: https://www.foo.com"],
    )?;
    assert_eq!(simple.app(), "green");
    assert_eq!(
        simple.response.header("access-control-allow-origin"),
        Some("https://www.foo.com")
    );
    assert_eq!(
        simple.response.header("access-control-allow-credentials"),
        Some("true")
    );

    // Praxis's request_id runs on every request: the backend gets an id.
    assert!(
        plain
            .header("X-Request-Id")
            .is_some_and(|id| !id.is_empty())
    );

    // A user's module behind ExtensionRef: both directions stamped.
    let stamped = bed.backend("shop.example", "/stamped", &[])?;
    assert_eq!(stamped.header("X-Header-Stamp"), Some("from-module"));
    assert_eq!(
        stamped.response.header("x-header-stamp"),
        Some("from-module")
    );
    let unstamped = bed.backend("shop.example", "/other", &[])?;
    assert_eq!(unstamped.header("X-Header-Stamp"), None);

    // The refused rule is left out, not served without its filter.
    let fallback = bed.backend("shop.example", "/per-backend", &[])?;
    assert_eq!(fallback.path(), "/per-backend");

    // Each backend of a split gets its own filters (Pontoon's data plane):
    // every request carries the header of the backend that answered it.
    let mut seen = BTreeMap::new();
    for _ in 0..40 {
        let answer = bed.backend("shop.example", "/each-its-own", &[])?;
        let app = answer.app().to_string();
        assert_eq!(
            answer.header("Backend"),
            Some(app.as_str()),
            "{:?}",
            answer.json
        );
        let stamped = answer.response.header("x-answered-by");
        assert_eq!(stamped, (app == "blue").then_some("blue"), "{app}");
        *seen.entry(app).or_insert(0) += 1;
    }
    assert_eq!(seen.len(), 2, "both backends answered: {seen:?}");
    Ok(())
}

/// The requests an echo backend started with `--log-requests` got, as JSON.
fn logged_requests(bed: &Bed, id: ProcessId) -> Vec<serde_json::Value> {
    bed.net
        .log(id)
        .lines()
        .filter_map(|line| line.strip_prefix("request "))
        .filter_map(|json| serde_json::from_str(json).ok())
        .collect()
}

/// Those of [`logged_requests`] made to `path`.
fn logged_to(bed: &Bed, id: ProcessId, path: &str) -> Vec<serde_json::Value> {
    logged_requests(bed, id)
        .into_iter()
        .filter(|r| r["path"] == path)
        .collect()
}

/// Waits until the backend `id` logged `count` requests to `path`.
async fn wait_logged(bed: &Bed, id: ProcessId, path: &str, count: usize) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let got = logged_to(bed, id, path).len();
        if got >= count {
            return Ok(());
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "the mirror got {got} requests to {path}, not {count}:\n{}",
            bed.net.log(id)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_mirror_gets_a_copy_and_the_client_the_backends_answer() -> anyhow::Result<()> {
    if let Some(reason) = netns::unavailable() {
        return pontoon_tests::skip!("{reason}");
    }
    let mut bed = Bed::new("gwt-mirror").await?;
    // Two mirrors whose answers nobody reads: they log what they get.
    let mut mirrors = BTreeMap::new();
    for name in ["teal", "gold"] {
        let ips = backends::deploy(&bed.ns, name, 1, 80, 8080).await?;
        let id = bed.net.start_echo_backend_with(
            &format!("{name}-0"),
            &[SocketAddr::new(ips[0], 8080)],
            &["--log-requests"],
        )?;
        mirrors.insert(name, id);
    }
    let (teal, gold) = (mirrors["teal"], mirrors["gold"]);
    bed.gateway("edge").await?;
    let mirror = |name: &str| json!({ "type": "RequestMirror", "requestMirror": { "backendRef": backend(name) } });
    bed.route(
        "shop",
        json!({
            "parentRefs": parent("edge"),
            "hostnames": ["shop.example"],
            "rules": [
                { "matches": [{ "path": { "type": "PathPrefix", "value": "/copied" } }],
                  "filters": [
                      { "type": "RequestHeaderModifier", "requestHeaderModifier": {
                          "set": [{ "name": "x-set", "value": "by-route" }] } },
                      mirror("teal")
                  ],
                  "backendRefs": [backend("blue")] },
                { "matches": [{ "path": { "type": "PathPrefix", "value": "/twice" } }],
                  "filters": [mirror("teal"), mirror("gold")],
                  "backendRefs": [backend("green")] },
                { "matches": [{ "path": { "type": "PathPrefix", "value": "/some" } }],
                  "filters": [{ "type": "RequestMirror", "requestMirror": {
                      "backendRef": backend("gold"), "percent": 30 } }],
                  "backendRefs": [backend("green")] },
                { "matches": [{ "path": { "type": "PathPrefix", "value": "/nowhere" } }],
                  "filters": [mirror("missing")],
                  "backendRefs": [backend("green")] },
                { "backendRefs": [backend("blue")] }
            ]
        }),
    )
    .await?;
    let config = bed.config("edge", &["pontoon_mirror", "/nowhere"]).await?;
    bed.run_praxis(&config, "mirror.yaml")?;

    // The client gets the backend's answer; the mirror the same request,
    // with the route's header change.
    let copied = bed.backend("shop.example", "/copied", &["-H", "x-client: 1"])?;
    assert_eq!(copied.app(), "blue");
    assert_eq!(copied.header("X-Set"), Some("by-route"));
    wait_logged(&bed, teal, "/copied", 1).await?;
    let copy = &logged_to(&bed, teal, "/copied")[0];
    assert_eq!(copy["host"], "shop.example");
    assert_eq!(copy["headers"]["X-Set"][0], "by-route");
    assert_eq!(copy["headers"]["X-Client"][0], "1");
    assert!(logged_to(&bed, gold, "/copied").is_empty());

    // A body is copied too, and the client's request is not cut short.
    let posted = bed.backend(
        "shop.example",
        "/copied/post",
        &["-X", "POST", "--data-binary", "twelve bytes"],
    )?;
    assert_eq!(posted.json["bodyLength"], 12);
    wait_logged(&bed, teal, "/copied/post", 1).await?;
    let copy = &logged_to(&bed, teal, "/copied/post")[0];
    assert_eq!(
        (copy["method"].as_str(), copy["bodyLength"].as_i64()),
        (Some("POST"), Some(12))
    );

    // Two mirrors each get a copy.
    assert_eq!(bed.backend("shop.example", "/twice", &[])?.app(), "green");
    wait_logged(&bed, teal, "/twice", 1).await?;
    wait_logged(&bed, gold, "/twice", 1).await?;

    // A share: 30 % of 200 requests, within five standard deviations
    // (binomial: 60 ± 32), and every request answered by its backend.
    for _ in 0..200 {
        assert_eq!(bed.backend("shop.example", "/some", &[])?.app(), "green");
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let share = logged_to(&bed, gold, "/some").len();
    assert!((28..=92).contains(&share), "30 % of 200 mirrored: {share}");

    // A mirror whose Service does not exist: the route says so, and its
    // requests are served as if it had none.
    assert_eq!(bed.backend("shop.example", "/nowhere", &[])?.app(), "green");
    let routes: Api<HttpRoute> = bed.ns.api();
    let unresolved = |r: Option<&HttpRoute>| {
        r.and_then(|r| r.status.as_ref()).is_some_and(|s| {
            s.parents.iter().any(|p| {
                p.conditions.iter().any(|c| {
                    c.type_ == "ResolvedRefs"
                        && c.status == "False"
                        && c.reason == "BackendNotFound"
                        && c.message.contains("RequestMirror")
                        && c.message.contains("missing")
                })
            })
        })
    };
    wait_for(&routes, "shop", unresolved, TIMEOUT)
        .await
        .context("ResolvedRefs names the mirror's missing Service")?;
    Ok(())
}

#[tokio::test]
async fn a_route_change_reaches_praxis_through_the_config_map() -> anyhow::Result<()> {
    if let Some(reason) = netns::unavailable() {
        return pontoon_tests::skip!("{reason}");
    }
    let mut bed = Bed::new("gwt-change").await?;
    bed.gateway("edge").await?;
    bed.route(
        "shop",
        json!({
            "parentRefs": parent("edge"),
            "hostnames": ["shop.example"],
            "rules": [{ "backendRefs": [backend("blue")] }]
        }),
    )
    .await?;
    let before = bed.config("edge", &["shop.example"]).await?;
    let praxis = bed.run_praxis(&before, "before.yaml")?;
    assert_eq!(bed.backend("shop.example", "/", &[])?.app(), "blue");

    let routes: Api<HttpRoute> = bed.ns.api();
    routes
        .patch(
            "shop",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "rules": [{ "backendRefs": [backend("green")] }] } })),
        )
        .await?;
    let maps: Api<ConfigMap> = bed.ns.api();
    let changed = |m: Option<&ConfigMap>| config_of(m).is_some_and(|c| c != before);
    let after = wait_for(&maps, "praxis-edge", changed, TIMEOUT)
        .await?
        .and_then(|m| config_of(Some(&m)).map(str::to_string))
        .context("ConfigMap vanished")?;
    // Praxis reloads by restart (the Deployment rolls on the config hash).
    bed.net.stop(praxis)?;
    bed.run_praxis(&after, "after.yaml")?;
    assert_eq!(bed.backend("shop.example", "/", &[])?.app(), "green");
    Ok(())
}
