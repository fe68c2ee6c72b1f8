//! deploy/: every overlay and example renders with `kubectl kustomize` and applies cleanly with
//! `kubectl apply --dry-run=server -k` — against the in-process simulator, or against the real
//! kube-apiserver of `LEASEHOLD_TEST_KUBECONFIG` when that is set — without persisting
//! anything; every Leasehold configuration under deploy/ (the files and the ConfigMaps the
//! overlays generate) loads with the real loader; the manifests keep the security settings and
//! the least-privilege RBAC the docs promise; the MMR example is the cluster the demo runs.
//! The Helm chart (deploy/helm/leasehold), rendered by the Helm of `scripts/helm.sh` with each
//! of its CI values files, gives the objects of the overlay that file stands for — the same
//! RBAC rules, pod and container security settings, and effective configuration — and applies
//! cleanly with a server-side dry run too.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
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
    "deploy/examples/gnmic-observed",
    "deploy/examples/mmr",
    "deploy/examples/worker-pool",
    "deploy/examples/prometheus",
    "deploy/examples/otel-collector",
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
            if o["kind"] != "Namespace" {
                answered_not_stored(&b, o, dir).await;
            } else {
                assert!(o["metadata"]["uid"].is_string(), "{dir}: {o}");
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
    assert_eq!(files.len(), 9, "{files:?}");
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

/// The managed gnmic example: every target in its list has a gnmic definition the agent can use,
/// and the list is the one the control plane's cluster entry reads.
#[tokio::test]
async fn the_managed_gnmic_example_defines_every_target_for_gnmic() {
    let b = Backend::start().await;
    let objects = render(&b, "deploy/examples/gnmic").await;
    let cms = find(&objects, "ConfigMap", "gnmic-targets");
    assert_eq!(cms.len(), 1);
    let text = cms[0]["data"]["targets.yaml"]
        .as_str()
        .expect("key targets.yaml");
    let list = leasehold::config::parse_target_list(text).unwrap();
    assert_eq!(list.len(), 7);
    assert!(
        list.iter()
            .all(|t| t.target().is_some_and(|t| t.gnmic.is_some())),
        "{list:?}"
    );
    let config = Config::load(&root().join("deploy/examples/gnmic/leasehold.yaml")).unwrap();
    let targets = config.clusters[0].targets.config_map.as_ref().unwrap();
    assert_eq!(
        (targets.name.as_str(), targets.key.as_str()),
        ("gnmic-targets", "targets.yaml")
    );
    // The agent reads the same key, mounted.
    let sts = find(&objects, "StatefulSet", "gnmic");
    let args = sts[0]["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
    assert!(
        args.contains("--gnmic-targets=/etc/leasehold/targets/targets.yaml"),
        "{args}"
    );
}

/// The Prometheus example lists no pods: its target list is an `endpoints` entry naming the
/// demo app's Service and a port the Service has, and the control plane's cluster entry reads
/// that list.
#[tokio::test]
async fn the_prometheus_example_takes_its_targets_from_the_demo_apps_endpointslices() {
    let b = Backend::start().await;
    let objects = render(&b, "deploy/examples/prometheus").await;
    let cms = find(&objects, "ConfigMap", "prometheus-targets");
    let text = cms[0]["data"]["targets.yaml"]
        .as_str()
        .expect("key targets.yaml");
    let list = leasehold::config::parse_target_list(text).unwrap();
    let [leasehold::config::TargetEntry::Endpoints(e)] = &list[..] else {
        panic!("not one endpoints entry: {list:?}");
    };
    let svc = find(&objects, "Service", &e.endpoints.service);
    assert_eq!(svc.len(), 1, "no Service {:?}", e.endpoints.service);
    let ports: Vec<&str> = svc[0]["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    let leasehold::targets::endpoints::PortRef::Name(port) = &e.endpoints.port else {
        panic!("{:?}", e.endpoints.port);
    };
    assert!(ports.contains(&port.as_str()), "{port} not in {ports:?}");
    let config = Config::load(&root().join("deploy/examples/prometheus/leasehold.yaml")).unwrap();
    let targets = config.clusters[0].targets.config_map.as_ref().unwrap();
    assert_eq!(
        (targets.name.as_str(), targets.key.as_str()),
        ("prometheus-targets", "targets.yaml")
    );
}

#[tokio::test]
async fn the_mmr_example_is_the_cluster_the_demo_runs() {
    let example = Config::load(&root().join("deploy/examples/mmr/leasehold.yaml")).unwrap();
    let timing = leasehold::demo::Timing {
        lease_duration: Duration::from_secs(10),
        join_settle: Duration::from_secs(3),
    };
    let demo = leasehold::demo::layout_config(Path::new("demo.db"), 1, timing, None).unwrap();
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

/// The chart, and the overlay each of its CI values files (`deploy/helm/leasehold/ci/`) stands
/// for. Rendered as release `leasehold` in namespace `leasehold`, as the overlays install.
const CHART: &str = "deploy/helm/leasehold";
const CHART_VALUES: &[(&str, &str)] = &[
    ("ci/single-values.yaml", "deploy/overlays/single"),
    ("ci/ha-values.yaml", "deploy/overlays/ha"),
    (
        "ci/token-auth-values.yaml",
        "deploy/overlays/single-token-auth",
    ),
];

/// The Helm that `scripts/helm.sh build` built (`scripts/helm.sh path`), or `None` when it is
/// not built: then the test fails under CI (`CI` set), and elsewhere says it skipped.
fn helm_binary() -> Option<PathBuf> {
    let out = std::process::Command::new(root().join("scripts/helm.sh"))
        .arg("path")
        .output()
        .expect("scripts/helm.sh runs");
    if out.status.success() {
        let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        assert!(
            path.is_file(),
            "scripts/helm.sh path: {} is no file",
            path.display()
        );
        return Some(path);
    }
    let why = String::from_utf8_lossy(&out.stderr);
    if std::env::var_os("CI").is_some() {
        panic!(
            "helm is not built, so the chart cannot be checked ({}): run `scripts/helm.sh build` \
             (it builds Helm from the Go module proxy) before the tests",
            why.trim()
        );
    }
    eprintln!("skipped: helm is not built (`scripts/helm.sh build` builds it; CI fails here)");
    None
}

/// The objects of `helm template leasehold CHART -n leasehold -f VALUES`, test hooks included,
/// as JSON. Helm's state (repositories, plugins) lives in a throwaway directory.
async fn helm_render(helm: &Path, values: &str) -> Vec<Value> {
    let home = tempfile::tempdir().unwrap();
    let values = root().join(CHART).join(values);
    let out = tokio::process::Command::new(helm)
        .args([
            "template",
            "leasehold",
            CHART,
            "--namespace",
            "leasehold",
            "-f",
        ])
        .arg(&values)
        .current_dir(root())
        .env("HELM_CACHE_HOME", home.path().join("cache"))
        .env("HELM_CONFIG_HOME", home.path().join("config"))
        .env("HELM_DATA_HOME", home.path().join("data"))
        .env_remove("KUBECONFIG")
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(120), out)
        .await
        .expect("helm template finishes within 120 s")
        .expect("helm runs");
    assert!(
        out.status.success(),
        "helm template with {}: {}",
        values.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let yaml = String::from_utf8(out.stdout).unwrap();
    serde_saphyr::from_multiple::<Value>(&yaml)
        .unwrap_or_else(|e| panic!("{}: {e}", values.display()))
        .into_iter()
        .filter(|o| !o.is_null())
        .collect()
}

fn is_helm_hook(o: &Value) -> bool {
    o["metadata"]["annotations"]["helm.sh/hook"].is_string()
}

/// Every (namespace, API group, resource, resource name or "", verb) the rules bound to the
/// ServiceAccount leasehold/leasehold grant: the same set however the rules are grouped.
fn grants(objects: &[Value]) -> BTreeSet<(String, String, String, String, String)> {
    let mut out = BTreeSet::new();
    for (ns, r) in rules_bound_to(objects, "leasehold", "leasehold") {
        let names = strings(&r["resourceNames"]);
        let names = if names.is_empty() { vec![""] } else { names };
        for g in strings(&r["apiGroups"]) {
            for res in strings(&r["resources"]) {
                for n in &names {
                    for v in strings(&r["verbs"]) {
                        out.insert((ns.clone(), g.into(), res.into(), (*n).into(), v.into()));
                    }
                }
            }
        }
    }
    out
}

/// Labels Helm adds (and the release in selectors, so that two releases in one namespace keep
/// apart): not in the kustomize manifests.
const HELM_LABELS: &[&str] = &[
    "app.kubernetes.io/instance",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/version",
    "helm.sh/chart",
];

/// Strips what may differ between the chart and kustomize by design: Helm's labels, the
/// ConfigMap's hash suffix, the pod template's config checksum, the order of lists that are
/// merged by key (kustomize's patches put their items first). Returns the object's own labels,
/// which are compared apart (kustomize labels only deploy/base's objects).
fn normalize(o: &mut Value) -> BTreeMap<String, Value> {
    fn walk(v: &mut Value) {
        match v {
            Value::Object(m) => {
                if m.contains_key("app.kubernetes.io/name") {
                    for k in HELM_LABELS {
                        m.remove(*k);
                    }
                }
                for key in ["env", "volumes", "volumeMounts"] {
                    if let Some(Value::Array(items)) = m.get_mut(key) {
                        items.sort_by_key(|i| {
                            i["name"].to_string() + i["mountPath"].as_str().unwrap_or("")
                        });
                    }
                }
                m.values_mut().for_each(walk);
            }
            Value::Array(a) => a.iter_mut().for_each(walk),
            _ => {}
        }
    }
    let is_config_map = o["kind"] == "ConfigMap";
    let meta = o["metadata"].as_object_mut().unwrap();
    let labels = meta.remove("labels").unwrap_or_else(|| json!({}));
    if let Some(Value::String(name)) = meta.get_mut("name")
        && is_config_map
        && name.starts_with("leasehold-config-")
    {
        *name = "leasehold-config".into();
    }
    // (`pointer_mut`, not indexing: indexing would add the missing keys to other kinds.)
    if let Some(template) = o.pointer_mut("/spec/template/metadata")
        && let Some(a) = template
            .get_mut("annotations")
            .and_then(Value::as_object_mut)
    {
        a.remove("checksum/config");
        if a.is_empty() {
            template.as_object_mut().unwrap().remove("annotations");
        }
    }
    if let Some(Value::Array(volumes)) = o.pointer_mut("/spec/template/spec/volumes") {
        for v in volumes {
            if let Some(Value::String(name)) = v.pointer_mut("/configMap/name")
                && name.starts_with("leasehold-config-")
            {
                *name = "leasehold-config".into();
            }
        }
    }
    walk(o);
    let mut labels: BTreeMap<String, Value> = serde_json::from_value(labels).unwrap();
    for k in HELM_LABELS {
        labels.remove(*k);
    }
    labels
}

fn object_key(o: &Value) -> String {
    format!(
        "{} {}/{}",
        o["kind"].as_str().unwrap(),
        o["metadata"]["namespace"].as_str().unwrap_or(""),
        o["metadata"]["name"].as_str().unwrap()
    )
}

#[tokio::test]
async fn the_chart_gives_the_overlays_objects_rbac_and_security_settings() {
    // Every values file CI renders (scripts/helm.sh check) is compared with its overlay.
    let mut on_disk: Vec<String> = std::fs::read_dir(root().join(CHART).join("ci"))
        .unwrap()
        .map(|e| format!("ci/{}", e.unwrap().file_name().to_string_lossy()))
        .collect();
    on_disk.sort();
    let mut listed: Vec<String> = CHART_VALUES.iter().map(|(v, _)| v.to_string()).collect();
    listed.sort();
    assert_eq!(
        on_disk, listed,
        "deploy/helm/leasehold/ci/ against CHART_VALUES"
    );

    let Some(helm) = helm_binary() else { return };
    let b = Backend::start().await;
    for (values, overlay) in CHART_VALUES {
        let token_mode = overlay.ends_with("token-auth");
        let chart: Vec<Value> = helm_render(&helm, values)
            .await
            .into_iter()
            .filter(|o| !is_helm_hook(o))
            .collect();
        // Where the chart differs by design (deploy/helm/leasehold/README.md): Helm needs the
        // release namespace before the chart, so the chart has no Namespace; and token mode
        // calls no review API, so the chart grants nothing cluster-wide then.
        let kustomize: Vec<Value> = render(&b, overlay)
            .await
            .into_iter()
            .filter(|o| o["kind"] != "Namespace")
            .filter(|o| {
                !(token_mode
                    && o["metadata"]["name"] == "leasehold-auth-delegator"
                    && (o["kind"] == "ClusterRole" || o["kind"] == "ClusterRoleBinding"))
            })
            .collect();

        // The same RBAC: every grant to the ServiceAccount, and nothing else.
        let (ours, theirs) = (grants(&chart), grants(&kustomize));
        assert!(!ours.is_empty());
        assert!(
            ours == theirs,
            "{values} vs {overlay}: RBAC differs. Only in the chart: {:?}; only in kustomize: {:?}",
            ours.difference(&theirs).collect::<Vec<_>>(),
            theirs.difference(&ours).collect::<Vec<_>>()
        );
        if token_mode {
            assert!(ours.iter().all(|(ns, ..)| !ns.is_empty()), "{ours:?}");
        }

        // The same pod and container security settings.
        let pod_of = |objects: &[Value]| {
            find(objects, "Deployment", "leasehold")[0]["spec"]["template"]["spec"].clone()
        };
        let (pod, their_pod) = (pod_of(&chart), pod_of(&kustomize));
        assert_eq!(
            pod["securityContext"], their_pod["securityContext"],
            "{values} vs {overlay}: pod securityContext"
        );
        assert_eq!(pod["containers"].as_array().unwrap().len(), 1);
        assert_eq!(
            pod["containers"][0]["securityContext"], their_pod["containers"][0]["securityContext"],
            "{values} vs {overlay}: container securityContext"
        );
        assert_eq!(pod["serviceAccountName"], their_pod["serviceAccountName"]);

        // The same configuration, as the real loader reads it.
        let config_of = |objects: &[Value]| {
            let cm = find(objects, "ConfigMap", "leasehold-config")[0];
            let text = cm["data"]["leasehold.yaml"]
                .as_str()
                .expect("key leasehold.yaml");
            Config::parse(text, Path::new(overlay)).unwrap_or_else(|e| panic!("{e}"))
        };
        assert_eq!(
            config_of(&chart),
            config_of(&kustomize),
            "{values} vs {overlay}: leasehold.yaml"
        );

        // And the same objects otherwise: names, specs, rules, the labels kustomize sets.
        let index = |objects: Vec<Value>| -> BTreeMap<String, (BTreeMap<String, Value>, Value)> {
            objects
                .into_iter()
                .map(|mut o| {
                    let labels = normalize(&mut o);
                    if o["kind"] == "ConfigMap" {
                        o.as_object_mut().unwrap().remove("data"); // compared above
                    }
                    (object_key(&o), (labels, o))
                })
                .collect()
        };
        let (ours, theirs) = (index(chart), index(kustomize));
        assert_eq!(
            ours.keys().collect::<Vec<_>>(),
            theirs.keys().collect::<Vec<_>>(),
            "{values} vs {overlay}: the objects"
        );
        for (key, (labels, o)) in &ours {
            let (their_labels, theirs) = &theirs[key];
            for (k, v) in their_labels {
                assert_eq!(labels.get(k), Some(v), "{values}: {key}: label {k}");
            }
            assert_eq!(
                o,
                theirs,
                "{values} vs {overlay}: {key} differs:\nchart: {}\nkustomize: {}",
                serde_json::to_string_pretty(o).unwrap(),
                serde_json::to_string_pretty(theirs).unwrap()
            );
        }
    }
}

#[tokio::test]
async fn every_chart_render_applies_with_a_server_dry_run() {
    let Some(helm) = helm_binary() else { return };
    let b = Backend::start().await;
    let dir = tempfile::tempdir().unwrap();
    for (values, _) in CHART_VALUES {
        let objects = helm_render(&helm, values).await;
        // The `helm test` Pod: GETs /readyz through the Service, as a restricted pod.
        let tests: Vec<&Value> = objects.iter().filter(|o| is_helm_hook(o)).collect();
        assert_eq!(tests.len(), 1, "{values}");
        assert_eq!(tests[0]["kind"], "Pod");
        assert_eq!(tests[0]["metadata"]["annotations"]["helm.sh/hook"], "test");
        let test = &tests[0]["spec"];
        assert!(
            strings(&test["containers"][0]["args"])
                .last()
                .is_some_and(|url| url.ends_with("leasehold.leasehold.svc:8080/readyz")),
            "{test}"
        );
        assert_eq!(test["securityContext"]["runAsNonRoot"], true);
        assert_eq!(
            test["containers"][0]["securityContext"]["capabilities"]["drop"],
            json!(["ALL"])
        );

        for ns in namespaces_of(&objects) {
            b.ensure_namespace(&ns).await;
        }
        let file = dir.path().join(values.replace('/', "-"));
        let docs: Vec<String> = objects
            .iter()
            .map(|o| serde_json::to_string(o).unwrap())
            .collect();
        std::fs::write(&file, docs.join("\n---\n")).unwrap();
        let file = file.to_str().unwrap();
        let (ok, out, err) = b
            .kubectl(&["apply", "--dry-run=server", "-f", file, "-o", "json"])
            .await;
        assert!(
            ok,
            "kubectl apply --dry-run=server the chart with {values}:\n{err}"
        );
        let applied: Value = serde_json::from_str(&out).expect("JSON");
        let items = applied["items"].as_array().cloned().unwrap_or_default();
        assert_eq!(
            items.len(),
            objects.len(),
            "{values}: every object answered"
        );
        for o in &items {
            answered_not_stored(&b, o, values).await;
        }
    }
}

/// Object `o` of a server dry run's answer (`what` names the render in messages): answered
/// (it has a uid) but not stored.
async fn answered_not_stored(b: &Backend, o: &Value, what: &str) {
    assert!(o["metadata"]["uid"].is_string(), "{what}: {o}");
    let ns = o["metadata"]["namespace"].as_str().unwrap_or("");
    let kind = o["kind"].as_str().unwrap().to_lowercase();
    let name = o["metadata"]["name"].as_str().unwrap();
    let mut args = vec!["get", &kind, name, "--ignore-not-found", "-o", "name"];
    if !ns.is_empty() {
        args.extend(["-n", ns]);
    }
    let (ok, got, err) = b.kubectl(&args).await;
    assert!(ok, "{what}: kubectl get {kind} {name}: {err}");
    assert_eq!(got, "", "{what}: {kind} {name} was stored by a dry run");
}

/// The chart's Prometheus Operator objects (`monitoring.*`, off by default): the PrometheusRule
/// holds exactly the groups of deploy/monitoring/leasehold-alerts.yaml — the chart's
/// `files/leasehold-alerts.yaml` is a symbolic link to it — with the labels asked for and, with
/// `runbookBaseURL`, every `runbook_url` under that base; the ServiceMonitor scrapes /metrics on
/// the Service's `http` port, selecting that Service and no other.
#[tokio::test]
async fn the_charts_prometheus_rule_is_the_monitoring_alert_rules() {
    let source_path = "deploy/monitoring/leasehold-alerts.yaml";
    let source = std::fs::read_to_string(root().join(source_path)).unwrap();
    let link = root().join(CHART).join("files/leasehold-alerts.yaml");
    assert_eq!(
        std::fs::canonicalize(&link).expect("the chart's files/leasehold-alerts.yaml"),
        std::fs::canonicalize(root().join(source_path)).unwrap(),
        "{CHART}/files/leasehold-alerts.yaml is a link to {source_path}"
    );
    let Some(helm) = helm_binary() else { return };
    for (values, _) in CHART_VALUES {
        let objects = helm_render(&helm, values).await;
        for kind in ["PrometheusRule", "ServiceMonitor"] {
            assert!(
                find(&objects, kind, "").is_empty(),
                "{values}: {kind} is off by default"
            );
        }
    }

    let dir = tempfile::tempdir().unwrap();
    let values = dir.path().join("monitoring-values.yaml");
    std::fs::write(
        &values,
        "monitoring:\n  prometheusRule: {enabled: true, labels: {release: kps}}\n  \
         serviceMonitor: {enabled: true, labels: {release: kps}, interval: 15s}\n",
    )
    .unwrap();
    let based = dir.path().join("runbook-values.yaml");
    std::fs::write(
        &based,
        "monitoring:\n  prometheusRule: {enabled: true, runbookBaseURL: 'https://docs.example/lh/'}\n",
    )
    .unwrap();
    let objects = helm_render(&helm, values.to_str().unwrap()).await;
    let rules = find(&objects, "PrometheusRule", "leasehold");
    assert_eq!(rules.len(), 1, "one PrometheusRule");
    let rule = rules[0];
    assert_eq!(rule["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(rule["metadata"]["namespace"], "leasehold");
    assert_eq!(rule["metadata"]["labels"]["release"], "kps");
    let want: Value = serde_saphyr::from_str(&source).unwrap();
    let groups = want["groups"].as_array().expect("the rule file's groups");
    assert!(!groups.is_empty());
    assert_eq!(
        rule["spec"]["groups"], want["groups"],
        "the PrometheusRule's groups are {source_path}'s"
    );
    // With runbookBaseURL: the same groups but for each runbook_url, prefixed.
    let based = helm_render(&helm, based.to_str().unwrap()).await;
    let based = find(&based, "PrometheusRule", "leasehold")[0]["spec"]["groups"].clone();
    let mut prefixed = want["groups"].clone();
    let mut urls = 0;
    for g in prefixed.as_array_mut().unwrap() {
        for r in g["rules"].as_array_mut().unwrap() {
            if let Some(url) = r["annotations"]["runbook_url"].as_str() {
                r["annotations"]["runbook_url"] = json!(format!("https://docs.example/lh/{url}"));
                urls += 1;
            }
        }
    }
    assert!(urls > 0);
    assert_eq!(based, prefixed, "runbookBaseURL prefixes every runbook_url");

    let monitors = find(&objects, "ServiceMonitor", "leasehold");
    assert_eq!(monitors.len(), 1, "one ServiceMonitor");
    let monitor = &monitors[0];
    assert_eq!(monitor["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(monitor["metadata"]["labels"]["release"], "kps");
    let service = find(&objects, "Service", "leasehold");
    assert_eq!(service.len(), 1);
    let service = service[0];
    let selector = monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .expect("matchLabels");
    assert!(!selector.is_empty());
    for (k, v) in selector {
        assert_eq!(
            &service["metadata"]["labels"][k], v,
            "the ServiceMonitor selects the Service ({k})"
        );
    }
    // Selects no other Service of the render.
    let selected = find(&objects, "Service", "")
        .into_iter()
        .filter(|s| {
            selector
                .iter()
                .all(|(k, v)| &s["metadata"]["labels"][k] == v)
        })
        .count();
    assert_eq!(selected, 1);
    assert_eq!(
        monitor["spec"]["namespaceSelector"]["matchNames"],
        json!(["leasehold"])
    );
    let endpoint = &monitor["spec"]["endpoints"][0];
    assert_eq!(endpoint["port"], service["spec"]["ports"][0]["name"]);
    assert_eq!(endpoint["path"], "/metrics");
    assert_eq!(endpoint["interval"], "15s");
}
