//! `pontoon_tcp_weights`: a TCPRoute rule's weighted backends
//! (TCPRouteWeightedRouting). Praxis's own TCP balancing
//! (`tcp_load_balancer` over a listener's `cluster`) only runs on a listener
//! without a static upstream, which reads the client's first bytes before
//! it dials and so stalls protocols in which the server speaks first. On a
//! listener with a static upstream Praxis dials at once, after its connect
//! filters, which may change the address: this filter draws a backend by
//! weight there. A backend that did not resolve keeps its share, on an
//! address where nothing listens (its connections are refused, as the spec
//! asks).
//!
//! ```yaml
//! filter: pontoon_tcp_weights
//! backends:
//!   - {address: "10.96.0.20:5432", weight: 90}
//!   - {address: "10.96.0.21:5432", weight: 10}
//! ```

use std::{borrow::Cow, net::SocketAddr};

use async_trait::async_trait;
use praxis_filter::{FilterAction, FilterError, TcpFilter, TcpFilterContext, parse_filter_config};
use serde::Deserialize;

pub const NAME: &str = "pontoon_tcp_weights";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    backends: Vec<Weighted>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Weighted {
    address: SocketAddr,
    weight: u32,
}

pub struct TcpWeights {
    /// Each backend's address with the running total of the weights up to
    /// and including it.
    cumulative: Vec<(String, u64)>,
    total: u64,
}

impl TcpWeights {
    pub fn from_config(config: &serde_yaml::Value) -> Result<Box<dyn TcpFilter>, FilterError> {
        let config: Config = parse_filter_config(NAME, config)?;
        let mut total = 0_u64;
        let mut cumulative = Vec::with_capacity(config.backends.len());
        for backend in config.backends.into_iter().filter(|b| b.weight > 0) {
            total += u64::from(backend.weight);
            cumulative.push((backend.address.to_string(), total));
        }
        if total == 0 {
            return Err(format!("{NAME}: no backend has a weight above 0").into());
        }
        Ok(Box::new(Self { cumulative, total }))
    }

    /// The backend whose share `draw` (below the total) falls in.
    fn pick(&self, draw: u64) -> &str {
        let i = self.cumulative.partition_point(|(_, upto)| *upto <= draw);
        self.cumulative
            .get(i)
            .or(self.cumulative.last())
            .map_or("", |(address, _)| address.as_str())
    }
}

#[async_trait]
impl TcpFilter for TcpWeights {
    fn name(&self) -> &'static str {
        NAME
    }

    async fn on_connect(
        &self,
        ctx: &mut TcpFilterContext<'_>,
    ) -> Result<FilterAction, FilterError> {
        let address = self.pick(fastrand::u64(0..self.total));
        ctx.upstream_addr = Some(Cow::Owned(address.to_owned()));
        Ok(FilterAction::Continue)
    }
}

#[cfg(test)]
mod tests;
