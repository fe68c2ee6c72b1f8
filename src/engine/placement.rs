//! What the acting control plane does to a cluster on every reconcile, decided purely from the
//! model: give a home to every target without a live desired owner (first placement, or
//! failover when its owner's pod is gone, not ready, terminating, or stopped renewing), adopt
//! targets already held before Leasehold managed them, and remove Leases of targets no longer
//! configured. Targets of a member stopping on purpose are moved by one hand-over plan for it
//! (`protocol::plan`), which the member carries out one write per target, instead of a
//! desired-owner write each. Targets inside a running operation are left to it. Fence silent members, revoke the holds of fenced and stopped ones, delete the member Leases of departed
//! pods — except when many members lapse at once ([`MassLapse`]: more likely a slow API server
//! than dead members), when at most one lapsed member is failed over per lease duration — none
//! while the lapse shows the server slow ([`Decision::server_slow`]) — and the others keep
//! their targets. No I/O: the control loop carries out the returned actions as
//! compare-and-swap writes.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::Duration;

pub use crate::config::DEFAULT_MASS_LAPSE_SHARE;
use crate::engine::planner::{self, Member, MemberState};
use crate::k8s::model::{ClusterModel, Instance, Liveness, Target, TargetState};
use crate::model::Cause;
use crate::protocol::plan::{self, Destination, Plan};
use crate::protocol::{Desire, Protocol};

/// One write to make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Set (or create the Lease with) a desired owner. `expect` is the desired owner this was
    /// decided from: if the Lease says otherwise when written, someone else decided first.
    Desire {
        /// Target key.
        key: String,
        /// What to write.
        desire: Desire,
        /// The desired owner seen when deciding.
        expect: Option<String>,
        /// The holder to clear in the same write, if its member Lease is still
        /// fenced or released on a fresh read.
        revoke: Option<String>,
        /// The model has no Lease for the target: it is created without a read first
        /// ([`crate::k8s::leases::set_desire`]).
        absent: bool,
    },
    /// Fence `member`'s member Lease — its record was seen unchanged for a full
    /// duration (or it has none) — so that its holds can be revoked.
    Fence {
        /// The member.
        member: String,
    },
    /// Clear the holder of target `key`, held by `holder` whose member Lease is
    /// fenced or released, leaving the desired owner as it is.
    Revoke {
        /// Target key.
        key: String,
        /// The holder to clear.
        holder: String,
    },
    /// Delete the member Lease of a member whose pod is gone, that holds nothing
    /// and stopped (released) or was fenced — if a fresh read still says so.
    DeleteMember {
        /// The member.
        member: String,
    },
    /// Delete the Lease of a target that is no longer configured.
    Delete {
        /// Target key.
        key: String,
        /// Its Lease.
        lease: String,
    },
    /// Write a stopping member's hand-over plan ([`crate::protocol::plan`]): create it, or
    /// replace the copy seen at `expect`.
    Plan {
        /// The plan.
        plan: Plan,
        /// The `resourceVersion` of the plan Lease seen when deciding (`None`: there was none).
        expect: Option<String>,
    },
    /// Delete a hand-over plan that has nothing left to move, if still as seen.
    DeletePlan {
        /// The member it was for.
        member: String,
        /// Its Lease.
        lease: String,
        /// Its `resourceVersion` when seen.
        resource_version: String,
    },
}

/// A live member: a ready pod, not terminating, and a live member Lease that
/// does not say it is leaving (cordoned members are live: they keep what they have).
pub fn alive(i: &Instance) -> bool {
    i.ready && !i.ghost && !i.terminating && i.heartbeat_ok()
}

/// A desired owner that leaves its target free this long (e.g. its agent stopped while its pod
/// stays ready) loses it, in multiples of the lease duration: long enough that a busy member
/// still acquiring is not mistaken for an absent one.
pub const STALLED_AFTER_DURATIONS: i64 = 2;

/// How long free target `t` has waited for its desired owner: since the later of its holder
/// record's last change (a release) and its desired owner's last change. A target that just
/// failed over from a member that released it long ago has waited for its new owner only
/// since the failover — measuring from the release alone sent such targets straight on, and
/// back to the stopped member.
fn waited_ms(t: &Target) -> Option<i64> {
    match (t.unchanged_ms, t.desired_unchanged_ms) {
        (Some(holder), Some(desired)) => Some(holder.min(desired)),
        (one, None) | (None, one) => one,
    }
}

/// Whether `t`'s desired owner is failing it: holding it expired, or leaving it free for
/// [`STALLED_AFTER_DURATIONS`] lease durations.
fn neglected(t: &Target, duration_ms: i64) -> bool {
    let expired_on_desired = t.state == TargetState::Expired && t.owner == t.desired;
    let stalled = t.desired.is_some()
        && t.owner.is_none()
        && waited_ms(t).is_some_and(|ms| ms >= STALLED_AFTER_DURATIONS * duration_ms);
    expired_on_desired || stalled
}

/// How long after `model` was built the first free target could become neglected by the
/// clock alone ([`STALLED_AFTER_DURATIONS`]); `None` if no target is waiting for its desired
/// owner. With expiries (which the view tracks), this is the only way [`decide`]'s answer
/// changes while the index does not: the control loop need not decide again before then.
pub fn quiet_for(model: &ClusterModel, duration_ms: i64) -> Option<Duration> {
    model
        .targets
        .iter()
        .filter(|t| t.desired.is_some() && t.owner.is_none())
        .filter_map(waited_ms)
        .map(|ms| STALLED_AFTER_DURATIONS * duration_ms - ms)
        .min()
        .map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(0)))
}

/// The planner's view of the model's instances. A member that neglects targets desired for it
/// although its pod is ready (a hung or stopped agent) receives nothing new; the neglected
/// targets fail over, the ones it still renews stay.
pub fn members(model: &ClusterModel, duration_ms: i64) -> Vec<Member> {
    members_sparing(model, duration_ms, &HashSet::new(), &HashSet::new())
}

/// [`members`], with `spared` lapsed members kept as if live and `closed` ones (live or
/// spared) given nothing new.
fn members_sparing(
    model: &ClusterModel,
    duration_ms: i64,
    spared: &HashSet<&str>,
    closed: &HashSet<&str>,
) -> Vec<Member> {
    let mut hung: HashSet<&str> = model
        .targets
        .iter()
        .filter(|t| neglected(t, duration_ms))
        .filter_map(|t| t.desired.as_deref())
        .collect();
    // If every eligible member looks hung, suspicion helps nobody: targets of a vanished pod
    // are better placed on a live pod than left where no pod exists.
    if model
        .instances
        .iter()
        .all(|i| !i.eligible() || hung.contains(i.name.as_str()))
    {
        hung.clear();
    }
    model
        .instances
        .iter()
        .map(|i| Member {
            id: i.name.clone(),
            capacity: i.capacity.max(1),
            state: if i.eligible()
                && !hung.contains(i.name.as_str())
                && !closed.contains(i.name.as_str())
                && !spared.contains(i.name.as_str())
            {
                MemberState::Active
            } else if alive(i) || spared.contains(i.name.as_str()) {
                MemberState::Cordoned
            } else {
                MemberState::Draining
            },
        })
        .collect()
}

/// The planner's view of the configured targets, in the model's order. The owner is the
/// desired owner when that is a live member not neglecting it, else the live holder; otherwise
/// none (it needs a home). `busy` targets (in a running operation) are pinned where the
/// operation sends them.
pub fn targets(
    model: &ClusterModel,
    busy: &HashSet<String>,
    duration_ms: i64,
) -> Vec<planner::Target> {
    targets_sparing(model, busy, duration_ms, &HashSet::new())
}

/// [`targets`], with `spared` lapsed members kept as if live: they keep what is desired for
/// them, expired or not.
fn targets_sparing(
    model: &ClusterModel,
    busy: &HashSet<String>,
    duration_ms: i64,
    spared: &HashSet<&str>,
) -> Vec<planner::Target> {
    let live: HashSet<&str> = model
        .instances
        .iter()
        .filter(|i| alive(i))
        .map(|i| i.name.as_str())
        .collect();
    model
        .targets
        .iter()
        .filter(|t| t.configured)
        .map(|t| {
            let owner = match (&t.desired, &t.owner) {
                (Some(d), _) if live.contains(&**d) && !neglected(t, duration_ms) => {
                    Some(d.to_string())
                }
                (Some(d), _) if spared.contains(&**d) => Some(d.to_string()),
                (None, Some(h)) if live.contains(&**h) && t.state != TargetState::Expired => {
                    Some(h.to_string())
                }
                _ => None,
            };
            let pin = if busy.contains(&*t.key) {
                t.desired.as_deref().map(str::to_owned)
            } else {
                t.pin.clone()
            };
            planner::Target {
                key: t.key.to_string(),
                weight: t.weight,
                owner,
                pin,
            }
        })
        .collect()
}

/// Many members' liveness lapsing at once: member Leases seen unchanged for a
/// full duration while their holds expired. Members rarely die together; an API server too slow
/// to take their renewals makes them all look dead together, and failing them all over would
/// move work off healthy members onto members just as late — a failover storm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MassLapse {
    /// The lapsed members still holding (expired) targets, the longest silent first: the ones
    /// held back.
    pub lapsed: Vec<String>,
    /// Lapsed members already failed over during this lapse (still counted as lapsed).
    pub failed_over: usize,
    /// Members still live by the observer's judgement but late: their member Lease unchanged
    /// for more than a third of its duration plus a tenth — a member renews every third, so
    /// its renewal is overdue by a tenth of the duration, which a healthy API server never
    /// makes it — and likely to be seen expired soon. Counted as lapsed, not held back.
    pub late: Vec<String>,
    /// Members counted: live, leaving, or lapsed.
    pub members: usize,
    /// The 99th percentile of the counted members' renewal ages (ms since their member Lease
    /// last changed).
    pub renewal_age_p99_ms: i64,
    /// It shows the API server, not the members, is slow ([`Guard::server_slow`]): nobody is
    /// failed over meanwhile. Only the control loop, which lives it pass after pass, can tell;
    /// [`mass_lapse`] says `false`.
    pub server_slow: bool,
}

impl MassLapse {
    /// Why the cluster is degraded, for people.
    pub fn reason(&self) -> String {
        format!(
            "API server slow? member renewals late (p99 {:.1} s): {} of {} members lapsed together \
             ({} failed over, {} late); {}",
            self.renewal_age_p99_ms as f64 / 1000.0,
            self.lapsed.len() + self.failed_over + self.late.len(),
            self.members,
            self.failed_over,
            self.late.len(),
            if self.server_slow {
                "failing over nobody until renewals are back"
            } else {
                "failing over at most one member per lease duration"
            }
        )
    }
}

/// Whether `model` shows a [`MassLapse`]: lapsed members — those whose member Lease expired
/// while they hold expired targets, those in `failed_over` (failed over during this lapse,
/// now fenced), and live ones holding targets that are late (a renewal overdue by a tenth of
/// the duration, not yet seen expired: the lapses one slow server causes become visible over a
/// renewal period or two, not in the same pass) — are at least two and at least `share` of
/// the members counted, and some are still held back or late (a lapse of late members only is
/// one forming: nobody to fail over yet, but it has begun). A member that lapsed holding
/// nothing needs no failover and is not counted.
pub fn mass_lapse(
    model: &ClusterModel,
    share: f64,
    failed_over: &BTreeSet<String>,
) -> Option<MassLapse> {
    if model.protocol != Protocol::Native {
        return None;
    }
    // Cheap first (this runs for every page and scrape): fewer than two candidates among the
    // members cannot be a mass lapse, and the targets need not be walked.
    let late = |m: &crate::k8s::model::MemberLease| {
        m.liveness == Liveness::Live
            && m.unchanged_ms
                .zip(m.duration_ms)
                .is_some_and(|(u, d)| u > d / 3 + d / 10)
    };
    let candidates = model
        .instances
        .iter()
        .filter_map(|i| Some((i, i.member_lease.as_ref()?)))
        .filter(|(i, m)| {
            m.liveness == Liveness::Expired
                || late(m)
                || (m.liveness == Liveness::Fenced && failed_over.contains(&i.name))
        })
        .count();
    if candidates < 2 {
        return None;
    }
    let holding: HashSet<&str> = expired_holders(model);
    let owning: HashSet<&str> = model
        .targets
        .iter()
        .filter_map(|t| t.owner.as_deref())
        .collect();
    let mut held_back: Vec<(&str, i64)> = Vec::new();
    let mut done = 0;
    let mut late_live: Vec<&str> = Vec::new();
    let mut ages: Vec<i64> = Vec::new();
    for i in &model.instances {
        let Some(m) = i.member_lease.as_ref() else {
            continue;
        };
        let age = m.unchanged_ms.unwrap_or(0);
        match m.liveness {
            Liveness::Expired if holding.contains(i.name.as_str()) => {
                held_back.push((i.name.as_str(), age));
            }
            Liveness::Fenced if failed_over.contains(&i.name) => done += 1,
            Liveness::Live if late(m) && owning.contains(i.name.as_str()) => {
                late_live.push(i.name.as_str())
            }
            Liveness::Live | Liveness::Leaving => {}
            _ => continue,
        }
        ages.push(age);
    }
    let lapsed = held_back.len() + done + late_live.len();
    let nobody = held_back.is_empty() && late_live.is_empty();
    if nobody || lapsed < 2 || (lapsed as f64) < share * ages.len() as f64 {
        return None;
    }
    held_back.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    ages.sort_unstable();
    let p99 = ages[((ages.len() * 99).div_ceil(100)).saturating_sub(1)];
    Some(MassLapse {
        lapsed: held_back.into_iter().map(|(n, _)| n.to_owned()).collect(),
        failed_over: done,
        server_slow: false,
        late: late_live.into_iter().map(str::to_owned).collect(),
        members: ages.len(),
        renewal_age_p99_ms: p99,
    })
}

/// Holders of expired target holds.
fn expired_holders(model: &ClusterModel) -> HashSet<&str> {
    model
        .targets
        .iter()
        .filter(|t| t.state == TargetState::Expired)
        .filter_map(|t| t.owner.as_deref())
        .collect()
}

/// How [`decide_guarded`] treats a [`MassLapse`].
#[derive(Debug, Clone, PartialEq)]
pub struct Guard {
    /// See [`mass_lapse`].
    pub share: f64,
    /// One lapsed member may be failed over now (the longest silent): the mass lapse has
    /// lasted a lease duration, none was failed over for a lease duration, and it does not
    /// show the server slow ([`Guard::server_slow`]: then its lapsed members are most likely
    /// alive, and wait for its end and their grace).
    pub may_fail_over_one: bool,
    /// Members failed over during this mass lapse (see [`mass_lapse`]).
    pub failed_over: BTreeSet<String>,
    /// The members the mass lapse held back or found late at its last pass. Once it is over,
    /// they are in their grace: one lease duration to renew before they are failed over as
    /// usual. A recovering API server lets members' renewals through one after another;
    /// without this, the first renewals would end the lapse and the last to come back would be
    /// failed over though healthy. (The node lifecycle controller likewise restarts every
    /// node's grace period when a zone leaves full disruption.)
    pub held_back: BTreeSet<String>,
    /// Members the mass lapse held back or found late within the last lease duration, live
    /// again or not: while it lasts they get nothing new, and a failover needs a live member
    /// outside them. A server that takes writes late lets a lapsed member's renewal through
    /// now and then; failing one member over to another just as late only moves work between
    /// late members. A member renewing on time for a lease duration is no longer one.
    pub suspects: BTreeSet<String>,
    /// Of [`Guard::held_back`], those the mass lapse found late (not lapsed) at its last pass.
    pub were_late: BTreeSet<String>,
    /// The current mass lapse shows the server slow: a renewal of a member it held back or
    /// found late landed ([`Decision::landed`]) within the last lease duration, or such a
    /// member is held back or late again. Once every member whose renewal landed late has
    /// renewed on time for a lease duration, those still silent never showed a sign of life
    /// during it: they are taken for dead, and failed over one per duration.
    pub server_slow: bool,
    /// The model was stale (its watches not proven current) after having been
    /// current, less than a lease duration ago. Members seen expired then get the grace of
    /// [`Guard::held_back`]: the same slow API server that kept the control plane's probes
    /// from returning may have kept their renewals out, and both come back together.
    pub after_stale: bool,
}

impl Default for Guard {
    fn default() -> Self {
        Guard {
            share: DEFAULT_MASS_LAPSE_SHARE,
            may_fail_over_one: true,
            failed_over: BTreeSet::new(),
            held_back: BTreeSet::new(),
            suspects: BTreeSet::new(),
            were_late: BTreeSet::new(),
            server_slow: false,
            after_stale: false,
        }
    }
}

/// A cluster's mass lapse as the control loop lives it, pass after pass: since when, when a
/// lapsed member may be failed over next, whom it failed over and whom it suspects, and after
/// it the grace of the members it still held back; and the grace after a stale model. Times
/// are the caller's monotonic milliseconds.
#[derive(Debug, Clone, Default)]
pub struct LapseWatch {
    since_ms: Option<i64>,
    /// A lease duration after the lapse began and after the last failover during it.
    next_failover_ms: Option<i64>,
    /// The last pass of it at which a renewal landed late ([`Decision::landed`]).
    landed_at_ms: Option<i64>,
    /// The members whose renewal landed late during it: alive, their renewals held up. While
    /// one of them is held back or late again, or within a lease duration of the last landing,
    /// nobody more is failed over ([`Guard::server_slow`]). Not until it is over: a lapse counts
    /// the members it failed over, so when members really died beside a server slow for a
    /// while (a crash, then a slow spell) it need not end by itself, and their targets would
    /// never move (simulation seed 447).
    landed: BTreeSet<String>,
    /// Members failed over during it: still counted as lapsed, so that failing some over does
    /// not end the lapse by itself.
    failed_over: BTreeSet<String>,
    /// The members it held back or found late at its last pass ([`Guard::held_back`]).
    held_back: BTreeSet<String>,
    /// Those of them it found late ([`Guard::were_late`]).
    were_late: BTreeSet<String>,
    /// When each member was last held back or found late during it ([`Guard::suspects`]).
    suspects: BTreeMap<String, i64>,
    /// Once it is over: when their grace ends.
    grace_until_ms: Option<i64>,
    /// A pass has decided something (the model was current once).
    current_once: bool,
    /// Since when the model is stale again, if it is.
    stale_since_ms: Option<i64>,
    /// When the grace after a stale model ends ([`Guard::after_stale`]).
    fresh_grace_until_ms: Option<i64>,
}

/// A turn a mass lapse took in one pass ([`LapseWatch::lived`]), to log and publish.
#[derive(Debug, Clone, PartialEq)]
pub enum LapseTurn {
    /// It began.
    Began(MassLapse),
    /// It is over, after `lasted_ms`, having failed these over.
    Ended {
        lasted_ms: i64,
        failed_over: BTreeSet<String>,
    },
}

impl LapseWatch {
    /// The guard for the pass at `now_ms` (`duration_ms`: the cluster's lease duration); a
    /// grace that has run out ends here.
    pub fn guard(&mut self, share: f64, now_ms: i64, duration_ms: i64) -> Guard {
        if self.grace_until_ms.is_some_and(|t| now_ms >= t) {
            self.grace_until_ms = None;
            self.held_back.clear();
            self.were_late.clear();
        }
        let server_slow = self.landed_at_ms.is_some_and(|t| now_ms - t < duration_ms)
            || self.landed.iter().any(|m| self.held_back.contains(m));
        Guard {
            share,
            may_fail_over_one: !server_slow && self.next_failover_ms.is_some_and(|t| now_ms >= t),
            were_late: self.were_late.clone(),
            server_slow,
            failed_over: self.failed_over.clone(),
            held_back: self.held_back.clone(),
            suspects: self
                .suspects
                .iter()
                .filter(|(_, at)| now_ms - **at < duration_ms)
                .map(|(m, _)| m.clone())
                .collect(),
            after_stale: self.stale_since_ms.is_some()
                || self.fresh_grace_until_ms.is_some_and(|t| now_ms < t),
        }
    }

    /// A pass at `now_ms` decided nothing: the model was stale (or not synced yet, which does
    /// not count before it was ever current). Whether this begins a stale spell.
    pub fn stale(&mut self, now_ms: i64) -> bool {
        if !self.current_once || self.stale_since_ms.is_some() {
            return false;
        }
        self.stale_since_ms = Some(now_ms);
        true
    }

    /// The decided pass at `now_ms` ends a stale spell: how long it lasted (ask before
    /// [`LapseWatch::lived`], which takes the spell in).
    pub fn stale_spell_ending(&self, now_ms: i64) -> Option<i64> {
        self.stale_since_ms.map(|since| now_ms - since)
    }

    /// Takes in what the pass at `now_ms` decided (only a decided one: a stale model says
    /// nothing, not even that a lapse is over); `duration_ms` is the cluster's lease duration.
    pub fn lived(
        &mut self,
        decision: &Decision,
        now_ms: i64,
        duration_ms: i64,
    ) -> Option<LapseTurn> {
        self.current_once = true;
        if self.stale_since_ms.take().is_some() {
            self.fresh_grace_until_ms = Some(now_ms + duration_ms);
        }
        let turn = match (&decision.mass_lapse, self.since_ms) {
            (Some(m), None) => {
                self.since_ms = Some(now_ms);
                // Not at once: when a lapse begins, the members not yet lapsed are mostly about
                // to (renewals late by up to a third of a duration).
                self.next_failover_ms = Some(now_ms + duration_ms);
                Some(LapseTurn::Began(m.clone()))
            }
            (None, Some(since)) => {
                self.since_ms = None;
                self.next_failover_ms = None;
                self.landed_at_ms = None;
                self.landed.clear();
                self.grace_until_ms = Some(now_ms + duration_ms);
                self.suspects.clear();
                Some(LapseTurn::Ended {
                    lasted_ms: now_ms - since,
                    failed_over: std::mem::take(&mut self.failed_over),
                })
            }
            _ => None,
        };
        if let Some(m) = &decision.mass_lapse {
            self.held_back = m.lapsed.iter().chain(&m.late).cloned().collect();
            self.were_late = m.late.iter().cloned().collect();
            for member in m.lapsed.iter().chain(&m.late) {
                self.suspects.insert(member.clone(), now_ms);
            }
            self.grace_until_ms = None;
            if let Some(member) = &decision.failed_over_in_lapse {
                self.held_back.remove(member);
            }
        }
        if let Some(member) = &decision.failed_over_in_lapse {
            self.next_failover_ms = Some(now_ms + duration_ms);
            self.failed_over.insert(member.clone());
        }
        if decision.mass_lapse.is_some() && !decision.landed.is_empty() {
            self.landed_at_ms = Some(now_ms);
            self.landed.extend(decision.landed.iter().cloned());
        }
        turn
    }
}

/// What a reconcile decided.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// False when nothing could be decided (the model is stale or not synced, or gnmic's):
    /// the rest says nothing then, not even that a mass lapse is over.
    pub decided: bool,
    /// The writes to make.
    pub actions: Vec<Action>,
    /// A mass lapse, if the model shows one.
    pub mass_lapse: Option<MassLapse>,
    /// The lapsed member failed over despite the mass lapse, if one was.
    pub failed_over_in_lapse: Option<String>,
    /// Members spared in a grace (after a mass lapse, [`Guard::held_back`]; after a stale
    /// model, [`Guard::after_stale`]) that have not renewed yet.
    pub recovering: Vec<String>,
    /// The mass lapse has shown the API server, not the members, is slow: a member it held back
    /// or found late at a pass renewed on time again at a later one — a renewal that landed
    /// late. Dead members, and members cut off from the server, never get one through; every
    /// member whose renewals stop is late for a while before its Lease expires, so lateness
    /// alone says nothing. Held as [`Guard::server_slow`] says.
    pub server_slow: bool,
    /// The members held back or found late at the last pass whose renewal landed at this one.
    pub landed: Vec<String>,
}

/// `member`'s current term as the model shows it (live or leaving), written with a
/// desired owner so that the holder can hand the target straight over.
pub fn member_term(model: &ClusterModel, member: &str) -> Option<String> {
    model.instance(member)?.member_lease.as_ref()?.term.clone()
}

/// The writes this reconcile should make, with the default [`Guard`].
pub fn decide(model: &ClusterModel, duration_s: i32, busy: &HashSet<String>) -> Vec<Action> {
    decide_guarded(model, duration_s, busy, &Guard::default()).actions
}

/// The writes this reconcile should make. During a [`MassLapse`] the lapsed members are
/// spared — not fenced, their targets left where they are — except the longest silent one
/// when `guard` allows one failover and a live member outside the lapse's suspects can take
/// its targets; the late and the suspects get nothing new. After one, and after a stale model,
/// the members in their grace that still hold expired targets are spared the same way.
pub fn decide_guarded(
    model: &ClusterModel,
    duration_s: i32,
    busy: &HashSet<String>,
    guard: &Guard,
) -> Decision {
    let mut decision = Decision {
        decided: false,
        actions: Vec::new(),
        mass_lapse: None,
        failed_over_in_lapse: None,
        recovering: Vec::new(),
        server_slow: false,
        landed: Vec::new(),
    };
    if model.protocol == Protocol::Gnmic || !model.synced || model.stale {
        return decision;
    }
    decision.decided = true;
    decision.mass_lapse = mass_lapse(model, guard.share, &guard.failed_over);
    let mut spared: HashSet<&str> = HashSet::new();
    let mut closed: HashSet<&str> = HashSet::new();
    if let Some(lapse) = &mut decision.mass_lapse {
        // A renewal landed: held back at the last pass and live now (late or not), or late then
        // and on time now.
        let back = |m: &String| {
            !(lapse.late.contains(m) && guard.were_late.contains(m))
                && model
                    .instance(m)
                    .and_then(|i| i.member_lease.as_ref())
                    .is_some_and(|l| l.liveness == Liveness::Live)
        };
        decision.landed = guard
            .held_back
            .iter()
            .filter(|m| back(m))
            .cloned()
            .collect();
        lapse.server_slow |= guard.server_slow || !decision.landed.is_empty();
        decision.server_slow = lapse.server_slow;
    }
    if let Some(lapse) = &decision.mass_lapse {
        spared.extend(lapse.lapsed.iter().map(String::as_str));
        closed.extend(guard.suspects.iter().chain(&lapse.late).map(String::as_str));
        closed.extend(spared.iter().copied());
        // Failing one over helps only if a live member outside the lapse can take its
        // targets; the longest silent goes first.
        // Not while a stale spell is less than a duration behind: members may have lapsed
        // unseen, suspects not been counted.
        if guard.may_fail_over_one
            && !decision.server_slow
            && !guard.after_stale
            && model
                .instances
                .iter()
                .any(|i| i.eligible() && !closed.contains(i.name.as_str()))
            && let Some(first) = lapse.lapsed.first()
        {
            spared.remove(first.as_str());
            decision.failed_over_in_lapse = Some(first.clone());
        }
    } else if !guard.held_back.is_empty() || guard.after_stale {
        let holding = expired_holders(model);
        let mut recovering: BTreeSet<&str> = guard
            .held_back
            .iter()
            .map(String::as_str)
            .filter(|m| holding.contains(m))
            .collect();
        if guard.after_stale {
            // Only members whose pod is there and whose member Lease merely expired: a gone
            // pod or a fenced Lease is no slow server's doing.
            recovering.extend(holding.iter().copied().filter(|h| {
                model
                    .instance(h)
                    .and_then(|i| i.member_lease.as_ref())
                    .is_some_and(|m| m.liveness == Liveness::Expired)
            }));
        }
        decision.recovering = recovering.iter().map(|m| (*m).to_owned()).collect();
        spared.extend(recovering);
    }
    decision.actions = decide_sparing(model, duration_s, busy, &spared, &closed);
    decision
}

/// The writes, with `spared` lapsed members kept as if live (not fenced, keeping their
/// targets, nothing new) and `closed` members given nothing new.
fn decide_sparing(
    model: &ClusterModel,
    duration_s: i32,
    busy: &HashSet<String>,
    spared: &HashSet<&str>,
    closed: &HashSet<&str>,
) -> Vec<Action> {
    let duration_ms = i64::from(duration_s) * 1000;
    let members = members_sparing(model, duration_ms, spared, closed);
    let targets = targets_sparing(model, busy, duration_ms, spared);
    let plan = planner::place(&members, &targets);
    let mut actions = Vec::new();
    // Holds of members whose member Lease is no longer live are revoked once the
    // member Lease is fenced (or released by the member); a member Lease seen unchanged for a
    // full duration (or missing) is fenced first, in the same pass (see docs/protocol.md). The
    // write re-reads the member Lease and revokes only if it is still fenced or released.
    let mut fence: Vec<&str> = expired_holders(model)
        .into_iter()
        .filter(|h| !spared.contains(h))
        .filter(|h| {
            model.instance(h).is_none_or(|i| {
                i.member_lease
                    .as_ref()
                    .is_none_or(|m| matches!(m.liveness, Liveness::Expired | Liveness::Absent))
            })
        })
        .collect();
    fence.sort_unstable();
    fence.dedup();
    actions.extend(fence.iter().map(|m| Action::Fence {
        member: (*m).to_owned(),
    }));
    let revocable: HashSet<&str> = model
        .instances
        .iter()
        .filter(|i| i.member_lease.as_ref().is_some_and(|m| m.revocable))
        .map(|i| i.name.as_str())
        .chain(fence.iter().copied())
        .collect();
    let revoke = |t: &Target| -> Option<String> {
        let h = t.owner.as_deref()?;
        (t.state == TargetState::Expired && revocable.contains(h)).then(|| h.to_owned())
    };
    // Moves a stopping holder makes itself, in one write each, by its hand-over plan.
    let mut planned: BTreeMap<String, BTreeMap<String, Destination>> = BTreeMap::new();
    for mv in plan.moves {
        let Some(t) = model.target(&mv.target) else {
            continue;
        };
        if t.desired.as_deref() == Some(mv.to.as_str()) {
            // Already wanted there (a stalled target whose only home is where it is).
            continue;
        }
        // A holder that is live and stopping on purpose (its pod terminating, or its member
        // Lease saying it is leaving) hands the target over; anything else — an expired hold, a
        // holder gone unready or without a pod — may be a crash, and is a failover.
        let stopping = |owner: &str| {
            model.instance(owner).is_some_and(|i| {
                i.terminating
                    || i.member_lease
                        .as_ref()
                        .is_some_and(|m| m.liveness == Liveness::Leaving)
            })
        };
        let cause = match (t.owner.as_deref(), t.state) {
            (None, _) if t.desired.is_none() => Cause::Initial,
            (Some(o), TargetState::Owned | TargetState::Moving | TargetState::Unworked)
                if stopping(o) =>
            {
                Cause::Handoff
            }
            _ => Cause::Failover,
        };
        if cause == Cause::Handoff
            && let Some((holder, to)) = plannable(model, t, &mv.to)
        {
            planned.entry(holder).or_default().insert(mv.target, to);
            continue;
        }
        actions.push(Action::Desire {
            key: mv.target,
            desire: Desire {
                term: member_term(model, &mv.to),
                owner: mv.to,
                cause,
                operation: None,
                duration_s,
                // The cluster's policy, at the write (engine::control).
                overlap_ms: None,
            },
            expect: t.desired.as_deref().map(str::to_owned),
            revoke: revoke(t),
            absent: t.lease.is_none(),
        });
    }
    let plan_actions = plans(model, duration_s, planned);
    // Adopt: held by a live member but never given a desired owner (e.g. written before
    // Leasehold managed the cluster). Writing it down changes nothing for the holder.
    let placed: HashSet<&str> = actions
        .iter()
        .filter_map(|a| match a {
            Action::Desire { key, .. } => Some(key.as_str()),
            _ => None,
        })
        .collect();
    let mut revokes = Vec::new();
    for t in &model.targets {
        if let Some(holder) = revoke(t)
            && !placed.contains(&*t.key)
        {
            revokes.push(Action::Revoke {
                key: t.key.to_string(),
                holder,
            });
        }
    }
    let mut adopt = Vec::new();
    // `targets` are the model's configured targets, in its order (`targets_sparing`): no
    // lookup by key (a search per target, every pass).
    let configured = model.targets.iter().filter(|m| m.configured);
    for (t, m) in targets.iter().zip(configured) {
        debug_assert_eq!(t.key, *m.key);
        if let Some(owner) = &t.owner
            && m.desired.is_none()
            && !placed.contains(t.key.as_str())
        {
            adopt.push(Action::Desire {
                key: t.key.clone(),
                desire: Desire {
                    owner: owner.clone(),
                    cause: Cause::Initial,
                    operation: None,
                    duration_s,
                    term: member_term(model, owner),
                    overlap_ms: None,
                },
                expect: None,
                revoke: None,
                absent: false,
            });
        }
    }
    actions.extend(adopt);
    actions.extend(revokes);
    actions.extend(plan_actions);
    actions.extend(
        model
            .departed_member_leases
            .iter()
            .map(|m| Action::DeleteMember { member: m.clone() }),
    );
    // Leases of targets no longer configured — but never while the target list itself is in
    // doubt (a broken ConfigMap keeps the last good list and stops deletions).
    if model.targets_error.is_none() {
        for t in &model.targets {
            if !t.configured
                && let Some(lease) = &t.lease
            {
                actions.push(Action::Delete {
                    key: t.key.to_string(),
                    lease: lease.to_string(),
                });
            }
        }
    }
    actions
}

/// Whether the hand-off of `t` to `to` can be planned — made by its holder in one write
/// ([`crate::protocol::plan`]): `t` is held by a member and still desired for it, and both the
/// holder's and `to`'s terms are known. Not when `to` can prepare (an overlap hand-off needs
/// the desired owner written first, to start ahead of the hand-over). The holder and where the
/// target goes, if so.
fn plannable(model: &ClusterModel, t: &Target, to: &str) -> Option<(String, Destination)> {
    let holder = t.owner.as_deref()?;
    if t.desired.as_deref() != Some(holder) || t.state == TargetState::Expired {
        return None;
    }
    member_term(model, holder)?;
    let to_lease = model.instance(to)?.member_lease.as_ref()?;
    if to_lease.app_work.as_ref().is_some_and(|w| w.prepares) {
        return None;
    }
    let term = to_lease.term.clone()?;
    Some((
        holder.to_owned(),
        Destination {
            owner: to.to_owned(),
            term,
        },
    ))
}

/// The plan writes of this pass: for each stopping holder with moves to plan, its plan —
/// written only when a move is not in the plan it has (a plan's move stands while its target
/// is still the holder's and its destination is live in the same term, so the holder is never
/// sent a target's destination twice); and plans with nothing left to move, deleted. A plan
/// carries at most [`plan::MAX_BYTES`] of keys, the moves it had first; the rest follows once
/// those are made.
fn plans(
    model: &ClusterModel,
    duration_s: i32,
    mut planned: BTreeMap<String, BTreeMap<String, Destination>>,
) -> Vec<Action> {
    let mut actions = Vec::new();
    let mut members: BTreeSet<String> = planned.keys().cloned().collect();
    members.extend(model.plans.keys().cloned());
    for member in members {
        let seen = model.plans.get(&member);
        let term = member_term(model, &member);
        // The moves of the plan it has that still stand.
        let standing: BTreeMap<String, Destination> = seen
            .and_then(|s| s.plan.as_deref())
            .filter(|p| Some(&p.term) == term.as_ref())
            .map(|p| {
                p.moves
                    .iter()
                    .filter(|(key, to)| {
                        model.target(key).is_some_and(|t| {
                            t.owner.as_deref() == Some(member.as_str())
                                && t.desired.as_deref() == Some(member.as_str())
                                && t.state != TargetState::Expired
                        }) && model.instance(&to.owner).is_some_and(alive)
                            && member_term(model, &to.owner).as_ref() == Some(&to.term)
                    })
                    .map(|(k, d)| (k.clone(), d.clone()))
                    .collect()
            })
            .unwrap_or_default();
        let new: Vec<(String, Destination)> = planned
            .remove(&member)
            .unwrap_or_default()
            .into_iter()
            .filter(|(key, _)| !standing.contains_key(key))
            .collect();
        match (term, new.is_empty()) {
            (Some(term), false) => {
                let mut bytes = 0;
                let moves = standing
                    .into_iter()
                    .chain(new)
                    .take_while(|(key, _)| {
                        bytes += plan::Plan::cost(key);
                        bytes <= plan::MAX_BYTES
                    })
                    .collect();
                actions.push(Action::Plan {
                    plan: Plan {
                        member: member.clone(),
                        term,
                        duration_s,
                        moves,
                    },
                    expect: seen.map(|s| s.resource_version.clone()),
                });
            }
            _ if standing.is_empty() => {
                if let Some(s) = seen {
                    actions.push(Action::DeletePlan {
                        member: member.clone(),
                        lease: s.name.clone(),
                        resource_version: s.resource_version.clone(),
                    });
                }
            }
            _ => {}
        }
    }
    actions
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(instances: Vec<Instance>, mut targets: Vec<Target>) -> ClusterModel {
        targets.sort_by(|a, b| a.key.cmp(&b.key));
        ClusterModel::for_tests(instances, targets)
    }

    fn desires(actions: &[Action]) -> Vec<(String, String, Cause)> {
        let mut out: Vec<_> = actions
            .iter()
            .filter_map(|a| match a {
                Action::Desire { key, desire, .. } => {
                    Some((key.clone(), desire.owner.clone(), desire.cause))
                }
                _ => None,
            })
            .collect();
        out.sort();
        out
    }

    /// Member `index`'s Lease now `liveness`, unchanged for `unchanged_ms`, and the targets it
    /// owns in `targets`.
    fn member_now(
        m: &mut ClusterModel,
        index: usize,
        (liveness, unchanged_ms): (Liveness, i64),
        targets: TargetState,
    ) {
        let l = m.instances[index].member_lease.as_mut().unwrap();
        (l.liveness, l.unchanged_ms) = (liveness, Some(unchanged_ms));
        let name = m.instances[index].name.clone();
        for t in m
            .targets
            .iter_mut()
            .filter(|t| t.owner.as_deref() == Some(name.as_str()))
        {
            t.state = targets;
        }
    }

    /// Members `names` (`Some(age)`: lapsed for that long; `None`: live), two
    /// targets each, held and desired where they are (expired on the lapsed).
    fn cluster_of(members: &[(&str, Option<i64>)]) -> ClusterModel {
        use crate::k8s::model::MemberLease;
        let mut instances = Vec::new();
        let mut targets = Vec::new();
        for (name, lapsed) in members {
            let mut i = Instance::for_tests(name, true, false, false);
            i.member_lease = Some(MemberLease {
                liveness: if lapsed.is_some() {
                    Liveness::Expired
                } else {
                    Liveness::Live
                },
                unchanged_ms: Some(lapsed.unwrap_or(1_000)),
                duration_ms: Some(10_000),
                revocable: false,
                term: None,
                app_work: None,
            });
            instances.push(i);
            let state = if lapsed.is_some() {
                TargetState::Expired
            } else {
                TargetState::Owned
            };
            for n in 0..2 {
                let key = format!("{name}-t{n}");
                targets.push(Target::for_tests(&key, Some(name), Some(name), state, true));
            }
        }
        model(instances, targets)
    }

    fn fenced(actions: &[Action]) -> Vec<String> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Fence { member } => Some(member.clone()),
                _ => None,
            })
            .collect()
    }

    /// Three of four members lapsing together is a mass lapse: only the longest silent is
    /// fenced and failed over (when the guard allows one and a live member can take its targets),
    /// the others keep their targets and get nothing new; without the allowance nothing moves.
    /// Failing one over does not end the lapse: it still counts as lapsed. One lapse alone, a
    /// share below the threshold, or a lapsed member holding nothing, fails over as usual.
    #[test]
    fn a_mass_lapse_fails_over_at_most_one_member_and_spares_the_rest() {
        let none = BTreeSet::new();
        let m = cluster_of(&[
            ("a", Some(12_000)),
            ("b", Some(11_000)),
            ("c", Some(10_500)),
            ("d", None),
        ]);
        let lapse = mass_lapse(&m, DEFAULT_MASS_LAPSE_SHARE, &none).expect("a mass lapse");
        assert_eq!(lapse.lapsed, ["a", "b", "c"]);
        assert_eq!((lapse.members, lapse.renewal_age_p99_ms), (4, 12_000));
        assert!(
            lapse
                .reason()
                .contains("3 of 4 members lapsed together (0 failed over, 0 late)"),
            "{}",
            lapse.reason()
        );

        let d = decide_guarded(&m, 10, &HashSet::new(), &Guard::default());
        assert!(d.decided);
        assert_eq!(d.failed_over_in_lapse.as_deref(), Some("a"));
        assert_eq!(fenced(&d.actions), ["a"]);
        assert_eq!(
            desires(&d.actions),
            [
                ("a-t0".into(), "d".into(), Cause::Failover),
                ("a-t1".into(), "d".into(), Cause::Failover)
            ],
            "the spared b and c receive nothing and keep theirs"
        );

        let held = Guard {
            may_fail_over_one: false,
            ..Guard::default()
        };
        let d = decide_guarded(&m, 10, &HashSet::new(), &held);
        assert!(d.mass_lapse.is_some() && d.failed_over_in_lapse.is_none());
        assert!(d.actions.is_empty(), "{:?}", d.actions);

        // a is fenced now and its targets are d's: still 3 of 4 lapsed, b and c still spared.
        let mut after = m.clone();
        after.instances[0].member_lease.as_mut().unwrap().liveness = Liveness::Fenced;
        for t in after
            .targets
            .iter_mut()
            .filter(|t| t.owner.as_deref() == Some("a"))
        {
            t.owner = Some("d".into());
            t.desired = Some("d".into());
            t.state = TargetState::Owned;
        }
        let during = Guard {
            may_fail_over_one: false,
            failed_over: BTreeSet::from(["a".to_owned()]),
            ..Guard::default()
        };
        let d = decide_guarded(&after, 10, &HashSet::new(), &during);
        let lapse = d.mass_lapse.expect("still a mass lapse");
        assert_eq!((lapse.lapsed.len(), lapse.failed_over), (2, 1));
        assert!(d.actions.is_empty(), "{:?}", d.actions);
        // Without counting a (what a replica that did not fail it over sees), 2 of 3.
        assert!(mass_lapse(&after, DEFAULT_MASS_LAPSE_SHARE, &none).is_some());
        assert!(mass_lapse(&after, 0.7, &none).is_none());
        assert!(mass_lapse(&after, 0.7, &during.failed_over).is_some());

        // Every member silent at once: nobody could take the targets, so nobody is fenced.
        let all = cluster_of(&[("a", Some(12_000)), ("b", Some(11_000))]);
        let d = decide_guarded(&all, 10, &HashSet::new(), &Guard::default());
        assert!(
            d.mass_lapse.is_some() && d.actions.is_empty(),
            "{:?}",
            d.actions
        );

        // One lapse is not a mass lapse, whatever the share; nor is a share below the threshold.
        let one = cluster_of(&[("a", Some(12_000)), ("b", None)]);
        assert!(mass_lapse(&one, 0.1, &none).is_none());
        assert_eq!(
            fenced(&decide_guarded(&one, 10, &HashSet::new(), &held).actions),
            ["a"]
        );
        let strict = Guard {
            share: 1.0,
            may_fail_over_one: false,
            ..Guard::default()
        };
        let d = decide_guarded(&m, 10, &HashSet::new(), &strict);
        assert!(d.mass_lapse.is_none());
        assert_eq!(fenced(&d.actions), ["a", "b", "c"]);
        // A member that lapsed holding nothing needs no failover and does not count.
        let mut idle = cluster_of(&[("a", Some(12_000)), ("b", None), ("c", None)]);
        idle.targets.retain(|t| t.owner.as_deref() != Some("a"));
        let mut gone = cluster_of(&[("x", Some(11_000))]);
        idle.instances.push(gone.instances.remove(0));
        idle.targets.append(&mut gone.targets);
        idle.targets.sort_by(|a, b| a.key.cmp(&b.key));
        assert!(
            mass_lapse(&idle, DEFAULT_MASS_LAPSE_SHARE, &none).is_none(),
            "only x holds expired targets"
        );
        // A live member whose member Lease is unchanged for over D/3 + D/10 is late: with one
        // expired, 2 of 4 lapsed together; a little earlier it is not.
        let mut one_late =
            cluster_of(&[("a", Some(12_000)), ("b", None), ("c", None), ("d", None)]);
        one_late.instances[1]
            .member_lease
            .as_mut()
            .unwrap()
            .unchanged_ms = Some(4_400);
        let lapse = mass_lapse(&one_late, DEFAULT_MASS_LAPSE_SHARE, &none).expect("a and late b");
        assert_eq!(
            (lapse.lapsed.clone(), lapse.late.clone()),
            (vec!["a".to_owned()], vec!["b".to_owned()])
        );
        one_late.instances[1]
            .member_lease
            .as_mut()
            .unwrap()
            .unchanged_ms = Some(4_300);
        assert!(mass_lapse(&one_late, DEFAULT_MASS_LAPSE_SHARE, &none).is_none());

        // Suspects (e, late or held back within the last duration, now live) get nothing
        // new, and a failover needs a live member outside them: with only e live, nobody.
        let mut e = cluster_of(&[("e", None)]);
        let mut returning = cluster_of(&[("a", Some(12_000)), ("b", Some(11_000))]);
        returning.instances.append(&mut e.instances);
        returning.targets.append(&mut e.targets);
        returning.targets.sort_by(|a, b| a.key.cmp(&b.key));
        let suspected = Guard {
            suspects: BTreeSet::from(["e".to_owned()]),
            ..Guard::default()
        };
        let d = decide_guarded(&returning, 10, &HashSet::new(), &suspected);
        assert!(d.mass_lapse.is_some(), "2 of 3 lapsed");
        assert!(
            d.failed_over_in_lapse.is_none() && d.actions.is_empty(),
            "{:?}",
            d.actions
        );
        let d = decide_guarded(&returning, 10, &HashSet::new(), &Guard::default());
        assert_eq!(
            d.failed_over_in_lapse.as_deref(),
            Some("a"),
            "e is no suspect"
        );

        // After a stale model, a member whose member Lease merely expired is in its grace; a
        // fenced one or one without a pod is not.
        let mut after = cluster_of(&[("a", Some(13_000)), ("b", None), ("c", None)]);
        let stale_guard = Guard {
            after_stale: true,
            ..Guard::default()
        };
        let d = decide_guarded(&after, 10, &HashSet::new(), &stale_guard);
        assert_eq!(d.recovering, ["a"]);
        assert!(d.actions.is_empty(), "{:?}", d.actions);
        after.instances[0].member_lease.as_mut().unwrap().liveness = Liveness::Fenced;
        let d = decide_guarded(&after, 10, &HashSet::new(), &stale_guard);
        assert!(d.recovering.is_empty());

        // The lapse over (b and c renewed) while a, the straggler, is in its grace: spared,
        // nothing moves; without the grace it is failed over as usual.
        let back = cluster_of(&[("a", Some(13_000)), ("b", None), ("c", None), ("d", None)]);
        let grace = Guard {
            held_back: BTreeSet::from(["a".to_owned(), "b".to_owned()]),
            ..Guard::default()
        };
        let d = decide_guarded(&back, 10, &HashSet::new(), &grace);
        assert!(d.mass_lapse.is_none());
        assert_eq!(d.recovering, ["a"], "b renewed: no longer spared");
        assert!(d.actions.is_empty(), "{:?}", d.actions);
        assert_eq!(
            fenced(&decide_guarded(&back, 10, &HashSet::new(), &Guard::default()).actions),
            ["a"]
        );
        // Stale: nothing decided, not even that a lapse is over.
        let mut stale = m.clone();
        stale.stale = true;
        assert!(!decide_guarded(&stale, 10, &HashSet::new(), &Guard::default()).decided);
    }

    /// The lapse watch over passes: no failover in the first lease duration of a lapse, then
    /// one per duration, never onto a suspect (a member lapsed or late within the last
    /// duration); after the lapse its held-back members are in their grace for a duration,
    /// then no longer. A stale spell after the model was current starts a grace too; the cold
    /// start does not.
    #[test]
    fn late_members_show_a_slow_server_only_once_a_renewal_lands() {
        const D: i64 = 10_000;
        // Two late (renewals overdue), one lapsed, one on time: a lapse forming.
        let mut m = cluster_of(&[("a", None), ("b", None), ("c", Some(10_500)), ("d", None)]);
        for i in &mut m.instances[..2] {
            i.member_lease.as_mut().unwrap().unchanged_ms = Some(5_000);
        }
        let mut w = LapseWatch::default();
        let mut pass = |model: &ClusterModel, at: i64| {
            let guard = w.guard(DEFAULT_MASS_LAPSE_SHARE, at, D);
            let d = decide_guarded(model, 10, &HashSet::new(), &guard);
            w.lived(&d, at, D);
            d
        };
        let d = pass(&m, 0);
        assert_eq!(d.mass_lapse.as_ref().unwrap().late, ["a", "b"]);
        // Still late a moment later (their renewals stopped: dying or cut off, or slow): no sign.
        for i in &mut m.instances[..2] {
            i.member_lease.as_mut().unwrap().unchanged_ms = Some(5_400);
        }
        let d = pass(&m, 400);
        assert!(!d.server_slow && !d.mass_lapse.unwrap().server_slow);
        // a's renewal lands: on time again. The server is slow, not the members.
        m.instances[0].member_lease.as_mut().unwrap().unchanged_ms = Some(100);
        let d = pass(&m, 500);
        let lapse = d.mass_lapse.clone().expect("b late, c lapsed: 2 of 4");
        assert!(d.server_slow && lapse.server_slow, "{lapse:?}");
        assert!(
            lapse
                .reason()
                .ends_with("failing over nobody until renewals are back")
        );
        // And so it stays while renewals keep landing late (a late at one pass, on time at the
        // next), a duration on and more: c is not failed over.
        let mut at = 500;
        while at < 3 * D {
            at += D / 2;
            m.instances[0].member_lease.as_mut().unwrap().unchanged_ms = Some(5_000);
            pass(&m, at - 400);
            m.instances[0].member_lease.as_mut().unwrap().unchanged_ms = Some(100);
            let d = pass(&m, at);
            assert_eq!(d.landed, ["a"]);
            assert!(d.server_slow && d.failed_over_in_lapse.is_none());
            assert!(fenced(&d.actions).is_empty());
        }
        // a late again for longer than a duration: a member whose renewal landed late during
        // the lapse is late again, so the server still is slow; then it lands again.
        m.instances[0].member_lease.as_mut().unwrap().unchanged_ms = Some(5_000);
        for after in [D / 2, D + 100, 2 * D] {
            let d = pass(&m, at + after);
            assert!(d.server_slow && d.failed_over_in_lapse.is_none(), "{d:?}");
        }
        m.instances[0].member_lease.as_mut().unwrap().unchanged_ms = Some(100);
        at += 2 * D + 100;
        assert_eq!(pass(&m, at).landed, ["a"]);
        // Then the server is prompt (a on time at every pass), but b's renewals stop too: b and
        // c lapsed, 2 of 4, and no renewal lands late any more. They are dead: a duration after
        // the last late one, c (the longest silent) is failed over, one member per duration.
        member_now(&mut m, 1, (Liveness::Expired, 10_100), TargetState::Expired);
        let d = pass(&m, at + D - 1);
        assert!(
            d.server_slow && d.landed.is_empty() && d.failed_over_in_lapse.is_none(),
            "{d:?}"
        );
        let d = pass(&m, at + D);
        assert!(!d.server_slow, "{:?}", d.mass_lapse);
        assert_eq!(d.failed_over_in_lapse.as_deref(), Some("c"));
        assert_eq!(fenced(&d.actions), ["c"]);
    }

    #[test]
    fn a_lapse_watch_paces_failovers_and_graces_the_held_back() {
        const D: i64 = 10_000;
        let m = cluster_of(&[
            ("a", Some(12_000)),
            ("b", Some(11_000)),
            ("c", Some(10_500)),
            ("d", None),
        ]);
        let mut w = LapseWatch::default();
        let pass = |w: &mut LapseWatch, model: &ClusterModel, at: i64| {
            let guard = w.guard(DEFAULT_MASS_LAPSE_SHARE, at, D);
            let d = decide_guarded(model, 10, &HashSet::new(), &guard);
            let turn = w.lived(&d, at, D);
            (d, turn)
        };
        let (d, turn) = pass(&mut w, &m, 0);
        assert!(matches!(turn, Some(LapseTurn::Began(_))));
        assert!(d.failed_over_in_lapse.is_none(), "not when it begins");
        let (d, _) = pass(&mut w, &m, D - 1);
        assert!(d.failed_over_in_lapse.is_none());
        let (d, turn) = pass(&mut w, &m, D);
        assert_eq!((d.failed_over_in_lapse.as_deref(), turn), (Some("a"), None));
        // A zone of dead members beside a prompt server: nobody comes back, nobody is late;
        // the next one (b, the longest silent left) a duration later.
        let mut gone_a = m.clone();
        gone_a.instances[0].member_lease.as_mut().unwrap().liveness = Liveness::Fenced;
        let mut dead = w.clone();
        let (d, _) = pass(&mut dead, &gone_a, 2 * D - 1);
        assert!(d.failed_over_in_lapse.is_none() && !d.server_slow);
        let (d, _) = pass(&mut dead, &gone_a, 2 * D);
        assert_eq!(d.failed_over_in_lapse.as_deref(), Some("b"));
        // A slow server instead: b comes back, late at 1.9 D (its renewal got through, its next
        // is overdue), on time at 2 D. The lapsed are most likely alive: nobody more is failed
        // over while the lapse lasts. b is a suspect until a duration after it was last late
        // (it gets nothing new); from 2.9 D on it is none.
        let mut back = gone_a.clone();
        member_now(&mut back, 1, (Liveness::Live, 4_500), TargetState::Owned);
        let (d, _) = pass(&mut w, &back, D + 9 * D / 10);
        let lapse = d
            .mass_lapse
            .clone()
            .expect("a (failed over), c lapsed, b late: 3 of 4");
        assert_eq!(lapse.late, ["b"]);
        assert!(d.server_slow && d.failed_over_in_lapse.is_none());
        back.instances[1]
            .member_lease
            .as_mut()
            .unwrap()
            .unchanged_ms = Some(500);
        // b's renewal landed at 2 D, late: nobody is failed over for a duration after.
        for at in [2 * D, 3 * D - 1] {
            let (d, _) = pass(&mut w, &back, at);
            assert!(d.mass_lapse.is_some(), "a failed over, c lapsed: 2 of 4");
            assert_eq!(d.failed_over_in_lapse, None, "at {at}");
            let moves = desires(&d.actions);
            assert!(
                moves.iter().all(|(key, _, _)| !key.starts_with("c-")),
                "c keeps its targets: {moves:?}"
            );
            if at == 2 * D {
                assert!(
                    moves.iter().all(|(_, to, _)| to == "d"),
                    "b, a suspect, gets nothing: {moves:?}"
                );
            }
        }
        let g = w
            .clone()
            .guard(DEFAULT_MASS_LAPSE_SHARE, 2 * D + 9 * D / 10, D);
        assert!(!g.suspects.contains("b"), "{g:?}");
        // A duration of a prompt server since (b on time at every pass): c, still silent, is
        // dead, and failed over (at most one member per duration, as beside a prompt server).
        let (d, _) = pass(&mut w, &back, 3 * D);
        assert!(!d.server_slow, "{:?}", d.mass_lapse);
        assert_eq!(d.failed_over_in_lapse.as_deref(), Some("c"));
        // Everyone else back: over; a dead e held back... here c was failed over, so take a
        // model where c is still held back when it ends: its grace lasts D.
        let mut w = LapseWatch::default();
        pass(&mut w, &m, 0);
        let mut over = m.clone();
        for i in 0..2 {
            let l = over.instances[i].member_lease.as_mut().unwrap();
            (l.liveness, l.unchanged_ms) = (Liveness::Live, Some(500));
        }
        for t in over
            .targets
            .iter_mut()
            .filter(|t| matches!(t.owner.as_deref(), Some("a" | "b")))
        {
            t.state = TargetState::Owned;
        }
        let (d, turn) = pass(&mut w, &over, 100);
        assert!(
            matches!(turn, Some(LapseTurn::Ended { lasted_ms: 100, .. })),
            "{turn:?}"
        );
        assert_eq!(d.recovering, ["c"]);
        assert!(d.actions.is_empty());
        let (d, _) = pass(&mut w, &over, 100 + D - 1);
        assert_eq!(d.recovering, ["c"]);
        let (d, _) = pass(&mut w, &over, 100 + D);
        assert!(d.recovering.is_empty());
        assert_eq!(fenced(&d.actions), ["c"], "its grace is over");

        // The cold start is no stale spell; one after the model was current is.
        // A spell is said to begin once (the WatchStale Event) and how long it lasted when a
        // decided pass ends it (WatchCurrent).
        let mut w = LapseWatch::default();
        assert!(!w.stale(0), "the cold start is no spell");
        assert!(!w.guard(DEFAULT_MASS_LAPSE_SHARE, 1, D).after_stale);
        assert_eq!(w.stale_spell_ending(5), None);
        pass(&mut w, &over, 10);
        assert!(w.stale(20), "a spell begins");
        assert!(!w.stale(25), "and goes on");
        assert!(w.guard(DEFAULT_MASS_LAPSE_SHARE, 30, D).after_stale);
        assert_eq!(w.stale_spell_ending(40), Some(20));
        pass(&mut w, &over, 40);
        assert_eq!(
            w.stale_spell_ending(41),
            None,
            "taken in by the decided pass"
        );
        assert!(w.guard(DEFAULT_MASS_LAPSE_SHARE, 40 + D - 1, D).after_stale);
        assert!(!w.guard(DEFAULT_MASS_LAPSE_SHARE, 40 + D, D).after_stale);
    }

    #[test]
    fn new_targets_go_to_the_least_loaded_and_failover_leaves_the_dead() {
        let m = model(
            vec![
                Instance::for_tests("a", true, false, false),
                Instance::for_tests("b", true, false, false),
                Instance::for_tests("dead", false, false, false),
            ],
            vec![
                Target::for_tests("t1", Some("a"), Some("a"), TargetState::Owned, true),
                Target::for_tests("t2", None, None, TargetState::Unassigned, true),
                Target::for_tests("t3", Some("dead"), Some("dead"), TargetState::Owned, true),
            ],
        );
        let got = desires(&decide(&m, 10, &HashSet::new()));
        assert_eq!(
            got,
            [
                ("t2".into(), "b".into(), Cause::Initial),
                ("t3".into(), "a".into(), Cause::Failover)
            ]
        );
    }

    #[test]
    fn a_live_owner_stopping_on_purpose_hands_over_and_a_suspected_crash_fails_over() {
        use crate::k8s::model::MemberLease;
        let mut terminating = Instance::for_tests("t", false, false, false);
        terminating.terminating = true;
        let mut leaving = Instance::for_tests("l", true, false, false);
        leaving.member_lease = Some(MemberLease {
            liveness: Liveness::Leaving,
            unchanged_ms: Some(100),
            duration_ms: Some(10_000),
            revocable: false,
            term: None,
            app_work: None,
        });
        let unready = Instance::for_tests("u", false, false, false);
        let m = model(
            vec![
                Instance::for_tests("a", true, false, false),
                terminating,
                leaving,
                unready,
            ],
            vec![
                Target::for_tests("k1", Some("t"), Some("t"), TargetState::Owned, true),
                Target::for_tests("k2", Some("l"), Some("l"), TargetState::Owned, true),
                // Not ready, still renewing: perhaps crashing; no way to know yet.
                Target::for_tests("k3", Some("u"), Some("u"), TargetState::Owned, true),
                // A terminating pod whose hold expired: it did not hand over.
                Target::for_tests("k4", Some("t"), Some("t"), TargetState::Expired, true),
            ],
        );
        let causes: Vec<(String, Cause)> = desires(&decide(&m, 10, &HashSet::new()))
            .into_iter()
            .map(|(k, _, c)| (k, c))
            .collect();
        assert_eq!(
            causes,
            [
                ("k1".into(), Cause::Handoff),
                ("k2".into(), Cause::Handoff),
                ("k3".into(), Cause::Failover),
                ("k4".into(), Cause::Failover),
            ]
        );
    }

    /// Member `name` with a member Lease in term `<name>-1`: live, or leaving.
    fn with_term(name: &str, leaving: bool, prepares: bool) -> Instance {
        use crate::k8s::model::MemberLease;
        let mut i = Instance::for_tests(name, true, false, false);
        i.member_lease = Some(MemberLease {
            liveness: if leaving {
                Liveness::Leaving
            } else {
                Liveness::Live
            },
            unchanged_ms: Some(100),
            duration_ms: Some(10_000),
            revocable: false,
            term: Some(format!("{name}-1")),
            app_work: prepares.then(|| crate::protocol::AppWork {
                prepares: true,
                ..Default::default()
            }),
        });
        i
    }

    fn plan_actions(actions: &[Action]) -> Vec<&Action> {
        actions
            .iter()
            .filter(|a| matches!(a, Action::Plan { .. } | Action::DeletePlan { .. }))
            .collect()
    }

    fn seen(plan: Plan, rv: &str) -> crate::k8s::model::PlanSeen {
        crate::k8s::model::PlanSeen {
            member: plan.member.clone(),
            name: format!("plan-{}", plan.member),
            resource_version: rv.into(),
            plan: Some(std::sync::Arc::new(plan)),
        }
    }

    /// A leaving member's targets move by its hand-over plan — one write for all of them, and
    /// one by the member per target — not by a desired-owner write each; a target whose
    /// destination can prepare (an overlap hand-off) is still moved by a desired-owner write.
    #[test]
    fn a_stopping_members_targets_are_moved_by_one_plan() {
        let mut m = model(
            vec![
                with_term("a", false, false),
                with_term("b", false, false),
                with_term("l", true, false),
            ],
            (1..=4)
                .map(|i| {
                    let k = format!("k{i}");
                    Target::for_tests(&k, Some("l"), Some("l"), TargetState::Owned, true)
                })
                .collect(),
        );
        let actions = decide(&m, 10, &HashSet::new());
        assert_eq!(desires(&actions), []);
        let [Action::Plan { plan, expect: None }] = plan_actions(&actions)[..] else {
            panic!("one new plan: {actions:?}");
        };
        assert_eq!((plan.member.as_str(), plan.term.as_str()), ("l", "l-1"));
        assert_eq!(plan.moves.len(), 4);
        assert!(
            plan.moves
                .values()
                .all(|d| d.term == format!("{}-1", d.owner))
        );
        let to_a = plan.moves.values().filter(|d| d.owner == "a").count();
        assert_eq!(to_a, 2, "balanced: {plan:?}");

        // Seen written: nothing more to write while it stands.
        m.plans.insert("l".into(), seen(plan.clone(), "7"));
        assert_eq!(
            plan_actions(&decide(&m, 10, &HashSet::new())),
            Vec::<&Action>::new()
        );

        // A destination that can prepare gets its targets by desired-owner writes.
        m.instances[1] = with_term("b", false, true);
        m.plans.clear();
        let actions = decide(&m, 10, &HashSet::new());
        let [Action::Plan { plan, .. }] = plan_actions(&actions)[..] else {
            panic!("one plan: {actions:?}");
        };
        let by_desire = desires(&actions);
        assert!(plan.moves.values().all(|d| d.owner == "a"));
        assert!(
            by_desire
                .iter()
                .all(|(_, to, c)| to == "b" && *c == Cause::Handoff)
        );
        assert_eq!(plan.moves.len() + by_desire.len(), 4);
    }

    /// A plan's move stands while its target is still the member's and its destination is live
    /// in the same term; a move that no longer stands is planned again (a rewrite at the copy
    /// seen), and a plan with nothing left to move is deleted.
    #[test]
    fn a_plan_is_rewritten_when_a_destination_is_gone_and_deleted_when_done() {
        let dest = |owner: &str| Destination {
            owner: owner.into(),
            term: format!("{owner}-1"),
        };
        let old = Plan {
            member: "l".into(),
            term: "l-1".into(),
            duration_s: 10,
            moves: BTreeMap::from([
                ("k1".to_owned(), dest("a")),
                ("k2".to_owned(), dest("gone")),
            ]),
        };
        let mut m = model(
            vec![with_term("a", false, false), with_term("l", true, false)],
            vec![
                Target::for_tests("k1", Some("l"), Some("l"), TargetState::Owned, true),
                Target::for_tests("k2", Some("l"), Some("l"), TargetState::Owned, true),
            ],
        );
        m.plans.insert("l".into(), seen(old.clone(), "7"));
        let actions = decide(&m, 10, &HashSet::new());
        let [Action::Plan { plan, expect }] = plan_actions(&actions)[..] else {
            panic!("a rewrite: {actions:?}");
        };
        assert_eq!(expect.as_deref(), Some("7"));
        assert_eq!(
            plan.moves,
            BTreeMap::from([("k1".to_owned(), dest("a")), ("k2".to_owned(), dest("a"))])
        );

        // Both handed over: nothing left; the plan goes.
        let mut done = model(
            vec![with_term("a", false, false), with_term("l", true, false)],
            vec![
                Target::for_tests("k1", Some("a"), Some("a"), TargetState::Owned, true),
                Target::for_tests("k2", Some("a"), Some("a"), TargetState::Owned, true),
            ],
        );
        done.plans.insert("l".into(), seen(old.clone(), "9"));
        assert_eq!(
            plan_actions(&decide(&done, 10, &HashSet::new())),
            [&Action::DeletePlan {
                member: "l".into(),
                lease: "plan-l".into(),
                resource_version: "9".into()
            }]
        );

        // A plan of an earlier term of the member is not acted on: planned anew.
        let mut later = m.clone();
        later.plans.insert(
            "l".into(),
            seen(
                Plan {
                    term: "l-0".into(),
                    ..old
                },
                "5",
            ),
        );
        let actions = decide(&later, 10, &HashSet::new());
        let [Action::Plan { plan, expect }] = plan_actions(&actions)[..] else {
            panic!("a new plan: {actions:?}");
        };
        assert_eq!((plan.term.as_str(), expect.as_deref()), ("l-1", Some("5")));
    }

    /// A plan holds at most `plan::MAX_BYTES` of keys; the rest follows once those are moved.
    #[test]
    fn a_plan_is_capped_in_size() {
        let long = |i: usize| format!("{i:0>200}");
        let n = plan::MAX_BYTES / 200 + 50;
        let m = model(
            vec![with_term("a", false, false), with_term("l", true, false)],
            (0..n)
                .map(|i| {
                    Target::for_tests(&long(i), Some("l"), Some("l"), TargetState::Owned, true)
                })
                .collect(),
        );
        let actions = decide(&m, 10, &HashSet::new());
        let [Action::Plan { plan, .. }] = plan_actions(&actions)[..] else {
            panic!("one plan");
        };
        let bytes: usize = plan.moves.keys().map(|k| Plan::cost(k)).sum();
        assert!(
            bytes <= plan::MAX_BYTES && plan.moves.len() < n,
            "{bytes} bytes, {} moves",
            plan.moves.len()
        );
        assert!(plan.to_annotation().len() < 256 * 1024);
    }

    #[test]
    fn an_expired_hold_by_a_ready_member_fails_over() {
        let m = model(
            vec![
                Instance::for_tests("a", true, false, false),
                Instance::for_tests("b", true, false, false),
            ],
            vec![Target::for_tests(
                "t1",
                Some("a"),
                Some("a"),
                TargetState::Expired,
                true,
            )],
        );
        assert_eq!(
            desires(&decide(&m, 10, &HashSet::new())),
            [("t1".into(), "b".into(), Cause::Failover)]
        );
    }

    #[test]
    fn a_target_left_free_by_its_desired_owner_fails_over() {
        let mut free = Target::for_tests("t1", None, Some("a"), TargetState::Unassigned, true);
        free.unchanged_ms = Some(19_999);
        let m = model(
            vec![
                Instance::for_tests("a", true, false, false),
                Instance::for_tests("b", true, false, false),
            ],
            vec![free.clone()],
        );
        assert!(
            decide(&m, 10, &HashSet::new()).is_empty(),
            "still within two durations"
        );
        assert_eq!(
            quiet_for(&m, 10_000),
            Some(Duration::from_millis(1)),
            "the answer changes 1 ms later by the clock alone"
        );
        free.unchanged_ms = Some(20_000);
        let m = model(
            vec![
                Instance::for_tests("a", true, false, false),
                Instance::for_tests("b", true, false, false),
            ],
            vec![free],
        );
        assert_eq!(quiet_for(&m, 10_000), Some(Duration::ZERO));
        assert_eq!(
            desires(&decide(&m, 10, &HashSet::new())),
            [("t1".into(), "b".into(), Cause::Failover)]
        );
    }

    /// x's agent stopped with its pod kept ready: it released t1 and t2 a minute ago, and they
    /// just failed over to y. They have waited for y only since then, so y is not neglecting
    /// them and nothing moves — in particular not back to x, which now holds nothing and would
    /// look like the best home. (Measured from the release alone, y looked hung at once.)
    #[test]
    fn a_target_that_just_failed_over_is_not_sent_back() {
        let failed_over = |key: &str| {
            let mut t = Target::for_tests(key, None, Some("y"), TargetState::Unassigned, true);
            t.unchanged_ms = Some(60_000);
            t.desired_unchanged_ms = Some(500);
            t
        };
        let m = model(
            vec![
                Instance::for_tests("x", true, false, false),
                Instance::for_tests("y", true, false, false),
            ],
            vec![
                failed_over("t1"),
                failed_over("t2"),
                Target::for_tests("t3", Some("y"), Some("y"), TargetState::Owned, true),
            ],
        );
        assert!(
            members(&m, 10_000)
                .iter()
                .all(|m| m.state == MemberState::Active),
            "{:?}",
            members(&m, 10_000)
        );
        assert!(decide(&m, 10, &HashSet::new()).is_empty());
        assert_eq!(quiet_for(&m, 10_000), Some(Duration::from_millis(19_500)));
        // Once y has left them free for two durations of its own, it is neglecting them.
        let mut late = failed_over("t1");
        late.desired_unchanged_ms = Some(20_000);
        let m = model(
            vec![
                Instance::for_tests("x", true, false, false),
                Instance::for_tests("y", true, false, false),
            ],
            vec![late],
        );
        assert_eq!(
            desires(&decide(&m, 10, &HashSet::new())),
            [("t1".into(), "x".into(), Cause::Failover)]
        );
    }

    #[test]
    fn when_every_member_looks_hung_a_vanished_pods_targets_still_move() {
        let mut stalled = Target::for_tests("t1", None, Some("a"), TargetState::Unassigned, true);
        stalled.unchanged_ms = Some(60_000);
        let gone = Target::for_tests("t2", None, Some("gone"), TargetState::Unassigned, true);
        let m = model(
            vec![Instance::for_tests("a", true, false, false)],
            vec![stalled, gone],
        );
        assert_eq!(
            desires(&decide(&m, 10, &HashSet::new())),
            // t1 is already wanted on the only member there is: no write.
            [("t2".into(), "a".into(), Cause::Failover)]
        );
    }

    #[test]
    fn cordoned_members_keep_targets_busy_ones_are_left_alone_and_holders_are_adopted() {
        let m = model(
            vec![
                Instance::for_tests("a", true, true, false),
                Instance::for_tests("b", true, false, false),
            ],
            vec![
                Target::for_tests("t1", Some("a"), Some("a"), TargetState::Owned, true),
                Target::for_tests("t2", Some("b"), None, TargetState::Owned, true),
                Target::for_tests("t3", Some("b"), Some("gone"), TargetState::Moving, true),
            ],
        );
        let busy = HashSet::from(["t3".to_owned()]);
        assert_eq!(
            desires(&decide(&m, 10, &busy)),
            [("t2".into(), "b".into(), Cause::Initial)]
        );
    }

    #[test]
    fn unconfigured_leases_are_deleted_unless_the_list_is_in_doubt() {
        let mut m = model(
            vec![Instance::for_tests("a", true, false, false)],
            vec![Target::for_tests(
                "old",
                Some("a"),
                Some("a"),
                TargetState::Orphaned,
                false,
            )],
        );
        assert!(
            matches!(&decide(&m, 10, &HashSet::new())[..], [Action::Delete { key, .. }] if key == "old")
        );
        m.targets_error = Some("bad ConfigMap".into());
        assert!(decide(&m, 10, &HashSet::new()).is_empty());
    }

    #[test]
    fn nothing_is_decided_on_stale_or_gnmic_clusters() {
        let mut m = model(
            vec![Instance::for_tests("a", true, false, false)],
            vec![Target::for_tests(
                "t",
                None,
                None,
                TargetState::Unassigned,
                true,
            )],
        );
        assert_eq!(decide(&m, 10, &HashSet::new()).len(), 1);
        m.stale = true;
        assert!(decide(&m, 10, &HashSet::new()).is_empty());
        m.stale = false;
        m.protocol = Protocol::Gnmic;
        assert!(decide(&m, 10, &HashSet::new()).is_empty());
    }

    #[test]
    fn fences_a_silent_member_and_revokes_only_what_is_revocable() {
        use crate::k8s::model::{Liveness, MemberLease};
        let ml = |liveness, revocable| {
            Some(MemberLease {
                liveness,
                unchanged_ms: Some(0),
                duration_ms: Some(10_000),
                revocable,
                term: None,
                app_work: None,
            })
        };
        let mut a = Instance::for_tests("a", true, false, false);
        a.member_lease = ml(Liveness::Live, false);
        let mut b = Instance::for_tests("b", true, false, false);
        b.member_lease = ml(Liveness::Expired, false);
        let mut c = Instance::for_tests("c", true, false, false);
        c.member_lease = ml(Liveness::Released, true);
        let mut t = vec![
            Target::for_tests("t1", Some("a"), Some("a"), TargetState::Owned, true),
            Target::for_tests("t2", Some("b"), Some("b"), TargetState::Expired, true),
            Target::for_tests("t3", Some("c"), Some("a"), TargetState::Expired, true),
        ];
        t.sort_by(|x, y| x.key.cmp(&y.key));
        let m = ClusterModel::for_tests(vec![a, b, c], t);
        let actions = decide(&m, 10, &HashSet::new());
        // b's member Lease went silent: fenced, and its target moved with a revoke (the write
        // checks the fence took). c released its member Lease: t3, already desired on a, has
        // its holder cleared. a's live hold is left alone.
        assert!(
            actions.contains(&Action::Fence { member: "b".into() }),
            "{actions:?}"
        );
        assert!(
            actions.iter().any(|x| matches!(x,
            Action::Desire { key, desire, revoke: Some(h), .. }
                if key == "t2" && desire.owner == "a" && h == "b")),
            "{actions:?}"
        );
        assert!(
            actions.contains(&Action::Revoke {
                key: "t3".into(),
                holder: "c".into()
            }),
            "{actions:?}"
        );
        assert!(!actions.iter().any(|x| matches!(x,
            Action::Desire { key, .. } | Action::Revoke { key, .. } if key == "t1")));
    }
}
