//! Leasehold under API-server pressure, on the real tier only (a real kube-apiserver + etcd:
//! `scripts/test-real.sh pressure`); on the simulator the test says it skipped (the slowness it
//! needs is the real server's admission chain).
//!
//! What runs is what a user runs: `leasehold serve` and four `leasehold agent` members
//! as processes with ServiceAccount tokens from the TokenRequest API, with
//! `deploy/`'s RBAC and API Priority and Fairness objects applied (the control plane's
//! FlowSchemas and priority levels from `deploy/base`, the members' FlowSchema from the
//! worker-pool example), so every request they make is classified and authorised by the real
//! server. The agents' HTTP hooks feed the work-level invariant checker.
//!
//! How the server is made slow (`common::slow_policy`, shared with `benches/protocol_load.rs
//! --overload`): a shared validating admission webhook — a policy engine with a
//! fixed capacity ([`SlowPolicy`]: a few workers, a fixed time per review) that matches
//! ConfigMap and Lease writes in the members' namespace and in another tenant's — and load from
//! that other tenant (its own ServiceAccount, at the built-in `workload-low` level): many
//! ConfigMap writes at once. Reviews queue at the webhook, and every write it matches waits its
//! turn, member renewals included: API Priority and Fairness hands out seats, it cannot speed
//! up admission (docs/security.md). Unloaded, a review takes the webhook's service time.
//!
//! Asserts: renewals were really late (members' Leases unchanged for more than `D`, which
//! would fail them over were it not for the mass-lapse rule), no failover of a healthy member
//! and no other move, no two members working on one target, the cluster shown degraded (API
//! field, metric) within `2D` of the server turning slow and cleared within `2D` of its
//! recovery, a member SIGKILLed during the slow period failed over within `4D/3` + 1 s of the
//! recovery (docs/protocol.md, "Mass lapse"), the `MassLapse` Events when the control loop lived
//! the lapse, and the members' and control plane's requests dispatched at Leasehold's priority
//! levels. Two scenarios: the server slow for everything at once, and slow for the control
//! plane's watch probes first (its model stale before any member is late).

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::PostParams;
use kube::runtime::{WatchStreamExt as _, watcher};
use leasehold::model::Cause;
use leasehold::store::{HistoryKind, HistoryQuery, Store};
use serde_json::{Value, json};

use common::accounts::service_account_kubeconfig;
use common::eventually;
use common::invariant::InvariantChecker;
use common::slow_policy::{SlowPolicy, Tenant, Webhook, apply, cover};

const CLUSTER: &str = "c";
const MEMBERS: [&str; 4] = ["c-0", "c-1", "c-2", "c-3"];
/// The member killed during the slow period.
const VICTIM: &str = "c-3";
const TARGETS: usize = 60;
/// The member Lease duration `D` (agents' `--lease-duration`, the cluster's `lease_duration`):
/// the shortest whole number of seconds whose third fits the agents' 1 s hook timeout.
const LEASE_S: u64 = 3;
/// The webhook's workers and time per review: 80 reviews/s, far above what Leasehold writes
/// here in steady state (about 5/s) and enough for the members' burst after a lapse (each
/// acquires its targets again with a new term: 45 writes, about half a second), far below the
/// other tenant's load. (At 30/s the burst delayed renewals past `D/3 + D/10` again after some
/// recoveries, a second lapse, and the dead member's failover came 3.8-4.5 s after recovery,
/// close to the bound.)
const WEBHOOK_WORKERS: usize = 4;
const WEBHOOK_SERVICE: Duration = Duration::from_millis(50);
/// The other tenant's writes in flight at once (all at `workload-low`, whose 200-odd seats
/// take them): a queue of about 200 reviews at the webhook, so each write it matches waits
/// about 2.5 s — more than an agent waits for one renewal (`D/3`) and than its renew deadline
/// (`2D/3`).
const LOAD_WRITERS: usize = 200;
/// In the scenario where the slow server holds the control plane's watch probes back before
/// the members' renewals, how long the webhook holds a probe's review (the control plane waits
/// 1 s for a probe write).
const PROBE_HOLD: Duration = Duration::from_secs(3);
/// How long the load lasts: several lease durations of lapse.
const SLOW_PERIOD: Duration = Duration::from_secs(12);

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

async fn client_for(kubeconfig: &Path) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(cfg).unwrap()
}

/// When each member Lease was seen renewed (its `renewTime` changed), by the admin's watch.
#[derive(Default)]
struct Renewals(Mutex<BTreeMap<String, Vec<Instant>>>);

impl Renewals {
    fn watch(self: &Arc<Self>, client: kube::Client, ns: &str) -> tokio::task::JoinHandle<()> {
        let me = self.clone();
        let leases: Api<Lease> = Api::namespaced(client, ns);
        let cfg = watcher::Config::default().labels("leasehold.io/lease-role=member");
        tokio::spawn(async move {
            let mut last: BTreeMap<String, String> = BTreeMap::new();
            let mut stream = std::pin::pin!(watcher(leases, cfg).applied_objects());
            while let Some(item) = stream.next().await {
                let Ok(lease) = item else { continue };
                let now = Instant::now();
                let Some(name) = lease.metadata.name.clone() else {
                    continue;
                };
                let renewed = lease
                    .spec
                    .and_then(|s| s.renew_time)
                    .map(|t| t.0.to_string())
                    .unwrap_or_default();
                if last.get(&name) != Some(&renewed) {
                    last.insert(name.clone(), renewed);
                    me.0.lock().unwrap().entry(name).or_default().push(now);
                }
            }
        })
    }

    /// Gaps between successive renewals of member `m` that end in `[from, to]` (the gap open at
    /// `to`, if any, counted up to `to`).
    fn gaps(&self, m: &str, from: Instant, to: Instant) -> Vec<Duration> {
        let name = leasehold::protocol::names::member_lease("leasehold", CLUSTER, m);
        let seen = self
            .0
            .lock()
            .unwrap()
            .get(&name)
            .cloned()
            .unwrap_or_default();
        let mut out: Vec<Duration> = seen
            .windows(2)
            .filter(|w| w[1] >= from && w[1] <= to)
            .map(|w| w[1] - w[0])
            .collect();
        // Not renewed since: the gap still open at `to`.
        if let Some(&last) = seen.last().filter(|&&last| last < to) {
            out.push(to - last);
        }
        out
    }
}

fn percentile(mut v: Vec<Duration>, p: f64) -> Duration {
    if v.is_empty() {
        return Duration::ZERO;
    }
    v.sort();
    let i = ((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1;
    v[i]
}

/// Leasehold's REST API and metrics (`auth: none` on loopback).
struct Leasehold {
    base: String,
    http: plain_http::Client,
}

/// A minimal HTTP/1.1 GET client over hyper (the crate's own dependencies).
mod plain_http {
    use bytes::Bytes;
    use http_body_util::{BodyExt as _, Empty};
    use hyper_util::client::legacy::connect::HttpConnector;
    use hyper_util::rt::TokioExecutor;
    use std::time::Duration;

    pub struct Client(hyper_util::client::legacy::Client<HttpConnector, Empty<Bytes>>);

    impl Client {
        pub fn new() -> Client {
            Client(hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build_http())
        }

        /// The body of a 200 answer to GET `url`, or why there is none.
        pub async fn get(&self, url: &str) -> Result<String, String> {
            let res =
                tokio::time::timeout(Duration::from_secs(5), self.0.get(url.parse().unwrap()))
                    .await
                    .map_err(|_| "no answer within 5 s".to_owned())?
                    .map_err(|e| e.to_string())?;
            let status = res.status();
            let body = res.into_body().collect().await.map_err(|e| e.to_string())?;
            let text = String::from_utf8_lossy(&body.to_bytes()).into_owned();
            if status != 200 {
                return Err(format!("{status}: {text}"));
            }
            Ok(text)
        }
    }
}

impl Leasehold {
    async fn cluster(&self) -> Option<Value> {
        let text = self
            .http
            .get(&format!("{}/api/v1/clusters/{CLUSTER}", self.base))
            .await
            .ok()?;
        serde_json::from_str(&text).ok()
    }

    /// `leasehold_mass_lapse_members` of the cluster.
    async fn mass_lapse_metric(&self) -> Option<f64> {
        let text = self
            .http
            .get(&format!("{}/metrics", self.base))
            .await
            .ok()?;
        text.lines()
            .find(|l| {
                l.starts_with("leasehold_mass_lapse_members{")
                    && l.contains(&format!("cluster=\"{CLUSTER}\""))
            })
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
    }

    /// Owned targets per instance, and how many targets are owned.
    async fn owners(&self) -> Option<(BTreeMap<String, usize>, usize)> {
        let c = self.cluster().await?;
        let owned = c["targets"]["owned"].as_u64()? as usize;
        let per = c["instances"]
            .as_array()?
            .iter()
            .filter_map(|i| {
                Some((
                    i["name"].as_str()?.to_owned(),
                    i["owned"].as_u64()? as usize,
                ))
            })
            .filter(|(_, n)| *n > 0)
            .collect();
        Some((per, owned))
    }
}

/// Every ownership row of history: (from, to, cause, acquired at in Unix ms).
async fn ownership(db: &str) -> Vec<(String, String, Option<Cause>, i64)> {
    let store = Store::connect(db).await.unwrap();
    let mut out = Vec::new();
    let mut cursor = None;
    loop {
        let page = store
            .history(&HistoryQuery {
                cluster: Some(CLUSTER.into()),
                kind: Some(HistoryKind::Ownership),
                cursor: cursor.take(),
                limit: 1000,
                ..Default::default()
            })
            .await
            .unwrap();
        for r in page.items {
            out.push((
                r.from.unwrap_or_default(),
                r.to.unwrap_or_default(),
                r.cause,
                r.acquired_at_ms.unwrap_or(r.at_ms),
            ));
        }
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => return out,
        }
    }
}

/// Ownership rows of history with cause `failover`: (from, acquired at in Unix ms).
async fn failovers(db: &str) -> Vec<(String, i64)> {
    ownership(db)
        .await
        .into_iter()
        .filter(|r| r.2 == Some(Cause::Failover))
        .map(|(from, _, _, at)| (from, at))
        .collect()
}

/// The value of every sample of `metric` whose labels include all of `labels`, summed.
fn sample_sum(metrics: &str, metric: &str, labels: &[(&str, &str)]) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(&format!("{metric}{{")))
        .filter(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .fold(0.0, |a, b| a + b)
}

fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// The scenarios share the apiserver, the `leasehold` namespace and its control-plane Lease,
/// and each loads a 2-core machine: one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The scenario (module docs). Prints what it measured.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_slow_api_server_under_another_clients_load_fails_over_no_healthy_member() {
    slow_server(false).await;
}

/// The same, with the slow server holding back the control plane's watch probes (Lease writes
/// in the members' namespace like their renewals) before the renewals: its model turns stale
/// before it sees the members late, and a stale model is not decided on, so no lapse begins
/// while the server is slow (once the load stops, a probe that lands before the members'
/// renewals may show a current model with the members lapsed: a lapse then, 2 of 8 runs here,
/// which holds failovers back as it should). The cluster must show degraded all the same (as
/// the model last seen shows it), and the rest holds. What happened by chance in two of eight
/// runs of the scenario above, made certain.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_slow_api_server_that_holds_back_the_watch_probes_first_still_shows_degraded() {
    slow_server(true).await;
}

/// `probes_first`: the webhook holds watch-probe reviews [`PROBE_HOLD`] while the load lasts.
async fn slow_server(probes_first: bool) {
    if !common::real_tier() {
        eprintln!(
            "SKIPPED: needs a real kube-apiserver (admission webhooks, API Priority and Fairness, \
             ServiceAccount tokens): scripts/test-real.sh pressure"
        );
        return;
    }
    let _serial = SERIAL.lock().await;
    let mut t = common::start().await;
    t.spawn_kubelet();
    let ns = t.ns.clone();
    let load_ns = format!("{ns}-load");
    let dir = tempfile::tempdir().unwrap();
    let d = Duration::from_secs(LEASE_S);

    // Leasehold's control plane as deploy/base makes it: its namespace, ServiceAccount, RBAC
    // and API Priority and Fairness objects, and the Role of a namespace it manages.
    for f in [
        "namespace.yaml",
        "serviceaccount.yaml",
        "rbac.yaml",
        "flowcontrol.yaml",
    ] {
        let yaml = std::fs::read_to_string(repo().join("deploy/base").join(f)).unwrap();
        apply(&t, &yaml).await;
    }
    let role = std::fs::read_to_string(repo().join("deploy/managed-namespace/role.yaml")).unwrap();
    let out = t
        .kubectl_stdin(&["apply", "-n", &ns, "-f", "-"], &role)
        .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The members' ServiceAccount, Role and FlowSchema: the worker-pool example's, here.
    let rbac = std::fs::read_to_string(repo().join("deploy/examples/worker-pool/rbac.yaml"))
        .unwrap()
        .replace("namespace: workers", &format!("namespace: {ns}"));
    apply(&t, &rbac).await;
    let flow = std::fs::read_to_string(repo().join("deploy/examples/worker-pool/flowschema.yaml"))
        .unwrap()
        .replace("workers", &ns);
    apply(&t, &flow).await;
    // The other tenant: a namespace and a ServiceAccount that may write ConfigMaps there. The
    // webhook matches its namespace once labelled, when the load begins.
    apply(
        &t,
        &format!(
            "apiVersion: v1
kind: Namespace
metadata: {{name: {load_ns}}}
---
apiVersion: v1
kind: ServiceAccount
metadata: {{name: tenant, namespace: {load_ns}}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: configmaps, namespace: {load_ns}}}
rules:
- {{apiGroups: [''], resources: [configmaps], verbs: [get, create, update, patch]}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: configmaps, namespace: {load_ns}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: configmaps}}
subjects: [{{kind: ServiceAccount, name: tenant, namespace: {load_ns}}}]
"
        ),
    )
    .await;
    cover(&t, &ns, &ns).await;

    // The shared policy webhook: ConfigMap and Lease writes in both namespaces.
    let policy = SlowPolicy::new(WEBHOOK_WORKERS, WEBHOOK_SERVICE, d / 3, PROBE_HOLD);
    let webhook = Webhook::install(&t, &policy, dir.path(), &ns, &ns).await;

    // Member pods (Ready through the fake kubelet), their agents and the control plane, all
    // with ServiceAccount tokens.
    let pods: Api<Pod> = Api::namespaced(t.client.clone(), &ns);
    for m in MEMBERS {
        let pod = json!({
            "metadata": {"name": m, "labels": {"app": CLUSTER},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": CLUSTER, "uid": "u-1"}]},
            "spec": {"containers": [{"name": "app", "image": "collector"}]}
        });
        pods.create(
            &PostParams::default(),
            &serde_json::from_value(pod).unwrap(),
        )
        .await
        .unwrap();
    }
    let checker = InvariantChecker::new();
    let hooks = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook_url = format!("http://{}/hooks", hooks.local_addr().unwrap());
    let app = checker.http_app();
    let _hooks = tokio::spawn(async move {
        let _ = axum::serve(hooks, app).await;
    });
    let member_kc = service_account_kubeconfig(&t, &ns, "worker", dir.path()).await;
    let mut agents = BTreeMap::new();
    for m in MEMBERS {
        let log = std::fs::File::create(dir.path().join(format!("agent-{m}.log"))).unwrap();
        let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
            .args([
                "agent",
                "--cluster",
                CLUSTER,
                "--namespace",
                &ns,
                "--identity",
                m,
            ])
            .args([
                "--hook-url",
                &hook_url,
                "--lease-duration",
                &LEASE_S.to_string(),
            ])
            .args(["--hook-timeout", "1"])
            .arg("--kubeconfig")
            .arg(&member_kc)
            .env("RUST_LOG", "info")
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .expect("leasehold agent starts");
        agents.insert(m, child);
    }
    let cp_kc = service_account_kubeconfig(&t, "leasehold", "leasehold", dir.path()).await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let db = format!("sqlite:{}", dir.path().join("history.db").display());
    let list: Vec<String> = (0..TARGETS).map(|i| format!("t-{i:03}")).collect();
    let config = format!(
        "database: {db}
control_plane: {{namespace: leasehold, lease_name: leasehold-control-plane, lease_duration: 4s}}
http: {{listen: 127.0.0.1:{port}, auth: {{mode: none}}}}
clusters:
- name: {CLUSTER}
  namespace: {ns}
  selector: {{app: {CLUSTER}}}
  headless_service: {CLUSTER}
  targets: {{inline: [{}]}}
  policy: {{lease_duration: {LEASE_S}s, on_join: auto, join_settle: 1s, move_timeout: {LEASE_S}s}}
",
        list.join(", ")
    );
    let config_path = dir.path().join("leasehold.yaml");
    std::fs::write(&config_path, config).unwrap();
    let cp_log = std::fs::File::create(dir.path().join("serve.log")).unwrap();
    let mut control_plane = tokio::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
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
    let lh = Leasehold {
        base: format!("http://127.0.0.1:{port}"),
        http: plain_http::Client::new(),
    };
    let logs = |what: &str| {
        let read = |f: &str| std::fs::read_to_string(dir.path().join(f)).unwrap_or_default();
        let tail = |s: String| {
            s.lines()
                .rev()
                .take(40)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join("\n")
        };
        format!(
            "{what}\n--- serve.log (tail)\n{}\n--- agent-c-0.log (tail)\n{}",
            tail(read("serve.log")),
            tail(read("agent-c-0.log"))
        )
    };

    // Placed: 15 targets on each member, all worked on.
    let fair = TARGETS / MEMBERS.len();
    let placed = eventually(Duration::from_secs(45), || async {
        let (per, owned) = lh.owners().await?;
        (owned == TARGETS && per.len() == MEMBERS.len() && per.values().all(|n| *n == fair))
            .then_some(per)
    })
    .await;
    assert!(
        placed.is_some(),
        "{}",
        logs(&format!("not placed: {:?}", lh.owners().await))
    );
    let working = eventually(Duration::from_secs(10), || async {
        MEMBERS
            .iter()
            .all(|m| checker.working_on(m).len() == fair)
            .then_some(())
    })
    .await;
    assert!(working.is_some(), "members not all working");
    let renewals = Arc::new(Renewals::default());
    let _watch = renewals.watch(t.client.clone(), &ns);
    let calm_from = Instant::now();
    let waits_calm = policy.lease_waits_ms.lock().unwrap().len();
    tokio::time::sleep(2 * d).await;
    let calm_to = Instant::now();
    let c = lh.cluster().await.expect("cluster");
    assert!(
        c["degraded"].is_null(),
        "degraded before any load: {}",
        c["degraded"]
    );
    let waits_load = policy.lease_waits_ms.lock().unwrap().len();

    // The other tenant's load: LOAD_WRITERS ConfigMap writers, each writing again as soon as
    // its last write is answered. Each creates its ConfigMap first, while the webhook does not
    // match the tenant's namespace yet (its connection is then open); the load begins at once
    // when the namespace is labelled — a server turning slow from one moment to the next (the
    // gradual onset is in the module docs).
    let tenant_kc = service_account_kubeconfig(&t, &load_ns, "tenant", dir.path()).await;
    let tenant = client_for(&tenant_kc).await;
    let mut load = Tenant::new(&load_ns);
    load.add(&tenant, LOAD_WRITERS);
    eventually(Duration::from_secs(30), || async {
        (load.created.load(Ordering::SeqCst) == LOAD_WRITERS as u64).then_some(())
    })
    .await
    .expect("the tenant's ConfigMaps created");
    cover(&t, &load_ns, &ns).await;
    if probes_first {
        // The probes first: the model turns stale while the members still renew on time.
        policy.hold_probes.store(true, Ordering::SeqCst);
        let stale = eventually(4 * d, || async {
            lh.cluster().await.filter(|c| c["stale"] == true)
        })
        .await
        .unwrap_or_else(|| panic!("{}", logs("the model not stale with its probes held back")));
        assert!(
            stale["degraded"].is_null(),
            "degraded before the load: {}",
            stale["degraded"]
        );
    }
    load.begin();
    let load_from = Instant::now();
    let load_from_ms = unix_ms();

    // Degraded within seconds of the server turning slow: API field and metric.
    let degraded = eventually(20 * d, || async {
        lh.cluster().await?["degraded"].as_str().map(str::to_owned)
    })
    .await;
    let degraded_at = Instant::now();
    let degraded_after = load_from.elapsed();
    let Some(reason) = degraded else {
        panic!(
            "{}",
            logs(&format!(
                "not degraded {degraded_after:?} into the load (cluster stale: {}; webhook queue {}, \
                 Lease waits {:?})",
                lh.cluster()
                    .await
                    .map(|c| c["stale"].clone())
                    .unwrap_or_default(),
                policy.waiting.load(Ordering::SeqCst),
                percentile(
                    policy
                        .lease_waits_ms
                        .lock()
                        .unwrap()
                        .iter()
                        .map(|&ms| Duration::from_millis(ms))
                        .collect(),
                    0.99
                )
            ))
        )
    };
    let slow_since = policy.slow_since.lock().unwrap().unwrap_or(degraded_at);
    let degraded_after_slow = degraded_at.saturating_duration_since(slow_since);
    eprintln!(
        "degraded {degraded_after_slow:?} after the server turned slow ({:?} after the load \
         began): {reason}",
        slow_since - load_from
    );
    let metric = eventually(d, || async {
        lh.mass_lapse_metric().await.filter(|v| *v > 0.0)
    })
    .await;
    assert!(
        metric.is_some(),
        "leasehold_mass_lapse_members stays 0 while degraded"
    );

    // A member dies during the slow period: its process SIGKILLed, its pod left Ready.
    tokio::time::sleep(d).await;
    let mut victim = agents.remove(VICTIM).unwrap();
    victim.kill().await.unwrap();
    checker.crashed(VICTIM);
    let killed = Instant::now();
    let mut degraded_samples = 0usize;
    let mut stale_samples = 0usize;
    let mut clear_samples = Vec::new();
    // Two lease durations of lapse after the kill at least: nobody fenced meanwhile.
    while load_from.elapsed() < SLOW_PERIOD || killed.elapsed() < 2 * d {
        match lh.cluster().await {
            Some(c) if c["degraded"].is_string() => {
                degraded_samples += 1;
                stale_samples += usize::from(c["stale"] == true);
            }
            Some(_) => clear_samples.push(load_from.elapsed()),
            None => {}
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let healthy_failovers: Vec<_> = failovers(&db)
        .await
        .into_iter()
        .filter(|(from, _)| from != VICTIM)
        .collect();
    assert_eq!(
        healthy_failovers,
        [],
        "{}",
        logs("healthy members failed over under load")
    );

    // The load stops; the server has recovered once the webhook's queue is empty. What the
    // control plane logged until now is the slow period's.
    let serve_log_at_stop = std::fs::metadata(dir.path().join("serve.log")).map_or(0, |m| m.len());
    load.stop().await;
    policy.hold_probes.store(false, Ordering::SeqCst);
    let load_to = Instant::now();
    let queue_at_stop = policy.waiting.load(Ordering::SeqCst);
    eventually(Duration::from_secs(30), || async {
        (policy.waiting.load(Ordering::SeqCst) == 0).then_some(())
    })
    .await
    .expect("the webhook's queue drains once the load stops");
    let recovered = Instant::now();
    let recovered_ms = unix_ms();
    let waits_recovered = policy.lease_waits_ms.lock().unwrap().len();
    let drained = recovered - load_to;

    // The degraded state clears, and the dead member's targets move to the live ones within
    // 4D/3 + 1 s of the recovery (docs/protocol.md, "Mass lapse").
    let bound = d * 4 / 3 + Duration::from_secs(1);
    let cleared = eventually(4 * d, || async {
        lh.cluster().await?["degraded"].is_null().then_some(())
    })
    .await;
    let cleared_after = recovered.elapsed();
    assert!(
        cleared.is_some(),
        "{}",
        logs("still degraded 4 D after the recovery")
    );
    let moved = eventually(bound + 4 * d, || async {
        let (per, owned) = lh.owners().await?;
        (owned == TARGETS && !per.contains_key(VICTIM)).then_some(per)
    })
    .await;
    let seen_moved_after = recovered.elapsed();
    let Some(final_owners) = moved else {
        panic!(
            "{}",
            logs(&format!(
                "{VICTIM}'s targets not failed over: {:?}",
                lh.owners().await
            ))
        );
    };
    // History is written a little after the Leases.
    let all_failovers = eventually(Duration::from_secs(5), || async {
        let f = failovers(&db).await;
        (f.iter().filter(|(from, _)| from == VICTIM).count() >= fair).then_some(f)
    })
    .await;
    let Some(all_failovers) = all_failovers else {
        let rows = ownership(&db).await;
        let from_victim: Vec<_> = rows.iter().filter(|r| r.0 == VICTIM).collect();
        panic!(
            "{}",
            logs(&format!(
                "history has not {fair} failovers from {VICTIM}; its rows: {from_victim:?}"
            ))
        );
    };
    let healthy: Vec<_> = all_failovers.iter().filter(|(f, _)| f != VICTIM).collect();
    assert_eq!(
        healthy,
        Vec::<&(String, i64)>::new(),
        "{}",
        logs("a healthy member was failed over")
    );
    // Nothing else moved either (no rebalance, no handoff): every change of owner since the
    // load began is a failover of the dead member's targets.
    let others: Vec<_> = ownership(&db)
        .await
        .into_iter()
        .filter(|r| r.3 >= load_from_ms)
        .filter(|r| !(r.0 == VICTIM && r.2 == Some(Cause::Failover)))
        .collect();
    assert_eq!(
        others,
        [],
        "{}",
        logs(&format!("targets moved for another reason: {others:?}"))
    );
    let after_recovery = |at_ms: i64| Duration::from_millis((at_ms - recovered_ms).max(0) as u64);
    let first_failover = after_recovery(all_failovers.iter().map(|(_, at)| *at).min().unwrap());
    let failed_over_after = after_recovery(all_failovers.iter().map(|(_, at)| *at).max().unwrap());
    eprintln!(
        "{VICTIM} (killed {:?} into the load) failed over {first_failover:?} to \
         {failed_over_after:?} after the recovery (first and last of its targets; seen \
         {seen_moved_after:?}); {} targets moved; owners now {final_owners:?}",
        killed - load_from,
        all_failovers.len()
    );
    assert_eq!(
        all_failovers.len(),
        fair,
        "only the dead member's targets fail over"
    );
    // The bound is the fence's (docs/protocol.md); its targets follow, one write each.
    assert!(
        first_failover <= bound,
        "{VICTIM} failed over {first_failover:?} after the recovery, more than {bound:?}"
    );
    assert!(
        failed_over_after <= bound + Duration::from_secs(1),
        "{VICTIM}'s last target failed over {failed_over_after:?} after the recovery"
    );
    // The mass lapses the control loop lived, in the slow period and after it: once the load
    // stops, the webhook's queue holds the renewals and a fresh probe alike, and when the probe
    // lands first the loop, current again, may see the members lapsed for a moment (a lapse
    // that holds failovers back, as it should; the dead member's bound above still holds).
    let serve_log = std::fs::read(dir.path().join("serve.log")).unwrap_or_default();
    let (slow_log, after_log) =
        serve_log.split_at((serve_log_at_stop as usize).min(serve_log.len()));
    let lapses_in = |part: &[u8]| {
        String::from_utf8_lossy(part)
            .matches("mass lapse: holding failovers back")
            .count()
    };
    let (lapses, lapses_after) = (lapses_in(slow_log), lapses_in(after_log));
    eprintln!(
        "mass lapses the control plane lived: {lapses} in the slow period, {lapses_after} after \
         it; the model stale in {stale_samples} of {degraded_samples} degraded samples of the \
         slow period after the kill"
    );
    if probes_first {
        let turns: Vec<_> = String::from_utf8_lossy(&serve_log)
            .lines()
            .filter(|l| {
                ["mass lapse", "model is stale", "current again"]
                    .iter()
                    .any(|w| l.contains(w))
            })
            .map(str::to_owned)
            .collect();
        assert_eq!(
            lapses, 0,
            "the loop lived a lapse in the slow period: the model was not stale first \
             (load began at {load_from_ms} ms; the log's turns: {turns:#?})"
        );
    }
    let c = lh.cluster().await.expect("cluster");
    assert!(c["degraded"].is_null(), "degraded again: {}", c["degraded"]);
    // The survivors kept their own and got the dead member's: everything worked on again.
    let working = eventually(2 * d, || async {
        let n: usize = MEMBERS
            .iter()
            .filter(|m| **m != VICTIM)
            .map(|m| checker.working_on(m).len())
            .sum();
        (n == TARGETS).then_some(())
    })
    .await;
    assert!(
        working.is_some(),
        "not every target worked on after the recovery"
    );

    // The renewals really were late: members' Leases unchanged for more than D while loaded
    // (without the mass-lapse rule each would have been fenced and failed over).
    let mut late_past_d = Vec::new();
    let mut loaded_gaps = Vec::new();
    for m in MEMBERS.iter().filter(|m| **m != VICTIM) {
        let gaps = renewals.gaps(m, load_from, recovered + d);
        let max = gaps.iter().max().copied().unwrap_or_default();
        if max > d {
            late_past_d.push((*m, max));
        }
        loaded_gaps.extend(gaps);
    }
    let calm_gaps: Vec<Duration> = MEMBERS
        .iter()
        .flat_map(|m| renewals.gaps(m, calm_from, calm_to))
        .collect();
    let lateness = |gaps: Vec<Duration>| {
        percentile(
            gaps.into_iter().map(|g| g.saturating_sub(d / 3)).collect(),
            0.99,
        )
    };
    // How long the webhook kept Lease reviews waiting for a worker (those the apiserver had
    // not given up on): before the load, during it, and after the recovery.
    let waits = |from: usize, to: Option<usize>| {
        let all = policy.lease_waits_ms.lock().unwrap();
        let to = to.unwrap_or(all.len());
        let v: Vec<Duration> = all[from..to]
            .iter()
            .map(|&ms| Duration::from_millis(ms))
            .collect();
        (percentile(v.clone(), 0.5), percentile(v, 0.99))
    };
    eprintln!(
        "renewal lateness p99 (gap between seen renewals - D/3): calm {:?}, loaded {:?}; \
         members unchanged for more than D = {d:?}: {late_past_d:?}",
        lateness(calm_gaps),
        lateness(loaded_gaps.clone()),
    );
    eprintln!(
        "webhook: Lease reviews answered waited (p50, p99) calm {:?}, loaded {:?}, after the \
         recovery {:?}; {} Lease reviews given up by the apiserver while waiting; queue {} at \
         most (a wait of {:?}), {} at the load's end, drained in {drained:?}; the other tenant: \
         {} writes, {} errors; degraded in {} of {} samples of the slow period after the kill; \
         cleared {cleared_after:?} after the recovery",
        waits(waits_calm, Some(waits_load)),
        waits(waits_load, Some(waits_recovered)),
        waits(waits_recovered, None),
        policy.lease_reviews_given_up.load(Ordering::SeqCst),
        policy.max_waiting.load(Ordering::SeqCst),
        policy.wait_behind(policy.max_waiting.load(Ordering::SeqCst)),
        queue_at_stop,
        load.writes.load(Ordering::Relaxed),
        load.errors.load(Ordering::Relaxed),
        degraded_samples,
        degraded_samples + clear_samples.len(),
    );
    assert!(
        late_past_d.len() >= 2,
        "the load did not delay renewals past D for two members ({late_past_d:?}): the test \
         proves nothing"
    );
    assert!(
        degraded_after_slow <= 2 * d,
        "degraded only {degraded_after_slow:?} after the server turned slow"
    );
    assert!(
        cleared_after <= 2 * d,
        "degraded cleared only {cleared_after:?} after the recovery"
    );
    let metric = eventually(d, || async {
        lh.mass_lapse_metric().await.filter(|v| *v == 0.0)
    })
    .await;
    assert!(
        metric.is_some(),
        "leasehold_mass_lapse_members not back to 0"
    );

    // The Events about the control-plane Lease.
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(t.client.clone(), "leasehold");
    let reasons: Vec<String> = events
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("leasehold-control-plane")
        })
        .filter_map(|e| e.reason)
        .collect();
    eprintln!("Events in leasehold: {reasons:?}");
    // Published by the control loop as it lives the lapse: not when the model was stale all
    // through it (the degraded state then comes from the model as last seen).
    if lapses > 0 {
        assert!(
            reasons.iter().any(|r| r == "MassLapse")
                && reasons.iter().any(|r| r == "MassLapseOver"),
            "Events MassLapse and MassLapseOver: {reasons:?}"
        );
    }

    // API Priority and Fairness classified them: the members' requests at leasehold-members
    // (the example's FlowSchema), the control plane's at leasehold-control-plane, the other
    // tenant's at workload-low.
    let out = t.kubectl(&["get", "--raw", "/metrics"]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let metrics = String::from_utf8_lossy(&out.stdout);
    let dispatched = |fs: &str, pl: &str| {
        sample_sum(
            &metrics,
            "apiserver_flowcontrol_dispatched_requests_total",
            &[("flow_schema", fs), ("priority_level", pl)],
        )
    };
    let members_fs = format!("leasehold-members-{ns}");
    let at_members = dispatched(&members_fs, "leasehold-members");
    let at_cp = dispatched("leasehold-control-plane", "leasehold-control-plane");
    let at_election = dispatched("leasehold-control-plane-election", "leasehold-members");
    let at_low = dispatched("service-accounts", "workload-low");
    let rejected = |pl: &str| {
        sample_sum(
            &metrics,
            "apiserver_flowcontrol_rejected_requests_total",
            &[("priority_level", pl)],
        )
    };
    let seats = |pl: &str| {
        sample_sum(
            &metrics,
            "apiserver_flowcontrol_nominal_limit_seats",
            &[("priority_level", pl)],
        )
    };
    eprintln!(
        "apiserver: dispatched at leasehold-members {at_members} (+ election {at_election}), \
         leasehold-control-plane {at_cp}, workload-low (service-accounts) {at_low}; rejected: \
         leasehold-members {}, leasehold-control-plane {}, workload-low {}; nominal seats: \
         leasehold-members {}, workload-low {}",
        rejected("leasehold-members"),
        rejected("leasehold-control-plane"),
        rejected("workload-low"),
        seats("leasehold-members"),
        seats("workload-low"),
    );
    assert!(at_members > 0.0, "no member request at leasehold-members");
    assert!(
        at_cp > 0.0,
        "no control-plane request at leasehold-control-plane"
    );
    assert!(
        at_election > 0.0,
        "the election Lease not at leasehold-members"
    );

    // Done: the members stop, nobody ever worked on a target another member worked on.
    for (m, mut child) in agents {
        let pid = child.id().unwrap().to_string();
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status();
        let exited = tokio::time::timeout(Duration::from_secs(15), child.wait()).await;
        assert!(exited.is_ok(), "{m} did not exit on SIGTERM");
    }
    let _ = control_plane.start_kill();
    let _ = control_plane.wait().await;
    checker.assert_ok();
    drop(webhook);
}
