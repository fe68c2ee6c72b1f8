//! `leasehold demo`: one command, no cluster. It starts the Kubernetes simulator with the fake
//! kubelet, seeds a StatefulSet-style member set (pods, a headless and a LoadBalancer Service),
//! runs one `leasehold agent` per member and the control plane (history in
//! `leasehold-demo.db`), and prints a kubeconfig so `kubectl get leases -w` shows targets being
//! placed and renewed. The dashboard joins it with the HTTP layer (see README).

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context as _;
use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::json;

use std::sync::Arc;

use tokio::task::JoinSet;

use crate::agent::{Agent, AgentConfig, NoHooks};
use crate::config::Config;
use crate::engine::Engine;
use crate::sim::{self, SimOptions, Simulator};
use crate::store::Store;

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

/// Where the demo keeps its history (recreated on every start).
pub const DATABASE: &str = "leasehold-demo.db";

/// The demo's configuration: one native cluster over the seeded members, its targets placed
/// and rebalanced automatically when a member joins.
pub fn config(targets: usize) -> anyhow::Result<Config> {
    let list: Vec<String> = (0..targets).map(|t| format!("device-{t:05}")).collect();
    let yaml = format!(
        "database: sqlite:{DATABASE}
control_plane: {{namespace: {NAMESPACE}}}
clusters:
- name: {CLUSTER}
  namespace: {NAMESPACE}
  selector: {{app: {CLUSTER}}}
  headless_service: {CLUSTER}
  load_balancer_service: {CLUSTER}-api
  targets: {{inline: [{}]}}
  policy: {{lease_duration: 10s, on_join: auto, join_settle: 3s}}
",
        list.join(", ")
    );
    Ok(Config::parse(&yaml, std::path::Path::new("<demo>"))?)
}

/// Runs the demo until Ctrl-C.
pub async fn run(opts: DemoOptions) -> anyhow::Result<()> {
    let mut simulator = Simulator::start(opts.listen, SimOptions::default()).await?;
    let client = simulator.client().await?;
    simulator.spawn_kubelet(Default::default()).await?;
    seed(&client, opts.members)
        .await
        .context("seeding the demo cluster")?;
    std::fs::write(&opts.kubeconfig_out, simulator.kubeconfig())
        .with_context(|| format!("writing {}", opts.kubeconfig_out.display()))?;
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{DATABASE}{suffix}"));
    }
    let config = config(opts.targets)?;
    let store = Store::connect(&config.database).await?;
    let engine = Engine::new(config, client.clone(), store, "leasehold-demo".into());
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut tasks = JoinSet::new();
    for i in 0..opts.members {
        let name = format!("{CLUSTER}-{i}");
        let agent = Agent::new(
            AgentConfig::new(CLUSTER, NAMESPACE, &name),
            Arc::new(NoHooks),
        );
        let (client, mut stopped) = (client.clone(), stopped.clone());
        tasks.spawn(async move {
            agent
                .run(client, async move {
                    let _ = stopped.wait_for(|s| *s).await;
                })
                .await
        });
    }
    let mut engine_stopped = stopped.clone();
    tasks.spawn(async move {
        engine
            .run(async move {
                let _ = engine_stopped.wait_for(|s| *s).await;
            })
            .await
    });
    println!(
        "Leasehold demo: Kubernetes API (simulated) at {}",
        simulator.url()
    );
    println!(
        "  {} members with agents, {} targets, control plane acting; history in {DATABASE}",
        opts.members, opts.targets
    );
    println!("  kubeconfig: {}", opts.kubeconfig_out.display());
    println!(
        "  try: KUBECONFIG={} kubectl -n {NAMESPACE} get pods,svc,leases",
        opts.kubeconfig_out.display()
    );
    println!("  The dashboard is not part of the demo yet; Ctrl-C stops it.");
    let mut outcome = Ok(());
    simulator
        .run_until(async {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                Some(done) = tasks.join_next() => {
                    outcome = match done {
                        Ok(Ok(())) => Err(anyhow::anyhow!("a demo task ended")),
                        Ok(Err(e)) => Err(e),
                        Err(e) => Err(e.into()),
                    };
                }
            }
            // Agents release their targets while the simulator still runs.
            let _ = stop.send(true);
            let _ = tokio::time::timeout(std::time::Duration::from_secs(5), async {
                while tasks.join_next().await.is_some() {}
            })
            .await;
        })
        .await?;
    outcome
}

/// Creates the demo namespace, member pods and Services.
pub async fn seed(client: &Client, members: usize) -> anyhow::Result<()> {
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
    Ok(())
}
