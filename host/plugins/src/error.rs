//! Errors of the plugin runtime, worded for the person who wrote or
//! installed the module.

use std::{path::PathBuf, time::Duration};

use super::bindings::{FilterError, ProviderError};

/// A module that could not be loaded; always names the file.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read module directory {}: {source}", dir.display())]
    Directory {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{} is not a WebAssembly component: {reason}", path.display())]
    NotAComponent { path: PathBuf, reason: String },
    #[error(
        "{} implements no Pontoon world: it must export `{}` (a bridge-mount provider) or `{}` (a config filter); it exports [{}]",
        path.display(), super::bindings::BRIDGE_MOUNT_EXPORT, super::bindings::CONFIG_FILTER_EXPORT, exports.join(", ")
    )]
    UnknownWorld { path: PathBuf, exports: Vec<String> },
    #[error("{} cannot be linked (it may import something Pontoon does not provide): {reason}", path.display())]
    Link { path: PathBuf, reason: String },
    #[error("{} failed while reporting its metadata: {reason}", path.display())]
    Metadata { path: PathBuf, reason: String },
    #[error(
        "{} (provider `{module}`) declares capabilities its grant does not allow: {}; add them to its grant in the grants file (--grants, Helm value `grants`) if the module may have them",
        path.display(), excess.join("; ")
    )]
    NotGranted {
        path: PathBuf,
        module: String,
        excess: Vec<String>,
    },
    #[error("{} names itself `{name}`, which {} already uses", path.display(), other.display())]
    DuplicateName {
        path: PathBuf,
        name: String,
        other: PathBuf,
    },
}

/// A call into a module that did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The module ran and returned an error of the contract.
    #[error("provider `{module}` {step}: {}", describe_provider_error(error))]
    Provider {
        module: String,
        step: &'static str,
        error: ProviderError,
    },
    #[error("config filter `{module}`: {}", describe_filter_error(error))]
    Filter { module: String, error: FilterError },
    #[error(
        "module `{module}` did not finish `{step}` within its deadline of {deadline:?} and was stopped"
    )]
    Deadline {
        module: String,
        step: &'static str,
        deadline: Duration,
    },
    #[error(
        "module `{module}` exceeded its memory limit of {limit_mib} MiB in `{step}` and was stopped"
    )]
    OutOfMemory {
        module: String,
        step: &'static str,
        limit_mib: usize,
    },
    #[error("module `{module}` trapped in `{step}`: {message}")]
    Trap {
        module: String,
        step: &'static str,
        message: String,
    },
}

impl CallError {
    /// The contract error a provider returned, if that is what happened.
    pub fn provider_error(&self) -> Option<&ProviderError> {
        match self {
            Self::Provider { error, .. } => Some(error),
            _ => None,
        }
    }
}

pub fn describe_provider_error(error: &ProviderError) -> String {
    match error {
        ProviderError::InvalidInput(m) => format!("invalid input: {m}"),
        ProviderError::Temporary(t) => {
            format!("{} (retry in {} s)", t.message, t.retry_after_seconds)
        }
        ProviderError::TargetMissing(m) => format!("target missing: {m}"),
        ProviderError::Failed(m) => format!("failed: {m}"),
    }
}

fn describe_filter_error(error: &FilterError) -> String {
    match error {
        FilterError::InvalidInput(m) => format!("invalid filter: {m}"),
        FilterError::Unsupported(m) => format!("unsupported: {m}"),
        FilterError::Failed(m) => format!("failed: {m}"),
    }
}
