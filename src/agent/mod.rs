//! `leasehold agent`: the member side of the protocol (`docs/protocol.md`), run beside a member
//! app as a sidecar or embedded as a library. It watches its cluster's Leases, takes the target
//! Leases whose desired owner is this member (only when free, already ours, or expired by our
//! own observation), renews what it holds, hands a target over when the desired owner changes
//! (stop work, then release), and releases everything on shutdown. It also stands in the
//! cluster's leader election (`k8s::election`).
//!
//! It writes only the holder side of a Lease (`spec`, via `protocol::held_by` / `released`),
//! every write a compare-and-swap on `resourceVersion`; it never writes desired owners. With
//! `protocol_version: 2` it instead renews one member Lease, its authority to work on anything,
//! takes only free target Leases and never renews them, watches only the target Leases desired
//! for it or held by it (label selectors), and on shutdown asks for its targets to be moved
//! away before it exits (`docs/protocol.md`, "Protocol v2").
//! `member` holds the decision loop, `state` what it keeps per Lease, `writes` the Lease writes,
//! `hooks` the ways of telling the app, `shared` one watch of the target Leases for the members
//! of one process.

pub mod hooks;
mod member;
mod shared;
mod state;
mod writes;

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tracing::Instrument as _;

use crate::k8s::election::{self, ElectionConfig, LeaderElector};
use crate::protocol::{self, names};

pub use self::hooks::{Assignment, CommandHooks, HookEvent, Hooks, HttpHooks, NoHooks};
pub use self::shared::SharedLeases;

/// Default prefix of Lease names.
pub const DEFAULT_LEASE_PREFIX: &str = "leasehold";
/// Default lease duration when a target Lease has no `leasehold.io/lease-duration-seconds`
/// (client-go's 15 s).
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);
/// Default bound on one hook call. Kept under a third of the default duration: a member that
/// loses its Lease (renew deadline at 2/3) must have stopped the work before the Lease expires.
pub const DEFAULT_HOOK_TIMEOUT: Duration = Duration::from_secs(5);
/// Default wait, on shutdown in protocol v2, for the targets to be moved away.
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
/// Default bound on concurrent Lease writes (a rebalance can move many targets at once; the
/// API server's mutating-call budget is shared with everyone).
pub const DEFAULT_MAX_PARALLEL: usize = 16;

/// Settings of one member agent.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// The cluster (value of `leasehold.io/cluster`).
    pub cluster: String,
    /// Namespace of the cluster's Leases.
    pub namespace: String,
    /// This member's identity: its pod name, as the control plane writes it in desired owners.
    pub identity: String,
    /// Prefix of Lease names (`<prefix>-<cluster>-…`).
    pub lease_prefix: String,
    /// Duration promised on a target Lease without a duration annotation; also the leader
    /// Lease's duration.
    pub default_lease_duration: Duration,
    /// Bound on each hook call.
    pub hook_timeout: Duration,
    /// Most target Lease writes in flight at once: the member's limit adapts to the API
    /// server's latency below it (`k8s::pacing`); its member Lease's writes are not counted.
    pub max_parallel: usize,
    /// Member protocol version: 1 (renew every held target Lease) or 2 (renew one member Lease,
    /// of duration [`Self::default_lease_duration`]; target Leases are written only on
    /// acquire and release).
    pub protocol_version: u8,
    /// Protocol v2: on shutdown, how long to wait for the control plane to move this member's
    /// targets away (it announces `leaving` on its member Lease) before releasing the rest.
    pub drain_timeout: Duration,
    /// Protocol v2: namespace of the member Lease (the cluster's `member_lease_namespace`);
    /// [`Self::namespace`] unless the cluster keeps member Leases apart.
    pub member_namespace: String,
}

impl AgentConfig {
    /// Settings with the defaults above.
    pub fn new(cluster: &str, namespace: &str, identity: &str) -> Self {
        Self {
            cluster: cluster.to_owned(),
            namespace: namespace.to_owned(),
            identity: identity.to_owned(),
            lease_prefix: DEFAULT_LEASE_PREFIX.to_owned(),
            default_lease_duration: DEFAULT_LEASE_DURATION,
            hook_timeout: DEFAULT_HOOK_TIMEOUT,
            max_parallel: DEFAULT_MAX_PARALLEL,
            protocol_version: 1,
            drain_timeout: DEFAULT_DRAIN_TIMEOUT,
            member_namespace: namespace.to_owned(),
        }
    }

    /// The leader election this member takes part in: the cluster's leader Lease, the default
    /// duration, and a retry period of at most 2 s and at most a quarter of the duration (so
    /// that short test durations still leave several renewals before the renew deadline).
    pub fn election(&self) -> ElectionConfig {
        let mut cfg = ElectionConfig::new(
            &self.namespace,
            &names::leader_lease(&self.lease_prefix, &self.cluster),
            &self.identity,
        )
        .with_duration(self.default_lease_duration);
        cfg.retry_period = election::DEFAULT_RETRY_PERIOD.min(self.default_lease_duration / 4);
        cfg.labels = BTreeMap::from([
            (protocol::LABEL_CLUSTER.to_owned(), self.cluster.clone()),
            (
                protocol::LABEL_ROLE.to_owned(),
                protocol::ROLE_LEADER.to_owned(),
            ),
        ]);
        cfg
    }
}

/// A member agent. Create it, take the state receivers you need, then [`Agent::run`] it.
pub struct Agent {
    cfg: AgentConfig,
    hooks: Arc<dyn Hooks>,
    held: watch::Sender<BTreeSet<String>>,
    leading: watch::Sender<bool>,
    overruns: watch::Sender<u64>,
    shared: Option<SharedLeases>,
}

impl Agent {
    /// An agent with these settings and hooks.
    pub fn new(cfg: AgentConfig, hooks: Arc<dyn Hooks>) -> Self {
        Self {
            cfg,
            hooks,
            held: watch::Sender::new(BTreeSet::new()),
            leading: watch::Sender::new(false),
            overruns: watch::Sender::new(0),
            shared: None,
        }
    }

    /// Protocol v2: take this member's target Leases from `leases`, one watch shared by the
    /// members of this process, instead of two watches of its own ([`SharedLeases`]). `leases`
    /// must watch this member's cluster and namespace and run until this agent has returned;
    /// [`Agent::run`] fails at once otherwise, or in protocol v1.
    pub fn sharing(mut self, leases: &SharedLeases) -> Self {
        self.shared = Some(leases.clone());
        self
    }

    /// How many holds this member found already ended by its own clock when it next looked at
    /// them: it was paused (a GC pause, SIGSTOP, a starved process) past a Lease's duration,
    /// and another member may have worked on the target meanwhile. Each is logged as an error,
    /// and the app is still told to stop (`on_release`, with the full hook timeout). Those found
    /// in one decision pass are reported together: a Warning Event `PausedPastHold` about the
    /// member's pod, and in protocol v2 the member Lease's `leasehold.io/last-overrun`
    /// annotation, which the control plane records in history.
    pub fn overruns(&self) -> watch::Receiver<u64> {
        self.overruns.subscribe()
    }

    /// Target keys whose Lease this member holds (from a successful acquire until the release
    /// is written or the Lease is given up). Keeps its last value after the agent stops.
    pub fn held(&self) -> watch::Receiver<BTreeSet<String>> {
        self.held.subscribe()
    }

    /// Whether this member is the cluster's elected leader.
    pub fn leader(&self) -> watch::Receiver<bool> {
        self.leading.subscribe()
    }

    /// Runs until `shutdown` completes, then releases everything it holds (stopping the work
    /// first) and the leader Lease, and returns. Returns an error only if one of its own tasks
    /// died; API errors are logged and retried.
    pub async fn run(
        self,
        client: kube::Client,
        shutdown: impl Future<Output = ()>,
    ) -> anyhow::Result<()> {
        let span = tracing::info_span!("agent", cluster = %self.cfg.cluster, identity = %self.cfg.identity);
        if let Some(shared) = &self.shared {
            anyhow::ensure!(
                self.cfg.protocol_version == 2,
                "a shared lease watch serves protocol v2 members only"
            );
            anyhow::ensure!(
                shared.cluster() == self.cfg.cluster && shared.namespace() == self.cfg.namespace,
                "the shared lease watch is of cluster {:?} in namespace {:?}, this member's is {:?} in {:?}",
                shared.cluster(),
                shared.namespace(),
                self.cfg.cluster,
                self.cfg.namespace
            );
        }
        let (stop_tx, stop_rx) = watch::channel(false);
        let stopped = |mut rx: watch::Receiver<bool>| async move {
            // A dropped sender also means stop.
            let _ = rx.wait_for(|s| *s).await;
        };
        let elector = LeaderElector::new(self.cfg.election()).run(
            client.clone(),
            self.leading.clone(),
            stopped(stop_rx.clone()),
        );
        let member = member::Member::new(
            client,
            self.cfg,
            self.hooks,
            self.held,
            self.overruns,
            self.shared,
        );
        let members = member.run(stopped(stop_rx));
        async move {
            tokio::pin!(members, elector, shutdown);
            let (mut elector_done, mut stopping) = (false, false);
            // Both loops run until stopped; the member loop ends early only when one of its
            // tasks died, and then the elector is stopped (and releases) too.
            let res = loop {
                tokio::select! {
                    res = &mut members => break res,
                    () = &mut elector, if !elector_done => elector_done = true,
                    () = &mut shutdown, if !stopping => {
                        tracing::info!("shutting down: releasing held leases");
                        stopping = true;
                        stop_tx.send_replace(true);
                    }
                }
            };
            stop_tx.send_replace(true);
            if !elector_done {
                elector.await;
            }
            res
        }
        .instrument(span)
        .await
    }
}

/// Runs a member agent until `shutdown` (see [`Agent::run`]).
pub async fn run(
    client: kube::Client,
    cfg: AgentConfig,
    hooks: Arc<dyn Hooks>,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    Agent::new(cfg, hooks).run(client, shutdown).await
}
