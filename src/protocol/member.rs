//! The member rules as pure decisions — the one copy of them. `agent::member` runs
//! them against the API server; `engine::simulation` runs the same functions against its
//! modelled server, with crashes, stalls, partitions, delayed watch events and clocks that
//! drift, so what the simulation checks is what the agent does.
//!
//! The rules (docs/protocol.md, "Member rules"):
//! - [`Authority`]: the member Lease is renewed every `D/3` by the member's own monotonic clock
//!   and is the authority for all its work, until the renew deadline — `2D/3` after the last
//!   successful write was *sent*. Past it, or when a write finds the Lease fenced or deleted,
//!   every piece of work stops and nothing is written; the next write starts a new term.
//! - [`take`]: a target Lease desired for the member is taken only while it has authority and is
//!   not leaving: with a write when free (or still naming it from an earlier term), and as it
//!   is — no write — when it was handed to the member under its current term, once every watch
//!   of the member lists it (else a short wait, then a write). Another member's hold is never
//!   ended by the member's observation: only by that holder's release or the control plane's
//!   revoke.
//! - [`keep`]: a held target is kept while desired for the member; handed over (work stopped
//!   first, then [`given_up`](super::given_up)) when not; and lost — work stopped, no write —
//!   when someone else's write took it.
//! - [`after_acquire`]: a hold whose acquisition is answered after the member's authority
//!   lapsed is never worked on and not written either: the Lease keeps naming the member, which
//!   takes it again under its next term (a release and a new acquisition would be two writes
//!   and two ownership changes in history, for work that never moved).
//! - Tenure ([`Authority::tenure`]): a run of terms of one process between which nobody else
//!   wrote the member Lease — each new term a compare-and-swap on the process's own copy of the
//!   term before. Nobody can revoke a target from a member whose member Lease was never fenced
//!   or released, so what the member held when a term lapsed still names it, unchanged, and a
//!   new term of the same tenure works on it again without a write ([`Take::Resume`]) — after
//!   a slow API server made every member miss its deadline, a write per target retaken would
//!   keep the server overloaded long after the load is gone. A new tenure (the Lease found
//!   fenced, taken or deleted, or a term begun on another copy) takes every target by a write.
//!
//! Times are milliseconds on the member's own monotonic clock.

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;

use super::{LeaseRole, LeaseView};

/// How long a target Lease handed to the member, listed by one of its watches but not yet by
/// every one, is left for the others to list before it is taken with a write (ms). Adopting on
/// one watch's copy could act on a copy another watch already dropped; writing at once would
/// be a second write per handover (and a second acquisition in history).
pub const HANDED_WAIT_MS: i64 = 200;

/// The member Lease's clock: whether the member may work, and when its next write is due.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authority {
    /// When the last successful write of the current term was sent; `None`: no authority (not
    /// registered yet, fenced, deleted, or past the renew deadline).
    pub renewed: Option<i64>,
    /// The member Lease's duration `D`.
    pub duration_ms: i64,
    /// No write before this (after a failed one).
    pub retry_at: i64,
    /// The member is stopping and wants its targets moved away first.
    pub leaving: bool,
    /// `leaving` as last written.
    pub leaving_written: bool,
    /// This process's tenure of its member Lease: 0 before its first term, raised by a term
    /// that does not continue the one before (not a compare-and-swap on this process's own
    /// copy of it) and whenever the Lease is found fenced, taken or deleted. Within a tenure
    /// nobody but this process wrote the member Lease.
    pub tenure: u64,
    /// The term ([`member_term`](super::member_term)) of this process's last successful write.
    pub last_term: Option<String>,
    /// The records that this process's new terms sent to continue its tenure would have
    /// written, while none of them was answered ([`Record`]): a slow server takes a write it
    /// answers too late, and the member Lease found holding one of them is still this
    /// process's own (cleared by any answered write).
    pub unconfirmed: Vec<Record>,
}

/// What identifies a member Lease record this process sent: its term and its `acquireTime`
/// (the send's own timestamp, which nobody else writes).
pub type Record = (String, Option<Timestamp>);

/// The [`Record`] of member Lease `lease`. `acquireTime` is a `MicroTime`: the API server keeps
/// (and `k8s-openapi` writes) whole microseconds, so the time is cut to those — the copy a
/// write sent and the copy read back must compare equal.
pub fn record_of(lease: &Lease) -> Record {
    let acquired = lease.spec.as_ref().and_then(|s| s.acquire_time.as_ref());
    let micros = |t: Timestamp| Timestamp::from_microsecond(t.as_microsecond()).unwrap_or(t);
    (super::member_term(lease), acquired.map(|t| micros(t.0)))
}

/// A member Lease write as sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    pub write: Write,
    /// When (the member's clock, ms).
    pub at: i64,
    /// `leaving` as written.
    pub leaving: bool,
    /// A new term written on this process's own copy of its last term
    /// ([`Authority::continues`]), which keeps the tenure: the record it writes, kept in case
    /// its answer never comes. `None` for any other write.
    pub record: Option<Record>,
}

impl Sent {
    /// A new term that continues the tenure.
    pub fn continues(&self) -> bool {
        self.record.is_some()
    }
}

/// Which write of the member Lease is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Write {
    /// Renew within the current term.
    Renew,
    /// Register, or take the Lease again after losing authority: a new term.
    NewTerm,
}

/// What came back from a member Lease write.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Answer<'a> {
    /// Written: the Lease as written.
    Written(&'a Lease),
    /// 409, with the holder of the fresh copy when it could be read.
    Conflict(Option<Option<&'a str>>),
    /// The Lease is gone.
    NotFound,
    /// No answer in time, or another error.
    Failed,
}

/// What a member Lease write's answer means for the member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Written: the member may work until the new deadline (`new_term`: it had no authority;
    /// `resumes`: the new term continues the tenure, so what the member held when its last
    /// term lapsed may be worked on again without a write, [`Take::Resume`]).
    Renewed { new_term: bool, resumes: bool },
    /// Fenced, taken or deleted while the member had authority: every piece of work stops now
    /// (no write); the hold ended at `ended` by the member's clock (`renewed + D`).
    Lost { ended: i64 },
    /// Nothing changes for the work; the write is retried from `retry_at`.
    Retry,
    /// The answer needs no action (e.g. a 409 on a Lease already lost).
    Nothing,
}

impl Authority {
    /// No authority yet; the first write (a registration) is due at once.
    pub fn new(duration_ms: i64) -> Self {
        Self {
            renewed: None,
            duration_ms,
            retry_at: i64::MIN,
            leaving: false,
            leaving_written: false,
            tenure: 0,
            last_term: None,
            unconfirmed: Vec::new(),
        }
    }

    /// Whether a new term written on `base` (the freshest copy known of the member Lease)
    /// would continue this process's tenure: `base` is the member's own record of its last
    /// term — held by it (so neither fenced nor released: both empty the holder), in the term
    /// of its last successful write, or the very record one of its unanswered new terms of
    /// this tenure wrote ([`Authority::unconfirmed`]). A compare-and-swap on it then proves
    /// that nobody else wrote the Lease since that term began (a fence empties the holder, and
    /// only a take — a new term — names the member again).
    pub fn continues(&self, base: Option<&Lease>, me: &str) -> bool {
        let Some(base) = base else {
            return false;
        };
        let holder = base
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.as_deref());
        if holder != Some(me) {
            return false;
        }
        let record = record_of(base);
        self.last_term.as_deref() == Some(record.0.as_str()) || self.unconfirmed.contains(&record)
    }

    /// The member Lease write `write` of `next`, sent at `at` on `base`
    /// ([`Authority::continues`]).
    pub fn sending(
        &self,
        write: Write,
        at: i64,
        (base, next): (Option<&Lease>, &Lease),
        me: &str,
    ) -> Sent {
        let continues = write == Write::NewTerm && self.continues(base, me);
        Sent {
            write,
            at,
            leaving: self.leaving,
            record: continues.then(|| record_of(next)),
        }
    }

    /// The renew deadline of the current term: past it, all work stops.
    pub fn deadline(&self) -> Option<i64> {
        self.renewed.map(|r| r + self.duration_ms * 2 / 3)
    }

    /// Whether the member may work at `now`.
    pub fn holds(&self, now: i64) -> bool {
        self.deadline().is_some_and(|d| now < d)
    }

    /// Whether the member may take targets at `now`: it holds authority and is not leaving.
    pub fn may_take(&self, now: i64) -> bool {
        self.holds(now) && !self.leaving
    }

    /// When the next write is due: `D/3` after the last one, at once when `leaving` changed
    /// or there is no authority — never before `retry_at`.
    pub fn due(&self) -> i64 {
        match self.renewed {
            Some(r) if self.leaving == self.leaving_written => {
                (r + self.duration_ms / 3).max(self.retry_at)
            }
            _ => self.retry_at,
        }
    }

    /// The write due at `now`, if any (the caller knows whether one is in flight).
    pub fn write_due(&self, now: i64) -> Option<Write> {
        (now >= self.due()).then_some(if self.renewed.is_some() {
            Write::Renew
        } else {
            Write::NewTerm
        })
    }

    /// How long to wait for the answer to a member Lease write (ms): `2D/3`. A write sent at `s`
    /// gives authority until `s + 2D/3` whenever its answer comes, so until then the answer is
    /// worth waiting for; giving up sooner (as at `D/3`, the write's due interval) throws away
    /// every renewal of a server slower than that — the write lands anyway, the next one meets
    /// a 409 and a re-read, and the member loses its authority for nothing. While it waits the
    /// member sends no other write of its member Lease (one compare-and-swap at a time).
    pub fn write_timeout(&self) -> i64 {
        self.duration_ms * 2 / 3
    }

    /// At `now`, past the renew deadline: the authority ends — every piece of work stops, and
    /// nothing is written. Returns when the hold ended by the member's clock (`renewed + D`,
    /// for the overrun report), or `None` when nothing changed.
    pub fn expire(&mut self, now: i64) -> Option<i64> {
        let deadline = self.deadline()?;
        if now < deadline {
            return None;
        }
        let ended = self.renewed.map(|r| r + self.duration_ms);
        self.renewed = None;
        ended
    }

    /// The write `sent` came back with `answer` at `now`; `me` is the member's identity.
    /// `backoff_ms` is the pause before retrying a failed write.
    ///
    /// A renewal that was sent under authority but answered after the authority ended (the
    /// deadline passed while it was in flight) gives none back: the member stopped all its
    /// work then, and works again only in a new term (`Write::NewTerm`, which raises
    /// `leaseTransitions`): a new term is a point where the member knows, by its own clock,
    /// that all its work has stopped. Written on its own record of the lapsed term, the new
    /// term keeps the tenure (`resumes`); on any other copy it begins a new one.
    pub fn answered(
        &mut self,
        sent: Sent,
        answer: Answer<'_>,
        me: &str,
        now: i64,
        backoff_ms: i64,
    ) -> Outcome {
        match answer {
            Answer::Written(_) if sent.write == Write::Renew && self.renewed.is_none() => {
                Outcome::Nothing
            }
            Answer::Written(lease) => {
                let new_term = self.renewed.is_none();
                let resumes = new_term && sent.continues();
                if new_term && !resumes {
                    self.tenure += 1;
                }
                self.unconfirmed.clear();
                self.last_term = Some(super::member_term(lease));
                self.renewed = Some(sent.at);
                self.leaving_written = sent.leaving;
                Outcome::Renewed { new_term, resumes }
            }
            // Fenced by the control plane (or released by an earlier run): whatever it decided,
            // this member's holds may be given away now.
            Answer::Conflict(Some(holder)) if holder != Some(me) => self.lose(),
            Answer::NotFound => self.lose(),
            // A 409 on our own copy: re-decide on the fresh one at once.
            Answer::Conflict(Some(_)) => Outcome::Nothing,
            Answer::Conflict(None) | Answer::Failed => {
                // No answer: it may have been written all the same.
                if let Some(record) = sent.record {
                    self.unconfirmed.push(record);
                }
                self.retry_at = now + backoff_ms;
                Outcome::Retry
            }
        }
    }

    /// Someone else wrote the member Lease (fenced, released by an earlier run, deleted): a
    /// new tenure, whether or not the member still had authority.
    fn lose(&mut self) -> Outcome {
        self.tenure += 1;
        self.unconfirmed.clear();
        match self.renewed.take() {
            Some(r) => Outcome::Lost {
                ended: r + self.duration_ms,
            },
            None => Outcome::Nothing,
        }
    }
}

/// The member Lease write for `write`: `current` is the freshest copy known (`None`: create
/// it); returns the Lease to send and whether it is a create.
pub fn member_lease_write(
    current: Option<&Lease>,
    write: Write,
    (prefix, cluster, me): (&str, &str, &str),
    now: Timestamp,
    duration_s: i32,
    leaving: bool,
) -> (Lease, bool) {
    match current {
        Some(l) if write == Write::NewTerm => (
            super::member_taken_again(l, me, now, duration_s, leaving),
            false,
        ),
        Some(l) => (
            super::member_renewed(l, me, now, duration_s, leaving),
            false,
        ),
        None => (
            super::new_member_lease(prefix, cluster, me, now, duration_s, leaving),
            true,
        ),
    }
}

/// How the member's watches list a target Lease (the agent has two, by label; a member with
/// one watch always lists it fully).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Listing {
    /// Every watch of the member lists it.
    pub by_all: bool,
    /// Since an earlier look: until when (ms) the member waits for the other watches to list a
    /// Lease handed to it ([`Take::Wait`]).
    pub waiting_until: Option<i64>,
}

impl Listing {
    /// Listed by every watch (a member with a single watch).
    pub const FULL: Listing = Listing {
        by_all: true,
        waiting_until: None,
    };
}

/// What to do with a target Lease the member does not hold (work on) now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Take {
    /// Nothing (not desired for it, another member holds it, or no authority to take).
    Skip,
    /// Take it with a write ([`acquired`](super::acquired)), then work.
    Acquire,
    /// Handed to it under its current term: work on it as it is, no write.
    Adopt,
    /// Held by it when its last term lapsed, in its current tenure, and not written since:
    /// work on it again as it is, no write.
    Resume,
    /// Handed to it, but not every watch lists it yet: look again at `until` (then
    /// [`Take::Acquire`] if still not listed by all).
    Wait { until: i64 },
    /// It names the member as holder but is desired for another (a stray hold from an earlier
    /// run, or a write whose answer was lost): give it up, with no work to stop.
    GiveUp,
    /// Held by another member and desired for this one, under its current term, in an overlap
    /// hand-off ([`ANN_OVERLAP_MS`](super::ANN_OVERLAP_MS)): start the app on it ahead of the
    /// hand-over (no write) and, once the app proves it works, say so on the Lease
    /// ([`ready`](super::ready)) — unless `said`: the Lease carries this term's word already.
    Prepare { said: bool },
}

/// The decision about target Lease `view`, not held by the member `me` (no work on it), at
/// `now`: `may_take` is [`Authority::may_take`]; `term` the member's current term
/// ([`member_term`](super::member_term) of its member Lease as last written); `resumable`:
/// the member held this Lease, at the generation `view` shows, when a term of its current
/// [tenure](Authority::tenure) lapsed, and has written it no more since.
///
/// Why a resumable hold needs no write: only its holder's write or a revoke changes a held
/// Lease's holder, a revoke needs the holder's member Lease fenced or released, and within a
/// tenure it never was — so the Lease still names the member at that generation, whatever
/// watch delivered the copy, and nobody else worked on the target meanwhile. The work goes on
/// at the generation it had: every other member's work on the target is below it or above it.
pub fn take(
    view: &LeaseView,
    me: &str,
    may_take: bool,
    (term, resumable): (Option<&str>, bool),
    listing: Listing,
    now: i64,
) -> Take {
    if !matches!(view.role, LeaseRole::Target(_)) {
        return Take::Skip;
    }
    let holder = view.holding.holder.as_deref();
    if view.desired.as_deref() != Some(me) {
        return if holder == Some(me) {
            Take::GiveUp
        } else {
            Take::Skip
        };
    }
    if !may_take {
        return Take::Skip;
    }
    match holder {
        None => Take::Acquire,
        Some(h) if h == me => {
            if resumable {
                return Take::Resume;
            }
            let handed_now = term.is_some() && view.handed_term.as_deref() == term;
            if !handed_now {
                // Still ours from an earlier term: a new hold, with a new generation.
                return Take::Acquire;
            }
            if listing.by_all {
                return Take::Adopt;
            }
            let until = listing.waiting_until.unwrap_or(now + HANDED_WAIT_MS);
            if now < until {
                Take::Wait { until }
            } else {
                Take::Acquire
            }
        }
        Some(_)
            if view.overlap_ms.is_some()
                && term.is_some()
                && view.desired_term.as_deref() == term =>
        {
            Take::Prepare {
                said: view.ready.as_ref().map(|r| r.0.as_str()) == term,
            }
        }
        Some(_) => Take::Skip,
    }
}

/// For a target the member holds and should hand over ([`Keep::HandOver`], not stopping): how
/// much longer (ms) it keeps working before it stops, having waited `waited_ms` since it saw
/// this move. In an overlap hand-off ([`ANN_OVERLAP_MS`](super::ANN_OVERLAP_MS)) it keeps
/// working until the next owner says its app works on the target under the desired term
/// ([`ANN_READY_TERM`](super::ANN_READY_TERM)), or at most the bound; `None`: stop now
/// (exclusive, the word given, the bound passed, or no term to hand over to).
pub fn await_next(view: &LeaseView, waited_ms: i64) -> Option<i64> {
    let bound = view.overlap_ms?;
    let term = view.desired_term.as_deref()?;
    let said = view.ready.as_ref().is_some_and(|r| r.0 == term);
    (!said && waited_ms < bound).then(|| bound - waited_ms)
}

/// What to do with a target the member holds (works on, or is starting to).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// Go on.
    Keep,
    /// No longer desired for it (or it is stopping): stop the work, then give the Lease up
    /// ([`given_up`](super::given_up): straight to the next owner when its term is known).
    HandOver,
    /// Someone else's write took it (a revoke): stop the work at once; write nothing.
    Lost,
    /// The Lease is gone: stop the work; nothing to write.
    Gone,
}

/// The decision about a target the member `me` holds, given the freshest copy it knows
/// (`None`: deleted, or no longer listed by any watch) and whether the member is stopping.
pub fn keep(view: Option<&LeaseView>, me: &str, stopping: bool) -> Keep {
    let Some(view) = view else {
        return Keep::Gone;
    };
    if view.holding.holder.as_deref() != Some(me) {
        Keep::Lost
    } else if stopping || view.desired.as_deref() != Some(me) {
        Keep::HandOver
    } else {
        Keep::Keep
    }
}

/// What to do with a target Lease the member has just acquired (its write answered).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acquired {
    /// Start the work (the acquire hook).
    Work,
    /// The member is leaving or stopping: never started; give it straight back (to the next
    /// owner, [`given_up`](super::given_up)).
    GiveBack,
    /// Its authority lapsed while the write was in flight: never started, and nothing to write.
    /// The Lease goes on naming the member. Under its next term it works on it again without a
    /// write when that term continues the tenure the write was sent in (`resumable`:
    /// [`Take::Resume`]), else [`take`] acquires it again with one write and a new generation.
    /// The holder never changes meanwhile, so no ownership change is seen or recorded, and a
    /// member that does not come back is revoked as usual.
    Leave { resumable: bool },
}

/// The decision about a hold just acquired, at `now` on the member's clock; the write was sent
/// in the [tenure](Authority::tenure) `tenure`.
///
/// Authority now is not enough to work: an acquisition sent in an earlier tenure may have
/// landed before the member Lease was fenced, and the target been revoked since — the member
/// has a new term now, but the revoke read the fence. Within one tenure no revoke can have
/// happened.
pub fn after_acquire(authority: &Authority, tenure: u64, stopping: bool, now: i64) -> Acquired {
    let same_tenure = authority.tenure == tenure;
    if stopping || authority.leaving {
        Acquired::GiveBack
    } else if authority.holds(now) && same_tenure {
        Acquired::Work
    } else {
        Acquired::Leave {
            resumable: same_tenure,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{self, Desire};

    const D: i64 = 9_000;

    fn sent(write: Write, at: i64, leaving: bool) -> Sent {
        Sent {
            write,
            at,
            leaving,
            record: None,
        }
    }

    /// A new term of "m" sent at `at`, written, answered at `now`.
    fn new_term(a: &mut Authority, at: i64, now: i64) -> Outcome {
        let written = lease();
        a.answered(
            sent(Write::NewTerm, at, false),
            Answer::Written(&written),
            "m",
            now,
            250,
        )
    }

    /// A member Lease of "m" as a write's answer.
    fn lease() -> Lease {
        protocol::new_member_lease("leasehold", "c", "m", Timestamp::UNIX_EPOCH, 9, false)
    }

    fn target(desired: Option<&str>, holder: Option<&str>, handed_term: Option<&str>) -> LeaseView {
        let mut lease = protocol::new_target_lease(
            "leasehold",
            "c",
            "t1",
            &Desire {
                overlap_ms: None,
                owner: desired.unwrap_or("").to_owned(),
                cause: crate::model::Cause::Initial,
                operation: None,
                duration_s: 9,
                term: None,
            },
        );
        lease.metadata.resource_version = Some("1".into());
        if let Some(h) = holder {
            lease = match handed_term {
                Some(term) => protocol::handed_over(&lease, h, term, Timestamp::UNIX_EPOCH, 9),
                None => protocol::acquired(&lease, h, Timestamp::UNIX_EPOCH, 9),
            };
        }
        protocol::parse_native(&lease, "c").unwrap()
    }

    #[test]
    fn the_member_lease_clock() {
        let mut a = Authority::new(D);
        assert_eq!(a.write_due(0), Some(Write::NewTerm));
        assert!(!a.holds(0));
        assert_eq!(
            new_term(&mut a, 100, 150),
            Outcome::Renewed {
                new_term: true,
                resumes: false
            }
        );
        assert!(a.holds(100 + 5_999) && !a.holds(100 + 6_000));
        assert_eq!(a.write_due(3_099), None);
        assert_eq!(a.write_due(3_100), Some(Write::Renew));
        // Leaving is written at once.
        a.leaving = true;
        assert_eq!(a.write_due(200), Some(Write::Renew));
        assert!(!a.may_take(200) && a.holds(200));
        // A failed write waits for the backoff; the deadline does not move.
        assert_eq!(
            a.answered(sent(Write::Renew, 300, true), Answer::Failed, "m", 400, 250),
            Outcome::Retry
        );
        assert_eq!(a.due(), 650);
        assert_eq!(a.expire(6_099), None);
        assert_eq!(a.expire(6_100), Some(100 + D));
        assert_eq!(a.renewed, None);
        assert_eq!(a.write_due(6_100), Some(Write::NewTerm));
    }

    #[test]
    fn a_renewal_answered_after_the_deadline_gives_no_authority_back() {
        let mut a = Authority::new(D);
        new_term(&mut a, 0, 10);
        assert_eq!(a.write_due(3_000), Some(Write::Renew));
        // Sent at 3,000 under authority; the deadline (6,000) passes while it is in flight.
        assert_eq!(a.expire(6_000), Some(D));
        assert_eq!(
            a.answered(
                sent(Write::Renew, 3_000, false),
                Answer::Written(&lease()),
                "m",
                6_500,
                250
            ),
            Outcome::Nothing
        );
        assert!(
            !a.holds(6_500),
            "no authority from a renewal of the term that ended"
        );
        assert_eq!(a.write_due(6_500), Some(Write::NewTerm), "a new term first");
        assert_eq!(
            new_term(&mut a, 6_500, 6_600),
            Outcome::Renewed {
                new_term: true,
                resumes: false
            }
        );
        assert!(a.holds(6_600));
    }

    #[test]
    fn fenced_or_deleted_ends_the_authority_once() {
        let mut a = Authority::new(D);
        new_term(&mut a, 0, 0);
        assert_eq!(
            a.answered(
                sent(Write::Renew, 10, false),
                Answer::Conflict(Some(Some("m"))),
                "m",
                10,
                250
            ),
            Outcome::Nothing,
            "a 409 on our own Lease is re-decided on the fresh copy"
        );
        assert_eq!(
            a.answered(
                sent(Write::Renew, 20, false),
                Answer::Conflict(Some(None)),
                "m",
                20,
                250
            ),
            Outcome::Lost { ended: D },
            "fenced (released by the control plane)"
        );
        assert_eq!(
            a.answered(
                sent(Write::Renew, 30, false),
                Answer::NotFound,
                "m",
                30,
                250
            ),
            Outcome::Nothing,
            "already without authority"
        );
        new_term(&mut a, 40, 40);
        assert_eq!(
            a.answered(
                sent(Write::Renew, 50, false),
                Answer::NotFound,
                "m",
                50,
                250
            ),
            Outcome::Lost { ended: 40 + D }
        );
    }

    #[test]
    fn what_a_member_takes() {
        let full = Listing::FULL;
        let t = |v: &LeaseView, may: bool, term: Option<&str>, l: Listing, now: i64| {
            take(v, "me", may, (term, false), l, now)
        };
        let free = target(Some("me"), None, None);
        assert_eq!(t(&free, true, Some("1"), full, 0), Take::Acquire);
        assert_eq!(
            t(&free, false, Some("1"), full, 0),
            Take::Skip,
            "no authority"
        );
        let others = target(Some("me"), Some("other"), None);
        assert_eq!(
            t(&others, true, Some("1"), full, 0),
            Take::Skip,
            "another's hold ends only by its release or a revoke"
        );
        let earlier = target(Some("me"), Some("me"), None);
        assert_eq!(t(&earlier, true, Some("1"), full, 0), Take::Acquire);
        let handed = target(Some("me"), Some("me"), Some("2"));
        assert_eq!(t(&handed, true, Some("2"), full, 0), Take::Adopt);
        assert_eq!(
            t(&handed, true, Some("3"), full, 0),
            Take::Acquire,
            "handed under an earlier term: a write"
        );
        let half = Listing {
            by_all: false,
            waiting_until: None,
        };
        assert_eq!(
            t(&handed, true, Some("2"), half, 10),
            Take::Wait {
                until: 10 + HANDED_WAIT_MS
            }
        );
        let waited = Listing {
            by_all: false,
            waiting_until: Some(210),
        };
        assert_eq!(
            t(&handed, true, Some("2"), waited, 209),
            Take::Wait { until: 210 }
        );
        assert_eq!(t(&handed, true, Some("2"), waited, 210), Take::Acquire);
        let stray = target(Some("other"), Some("me"), None);
        assert_eq!(t(&stray, false, None, full, 0), Take::GiveUp);
        let not_mine = target(Some("other"), None, None);
        assert_eq!(t(&not_mine, true, Some("1"), full, 0), Take::Skip);
    }

    /// Target "t1" desired for "b" under term "4@u" with an overlap bound of 5 s, held by
    /// "a"; `ready`: "b"'s word under that term is on it.
    fn overlap_move(ready: Option<&str>) -> (Lease, LeaseView) {
        let desire = Desire {
            owner: "b".into(),
            cause: crate::model::Cause::Rebalance,
            operation: None,
            duration_s: 9,
            term: Some("4@u".into()),
            overlap_ms: Some(5_000),
        };
        let mut lease = protocol::new_target_lease("leasehold", "c", "t1", &desire);
        lease = protocol::acquired(&lease, "a", Timestamp::UNIX_EPOCH, 9);
        lease.metadata.resource_version = Some("1".into());
        if let Some(term) = ready {
            lease = protocol::ready(&lease, term, 1_000);
        }
        let view = protocol::parse_native(&lease, "c").unwrap();
        (lease, view)
    }

    #[test]
    fn in_an_overlap_hand_off_the_next_owner_prepares_and_the_holder_waits_for_its_word() {
        let held = |term| (Some(term), false);
        // The next owner starts ahead of the hand-over, under its current term only.
        let (_, v) = overlap_move(None);
        let take = |v: &LeaseView, term, may| take(v, "b", may, held(term), Listing::FULL, 0);
        assert_eq!(take(&v, "4@u", true), Take::Prepare { said: false });
        assert_eq!(
            take(&v, "5@u", true),
            Take::Skip,
            "another term: not for this move"
        );
        assert_eq!(
            take(&v, "4@u", false),
            Take::Skip,
            "no authority (or leaving)"
        );
        // Once its word is on the Lease it waits for the hand-over.
        let (_, said) = overlap_move(Some("4@u"));
        assert_eq!(take(&said, "4@u", true), Take::Prepare { said: true });
        // The holder keeps working until the word comes, at most the bound.
        assert_eq!(await_next(&v, 0), Some(5_000));
        assert_eq!(await_next(&v, 4_000), Some(1_000));
        assert_eq!(await_next(&v, 5_000), None, "the bound passed: stop first");
        assert_eq!(await_next(&said, 0), None, "the word is given");
        // A word under another term (an earlier move to the same member) does not count.
        let (_, stale) = overlap_move(Some("3@u"));
        assert_eq!(await_next(&stale, 0), Some(5_000));
        assert_eq!(take(&stale, "4@u", true), Take::Prepare { said: false });
        // Exclusive (no bound written): nothing to prepare, nothing to wait for.
        let exclusive = target(Some("b"), Some("a"), None);
        assert_eq!(take(&exclusive, "4@u", true), Take::Skip);
        assert_eq!(await_next(&exclusive, 0), None);
    }

    #[test]
    fn a_word_of_readiness_belongs_to_the_term_it_was_given_under() {
        let (lease, _) = overlap_move(Some("4@u"));
        // The control plane moves the target again, to the same member under the same term:
        // the word stands.
        let again = Desire {
            owner: "b".into(),
            cause: crate::model::Cause::Rebalance,
            operation: Some("op-2".into()),
            duration_s: 9,
            term: Some("4@u".into()),
            overlap_ms: Some(5_000),
        };
        let v = protocol::parse_native(&protocol::with_desire(&lease, &again), "c").unwrap();
        assert_eq!(v.ready, Some(("4@u".to_owned(), Some(1_000))));
        // Another owner (or a new term): the word is gone with the move it was for.
        let other = Desire {
            owner: "c2".into(),
            term: Some("1@v".into()),
            ..again.clone()
        };
        let v = protocol::parse_native(&protocol::with_desire(&lease, &other), "c").unwrap();
        assert_eq!(v.ready, None);
        // Exclusive: no bound on the Lease.
        let exclusive = Desire {
            overlap_ms: None,
            ..again
        };
        let v = protocol::parse_native(&protocol::with_desire(&lease, &exclusive), "c").unwrap();
        assert_eq!(v.overlap_ms, None);
    }

    #[test]
    fn a_hand_over_tells_how_its_overlap_went() {
        use crate::model::Overlap;
        let at = |ms| Timestamp::from_millisecond(ms).unwrap();
        // Proven: from the next owner's word (1,000) to the hand-over (3,500).
        let (lease, _) = overlap_move(Some("4@u"));
        let handed = protocol::handed_over(&lease, "b", "4@u", at(3_500), 9);
        let v = protocol::parse_native(&handed, "c").unwrap();
        assert_eq!(
            protocol::overlap_of(&v),
            Some((Overlap::Proven, Some(2_500)))
        );
        // No word (the bound passed): unproven.
        let (lease, _) = overlap_move(None);
        let handed = protocol::handed_over(&lease, "b", "4@u", at(3_500), 9);
        let v = protocol::parse_native(&handed, "c").unwrap();
        assert_eq!(protocol::overlap_of(&v), Some((Overlap::Unproven, None)));
        // Not an overlap hand-off, or not a hand-over: nothing to tell.
        let plain = target(Some("b"), Some("b"), Some("4@u"));
        assert_eq!(protocol::overlap_of(&plain), None);
        let (_, not_handed) = overlap_move(Some("4@u"));
        assert_eq!(protocol::overlap_of(&not_handed), None);
    }

    #[test]
    fn what_a_member_keeps() {
        let mine = target(Some("me"), Some("me"), None);
        assert_eq!(keep(Some(&mine), "me", false), Keep::Keep);
        assert_eq!(keep(Some(&mine), "me", true), Keep::HandOver);
        let moved = target(Some("other"), Some("me"), None);
        assert_eq!(keep(Some(&moved), "me", false), Keep::HandOver);
        let revoked = target(Some("other"), None, None);
        assert_eq!(keep(Some(&revoked), "me", false), Keep::Lost);
        assert_eq!(keep(None, "me", false), Keep::Gone);
    }

    #[test]
    fn an_acquisition_answered_after_the_authority_lapsed_is_left_naming_the_member() {
        let mut a = Authority::new(D);
        let renewed = new_term(&mut a, 0, 50);
        assert_eq!(
            renewed,
            Outcome::Renewed {
                new_term: true,
                resumes: false
            }
        );
        assert_eq!(after_acquire(&a, a.tenure, false, 5_999), Acquired::Work);
        assert_eq!(after_acquire(&a, a.tenure, true, 5_999), Acquired::GiveBack);
        // Past the renew deadline: not worked on, and no release either.
        assert_eq!(
            after_acquire(&a, a.tenure, false, 6_000),
            Acquired::Leave { resumable: true }
        );
        assert_eq!(after_acquire(&a, a.tenure, true, 6_000), Acquired::GiveBack);
        // Still naming the member from that term: the next term takes it again with a write.
        let left = target(Some("me"), Some("me"), None);
        assert_eq!(
            take(&left, "me", true, (Some("2"), false), Listing::FULL, 7_000),
            Take::Acquire
        );
        a.leaving = true;
        assert_eq!(after_acquire(&a, a.tenure, false, 100), Acquired::GiveBack);
    }

    #[test]
    fn a_new_term_on_the_members_own_record_keeps_its_tenure() {
        let ts = Timestamp::UNIX_EPOCH;
        let mut a = Authority::new(D);
        let first = lease();
        assert!(
            !a.continues(Some(&first), "m"),
            "no term of this process yet"
        );
        let s = a.sending(Write::NewTerm, 0, (None, &first), "m");
        assert_eq!(
            a.answered(s, Answer::Written(&first), "m", 10, 250),
            Outcome::Renewed {
                new_term: true,
                resumes: false
            }
        );
        assert_eq!(a.tenure, 1);
        // Renewed; then the deadline passes (a slow server): a new term on its own record.
        let renewed = protocol::member_renewed(&first, "m", ts, 9, false);
        assert_eq!(
            a.answered(
                a.sending(Write::Renew, 3_000, (Some(&first), &renewed), "m"),
                Answer::Written(&renewed),
                "m",
                3_100,
                250
            ),
            Outcome::Renewed {
                new_term: false,
                resumes: false
            }
        );
        assert!(a.expire(9_000).is_some());
        assert!(a.continues(Some(&renewed), "m"));
        assert!(!a.continues(Some(&first), "other"));
        let second = protocol::member_taken_again(&renewed, "m", ts, 9, false);
        let s = a.sending(Write::NewTerm, 9_000, (Some(&renewed), &second), "m");
        assert!(s.continues());
        assert_eq!(
            a.answered(s, Answer::Written(&second), "m", 9_100, 250),
            Outcome::Renewed {
                new_term: true,
                resumes: true
            }
        );
        assert_eq!(a.tenure, 1, "the same tenure");
        // Lapsed again, and fenced meanwhile: a term taken on the fenced copy is a new tenure.
        assert!(a.expire(20_000).is_some());
        let fenced = protocol::fenced(&second, protocol::Fence::Expired, ts);
        assert!(
            !a.continues(Some(&fenced), "m"),
            "fenced: not the member's own record"
        );
        assert!(
            !a.continues(Some(&renewed), "m"),
            "a record of an earlier term: someone may have written between"
        );
        let third = protocol::member_taken_again(&fenced, "m", ts, 9, false);
        let s = a.sending(Write::NewTerm, 20_000, (Some(&fenced), &third), "m");
        assert_eq!(
            a.answered(s, Answer::Written(&third), "m", 20_100, 250),
            Outcome::Renewed {
                new_term: true,
                resumes: false
            }
        );
        assert_eq!(a.tenure, 2);
        // Found fenced or deleted — with authority or without — a new tenure too.
        let s = a.sending(Write::Renew, 23_000, (Some(&third), &third), "m");
        a.answered(s, Answer::Conflict(Some(None)), "m", 23_100, 250);
        assert_eq!(a.tenure, 3);
        let s = a.sending(Write::NewTerm, 23_200, (None, &third), "m");
        assert_eq!(
            a.answered(s, Answer::NotFound, "m", 23_300, 250),
            Outcome::Nothing
        );
        assert_eq!(
            a.tenure, 4,
            "no authority to lose, but the tenure ends all the same"
        );
    }

    #[test]
    fn a_new_term_never_answered_but_written_keeps_the_tenure() {
        let at = |s: i64| Timestamp::from_second(s).unwrap();
        let mut a = Authority::new(D);
        let first = lease();
        a.answered(
            sent(Write::NewTerm, 0, false),
            Answer::Written(&first),
            "m",
            10,
            250,
        );
        assert!(a.expire(6_000).is_some());
        // A new term on its own record: the server writes it but the answer never comes.
        let lost = protocol::member_taken_again(&first, "m", at(6), 9, false);
        let s = a.sending(Write::NewTerm, 6_000, (Some(&first), &lost), "m");
        assert_eq!(
            a.answered(s, Answer::Failed, "m", 12_000, 250),
            Outcome::Retry
        );
        // Sent again on the same copy: a 409, whose fresh copy is that record — its own, also
        // as the API server returns it (acquireTime in whole microseconds).
        assert!(
            a.continues(Some(&lost), "m"),
            "the unanswered term's record"
        );
        let stamp = Timestamp::from_nanosecond(6_000_123_456_789).unwrap();
        let sent_ns = protocol::member_taken_again(&first, "m", stamp, 9, false);
        let s = a.sending(Write::NewTerm, 6_100, (Some(&first), &sent_ns), "m");
        a.answered(s, Answer::Failed, "m", 12_100, 250);
        let read_back: Lease =
            serde_json::from_value(serde_json::to_value(&sent_ns).unwrap()).unwrap();
        assert_ne!(read_back, sent_ns, "the nanoseconds are gone on the wire");
        assert!(a.continues(Some(&read_back), "m"), "still its own record");
        let other = protocol::member_taken_again(&first, "m", at(7), 9, false);
        assert!(
            !a.continues(Some(&other), "m"),
            "the same term written by another (another acquireTime): not its own"
        );
        let again = protocol::member_taken_again(&lost, "m", at(13), 9, false);
        let s = a.sending(Write::NewTerm, 13_000, (Some(&lost), &again), "m");
        assert!(s.continues());
        assert_eq!(
            a.answered(s, Answer::Written(&again), "m", 13_100, 250),
            Outcome::Renewed {
                new_term: true,
                resumes: true
            }
        );
        assert_eq!(a.tenure, 1);
        assert!(a.unconfirmed.is_empty());
        // Not kept past a loss of the Lease either.
        assert!(a.expire(30_000).is_some());
        let third = protocol::member_taken_again(&again, "m", at(30), 9, false);
        let s = a.sending(Write::NewTerm, 30_000, (Some(&again), &third), "m");
        a.answered(s, Answer::Failed, "m", 36_000, 250);
        a.answered(
            sent(Write::NewTerm, 36_500, false),
            Answer::NotFound,
            "m",
            36_600,
            250,
        );
        assert!(!a.continues(Some(&third), "m"));
    }

    #[test]
    fn what_a_member_held_when_its_term_lapsed_is_resumed_without_a_write() {
        let held = target(Some("me"), Some("me"), None);
        let take_it = |v: &LeaseView, may: bool, resumable: bool| {
            take(v, "me", may, (Some("2"), resumable), Listing::FULL, 0)
        };
        assert_eq!(take_it(&held, true, true), Take::Resume);
        assert_eq!(
            take_it(&held, true, false),
            Take::Acquire,
            "another tenure: a write"
        );
        let half = Listing {
            by_all: false,
            waiting_until: None,
        };
        assert_eq!(
            take(&held, "me", true, (Some("2"), true), half, 0),
            Take::Resume,
            "its holder cannot have changed: any watch's copy will do"
        );
        assert_eq!(take_it(&held, false, true), Take::Skip, "no authority");
        let moved = target(Some("other"), Some("me"), None);
        assert_eq!(
            take_it(&moved, true, true),
            Take::GiveUp,
            "desired for another"
        );
        let others = target(Some("me"), Some("other"), None);
        assert_eq!(take_it(&others, true, true), Take::Skip);
    }

    #[test]
    fn an_acquisition_sent_in_an_earlier_tenure_is_never_worked_on() {
        let mut a = Authority::new(D);
        new_term(&mut a, 0, 10);
        let tenure = a.tenure;
        // Sent; the member Lease is found fenced; a new term (a new tenure) before the answer.
        a.answered(
            sent(Write::Renew, 3_000, false),
            Answer::Conflict(Some(None)),
            "m",
            3_100,
            250,
        );
        new_term(&mut a, 3_200, 3_300);
        assert!(a.holds(3_400));
        assert_eq!(
            after_acquire(&a, tenure, false, 3_400),
            Acquired::Leave { resumable: false },
            "the target may have been revoked after the fence"
        );
        assert_eq!(after_acquire(&a, a.tenure, false, 3_400), Acquired::Work);
    }
}
