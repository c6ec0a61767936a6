//! Test provider whose prepare never returns: the host's deadline must stop it.

use pontoon_provider_sdk::bridge_mount::{Error, Metadata, Mount, Progress};
use test_provider::Steps;

struct InfiniteLoop;

impl Steps for InfiniteLoop {
    fn metadata() -> Metadata {
        Metadata {
            name: "infinite-loop".into(),
            version: "0.1.0".into(),
            description: "Test provider: prepare spins forever".into(),
            scope: Vec::new(),
        }
    }

    fn prepare(_: Mount) -> Result<Progress, Error> {
        // black_box keeps the optimiser from proving the loop does nothing.
        let mut spins: u64 = 0;
        loop {
            spins = std::hint::black_box(spins.wrapping_add(1));
        }
    }
}

test_provider::export!(InfiniteLoop);
