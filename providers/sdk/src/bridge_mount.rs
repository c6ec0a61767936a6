//! The `bridge-mount-provider` world: implement [`Guest`] and export it with
//! [`export_bridge_mount!`](crate::export_bridge_mount).

use k8s_openapi::Resource;
use serde::de::DeserializeOwned;

use crate::target::{Target, TargetError};

/// Bindings generated from `wit/` by wit-bindgen. Exposed for the export
/// macro and for anything the typed helpers do not cover.
pub mod bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "bridge-mount-provider",
        // `bindings::export!` is expanded in provider crates, through the
        // crate-level `export_bridge_mount!` wrapper.
        pub_export_macro: true,
        // Providers compare what they render with what a pod holds.
        additional_derives: [PartialEq, Eq, Hash],
    });
}

pub use bindings::exports::pontoon::provider::bridge_mount::{
    Condition, Guest, Mount, Progress, Settings,
};
pub use bindings::pontoon::provider::types::{
    Capability, Error, Metadata, NamespaceScope, TemporaryError, Verb,
};

use crate::cluster::ClusterError;

/// The mount's GefyraBridges (the `bridges` import): what `install` renders.
pub mod bridges {
    pub use super::bindings::pontoon::provider::bridges::{
        Bridge, HeaderMatch, MatchType, PathMatch, PortRoute, RequestMatch, Rule, list,
    };
}

/// The mount's notes (the `notes` import): hints from an earlier call, kept
/// by the host in memory and gone at any time; never the only record of
/// anything.
pub mod notes {
    pub use super::bindings::pontoon::provider::notes::{Note, forget, read, write};

    /// The note under `key` if it was written less than `max_age` ago.
    pub fn read_fresh(key: &str, max_age: std::time::Duration) -> Option<Note> {
        read(key).filter(|note| u128::from(note.age_ms) < max_age.as_millis())
    }
}

/// Seconds after which the host retries a step that lost a write race.
pub const CONFLICT_RETRY_SECONDS: u32 = 2;
/// Seconds after which the host retries after an object was missing or the
/// API server failed.
pub const TRANSIENT_RETRY_SECONDS: u32 = 5;

impl Error {
    /// The mount asks for something that can never work.
    pub fn invalid_input(message: impl Into<String>) -> Self {
        Self::InvalidInput(message.into())
    }

    /// Not possible yet; the host retries after `retry_after_seconds`.
    pub fn temporary(message: impl Into<String>, retry_after_seconds: u32) -> Self {
        Self::Temporary(TemporaryError {
            message: message.into(),
            retry_after_seconds,
        })
    }

    /// The target workload does not exist.
    pub fn target_missing(message: impl Into<String>) -> Self {
        Self::TargetMissing(message.into())
    }

    /// Anything else.
    pub fn failed(message: impl Into<String>) -> Self {
        Self::Failed(message.into())
    }
}

/// Lets a step use `?` on cluster calls. Races and transient API trouble
/// become `temporary` (the host retries); a denied call is a bug in the
/// provider's scope and a rejected object a bug in what it sent, so both are
/// `failed`. `not-found` is `temporary` because the contract treats "an object
/// not there yet" as such; map a missing *target* to `target-missing` yourself.
impl From<ClusterError> for Error {
    fn from(err: ClusterError) -> Self {
        match err {
            ClusterError::Denied(m) => Self::failed(format!("denied: {m}")),
            ClusterError::NotFound(m) => {
                Self::temporary(format!("not found: {m}"), TRANSIENT_RETRY_SECONDS)
            }
            ClusterError::Conflict(m) => {
                Self::temporary(format!("conflict: {m}"), CONFLICT_RETRY_SECONDS)
            }
            ClusterError::Invalid(m) => Self::failed(format!("rejected by the API server: {m}")),
            ClusterError::Api(m) => {
                Self::temporary(format!("API server: {m}"), TRANSIENT_RETRY_SECONDS)
            }
        }
    }
}

impl From<TargetError> for Error {
    fn from(err: TargetError) -> Self {
        Self::InvalidInput(err.to_string())
    }
}

impl Mount {
    /// The parsed target; a malformed one is `invalid-input`.
    pub fn parsed_target(&self) -> Result<Target, Error> {
        Ok(Target::parse(&self.target)?)
    }

    /// What every `validate` checks: a well-formed target and a container.
    pub fn check_target(&self) -> Result<Target, Error> {
        let target = self.parsed_target()?;
        if self.target_container.trim().is_empty() {
            return Err(Error::invalid_input(format!(
                "mount {}: the target container is empty",
                self.name
            )));
        }
        Ok(target)
    }

    /// The name of an object this mount owns: `<uid>-<suffix>`, what a
    /// scope's `{mount}-<suffix>` allows. The mount's uid, not its name:
    /// mounts named alike (in two namespaces, or `web` beside `web-db`)
    /// never share an object.
    pub fn own_name(&self, suffix: &str) -> String {
        format!("{}-{suffix}", self.uid)
    }

    /// The provider parameters decoded from JSON; `None` when the mount has
    /// none, `invalid-input` when they do not decode as `T`.
    pub fn parse_parameters<T: DeserializeOwned>(&self) -> Result<Option<T>, Error> {
        let Some(json) = &self.parameters else {
            return Ok(None);
        };
        serde_json::from_str(json)
            .map(Some)
            .map_err(|e| Error::invalid_input(format!("mount {}: parameters: {e}", self.name)))
    }
}

impl Capability {
    /// A rule for kinds of one API group (`""` for the core group).
    pub fn new(api_group: &str, kinds: &[&str], verbs: &[Verb], namespace: NamespaceScope) -> Self {
        Self {
            api_group: api_group.to_string(),
            kinds: kinds.iter().map(|k| k.to_string()).collect(),
            verbs: verbs.to_vec(),
            namespace,
            names: Vec::new(),
        }
    }

    /// A rule for one k8s-openapi kind, e.g. `Capability::of::<ConfigMap>(..)`.
    pub fn of<K: Resource>(verbs: &[Verb], namespace: NamespaceScope) -> Self {
        Self::new(K::GROUP, &[K::KIND], verbs, namespace)
    }

    /// Restricts the rule to these object names: exact names, or a prefix
    /// and a final `*`; `{mount}` stands for the mount's uid (see
    /// [`Mount::own_name`]) and `{target}` for the target workload's name
    /// (exact names only). A placeholder followed directly by `*` is refused
    /// when the module is loaded.
    pub fn named(mut self, names: &[&str]) -> Self {
        self.names = names.iter().map(|n| n.to_string()).collect();
        self
    }
}

impl Condition {
    pub fn new(name: impl Into<String>, ready: bool, reason: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            ready,
            reason: reason.into(),
        }
    }
}

/// Exports a type implementing [`Guest`] as the component's `bridge-mount`.
///
/// ```ignore
/// struct MyProvider;
/// impl pontoon_provider_sdk::bridge_mount::Guest for MyProvider { /* ... */ }
/// pontoon_provider_sdk::export_bridge_mount!(MyProvider);
/// ```
///
/// The type must be named by a plain identifier (use a `type` alias for a
/// generic one). Invoke it once, in the `cdylib` crate that becomes the `.wasm`.
#[macro_export]
macro_rules! export_bridge_mount {
    ($ty:ident) => {
        $crate::bridge_mount::bindings::export!($ty with_types_in $crate::bridge_mount::bindings);
    };
    // The long form wit-bindgen itself documents, for those who know it.
    ($ty:ident with_types_in $($path:tt)*) => {
        $crate::bridge_mount::bindings::export!($ty with_types_in $($path)*);
    };
}
