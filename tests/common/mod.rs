//! Shared helpers for integration tests: an in-process simulator on an ephemeral port, kube-rs
//! clients for it, kubectl with its kubeconfig, and small object builders.
#![allow(dead_code)] // each test binary uses a different subset of these helpers

pub mod app;
pub mod invariant;

use std::path::PathBuf;
use std::process::Output;
use std::time::Duration;

use leasehold::sim::{SimOptions, Simulator};
use serde_json::{Value, json};

/// A running simulator plus a kubeconfig file for it.
pub struct TestSim {
    pub sim: Simulator,
    pub client: kube::Client,
    pub kubeconfig: PathBuf,
    _dir: tempfile::TempDir,
}

/// Starts a simulator with default options on 127.0.0.1:0.
pub async fn start() -> TestSim {
    start_with(SimOptions::default()).await
}

/// Starts a simulator with the given options.
pub async fn start_with(opts: SimOptions) -> TestSim {
    let sim = Simulator::start("127.0.0.1:0".parse().unwrap(), opts)
        .await
        .expect("simulator starts");
    let client = sim.client().await.expect("client");
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, sim.kubeconfig()).expect("write kubeconfig");
    TestSim {
        sim,
        client,
        kubeconfig,
        _dir: dir,
    }
}

impl TestSim {
    /// Runs `kubectl` with this simulator's kubeconfig. Async, so the in-process simulator
    /// keeps serving while kubectl waits for it.
    pub async fn kubectl(&self, args: &[&str]) -> Output {
        self.kubectl_with_env(args, &[]).await
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
    /// Raw HTTP request with extra headers; returns (status, response headers, body as JSON or
    /// string).
    pub async fn raw_with_headers(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Vec<u8>,
    ) -> (u16, http::HeaderMap, Value) {
        let mut req = http::Request::builder().method(method).uri(path);
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

    /// Opens a raw watch (`path` must carry `watch=true`) and collects the events (one JSON
    /// object per line) that arrive within `wait`, or until `max` events have arrived.
    pub async fn watch_events(
        &self,
        path: &str,
        headers: &[(&str, &str)],
        max: usize,
        wait: Duration,
    ) -> Vec<Value> {
        let mut req = http::Request::builder().method("GET").uri(path);
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

/// A TCP proxy in front of the simulator that can be cut (existing connections dropped, new
/// ones refused), to take a client off the API.
pub async fn cuttable_proxy(
    to: std::net::SocketAddr,
) -> (std::net::SocketAddr, tokio::sync::watch::Sender<bool>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (cut_tx, cut) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        loop {
            let Ok((mut inbound, _)) = listener.accept().await else {
                return;
            };
            if *cut.borrow() {
                continue;
            }
            let mut cut = cut.clone();
            tokio::spawn(async move {
                let Ok(mut outbound) = tokio::net::TcpStream::connect(to).await else {
                    return;
                };
                tokio::select! {
                    _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                    _ = cut.wait_for(|c| *c) => {}
                }
            });
        }
    });
    (addr, cut_tx)
}

/// A client of `t`'s simulator through a [`cuttable_proxy`]; sending `true` cuts it off.
pub async fn cuttable_client(t: &TestSim) -> (kube::Client, tokio::sync::watch::Sender<bool>) {
    let (proxy, cut) = cuttable_proxy(t.sim.addr()).await;
    let kc: kube::config::Kubeconfig = serde_json::from_str(
        &t.sim
            .kubeconfig()
            .replace(&t.sim.url(), &format!("http://{proxy}")),
    )
    .unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    (kube::Client::try_from(cfg).unwrap(), cut)
}
