//! Test provider whose prepare panics, which traps the instance: the host must
//! report it and stay up.

use pontoon_provider_sdk::bridge_mount::{Error, Metadata, Mount, Progress};
use test_provider::Steps;

struct Trap;

impl Steps for Trap {
    fn metadata() -> Metadata {
        Metadata {
            name: "trap".into(),
            version: "0.1.0".into(),
            description: "Test provider: prepare panics".into(),
            scope: Vec::new(),
        }
    }

    fn prepare(_: Mount) -> Result<Progress, Error> {
        panic!("trap module panics on purpose");
    }
}

test_provider::export!(Trap);
