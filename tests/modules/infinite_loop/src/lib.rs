//! Test provider whose prepare never returns: the host's deadline must stop it.

use pontoon_provider_sdk::bridge_mount::{Condition, Error, Guest, Metadata, Mount, Progress};

struct InfiniteLoop;

impl Guest for InfiniteLoop {
    fn metadata() -> Metadata {
        Metadata {
            name: "infinite-loop".into(),
            version: "0.1.0".into(),
            description: "Test provider: prepare spins forever".into(),
            scope: Vec::new(),
        }
    }

    fn validate(_: Mount) -> Result<(), Error> {
        Ok(())
    }

    fn prepare(_: Mount) -> Result<Progress, Error> {
        // black_box keeps the optimiser from proving the loop does nothing.
        let mut spins: u64 = 0;
        loop {
            spins = std::hint::black_box(spins.wrapping_add(1));
        }
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

pontoon_provider_sdk::export_bridge_mount!(InfiniteLoop);
