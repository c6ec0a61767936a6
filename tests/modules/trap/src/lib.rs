//! Test provider whose prepare panics, which traps the instance: the host must
//! report it and stay up.

use pontoon_provider_sdk::bridge_mount::{Condition, Error, Guest, Metadata, Mount, Progress};

struct Trap;

impl Guest for Trap {
    fn metadata() -> Metadata {
        Metadata {
            name: "trap".into(),
            version: "0.1.0".into(),
            description: "Test provider: prepare panics".into(),
            scope: Vec::new(),
        }
    }

    fn validate(_: Mount) -> Result<(), Error> {
        Ok(())
    }

    fn prepare(_: Mount) -> Result<Progress, Error> {
        panic!("trap module panics on purpose");
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

pontoon_provider_sdk::export_bridge_mount!(Trap);
