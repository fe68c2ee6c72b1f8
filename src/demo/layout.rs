//! What the demo's simulated cluster holds: the namespace, two member sets with their
//! Services, and the control plane's configuration for them. `collector` is a StatefulSet-style
//! set of telemetry collectors sharing many targets; `replicas` is a replicated database in
//! the style of AllegroGraph multi-master replication (MMR): one controlling instance and
//! copies, sharing the databases to replicate. Pure object builders plus the writes that seed
//! them; nothing here runs agents. With gnmic, the collectors' targets carry their gnmic
//! definitions.

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::json;

use crate::config::Config;

/// The demo's namespace.
pub const NAMESPACE: &str = "demo";
/// The telemetry collectors (pods `collector-<ordinal>`).
pub const COLLECTOR: &str = "collector";
/// The MMR-style replicated database (pods `replicas-<ordinal>`; ordinal 0 is controlling).
pub const REPLICAS: &str = "replicas";
/// Both clusters.
pub const CLUSTERS: [&str; 2] = [COLLECTOR, REPLICAS];
/// Members of `replicas` at start: one controlling instance and two copies.
pub const REPLICA_MEMBERS: u32 = 3;
/// The databases `replicas` shares out (its targets).
pub const DATABASES: [&str; 8] = [
    "orders",
    "customers",
    "inventory",
    "payments",
    "shipping",
    "catalog",
    "reviews",
    "sessions",
];

/// Timings of both clusters' policies.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// Duration members promise on target Leases (how long a crash goes unnoticed).
    pub lease_duration: Duration,
    /// Stable membership needed before a join triggers a rebalance.
    pub join_settle: Duration,
}

/// The control plane's configuration: both clusters, history in the SQLite file `database`,
/// proposing a rebalance for someone to approve when a member joins.
pub fn config(
    database: &Path,
    targets: usize,
    timing: Timing,
    network: Option<std::net::SocketAddr>,
) -> anyhow::Result<Config> {
    let devices: Vec<String> = match network {
        None => (0..targets).map(|t| format!("device-{t:05}")).collect(),
        Some(addr) => gnmic_targets(addr, targets),
    };
    let dbs: Vec<String> = DATABASES.iter().map(|d| format!("db-{d}")).collect();
    let policy = format!(
        "{{lease_duration: {}ms, on_join: propose, join_settle: {}ms}}",
        timing.lease_duration.as_millis(),
        timing.join_settle.as_millis()
    );
    // A JSON string is a valid YAML scalar, whatever the path holds.
    let url = serde_json::to_string(&format!("sqlite:{}", database.display()))?;
    let yaml = format!(
        "database: {url}
control_plane: {{namespace: {NAMESPACE}}}
clusters:
- name: {COLLECTOR}
  namespace: {NAMESPACE}
  selector: {{app: {COLLECTOR}}}
  headless_service: {COLLECTOR}
  load_balancer_service: {COLLECTOR}-api
  targets: {{inline: [{devices}]}}
  policy: {policy}
- name: {REPLICAS}
  namespace: {NAMESPACE}
  selector: {{app: {REPLICAS}}}
  headless_service: {REPLICAS}
  load_balancer_service: {REPLICAS}-api
  roles:
  - {{name: controlling, selector: {{role: controlling}}}}
  - {{name: copy, selector: {{role: copy}}}}
  targets: {{inline: [{dbs}]}}
  policy: {policy}
",
        devices = devices.join(", "),
        dbs = dbs.join(", "),
    );
    Ok(Config::parse(&yaml, Path::new("<demo>"))?)
}

/// The collector targets of the demo with gnmic (`leasehold demo --gnmic`), as target list
/// entries (YAML flow mappings): each device's gnmic definition, every one served by the
/// simulated network at `network`.
pub fn gnmic_targets(network: std::net::SocketAddr, targets: usize) -> Vec<String> {
    (0..targets)
        .map(|t| {
            format!(
                "{{key: device-{t:05}, gnmic: {{address: '{network}', insecure: true, timeout: 5s}}}}"
            )
        })
        .collect()
}

/// The pod of `cluster`'s member `ordinal`, StatefulSet style (`<cluster>-<ordinal>`, with the
/// headless Service as subdomain). In `replicas`, ordinal 0 is the controlling instance and
/// every other one a copy.
pub fn pod(cluster: &str, ordinal: u32) -> anyhow::Result<Pod> {
    let name = format!("{cluster}-{ordinal}");
    // The labels a StatefulSet controller puts on its pods (the index reads the ordinal from
    // `apps.kubernetes.io/pod-index`).
    let mut labels = json!({
        "app": cluster,
        "statefulset.kubernetes.io/pod-name": name,
        "apps.kubernetes.io/pod-index": ordinal.to_string(),
    });
    let (container, image, port) = if cluster == REPLICAS {
        let role = if ordinal == 0 { "controlling" } else { "copy" };
        labels["role"] = json!(role);
        ("agraph", "example/agraph-mmr:8.0", 10035)
    } else {
        ("collector", "example/collector:1.0", 7890)
    };
    Ok(serde_json::from_value(json!({
        "metadata": { "name": name, "labels": labels },
        "spec": {
            "hostname": name, "subdomain": cluster, "nodeName": kube_sim::kubelet::NODE_NAME,
            "containers": [{ "name": container, "image": image, "ports": [{ "containerPort": port, "name": "api" }] }]
        }
    }))?)
}

/// `cluster`'s Services: headless (stable member DNS names) and LoadBalancer (`<cluster>-api`).
fn services(cluster: &str) -> anyhow::Result<[Service; 2]> {
    let port = if cluster == REPLICAS { 10035 } else { 7890 };
    let svc = |name: String, spec: serde_json::Value| -> anyhow::Result<Service> {
        Ok(serde_json::from_value(
            json!({ "metadata": { "name": name }, "spec": spec }),
        )?)
    };
    Ok([
        svc(
            cluster.to_owned(),
            json!({ "clusterIP": "None", "selector": { "app": cluster }, "ports": [{ "name": "api", "port": port }] }),
        )?,
        svc(
            format!("{cluster}-api"),
            json!({ "type": "LoadBalancer", "selector": { "app": cluster }, "ports": [{ "name": "api", "port": 80, "targetPort": port }] }),
        )?,
    ])
}

/// Creates the namespace, `collectors` collector pods, the `replicas` pods and every Service.
pub async fn seed(client: &Client, collectors: u32) -> anyhow::Result<()> {
    let pp = PostParams::default();
    let ns: Namespace = serde_json::from_value(json!({ "metadata": { "name": NAMESPACE } }))?;
    Api::<Namespace>::all(client.clone())
        .create(&pp, &ns)
        .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let svcs: Api<Service> = Api::namespaced(client.clone(), NAMESPACE);
    for (cluster, members) in [(COLLECTOR, collectors), (REPLICAS, REPLICA_MEMBERS)] {
        for ordinal in 0..members {
            pods.create(&pp, &pod(cluster, ordinal)?).await?;
        }
        for svc in services(cluster)? {
            svcs.create(&pp, &svc).await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_clusters_parse_with_roles() {
        let timing = Timing {
            lease_duration: Duration::from_secs(10),
            join_settle: Duration::from_secs(3),
        };
        let config = config(Path::new("/tmp/x y/demo.db"), 5, timing, None).unwrap();
        assert_eq!(config.database, "sqlite:/tmp/x y/demo.db");
        let names: Vec<&str> = config.clusters.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, CLUSTERS);
        assert_eq!(config.clusters[0].targets.inline.len(), 5);
        let replicas = &config.clusters[1];
        assert_eq!(replicas.targets.inline.len(), DATABASES.len());
        let roles: Vec<&str> = replicas.roles.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(roles, ["controlling", "copy"]);
        assert_eq!(replicas.policy.lease_duration, Duration::from_secs(10));
        assert_eq!(replicas.policy.join_settle, Duration::from_secs(3));
        // With gnmic, every collector target says where gnmic collects it from.
        let network = "127.0.0.1:57400".parse().unwrap();
        let with_gnmic = super::config(Path::new("demo.db"), 5, timing, Some(network)).unwrap();
        let targets = &with_gnmic.clusters[0].targets.inline;
        assert_eq!(targets.len(), 5);
        assert!(targets.iter().all(|t| {
            t.target()
                .and_then(|t| t.gnmic.as_ref())
                .is_some_and(|g| g.address == "127.0.0.1:57400")
        }));
        assert!(
            config.clusters[1]
                .targets
                .inline
                .iter()
                .all(|t| t.target().unwrap().gnmic.is_none())
        );
    }

    #[test]
    fn replica_pods_carry_their_role() {
        let role =
            |ordinal| pod(REPLICAS, ordinal).unwrap().metadata.labels.unwrap()["role"].clone();
        assert_eq!(role(0), "controlling");
        assert_eq!(role(1), "copy");
        assert_eq!(role(7), "copy");
        let collector = pod(COLLECTOR, 2).unwrap();
        assert_eq!(collector.metadata.name.as_deref(), Some("collector-2"));
        assert!(!collector.metadata.labels.unwrap().contains_key("role"));
    }
}
