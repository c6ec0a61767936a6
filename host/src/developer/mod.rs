//! What a developer runs on their own machine: `pontoon bridge` brings the
//! requests of a workload that carry their header to a port of their
//! machine, through nothing but the Kubernetes API server (a port-forward
//! to their relay, see `pontoon-tunnel`), with their own kubeconfig and
//! rights; `pontoon relay` is the cluster end, run by the `tunnel`
//! connection provider's pod.

pub mod args;
pub mod bridge;
mod forward;
mod interrupts;
mod objects;
mod plan;
mod progress;
mod reachable;
pub mod relay;
mod waits;
mod workload;
