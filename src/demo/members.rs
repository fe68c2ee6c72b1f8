//! The demo's members: one agent task per member pod, owned here (a `JoinSet`, with a stop
//! signal and an abort handle kept per member), and the demo controls that change them. A
//! member is added as the next ordinal's pod plus its agent; stopped gracefully
//! (the agent asks for its targets to be moved away, hands each over, exits; then the pod is
//! deleted); or crashed (the agent dies without releasing and the pod is marked Failed, so its
//! member Lease must expire, and be fenced, before the control plane's failover hands its
//! targets to others). It writes only pods; Leases are the agents' and the control plane's.
//! What it is doing with each member it publishes ([`MemberState`]), so the dashboard offers
//! only the controls that apply.
//!
//! Beside each member runs its app, as [`MemberApps`] gives it: the agent's hooks tell it to
//! start and stop work on a target, and an agent killed here (a crash, or a stop past its
//! grace) is reported, since its app dies with it. The demo's own apps do nothing
//! ([`NoApps`]); tests pass apps that record the work, to check that no two members ever work
//! on one target at once.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams};
use tokio::sync::{oneshot, watch};
use tokio::task::{AbortHandle, JoinError, JoinSet};

use super::layout::{self, CLUSTERS, NAMESPACE};
use crate::agent::{Agent, AgentConfig, Hooks, NoHooks};
use crate::http::demo::{Answer, DemoAction, MemberState, MemberStates, Outcome};
use kube_sim::kubelet;

/// How long a stopping agent may take to release what it holds before it is aborted (a
/// release is one compare-and-swap per Lease, a few hundred at most in the demo).
pub const STOP_GRACE: Duration = Duration::from_secs(15);

/// How long a stopping agent waits for the control plane to move its targets away before it
/// releases the rest (the agent's drain timeout; the product's default is 10 s). A stopped
/// member's targets are handed over well within it (0.1 s for 10 in the demo's test, 0.3 s for
/// 100 in `leasehold demo`, debug build). At the demo's shutdown every member leaves at once,
/// nobody can take their targets and each waits all of it before releasing, so it must end well
/// within [`super::SHUTDOWN_GRACE`], past which agents are killed.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);
const _: () = assert!(2 * DRAIN_TIMEOUT.as_millis() <= super::SHUTDOWN_GRACE.as_millis());

/// The apps beside the demo's members: what each member's agent tells to start and stop work.
pub trait MemberApps: Send + Sync + 'static {
    /// The hooks of the app beside `cluster`'s member `member` (asked once, when its agent
    /// starts).
    fn hooks(&self, cluster: &str, member: &str) -> Arc<dyn Hooks>;
    /// `cluster`'s member `member` was killed: its agent ended without telling its app to stop
    /// (the crash control, a stop that did not finish within its grace, or the demo's shutdown
    /// past its grace), and the app died with it, so it no longer works on anything. Called
    /// once the agent's task has ended, before anything else is done about the member.
    fn killed(&self, cluster: &str, member: &str);
    /// `cluster`'s member `member` stopped gracefully: its agent told its app to stop all its
    /// work and ended, and its pod is gone, the app with it.
    fn stopped(&self, _cluster: &str, _member: &str) {}
}

impl std::fmt::Debug for dyn MemberApps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MemberApps")
    }
}

/// No app beside the members (what `leasehold demo` runs): the hooks do nothing and a killed
/// member leaves nothing to stop.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoApps;

impl MemberApps for NoApps {
    fn hooks(&self, _cluster: &str, _member: &str) -> Arc<dyn Hooks> {
        Arc::new(NoHooks)
    }
    fn killed(&self, _cluster: &str, _member: &str) {}
}

/// One running member.
struct Running {
    cluster: String,
    /// Ends the agent gracefully.
    stop: oneshot::Sender<()>,
    /// Kills the agent (a crash).
    abort: AbortHandle,
    /// Resolves (with an error) once the agent's task has ended, however it ended.
    ended: oneshot::Receiver<()>,
    /// What the agent holds.
    held: watch::Receiver<BTreeSet<String>>,
}

/// The demo's members and their agents.
pub struct Members {
    client: Client,
    /// Duration the agents promise on Leases that do not say (their leader Lease).
    lease_duration: Duration,
    /// The agents; each task yields its member's name and how the agent ended.
    tasks: JoinSet<(String, anyhow::Result<()>)>,
    /// Members whose agent runs, by pod name.
    running: BTreeMap<String, Running>,
    /// Crashed members (their Failed pod stays until stopped), pod name → cluster.
    crashed: BTreeMap<String, String>,
    /// The next ordinal of each cluster (never reused, so a new member is never mistaken for
    /// a crashed one whose Leases have not expired yet).
    next: BTreeMap<String, u32>,
    /// Where each member's state is published (for the dashboard).
    states: watch::Sender<MemberStates>,
    /// The members' apps.
    apps: Arc<dyn MemberApps>,
}

impl Members {
    /// No members yet; `lease_duration` is what agents promise when a Lease does not say;
    /// `states` is where what happens to each member is published; `apps` runs beside them.
    pub fn new(
        client: Client,
        lease_duration: Duration,
        states: watch::Sender<MemberStates>,
        apps: Arc<dyn MemberApps>,
    ) -> Self {
        Self {
            client,
            lease_duration,
            tasks: JoinSet::new(),
            running: BTreeMap::new(),
            crashed: BTreeMap::new(),
            next: BTreeMap::new(),
            states,
            apps,
        }
    }

    /// Publishes that `cluster`'s member `name` is now in `state`.
    fn publish(&self, cluster: &str, name: &str, state: MemberState) {
        self.states.send_modify(|m| {
            m.entry(cluster.to_owned())
                .or_default()
                .insert(name.to_owned(), state);
        });
    }

    /// Starts the agent of `cluster`'s existing pod `ordinal`.
    pub fn start(&mut self, cluster: &str, ordinal: u32) {
        let name = format!("{cluster}-{ordinal}");
        let next = self.next.entry(cluster.to_owned()).or_default();
        *next = (*next).max(ordinal + 1);
        // One member Lease per member; its app's work must stop within a third of its
        // duration.
        let cfg = AgentConfig {
            lease_duration: self.lease_duration,
            hook_timeout: self.lease_duration / 3,
            drain_timeout: DRAIN_TIMEOUT,
            ..AgentConfig::new(cluster, NAMESPACE, &name)
        };
        let agent = Agent::new(cfg, self.apps.hooks(cluster, &name));
        let held = agent.held();
        let (stop, stopped) = oneshot::channel::<()>();
        let (ended_tx, ended) = oneshot::channel::<()>();
        let client = self.client.clone();
        let task_name = name.clone();
        let abort = self.tasks.spawn(async move {
            // Dropped when the task ends or is aborted, which resolves `ended`.
            let _ended = ended_tx;
            let result = agent
                .run(client, async move {
                    let _ = stopped.await;
                })
                .await;
            (task_name, result)
        });
        self.publish(cluster, &name, MemberState::Running);
        self.running.insert(
            name,
            Running {
                cluster: cluster.to_owned(),
                stop,
                abort,
                ended,
                held,
            },
        );
    }

    /// The next agent task to end. A member still counted as running ended on its own: an
    /// error (a task that dies takes the demo down). Stopped and crashed members' ends are
    /// expected.
    pub async fn next_ended(&mut self) -> Option<anyhow::Result<()>> {
        let done: Result<(String, anyhow::Result<()>), JoinError> = self.tasks.join_next().await?;
        Some(match done {
            Ok((name, result)) if self.running.contains_key(&name) => Err(match result {
                Ok(()) => anyhow::anyhow!("the agent of {name} ended"),
                Err(e) => e.context(format!("the agent of {name}")),
            }),
            Ok((name, Err(error))) => {
                tracing::warn!(%error, member = %name, "a stopped agent ended with an error");
                Ok(())
            }
            Ok((_, Ok(()))) => Ok(()),
            // Only a crash aborts an agent.
            Err(e) if e.is_cancelled() => Ok(()),
            Err(e) => Err(e.into()),
        })
    }

    /// Stops every agent gracefully (they release what they hold), waiting at most `grace`;
    /// the agents still running then are killed, and their apps told so.
    pub async fn stop_all(&mut self, grace: Duration) {
        // Members whose agent has not ended yet, name → cluster.
        let mut stopping = BTreeMap::new();
        for (name, r) in std::mem::take(&mut self.running) {
            self.publish(&r.cluster, &name, MemberState::Stopping);
            let _ = r.stop.send(());
            stopping.insert(name, r.cluster);
        }
        let apps = self.apps.clone();
        let _ = tokio::time::timeout(grace, async {
            while let Some(done) = self.tasks.join_next().await {
                if let Ok((name, _)) = done
                    && let Some(cluster) = stopping.remove(&name)
                {
                    apps.stopped(&cluster, &name);
                }
            }
        })
        .await;
        self.tasks.abort_all();
        while self.tasks.join_next().await.is_some() {}
        for (name, cluster) in stopping {
            tracing::warn!(
                %cluster, member = %name, ?grace,
                "demo: an agent did not stop within the grace and was killed"
            );
            self.apps.killed(&cluster, &name);
        }
    }

    /// Does `action`; the answer says what was done, or why not.
    pub async fn serve(&mut self, action: DemoAction) -> Answer {
        match action {
            DemoAction::AddMember { cluster } => self.add(&cluster).await,
            DemoAction::StopMember { cluster, instance } => self.stop(&cluster, &instance).await,
            DemoAction::CrashMember { cluster, instance } => self.crash(&cluster, &instance).await,
        }
        .unwrap_or_else(|refused| refused)
    }

    fn known(cluster: &str) -> Result<(), Answer> {
        if CLUSTERS.contains(&cluster) {
            Ok(())
        } else {
            Err(Answer {
                outcome: Outcome::NoCluster,
                member: None,
                message: format!(
                    "the demo has no cluster {cluster:?} (it has {})",
                    CLUSTERS.join(", ")
                ),
            })
        }
    }

    /// `cluster`'s running member `instance`, or why there is none (`refused`: the outcome
    /// for a member that is not running).
    fn running_member(
        &self,
        cluster: &str,
        instance: &str,
        refused: Outcome,
    ) -> Result<(), Answer> {
        Self::known(cluster)?;
        if self
            .running
            .get(instance)
            .is_some_and(|r| r.cluster == cluster)
        {
            return Ok(());
        }
        let names: Vec<&str> = self
            .running
            .iter()
            .filter(|(_, r)| r.cluster == cluster)
            .map(|(n, _)| n.as_str())
            .collect();
        let (outcome, why) = if self.crashed.get(instance).is_some_and(|c| c == cluster) {
            let outcome = match refused {
                Outcome::CrashRefused => Outcome::AlreadyCrashed,
                other => other,
            };
            (outcome, "has crashed")
        } else {
            (refused, "is not a running member")
        };
        Err(Answer::about(
            outcome,
            instance,
            format!(
                "{instance:?} {why} of {cluster} (running: {})",
                if names.is_empty() {
                    "none".to_owned()
                } else {
                    names.join(", ")
                }
            ),
        ))
    }

    async fn add(&mut self, cluster: &str) -> Result<Answer, Answer> {
        Self::known(cluster)?;
        let ordinal = self.next.get(cluster).copied().unwrap_or(0);
        let name = format!("{cluster}-{ordinal}");
        let failed = |message: String| Answer {
            outcome: Outcome::AddFailed,
            member: None,
            message,
        };
        let pod = layout::pod(cluster, ordinal).map_err(|e| failed(e.to_string()))?;
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), NAMESPACE);
        pods.create(&PostParams::default(), &pod)
            .await
            .map_err(|e| failed(format!("creating pod {name}: {e}")))?;
        self.start(cluster, ordinal);
        tracing::info!(cluster, member = %name, "demo: member added");
        Ok(Answer::about(
            Outcome::Added,
            &name,
            format!(
                "{name} started (pod and agent); once membership settles a rebalance giving it a share of the targets of {cluster} is proposed: approve it on the cluster page"
            ),
        ))
    }

    async fn stop(&mut self, cluster: &str, instance: &str) -> Result<Answer, Answer> {
        let failed = |message: String| Answer::about(Outcome::StopFailed, instance, message);
        if self.crashed.get(instance).is_some_and(|c| c == cluster) {
            self.delete_pod(instance).await.map_err(failed)?;
            self.crashed.remove(instance);
            self.publish(cluster, instance, MemberState::Stopped);
            return Ok(Answer::about(
                Outcome::PodDeleted,
                instance,
                format!("{instance} had crashed; its failed pod is deleted"),
            ));
        }
        self.running_member(cluster, instance, Outcome::StopRefused)?;
        let Some(mut r) = self.running.remove(instance) else {
            return Err(Answer::about(
                Outcome::StopRefused,
                instance,
                format!("{instance:?} is not a running member of {cluster}"),
            ));
        };
        self.publish(cluster, instance, MemberState::Stopping);
        let _ = r.stop.send(());
        let graceful = tokio::time::timeout(STOP_GRACE, &mut r.ended).await.is_ok();
        if graceful {
            self.apps.stopped(cluster, instance);
        } else {
            r.abort.abort();
            let _ = r.ended.await;
            self.apps.killed(cluster, instance);
        }
        let released = r.held.borrow().len();
        self.publish(cluster, instance, MemberState::Stopped);
        self.delete_pod(instance).await.map_err(failed)?;
        tracing::info!(cluster, member = instance, graceful, "demo: member stopped");
        Ok(if graceful {
            Answer::about(
                Outcome::Stopped,
                instance,
                format!(
                    "{instance} stopped: its agent handed its targets over to the others before it exited, and its pod is deleted"
                ),
            )
        } else {
            Answer::about(
                Outcome::Killed,
                instance,
                format!(
                    "{instance}'s agent did not finish releasing within {STOP_GRACE:?} and was killed ({released} targets still held); its pod is deleted"
                ),
            )
        })
    }

    async fn crash(&mut self, cluster: &str, instance: &str) -> Result<Answer, Answer> {
        self.running_member(cluster, instance, Outcome::CrashRefused)?;
        let Some(r) = self.running.remove(instance) else {
            return Err(Answer::about(
                Outcome::CrashRefused,
                instance,
                format!("{instance:?} is not a running member of {cluster}"),
            ));
        };
        let held = r.held.borrow().len();
        r.abort.abort();
        let _ = r.ended.await;
        self.apps.killed(cluster, instance);
        self.crashed.insert(instance.to_owned(), cluster.to_owned());
        self.publish(cluster, instance, MemberState::Crashed);
        kubelet::fail(&self.client, NAMESPACE, instance)
            .await
            .map_err(|e| {
                Answer::about(
                    Outcome::CrashFailed,
                    instance,
                    format!("marking pod {instance} failed: {e}"),
                )
            })?;
        tracing::info!(cluster, member = instance, held, "demo: member crashed");
        Ok(Answer::about(
            Outcome::Crashed,
            instance,
            format!(
                "{instance} crashed: its agent died holding {held} targets and its pod failed; they move to other members once its member Lease expires and is fenced"
            ),
        ))
    }

    /// Deletes a member's pod as the kubelet would after its process exited: the delete
    /// starts termination, and the pod goes at once since nothing runs in it any more.
    async fn delete_pod(&self, name: &str) -> Result<(), String> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), NAMESPACE);
        let gone = |e: &kube::Error| matches!(e, kube::Error::Api(s) if s.code == 404);
        match pods.delete(name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(e) if gone(&e) => return Ok(()),
            Err(e) => return Err(format!("deleting pod {name}: {e}")),
        }
        match kubelet::finish(&self.client, NAMESPACE, name).await {
            Ok(()) => Ok(()),
            Err(e) if gone(&e) => Ok(()),
            Err(e) => Err(format!("removing pod {name}: {e}")),
        }
    }
}
