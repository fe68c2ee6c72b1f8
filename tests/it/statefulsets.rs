//! End-to-end scenarios on real StatefulSets: the real cluster tier (`scripts/envtest.sh` with
//! `LEASEHOLD_ENVTEST_CLUSTER=1`: kube-apiserver, etcd, kube-controller-manager, kube-scheduler
//! and kwok's fake nodes; `scripts/test-real.sh statefulsets` runs them). Elsewhere each test
//! says it skipped.
//!
//! What runs is what a user runs, but for containers: `deploy/overlays/single` applied for real;
//! Leasehold's control plane as a `leasehold serve` process with the token of the ServiceAccount
//! those manifests create (TokenRequest), so every request it makes is the real authorizer's
//! verdict on exactly what they grant; a member StatefulSet whose pods the real controllers
//! create, schedule, delete and recreate; and one `leasehold agent` process per member pod
//! following it ([`PodAgents`]), with the worker-pool example's ServiceAccount and Role, whose
//! HTTP hooks feed the work-level invariant checker (no two members working on one target).
//! The scenarios read Leasehold's state through its REST API, authenticated by the apiserver
//! (TokenReview) and authorised by RBAC (SubjectAccessReview).

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Api;
use kube::api::{EvictParams, Patch, PatchParams};
use serde_json::{Value, json};

use common::accounts::service_account_kubeconfig;
use common::eventually;
use common::invariant::{InvariantChecker, Kind};
use common::pod_agents::{AgentSpec, KUBELET_LABEL, PodAgents};

/// Set by `scripts/envtest.sh run` when the controllers and kwok run.
const CLUSTER_VAR: &str = "LEASEHOLD_TEST_CLUSTER";
const CLUSTER: &str = "c";
const TARGETS: usize = 60;
/// The member Lease duration (agents' `--lease-duration`) and the cluster's.
const LEASE_S: u64 = 3;

/// Returns from the calling test unless the real cluster tier runs.
macro_rules! cluster_tier_only {
    () => {
        if std::env::var(CLUSTER_VAR).as_deref() != Ok("1") {
            eprintln!(
                "SKIPPED: needs the real cluster tier (LEASEHOLD_ENVTEST_CLUSTER=1 scripts/envtest.sh run, \
                 or scripts/test-real.sh statefulsets)"
            );
            return;
        }
    };
}

/// The scenarios share one apiserver, the `leasehold` namespace and its control-plane Lease:
/// one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

struct Http {
    base: String,
    token: String,
    client: Client<HttpConnector, Full<Bytes>>,
}

impl Http {
    async fn call(&self, method: &str, path: &str, body: Value) -> (u16, Value) {
        self.try_call(method, path, body)
            .await
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    }

    /// One request; `Err` if it could not be made (nothing listens yet) or got no answer.
    async fn try_call(
        &self,
        method: &str,
        path: &str,
        body: Value,
    ) -> Result<(u16, Value), String> {
        let req = hyper::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base))
            .header("authorization", format!("Bearer {}", self.token))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .unwrap();
        let res = tokio::time::timeout(Duration::from_secs(20), self.client.request(req))
            .await
            .map_err(|_| "no answer within 20 s".to_owned())?
            .map_err(|e| e.to_string())?;
        let status = res.status().as_u16();
        let bytes = res
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        let v = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()));
        Ok((status, v))
    }

    async fn get(&self, path: &str) -> Value {
        let (status, v) = self.call("GET", path, Value::Null).await;
        assert_eq!(status, 200, "GET {path}: {v}");
        v
    }

    async fn cluster(&self) -> Value {
        self.get(&format!("/api/v1/clusters/{CLUSTER}")).await
    }

    /// Owned targets per instance, and whether every target is owned.
    async fn owners(&self) -> (BTreeMap<String, usize>, bool) {
        let c = self.cluster().await;
        let counts = &c["targets"];
        let all = counts["owned"] == counts["total"] && counts["total"] == TARGETS;
        let owners = c["instances"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|i| i["owned"].as_u64().unwrap_or(0) > 0)
            .map(|i| {
                (
                    i["name"].as_str().unwrap().to_owned(),
                    i["owned"].as_u64().unwrap() as usize,
                )
            })
            .collect();
        (owners, all)
    }

    /// Waits until every target is owned, by exactly `members`, each within one of a fair share.
    async fn wait_spread(&self, members: &[&str], within: Duration) -> BTreeMap<String, usize> {
        let want: BTreeSet<String> = members.iter().map(|m| (*m).to_owned()).collect();
        let fair = TARGETS / members.len();
        let got = eventually(within, || async {
            let (owners, all) = self.owners().await;
            let spread = owners.keys().cloned().collect::<BTreeSet<_>>() == want
                && owners.values().all(|n| n.abs_diff(fair) <= 1);
            (all && spread).then_some(owners)
        })
        .await;
        match got {
            Some(owners) => owners,
            None => panic!(
                "not spread over {members:?} within {within:?}: {:?}",
                self.owners().await
            ),
        }
    }

    /// Every ownership row of history (newest first).
    async fn ownership_history(&self) -> Vec<Value> {
        let mut out = Vec::new();
        let mut cursor = String::new();
        loop {
            let v = self
                .get(&format!(
                    "/api/v1/history?cluster={CLUSTER}&kind=ownership&limit=1000{cursor}"
                ))
                .await;
            out.extend(v["items"].as_array().unwrap().iter().cloned());
            match v["next_cursor"].as_str() {
                Some(c) => cursor = format!("&cursor={c}"),
                None => return out,
            }
        }
    }
}

/// One scenario's world: a fresh namespace with a member StatefulSet `c`, its agents, and
/// Leasehold's control plane as a process.
struct Scenario {
    _serial: tokio::sync::MutexGuard<'static, ()>,
    t: common::TestSim,
    ns: String,
    dir: tempfile::TempDir,
    checker: InvariantChecker,
    agents: PodAgents,
    control_plane: tokio::process::Child,
    _hooks: tokio::task::JoinHandle<()>,
    http: Http,
    /// Every planned stop's handoff gaps so far (`handed_over_before_exit`), summed up by
    /// `finish`.
    planned_gaps: std::sync::Mutex<Vec<Duration>>,
}

impl Drop for Scenario {
    fn drop(&mut self) {
        let _ = self.control_plane.start_kill();
    }
}

/// kubectl (as the admin user): its stdout, whether it succeeded or not (for polling).
async fn kubectl_stdout(t: &common::TestSim, args: &[&str]) -> String {
    String::from_utf8_lossy(&t.kubectl(args).await.stdout).into_owned()
}

/// kubectl (as the admin user), panicking with kubectl's words if it fails.
async fn kubectl_ok(t: &common::TestSim, args: &[&str]) {
    let out = t.kubectl(args).await;
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `kubectl apply` of `yaml` (as the admin user), panicking with kubectl's words if it fails.
async fn apply(t: &common::TestSim, args: &[&str], yaml: &str) {
    let mut all = vec!["apply"];
    all.extend_from_slice(args);
    let out = t.kubectl_stdin(&all, yaml).await;
    assert!(
        out.status.success(),
        "kubectl apply {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `deploy/overlays/single` applied for real, as its README says (the worker-pool example
/// first: the overlay manages its namespace; the tier's PersistentVolumes take its claim),
/// once per apiserver.
async fn install_leasehold(t: &common::TestSim) {
    let examples = repo().join("deploy/examples/worker-pool");
    let single = repo().join("deploy/overlays/single");
    for dir in [&examples, &single] {
        kubectl_ok(t, &["apply", "-k", dir.to_str().unwrap()]).await;
    }
}

fn statefulset(ns: &str, replicas: i32) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": CLUSTER, "namespace": ns},
        "spec": {
            "replicas": replicas,
            "serviceName": CLUSTER,
            "selector": {"matchLabels": {"app": CLUSTER}},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}},
            "template": {
                "metadata": {"labels": {"app": CLUSTER, KUBELET_LABEL.0: KUBELET_LABEL.1}},
                "spec": {
                    "serviceAccountName": "worker",
                    "terminationGracePeriodSeconds": 30,
                    // kwok's nodes are gone from the scheduler's view when NotReady; the
                    // node lifecycle controller evicts after these (the default is 300 s).
                    "tolerations": [
                        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5},
                        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5}
                    ],
                    "containers": [{"name": "collector", "image": "example.com/collector:1.0"}]
                }
            }
        }
    })
}

impl Scenario {
    /// The member StatefulSet with `replicas` pods, every target placed over them.
    async fn start(replicas: i32) -> Scenario {
        let serial = SERIAL.lock().await;
        let t = common::start().await;
        assert!(t.is_real(), "the cluster tier is a real apiserver");
        let ns = t.ns.clone();
        let dir = tempfile::tempdir().unwrap();
        install_leasehold(&t).await;

        // What the control plane may do here (deploy/managed-namespace), and the members'
        // ServiceAccount and Role (the worker-pool example's, in this namespace).
        let role = repo().join("deploy/managed-namespace/role.yaml");
        kubectl_ok(&t, &["apply", "-n", &ns, "-f", role.to_str().unwrap()]).await;
        let rbac = std::fs::read_to_string(repo().join("deploy/examples/worker-pool/rbac.yaml"))
            .unwrap()
            .replace("namespace: workers", &format!("namespace: {ns}"));
        apply(&t, &["-f", "-"], &rbac).await;
        // Their Lease traffic at Leasehold's members' priority level (the example's
        // FlowSchema, named and scoped for this namespace).
        let flow =
            std::fs::read_to_string(repo().join("deploy/examples/worker-pool/flowschema.yaml"))
                .unwrap()
                .replace("workers", &ns);
        apply(&t, &["-f", "-"], &flow).await;
        let service = json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": CLUSTER, "namespace": ns},
            "spec": {"clusterIP": "None", "selector": {"app": CLUSTER}, "ports": [{"port": 8080}]}});
        apply(&t, &["-f", "-"], &service.to_string()).await;

        // The invariant checker's app, reached by the agents' HTTP hooks.
        let checker = InvariantChecker::new();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let hook_url = format!("http://{}/hooks", listener.local_addr().unwrap());
        let app = checker.http_app();
        let hooks = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        let member_kc = service_account_kubeconfig(&t, &ns, "worker", dir.path()).await;
        let args: Vec<String> = [
            "agent",
            "--cluster",
            CLUSTER,
            "--namespace",
            &ns,
            "--hook-url",
            &hook_url,
            "--lease-duration",
            &LEASE_S.to_string(),
            "--hook-timeout",
            "1",
            "--drain-timeout",
            "10",
            "--kubeconfig",
            member_kc.to_str().unwrap(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let agents = PodAgents::start(
            t.client.clone(),
            &ns,
            AgentSpec {
                args,
                log_dir: dir.path().to_owned(),
            },
            checker.clone(),
        );
        apply(&t, &["-f", "-"], &statefulset(&ns, replicas).to_string()).await;

        // The control plane, as the overlay's ServiceAccount.
        let cp_kc = service_account_kubeconfig(&t, "leasehold", "leasehold", dir.path()).await;
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let targets: Vec<String> = (0..TARGETS).map(|i| format!("t-{i:03}")).collect();
        let config = format!(
            "database: sqlite:{db}
control_plane: {{namespace: leasehold, lease_name: leasehold-control-plane, lease_duration: 4s}}
http: {{listen: 127.0.0.1:{port}, auth: {{mode: kubernetes}}}}
clusters:
- name: {CLUSTER}
  namespace: {ns}
  selector: {{app: {CLUSTER}}}
  headless_service: {CLUSTER}
  targets: {{inline: [{list}]}}
  policy: {{lease_duration: {LEASE_S}s, on_join: auto, join_settle: 2s, move_timeout: 6s, max_concurrent_moves: 8}}
",
            db = dir.path().join("history.db").display(),
            list = targets.join(", "),
        );
        let config_path = dir.path().join("leasehold.yaml");
        std::fs::write(&config_path, config).unwrap();
        let cp_log = std::fs::File::create(dir.path().join("serve.log")).unwrap();
        let control_plane = tokio::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
            .args(["serve", "--identity", "cp-a", "--config"])
            .arg(&config_path)
            .arg("--kubeconfig")
            .arg(&cp_kc)
            .env("RUST_LOG", "info")
            .stdout(std::process::Stdio::null())
            .stderr(cp_log)
            .kill_on_drop(true)
            .spawn()
            .expect("leasehold serve starts");
        let http = Http {
            base: format!("http://127.0.0.1:{port}"),
            token: t.admin_token(),
            client: Client::builder(TokioExecutor::new()).build_http(),
        };
        let s = Scenario {
            _serial: serial,
            t,
            ns,
            dir,
            checker,
            agents,
            control_plane,
            _hooks: hooks,
            http,
            planned_gaps: Default::default(),
        };
        let ready = eventually(Duration::from_secs(30), || async {
            let (status, _) = s.http.try_call("GET", "/readyz", Value::Null).await.ok()?;
            (status == 200).then_some(())
        })
        .await;
        if ready.is_none() {
            panic!("leasehold serve never ready:\n{}", s.serve_log());
        }
        let members: Vec<String> = (0..replicas).map(|i| format!("{CLUSTER}-{i}")).collect();
        let members: Vec<&str> = members.iter().map(String::as_str).collect();
        s.http.wait_spread(&members, Duration::from_secs(60)).await;
        s
    }

    fn serve_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("serve.log")).unwrap_or_default()
    }

    async fn scale(&self, replicas: i32) {
        let sts: Api<StatefulSet> = Api::namespaced(self.t.client.clone(), &self.ns);
        sts.patch(
            CLUSTER,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": replicas}})),
        )
        .await
        .unwrap();
    }

    /// Waits until exactly `names` have member processes running.
    async fn wait_running(&self, names: &[&str], within: Duration) {
        let want: BTreeSet<String> = names.iter().map(|n| (*n).to_owned()).collect();
        eventually(within, || async {
            (self
                .agents
                .running()
                .keys()
                .cloned()
                .collect::<BTreeSet<_>>()
                == want)
                .then_some(())
        })
        .await
        .unwrap_or_else(|| {
            panic!(
                "member processes {:?}, not {want:?}, after {within:?}",
                self.agents.running()
            )
        });
    }

    /// For every target `leaver` worked on when its pod was deleted: it stopped working on it
    /// and released it before its process exited, and another member took it over within a
    /// second. Returns the longest gap between a release and the next start of work.
    ///
    /// The process does not wait for its successors to start: once it has released a target
    /// it can do nothing more for it (if the successor fails, the control plane picks
    /// another), so "moved before the stop" means handed over — work stopped, Lease released
    /// to a successor the control plane named — before the exit.
    async fn handed_over_before_exit(&self, leaver: &str) -> Duration {
        let exit = self
            .agents
            .exits()
            .into_iter()
            .rfind(|e| e.pod == leaver)
            .unwrap_or_else(|| panic!("{leaver} never exited"));
        assert!(
            !exit.killed,
            "{leaver} was killed, not exited:\n{}",
            self.agents.log(leaver)
        );
        let terminated = exit.terminated_at.expect("its pod was deleted").into_std();
        let exited = exit.exited_at.into_std();
        let log = self.checker.log();
        let held: BTreeSet<String> = log
            .iter()
            .filter(|r| r.member == leaver && r.at <= terminated)
            .fold(BTreeMap::new(), |mut m, r| {
                m.insert(r.target.clone(), r.kind == Kind::Acquired);
                m
            })
            .into_iter()
            .filter_map(|(t, working)| working.then_some(t))
            .collect();
        assert!(!held.is_empty(), "{leaver} held nothing when stopped");
        // Successors start within the handoff gap of each release: give the last ones time.
        eventually(Duration::from_secs(2), || async {
            held.iter()
                .all(|t| {
                    self.checker.log_of(t).iter().any(|r| {
                        r.member != leaver && r.kind == Kind::Acquired && r.at >= terminated
                    })
                })
                .then_some(())
        })
        .await;
        let mut longest = Duration::ZERO;
        for target in &held {
            let records = self.checker.log_of(target);
            let ended = records
                .iter()
                .find(|r| r.member == leaver && r.kind != Kind::Acquired && r.at >= terminated)
                .unwrap_or_else(|| panic!("{target}: {leaver} never stopped working: {records:?}"));
            assert!(
                ended.kind == Kind::Released && ended.at <= exited,
                "{target}: {leaver} did not release it before its process exited: {records:?}"
            );
            let next = records
                .iter()
                .find(|r| r.member != leaver && r.kind == Kind::Acquired && r.at >= ended.at)
                .unwrap_or_else(|| panic!("{target}: nobody took it after {leaver}: {records:?}"));
            let gap = next.at.duration_since(ended.at);
            assert!(
                gap < Duration::from_secs(1),
                "{target}: {gap:?} without a worker after {leaver}"
            );
            longest = longest.max(gap);
            self.planned_gaps
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(gap);
        }
        eprintln!(
            "{leaver}: {} targets handed over before its process exited ({:?} after SIGTERM); longest gap {longest:?}",
            held.len(),
            exited.duration_since(terminated)
        );
        longest
    }

    /// Waits until every target is spread over c-0, c-1 and c-2 again.
    async fn spread_over_three(&self) {
        self.http
            .wait_spread(&["c-0", "c-1", "c-2"], Duration::from_secs(60))
            .await;
    }

    /// Waits (30 s at most) until the process of `pod` has exited.
    async fn exited(&self, pod: &str) {
        eventually(Duration::from_secs(30), || async {
            self.agents
                .exits()
                .iter()
                .any(|e| e.pod == pod)
                .then_some(())
        })
        .await
        .unwrap_or_else(|| panic!("{pod}'s process never exits"));
    }

    async fn finish(self) {
        self.checker.assert_ok();
        let mut gaps = std::mem::take(
            &mut *self
                .planned_gaps
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        if !gaps.is_empty() {
            gaps.sort_unstable();
            let at = |p: usize| gaps[(gaps.len() * p / 100).min(gaps.len() - 1)];
            eprintln!(
                "planned stops: {} targets handed over, gap p50 {:?} / p99 {:?} / max {:?}",
                gaps.len(),
                at(50),
                at(99),
                gaps[gaps.len() - 1]
            );
        }
        // FlowSchemas are cluster-wide: the namespace's deletion does not take this one.
        let name = format!("flowschema/leasehold-members-{}", self.ns);
        kubectl_ok(&self.t, &["delete", &name, "--ignore-not-found"]).await;
    }

    /// The API server's priority and fairness put the members' Lease traffic and the control
    /// plane's election at `leasehold-members`, the rest of the control plane's requests at
    /// `leasehold-control-plane` (deploy/base/flowcontrol.yaml): read from its
    /// `apiserver_flowcontrol_dispatched_requests_total`.
    async fn assert_own_priority_levels(&self) {
        let req = http::Request::get("/metrics").body(Vec::new()).unwrap();
        let text = self
            .t
            .client
            .request_text(req)
            .await
            .expect("apiserver /metrics");
        let dispatched = |schema: &str, level: &str| -> f64 {
            let labels = format!("flow_schema=\"{schema}\",priority_level=\"{level}\"");
            text.lines()
                .filter(|l| l.starts_with("apiserver_flowcontrol_dispatched_requests_total{"))
                .filter(|l| l.contains(&labels))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum()
        };
        let members = format!("leasehold-members-{}", self.ns);
        for (schema, level) in [
            (members.as_str(), "leasehold-members"),
            ("leasehold-control-plane-election", "leasehold-members"),
            ("leasehold-control-plane", "leasehold-control-plane"),
        ] {
            let n = dispatched(schema, level);
            eprintln!("priority and fairness: {n} requests by flow schema {schema} at {level}");
            assert!(
                n > 0.0,
                "no request by flow schema {schema} at priority level {level}"
            );
        }
    }
}

/// The overlays' Deployment becomes Available on real controllers (kwok runs its pods): `single`,
/// then `ha` over it (two replicas on two nodes). The ServiceAccount they create may do what
/// Leasehold does and nothing more: RBAC refuses it a Secret, a pod deletion, a Lease outside
/// the namespaces it manages and any cluster-wide list.
#[tokio::test]
async fn the_overlay_installs_for_real_and_grants_only_what_leasehold_uses() {
    cluster_tier_only!();
    let _serial = SERIAL.lock().await;
    let t = common::start().await;
    install_leasehold(&t).await;
    let available = eventually(Duration::from_secs(60), || async {
        let status = kubectl_stdout(
            &t,
            &[
                "-n",
                "leasehold",
                "get",
                "deployment",
                "leasehold",
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Available\")].status}",
            ],
        )
        .await;
        (status == "True").then_some(())
    })
    .await;
    assert!(
        available.is_some(),
        "the Deployment never became Available: {}",
        kubectl_stdout(
            &t,
            &["-n", "leasehold", "describe", "deployment", "leasehold"]
        )
        .await
    );
    // The ha overlay over it, as docs/getting-started.md applies it (the database Secret
    // first): two replicas, Available, on different nodes (its anti-affinity).
    kubectl_ok(
        &t,
        &[
            "-n",
            "leasehold",
            "create",
            "secret",
            "generic",
            "leasehold-database",
            "--from-literal=url=postgres://leasehold:PASSWORD@postgres.db.svc:5432/leasehold",
        ],
    )
    .await;
    let ha = repo().join("deploy/overlays/ha");
    kubectl_ok(&t, &["apply", "-k", ha.to_str().unwrap()]).await;
    // Both replicas available; then on two nodes. The anti-affinity is a preference (a
    // requirement would wedge a rollout on a two-node cluster), so a scheduler that had one
    // node to offer at the moment (a node briefly NotReady on a loaded machine) may pair
    // them: a pod deleted then is placed again by the preference, with the other node free.
    let mut placements = Vec::new();
    let mut spread = false;
    for _ in 0..3 {
        let pods = eventually(Duration::from_secs(120), || async {
            let replicas = kubectl_stdout(
                &t,
                &["-n", "leasehold", "get", "deployment", "leasehold", "-o",
                  "jsonpath={.status.availableReplicas} {.status.updatedReplicas} {.status.replicas}"],
            )
            .await;
            if replicas != "2 2 2" {
                return None;
            }
            let pods: Vec<(String, String)> = kubectl_stdout(
                &t,
                &[
                    "-n",
                    "leasehold",
                    "get",
                    "pods",
                    "-l",
                    "app.kubernetes.io/component=control-plane",
                    "--field-selector=status.phase=Running",
                    "-o",
                    "jsonpath={range .items[*]}{.metadata.name} {.spec.nodeName} {.metadata.deletionTimestamp}{\"\\n\"}{end}",
                ],
            )
            .await
            .lines()
            // Not terminating: no deletion timestamp after the node.
            .filter_map(|l| match l.split_whitespace().collect::<Vec<_>>()[..] {
                [p, n] => Some((p.to_owned(), n.to_owned())),
                _ => None,
            })
            .collect();
            (pods.len() == 2).then_some(pods)
        })
        .await;
        let Some(pods) = pods else { break };
        placements.push(pods.clone());
        if pods[0].1 != pods[1].1 {
            spread = true;
            break;
        }
        kubectl_ok(
            &t,
            &[
                "-n",
                "leasehold",
                "delete",
                "pod",
                &pods[0].0,
                "--wait=false",
            ],
        )
        .await;
    }
    assert!(
        spread,
        "the ha overlay's Deployment never had 2 replicas available on 2 nodes (placements \
         seen: {placements:?}):\n{}\n{}\n{}\n{}",
        kubectl_stdout(&t, &["get", "nodes", "-o", "wide"]).await,
        kubectl_stdout(
            &t,
            &[
                "-n",
                "leasehold",
                "get",
                "pods",
                "-o",
                "wide",
                "--show-labels"
            ]
        )
        .await,
        kubectl_stdout(
            &t,
            &["-n", "leasehold", "describe", "deployment", "leasehold"]
        )
        .await,
        kubectl_stdout(
            &t,
            &[
                "-n",
                "leasehold",
                "get",
                "events",
                "--sort-by=.lastTimestamp"
            ]
        )
        .await
    );
    kubectl_ok(
        &t,
        &["-n", "leasehold", "delete", "secret", "leasehold-database"],
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let kc = service_account_kubeconfig(&t, "leasehold", "leasehold", dir.path()).await;
    let can = |args: &'static [&'static str]| {
        let kc = kc.clone();
        async move {
            let out = tokio::process::Command::new(common::kubectl_path())
                .arg("--kubeconfig")
                .arg(&kc)
                .args(["auth", "can-i"])
                .args(args)
                .output()
                .await
                .unwrap();
            String::from_utf8_lossy(&out.stdout).trim() == "yes"
        }
    };
    // What it uses.
    for args in [
        &["watch", "pods", "-n", "workers"][..],
        &["list", "endpointslices.discovery.k8s.io", "-n", "workers"],
        &["update", "leases.coordination.k8s.io", "-n", "workers"],
        &["delete", "leases.coordination.k8s.io", "-n", "workers"],
        &["get", "configmaps", "-n", "workers"],
        &[
            "update",
            "leases.coordination.k8s.io/leasehold-control-plane",
            "-n",
            "leasehold",
        ],
        &["create", "tokenreviews.authentication.k8s.io"],
        &["create", "subjectaccessreviews.authorization.k8s.io"],
        &["create", "events.events.k8s.io", "-n", "leasehold"],
    ] {
        assert!(can(args).await, "leasehold may not {args:?}");
    }
    // Nothing more.
    for args in [
        &["get", "secrets", "-n", "workers"][..],
        &["get", "secrets", "-n", "leasehold"],
        &["delete", "pods", "-n", "workers"],
        &["update", "leases.coordination.k8s.io", "-n", "kube-system"],
        &[
            "update",
            "leases.coordination.k8s.io/someone-else",
            "-n",
            "leasehold",
        ],
        &["list", "pods", "--all-namespaces"],
        &["create", "pods", "-n", "workers"],
        &["patch", "statefulsets.apps", "-n", "workers"],
    ] {
        assert!(!can(args).await, "leasehold may {args:?}");
    }
    // And the apiserver, not only `can-i`, refuses it.
    let refused = tokio::process::Command::new(common::kubectl_path())
        .arg("--kubeconfig")
        .arg(&kc)
        .args(["-n", "workers", "get", "secrets"])
        .output()
        .await
        .unwrap();
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("forbidden"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
}

/// Scaled 3 → 5, the new members get their share (join policy `auto`) and nobody works on a
/// target twice; scaled 5 → 3, the StatefulSet controller deletes c-4 then c-3, and each leaving
/// member's targets move to the others before its process exits.
#[tokio::test]
async fn a_statefulset_scaled_up_shares_and_scaled_down_hands_over_before_exit() {
    cluster_tier_only!();
    let s = Scenario::start(3).await;
    s.scale(5).await;
    s.wait_running(
        &["c-0", "c-1", "c-2", "c-3", "c-4"],
        Duration::from_secs(60),
    )
    .await;
    let started = Instant::now();
    let owners = s
        .http
        .wait_spread(
            &["c-0", "c-1", "c-2", "c-3", "c-4"],
            Duration::from_secs(60),
        )
        .await;
    eprintln!(
        "3 -> 5: spread {owners:?} {:?} after the fifth member ran",
        started.elapsed()
    );

    let before = s.agents.exits().len();
    s.scale(3).await;
    s.wait_running(&["c-0", "c-1", "c-2"], Duration::from_secs(90))
        .await;
    let exits = s.agents.exits();
    let order: Vec<&str> = exits[before..].iter().map(|e| e.pod.as_str()).collect();
    assert_eq!(
        order,
        ["c-4", "c-3"],
        "highest ordinal first, one at a time"
    );
    let longest = s
        .handed_over_before_exit("c-4")
        .await
        .max(s.handed_over_before_exit("c-3").await);
    eprintln!("5 -> 3: longest gap in a handoff {longest:?}");
    s.http
        .wait_spread(&["c-0", "c-1", "c-2"], Duration::from_secs(30))
        .await;
    let history = s.http.ownership_history().await;
    for leaver in ["c-3", "c-4"] {
        let away: Vec<&Value> = history.iter().filter(|r| r["from"] == leaver).collect();
        assert!(!away.is_empty(), "history has nothing leaving {leaver}");
        assert!(
            away.iter().all(|r| r["cause"] == "handoff"),
            "{leaver} stopped on purpose: every move away is a handoff: {away:?}"
        );
    }
    s.assert_own_priority_levels().await;
    s.finish().await;
}

/// A member pod deleted is recreated by the StatefulSet controller with the same name (a new
/// UID): its targets were handed over before the old process exited, the new process joins
/// under the same identity, no ghost is left, nobody worked on a target twice, and history
/// says what happened.
#[tokio::test]
async fn a_member_pod_recreated_by_its_statefulset_leaves_no_ghost() {
    cluster_tier_only!();
    let s = Scenario::start(3).await;
    let pods: Api<Pod> = Api::namespaced(s.t.client.clone(), &s.ns);
    let old = pods.get("c-1").await.unwrap();
    let old_uid = old.metadata.uid.clone().unwrap();
    let old_ip = old.status.and_then(|st| st.pod_ip);
    pods.delete("c-1", &Default::default()).await.unwrap();
    let new = eventually(Duration::from_secs(60), || async {
        let p = pods.get("c-1").await.ok()?;
        let runs = p.status.as_ref()?.phase.as_deref() == Some("Running");
        (p.metadata.uid.as_deref() != Some(old_uid.as_str()) && runs).then_some(p)
    })
    .await
    .expect("the StatefulSet controller recreates c-1");
    let new_ip = new.status.and_then(|st| st.pod_ip);
    eprintln!("c-1 recreated: ip {old_ip:?} -> {new_ip:?}");
    s.handed_over_before_exit("c-1").await;
    let exits = s.agents.exits();
    assert_eq!(
        exits
            .iter()
            .map(|e| (e.pod.as_str(), e.uid.as_str()))
            .collect::<Vec<_>>(),
        [("c-1", old_uid.as_str())],
        "only the old c-1's process exited"
    );
    s.spread_over_three().await;
    let started: Vec<(String, String)> = s.agents.started();
    assert_eq!(
        started.iter().filter(|(p, _)| p == "c-1").count(),
        2,
        "one process per pod UID: {started:?}"
    );
    let c = s.http.cluster().await;
    let instances: Vec<&str> = c["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["name"].as_str().unwrap())
        .collect();
    assert_eq!(instances, ["c-0", "c-1", "c-2"], "no ghost, no duplicate");
    assert!(
        c["instances"]
            .as_array()
            .unwrap()
            .iter()
            .all(|i| i["ghost"] == false && i["ready"] == true),
        "{c}"
    );
    // History: c-1's targets left as handoffs, and it got a share again.
    let history = s.http.ownership_history().await;
    assert!(
        history
            .iter()
            .any(|r| r["from"] == "c-1" && r["cause"] == "handoff")
    );
    let newest_to_c1 = history.iter().find(|r| r["to"] == "c-1").unwrap();
    assert!(
        newest_to_c1["cause"] == "rebalance",
        "the recreated member got its share back by a rebalance: {newest_to_c1}"
    );
    let events = s
        .http
        .get(&format!(
            "/api/v1/history?cluster={CLUSTER}&kind=instance&instance=c-1&limit=100"
        ))
        .await;
    let kinds: Vec<&str> = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert!(
        kinds.contains(&"left") && kinds.contains(&"joined"),
        "{kinds:?}"
    );
    s.finish().await;
}

/// A rolling update of the member StatefulSet (`maxUnavailable: 1`, its feature gate on in this
/// tier): first only c-2 (partition 2), then the rest. The controller replaces one pod at a
/// time, highest ordinal first, waiting for each to be Ready; every replaced member hands its
/// targets over before its process exits.
#[tokio::test]
async fn a_rolling_update_replaces_members_one_at_a_time_without_a_lost_target() {
    cluster_tier_only!();
    let s = Scenario::start(3).await;
    let sts: Api<StatefulSet> = Api::namespaced(s.t.client.clone(), &s.ns);
    let roll = |partition: i32, version: &'static str| {
        let sts = sts.clone();
        async move {
            sts.patch(
                CLUSTER,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {
                    "updateStrategy": {"rollingUpdate": {"partition": partition, "maxUnavailable": 1}},
                    "template": {"metadata": {"annotations": {"example.com/version": version}}}
                }})),
            )
            .await
            .unwrap();
        }
    };
    let updated = |want: i32| {
        let sts = sts.clone();
        async move {
            eventually(Duration::from_secs(120), || async {
                let st = sts.get(CLUSTER).await.ok()?.status?;
                (st.updated_replicas == Some(want) && st.ready_replicas == Some(3)).then_some(())
            })
            .await
            .unwrap_or_else(|| panic!("{want} pods never updated and ready"))
        }
    };
    roll(2, "2").await;
    updated(1).await;
    let replaced: Vec<String> = s.agents.exits().iter().map(|e| e.pod.clone()).collect();
    assert_eq!(replaced, ["c-2"], "partition 2: only c-2");
    s.handed_over_before_exit("c-2").await;
    s.spread_over_three().await;
    roll(0, "2").await;
    updated(3).await;
    let replaced: Vec<String> = s.agents.exits().iter().map(|e| e.pod.clone()).collect();
    assert_eq!(replaced, ["c-2", "c-1", "c-0"]);
    for m in ["c-1", "c-0"] {
        s.handed_over_before_exit(m).await;
    }
    s.spread_over_three().await;
    s.finish().await;
}

/// Evictions honour the member PodDisruptionBudget (maxUnavailable 1): the first is granted and
/// its member hands over before exiting; a second, while the first pod is not back, is refused
/// (429); once it is back, the second is granted.
#[tokio::test]
async fn evictions_honour_the_pod_disruption_budget() {
    cluster_tier_only!();
    let s = Scenario::start(3).await;
    let pdb = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": CLUSTER, "namespace": s.ns},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": CLUSTER}}}});
    apply(&s.t, &["-f", "-"], &pdb.to_string()).await;
    // kube's client retries a 429 (the refusal under test) by default: not this one.
    let mut config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&s.t.kubeconfig).unwrap(),
        &Default::default(),
    )
    .await
    .unwrap();
    config.default_retry = false;
    let pods: Api<Pod> = Api::namespaced(kube::Client::try_from(config).unwrap(), &s.ns);
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(s.t.client.clone(), &s.ns);
    // As `kubectl drain` would: once the disruption controller has counted the pods, one
    // disruption is allowed.
    let allows_one = || async {
        eventually(Duration::from_secs(30), || async {
            let pdb = pdbs.get(CLUSTER).await.ok()?;
            let status = pdb.status?;
            (status.observed_generation == pdb.metadata.generation
                && status.disruptions_allowed == 1)
                .then_some(())
        })
        .await
        .expect("the PodDisruptionBudget never allows one disruption");
    };
    allows_one().await;
    pods.evict("c-0", &EvictParams::default())
        .await
        .expect("the first eviction is granted");
    match pods.evict("c-1", &EvictParams::default()).await {
        Err(kube::Error::Api(e)) => assert_eq!(e.code, 429, "{e:?}"),
        other => panic!("a second eviction while c-0 is away: {other:?}"),
    }
    s.exited("c-0").await;
    s.handed_over_before_exit("c-0").await;
    s.spread_over_three().await;
    allows_one().await;
    pods.evict("c-1", &EvictParams::default())
        .await
        .expect("the second eviction is granted once c-0 is back");
    s.exited("c-1").await;
    s.handed_over_before_exit("c-1").await;
    s.spread_over_three().await;
    s.finish().await;
}

/// A node loses power: its kwok (its kubelet) and its member processes are killed. Leasehold
/// fails their targets over from the member Leases within D plus a second of their last
/// renewal; the node lifecycle controller, once the node's Lease is stale, marks its pods not
/// ready.
#[tokio::test]
async fn a_node_that_dies_has_its_members_targets_failed_over_within_the_bound() {
    cluster_tier_only!();
    let s = Scenario::start(3).await;
    let running = s.agents.running();
    // The node stays dead for the other scenarios on this cluster: pick one that hosts a member
    // but none of Leasehold's own pods (deploy/overlays), which they need Available.
    let control_plane: BTreeSet<String> = Api::<Pod>::namespaced(s.t.client.clone(), "leasehold")
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|p| p.spec?.node_name)
        .collect();
    let victim_node = running
        .values()
        .flatten()
        .find(|n| !control_plane.contains(*n))
        .cloned()
        .unwrap_or_else(|| {
            panic!(
                "every member shares a node with Leasehold's pods: {running:?}, {control_plane:?}"
            )
        });
    let victims: Vec<String> = running
        .iter()
        .filter(|(_, n)| n.as_deref() == Some(victim_node.as_str()))
        .map(|(p, _)| p.clone())
        .collect();
    let survivors: Vec<String> = running
        .keys()
        .filter(|p| !victims.contains(p))
        .cloned()
        .collect();
    assert!(
        !survivors.is_empty(),
        "every member is on {victim_node}: {running:?}"
    );
    // kwok runs one process per node (scripts/envtest.sh, DIR/pids beside the kubeconfig):
    // killed, the node stops renewing its Lease.
    let pids = common::real_kubeconfig().unwrap().with_file_name("pids");
    let pids = std::fs::read_to_string(&pids).unwrap();
    let kwok = pids
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{victim_node} ")))
        .unwrap_or_else(|| panic!("no kwok process for {victim_node} in {pids}"))
        .to_owned();
    let ok = std::process::Command::new("kill")
        .args(["-KILL", &kwok])
        .status()
        .unwrap();
    assert!(ok.success());
    let killed = Instant::now();
    for v in &victims {
        assert!(s.agents.kill(v), "{v} runs");
    }
    let survivors: Vec<&str> = survivors.iter().map(String::as_str).collect();
    let spread = eventually(Duration::from_secs(30), || async {
        let (owners, all) = s.http.owners().await;
        (all && owners.keys().all(|o| survivors.contains(&o.as_str()))).then_some(owners)
    })
    .await
    .unwrap_or_else(|| {
        panic!(
            "{victims:?}'s targets not failed over: {:?}",
            s.checker.violations()
        )
    });
    let took = killed.elapsed();
    eprintln!(
        "node {victim_node} died with {victims:?}: all {TARGETS} targets on {spread:?} {took:?} after the kill"
    );
    assert!(
        took <= Duration::from_secs(LEASE_S + 1),
        "failover took {took:?}: the bound is D + 1 s after the last renewal, which came before the kill"
    );
    // The node lifecycle controller then marks the node and its pods.
    let pods: Api<Pod> = Api::namespaced(s.t.client.clone(), &s.ns);
    let v0 = victims[0].clone();
    let unready = eventually(Duration::from_secs(60), || async {
        let p = pods.get(&v0).await.ok()?;
        let ready = p
            .status?
            .conditions?
            .into_iter()
            .find(|c| c.type_ == "Ready")?;
        (ready.status != "True").then_some(())
    })
    .await;
    assert!(
        unready.is_some(),
        "{v0} never marked not ready after its node died"
    );
    s.finish().await;
}

/// The cluster's namespace deleted: the namespace controller deletes the pods (their members
/// hand over and exit), the StatefulSet and the Leases, and the namespace is gone. Leasehold
/// keeps running and shows the cluster empty; history keeps what happened.
#[tokio::test]
async fn the_cluster_namespace_deleted_is_followed_to_the_end() {
    cluster_tier_only!();
    let s = Scenario::start(3).await;
    let nss: Api<Namespace> = Api::all(s.t.client.clone());
    nss.delete(&s.ns, &Default::default()).await.unwrap();
    let gone = eventually(Duration::from_secs(120), || async {
        matches!(nss.get_opt(&s.ns).await, Ok(None)).then_some(())
    })
    .await;
    assert!(gone.is_some(), "the namespace never went away");
    // Every member was told to stop by its pod's deletion, handed over and exited (none had to
    // be killed); with the namespace gone, so are the StatefulSet, the pods and the Leases.
    assert!(s.agents.running().is_empty(), "{:?}", s.agents.running());
    let exits = s.agents.exits();
    assert_eq!(exits.len(), 3, "{exits:?}");
    assert!(
        exits.iter().all(|e| !e.killed && e.terminated_at.is_some()),
        "{exits:?}"
    );
    let empty = eventually(Duration::from_secs(30), || async {
        let c = s.http.cluster().await;
        (c["instances"].as_array()?.is_empty() && c["targets"]["owned"] == 0).then_some(c)
    })
    .await;
    assert!(
        empty.is_some(),
        "the cluster is not shown empty: {}",
        s.http.cluster().await
    );
    let (status, _) = s.http.call("GET", "/healthz", Value::Null).await;
    assert_eq!(
        status,
        200,
        "leasehold serve keeps running:\n{}",
        s.serve_log()
    );
    let history = s.http.ownership_history().await;
    assert!(
        history.len() >= TARGETS,
        "history keeps the placements: {}",
        history.len()
    );
    s.finish().await;
}
