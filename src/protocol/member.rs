//! Protocol v2's member rules as pure decisions — the one copy of them. `agent::member` runs
//! them against the API server; `engine::simulation` runs the same functions against its
//! modelled server, with crashes, stalls, partitions, delayed watch events and clocks that
//! drift, so what the simulation checks is what the agent does.
//!
//! The rules (docs/protocol.md, "Protocol v2"):
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer<'a> {
    /// Written.
    Written,
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
    /// Written: the member may work until the new deadline (`new_term`: it had no authority).
    Renewed { new_term: bool },
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

    /// A write `write` sent at `sent` (carrying `leaving`) came back with `answer` at `now`;
    /// `me` is the member's identity. `backoff_ms` is the pause before retrying a failed write.
    ///
    /// A renewal that was sent under authority but answered after the authority ended (the
    /// deadline passed while it was in flight) gives none back: the member stopped all its
    /// work then, and works again only in a new term (`Write::NewTerm`, which raises
    /// `leaseTransitions`), so that every hold it takes after has a generation of its own —
    /// taken back as it was, a target would be worked on again at the generation of the work
    /// that stopped.
    pub fn answered(
        &mut self,
        (write, sent, leaving): (Write, i64, bool),
        answer: Answer<'_>,
        me: &str,
        now: i64,
        backoff_ms: i64,
    ) -> Outcome {
        match answer {
            Answer::Written if write == Write::Renew && self.renewed.is_none() => Outcome::Nothing,
            Answer::Written => {
                let new_term = self.renewed.is_none();
                self.renewed = Some(sent);
                self.leaving_written = leaving;
                Outcome::Renewed { new_term }
            }
            // Fenced by the control plane (or released by an earlier run): whatever it decided,
            // this member's holds may be given away now.
            Answer::Conflict(Some(holder)) if holder != Some(me) => self.lose(),
            Answer::NotFound => self.lose(),
            // A 409 on our own copy: re-decide on the fresh one at once.
            Answer::Conflict(Some(_)) => Outcome::Nothing,
            Answer::Conflict(None) | Answer::Failed => {
                self.retry_at = now + backoff_ms;
                Outcome::Retry
            }
        }
    }

    fn lose(&mut self) -> Outcome {
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
    /// Take it with a write ([`acquired_v2`](super::acquired_v2)), then work.
    Acquire,
    /// Handed to it under its current term: work on it as it is, no write.
    Adopt,
    /// Handed to it, but not every watch lists it yet: look again at `until` (then
    /// [`Take::Acquire`] if still not listed by all).
    Wait { until: i64 },
    /// It names the member as holder but is desired for another (a stray hold from an earlier
    /// run, or a write whose answer was lost): give it up, with no work to stop.
    GiveUp,
}

/// The decision about target Lease `view`, not held by the member `me` (no work on it), at
/// `now`: `may_take` is [`Authority::may_take`]; `term` the member's current term
/// ([`member_term`](super::member_term) of its member Lease as last written).
pub fn take(
    view: &LeaseView,
    me: &str,
    may_take: bool,
    term: Option<&str>,
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
        Some(_) => Take::Skip,
    }
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
    /// The Lease goes on naming the member; under its next term [`take`] acquires it again with
    /// one write and a new generation. The holder never changes meanwhile, so no ownership change
    /// is seen or recorded, and a member that does not come back is revoked as usual.
    Leave,
}

/// The decision about a hold just acquired, at `now` on the member's clock.
pub fn after_acquire(authority: &Authority, stopping: bool, now: i64) -> Acquired {
    if stopping || authority.leaving {
        Acquired::GiveBack
    } else if authority.holds(now) {
        Acquired::Work
    } else {
        Acquired::Leave
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{self, Desire};

    const D: i64 = 9_000;

    fn target(desired: Option<&str>, holder: Option<&str>, handed_term: Option<&str>) -> LeaseView {
        let mut lease = protocol::new_target_lease(
            "leasehold",
            "c",
            "t1",
            &Desire {
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
                None => protocol::acquired_v2(&lease, h, Timestamp::UNIX_EPOCH, 9),
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
            a.answered((Write::NewTerm, 100, false), Answer::Written, "m", 150, 250),
            Outcome::Renewed { new_term: true }
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
            a.answered((Write::Renew, 300, true), Answer::Failed, "m", 400, 250),
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
        a.answered((Write::NewTerm, 0, false), Answer::Written, "m", 10, 250);
        assert_eq!(a.write_due(3_000), Some(Write::Renew));
        // Sent at 3,000 under authority; the deadline (6,000) passes while it is in flight.
        assert_eq!(a.expire(6_000), Some(D));
        assert_eq!(
            a.answered(
                (Write::Renew, 3_000, false),
                Answer::Written,
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
            a.answered(
                (Write::NewTerm, 6_500, false),
                Answer::Written,
                "m",
                6_600,
                250
            ),
            Outcome::Renewed { new_term: true }
        );
        assert!(a.holds(6_600));
    }

    #[test]
    fn fenced_or_deleted_ends_the_authority_once() {
        let mut a = Authority::new(D);
        a.answered((Write::NewTerm, 0, false), Answer::Written, "m", 0, 250);
        assert_eq!(
            a.answered(
                (Write::Renew, 10, false),
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
                (Write::Renew, 20, false),
                Answer::Conflict(Some(None)),
                "m",
                20,
                250
            ),
            Outcome::Lost { ended: D },
            "fenced (released by the control plane)"
        );
        assert_eq!(
            a.answered((Write::Renew, 30, false), Answer::NotFound, "m", 30, 250),
            Outcome::Nothing,
            "already without authority"
        );
        a.answered((Write::NewTerm, 40, false), Answer::Written, "m", 40, 250);
        assert_eq!(
            a.answered((Write::Renew, 50, false), Answer::NotFound, "m", 50, 250),
            Outcome::Lost { ended: 40 + D }
        );
    }

    #[test]
    fn what_a_member_takes() {
        let full = Listing::FULL;
        let t = |v: &LeaseView, may: bool, term: Option<&str>, l: Listing, now: i64| {
            take(v, "me", may, term, l, now)
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
        let renewed = a.answered((Write::NewTerm, 0, false), Answer::Written, "m", 50, 100);
        assert_eq!(renewed, Outcome::Renewed { new_term: true });
        assert_eq!(after_acquire(&a, false, 5_999), Acquired::Work);
        assert_eq!(after_acquire(&a, true, 5_999), Acquired::GiveBack);
        // Past the renew deadline: not worked on, and no release either.
        assert_eq!(after_acquire(&a, false, 6_000), Acquired::Leave);
        assert_eq!(after_acquire(&a, true, 6_000), Acquired::GiveBack);
        // Still naming the member from that term: the next term takes it again with a write.
        let left = target(Some("me"), Some("me"), None);
        assert_eq!(
            take(&left, "me", true, Some("2"), Listing::FULL, 7_000),
            Take::Acquire
        );
        a.leaving = true;
        assert_eq!(after_acquire(&a, false, 100), Acquired::GiveBack);
    }
}
