//! Test provider whose prepare allocates without end: the host's memory limit
//! must stop it.

use pontoon_provider_sdk::bridge_mount::{Error, Metadata, Mount, Progress};
use test_provider::Steps;

struct MemoryHog;

const CHUNK: usize = 1 << 20;
// Host page size: writing each one makes the host commit the memory too.
const PAGE: usize = 4 << 10;

impl Steps for MemoryHog {
    fn metadata() -> Metadata {
        Metadata {
            name: "memory-hog".into(),
            version: "0.1.0".into(),
            description: "Test provider: prepare allocates 1 MiB chunks forever".into(),
            scope: Vec::new(),
        }
    }

    fn prepare(_: Mount) -> Result<Progress, Error> {
        // Every chunk stays reachable and every page of it is written, so
        // neither the optimiser nor the allocator can make the growth vanish.
        let mut chunks: Vec<Vec<u8>> = Vec::new();
        loop {
            let mut chunk = vec![0u8; CHUNK];
            for byte in chunk.iter_mut().step_by(PAGE) {
                *byte = 1;
            }
            chunks.push(std::hint::black_box(chunk));
        }
    }
}

test_provider::export!(MemoryHog);
