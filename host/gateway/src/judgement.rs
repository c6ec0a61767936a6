//! Judgement over the cluster view: pure functions from the Gateway API
//! objects to what is accepted, attached and programmed, what status says,
//! and the filters translated through the config filter modules.

pub mod addresses;
pub mod one_gateway;
pub mod resolve;
pub mod route_kinds;
pub mod routes;
pub mod status;
pub mod tcp_route;
pub mod translate;
