//! Test provider for measuring the host-call round trip: validate calls the
//! cheapest import, `log.enabled(trace)`, as often as the parameters say.

use pontoon_provider_sdk::{
    bridge_mount::{Condition, Error, Guest, Metadata, Mount, Progress},
    log::{self, Level},
};
use serde::Deserialize;

struct Bench;

#[derive(Deserialize)]
struct Parameters {
    calls: u64,
}

impl Guest for Bench {
    fn metadata() -> Metadata {
        Metadata {
            name: "bench".into(),
            version: "0.1.0".into(),
            description: "Test provider: validate makes {\"calls\": N} host calls".into(),
            scope: Vec::new(),
        }
    }

    /// Without parameters it makes no call, so a plain validate stays cheap.
    fn validate(mount: Mount) -> Result<(), Error> {
        let calls = mount
            .parse_parameters::<Parameters>()?
            .map_or(0, |p| p.calls);
        for _ in 0..calls {
            // black_box: the result must look used, or the call could be dropped.
            std::hint::black_box(log::enabled(Level::Trace));
        }
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

pontoon_provider_sdk::export_bridge_mount!(Bench);
