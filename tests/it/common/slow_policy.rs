//! A real kube-apiserver made slow for Lease writes by another client's load: a validating
//! admission webhook with a fixed capacity ([`SlowPolicy`]: a few workers, a fixed time per
//! review, one FIFO queue), shared by Leasehold and another tenant as a cluster-wide policy
//! engine is, and that tenant's ConfigMap writes ([`Tenant`]). Every write the webhook matches
//! waits its turn, member renewals included: API Priority and Fairness hands out seats, it
//! cannot speed up admission (docs/security.md). The webhook sleeps, so its pace does not
//! depend on the machine's CPU.
//!
//! Used by the pressure tests (`tests/it/pressure.rs`) and by `benches/protocol_load.rs
//! --overload`, which includes this file by path (`benches/common/mod.rs`): it may use only the
//! product's library, the simulator crate's test kit and the dev-dependencies, never either
//! side's own helpers. Real tier only: the simulator has no admission webhooks.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use kube_sim::testkit::{TestSim, eventually, kubectl_path};
use serde_json::{Value, json};

/// The namespace label the webhook matches ([`cover`]); its value names the webhook's owner (a
/// test's namespace), so that tests sharing an apiserver do not slow each other.
pub const LABEL: &str = "leasehold.test/slow-policy";

/// The policy webhook: FIFO queue, `workers` reviews at a time, each taking `service`; allows
/// everything. Counts what waits, and how long Lease reviews waited.
pub struct SlowPolicy {
    workers: usize,
    service: Duration,
    /// A queue this long keeps a review waiting longer than the `slow_wait` of [`SlowPolicy::new`].
    slow_queue: usize,
    /// How long a watch-probe review is held while [`SlowPolicy::hold_probes`] is set.
    probe_hold: Duration,
    pub waiting: AtomicUsize,
    /// When the queue first held more than `slow_wait` of reviews: from then on the server is
    /// too slow for whatever waits that long.
    pub slow_since: Mutex<Option<Instant>>,
    pub reviews: AtomicU64,
    /// Milliseconds each Lease review waited for a worker (of those it answered).
    pub lease_waits_ms: Mutex<Vec<u64>>,
    /// Lease reviews the apiserver gave up on while they waited (their caller went away).
    pub lease_reviews_given_up: AtomicU64,
    /// The longest the queue was.
    pub max_waiting: AtomicUsize,
    /// While set, reviews of the control plane's watch-probe Leases are held `probe_hold`
    /// before they queue.
    pub hold_probes: AtomicBool,
}

impl SlowPolicy {
    /// A webhook of `workers` workers taking `service` per review; the server counts as slow
    /// ([`SlowPolicy::slow_since`]) once a review would wait longer than `slow_wait`.
    pub fn new(
        workers: usize,
        service: Duration,
        slow_wait: Duration,
        probe_hold: Duration,
    ) -> Arc<SlowPolicy> {
        let per_review_ms = (service.as_millis() as usize).max(1);
        Arc::new(SlowPolicy {
            workers,
            service,
            slow_queue: slow_wait.as_millis() as usize * workers / per_review_ms,
            probe_hold,
            waiting: AtomicUsize::new(0),
            slow_since: Mutex::new(None),
            reviews: AtomicU64::new(0),
            lease_waits_ms: Mutex::new(Vec::new()),
            lease_reviews_given_up: AtomicU64::new(0),
            max_waiting: AtomicUsize::new(0),
            hold_probes: AtomicBool::new(false),
        })
    }

    /// How long a review waits for a worker behind a queue of `queue`.
    pub fn wait_behind(&self, queue: usize) -> Duration {
        self.service * queue as u32 / self.workers as u32
    }

    /// Serves the webhook over HTTPS on 127.0.0.1 (certificate made here, in `dir`); returns
    /// its URL, the CA bundle the apiserver must trust (the certificate, PEM) and the server
    /// task.
    async fn serve(self: &Arc<Self>, dir: &Path) -> (String, String, tokio::task::JoinHandle<()>) {
        let ck = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into()]).unwrap();
        let cert = dir.join("webhook.crt");
        let key = dir.join("webhook.key");
        std::fs::write(&cert, ck.cert.pem()).unwrap();
        std::fs::write(&key, ck.signing_key.serialize_pem()).unwrap();
        let tls = leasehold::http::tls::server_config(&leasehold::config::http::TlsSettings {
            cert_file: cert,
            key_file: key,
        })
        .unwrap();
        let workers = Arc::new(tokio::sync::Semaphore::new(self.workers));
        let me = self.clone();
        let app = axum::Router::new().route(
            "/validate",
            axum::routing::post(move |axum::Json(review): axum::Json<Value>| {
                let me = me.clone();
                let workers = workers.clone();
                async move {
                    let req = &review["request"];
                    let lease = req["kind"]["kind"] == "Lease";
                    let probe = req["object"]["metadata"]["labels"]["leasehold.io/lease-role"]
                        == "watch-probe";
                    if probe && me.hold_probes.load(Ordering::SeqCst) {
                        tokio::time::sleep(me.probe_hold).await;
                    }
                    let queued = Instant::now();
                    // Counted while it waits; the apiserver giving up on a review (its
                    // caller went away) drops this future, and the count with it.
                    let waiting = Waiting::new(&me.waiting);
                    let given_up = lease.then(|| GivenUp(&me.lease_reviews_given_up));
                    let queue = me.waiting.load(Ordering::SeqCst);
                    me.max_waiting.fetch_max(queue, Ordering::SeqCst);
                    if queue >= me.slow_queue {
                        me.slow_since
                            .lock()
                            .unwrap()
                            .get_or_insert_with(Instant::now);
                    }
                    let permit = workers.acquire().await.unwrap();
                    drop(waiting);
                    std::mem::forget(given_up);
                    if lease {
                        let ms = queued.elapsed().as_millis() as u64;
                        me.lease_waits_ms.lock().unwrap().push(ms);
                    }
                    tokio::time::sleep(me.service).await;
                    drop(permit);
                    me.reviews.fetch_add(1, Ordering::SeqCst);
                    axum::Json(json!({
                        "apiVersion": "admission.k8s.io/v1",
                        "kind": "AdmissionReview",
                        "response": {"uid": req["uid"], "allowed": true}
                    }))
                }
            }),
        );
        let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("https://{}/validate", tcp.local_addr().unwrap());
        let listener = leasehold::http::tls::TlsListener::new(tcp, tls);
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        (url, ck.cert.pem(), task)
    }
}

/// One review waiting for a worker, counted in `SlowPolicy::waiting` until dropped.
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn new(count: &'a AtomicUsize) -> Waiting<'a> {
        count.fetch_add(1, Ordering::SeqCst);
        Waiting(count)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A Lease review waiting for a worker: counted as given up if dropped before it gets one
/// (a review that gets one is forgotten, not dropped).
struct GivenUp<'a>(&'a AtomicU64);

impl Drop for GivenUp<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// The webhook installed: its server and its (cluster-wide) configuration, which is deleted
/// when this is dropped, even by a panic.
pub struct Webhook {
    name: String,
    kubeconfig: PathBuf,
    server: tokio::task::JoinHandle<()>,
}

impl Webhook {
    /// Serves `policy` and has the apiserver call it for ConfigMap and Lease creates and
    /// updates in every namespace [`cover`]ed for `owner`; returns once a ConfigMap write in
    /// `probe_ns` (covered already) has been reviewed. `dir` keeps its certificate.
    pub async fn install(
        t: &TestSim,
        policy: &Arc<SlowPolicy>,
        dir: &Path,
        owner: &str,
        probe_ns: &str,
    ) -> Webhook {
        use base64::Engine as _;
        let (url, ca, server) = policy.serve(dir).await;
        let webhook = Webhook {
            name: format!("leasehold-test-slow-policy-{owner}"),
            kubeconfig: t.kubeconfig.clone(),
            server,
        };
        let bundle = base64::engine::general_purpose::STANDARD.encode(ca);
        apply(
            t,
            &json!({
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingWebhookConfiguration",
                "metadata": {"name": webhook.name},
                "webhooks": [{
                    "name": "slow-policy.leasehold.test",
                    "clientConfig": {"url": url, "caBundle": bundle},
                    "rules": [{
                        "operations": ["CREATE", "UPDATE"],
                        "apiGroups": ["", "coordination.k8s.io"],
                        "apiVersions": ["v1"],
                        "resources": ["configmaps", "leases"],
                    }],
                    "namespaceSelector": {"matchLabels": {LABEL: owner}},
                    "failurePolicy": "Ignore",
                    "sideEffects": "None",
                    "admissionReviewVersions": ["v1"],
                    "timeoutSeconds": 10,
                }]
            })
            .to_string(),
        )
        .await;
        // The apiserver calls it from now on (its configuration is read from a watch).
        let probe: Api<ConfigMap> = Api::namespaced(t.client.clone(), probe_ns);
        let before = policy.reviews.load(Ordering::SeqCst);
        let tries = AtomicU64::new(0);
        eventually(Duration::from_secs(10), || async {
            let n = tries.fetch_add(1, Ordering::SeqCst);
            let _ = probe
                .patch(
                    "webhook-probe",
                    &PatchParams::apply("slow-policy").force(),
                    &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": "webhook-probe"}, "data": {"try": n.to_string()}})),
                )
                .await;
            (policy.reviews.load(Ordering::SeqCst) > before).then_some(())
        })
        .await
        .expect("the apiserver calls the policy webhook");
        webhook
    }
}

impl Drop for Webhook {
    fn drop(&mut self) {
        let _ = std::process::Command::new(kubectl_path())
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(["delete", "validatingwebhookconfiguration", &self.name])
            .args(["--ignore-not-found", "--wait=false"])
            .output();
        self.server.abort();
    }
}

/// Puts namespace `ns` under the policy of the webhook installed for `owner`: its ConfigMap
/// and Lease writes are reviewed from now on.
pub async fn cover(t: &TestSim, ns: &str, owner: &str) {
    let out = t
        .kubectl(&["label", "namespace", ns, &format!("{LABEL}={owner}")])
        .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `kubectl apply -f -` of `yaml` as the admin user, panicking with kubectl's words if it fails.
pub async fn apply(t: &TestSim, yaml: &str) {
    let out = t.kubectl_stdin(&["apply", "-f", "-"], yaml).await;
    assert!(
        out.status.success(),
        "kubectl apply: {}\n{yaml}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The other tenant's load: ConfigMap writers in its namespace, each writing its ConfigMap again
/// as soon as its last write is answered (a closed loop: `n` writers keep about `n` reviews
/// queued at a webhook they saturate), from [`Tenant::begin`] until [`Tenant::stop`].
pub struct Tenant {
    ns: String,
    /// ConfigMaps created (one per writer, before its load begins).
    pub created: Arc<AtomicU64>,
    pub writes: Arc<AtomicU64>,
    pub errors: Arc<AtomicU64>,
    go: tokio::sync::watch::Sender<bool>,
    writers: tokio::task::JoinSet<()>,
    /// Every running writer, the latest last.
    running: Vec<tokio::task::AbortHandle>,
    added: usize,
}

impl Tenant {
    /// No writers yet, in namespace `ns`.
    pub fn new(ns: &str) -> Tenant {
        Tenant {
            ns: ns.to_owned(),
            created: Arc::default(),
            writes: Arc::default(),
            errors: Arc::default(),
            go: tokio::sync::watch::channel(false).0,
            writers: tokio::task::JoinSet::new(),
            running: Vec::new(),
            added: 0,
        }
    }

    /// Starts `n` more writers on `client`: each creates its ConfigMap at once (again after a
    /// failure), then writes it over and over once the load has begun.
    pub fn add(&mut self, client: &kube::Client, n: usize) {
        for i in self.added..self.added + n {
            let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &self.ns);
            let (created, writes, errors) = (
                self.created.clone(),
                self.writes.clone(),
                self.errors.clone(),
            );
            let mut go = self.go.subscribe();
            let writer = self.writers.spawn(async move {
                let name = format!("load-{i:05}");
                let cm = |n: u64| {
                    json!({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": name}, "data": {"n": n.to_string()}})
                };
                let cm0: ConfigMap = serde_json::from_value(cm(0)).unwrap();
                while cms.create(&PostParams::default(), &cm0).await.is_err() {
                    errors.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                created.fetch_add(1, Ordering::SeqCst);
                let _ = go.wait_for(|go| *go).await;
                for n in 1u64.. {
                    match cms
                        .patch(&name, &PatchParams::default(), &Patch::Merge(cm(n)))
                        .await
                    {
                        Ok(_) => writes.fetch_add(1, Ordering::Relaxed),
                        Err(_) => errors.fetch_add(1, Ordering::Relaxed),
                    };
                }
            });
            self.running.push(writer);
        }
        self.added += n;
    }

    /// Stops the `n` latest writers (their writes in flight abandoned).
    pub fn shed(&mut self, n: usize) {
        for writer in self.running.split_off(self.running.len().saturating_sub(n)) {
            writer.abort();
        }
    }

    /// The load begins: every writer, and every one added later, writes.
    pub fn begin(&self) {
        self.go.send_replace(true);
    }

    /// The load stops: every writer is stopped, its write in flight abandoned.
    pub async fn stop(&mut self) {
        self.shed(usize::MAX);
        while self.writers.join_next().await.is_some() {}
    }
}
