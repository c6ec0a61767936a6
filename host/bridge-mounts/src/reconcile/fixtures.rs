//! Provider answers and mounts for the unit tests of the step families.

use std::time::Duration;

use super::{outcome::Next, transition::Transition};
use pontoon_plugins::{
    CallError,
    bindings::{Mount, ProviderError, Settings, TemporaryError},
};

/// The reconcile interval of the tests: unlike every other delay.
pub const INTERVAL: Duration = Duration::from_secs(60);

/// A mount of container `app` of `deploy/web` in namespace `shop`.
pub fn request() -> Mount {
    Mount {
        name: "web-mount".into(),
        namespace: "gefyra".into(),
        uid: "u-1".into(),
        target: "deploy/web".into(),
        target_namespace: "shop".into(),
        target_container: "app".into(),
        parameters: None,
        settings: Settings {
            operator_namespace: "pontoon".into(),
            carrier_image: "carrier2".into(),
            restore_config_map: "restore".into(),
        },
    }
}

fn provider(error: ProviderError) -> CallError {
    CallError::Provider {
        module: "carrier2mount".into(),
        step: "install",
        error,
    }
}

pub fn invalid(message: &str) -> CallError {
    provider(ProviderError::InvalidInput(message.into()))
}

pub fn target_missing(message: &str) -> CallError {
    provider(ProviderError::TargetMissing(message.into()))
}

pub fn temporary(message: &str, retry_after_seconds: u32) -> CallError {
    provider(ProviderError::Temporary(TemporaryError {
        message: message.into(),
        retry_after_seconds,
    }))
}

pub fn failed(message: &str) -> CallError {
    provider(ProviderError::Failed(message.into()))
}

/// A failure of the module rather than an error it returned.
pub fn trapped() -> CallError {
    CallError::Trap {
        module: "carrier2mount".into(),
        step: "install",
        message: "unreachable executed".into(),
    }
}

/// One error of each kind a provider call can end with.
pub fn provider_errors() -> Vec<CallError> {
    vec![
        invalid("bad target"),
        target_missing("gone"),
        temporary("pods restarting", 4),
        failed("boom"),
        trapped(),
    ]
}

/// The same error again (`CallError` is not `Clone`).
pub fn copy(err: &CallError) -> CallError {
    match err {
        CallError::Provider { error, .. } => provider(error.clone()),
        _ => trapped(),
    }
}

/// The transition `next` fires; a test failure when it fires none.
pub fn fired(next: &Next) -> &Transition {
    match next {
        Next::Fire(transition) => transition,
        other => panic!("expected a transition, got {other:?}"),
    }
}
