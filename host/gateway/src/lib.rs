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
