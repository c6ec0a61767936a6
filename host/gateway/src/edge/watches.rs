//! Every watch the Gateway API controllers read, as one value: made (with
//! the optional kinds the cluster serves), started, and ready once every
//! store is filled. Each kind is named here once per stage, nowhere else.

use std::future::Future;

use crate::httproutes::HttpRoute;
use gateway_api::{
    backendtlspolicies::BackendTlsPolicy, gatewayclasses::GatewayClass, gateways::Gateway,
    grpcroutes::GrpcRoute, listenersets::ListenerSet, referencegrants::ReferenceGrant,
    tlsroutes::TlsRoute,
};
use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{ConfigMap, Namespace, Pod, Service},
    discovery::v1::EndpointSlice,
};
use kube::{Api, Client, Resource, core::PartialObjectMeta};
use pontoon_support::controller_support::watch_config;
use serde::de::DeserializeOwned;

use crate::{
    data_plane::children,
    edge::{context::Stores, shared_watch::SharedWatch},
    judgement::tcp_route::TcpRoute,
};

/// The kinds a cluster may lack (an older Gateway API, a channel without
/// them): not watched, and not served, where their CRDs are not installed.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Optional {
    pub grpc_routes: bool,
    pub tls_routes: bool,
    pub tcp_routes: bool,
    pub backend_tls_policies: bool,
    pub listener_sets: bool,
}

pub(crate) struct Watches {
    pub classes: SharedWatch<GatewayClass>,
    pub gateways: SharedWatch<Gateway>,
    pub routes: SharedWatch<HttpRoute>,
    pub grpc_routes: SharedWatch<GrpcRoute>,
    pub tls_routes: SharedWatch<TlsRoute>,
    pub tcp_routes: SharedWatch<TcpRoute>,
    pub grants: SharedWatch<ReferenceGrant>,
    pub services: SharedWatch<Service>,
    pub slices: SharedWatch<EndpointSlice>,
    pub namespaces: SharedWatch<PartialObjectMeta<Namespace>>,
    /// The data planes' children: their Deployments (availability) and
    /// ConfigMaps (only their versions: the configs are not kept twice).
    pub deployments: SharedWatch<Deployment>,
    pub config_maps: SharedWatch<PartialObjectMeta<ConfigMap>>,
    /// And their pods: a first rollout is served once its pods are Ready,
    /// before the ReplicaSet and then the Deployment report it.
    pub pods: SharedWatch<Pod>,
    pub backend_tls_policies: SharedWatch<BackendTlsPolicy>,
    pub listener_sets: SharedWatch<ListenerSet>,
    pub optional: Optional,
}

impl Watches {
    /// Every watch, not yet running, with the optional kinds the cluster
    /// serves.
    pub async fn new(client: &Client) -> anyhow::Result<Self> {
        let optional = Optional {
            grpc_routes: installed::<GrpcRoute>(client).await?,
            tls_routes: installed::<TlsRoute>(client).await?,
            tcp_routes: installed::<TcpRoute>(client).await?,
            backend_tls_policies: installed::<BackendTlsPolicy>(client).await?,
            listener_sets: installed::<ListenerSet>(client).await?,
        };
        Ok(Self {
            classes: SharedWatch::new(),
            gateways: SharedWatch::new(),
            routes: SharedWatch::new(),
            grpc_routes: SharedWatch::new(),
            tls_routes: SharedWatch::new(),
            tcp_routes: SharedWatch::new(),
            grants: SharedWatch::new(),
            services: SharedWatch::new(),
            slices: SharedWatch::new(),
            namespaces: SharedWatch::new(),
            deployments: SharedWatch::new(),
            config_maps: SharedWatch::new(),
            pods: SharedWatch::new(),
            backend_tls_policies: SharedWatch::new(),
            listener_sets: SharedWatch::new(),
            optional,
        })
    }

    /// The stores the reconciles read, filled once the watches run.
    pub fn stores(&self) -> Stores {
        Stores {
            classes: self.classes.store.clone(),
            gateways: self.gateways.store.clone(),
            routes: self.routes.store.clone(),
            grpc_routes: self.grpc_routes.store.clone(),
            tls_routes: self.tls_routes.store.clone(),
            tcp_routes: self.tcp_routes.store.clone(),
            grants: self.grants.store.clone(),
            services: self.services.store.clone(),
            slices: self.slices.store.clone(),
            namespaces: self.namespaces.store.clone(),
            deployments: self.deployments.store.clone(),
            config_maps: self.config_maps.store.clone(),
            pods: self.pods.store.clone(),
            backend_tls_policies: self.backend_tls_policies.store.clone(),
            listener_sets: self.listener_sets.store.clone(),
        }
    }

    /// Starts every watch (after the controllers subscribed: a watch
    /// dispatches as soon as it runs). The children's kinds are watched by
    /// their labels only.
    pub fn start(&mut self, client: &Client) {
        let config = watch_config();
        self.classes.start(Api::all(client.clone()), config.clone());
        self.gateways
            .start(Api::all(client.clone()), config.clone());
        self.routes.start(Api::all(client.clone()), config.clone());
        if self.optional.grpc_routes {
            self.grpc_routes
                .start(Api::all(client.clone()), config.clone());
        }
        if self.optional.tls_routes {
            self.tls_routes
                .start(Api::all(client.clone()), config.clone());
        }
        if self.optional.tcp_routes {
            self.tcp_routes
                .start(Api::all(client.clone()), config.clone());
        }
        if self.optional.backend_tls_policies {
            self.backend_tls_policies
                .start(Api::all(client.clone()), config.clone());
        }
        if self.optional.listener_sets {
            self.listener_sets
                .start(Api::all(client.clone()), config.clone());
        }
        self.grants.start(Api::all(client.clone()), config.clone());
        self.services
            .start(Api::all(client.clone()), config.clone());
        self.slices.start(Api::all(client.clone()), config.clone());
        self.namespaces
            .start(Api::all(client.clone()), config.clone());
        let children = config.labels(&format!(
            "app.kubernetes.io/name=praxis,app.kubernetes.io/managed-by={}",
            children::MANAGED_BY
        ));
        self.deployments
            .start(Api::all(client.clone()), children.clone());
        self.config_maps
            .start(Api::all(client.clone()), children.clone());
        self.pods.start(Api::all(client.clone()), children);
    }

    /// Until every store that is watched is filled: no reconcile may judge
    /// a route against half-filled stores.
    pub async fn ready(&self) -> anyhow::Result<()> {
        let optional = self.optional;
        futures::try_join!(
            self.classes.store.wait_until_ready(),
            self.gateways.store.wait_until_ready(),
            self.routes.store.wait_until_ready(),
            when(
                optional.grpc_routes,
                self.grpc_routes.store.wait_until_ready()
            ),
            when(
                optional.tls_routes,
                self.tls_routes.store.wait_until_ready()
            ),
            when(
                optional.tcp_routes,
                self.tcp_routes.store.wait_until_ready()
            ),
            when(
                optional.backend_tls_policies,
                self.backend_tls_policies.store.wait_until_ready()
            ),
            when(
                optional.listener_sets,
                self.listener_sets.store.wait_until_ready()
            ),
            self.grants.store.wait_until_ready(),
            self.services.store.wait_until_ready(),
            self.slices.store.wait_until_ready(),
            self.namespaces.store.wait_until_ready(),
            self.deployments.store.wait_until_ready(),
            self.config_maps.store.wait_until_ready(),
            self.pods.store.wait_until_ready(),
        )?;
        Ok(())
    }
}

/// Waits for `ready` only when `wanted`.
async fn when<E>(wanted: bool, ready: impl Future<Output = Result<(), E>>) -> Result<(), E> {
    if wanted { ready.await } else { Ok(()) }
}

/// Whether the cluster serves `K` (its CRD is installed); a kind it does not
/// serve is not watched, and says so in the log.
async fn installed<K>(client: &Client) -> anyhow::Result<bool>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    let api = Api::<K>::all(client.clone());
    match api
        .list_metadata(&kube::api::ListParams::default().limit(1))
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(status)) if status.code == 404 => {
            tracing::warn!(
                kind = %K::kind(&()),
                version = %K::version(&()),
                "the cluster has no CRD for this kind: its objects are not served"
            );
            Ok(false)
        }
        Err(err) => Err(anyhow::Error::new(err).context(format!("cannot list {}", K::plural(&())))),
    }
}
