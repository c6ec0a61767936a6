//! The edge: the controllers' watches and shared context, the reconcilers of
//! GatewayClass, Gateway and routes, the BackendTLSPolicy handling, and every
//! read and write against the API server. Judgement and the data plane's
//! output are below it and never call back up.

pub mod backend_tls_policies;
pub mod class_reconcile;
pub mod context;
pub mod controller;
pub(crate) mod data_plane_writes;
pub mod fetch;
pub mod gateway_reconcile;
pub mod route_reconcile;
pub(crate) mod shared_watch;
pub(crate) mod watches;
