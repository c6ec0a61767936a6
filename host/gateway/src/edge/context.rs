//! What the Gateway API controllers share: the client, their settings, the
//! reflector stores every reconcile reads, the filter translator and the
//! event recorder; and which Services and Secrets each Gateway used, so a
//! change of one wakes exactly the Gateways it concerns.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, Mutex},
};

use crate::httproutes::HttpRoute;
use gateway_api::{
    backendtlspolicies::BackendTlsPolicy, gatewayclasses::GatewayClass, gateways::Gateway,
    grpcroutes::GrpcRoute, listenersets::ListenerSet, referencegrants::ReferenceGrant,
    tlsroutes::TlsRoute,
};
use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{ConfigMap, Namespace, Pod, Secret, Service},
    discovery::v1::EndpointSlice,
};
use kube::{
    Client,
    core::PartialObjectMeta,
    runtime::{
        events::Recorder,
        reflector::{ObjectRef, Store},
    },
};

use crate::{
    data_plane::config::GenerateOptions,
    data_plane::model::RouteKind,
    data_plane::{apply_plan::Applied, program::DataPlane},
    judgement::one_gateway::References,
    judgement::resolve::{
        listener_sets::{self, SetRef},
        view::{ClusterView, SERVICE_NAME_LABEL},
    },
    judgement::tcp_route::TcpRoute,
    judgement::translate::Translator,
};

/// The operator's settings for the Gateway API.
#[derive(Clone, Debug)]
pub struct GatewaySettings {
    /// The `controllerName` of the GatewayClasses Pontoon serves.
    pub controller_name: String,
    /// The image the Gateways' pods run.
    pub data_plane_image: String,
    /// The program in that image: what the configs may ask of it.
    pub data_plane: DataPlane,
    /// How configs are generated (listen address, admin address).
    pub config: GenerateOptions,
}

/// Every store the reconciles read; all filled before any reconcile runs.
#[derive(Clone)]
pub struct Stores {
    pub classes: Store<GatewayClass>,
    pub gateways: Store<Gateway>,
    pub routes: Store<HttpRoute>,
    pub grpc_routes: Store<GrpcRoute>,
    pub tls_routes: Store<TlsRoute>,
    pub tcp_routes: Store<TcpRoute>,
    pub grants: Store<ReferenceGrant>,
    pub services: Store<Service>,
    pub slices: Store<EndpointSlice>,
    pub namespaces: Store<PartialObjectMeta<Namespace>>,
    /// The data planes' Deployments (labelled as `children` labels them).
    pub deployments: Store<Deployment>,
    /// The data planes' ConfigMaps, metadata only.
    pub config_maps: Store<PartialObjectMeta<ConfigMap>>,
    /// The data planes' pods.
    pub pods: Store<Pod>,
    /// BackendTLSPolicies (empty where their CRD is not installed).
    pub backend_tls_policies: Store<BackendTlsPolicy>,
    /// ListenerSets (empty where their CRD is not installed).
    pub listener_sets: Store<ListenerSet>,
}

pub struct GatewayContext {
    pub client: Client,
    pub settings: GatewaySettings,
    pub stores: Stores,
    pub translator: Translator,
    pub recorder: Recorder,
    references: Mutex<HashMap<ObjectRef<Gateway>, References>>,
    applied: Mutex<HashMap<ObjectRef<Gateway>, Applied>>,
}

impl GatewayContext {
    pub fn new(
        client: Client,
        settings: GatewaySettings,
        stores: Stores,
        translator: Translator,
        recorder: Recorder,
    ) -> Self {
        Self {
            client,
            settings,
            stores,
            translator,
            recorder,
            references: Mutex::default(),
            applied: Mutex::default(),
        }
    }

    fn applied(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectRef<Gateway>, Applied>> {
        self.applied.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What the last apply of this Gateway's children wrote.
    pub fn last_applied(&self, gateway: &ObjectRef<Gateway>) -> Option<Applied> {
        self.applied().get(gateway).cloned()
    }

    pub fn record_applied(&self, gateway: ObjectRef<Gateway>, applied: Applied) {
        self.applied().insert(gateway, applied);
    }

    fn references(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectRef<Gateway>, References>> {
        self.references.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn remember(&self, gateway: ObjectRef<Gateway>, references: References) {
        self.references().insert(gateway, references);
    }

    pub fn forget(&self, gateway: &ObjectRef<Gateway>) {
        self.references().remove(gateway);
        self.applied().remove(gateway);
    }

    /// The Gateways whose config used the Service `namespace/name`.
    pub fn gateways_using_service(&self, namespace: &str, name: &str) -> Vec<ObjectRef<Gateway>> {
        let key = (namespace.to_string(), name.to_string());
        self.references()
            .iter()
            .filter(|(_, r)| r.services.contains(&key))
            .map(|(g, _)| g.clone())
            .collect()
    }

    /// The Gateways whose listeners refer to the Secret `namespace/name`.
    pub fn gateways_using_secret(&self, namespace: &str, name: &str) -> Vec<ObjectRef<Gateway>> {
        let key = (namespace.to_string(), name.to_string());
        self.references()
            .iter()
            .filter(|(_, r)| r.secrets.contains(&key))
            .map(|(g, _)| g.clone())
            .collect()
    }

    /// The Gateways that read CA certificates from ConfigMap `namespace/name`.
    pub fn gateways_using_config_map(
        &self,
        namespace: &str,
        name: &str,
    ) -> Vec<ObjectRef<Gateway>> {
        let key = (namespace.to_string(), name.to_string());
        self.references()
            .iter()
            .filter(|(_, r)| r.config_maps.contains(&key))
            .map(|(g, _)| g.clone())
            .collect()
    }

    /// The Gateways the route `namespace/name` was judged for last time.
    pub fn gateways_serving_route(
        &self,
        kind: RouteKind,
        namespace: &str,
        name: &str,
    ) -> Vec<ObjectRef<Gateway>> {
        let key = (kind, namespace.to_string(), name.to_string());
        self.references()
            .iter()
            .filter(|(_, r)| r.routes.contains(&key))
            .map(|(g, _)| g.clone())
            .collect()
    }

    /// The Gateways the ListenerSet `set` named last time they were judged.
    pub fn gateways_serving_listener_set(&self, set: &SetRef) -> Vec<ObjectRef<Gateway>> {
        self.references()
            .iter()
            .filter(|(_, r)| r.listener_sets.contains(set))
            .map(|(g, _)| g.clone())
            .collect()
    }

    /// The Gateway the ListenerSet `set` names, when the set is in the store.
    pub fn gateway_of_listener_set(&self, set: &SetRef) -> Option<ObjectRef<Gateway>> {
        let found = self
            .stores
            .listener_sets
            .get(&ObjectRef::new(&set.name).within(&set.namespace))?;
        listener_sets::parent_gateway(&found)
    }

    /// Whether a GatewayClass is one of ours.
    pub fn serves_class(&self, class: &str) -> bool {
        self.stores
            .classes
            .get(&ObjectRef::new(class))
            .is_some_and(|c| c.spec.controller_name == self.settings.controller_name)
    }

    /// Whether a Gateway belongs to one of our classes.
    pub fn serves(&self, gateway: &Gateway) -> bool {
        self.serves_class(&gateway.spec.gateway_class_name)
    }
}

/// EndpointSlices by the (namespace, name) of their Service.
type SlicesByService = HashMap<(String, String), Vec<Arc<EndpointSlice>>>;

/// What one reconcile fetched of objects the controllers do not keep in
/// stores (the operator does not hold every Secret and ConfigMap of the
/// cluster): the listeners' certificate Secrets and CA ConfigMaps.
#[derive(Clone, Debug, Default)]
pub struct Fetched {
    pub secrets: BTreeMap<(String, String), Arc<Secret>>,
    pub config_maps: BTreeMap<(String, String), Arc<ConfigMap>>,
}

/// The cluster as the stores (and what was fetched for one reconcile) show it.
pub struct StoreView<'a> {
    stores: &'a Stores,
    fetched: Fetched,
    /// EndpointSlices by (namespace, service), built on first use.
    slices: std::sync::OnceLock<SlicesByService>,
}

impl<'a> StoreView<'a> {
    pub fn new(stores: &'a Stores, fetched: Fetched) -> Self {
        Self {
            stores,
            fetched,
            slices: std::sync::OnceLock::new(),
        }
    }

    /// Adds what was fetched later in the reconcile (a policy's CA ConfigMaps).
    pub fn add(&mut self, fetched: Fetched) {
        self.fetched.secrets.extend(fetched.secrets);
        self.fetched.config_maps.extend(fetched.config_maps);
    }

    fn slices(&self) -> &SlicesByService {
        self.slices.get_or_init(|| {
            let mut index = SlicesByService::new();
            for slice in self.stores.slices.state() {
                let service = slice
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(SERVICE_NAME_LABEL))
                    .cloned();
                if let (Some(ns), Some(service)) = (slice.metadata.namespace.clone(), service) {
                    index.entry((ns, service)).or_default().push(slice);
                }
            }
            index
        })
    }
}

impl ClusterView for StoreView<'_> {
    fn namespace_labels(&self, namespace: &str) -> Option<BTreeMap<String, String>> {
        self.stores
            .namespaces
            .get(&ObjectRef::new(namespace))
            .map(|n| n.metadata.labels.clone().unwrap_or_default())
    }

    fn gateway_class(&self, name: &str) -> Option<Arc<GatewayClass>> {
        self.stores.classes.get(&ObjectRef::new(name))
    }

    fn gateway(&self, namespace: &str, name: &str) -> Option<Arc<Gateway>> {
        self.stores
            .gateways
            .get(&ObjectRef::new(name).within(namespace))
    }

    fn service(&self, namespace: &str, name: &str) -> Option<Arc<Service>> {
        self.stores
            .services
            .get(&ObjectRef::new(name).within(namespace))
    }

    fn endpoint_slices(&self, namespace: &str, service: &str) -> Vec<Arc<EndpointSlice>> {
        self.slices()
            .get(&(namespace.to_string(), service.to_string()))
            .cloned()
            .unwrap_or_default()
    }

    fn reference_grants(&self, namespace: &str) -> Vec<Arc<ReferenceGrant>> {
        self.stores
            .grants
            .state()
            .into_iter()
            .filter(|g| g.metadata.namespace.as_deref() == Some(namespace))
            .collect()
    }

    fn secret(&self, namespace: &str, name: &str) -> Option<Arc<Secret>> {
        self.fetched
            .secrets
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }

    fn config_map(&self, namespace: &str, name: &str) -> Option<Arc<ConfigMap>> {
        self.fetched
            .config_maps
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }

    fn listener_sets(&self) -> Vec<Arc<ListenerSet>> {
        self.stores.listener_sets.state()
    }
}
