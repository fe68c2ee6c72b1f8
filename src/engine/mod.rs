//! The control-plane engine: the planner, the acting replica's loops (placement and failover,
//! join policy, operation execution) and the API the HTTP layer calls (plan, start, cancel,
//! uncordon). Only the replica holding the control-plane Lease acts; every replica watches,
//! serves reads and can record requests in the store. Never imports `http`.

mod control;
mod models;
mod operations;
pub mod placement;
pub mod planner;
mod proposals;
mod recorder;
mod removal;
#[cfg(test)]
mod simulation;
pub mod uncordon;
pub mod views;
pub mod warnings;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::Timestamp;
use kube::Client;
use tokio::sync::{Notify, watch};
use tokio::task::JoinSet;
use tracing::{Instrument as _, info, info_span};

use crate::config::{Cluster, Config};
use crate::k8s::election::{ElectionConfig, LeaderElector};
use crate::k8s::index::Index;
use crate::k8s::model::ClusterModel;
use crate::k8s::pacing;
use crate::k8s::probe::{Probed, Probes};
use crate::k8s::watch::{self as watchers, SharedIndex};
use crate::metrics::Metrics;
use crate::model::{OperationKind, OperationState};
use crate::protocol::Protocol;
use crate::store::{NewMove, NewOperation, Operation, Store, StoreError, now_ms};

use self::views::Freshness;
pub use self::views::View;

/// How long shutdown waits for the control-plane Lease to be released.
const RELEASE_GRACE: Duration = Duration::from_secs(5);
/// How long a stopping replica tries to delete each of its watch probes (any replica deletes
/// them later, once abandoned).
const PROBE_REMOVE_TIMEOUT: Duration = Duration::from_secs(2);
/// Watch probes per lease duration of the shortest-lived cluster in a namespace: a third, so
/// two may be lost before the model turns stale (one duration without a proof).
const PROBES_PER_DURATION: u32 = 3;

/// Every namespace whose Leases feed a native cluster, probed [`PROBES_PER_DURATION`] times per
/// the shortest lease duration of those clusters. (A gnmic cluster is only observed: nothing is
/// written in its namespace, nor judged on a proof.)
fn probed(config: &Config) -> Vec<Probed> {
    let mut every: BTreeMap<&str, Duration> = BTreeMap::new();
    for c in config
        .clusters
        .iter()
        .filter(|c| c.protocol == Protocol::Native)
    {
        let d = c.policy.lease_duration / PROBES_PER_DURATION;
        for ns in [c.namespace.as_str(), c.member_namespace()] {
            every
                .entry(ns)
                .and_modify(|e| *e = (*e).min(d))
                .or_insert(d);
        }
    }
    every
        .into_iter()
        .map(|(ns, every)| Probed {
            namespace: ns.to_owned(),
            every,
            write_timeout: every.max(Duration::from_secs(1)),
        })
        .collect()
}

/// Why the engine refused a request.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// No such cluster in the config.
    #[error("no cluster named {0:?}")]
    UnknownCluster(String),
    /// No such instance in the cluster.
    #[error("cluster {cluster:?} has no instance {instance:?}")]
    UnknownInstance {
        /// Cluster.
        cluster: String,
        /// Instance.
        instance: String,
    },
    /// No such operation.
    #[error("no operation {0:?}")]
    UnknownOperation(String),
    /// gnmic clusters are observed, never driven.
    #[error("cluster {0:?} uses the gnmic protocol and is read-only")]
    ReadOnly(String),
    /// The watches are not synced or are down: no decisions on stale data.
    #[error("cluster {0:?} is not synced or its watch is down; no decision on stale data")]
    Stale(String),
    /// Another operation is unfinished on the cluster.
    #[error("operation {0} is still unfinished on this cluster")]
    Busy(String),
    /// The operation is not in a state that allows this.
    #[error("operation {id} is {state}")]
    WrongState {
        /// Operation.
        id: String,
        /// Its state.
        state: OperationState,
    },
    /// The plan the caller previewed is not the plan a start would run now: the cluster
    /// changed meanwhile. Nothing was started; here is the fresh plan to preview.
    #[error(
        "the cluster changed since plan {expected} was previewed: the plan now is {} with {} moves; nothing was started — review it and start again",
        fresh.id, fresh.moves.len()
    )]
    PlanChanged {
        /// The id the caller previewed.
        expected: String,
        /// The plan a start would run now.
        fresh: Box<planner::Plan>,
    },
    /// A proposed operation no longer fits the cluster: targets changed hands or destinations
    /// cannot take them. It stays proposed; cancel it and plan again.
    #[error(
        "proposal {id} no longer fits the cluster: {stale} of {total} moves are out of date ({first}); cancel it and preview a new rebalance"
    )]
    Outdated {
        /// Operation.
        id: String,
        /// How many moves no longer fit.
        stale: usize,
        /// How many moves it has.
        total: usize,
        /// The first few reasons, `; `-separated.
        first: String,
    },
    /// Some targets cannot move (pinned to the instance being removed, …).
    #[error("the plan is blocked: {0}")]
    Blocked(String),
    /// The history store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// How a plan is asked for.
#[derive(Debug, Clone, Default)]
pub struct PlanRequest {
    /// At most this many moves.
    pub budget: Option<usize>,
    /// Starting: the id of the plan the caller previewed ([`planner::Plan::id`]). The fresh
    /// plan must have it, so exactly the previewed moves run; otherwise the start is refused
    /// ([`EngineError::PlanChanged`], with the fresh plan). `None`: run the fresh plan.
    pub expected: Option<String>,
}

/// What a removal does besides draining ([`Engine::removal_effects`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemovalEffects {
    /// The webhook: `Ok((method, url))`, or why its URL cannot be made now; `None` without one.
    pub webhook: Option<Result<(String, String), String>>,
    /// The pod is deleted at the end.
    pub delete_pod: bool,
}

/// Whether `plan` is the plan the caller previewed (`expected`, when given).
fn expect(expected: Option<&str>, plan: &planner::Plan) -> Result<(), EngineError> {
    match expected {
        Some(id) if id != plan.id => Err(EngineError::PlanChanged {
            expected: id.to_owned(),
            fresh: Box::new(plan.clone()),
        }),
        _ => Ok(()),
    }
}

/// Shared state of the engine's tasks.
pub(crate) struct Inner {
    pub config: Config,
    pub client: Client,
    pub shared: Arc<SharedIndex>,
    pub store: Store,
    pub identity: String,
    acting: watch::Sender<bool>,
    /// Targets inside running operations, per cluster: placement leaves them alone.
    busy: Mutex<HashMap<String, HashSet<String>>>,
    /// Wakes the operation runner (a new or approved operation).
    ops_wake: Notify,
    /// The latest model of each cluster, shared with readers.
    views: views::Views,
    /// Where the watchers, control loop and operation runner record.
    pub metrics: Metrics,
    /// This replica's watch probes (see `k8s::probe`).
    pub probes: Arc<Probes>,
    /// Publishes the control plane's Kubernetes Events (about its election Lease).
    events: kube::runtime::events::Recorder,
    /// Each cluster's mass lapse as the control loop lives it (acting replica only).
    lapses: Mutex<HashMap<String, placement::MassLapse>>,
    /// How many control-loop Lease writes may be in flight (one API server for all clusters).
    pacing: Mutex<pacing::Limiter>,
    /// Where models are built, decided on and freed.
    models: models::ModelThread,
}

impl Inner {
    /// Records (or clears) the mass lapse `cluster` is in (see [`Engine::mass_lapse`]).
    fn set_mass_lapse(&self, cluster: &str, lapse: Option<placement::MassLapse>) {
        let mut lapses = self.lapses.lock().unwrap_or_else(|e| e.into_inner());
        match lapse {
            Some(l) => lapses.insert(cluster.to_owned(), l),
            None => lapses.remove(cluster),
        };
    }

    pub fn cluster(&self, name: &str) -> Result<&Cluster, EngineError> {
        self.config
            .cluster(name)
            .ok_or_else(|| EngineError::UnknownCluster(name.to_owned()))
    }

    /// The cluster's target lease duration, in milliseconds.
    pub fn duration_ms(&self, cluster: &str) -> Result<i64, EngineError> {
        let ms = self.cluster(cluster)?.policy.lease_duration.as_millis();
        Ok(i64::try_from(ms).unwrap_or(i64::MAX))
    }

    pub fn model(&self, cluster: &str) -> Option<ClusterModel> {
        self.shared.read(|ix| ix.model(cluster, Timestamp::now()))
    }

    /// Builds a fresh model of `cluster` on the model thread (~30 ms of CPU at 50,000
    /// targets, holding the index's read lock) and leaves it for readers. Callers hold the
    /// cluster's builder lock.
    async fn fresh_view(self: &Arc<Self>, cluster: &str) -> Option<Arc<View>> {
        let (inner, cluster) = (self.clone(), cluster.to_owned());
        self.models
            .run(move || {
                let started = std::time::Instant::now();
                let snapshot = inner
                    .shared
                    .read(|ix| ix.snapshot(&cluster, Timestamp::now()))?;
                Some(inner.views.keep(snapshot, started, started.elapsed()))
            })
            .await
    }

    /// A fresh view of `cluster`, built on the model thread, one build per cluster at a time.
    /// With `reuse`, a view that became current while this waited its turn is taken instead
    /// (readers that arrive together share one build).
    pub async fn build_view(self: &Arc<Self>, cluster: &str, reuse: bool) -> Option<Arc<View>> {
        let lock = self.views.builder(cluster)?;
        let _building = lock.lock().await;
        if reuse
            && let Some((v, Freshness::Current)) = self.views.pick(cluster, self.shared.version())
        {
            return Some(v);
        }
        self.fresh_view(cluster).await
    }

    /// The view a reader gets (see `views`): the latest if current; the latest at once and a
    /// rebuild in the background if it is stale; else a fresh one.
    async fn read_view(self: &Arc<Self>, cluster: &str) -> Option<Arc<View>> {
        match self.views.pick(cluster, self.shared.version()) {
            Some((v, Freshness::Current)) => Some(v),
            Some((v, Freshness::Stale)) => {
                self.refresh_view(cluster);
                Some(v)
            }
            Some((_, Freshness::Outdated)) | None => self.build_view(cluster, true).await,
        }
    }

    /// Starts a rebuild of `cluster`'s view in the background, unless one is under way.
    fn refresh_view(self: &Arc<Self>, cluster: &str) {
        let Some(Ok(building)) = self.views.builder(cluster).map(|l| l.try_lock_owned()) else {
            return;
        };
        let (inner, name) = (self.clone(), cluster.to_owned());
        tokio::spawn(async move {
            let _building = building;
            inner.fresh_view(&name).await;
        });
    }

    pub fn busy(&self, cluster: &str) -> HashSet<String> {
        self.busy
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(cluster)
            .cloned()
            .unwrap_or_default()
    }

    pub fn set_busy(&self, cluster: &str, targets: impl IntoIterator<Item = String>, on: bool) {
        let mut busy = self.busy.lock().unwrap_or_else(|e| e.into_inner());
        let set = busy.entry(cluster.to_owned()).or_default();
        for t in targets {
            if on {
                set.insert(t);
            } else {
                set.remove(&t);
            }
        }
    }

    pub fn acting(&self) -> bool {
        *self.acting.borrow()
    }

    /// Loads the cordon list of every cluster from the store into the index. The store is the
    /// truth shared by replicas: a removal or uncordon answered by another replica reaches the
    /// acting one here (its control loop calls this every pass, at most once a second). The
    /// index changes, and its version moves, only when a list did.
    async fn load_cordons(&self) -> Result<(), StoreError> {
        for c in &self.config.clusters {
            let set: BTreeSet<String> = self.store.cordons(&c.name).await?.into_iter().collect();
            if self.shared.read(|ix| ix.cordons(&c.name) != Some(&set)) {
                self.shared
                    .write(|ix| (ix.set_cordons(&c.name, set), Vec::new()));
            }
        }
        Ok(())
    }
}

/// The engine: cheap to clone; every clone talks to the same tasks.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

impl Engine {
    /// An engine for `config`, acting as `identity` in the control-plane election, with a
    /// fresh metrics registry (see [`Engine::metrics`]).
    pub fn new(config: Config, client: Client, store: Store, identity: String) -> Engine {
        let mut index = Index::new(&config.clusters);
        // Nothing expires until a watch probe proves the watch current.
        index.require_proofs();
        let shared = SharedIndex::new(index);
        let views = views::Views::new(config.clusters.iter().map(|c| c.name.as_str()));
        let probes = Probes::new(&config.control_plane.lease_name, &identity);
        let metrics = Metrics::new();
        metrics.set_write_concurrency(pacing::INITIAL_LIMIT);
        let events = kube::runtime::events::Recorder::new(
            client.clone(),
            kube::runtime::events::Reporter {
                controller: "leasehold-control-plane".to_owned(),
                instance: Some(identity.clone()),
            },
        );
        Engine {
            inner: Arc::new(Inner {
                config,
                client,
                shared,
                store,
                identity,
                acting: watch::channel(false).0,
                busy: Mutex::default(),
                ops_wake: Notify::new(),
                views,
                metrics,
                probes,
                events,
                lapses: Mutex::default(),
                pacing: Mutex::default(),
                models: models::ModelThread::start(),
            }),
        }
    }

    /// The index and its change feed.
    pub fn shared(&self) -> &Arc<SharedIndex> {
        &self.inner.shared
    }

    /// The metrics this engine records (served at `GET /metrics`).
    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// The history store.
    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// This replica's identity.
    pub fn identity(&self) -> &str {
        &self.inner.identity
    }

    /// Whether this replica is the acting control plane, as a watch.
    pub fn acting(&self) -> watch::Receiver<bool> {
        self.inner.acting.subscribe()
    }

    /// A configured cluster.
    pub fn cluster(&self, name: &str) -> Result<&Cluster, EngineError> {
        self.inner.cluster(name)
    }

    /// The Kubernetes client.
    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    /// The latest model of a cluster for readers, as fresh as the [`views`] module rules:
    /// current, or — for a cluster whose model is slow to build — a little stale while one
    /// rebuild runs in the background (a change shows about a second late at worst).
    pub async fn view(&self, cluster: &str) -> Result<Arc<View>, EngineError> {
        self.inner.cluster(cluster)?;
        self.inner
            .read_view(cluster)
            .await
            .ok_or_else(|| EngineError::UnknownCluster(cluster.to_owned()))
    }

    /// The imbalance of a view's placement (the planner's measure: largest load over fair
    /// share, minus 1, over the members taking targets), computed once per view.
    pub fn imbalance(&self, view: &View) -> f64 {
        view.imbalance(|model| {
            let Ok(d) = self.inner.duration_ms(&model.name) else {
                return 0.0;
            };
            let busy = self.inner.busy(&model.name);
            planner::place(
                &placement::members(model, d),
                &placement::targets(model, &busy, d),
            )
            .imbalance_before
        })
    }

    /// The mass lapse a cluster is in, if any: as the control loop lives it on the acting
    /// replica (which knows whom it failed over during it); elsewhere, and on the acting replica
    /// while its model is stale with no lapse begun, as `view` shows it
    /// ([`placement::mass_lapse`] with the cluster's `policy.mass_lapse_share`). A stale model
    /// is not acted on, so the loop says nothing new then; but an API server slow enough to hold
    /// back the members' renewals also holds back the watch probes' writes, and the model may
    /// turn stale before the loop saw the renewals late (`tests/it/pressure.rs`).
    pub fn mass_lapse(&self, view: &View) -> Option<placement::MassLapse> {
        let name = &view.model.name;
        if *self.inner.acting.borrow() {
            let lived = self
                .inner
                .lapses
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(name)
                .cloned();
            if lived.is_some() || !view.model.stale {
                return lived;
            }
        }
        let spec = self.inner.config.cluster(name)?;
        placement::mass_lapse(
            &view.model,
            spec.policy.mass_lapse_share,
            &Default::default(),
        )
    }

    /// A cluster's model now, built on the calling thread (~30 ms of CPU at 50,000 targets):
    /// for tests and tools. The server reads [views](Engine::view), built on the model thread.
    pub fn model(&self, cluster: &str) -> Result<ClusterModel, EngineError> {
        self.inner.cluster(cluster)?;
        self.inner
            .model(cluster)
            .ok_or_else(|| EngineError::UnknownCluster(cluster.to_owned()))
    }

    /// What removing `instance` of `model` (cluster `cluster`) would do besides draining it, as
    /// the removal would do it now: the webhook it calls (method and URL, or why the URL cannot
    /// be made now) and whether the pod is deleted.
    pub fn removal_effects(
        &self,
        cluster: &str,
        model: &ClusterModel,
        instance: &str,
    ) -> Result<RemovalEffects, EngineError> {
        let spec = self.inner.cluster(cluster)?;
        let removal = &spec.policy.removal;
        Ok(RemovalEffects {
            webhook: removal.webhook.as_ref().map(|w| {
                removal::render_url(&w.url, spec, model, instance, None)
                    .map(|url| (w.method.clone(), url))
            }),
            delete_pod: removal.delete_pod,
        })
    }

    /// Runs the watchers, the control-plane election, the history recorder and — while this
    /// replica is acting — the control loop and the operation runner, until `shutdown`
    /// completes (the election Lease is then released) or a task fails.
    pub async fn run(
        &self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let inner = &self.inner;
        let cp = &inner.config.control_plane;
        let mut tasks: JoinSet<anyhow::Result<()>> = JoinSet::new();
        tasks.spawn(
            watchers::run(
                inner.client.clone(),
                inner.shared.clone(),
                watchers::WatchMetrics::new(&inner.metrics),
                Some(inner.probes.clone()),
            )
            .instrument(info_span!("watchers")),
        );
        let probed = probed(&inner.config);
        let probes = inner
            .probes
            .clone()
            .run(inner.client.clone(), probed.clone());
        let probing = tasks.spawn(async move {
            probes.await;
            Ok(())
        });
        let elector = LeaderElector::new(ElectionConfig {
            lease_duration: cp.lease_duration,
            renew_deadline: cp.lease_duration * 2 / 3,
            retry_period: (cp.lease_duration / 7).max(Duration::from_millis(200)),
            ..ElectionConfig::new(&cp.namespace, &cp.lease_name, &inner.identity)
        });
        let (stop_tx, stop_rx) = watch::channel(false);
        let acting_tx = inner.acting.clone();
        let client = inner.client.clone();
        let mut stop = stop_rx.clone();
        tasks.spawn(
            async move {
                elector
                    .run(client, acting_tx, async move {
                        let _ = stop.wait_for(|s| *s).await;
                    })
                    .await;
                Ok(())
            }
            .instrument(info_span!("control_plane_election")),
        );
        tasks.spawn(recorder::run(inner.clone()).instrument(info_span!("recorder")));
        tasks.spawn(supervise(inner.clone()).instrument(info_span!("acting")));
        tasks.spawn(recorder::prune(inner.clone()).instrument(info_span!("retention")));

        tokio::pin!(shutdown);
        let result = tokio::select! {
            _ = &mut shutdown => Ok(()),
            Some(done) = tasks.join_next() => match done {
                Ok(Ok(())) => Err(anyhow::anyhow!("an engine task ended")),
                Ok(Err(e)) => Err(e),
                Err(e) => Err(e.into()),
            },
        };
        // The elector releases the control-plane Lease and reports it no longer acts; give it
        // a bounded moment, then stop everything.
        let mut acting = inner.acting.subscribe();
        let _ = stop_tx.send(true);
        // No probe may be written after its Lease is deleted.
        probing.abort();
        let released = async {
            // (The guard it returns is not `Send`: dropped here.)
            let _ = tokio::time::timeout(RELEASE_GRACE, acting.wait_for(|a| !*a)).await;
        };
        let probes_removed = inner
            .probes
            .remove(&inner.client, &probed, PROBE_REMOVE_TIMEOUT);
        let _ = tokio::join!(released, probes_removed);
        tasks.abort_all();
        // Owned tasks end before the engine says it has: nothing of it logs or writes after.
        while tasks.join_next().await.is_some() {}
        result
    }

    /// The plan a rebalance would run now (a dry run). The model is built fresh and the plan
    /// computed on the model thread (at 50,000 targets ~30 ms and 10–50 ms of CPU), never on
    /// an async worker.
    pub async fn plan_rebalance(
        &self,
        cluster: &str,
        req: &PlanRequest,
    ) -> Result<planner::Plan, EngineError> {
        let view = self.ready_view(cluster).await?;
        let busy = self.inner.busy(cluster);
        let d = self.inner.duration_ms(cluster)?;
        let budget = req.budget;
        let mut plan = self
            .inner
            .models
            .run(move || {
                planner::rebalance(
                    &placement::members(&view.model, d),
                    &placement::targets(&view.model, &busy, d),
                    budget,
                )
            })
            .await;
        let churn = self.churn(cluster, &plan).await?;
        warnings::attach(&mut plan, Vec::new(), churn);
        Ok(plan)
    }

    /// The warning naming the targets of `plan` that moved often lately (from the history).
    async fn churn(
        &self,
        cluster: &str,
        plan: &planner::Plan,
    ) -> Result<Option<planner::Warning>, EngineError> {
        if plan.moves.is_empty() {
            return Ok(None);
        }
        let since = now_ms() - warnings::CHURN_WINDOW.as_millis() as i64;
        // Every frequent mover of the cluster (few, or the warning is the least of its
        // troubles), so that those in the plan are found whichever they are.
        let movers = self
            .inner
            .store
            .frequent_movers(cluster, since, warnings::CHURN_LIMIT, 1_000)
            .await?;
        Ok(warnings::churn(plan, &movers))
    }

    /// The plan removing `instance` would run now: cordon it (the plan already excludes it)
    /// and spread its targets over the others. Built like [`Engine::plan_rebalance`], with what
    /// removing it means for the cluster first among its warnings. Targets that cannot move
    /// (pinned to it) are in [`planner::Plan::blocked`]: [`Engine::start_remove`] refuses such
    /// a plan.
    pub async fn plan_remove(
        &self,
        cluster: &str,
        instance: &str,
    ) -> Result<planner::Plan, EngineError> {
        let view = self.ready_view(cluster).await?;
        if view.model.instance(instance).is_none() {
            return Err(EngineError::UnknownInstance {
                cluster: cluster.to_owned(),
                instance: instance.to_owned(),
            });
        }
        let busy = self.inner.busy(cluster);
        let d = self.inner.duration_ms(cluster)?;
        let name = instance.to_owned();
        let model = view.clone();
        let mut plan = self
            .inner
            .models
            .run(move || {
                planner::drain(
                    &placement::members(&view.model, d),
                    &placement::targets(&view.model, &busy, d),
                    &name,
                    None,
                )
            })
            .await;
        let churn = self.churn(cluster, &plan).await?;
        warnings::attach(&mut plan, warnings::removal(&model.model, instance), churn);
        Ok(plan)
    }

    /// [`Engine::plan_remove`], refused when targets cannot leave the instance.
    async fn plan_remove_to_start(
        &self,
        cluster: &str,
        instance: &str,
    ) -> Result<planner::Plan, EngineError> {
        let plan = self.plan_remove(cluster, instance).await?;
        if !plan.blocked.is_empty() {
            let list: Vec<String> = plan
                .blocked
                .iter()
                .map(|b| format!("{}: {}", b.target, b.reason))
                .collect();
            return Err(EngineError::Blocked(list.join("; ")));
        }
        Ok(plan)
    }

    /// Starts a rebalance (or stores it as proposed): the plan's moves become an operation.
    pub async fn start_rebalance(
        &self,
        cluster: &str,
        req: &PlanRequest,
        requested_by: &str,
        reason: &str,
        proposed: bool,
    ) -> Result<Operation, EngineError> {
        self.idle(cluster).await?;
        let plan = self.plan_rebalance(cluster, req).await?;
        expect(req.expected.as_deref(), &plan)?;
        self.create(
            cluster,
            OperationKind::Rebalance,
            None,
            &plan,
            requested_by,
            reason,
            proposed,
        )
        .await
    }

    /// Starts removing `instance`: cordons it at once (so nothing new lands on it), then the
    /// operation drains it and runs the removal steps.
    /// `expected`: as [`PlanRequest::expected`], checked before the cordon, and again on the
    /// plan made after it (a change in between undoes the cordon, unless it was there before).
    pub async fn start_remove(
        &self,
        cluster: &str,
        instance: &str,
        requested_by: &str,
        expected: Option<&str>,
    ) -> Result<Operation, EngineError> {
        self.idle(cluster).await?;
        expect(
            expected,
            &self.plan_remove_to_start(cluster, instance).await?,
        )?;
        let newly_cordoned = self
            .inner
            .store
            .set_cordon(cluster, instance, true, requested_by, now_ms())
            .await?;
        self.inner.load_cordons().await?;
        let plan = match self
            .plan_remove_to_start(cluster, instance)
            .await
            .and_then(|plan| expect(expected, &plan).map(|()| plan))
        {
            Ok(plan) => plan,
            Err(e) => {
                if newly_cordoned {
                    self.inner
                        .store
                        .set_cordon(cluster, instance, false, requested_by, now_ms())
                        .await?;
                    self.inner.load_cordons().await?;
                }
                return Err(e);
            }
        };
        let op = self
            .create(
                cluster,
                OperationKind::RemoveInstance,
                Some(instance),
                &plan,
                requested_by,
                &format!("remove instance {instance}"),
                false,
            )
            .await?;
        self.inner
            .store
            .set_operation_phase(&op.id, removal::PHASE_CORDONED, now_ms())
            .await?;
        Ok(op)
    }

    /// Runs a proposed operation, if its moves still fit the cluster (see
    /// [`proposals::drift`]) and no other operation is unfinished on it; the operation, now
    /// pending.
    pub async fn approve(&self, id: &str, by: &str) -> Result<Operation, EngineError> {
        let op = self.operation(id).await?;
        let wrong_state = |state| EngineError::WrongState {
            id: id.to_owned(),
            state,
        };
        if op.state != OperationState::Proposed {
            return Err(wrong_state(op.state));
        }
        self.idle(&op.cluster).await?;
        let view = self.ready_view(&op.cluster).await?;
        let duration_ms = self.inner.duration_ms(&op.cluster)?;
        let moves = op.moves.clone();
        let stale = self
            .inner
            .models
            .run(move || proposals::drift(&view.model, &moves, duration_ms))
            .await;
        if !stale.is_empty() {
            return Err(EngineError::Outdated {
                id: id.to_owned(),
                stale: stale.len(),
                total: op.moves.len(),
                first: stale.iter().take(3).cloned().collect::<Vec<_>>().join("; "),
            });
        }
        let moved = self
            .inner
            .store
            .set_operation_state(
                id,
                &[OperationState::Proposed],
                OperationState::Pending,
                None,
                now_ms(),
            )
            .await?;
        if !moved {
            // Cancelled (or approved) by someone else meanwhile.
            return Err(wrong_state(self.operation(id).await?.state));
        }
        info!(operation = id, by, "proposed operation approved");
        self.inner.ops_wake.notify_one();
        self.operation(id).await
    }

    /// Cancels an operation: no new move starts; moves in flight finish.
    pub async fn cancel(&self, id: &str, by: &str) -> Result<(), EngineError> {
        let op = self.operation(id).await?;
        if !self.inner.store.cancel_operation(id, by, now_ms()).await? {
            return Err(EngineError::WrongState {
                id: id.to_owned(),
                state: op.state,
            });
        }
        info!(operation = id, by, "operation cancelled");
        Ok(())
    }

    /// Pauses (`pause: Some(reason)`) or resumes `cluster`'s automatic rebalancing (its
    /// `on_join` policy; failovers and placement of new targets go on). Returns whether it
    /// changed, and the pause now in effect.
    pub async fn set_automation(
        &self,
        cluster: &str,
        pause: Option<&str>,
        by: &str,
    ) -> Result<(bool, Option<crate::store::Pause>), EngineError> {
        self.inner.cluster(cluster)?;
        let store = &self.inner.store;
        let changed = store
            .set_automation_pause(cluster, pause.map(|r| (by, r)), now_ms())
            .await?;
        Ok((changed, store.automation_pause(cluster).await?))
    }

    /// `cluster`'s automation pause, if it is paused.
    pub async fn automation(
        &self,
        cluster: &str,
    ) -> Result<Option<crate::store::Pause>, EngineError> {
        self.inner.cluster(cluster)?;
        Ok(self.inner.store.automation_pause(cluster).await?)
    }

    /// What uncordoning `instance` would do now: the rebalance the cluster would get with it
    /// uncordoned, and whether the join policy would propose or start it.
    pub async fn plan_uncordon(
        &self,
        cluster: &str,
        instance: &str,
    ) -> Result<uncordon::UncordonPreview, EngineError> {
        let spec = self.inner.cluster(cluster)?;
        let view = self.ready_view(cluster).await?;
        let Some(i) = view.model.instance(instance) else {
            return Err(EngineError::UnknownInstance {
                cluster: cluster.to_owned(),
                instance: instance.to_owned(),
            });
        };
        let (cordoned, ready) = (i.cordoned, i.ready);
        let busy = self.inner.busy(cluster);
        let d = self.inner.duration_ms(cluster)?;
        let name = instance.to_owned();
        let mut plan = self
            .inner
            .models
            .run(move || {
                let mut model = view.model.clone();
                if let Some(i) = model.instances.iter_mut().find(|i| i.name == name) {
                    i.cordoned = false;
                }
                planner::rebalance(
                    &placement::members(&model, d),
                    &placement::targets(&model, &busy, d),
                    None,
                )
            })
            .await;
        let churn = self.churn(cluster, &plan).await?;
        warnings::attach(&mut plan, Vec::new(), churn);
        let pause = self.inner.store.automation_pause(cluster).await?;
        Ok(uncordon::preview(
            spec,
            instance,
            cordoned,
            ready,
            pause.as_ref(),
            plan,
        ))
    }

    /// Lets a cordoned instance receive targets again.
    pub async fn uncordon(
        &self,
        cluster: &str,
        instance: &str,
        by: &str,
    ) -> Result<bool, EngineError> {
        self.inner.cluster(cluster)?;
        let changed = self
            .inner
            .store
            .set_cordon(cluster, instance, false, by, now_ms())
            .await?;
        // Not cordoned (the store is the truth, so a cordon made on another replica a moment
        // ago counts) and not a member or ghost either: there is no such instance, as for a
        // removal.
        if !changed && self.model(cluster)?.instance(instance).is_none() {
            return Err(EngineError::UnknownInstance {
                cluster: cluster.to_owned(),
                instance: instance.to_owned(),
            });
        }
        self.inner.load_cordons().await?;
        Ok(changed)
    }

    /// An operation with its moves.
    pub async fn operation(&self, id: &str) -> Result<Operation, EngineError> {
        self.inner
            .store
            .operation(id)
            .await?
            .ok_or_else(|| EngineError::UnknownOperation(id.to_owned()))
    }

    /// A fresh view of a cluster the engine may act on (not gnmic; synced, watch up), built
    /// on the model thread.
    async fn ready_view(&self, cluster: &str) -> Result<Arc<View>, EngineError> {
        let spec = self.inner.cluster(cluster)?;
        if spec.protocol == Protocol::Gnmic {
            return Err(EngineError::ReadOnly(cluster.to_owned()));
        }
        let view = self
            .inner
            .build_view(cluster, false)
            .await
            .ok_or_else(|| EngineError::UnknownCluster(cluster.to_owned()))?;
        if !view.model.synced || view.model.stale {
            return Err(EngineError::Stale(cluster.to_owned()));
        }
        Ok(view)
    }

    /// One unfinished (not merely proposed) operation per cluster at a time.
    async fn idle(&self, cluster: &str) -> Result<(), EngineError> {
        self.inner.cluster(cluster)?;
        let unfinished = self.inner.store.unfinished_operations().await?;
        match unfinished
            .iter()
            .find(|o| o.cluster == cluster && o.state != OperationState::Proposed)
        {
            Some(o) => Err(EngineError::Busy(o.id.clone())),
            None => Ok(()),
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn create(
        &self,
        cluster: &str,
        kind: OperationKind,
        instance: Option<&str>,
        plan: &planner::Plan,
        requested_by: &str,
        reason: &str,
        proposed: bool,
    ) -> Result<Operation, EngineError> {
        let op = self
            .inner
            .store
            .create_operation(&NewOperation {
                cluster: cluster.to_owned(),
                kind,
                state: if proposed {
                    OperationState::Proposed
                } else {
                    OperationState::Pending
                },
                requested_by: requested_by.to_owned(),
                reason: reason.to_owned(),
                instance: instance.map(str::to_owned),
                params: serde_json::json!({
                    "imbalance_before": plan.imbalance_before,
                    "imbalance_after": plan.imbalance_after,
                    "truncated": plan.truncated,
                    // Targets per member before and after, as the plan saw them.
                    "load": plan
                        .loads()
                        .into_iter()
                        .map(|(member, before, after)| {
                            serde_json::json!({ "member": member, "before": before, "after": after })
                        })
                        .collect::<Vec<_>>(),
                }),
                moves: plan
                    .moves
                    .iter()
                    .map(|m| NewMove {
                        target: m.target.clone(),
                        from: m.from.clone(),
                        to: m.to.clone(),
                    })
                    .collect(),
                now_ms: now_ms(),
            })
            .await?;
        info!(cluster, operation = %op.id, %kind, moves = op.moves.len(), requested_by, "operation created");
        self.inner.ops_wake.notify_one();
        Ok(op)
    }
}

/// Runs the acting replica's loops whenever this replica holds the control-plane Lease, and
/// stops them the moment it does not.
async fn supervise(inner: Arc<Inner>) -> anyhow::Result<()> {
    let mut acting = inner.acting.subscribe();
    loop {
        acting.wait_for(|a| *a).await?;
        info!(identity = %inner.identity, "acting as the control plane");
        inner.load_cordons().await?;
        let mut work: JoinSet<anyhow::Result<()>> = JoinSet::new();
        work.spawn(control::run(inner.clone()).instrument(info_span!("control_loop")));
        work.spawn(operations::runner(inner.clone()).instrument(info_span!("operations")));
        tokio::select! {
            r = acting.wait_for(|a| !*a) => { r?; }
            Some(done) = work.join_next() => {
                work.abort_all();
                return match done {
                    Ok(Ok(())) => Err(anyhow::anyhow!("an acting loop ended")),
                    Ok(Err(e)) => Err(e),
                    Err(e) => Err(e.into()),
                };
            }
        }
        info!(identity = %inner.identity, "no longer acting");
        work.abort_all();
        inner.busy.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
}
