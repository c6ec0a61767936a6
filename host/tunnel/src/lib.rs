//! The network part of `pontoon bridge`: cluster traffic, carried to a developer's laptop.
//!
//! ```text
//!  cluster client ──TCP──▶ relay pod :10000-10999 ─┐
//!                                                  │ one yamux session over the API server's
//!                                                  │ port-forward to the relay's port 7000
//!  laptop target ◀──TCP── `pontoon bridge` ◀───────┘
//! ```
//!
//! The laptop reaches the relay only through a Kubernetes port-forward: one byte stream, which
//! the laptop opens and which the relay cannot open back. Everything therefore runs inside that
//! one stream, multiplexed by yamux: a control stream the laptop opens (which ports, keep-alive),
//! and one data stream per TCP connection the relay accepts, opened by the relay.
//!
//! - [`relay`]: the cluster end, run by the relay pod (`pontoon relay`).
//! - [`session`]: the laptop end, run by `pontoon bridge` over the port-forward's stream.
//! - [`protocol`]: what the two say to each other.

pub mod protocol;
pub mod relay;
pub mod session;

mod mux;

pub use protocol::{Listening, PROTOCOL_VERSION, PortFailure};
pub use relay::{Relay, RelayConfig};
pub use session::{Session, SessionError, SessionEvent};
