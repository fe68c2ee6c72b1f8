//! What the product's integration tests share: the test kit of the simulator crate (a
//! simulator or a real kube-apiserver to test against, kubectl, raw requests, object builders),
//! the HTTP app under test ([`app`]), ServiceAccount kubeconfigs ([`accounts`]), the engine harness ([`cluster`]) and the work-level
//! invariant checker ([`invariant`]).

pub mod accounts;
pub mod app;
pub mod cluster;
pub mod invariant;
pub mod pod_agents;

pub use kube_sim::testkit::*;
