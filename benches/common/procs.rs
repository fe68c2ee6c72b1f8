//! The two processes under the harnesses that test `leasehold serve` over HTTP
//! (`benches/api_load/`, `benches/pages_live/`): the simulator (`leasehold sim
//! --fake-kubelet`) and the server under test (`leasehold serve`), how they are seeded and
//! started, the Lease writes the harnesses make, and the HTTP client they talk to the server
//! with. No measuring here.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use leasehold::model::Cause;
use leasehold::protocol::{self, Desire};
use serde_json::{Value, json};

/// The namespace of the member pods and target Leases.
pub(crate) const NS: &str = "apps";
/// The one cluster the harnesses configure.
pub(crate) const CLUSTER: &str = "c";

pub(crate) type Http = Client<HttpConnector, Empty<Bytes>>;

/// A keep-alive pool to one server (no Nagle delay, as a browser or `wrk` would connect).
pub(crate) fn http_client() -> Http {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(90))
        .pool_max_idle_per_host(64)
        .build(connector)
}

pub(crate) async fn get(client: &Http, uri: &str) -> anyhow::Result<(u16, Bytes)> {
    let resp = client.get(uri.parse()?).await?;
    let status = resp.status().as_u16();
    Ok((status, resp.into_body().collect().await?.to_bytes()))
}

pub(crate) async fn get_json(client: &Http, uri: &str) -> anyhow::Result<Value> {
    let (s, body) = get(client, uri).await?;
    anyhow::ensure!(
        s == 200,
        "GET {uri}: {s} {}",
        String::from_utf8_lossy(&body)
    );
    Ok(serde_json::from_slice(&body)?)
}

pub(crate) fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// The `leasehold` binary under test: the one cargo built for this bench, or `LEASEHOLD_BIN`
/// (to compare two builds with the same harness).
fn bin() -> String {
    std::env::var("LEASEHOLD_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_leasehold").to_owned())
}

/// `leasehold serve --config CONFIG` against `kubeconfig`, its output to `log`, killed when
/// dropped, for the harnesses that measure its memory (`engine_load`, `protocol_load
/// --serve`): with the allocator set as the image and `deploy/base` run it
/// (`MIMALLOC_PURGE_DELAY=0`, `MIMALLOC_EAGER_COMMIT=0`, `MIMALLOC_ARENA_EAGER_COMMIT=0`, each
/// unless set here; mimalloc's own defaults are 10, 1 and 2).
/// `SERVE_LOG=leasehold=info` shows what it does.
pub(crate) fn spawn_measured_serve(
    config: &Path,
    kubeconfig: &Path,
    port: u16,
    log: &Path,
) -> anyhow::Result<tokio::process::Child> {
    let mut cmd = serve_command(config, port, log)?;
    cmd.arg("--kubeconfig").arg(kubeconfig);
    for name in [
        "MIMALLOC_PURGE_DELAY",
        "MIMALLOC_EAGER_COMMIT",
        "MIMALLOC_ARENA_EAGER_COMMIT",
    ] {
        cmd.env(name, std::env::var(name).unwrap_or_else(|_| "0".into()));
    }
    Ok(cmd.spawn()?)
}

/// `leasehold serve --config CONFIG --listen 127.0.0.1:PORT` as the benches run it: identity
/// `cp-bench`, its output to `log` (`SERVE_LOG` is its `RUST_LOG`, `warn` unless set), killed
/// when dropped.
fn serve_command(config: &Path, port: u16, log: &Path) -> anyhow::Result<tokio::process::Command> {
    let out = std::fs::File::create(log)?;
    let mut cmd = tokio::process::Command::new(bin());
    cmd.args(["serve", "--identity", "cp-bench", "--config"])
        .arg(config)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .env(
            "RUST_LOG",
            std::env::var("SERVE_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdout(out.try_clone()?)
        .stderr(out)
        .kill_on_drop(true);
    Ok(cmd)
}

pub(crate) struct Sim {
    // Killed on drop.
    _child: tokio::process::Child,
    pub(crate) pid: u32,
    pub(crate) client: kube::Client,
    kubeconfig: PathBuf,
}

/// Starts `leasehold sim --fake-kubelet` on a free port and connects to it.
pub(crate) async fn start_sim(dir: &Path) -> anyhow::Result<Sim> {
    let kubeconfig = dir.join("sim.kubeconfig");
    let (child, client) = super::start_sim_process(&bin(), &kubeconfig).await?;
    let sim = Sim {
        pid: child.id().expect("sim pid"),
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
        content_type: &str,
        body: Vec<u8>,
    ) -> anyhow::Result<(u16, Vec<u8>)> {
        let req = http::Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", content_type)
            .body(kube::client::Body::from(body))?;
        let resp = self.client.send(req).await?;
        let status = resp.status().as_u16();
        Ok((
            status,
            resp.into_body().collect().await?.to_bytes().to_vec(),
        ))
    }

    async fn post(&self, path: &str, body: Value) -> anyhow::Result<()> {
        let (s, b) = self
            .send("POST", path, "application/json", serde_json::to_vec(&body)?)
            .await?;
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
}

/// Merge-patches the Lease of target `key` on the simulator.
pub(crate) async fn patch_lease(
    client: &kube::Client,
    key: &str,
    patch: Value,
) -> anyhow::Result<()> {
    let path = format!(
        "/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/{}",
        protocol::names::target_lease("leasehold", CLUSTER, key)
    );
    let req = http::Request::patch(path)
        .header("content-type", "application/merge-patch+json")
        .body(kube::client::Body::from(serde_json::to_vec(&patch)?))?;
    let resp = client.send(req).await?;
    anyhow::ensure!(resp.status() == 200, "lease patch: {}", resp.status());
    Ok(())
}

pub(crate) fn member(i: usize) -> String {
    format!("{CLUSTER}-{i}")
}

pub(crate) fn target(i: usize) -> String {
    format!("t-{i:05}")
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

/// Pods (made Ready by the fake kubelet, behind a headless Service) and one Lease per target,
/// already held by pod `i % pods` and desired there, as in a running cluster. Holders promise
/// an hour, so nothing expires while we measure and no renewals are needed. `cp_namespace` is
/// the control plane's namespace (created unless it is [`NS`]).
pub(crate) async fn seed(
    sim: &Sim,
    targets: usize,
    pods: usize,
    cp_namespace: &str,
) -> anyhow::Result<()> {
    if cp_namespace != NS {
        sim.post(
            "/api/v1/namespaces",
            json!({"metadata": {"name": cp_namespace}}),
        )
        .await?;
    }
    sim.post(
        &format!("/api/v1/namespaces/{NS}/services"),
        json!({"metadata": {"name": CLUSTER}, "spec": {"clusterIP": "None", "selector": {"app": CLUSTER},
            "ports": [{"name": "grpc", "port": 57400}]}}),
    )
    .await?;
    let pod_objects: Vec<Value> = (0..pods).map(|i| mk_pod(&member(i))).collect();
    sim.post_all(&format!("/api/v1/namespaces/{NS}/pods"), pod_objects, 8)
        .await?;
    let now = jiff::Timestamp::now();
    let leases: Vec<Value> = (0..targets)
        .map(|i| {
            let holder = member(i % pods);
            let desire = Desire {
                overlap_ms: None,
                term: None,
                owner: holder.clone(),
                cause: Cause::Initial,
                operation: None,
                duration_s: 15,
            };
            let lease = protocol::held_by(
                &protocol::new_target_lease("leasehold", CLUSTER, &target(i), &desire),
                &holder,
                now,
                3600,
            );
            serde_json::to_value(lease).expect("lease json")
        })
        .collect();
    sim.post_all(
        &format!("/apis/coordination.k8s.io/v1/namespaces/{NS}/leases"),
        leases,
        32,
    )
    .await
}

pub(crate) struct Serve {
    pub(crate) child: tokio::process::Child,
    pub(crate) pid: u32,
    pub(crate) base: String,
    log: PathBuf,
}

impl Serve {
    pub(crate) fn log_path(&self) -> &Path {
        &self.log
    }

    pub(crate) fn log_tail(&self, n: usize) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// Fails, with the end of its log, if the server exited during the run.
    pub(crate) fn still_running(&mut self) -> anyhow::Result<()> {
        if let Some(status) = self.child.try_wait()? {
            anyhow::bail!(
                "leasehold serve exited with {status}:\n{}",
                self.log_tail(40)
            );
        }
        Ok(())
    }
}

/// Prints a run's figures as a Markdown table.
pub(crate) fn print_rows(full: bool, rows: &[(String, String)]) {
    println!(
        "| measure ({}) | value |",
        if full { "full" } else { "smoke" }
    );
    println!("| --- | --- |");
    for (k, v) in rows {
        println!("| {k} | {v} |");
    }
}

/// Starts `leasehold serve` for one cluster of `targets` inline targets (its control plane in
/// `cp_namespace`), auth `none` on a free loopback port, and waits until it is ready and its
/// model shows every target held.
pub(crate) async fn start_serve(
    dir: &Path,
    sim: &Sim,
    targets: usize,
    cp_namespace: &str,
) -> anyhow::Result<Serve> {
    let list: Vec<String> = (0..targets).map(target).collect();
    let config = dir.join("leasehold.yaml");
    std::fs::write(
        &config,
        format!(
            "database: sqlite:{}
control_plane: {{namespace: {}}}
http: {{auth: {{mode: none}}}}
clusters:
- name: {CLUSTER}
  namespace: {NS}
  selector: {{app: {CLUSTER}}}
  headless_service: {CLUSTER}
  targets: {{inline: [{}]}}
  policy: {{lease_duration: 15s, on_join: 'off'}}
",
            dir.join("cp.db").display(),
            cp_namespace,
            list.join(", "),
        ),
    )?;
    let port = free_port()?;
    let log = dir.join("serve.log");
    // SERVE_LOG=leasehold=debug shows what the server does (its last lines are printed;
    // SERVE_LOG_DIR=DIR keeps the whole log).
    let child = serve_command(&config, port, &log)?
        .env("KUBECONFIG", &sim.kubeconfig)
        .spawn()?;
    let mut serve = Serve {
        pid: child.id().expect("serve pid"),
        child,
        base: format!("http://127.0.0.1:{port}"),
        log,
    };
    let client = http_client();
    let started = Instant::now();
    loop {
        if let Some(status) = serve.child.try_wait()? {
            anyhow::bail!(
                "leasehold serve exited with {status}:\n{}",
                serve.log_tail(40)
            );
        }
        let ready = matches!(
            get(&client, &format!("{}/readyz", serve.base)).await,
            Ok((200, _))
        );
        if ready {
            let c = get_json(
                &client,
                &format!("{}/api/v1/clusters/{CLUSTER}", serve.base),
            )
            .await?;
            if c["targets"]["owned"].as_u64() == Some(targets as u64) {
                return Ok(serve);
            }
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(300),
            "leasehold serve not ready with every target held after 300 s:\n{}",
            serve.log_tail(40)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// One Lease write [`open_loop_moves`] made: target `key` moved to pod `to`, sent at `at`
/// (monotonic) and `wall` (the system clock, which a browser's `performance.timeOrigin +
/// performance.now()` also reads), both taken just before the write went out.
pub(crate) struct Sent {
    pub(crate) key: String,
    pub(crate) to: String,
    pub(crate) at: Instant,
    pub(crate) wall: std::time::SystemTime,
}

/// Open-loop Lease writes to the simulator: each `(target, pod)` of `moves` sets that target's
/// desired owner and holder to the pod, as a finished handoff leaves it. Write `i` is due at
/// `start + i / rate` and sent then whatever earlier writes are doing. Returns the writes and
/// their round trips.
pub(crate) async fn open_loop_moves(
    client: &kube::Client,
    moves: Vec<(String, String)>,
    rate: f64,
    start: tokio::time::Instant,
) -> anyhow::Result<(Vec<Sent>, Vec<Duration>)> {
    let mut writes = tokio::task::JoinSet::new();
    let mut sent = Vec::with_capacity(moves.len());
    for (i, (key, to)) in moves.into_iter().enumerate() {
        tokio::time::sleep_until(start + Duration::from_secs_f64(i as f64 / rate)).await;
        let now = serde_json::to_value(MicroTime(jiff::Timestamp::now()))?;
        let patch = json!({
            "metadata": {"annotations": {protocol::ANN_DESIRED_OWNER: to}},
            "spec": {"holderIdentity": to, "acquireTime": now, "renewTime": now, "leaseTransitions": 1},
        });
        let client = client.clone();
        let (k, at, wall) = (key.clone(), Instant::now(), std::time::SystemTime::now());
        sent.push(Sent { key, to, at, wall });
        writes.spawn(async move {
            patch_lease(&client, &k, patch).await?;
            anyhow::Ok(at.elapsed())
        });
    }
    let mut rtt = Vec::with_capacity(sent.len());
    while let Some(w) = writes.join_next().await {
        rtt.push(w??);
    }
    Ok((sent, rtt))
}
