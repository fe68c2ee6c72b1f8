//! `leasehold demo`: one command, no cluster. Today it starts the Kubernetes simulator with the
//! fake kubelet and seeds a StatefulSet-style member set (pods, a headless and a LoadBalancer
//! Service) and target Leases, then prints a kubeconfig so `kubectl get leases -w` works beside
//! it. The control plane, agents and dashboard join it as they are built (see README).

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context as _;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::json;

use crate::sim::{self, SimOptions, Simulator};

/// Settings of the demo.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// Where the simulated API server listens.
    pub listen: SocketAddr,
    /// Member pods in the demo cluster.
    pub members: usize,
    /// Target leases.
    pub targets: usize,
    /// Where to write the simulator's kubeconfig.
    pub kubeconfig_out: PathBuf,
}

/// The demo's namespace.
pub const NAMESPACE: &str = "demo";
/// The demo cluster's name (pods are `<CLUSTER>-<ordinal>`).
pub const CLUSTER: &str = "collector";

/// Runs the demo until Ctrl-C.
pub async fn run(opts: DemoOptions) -> anyhow::Result<()> {
    let mut simulator = Simulator::start(opts.listen, SimOptions::default()).await?;
    let client = simulator.client().await?;
    simulator.spawn_kubelet(Default::default()).await?;
    seed(&client, opts.members, opts.targets)
        .await
        .context("seeding the demo cluster")?;
    std::fs::write(&opts.kubeconfig_out, simulator.kubeconfig())
        .with_context(|| format!("writing {}", opts.kubeconfig_out.display()))?;
    println!(
        "Leasehold demo (simulator stage): Kubernetes API at {}",
        simulator.url()
    );
    println!("  kubeconfig: {}", opts.kubeconfig_out.display());
    println!(
        "  try: KUBECONFIG={} kubectl -n {NAMESPACE} get pods,svc,leases",
        opts.kubeconfig_out.display()
    );
    println!("  The control plane and dashboard are not part of the demo yet; Ctrl-C stops it.");
    simulator
        .run_until(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
}

/// Creates the demo namespace, member pods, Services and target leases.
pub async fn seed(client: &Client, members: usize, targets: usize) -> anyhow::Result<()> {
    let pp = PostParams::default();
    let ns: Namespace = serde_json::from_value(json!({ "metadata": { "name": NAMESPACE } }))?;
    Api::<Namespace>::all(client.clone())
        .create(&pp, &ns)
        .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    for i in 0..members {
        let name = format!("{CLUSTER}-{i}");
        let pod: Pod = serde_json::from_value(json!({
            "metadata": { "name": name, "labels": { "app": CLUSTER, "statefulset.kubernetes.io/pod-name": name } },
            "spec": {
                "hostname": name, "subdomain": CLUSTER, "nodeName": sim::kubelet::NODE_NAME,
                "containers": [{ "name": "collector", "image": "example/collector:1.0", "ports": [{ "containerPort": 7890, "name": "api" }] }]
            }
        }))?;
        pods.create(&pp, &pod).await?;
    }
    let svcs: Api<Service> = Api::namespaced(client.clone(), NAMESPACE);
    for (name, spec) in [
        (
            CLUSTER.to_owned(),
            json!({ "clusterIP": "None", "selector": { "app": CLUSTER }, "ports": [{ "name": "api", "port": 7890 }] }),
        ),
        (
            format!("{CLUSTER}-api"),
            json!({ "type": "LoadBalancer", "selector": { "app": CLUSTER }, "ports": [{ "name": "api", "port": 80, "targetPort": 7890 }] }),
        ),
    ] {
        let svc: Service =
            serde_json::from_value(json!({ "metadata": { "name": name }, "spec": spec }))?;
        svcs.create(&pp, &svc).await?;
    }
    let leases: Api<Lease> = Api::namespaced(client.clone(), NAMESPACE);
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string();
    for t in 0..targets {
        let holder = format!("{CLUSTER}-{}", t % members.max(1));
        let lease: Lease = serde_json::from_value(json!({
            "metadata": { "name": format!("leasehold-{CLUSTER}-targets-device-{t:05}"), "labels": { "leasehold.io/cluster": CLUSTER, "leasehold.io/role": "target" } },
            "spec": { "holderIdentity": holder, "leaseDurationSeconds": 10, "acquireTime": now, "renewTime": now }
        }))?;
        leases.create(&pp, &lease).await?;
    }
    Ok(())
}
