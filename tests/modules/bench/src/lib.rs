//! Test provider for measuring the host-call round trip: validate calls the
//! cheapest import, `log.enabled(trace)`, as often as the parameters say.

use pontoon_provider_sdk::{
    bridge_mount::{Error, Metadata, Mount},
    log::{self, Level},
};
use serde::Deserialize;
use test_provider::Steps;

struct Bench;

#[derive(Deserialize)]
struct Parameters {
    calls: u64,
}

impl Steps for Bench {
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
}

test_provider::export!(Bench);
