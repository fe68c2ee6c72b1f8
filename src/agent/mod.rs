//! `leasehold agent`: the member side of the protocol (`docs/protocol.md`), run beside a member
//! app as a sidecar or embedded as a library. It renews one member Lease, its authority to work
//! on anything; watches only the target Leases desired for it or held by it (label selectors);
//! takes a target Lease only when it is free or handed to it, and never renews one; hands a
//! target over when the desired owner changes (stop work, then hand the Lease straight to the
//! next owner); and on shutdown asks for its targets to be moved away before it exits. It also
//! stands in the cluster's leader election (`k8s::election`).
//!
//! It writes only the holder side of a target Lease (`spec` and the holder label), and its own
//! member Lease, every write a compare-and-swap on `resourceVersion`; it never writes desired
//! owners.
//! `member` holds the decision loop, `state` what it keeps per Lease, `writes` the Lease writes,
//! `hooks` the ways of telling the app, `gnmic` the managed gnmic kind of them, `scrape` the
//! kind that serves a scraper its targets (HTTP service discovery), `shared` one watch of the target Leases for the members
//! of one process.

pub mod authority;
mod definitions;
pub mod gnmic;
pub mod hooks;
mod member;
pub mod scrape;
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
/// Default `D`: the member Lease's duration, also the leader Lease's (client-go's 15 s).
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);
/// Default bound on one hook call. Kept under a third of the default duration: a member that
/// loses its Lease (renew deadline at 2/3) must have stopped the work before the Lease expires.
pub const DEFAULT_HOOK_TIMEOUT: Duration = Duration::from_secs(5);
/// Default wait, on shutdown, for the targets to be moved away.
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
    /// `D`: the member Lease's duration (the member may work for this long after its last
    /// renewal was sent, minus the renew deadline's margin); also the leader Lease's.
    pub lease_duration: Duration,
    /// Bound on each hook call.
    pub hook_timeout: Duration,
    /// Most target Lease writes in flight at once, and so most handovers under way: the
    /// member's limit adapts to the API server's latency below it (`k8s::pacing`); its member
    /// Lease's writes are not counted.
    pub max_parallel: usize,
    /// On shutdown, how long to wait for the control plane to move this member's
    /// targets away (it announces `leaving` on its member Lease) before releasing the rest.
    pub drain_timeout: Duration,
    /// Namespace of the member Lease (the cluster's `member_lease_namespace`);
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
            lease_duration: DEFAULT_LEASE_DURATION,
            hook_timeout: DEFAULT_HOOK_TIMEOUT,
            max_parallel: DEFAULT_MAX_PARALLEL,
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
        .with_duration(self.lease_duration);
        cfg.retry_period = election::DEFAULT_RETRY_PERIOD.min(self.lease_duration / 4);
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
    authority: watch::Sender<Option<i64>>,
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
            authority: watch::Sender::new(None),
            shared: None,
        }
    }

    /// Take this member's target Leases from `leases`, one watch shared by the members of this
    /// process, instead of two watches of its own ([`SharedLeases`]). `leases` must watch this
    /// member's cluster and namespace and run until this agent has returned; [`Agent::run`]
    /// fails at once otherwise.
    pub fn sharing(mut self, leases: &SharedLeases) -> Self {
        self.shared = Some(leases.clone());
        self
    }

    /// How many holds this member found already ended by its own clock when it next looked at
    /// them: it was paused (a GC pause, SIGSTOP, a starved process) past a Lease's duration,
    /// and another member may have worked on the target meanwhile. Each is logged as an error,
    /// and the app is still told to stop (`on_release`, with the full hook timeout). Those found
    /// in one decision pass are reported together: a Warning Event `PausedPastHold` about the
    /// member's pod, and the member Lease's `leasehold.io/last-overrun`
    /// annotation, which the control plane records in history.
    pub fn overruns(&self) -> watch::Receiver<u64> {
        self.overruns.subscribe()
    }

    /// Target keys whose Lease this member holds (from a successful acquire until the release
    /// is written or the Lease is given up). Keeps its last value after the agent stops.
    pub fn held(&self) -> watch::Receiver<BTreeSet<String>> {
        self.held.subscribe()
    }

    /// When this member's authority to work ends unless its member Lease is renewed meanwhile:
    /// milliseconds since the Unix epoch by this machine's clock, as of the last renewal
    /// (`None`: it holds none). Every hook call carries it too
    /// ([`Assignment::deadline_unix_ms`]); [`authority::serve`] offers it to the app over HTTP.
    /// Keeps its last value after the agent stops.
    pub fn authority(&self) -> watch::Receiver<Option<i64>> {
        self.authority.subscribe()
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
            (self.authority, self.overruns),
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

/// Seconds a pod is given between SIGTERM and SIGKILL when its spec does not say (Kubernetes'
/// default `terminationGracePeriodSeconds`).
pub const DEFAULT_GRACE_PERIOD_S: i64 = 30;

/// Why a member stopping on SIGTERM may be killed before it has handed its targets over, or
/// `None`: its drain (`drain_timeout`, then one more `hook_timeout` for the apps' last stops)
/// must end within the pod's `grace_s` (its `terminationGracePeriodSeconds`).
pub fn drain_outlasts_grace(cfg: &AgentConfig, grace_s: Option<i64>) -> Option<String> {
    let grace_s = grace_s.unwrap_or(DEFAULT_GRACE_PERIOD_S);
    let needs = cfg.drain_timeout + cfg.hook_timeout;
    (needs.as_secs_f64() > grace_s as f64).then(|| {
        format!(
            "--drain-timeout ({} s) and --hook-timeout ({} s) need {} s after SIGTERM, but the pod's \
             terminationGracePeriodSeconds is {grace_s} s: a member stopping with many targets \
             may be killed before it has handed them over; raise the grace period or lower \
             the drain timeout",
            cfg.drain_timeout.as_secs(),
            cfg.hook_timeout.as_secs(),
            needs.as_secs()
        )
    })
}

/// Warns, at start, when this member's drain cannot fit its pod's termination grace period
/// ([`drain_outlasts_grace`]), reading the pod once. Needs `get` on pods; without it (or
/// without a pod: an agent run by hand) it says so at debug level and checks nothing.
pub async fn check_grace_period(client: &kube::Client, cfg: &AgentConfig) {
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(client.clone(), &cfg.namespace);
    match pods.get_opt(&cfg.identity).await {
        Ok(Some(pod)) => {
            let grace = pod
                .spec
                .as_ref()
                .and_then(|s| s.termination_grace_period_seconds);
            if let Some(why) = drain_outlasts_grace(cfg, grace) {
                tracing::warn!("{why}");
            }
        }
        Ok(None) => tracing::debug!("no pod of this member's name: grace period not checked"),
        Err(error) => {
            tracing::debug!(%error, "could not read this member's pod: grace period not checked")
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drain_that_outlasts_the_grace_period_is_named() {
        let mut cfg = AgentConfig::new("c", "ns", "m-0");
        // The defaults (10 s + 5 s) fit Kubernetes' default 30 s.
        assert_eq!(drain_outlasts_grace(&cfg, None), None);
        assert_eq!(drain_outlasts_grace(&cfg, Some(15)), None);
        let why = drain_outlasts_grace(&cfg, Some(14)).expect("15 s > 14 s");
        assert!(
            why.contains("need 15 s after SIGTERM") && why.contains("is 14 s"),
            "{why}"
        );
        cfg.drain_timeout = Duration::from_secs(60);
        assert!(drain_outlasts_grace(&cfg, None).is_some());
        assert_eq!(drain_outlasts_grace(&cfg, Some(65)), None);
    }
}
