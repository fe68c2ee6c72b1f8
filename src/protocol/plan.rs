//! Hand-over plans: one-write moves for a member that stops on purpose.
//!
//! A move costs two Lease writes when the control plane writes the desired owner and the holder
//! then hands the target over. For a member that is stopping (its pod terminating, or its
//! member Lease saying `leaving`) and holds thousands of targets, the control plane instead
//! writes **one plan** — a Lease of its own (`<prefix>-<cluster>-plan-<member>`, role `plan`,
//! labelled with the member as desired owner so that the member's own watch lists it) saying,
//! for the member's current term, which member (and under which of its terms) each target goes
//! to. The member then hands each target over in **one** compare-and-swap that writes the
//! desired owner with the hand-over ([`planned`]): the same Lease content as a desired-owner
//! write followed by a hand-over, without the state between them.
//!
//! A plan holds at most [`MAX_BYTES`] of keys; the control plane adds the rest as the member
//! hands the first over. Pure: no I/O, no clock.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

use super::{
    ANN_IDENTITY, Desire, LABEL_CLUSTER, LABEL_DESIRED_OWNER, LABEL_ROLE, LeaseView, names,
    set_label,
};
use crate::model::Cause;

/// Value of [`LABEL_ROLE`] on a hand-over plan.
pub const ROLE_PLAN: &str = "plan";
/// Annotation on a plan Lease: the plan (JSON, [`Wire`]).
pub const ANN_PLAN: &str = "leasehold.io/plan";
/// The most bytes of target keys one plan carries: the API server refuses an object whose
/// annotations exceed 256 KiB in all, and a plan is rewritten whole as targets leave it.
pub const MAX_BYTES: usize = 200 * 1024;

/// Where one target goes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Destination {
    /// The next owner.
    pub owner: String,
    /// Its term ([`super::member_term`]) when the control plane chose it.
    pub term: String,
}

/// A plan for one member: for its term `term`, the next owner of each target it lists.
#[derive(Clone, PartialEq, Eq)]
pub struct Plan {
    /// The member whose targets these are.
    pub member: String,
    /// The member's term the plan was made for: a member in another term ignores it.
    pub term: String,
    /// Seconds next owners promise when holding ([`super::ANN_DURATION`]).
    pub duration_s: i32,
    /// The next owner of each target, by key.
    pub moves: BTreeMap<String, Destination>,
}

/// Short: a plan may list thousands of moves, and it is logged with the write that carries it.
impl std::fmt::Debug for Plan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plan")
            .field("member", &self.member)
            .field("term", &self.term)
            .field("moves", &self.moves.len())
            .finish_non_exhaustive()
    }
}

/// The plan as the annotation carries it: keys grouped by destination.
#[derive(Debug, Serialize, Deserialize)]
struct Wire {
    term: String,
    duration_s: i32,
    to: Vec<WireDestination>,
}

#[derive(Debug, Serialize, Deserialize)]
struct WireDestination {
    owner: String,
    term: String,
    keys: Vec<String>,
}

impl Plan {
    /// The annotation value.
    pub fn to_annotation(&self) -> String {
        let mut to: HashMap<&Destination, Vec<String>> = HashMap::new();
        for (key, d) in &self.moves {
            to.entry(d).or_default().push(key.clone());
        }
        let mut to: Vec<WireDestination> = to
            .into_iter()
            .map(|(d, keys)| WireDestination {
                owner: d.owner.clone(),
                term: d.term.clone(),
                keys,
            })
            .collect();
        to.sort_by(|a, b| a.owner.cmp(&b.owner).then(a.term.cmp(&b.term)));
        serde_json::to_string(&Wire {
            term: self.term.clone(),
            duration_s: self.duration_s,
            to,
        })
        .unwrap_or_default()
    }

    /// Reads member `member`'s plan from its annotation; `None` if it is not one.
    pub fn parse(member: &str, value: &str) -> Option<Plan> {
        let wire: Wire = serde_json::from_str(value).ok()?;
        let mut moves = BTreeMap::new();
        for d in wire.to {
            let to = Destination {
                owner: d.owner,
                term: d.term,
            };
            for key in d.keys {
                moves.insert(key, to.clone());
            }
        }
        Some(Plan {
            member: member.to_owned(),
            term: wire.term,
            duration_s: wire.duration_s,
            moves,
        })
    }

    /// The desired owner a planned move of `key` writes with its hand-over, if `key` is in
    /// the plan.
    pub fn desire(&self, key: &str) -> Option<Desire> {
        let d = self.moves.get(key)?;
        Some(Desire {
            owner: d.owner.clone(),
            cause: Cause::Handoff,
            operation: None,
            duration_s: self.duration_s,
            term: Some(d.term.clone()),
            overlap_ms: None,
        })
    }

    /// How many bytes of keys a move of `key` adds to the annotation (its quotes and comma).
    pub fn cost(key: &str) -> usize {
        key.len() + 3
    }
}

/// The plan Lease of `plan` for cluster `cluster` (control plane), without a
/// `resourceVersion`: the caller creates it, or replaces the one it read.
pub fn lease(prefix: &str, cluster: &str, plan: &Plan) -> Lease {
    let mut metadata = ObjectMeta {
        name: Some(names::plan_lease(prefix, cluster, &plan.member)),
        labels: Some(BTreeMap::from([
            (LABEL_CLUSTER.to_owned(), cluster.to_owned()),
            (LABEL_ROLE.to_owned(), ROLE_PLAN.to_owned()),
        ])),
        annotations: Some(BTreeMap::from([
            (ANN_IDENTITY.to_owned(), plan.member.clone()),
            (ANN_PLAN.to_owned(), plan.to_annotation()),
        ])),
        ..Default::default()
    };
    set_label(&mut metadata, LABEL_DESIRED_OWNER, Some(&plan.member));
    Lease {
        metadata,
        spec: Some(LeaseSpec::default()),
    }
}

/// Whether `plan` applies to target `view` of member `me` in term `term`: the plan is
/// `me`'s for that term, and the target is held by `me`, desired for `me`, and in the plan.
/// Then its desired owner for a hand-over; `None` otherwise.
pub fn applies(plan: &Plan, view: &LeaseView, me: &str, term: Option<&str>) -> Option<Desire> {
    let super::LeaseRole::Target(key) = &view.role else {
        return None;
    };
    let mine = plan.member == me
        && term == Some(plan.term.as_str())
        && view.holding.holder.as_deref() == Some(me)
        && view.desired.as_deref() == Some(me);
    mine.then(|| plan.desire(key)).flatten()
}

/// `view` and its `lease` as the member `me` in term `term` acts on them under `plan`: with
/// the planned desired owner written in, so that the rules (`member::keep`) hand the target
/// over and [`super::given_up`] writes the desired owner with the hand-over — one write.
/// Unchanged when the plan does not apply ([`applies`]).
pub fn planned(
    plan: Option<&Plan>,
    lease: &Lease,
    view: &LeaseView,
    me: &str,
    term: Option<&str>,
) -> Option<(Lease, LeaseView)> {
    let desire = applies(plan?, view, me, term)?;
    let lease = super::with_desire(lease, &desire);
    let view = super::parse_native(&lease, cluster_of(&lease)?)?;
    Some((lease, view))
}

fn cluster_of(lease: &Lease) -> Option<&str> {
    lease
        .metadata
        .labels
        .as_ref()?
        .get(LABEL_CLUSTER)
        .map(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{self, LeaseRole, member::Keep};

    fn plan() -> Plan {
        let to = |owner: &str, term: &str| Destination {
            owner: owner.into(),
            term: term.into(),
        };
        Plan {
            member: "a".into(),
            term: "3@u".into(),
            duration_s: 10,
            moves: BTreeMap::from([
                ("t1".to_owned(), to("b", "1@x")),
                ("t2".to_owned(), to("c", "4@y")),
                ("t3".to_owned(), to("b", "1@x")),
            ]),
        }
    }

    #[test]
    fn a_plan_reads_back_as_written_and_its_lease_is_listed_for_its_member() {
        let p = plan();
        let lease = lease("lh", "c1", &p);
        let view = protocol::parse_native(&lease, "c1").expect("a plan Lease");
        assert_eq!(view.role, LeaseRole::Plan("a".into()));
        assert_eq!(view.plan.as_deref(), Some(&p));
        let labels = lease.metadata.labels.as_ref().unwrap();
        assert_eq!(
            labels.get(LABEL_DESIRED_OWNER).map(String::as_str),
            Some("a")
        );
        assert_eq!(lease.metadata.name.as_deref(), Some("lh-c1-plan-a"));
        // Grouped by destination on the wire: each destination's term once.
        assert_eq!(p.to_annotation().matches("1@x").count(), 1);
        assert_eq!(Plan::parse("a", "not json"), None);
    }

    fn held(key: &str, holder: &str, desired: &str) -> Lease {
        let d = Desire {
            owner: desired.into(),
            cause: Cause::Initial,
            operation: None,
            duration_s: 10,
            term: Some("3@u".into()),
            overlap_ms: None,
        };
        let lease = protocol::new_target_lease("lh", "c1", key, &d);
        protocol::acquired(&lease, holder, jiff::Timestamp::UNIX_EPOCH, 10)
    }

    #[test]
    fn a_planned_move_is_one_write_of_the_desired_owner_and_the_hand_over() {
        let p = plan();
        let lease = held("t1", "a", "a");
        let view = protocol::parse_native(&lease, "c1").unwrap();
        assert_eq!(
            protocol::member::keep(Some(&view), "a", false),
            Keep::Keep,
            "without the plan the member keeps it"
        );
        let (lease, view) = planned(Some(&p), &lease, &view, "a", Some("3@u")).expect("planned");
        assert_eq!(
            protocol::member::keep(Some(&view), "a", false),
            Keep::HandOver
        );
        let written = protocol::given_up(&lease, "a", jiff::Timestamp::UNIX_EPOCH);
        let after = protocol::parse_native(&written, "c1").unwrap();
        assert_eq!(after.holding.holder.as_deref(), Some("b"));
        assert_eq!(after.desired.as_deref(), Some("b"));
        assert_eq!(after.handed_term.as_deref(), Some("1@x"));
        assert_eq!(after.desired_term.as_deref(), Some("1@x"));
        assert_eq!(after.cause, Some(Cause::Handoff));
        let labels = written.metadata.labels.as_ref().unwrap();
        assert_eq!(
            labels.get(protocol::LABEL_HOLDER).map(String::as_str),
            Some("b")
        );
        assert_eq!(
            labels.get(LABEL_DESIRED_OWNER).map(String::as_str),
            Some("b")
        );
    }

    #[test]
    fn a_plan_applies_only_to_its_members_held_targets_in_its_term() {
        let p = plan();
        let cases = [
            // (key, holder, desired, me, term, applies)
            ("t1", "a", "a", "a", Some("3@u"), true),
            ("t1", "a", "a", "a", Some("4@u"), false), // another term of the member
            ("t1", "a", "a", "a", None, false),        // no term now
            ("t9", "a", "a", "a", Some("3@u"), false), // not in the plan
            ("t1", "a", "d", "a", Some("3@u"), false), // the control plane moved it elsewhere
            ("t1", "b", "a", "a", Some("3@u"), false), // not held by the member
            ("t1", "a", "a", "b", Some("3@u"), false), // another member's plan
        ];
        for (key, holder, desired, me, term, want) in cases {
            let lease = held(key, holder, desired);
            let view = protocol::parse_native(&lease, "c1").unwrap();
            assert_eq!(
                applies(&p, &view, me, term).is_some(),
                want,
                "{key} held by {holder}, desired for {desired}, seen by {me} in {term:?}"
            );
        }
    }
}
