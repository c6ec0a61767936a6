//! The `bridge-mount-provider` world: implement [`Guest`] and export it with
//! [`export_bridge_mount!`](crate::export_bridge_mount).

use serde::de::DeserializeOwned;

use crate::target::{Target, TargetError};

/// Bindings generated from `wit/` by wit-bindgen. Exposed for the export
/// macro and for anything the typed helpers do not cover.
pub mod bindings;

pub use bindings::exports::pontoon::provider::bridge_mount::{
    Condition, Guest, Mount, Progress, Settings,
};
pub use bindings::pontoon::provider::types::{
    Capability, Error, Metadata, NamespaceScope, TemporaryError, Verb,
};

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

// The error constructors, `?` on cluster calls and the capability helpers,
// as every world with cluster access has them.
crate::contract::contract_helpers!();

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
