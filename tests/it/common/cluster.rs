//! The engine harness the engine and fault tests share: a simulator (or a real kube-apiserver)
//! with a fake kubelet, one cluster `c` configured from YAML, member pods with their agents —
//! in-process (`Agent` with the invariant checker's hooks) or real `leasehold agent` processes
//! whose HTTP hooks reach the checker ([`Harness::add_process_member`]) — control-plane
//! engines sharing one SQLite history, and helpers that wait for a balanced cluster and read
//! history. Tests using it run one at a time ([`SERIAL`]). On the real tier the members and the
//! control plane act as the ServiceAccounts `deploy/` gives them ([`Accounts`]), not as the
//! admin.

use super::accounts::Accounts;
use super::eventually;
use super::invariant::InvariantChecker;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{ListParams, PostParams};
use leasehold::agent::{Agent, AgentConfig, SharedLeases};
use leasehold::config::Config;
use leasehold::engine::Engine;
use leasehold::k8s::model::ClusterModel;
use leasehold::store::{HistoryKind, HistoryQuery, Store};
use serde_json::json;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub const NS: &str = "apps";
pub const CLUSTER: &str = "c";
/// The lease duration of the tests (the shortest the config allows): the cluster's policy's
/// and the in-process members' member Leases' (one Lease per member, however many targets).
pub const LEASE_S: u64 = 2;
/// The lease duration of member agents run as processes: the flags take whole seconds, and the
/// hook timeout (1 s at least) must be within a third of it.
pub const PROCESS_LEASE_S: u64 = 3;
/// How long an in-process member drains on shutdown unless a test says otherwise
/// ([`Harness::drain_timeout`]). Short: at the end of a test every member stops at once, so
/// nobody is left to take their targets and each would wait out its whole drain (the product's
/// 10 s) before releasing them. Tests of a planned stop set the product's default.
pub const TEARDOWN_DRAIN: Duration = Duration::from_secs(1);
/// How long an in-process member's app takes to start or stop work on a target.
pub const HOOK_WORK: Duration = Duration::from_millis(5);
/// The hook timeout of in-process members: work must stop within a third of the member Lease's
/// duration.
pub const HOOK_TIMEOUT: Duration = Duration::from_millis(600);

/// A member agent running in this process.
pub struct Member {
    pub task: JoinHandle<anyhow::Result<()>>,
    pub stop: Option<oneshot::Sender<()>>,
}

/// A member agent running as a `leasehold agent` process (so it can be sent signals).
pub struct Process {
    pub child: tokio::process::Child,
    /// Its stderr.
    pub log: PathBuf,
    /// Where it serves its authority (`--authority-listen`).
    pub authority: std::net::SocketAddr,
}

impl Process {
    /// Sends `signal` (`-KILL`, `-TERM`, `-STOP`, `-CONT`) to the process.
    pub fn signal(&self, signal: &str) {
        let pid = self.child.id().expect("the agent process runs").to_string();
        let ok = std::process::Command::new("kill")
            .args([signal, &pid])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {signal} {pid}");
    }

    /// What it logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// The tests here each run a simulator, a control plane and several agents renewing hundreds
/// of Leases; run side by side on a 2-core machine they starve each other's renewals. One at a
/// time keeps the timings they assert meaningful.
pub static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

pub struct Harness {
    pub _serial: tokio::sync::MutexGuard<'static, ()>,
    pub t: super::TestSim,
    /// The namespace of the cluster under test.
    pub ns: String,
    /// The namespace of its member Leases: `ns`, or one kept apart.
    pub member_ns: String,
    pub config: Config,
    pub db: tempfile::TempDir,
    /// History on PostgreSQL instead of SQLite ([`Harness::use_postgres`]): the server's URL
    /// and this harness's database on it.
    pg: Option<(String, String)>,
    pub checker: InvariantChecker,
    /// Whom the members and the control plane act as (ServiceAccounts on the real tier).
    pub accounts: Accounts,
    pub members: BTreeMap<String, Member>,
    /// Member agents running as processes ([`Harness::add_process_member`]).
    pub processes: BTreeMap<String, Process>,
    /// The app the process members' HTTP hooks reach: its URL and its server task.
    hook_app: Option<(String, JoinHandle<()>)>,
    pub engines: BTreeMap<String, (Engine, JoinHandle<anyhow::Result<()>>)>,
    /// The drain timeout of in-process members started from now on ([`TEARDOWN_DRAIN`] unless a
    /// test sets another).
    pub drain_timeout: Duration,
    /// How long the app of in-process members started from now on takes to start or stop
    /// work on a target ([`HOOK_WORK`] unless a test sets another; within the hook timeout).
    pub hook_work: Duration,
}

pub fn config_yaml_with(targets: usize, lease_s: u64, policy: &str) -> String {
    let list: Vec<String> = (0..targets).map(|i| format!("t-{i:03}")).collect();
    format!(
        "control_plane: {{namespace: {NS}, lease_duration: 2s}}
clusters:
- name: {CLUSTER}
  namespace: {NS}
  selector: {{app: c}}
  headless_service: c
  targets: {{inline: [{}]}}
  policy: {{lease_duration: {lease_s}s, join_settle: 1s, move_timeout: {lease_s}s, {policy}}}
",
        list.join(", ")
    )
}

impl Harness {
    pub async fn new(yaml: &str) -> Harness {
        let serial = SERIAL.lock().await;
        // RUST_LOG=leasehold=debug shows what the engine and agents do.
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
        let mut t = super::start().await;
        t.spawn_kubelet();
        // On the simulator the cluster lives in NS; a real apiserver gives the test a
        // namespace of its own, which the configuration then names.
        let ns = t.namespace_or(NS).await;
        // (This also turns `member_lease_namespace: {NS}-members` into `{ns}-members`.)
        let yaml = yaml.replace(&format!("namespace: {NS}"), &format!("namespace: {ns}"));
        let config = Config::parse(&yaml, Path::new("test.yaml")).unwrap();
        let member_ns = config.clusters[0].member_namespace().to_owned();
        if member_ns != ns {
            t.create_namespace(&member_ns).await;
        }
        // `hook`: the Secret the removal webhook tests keep their credentials in.
        let accounts = Accounts::for_test(&t, &ns, &member_ns, &["hook"]).await;
        Harness {
            accounts,
            _serial: serial,
            ns,
            member_ns,
            t,
            config,
            db: tempfile::tempdir().unwrap(),
            pg: None,
            checker: InvariantChecker::new(),
            members: BTreeMap::new(),
            processes: BTreeMap::new(),
            hook_app: None,
            engines: BTreeMap::new(),
            drain_timeout: TEARDOWN_DRAIN,
            hook_work: HOOK_WORK,
        }
    }

    pub fn db_url(&self) -> String {
        match &self.pg {
            Some((server, name)) => leasehold::store::with_database(server, name),
            None => format!("sqlite:{}", self.db.path().join("history.db").display()),
        }
    }

    /// Keeps history in a fresh database on the PostgreSQL server `LEASEHOLD_TEST_POSTGRES_URL`
    /// names (`scripts/postgres.sh`; CI sets it), for engines started from now on; dropped by
    /// [`Harness::finish`]. Whether there is such a server.
    pub async fn use_postgres(&mut self) -> bool {
        let Some(server) = std::env::var("LEASEHOLD_TEST_POSTGRES_URL")
            .ok()
            .filter(|s| !s.is_empty())
        else {
            return false;
        };
        sqlx::any::install_default_drivers();
        let name = format!("leasehold_it_{}", uuid::Uuid::new_v4().simple());
        let mut admin = <sqlx::AnyConnection as sqlx::Connection>::connect(&server)
            .await
            .expect("connect to LEASEHOLD_TEST_POSTGRES_URL");
        sqlx::Executor::execute(
            &mut admin,
            sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")),
        )
        .await
        .expect("create the harness's database");
        self.pg = Some((server, name));
        true
    }

    pub async fn store(&self) -> Store {
        Store::connect(&self.db_url()).await.unwrap()
    }

    pub async fn start_engine(&mut self, identity: &str) -> Engine {
        let client = self.accounts.control_plane.clone();
        self.start_engine_with(identity, client).await
    }

    /// The product's client as the control plane's account through a link a test can cut or
    /// hang ([`super::linked_product_client_as`]).
    pub async fn linked_control_plane_client(
        &self,
    ) -> (kube::Client, tokio::sync::watch::Sender<super::Link>) {
        super::linked_product_client_as(&self.t, &self.accounts.control_plane_kubeconfig).await
    }

    /// A client as the members' account through a link a test can cut or hang.
    pub async fn linked_member_client(
        &self,
    ) -> (kube::Client, tokio::sync::watch::Sender<super::Link>) {
        super::linked_product_client_as(&self.t, &self.accounts.member_kubeconfig).await
    }

    pub async fn start_engine_with(&mut self, identity: &str, client: kube::Client) -> Engine {
        let engine = Engine::new(
            self.config.clone(),
            client,
            self.store().await,
            identity.into(),
        );
        let e = engine.clone();
        let task = tokio::spawn(async move { e.run(std::future::pending()).await });
        self.engines.insert(identity.into(), (engine.clone(), task));
        engine
    }

    pub fn engine(&self) -> &Engine {
        let acting: Vec<_> = self
            .engines
            .values()
            .filter(|(e, _)| *e.acting().borrow())
            .collect();
        acting
            .first()
            .map(|(e, _)| e)
            .unwrap_or_else(|| &self.engines.values().next().unwrap().0)
    }

    /// Waits (10 s at most) until the model shows instance `name` ready, with a live member
    /// Lease too (an instance without one is given nothing).
    pub async fn wait_ready(&self, name: &str) {
        eventually(Duration::from_secs(10), || async {
            self.model()
                .instance(name)
                .is_some_and(|i| {
                    i.ready
                        && i.member_lease
                            .as_ref()
                            .is_some_and(|m| m.liveness == leasehold::k8s::model::Liveness::Live)
                })
                .then_some(())
        })
        .await
        .unwrap_or_else(|| panic!("{name} never became ready"));
    }

    /// Creates a member pod (StatefulSet style) and its agent.
    pub async fn add_member(&mut self, name: &str) {
        self.add_pod(name).await;
        self.start_agent(name);
    }

    pub async fn add_pod(&self, name: &str) {
        let pods: Api<Pod> = Api::namespaced(self.t.client.clone(), &self.ns);
        let pod = json!({
            "metadata": {"name": name, "labels": {"app": "c"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "c", "uid": "u-1"}]},
            "spec": {"containers": [{"name": "app", "image": "collector"}]}
        });
        pods.create(
            &PostParams::default(),
            &serde_json::from_value(pod).unwrap(),
        )
        .await
        .unwrap();
    }

    pub fn start_agent(&mut self, name: &str) {
        let client = self.accounts.member.clone();
        self.start_agent_via(name, client);
    }

    /// [`Harness::start_agent`] with the agent's API requests going through `client` (e.g. a
    /// [`super::linked_client`], whose link a test can hang).
    pub fn start_agent_via(&mut self, name: &str, client: kube::Client) {
        self.start_agent_on(name, client, None);
    }

    /// [`Harness::start_agent`] with the agent reading its target Leases from `feed`, a watch
    /// it shares with the other members of this process (`agent::SharedLeases`).
    pub fn start_agent_sharing(&mut self, name: &str, feed: &SharedLeases) {
        let client = self.accounts.member.clone();
        self.start_agent_on(name, client, Some(feed));
    }

    /// [`Harness::start_agent`] with `hooks` for its app.
    pub fn start_agent_with(
        &mut self,
        name: &str,
        hooks: std::sync::Arc<dyn leasehold::agent::Hooks>,
    ) {
        let client = self.accounts.member.clone();
        self.start_agent_hooked(name, client, None, hooks);
    }

    fn start_agent_on(&mut self, name: &str, client: kube::Client, feed: Option<&SharedLeases>) {
        let hooks = self.checker.hooks(name, self.hook_work);
        self.start_agent_hooked(name, client, feed, hooks);
    }

    fn start_agent_hooked(
        &mut self,
        name: &str,
        client: kube::Client,
        feed: Option<&SharedLeases>,
        hooks: std::sync::Arc<dyn leasehold::agent::Hooks>,
    ) {
        let mut cfg = AgentConfig::new(CLUSTER, &self.ns, name);
        cfg.member_namespace = self.member_ns.clone();
        cfg.lease_duration = Duration::from_secs(LEASE_S);
        cfg.hook_timeout = HOOK_TIMEOUT;
        cfg.drain_timeout = self.drain_timeout;
        let mut agent = Agent::new(cfg, hooks);
        if let Some(feed) = feed {
            agent = agent.sharing(feed);
        }
        let (stop, rx) = oneshot::channel();
        let task = tokio::spawn(async move {
            agent
                .run(client, async {
                    let _ = rx.await;
                })
                .await
        });
        self.members.insert(
            name.into(),
            Member {
                task,
                stop: Some(stop),
            },
        );
    }

    /// The member dies: no release, and its pod goes away at once.
    pub async fn crash(&mut self, name: &str) {
        if let Some(mut p) = self.processes.remove(name) {
            p.child.kill().await.unwrap();
        } else {
            let m = self.members.remove(name).unwrap();
            m.task.abort();
            let _ = m.task.await;
        }
        self.checker.crashed(name);
        kube_sim::kubelet::crash(&self.t.client, &self.ns, name)
            .await
            .unwrap();
    }

    pub async fn wait_pods_ready(&self, n: usize) {
        let pods: Api<Pod> = Api::namespaced(self.t.client.clone(), &self.ns);
        eventually(Duration::from_secs(10), || async {
            let list = pods.list(&ListParams::default()).await.ok()?;
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
            (ready >= n).then_some(())
        })
        .await
        .expect("pods ready");
    }

    /// For a failure message: every target's owner in the model, and the last `lines` lines
    /// of each process member's log.
    pub fn diagnosis(&self, lines: usize) -> String {
        let owners: Vec<_> = self
            .model()
            .targets
            .iter()
            .map(|t| (t.key.to_string(), t.owner.clone()))
            .collect();
        let logs: Vec<String> = self
            .processes
            .iter()
            .map(|(n, p)| {
                let log = p.log();
                let all: Vec<&str> = log.lines().collect();
                format!(
                    "--- agent {n}:\n{}",
                    all[all.len().saturating_sub(lines)..].join("\n")
                )
            })
            .collect();
        format!("owners {owners:?}\n{}", logs.join("\n"))
    }

    pub fn model(&self) -> ClusterModel {
        self.engine().model(CLUSTER).unwrap()
    }

    /// Waits until every target is owned, per-member counts are `want`, and — at the work level —
    /// each target's owner works on it alone: its `on_acquire` ran and nobody else's work on it
    /// is still going (the hooks, not the Leases: a target handed or granted to a
    /// member names it as holder before the member has started work, and a member that never
    /// started would go unseen on the Leases alone).
    pub async fn wait_balanced(&self, want: &[(&str, usize)], timeout: Duration) -> ClusterModel {
        let want: BTreeMap<String, usize> =
            want.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect();
        let got = eventually(timeout, || async {
            let m = self.model();
            let counts: BTreeMap<String, usize> = m
                .instances
                .iter()
                .filter(|i| i.owned > 0)
                .map(|i| (i.name.clone(), i.owned))
                .collect();
            (m.counts.owned == m.counts.total && counts == want && self.unworked(&m).is_empty())
                .then_some(m)
        })
        .await;
        match got {
            Some(m) => m,
            None => {
                let m = self.model();
                let counts: Vec<_> = m
                    .instances
                    .iter()
                    .map(|i| (i.name.clone(), i.owned))
                    .collect();
                panic!(
                    "not balanced as {want:?}: counts {:?}, loads {counts:?}; owner vs workers \
                     where they differ: {:?}",
                    m.counts,
                    self.unworked(&m)
                );
            }
        }
    }

    /// The targets of `m` whose workers (as the hooks tell) are not exactly their owner:
    /// (target, owner, workers).
    pub fn unworked(&self, m: &ClusterModel) -> Vec<(String, Option<String>, Vec<String>)> {
        self.checker.unworked(
            m.targets
                .iter()
                .map(|t| (t.key.to_string(), t.owner.as_deref().map(str::to_owned))),
        )
    }

    pub async fn history(&self, kind: HistoryKind) -> Vec<leasehold::store::HistoryEntry> {
        let store = self.store().await;
        let mut out = Vec::new();
        let mut cursor = None;
        loop {
            let page = store
                .history(&HistoryQuery {
                    cluster: Some(CLUSTER.into()),
                    kind: Some(kind),
                    cursor: cursor.take(),
                    limit: 1000,
                    ..Default::default()
                })
                .await
                .unwrap();
            out.extend(page.items);
            match page.next_cursor {
                Some(c) => cursor = Some(c),
                None => return out,
            }
        }
    }

    pub async fn finish(mut self) {
        for (name, mut p) in std::mem::take(&mut self.processes) {
            p.signal("-CONT");
            p.signal("-TERM");
            // Its drain (10 s by default), then its apps' last stops: a scraper that proves
            // its stops (`--scrape-api`) takes its own pickup time, 5–10 s, for those.
            let exited = tokio::time::timeout(Duration::from_secs(30), p.child.wait()).await;
            assert!(
                exited.is_ok(),
                "{name} did not exit on SIGTERM:\n{}",
                p.log()
            );
        }
        for (_, m) in self.members.iter_mut() {
            if let Some(stop) = m.stop.take() {
                let _ = stop.send(());
            }
        }
        // Each member stops gracefully (after a drain of `drain_timeout`: all
        // leave at once) and tells its app to stop everything it works on.
        // (Agents a test configured itself may drain for the product's default.)
        let drain = self
            .drain_timeout
            .max(leasehold::agent::DEFAULT_DRAIN_TIMEOUT);
        let deadline = tokio::time::Instant::now() + drain + Duration::from_secs(10);
        let mut unstopped = Vec::new();
        let stopping: Vec<_> = std::mem::take(&mut self.members).into_iter().collect();
        for (name, m) in stopping {
            match tokio::time::timeout_at(deadline, m.task).await {
                Ok(Ok(Ok(()))) => {}
                other => unstopped.push(format!("{name}: {other:?}")),
            }
            let left = self.checker.working_on(&name);
            if !left.is_empty() {
                unstopped.push(format!("{name} still works on {left:?} after it stopped"));
            }
        }
        for (_, (_, task)) in std::mem::take(&mut self.engines) {
            task.abort();
        }
        if let Some((_, app)) = self.hook_app.take() {
            app.abort();
        }
        if let Some((server, name)) = self.pg.take() {
            let mut admin = <sqlx::AnyConnection as sqlx::Connection>::connect(&server)
                .await
                .expect("connect to LEASEHOLD_TEST_POSTGRES_URL");
            sqlx::Executor::execute(
                &mut admin,
                sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")),
            )
            .await
            .expect("drop the harness's database");
        }
        self.checker.assert_ok();
        assert!(
            unstopped.is_empty(),
            "members that did not stop cleanly:\n{}",
            unstopped.join("\n")
        );
    }

    /// Creates a member pod and starts its agent as a `leasehold agent` process (protocol and
    /// durations as the in-process agents), whose HTTP hooks reach an app in this test that
    /// records into the checker: the app starts work when told to acquire and stops when told
    /// to release. Its stderr is kept in the harness's directory.
    pub async fn add_process_member(&mut self, name: &str) {
        self.add_pod(name).await;
        let url = self.hook_app_url().await;
        self.spawn_process_member(name, &["--hook-url", &url]);
    }

    /// Creates a member pod and starts its agent as a process in managed gnmic mode, driving
    /// the `gnmic collect` whose API is at `api` with the definitions in `targets`.
    pub async fn add_gnmic_member(
        &mut self,
        name: &str,
        api: std::net::SocketAddr,
        targets: &std::path::Path,
    ) {
        self.add_pod(name).await;
        let api = format!("http://{api}");
        let targets = targets.to_str().unwrap().to_owned();
        self.spawn_process_member(
            name,
            &[
                "--gnmic-api",
                &api,
                "--gnmic-targets",
                &targets,
                "--gnmic-poll-ms",
                "200",
            ],
        );
    }

    /// Creates a member pod and starts its agent as a process serving its scrape targets
    /// (`--scrape-sd-listen`) at `sd` with the definitions in `targets`; with `scraper_api`
    /// (its Prometheus' web address) its stops are proven by that Prometheus (`--scrape-api`).
    pub async fn add_scrape_member(
        &mut self,
        name: &str,
        sd: std::net::SocketAddr,
        targets: &std::path::Path,
        scraper_api: Option<std::net::SocketAddr>,
    ) {
        self.add_scrape_member_with(name, sd, targets, scraper_api, &[])
            .await;
    }

    /// [`Harness::add_scrape_member`] with more agent arguments (`--scrape-sd-file PATH`).
    pub async fn add_scrape_member_with(
        &mut self,
        name: &str,
        sd: std::net::SocketAddr,
        targets: &std::path::Path,
        scraper_api: Option<std::net::SocketAddr>,
        more: &[&str],
    ) {
        self.add_pod(name).await;
        let sd = sd.to_string();
        let targets = targets.to_str().unwrap().to_owned();
        let mut args = vec!["--scrape-sd-listen", &sd, "--scrape-targets", &targets];
        let api = scraper_api.map(|a| format!("http://{a}"));
        if let Some(api) = &api {
            args.extend(["--scrape-api", api]);
        }
        args.extend(more);
        self.spawn_process_member(name, &args);
    }

    /// Starts `name`'s agent as a `leasehold agent` process with `app` telling it its app.
    fn spawn_process_member(&mut self, name: &str, app: &[&str]) {
        let log = self.db.path().join(format!("agent-{name}.log"));
        let stderr = std::fs::File::create(&log).unwrap();
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_leasehold"));
        cmd.args(["agent", "--cluster", CLUSTER, "--namespace", &self.ns])
            .args(["--identity", name])
            .args(app)
            .args(["--lease-duration", &PROCESS_LEASE_S.to_string()])
            .arg("--kubeconfig")
            .arg(&self.accounts.member_kubeconfig)
            .env("RUST_LOG", "info")
            .stdout(std::process::Stdio::null())
            .stderr(stderr)
            .kill_on_drop(true);
        // Work must stop within a third of the member Lease's duration (whole seconds on the
        // command line).
        cmd.args(["--hook-timeout", "1"]);
        cmd.args(["--member-lease-namespace", &self.member_ns]);
        // A port free a moment ago (the agent binds it at once).
        let authority = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap();
        cmd.args(["--authority-listen", &authority.to_string()]);
        let child = cmd.spawn().expect("leasehold agent starts");
        self.processes.insert(
            name.into(),
            Process {
                child,
                log,
                authority,
            },
        );
    }

    async fn hook_app_url(&mut self) -> String {
        if let Some((url, _)) = &self.hook_app {
            return url.clone();
        }
        let app = self.checker.http_app();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hooks", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        self.hook_app = Some((url.clone(), task));
        url
    }
}

impl Harness {
    /// Members (pods and agents) running before the control plane starts, so the first
    /// placement sees all of them; returns the engine.
    pub async fn members_then_engine(&mut self, members: &[&str], identity: &str) -> Engine {
        for m in members {
            self.add_member(m).await;
        }
        self.wait_pods_ready(members.len()).await;
        self.wait_registered(members).await;
        self.start_engine(identity).await
    }

    /// Waits (15 s at most) until each of `members` holds its member Lease (its agent runs and
    /// may be given work; a placement sees only members that do).
    pub async fn wait_registered(&self, members: &[&str]) {
        let leases: Api<Lease> = Api::namespaced(self.t.client.clone(), &self.member_ns);
        for m in members {
            let name = leasehold::protocol::names::member_lease("leasehold", CLUSTER, m);
            eventually(Duration::from_secs(15), || async {
                let l = leases.get_opt(&name).await.ok()??;
                l.spec?.holder_identity.filter(|h| h == m).map(|_| ())
            })
            .await
            .unwrap_or_else(|| panic!("{m} never registered (no member Lease held)"));
        }
    }
}

/// Three members whose pods are running before the control plane starts, so the first
/// placement sees all of them.
pub async fn three_members_with(yaml: String) -> Harness {
    let mut h = Harness::new(&yaml).await;
    h.members_then_engine(&["c-0", "c-1", "c-2"], "cp-a").await;
    h
}

/// A cluster of `targets` with the failover tests' short duration: the members' member Leases
/// have it too ([`Harness::start_agent`]).
pub fn config_yaml(targets: usize, policy: &str) -> String {
    config_yaml_with(targets, LEASE_S, policy)
}

/// The harness for a cluster whose targets are `list` (entries with the definitions of a managed
/// kind: `gnmic:`, `scrape:`), inline in the control plane's configuration, and the agents'
/// copy of the list, written to `dir` (their `--gnmic-targets` or `--scrape-targets`).
pub async fn managed_harness(
    list: &[String],
    dir: &std::path::Path,
) -> (Harness, std::path::PathBuf) {
    managed_harness_with(list, dir, "").await
}

/// [`managed_harness`] with more of the cluster's policy (`, key: value` pairs, e.g.
/// `, handoff: exclusive`).
pub async fn managed_harness_with(
    list: &[String],
    dir: &std::path::Path,
    policy: &str,
) -> (Harness, std::path::PathBuf) {
    let yaml = format!(
        "control_plane: {{namespace: {NS}, lease_duration: 2s}}
clusters:
- name: {CLUSTER}
  namespace: {NS}
  selector: {{app: c}}
  headless_service: c
  targets:
    inline:
{}
  policy: {{lease_duration: {PROCESS_LEASE_S}s, join_settle: 1s, move_timeout: 20s, on_join: auto{policy}}}
",
        list.iter()
            .map(|t| format!("    - {t}\n"))
            .collect::<String>()
    );
    let h = Harness::new(&yaml).await;
    let targets_file = dir.join("targets.yaml");
    std::fs::write(
        &targets_file,
        list.iter().map(|t| format!("- {t}\n")).collect::<String>(),
    )
    .unwrap();
    (h, targets_file)
}
