//! Member processes that follow their pods, as a kubelet runs a sidecar container. On the real
//! cluster tier (`scripts/envtest.sh` with `LEASEHOLD_ENVTEST_CLUSTER=1`: kube-controller-manager,
//! kube-scheduler and kwok) kwok makes scheduled pods Running and Ready with IPs but runs
//! nothing; [`PodAgents`] watches the member pods of one namespace and:
//!
//! - starts a `leasehold agent` process for each pod that runs (identity: the pod's name), once
//!   per pod UID — a pod recreated with the same name gets a new process;
//! - sends it SIGTERM when the pod gets a `deletionTimestamp` (a scale-down, rolling update,
//!   eviction or `kubectl delete`), and SIGKILL when the pod's grace period runs out or the pod
//!   is gone (a forced delete);
//! - once the process has exited, deletes the pod (grace 0, preconditioned on its UID), as a
//!   kubelet does once its containers have stopped; the StatefulSet controller then moves on.
//!   A pod deleted while no process of it runs (never started, or exited) is deleted at once —
//!   but not one whose process a test killed as its node's power loss ([`PodAgents::kill`]):
//!   with its kubelet gone, it stays `Terminating`, as on a dead node.
//!
//! Pods it manages carry [`KUBELET_LABEL`], whose deletion kwok leaves to it (envtest.sh adapts
//! kwok's pod-delete stage). The member's app is the invariant checker's HTTP app: when the
//! process exits the whole pod has stopped, so its work ends (`crashed`, a no-op when it
//! released everything).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, ResourceExt as _};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::invariant::InvariantChecker;

/// The label of pods whose member process [`PodAgents`] runs.
pub const KUBELET_LABEL: (&str, &str) = ("leasehold.test/kubelet", "harness");

/// What each member process runs with.
#[derive(Clone)]
pub struct AgentSpec {
    /// `leasehold agent` arguments but `--identity` (added per pod).
    pub args: Vec<String>,
    /// Where the processes' stderr goes (`<dir>/<pod>-<uid>.log`).
    pub log_dir: PathBuf,
}

/// One member process, as it ended.
#[derive(Debug, Clone)]
pub struct Exit {
    pub pod: String,
    pub uid: String,
    /// When its pod got a `deletionTimestamp` (SIGTERM), if it did.
    pub terminated_at: Option<Instant>,
    pub exited_at: Instant,
    /// Killed (grace period over, pod gone, or a test's SIGKILL) rather than exited.
    pub killed: bool,
    pub log: PathBuf,
}

enum Cmd {
    /// The pod is terminating: SIGTERM now, SIGKILL after the grace period.
    Terminate(Duration),
    /// SIGKILL now (the pod is gone, or the node died).
    Kill,
}

struct Running {
    uid: String,
    node: Option<String>,
    cmds: mpsc::UnboundedSender<Cmd>,
    log: PathBuf,
}

#[derive(Default)]
struct State {
    running: BTreeMap<String, Running>,
    exits: Vec<Exit>,
    /// Every (pod, uid) a process was started for, in order.
    started: Vec<(String, String)>,
    /// UIDs of pods whose kubelet a test killed with the process ([`PodAgents::kill`]).
    lost: std::collections::BTreeSet<String>,
}

/// The pod watcher and the member processes it runs (all stopped when dropped).
pub struct PodAgents {
    state: Arc<Mutex<State>>,
    task: JoinHandle<()>,
}

impl Drop for PodAgents {
    fn drop(&mut self) {
        self.task.abort();
        // The supervisors own the children (kill_on_drop): a Kill ends each at once.
        for r in self.state.lock().unwrap().running.values() {
            let _ = r.cmds.send(Cmd::Kill);
        }
    }
}

impl PodAgents {
    /// Follows the pods labelled [`KUBELET_LABEL`] in `ns`.
    pub fn start(client: Client, ns: &str, spec: AgentSpec, checker: InvariantChecker) -> Self {
        let state = Arc::new(Mutex::new(State::default()));
        let pods: Api<Pod> = Api::namespaced(client, ns);
        let task = tokio::spawn(follow(pods, spec, checker, state.clone()));
        PodAgents { state, task }
    }

    /// The pods whose process runs now, with the node each pod is on.
    pub fn running(&self) -> BTreeMap<String, Option<String>> {
        let s = self.state.lock().unwrap();
        s.running
            .iter()
            .map(|(name, r)| (name.clone(), r.node.clone()))
            .collect()
    }

    /// Processes that ended, in order.
    pub fn exits(&self) -> Vec<Exit> {
        self.state.lock().unwrap().exits.clone()
    }

    /// Every (pod, uid) a process was started for, in order.
    pub fn started(&self) -> Vec<(String, String)> {
        self.state.lock().unwrap().started.clone()
    }

    /// SIGKILLs the process of `pod` (its node died: nobody deletes the pod afterwards);
    /// false if none runs.
    pub fn kill(&self, pod: &str) -> bool {
        let mut s = self.state.lock().unwrap();
        let Some(r) = s.running.get(pod) else {
            return false;
        };
        let (uid, sent) = (r.uid.clone(), r.cmds.send(Cmd::Kill).is_ok());
        s.lost.insert(uid);
        sent
    }

    /// The log of the process that runs (or last ran) for `pod`.
    pub fn log(&self, pod: &str) -> String {
        let s = self.state.lock().unwrap();
        let path = s.running.get(pod).map(|r| r.log.clone()).or_else(|| {
            s.exits
                .iter()
                .rev()
                .find(|e| e.pod == pod)
                .map(|e| e.log.clone())
        });
        path.and_then(|p| std::fs::read_to_string(p).ok())
            .unwrap_or_default()
    }
}

async fn follow(
    pods: Api<Pod>,
    spec: AgentSpec,
    checker: InvariantChecker,
    state: Arc<Mutex<State>>,
) {
    let selector = format!("{}={}", KUBELET_LABEL.0, KUBELET_LABEL.1);
    let mut events =
        watcher::watcher(pods.clone(), watcher::Config::default().labels(&selector)).boxed();
    // The latest copy of each pod, looked at again when a process exits: a pod recreated under
    // the same name waits for the old process to be gone.
    let mut latest: BTreeMap<String, Pod> = BTreeMap::new();
    let (exited_tx, mut exited) = mpsc::unbounded_channel::<String>();
    loop {
        let pod = tokio::select! {
            event = events.next() => match event {
                None => return,
                Some(Ok(Event::Apply(pod) | Event::InitApply(pod))) => {
                    latest.insert(pod.name_any(), pod.clone());
                    pod
                }
                Some(Ok(Event::Delete(pod))) => {
                    latest.remove(&pod.name_any());
                    let s = state.lock().unwrap();
                    if let Some(r) = s.running.get(&pod.name_any())
                        && Some(r.uid.as_str()) == pod.metadata.uid.as_deref()
                    {
                        let _ = r.cmds.send(Cmd::Kill);
                    }
                    continue;
                }
                Some(Ok(Event::Init | Event::InitDone)) => continue,
                Some(Err(error)) => {
                    eprintln!("pod agents: watch error (retrying): {error}");
                    continue;
                }
            },
            Some(name) = exited.recv() => match latest.get(&name) {
                Some(pod) => pod.clone(),
                None => continue,
            },
        };
        on_pod(&pods, &spec, &checker, &state, &pod, &exited_tx);
    }
}

fn on_pod(
    pods: &Api<Pod>,
    spec: &AgentSpec,
    checker: &InvariantChecker,
    state: &Arc<Mutex<State>>,
    pod: &Pod,
    exited: &mpsc::UnboundedSender<String>,
) {
    let name = pod.name_any();
    let Some(uid) = pod.metadata.uid.clone() else {
        return;
    };
    let mut s = state.lock().unwrap();
    if pod.metadata.deletion_timestamp.is_some() {
        let runs = s.running.get(&name).is_some_and(|r| r.uid == uid);
        if !runs && !s.lost.contains(&uid) {
            // No process of it runs: nothing to stop, the pod goes at once.
            tokio::spawn(delete_pod(pods.clone(), name.clone(), uid.clone()));
        }
        if let Some(r) = s.running.get(&name)
            && r.uid == uid
        {
            let grace = pod
                .metadata
                .deletion_grace_period_seconds
                .or(pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.termination_grace_period_seconds))
                .unwrap_or(30);
            let _ = r
                .cmds
                .send(Cmd::Terminate(Duration::from_secs(grace.max(0) as u64)));
        }
        return;
    }
    let status = pod.status.as_ref();
    let runs = status.and_then(|s| s.phase.as_deref()) == Some("Running")
        && status.and_then(|s| s.pod_ip.as_deref()).is_some();
    if !runs || s.running.contains_key(&name) || s.started.iter().any(|(_, u)| *u == uid) {
        return;
    }
    let log = spec.log_dir.join(format!("{name}-{uid}.log"));
    let stderr = std::fs::File::create(&log).expect("agent log file");
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(&spec.args)
        .args(["--identity", &name])
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::null())
        .stderr(stderr)
        .kill_on_drop(true)
        .spawn()
        .expect("leasehold agent starts");
    let (cmds, rx) = mpsc::unbounded_channel();
    s.running.insert(
        name.clone(),
        Running {
            uid: uid.clone(),
            node: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
            cmds,
            log: log.clone(),
        },
    );
    s.started.push((name.clone(), uid.clone()));
    tokio::spawn(supervise(
        child,
        rx,
        Supervised {
            pods: pods.clone(),
            name,
            uid,
            log,
            checker: checker.clone(),
            state: state.clone(),
            exited: exited.clone(),
        },
    ));
}

struct Supervised {
    pods: Api<Pod>,
    name: String,
    uid: String,
    log: PathBuf,
    checker: InvariantChecker,
    state: Arc<Mutex<State>>,
    /// Told the pod's name when the process is gone (a new pod of that name may start then).
    exited: mpsc::UnboundedSender<String>,
}

/// Removes pod `name` if it is still the one with `uid` (`kube_sim::kubelet::remove`).
async fn delete_pod(pods: Api<Pod>, name: String, uid: String) {
    match kube_sim::kubelet::remove(&pods, &name, uid).await {
        // Gone already, or a new pod of that name (the precondition): nothing to do.
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
        Err(error) => eprintln!("pod agents: deleting {name}: {error}"),
    }
}

/// Owns one member process until it ends, then (if its pod was terminating) deletes the pod.
async fn supervise(
    mut child: tokio::process::Child,
    mut cmds: mpsc::UnboundedReceiver<Cmd>,
    p: Supervised,
) {
    let mut terminated_at = None;
    let mut kill_at: Option<Instant> = None;
    let mut killed = false;
    let signal = |child: &tokio::process::Child, sig: &str| {
        if let Some(pid) = child.id() {
            let _ = std::process::Command::new("kill")
                .args([sig, &pid.to_string()])
                .status();
        }
    };
    loop {
        let deadline = kill_at.unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
        tokio::select! {
            _ = child.wait() => break,
            Some(cmd) = cmds.recv() => match cmd {
                Cmd::Terminate(grace) if terminated_at.is_none() => {
                    terminated_at = Some(Instant::now());
                    kill_at = Some(Instant::now() + grace);
                    // A stopped process would not see SIGTERM until continued.
                    signal(&child, "-CONT");
                    signal(&child, "-TERM");
                }
                Cmd::Terminate(_) => {}
                Cmd::Kill => {
                    killed = true;
                    let _ = child.start_kill();
                }
            },
            _ = tokio::time::sleep_until(deadline), if kill_at.is_some() => {
                killed = true;
                kill_at = None;
                let _ = child.start_kill();
            }
        }
    }
    let exited_at = Instant::now();
    p.checker.crashed(&p.name);
    {
        let mut s = p.state.lock().unwrap();
        if s.running.get(&p.name).is_some_and(|r| r.uid == p.uid) {
            s.running.remove(&p.name);
        }
        s.exits.push(Exit {
            pod: p.name.clone(),
            uid: p.uid.clone(),
            terminated_at,
            exited_at,
            killed,
            log: p.log.clone(),
        });
    }
    let _ = p.exited.send(p.name.clone());
    if terminated_at.is_some() {
        delete_pod(p.pods, p.name, p.uid).await;
    }
}
