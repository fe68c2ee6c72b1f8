//! The member protocol on `coordination.k8s.io/v1` Leases — the public contract in
//! `docs/protocol.md`, shared by the control plane (`engine`), the members (`agent`) and the
//! index (`k8s`). It owns the names, labels and annotations, reads a Lease into a
//! [`LeaseView`], and builds the one change each party is allowed to make: the control plane
//! writes the desired owner (annotations and a label), revokes a dead member's holds and fences its member Lease, and
//! writes a stopping member's hand-over plan ([`plan`]); members write the holder (`spec`, and
//! the holder label) and their own member Lease — and, following their plan, the desired owner
//! with a hand-over. Every write built here is sent as a compare-and-swap on
//! `resourceVersion` by the caller. Pure: no I/O, no clock (`now` is passed in).

pub mod member;
pub mod names;
pub mod plan;

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};

use crate::model::Cause;

/// Label naming the cluster a Lease belongs to.
pub const LABEL_CLUSTER: &str = "leasehold.io/cluster";
/// Label naming the Lease's role: [`ROLE_LEADER`], [`ROLE_TARGET`], [`ROLE_MEMBER`] or
/// [`plan::ROLE_PLAN`].
pub const LABEL_ROLE: &str = "leasehold.io/lease-role";
/// Value of [`LABEL_ROLE`] on a cluster's leader Lease.
pub const ROLE_LEADER: &str = "leader";
/// Value of [`LABEL_ROLE`] on a target Lease.
pub const ROLE_TARGET: &str = "target";
/// Value of [`LABEL_ROLE`] on a member Lease.
pub const ROLE_MEMBER: &str = "member";
/// Value of [`LABEL_ROLE`] on a control-plane replica's watch probe (`k8s::probe`): no
/// cluster's Lease, never read as one.
pub const ROLE_WATCH_PROBE: &str = "watch-probe";
/// Annotation on a watch probe: which write of which process it is (`<boot>/<sequence>`).
pub const ANN_PROBE: &str = "leasehold.io/probe";
/// Label on a target Lease: the desired owner as a label value
/// ([`names::identity_label`]), so a member can watch the Leases desired for it.
pub const LABEL_DESIRED_OWNER: &str = "leasehold.io/desired-owner";
/// Label on a target Lease: the holder as a label value, written with the holder by members.
pub const LABEL_HOLDER: &str = "leasehold.io/holder";
/// Annotation on a member Lease: the member's identity, raw (the name may be hashed).
pub const ANN_IDENTITY: &str = "leasehold.io/identity";
/// Annotation on a member Lease: `"true"` while the member is stopping and wants its targets
/// moved away before it exits.
pub const ANN_LEAVING: &str = "leasehold.io/leaving";
/// Annotation on a member Lease the control plane fenced: why ([`Fence`]).
pub const ANN_FENCED: &str = "leasehold.io/fenced";
/// Annotation on a member Lease: the member's last [`Overrun`] (JSON), written by the member
/// with every write of its member Lease once it has had one.
pub const ANN_OVERRUN: &str = "leasehold.io/last-overrun";
/// Annotation on a member Lease: a managed app's own account of the work its member holds
/// ([`AppWork`]), rewritten with each renewal.
pub const ANN_APP_WORK: &str = "leasehold.io/app-work";
/// Annotation on a member Lease: the protocol versions the member speaks (`"2"`: the one
/// protocol; the number stays what the member Leases' first release wrote, so that a later
/// version can be told apart).
pub const ANN_PROTOCOL_VERSIONS: &str = "leasehold.io/protocol-versions";
/// Annotation holding the raw target key (names may be hashed; this never is).
pub const ANN_TARGET_KEY: &str = "leasehold.io/target-key";
/// Annotation naming the member that should hold the target. Written by the acting control
/// plane, and by a member handing a target over as its hand-over plan says ([`plan`]).
pub const ANN_DESIRED_OWNER: &str = "leasehold.io/desired-owner";
/// Annotation saying why the desired owner was set (a [`Cause`] word).
pub const ANN_CAUSE: &str = "leasehold.io/cause";
/// Annotation naming the operation that set the desired owner, if any.
pub const ANN_OPERATION: &str = "leasehold.io/operation";
/// Annotation with the lease duration (seconds) members should use when they hold the Lease.
pub const ANN_DURATION: &str = "leasehold.io/lease-duration-seconds";
/// Annotation on a target Lease, written with the desired owner: the desired
/// owner's term ([`member_term`]) as the control plane saw its member Lease when it chose it.
pub const ANN_DESIRED_TERM: &str = "leasehold.io/desired-term";
/// Annotation on a target Lease handed straight to its desired owner by the
/// member that held it ([`handed_over`]): the term of the new holder the hold was handed to. The
/// new holder works under it without a write of its own only while that is its current term.
pub const ANN_HANDED_TERM: &str = "leasehold.io/handed-term";
/// Annotation on a target Lease, written with the desired owner: the move is an **overlap**
/// hand-off (scrapers, where a short double scrape is harmless and a gap is not): the desired
/// owner starts its app on the target before the hand-over and says so once the app proves it
/// works ([`ANN_READY_TERM`]); the holder stops its own only then, or once this many
/// milliseconds have passed since it saw the move without that proof (it then stops first, as
/// in an exclusive hand-off). Absent: exclusive (the holder stops, then hands over).
pub const ANN_OVERLAP_MS: &str = "leasehold.io/overlap-ms";
/// Annotation on a target Lease in an overlap hand-off, written by the desired owner (a
/// compare-and-swap, nothing else changed): its term ([`member_term`]) once its app proved it
/// works on the target. The holder hands over when this equals the desired term.
pub const ANN_READY_TERM: &str = "leasehold.io/ready-term";
/// Annotation written with [`ANN_READY_TERM`]: when (Unix ms, by the desired owner's clock)
/// its app was proven to work on the target. With the hand-over's `acquireTime` (after the old
/// holder's app was proven stopped) it gives the overlap history records.
pub const ANN_READY_AT: &str = "leasehold.io/ready-at";
/// Annotation written with a hand-over ([`with_stopped_at`]) by a holder whose app proves its
/// stops and knows when it last worked on the target (the scrape kind: its scraper's last
/// scrape of it), in Unix ms by the holder's clock. With the next owner's report of its app's
/// first work on the target ([`AppWork::started`]) it gives the work-level gap of the
/// hand-off, which history records (`work_gap_ms`). Any other holder change removes it.
pub const ANN_STOPPED_AT: &str = "leasehold.io/stopped-at";
/// Pod annotation: the member's relative capacity (a positive integer, default 1).
pub const POD_CAPACITY: &str = "leasehold.io/capacity";
/// gnmic's annotation with the raw locker key.
pub const GNMIC_KEY: &str = "original-key";
/// gnmic's annotation with the locker value (the instance name).
pub const GNMIC_VALUE: &str = "original-value";

/// Lease duration written on release, as client-go does: the Lease is free at once.
pub const RELEASED_DURATION_SECONDS: i32 = 1;

/// How a cluster's Leases are laid out.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Protocol {
    /// Leasehold's own layout; the control plane places targets and members follow.
    Native,
    /// gnmic's Kubernetes locker layout, observed read-only.
    Gnmic,
}

impl std::fmt::Display for Protocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Protocol::Native => "native",
            Protocol::Gnmic => "gnmic",
        })
    }
}

/// What a Lease is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseRole {
    /// The cluster's leader election.
    Leader,
    /// Ownership of one target.
    Target(String),
    /// A member's liveness: the identity it stands for.
    Member(String),
    /// A hand-over plan for a stopping member ([`plan`]): the member it is for.
    Plan(String),
}

/// Why the control plane fenced a member Lease (emptied its holder).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fence {
    /// The member's record was seen unchanged for a full duration and was still the current
    /// one when fenced: the member's renew deadline had passed. Its holds may be revoked at once.
    Expired,
    /// The member had no member Lease at all; the control plane created it fenced. Its holds may
    /// be revoked once this record has stood unchanged for a full duration (a member that lost
    /// its Lease to a deletion may still be within its renew deadline when it is created).
    Absent,
}

impl Fence {
    /// The annotation value.
    pub fn as_str(self) -> &'static str {
        match self {
            Fence::Expired => "expired",
            Fence::Absent => "absent",
        }
    }
}

/// A member's report that it found holds already ended by its own clock when it next looked
/// (it was paused — a GC pause, SIGSTOP, a starved process — past its renew deadline): for
/// that long, another member may have worked on those targets beside its app. Counted per
/// spell: every hold the member gave up in one pass counts in `targets`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Overrun {
    /// When the member noticed (its wall clock, unix milliseconds); with the member's identity,
    /// the key that makes recording it idempotent.
    pub at_ms: i64,
    /// How long past the end of its hold it noticed (the longest, if several).
    pub late_ms: u64,
    /// Holds given up late in this spell; each app was told to stop (`on_release`).
    pub targets: u32,
    /// Overruns (holds) this member process has had since it started, this one included.
    pub total: u64,
}

impl Overrun {
    /// The annotation value.
    pub fn to_annotation(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Reads the annotation value; `None` if it is not one.
    pub fn parse(value: &str) -> Option<Overrun> {
        serde_json::from_str(value).ok()
    }

    /// One line for history and Kubernetes Events.
    pub fn describe(&self) -> String {
        let plural = if self.targets == 1 { "" } else { "s" };
        format!(
            "paused {:.1} s past the end of its hold: the app was told to stop {} target{plural} \
             late, which another member may have taken meanwhile ({} overrun{} since it started)",
            self.late_ms as f64 / 1000.0,
            self.targets,
            self.total,
            if self.total == 1 { "" } else { "s" },
        )
    }
}

/// The holder record of a Lease: the part the leader-election rule compares. A candidate may
/// take a held Lease only after seeing this record unchanged for a full duration by its own
/// clock (client-go's rule), so that clock skew never lets two members hold at once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Holding {
    /// Who holds it (`None` when free or released).
    pub holder: Option<String>,
    /// When the current holder acquired it.
    pub acquire: Option<Timestamp>,
    /// When the holder last renewed it.
    pub renew: Option<Timestamp>,
    /// Seconds the holder promises to renew within.
    pub duration_s: i32,
    /// How many times it changed hands.
    pub transitions: i32,
}

/// A Lease as the protocol sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseView {
    /// The Lease's name.
    pub name: String,
    /// Its `resourceVersion` (the compare-and-swap token).
    pub resource_version: String,
    /// Leader or target.
    pub role: LeaseRole,
    /// The holder record.
    pub holding: Holding,
    /// The desired owner set by the control plane (native layout only).
    pub desired: Option<String>,
    /// Why the desired owner was set.
    pub cause: Option<Cause>,
    /// The operation that set it.
    pub operation: Option<String>,
    /// The duration members should promise when holding it.
    pub desired_duration_s: Option<i32>,
    /// A member Lease: the member is stopping and wants its targets moved first.
    pub leaving: bool,
    /// A member Lease the control plane fenced, and why.
    pub fence: Option<Fence>,
    /// A member Lease: the member's last overrun, if it had one.
    pub overrun: Option<Overrun>,
    /// A member Lease: its managed app's account of its work, if it has one.
    pub app_work: Option<AppWork>,
    /// A member Lease: its current term ([`member_term`]).
    pub term: Option<String>,
    /// A target Lease: the desired owner's term when the control plane chose it.
    pub desired_term: Option<String>,
    /// A target Lease handed over ([`handed_over`]): the new holder's term it was handed to.
    pub handed_term: Option<String>,
    /// A target Lease: an overlap hand-off ([`ANN_OVERLAP_MS`]) and its bound, in ms.
    pub overlap_ms: Option<i64>,
    /// A target Lease in an overlap hand-off: the desired owner's term and when (Unix ms) its
    /// app was proven to work on it ([`ANN_READY_TERM`], [`ANN_READY_AT`]).
    pub ready: Option<(String, Option<i64>)>,
    /// A target Lease handed over: when (Unix ms) the old holder's app last worked on it
    /// ([`ANN_STOPPED_AT`]).
    pub stopped_at_ms: Option<i64>,
    /// A plan Lease: the plan, if it reads as one ([`plan::Plan`]).
    pub plan: Option<std::sync::Arc<plan::Plan>>,
}

impl Holding {
    /// Reads the holder record of a Lease spec; an empty holder identity counts as free.
    pub fn of(spec: Option<&LeaseSpec>) -> Holding {
        let Some(s) = spec else {
            return Holding::default();
        };
        Holding {
            holder: s.holder_identity.clone().filter(|h| !h.is_empty()),
            acquire: s.acquire_time.as_ref().map(|t| t.0),
            renew: s.renew_time.as_ref().map(|t| t.0),
            duration_s: s.lease_duration_seconds.unwrap_or(0),
            transitions: s.lease_transitions.unwrap_or(0),
        }
    }
}

fn annotation<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

fn label<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.labels.as_ref()?.get(key).map(String::as_str)
}

/// Reads a Lease of cluster `cluster` in the native layout; `None` if it is not one.
pub fn parse_native(lease: &Lease, cluster: &str) -> Option<LeaseView> {
    let meta = &lease.metadata;
    if label(meta, LABEL_CLUSTER) != Some(cluster) {
        return None;
    }
    let role = match label(meta, LABEL_ROLE)? {
        ROLE_LEADER => LeaseRole::Leader,
        ROLE_TARGET => LeaseRole::Target(annotation(meta, ANN_TARGET_KEY)?.to_owned()),
        ROLE_MEMBER => LeaseRole::Member(annotation(meta, ANN_IDENTITY)?.to_owned()),
        plan::ROLE_PLAN => LeaseRole::Plan(annotation(meta, ANN_IDENTITY)?.to_owned()),
        _ => return None,
    };
    let plan = match &role {
        LeaseRole::Plan(member) => annotation(meta, plan::ANN_PLAN)
            .and_then(|p| plan::Plan::parse(member, p))
            .map(std::sync::Arc::new),
        _ => None,
    };
    let term = matches!(role, LeaseRole::Member(_)).then(|| member_term(lease));
    Some(LeaseView {
        name: meta.name.clone()?,
        resource_version: meta.resource_version.clone().unwrap_or_default(),
        role,
        holding: Holding::of(lease.spec.as_ref()),
        desired: annotation(meta, ANN_DESIRED_OWNER)
            .filter(|s| !s.is_empty())
            .map(str::to_owned),
        cause: annotation(meta, ANN_CAUSE).and_then(|c| c.parse().ok()),
        operation: annotation(meta, ANN_OPERATION)
            .filter(|s| !s.is_empty())
            .map(str::to_owned),
        desired_duration_s: annotation(meta, ANN_DURATION)
            .and_then(|d| d.parse().ok())
            .filter(|d| *d > 0),
        leaving: annotation(meta, ANN_LEAVING) == Some("true"),
        fence: match annotation(meta, ANN_FENCED) {
            Some("expired") => Some(Fence::Expired),
            Some("absent") => Some(Fence::Absent),
            _ => None,
        },
        overrun: annotation(meta, ANN_OVERRUN).and_then(Overrun::parse),
        app_work: annotation(meta, ANN_APP_WORK).and_then(AppWork::parse),
        term,
        desired_term: annotation(meta, ANN_DESIRED_TERM)
            .filter(|s| !s.is_empty())
            .map(str::to_owned),
        handed_term: annotation(meta, ANN_HANDED_TERM)
            .filter(|s| !s.is_empty())
            .map(str::to_owned),
        overlap_ms: annotation(meta, ANN_OVERLAP_MS)
            .and_then(|d| d.parse().ok())
            .filter(|d| *d > 0),
        ready: annotation(meta, ANN_READY_TERM)
            .filter(|s| !s.is_empty())
            .map(|t| {
                let at = annotation(meta, ANN_READY_AT).and_then(|a| a.parse().ok());
                (t.to_owned(), at)
            }),
        stopped_at_ms: annotation(meta, ANN_STOPPED_AT).and_then(|a| a.parse().ok()),
        plan,
    })
}

/// Reads a Lease of gnmic cluster `cluster` (keys `gnmic/<cluster>/leader` and
/// `gnmic/<cluster>/targets/<target>` in the `original-key` annotation). gnmic's holder
/// identity is a per-session UUID; the instance name is the `original-value` annotation, or,
/// on older gnmic, the label named after the Lease.
pub fn parse_gnmic(lease: &Lease, cluster: &str) -> Option<LeaseView> {
    let meta = &lease.metadata;
    let key = annotation(meta, GNMIC_KEY)?;
    let rest = key.strip_prefix("gnmic/")?.strip_prefix(cluster)?;
    let role = if rest == "/leader" {
        LeaseRole::Leader
    } else {
        LeaseRole::Target(rest.strip_prefix("/targets/")?.to_owned())
    };
    let name = meta.name.clone()?;
    let mut holding = Holding::of(lease.spec.as_ref());
    if holding.holder.is_some() {
        let instance = annotation(meta, GNMIC_VALUE)
            .or_else(|| label(meta, &key.replace('/', "-")))
            .filter(|v| !v.is_empty());
        holding.holder = instance.map(str::to_owned);
    }
    Some(LeaseView {
        name,
        resource_version: meta.resource_version.clone().unwrap_or_default(),
        role,
        holding,
        desired: None,
        cause: None,
        operation: None,
        desired_duration_s: None,
        leaving: false,
        fence: None,
        overrun: None,
        app_work: None,
        term: None,
        desired_term: None,
        handed_term: None,
        overlap_ms: None,
        ready: None,
        stopped_at_ms: None,
        plan: None,
    })
}

/// Reads a Lease of `cluster` in the given layout.
pub fn parse(protocol: Protocol, lease: &Lease, cluster: &str) -> Option<LeaseView> {
    match protocol {
        Protocol::Native => parse_native(lease, cluster),
        Protocol::Gnmic => parse_gnmic(lease, cluster),
    }
}

/// What the control plane asks of a target's Lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Desire {
    /// The member that should hold it.
    pub owner: String,
    /// Why.
    pub cause: Cause,
    /// The operation asking, if any.
    pub operation: Option<String>,
    /// Seconds members should promise when holding it.
    pub duration_s: i32,
    /// The owner's current term ([`member_term`]) as the control plane saw it, so
    /// that the member holding the target can hand it straight over ([`handed_over`]); `None`
    /// when not known (the holder then releases, and the owner acquires).
    pub term: Option<String>,
    /// An overlap hand-off, bounded by this many ms ([`ANN_OVERLAP_MS`]); `None`: exclusive.
    pub overlap_ms: Option<i64>,
}

fn set_label(meta: &mut ObjectMeta, key: &str, value: Option<&str>) {
    let labels = meta.labels.get_or_insert_with(Default::default);
    match value {
        Some(v) => labels.insert(key.to_owned(), names::identity_label(v)),
        None => labels.remove(key),
    };
}

fn desire_annotations(d: &Desire, into: &mut BTreeMap<String, String>) {
    into.insert(ANN_DESIRED_OWNER.into(), d.owner.clone());
    into.insert(ANN_CAUSE.into(), d.cause.as_str().into());
    into.insert(ANN_DURATION.into(), d.duration_s.to_string());
    match &d.operation {
        Some(op) => into.insert(ANN_OPERATION.into(), op.clone()),
        None => into.remove(ANN_OPERATION),
    };
    match &d.term {
        Some(t) => into.insert(ANN_DESIRED_TERM.into(), t.clone()),
        None => into.remove(ANN_DESIRED_TERM),
    };
    match d.overlap_ms {
        Some(ms) => into.insert(ANN_OVERLAP_MS.into(), ms.to_string()),
        None => into.remove(ANN_OVERLAP_MS),
    };
    // A proof of readiness belongs to the member term it was given by.
    if d.term.is_none() || into.get(ANN_READY_TERM) != d.term.as_ref() {
        into.remove(ANN_READY_TERM);
        into.remove(ANN_READY_AT);
    }
}

/// A member Lease's term: `<leaseTransitions>` and, when it has one, `@<uid>` — it changes with
/// every new term of the member (a take after a release or a fence raises `leaseTransitions`)
/// and when the Lease is deleted and created anew (a new uid), never within a term.
pub fn member_term(lease: &Lease) -> String {
    let transitions = lease
        .spec
        .as_ref()
        .and_then(|s| s.lease_transitions)
        .unwrap_or(0);
    match lease.metadata.uid.as_deref().filter(|u| !u.is_empty()) {
        Some(uid) => format!("{transitions}@{uid}"),
        None => transitions.to_string(),
    }
}

/// A new target Lease (control plane): labels, the raw key, the desired owner, no holder.
pub fn new_target_lease(prefix: &str, cluster: &str, key: &str, desire: &Desire) -> Lease {
    let mut annotations = BTreeMap::from([(ANN_TARGET_KEY.to_owned(), key.to_owned())]);
    desire_annotations(desire, &mut annotations);
    let mut metadata = ObjectMeta {
        name: Some(names::target_lease(prefix, cluster, key)),
        labels: Some(BTreeMap::from([
            (LABEL_CLUSTER.to_owned(), cluster.to_owned()),
            (LABEL_ROLE.to_owned(), ROLE_TARGET.to_owned()),
        ])),
        annotations: Some(annotations),
        ..Default::default()
    };
    set_label(&mut metadata, LABEL_DESIRED_OWNER, Some(&desire.owner));
    Lease {
        metadata,
        spec: Some(LeaseSpec::default()),
    }
}

/// `lease` with a new desired owner (control plane); spec untouched. The caller sends it with
/// the `resourceVersion` it was read at.
pub fn with_desire(lease: &Lease, desire: &Desire) -> Lease {
    let mut out = lease.clone();
    desire_annotations(
        desire,
        out.metadata
            .annotations
            .get_or_insert_with(Default::default),
    );
    set_label(&mut out.metadata, LABEL_DESIRED_OWNER, Some(&desire.owner));
    out.metadata.managed_fields = None;
    out
}

/// How the hand-over `view` shows went, if it was an overlap hand-off: proven (the new
/// holder's word, under the term it was handed, is on it) with the overlap in ms — from the
/// new holder's app proven working (`ready-at`, its clock) to the hand-over written after the
/// old holder's app was proven stopped (`acquireTime`, the old holder's clock) — or unproven.
pub fn overlap_of(view: &LeaseView) -> Option<(crate::model::Overlap, Option<i64>)> {
    view.overlap_ms?;
    let handed = view.handed_term.as_deref()?;
    match &view.ready {
        Some((term, at)) if term == handed => {
            let ms = match (view.holding.acquire, at) {
                (Some(acquired), Some(at)) => Some((acquired.as_millisecond() - at).max(0)),
                _ => None,
            };
            Some((crate::model::Overlap::Proven, ms))
        }
        _ => Some((crate::model::Overlap::Unproven, None)),
    }
}

/// `lease` with the desired owner `me`'s word that its app works on the target (member side,
/// an overlap hand-off): [`ANN_READY_TERM`] = `term`, [`ANN_READY_AT`] = `at_ms`; nothing
/// else changes. The holder hands over on it.
pub fn ready(lease: &Lease, term: &str, at_ms: i64) -> Lease {
    let mut out = lease.clone();
    out.metadata.managed_fields = None;
    let a = out
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    a.insert(ANN_READY_TERM.to_owned(), term.to_owned());
    a.insert(ANN_READY_AT.to_owned(), at_ms.to_string());
    out
}

/// `lease` revoked by the control plane: no holder, and the new desired owner in
/// the same write. Sent only once the holder's member Lease is fenced or released (see
/// `docs/protocol.md`).
pub fn revoked(lease: &Lease, desire: &Desire, now: Timestamp) -> Lease {
    released(&with_desire(lease, desire), now)
}

/// `lease` taken or renewed by `me` at `now`, as client-go's leader election writes it: a
/// holder change bumps `leaseTransitions` and sets `acquireTime`. Used for the leader Lease
/// (`k8s::election`); target Leases are taken with [`acquired`] and never renewed.
pub fn held_by(lease: &Lease, me: &str, now: Timestamp, duration_s: i32) -> Lease {
    let mut out = lease.clone();
    out.metadata.managed_fields = None;
    let spec = out.spec.get_or_insert_with(Default::default);
    let previous = spec.holder_identity.as_deref().filter(|h| !h.is_empty());
    if previous != Some(me) {
        spec.acquire_time = Some(MicroTime(now));
        if previous.is_some() || spec.lease_transitions.is_some() {
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        } else {
            spec.lease_transitions = Some(0);
        }
    }
    spec.holder_identity = Some(me.to_owned());
    spec.renew_time = Some(MicroTime(now));
    spec.lease_duration_seconds = Some(duration_s);
    out
}

/// `lease` acquired by `me` at `now` (member side): always a new hold (a Lease still naming
/// `me` from an earlier term is taken again, never continued), so `acquireTime` and the fencing
/// generation (`leaseTransitions`) move; the holder label is written with the holder.
pub fn acquired(lease: &Lease, me: &str, now: Timestamp, duration_s: i32) -> Lease {
    let mut out = lease.clone();
    out.metadata.managed_fields = None;
    set_label(&mut out.metadata, LABEL_HOLDER, Some(me));
    if let Some(a) = out.metadata.annotations.as_mut() {
        a.remove(ANN_HANDED_TERM);
        a.remove(ANN_STOPPED_AT);
    }
    let spec = out.spec.get_or_insert_with(Default::default);
    spec.acquire_time = Some(MicroTime(now));
    spec.lease_transitions = Some(match spec.lease_transitions {
        Some(n) => n + 1,
        None if spec
            .holder_identity
            .as_deref()
            .is_some_and(|h| !h.is_empty()) =>
        {
            1
        }
        None => 0,
    });
    spec.holder_identity = Some(me.to_owned());
    spec.renew_time = Some(MicroTime(now));
    spec.lease_duration_seconds = Some(duration_s);
    out
}

/// `lease` handed by its holder straight to `to` (member side), after the holder
/// stopped working on it: `to` holds it from `now` (`acquireTime`, the fencing generation
/// `leaseTransitions` + 1, the holder label), under the term `term` of `to` the control plane
/// wrote with the desired owner ([`ANN_HANDED_TERM`]). One write instead of a release and an
/// acquire: `to` starts working when it sees it, if `term` is still its term.
pub fn handed_over(lease: &Lease, to: &str, term: &str, now: Timestamp, duration_s: i32) -> Lease {
    let mut out = acquired(lease, to, now, duration_s);
    out.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(ANN_HANDED_TERM.to_owned(), term.to_owned());
    out
}

/// `lease` as the control plane writes it for `desire`: when it has no holder —
/// a new Lease, a free one, or one just revoked — and the desired owner's term is known, it is
/// **granted** to the owner in the same write ([`handed_over`], from nobody): the owner works
/// on it without a write of its own, as on a handed target. Otherwise unchanged.
pub fn granted(lease: &Lease, desire: &Desire, now: Timestamp) -> Lease {
    let free = Holding::of(lease.spec.as_ref()).holder.is_none();
    match &desire.term {
        Some(term) if free => handed_over(lease, &desire.owner, term, now, desire.duration_s),
        _ => lease.clone(),
    }
}

/// What the holder `me` of `lease` writes when it gives it up after stopping work: handed straight to the desired owner when that is another member whose term the
/// control plane wrote down ([`handed_over`]), else released.
pub fn given_up(lease: &Lease, me: &str, now: Timestamp) -> Lease {
    let meta = &lease.metadata;
    let desired = annotation(meta, ANN_DESIRED_OWNER).filter(|d| !d.is_empty() && *d != me);
    let term = annotation(meta, ANN_DESIRED_TERM).filter(|t| !t.is_empty());
    match (desired, term) {
        (Some(to), Some(term)) => {
            let duration_s = annotation(meta, ANN_DURATION)
                .and_then(|d| d.parse().ok())
                .filter(|d: &i32| *d > 0)
                .unwrap_or(RELEASED_DURATION_SECONDS);
            handed_over(lease, to, term, now, duration_s)
        }
        _ => released(lease, now),
    }
}

/// `lease` as [`given_up`] wrote it, with when the old holder's app last worked on the
/// target ([`ANN_STOPPED_AT`]) if it was handed over and that is known.
pub fn with_stopped_at(mut lease: Lease, me: &str, stopped_at_ms: Option<i64>) -> Lease {
    let handed = Holding::of(lease.spec.as_ref())
        .holder
        .is_some_and(|h| h != me);
    if let (true, Some(at)) = (handed, stopped_at_ms) {
        lease
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(ANN_STOPPED_AT.to_owned(), at.to_string());
    }
    lease
}

/// `lease` released (member side): no holder and a one-second duration, as client-go does;
/// the holder label goes with the holder.
pub fn released(lease: &Lease, now: Timestamp) -> Lease {
    let mut out = lease.clone();
    out.metadata.managed_fields = None;
    set_label(&mut out.metadata, LABEL_HOLDER, None);
    if let Some(a) = out.metadata.annotations.as_mut() {
        a.remove(ANN_HANDED_TERM);
        a.remove(ANN_STOPPED_AT);
    }
    let spec = out.spec.get_or_insert_with(Default::default);
    spec.holder_identity = None;
    spec.renew_time = Some(MicroTime(now));
    spec.lease_duration_seconds = Some(RELEASED_DURATION_SECONDS);
    out
}

/// A new member Lease of `identity`, held by it from `now`.
pub fn new_member_lease(
    prefix: &str,
    cluster: &str,
    identity: &str,
    now: Timestamp,
    duration_s: i32,
    leaving: bool,
) -> Lease {
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some(names::member_lease(prefix, cluster, identity)),
            labels: Some(BTreeMap::from([
                (LABEL_CLUSTER.to_owned(), cluster.to_owned()),
                (LABEL_ROLE.to_owned(), ROLE_MEMBER.to_owned()),
            ])),
            annotations: Some(BTreeMap::from([
                (ANN_IDENTITY.to_owned(), identity.to_owned()),
                (ANN_PROTOCOL_VERSIONS.to_owned(), "2".to_owned()),
            ])),
            ..Default::default()
        },
        spec: Some(LeaseSpec::default()),
    };
    member_renewed(&lease, identity, now, duration_s, leaving)
}

/// `lease` (a member Lease) renewed by its member, or taken again after it was released or
/// fenced — a new term: `leaseTransitions` moves and the fence annotation goes. `leaving` is
/// written as the member's current wish.
pub fn member_renewed(
    lease: &Lease,
    me: &str,
    now: Timestamp,
    duration_s: i32,
    leaving: bool,
) -> Lease {
    let mut out = held_by(lease, me, now, duration_s);
    let annotations = out
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    annotations.remove(ANN_FENCED);
    annotations.insert(ANN_PROTOCOL_VERSIONS.to_owned(), "2".to_owned());
    if leaving {
        annotations.insert(ANN_LEAVING.to_owned(), "true".to_owned());
    } else {
        annotations.remove(ANN_LEAVING);
    }
    out
}

/// `lease` (a member Lease) written by its member when it has no authority to go on from — its
/// renew deadline passed, or it is a new process: a new term even when the Lease still names
/// it (`leaseTransitions` + 1, `acquireTime` = now), so a target handed to it under the term
/// before is acquired by a write, never taken as it is, and each term's holds have generations
/// of their own.
pub fn member_taken_again(
    lease: &Lease,
    me: &str,
    now: Timestamp,
    duration_s: i32,
    leaving: bool,
) -> Lease {
    let mine = Holding::of(lease.spec.as_ref()).holder.as_deref() == Some(me);
    let mut out = member_renewed(lease, me, now, duration_s, leaving);
    if mine && let Some(spec) = out.spec.as_mut() {
        spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        spec.acquire_time = Some(MicroTime(now));
    }
    out
}

/// A managed app's own account of the work its member holds (managed gnmic: what gnmic's API
/// says it collects), as the member's agent last read it. It says whether the targets a member
/// holds are really worked on — a held target can be unworked (a device down, a start that
/// failed) — without a write per target: it rides the member Lease's renewals.
#[derive(
    Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema,
)]
pub struct AppWork {
    /// The app (`gnmic`).
    pub app: String,
    /// Whether the agent could read the app's state at all.
    pub reachable: bool,
    /// Targets the member holds.
    pub held: u32,
    /// Of those, the ones the app really works on.
    pub working: u32,
    /// Held targets the app does not work on, with why (at most [`AppWork::MAX_LISTED`]).
    pub not_working: BTreeMap<String, String>,
    /// Held targets not working beyond those listed.
    #[serde(default)]
    pub unlisted: u32,
    /// The app can start on a target ahead of its hand-over and prove it works
    /// (`Hooks::prepares`): this member can be the next owner in an overlap hand-off.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub prepares: bool,
    /// Held targets whose first work under their current hold the app proved lately (the
    /// scrape kind: its scraper's first scrape of a target handed to it), with when (Unix ms,
    /// by this member's clock); at most [`AppWork::MAX_STARTED`], the newest. With the old
    /// holder's [`ANN_STOPPED_AT`] the control plane records the hand-off's work-level gap.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub started: BTreeMap<String, i64>,
}

impl AppWork {
    /// Most targets listed by name: an annotation stays small (each Lease write carries it).
    pub const MAX_LISTED: usize = 50;
    /// Longest reason kept, in characters.
    pub const MAX_REASON: usize = 160;
    /// Most recent starts listed in [`AppWork::started`].
    pub const MAX_STARTED: usize = 200;

    /// The report for an app's targets: (target, working, why not).
    pub fn of<'a>(
        app: &str,
        reachable: bool,
        targets: impl IntoIterator<Item = (&'a str, bool, Option<&'a str>)>,
    ) -> AppWork {
        let mut w = AppWork {
            app: app.to_owned(),
            reachable,
            ..AppWork::default()
        };
        for (target, working, why) in targets {
            w.held += 1;
            if working {
                w.working += 1;
            } else if w.not_working.len() < Self::MAX_LISTED {
                let why: String = why
                    .unwrap_or("not working")
                    .chars()
                    .take(Self::MAX_REASON)
                    .collect();
                w.not_working.insert(target.to_owned(), why);
            } else {
                w.unlisted += 1;
            }
        }
        w
    }

    /// Whether `target` (held by this member) is worked on: `None` when it is not known (not
    /// listed, but unlisted ones exist).
    pub fn works_on(&self, target: &str) -> Option<bool> {
        if self.not_working.contains_key(target) {
            Some(false)
        } else if self.unlisted > 0 {
            None
        } else {
            Some(true)
        }
    }

    /// The annotation value.
    pub fn to_annotation(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Reads the annotation value; `None` if it is not one.
    pub fn parse(value: &str) -> Option<AppWork> {
        serde_json::from_str(value).ok()
    }
}

/// Writes the member's app's account of its work onto `lease` (its member Lease).
pub fn report_app_work(lease: &mut Lease, work: &AppWork) {
    lease
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(ANN_APP_WORK.to_owned(), work.to_annotation());
}

/// Writes the member's last overrun onto `lease` (its member Lease).
pub fn report_overrun(lease: &mut Lease, overrun: &Overrun) {
    lease
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(ANN_OVERRUN.to_owned(), overrun.to_annotation());
}

/// `lease` (a member Lease) fenced by the control plane: no holder, and why. After this, no
/// renewal the member sent before can succeed (they carry the older `resourceVersion`).
pub fn fenced(lease: &Lease, fence: Fence, now: Timestamp) -> Lease {
    let mut out = released(lease, now);
    out.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(ANN_FENCED.to_owned(), fence.as_str().to_owned());
    out
}

/// A fenced member Lease for `identity`, created by the control plane when a member holds
/// targets but has no member Lease ([`Fence::Absent`]).
pub fn new_fenced_member_lease(
    prefix: &str,
    cluster: &str,
    identity: &str,
    now: Timestamp,
    duration_s: i32,
) -> Lease {
    let lease = new_member_lease(prefix, cluster, identity, now, duration_s, false);
    let mut out = fenced(&lease, Fence::Absent, now);
    if let Some(spec) = out.spec.as_mut() {
        spec.lease_duration_seconds = Some(duration_s);
        spec.acquire_time = None;
        spec.lease_transitions = Some(0);
    }
    if let Some(a) = out.metadata.annotations.as_mut() {
        a.remove(ANN_PROTOCOL_VERSIONS);
    }
    out
}

/// One observer's view of whether a Lease has expired: the holder record must stay unchanged
/// for a full duration *by the observer's own clock* (milliseconds of any monotonic clock the
/// caller chooses: members use a monotonic clock; the control plane's index is fed wall-clock
/// times, which only affects when Leasehold *shows* a hold as expired) before it counts as
/// expired. Timestamps written by the holder are never
/// compared with the observer's clock, so clock skew cannot make two holders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observation {
    holding: Holding,
    since_ms: i64,
}

impl Observation {
    /// First sight of a record at `now_ms`.
    pub fn new(holding: Holding, now_ms: i64) -> Self {
        Self {
            holding,
            since_ms: now_ms,
        }
    }

    /// Records what was seen at `now_ms`; the clock restarts only when the record changed.
    /// Returns whether it changed.
    pub fn observe(&mut self, holding: &Holding, now_ms: i64) -> bool {
        if &self.holding == holding {
            return false;
        }
        self.holding = holding.clone();
        self.since_ms = now_ms;
        true
    }

    /// The record last seen.
    pub fn holding(&self) -> &Holding {
        &self.holding
    }

    /// When (observer's clock) the record last changed.
    pub fn since_ms(&self) -> i64 {
        self.since_ms
    }

    /// Free, or held by someone who has not renewed for a full duration as seen by us.
    pub fn is_free_or_expired(&self, now_ms: i64) -> bool {
        self.holding.holder.is_none() || self.is_expired(now_ms)
    }

    /// Held, but unchanged for a full duration (or more) as seen by us.
    pub fn is_expired(&self, now_ms: i64) -> bool {
        self.holding.holder.is_some()
            && now_ms - self.since_ms >= i64::from(self.holding.duration_s.max(0)) * 1000
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    fn desire(owner: &str) -> Desire {
        Desire {
            overlap_ms: None,
            owner: owner.into(),
            cause: Cause::Initial,
            operation: None,
            duration_s: 10,
            term: None,
        }
    }

    #[test]
    fn a_holder_hands_a_target_straight_to_its_desired_owner_under_the_owners_term() {
        let mut member = new_member_lease("lh", "c", "m-1", ts(50), 10, false);
        member.metadata.uid = Some("u-1".into());
        let term = member_term(&member);
        assert_eq!(term, "0@u-1");
        // A new term (taken again after a fence) and a new Lease (a new uid) are new terms.
        let again = member_renewed(
            &fenced(&member, Fence::Expired, ts(60)),
            "m-1",
            ts(61),
            10,
            false,
        );
        assert_eq!(member_term(&again), "1@u-1");
        assert_eq!(
            member_term(&member_renewed(&member, "m-1", ts(55), 10, false)),
            term
        );
        let view = parse_native(&again, "c").unwrap();
        assert_eq!(view.term.as_deref(), Some("1@u-1"));

        let lease = new_target_lease("lh", "c", "t", &desire("m-0"));
        let held = acquired(&lease, "m-0", ts(100), 10);
        let termed = |owner: &str| Desire {
            term: Some(term.clone()),
            ..desire(owner)
        };
        // Without the new owner's term the holder releases.
        let moved = with_desire(&held, &desire("m-1"));
        let out = given_up(&moved, "m-0", ts(110));
        let v = parse_native(&out, "c").unwrap();
        assert_eq!(v.holding.holder, None);
        assert_eq!(v.handed_term, None);
        // With it, it hands the target over: the new owner holds it, a new generation.
        let moved = with_desire(&held, &termed("m-1"));
        assert_eq!(
            parse_native(&moved, "c").unwrap().desired_term.as_deref(),
            Some("0@u-1")
        );
        let out = given_up(&moved, "m-0", ts(110));
        let v = parse_native(&out, "c").unwrap();
        assert_eq!(v.holding.holder.as_deref(), Some("m-1"));
        assert_eq!(v.handed_term.as_deref(), Some("0@u-1"));
        assert_eq!(v.holding.acquire, Some(ts(110)));
        assert_eq!(
            v.holding.transitions,
            parse_native(&held, "c").unwrap().holding.transitions + 1
        );
        assert_eq!(v.holding.duration_s, 10);
        assert_eq!(
            out.metadata
                .labels
                .as_ref()
                .unwrap()
                .get(LABEL_HOLDER)
                .map(String::as_str),
            Some("m-1")
        );
        // Still desired for the holder itself (shutting down): released, never handed to itself.
        let mine = with_desire(&held, &termed("m-0"));
        assert_eq!(
            Holding::of(given_up(&mine, "m-0", ts(110)).spec.as_ref()).holder,
            None
        );
        // The handed mark goes with any later holder write: the new owner's own acquire, a
        // release, a revoke.
        for later in [
            acquired(&out, "m-1", ts(120), 10),
            released(&out, ts(120)),
            revoked(&out, &desire("m-2"), ts(120)),
        ] {
            assert_eq!(parse_native(&later, "c").unwrap().handed_term, None);
        }
        // The control plane grants a target that has no holder to its desired owner in its
        // own write (a new Lease, a free one, one it revokes), never one held by a member.
        let to_m1 = termed("m-1");
        let fresh = granted(&new_target_lease("lh", "c", "u", &to_m1), &to_m1, ts(130));
        let v = parse_native(&fresh, "c").unwrap();
        assert_eq!(v.holding.holder.as_deref(), Some("m-1"));
        assert_eq!(v.handed_term.as_deref(), Some(term.as_str()));
        assert_eq!(v.holding.transitions, 0);
        let regranted = granted(&revoked(&out, &to_m1, ts(131)), &to_m1, ts(131));
        let v = parse_native(&regranted, "c").unwrap();
        assert_eq!(v.holding.holder.as_deref(), Some("m-1"));
        assert_eq!(
            v.holding.transitions,
            parse_native(&out, "c").unwrap().holding.transitions + 1
        );
        assert_eq!(
            granted(&with_desire(&held, &to_m1), &to_m1, ts(132)),
            with_desire(&held, &to_m1)
        );
        let unknown = granted(
            &new_target_lease("lh", "c", "u", &desire("m-1")),
            &desire("m-1"),
            ts(133),
        );
        assert_eq!(Holding::of(unknown.spec.as_ref()).holder, None);
        // A member that lost its authority writes a new term even when the Lease names it.
        let renewed = member_renewed(&member, "m-1", ts(56), 10, false);
        assert_eq!(member_term(&renewed), "0@u-1");
        assert_eq!(
            member_term(&member_taken_again(&renewed, "m-1", ts(70), 10, false)),
            "1@u-1"
        );

        // A desire without a term clears the one written before.
        let cleared = with_desire(&moved, &desire("m-2"));
        assert_eq!(parse_native(&cleared, "c").unwrap().desired_term, None);
    }

    #[test]
    fn native_round_trip() {
        let mut lease = new_target_lease("leasehold", "c", "Spine/1", &desire("m-0"));
        lease.metadata.resource_version = Some("7".into());
        let v = parse_native(&lease, "c").unwrap();
        assert_eq!(v.role, LeaseRole::Target("Spine/1".into()));
        assert_eq!(v.desired.as_deref(), Some("m-0"));
        assert_eq!(v.cause, Some(Cause::Initial));
        assert_eq!(v.desired_duration_s, Some(10));
        assert_eq!(v.holding.holder, None);
        assert!(parse_native(&lease, "other").is_none());

        let held = held_by(&lease, "m-0", ts(100), 10);
        let h = Holding::of(held.spec.as_ref());
        assert_eq!(h.holder.as_deref(), Some("m-0"));
        assert_eq!(h.transitions, 0);
        assert_eq!(h.acquire, Some(ts(100)));
        let renewed = held_by(&held, "m-0", ts(105), 10);
        let h2 = Holding::of(renewed.spec.as_ref());
        assert_eq!((h2.acquire, h2.renew), (Some(ts(100)), Some(ts(105))));
        let moved = with_desire(
            &renewed,
            &Desire {
                operation: Some("op-1".into()),
                cause: Cause::Rebalance,
                ..desire("m-1")
            },
        );
        assert_eq!(
            moved.spec, renewed.spec,
            "the control plane never touches spec"
        );
        let rel = released(&moved, ts(106));
        assert_eq!(Holding::of(rel.spec.as_ref()).holder, None);
        let taken = held_by(&rel, "m-1", ts(107), 10);
        assert_eq!(Holding::of(taken.spec.as_ref()).transitions, 1);
        let v = parse_native(&taken, "c").unwrap();
        assert_eq!(v.operation.as_deref(), Some("op-1"));
        assert_eq!(v.cause, Some(Cause::Rebalance));
    }

    #[test]
    fn an_apps_account_of_its_work_is_small_and_says_what_it_does_not_know() {
        let many: Vec<String> = (0..AppWork::MAX_LISTED + 3)
            .map(|i| format!("t-{i:03}"))
            .collect();
        let long = "x".repeat(500);
        let w = AppWork::of(
            "gnmic",
            true,
            std::iter::once(("ok", true, None)).chain(
                many.iter()
                    .map(|t| (t.as_str(), false, Some(long.as_str()))),
            ),
        );
        assert_eq!((w.held, w.working), (AppWork::MAX_LISTED as u32 + 4, 1));
        assert_eq!(w.not_working.len(), AppWork::MAX_LISTED);
        assert_eq!(w.unlisted, 3);
        assert!(
            w.not_working
                .values()
                .all(|r| r.chars().count() == AppWork::MAX_REASON)
        );
        assert_eq!(w.works_on("t-000"), Some(false));
        // Not listed, but some are unlisted: unknown.
        assert_eq!(w.works_on("ok"), None);
        let small = AppWork::of(
            "gnmic",
            true,
            [("a", true, None), ("b", false, Some("failed"))],
        );
        assert_eq!(small.works_on("a"), Some(true));
        assert_eq!(small.works_on("b"), Some(false));
        let mut lease = Lease::default();
        report_app_work(&mut lease, &small);
        let text = &lease.metadata.annotations.as_ref().unwrap()[ANN_APP_WORK];
        assert_eq!(AppWork::parse(text), Some(small));
    }

    #[test]
    fn an_overrun_report_rides_the_member_lease_through_renewals_and_fences() {
        let o = Overrun {
            at_ms: 1_700_000_000_123,
            late_ms: 8_231,
            targets: 75,
            total: 76,
        };
        let mut m = new_member_lease("leasehold", "c", "m-0", ts(100), 10, false);
        assert_eq!(parse_native(&m, "c").unwrap().overrun, None);
        report_overrun(&mut m, &o);
        assert_eq!(parse_native(&m, "c").unwrap().overrun, Some(o));
        let f = fenced(
            &member_renewed(&m, "m-0", ts(103), 10, false),
            Fence::Expired,
            ts(120),
        );
        assert_eq!(parse_native(&f, "c").unwrap().overrun, Some(o));
        assert_eq!(
            o.describe(),
            "paused 8.2 s past the end of its hold: the app was told to stop 75 targets late, \
             which another member may have taken meanwhile (76 overruns since it started)"
        );
        // Not ours, or garbled: no report, and the Lease still reads.
        m.metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(ANN_OVERRUN.into(), "8 s".into());
        let v = parse_native(&m, "c").unwrap();
        assert_eq!((v.role, v.overrun), (LeaseRole::Member("m-0".into()), None));
    }

    #[test]
    fn v2_member_lease_terms_fences_and_target_labels() {
        let m = new_member_lease("leasehold", "c", "m-0", ts(100), 10, false);
        let v = parse_native(&m, "c").unwrap();
        assert_eq!(v.role, LeaseRole::Member("m-0".into()));
        assert_eq!(
            (v.holding.holder.as_deref(), v.holding.transitions),
            (Some("m-0"), 0)
        );
        assert!(!v.leaving && v.fence.is_none());
        let leaving = member_renewed(&m, "m-0", ts(103), 10, true);
        let v = parse_native(&leaving, "c").unwrap();
        assert!(v.leaving);
        assert_eq!(v.holding.transitions, 0, "a renewal is not a new term");
        let f = fenced(&leaving, Fence::Expired, ts(120));
        let v = parse_native(&f, "c").unwrap();
        assert_eq!((v.holding.holder, v.fence), (None, Some(Fence::Expired)));
        let again = member_renewed(&f, "m-0", ts(121), 10, false);
        let v = parse_native(&again, "c").unwrap();
        assert_eq!(v.holding.transitions, 1, "registering again is a new term");
        assert!(v.fence.is_none() && !v.leaving);
        let absent = new_fenced_member_lease("leasehold", "c", "Odd/Name", ts(5), 15);
        let v = parse_native(&absent, "c").unwrap();
        assert_eq!(v.role, LeaseRole::Member("Odd/Name".into()));
        assert_eq!(
            (v.holding.holder, v.fence, v.holding.duration_s),
            (None, Some(Fence::Absent), 15)
        );

        // Target Leases: the desired owner and the holder as labels; an acquire is always a
        // new hold (the generation moves even when the Lease still names us).
        let t = new_target_lease("leasehold", "c", "k", &desire("Odd/Name"));
        let labels = |l: &Lease| l.metadata.labels.clone().unwrap_or_default();
        assert_eq!(
            labels(&t).get(LABEL_DESIRED_OWNER),
            Some(&names::identity_label("Odd/Name"))
        );
        let a = acquired(&t, "m-0", ts(200), 10);
        assert_eq!(
            labels(&a).get(LABEL_HOLDER).map(String::as_str),
            Some("m-0")
        );
        assert_eq!(Holding::of(a.spec.as_ref()).transitions, 0);
        let again = acquired(&a, "m-0", ts(210), 10);
        assert_eq!(Holding::of(again.spec.as_ref()).transitions, 1);
        let r = revoked(&again, &desire("m-1"), ts(220));
        assert_eq!(Holding::of(r.spec.as_ref()).holder, None);
        assert!(!labels(&r).contains_key(LABEL_HOLDER));
        assert_eq!(
            labels(&r).get(LABEL_DESIRED_OWNER).map(String::as_str),
            Some("m-1")
        );
        assert_eq!(
            parse_native(&r, "c").unwrap().desired.as_deref(),
            Some("m-1")
        );
    }

    #[test]
    fn gnmic_layout_is_read_by_original_key_and_value() {
        let key = "gnmic/lab/targets/Router-1";
        let lease: Lease = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "gnmic-lab-targets-router-1", "resourceVersion": "3",
                "labels": {"app": "gnmic"},
                "annotations": {"original-key": key, "original-value": "gnmic-1"}},
            "spec": {"holderIdentity": "3f1c-uuid", "leaseDurationSeconds": 10,
                "renewTime": "2026-11-22T10:00:00.000000Z"}
        }))
        .unwrap();
        let v = parse_gnmic(&lease, "lab").unwrap();
        assert_eq!(v.role, LeaseRole::Target("Router-1".into()));
        assert_eq!(v.holding.holder.as_deref(), Some("gnmic-1"));
        assert!(
            parse_gnmic(&lease, "la").is_none(),
            "prefix of another cluster"
        );
        // Older gnmic: the instance is in a label named after the lease.
        let old: Lease = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "gnmic-lab-leader",
                "labels": {"app": "gnmic", "gnmic-lab-leader": "gnmic-0"},
                "annotations": {"original-key": "gnmic/lab/leader"}},
            "spec": {"holderIdentity": "gnmic-0", "leaseDurationSeconds": 10}
        }))
        .unwrap();
        let v = parse_gnmic(&old, "lab").unwrap();
        assert_eq!(v.role, LeaseRole::Leader);
        assert_eq!(v.holding.holder.as_deref(), Some("gnmic-0"));
    }

    #[test]
    fn expiry_is_by_local_observation_only() {
        let held = Holding {
            holder: Some("a".into()),
            renew: Some(ts(0)),
            duration_s: 10,
            ..Default::default()
        };
        // A renewTime far in the past means nothing until we have watched for a duration.
        let mut o = Observation::new(held.clone(), 1_000_000);
        assert!(!o.is_expired(1_009_999));
        assert!(o.is_expired(1_010_000));
        // A renewal restarts the clock.
        let renewed = Holding {
            renew: Some(ts(5)),
            ..held.clone()
        };
        assert!(o.observe(&renewed, 1_010_001));
        assert!(!o.is_expired(1_015_000));
        assert!(!o.observe(&renewed, 1_016_000));
        assert!(o.is_free_or_expired(1_020_001));
        assert!(Observation::new(Holding::default(), 0).is_free_or_expired(0));
    }
}
