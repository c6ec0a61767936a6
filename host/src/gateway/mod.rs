//! Gateway API for Praxis: GatewayClass, Gateway and HTTPRoute controllers,
//! and the Praxis configuration generated from them.

pub mod children;
pub mod config;
pub mod model;
pub mod resolve;
pub mod routes;
pub mod translate;
