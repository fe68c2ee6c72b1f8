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

/// A loopback address free a moment ago, for a server a test starts (Prometheus, gnmic, an
/// agent's endpoints). Picked below Linux's ephemeral range (32768–60999), from which the
/// kernel takes both `:0` binds and the local ports of outgoing connections: a port found
/// free there could be taken by one of the tests' many client connections before the server
/// binds it ("address already in use").
pub fn free_addr() -> std::net::SocketAddr {
    use rand::Rng as _;
    let mut rng = rand::rng();
    loop {
        let port = rng.random_range(10_000..32_768);
        if let Ok(l) = std::net::TcpListener::bind(("127.0.0.1", port)) {
            return l.local_addr().unwrap();
        }
    }
}
