//! What the product's integration tests share: the test kit of the simulator crate (a
//! simulator or a real kube-apiserver to test against, kubectl, raw requests, object builders),
//! the HTTP app under test ([`app`]), ServiceAccount kubeconfigs ([`accounts`]), the engine harness ([`cluster`]), the work-level
//! invariant checker ([`invariant`]), real Prometheus servers and scrape targets ([`scrape`]) and an API server made slow by another tenant
//! ([`slow_policy`], which `benches/protocol_load.rs` shares).

pub mod accounts;
pub mod app;
pub mod cluster;
pub mod gnmic;
pub mod invariant;
pub mod pod_agents;
pub mod scrape;
pub mod slow_policy;

pub use kube_sim::testkit::*;

/// The product's client (`leasehold::k8s::client`) as the account of the kubeconfig at
/// `kubeconfig`, through a link a test can cut or hang ([`linked_config_as`]), and the link.
pub async fn linked_product_client_as(
    t: &TestSim,
    kubeconfig: &std::path::Path,
) -> (kube::Client, tokio::sync::watch::Sender<Link>) {
    let (config, link) = linked_config_as(t, kubeconfig).await;
    let client = leasehold::k8s::client::from_config(config).expect("client");
    (client, link)
}
