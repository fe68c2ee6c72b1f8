//! What the product's integration tests share: the test kit of the simulator crate (a
//! simulator or a real kube-apiserver to test against, kubectl, raw requests, object builders),
//! the HTTP app under test ([`app`]), ServiceAccount kubeconfigs ([`accounts`]), the engine harness ([`cluster`]), the work-level
//! invariant checker ([`invariant`]) and an API server made slow by another tenant
//! ([`slow_policy`], which `benches/protocol_load.rs` shares).

pub mod accounts;
pub mod app;
pub mod cluster;
pub mod invariant;
pub mod pod_agents;
pub mod slow_policy;

pub use kube_sim::testkit::*;
