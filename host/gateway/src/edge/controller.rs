//! The Gateway API controllers in one place: shared reflectors (one watch per
//! kind, whichever controllers read it), then the GatewayClass, Gateway and
//! route (HTTPRoute, GRPCRoute, TLSRoute, TCPRoute) controllers, each woken by exactly
//! the changes that concern it.

use std::{future::Future, sync::Arc};

use crate::httproutes::HttpRoute;
use futures::{FutureExt, StreamExt, stream::BoxStream};
use gateway_api::{
    backendtlspolicies::BackendTlsPolicy, gatewayclasses::GatewayClass, gateways::Gateway,
    grpcroutes::GrpcRoute, listenersets::ListenerSet, referencegrants::ReferenceGrant,
    tlsroutes::TlsRoute,
};
use k8s_openapi::api::{
    core::v1::{ConfigMap, Namespace, Pod, Secret, Service},
    discovery::v1::EndpointSlice,
};
use kube::{
    Api, Client, Resource, ResourceExt,
    core::PartialObjectMeta,
    runtime::{
        Controller,
        controller::Action,
        events::Recorder,
        finalizer,
        reflector::{ObjectRef, Store},
    },
};

use crate::{
    Error,
    data_plane::children,
    data_plane::model::RouteKind,
    edge::class_reconcile,
    edge::context::{GatewayContext, GatewaySettings},
    edge::gateway_reconcile,
    edge::route_reconcile,
    edge::{shared_watch::SharedWatch, watches::Watches},
    judgement::one_gateway,
    judgement::resolve::{
        listener_sets::{self, SetRef},
        view::SERVICE_NAME_LABEL,
    },
    judgement::route_kinds::RouteResource,
    judgement::tcp_route::TcpRoute,
    judgement::translate::Translator,
};
use pontoon_plugins::Registry;
use pontoon_support::controller_support::{ApiFailure, ensure_crd, metadata_watch, other_failure};
use pontoon_support::health::Health;
use pontoon_support::metrics::{METRICS, ReconcileResult};

/// Runs the Gateway API controllers until `shutdown` completes.
pub async fn run(
    client: Client,
    registry: Arc<Registry>,
    recorder: Recorder,
    settings: GatewaySettings,
    health: Arc<Health>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) -> anyhow::Result<()> {
    ensure_crds(&client).await?;
    let mut watches = Watches::new(&client).await?;
    health.expect(CACHES);
    let stores = watches.stores();
    let ctx = Arc::new(GatewayContext::new(
        client.clone(),
        settings,
        stores.clone(),
        Translator::new(registry),
        recorder,
    ));

    // Subscriptions first: a watch starts dispatching as soon as it runs.
    let class_controller =
        Controller::for_shared_stream(watches.classes.subscribe(), stores.classes.clone())
            .with_config(bounded());

    let gateway_controller = {
        let c = ctx.clone();
        let by_class = move |class: Arc<GatewayClass>| gateways_of_class(&c, &class.name_any());
        let c = ctx.clone();
        let by_route = move |route: Arc<HttpRoute>| gateways_of_route(&c, &*route);
        let c = ctx.clone();
        let by_grpc_route = move |route: Arc<GrpcRoute>| gateways_of_route(&c, &*route);
        let c = ctx.clone();
        let by_tls_route = move |route: Arc<TlsRoute>| gateways_of_route(&c, &*route);
        let c = ctx.clone();
        let by_tcp_route = move |route: Arc<TcpRoute>| gateways_of_route(&c, &*route);
        let c = ctx.clone();
        let all = move |_: Arc<ReferenceGrant>| our_gateways(&c);
        let c = ctx.clone();
        let by_service = move |s: Arc<Service>| {
            gateways_for_service(&c, &s.namespace().unwrap_or_default(), &s.name_any())
        };
        let c = ctx.clone();
        let by_slice = move |s: Arc<EndpointSlice>| {
            let service = s
                .labels()
                .get(SERVICE_NAME_LABEL)
                .cloned()
                .unwrap_or_default();
            c.gateways_using_service(&s.namespace().unwrap_or_default(), &service)
        };
        let c = ctx.clone();
        let by_namespace = move |_: Arc<PartialObjectMeta<Namespace>>| our_gateways(&c);
        let c = ctx.clone();
        let by_pod = move |pod: Arc<Pod>| gateway_of_pod(&c, &pod);
        let c = ctx.clone();
        let by_config_map = move |m: PartialObjectMeta<ConfigMap>| {
            c.gateways_using_config_map(&m.namespace().unwrap_or_default(), &m.name_any())
        };
        let c = ctx.clone();
        let by_policy = move |p: Arc<BackendTlsPolicy>| {
            let namespace = p.namespace().unwrap_or_default();
            let mut gateways: Vec<_> = p
                .spec
                .target_refs
                .iter()
                .filter(|t| t.group.is_empty() && t.kind == "Service")
                .flat_map(|t| gateways_for_service(&c, &namespace, &t.name))
                .collect();
            // And every Gateway whose entry its status carries: one that
            // stopped using it must take that entry out.
            gateways.extend(
                p.status
                    .iter()
                    .flat_map(|s| &s.ancestors)
                    .filter(|a| a.controller_name == c.settings.controller_name)
                    .map(|a| {
                        ObjectRef::new(&a.ancestor_ref.name)
                            .within(a.ancestor_ref.namespace.as_deref().unwrap_or(&namespace))
                    }),
            );
            gateways
        };
        let c = ctx.clone();
        let by_listener_set = move |set: Arc<ListenerSet>| gateways_of_listener_set(&c, &set);
        let c = ctx.clone();
        let by_secret = move |s: PartialObjectMeta<Secret>| {
            c.gateways_using_secret(&s.namespace().unwrap_or_default(), &s.name_any())
        };
        Controller::for_shared_stream(watches.gateways.subscribe(), stores.gateways.clone())
            .with_config(bounded())
            .owns_shared_stream(watches.config_maps.changes())
            .owns_shared_stream(watches.deployments.changes())
            .owns_shared_stream(watches.services.changes())
            .watches_shared_stream(watches.pods.changes(), by_pod)
            .watches_shared_stream(watches.classes.changes(), by_class)
            .watches_shared_stream(watches.routes.changes(), by_route)
            .watches_shared_stream(watches.grpc_routes.changes(), by_grpc_route)
            .watches_shared_stream(watches.tls_routes.changes(), by_tls_route)
            .watches_shared_stream(watches.tcp_routes.changes(), by_tcp_route)
            .watches_shared_stream(watches.grants.changes(), all)
            .watches_shared_stream(watches.services.changes(), by_service)
            .watches_shared_stream(watches.slices.changes(), by_slice)
            .watches_shared_stream(watches.namespaces.changes(), by_namespace)
            .watches_shared_stream(watches.backend_tls_policies.changes(), by_policy)
            .watches_shared_stream(watches.listener_sets.changes(), by_listener_set)
            .watches_stream(metadata_watch::<Secret>(&client), by_secret)
            .watches_stream(metadata_watch::<ConfigMap>(&client), by_config_map)
    };

    let mut triggers = || RouteTriggers {
        gateways: watches.gateways.changes().boxed(),
        classes: watches.classes.changes().boxed(),
        grants: watches.grants.changes().boxed(),
        services: watches.services.changes().boxed(),
        namespaces: watches.namespaces.changes().boxed(),
        listener_sets: watches.listener_sets.changes().boxed(),
        listener_set_store: stores.listener_sets.clone(),
    };
    let http_route_controller = route_controller(&mut watches.routes, triggers());
    let grpc_route_controller = watches
        .optional
        .grpc_routes
        .then(|| route_controller(&mut watches.grpc_routes, triggers()));
    let tls_route_controller = watches
        .optional
        .tls_routes
        .then(|| route_controller(&mut watches.tls_routes, triggers()));
    let tcp_route_controller = watches
        .optional
        .tcp_routes
        .then(|| route_controller(&mut watches.tcp_routes, triggers()));

    watches.start(&client);
    watches.ready().await?;
    health.set_ready(CACHES, true);
    tracing::info!(
        controller_name = ctx.settings.controller_name,
        "Gateway API controllers starting"
    );

    let shutdown = shutdown.shared();
    let classes_done = class_controller
        .graceful_shutdown_on(shutdown.clone())
        .run(
            class_reconcile::reconcile,
            error_policy::<GatewayClass>,
            ctx.clone(),
        )
        .for_each(|r| async move { log("gateway-class", r.err()) });
    let gateways_done = gateway_controller
        .graceful_shutdown_on(shutdown.clone())
        .run(
            gateway_reconcile::reconcile,
            gateway_error_policy,
            ctx.clone(),
        )
        .for_each(|r| async move { log("gateway", r.err()) });
    let routes_done = run_routes(http_route_controller, shutdown.clone(), ctx.clone());
    let grpc_routes_done = futures::future::OptionFuture::from(
        grpc_route_controller.map(|c| run_routes(c, shutdown.clone(), ctx.clone())),
    );
    let tls_routes_done = futures::future::OptionFuture::from(
        tls_route_controller.map(|c| run_routes(c, shutdown.clone(), ctx.clone())),
    );
    let tcp_routes_done = futures::future::OptionFuture::from(
        tcp_route_controller.map(|c| run_routes(c, shutdown, ctx)),
    );
    tokio::join!(
        classes_done,
        gateways_done,
        routes_done,
        grpc_routes_done,
        tls_routes_done,
        tcp_routes_done
    );
    tracing::info!("Gateway API controllers stopped");
    Ok(())
}

/// What wakes a route controller besides its own routes.
struct RouteTriggers {
    gateways: BoxStream<'static, Arc<Gateway>>,
    classes: BoxStream<'static, Arc<GatewayClass>>,
    grants: BoxStream<'static, Arc<ReferenceGrant>>,
    services: BoxStream<'static, Arc<Service>>,
    namespaces: BoxStream<'static, Arc<PartialObjectMeta<Namespace>>>,
    listener_sets: BoxStream<'static, Arc<ListenerSet>>,
    listener_set_store: Store<ListenerSet>,
}

/// The controller of routes of one kind: a route's status changes with the
/// Gateways it names, their classes, ReferenceGrants, its Services and the
/// labels of its own namespace.
fn route_controller<K: RouteResource>(
    routes: &mut SharedWatch<K>,
    triggers: RouteTriggers,
) -> Controller<K> {
    let store = routes.store.clone();
    let (s, sets) = (store.clone(), triggers.listener_set_store.clone());
    let by_gateway = move |g: Arc<Gateway>| routes_naming(&s, &sets, &g);
    let s = store.clone();
    let by_listener_set = move |set: Arc<ListenerSet>| routes_naming_set(&s, &set);
    let s = store.clone();
    let all_by_class = move |_: Arc<GatewayClass>| all_routes(&s);
    let s = store.clone();
    let all_by_grant = move |_: Arc<ReferenceGrant>| all_routes(&s);
    let s = store.clone();
    let by_service = move |service: Arc<Service>| routes_using_service(&s, &service);
    let s = store.clone();
    let by_namespace = move |ns: Arc<PartialObjectMeta<Namespace>>| routes_in(&s, &ns.name_any());
    Controller::for_shared_stream(routes.subscribe(), store)
        .with_config(bounded())
        .watches_shared_stream(triggers.gateways, by_gateway)
        .watches_shared_stream(triggers.classes, all_by_class)
        .watches_shared_stream(triggers.grants, all_by_grant)
        .watches_shared_stream(triggers.services, by_service)
        .watches_shared_stream(triggers.namespaces, by_namespace)
        .watches_shared_stream(triggers.listener_sets, by_listener_set)
}

fn run_routes<K: RouteResource>(
    controller: Controller<K>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
    ctx: Arc<GatewayContext>,
) -> impl Future<Output = ()> {
    let name = match K::KIND {
        RouteKind::Http => "http-route",
        RouteKind::Grpc => "grpc-route",
        RouteKind::Tls => "tls-route",
        RouteKind::Tcp => "tcp-route",
    };
    controller
        .graceful_shutdown_on(shutdown)
        .run(route_reconcile::reconcile::<K>, error_policy::<K>, ctx)
        .for_each(move |r| async move { log(name, r.err()) })
}

/// Reconciles of one controller running at once. Unbounded, a burst of
/// route changes runs a reconcile per route at once, each on its own API
/// connection (1000 new routes opened over a thousand TLS connections).
const CONCURRENCY: u16 = 8;

fn bounded() -> kube::runtime::controller::Config {
    kube::runtime::controller::Config::default().concurrency(CONCURRENCY)
}

/// Fails early, with what to do, when the Gateway API CRDs are not installed.
async fn ensure_crds(client: &Client) -> anyhow::Result<()> {
    ensure_crd(
        &Api::<GatewayClass>::all(client.clone()),
        "the cluster has no Gateway API CRDs (gateway.networking.k8s.io/v1); install them with `pontoon crds --set gateway-api | kubectl apply --server-side -f -`, or run with `--controllers bridge-mounts`",
        "GatewayClasses",
    )
    .await
}

/// The readiness part these controllers report (`/readyz`).
const CACHES: &str = "Gateway API caches";

/// Counts a reconcile of `controller` and logs one that did not complete.
fn log<E: std::error::Error + 'static>(controller: &'static str, err: Option<E>) {
    METRICS.reconciled(
        controller,
        ReconcileResult::of(
            err.as_ref()
                .map(|e| e as &(dyn std::error::Error + 'static)),
        ),
    );
    if let Some(err) = err {
        tracing::debug!(controller, error = %err, "reconcile did not complete");
    }
}

fn error_policy<K: Resource<DynamicType = ()>>(
    object: Arc<K>,
    err: &Error,
    _: Arc<GatewayContext>,
) -> Action {
    let name = ObjectRef::from_obj(&*object).to_string();
    match err {
        Error::Kube(e) => ApiFailure::of(e).action(&name, err),
        _ => other_failure(&name, err),
    }
}

fn gateway_error_policy(
    gateway: Arc<Gateway>,
    err: &finalizer::Error<Error>,
    ctx: Arc<GatewayContext>,
) -> Action {
    match err {
        finalizer::Error::ApplyFailed(e) | finalizer::Error::CleanupFailed(e) => {
            error_policy(gateway, e, ctx)
        }
        finalizer::Error::AddFinalizer(e) | finalizer::Error::RemoveFinalizer(e) => {
            let name = ObjectRef::from_obj(&*gateway).to_string();
            ApiFailure::of(e).action(&name, err)
        }
        other => other_failure(&ObjectRef::from_obj(&*gateway).to_string(), other),
    }
}

fn our_gateways(ctx: &GatewayContext) -> Vec<ObjectRef<Gateway>> {
    ctx.stores
        .gateways
        .state()
        .iter()
        .filter(|g| ctx.serves(g))
        .map(|g| ObjectRef::from_obj(&**g))
        .collect()
}

/// The Gateway whose data plane a pod runs, by its instance label (the
/// Gateway's name, or its shortened form for a long name).
fn gateway_of_pod(ctx: &GatewayContext, pod: &Pod) -> Option<ObjectRef<Gateway>> {
    let instance = pod.labels().get(children::INSTANCE_LABEL)?;
    let namespace = pod.namespace()?;
    let direct = ObjectRef::<Gateway>::new(instance).within(&namespace);
    if ctx.stores.gateways.get(&direct).is_some() {
        return Some(direct);
    }
    ctx.stores
        .gateways
        .state()
        .iter()
        .find(|g| {
            g.metadata.namespace.as_deref() == Some(namespace.as_str())
                && children::instance(g) == *instance
        })
        .map(|g| ObjectRef::from_obj(&**g))
}

fn gateways_of_class(ctx: &GatewayContext, class: &str) -> Vec<ObjectRef<Gateway>> {
    ctx.stores
        .gateways
        .state()
        .iter()
        .filter(|g| g.spec.gateway_class_name == class)
        .map(|g| ObjectRef::from_obj(&**g))
        .collect()
}

/// The Gateways a route names, and the ones that served it before (a
/// parent reference that was removed must reach its old Gateway too).
fn gateways_of_route<K: RouteResource>(ctx: &GatewayContext, route: &K) -> Vec<ObjectRef<Gateway>> {
    let namespace = route.namespace().unwrap_or_default();
    let mut out: Vec<ObjectRef<Gateway>> = route
        .parent_names()
        .iter()
        .filter(|p| p.kind.as_deref().unwrap_or("Gateway") == "Gateway")
        .map(|p| ObjectRef::new(&p.name).within(p.namespace.as_deref().unwrap_or(&namespace)))
        .collect();
    // A ListenerSet named is its Gateway's.
    out.extend(
        route
            .parent_names()
            .iter()
            .filter_map(|p| listener_sets::named_by(p, &namespace))
            .filter_map(|set| ctx.gateway_of_listener_set(&set)),
    );
    out.extend(ctx.gateways_serving_route(K::KIND, &namespace, &route.name_any()));
    out.sort_by_key(|r| (r.namespace.clone(), r.name.clone()));
    out.dedup();
    out
}

/// The routes that name `gateway` or one of the ListenerSets naming it.
/// The Gateways whose config uses the Service `namespace/name`: the ones
/// whose last reconcile used it, and the ones a route in the stores sends to
/// it names. (The first alone misses a Gateway whose reconcile is under way
/// and has not yet recorded what it used: a BackendTLSPolicy created then
/// went unapplied until the next resync.)
fn gateways_for_service(
    ctx: &GatewayContext,
    namespace: &str,
    name: &str,
) -> Vec<ObjectRef<Gateway>> {
    let key = (namespace.to_string(), name.to_string());
    let mut out = ctx.gateways_using_service(namespace, name);
    fn naming<K: RouteResource>(
        ctx: &GatewayContext,
        store: &Store<K>,
        key: &(String, String),
        out: &mut Vec<ObjectRef<Gateway>>,
    ) {
        for route in store.state() {
            if route.backend_services().contains(key) {
                out.extend(gateways_of_route(ctx, &*route));
            }
        }
    }
    naming(ctx, &ctx.stores.routes, &key, &mut out);
    naming(ctx, &ctx.stores.grpc_routes, &key, &mut out);
    naming(ctx, &ctx.stores.tls_routes, &key, &mut out);
    naming(ctx, &ctx.stores.tcp_routes, &key, &mut out);
    out.sort_by_key(|r| (r.namespace.clone(), r.name.clone()));
    out.dedup();
    out
}

fn routes_naming<K: RouteResource>(
    store: &Store<K>,
    sets: &Store<ListenerSet>,
    gateway: &Gateway,
) -> Vec<ObjectRef<K>> {
    let sets = listener_sets::naming(gateway, sets.state());
    store
        .state()
        .iter()
        .filter(|r| one_gateway::names_gateway(&***r, gateway, &sets))
        .map(|r| ObjectRef::from_obj(&**r))
        .collect()
}

/// The routes whose parent references name `set`.
fn routes_naming_set<K: RouteResource>(store: &Store<K>, set: &ListenerSet) -> Vec<ObjectRef<K>> {
    let sets = [SetRef::of(set)];
    store
        .state()
        .iter()
        .filter(|r| {
            let ns = r.namespace().unwrap_or_default();
            r.parent_names()
                .iter()
                .any(|p| listener_sets::named_by(p, &ns).is_some_and(|s| sets.contains(&s)))
        })
        .map(|r| ObjectRef::from_obj(&**r))
        .collect()
}

/// The Gateway a ListenerSet names (its listeners are that Gateway's), and
/// every Gateway that served it before (one it no longer names must drop them).
fn gateways_of_listener_set(ctx: &GatewayContext, set: &ListenerSet) -> Vec<ObjectRef<Gateway>> {
    let mut out: Vec<ObjectRef<Gateway>> = listener_sets::parent_gateway(set).into_iter().collect();
    out.extend(ctx.gateways_serving_listener_set(&SetRef::of(set)));
    out.sort_by_key(|r| (r.namespace.clone(), r.name.clone()));
    out.dedup();
    out
}

fn all_routes<K: RouteResource>(store: &Store<K>) -> Vec<ObjectRef<K>> {
    store
        .state()
        .iter()
        .map(|r| ObjectRef::from_obj(&**r))
        .collect()
}

/// The routes a namespace's change can re-judge: a listener's
/// `allowedRoutes` selector reads the labels of the route's own namespace,
/// and nothing else of a namespace. (Every route on every namespace event
/// re-ran a thousand reconciles each time any test or tenant made or
/// deleted a namespace anywhere in the cluster.)
fn routes_in<K: RouteResource>(store: &Store<K>, namespace: &str) -> Vec<ObjectRef<K>> {
    store
        .state()
        .iter()
        .filter(|r| r.namespace().as_deref() == Some(namespace))
        .map(|r| ObjectRef::from_obj(&**r))
        .collect()
}

fn routes_using_service<K: RouteResource>(
    store: &Store<K>,
    service: &Service,
) -> Vec<ObjectRef<K>> {
    let key = (service.namespace().unwrap_or_default(), service.name_any());
    store
        .state()
        .iter()
        .filter(|r| r.backend_services().contains(&key))
        .map(|r| ObjectRef::from_obj(&**r))
        .collect()
}
