//! The `sample` provider, except that uninstall deletes nothing (lets the
//! host's tests see what a provider that leaks looks like).

use sample::{Flavor, Sample};

pub struct SkipsCleanup;

impl Flavor for SkipsCleanup {
    const NAME: &'static str = "skips-cleanup";
    const DESCRIPTION: &'static str =
        "Test provider: like sample, but uninstall leaves the ConfigMap";
    const CLEANS_UP: bool = false;
}

type Provider = Sample<SkipsCleanup>;

pontoon_provider_sdk::export_bridge_mount!(Provider);
