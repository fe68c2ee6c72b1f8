//! `leasehold demo`: one command, no cluster. It starts the Kubernetes simulator with the fake
//! kubelet, seeds two member sets (`layout`: StatefulSet-style telemetry collectors, and an
//! MMR-style replicated database with a controlling instance and copies, each with a headless
//! and a LoadBalancer Service), runs one agent per member (`members`), the control plane
//! (history in a fresh SQLite file) and the HTTP server (API, docs, dashboard) with the
//! demo-only controls, and writes a kubeconfig so `kubectl get leases -w` shows targets being
//! placed, renewed and failed over. Beside each member runs the app [`DemoOptions::apps`]
//! gives it: nothing in `leasehold demo`, the invariant checker in the tests — or, with
//! `--gnmic`, a real `gnmic collect` per collector member (`gnmic`).
//!
//! [`start`] returns a [`Demo`] handle with the bound addresses (tests run it in-process on
//! port 0); [`run`] is the CLI: start, print where everything is once it has settled and again
//! on SIGUSR1 (`terminal`), run until Ctrl-C, and say in one line what stopping released. The
//! CLI keeps the demo's files (history, kubeconfig, admin token) in a [`StateDir`]: a temporary
//! directory removed when the demo stops, or one the user names and keeps — never the
//! directory it was started from. One task
//! owns everything the demo runs; any part ending on its own ends the demo with an error.

mod gnmic;
mod layout;
mod members;
mod terminal;

use std::collections::BTreeSet;
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use base64::Engine as _;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinSet;

/// The control plane's configuration the demo runs (deploy/examples/mmr is checked against it).
pub use self::layout::config as layout_config;
pub use self::layout::{CLUSTERS, COLLECTOR, DATABASES, NAMESPACE, REPLICAS, Timing};
use self::members::Members;
pub use self::members::{MemberApps, NoApps};
pub use self::terminal::Stopped;
use crate::config::http::{AuthSettings, HttpSettings, Mode};
use crate::engine::Engine;
use crate::http::demo::{DemoControls, DemoRequest};
use crate::store::Store;
use kube_sim::{SimOptions, Simulator};

/// Settings of the demo.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// Where the API and dashboard listen. On a loopback address nobody needs to log in;
    /// elsewhere an admin token is generated into `token_file`.
    pub listen: SocketAddr,
    /// Where the simulated Kubernetes API listens.
    pub kube_listen: SocketAddr,
    /// Collector pods at start.
    pub members: u32,
    /// Collector targets (one Lease each).
    pub targets: usize,
    /// Where to write the simulator's kubeconfig.
    pub kubeconfig_out: PathBuf,
    /// The history database, a SQLite file recreated at every start.
    pub database: PathBuf,
    /// Where the admin token goes when `listen` is not loopback.
    pub token_file: PathBuf,
    /// Both clusters' lease duration and join settling time.
    pub timing: Timing,
    /// The app beside each member, told by its agent's hooks to start and stop work, and told
    /// when the member is killed ([`NoApps`] in `leasehold demo`).
    pub apps: Arc<dyn MemberApps>,
    /// A gnmic binary: the collectors are a managed gnmic cluster, a real `gnmic collect` per
    /// member (this replaces `apps`), collecting from a simulated network (`demo::gnmic`).
    pub gnmic: Option<PathBuf>,
}

/// The history database's file name in the state directory (recreated at every start: the
/// simulated cluster starts afresh too).
pub const DATABASE: &str = "history.db";
/// The admin token's file name in the state directory (written when not on loopback).
pub const TOKEN_FILE: &str = "tokens";
/// The simulator's kubeconfig's file name in the state directory.
pub const KUBECONFIG: &str = "kubeconfig";

/// Where the demo keeps its files.
#[derive(Debug)]
pub enum StateDir {
    /// A directory the user named (`--state-dir`): created if missing, left in place at exit.
    Kept(PathBuf),
    /// A fresh temporary directory, removed when this value is dropped (the demo stopped).
    Temporary(tempfile::TempDir),
}

impl StateDir {
    /// `dir`, created if missing, or a fresh temporary directory when `None`.
    pub fn new(dir: Option<PathBuf>) -> anyhow::Result<StateDir> {
        match dir {
            Some(dir) => {
                std::fs::create_dir_all(&dir)
                    .with_context(|| format!("--state-dir {}: cannot create it", dir.display()))?;
                Ok(StateDir::Kept(dir))
            }
            None => tempfile::Builder::new()
                .prefix("leasehold-demo-")
                .tempdir()
                .map(StateDir::Temporary)
                .context("creating a temporary state directory for the demo"),
        }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        match self {
            StateDir::Kept(dir) => dir,
            StateDir::Temporary(dir) => dir.path(),
        }
    }
}
/// Default lease duration of both clusters: a crash is visible for a few seconds before the
/// failover, without a long wait.
pub const LEASE_DURATION: Duration = Duration::from_secs(10);
/// Default join settling time: members added in quick succession cause one rebalance.
pub const JOIN_SETTLE: Duration = Duration::from_secs(3);
/// Bound on stopping each part of the demo at shutdown (agents releasing, then the control
/// plane and HTTP server, whose open event streams would otherwise hold it).
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// Bound on waiting at start for the members to be ready and registered before the control
/// plane starts (they are within a second; past it, the control plane starts anyway, and its
/// join policy gives the late ones their share once they have joined).
const MEMBERS_WAIT: Duration = Duration::from_secs(10);
/// The user of the generated admin token.
pub const ADMIN_USER: &str = "demo-admin";
/// The demo's log filter unless `RUST_LOG` sets one: its own members' agents log warnings and
/// errors only, as their one line per target and hand-over (hundreds a second at start) would
/// bury everything else; the control plane, the simulator and the demo log at `info`.
pub const LOG_FILTER: &str = "info,leasehold::agent=warn";
/// The demo's log filter, unless `RUST_LOG` sets one, once it has been asked to stop: its
/// members log errors only, since every member leaves at once, nobody can take their targets
/// and each one's drain timeout runs out — a warning for a member stopping alone, expected here.
/// What they released, and what they did not, the closing line says ([`Stopped`]).
pub const STOPPING_LOG_FILTER: &str = "info,leasehold::agent=error";

/// A running demo. Dropping it aborts everything; [`Demo::stop`] stops it gracefully.
pub struct Demo {
    api: SocketAddr,
    kube: SocketAddr,
    token_file: Option<PathBuf>,
    engine: Engine,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<anyhow::Result<Stopped>>,
}

impl Demo {
    /// The address the API and dashboard are served on.
    pub fn api_addr(&self) -> SocketAddr {
        self.api
    }

    /// The simulated Kubernetes API's address.
    pub fn kube_addr(&self) -> SocketAddr {
        self.kube
    }

    /// The admin token file, when the API needs a token (not on loopback).
    pub fn token_file(&self) -> Option<&Path> {
        self.token_file.as_deref()
    }

    /// Runs until `shutdown` completes, then stops gracefully (what stopping released); or
    /// until a part of the demo fails (the error).
    pub async fn run_until(
        mut self,
        shutdown: impl Future<Output = ()>,
    ) -> anyhow::Result<Stopped> {
        tokio::select! {
            () = shutdown => {
                if let Some(stop) = self.stop.take() {
                    let _ = stop.send(());
                }
                (&mut self.task).await?
            }
            r = &mut self.task => r?,
        }
    }

    /// Stops gracefully: agents release what they hold, then everything ends.
    pub async fn stop(self) -> anyhow::Result<Stopped> {
        self.run_until(async {}).await
    }
}

impl Drop for Demo {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts the demo and returns once every address is bound and the control plane has started,
/// after every member joined (the control plane and agents carry on in the background;
/// `/readyz` says when the model has synced).
pub async fn start(opts: DemoOptions) -> anyhow::Result<Demo> {
    let mut simulator = Simulator::start(opts.kube_listen, SimOptions::default()).await?;
    let client = simulator.client().await?;
    simulator.spawn_kubelet(Default::default()).await?;
    layout::seed(&client, opts.members)
        .await
        .context("seeding the demo's clusters")?;
    std::fs::write(&opts.kubeconfig_out, simulator.kubeconfig())
        .with_context(|| format!("writing {}", opts.kubeconfig_out.display()))?;
    for suffix in ["", "-wal", "-shm"] {
        let mut file = opts.database.clone().into_os_string();
        file.push(suffix);
        let _ = std::fs::remove_file(file);
    }
    // With gnmic: the simulated network first, then the target list the agents read (beside
    // the history database).
    let (network, apps) = match &opts.gnmic {
        None => (None, opts.apps.clone()),
        Some(bin) => {
            let dir = opts.database.parent().unwrap_or(Path::new("."));
            let network = gnmic::Network::start(bin, dir).context("starting gnmic")?;
            let list = layout::gnmic_targets(network.addr, opts.targets);
            let file = dir.join("gnmic-targets.yaml");
            std::fs::write(
                &file,
                list.iter().map(|t| format!("- {t}\n")).collect::<String>(),
            )
            .with_context(|| format!("writing {}", file.display()))?;
            let apps: Arc<dyn MemberApps> = Arc::new(gnmic::GnmicApps::new(bin, dir, &file));
            (Some(network), apps)
        }
    };
    let config = layout::config(
        &opts.database,
        opts.targets,
        opts.timing,
        network.as_ref().map(|n| n.addr),
    )?;
    let store = Store::connect(&config.database).await?;
    let engine = Engine::new(config, client.clone(), store, "leasehold-demo".into());

    let mut http = HttpSettings {
        listen: opts.listen,
        auth: AuthSettings {
            mode: Mode::None,
            ..Default::default()
        },
        ..Default::default()
    };
    let token_file = if opts.listen.ip().is_loopback() {
        None
    } else {
        write_token_file(&opts.token_file)?;
        http.auth.mode = Mode::Token;
        http.auth.token_file = Some(opts.token_file.clone());
        Some(opts.token_file.clone())
    };
    let listener = tokio::net::TcpListener::bind(opts.listen)
        .await
        .with_context(|| format!("listening on {}", opts.listen))?;
    let api = listener.local_addr()?;
    let kube = simulator.addr();

    let (controls, inbox) = DemoControls::channel();
    let mut members = Members::new(
        client.clone(),
        opts.timing.lease_duration,
        inbox.members,
        apps,
    );
    for ordinal in 0..opts.members {
        members.start(COLLECTOR, ordinal);
    }
    for ordinal in 0..layout::REPLICA_MEMBERS {
        members.start(REPLICAS, ordinal);
    }
    let names = (0..opts.members)
        .map(|i| format!("{COLLECTOR}-{i}"))
        .chain((0..layout::REPLICA_MEMBERS).map(|i| format!("{REPLICAS}-{i}")))
        .collect();
    members_joined(&client, &names).await;
    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let mut core = JoinSet::new();
    let e = engine.clone();
    let (counted, handle) = (engine.clone(), engine.clone());
    let engine_stopped = stopped(stop_rx.clone());
    core.spawn(async move { e.run(engine_stopped).await.context("the control plane") });
    let http_stopped = stopped(stop_rx);
    core.spawn(async move {
        crate::http::run(engine, &http, listener, Some(controls), http_stopped)
            .await
            .context("the HTTP server")
    });
    let (stop, stop_requested) = oneshot::channel();
    let task = tokio::spawn(supervise(
        simulator,
        network,
        members,
        counted,
        core,
        stop_tx,
        inbox.requests,
        stop_requested,
    ));
    Ok(Demo {
        api,
        kube,
        token_file,
        engine: handle,
        stop: Some(stop),
        task,
    })
}

/// Waits until each member of `names` is ready and registered — its pod Ready, and holding a
/// Lease (its member Lease) — at most [`MEMBERS_WAIT`]. The control plane then starts as it
/// would in a running cluster: started with the members, it would place every target on the
/// first member to register, and rebalance once the others had joined.
async fn members_joined(client: &kube::Client, names: &BTreeSet<String>) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let leases: Api<Lease> = Api::namespaced(client.clone(), NAMESPACE);
    let began = tokio::time::Instant::now();
    loop {
        let (pods, leases) = match (
            pods.list(&ListParams::default()).await,
            leases.list(&ListParams::default()).await,
        ) {
            (Ok(pods), Ok(leases)) => (pods, leases),
            (Err(error), _) | (_, Err(error)) => {
                tracing::warn!(%error, "demo: cannot see whether the members have joined");
                return;
            }
        };
        let ready = pods.items.iter().filter(|pod| {
            pod.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        });
        let ready: BTreeSet<String> = ready.filter_map(|pod| pod.metadata.name.clone()).collect();
        let holders: BTreeSet<String> = leases
            .items
            .iter()
            .filter_map(|l| l.spec.as_ref()?.holder_identity.clone())
            .collect();
        let waiting: Vec<&String> = names
            .iter()
            .filter(|n| !ready.contains(*n) || !holders.contains(*n))
            .collect();
        if waiting.is_empty() {
            return;
        }
        if began.elapsed() >= MEMBERS_WAIT {
            tracing::info!(
                ?waiting,
                "demo: starting the control plane before every member has joined"
            );
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The demo's one owning task: serves the demo controls until asked to stop (or until any
/// part ends on its own), then stops agents (they release), then the control plane and HTTP;
/// says what stopping released, as the control plane (`engine`) saw it.
#[allow(clippy::too_many_arguments)]
async fn supervise(
    simulator: Simulator,
    // Kept until everything stopped (the members' gnmics collect from it).
    _network: Option<gnmic::Network>,
    mut members: Members,
    engine: Engine,
    mut core: JoinSet<anyhow::Result<()>>,
    stop_core: watch::Sender<bool>,
    mut requests: mpsc::Receiver<DemoRequest>,
    mut stop: oneshot::Receiver<()>,
) -> anyhow::Result<Stopped> {
    let mut outcome = Ok(());
    let mut stopped = None;
    simulator
        .run_until(async {
            outcome = loop {
                tokio::select! {
                    // A dropped handle stops the demo too.
                    _ = &mut stop => break Ok(()),
                    Some(req) = requests.recv() => {
                        let answer = members.serve(req.action).await;
                        let _ = req.reply.send(answer);
                    }
                    Some(ended) = members.next_ended() => {
                        if let Err(e) = ended {
                            break Err(e);
                        }
                    }
                    Some(done) = core.join_next() => break match done {
                        Ok(Ok(())) => Err(anyhow::anyhow!("a demo task ended")),
                        Ok(Err(e)) => Err(e),
                        Err(e) => Err(e.into()),
                    },
                }
            };
            // Agents release their targets while the simulator and control plane still run.
            let began = tokio::time::Instant::now();
            let running = terminal::Running::now(&engine);
            members.stop_all(SHUTDOWN_GRACE).await;
            let still_held = running.still_held(&engine).await;
            let _ = stop_core.send(true);
            let _ = tokio::time::timeout(SHUTDOWN_GRACE, async {
                while core.join_next().await.is_some() {}
            })
            .await;
            stopped = Some((began, running, still_held));
        })
        .await?;
    outcome?;
    let (began, running, still_held) =
        stopped.context("the simulator stopped before the demo did")?;
    Ok(Stopped {
        members: running.members(),
        held: running.targets(),
        still_held,
        took: began.elapsed(),
    })
}

/// Writes a fresh admin token to `path` (mode 0600) in kube-apiserver's `--token-auth-file`
/// format: `token,user,uid,"groups"`. The token itself is never printed or logged.
fn write_token_file(path: &Path) -> anyhow::Result<()> {
    let mut bytes = [0u8; 32];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes)
        .map_err(|_| anyhow::anyhow!("the system random number generator failed"))?;
    let token = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    let line = format!("{token},{ADMIN_USER},{ADMIN_USER},\"leasehold:admins\"\n");
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
        options.mode(0o600);
        // An existing file keeps its mode on open; make it private before writing.
        if path.exists() {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
                .with_context(|| format!("making {} private", path.display()))?;
        }
    }
    let mut file = options
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    std::io::Write::write_all(&mut file, line.as_bytes())
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// Runs the demo until `shutdown` (the CLI passes Ctrl-C or SIGTERM; its files are in
/// `state`): says it is starting, prints the banner once the demo has settled and again on
/// SIGUSR1, and at the end one line saying what stopping released.
pub async fn run(
    opts: DemoOptions,
    state: &StateDir,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    // Listened for from the start: SIGUSR1's default action ends the process.
    #[cfg(unix)]
    let mut again = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined1())
        .context("listening for SIGUSR1")?;
    println!("Starting the Leasehold demo…");
    let kubeconfig = opts.kubeconfig_out.clone();
    let (members, targets) = (opts.members, opts.targets);
    let join_settle = opts.timing.join_settle;
    let demo = start(opts).await?;
    let banner = terminal::banner(
        &demo,
        members,
        targets,
        &kubeconfig,
        state,
        std::process::id(),
    );
    let engine = demo.engine.clone();
    let tell = async {
        if let Some(why) = terminal::settle(&engine, join_settle).await {
            println!("Not settled yet: {why}");
        }
        println!("{banner}");
        #[cfg(unix)]
        while again.recv().await.is_some() {
            println!("{banner}");
        }
        std::future::pending::<()>().await;
    };
    let stopped = demo
        .run_until(async {
            tokio::select! {
                () = shutdown => {}
                () = tell => {}
            }
        })
        .await?;
    println!("leasehold demo stopped: {stopped}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_temporary_state_dir_is_removed_and_a_named_one_kept() {
        let temp = StateDir::new(None).unwrap();
        let path = temp.path().to_owned();
        std::fs::write(path.join(DATABASE), b"x").unwrap();
        assert!(matches!(temp, StateDir::Temporary(_)));
        drop(temp);
        assert!(!path.exists(), "{} outlived the demo", path.display());

        let parent = tempfile::tempdir().unwrap();
        let named = parent.path().join("a/b");
        let kept = StateDir::new(Some(named.clone())).unwrap();
        assert_eq!(kept.path(), named);
        std::fs::write(kept.path().join(KUBECONFIG), b"x").unwrap();
        drop(kept);
        assert!(named.join(KUBECONFIG).exists());

        let file = parent.path().join("f");
        std::fs::write(&file, b"").unwrap();
        let err = StateDir::new(Some(file)).unwrap_err().to_string();
        assert!(err.starts_with("--state-dir "), "{err}");
    }
}
