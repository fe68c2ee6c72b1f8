//! Load harness for the control plane and its members (issue targets: failover within the
//! lease duration + 2 s; handoff gap p99 ≤ 500 ms over a rebalance of many moves; control-plane
//! RSS ≤ 150 MB with 50,000 target Leases and 1,000 pods in its index).
//!
//! Run: `cargo bench --bench engine_load` (options after `--`: `--members N --join N
//! --targets N --lease-s N --crashes N --hook-ms N --max-moves N --mem-targets N --mem-pods N
//! --parts` any of a, b, c (c = h + p: held, placed)). Under `cargo test --all-targets` it does a small smoke run.
//!
//! - (a) and (b): the simulator runs as its own process (the release `leasehold sim
//!   --fake-kubelet`); the control plane (`Engine`, SQLite in a tempdir) and the member agents
//!   (`Agent`, one per member pod) run in this process on one Tokio runtime, with hooks that
//!   record an `Instant` when work starts (`on_acquire` called) and ends (`on_release`
//!   returned). (b) adds members and runs one rebalance; each move's gap is the new owner's
//!   `on_acquire` minus the old owner's end of `on_release`. (a) crashes members one at a
//!   time (agent task aborted, so nothing is released; pod deleted with no grace) and times
//!   until every target it held has been acquired by another member.
//! - (c): the simulator and `leasehold serve` each run as their own process; this process only
//!   seeds objects over HTTP and reads the control plane's `/proc/PID/status`.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{cpu_s, percentile, status_kib};
use futures::FutureExt as _;
use futures::future::BoxFuture;
use http_body_util::BodyExt as _;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;
use leasehold::agent::{Agent, AgentConfig, Assignment, Hooks};
use leasehold::config::Config;
use leasehold::engine::{Engine, PlanRequest};
use leasehold::k8s::model::ClusterModel;
use leasehold::model::{Cause, OperationState};
use leasehold::protocol::{self, Desire};
use leasehold::store::Store;
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

const NS: &str = "apps";
const CLUSTER: &str = "c";

struct Args {
    full: bool,
    members: usize,
    join: usize,
    targets: usize,
    lease_s: u64,
    crashes: usize,
    hook_ms: u64,
    max_moves: usize,
    mem_targets: usize,
    mem_pods: usize,
    parts: String,
}

fn args() -> Args {
    // `cargo bench` passes `--bench`; anything else (`cargo test --all-targets`) gets a smoke
    // run that checks the harness works without spending minutes in a debug build.
    let full = std::env::args().any(|a| a == "--bench");
    let mut a = if full {
        Args {
            full,
            members: 8,
            join: 4,
            targets: 600,
            lease_s: 5,
            crashes: 3,
            hook_ms: 0,
            max_moves: 10,
            mem_targets: 50_000,
            mem_pods: 1_000,
            parts: "abc".into(),
        }
    } else {
        Args {
            full,
            members: 2,
            join: 1,
            targets: 30,
            lease_s: 2,
            crashes: 1,
            hook_ms: 0,
            max_moves: 10,
            mem_targets: 300,
            mem_pods: 5,
            parts: "abc".into(),
        }
    };
    let argv: Vec<String> = std::env::args().collect();
    for (i, flag) in argv.iter().enumerate() {
        let val = || argv.get(i + 1).and_then(|v| v.parse::<usize>().ok());
        match flag.as_str() {
            "--members" => a.members = val().unwrap_or(a.members),
            "--join" => a.join = val().unwrap_or(a.join),
            "--targets" => a.targets = val().unwrap_or(a.targets),
            "--lease-s" => a.lease_s = val().map_or(a.lease_s, |v| v as u64),
            "--crashes" => a.crashes = val().unwrap_or(a.crashes),
            "--hook-ms" => a.hook_ms = val().map_or(a.hook_ms, |v| v as u64),
            "--max-moves" => a.max_moves = val().unwrap_or(a.max_moves),
            "--mem-targets" => a.mem_targets = val().unwrap_or(a.mem_targets),
            "--mem-pods" => a.mem_pods = val().unwrap_or(a.mem_pods),
            "--parts" => a.parts = argv.get(i + 1).cloned().unwrap_or(a.parts.clone()),
            _ => {}
        }
    }
    a
}

// ---------------------------------------------------------------------------------------------
// The simulator as a process.

struct Sim {
    // Killed on drop.
    _child: tokio::process::Child,
    pid: u32,
    client: kube::Client,
    kubeconfig: PathBuf,
}

/// Starts `leasehold sim --fake-kubelet` on a free port and connects to it.
async fn start_sim(dir: &Path, name: &str) -> anyhow::Result<Sim> {
    let kubeconfig = dir.join(format!("{name}.kubeconfig"));
    let (child, client) =
        common::start_sim_process(env!("CARGO_BIN_EXE_leasehold"), &kubeconfig).await?;
    let sim = Sim {
        pid: child.id().expect("simulator pid"),
        _child: child,
        client,
        kubeconfig,
    };
    sim.post("/api/v1/namespaces", json!({"metadata": {"name": NS}}))
        .await?;
    Ok(sim)
}

impl Sim {
    async fn send(
        &self,
        method: &str,
        path: &str,
        body: Vec<u8>,
    ) -> anyhow::Result<(u16, Vec<u8>)> {
        let req = http::Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", "application/json")
            .body(kube::client::Body::from(body))?;
        let resp = self.client.send(req).await?;
        let status = resp.status().as_u16();
        Ok((
            status,
            resp.into_body().collect().await?.to_bytes().to_vec(),
        ))
    }

    async fn post(&self, path: &str, body: Value) -> anyhow::Result<()> {
        let (s, b) = self.send("POST", path, serde_json::to_vec(&body)?).await?;
        anyhow::ensure!(s == 201, "POST {path}: {s} {}", String::from_utf8_lossy(&b));
        Ok(())
    }

    /// POSTs every body to `path`, `concurrency` at a time.
    async fn post_all(
        &self,
        path: &str,
        bodies: Vec<Value>,
        concurrency: usize,
    ) -> anyhow::Result<()> {
        use futures::StreamExt as _;
        let results: Vec<anyhow::Result<()>> = futures::stream::iter(bodies)
            .map(|b| self.post(path, b))
            .buffer_unordered(concurrency)
            .collect()
            .await;
        results.into_iter().collect()
    }

    /// Every Lease of the namespace (paginated).
    async fn leases(&self) -> anyhow::Result<Vec<Value>> {
        let base = format!("/apis/coordination.k8s.io/v1/namespaces/{NS}/leases?limit=500");
        let mut out = Vec::new();
        let mut cont = String::new();
        loop {
            let path = if cont.is_empty() {
                base.clone()
            } else {
                format!("{base}&continue={cont}")
            };
            let (s, body) = self.send("GET", &path, Vec::new()).await?;
            anyhow::ensure!(s == 200, "list leases: {s}");
            let mut v: Value = serde_json::from_slice(&body)?;
            if let Some(items) = v["items"].as_array_mut() {
                out.append(items);
            }
            match v["metadata"]["continue"].as_str() {
                Some(c) if !c.is_empty() => cont = c.to_owned(),
                _ => return Ok(out),
            }
        }
    }

    async fn wait_pods_ready(&self, n: usize, timeout: Duration) -> anyhow::Result<()> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), NS);
        let started = Instant::now();
        loop {
            let list = pods.list(&ListParams::default()).await?;
            let ready = list
                .items
                .iter()
                .filter(|p| {
                    p.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|cs| {
                            cs.iter().any(|c| c.type_ == "Ready" && c.status == "True")
                        })
                })
                .count();
            if ready >= n {
                return Ok(());
            }
            anyhow::ensure!(started.elapsed() < timeout, "{ready} of {n} pods ready");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// A StatefulSet member pod of the cluster.
fn mk_pod(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": CLUSTER},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": CLUSTER, "uid": "sts-uid"}]},
        "spec": {"hostname": name, "subdomain": CLUSTER,
            "containers": [{"name": "app", "image": "example/collector:1"}]}
    })
}

fn member(i: usize) -> String {
    format!("{CLUSTER}-{i}")
}

fn target(i: usize) -> String {
    format!("t-{i:05}")
}

fn pods_path() -> String {
    format!("/api/v1/namespaces/{NS}/pods")
}

fn leases_path() -> String {
    format!("/apis/coordination.k8s.io/v1/namespaces/{NS}/leases")
}

fn config_yaml(database: &str, targets: usize, lease_s: u64, max_moves: usize) -> String {
    let list: Vec<String> = (0..targets).map(target).collect();
    format!(
        "database: {database}
control_plane: {{namespace: {NS}}}
clusters:
- name: {CLUSTER}
  namespace: {NS}
  selector: {{app: {CLUSTER}}}
  headless_service: {CLUSTER}
  targets: {{inline: [{}]}}
  policy: {{lease_duration: {lease_s}s, on_join: 'off', join_settle: 1s, move_timeout: {}s, max_concurrent_moves: {max_moves}}}
",
        list.join(", "),
        lease_s.max(10),
    )
}

// ---------------------------------------------------------------------------------------------
// Hooks that record when work starts and ends.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Work {
    Start,
    End,
}

#[derive(Debug, Clone)]
struct Rec {
    at: Instant,
    target: String,
    member: String,
    work: Work,
}

#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<Rec>>>);

impl Recorder {
    fn push(&self, target: &str, member: &str, work: Work) {
        let rec = Rec {
            at: Instant::now(),
            target: target.to_owned(),
            member: member.to_owned(),
            work,
        };
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(rec);
    }

    fn since(&self, t: Instant) -> Vec<Rec> {
        let log = self.0.lock().unwrap_or_else(|e| e.into_inner());
        log.iter().filter(|r| r.at >= t).cloned().collect()
    }
}

struct RecordingHooks {
    rec: Recorder,
    member: String,
    work: Duration,
}

impl Hooks for RecordingHooks {
    fn on_acquire(&self, work: &Assignment) -> BoxFuture<'_, Result<(), String>> {
        self.rec.push(&work.target, &self.member, Work::Start);
        async move {
            if !self.work.is_zero() {
                tokio::time::sleep(self.work).await;
            }
            Ok(())
        }
        .boxed()
    }

    fn on_release(&self, work: &Assignment) -> BoxFuture<'_, Result<(), String>> {
        let target = work.target.clone();
        async move {
            if !self.work.is_zero() {
                tokio::time::sleep(self.work).await;
            }
            self.rec.push(&target, &self.member, Work::End);
            Ok(())
        }
        .boxed()
    }
}

// ---------------------------------------------------------------------------------------------
// (a) and (b): control plane and agents in this process.

struct Members {
    client: kube::Client,
    rec: Recorder,
    lease: Duration,
    hook: Duration,
    running: BTreeMap<String, (JoinHandle<anyhow::Result<()>>, oneshot::Sender<()>)>,
}

impl Members {
    fn start(&mut self, name: &str) {
        let mut cfg = AgentConfig::new(CLUSTER, NS, name);
        cfg.lease_duration = self.lease;
        let hooks = Arc::new(RecordingHooks {
            rec: self.rec.clone(),
            member: name.to_owned(),
            work: self.hook,
        });
        let (stop, rx) = oneshot::channel();
        let client = self.client.clone();
        let task = tokio::spawn(async move {
            Agent::new(cfg, hooks)
                .run(client, async {
                    let _ = rx.await;
                })
                .await
        });
        self.running.insert(name.to_owned(), (task, stop));
    }

    /// Aborts the agent: no release, no hook.
    async fn crash(&mut self, name: &str) {
        if let Some((task, _)) = self.running.remove(name) {
            task.abort();
            let _ = task.await;
        }
    }

    async fn stop_all(&mut self) {
        for (_, (task, stop)) in std::mem::take(&mut self.running) {
            let _ = stop.send(());
            let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
        }
    }
}

/// Polls the model until `f` accepts it.
async fn wait_model(
    engine: &Engine,
    timeout: Duration,
    what: &str,
    mut f: impl FnMut(&ClusterModel) -> bool,
) -> anyhow::Result<ClusterModel> {
    let started = Instant::now();
    loop {
        if let Ok(m) = engine.model(CLUSTER)
            && f(&m)
        {
            return Ok(m);
        }
        if started.elapsed() > timeout {
            let counts = engine.model(CLUSTER).map(|m| format!("{:?}", m.counts));
            anyhow::bail!("timed out waiting for {what}: {counts:?}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn owned_by(m: &ClusterModel) -> BTreeMap<String, usize> {
    m.instances
        .iter()
        .filter(|i| i.owned > 0)
        .map(|i| (i.name.clone(), i.owned))
        .collect()
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

async fn engine_parts(a: &Args, rows: &mut Vec<(String, String)>) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let sim = start_sim(dir.path(), "ab").await?;
    let db = format!("sqlite:{}", dir.path().join("history.db").display());
    let yaml = config_yaml(&db, a.targets, a.lease_s, a.max_moves);
    let config = Config::parse(&yaml, Path::new("engine_load.yaml"))?;
    let mut members = Members {
        client: sim.client.clone(),
        rec: Recorder::default(),
        lease: Duration::from_secs(a.lease_s),
        hook: Duration::from_millis(a.hook_ms),
        running: BTreeMap::new(),
    };
    let pods: Vec<Value> = (0..a.members).map(|i| mk_pod(&member(i))).collect();
    sim.post_all(&pods_path(), pods, 16).await?;
    for i in 0..a.members {
        members.start(&member(i));
    }
    sim.wait_pods_ready(a.members, Duration::from_secs(30))
        .await?;

    let engine = Engine::new(
        config,
        sim.client.clone(),
        Store::connect(&db).await?,
        "cp-bench".into(),
    );
    let e = engine.clone();
    let engine_task = tokio::spawn(async move { e.run(std::future::pending()).await });
    let t0 = Instant::now();
    let even = a.targets / a.members;
    let m = wait_model(&engine, Duration::from_secs(120), "first placement", |m| {
        m.counts.owned == a.targets && owned_by(m).values().all(|n| *n == even || *n == even + 1)
    })
    .await?;
    rows.push((
        format!(
            "first placement: {} targets on {} members, all held",
            a.targets, a.members
        ),
        format!(
            "{:.2} s ({} members)",
            t0.elapsed().as_secs_f64(),
            owned_by(&m).len()
        ),
    ));
    // Steady state: members renewing every D/3, nothing moving.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let me = std::process::id();
    let (own0, sim0, t) = (cpu_s(me), cpu_s(sim.pid), Instant::now());
    tokio::time::sleep(STEADY).await;
    let secs = t.elapsed().as_secs_f64();
    let m = engine.model(CLUSTER)?;
    rows.push((
        format!(
            "steady state, {} targets held, D = {} s: CPU of this process (control plane + {} agents) / of the simulator",
            a.targets, a.lease_s, a.members
        ),
        format!(
            "{:.0}% / {:.0}% of a core; still all held: {}",
            (cpu_s(me) - own0) / secs * 100.0,
            (cpu_s(sim.pid) - sim0) / secs * 100.0,
            m.counts.owned == a.targets
        ),
    ));
    if a.join == 0 {
        return Ok(());
    }

    // (b) Rebalance onto joining members.
    let joined: Vec<String> = (a.members..a.members + a.join).map(member).collect();
    let pods: Vec<Value> = joined.iter().map(|n| mk_pod(n)).collect();
    sim.post_all(&pods_path(), pods, 16).await?;
    for n in &joined {
        members.start(n);
    }
    let all = a.members + a.join;
    wait_model(
        &engine,
        Duration::from_secs(30),
        "joined members eligible",
        |m| m.instances.iter().filter(|i| i.eligible()).count() == all,
    )
    .await?;
    // Let the new agents finish their first list before work is sent their way.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let t_rebalance = Instant::now();
    let op = engine
        .start_rebalance(
            CLUSTER,
            &PlanRequest::default(),
            "bench",
            "engine_load",
            false,
        )
        .await?;
    let moves = op.moves.len();
    let op = loop {
        let op = engine.operation(&op.id).await?;
        if op.state.is_final() {
            break op;
        }
        anyhow::ensure!(
            t_rebalance.elapsed() < Duration::from_secs(600),
            "rebalance still {} after 600 s",
            op.state
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let rebalance_s = t_rebalance.elapsed().as_secs_f64();
    anyhow::ensure!(
        op.state == OperationState::Succeeded,
        "rebalance ended {}: {:?}",
        op.state,
        op.error
    );
    let even = a.targets / all;
    wait_model(
        &engine,
        Duration::from_secs(30),
        "balanced after the rebalance",
        |m| {
            m.counts.owned == a.targets
                && owned_by(m).values().all(|n| *n == even || *n == even + 1)
        },
    )
    .await?;
    // Gap per move: the old owner's end of work to the new owner's start.
    let mut last_end: HashMap<String, (String, Instant)> = HashMap::new();
    let mut gaps = Vec::new();
    for r in members.rec.since(t_rebalance) {
        match r.work {
            Work::End => {
                last_end.insert(r.target, (r.member, r.at));
            }
            Work::Start => {
                if let Some((from, at)) = last_end.remove(&r.target)
                    && from != r.member
                {
                    gaps.push(r.at.duration_since(at));
                }
            }
        }
    }
    gaps.sort();
    rows.push((
        format!(
            "rebalance onto {} joining members ({} moves, max {} concurrent)",
            a.join, moves, a.max_moves
        ),
        format!(
            "{rebalance_s:.2} s, {:.0} moves/s",
            moves as f64 / rebalance_s
        ),
    ));
    rows.push((
        format!(
            "handoff gap per move, p50 / p99 / max ({} handoffs)",
            gaps.len()
        ),
        format!(
            "{} / {} / {}",
            ms(percentile(&gaps, 50.0)),
            ms(percentile(&gaps, 99.0)),
            ms(gaps.last().copied().unwrap_or_default())
        ),
    ));
    anyhow::ensure!(
        gaps.len() == moves,
        "{} handoffs for {moves} moves",
        gaps.len()
    );

    // (a) Crash members one at a time.
    let d = Duration::from_secs(a.lease_s);
    for k in 0..a.crashes.min(a.members.saturating_sub(1)) {
        let victim = member(k);
        let m = engine.model(CLUSTER)?;
        let held: Vec<String> = m
            .targets
            .iter()
            .filter(|t| t.owner.as_deref() == Some(victim.as_str()))
            .map(|t| t.key.to_string())
            .collect();
        let crashed = Instant::now();
        members.crash(&victim).await;
        kube_sim::kubelet::crash(&sim.client, NS, &victim).await?;
        let deadline = crashed + d + Duration::from_secs(30);
        let (first, last) = loop {
            let mut taken: HashMap<String, Instant> = HashMap::new();
            for r in members.rec.since(crashed) {
                if r.work == Work::Start && r.member != victim {
                    taken.entry(r.target).or_insert(r.at);
                }
            }
            let times: Vec<Duration> = held
                .iter()
                .filter_map(|t| taken.get(t).map(|at| at.duration_since(crashed)))
                .collect();
            if times.len() == held.len() {
                break (
                    times.iter().min().copied().unwrap_or_default(),
                    times.iter().max().copied().unwrap_or_default(),
                );
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "{} of {} targets of {victim} taken over",
                times.len(),
                held.len()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        let model_done = wait_model(
            &engine,
            Duration::from_secs(30),
            "all owned after the crash",
            |m| m.counts.owned == a.targets,
        )
        .await
        .map(|_| crashed.elapsed())?;
        let verdict = if last <= d + Duration::from_secs(2) {
            "within"
        } else {
            "OVER"
        };
        rows.push((
            format!(
                "failover {}: {victim} crashed holding {} targets (D = {} s)",
                k + 1,
                held.len(),
                a.lease_s
            ),
            format!(
                "first taken {}, all taken {} ({verdict} D + 2 s = {} ms); model all owned at {}",
                ms(first),
                ms(last),
                (d + Duration::from_secs(2)).as_millis(),
                ms(model_done)
            ),
        ));
        // Settle before the next crash.
        tokio::time::sleep(Duration::from_secs(1)).await;
    }

    members.stop_all().await;
    engine_task.abort();
    drop(sim);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// (c) The control plane's memory, alone in its own process.

/// CPU use is measured over this window in steady state.
const STEADY: Duration = Duration::from_secs(10);
/// RSS is sampled over this window once the control plane is ready.
const WINDOW: Duration = Duration::from_secs(30);

fn mib(kib: u64) -> String {
    format!(
        "{:.0} MiB ({:.0} MB)",
        kib as f64 / 1024.0,
        kib as f64 * 1024.0 / 1e6
    )
}

/// How the 50,000 target Leases come to exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seed {
    /// Seeded already held by the pods (desired owner = holder), as in a running cluster;
    /// holders promise an hour so nothing expires while we measure (no renewals are sent).
    /// A few are seeded without a desired owner: the control plane adopts them once its model
    /// is synced, which is our readiness signal.
    Held,
    /// None seeded: the control plane places every target itself (creates 50,000 Leases with
    /// desired owners; nobody takes them).
    Placed,
}

async fn memory_part(a: &Args, seed: Seed, rows: &mut Vec<(String, String)>) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let sim = start_sim(dir.path(), "mem").await?;
    // The headless Service gives an EndpointSlice of every pod (the fake kubelet keeps it).
    sim.post(
        &format!("/api/v1/namespaces/{NS}/services"),
        json!({"metadata": {"name": CLUSTER}, "spec": {"clusterIP": "None", "selector": {"app": CLUSTER},
            "ports": [{"name": "grpc", "port": 57400}]}}),
    )
    .await?;
    let t = Instant::now();
    let pods: Vec<Value> = (0..a.mem_pods).map(|i| mk_pod(&member(i))).collect();
    sim.post_all(&pods_path(), pods, 32).await?;
    sim.wait_pods_ready(a.mem_pods, Duration::from_secs(300))
        .await?;
    let adopt = (a.mem_targets / 100).max(1);
    if seed == Seed::Held {
        let now = jiff::Timestamp::now();
        let leases: Vec<Value> = (0..a.mem_targets)
            .map(|i| {
                let holder = member(i % a.mem_pods);
                let desire = Desire {
                    overlap_ms: None,
                    term: None,
                    owner: holder.clone(),
                    cause: Cause::Initial,
                    operation: None,
                    duration_s: 15,
                };
                let mut l = protocol::held_by(
                    &protocol::new_target_lease("leasehold", CLUSTER, &target(i), &desire),
                    &holder,
                    now,
                    3600,
                );
                if i < adopt
                    && let Some(ann) = l.metadata.annotations.as_mut()
                {
                    ann.retain(|k, _| k == protocol::ANN_TARGET_KEY);
                }
                serde_json::to_value(l).expect("lease json")
            })
            .collect();
        sim.post_all(&leases_path(), leases, 32).await?;
    }
    let seeded_s = t.elapsed().as_secs_f64();

    let config = dir.path().join("leasehold.yaml");
    let db = format!("sqlite:{}", dir.path().join("cp.db").display());
    std::fs::write(&config, config_yaml(&db, a.mem_targets, 15, 10))?;
    let started = Instant::now();
    // SERVE_LOG=leasehold=info shows what the control plane does (its last lines are printed;
    // SERVE_LOG_DIR=DIR keeps the whole log).
    let mut serve = common::procs::spawn_measured_serve(
        &config,
        &sim.kubeconfig,
        common::procs::free_port()?,
        &dir.path().join("serve.log"),
    )?;
    let pid = serve.id().expect("serve pid");

    // Ready: every Lease carries a desired owner (adopted or placed by the control plane).
    let ready_s = loop {
        if let Some(status) = serve.try_wait()? {
            let log = std::fs::read_to_string(dir.path().join("serve.log")).unwrap_or_default();
            anyhow::bail!("leasehold serve exited with {status}:\n{log}");
        }
        let desired = sim
            .leases()
            .await?
            .iter()
            .filter(|l| l["metadata"]["annotations"][protocol::ANN_DESIRED_OWNER].is_string())
            .count();
        if desired >= a.mem_targets {
            break started.elapsed().as_secs_f64();
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(600),
            "{desired} of {} Leases have a desired owner after 600 s",
            a.mem_targets
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    };
    // Then a window of samples: the control loop builds the whole model on every pass and
    // frees it, so RSS swings by tens of MiB from one pass to the next rather than settling.
    let cpu0 = cpu_s(pid);
    let t_window = Instant::now();
    let (mut samples, mut anon): (Vec<u64>, Vec<u64>) = (Vec::new(), Vec::new());
    while t_window.elapsed() < WINDOW {
        tokio::time::sleep(Duration::from_millis(250)).await;
        samples.extend(status_kib(pid, "VmRSS:"));
        anon.extend(status_kib(pid, "RssAnon:"));
    }
    anon.sort_unstable();
    let cpu = (cpu_s(pid) - cpu0) / t_window.elapsed().as_secs_f64();
    samples.sort_unstable();
    let hwm = status_kib(pid, "VmHWM:").unwrap_or(0);
    // Is the control loop still acting? Delete one pod: its targets must get new desired
    // owners (the control plane's failover placement at this size). Only when the Leases are
    // held: with nobody taking them (`Placed`), every member counts as stalled after two lease
    // durations, by design, and there is nowhere to move them.
    let gone = member(0);
    let t_gone = Instant::now();
    if seed == Seed::Held {
        kube_sim::kubelet::crash(&sim.client, NS, &gone).await?;
    }
    let replaced = loop {
        if seed == Seed::Placed {
            break "(not checked: no agents)".to_owned();
        }
        let left = sim
            .leases()
            .await?
            .iter()
            .filter(|l| l["metadata"]["annotations"][protocol::ANN_DESIRED_OWNER] == gone.as_str())
            .count();
        if left == 0 {
            break format!("{:.1} s", t_gone.elapsed().as_secs_f64());
        }
        if t_gone.elapsed() > Duration::from_secs(60) {
            break format!("NOT within 60 s ({left} targets still desired for it)");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let what = match seed {
        Seed::Held => format!(
            "{} Leases seeded held by {} pods ({} adopted)",
            a.mem_targets, a.mem_pods, adopt
        ),
        Seed::Placed => format!(
            "{} targets placed by the control plane over {} pods",
            a.mem_targets, a.mem_pods
        ),
    };
    rows.push((
        format!("control-plane RSS, {what}"),
        format!(
            "median {}, max {}, peak since start (VmHWM) {}; anonymous (RssAnon) median {}; {:.0}% of a core; ready {ready_s:.1} s after start (seeded in {seeded_s:.1} s); a deleted pod's targets re-placed in {replaced}",
            mib(samples[samples.len() / 2]),
            mib(samples[samples.len() - 1]),
            mib(hwm),
            mib(anon[anon.len() / 2]),
            cpu * 100.0
        ),
    ));
    serve.kill().await.ok();
    // The control plane's warnings (RUST_LOG=warn), if any, for the reader of the run.
    let log = std::fs::read_to_string(dir.path().join("serve.log")).unwrap_or_default();
    if let Ok(keep) = std::env::var("SERVE_LOG_DIR") {
        std::fs::write(Path::new(&keep).join(format!("serve-{seed:?}.log")), &log)?;
    }
    let lines: Vec<&str> = log.lines().collect();
    if !lines.is_empty() {
        eprintln!(
            "leasehold serve ({seed:?}) logged {} lines; the last ones:",
            lines.len()
        );
        for l in &lines[lines.len().saturating_sub(20)..] {
            eprintln!("  {l}");
        }
    }
    drop(sim);
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // RUST_LOG=leasehold=debug shows what the engine and agents do.
    common::log_to_stderr();
    let a = args();
    let mut rows = Vec::new();
    if a.parts.contains('a') || a.parts.contains('b') {
        engine_parts(&a, &mut rows).await?;
    }
    if a.parts.contains('c') || a.parts.contains('h') {
        memory_part(&a, Seed::Held, &mut rows).await?;
    }
    if a.parts.contains('c') || a.parts.contains('p') {
        memory_part(&a, Seed::Placed, &mut rows).await?;
    }
    println!(
        "| measure ({}) | value |",
        if a.full { "full" } else { "smoke" }
    );
    println!("| --- | --- |");
    for (k, v) in rows {
        println!("| {k} | {v} |");
    }
    Ok(())
}
