//! The cluster model the index builds and everyone else reads: instances, targets, the leader
//! and Services of one managed cluster, as plain serialisable data (the HTTP API and the
//! dashboard render it; the engine decides on it). No behaviour beyond small derived helpers.

use std::sync::Arc;

use serde::Serialize;

use crate::metrics::ClusterGauges;
use crate::protocol::Protocol;

/// One managed cluster at one moment.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ClusterModel {
    /// Its name.
    pub name: String,
    /// Its namespace.
    pub namespace: String,
    /// Its Lease layout: Leasehold's protocol (`docs/protocol.md`), or gnmic's, observed.
    pub protocol: Protocol,
    /// Every watch it depends on has synced at least once.
    pub synced: bool,
    /// A watch it depends on is down: this is the last known state, not to be acted on.
    pub stale: bool,
    /// The member holding the cluster's leader Lease.
    pub leader: Option<String>,
    /// Members, ghosts and cordoned instances, by name.
    pub instances: Vec<Instance>,
    /// Every target (configured or seen on a Lease), by key.
    pub targets: Vec<Target>,
    /// The configured Services.
    pub services: Vec<ServiceInfo>,
    /// Targets per state.
    pub counts: TargetCounts,
    /// Why the target list (a ConfigMap) could not be used, if so; the last good list stays.
    pub targets_error: Option<String>,
    /// Members whose pod is gone, who hold no target, and whose member Lease says
    /// they stopped (released) or were fenced — garbage the control plane deletes.
    pub departed_member_leases: Vec<String>,
    /// The hand-over plans the control plane wrote for stopping members
    /// ([`crate::protocol::plan`]), by member.
    #[serde(skip)]
    pub plans: std::collections::BTreeMap<String, PlanSeen>,
}

/// A hand-over plan Lease as seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanSeen {
    /// The member it is for.
    pub member: String,
    /// Its Lease's name.
    pub name: String,
    /// Its `resourceVersion`: a rewrite or deletion is a compare-and-swap on it.
    pub resource_version: String,
    /// The plan (`None` when the Lease does not read as one).
    pub plan: Option<Arc<crate::protocol::plan::Plan>>,
}

/// A member instance (a pod matching the selector), or a ghost: an identity that still holds
/// Leases although no such pod exists.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Instance {
    /// Pod name (the member identity).
    pub name: String,
    /// Static role from the configured role selectors.
    pub role: Option<String>,
    /// Pod phase (`Pending`, `Running`, …); `None` for a ghost.
    pub phase: Option<String>,
    /// Running, Ready and not terminating.
    pub ready: bool,
    /// Being deleted.
    pub terminating: bool,
    /// Pod IP.
    pub ip: Option<String>,
    /// Node name.
    pub node: Option<String>,
    /// StatefulSet ordinal.
    pub ordinal: Option<u32>,
    /// Stable DNS name through the headless Service.
    pub dns: Option<String>,
    /// Ready in the headless Service's EndpointSlices, when there are any.
    pub endpoint_ready: Option<bool>,
    /// Container restarts.
    pub restarts: i32,
    /// Pod creation time (RFC 3339).
    pub created: Option<String>,
    /// Milliseconds since it last renewed any Lease it holds.
    pub lease_renew_age_ms: Option<i64>,
    /// Relative capacity (pod annotation `leasehold.io/capacity`, default 1).
    pub capacity: u32,
    /// Targets it holds.
    pub owned: usize,
    /// Their total weight.
    pub owned_weight: u64,
    /// Excluded from placement until uncordoned.
    pub cordoned: bool,
    /// Holds Leases but has no pod.
    pub ghost: bool,
    /// Holds the cluster's leader Lease.
    pub leader: bool,
    /// Its member Lease (`None` in gnmic clusters, which have none).
    pub member_lease: Option<MemberLease>,
}

impl Instance {
    /// May receive targets: a ready pod, not cordoned, and a live member Lease that does not
    /// say it is leaving.
    pub fn eligible(&self) -> bool {
        self.ready && !self.cordoned && !self.ghost && !self.terminating && self.heartbeat_ok()
    }

    /// Whether its member Lease is live (renewed within its duration, as we observed it) and
    /// not leaving; always true in gnmic clusters.
    pub fn heartbeat_ok(&self) -> bool {
        self.member_lease
            .as_ref()
            .is_none_or(|m| m.liveness == Liveness::Live)
    }
}

/// A member's liveness as its member Lease shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Liveness {
    /// Renewed within its duration, as we observed it.
    Live,
    /// Live, and stopping: its targets are being moved away before it exits.
    Leaving,
    /// Not renewed for a full duration, as we observed it: about to be fenced.
    Expired,
    /// Fenced by the control plane: it may do no work until it registers again.
    Fenced,
    /// Released by the member itself after it stopped all its work.
    Released,
    /// It has no member Lease.
    Absent,
}

/// What the control plane knows of a member Lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct MemberLease {
    /// How alive it is.
    pub liveness: Liveness,
    /// Milliseconds since its record last changed, as we observed it.
    pub unchanged_ms: Option<i64>,
    /// The duration it promises (`leaseDurationSeconds`, in ms; `None` without a Lease): a
    /// member renews every third of it, so a record unchanged for much longer is late.
    pub duration_ms: Option<i64>,
    /// The control plane may take this member's targets away now (clear their holder): it
    /// released its member Lease, or was fenced after its renew deadline had passed.
    pub revocable: bool,
    /// Its current term ([`crate::protocol::member_term`]) while live or leaving: written with
    /// each desired owner, so that the holder can hand a target straight to it.
    #[serde(skip)]
    pub term: Option<String>,
    /// Its managed app's own account of the work it holds (managed gnmic), as its agent last
    /// wrote it: which held targets the app really works on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub app_work: Option<crate::protocol::AppWork>,
}

/// Where a target is.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    serde::Deserialize,
    utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum TargetState {
    /// Held (unexpired by our observation) by an instance that has a pod, and desired there (or
    /// with no desired owner written).
    Owned,
    /// No holder.
    Unassigned,
    /// Held by one member, wanted by another: a handoff is under way.
    Moving,
    /// Its holder stopped renewing (by our observation).
    Expired,
    /// Held, its hold not lapsed, but nobody works on it: the holder's pod has failed or ended
    /// (its containers are gone while its member Lease has yet to expire), or the holder's
    /// managed app says it does not work on it (a device down, a start that failed).
    Unworked,
    /// Held by an identity with no pod, or its Lease names a target no longer configured.
    Orphaned,
}

impl TargetState {
    /// Every state, in the order people read them.
    pub const ALL: [TargetState; 6] = [
        TargetState::Owned,
        TargetState::Unassigned,
        TargetState::Moving,
        TargetState::Expired,
        TargetState::Unworked,
        TargetState::Orphaned,
    ];

    /// The word serde uses.
    pub fn as_str(self) -> &'static str {
        match self {
            TargetState::Owned => "owned",
            TargetState::Unassigned => "unassigned",
            TargetState::Moving => "moving",
            TargetState::Expired => "expired",
            TargetState::Unworked => "unworked",
            TargetState::Orphaned => "orphaned",
        }
    }

    /// Nobody works on a target in this state although it should be worked: the states a
    /// healthy cluster has none of (docs/concepts.md, "Target states").
    pub fn unworked(self) -> bool {
        matches!(
            self,
            TargetState::Unassigned | TargetState::Expired | TargetState::Unworked
        )
    }
}

/// One target.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Target {
    /// The raw key.
    #[schema(value_type = String)]
    pub key: Arc<str>,
    /// Its Lease, if one exists.
    #[schema(value_type = Option<String>)]
    pub lease: Option<Arc<str>>,
    /// The member holding the Lease (expired or not).
    #[schema(value_type = Option<String>)]
    pub owner: Option<Arc<str>>,
    /// The member the control plane wants holding it.
    #[schema(value_type = Option<String>)]
    pub desired: Option<Arc<str>>,
    /// Where it is.
    pub state: TargetState,
    /// Relative load.
    pub weight: u32,
    /// The member it must live on.
    pub pin: Option<String>,
    /// In the configured target list.
    pub configured: bool,
    /// The operation that last set its desired owner.
    #[schema(value_type = Option<String>)]
    pub operation: Option<Arc<str>>,
    /// Milliseconds since its holder record last changed, as we observed it.
    pub unchanged_ms: Option<i64>,
    /// Milliseconds since its desired owner last changed, as we observed it.
    pub desired_unchanged_ms: Option<i64>,
    /// Whether its holder's managed app works on it (managed gnmic: collects it), as the
    /// holder's agent last reported (`None`: no such report, or not known).
    pub app_working: Option<bool>,
    /// Why its holder's app does not work on it, as the app says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub app_problem: Option<String>,
}

/// A configured Service.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct ServiceInfo {
    /// Its name.
    pub name: String,
    /// `ClusterIP`, `LoadBalancer`, …
    pub type_: String,
    /// `clusterIP: None`.
    pub headless: bool,
    /// Its cluster IP.
    pub cluster_ip: Option<String>,
    /// LoadBalancer ingress IPs or host names.
    pub ingress: Vec<String>,
    /// `name/port/protocol` per port.
    pub ports: Vec<String>,
}

/// Targets per state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct TargetCounts {
    /// All targets.
    pub total: usize,
    /// [`TargetState::Owned`].
    pub owned: usize,
    /// [`TargetState::Unassigned`].
    pub unassigned: usize,
    /// [`TargetState::Moving`].
    pub moving: usize,
    /// [`TargetState::Expired`].
    pub expired: usize,
    /// [`TargetState::Unworked`].
    pub unworked: usize,
    /// [`TargetState::Orphaned`].
    pub orphaned: usize,
}

#[cfg(test)]
impl ClusterModel {
    /// A synced, fresh native cluster `c` in namespace `ns` with these instances and targets
    /// (kept in the order given), for tests.
    pub(crate) fn for_tests(instances: Vec<Instance>, targets: Vec<Target>) -> ClusterModel {
        ClusterModel {
            name: "c".into(),
            namespace: "ns".into(),
            protocol: Protocol::Native,
            synced: true,
            stale: false,
            leader: None,
            instances,
            targets,
            services: Vec::new(),
            counts: TargetCounts::default(),
            departed_member_leases: Vec::new(),
            targets_error: None,
            plans: Default::default(),
        }
    }
}

impl Instance {
    /// A running pod `name` of capacity 1 owning nothing, for tests.
    #[cfg(test)]
    pub(crate) fn for_tests(name: &str, ready: bool, cordoned: bool, ghost: bool) -> Instance {
        Instance {
            name: name.into(),
            role: None,
            phase: Some("Running".into()),
            ready,
            terminating: false,
            ip: None,
            node: None,
            ordinal: None,
            dns: None,
            endpoint_ready: None,
            restarts: 0,
            created: None,
            lease_renew_age_ms: None,
            capacity: 1,
            owned: 0,
            owned_weight: 0,
            cordoned,
            ghost,
            leader: false,
            member_lease: None,
        }
    }
}

impl Target {
    /// Target `key` of weight 1, unpinned, with a Lease when it has an owner or a desire, for
    /// tests.
    #[cfg(test)]
    pub(crate) fn for_tests(
        key: &str,
        owner: Option<&str>,
        desired: Option<&str>,
        state: TargetState,
        configured: bool,
    ) -> Target {
        Target {
            key: key.into(),
            lease: owner.or(desired).map(|_| format!("l-{key}").into()),
            owner: owner.map(Into::into),
            desired: desired.map(Into::into),
            state,
            weight: 1,
            pin: None,
            configured,
            operation: None,
            unchanged_ms: None,
            desired_unchanged_ms: None,
            app_working: None,
            app_problem: None,
        }
    }
}

impl ClusterModel {
    /// Finds an instance.
    pub fn instance(&self, name: &str) -> Option<&Instance> {
        self.instances.iter().find(|i| i.name == name)
    }

    /// Finds a target (targets are sorted by key).
    pub fn target(&self, key: &str) -> Option<&Target> {
        self.targets
            .binary_search_by(|t| (*t.key).cmp(key))
            .ok()
            .map(|i| &self.targets[i])
    }

    /// The gauges `/metrics` shows for this cluster.
    pub fn gauges(&self) -> ClusterGauges<'_> {
        let c = &self.counts;
        let pods = self.instances.iter().filter(|i| !i.ghost);
        ClusterGauges {
            cluster: &self.name,
            targets: [
                ("owned", c.owned),
                ("unassigned", c.unassigned),
                ("moving", c.moving),
                ("expired", c.expired),
                ("unworked", c.unworked),
                ("orphaned", c.orphaned),
            ],
            members: pods.clone().count(),
            members_ready: pods.filter(|i| i.ready).count(),
            stale: self.stale || !self.synced,
            mass_lapse_members: 0,
        }
    }
}
