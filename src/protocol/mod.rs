//! The member protocol on `coordination.k8s.io/v1` Leases — the public contract in
//! `docs/protocol.md`, shared by the control plane (`engine`), the members (`agent`) and the
//! index (`k8s`). It owns the names, labels and annotations, reads a Lease into a
//! [`LeaseView`], and builds the one change each party is allowed to make: the control plane
//! writes only the desired owner (annotations), members write only the holder (`spec`). Every
//! write built here is sent as a compare-and-swap on `resourceVersion` by the caller. Pure: no
//! I/O, no clock (`now` is passed in).

pub mod names;

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};

use crate::model::Cause;

/// Label naming the cluster a Lease belongs to.
pub const LABEL_CLUSTER: &str = "leasehold.io/cluster";
/// Label naming the Lease's role: [`ROLE_LEADER`] or [`ROLE_TARGET`].
pub const LABEL_ROLE: &str = "leasehold.io/lease-role";
/// Value of [`LABEL_ROLE`] on a cluster's leader Lease.
pub const ROLE_LEADER: &str = "leader";
/// Value of [`LABEL_ROLE`] on a target Lease.
pub const ROLE_TARGET: &str = "target";
/// Annotation holding the raw target key (names may be hashed; this never is).
pub const ANN_TARGET_KEY: &str = "leasehold.io/target-key";
/// Annotation naming the member that should hold the target. Written only by the acting
/// control plane.
pub const ANN_DESIRED_OWNER: &str = "leasehold.io/desired-owner";
/// Annotation saying why the desired owner was set (a [`Cause`] word).
pub const ANN_CAUSE: &str = "leasehold.io/cause";
/// Annotation naming the operation that set the desired owner, if any.
pub const ANN_OPERATION: &str = "leasehold.io/operation";
/// Annotation with the lease duration (seconds) members should use when they hold the Lease.
pub const ANN_DURATION: &str = "leasehold.io/lease-duration-seconds";
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
        _ => return None,
    };
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
}

fn desire_annotations(d: &Desire, into: &mut BTreeMap<String, String>) {
    into.insert(ANN_DESIRED_OWNER.into(), d.owner.clone());
    into.insert(ANN_CAUSE.into(), d.cause.as_str().into());
    into.insert(ANN_DURATION.into(), d.duration_s.to_string());
    match &d.operation {
        Some(op) => into.insert(ANN_OPERATION.into(), op.clone()),
        None => into.remove(ANN_OPERATION),
    };
}

/// A new target Lease (control plane): labels, the raw key, the desired owner, no holder.
pub fn new_target_lease(prefix: &str, cluster: &str, key: &str, desire: &Desire) -> Lease {
    let mut annotations = BTreeMap::from([(ANN_TARGET_KEY.to_owned(), key.to_owned())]);
    desire_annotations(desire, &mut annotations);
    Lease {
        metadata: ObjectMeta {
            name: Some(names::target_lease(prefix, cluster, key)),
            labels: Some(BTreeMap::from([
                (LABEL_CLUSTER.to_owned(), cluster.to_owned()),
                (LABEL_ROLE.to_owned(), ROLE_TARGET.to_owned()),
            ])),
            annotations: Some(annotations),
            ..Default::default()
        },
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
    out.metadata.managed_fields = None;
    out
}

/// `lease` taken or renewed by `me` at `now` (member side): a holder change bumps
/// `leaseTransitions` and sets `acquireTime`, as client-go does.
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

/// `lease` released (member side): no holder and a one-second duration, as client-go does.
pub fn released(lease: &Lease, now: Timestamp) -> Lease {
    let mut out = lease.clone();
    out.metadata.managed_fields = None;
    let spec = out.spec.get_or_insert_with(Default::default);
    spec.holder_identity = None;
    spec.renew_time = Some(MicroTime(now));
    spec.lease_duration_seconds = Some(RELEASED_DURATION_SECONDS);
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
            owner: owner.into(),
            cause: Cause::Initial,
            operation: None,
            duration_s: 10,
        }
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
    fn gnmic_layout_is_read_by_original_key_and_value() {
        let key = "gnmic/lab/targets/Router-1";
        let lease: Lease = serde_json::from_value(serde_json::json!({
            "metadata": {"name": names::gnmic_lease(key), "resourceVersion": "3",
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
