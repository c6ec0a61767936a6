//! What the test providers share: every step of the bridge-mount world
//! answered as done (valid, prepared, installed, no conditions, the target
//! there), so that a test provider writes only the steps it is about.
//!
//! ```ignore
//! struct Trap;
//! impl test_provider::Steps for Trap {
//!     fn metadata() -> Metadata { /* … */ }
//!     fn prepare(_: Mount) -> Result<Progress, Error> { panic!("on purpose") }
//! }
//! test_provider::export!(Trap);
//! ```

use pontoon_provider_sdk::bridge_mount::{Condition, Error, Metadata, Mount, Progress};

/// The steps of a test provider; all but `metadata` have a default that
/// does nothing and reports success.
pub trait Steps {
    fn metadata() -> Metadata;

    fn validate(_: Mount) -> Result<(), Error> {
        Ok(())
    }

    fn prepare(_: Mount) -> Result<Progress, Error> {
        Ok(Progress::Done)
    }

    fn prepared(_: Mount) -> Result<bool, Error> {
        Ok(true)
    }

    fn install(_: Mount) -> Result<Progress, Error> {
        Ok(Progress::Done)
    }

    fn ready(_: Mount) -> Result<Vec<Condition>, Error> {
        Ok(Vec::new())
    }

    fn uninstall(_: Mount) -> Result<Progress, Error> {
        Ok(Progress::Done)
    }

    fn target_exists(_: Mount) -> Result<bool, Error> {
        Ok(true)
    }
}

/// Exports a [`Steps`] type as the module's bridge-mount provider.
#[macro_export]
macro_rules! export {
    ($provider:ident) => {
        impl ::pontoon_provider_sdk::bridge_mount::Guest for $provider {
            fn metadata() -> ::pontoon_provider_sdk::bridge_mount::Metadata {
                <$provider as $crate::Steps>::metadata()
            }
            fn validate(
                mount: ::pontoon_provider_sdk::bridge_mount::Mount,
            ) -> Result<(), ::pontoon_provider_sdk::bridge_mount::Error> {
                <$provider as $crate::Steps>::validate(mount)
            }
            fn prepare(
                mount: ::pontoon_provider_sdk::bridge_mount::Mount,
            ) -> Result<
                ::pontoon_provider_sdk::bridge_mount::Progress,
                ::pontoon_provider_sdk::bridge_mount::Error,
            > {
                <$provider as $crate::Steps>::prepare(mount)
            }
            fn prepared(
                mount: ::pontoon_provider_sdk::bridge_mount::Mount,
            ) -> Result<bool, ::pontoon_provider_sdk::bridge_mount::Error> {
                <$provider as $crate::Steps>::prepared(mount)
            }
            fn install(
                mount: ::pontoon_provider_sdk::bridge_mount::Mount,
            ) -> Result<
                ::pontoon_provider_sdk::bridge_mount::Progress,
                ::pontoon_provider_sdk::bridge_mount::Error,
            > {
                <$provider as $crate::Steps>::install(mount)
            }
            fn ready(
                mount: ::pontoon_provider_sdk::bridge_mount::Mount,
            ) -> Result<
                Vec<::pontoon_provider_sdk::bridge_mount::Condition>,
                ::pontoon_provider_sdk::bridge_mount::Error,
            > {
                <$provider as $crate::Steps>::ready(mount)
            }
            fn uninstall(
                mount: ::pontoon_provider_sdk::bridge_mount::Mount,
            ) -> Result<
                ::pontoon_provider_sdk::bridge_mount::Progress,
                ::pontoon_provider_sdk::bridge_mount::Error,
            > {
                <$provider as $crate::Steps>::uninstall(mount)
            }
            fn target_exists(
                mount: ::pontoon_provider_sdk::bridge_mount::Mount,
            ) -> Result<bool, ::pontoon_provider_sdk::bridge_mount::Error> {
                <$provider as $crate::Steps>::target_exists(mount)
            }
        }
        ::pontoon_provider_sdk::export_bridge_mount!($provider);
    };
}
