//! The well-behaved test provider: see the `sample` crate for its steps.

use sample::{Flavor, Sample};

pub struct Plain;

impl Flavor for Plain {
    const NAME: &'static str = "sample";
    const DESCRIPTION: &'static str = "Test provider: owns one ConfigMap per mount";
    const CLEANS_UP: bool = true;
}

type Provider = Sample<Plain>;

pontoon_provider_sdk::export_bridge_mount!(Provider);
