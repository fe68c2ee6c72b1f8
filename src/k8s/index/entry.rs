//! The index's compact record of one Lease, and the interning of member names. At 50,000
//! target Leases the index is most of the control plane's memory, so a record keeps only what
//! the model and the change reports need, and every string that repeats across records (the
//! holder and desired-owner names, operation ids) is shared: one allocation per distinct name.
//!
//! The expiry rule is [`Observation`](crate::protocol::Observation)'s — the holder record must
//! stay unchanged for a full duration by the observer's clock — applied to the record's fields
//! kept here, compared exactly.

use std::collections::HashSet;
use std::sync::Arc;

use jiff::Timestamp;

use crate::k8s::model::{Liveness, MemberLease};
use crate::protocol::{AppWork, Fence, Holding, LeaseView};

/// Shared copies of strings that repeat across records.
#[derive(Debug, Default)]
pub(super) struct Interner {
    names: HashSet<Arc<str>>,
    /// Size at which unused names are dropped next (doubles with the live set).
    prune_at: usize,
}

/// Fewest interned names before unused ones are dropped.
const PRUNE_FLOOR: usize = 4096;

impl Interner {
    /// The shared copy of `s`.
    pub(super) fn get(&mut self, s: &str) -> Arc<str> {
        if let Some(a) = self.names.get(s) {
            return a.clone();
        }
        if self.names.len() >= self.prune_at.max(PRUNE_FLOOR) {
            // Names nobody refers to any more (departed members, finished operations).
            self.names.retain(|a| Arc::strong_count(a) > 1);
            self.prune_at = self.names.len() * 2;
        }
        let a: Arc<str> = Arc::from(s);
        self.names.insert(a.clone());
        a
    }

    fn opt(&mut self, s: Option<&str>) -> Option<Arc<str>> {
        s.map(|s| self.get(s))
    }
}

/// What a newer copy of a Lease changed, as the model sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Observed {
    /// Nothing.
    Same,
    /// Only the renew time of a live hold: the model differs only in ages (how long since a
    /// renewal), which readers may see a little late.
    Renewed,
    /// The holder record (a new holder, a release, a revived expired hold), the desired owner
    /// or the operation.
    Changed,
}

/// One Lease as the index keeps it.
#[derive(Debug, Clone)]
pub(super) struct LeaseEntry {
    /// The Lease's name.
    pub(super) name: Arc<str>,
    /// Who holds it (`None` when free or released).
    pub(super) holder: Option<Arc<str>>,
    pub(super) acquire: Option<Timestamp>,
    renew: Option<Timestamp>,
    duration_s: i32,
    transitions: i32,
    /// When (observer's clock, ms) the holder record last changed.
    pub(super) since_ms: i64,
    /// The desired owner set by the control plane.
    pub(super) desired: Option<Arc<str>>,
    /// When (observer's clock, ms) the desired owner last changed: how long a free target has
    /// waited for *this* owner is measured from the later of this and [`Self::since_ms`].
    pub(super) desired_since_ms: i64,
    /// The operation that set it.
    pub(super) operation: Option<Arc<str>>,
    /// The last non-empty holder, kept across a release so the next acquire can name it.
    pub(super) last_holder: Option<Arc<str>>,
}

impl LeaseEntry {
    /// First sight of a Lease at `now_ms`.
    pub(super) fn new(name: Arc<str>, view: &LeaseView, now_ms: i64, ix: &mut Interner) -> Self {
        let h = &view.holding;
        let holder = ix.opt(h.holder.as_deref());
        Self {
            name,
            last_holder: holder.clone(),
            holder,
            acquire: h.acquire,
            renew: h.renew,
            duration_s: h.duration_s,
            transitions: h.transitions,
            since_ms: now_ms,
            desired: ix.opt(view.desired.as_deref()),
            desired_since_ms: now_ms,
            operation: ix.opt(view.operation.as_deref()),
        }
    }

    /// Takes in a newer copy seen at `now_ms`; the expiry clock restarts only when the holder
    /// record changed. Says what changed, as the model sees it.
    pub(super) fn observe(&mut self, view: &LeaseView, now_ms: i64, ix: &mut Interner) -> Observed {
        let mut seen = Observed::Same;
        if self.desired.as_deref() != view.desired.as_deref() {
            self.desired = ix.opt(view.desired.as_deref());
            self.desired_since_ms = now_ms;
            seen = Observed::Changed;
        }
        if self.operation.as_deref() != view.operation.as_deref() {
            self.operation = ix.opt(view.operation.as_deref());
            seen = Observed::Changed;
        }
        let h = &view.holding;
        if self.same_record(h) {
            return seen;
        }
        let renewal = self.holder.is_some()
            && self.holder.as_deref() == h.holder.as_deref()
            && self.acquire == h.acquire
            && self.duration_s == h.duration_s
            && self.transitions == h.transitions
            && !self.is_expired(now_ms);
        if seen == Observed::Same && renewal {
            seen = Observed::Renewed;
        } else {
            seen = Observed::Changed;
        }
        if self.holder.as_deref() != h.holder.as_deref() {
            self.holder = ix.opt(h.holder.as_deref());
        }
        if self.holder.is_some() {
            self.last_holder = self.holder.clone();
        }
        self.acquire = h.acquire;
        self.renew = h.renew;
        self.duration_s = h.duration_s;
        self.transitions = h.transitions;
        self.since_ms = now_ms;
        seen
    }

    /// The holder record as last seen.
    pub(super) fn record(&self) -> Holding {
        Holding {
            holder: self.holder.as_deref().map(str::to_owned),
            acquire: self.acquire,
            renew: self.renew,
            duration_s: self.duration_s,
            transitions: self.transitions,
        }
    }

    fn same_record(&self, h: &Holding) -> bool {
        self.holder.as_deref() == h.holder.as_deref()
            && self.acquire == h.acquire
            && self.renew == h.renew
            && self.duration_s == h.duration_s
            && self.transitions == h.transitions
    }

    /// Held, but unchanged for a full duration (or more) as seen by us.
    pub(super) fn is_expired(&self, now_ms: i64) -> bool {
        self.holder.is_some() && now_ms - self.since_ms >= self.expires_ms()
    }

    /// When (observer's clock, ms) the hold expires unless its record changes first; `None`
    /// when not held.
    pub(super) fn expires_at_ms(&self) -> Option<i64> {
        self.holder
            .as_ref()
            .map(|_| self.since_ms + self.expires_ms())
    }

    pub(super) fn expires_ms(&self) -> i64 {
        i64::from(self.duration_s.max(0)) * 1000
    }

    /// How long the target had no live holder working on it, by our observation, when a new
    /// holder is seen at `now_ms` (call it before [`LeaseEntry::observe`] takes the new record
    /// in): from the previous holder's last sign of life for it to the new holder's Lease.
    ///
    /// - Released (or revoked) and seen so: from the release being seen — except a failover in
    ///   a native cluster, which counts from the previous holder's member Lease last seen
    ///   renewed (it may have stopped working any time after that).
    /// - Taken over with no release seen: in gnmic's layout, from the last renewal seen if the
    ///   hold had expired by our clock (its holder went silent), else 0 (its release fell
    ///   between two observations); in a native cluster, from the member Lease last seen
    ///   renewed for a failover, else 0.
    ///
    /// For a failover this is an upper bound: a member that obeys its renew deadline may have
    /// worked up to `2D/3` past its last renewal. `None` unless the new holder differs from the
    /// last one: a first owner or a re-acquire by the same member is not a handoff.
    pub(super) fn handoff_gap_ms(
        &self,
        new_holder: Option<&str>,
        now_ms: i64,
        previous: PreviousHold,
    ) -> Option<i64> {
        let from = self.last_holder.as_deref()?;
        if new_holder.is_none_or(|to| to == from) {
            return None;
        }
        let ended = match (self.holder.is_some(), previous) {
            (false, PreviousHold::Renewed) => self.since_ms,
            (false, PreviousHold::Member { last_alive_ms }) => {
                last_alive_ms.map_or(self.since_ms, |a| a.min(self.since_ms))
            }
            (true, PreviousHold::Renewed) if self.is_expired(now_ms) => self.since_ms,
            (true, PreviousHold::Renewed) => now_ms,
            (true, PreviousHold::Member { last_alive_ms }) => last_alive_ms.unwrap_or(now_ms),
            (_, PreviousHold::Handed { at_ms }) => at_ms.unwrap_or(now_ms).min(now_ms),
        };
        Some((now_ms - ended).max(0))
    }
}

/// How a target's previous hold lasted, for [`LeaseEntry::handoff_gap_ms`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PreviousHold {
    /// gnmic's layout: its holder renewed the target Lease; a record unchanged for its duration
    /// had expired.
    Renewed,
    /// Native clusters: target Leases are never renewed; the hold lasted while its holder's member
    /// Lease did. `last_alive_ms`: for a failover, when the previous holder's member Lease was
    /// last seen renewed by it (`None` for any other move, or when it is not known).
    Member { last_alive_ms: Option<i64> },
    /// Handed straight to the new holder by the previous one
    /// (`protocol::handed_over`) at `at_ms` (the write's `acquireTime`, by the previous
    /// holder's clock), after its work had stopped.
    Handed { at_ms: Option<i64> },
}

/// A member Lease as the index keeps it.
#[derive(Debug, Clone)]
pub(super) struct MemberEntry {
    pub(super) entry: LeaseEntry,
    pub(super) leaving: bool,
    pub(super) fence: Option<Fence>,
    /// When (observer's clock, ms) the member was last seen writing its Lease (a renewal or a
    /// new term), or first seen: its last sign of life, which a failover's gap counts from.
    pub(super) alive_ms: i64,
    /// Its [`Heartbeat`] when live views were last told (see `Index::heartbeats`).
    pub(super) shown: Heartbeat,
    /// Its term as last seen ([`crate::protocol::member_term`]).
    pub(super) term: Option<String>,
    /// Its managed app's account of its work, as last written.
    pub(super) app_work: Option<AppWork>,
}

/// How a held member Lease's silence looks by the clock alone, as the dashboard shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum Heartbeat {
    /// Renewed within two thirds of its duration (or not held).
    #[default]
    Fresh,
    /// Unchanged for over two thirds of its duration: it missed renewals and passed its own
    /// renew deadline.
    Late,
    /// Unchanged for its whole duration.
    Lost,
}

impl MemberEntry {
    /// First sight at `now_ms`.
    pub(super) fn new(name: Arc<str>, view: &LeaseView, now_ms: i64, ix: &mut Interner) -> Self {
        Self {
            entry: LeaseEntry::new(name, view, now_ms, ix),
            leaving: view.leaving,
            fence: view.fence,
            alive_ms: now_ms,
            shown: Heartbeat::Fresh,
            term: view.term.clone(),
            app_work: view.app_work.clone(),
        }
    }

    /// Its heartbeat at `now_ms` by the clock alone.
    pub(super) fn heartbeat(&self, now_ms: i64) -> Heartbeat {
        let e = &self.entry;
        let (silent, d) = (now_ms - e.since_ms, e.expires_ms());
        match e.holder {
            Some(_) if silent >= d => Heartbeat::Lost,
            Some(_) if silent * 3 > d * 2 => Heartbeat::Late,
            _ => Heartbeat::Fresh,
        }
    }

    /// Takes in a newer copy; whether the model changed beyond ages.
    pub(super) fn observe(&mut self, view: &LeaseView, now_ms: i64, ix: &mut Interner) -> bool {
        let flags = self.leaving != view.leaving
            || self.fence != view.fence
            || self.app_work != view.app_work;
        self.leaving = view.leaving;
        self.fence = view.fence;
        self.app_work.clone_from(&view.app_work);
        self.term.clone_from(&view.term);
        let seen = self.entry.observe(view, now_ms, ix);
        // Only the member itself writes its Lease with a holder (the control plane's fence
        // empties it).
        if seen != Observed::Same && self.entry.holder.is_some() {
            self.alive_ms = now_ms;
        }
        flags || seen == Observed::Changed
    }

    /// How alive `identity` is at `now_ms`, by this record, with expiry judged at `judged_ms`
    /// (see `ClusterState::judged_at`; `now_ms` when no proof is required).
    pub(super) fn state(&self, identity: &str, now_ms: i64, judged_ms: i64) -> MemberLease {
        let e = &self.entry;
        let unchanged_ms = Some(now_ms - e.since_ms);
        let (liveness, revocable) = match (e.holder.as_deref(), self.fence) {
            (Some(h), _) if h == identity => {
                if e.is_expired(judged_ms) {
                    (Liveness::Expired, false)
                } else if self.leaving {
                    (Liveness::Leaving, false)
                } else {
                    (Liveness::Live, false)
                }
            }
            // Held by another identity: not a record this member can work under.
            (Some(_), _) => (Liveness::Absent, false),
            (None, None) => (Liveness::Released, true),
            (None, Some(Fence::Expired)) => (Liveness::Fenced, true),
            (None, Some(Fence::Absent)) => (
                Liveness::Fenced,
                now_ms - e.since_ms >= i64::from(e.duration_s.max(1)) * 1000,
            ),
        };
        MemberLease {
            liveness,
            unchanged_ms,
            duration_ms: Some(i64::from(e.duration_s) * 1000),
            revocable,
            term: matches!(liveness, Liveness::Live | Liveness::Leaving)
                .then(|| self.term.clone())
                .flatten(),
            app_work: self.app_work.clone(),
        }
    }

    /// When (observer's clock, ms) [`Self::state`] changes by the clock alone, if it will.
    pub(super) fn changes_at_ms(&self) -> Option<i64> {
        match (self.entry.holder.as_ref(), self.fence) {
            (Some(_), _) => self.entry.expires_at_ms(),
            (None, Some(Fence::Absent)) => {
                Some(self.entry.since_ms + i64::from(self.entry.duration_s.max(1)) * 1000)
            }
            (None, _) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Holding, LeaseRole, Observation};

    fn view(holder: Option<&str>, renew_s: i64, duration_s: i32) -> LeaseView {
        LeaseView {
            ready: None,
            overlap_ms: None,
            stopped_at_ms: None,
            plan: None,
            name: "l".into(),
            resource_version: "1".into(),
            role: LeaseRole::Target("k".into()),
            holding: Holding {
                holder: holder.map(str::to_owned),
                acquire: Some(Timestamp::from_second(1).unwrap()),
                renew: Some(Timestamp::from_second(renew_s).unwrap()),
                duration_s,
                transitions: 0,
            },
            desired: holder.map(str::to_owned),
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
        }
    }

    /// The compact record expires exactly when the protocol's `Observation` does, through a
    /// sequence of renewals, a silence and a release.
    #[test]
    fn expires_like_an_observation() {
        let mut ix = Interner::default();
        let steps = [
            (0, view(Some("a"), 10, 10)),
            (3_000, view(Some("a"), 13, 10)),
            (9_000, view(Some("a"), 13, 10)),
            (12_999, view(Some("a"), 13, 10)),
            (13_000, view(Some("a"), 13, 10)),
            (14_000, view(None, 13, 1)),
            (20_000, view(Some("b"), 20, 5)),
        ];
        let mut e = LeaseEntry::new("l".into(), &steps[0].1, 0, &mut ix);
        let mut o = Observation::new(steps[0].1.holding.clone(), 0);
        for (now, v) in &steps[1..] {
            assert_eq!(
                e.observe(v, *now, &mut ix) != Observed::Same,
                o.observe(&v.holding, *now),
                "at {now}"
            );
            for probe in [*now, now + 999, now + 5_000, now + 10_000] {
                assert_eq!(e.is_expired(probe), o.is_expired(probe), "at {now}+{probe}");
            }
        }
        assert_eq!(e.last_holder.as_deref(), Some("b"));
    }

    /// The gap a handoff reports in gnmic's layout: from the observed release, or from the last renewal of
    /// a hold that expired by our clock, to the observed acquire; none for a first owner or
    /// the same member again.
    #[test]
    fn handoff_gap_counts_from_release_or_last_renewal() {
        let renewed = PreviousHold::Renewed;
        let mut ix = Interner::default();
        let mut e = LeaseEntry::new("l".into(), &view(None, 1, 1), 0, &mut ix);
        assert_eq!(
            e.handoff_gap_ms(Some("a"), 500, renewed),
            None,
            "first owner"
        );
        e.observe(&view(Some("a"), 1, 10), 500, &mut ix);
        assert_eq!(
            e.handoff_gap_ms(Some("a"), 800, renewed),
            None,
            "same holder"
        );
        assert_eq!(e.handoff_gap_ms(None, 800, renewed), None, "no new holder");
        // Released at 2,000, taken by b at 2,750.
        e.observe(&view(None, 2, 1), 2_000, &mut ix);
        assert_eq!(e.handoff_gap_ms(Some("b"), 2_750, renewed), Some(750));
        assert_eq!(e.handoff_gap_ms(Some("a"), 2_750, renewed), None, "a again");
        // b renews at 3,000 for 10 s and goes silent: expired at 13,000, c takes it at 14,200:
        // b was last seen alive at 3,000.
        e.observe(&view(Some("b"), 3, 10), 3_000, &mut ix);
        assert_eq!(e.handoff_gap_ms(Some("c"), 14_200, renewed), Some(11_200));
        // c is seen taking over before b's hold expired by our clock: no gap seen.
        assert_eq!(e.handoff_gap_ms(Some("c"), 9_000, renewed), Some(0));
    }

    /// A native target Lease is never renewed, so its age says nothing; a handoff counts
    /// from the release seen, a failover from the old holder's member Lease last seen renewed.
    #[test]
    fn handoff_gap_in_native_clusters_counts_a_failover_from_the_members_last_renewal() {
        let handoff = PreviousHold::Member {
            last_alive_ms: None,
        };
        let failover = |at| PreviousHold::Member {
            last_alive_ms: Some(at),
        };
        let mut ix = Interner::default();
        let mut e = LeaseEntry::new("l".into(), &view(Some("a"), 1, 10), 0, &mut ix);
        // Held for a minute, never renewed: a takeover seen without the release is no gap for
        // a handoff (not "expired" for 50 s), and from the member's last renewal for a failover.
        assert_eq!(e.handoff_gap_ms(Some("b"), 60_000, handoff), Some(0));
        assert_eq!(
            e.handoff_gap_ms(Some("b"), 60_000, failover(51_000)),
            Some(9_000)
        );
        // Released (or revoked) at 61,000, taken at 61,040.
        e.observe(&view(None, 61, 10), 61_000, &mut ix);
        assert_eq!(e.handoff_gap_ms(Some("b"), 61_040, handoff), Some(40));
        assert_eq!(
            e.handoff_gap_ms(Some("b"), 61_040, failover(52_000)),
            Some(9_040)
        );
        // A member seen alive after the revoke (it came back): from the revoke.
        assert_eq!(
            e.handoff_gap_ms(Some("b"), 61_040, failover(61_020)),
            Some(40)
        );
    }

    #[test]
    fn names_are_shared_and_unused_ones_dropped() {
        let mut ix = Interner::default();
        let a1 = ix.get("member-1");
        let a2 = ix.get("member-1");
        assert!(Arc::ptr_eq(&a1, &a2));
        for i in 0..PRUNE_FLOOR * 2 {
            drop(ix.get(&format!("gone-{i}")));
        }
        assert!(ix.names.len() < PRUNE_FLOOR + 2, "{}", ix.names.len());
        assert!(
            Arc::ptr_eq(&a1, &ix.get("member-1")),
            "a name in use survives pruning"
        );
    }
}
