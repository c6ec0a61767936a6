//! What resolution reads of the cluster, behind a trait: the controllers
//! answer from their reflector stores (and the Secrets they fetched for one
//! reconcile), unit tests from plain lists.

use std::{collections::BTreeMap, sync::Arc};

use gateway_api::{
    gatewayclasses::GatewayClass, gateways::Gateway, listenersets::ListenerSet,
    referencegrants::ReferenceGrant,
};
use k8s_openapi::api::{
    core::v1::{ConfigMap, Secret, Service},
    discovery::v1::EndpointSlice,
};

pub trait ClusterView: Send + Sync {
    /// Labels of a namespace; `None` when it does not exist.
    fn namespace_labels(&self, namespace: &str) -> Option<BTreeMap<String, String>>;
    fn gateway_class(&self, name: &str) -> Option<Arc<GatewayClass>>;
    fn gateway(&self, namespace: &str, name: &str) -> Option<Arc<Gateway>>;
    fn service(&self, namespace: &str, name: &str) -> Option<Arc<Service>>;
    /// The EndpointSlices of a Service (label `kubernetes.io/service-name`).
    fn endpoint_slices(&self, namespace: &str, service: &str) -> Vec<Arc<EndpointSlice>>;
    /// The ReferenceGrants that live in `namespace`.
    fn reference_grants(&self, namespace: &str) -> Vec<Arc<ReferenceGrant>>;
    /// A Secret as fetched for this reconcile; `None` when it does not exist.
    fn secret(&self, namespace: &str, name: &str) -> Option<Arc<Secret>>;
    /// A ConfigMap (a CA bundle) as fetched for this reconcile.
    fn config_map(&self, namespace: &str, name: &str) -> Option<Arc<ConfigMap>>;
    /// Every ListenerSet (none where its CRD is not installed).
    fn listener_sets(&self) -> Vec<Arc<ListenerSet>>;
}

/// A view from plain lists (tests, benchmarks).
#[derive(Default)]
pub struct ListView {
    pub namespaces: Vec<(String, BTreeMap<String, String>)>,
    pub classes: Vec<Arc<GatewayClass>>,
    pub gateways: Vec<Arc<Gateway>>,
    pub services: Vec<Arc<Service>>,
    pub slices: Vec<Arc<EndpointSlice>>,
    pub grants: Vec<Arc<ReferenceGrant>>,
    pub secrets: Vec<Arc<Secret>>,
    pub config_maps: Vec<Arc<ConfigMap>>,
    pub listener_sets: Vec<Arc<ListenerSet>>,
}

fn is<K: kube::Resource>(object: &K, namespace: &str, name: &str) -> bool {
    object.meta().namespace.as_deref() == Some(namespace)
        && object.meta().name.as_deref() == Some(name)
}

impl ClusterView for ListView {
    fn namespace_labels(&self, namespace: &str) -> Option<BTreeMap<String, String>> {
        self.namespaces
            .iter()
            .find(|(n, _)| n == namespace)
            .map(|(_, labels)| labels.clone())
    }

    fn gateway_class(&self, name: &str) -> Option<Arc<GatewayClass>> {
        self.classes
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some(name))
            .cloned()
    }

    fn gateway(&self, namespace: &str, name: &str) -> Option<Arc<Gateway>> {
        self.gateways
            .iter()
            .find(|g| is(&***g, namespace, name))
            .cloned()
    }

    fn service(&self, namespace: &str, name: &str) -> Option<Arc<Service>> {
        self.services
            .iter()
            .find(|s| is(&***s, namespace, name))
            .cloned()
    }

    fn endpoint_slices(&self, namespace: &str, service: &str) -> Vec<Arc<EndpointSlice>> {
        self.slices
            .iter()
            .filter(|s| {
                s.metadata.namespace.as_deref() == Some(namespace)
                    && s.metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(SERVICE_NAME_LABEL))
                        .is_some_and(|n| n == service)
            })
            .cloned()
            .collect()
    }

    fn reference_grants(&self, namespace: &str) -> Vec<Arc<ReferenceGrant>> {
        self.grants
            .iter()
            .filter(|g| g.metadata.namespace.as_deref() == Some(namespace))
            .cloned()
            .collect()
    }

    fn secret(&self, namespace: &str, name: &str) -> Option<Arc<Secret>> {
        self.secrets
            .iter()
            .find(|s| is(&***s, namespace, name))
            .cloned()
    }

    fn config_map(&self, namespace: &str, name: &str) -> Option<Arc<ConfigMap>> {
        self.config_maps
            .iter()
            .find(|c| is(&***c, namespace, name))
            .cloned()
    }

    fn listener_sets(&self) -> Vec<Arc<ListenerSet>> {
        self.listener_sets.clone()
    }
}

/// The label an EndpointSlice names its Service with.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
