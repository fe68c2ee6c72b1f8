//! Real gnmic processes for the managed-mode tests: `gnmic collect` per member (its REST API on
//! a loopback port), a live gNMI device (a second gnmic with a `gnmi-server`, answering
//! Capabilities and Subscribe), and [`Watch`], which polls every collector's own API and
//! records, per target, which collectors run it — the work-level truth, read from gnmic and
//! not from Leasehold. gnmic is built from `../shared/gnmic/` by `scripts/gnmic.sh`; without
//! it the tests fail with the reason when `CI` is set and skip with it otherwise.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;

/// The gnmic binary, or `None` (said why) where it cannot be had outside CI.
pub fn binary() -> Option<PathBuf> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/gnmic.sh");
    let why = match std::process::Command::new(&script)
        .arg("path")
        .stdin(Stdio::null())
        .output()
    {
        Ok(out) if out.status.success() => {
            return Some(PathBuf::from(
                String::from_utf8_lossy(&out.stdout).trim().to_owned(),
            ));
        }
        Ok(out) => format!(
            "{} path exited with {}: {}",
            script.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ),
        Err(e) => format!("running {}: {e}", script.display()),
    };
    if std::env::var_os("CI").is_some() {
        panic!("the gnmic tests cannot run: {why}");
    }
    eprintln!("SKIPPED: the gnmic tests cannot run: {why}");
    None
}

pub use super::free_addr;

/// A gnmic process; killed when dropped.
pub struct Gnmic {
    child: Option<tokio::process::Child>,
    bin: PathBuf,
    config: PathBuf,
    args: Vec<String>,
    log: PathBuf,
    /// Its API (collectors) or its gNMI server (devices).
    pub addr: SocketAddr,
}

impl Gnmic {
    /// `gnmic collect` with its API on a free loopback port and one subscription (`all`).
    pub fn collector(bin: &Path, dir: &Path, name: &str) -> Gnmic {
        let addr = free_addr();
        let config = dir.join(format!("gnmic-{name}.yaml"));
        std::fs::write(
            &config,
            format!(
                "api-server:\n  address: {addr}\nlog: true\nsubscriptions:\n  all:\n    paths: [\"/\"]\n    mode: stream\n    stream-mode: sample\n    sample-interval: 1s\n"
            ),
        )
        .unwrap();
        let mut g = Gnmic {
            child: None,
            bin: bin.to_owned(),
            config,
            args: vec!["collect".into()],
            log: dir.join(format!("gnmic-{name}.log")),
            addr,
        };
        g.start();
        g
    }

    /// A device: gnmic's gNMI server on a free loopback port (`gnmic subscribe --watch-config`
    /// with an API, so that it keeps running with no target of its own).
    pub fn device(bin: &Path, dir: &Path, name: &str) -> Gnmic {
        Gnmic::device_at(bin, dir, name, free_addr())
    }

    /// A device serving at `addr`.
    pub fn device_at(bin: &Path, dir: &Path, name: &str, addr: SocketAddr) -> Gnmic {
        let api = free_addr();
        let config = dir.join(format!("device-{name}.yaml"));
        std::fs::write(
            &config,
            format!(
                "gnmi-server:\n  address: {addr}\n  skip-verify: true\nsubscriptions:\n  all:\n    paths: [\"/\"]\n"
            ),
        )
        .unwrap();
        let mut g = Gnmic {
            child: None,
            bin: bin.to_owned(),
            config,
            args: vec![
                "subscribe".into(),
                "--watch-config".into(),
                "--api".into(),
                api.to_string(),
            ],
            log: dir.join(format!("device-{name}.log")),
            addr,
        };
        g.start();
        g
    }

    /// Starts the process (again, after [`Gnmic::kill`]: a restarted gnmic forgets every
    /// target it was given over its API).
    pub fn start(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let child = tokio::process::Command::new(&self.bin)
            .arg("--config")
            .arg(&self.config)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .expect("gnmic starts");
        self.child = Some(child);
    }

    /// Sends `signal` (`-STOP`, `-CONT`) to the process.
    pub fn signal(&self, signal: &str) {
        let pid = self
            .child
            .as_ref()
            .and_then(|c| c.id())
            .expect("gnmic runs")
            .to_string();
        let ok = std::process::Command::new("kill")
            .args([signal, &pid])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {signal} {pid}");
    }

    /// SIGKILL, and waits for the exit.
    pub async fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill().await;
        }
    }

    /// Waits (10 s at most) until it accepts connections: returns within 10 ms of it (a restart
    /// is measured from here).
    pub async fn listening(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while tokio::net::TcpStream::connect(self.addr).await.is_err() {
            assert!(
                Instant::now() < deadline,
                "gnmic never listened on {}: {}",
                self.addr,
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// What gnmic's `GET /api/v1/targets` says of one target.
#[derive(Debug, Clone, serde::Deserialize)]
struct Listed {
    name: String,
    #[serde(default)]
    state: State,
}

#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
struct State {
    #[serde(default)]
    state: String,
    #[serde(default)]
    connection_state: String,
}

type Client = hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    http_body_util::Empty<bytes::Bytes>,
>;

/// One read of one collector: targets it runs, and those it really collects (`READY`).
/// `None`: it did not answer within a second. A clustered `gnmic subscribe` tells no state:
/// every target it lists counts as collected.
async fn read(client: &Client, addr: SocketAddr) -> Option<(BTreeSet<String>, BTreeSet<String>)> {
    use http_body_util::BodyExt as _;
    let uri: http::Uri = format!("http://{addr}/api/v1/targets").parse().ok()?;
    let body = tokio::time::timeout(Duration::from_secs(1), async {
        let resp = client.get(uri).await.ok()?;
        if !resp.status().is_success() {
            return None;
        }
        Some(resp.into_body().collect().await.ok()?.to_bytes())
    })
    .await
    .ok()??;
    let value: serde_json::Value = serde_json::from_slice(&body).ok()?;
    if let Some(map) = value.as_object() {
        // A clustered `gnmic subscribe`'s API: a map of the targets it runs by name, no state
        // (a target it was given and holds the lock of; see [`started`]).
        let running: BTreeSet<String> = map.keys().cloned().collect();
        return Some((running.clone(), running));
    }
    let list: Vec<Listed> = serde_json::from_value(value).ok()?;
    let running = list
        .iter()
        .filter(|l| l.state.state == "running")
        .map(|l| l.name.clone())
        .collect();
    let collecting = list
        .iter()
        .filter(|l| l.state.state == "running" && l.state.connection_state == "READY")
        .map(|l| l.name.clone())
        .collect();
    Some((running, collecting))
}

#[derive(Default)]
struct Record {
    /// Member → its collector's API.
    collectors: BTreeMap<String, SocketAddr>,
    /// Target → the members whose gnmic collects it, at the last round.
    collecting: BTreeMap<String, BTreeSet<String>>,
    /// Target → when it was last seen collected by anyone.
    last_collected: BTreeMap<String, Instant>,
    /// When the last round ended.
    previous_round: Option<Instant>,
    /// Per target, every time with no collector seen for at least one round, in order.
    gaps: Vec<(String, Duration)>,
    /// Targets run by two collectors at once, with when and by whom.
    overlaps: Vec<String>,
    rounds: u64,
}

/// Polls every collector's API every `period`, in rounds of two reads each: a target counts as
/// run by two collectors at once when both list it as `running` in both of their reads (read
/// A, B, …, then A, B, … again: A ran it at its two reads and B between them, so unless A
/// stopped and restarted it within milliseconds, both ran it at B's first read).
pub struct Watch {
    record: Arc<Mutex<Record>>,
    task: JoinHandle<()>,
    start: Instant,
}

impl Watch {
    pub fn start(period: Duration) -> Watch {
        let record = Arc::new(Mutex::new(Record::default()));
        let r = record.clone();
        let start = Instant::now();
        let task = tokio::spawn(async move {
            let client: Client =
                hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                    .build_http();
            loop {
                let collectors = r.lock().unwrap().collectors.clone();
                let mut first = Reads::new();
                for (m, a) in &collectors {
                    if let Some(x) = read(&client, *a).await {
                        first.insert(m.clone(), x);
                    }
                }
                let mut second = Reads::new();
                for (m, a) in &collectors {
                    if let Some(x) = read(&client, *a).await {
                        second.insert(m.clone(), x);
                    }
                }
                let now = Instant::now();
                tally(&mut r.lock().unwrap(), &first, &second, now, start);
                tokio::time::sleep(period).await;
            }
        });
        Watch {
            record,
            task,
            start,
        }
    }

    /// Watches `member`'s collector from now on.
    pub fn add(&self, member: &str, api: SocketAddr) {
        self.record
            .lock()
            .unwrap()
            .collectors
            .insert(member.to_owned(), api);
    }

    /// No longer watches `member`'s collector (its pod is gone).
    pub fn remove(&self, member: &str) {
        self.record.lock().unwrap().collectors.remove(member);
    }

    /// Target → members whose gnmic collects it, as of the last round.
    pub fn collecting(&self) -> BTreeMap<String, BTreeSet<String>> {
        self.record.lock().unwrap().collecting.clone()
    }

    /// The rounds so far.
    pub fn rounds(&self) -> u64 {
        self.record.lock().unwrap().rounds
    }

    /// Waits until a round that began after this call has ended: [`Watch::collecting`] then
    /// tells nothing older than the call.
    pub async fn fresh_round(&self) {
        let r = self.rounds();
        while self.rounds() < r + 2 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Every overlap seen.
    pub fn overlaps(&self) -> Vec<String> {
        self.record.lock().unwrap().overlaps.clone()
    }

    /// The gaps recorded since the last call, and forgets them.
    pub fn take_gaps(&self) -> Vec<(String, Duration)> {
        std::mem::take(&mut self.record.lock().unwrap().gaps)
    }

    /// Time since the watch started.
    pub fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }
}

type Reads = BTreeMap<String, (BTreeSet<String>, BTreeSet<String>)>;

/// Adds one round's two reads to `rec`.
fn tally(rec: &mut Record, first: &Reads, second: &Reads, now: Instant, start: Instant) {
    rec.rounds += 1;
    // Running throughout the round, per target.
    let mut runners: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (m, (run1, _)) in first {
        let Some((run2, _)) = second.get(m) else {
            continue;
        };
        for t in run1.intersection(run2) {
            runners.entry(t.clone()).or_default().push(m.clone());
        }
    }
    for (t, ms) in &runners {
        if ms.len() > 1 {
            let at = now.duration_since(start);
            rec.overlaps.push(format!("{t} run by {ms:?} at {at:?}"));
        }
    }
    // Collected (READY) at the round's second read.
    let mut collecting: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (m, (_, col)) in second {
        for t in col {
            collecting.entry(t.clone()).or_default().insert(m.clone());
        }
    }
    // A target missing from at least one round since it was last collected had a gap: from
    // that round's predecessor to now (an upper bound, to within a round).
    for t in collecting.keys() {
        if let Some(last) = rec.last_collected.insert(t.clone(), now)
            && rec.previous_round.is_some_and(|p| last < p)
        {
            rec.gaps.push((t.clone(), now.duration_since(last)));
        }
    }
    rec.collecting = collecting;
    rec.previous_round = Some(now);
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

// gnmic's own clustering: `gnmic subscribe` members with its Kubernetes locker.

/// The `unshare` arguments that give a process its own mount and UTS namespaces (directly as
/// root, else inside a user namespace), or `None` (said why) where there are none outside CI.
/// gnmic's Kubernetes locker takes its identity from the hostname and reads client-go's fixed
/// service-account path, so each member needs both namespaces of its own.
pub fn namespaces() -> Option<Vec<&'static str>> {
    let why = match kube_sim::testkit::unshare_args() {
        Ok(args) => return Some(args),
        Err(e) => format!("no mount and UTS namespaces for gnmic's clustered members ({e})"),
    };
    if std::env::var_os("CI").is_some() {
        panic!("the gnmic clustering tests cannot run: {why}");
    }
    eprintln!("SKIPPED: the gnmic clustering tests cannot run: {why}");
    None
}

/// What a clustered gnmic member needs to reach the API server as if in a pod.
pub struct InCluster {
    /// The service-account directory (`token`, `ca.crt`, `namespace`).
    pub service_account: PathBuf,
    /// `KUBERNETES_SERVICE_HOST` and `_PORT`.
    pub env: Vec<(String, String)>,
    /// The `unshare` arguments ([`namespaces`]).
    pub unshare: Vec<&'static str>,
}

/// The simulator a clustered gnmic runs against — HTTPS (client-go's in-cluster config needs
/// it), loopback addresses accepted in Endpoints, the endpoints controller (the pods are left
/// to the test) — with namespace `ns`, and what a member needs to reach it as if in a pod: the
/// service-account files (written into `dir`), the in-cluster environment and `unshare`.
pub async fn clustered_sim(
    ns: &str,
    dir: &Path,
    unshare: Vec<&'static str>,
) -> (super::TestSim, InCluster) {
    let mut t = super::start_with(kube_sim::SimOptions {
        tls: true,
        loopback_endpoints: true,
        ..kube_sim::SimOptions::default()
    })
    .await;
    t.spawn_kubelet_with(kube_sim::kubelet::KubeletOptions {
        all_pods: false,
        namespace: None,
    });
    t.create_namespace(ns).await;
    let sa = dir.join("serviceaccount");
    t.sim()
        .write_service_account(&sa, kube_sim::auth::DEFAULT_ADMIN_TOKEN)
        .unwrap();
    let env = t
        .sim()
        .in_cluster_env()
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
    let in_cluster = InCluster {
        service_account: sa,
        env,
        unshare,
    };
    (t, in_cluster)
}

/// One member of a [`GnmicCluster`].
struct ClusterMember {
    ip: String,
    config: PathBuf,
    log: PathBuf,
    child: Option<tokio::process::Child>,
}

/// A gnmic cluster clustering itself with its Kubernetes locker: one `gnmic subscribe` per
/// member ("pod"), each with the pod's name as hostname and instance name, its API on the pod's
/// IP and the cluster's one port. Every process is killed when this is dropped.
pub struct GnmicCluster {
    bin: PathBuf,
    in_cluster: InCluster,
    /// The API port of every member.
    pub port: u16,
    members: BTreeMap<String, ClusterMember>,
}

impl GnmicCluster {
    /// Writes each member's configuration into `dir`: cluster `cluster`, locker Leases in
    /// `namespace` lasting `lease_s`, `targets` (gnmic's `targets:` map), a subscription and
    /// an output that discards; `members` are (pod name, pod IP). Starts none of them.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        bin: &Path,
        in_cluster: InCluster,
        dir: &Path,
        cluster: &str,
        namespace: &str,
        lease_s: u64,
        members: &[(&str, &str)],
        targets: &serde_json::Value,
    ) -> GnmicCluster {
        let ips: Vec<String> = members.iter().map(|(_, ip)| (*ip).to_owned()).collect();
        let port = kube_sim::testkit::common_port(&ips);
        let mut out = BTreeMap::new();
        for (name, ip) in members {
            let config = serde_json::json!({
                "log": true,
                "api-server": { "address": format!("{ip}:{port}") },
                "clustering": {
                    "cluster-name": cluster,
                    "instance-name": name,
                    "locker": {
                        "type": "k8s",
                        "namespace": namespace,
                        "lease-duration": format!("{lease_s}s"),
                    },
                },
                "subscriptions": { "all": { "paths": ["/"], "mode": "stream",
                    "stream-mode": "sample", "sample-interval": "1s" } },
                "outputs": { "discard": { "type": "file", "filename": "/dev/null",
                    "format": "json" } },
                "targets": targets,
            });
            let path = dir.join(format!("{name}.json"));
            std::fs::write(&path, serde_json::to_vec_pretty(&config).unwrap()).unwrap();
            out.insert(
                (*name).to_owned(),
                ClusterMember {
                    ip: (*ip).to_owned(),
                    config: path,
                    log: dir.join(format!("{name}.log")),
                    child: None,
                },
            );
        }
        GnmicCluster {
            bin: bin.to_owned(),
            in_cluster,
            port,
            members: out,
        }
    }

    /// Starts member `name` (again, after [`GnmicCluster::kill`]), its output appended to its
    /// log.
    pub fn start(&mut self, name: &str) {
        let m = self.members.get_mut(name).expect("a member");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&m.log)
            .unwrap();
        let mut cmd = tokio::process::Command::new("unshare");
        cmd.args(&self.in_cluster.unshare)
            .args(["--", "sh", "-c", kube_sim::testkit::IN_POD, "sh", name])
            .arg(&self.in_cluster.service_account)
            .arg(&self.bin)
            .arg("--config")
            .arg(&m.config)
            .arg("subscribe")
            .envs(self.in_cluster.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .kill_on_drop(true);
        m.child = Some(cmd.spawn().expect("unshare runs"));
    }

    /// SIGKILL to member `name`, and waits for its exit.
    pub async fn kill(&mut self, name: &str) {
        if let Some(mut c) = self.members.get_mut(name).and_then(|m| m.child.take()) {
            let _ = c.kill().await;
        }
    }

    /// SIGTERM to member `name` (a pod's stop), and waits (10 s at most, then SIGKILL) for its
    /// exit.
    pub async fn stop(&mut self, name: &str) {
        let Some(mut c) = self.members.get_mut(name).and_then(|m| m.child.take()) else {
            return;
        };
        if let Some(pid) = c.id() {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
        }
        if tokio::time::timeout(Duration::from_secs(10), c.wait())
            .await
            .is_err()
        {
            let _ = c.kill().await;
        }
    }

    /// Member `name`'s API address.
    pub fn api(&self, name: &str) -> SocketAddr {
        let ip = &self.members[name].ip;
        format!("{ip}:{}", self.port).parse().unwrap()
    }

    /// The members' names.
    pub fn names(&self) -> Vec<String> {
        self.members.keys().cloned().collect()
    }

    /// The end of each member's log, for a failure message.
    pub fn tails(&self) -> String {
        let mut out = String::new();
        for (name, m) in &self.members {
            let text = std::fs::read_to_string(&m.log).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let from = lines.len().saturating_sub(20);
            out.push_str(&format!(
                "--- {name} ({}) ---\n{}\n",
                m.log.display(),
                lines[from..].join("\n")
            ));
        }
        out
    }
}

impl Drop for GnmicCluster {
    fn drop(&mut self) {
        for m in self.members.values_mut() {
            if let Some(c) = m.child.as_mut() {
                let _ = c.start_kill();
            }
        }
    }
}

/// One `GET` of a gnmic API: its JSON body if it answered 200 within 3 s.
pub async fn api_get(addr: SocketAddr, path: &str) -> Option<serde_json::Value> {
    kube_sim::testkit::get_json_http10(&addr.to_string(), path).await
}

/// A clustered gnmic's own account of its cluster (`GET /api/v1/cluster`): the leader, and each
/// member it counts (from the `{cluster}-gnmic-api` Endpoints) with the targets locked in its
/// name (from the target Leases' labels, expired or not).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterView {
    pub leader: String,
    /// Member → its locked targets.
    pub members: BTreeMap<String, BTreeSet<String>>,
    /// Targets locked in anyone's name (members it no longer counts included).
    pub locked: usize,
}

/// [`ClusterView`] as the member at `addr` says it.
pub async fn cluster_view(addr: SocketAddr) -> Option<ClusterView> {
    let v = api_get(addr, "/api/v1/cluster").await?;
    let members = v["members"]
        .as_array()
        .map(|ms| {
            ms.iter()
                .map(|m| {
                    let targets = m["locked-targets"]
                        .as_array()
                        .map(|ts| {
                            ts.iter()
                                .filter_map(|t| t.as_str().map(str::to_owned))
                                .collect()
                        })
                        .unwrap_or_default();
                    (m["name"].as_str().unwrap_or_default().to_owned(), targets)
                })
                .collect()
        })
        .unwrap_or_default();
    Some(ClusterView {
        leader: v["leader"].as_str().unwrap_or_default().to_owned(),
        members,
        locked: v["number-of-locked-targets"].as_u64().unwrap_or(0) as usize,
    })
}

/// The targets a clustered (`gnmic subscribe`) member has started (`GET /api/v1/targets`, a map
/// by name): given to it by the leader and locked by it, or still waiting for the lock.
pub async fn started(addr: SocketAddr) -> Option<BTreeSet<String>> {
    let v = api_get(addr, "/api/v1/targets").await?;
    Some(v.as_object()?.keys().cloned().collect())
}

/// One request with a JSON body (or none) to a gnmic API (HTTP/1.0); its status, 0 when it did
/// not answer within 3 s.
pub async fn api_send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&serde_json::Value>,
) -> u16 {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let fut = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        s.write_all(
            format!(
                "{method} {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
                 Content-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        )
        .await
        .ok()?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.ok()?;
        let text = String::from_utf8_lossy(&buf);
        text.split_whitespace().nth(1)?.parse().ok()
    };
    tokio::time::timeout(Duration::from_secs(3), fut)
        .await
        .ok()
        .flatten()
        .unwrap_or(0)
}

/// Creates pod `name` (label `app: gnmic`, as a StatefulSet's would be) in `ns`, Running and
/// Ready with IP `ip` — the test plays its kubelet.
pub async fn ready_pod(client: &kube::Client, ns: &str, name: &str, ip: &str) {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Api, Patch, PatchParams, PostParams};
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pod = super::mk_pod(name, serde_json::json!({ "app": "gnmic" }));
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(pod).unwrap(),
    )
    .await
    .expect("pod");
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let ready = serde_json::json!({ "type": "Ready", "status": "True", "lastTransitionTime": now });
    pods.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({ "status": {
            "phase": "Running", "podIP": ip, "podIPs": [{ "ip": ip }], "conditions": [ready]
        } })),
    )
    .await
    .expect("pod status");
}

/// Creates gnmic cluster `cluster`'s headless Service `{cluster}-gnmic-api` in `ns` (selector
/// `app: gnmic`, the API `port`); the fake kubelet keeps its Endpoints and EndpointSlice.
pub async fn api_service(client: &kube::Client, ns: &str, cluster: &str, port: u16) {
    use k8s_openapi::api::core::v1::Service;
    use kube::api::{Api, PostParams};
    let svcs: Api<Service> = Api::namespaced(client.clone(), ns);
    svcs.create(
        &PostParams::default(),
        &serde_json::from_value(serde_json::json!({
            "metadata": { "name": format!("{cluster}-gnmic-api") },
            "spec": { "clusterIP": "None", "selector": { "app": "gnmic" },
                      "ports": [{ "name": "api", "port": port, "targetPort": port }] }
        }))
        .unwrap(),
    )
    .await
    .expect("service");
}

/// Waits (10 s at most) until the Endpoints of `{cluster}-gnmic-api` list `n` ready addresses.
pub async fn endpoints_ready(client: &kube::Client, ns: &str, cluster: &str, n: usize) {
    use k8s_openapi::api::core::v1::Endpoints;
    let endpoints: kube::Api<Endpoints> = kube::Api::namespaced(client.clone(), ns);
    let name = format!("{cluster}-gnmic-api");
    super::eventually(Duration::from_secs(10), || async {
        let ep = endpoints.get(&name).await.ok()?;
        let got = ep
            .subsets
            .as_ref()
            .and_then(|s| s.first())
            .and_then(|s| s.addresses.as_ref())
            .map_or(0, Vec::len);
        (got == n).then_some(())
    })
    .await
    .unwrap_or_else(|| panic!("the Endpoints of {name} never listed {n} ready addresses"));
}
