//! `pontoon relay`: the cluster end of a developer's bridges, run by the
//! `tunnel` connection provider as one pod per developer.

use std::{net::SocketAddr, time::Duration};

use clap::Args;
use pontoon_tunnel::RelayConfig;

#[derive(Args, Debug)]
pub struct RelayArgs {
    /// The developer this relay serves: a session announcing another
    /// client is refused.
    #[arg(long, value_name = "NAME")]
    client: Option<String>,
    /// Where `pontoon bridge` connects, through a port-forward (loopback:
    /// nothing else in the cluster reaches it).
    #[arg(long, default_value_t = RelayConfig::default().session_addr)]
    session_address: SocketAddr,
    /// `/ready` (a session is live) and `/healthz`.
    #[arg(long, default_value_t = RelayConfig::default().health_addr)]
    health_address: SocketAddr,
    /// The relay's own Service (a DNS name), which `/reachable` dials on the
    /// health port to tell whether cluster clients reach this relay yet.
    #[arg(long, value_name = "HOST")]
    service: Option<String>,
    /// A session not heard from for this long has ended.
    #[arg(long, value_name = "SECONDS", default_value_t = 5)]
    idle_timeout: u64,
}

/// Serves until SIGTERM or Ctrl-C.
pub async fn run(args: RelayArgs) -> anyhow::Result<()> {
    let config = RelayConfig {
        session_addr: args.session_address,
        health_addr: args.health_address,
        idle_timeout: Duration::from_secs(args.idle_timeout.max(1)),
        client: args.client,
        service: args
            .service
            .map(|host| format!("{host}:{}", args.health_address.port())),
        ..RelayConfig::default()
    };
    tracing::info!(session = %config.session_addr, health = %config.health_addr, client = ?config.client, "relay serving");
    pontoon_tunnel::relay::run(config, crate::operator::shutdown_signal()).await?;
    Ok(())
}
