//! The flags of `pontoon run` for bridges that name a connection provider
//! (`pontoon bridge`'s relays): the relay's image, how long a developer may
//! be away, and how long their relay is kept.

use std::time::Duration;

use clap::Args;
use pontoon::bridge::sessions::{self, ConnectionSettings};

#[derive(Args, Debug)]
pub struct ConnectionArgs {
    /// Pontoon's own image, which the bundled `tunnel` connection provider
    /// runs as each developer's relay (`pontoon relay`).
    #[arg(long, value_name = "IMAGE", default_value_t = sessions::default_relay_image(), env = "PONTOON_RELAY_IMAGE")]
    pub relay_image: String,
    /// How long a developer's session may be gone (`pontoon bridge` killed,
    /// laptop asleep, network lost) before their bridges leave Carrier2's
    /// config and their requests go to the shadow; they come back when the
    /// developer reconnects.
    #[arg(long, value_name = "SECONDS", default_value_t = sessions::DEFAULT_SESSION_GRACE.as_secs(), value_parser = clap::value_parser!(u64).range(1..=3600), env = "PONTOON_SESSION_GRACE")]
    pub session_grace: u64,
    /// How long a developer's session may be gone before their bridges are
    /// deleted.
    #[arg(long, value_name = "SECONDS", default_value_t = sessions::DEFAULT_SESSION_LIMIT.as_secs(), value_parser = clap::value_parser!(u64).range(10..=604800), env = "PONTOON_SESSION_LIMIT")]
    pub session_limit: u64,
    /// How long what a connection provider set up for a developer (the
    /// tunnel's relay pod and Service) stays after their last bridge is
    /// gone, so that their next `pontoon bridge` finds it ready; 0 removes
    /// it at once. At most 32 idle developers per provider are kept.
    #[arg(long, value_name = "SECONDS", default_value_t = sessions::DEFAULT_CLIENT_KEEP.as_secs(), value_parser = clap::value_parser!(u64).range(0..=86400), env = "PONTOON_CLIENT_KEEP")]
    pub client_keep: u64,
}

impl ConnectionArgs {
    pub fn settings(self) -> ConnectionSettings {
        ConnectionSettings {
            relay_image: self.relay_image,
            grace: Duration::from_secs(self.session_grace),
            limit: Duration::from_secs(self.session_limit),
            keep: Duration::from_secs(self.client_keep),
        }
    }
}
