//! `leasehold sim`: an in-memory Kubernetes API server that speaks the real REST and watch
//! protocol over HTTP, so unchanged kube-rs and kubectl work against it.
//!
//! The tree follows kube-apiserver's own split: `request` (RequestInfo), `server` (authn,
//! authz, routing), `handlers` (the verbs), `store` (etcd + watch cache), `watch`,
//! `strategy`/`services`/`names` (per-kind registry rules), `smp`/`apply` (patches and
//! managed fields), `schema`/`openapi` (the vendored real OpenAPI documents), `protobuf` (request
//! bodies in Kubernetes protobuf, from the vendored `.proto` files), `selector`,
//! `table`, `discovery`, `auth` (tokens, reviews), `controllers` (the namespace lifecycle that
//! runs inside the API server) and `kubelet` (a fake kubelet and cloud loop that, like a real
//! one, is only a client).
//!
//! The simulator never talks to the network except on its own listen address.

mod apply;
pub mod auth;
mod controllers;
mod convert;
mod discovery;
mod handlers;
mod kinds;
pub mod kubelet;
mod names;
mod openapi;
mod protobuf;
mod registry;
mod request;
mod schema;
mod selector;
mod server;
mod services;
mod smp;
mod status;
mod store;
mod strategy;
mod table;
#[cfg(feature = "testkit")]
pub mod testkit;
mod tls;
mod watch;

pub use store::DEFAULT_HISTORY;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use serde_json::json;
use tokio::task::JoinSet;

use self::auth::AuthTable;
use self::store::ObjectStore;

/// How often a watch with `allowWatchBookmarks` gets a BOOKMARK (kube-apiserver: about once a
/// minute).
pub const DEFAULT_BOOKMARK_INTERVAL: Duration = Duration::from_secs(60);

/// Settings of a simulator instance.
#[derive(Debug, Clone)]
pub struct SimOptions {
    /// Events kept for watch resumption and paginated lists.
    pub history: usize,
    pub bookmark_interval: Duration,
    /// Users and rules; the admin token is added to it.
    pub auth: AuthTable,
    /// The bearer token written into the simulator's kubeconfig.
    pub admin_token: String,
    /// Requests without credentials act as an admin (`system:anonymous`); see `server.rs`.
    pub anonymous: bool,
    /// The WatchList feature gate: `sendInitialEvents` watches (kube-rs `streaming_lists`).
    /// Off by default, as in kube-apiserver 1.33 (it was on in 1.32); off, such a watch is a 422.
    pub watch_list: bool,
    /// Serve HTTPS with a CA generated at start-up ([`Simulator::ca_pem`]; the kubeconfig
    /// carries it as `certificate-authority-data`), as every real API server does. client-go
    /// sends bearer tokens only over HTTPS, and its in-cluster configuration always uses it
    /// ([`Simulator::write_service_account`]). Off: plain HTTP.
    pub tls: bool,
    /// Accept loopback addresses (127.0.0.0/8, ::1) in v1 Endpoints, which kube-apiserver
    /// refuses (422, "may not be in the loopback range"): so that processes on one machine
    /// (tests, the demo) can be a Service's members — gnmic's Kubernetes locker finds its
    /// members' API addresses in Endpoints. Off by default (faithful).
    pub loopback_endpoints: bool,
}

impl Default for SimOptions {
    fn default() -> Self {
        Self {
            history: store::DEFAULT_HISTORY,
            bookmark_interval: DEFAULT_BOOKMARK_INTERVAL,
            auth: AuthTable::default(),
            admin_token: auth::DEFAULT_ADMIN_TOKEN.into(),
            anonymous: true,
            watch_list: false,
            tls: false,
            loopback_endpoints: false,
        }
    }
}

/// Per-request settings the handlers read.
#[derive(Debug, Clone)]
pub(crate) struct RuntimeOptions {
    pub(crate) bookmark_interval: Duration,
    /// `host:port` clients use, for `/api`'s serverAddressByClientCIDRs.
    pub(crate) server_address: String,
    /// See [`SimOptions::anonymous`].
    pub(crate) anonymous: bool,
    /// See [`SimOptions::watch_list`].
    pub(crate) watch_list: bool,
    /// See [`SimOptions::loopback_endpoints`].
    pub(crate) loopback_endpoints: bool,
}

/// State shared by every request.
pub(crate) struct Shared {
    pub(crate) store: Arc<ObjectStore>,
    /// The Kubernetes schema, shared by every simulator in the process.
    pub(crate) schema: &'static schema::Schema,
    pub(crate) auth: AuthTable,
    pub(crate) options: RuntimeOptions,
}

/// Now, as `metav1.Time` serialises it: RFC 3339, whole seconds, UTC.
pub(crate) fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// A running simulator. Dropping it stops the server and its controllers.
pub struct Simulator {
    addr: SocketAddr,
    shared: Arc<Shared>,
    admin_token: String,
    /// The CA's certificate (PEM) when serving HTTPS.
    ca_pem: Option<String>,
    tasks: JoinSet<anyhow::Result<()>>,
}

/// The namespace a service-account directory names (the pod's own namespace in a cluster).
pub const SERVICE_ACCOUNT_NAMESPACE: &str = "default";

impl Simulator {
    /// Binds `listen` (port 0 for an ephemeral port), seeds the built-in namespaces and
    /// Services, and starts serving.
    pub async fn start(listen: SocketAddr, opts: SimOptions) -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .with_context(|| format!("binding {listen}"))?;
        let addr = listener.local_addr()?;
        let mut auth = opts.auth.clone();
        auth.users
            .extend(AuthTable::with_admin(&opts.admin_token).users);
        let shared = Arc::new(Shared {
            store: Arc::new(ObjectStore::new(opts.history)),
            schema: openapi::schema(),
            auth,
            options: RuntimeOptions {
                bookmark_interval: opts.bookmark_interval,
                server_address: addr.to_string(),
                anonymous: opts.anonymous,
                watch_list: opts.watch_list,
                loopback_endpoints: opts.loopback_endpoints,
            },
        });
        seed(&shared)?;
        let mut tasks = JoinSet::new();
        let app = server::router(shared.clone());
        let ca_pem = if opts.tls {
            let tls = tls::generate(addr).context("generating the simulator's certificates")?;
            let listener = tls::TlsListener::new(listener, tls.config);
            tasks.spawn(async move {
                axum::serve(listener, app)
                    .await
                    .context("simulator HTTPS server")
            });
            Some(tls.ca_pem)
        } else {
            tasks.spawn(async move {
                axum::serve(listener, app)
                    .await
                    .context("simulator HTTP server")
            });
            None
        };
        let ctl = shared.clone();
        tasks.spawn(async move { controllers::namespaces(ctl).await });
        tracing::info!(%addr, tls = opts.tls, "kubernetes simulator listening");
        Ok(Self {
            addr,
            shared,
            admin_token: opts.admin_token,
            ca_pem,
            tasks,
        })
    }

    /// The listen address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://host:port`, or `https://host:port` with [`SimOptions::tls`].
    pub fn url(&self) -> String {
        let scheme = if self.ca_pem.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{}", self.addr)
    }

    /// The generated CA's certificate (PEM) when serving HTTPS ([`SimOptions::tls`]).
    pub fn ca_pem(&self) -> Option<&str> {
        self.ca_pem.as_deref()
    }

    /// Writes the layout kubelet mounts at `/var/run/secrets/kubernetes.io/serviceaccount/`
    /// into `dir` (created if missing): `token` (a bearer token of the auth table, e.g. the
    /// admin's), `ca.crt` (the simulator's CA; the simulator must serve HTTPS) and `namespace`
    /// ([`SERVICE_ACCOUNT_NAMESPACE`]). With it and [`Simulator::in_cluster_env`], client-go's
    /// `rest.InClusterConfig()` reaches the simulator — once the directory is at that fixed
    /// path in the client's mount namespace (client-go reads no other path; see
    /// docs/simulator.md).
    pub fn write_service_account(&self, dir: &std::path::Path, token: &str) -> anyhow::Result<()> {
        let ca = self
            .ca_pem
            .as_deref()
            .context("the in-cluster layout needs HTTPS: start the simulator with `tls: true`")?;
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        for (name, text) in [
            ("token", token),
            ("ca.crt", ca),
            ("namespace", SERVICE_ACCOUNT_NAMESPACE),
        ] {
            let path = dir.join(name);
            std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        }
        Ok(())
    }

    /// `KUBERNETES_SERVICE_HOST` and `KUBERNETES_SERVICE_PORT` as kubelet sets them in a pod,
    /// pointing at this simulator (client-go's in-cluster configuration dials
    /// `https://HOST:PORT`).
    pub fn in_cluster_env(&self) -> [(&'static str, String); 2] {
        [
            ("KUBERNETES_SERVICE_HOST", self.addr.ip().to_string()),
            ("KUBERNETES_SERVICE_PORT", self.addr.port().to_string()),
        ]
    }

    /// The newest resourceVersion the store has handed out, for in-process observers (tests).
    pub fn rv(&self) -> u64 {
        self.shared.store.rv()
    }

    /// A kubeconfig (JSON, which every YAML reader accepts) for the admin user.
    pub fn kubeconfig(&self) -> String {
        self.kubeconfig_for(&self.admin_token)
    }

    /// A kubeconfig for any token of the auth table.
    pub fn kubeconfig_for(&self, token: &str) -> String {
        use base64::Engine as _;
        let mut cluster = json!({ "server": self.url() });
        if let Some(ca) = &self.ca_pem {
            cluster["certificate-authority-data"] =
                json!(base64::engine::general_purpose::STANDARD.encode(ca));
        }
        let cfg = json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{ "name": "leasehold-sim", "cluster": cluster }],
            "users": [{ "name": "leasehold-sim-user", "user": { "token": token } }],
            "contexts": [{ "name": "leasehold-sim", "context": { "cluster": "leasehold-sim", "user": "leasehold-sim-user", "namespace": "default" } }],
            "current-context": "leasehold-sim",
            "preferences": {}
        });
        serde_json::to_string_pretty(&cfg).unwrap_or_default()
    }

    /// A kube-rs client for the admin user.
    pub async fn client(&self) -> anyhow::Result<kube::Client> {
        self.client_for(&self.admin_token).await
    }

    /// A kube-rs client for any token.
    pub async fn client_for(&self, token: &str) -> anyhow::Result<kube::Client> {
        let kc: kube::config::Kubeconfig = serde_json::from_str(&self.kubeconfig_for(token))?;
        let cfg =
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await?;
        Ok(kube::Client::try_from(cfg)?)
    }

    /// Runs the fake kubelet (`kubelet.rs`) as one of the simulator's own tasks, so that its
    /// failure ends [`Simulator::run_until`] like any other.
    pub async fn spawn_kubelet(&mut self, opts: kubelet::KubeletOptions) -> anyhow::Result<()> {
        let client = self.client().await?;
        self.tasks
            .spawn(async move { kubelet::run(client, opts).await.context("fake kubelet") });
        Ok(())
    }

    /// Runs until a task fails (an error) or `shutdown` completes (Ok).
    pub async fn run_until(
        mut self,
        shutdown: impl std::future::Future<Output = ()>,
    ) -> anyhow::Result<()> {
        tokio::select! {
            res = self.tasks.join_next() => match res {
                Some(Ok(Ok(()))) | None => anyhow::bail!("simulator task ended unexpectedly"),
                Some(Ok(Err(e))) => Err(e),
                Some(Err(e)) => Err(e.into()),
            },
            () = shutdown => Ok(()),
        }
    }
}

/// What a fresh kube-apiserver has: the four system namespaces and `default/kubernetes`.
fn seed(shared: &Shared) -> anyhow::Result<()> {
    let ns = registry::id_of("", "namespaces");
    for name in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        handlers::internal::create(
            shared,
            ns,
            "",
            json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": name } }),
        )
        .map_err(|e| anyhow::anyhow!("seeding namespace {name}: {e}"))?;
    }
    let svc = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": { "name": "kubernetes", "labels": { "component": "apiserver", "provider": "kubernetes" } },
        "spec": { "clusterIP": "10.96.0.1", "ports": [{ "name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443 }] }
    });
    handlers::internal::create(shared, registry::id_of("", "services"), "default", svc)
        .map_err(|e| anyhow::anyhow!("seeding the kubernetes Service: {e}"))?;
    Ok(())
}
