//! What the member loop keeps per Lease: the copy last seen with its [`Observation`], and for
//! the Leases it holds, the phase of the handoff and the renewal clock; in protocol v2 also
//! the member Lease ([`Heart`]), whose renew deadline bounds all the member's work. Plain data and pure
//! helpers; the loop in `member` drives them.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use tokio::task::AbortHandle;
use tokio::time::Instant;

use crate::protocol::{LeaseView, Observation};

/// A Lease of the cluster as last seen.
pub(super) struct Seen {
    pub(super) lease: Lease,
    pub(super) view: LeaseView,
    pub(super) observed: Observation,
    /// Which watches currently list it (a bit per watch; protocol v2 has two, by label).
    pub(super) sources: u8,
}

/// Protocol v2: this member's own member Lease, its authority to work on anything.
pub(super) struct Heart {
    /// The freshest copy known (`None`: create it).
    pub(super) lease: Option<Lease>,
    /// When the last successful write of the current term was sent; `None` when the member
    /// has no authority (not registered yet, fenced, or past its renew deadline).
    pub(super) renewed: Option<Instant>,
    pub(super) duration: Duration,
    pub(super) writing: bool,
    /// No write before this (after a failed one).
    pub(super) retry_at: Instant,
    /// The member is stopping and wants its targets moved away first.
    pub(super) leaving: bool,
    /// `leaving` as last written.
    pub(super) leaving_written: bool,
}

impl Heart {
    /// The renew deadline of the current term: past it, all work stops.
    pub(super) fn deadline(&self) -> Option<Instant> {
        self.renewed.map(|r| r + self.duration * 2 / 3)
    }
    /// Whether the member may work at `now`.
    pub(super) fn authority(&self, now: Instant) -> bool {
        self.deadline().is_some_and(|d| now < d)
    }
    /// When the next write is due.
    pub(super) fn due(&self) -> Instant {
        match self.renewed {
            Some(r) if self.leaving == self.leaving_written => {
                (r + self.duration / 3).max(self.retry_at)
            }
            _ => self.retry_at,
        }
    }
}

/// Where a held target is in its life on this member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// The acquiring PUT is in flight.
    Acquiring,
    /// Held; `on_acquire` is running.
    Starting,
    /// Held; the app works on it.
    Working,
    /// `on_release` is running; `release` says whether a release write follows (false when
    /// the Lease was lost or deleted).
    Stopping { release: bool },
    /// The work has stopped; the release PUT is due or in flight.
    Releasing,
}

/// A Lease this member holds or is acquiring.
pub(super) struct Held {
    pub(super) target: String,
    pub(super) duration: Duration,
    /// The freshest copy known (written by us or seen by the watcher): the CAS base.
    pub(super) lease: Lease,
    /// When the last successful write holding it was sent.
    pub(super) renewed: Instant,
    pub(super) phase: Phase,
    pub(super) writing: bool,
    /// No renewal before this (set after a failed one).
    pub(super) retry_at: Instant,
    /// The running `on_acquire`, aborted if the Lease is lost meanwhile.
    pub(super) starting: Option<AbortHandle>,
    /// Held under protocol v2: never renewed; the member Lease is the authority.
    pub(super) v2: bool,
}

impl Held {
    pub(super) fn renew_due(&self) -> Instant {
        (self.renewed + self.duration / 3).max(self.retry_at)
    }
    pub(super) fn deadline(&self) -> Instant {
        self.renewed + self.duration * 2 / 3
    }
    pub(super) fn renews(&self) -> bool {
        !self.v2
            && matches!(
                self.phase,
                Phase::Starting | Phase::Working | Phase::Stopping { release: true }
            )
    }
}

/// Whether `candidate` is a newer version than `current`. resourceVersions are opaque, but the
/// watcher and our own write answers interleave; when both are integers (etcd revisions) the
/// larger wins, otherwise the later arrival does.
pub(super) fn is_newer(candidate: &Lease, current: &Lease) -> bool {
    let rv = |l: &Lease| l.metadata.resource_version.clone().unwrap_or_default();
    match (rv(candidate).parse::<u64>(), rv(current).parse::<u64>()) {
        (Ok(a), Ok(b)) => a > b,
        _ => rv(candidate) != rv(current),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(rv: &str) -> Lease {
        let mut l = Lease::default();
        l.metadata.resource_version = Some(rv.into());
        l
    }

    #[test]
    fn newer_versions() {
        assert!(is_newer(&lease("10"), &lease("9")));
        assert!(!is_newer(&lease("9"), &lease("10")));
        assert!(!is_newer(&lease("10"), &lease("10")));
        assert!(is_newer(&lease("b"), &lease("a")));
        assert!(!is_newer(&lease("a"), &lease("a")));
    }
}
