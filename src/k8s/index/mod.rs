//! The index: a pure, synchronous model of every managed cluster, fed by watch events
//! (`apply` / `delete` / `reset` per kind, like linkerd's indexes) with `now` passed in. It
//! keeps only what the model needs (compact pod, Service, EndpointSlice and Lease records, the
//! configured target list), reports what changed ([`Change`]: ownership, instance lifecycle,
//! target list) and builds a [`ClusterModel`](super::model::ClusterModel) on demand. No I/O, no
//! clock, no async: testable in microseconds. The watchers that feed it live in `k8s::watch`.

mod entry;
mod kinds;
mod snapshot;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;

use self::entry::{Interner, LeaseEntry, MemberEntry};
use crate::config::{Cluster, TargetEntry, TargetSpec};
use crate::model::{Cause, InstanceEventKind};
use crate::protocol::Overrun;
use crate::targets::endpoints;

pub use kinds::{Indexed, MemberNamespaceLease};

/// The kinds of object the index is fed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// Member pods.
    Pod,
    /// Headless and LoadBalancer Services.
    Service,
    /// EndpointSlices: of the headless Service (members' readiness), and of the Services
    /// whose endpoints are targets (`endpoints` entries of the target list).
    EndpointSlice,
    /// Leader and target Leases.
    Lease,
    /// The ConfigMaps holding target lists.
    ConfigMap,
    /// Member Leases kept in a namespace of their own
    /// ([`Cluster::member_lease_namespace`](crate::config::Cluster)); otherwise they come with
    /// [`Kind::Lease`].
    MemberLease,
}

impl Kind {
    /// Every kind watched in a cluster's own namespace, each once per namespace.
    pub const ALL: [Kind; 5] = [
        Kind::Pod,
        Kind::Service,
        Kind::EndpointSlice,
        Kind::Lease,
        Kind::ConfigMap,
    ];
}

/// Something that happened, as the index saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A target's holder changed (a release is not a change; the next acquire is, with the
    /// previous holder as `from`).
    Ownership {
        /// Cluster.
        cluster: String,
        /// Target key.
        target: String,
        /// Previous holder.
        from: Option<String>,
        /// New holder (`None` when a held Lease was deleted).
        to: Option<String>,
        /// Why, from the Lease's annotations: the control plane's cause when the new holder is
        /// the desired owner, `external` when it is not, `initial` for a first owner.
        cause: Cause,
        /// The operation that asked for it.
        operation: Option<String>,
        /// When it was seen (ms).
        at_ms: i64,
        /// The Lease's `acquireTime` (ms), identifying this acquisition.
        acquired_at_ms: Option<i64>,
        /// For a handoff to a different member: how long (ms) the target had nobody working
        /// on it as the index observed it — from the previous holder's release being seen, or
        /// for a failover from its last renewal seen, to this acquire being seen (see
        /// `LeaseEntry::handoff_gap_ms`). `None` for a first owner, the same member again, or
        /// a deletion.
        gap_ms: Option<i64>,
        /// An overlap hand-off: how it went, and its overlap (ms) when proven
        /// ([`crate::protocol::overlap_of`]).
        overlap: Option<(crate::model::Overlap, Option<i64>)>,
        /// Found in a watch's first list, not seen happening (`from` is then unknown and
        /// `None`): the holder's acquisition, for history to record if no replica did when it
        /// happened (recording it again is a no-op). Not counted or broadcast.
        replayed: bool,
    },
    /// An instance joined, left, became (not) ready, gained or lost leadership.
    Instance {
        /// Cluster.
        cluster: String,
        /// Pod name.
        instance: String,
        /// What happened.
        kind: InstanceEventKind,
        /// When it was seen (ms).
        at_ms: i64,
    },
    /// A member reported an [`Overrun`] on its member Lease: it was paused past
    /// the end of its hold, and another member may have worked on its targets meanwhile.
    Overrun {
        /// Cluster.
        cluster: String,
        /// The member.
        instance: String,
        /// Its report.
        overrun: Overrun,
        /// Found in a watch's first list, not seen happening: it may have been recorded before
        /// (recording it again is a no-op), and it is not counted or broadcast again.
        replayed: bool,
    },
    /// A hand-off's work-level gap became known: the old holder's app last worked on the
    /// target at its `leasehold.io/stopped-at`, the new holder's app first at what it reported
    /// in `app-work`'s `started` (each by its own pod's clock).
    WorkGap {
        /// Cluster.
        cluster: String,
        /// Target key.
        target: String,
        /// The new holder.
        to: String,
        /// From the one to the other (ms; negative when the two worked on it at once).
        gap_ms: i64,
    },
    /// A member Lease changed what the model shows of its member (taken, leaving,
    /// released, fenced, deleted; not a mere renewal). Not recorded; it tells live views to
    /// look again.
    Members {
        /// Cluster.
        cluster: String,
    },
    /// The configured target list changed (ConfigMap reload, or the ready endpoints of a
    /// Service an `endpoints` entry names).
    Targets {
        /// Cluster.
        cluster: String,
    },
}

/// One target right now (see [`Index::target`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetNow {
    /// Its Lease.
    pub lease: String,
    /// Who holds it.
    pub holder: Option<String>,
    /// The holder stopped renewing (by our observation): in gnmic's layout this Lease, in Leasehold's its member
    /// Lease (not live).
    pub expired: bool,
    /// Who should hold it.
    pub desired: Option<String>,
    /// The holder's `acquireTime` (ms): identifies this acquisition in history.
    pub acquired_at_ms: Option<i64>,
}

/// A cluster's model and what it was built from (see [`Index::snapshot`]).
#[derive(Debug)]
pub struct Snapshot {
    /// The model.
    pub model: crate::k8s::model::ClusterModel,
    /// The index [revision](Index::revision) it was built at.
    pub revision: u64,
    /// How long after `now` the first hold it shows as live expires (`None`: none is held).
    /// While the revision stays the same, the model is exact but for its ages until then.
    pub exact_for: Option<Duration>,
    /// Some hold has been unchanged for a full duration by the clock, but no watch probe has
    /// yet proven it expired ([`Index::require_proofs`]): a probe is wanted now.
    pub awaiting_proof: bool,
}

/// What the index keeps of a pod.
#[derive(Debug, Clone, PartialEq)]
struct PodInfo {
    role: Option<String>,
    phase: Option<String>,
    ready: bool,
    terminating: bool,
    ip: Option<String>,
    node: Option<String>,
    ordinal: Option<u32>,
    /// `spec.hostname` + `spec.subdomain`, when set.
    host: Option<(String, String)>,
    restarts: i32,
    created: Option<Timestamp>,
    capacity: u32,
}

/// Departed pods remembered (for ghosts and removal webhooks): the most recent ones.
const DEPARTED_KEEP: usize = 1024;

/// The index's state for one cluster. Opaque outside the index.
#[derive(Debug)]
pub struct ClusterState {
    spec: Cluster,
    pods: BTreeMap<String, PodInfo>,
    departed: BTreeMap<String, (i64, PodInfo)>,
    services: BTreeMap<String, crate::k8s::model::ServiceInfo>,
    slices: BTreeMap<String, Vec<(String, bool)>>,
    /// Target Leases by target key.
    targets: HashMap<Arc<str>, LeaseEntry>,
    /// Target keys by Lease name (names may be hashed, so not derivable from the key).
    lease_keys: HashMap<Arc<str>, Arc<str>>,
    leader: Option<LeaseEntry>,
    /// Member Leases (native clusters) by identity.
    members: HashMap<Arc<str>, MemberEntry>,
    /// Member identities by Lease name (names may be hashed).
    member_leases: HashMap<Arc<str>, Arc<str>>,
    /// The last overrun (its `at_ms`) each member reported on its member Lease, kept when the
    /// Lease goes, so a Lease written again with the same report is not a new one.
    overruns: HashMap<Arc<str>, i64>,
    /// gnmic's layout: target Leases gnmic deleted (its release), by key, until another
    /// holder's Lease shows up — so that gnmic's move (a release, then an acquire by another
    /// member moments later) is one change with its gap — or [`kinds::GNMIC_MOVE_WINDOW_MS`]
    /// passes and the release is recorded alone.
    gnmic_released: HashMap<Arc<str>, kinds::Released>,
    /// Targets seen handed over with when the old holder's app last worked on them
    /// (`leasehold.io/stopped-at`), by key: the new holder and that time (Unix ms), until the
    /// new holder reports its app's first work on it (`AppWork::started`) and the hand-off's
    /// work-level gap is told ([`Change::WorkGap`]), or the target changes hands again.
    handed_work: HashMap<Arc<str>, (Arc<str>, i64)>,
    /// Hand-over plans ([`crate::protocol::plan`]) by Lease name.
    plans: HashMap<Arc<str>, crate::k8s::model::PlanSeen>,
    interner: Interner,
    config_map_targets: Vec<TargetEntry>,
    /// The EndpointSlices of every Service in the namespace, compact, kept only where a target
    /// list may have `endpoints` entries ([`ClusterState::wants_endpoints`]), so that an entry
    /// added to the ConfigMap finds its Service's slices at once.
    endpoint_slices: BTreeMap<String, endpoints::Slice>,
    /// The Services `endpoints` entries name now.
    endpoint_services: BTreeSet<String>,
    /// The targets: those listed, and those of the `endpoints` entries' ready endpoints.
    configured: BTreeMap<Arc<str>, TargetSpec>,
    /// The ConfigMap's list is unreadable (its last good one is kept).
    targets_error: Option<String>,
    /// An `endpoints` entry cannot be expanded (the last good targets are kept).
    endpoints_error: Option<String>,
    cordoned: BTreeSet<String>,
    synced: BTreeSet<Kind>,
    stale: BTreeSet<Kind>,
    /// `None`: expiries are judged by the clock alone. `Some`: only up to the latest proof
    /// that the Lease watches feeding this cluster are current ([`Index::require_proofs`]).
    proofs: Option<Proofs>,
}

/// The latest proofs that a Lease watch is current: the send time (ms, the index's clock) of
/// the newest watch probe seen coming back on it. Events of one watch arrive in
/// `resourceVersion` order, so every Lease change committed before that probe's write has been
/// applied by then.
#[derive(Debug, Default, Clone, Copy)]
struct Proofs {
    /// On the watch of [`Kind::Lease`] in the cluster's namespace.
    leases: Option<i64>,
    /// On the watch of [`Kind::MemberLease`] (member Leases kept apart only).
    member_leases: Option<i64>,
}

impl Proofs {
    /// The proof of the watch of `kind` (a Lease kind).
    fn of(&mut self, kind: Kind) -> &mut Option<i64> {
        match kind {
            Kind::MemberLease => &mut self.member_leases,
            _ => &mut self.leases,
        }
    }
}

/// Before any proof, expiries are judged at the epoch: nothing has expired yet.
const UNPROVEN: i64 = 0;

/// Collects the changes of one call; silent until the kind has synced once (the first list is
/// the starting state, not a change).
#[doc(hidden)]
pub struct Emit<'a> {
    cluster: &'a str,
    out: &'a mut Vec<Change>,
    quiet: bool,
    now_ms: i64,
    /// The call changed the model beyond ages (cleared by a Lease renewal; see
    /// [`Index::revision`]).
    changed: bool,
}

impl Emit<'_> {
    fn push(&mut self, c: Change) {
        if !self.quiet {
            self.out.push(c);
        }
    }

    /// An ownership change. In a first list (quiet) it is pushed as replayed only when the
    /// acquisition is identified (`acquired_at_ms`), so that recording it is idempotent.
    fn ownership(&mut self, mut c: Change) {
        if let Change::Ownership {
            replayed,
            acquired_at_ms,
            from,
            gap_ms,
            ..
        } = &mut c
            && self.quiet
        {
            if acquired_at_ms.is_none() {
                return;
            }
            *replayed = true;
            *from = None;
            *gap_ms = None;
        }
        self.out.push(c);
    }

    /// A member Lease changed what the model shows (see [`Change::Members`]).
    fn members(&mut self) {
        self.push(Change::Members {
            cluster: self.cluster.to_owned(),
        });
    }

    fn instance(&mut self, instance: &str, kind: InstanceEventKind) {
        self.push(Change::Instance {
            cluster: self.cluster.to_owned(),
            instance: instance.to_owned(),
            kind,
            at_ms: self.now_ms,
        });
    }

    /// A member's overrun report: pushed even before the first sync (as replayed), since
    /// reports made while no control plane watched are still to be recorded.
    fn work_gap(&mut self, target: &str, to: &str, gap_ms: i64) {
        self.push(Change::WorkGap {
            cluster: self.cluster.to_owned(),
            target: target.to_owned(),
            to: to.to_owned(),
            gap_ms,
        });
    }

    fn overrun(&mut self, instance: &str, overrun: Overrun) {
        self.out.push(Change::Overrun {
            cluster: self.cluster.to_owned(),
            instance: instance.to_owned(),
            overrun,
            replayed: self.quiet,
        });
    }
}

/// Every managed cluster's state.
#[derive(Debug)]
pub struct Index {
    clusters: Vec<ClusterState>,
    revision: u64,
}

impl Index {
    /// An empty index for these clusters (the configuration's).
    pub fn new(clusters: &[Cluster]) -> Index {
        Index {
            clusters: clusters.iter().map(ClusterState::new).collect(),
            revision: 0,
        }
    }

    /// The namespaces to watch for every kind in [`Kind::ALL`].
    pub fn namespaces(&self) -> BTreeSet<String> {
        self.clusters
            .iter()
            .map(|c| c.spec.namespace.clone())
            .collect()
    }

    /// The namespaces to watch for [`Kind::MemberLease`]: those kept apart for member Leases.
    pub fn member_namespaces(&self) -> BTreeSet<String> {
        self.clusters
            .iter()
            .filter(|c| c.spec.separate_member_namespace())
            .map(|c| c.spec.member_namespace().to_owned())
            .collect()
    }

    /// From now on, a hold expires only once a watch probe sent a full duration after its
    /// record was last seen to change has come back on the watch that feeds it
    /// ([`Index::prove`]), and a cluster whose Lease watches have not proven themselves within
    /// a lease duration is stale. Without this (unit tests), expiry is by the clock alone. Only
    /// native clusters: Leasehold writes nothing in a gnmic cluster, so it may not probe there
    /// either (its role may be read-only).
    pub fn require_proofs(&mut self) {
        for c in &mut self.clusters {
            if c.spec.protocol == crate::protocol::Protocol::Native {
                c.proofs = Some(Proofs::default());
            }
        }
        self.revision += 1;
    }

    /// A watch probe sent at `sent_ms` came back on the watch of `kind` (a Lease kind) in
    /// `namespace`.
    pub fn prove(&mut self, namespace: &str, kind: Kind, sent_ms: i64) {
        let mut changed = false;
        for state in self
            .clusters
            .iter_mut()
            .filter(|c| c.watches(namespace, kind))
        {
            let Some(proofs) = &mut state.proofs else {
                continue;
            };
            let slot = proofs.of(kind);
            if slot.is_none_or(|t| t < sent_ms) {
                *slot = Some(sent_ms);
                changed = true;
            }
        }
        if changed {
            self.revision += 1;
        }
    }

    /// Applies an added or modified object.
    pub fn apply<K: Indexed>(&mut self, obj: &K, now: Timestamp) -> Vec<Change> {
        let ns = obj.meta().namespace.clone().unwrap_or_default();
        self.each(&ns, K::KIND, now, |state, emit| K::apply(state, obj, emit))
    }

    /// Applies a deletion.
    pub fn delete<K: Indexed>(
        &mut self,
        namespace: &str,
        name: &str,
        now: Timestamp,
    ) -> Vec<Change> {
        self.each(namespace, K::KIND, now, |state, emit| {
            K::delete(state, name, emit)
        })
    }

    /// Replaces everything of kind `K` in `namespace` with a full list (first sync, or a
    /// relist after the watch fell behind), reporting the differences, and marks it synced
    /// and fresh.
    pub fn reset<K: Indexed>(
        &mut self,
        namespace: &str,
        objs: &[K],
        now: Timestamp,
    ) -> Vec<Change> {
        let mut out = Vec::new();
        let mut seen = BTreeSet::new();
        for o in objs {
            out.extend(self.apply(o, now));
            seen.extend(o.meta().name.clone());
        }
        out.extend(self.finish_relist::<K>(namespace, &seen, now));
        out
    }

    /// Ends a relist whose objects were each given to [`Index::apply`] as they arrived: what
    /// was not `seen` is deleted, and the kind is marked synced and fresh.
    pub fn finish_relist<K: Indexed>(
        &mut self,
        namespace: &str,
        seen: &BTreeSet<String>,
        now: Timestamp,
    ) -> Vec<Change> {
        let out = self.each(namespace, K::KIND, now, |state, emit| {
            for name in K::names(state) {
                if !seen.contains(&name) {
                    K::delete(state, &name, emit);
                }
            }
        });
        for state in self
            .clusters
            .iter_mut()
            .filter(|c| c.watches(namespace, K::KIND))
        {
            state.synced.insert(K::KIND);
            state.stale.remove(&K::KIND);
        }
        self.revision += 1;
        out
    }

    /// Marks the watch of `kind` in `namespace` as down (true) or back (false). A cluster
    /// with any watch down is stale: shown as last known, never acted on.
    pub fn set_stale(&mut self, namespace: &str, kind: Kind, stale: bool) {
        for state in self
            .clusters
            .iter_mut()
            .filter(|c| c.watches(namespace, kind))
        {
            if stale {
                state.stale.insert(kind);
            } else {
                state.stale.remove(&kind);
            }
        }
        self.revision += 1;
    }

    /// The cordoned instances of `cluster`.
    pub fn cordons(&self, cluster: &str) -> Option<&BTreeSet<String>> {
        self.clusters
            .iter()
            .find(|c| c.spec.name == cluster)
            .map(|c| &c.cordoned)
    }

    /// Sets the instances of `cluster` excluded from placement (kept in the history store).
    pub fn set_cordons(&mut self, cluster: &str, cordoned: BTreeSet<String>) {
        if let Some(state) = self.clusters.iter_mut().find(|c| c.spec.name == cluster) {
            state.cordoned = cordoned;
        }
        self.revision += 1;
    }

    /// Counts the changes to what [`Index::model`] shows, except ages: every call that
    /// changes the index bumps it, but a Lease renewal of a live hold does not (at 50,000
    /// targets renewals arrive thousands of times a second and change only how long ago
    /// something was renewed). A model built at the current revision is current but for its
    /// ages and for expiries, which no event announces.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// Every watch has synced once.
    pub fn synced(&self) -> bool {
        self.clusters.iter().all(ClusterState::all_synced)
    }

    /// The clusters whose model is stale at `now` (as [`ClusterModel::stale`] says, without
    /// building it): a watch feeding them is down, or has not proven itself current within a
    /// lease duration.
    ///
    /// [`ClusterModel::stale`]: crate::k8s::model::ClusterModel::stale
    pub fn stale_clusters(&self, now: Timestamp) -> Vec<String> {
        let now_ms = now.as_millisecond();
        self.clusters
            .iter()
            .filter(|c| c.is_stale(now_ms))
            .map(|c| c.spec.name.clone())
            .collect()
    }

    /// A [`Change::Members`] for each cluster in which a member's heartbeat, as
    /// live views show it, changed by the clock alone since the last call: its member Lease
    /// now unchanged for over two thirds of its duration (late) or all of it (lost), or
    /// renewed again after that. So a member that stops renewing is shown at once, not at a
    /// view's next periodic refresh. Bumps the revision when it reports anything, so that
    /// models built before (whose ages froze when they were built) are built again.
    pub fn heartbeats(&mut self, now: Timestamp) -> Vec<Change> {
        let now_ms = now.as_millisecond();
        let mut out = Vec::new();
        for state in self.clusters.iter_mut().filter(|c| c.native()) {
            let mut changed = false;
            for m in state.members.values_mut() {
                let now_shown = m.heartbeat(now_ms);
                if m.shown != now_shown {
                    m.shown = now_shown;
                    changed = true;
                }
            }
            if changed && state.all_synced() {
                out.push(Change::Members {
                    cluster: state.spec.name.clone(),
                });
            }
        }
        if !out.is_empty() {
            self.revision += 1;
        }
        out
    }

    /// The model of one cluster at `now`.
    pub fn model(&self, cluster: &str, now: Timestamp) -> Option<crate::k8s::model::ClusterModel> {
        self.snapshot(cluster, now).map(|s| s.model)
    }

    /// The model of one cluster at `now`, with how long it stays exact.
    pub fn snapshot(&self, cluster: &str, now: Timestamp) -> Option<Snapshot> {
        let state = self.clusters.iter().find(|c| c.spec.name == cluster)?;
        let (model, next_expiry_ms, awaiting_proof) = state.model(now.as_millisecond());
        Some(Snapshot {
            model,
            revision: self.revision,
            awaiting_proof,
            exact_for: next_expiry_ms.map(|at| {
                Duration::from_millis(u64::try_from(at - now.as_millisecond()).unwrap_or(0))
            }),
        })
    }

    /// One target's holder (if held and not expired by our observation), desired owner and
    /// Lease name, without building the whole model.
    pub fn target(&self, cluster: &str, key: &str, now: Timestamp) -> Option<TargetNow> {
        let state = self.clusters.iter().find(|c| c.spec.name == cluster)?;
        let entry = state.targets.get(key)?;
        let now_ms = now.as_millisecond();
        let expired = if state.native() {
            // As in the model: a hold is live while its holder's member Lease is
            // (target Leases are never renewed, so their own age says nothing).
            let judged = state.members_judged_at(now_ms);
            entry.holder.as_deref().is_some_and(|h| {
                !state.members.get(h).is_some_and(|m| {
                    matches!(
                        m.state(h, now_ms, judged).liveness,
                        crate::k8s::model::Liveness::Live | crate::k8s::model::Liveness::Leaving
                    )
                })
            })
        } else {
            entry.is_expired(state.judged_at(Kind::Lease, now_ms))
        };
        Some(TargetNow {
            lease: entry.name.to_string(),
            holder: entry.holder.as_deref().map(str::to_owned),
            expired,
            desired: entry.desired.as_deref().map(str::to_owned),
            acquired_at_ms: entry.acquire.map(|t| t.as_millisecond()),
        })
    }

    /// Whether `key` is in `cluster`'s configured target list.
    pub fn configured(&self, cluster: &str, key: &str) -> bool {
        self.clusters
            .iter()
            .find(|c| c.spec.name == cluster)
            .is_some_and(|c| c.configured.contains_key(key))
    }

    /// Whether `member` of `cluster` says (its member Lease's app report) that its app can
    /// start on a target ahead of a hand-over and prove it: it can be the next owner in an
    /// overlap hand-off.
    pub fn prepares(&self, cluster: &str, member: &str) -> bool {
        self.clusters
            .iter()
            .find(|c| c.spec.name == cluster)
            .and_then(|c| c.members.get(member))
            .and_then(|m| m.app_work.as_ref())
            .is_some_and(|w| w.prepares)
    }

    /// Whether what the index shows of `cluster` is known to be current at `now`: every watch
    /// feeding it has synced and none is down or unproven. Only then may an absence (of a pod,
    /// of a live member Lease) be acted on; a replica that has just begun to act has not yet
    /// seen its members.
    pub fn current(&self, cluster: &str, now: Timestamp) -> bool {
        self.clusters
            .iter()
            .find(|c| c.spec.name == cluster)
            .is_some_and(|c| c.all_synced() && !c.is_stale(now.as_millisecond()))
    }

    /// Whether `instance` of `cluster` is a live member: its pod exists, is ready and is not
    /// terminating, and (native clusters) its member Lease is live and not leaving.
    pub fn alive(&self, cluster: &str, instance: &str, now: Timestamp) -> bool {
        self.clusters
            .iter()
            .find(|c| c.spec.name == cluster)
            .is_some_and(|c| {
                let now_ms = now.as_millisecond();
                c.pods
                    .get(instance)
                    .is_some_and(|p| p.ready && !p.terminating)
                    && (!c.native()
                        || c.members.get(instance).is_some_and(|m| {
                            m.state(instance, now_ms, c.members_judged_at(now_ms))
                                .liveness
                                == crate::k8s::model::Liveness::Live
                        }))
            })
    }

    /// `member`'s current term ([`crate::protocol::member_term`]) as last seen on
    /// its member Lease, while it holds it.
    pub fn member_term(&self, cluster: &str, member: &str) -> Option<String> {
        let c = self.clusters.iter().find(|c| c.spec.name == cluster)?;
        let m = c.members.get(member)?;
        m.entry.holder.as_deref().filter(|h| *h == member)?;
        m.term.clone()
    }

    /// The holder record of `member`'s member Lease if the index has seen it held by the member
    /// and unchanged for a full duration ([`crate::k8s::model::Liveness::Expired`]) — what the
    /// control plane may fence, if a fresh read still shows exactly this record.
    pub fn expired_member_record(
        &self,
        cluster: &str,
        member: &str,
        now: Timestamp,
    ) -> Option<crate::protocol::Holding> {
        let c = self.clusters.iter().find(|c| c.spec.name == cluster)?;
        let m = c.members.get(member)?;
        let now_ms = now.as_millisecond();
        (m.state(member, now_ms, c.members_judged_at(now_ms))
            .liveness
            == crate::k8s::model::Liveness::Expired)
            .then(|| m.entry.record())
    }

    /// The holder record of `member`'s member Lease as last seen, and how long (ms) the index
    /// has seen it unchanged.
    pub fn member_record(
        &self,
        cluster: &str,
        member: &str,
        now: Timestamp,
    ) -> Option<(crate::protocol::Holding, i64)> {
        let c = self.clusters.iter().find(|c| c.spec.name == cluster)?;
        let m = c.members.get(member)?;
        Some((m.entry.record(), now.as_millisecond() - m.entry.since_ms))
    }

    /// Whether `member`'s member Lease may be deleted now: its pod is gone, the
    /// Lease says it stopped or was fenced, and no target Lease names it as holder.
    pub fn member_lease_is_garbage(&self, cluster: &str, member: &str, now: Timestamp) -> bool {
        let Some(c) = self.clusters.iter().find(|c| c.spec.name == cluster) else {
            return false;
        };
        c.departed_member(member, now.as_millisecond())
            && !c
                .targets
                .values()
                .any(|e| e.holder.as_deref() == Some(member))
    }

    /// The names of the managed clusters, in configuration order.
    pub fn cluster_names(&self) -> Vec<String> {
        self.clusters.iter().map(|c| c.spec.name.clone()).collect()
    }

    /// What the index remembers of a departed pod of `cluster`: its IP.
    pub fn departed_ip(&self, cluster: &str, pod: &str) -> Option<String> {
        let state = self.clusters.iter().find(|c| c.spec.name == cluster)?;
        state.departed.get(pod).and_then(|(_, p)| p.ip.clone())
    }

    fn each(
        &mut self,
        namespace: &str,
        kind: Kind,
        now: Timestamp,
        mut f: impl FnMut(&mut ClusterState, &mut Emit<'_>),
    ) -> Vec<Change> {
        let mut out = Vec::new();
        let mut changed = false;
        for state in self
            .clusters
            .iter_mut()
            .filter(|c| c.watches(namespace, kind))
        {
            let name = state.spec.name.clone();
            let quiet = !state.synced.contains(&kind);
            let mut emit = Emit {
                cluster: &name,
                out: &mut out,
                quiet,
                now_ms: now.as_millisecond(),
                changed: true,
            };
            f(state, &mut emit);
            changed |= emit.changed;
        }
        if changed {
            self.revision += 1;
        }
        out
    }
}

impl ClusterState {
    fn new(spec: &Cluster) -> Self {
        let mut state = ClusterState {
            spec: spec.clone(),
            pods: BTreeMap::new(),
            departed: BTreeMap::new(),
            services: BTreeMap::new(),
            slices: BTreeMap::new(),
            targets: HashMap::new(),
            lease_keys: HashMap::new(),
            leader: None,
            members: HashMap::new(),
            member_leases: HashMap::new(),
            overruns: HashMap::new(),
            gnmic_released: HashMap::new(),
            handed_work: HashMap::new(),
            plans: HashMap::new(),
            interner: Interner::default(),
            config_map_targets: Vec::new(),
            endpoint_slices: BTreeMap::new(),
            endpoint_services: BTreeSet::new(),
            configured: BTreeMap::new(),
            targets_error: None,
            endpoints_error: None,
            cordoned: BTreeSet::new(),
            synced: BTreeSet::new(),
            stale: BTreeSet::new(),
            proofs: None,
        };
        state.rebuild_configured();
        state
    }

    /// Whether this cluster is fed by the watch of `kind` in `namespace`.
    fn watches(&self, namespace: &str, kind: Kind) -> bool {
        match kind {
            Kind::MemberLease => {
                self.spec.separate_member_namespace() && self.spec.member_namespace() == namespace
            }
            _ => self.spec.namespace == namespace,
        }
    }

    /// The moment (ms) up to which expiries fed by the watch of `kind` are judged: `now_ms`
    /// when no proof is required, else the latest proof on that watch (never later than now),
    /// or [`UNPROVEN`] before the first.
    fn judged_at(&self, kind: Kind, now_ms: i64) -> i64 {
        let Some(mut p) = self.proofs else {
            return now_ms;
        };
        p.of(kind).map_or(UNPROVEN, |t| t.min(now_ms))
    }

    /// [`ClusterState::judged_at`] for the member Leases, wherever they are watched.
    fn members_judged_at(&self, now_ms: i64) -> i64 {
        let kind = if self.spec.separate_member_namespace() {
            Kind::MemberLease
        } else {
            Kind::Lease
        };
        self.judged_at(kind, now_ms)
    }

    /// When (ms) the model turns stale for want of proof unless another comes first: a lease
    /// duration after the older of the latest proofs of its Lease watches. `None` when no
    /// proof is required.
    fn unproven_from(&self) -> Option<i64> {
        self.proofs?;
        let d = i64::try_from(self.spec.policy.lease_duration.as_millis()).unwrap_or(i64::MAX);
        let oldest = self
            .judged_at(Kind::Lease, i64::MAX)
            .min(self.members_judged_at(i64::MAX));
        Some(oldest.saturating_add(d))
    }

    /// A watch feeding this cluster is down, or has not proven itself current within a lease
    /// duration: the model is shown as last known and never acted on.
    fn is_stale(&self, now_ms: i64) -> bool {
        !self.stale.is_empty() || self.unproven_from().is_some_and(|at| at <= now_ms)
    }

    /// Every watch feeding this cluster has listed once.
    fn all_synced(&self) -> bool {
        Kind::ALL.iter().all(|k| self.synced.contains(k))
            && (!self.spec.separate_member_namespace() || self.synced.contains(&Kind::MemberLease))
    }

    /// The configured target list: inline entries, then the ConfigMap's, the `endpoints`
    /// entries expanded over the EndpointSlices seen (a key listed as such wins over an
    /// endpoint's). Whether it changed; an entry that cannot be expanded keeps the last good
    /// targets and is reported ([`ClusterState::targets_error`]).
    fn rebuild_configured(&mut self) -> bool {
        let mut listed = Vec::new();
        let mut sources = Vec::new();
        for e in self
            .spec
            .targets
            .inline
            .iter()
            .chain(&self.config_map_targets)
        {
            match e {
                TargetEntry::Target(t) => listed.push(t),
                TargetEntry::Endpoints(e) => sources.push((&e.endpoints, e.weight)),
            }
        }
        self.endpoint_services = sources.iter().map(|(s, _)| s.service.clone()).collect();
        let expanded = match endpoints::expand(&sources, self.endpoint_slices.values()) {
            Ok(targets) => {
                self.endpoints_error = None;
                targets
            }
            Err(e) => {
                self.endpoints_error = Some(e);
                return false;
            }
        };
        let configured: BTreeMap<Arc<str>, TargetSpec> = expanded
            .into_iter()
            .chain(listed.into_iter().cloned())
            .map(|t| (Arc::from(t.key.as_str()), t))
            .collect();
        let changed = configured != self.configured;
        self.configured = configured;
        changed
    }

    /// Whether the target list may have `endpoints` entries: it has some, or it is read from a
    /// ConfigMap, which may gain some.
    fn wants_endpoints(&self) -> bool {
        self.spec.targets.config_map.is_some() || !self.endpoint_services.is_empty()
    }

    /// Why the target list is in doubt, if it is: the ConfigMap's list cannot be read, or an
    /// `endpoints` entry cannot be expanded. Deletions wait meanwhile.
    fn targets_error(&self) -> Option<String> {
        match (&self.targets_error, &self.endpoints_error) {
            (Some(a), Some(b)) => Some(format!("{a}; {b}")),
            (a, b) => a.clone().or_else(|| b.clone()),
        }
    }

    fn remember_departed(&mut self, name: String, info: PodInfo, now_ms: i64) {
        self.departed.insert(name, (now_ms, info));
        if self.departed.len() > DEPARTED_KEEP
            && let Some(oldest) = self
                .departed
                .iter()
                .min_by_key(|(_, (at, _))| *at)
                .map(|(n, _)| n.clone())
        {
            self.departed.remove(&oldest);
        }
    }
}

#[cfg(test)]
mod tests;
