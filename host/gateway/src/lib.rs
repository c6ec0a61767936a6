//! Gateway API for Praxis: GatewayClass, Gateway, HTTPRoute, GRPCRoute and
//! TLSRoute controllers, and the Praxis configuration generated from them.

pub mod addresses;
pub mod apply_plan;
pub mod backend_tls;
pub mod children;
pub mod class_reconcile;
pub mod config;
pub mod context;
pub mod controller;
mod data_plane;
pub mod fetch;
pub mod gateway_reconcile;
pub mod judgement;
pub mod model;
pub mod ownership;
pub mod resolve;
pub mod route_kinds;
pub mod route_reconcile;
pub mod routes;
mod shared_watch;
pub mod status;
pub mod translate;

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
