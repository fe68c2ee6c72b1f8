//! The test kit (feature `testkit`): what integration tests against Kubernetes share — an API
//! server to test against, kube-rs clients for it, kubectl with its kubeconfig, raw requests and
//! watches, a proxy whose link can be cut or hung, and small object builders. The simulator's own tests and the
//! product's use it alike.
//!
//! The backend is chosen at run time. By default [`start`] runs an in-process simulator on an
//! ephemeral port (fast, the usual tier). With `LEASEHOLD_TEST_KUBECONFIG` set (what
//! `scripts/envtest.sh run` exports) it connects to that real kube-apiserver instead, as the
//! kubeconfig's current (admin) user, and gives the test a namespace of its own (`t.ns`):
//! tests run in parallel against one apiserver, and a deleted namespace never goes away there
//! (no controller-manager). On the simulator `t.ns` is `default`.
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Output;
use std::time::Duration;

use crate::{SimOptions, Simulator};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

/// The variable naming a real kube-apiserver's kubeconfig (set by `scripts/envtest.sh run`).
pub const REAL_KUBECONFIG_VAR: &str = "LEASEHOLD_TEST_KUBECONFIG";

/// The kubeconfig of the real kube-apiserver to test against, when one is given.
pub fn real_kubeconfig() -> Option<PathBuf> {
    std::env::var_os(REAL_KUBECONFIG_VAR)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// True on the real-apiserver tier.
pub fn real_tier() -> bool {
    real_kubeconfig().is_some()
}

/// Returns from the calling test on the real-apiserver tier, saying why it only runs on the
/// simulator (it reaches into the simulator's internals or options). Every use is listed in
/// docs/fidelity.md.
#[macro_export]
macro_rules! sim_only {
    ($why:expr) => {
        if $crate::testkit::real_tier() {
            eprintln!("SKIPPED on the real apiserver (simulator only): {}", $why);
            return;
        }
    };
}

/// What a [`TestSim`] talks to.
pub enum Backend {
    /// The in-process simulator.
    Sim(Simulator),
    /// A real kube-apiserver at this URL (`https://127.0.0.1:port`).
    Real { url: String },
}

/// A Kubernetes API for one test: the simulator or a real kube-apiserver, a kube-rs client for
/// its admin user whose default namespace is [`TestSim::ns`], and a kubeconfig file for kubectl
/// whose context namespace is the same.
pub struct TestSim {
    pub backend: Backend,
    pub client: kube::Client,
    pub kubeconfig: PathBuf,
    /// The namespace this test owns: `default` on the simulator, a fresh one on a real apiserver.
    pub ns: String,
    kubelet: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
    _dir: tempfile::TempDir,
}

impl Drop for TestSim {
    fn drop(&mut self) {
        if let Some(k) = self.kubelet.take() {
            k.abort();
        }
    }
}

/// Starts the backend chosen by the environment: a real kube-apiserver when
/// `LEASEHOLD_TEST_KUBECONFIG` is set, else a simulator with default options.
pub async fn start() -> TestSim {
    match real_kubeconfig() {
        Some(path) => start_real_at(&path).await,
        None => start_sim().await,
    }
}

/// Always a simulator with default options (the differential tests run both).
pub async fn start_sim() -> TestSim {
    start_with(SimOptions::default()).await
}

/// A simulator with the given options (these tests are simulator-only: guard them with
/// [`sim_only!`]).
pub async fn start_with(opts: SimOptions) -> TestSim {
    let sim = Simulator::start("127.0.0.1:0".parse().unwrap(), opts)
        .await
        .expect("simulator starts");
    let client = sim.client().await.expect("client");
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, sim.kubeconfig()).expect("write kubeconfig");
    TestSim {
        backend: Backend::Sim(sim),
        client,
        kubeconfig,
        ns: "default".into(),
        kubelet: None,
        _dir: dir,
    }
}

/// The real kube-apiserver, when `LEASEHOLD_TEST_KUBECONFIG` is set.
pub async fn start_real() -> Option<TestSim> {
    match real_kubeconfig() {
        Some(path) => Some(start_real_at(&path).await),
        None => None,
    }
}

/// A fresh namespace name: `lh-` and 10 random lowercase hex digits.
pub fn fresh_ns() -> String {
    format!("lh-{}", &uuid::Uuid::new_v4().simple().to_string()[..10])
}

/// Points the kubeconfig's current context at namespace `ns`.
fn set_context_namespace(kc: &mut kube::config::Kubeconfig, ns: &str) {
    let current = kc.current_context.clone().expect("current-context");
    for c in &mut kc.contexts {
        if c.name == current
            && let Some(ctx) = c.context.as_mut()
        {
            ctx.namespace = Some(ns.to_owned());
        }
    }
}

async fn start_real_at(path: &std::path::Path) -> TestSim {
    let mut kc = kube::config::Kubeconfig::read_from(path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let ns = fresh_ns();
    set_context_namespace(&mut kc, &ns);
    let cfg = kube::Config::from_custom_kubeconfig(kc.clone(), &Default::default())
        .await
        .expect("config from the real kubeconfig");
    let url = cfg.cluster_url.to_string().trim_end_matches('/').to_owned();
    let client = kube::Client::try_from(cfg).expect("client");
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, serde_json::to_vec_pretty(&kc).unwrap()).expect("kubeconfig");
    let nss: Api<Namespace> = Api::all(client.clone());
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({ "metadata": { "name": ns } })).unwrap(),
    )
    .await
    .unwrap_or_else(|e| panic!("creating the test namespace {ns}: {e}"));
    TestSim {
        backend: Backend::Real { url },
        client,
        kubeconfig,
        ns,
        kubelet: None,
        _dir: dir,
    }
}

impl TestSim {
    /// True when this is a real kube-apiserver.
    pub fn is_real(&self) -> bool {
        matches!(self.backend, Backend::Real { .. })
    }

    /// The namespace for the objects under test: on a real apiserver this test's own
    /// ([`TestSim::ns`]; parallel tests share the apiserver), on the simulator `sim_ns`, which
    /// this creates.
    pub async fn namespace_or(&self, sim_ns: &str) -> String {
        if self.is_real() {
            return self.ns.clone();
        }
        self.create_namespace(sim_ns).await;
        sim_ns.to_owned()
    }

    /// Creates namespace `name` (on either backend). Panics if it cannot.
    pub async fn create_namespace(&self, name: &str) {
        let nss: Api<Namespace> = Api::all(self.client.clone());
        nss.create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": name}})).expect("namespace"),
        )
        .await
        .unwrap_or_else(|e| panic!("creating namespace {name}: {e}"));
    }

    /// The simulator. Panics on a real apiserver: tests that need it return early through
    /// [`sim_only!`] first.
    pub fn sim(&self) -> &Simulator {
        match &self.backend {
            Backend::Sim(s) => s,
            Backend::Real { .. } => panic!("simulator internals used on the real tier"),
        }
    }

    /// The API's base URL (`http://…` for the simulator, `https://…` for a real apiserver).
    pub fn url(&self) -> String {
        match &self.backend {
            Backend::Sim(s) => s.url(),
            Backend::Real { url } => url.clone(),
        }
    }

    /// The API's socket address.
    pub fn addr(&self) -> SocketAddr {
        match &self.backend {
            Backend::Sim(s) => s.addr(),
            Backend::Real { url } => {
                let hostport = url.rsplit("//").next().unwrap_or(url);
                hostport.parse().expect("apiserver URL is ip:port")
            }
        }
    }

    /// The bearer token of the admin user the client acts as.
    pub fn admin_token(&self) -> String {
        let kc: Value = serde_json::from_str(&self.kubeconfig_text()).expect("kubeconfig is JSON");
        let current = &kc["current-context"];
        let user = kc["contexts"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| &c["name"] == current))
            .map(|c| c["context"]["user"].clone())
            .expect("the current context");
        kc["users"]
            .as_array()
            .and_then(|us| us.iter().find(|u| u["name"] == user))
            .and_then(|u| u["user"]["token"].as_str())
            .map(str::to_owned)
            .expect("the current user's token")
    }

    /// The kubeconfig's text (JSON).
    pub fn kubeconfig_text(&self) -> String {
        std::fs::read_to_string(&self.kubeconfig).expect("kubeconfig")
    }

    /// Runs the fake kubelet, EndpointSlice and load-balancer loops (`crate::kubelet`,
    /// API clients) until the TestSim is dropped: over every namespace on the simulator, over
    /// this test's namespace on a real apiserver (which has no kubelet or controller-manager;
    /// the loops do their jobs, as envtest users do by hand, and parallel tests must not drive
    /// each other's pods).
    pub fn spawn_kubelet(&mut self) {
        self.spawn_kubelet_with(crate::kubelet::KubeletOptions::default());
    }

    /// As [`TestSim::spawn_kubelet`] with options (on a real apiserver the namespace is always
    /// this test's).
    pub fn spawn_kubelet_with(&mut self, mut opts: crate::kubelet::KubeletOptions) {
        if self.is_real() {
            opts.namespace = Some(self.ns.clone());
        }
        let client = self.client.clone();
        if let Some(old) = self
            .kubelet
            .replace(tokio::spawn(crate::kubelet::run(client, opts)))
        {
            old.abort();
        }
    }

    /// Moves this test into a fresh namespace of its own: creates it, and points the client's
    /// default namespace and the kubeconfig's context at it.
    pub async fn use_fresh_namespace(&mut self) {
        let ns = fresh_ns();
        let nss: Api<Namespace> = Api::all(self.client.clone());
        nss.create(
            &PostParams::default(),
            &serde_json::from_value(json!({ "metadata": { "name": ns } })).unwrap(),
        )
        .await
        .unwrap_or_else(|e| panic!("creating the test namespace {ns}: {e}"));
        let mut kc: kube::config::Kubeconfig =
            serde_json::from_str(&self.kubeconfig_text()).expect("kubeconfig is JSON");
        set_context_namespace(&mut kc, &ns);
        std::fs::write(&self.kubeconfig, serde_json::to_vec_pretty(&kc).unwrap())
            .expect("kubeconfig");
        let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .expect("config");
        self.client = kube::Client::try_from(cfg).expect("client");
        self.ns = ns;
    }

    /// The newest resourceVersion: the simulator's counter, or on a real apiserver the
    /// resourceVersion of a (consistent) list, which is etcd's current revision.
    pub async fn current_rv(&self) -> u64 {
        match &self.backend {
            Backend::Sim(s) => s.rv(),
            Backend::Real { .. } => {
                let (code, _, v) = self
                    .raw_with_headers(
                        "GET",
                        "/api/v1/namespaces/{ns}/configmaps?limit=1",
                        &[],
                        vec![],
                    )
                    .await;
                assert_eq!(code, 200, "{v}");
                v["metadata"]["resourceVersion"]
                    .as_str()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or_else(|| panic!("no resourceVersion in {v}"))
            }
        }
    }

    /// `path` with every `{ns}` replaced by this test's namespace.
    pub fn p(&self, path: &str) -> String {
        path.replace("{ns}", &self.ns)
    }
}

impl TestSim {
    /// Runs `kubectl` with this simulator's kubeconfig. Async, so the in-process simulator
    /// keeps serving while kubectl waits for it.
    pub async fn kubectl(&self, args: &[&str]) -> Output {
        self.kubectl_with_env(args, &[]).await
    }

    /// Runs `kubectl` with `stdin` as its standard input.
    pub async fn kubectl_stdin(&self, args: &[&str], stdin: &str) -> Output {
        use tokio::io::AsyncWriteExt as _;
        let mut child = tokio::process::Command::new(kubectl_path())
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("kubectl runs");
        let mut input = child.stdin.take().unwrap();
        input.write_all(stdin.as_bytes()).await.unwrap();
        drop(input);
        tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
            .await
            .expect("kubectl finishes within 60 s")
            .expect("kubectl runs")
    }

    /// Runs `kubectl` with extra environment variables.
    pub async fn kubectl_with_env(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut cmd = tokio::process::Command::new(kubectl_path());
        cmd.args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .kill_on_drop(true);
        for (k, v) in env {
            cmd.env(k, v);
        }
        tokio::time::timeout(Duration::from_secs(60), cmd.output())
            .await
            .expect("kubectl finishes within 60 s")
            .expect("kubectl runs")
    }

    /// Raw HTTP request through the kube client; returns (status, body as JSON or string).
    pub async fn raw(
        &self,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: Vec<u8>,
    ) -> (u16, Value) {
        let headers: Vec<(&str, &str)> = content_type
            .map(|ct| ("content-type", ct))
            .into_iter()
            .collect();
        let (status, _, v) = self.raw_with_headers(method, path, &headers, body).await;
        (status, v)
    }
}

/// `/usr/bin/kubectl` unless `KUBECTL` says otherwise.
pub fn kubectl_path() -> String {
    std::env::var("KUBECTL").unwrap_or_else(|_| "/usr/bin/kubectl".into())
}

/// Polls `f` until it returns Some or the timeout passes.
pub async fn eventually<T, F, Fut>(timeout: Duration, mut f: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return Some(v);
        }
        if tokio::time::Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A Lease object.
pub fn mk_lease(name: &str, holder: &str) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": { "name": name },
        "spec": { "holderIdentity": holder, "leaseDurationSeconds": 10 }
    })
}

/// A Pod object with one container.
pub fn mk_pod(name: &str, labels: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": { "name": name, "labels": labels },
        "spec": { "containers": [{ "name": "app", "image": "example/app:1" }] }
    })
}

// ---------------------------------------------------------------------------------------------
// Added for tests/fidelity_*.rs: raw requests with headers, and raw watch streams.

impl TestSim {
    /// Raw HTTP request with extra headers (`{ns}` in `path` is this test's namespace); returns (status, response headers, body as JSON or
    /// string).
    pub async fn raw_with_headers(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Vec<u8>,
    ) -> (u16, http::HeaderMap, Value) {
        let mut req = http::Request::builder().method(method).uri(self.p(path));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req.body(body).unwrap();
        let resp = self
            .client
            .send(req.map(kube::client::Body::from))
            .await
            .expect("request sent");
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let bytes = http_body_util::BodyExt::collect(resp.into_body())
            .await
            .expect("body")
            .to_bytes();
        let v = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        (status, headers, v)
    }

    /// Opens a raw watch (`path` must carry `watch=true`; `{ns}` is this test's namespace) and collects the events (one JSON
    /// object per line) that arrive within `wait`, or until `max` events have arrived.
    pub async fn watch_events(
        &self,
        path: &str,
        headers: &[(&str, &str)],
        max: usize,
        wait: Duration,
    ) -> Vec<Value> {
        let mut req = http::Request::builder().method("GET").uri(self.p(path));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req.body(Vec::new()).unwrap();
        let resp = self
            .client
            .send(req.map(kube::client::Body::from))
            .await
            .expect("watch sent");
        assert_eq!(
            resp.status().as_u16(),
            200,
            "watch {path} answered {}",
            resp.status()
        );
        let mut body = resp.into_body();
        let mut buf: Vec<u8> = Vec::new();
        let mut out = Vec::new();
        let deadline = tokio::time::Instant::now() + wait;
        while out.len() < max {
            let frame =
                match tokio::time::timeout_at(deadline, http_body_util::BodyExt::frame(&mut body))
                    .await
                {
                    Ok(Some(Ok(f))) => f,
                    _ => break,
                };
            if let Ok(data) = frame.into_data() {
                buf.extend_from_slice(&data);
                while let Some(pos) = buf.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = buf.drain(..=pos).collect();
                    if let Ok(v) = serde_json::from_slice::<Value>(&line) {
                        out.push(v);
                    }
                }
            }
        }
        out
    }
}

/// The state of a [`link_proxy`]'s link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    /// Bytes pass both ways.
    Up,
    /// Connections stay open (new ones are accepted) but nothing passes: what a client sees of
    /// a hung connection or a silent partition. What was sent meanwhile passes once it is up.
    Blackhole,
    /// Existing connections are dropped and new ones refused.
    Cut,
}

/// A TCP proxy in front of `to` whose link can be cut or blackholed ([`Link`]), to take a
/// client off the API or hang it.
pub async fn link_proxy(
    to: std::net::SocketAddr,
) -> (std::net::SocketAddr, tokio::sync::watch::Sender<Link>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (link_tx, link) = tokio::sync::watch::channel(Link::Up);
    tokio::spawn(async move {
        loop {
            let Ok((inbound, _)) = listener.accept().await else {
                return;
            };
            if *link.borrow() == Link::Cut {
                continue;
            }
            let mut cut = link.clone();
            let link = link.clone();
            tokio::spawn(async move {
                let Ok(outbound) = tokio::net::TcpStream::connect(to).await else {
                    return;
                };
                let (in_r, in_w) = inbound.into_split();
                let (out_r, out_w) = outbound.into_split();
                tokio::select! {
                    _ = futures::future::join(
                        pump(in_r, out_w, link.clone()),
                        pump(out_r, in_w, link),
                    ) => {}
                    _ = cut.wait_for(|l| *l == Link::Cut) => {}
                }
            });
        }
    });
    (addr, link_tx)
}

/// Copies `from` to `to` while the link is up; holds what it read while it is blackholed.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut link: tokio::sync::watch::Receiver<Link>,
) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => {
                let _ = to.shutdown().await;
                return;
            }
            Ok(n) => n,
        };
        if link.wait_for(|l| *l == Link::Up).await.is_err()
            || to.write_all(&buf[..n]).await.is_err()
        {
            return;
        }
    }
}

/// A client of `t`'s simulator through a [`link_proxy`], and the link.
pub async fn linked_client(t: &TestSim) -> (kube::Client, tokio::sync::watch::Sender<Link>) {
    linked_client_as(t, &t.kubeconfig).await
}

/// [`linked_client`] with the credentials of the kubeconfig at `kubeconfig` (one of `t`'s API
/// server, e.g. a ServiceAccount's).
pub async fn linked_client_as(
    t: &TestSim,
    kubeconfig: &std::path::Path,
) -> (kube::Client, tokio::sync::watch::Sender<Link>) {
    let (config, link) = linked_config_as(t, kubeconfig).await;
    (kube::Client::try_from(config).expect("client"), link)
}

/// The configuration of [`linked_client_as`]'s client, for a caller that builds its own
/// client from it (the product's, say), and the link.
pub async fn linked_config_as(
    t: &TestSim,
    kubeconfig: &std::path::Path,
) -> (kube::Config, tokio::sync::watch::Sender<Link>) {
    let (proxy, link) = link_proxy(t.addr()).await;
    let text = std::fs::read_to_string(kubeconfig).expect("kubeconfig");
    (config_via(t, &text, proxy).await, link)
}

/// The configuration of a client of `t`'s API server reaching it through `proxy`, as
/// kubeconfig `text` says.
async fn config_via(t: &TestSim, text: &str, proxy: std::net::SocketAddr) -> kube::Config {
    let scheme = if t.is_real() { "https" } else { "http" };
    let kc: kube::config::Kubeconfig =
        serde_json::from_str(&text.replace(&t.url(), &format!("{scheme}://{proxy}"))).unwrap();
    let mut cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    cfg.default_namespace = t.ns.clone();
    cfg
}

// Processes run as if in a pod (a clustered gnmic: client-go's in-cluster config reads a fixed
// service-account path, and gnmic's locker takes its identity from the hostname), each in mount
// and UTS namespaces of its own so that nothing changes on the machine.

/// The `unshare` arguments that give a process its own mount and UTS namespaces: directly as
/// root, else inside a user namespace; the error says what `unshare` answered to each.
pub fn unshare_args() -> Result<Vec<&'static str>, String> {
    let candidates: [&[&str]; 2] = [
        &["--mount", "--uts", "--propagation", "private"],
        &[
            "--user",
            "--map-root-user",
            "--mount",
            "--uts",
            "--propagation",
            "private",
        ],
    ];
    let mut errors = Vec::new();
    for args in candidates {
        match std::process::Command::new("unshare")
            .args(args)
            .args(["--", "true"])
            .stdin(std::process::Stdio::null())
            .output()
        {
            Ok(o) if o.status.success() => return Ok(args.to_vec()),
            Ok(o) => errors.push(format!(
                "unshare {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&o.stderr).trim()
            )),
            Err(e) => errors.push(format!("unshare: {e}")),
        }
    }
    Err(errors.join("; "))
}

/// Run inside those namespaces as `unshare ARGS -- sh -c IN_POD sh HOSTNAME SA_DIR PROGRAM
/// [ARG…]`: sets the pod's hostname, puts the service-account directory (`token`, `ca.crt`,
/// `namespace`) at client-go's fixed path — bind-mounted over it when it exists, else copied
/// into a tmpfs mounted on its deepest existing ancestor (read first: the directory may lie
/// under it), so that nothing is created outside this namespace — then execs the program.
/// `unshare` without `--fork` and `exec` keep one process: the child's pid is the program's.
pub const IN_POD: &str = r#"set -e
hostname "$1"
t=/var/run/secrets/kubernetes.io/serviceaccount
d=$t
while [ ! -d "$d" ]; do d=$(dirname "$d"); done
if [ "$d" = "$t" ]; then
  mount --bind "$2" "$t"
else
  token=$(cat "$2/token"); ca=$(cat "$2/ca.crt"); ns=$(cat "$2/namespace")
  mount -t tmpfs leasehold-test "$d"
  mkdir -p "$t"
  printf '%s' "$token" >"$t/token"
  printf '%s\n' "$ca" >"$t/ca.crt"
  printf '%s' "$ns" >"$t/namespace"
fi
shift 2
exec "$@"
"#;

/// A port free on every one of `ips` a moment ago (gnmic's locker takes one port from the
/// Endpoints for every member, so all members serve their API on the same port).
pub fn common_port(ips: &[String]) -> u16 {
    for _ in 0..20 {
        let first = std::net::TcpListener::bind((ips[0].as_str(), 0)).expect("bind");
        let port = first.local_addr().unwrap().port();
        let rest: Vec<_> = ips[1..]
            .iter()
            .map(|ip| std::net::TcpListener::bind((ip.as_str(), port)))
            .collect();
        if rest.iter().all(Result::is_ok) {
            return port;
        }
    }
    panic!("no port free on all of {ips:?}");
}

/// One `GET path` of a plain HTTP API at `addr` (`host:port`), over HTTP/1.0 (the answer ends
/// with the connection: no client needed for programs like gnmic whose API a test reads): the
/// JSON body of a 200 within 3 s, else `None`.
pub async fn get_json_http10(addr: &str, path: &str) -> Option<Value> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let fut = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
            .await
            .ok()?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.ok()?;
        let text = String::from_utf8_lossy(&buf);
        let (head, body) = text.split_once("\r\n\r\n")?;
        if !head.starts_with("HTTP/1.") || !head.contains(" 200 ") {
            return None;
        }
        serde_json::from_str(body).ok()
    };
    tokio::time::timeout(Duration::from_secs(3), fut)
        .await
        .ok()
        .flatten()
}
