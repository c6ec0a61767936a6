//! Gateway API for Praxis: GatewayClass, Gateway and HTTPRoute controllers,
//! and the Praxis configuration generated from them.

pub mod model;
