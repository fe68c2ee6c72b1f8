//! deploy/: every overlay and example renders with `kubectl kustomize` and applies cleanly with
//! `kubectl apply --dry-run=server -k` — against the in-process simulator, or against the real
//! kube-apiserver of `LEASEHOLD_TEST_KUBECONFIG` when that is set — without persisting
//! anything; every Leasehold configuration under deploy/ (the files and the ConfigMaps the
//! overlays generate) loads with the real loader; the manifests keep the security settings and
//! the least-privilege RBAC the docs promise; the MMR example is the cluster the demo runs.

use crate::common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};
use leasehold::config::Config;
use serde_json::{Value, json};

/// Every kustomization a user applies.
const OVERLAYS: &[&str] = &[
    "deploy/overlays/single",
    "deploy/overlays/ha",
    "deploy/overlays/single-token-auth",
    "deploy/examples/gnmic",
    "deploy/examples/mmr",
    "deploy/examples/worker-pool",
];

/// Where the manifests are applied: the simulator, or the apiserver the other test tier names.
struct Backend {
    kubeconfig: PathBuf,
    client: kube::Client,
    _sim: Option<common::TestSim>,
}

impl Backend {
    async fn start() -> Backend {
        match std::env::var_os("LEASEHOLD_TEST_KUBECONFIG") {
            Some(path) => {
                let path = PathBuf::from(path);
                let kc = kube::config::Kubeconfig::read_from(&path).expect("kubeconfig reads");
                let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
                    .await
                    .expect("kubeconfig is usable");
                Backend {
                    kubeconfig: path,
                    client: kube::Client::try_from(cfg).expect("client"),
                    _sim: None,
                }
            }
            None => {
                let sim = common::start().await;
                Backend {
                    kubeconfig: sim.kubeconfig.clone(),
                    client: sim.client.clone(),
                    _sim: Some(sim),
                }
            }
        }
    }

    async fn kubectl(&self, args: &[&str]) -> (bool, String, String) {
        let mut cmd = tokio::process::Command::new(common::kubectl_path());
        cmd.args(args)
            .current_dir(root())
            .env("KUBECONFIG", &self.kubeconfig)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .kill_on_drop(true);
        let out = tokio::time::timeout(Duration::from_secs(120), cmd.output())
            .await
            .expect("kubectl finishes within 120 s")
            .expect("kubectl runs");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Creates a namespace for real (a dry run of a Namespace persists nothing, and objects in
    /// a namespace that does not exist are refused, dry run or not).
    async fn ensure_namespace(&self, name: &str) {
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        match Api::<Namespace>::all(self.client.clone())
            .create(&PostParams::default(), &ns)
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => panic!("creating namespace {name}: {e}"),
        }
    }
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The objects of `kubectl kustomize DIR`, as JSON.
async fn render(b: &Backend, dir: &str) -> Vec<Value> {
    let (ok, yaml, err) = b.kubectl(&["kustomize", dir]).await;
    assert!(ok, "kubectl kustomize {dir}: {err}");
    serde_saphyr::from_multiple::<Value>(&yaml).unwrap_or_else(|e| panic!("{dir}: {e}"))
}

fn namespaces_of(objects: &[Value]) -> BTreeSet<String> {
    objects
        .iter()
        .filter_map(|o| {
            if o["kind"] == "Namespace" {
                o["metadata"]["name"].as_str()
            } else {
                o["metadata"]["namespace"].as_str()
            }
        })
        .map(str::to_owned)
        .collect()
}

fn find<'a>(objects: &'a [Value], kind: &str, name_prefix: &str) -> Vec<&'a Value> {
    objects
        .iter()
        .filter(|o| {
            o["kind"] == kind
                && o["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with(name_prefix))
        })
        .collect()
}

#[tokio::test]
async fn every_overlay_and_example_applies_with_a_server_dry_run() {
    let b = Backend::start().await;
    for dir in OVERLAYS {
        let objects = render(&b, dir).await;
        assert!(objects.len() >= 5, "{dir}: only {} objects", objects.len());
        for ns in namespaces_of(&objects) {
            b.ensure_namespace(&ns).await;
        }
        let (ok, out, err) = b
            .kubectl(&["apply", "--dry-run=server", "-k", dir, "-o", "json"])
            .await;
        assert!(ok, "kubectl apply --dry-run=server -k {dir}:\n{err}");
        let applied: Value = serde_json::from_str(&out).expect("JSON");
        let items = applied["items"].as_array().cloned().unwrap_or_default();
        assert_eq!(items.len(), objects.len(), "{dir}: every object answered");
        for o in &items {
            // The server's answer: defaulted, with a uid, but nothing stored.
            assert!(o["metadata"]["uid"].is_string(), "{dir}: {o}");
            if o["kind"] != "Namespace" {
                let ns = o["metadata"]["namespace"].as_str().unwrap_or("");
                let kind = o["kind"].as_str().unwrap().to_lowercase();
                let name = o["metadata"]["name"].as_str().unwrap();
                let mut args = vec!["get", &kind, name, "--ignore-not-found", "-o", "name"];
                if !ns.is_empty() {
                    args.extend(["-n", ns]);
                }
                let (ok, got, err) = b.kubectl(&args).await;
                assert!(ok, "{dir}: kubectl get {kind} {name}: {err}");
                assert_eq!(got, "", "{dir}: {kind} {name} was stored by a dry run");
            }
        }
        // Workloads came back defaulted by the server (what kube-apiserver answers too).
        for d in items.iter().filter(|o| o["kind"] == "Deployment") {
            assert!(d["spec"]["strategy"]["type"].is_string(), "{dir}: {d}");
            assert!(d["spec"]["revisionHistoryLimit"].is_number(), "{dir}: {d}");
        }
        // Plain `kubectl apply` output, as the docs show it.
        let (ok, out, err) = b.kubectl(&["apply", "--dry-run=server", "-k", dir]).await;
        assert!(ok, "{dir}: {err}");
        assert_eq!(out.lines().count(), objects.len(), "{dir}:\n{out}");
        assert!(
            out.lines().all(|l| l.ends_with("(server dry run)")),
            "{dir}:\n{out}"
        );
    }
    // A plain manifest: who may use the dashboard and API (mode kubernetes).
    b.ensure_namespace("leasehold").await;
    let (ok, out, err) = b
        .kubectl(&[
            "apply",
            "--dry-run=server",
            "-f",
            "deploy/examples/rbac-users.yaml",
        ])
        .await;
    assert!(ok, "rbac-users.yaml: {err}");
    assert_eq!(out.lines().count(), 5, "{out}");
}

#[tokio::test]
async fn every_leasehold_config_under_deploy_loads() {
    let b = Backend::start().await;
    let mut files = Vec::new();
    let mut stack = vec![root().join("deploy")];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.file_name().is_some_and(|n| n == "leasehold.yaml") {
                files.push(p);
            }
        }
    }
    files.sort();
    assert_eq!(files.len(), 6, "{files:?}");
    for f in &files {
        let c = Config::load(f).unwrap_or_else(|e| panic!("{e}"));
        assert!(!c.clusters.is_empty());
    }
    // What the overlays mount: the generated ConfigMap's key, and the Deployment refers to it
    // by its hashed name.
    for dir in &OVERLAYS[..3] {
        let objects = render(&b, dir).await;
        let cms = find(&objects, "ConfigMap", "leasehold-config-");
        assert_eq!(cms.len(), 1, "{dir}");
        let text = cms[0]["data"]["leasehold.yaml"].as_str().expect("key");
        let config = Config::parse(text, Path::new(dir)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(config.http.listen.to_string(), "0.0.0.0:8080", "{dir}");
        let deploy = find(&objects, "Deployment", "leasehold")[0];
        let volumes = deploy["spec"]["template"]["spec"]["volumes"]
            .as_array()
            .unwrap();
        assert!(
            volumes
                .iter()
                .any(|v| v["configMap"]["name"] == cms[0]["metadata"]["name"]),
            "{dir}: the Deployment mounts the generated ConfigMap"
        );
        let args = &deploy["spec"]["template"]["spec"]["containers"][0]["args"];
        assert_eq!(
            args,
            &json!(["serve", "--config", "/etc/leasehold/leasehold.yaml"])
        );
    }
}

/// The ServiceAccount a rule is bound to, per (Cluster)RoleBinding.
fn rules_bound_to(objects: &[Value], sa_ns: &str, sa: &str) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for binding in objects
        .iter()
        .filter(|o| o["kind"] == "RoleBinding" || o["kind"] == "ClusterRoleBinding")
    {
        let bound = binding["subjects"].as_array().is_some_and(|s| {
            s.iter().any(|s| {
                s["kind"] == "ServiceAccount" && s["name"] == sa && s["namespace"] == sa_ns
            })
        });
        if !bound {
            continue;
        }
        let role_ref = &binding["roleRef"];
        let ns = binding["metadata"]["namespace"].as_str().unwrap_or("");
        let role = objects
            .iter()
            .find(|o| {
                o["kind"] == role_ref["kind"]
                    && o["metadata"]["name"] == role_ref["name"]
                    && (o["kind"] == "ClusterRole" || o["metadata"]["namespace"] == ns)
            })
            .unwrap_or_else(|| panic!("role {role_ref} of {binding} exists"));
        for r in role["rules"].as_array().unwrap() {
            out.push((ns.to_owned(), r.clone()));
        }
    }
    out
}

fn strings(v: &Value) -> Vec<&str> {
    v.as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn rbac_is_least_privilege_and_pods_are_locked_down() {
    let b = Backend::start().await;
    for dir in ["deploy/overlays/single", "deploy/overlays/ha"] {
        let objects = render(&b, dir).await;
        let rules = rules_bound_to(&objects, "leasehold", "leasehold");
        assert!(!rules.is_empty());
        for (ns, r) in &rules {
            let verbs = strings(&r["verbs"]);
            let resources = strings(&r["resources"]);
            assert!(!verbs.contains(&"*") && !resources.contains(&"*"), "{r}");
            assert!(!resources.contains(&"secrets"), "no Secret access: {r}");
            if resources.contains(&"pods") {
                assert!(
                    !verbs.contains(&"delete"),
                    "no pod deletion by default: {r}"
                );
            }
            if ns.is_empty() {
                // Cluster-wide: only the two review APIs.
                assert_eq!(verbs, ["create"], "{r}");
                assert!(
                    resources == ["tokenreviews"] || resources == ["subjectaccessreviews"],
                    "{r}"
                );
            }
            if resources.contains(&"leases") && ns == "leasehold" {
                // The election Lease only, apart from creating it.
                assert!(
                    verbs == ["create"]
                        || strings(&r["resourceNames"]) == ["leasehold-control-plane"],
                    "{r}"
                );
            }
        }
        let managed: BTreeSet<&str> = rules
            .iter()
            .filter(|(_, r)| strings(&r["resources"]).contains(&"leases"))
            .map(|(ns, _)| ns.as_str())
            .collect();
        assert_eq!(
            managed,
            BTreeSet::from(["leasehold", "workers"]),
            "{dir}: Leases only in the control plane's and the managed namespace"
        );

        let deploy = find(&objects, "Deployment", "leasehold")[0];
        let pod = &deploy["spec"]["template"]["spec"];
        assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
        assert_eq!(
            pod["securityContext"]["seccompProfile"]["type"],
            "RuntimeDefault"
        );
        let c = &pod["containers"][0];
        let sc = &c["securityContext"];
        assert_eq!(sc["readOnlyRootFilesystem"], true);
        assert_eq!(sc["allowPrivilegeEscalation"], false);
        assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]));
        assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
        assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
        assert!(c["resources"]["requests"]["memory"].is_string());
        assert!(c["resources"]["limits"]["memory"].is_string());

        let svc = find(&objects, "Service", "leasehold")[0];
        assert_eq!(svc["spec"]["type"], "LoadBalancer");
        assert!(!strings(&svc["spec"]["loadBalancerSourceRanges"]).is_empty());
        assert_eq!(find(&objects, "PodDisruptionBudget", "leasehold").len(), 1);
        assert_eq!(find(&objects, "NetworkPolicy", "leasehold").len(), 1);

        let replicas = deploy["spec"]["replicas"].as_i64().unwrap();
        if dir.ends_with("single") {
            assert_eq!(replicas, 1);
            assert_eq!(deploy["spec"]["strategy"]["type"], "Recreate");
            assert!(find(&objects, "PersistentVolumeClaim", "leasehold-data").len() == 1);
        } else {
            assert!(replicas >= 2);
            let env = c["env"].as_array().unwrap();
            assert!(env.iter().any(|e| e["name"] == "LEASEHOLD_DATABASE"
                && e["valueFrom"]["secretKeyRef"]["name"] == "leasehold-database"));
        }
    }
}

#[tokio::test]
async fn the_mmr_example_is_the_cluster_the_demo_runs() {
    let example = Config::load(&root().join("deploy/examples/mmr/leasehold.yaml")).unwrap();
    let timing = leasehold::demo::Timing {
        lease_duration: Duration::from_secs(10),
        join_settle: Duration::from_secs(3),
    };
    let demo = leasehold::demo::layout_config(Path::new("demo.db"), 1, timing).unwrap();
    let ours = example.cluster("replicas").expect("cluster replicas");
    let theirs = demo
        .cluster(leasehold::demo::REPLICAS)
        .expect("demo cluster");
    assert_eq!(ours.selector, theirs.selector);
    assert_eq!(ours.headless_service, theirs.headless_service);
    assert_eq!(ours.load_balancer_service, theirs.load_balancer_service);
    assert_eq!(ours.roles, theirs.roles);
    assert_eq!(ours.targets, theirs.targets);
    assert_eq!(ours.protocol, theirs.protocol);
    assert!(ours.policy.removal.webhook.is_some());
    // The example's pods carry the labels the demo's pods carry (selector and roles).
    let b = Backend::start().await;
    let objects = render(&b, "deploy/examples/mmr").await;
    for (sts, role) in [
        ("replicas-controlling", "controlling"),
        ("replicas-copy", "copy"),
    ] {
        let s = find(&objects, "StatefulSet", sts)[0];
        let labels = &s["spec"]["template"]["metadata"]["labels"];
        assert_eq!(labels["app"], "replicas");
        assert_eq!(labels["role"], role);
        assert_eq!(s["spec"]["serviceName"], "replicas");
        let agent = s["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "leasehold-agent")
            .expect("agent sidecar");
        assert!(strings(&agent["args"]).contains(&"--cluster=replicas"));
    }
}
