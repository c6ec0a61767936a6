//! Write Pontoon providers: WebAssembly components that implement a world of
//! the `pontoon:provider@0.1.0` contract (`wit/` in the repository).
//!
//! # A bridge-mount provider
//!
//! A provider is a `cdylib` built for `wasm32-wasip2`; rustc turns it into a
//! component directly.
//!
//! ```toml
//! [lib]
//! crate-type = ["cdylib"]
//!
//! [dependencies]
//! pontoon-provider-sdk = { path = "…/providers/sdk", features = ["bridge-mount"] }
//! serde_json = "1"
//! ```
//!
//! Enable exactly one world feature, the one the crate exports: each feature
//! adds its world's imports to the component.
//!
//! ```ignore
//! use pontoon_provider_sdk::bridge_mount::{
//!     Capability, Condition, Error, Guest, Metadata, Mount, NamespaceScope, Progress, Verb,
//! };
//! use pontoon_provider_sdk::{cluster, info, k8s_openapi::api::core::v1::ConfigMap};
//!
//! struct MyProvider;
//!
//! impl Guest for MyProvider {
//!     fn metadata() -> Metadata {
//!         Metadata {
//!             name: "my-provider".into(),
//!             version: env!("CARGO_PKG_VERSION").into(),
//!             description: "What it does".into(),
//!             scope: vec![Capability::of::<ConfigMap>(
//!                 &[Verb::Get, Verb::Apply, Verb::Delete],
//!                 NamespaceScope::Target,
//!             )],
//!         }
//!     }
//!
//!     fn validate(mount: Mount) -> Result<(), Error> {
//!         mount.check_target().map(drop)
//!     }
//!
//!     fn prepare(mount: Mount) -> Result<Progress, Error> {
//!         let name = format!("{}-my", mount.name);
//!         let existing: Option<ConfigMap> = cluster::get(&mount.target_namespace, &name)?;
//!         info!("preparing {name}; present before: {}", existing.is_some());
//!         // ... cluster::apply(&mount.target_namespace, &config_map)?;
//!         Ok(Progress::Done)
//!     }
//!     // prepared, install, ready, uninstall, target_exists ...
//! #   fn prepared(_: Mount) -> Result<bool, Error> { Ok(true) }
//! #   fn install(_: Mount) -> Result<Progress, Error> { Ok(Progress::Done) }
//! #   fn ready(_: Mount) -> Result<Vec<Condition>, Error> { Ok(vec![]) }
//! #   fn uninstall(_: Mount) -> Result<Progress, Error> { Ok(Progress::Done) }
//! #   fn target_exists(_: Mount) -> Result<bool, Error> { Ok(true) }
//! }
//!
//! pontoon_provider_sdk::export_bridge_mount!(MyProvider);
//! ```
//!
//! Build it with `cargo build --profile wasm-release --target wasm32-wasip2`
//! (`make new-provider` writes that profile into the crate; elsewhere add
//! `[profile.wasm-release]` with `inherits = "release"` and
//! `opt-level = "s"`: a smaller component, compiled faster by the
//! operator); the component is
//! `target/wasm32-wasip2/wasm-release/<crate name>.wasm`.
//!
//! Rules the host enforces, worth designing for:
//!
//! - Each step runs in a fresh instance under a deadline and a memory limit:
//!   keep no state in statics, keep what must survive on the cluster.
//! - Steps are idempotent and never wait: return `Progress::RetryAfter`,
//!   `Progress::WhenPodsChange` or a temporary error instead of looping.
//! - Every cluster call is checked against the scope in `metadata`; ask for
//!   the kinds, verbs and namespaces you use and nothing more.
//! - `?` on a `cluster::ClusterError` gives the contract's error with a
//!   sensible retry (see `From<ClusterError> for Error`).
//! - Log with `info!` and its siblings (`trace!` … `error!`); the host
//!   tags each line with the module and the mount.
//!
//! # A config filter
//!
//! Same shape with feature `config-filter`: implement
//! `config_filter::Guest` (`metadata`, `translate`) and call
//! `pontoon_provider_sdk::export_config_filter!(MyFilter)`. Filters are pure:
//! no cluster access, and the host calls `translate` for many filters in one
//! instance (under one deadline), so keep nothing between calls.
//!
//! # Parsing targets
//!
//! [`Target::parse`] understands every form the contract allows and explains
//! what is wrong with the others; it needs no feature.

// Bindings and the helpers over them exist with their world's feature; tests
// build both so that native `cargo test`/`clippy` check the generated code.
#[cfg(any(feature = "bridge-mount", test))]
pub mod bridge_mount;
#[cfg(any(feature = "bridge-mount", feature = "connection", test))]
pub mod cluster;
#[cfg(any(feature = "config-filter", test))]
pub mod config_filter;
#[cfg(any(feature = "connection", test))]
pub mod connection;
#[cfg(any(feature = "bridge-mount", feature = "connection", test))]
mod contract;
pub mod image;
#[cfg(any(
    feature = "bridge-mount",
    feature = "config-filter",
    feature = "connection",
    test
))]
pub mod log;
pub mod target;

/// The k8s-openapi this crate is built against (Kubernetes 1.36 API); use it
/// rather than a direct dependency so the types always match.
pub use k8s_openapi;
pub use serde_json;
pub use target::{Target, TargetError, TargetKind};
