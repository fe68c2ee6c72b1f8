//! Kubernetes-facing parts: the model and the pure index built from watch events, the watchers
//! that feed it, the watch probes that prove them current, and Lease writes. Never imports `http`.

pub mod client;
pub mod election;
pub mod index;
pub mod leases;
pub mod model;
pub mod pacing;
pub mod probe;
pub mod watch;
