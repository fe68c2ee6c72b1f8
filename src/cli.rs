//! The command line: one binary, one subcommand per role. Each subcommand parses its flags
//! and hands over to the library; nothing here holds logic of its own.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand};

use kube_sim::{self as sim, SimOptions, Simulator};

/// Leasehold: see and steer who owns what in Lease-coordinated Kubernetes clusters.
#[derive(Debug, Parser)]
#[command(name = "leasehold", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// The command line, as `leasehold …` or as the kubectl plugin: a binary named
    /// `kubectl-leasehold` (which `kubectl leasehold …` runs) is `leasehold ctl …`.
    pub fn from_env() -> Cli {
        let mut args: Vec<std::ffi::OsString> = std::env::args_os().collect();
        let plugin = args
            .first()
            .and_then(|a| std::path::Path::new(a).file_name())
            .is_some_and(|n| n == "kubectl-leasehold");
        if plugin {
            args.splice(0..1, ["leasehold".into(), "ctl".into()]);
        }
        Cli::parse_from(args)
    }
}

/// The roles the binary can play.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the demo on the built-in simulator (no cluster needed).
    Demo(DemoArgs),
    /// Run the Kubernetes API simulator (an in-memory kube-apiserver for demos and tests).
    Sim(SimArgs),
    /// Run the control plane for the clusters in a config file.
    Serve(ServeArgs),
    /// Run the member agent beside a member app (sidecar): hold the targets assigned to this
    /// pod and tell the app through hooks.
    Agent(Box<AgentArgs>),
    /// Print the REST API's OpenAPI document (as committed at openapi/openapi.json).
    Openapi,
    /// The REST API from the command line: list, plan, run and follow (also run as the
    /// kubectl plugin `kubectl-leasehold`).
    Ctl(crate::ctl::CtlArgs),
}

/// Flags of `leasehold serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The configuration file (see docs/configuration.md).
    #[arg(long, env = "LEASEHOLD_CONFIG")]
    pub config: PathBuf,
    /// This replica's identity in the control-plane election (the pod name in Kubernetes).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// Kubeconfig to use instead of the in-cluster config or $KUBECONFIG.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Listen address, overriding `http.listen` of the configuration.
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// History database URL, overriding `database` of the configuration (so a PostgreSQL URL
    /// with its password can come from a Kubernetes Secret through the environment).
    #[arg(long, env = "LEASEHOLD_DATABASE", hide_env_values = true)]
    pub database: Option<String>,
}

/// Flags of `leasehold agent`.
#[derive(Debug, Args)]
pub struct AgentArgs {
    /// The cluster this member belongs to.
    #[arg(long, env = "LEASEHOLD_CLUSTER")]
    pub cluster: String,
    /// Namespace of the cluster's Leases (downward API: metadata.namespace).
    #[arg(long, env = "POD_NAMESPACE")]
    pub namespace: String,
    /// This member's identity, its pod name (downward API: metadata.name).
    #[arg(long, env = "POD_NAME")]
    pub identity: String,
    /// Prefix of Lease names.
    #[arg(long, default_value = crate::agent::DEFAULT_LEASE_PREFIX)]
    pub lease_prefix: String,
    /// `D`, the duration (seconds) of this member's member Lease: its authority to work lasts
    /// this long after its last renewal (the cluster's `policy.lease_duration` should say the
    /// same).
    #[arg(long, default_value_t = 15)]
    pub lease_duration: u64,
    /// Bound on one hook call (seconds).
    #[arg(long, default_value_t = 5)]
    pub hook_timeout: u64,
    /// Most target Lease writes in flight at once, and so most handovers under way (the limit
    /// adapts to the API server's latency below it; member Lease renewals never wait for it).
    #[arg(long, default_value_t = crate::agent::DEFAULT_MAX_PARALLEL)]
    pub max_parallel: usize,
    /// On SIGTERM, how long (seconds) to wait for the control plane to move this
    /// member's targets away before releasing what is left and exiting. Keep it under the
    /// pod's termination grace period.
    #[arg(long, default_value_t = 10)]
    pub drain_timeout: u64,
    /// Namespace of this member's member Lease, when the cluster keeps them apart
    /// (its `member_lease_namespace`); default: `--namespace`.
    #[arg(long, env = "LEASEHOLD_MEMBER_LEASE_NAMESPACE")]
    pub member_lease_namespace: Option<String>,
    /// Shell command run when a target is acquired (env LEASEHOLD_TARGET, LEASEHOLD_EVENT,
    /// LEASEHOLD_GENERATION, LEASEHOLD_CLUSTER, LEASEHOLD_INSTANCE).
    #[arg(long, conflicts_with = "hook_url")]
    pub on_acquire: Option<String>,
    /// Shell command run before a target is released.
    #[arg(long, conflicts_with = "hook_url")]
    pub on_release: Option<String>,
    /// Local URL POSTed on each event (`{event}` is replaced by acquire|release, or
    /// `/acquire` and `/release` are appended).
    #[arg(long)]
    pub hook_url: Option<String>,
    /// Managed gnmic: drive the `gnmic collect` of this pod through its REST API at this
    /// plain http:// URL (bind gnmic's API to loopback), giving it exactly the targets this
    /// member holds (docs/gnmic.md).
    #[arg(long, env = "LEASEHOLD_GNMIC_API", conflicts_with_all = ["hook_url", "on_acquire", "on_release"], requires = "gnmic_targets")]
    pub gnmic_api: Option<String>,
    /// Managed gnmic: the target list with each target's `gnmic` definition (the ConfigMap key
    /// the control plane reads, mounted as a file); read again when it changes.
    #[arg(long, env = "LEASEHOLD_GNMIC_TARGETS", requires = "gnmic_api")]
    pub gnmic_targets: Option<PathBuf>,
    /// Managed gnmic: where the Secrets named by targets' `credentials.secret` are mounted
    /// (`<dir>/<secret>/username`, `password`, `token`).
    #[arg(long, default_value = crate::agent::gnmic::DEFAULT_SECRETS_DIR)]
    pub gnmic_secrets_dir: PathBuf,
    /// Managed gnmic: how often (ms) gnmic's targets are read when nothing changes (a
    /// restarted gnmic is given its targets again within this, plus the time to add them).
    #[arg(long, default_value_t = 500)]
    pub gnmic_poll_ms: u64,
    /// Scrape targets: serve the targets this member holds to the scraper in its pod
    /// (Prometheus' HTTP service discovery at `GET /sd`, the Target Allocator's collector API)
    /// on this address (docs/scrape.md).
    #[arg(long, env = "LEASEHOLD_SCRAPE_SD_LISTEN", conflicts_with_all = ["hook_url", "on_acquire", "on_release", "gnmic_api"], requires = "scrape_targets")]
    pub scrape_sd_listen: Option<SocketAddr>,
    /// Scrape targets: the target list with each target's `scrape` definition (the ConfigMap
    /// key the control plane reads, mounted as a file); read again when it changes.
    #[arg(long, env = "LEASEHOLD_SCRAPE_TARGETS", requires = "scrape_sd_listen")]
    pub scrape_targets: Option<PathBuf>,
    /// Scrape targets: the scraper's own API (Prometheus or vmagent, plain http:// on
    /// loopback, e.g. `http://127.0.0.1:9090`). Stops are then proven: a target is handed over
    /// only once the scraper's active targets no longer have it (docs/scrape.md).
    #[arg(long, env = "LEASEHOLD_SCRAPE_API", requires = "scrape_sd_listen")]
    pub scrape_api: Option<String>,
    /// Scrape targets: also keep this file holding the list `GET /sd` serves, for the
    /// scraper's file SD (Prometheus' `file_sd_configs`), which Prometheus reads as soon as the
    /// file changes rather than at its next HTTP SD poll (docs/scrape.md). Emptied at exit.
    #[arg(long, env = "LEASEHOLD_SCRAPE_SD_FILE", requires = "scrape_sd_listen")]
    pub scrape_sd_file: Option<PathBuf>,
    /// Scrape targets: how often (ms) the scraper's API is read.
    #[arg(long, default_value_t = 250)]
    pub scrape_poll_ms: u64,
    /// Kubeconfig to use instead of the in-cluster config or $KUBECONFIG.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Serve `GET /authority` on this address: when this member's authority to work ends
    /// unless renewed (200 while it holds, 503 when not), for an app that stops on its own
    /// when its agent stalls, or for the app container's liveness probe (docs/protocol.md,
    /// "Hooks"). Read-only; off by default.
    #[arg(long, env = "LEASEHOLD_AUTHORITY_LISTEN")]
    pub authority_listen: Option<SocketAddr>,
}

/// Flags of `leasehold demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Address of the dashboard and API (on a non-loopback address an admin token is
    /// generated; see the printed token file).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Address of the simulated Kubernetes API (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:6443")]
    pub kube_listen: SocketAddr,
    /// Member pods in the `collector` cluster.
    #[arg(long, default_value_t = 3)]
    pub members: u32,
    /// Targets (one Lease each).
    #[arg(long, default_value_t = 300)]
    pub targets: usize,
    /// Keep the demo's files (history database, kubeconfig, admin token) in this directory
    /// and leave them there at exit. By default they go to a temporary directory that is
    /// removed when the demo stops.
    #[arg(long)]
    pub state_dir: Option<PathBuf>,
    /// Where to write the simulator's kubeconfig (default: `kubeconfig` in the state
    /// directory).
    #[arg(long)]
    pub kubeconfig_out: Option<PathBuf>,
    /// A gnmic binary (0.43 or later): the `collector` cluster becomes a managed gnmic
    /// cluster — a real `gnmic collect` per member, driven by its agent, collecting from a
    /// simulated network (one more gnmic serving gNMI for every device). `scripts/gnmic.sh
    /// path` builds one.
    #[arg(long, env = "LEASEHOLD_GNMIC")]
    pub gnmic: Option<PathBuf>,
}

/// Flags of `leasehold sim`.
#[derive(Debug, Args)]
pub struct SimArgs {
    /// Address to listen on (loopback by default; port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:6443", env = "LEASEHOLD_SIM_LISTEN")]
    pub listen: SocketAddr,
    /// Write a kubeconfig for the simulator here.
    #[arg(long)]
    pub kubeconfig_out: Option<PathBuf>,
    /// Run the fake kubelet: pods become Running/Ready, LoadBalancers get IPs, EndpointSlices
    /// follow pods.
    #[arg(long)]
    pub fake_kubelet: bool,
    /// Events kept for watch resumption and paginated lists.
    #[arg(long, default_value_t = sim::DEFAULT_HISTORY)]
    pub history: usize,
    /// Seconds between watch bookmarks.
    #[arg(long, default_value_t = 60)]
    pub bookmark_interval: u64,
    /// Refuse requests without a bearer token (by default they act as an admin, since kubectl
    /// sends no token over plain HTTP).
    #[arg(long)]
    pub no_anonymous: bool,
    /// A JSON file of extra users and rules (see docs/simulator.md); its tokens are never logged.
    #[arg(long)]
    pub auth_file: Option<PathBuf>,
    /// Serve HTTPS with a CA generated at start-up (in the kubeconfig written), as in-cluster
    /// clients (client-go's `rest.InClusterConfig`, gnmic) require.
    #[arg(long)]
    pub tls: bool,
    /// With `--tls`: write the admin's `token`, `ca.crt` and `namespace` here, the layout of an
    /// in-cluster client's service-account directory.
    #[arg(long, requires = "tls")]
    pub service_account_dir: Option<PathBuf>,
    /// Accept loopback addresses in v1 Endpoints (kube-apiserver refuses them), so that
    /// processes on this machine can be a Service's members.
    #[arg(long)]
    pub loopback_endpoints: bool,
}

impl Command {
    /// The log filter this command runs with unless `RUST_LOG` sets one: `info`, and for the
    /// demo [`crate::demo::LOG_FILTER`].
    pub fn log_filter(&self) -> &'static str {
        match self {
            Command::Demo(_) => crate::demo::LOG_FILTER,
            // Its output is the answer; only warnings go to stderr.
            Command::Ctl(_) => "warn",
            _ => "info",
        }
    }
}

/// Runs the parsed command, with its logging (`logs`) installed.
pub async fn run(cli: Cli, logs: crate::telemetry::Logs) -> anyhow::Result<()> {
    match cli.command {
        Command::Sim(args) => run_sim(args).await,
        Command::Serve(args) => run_serve(args).await,
        Command::Openapi => print_openapi(),
        Command::Ctl(args) => {
            if let Err(e) = crate::ctl::run(args).await {
                eprintln!("leasehold ctl: {}", e.message);
                std::process::exit(e.exit as i32);
            }
            Ok(())
        }
        Command::Agent(args) => run_agent(*args).await,
        Command::Demo(a) => {
            let state = crate::demo::StateDir::new(a.state_dir)?;
            let dir = state.path();
            let opts = crate::demo::DemoOptions {
                listen: a.listen,
                kube_listen: a.kube_listen,
                members: a.members,
                targets: a.targets,
                kubeconfig_out: a
                    .kubeconfig_out
                    .unwrap_or_else(|| dir.join(crate::demo::KUBECONFIG)),
                database: dir.join(crate::demo::DATABASE),
                token_file: dir.join(crate::demo::TOKEN_FILE),
                timing: crate::demo::Timing {
                    lease_duration: crate::demo::LEASE_DURATION,
                    join_settle: crate::demo::JOIN_SETTLE,
                },
                apps: std::sync::Arc::new(crate::demo::NoApps),
                gnmic: a.gnmic,
            };
            // While the demo stops, its members log errors only: every member leaves at once,
            // so nobody can take their targets and each one's drain runs out, as expected; the
            // demo's closing line says what they released.
            let signal = shutdown_signal();
            let shutdown = async move {
                signal.await;
                logs.set_default(crate::demo::STOPPING_LOG_FILTER);
            };
            crate::demo::run(opts, &state, shutdown).await
        }
    }
}

async fn run_serve(args: ServeArgs) -> anyhow::Result<()> {
    let mut config = crate::config::Config::load(&args.config)?;
    if let Some(url) = args.database {
        config = config.with_database(url)?;
    }
    let store = crate::store::Store::connect(&config.database).await?;
    let client = crate::k8s::client::connect(args.kubeconfig.as_deref()).await?;
    let identity = args
        .identity
        .unwrap_or_else(|| format!("leasehold-{}", uuid::Uuid::new_v4().simple()));
    let mut http = config.http.clone();
    if let Some(listen) = args.listen {
        http.listen = listen;
    }
    let engine = crate::engine::Engine::new(config, client, store, identity);
    let listener = tokio::net::TcpListener::bind(http.listen)
        .await
        .with_context(|| format!("listening on {}", http.listen))?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let server = crate::http::run(
        engine.clone(),
        &http,
        listener,
        None,
        stopped(stop_rx.clone()),
    );
    let engine_run = engine.run(stopped(stop_rx));
    tokio::pin!(server, engine_run);
    tokio::select! {
        () = shutdown_signal() => {
            let _ = stop_tx.send(true);
            let (a, b) = tokio::join!(server, engine_run);
            a.and(b)
        }
        r = &mut server => r.context("the HTTP server stopped"),
        r = &mut engine_run => r.context("the engine stopped"),
    }
}

/// Prints the OpenAPI document (what `openapi/openapi.json` must contain).
fn print_openapi() -> anyhow::Result<()> {
    print!("{}", crate::http::api::openapi_json());
    Ok(())
}

impl AgentArgs {
    /// Refuses flags that cannot work, naming the flag and why, before anything starts.
    pub fn validate(&self) -> anyhow::Result<()> {
        use crate::protocol::names;
        let bad = |flag: &str, why: String| Err(anyhow::anyhow!("--{flag}: {why}"));
        if !names::is_dns_label(&self.cluster) || self.cluster.len() > 40 {
            return bad(
                "cluster",
                format!(
                    "{:?} is not a cluster name (a DNS label of at most 40 characters, as in the control plane's configuration)",
                    self.cluster
                ),
            );
        }
        if !names::is_dns_label(&self.namespace) {
            return bad(
                "namespace",
                format!("{:?} is not a namespace (a DNS label)", self.namespace),
            );
        }
        if self.identity.is_empty()
            || self.identity.len() > names::MAX_NAME
            || self
                .identity
                .chars()
                .any(|c| c.is_whitespace() || c.is_control())
        {
            return bad(
                "identity",
                format!(
                    "{:?} is not a member identity (its pod name: 1-253 characters, no spaces)",
                    self.identity
                ),
            );
        }
        if !names::is_dns_label(&self.lease_prefix) {
            return bad(
                "lease-prefix",
                format!("{:?} is not a DNS label", self.lease_prefix),
            );
        }
        for (flag, secs) in [
            ("lease-duration", self.lease_duration),
            ("hook-timeout", self.hook_timeout),
        ] {
            if secs == 0 || secs > 3600 {
                return bad(flag, format!("{secs} is not between 1 and 3600 seconds"));
            }
        }
        if self.max_parallel == 0 {
            return bad("max-parallel", "must be at least 1".into());
        }
        if let Some(ns) = &self.member_lease_namespace
            && !names::is_dns_label(ns)
        {
            return bad(
                "member-lease-namespace",
                format!("{ns:?} is not a namespace (a DNS label)"),
            );
        }
        if self.drain_timeout > 3600 {
            return bad(
                "drain-timeout",
                format!("{} is more than 3600 seconds", self.drain_timeout),
            );
        }
        if self.hook_timeout * 3 > self.lease_duration {
            return bad(
                "hook-timeout",
                format!(
                    "{} s must be at most a third of --lease-duration ({} s): the work must stop before the control plane may give the targets away",
                    self.hook_timeout, self.lease_duration
                ),
            );
        }
        if !(50..=60_000).contains(&self.gnmic_poll_ms) {
            return bad(
                "gnmic-poll-ms",
                format!("{} is not between 50 and 60000", self.gnmic_poll_ms),
            );
        }
        if let Some(addr) = self.scrape_sd_listen
            && addr.port() == 0
        {
            return bad(
                "scrape-sd-listen",
                format!("{addr}: the scraper's configuration needs a fixed port, not 0"),
            );
        }
        if !(50..=60_000).contains(&self.scrape_poll_ms) {
            return bad(
                "scrape-poll-ms",
                format!("{} is not between 50 and 60000", self.scrape_poll_ms),
            );
        }
        for (flag, url) in [
            ("hook-url", &self.hook_url),
            ("gnmic-api", &self.gnmic_api),
            ("scrape-api", &self.scrape_api),
        ] {
            let Some(url) = url else { continue };
            let plain_http = url
                .strip_prefix("http://")
                .is_some_and(|rest| !rest.is_empty() && !rest.starts_with('/'));
            if !plain_http
                || url
                    .replace("{event}", "acquire")
                    .parse::<http::Uri>()
                    .is_err()
            {
                return bad(
                    flag,
                    format!(
                        "{url:?} is not a plain http:// URL of the local app (https and other schemes are not supported)"
                    ),
                );
            }
        }
        Ok(())
    }
}

async fn run_agent(a: AgentArgs) -> anyhow::Result<()> {
    use crate::agent::gnmic::{Gnmic, GnmicSettings};
    use crate::agent::scrape::{Scrape, ScrapeSettings};
    use crate::agent::{self, AgentConfig, CommandHooks, Hooks, HttpHooks, NoHooks};
    use futures::FutureExt as _;
    a.validate()?;
    let client = crate::k8s::client::connect(a.kubeconfig.as_deref()).await?;
    let gnmic = match (&a.gnmic_api, &a.gnmic_targets) {
        (Some(api), Some(targets)) => Some(
            Gnmic::new(GnmicSettings {
                api: api.clone(),
                targets_file: targets.clone(),
                secrets_dir: a.gnmic_secrets_dir.clone(),
                poll: Duration::from_millis(a.gnmic_poll_ms),
            })
            .map_err(|e| anyhow::anyhow!("--gnmic-targets: {e}"))?,
        ),
        _ => None,
    };
    let scrape = match (&a.scrape_sd_listen, &a.scrape_targets) {
        (Some(_), Some(targets)) => Some(
            Scrape::new(ScrapeSettings {
                targets_file: targets.clone(),
                cluster: a.cluster.clone(),
                identity: a.identity.clone(),
                collector: a
                    .scrape_api
                    .clone()
                    .map(|api| (api, Duration::from_millis(a.scrape_poll_ms))),
            })
            .map_err(|e| anyhow::anyhow!("--scrape-targets: {e}"))?,
        ),
        _ => None,
    };
    let hooks: std::sync::Arc<dyn Hooks> =
        match (&gnmic, &scrape, &a.hook_url, &a.on_acquire, &a.on_release) {
            (Some(g), ..) => std::sync::Arc::new(g.clone()),
            (None, Some(s), ..) => std::sync::Arc::new(s.clone()),
            (None, None, Some(url), _, _) => {
                std::sync::Arc::new(HttpHooks::new(url, &a.cluster, &a.identity))
            }
            (None, None, None, None, None) => std::sync::Arc::new(NoHooks),
            (None, None, None, acq, rel) => std::sync::Arc::new(CommandHooks {
                on_acquire: acq.clone(),
                on_release: rel.clone(),
                cluster: a.cluster.clone(),
                instance: a.identity.clone(),
            }),
        };
    let authority_listen = a.authority_listen;
    let cfg = AgentConfig {
        lease_prefix: a.lease_prefix,
        lease_duration: Duration::from_secs(a.lease_duration),
        hook_timeout: Duration::from_secs(a.hook_timeout),
        max_parallel: a.max_parallel,
        drain_timeout: Duration::from_secs(a.drain_timeout),
        member_namespace: a
            .member_lease_namespace
            .clone()
            .unwrap_or_else(|| a.namespace.clone()),
        ..AgentConfig::new(&a.cluster, &a.namespace, &a.identity)
    };
    let shutdown = shutdown_signal();
    agent::check_grace_period(&client, &cfg).await;
    let agent = agent::Agent::new(cfg, hooks);
    // gnmic's reconciler (or the scraper's reader) runs as long as the member (whose last hook
    // calls need it) and no longer.
    let reconcile = match (&gnmic, &scrape) {
        (Some(g), _) => g.clone().reconcile().boxed(),
        (None, Some(s)) => s.clone().watch_collector().boxed(),
        (None, None) => futures::future::pending().boxed(),
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let mut server = match authority_listen {
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| anyhow::anyhow!("--authority-listen {addr}: {e}"))?;
            let mut router = agent::authority::router(agent.authority());
            if let Some(g) = &gnmic {
                router = router.merge(agent::gnmic::router(g.clone()));
            }
            tracing::info!(%addr, app = gnmic.is_some(), "serving this member's authority at GET /authority");
            agent::authority::serve(listener, router, async {
                let _ = stopped.await;
            })
            .boxed()
        }
        None => futures::future::pending().boxed(),
    };
    // The scrape list is served until the member has stopped (its last answers are empty).
    let (stop_sd, sd_stopped) = tokio::sync::oneshot::channel::<()>();
    let mut sd_server = match (&scrape, a.scrape_sd_listen) {
        (Some(s), Some(addr)) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| anyhow::anyhow!("--scrape-sd-listen {addr}: {e}"))?;
            let router = agent::scrape::sd::router(s.clone(), agent.authority());
            tracing::info!(%addr, "serving this member's scrape targets at GET /sd");
            agent::authority::serve(listener, router, async {
                let _ = sd_stopped.await;
            })
            .boxed()
        }
        _ => futures::future::pending().boxed(),
    };
    let sd_file = match (&scrape, &a.scrape_sd_file) {
        (Some(s), Some(path)) => {
            tracing::info!(path = %path.display(), "writing this member's scrape targets to a file SD file");
            agent::scrape::sd::write_file(s.clone(), agent.authority(), path.clone()).boxed()
        }
        _ => futures::future::pending().boxed(),
    };
    let member = agent.run(client, shutdown);
    tokio::pin!(member);
    let res = tokio::select! {
        res = &mut member => {
            let _ = stop.send(());
            let _ = stop_sd.send(());
            if authority_listen.is_some() {
                server.await?;
            }
            if scrape.is_some() {
                sd_server.await?;
            }
            res
        }
        res = &mut server => {
            res?;
            anyhow::bail!("the authority endpoint stopped serving")
        }
        res = &mut sd_server => {
            res?;
            anyhow::bail!("the scrape endpoint stopped serving")
        }
        () = reconcile => unreachable!("gnmic's reconciler and the scraper's reader run until dropped"),
        () = sd_file => unreachable!("the SD file writer runs until dropped"),
    };
    // The member has stopped all work: nothing for the scraper to go on scraping.
    if let Some(path) = &a.scrape_sd_file
        && let Err(error) = agent::scrape::sd::write_atomically(path, b"[]")
    {
        tracing::warn!(path = %path.display(), %error, "could not empty the scrape SD file");
    }
    res
}

/// Completes on SIGTERM (what the kubelet sends) or Ctrl-C. The SIGTERM handler is installed
/// when this is called, not when the future is first polled: a signal that arrives in between
/// (a demo told to stop right after it printed its addresses) would otherwise kill the process
/// before it cleans up.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    let term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate());
    async move {
        #[cfg(unix)]
        match term {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM; Ctrl-C only");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

async fn run_sim(args: SimArgs) -> anyhow::Result<()> {
    let auth = match &args.auth_file {
        Some(p) => {
            let text =
                std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            serde_json::from_str(&text)
                .with_context(|| format!("{}: not a valid auth table", p.display()))?
        }
        None => Default::default(),
    };
    let opts = SimOptions {
        history: args.history,
        bookmark_interval: Duration::from_secs(args.bookmark_interval.max(1)),
        auth,
        anonymous: !args.no_anonymous,
        tls: args.tls,
        loopback_endpoints: args.loopback_endpoints,
        ..Default::default()
    };
    let admin_token = opts.admin_token.clone();
    let mut simulator = Simulator::start(args.listen, opts).await?;
    if let Some(dir) = &args.service_account_dir {
        simulator
            .write_service_account(dir, &admin_token)
            .with_context(|| format!("writing {}", dir.display()))?;
        println!(
            "service-account files (token, ca.crt, namespace) written to {}",
            dir.display()
        );
        for (k, v) in simulator.in_cluster_env() {
            println!("  {k}={v}");
        }
    }
    if let Some(path) = &args.kubeconfig_out {
        std::fs::write(path, simulator.kubeconfig())
            .with_context(|| format!("writing {}", path.display()))?;
        println!("kubeconfig written to {}", path.display());
    }
    println!("Kubernetes API simulator at {}", simulator.url());
    if args.fake_kubelet {
        simulator.spawn_kubelet(Default::default()).await?;
    }
    simulator.run_until(shutdown_signal()).await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `leasehold agent` with a valid cluster, namespace and identity, unless `args` set them.
    fn agent(args: &[&str]) -> Result<(), String> {
        let mut argv = vec!["leasehold", "agent"];
        for (flag, value) in [
            ("--cluster", "c"),
            ("--namespace", "ns"),
            ("--identity", "m-0"),
        ] {
            if !args.contains(&flag) {
                argv.extend([flag, value]);
            }
        }
        argv.extend(args);
        let cli = Cli::try_parse_from(argv).map_err(|e| e.to_string())?;
        let Command::Agent(a) = cli.command else {
            unreachable!()
        };
        a.validate().map_err(|e| e.to_string())
    }

    #[test]
    fn agent_flags_that_cannot_work_stop_start_up_naming_the_flag() {
        assert_eq!(agent(&[]), Ok(()));
        assert_eq!(agent(&["--member-lease-namespace", "ns-m"]), Ok(()));
        assert_eq!(
            agent(&[
                "--gnmic-api",
                "http://127.0.0.1:7890",
                "--gnmic-targets",
                "t.yaml"
            ]),
            Ok(())
        );
        assert_eq!(
            agent(&["--hook-url", "http://127.0.0.1:8080/{event}"]),
            Ok(())
        );
        assert_eq!(
            agent(&[
                "--scrape-sd-listen",
                "127.0.0.1:9095",
                "--scrape-targets",
                "t.yaml"
            ]),
            Ok(())
        );
        for (args, flag) in [
            (&["--cluster", ""][..], "--cluster: "),
            (&["--cluster", "Not_A_Label"], "--cluster: "),
            (&["--identity", ""], "--identity: "),
            (&["--identity", "two words"], "--identity: "),
            (&["--namespace", ""], "--namespace: "),
            (&["--lease-prefix", "lease/holder"], "--lease-prefix: "),
            (&["--lease-duration", "0"], "--lease-duration: "),
            (&["--hook-timeout", "100000"], "--hook-timeout: "),
            (&["--max-parallel", "0"], "--max-parallel: "),
            (&["--hook-url", "https://127.0.0.1/hook"], "--hook-url: "),
            (&["--hook-url", "ftp://app/hook"], "--hook-url: "),
            (&["--hook-url", "127.0.0.1:8080"], "--hook-url: "),
            (&["--hook-url", "http://"], "--hook-url: "),
            (
                &["--member-lease-namespace", "A_b"],
                "--member-lease-namespace: ",
            ),
            (&["--hook-timeout", "6"], "--hook-timeout: "),
            (
                &[
                    "--gnmic-api",
                    "https://127.0.0.1:7890",
                    "--gnmic-targets",
                    "t.yaml",
                ],
                "--gnmic-api: ",
            ),
            (
                &[
                    "--gnmic-api",
                    "http://127.0.0.1:7890",
                    "--gnmic-targets",
                    "t.yaml",
                    "--gnmic-poll-ms",
                    "10",
                ],
                "--gnmic-poll-ms: ",
            ),
            // Managed gnmic needs its definitions, and is the only app.
            (
                &["--gnmic-api", "http://127.0.0.1:7890"],
                "error: the following required",
            ),
            (
                &[
                    "--gnmic-api",
                    "http://127.0.0.1:7890",
                    "--gnmic-targets",
                    "t.yaml",
                    "--hook-url",
                    "http://127.0.0.1:1/",
                ],
                "error: the argument",
            ),
            (
                &[
                    "--scrape-sd-listen",
                    "127.0.0.1:0",
                    "--scrape-targets",
                    "t.yaml",
                ],
                "--scrape-sd-listen: ",
            ),
            (
                &[
                    "--scrape-sd-listen",
                    "localhost:9095",
                    "--scrape-targets",
                    "t.yaml",
                ],
                "error: invalid value",
            ),
            // Scrape targets need their definitions, and are the only app.
            (
                &["--scrape-sd-listen", "127.0.0.1:9095"],
                "error: the following required",
            ),
            (
                &["--scrape-targets", "t.yaml"],
                "error: the following required",
            ),
            (
                &[
                    "--scrape-sd-listen",
                    "127.0.0.1:9095",
                    "--scrape-targets",
                    "t.yaml",
                    "--gnmic-api",
                    "http://127.0.0.1:7890",
                    "--gnmic-targets",
                    "t.yaml",
                ],
                "error: the argument",
            ),
            (
                &[
                    "--scrape-sd-listen",
                    "127.0.0.1:9095",
                    "--scrape-targets",
                    "t.yaml",
                    "--on-acquire",
                    "true",
                ],
                "error: the argument",
            ),
            // The first protocol's flag is gone with it.
            (&["--protocol-version", "2"], "error: unexpected argument"),
        ] {
            let e = agent(args).expect_err(&format!("{args:?}"));
            assert!(e.starts_with(flag), "{args:?}: {e}");
        }
    }
}
