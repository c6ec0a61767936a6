//! The vendored Gateway API CRDs install on the test cluster and do what the
//! API server is asked to do with them: defaults and validation.

use kube::{
    Api,
    api::{ApiResource, DynamicObject, PostParams},
};
use pontoon_tests::{TestNamespace, gateway_api};
use serde_json::json;

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: "gateway.networking.k8s.io".into(),
        version: "v1".into(),
        api_version: "gateway.networking.k8s.io/v1".into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

fn object(
    resource: &ApiResource,
    name: &str,
    spec: serde_json::Value,
) -> anyhow::Result<DynamicObject> {
    Ok(serde_json::from_value(json!({
        "apiVersion": resource.api_version,
        "kind": resource.kind,
        "metadata": { "name": name },
        "spec": spec,
    }))?)
}

#[tokio::test]
async fn gateway_api_crds_install_and_validate() -> anyhow::Result<()> {
    gateway_api::install_crds().await?;
    // Once per process: the second call is the first one's outcome.
    gateway_api::install_crds().await?;
    let ns = TestNamespace::new("gwapi").await?;

    let routes = resource("HTTPRoute", "httproutes");
    let api: Api<DynamicObject> = Api::namespaced_with(ns.client.clone(), ns.name(), &routes);
    let route = object(
        &routes,
        "web",
        json!({
            "parentRefs": [{ "name": "gw" }],
            "rules": [{ "backendRefs": [{ "name": "web", "port": 80 }] }]
        }),
    )?;
    let stored = api.create(&PostParams::default(), &route).await?;
    // The CRD's defaults apply: a rule without matches matches every path.
    assert_eq!(
        stored.data["spec"]["rules"][0]["matches"],
        json!([{ "path": { "type": "PathPrefix", "value": "/" } }]),
        "{stored:?}"
    );

    // The CRD's validation applies: a path must be absolute.
    let bad = object(
        &routes,
        "bad",
        json!({
            "parentRefs": [{ "name": "gw" }],
            "rules": [{
                "matches": [{ "path": { "type": "PathPrefix", "value": "relative" } }],
                "backendRefs": [{ "name": "web", "port": 80 }]
            }]
        }),
    )?;
    let err = api
        .create(&PostParams::default(), &bad)
        .await
        .expect_err("the API server stored an HTTPRoute with a relative path");
    assert!(
        err.to_string().contains("must be an absolute path"),
        "{err}"
    );

    // Every standard kind is served.
    let classes = resource("GatewayClass", "gatewayclasses");
    let all: Api<DynamicObject> = Api::all_with(ns.client.clone(), &classes);
    all.list(&Default::default()).await?;
    for (kind, plural) in [
        ("Gateway", "gateways"),
        ("GRPCRoute", "grpcroutes"),
        ("ListenerSet", "listenersets"),
        ("TLSRoute", "tlsroutes"),
        ("TCPRoute", "tcproutes"),
        ("UDPRoute", "udproutes"),
        ("BackendTLSPolicy", "backendtlspolicies"),
        ("ReferenceGrant", "referencegrants"),
    ] {
        let api: Api<DynamicObject> =
            Api::namespaced_with(ns.client.clone(), ns.name(), &resource(kind, plural));
        api.list(&Default::default()).await?;
    }
    Ok(())
}
