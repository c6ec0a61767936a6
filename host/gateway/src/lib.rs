//! Gateway API for Praxis: GatewayClass, Gateway, HTTPRoute, GRPCRoute,
//! TLSRoute and TCPRoute controllers, and the Praxis configuration generated
//! from them.
//!
//! One folder per layer, each importing only the ones below it: `edge` (watches,
//! reconcilers, API reads and writes), `judgement` (pure, over the cluster
//! view) and `data_plane` (pure output: model, config, children, apply plan).

pub mod data_plane;
pub mod edge;
pub mod judgement;

/// HTTPRoute as the Gateway API's experimental channel spells it, the one
/// type every layer reads HTTPRoutes (and GRPCRoutes, TLSRoutes and
/// TCPRoutes, in HTTPRoute's shape) in. It is the standard type plus the
/// experimental fields, so it reads a route of either channel's CRD (a field
/// the standard CRD lacks is simply absent): a rule's `retry` (GEP-1731),
/// which Pontoon serves, and `sessionPersistence`, the `ExternalAuth` filter
/// and `useDefaultGateways`, which it does not, are kept rather than dropped
/// at the watch, so that a route with them is judged (refused where it
/// must be) instead of failing to deserialize or losing them silently.
pub use gateway_api::experimental::httproutes;

/// Why a Gateway API reconcile did not complete (it is retried).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("cannot encode an object: {0}")]
    Encode(#[from] serde_json::Error),
    #[error("the claim of a Gateway did not finish: {0}")]
    Claim(String),
}
