//! What the member loop keeps per Lease: the copy last seen, and for the Leases it holds, the
//! phase of the handoff; the member Lease ([`Heart`]), whose renew deadline bounds all the
//! member's work; the member's [`Overruns`]; and the adaptive limit of its target Lease writes
//! ([`Gate`]). Plain data and pure helpers; the loop in `member` drives them.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::AbortHandle;
use tokio::time::Instant;

use crate::k8s::pacing::{Limiter, Sample};
use crate::protocol::member::Authority;
use crate::protocol::{LeaseView, Overrun};

/// A Lease of the cluster as last seen.
pub(super) struct Seen {
    pub(super) lease: Lease,
    pub(super) view: LeaseView,
    /// Which watches currently list it (a bit per watch: two, by label).
    pub(super) sources: u8,
}

/// Holds this member found already ended by its own clock when it next looked (see
/// `Agent::overruns`), gathered into one report per decision pass: the report is published as a
/// Kubernetes Event, and the last one rides every write of the member Lease,
/// where the control plane records it.
pub(super) struct Overruns {
    count: watch::Sender<u64>,
    last: Option<Overrun>,
    /// `last` is being gathered in this pass and not yet published.
    open: bool,
}

impl Overruns {
    pub(super) fn new(count: watch::Sender<u64>) -> Self {
        Self {
            count,
            last: None,
            open: false,
        }
    }

    /// One hold found ended `late` ago; `at_ms` is now by the wall clock.
    pub(super) fn found(&mut self, late: Duration, at_ms: i64) {
        self.count.send_modify(|n| *n += 1);
        let total = *self.count.borrow();
        let late_ms = u64::try_from(late.as_millis()).unwrap_or(u64::MAX);
        self.last = Some(match self.last {
            Some(o) if self.open => Overrun {
                late_ms: o.late_ms.max(late_ms),
                targets: o.targets.saturating_add(1),
                total,
                ..o
            },
            _ => Overrun {
                at_ms,
                late_ms,
                targets: 1,
                total,
            },
        });
        self.open = true;
    }

    /// Ends the pass: the report gathered in it, if any, to publish.
    pub(super) fn close(&mut self) -> Option<Overrun> {
        std::mem::take(&mut self.open)
            .then_some(self.last)
            .flatten()
    }

    /// The last report (gathered or published), for the member Lease.
    pub(super) fn last(&self) -> Option<Overrun> {
        self.last
    }
}

/// This member's own member Lease, its authority to work on anything. The rules
/// — when to write it, when the authority ends — are `protocol::member`'s [`Authority`], on
/// the member's clock in ms.
pub(super) struct Heart {
    /// The freshest copy known (`None`: create it).
    pub(super) lease: Option<Lease>,
    pub(super) auth: Authority,
    pub(super) writing: bool,
    /// Writes failed in a row (for the backoff).
    pub(super) failures: u32,
}

/// How many target Lease writes the member may have in flight: the [`Limiter`]'s adaptive
/// limit (at most `cap`, the configured `max_parallel`), applied to the permits of the
/// semaphore every write task takes one of ([`Permits::acquire`]). The member Lease's writes
/// take none.
pub(super) struct Gate {
    permits: Permits,
    limiter: Limiter,
    /// The limit in effect: permits in the semaphore (held or free) less those owed.
    total: usize,
    cap: usize,
    /// An answer later than this counts as the server's refusal, whatever the limiter's
    /// baseline ([`Gate::new`]).
    too_slow: Duration,
}

/// The write tasks' side of the [`Gate`].
#[derive(Clone)]
pub(super) struct Permits {
    semaphore: Arc<Semaphore>,
    /// Permits a decrease took back while writes held them: the next ones returned are
    /// forgotten instead of going to a waiting write. (Forgetting only free ones would not do:
    /// under a backlog a returned permit goes straight to a waiting write, none is ever free,
    /// and the limit would never come down — the overload in which it matters most.)
    owed: Arc<AtomicUsize>,
    /// No write starts before this ([`Gate::pause_until`]).
    paused_until: Arc<std::sync::Mutex<Option<Instant>>>,
}

impl Permits {
    /// A permit to write, once the limit allows one more (`None`: the gate is gone).
    pub(super) async fn acquire(&self) -> Option<OwnedSemaphorePermit> {
        loop {
            let permit = self.semaphore.clone().acquire_owned().await.ok()?;
            let owed = self
                .owed
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |o| o.checked_sub(1));
            if owed.is_ok() {
                permit.forget();
                continue;
            }
            // Paused: wait holding the permit (the others wait for it, or for the pause too).
            loop {
                let until = *self.paused_until.lock().unwrap_or_else(|e| e.into_inner());
                match until {
                    Some(t) if t > Instant::now() => tokio::time::sleep_until(t).await,
                    _ => break,
                }
            }
            return Some(permit);
        }
    }
}

impl Gate {
    /// Starts at `cap`: a member writes little (a planned stop's handoffs, a
    /// few acquisitions), and holding those back on a prompt server would only widen the gaps.
    /// A write answered later than `too_slow` counts as overload: the limiter judges lateness
    /// against the lowest recent latency, which drifts up to a server that stays slow — and a
    /// server slower than the member's renewal period (the agent's `too_slow`, `D/3`) cannot
    /// keep the member's authority, so its pace is never the one to grow back to.
    pub(super) fn new(cap: usize, too_slow: Duration) -> Self {
        let cap = cap.max(1);
        Gate {
            permits: Permits {
                semaphore: Arc::new(Semaphore::new(cap)),
                owed: Arc::new(AtomicUsize::new(0)),
                paused_until: Arc::default(),
            },
            // Most of a member's target Lease writes are hand-overs (`member::HANDOVER_PROMPT`).
            limiter: Limiter::starting_at(cap).prompt_within(super::member::HANDOVER_PROMPT),
            total: cap,
            cap,
            too_slow,
        }
    }

    /// For a write task.
    pub(super) fn permits(&self) -> Permits {
        self.permits.clone()
    }

    /// No write starts before `until` (a later pause already set stays).
    pub(super) fn pause_until(&self, until: Instant) {
        let mut paused = self
            .permits
            .paused_until
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        *paused = Some(paused.map_or(until, |p| p.max(until)));
    }

    /// A write sent at `sent` went as `sample`: the limit follows. A decrease takes free
    /// permits away at once and owes the rest: the next ones returned are forgotten.
    pub(super) fn observe(&mut self, sent: Instant, sample: Sample) {
        let sample = match sample {
            Sample::Answered(took) if took > self.too_slow => Sample::Overloaded,
            other => other,
        };
        self.limiter
            .observe(sent.into_std(), sample, Instant::now().into_std());
        self.limiter.cap(self.cap);
        let want = self.limiter.limit().clamp(1, self.cap);
        let owed = &self.permits.owed;
        if want > self.total {
            // Cancel what is owed first, then add.
            let more = want - self.total;
            let cancelled = owed
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |o| {
                    Some(o.saturating_sub(more))
                })
                .map_or(0, |o| o.min(more));
            self.permits.semaphore.add_permits(more - cancelled);
        } else if want < self.total {
            let fewer = self.total - want;
            let forgotten = self.permits.semaphore.forget_permits(fewer);
            owed.fetch_add(fewer - forgotten, Ordering::SeqCst);
        }
        self.total = want;
    }

    /// Writes allowed in flight now.
    #[cfg(test)]
    pub(super) fn limit(&self) -> usize {
        self.total
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
    /// When the hold began (its acquiring write was sent, or it was handed to us): with
    /// `duration`, when it ended at the latest if the member Lease's last renewal is unknown.
    pub(super) renewed: Instant,
    pub(super) phase: Phase,
    pub(super) writing: bool,
    /// The running `on_acquire`, aborted if the Lease is lost meanwhile.
    pub(super) starting: Option<AbortHandle>,
    /// The member's tenure when the hold was taken (`protocol::member::Authority::tenure`),
    /// which its acquisition's answer is judged by (`protocol::member::after_acquire`).
    pub(super) tenure: u64,
    /// Since when the app has not confirmed a planned stop (hooks that confirm their stops):
    /// kept, and asked again; said as a warning once it lasts a lease duration.
    pub(super) unconfirmed_since: Option<Instant>,
}

/// A target being handed to this member in an overlap hand-off
/// (`protocol::member::Take::Prepare`): its app was asked to start ahead of the hand-over.
pub(super) struct Preparing {
    pub(super) target: String,
    /// The generation the hand-over will give (the Lease's `leaseTransitions` + 1 as seen).
    pub(super) generation: u64,
    /// The running `on_prepare` call, if any (aborted when the move is called off).
    pub(super) call: Option<AbortHandle>,
    /// The app proved it works on the target (its `on_prepare` answered `Ok`).
    pub(super) proven: bool,
    /// The `ready` write is in flight.
    pub(super) writing: bool,
    /// After a "not yet": not asked again before this (an app may answer at once).
    pub(super) retry_at: Option<Instant>,
}

impl Held {
    /// A hold of `target` at `lease` entering `phase` now: `Acquiring` with its write in
    /// flight, or `Starting` on a target handed to us (or resumed), with no write.
    pub(super) fn new(target: String, duration: Duration, lease: Lease, phase: Phase) -> Self {
        let now = Instant::now();
        Held {
            target,
            duration,
            lease,
            renewed: now,
            writing: phase == Phase::Acquiring,
            phase,
            starting: None,
            tenure: 0,
            unconfirmed_since: None,
        }
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

    const SLOW: Duration = Duration::from_secs(3);

    /// Answers slower than the gate's bound count as overload however long they have been
    /// slow: the limit stays at its floor.
    #[tokio::test]
    async fn answers_slower_than_the_bound_never_grow_the_limit_back() {
        let mut g = Gate::new(16, SLOW);
        for _ in 0..300 {
            g.observe(Instant::now(), Sample::Answered(Duration::from_secs(6)));
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert_eq!(g.limit(), crate::k8s::pacing::MIN_LIMIT, "at the floor");
    }

    fn lease(rv: &str) -> Lease {
        let mut l = Lease::default();
        l.metadata.resource_version = Some(rv.into());
        l
    }

    #[tokio::test]
    async fn the_write_gate_follows_the_servers_latency() {
        let mut g = Gate::new(16, SLOW);
        assert_eq!(g.limit(), 16, "starts at the configured cap");
        for _ in 0..4 {
            g.observe(Instant::now(), Sample::Overloaded);
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let low = g.limit();
        assert!(low < 16, "backs off: {low}");
        assert_eq!(g.permits.semaphore.available_permits(), low);
        for _ in 0..200 {
            g.observe(Instant::now(), Sample::Answered(Duration::from_millis(5)));
        }
        assert_eq!(g.limit(), 16, "grows back, to the configured cap at most");
        assert_eq!(g.permits.semaphore.available_permits(), 16);
    }

    /// Every permit held and writes waiting (a backlog): a decrease still takes effect — the
    /// permits returned first are forgotten, not handed to the waiting writes.
    #[tokio::test]
    async fn a_decrease_under_a_backlog_is_paid_back_by_the_permits_returned() {
        let mut g = Gate::new(4, SLOW);
        let p = g.permits();
        let mut held = Vec::new();
        for _ in 0..4 {
            held.push(p.acquire().await.unwrap());
        }
        let waiting = tokio::spawn({
            let p = p.clone();
            async move { p.acquire().await.map(|_| ()) }
        });
        g.observe(Instant::now(), Sample::Overloaded);
        let low = g.limit();
        assert!(low < 4, "backs off: {low}");
        for _ in 0..4 - low {
            drop(held.pop());
            tokio::time::sleep(Duration::from_millis(5)).await;
            assert!(
                !waiting.is_finished(),
                "a returned permit went to a waiting write"
            );
        }
        drop(held.pop());
        tokio::time::timeout(Duration::from_secs(1), waiting)
            .await
            .expect("the next permit returned goes to the waiting write")
            .unwrap();
        // An increase cancels what is still owed before it adds.
        let mut g = Gate::new(4, SLOW);
        let p = g.permits();
        let held: Vec<_> = futures::future::join_all((0..4).map(|_| p.acquire())).await;
        g.observe(Instant::now(), Sample::Overloaded);
        let owed = 4 - g.limit();
        for _ in 0..200 {
            g.observe(Instant::now(), Sample::Answered(Duration::from_millis(5)));
        }
        assert_eq!(g.limit(), 4);
        assert_eq!(p.owed.load(Ordering::SeqCst), 0, "{owed} owed, cancelled");
        drop(held);
        assert_eq!(p.semaphore.available_permits(), 4);
    }

    #[tokio::test]
    async fn a_paused_gate_starts_no_write_until_the_pause_is_over() {
        let g = Gate::new(4, SLOW);
        let p = g.permits();
        let start = Instant::now();
        g.pause_until(start + Duration::from_millis(300));
        g.pause_until(start + Duration::from_millis(100));
        let permit = p.acquire().await.unwrap();
        let waited = start.elapsed();
        assert!(
            waited >= Duration::from_millis(300),
            "the later pause stays: {waited:?}"
        );
        drop(permit);
        let again = Instant::now();
        let _ = p.acquire().await.unwrap();
        assert!(
            again.elapsed() < Duration::from_millis(250),
            "over: at once"
        );
    }

    #[test]
    fn newer_versions() {
        assert!(is_newer(&lease("10"), &lease("9")));
        assert!(!is_newer(&lease("9"), &lease("10")));
        assert!(!is_newer(&lease("10"), &lease("10")));
        assert!(is_newer(&lease("b"), &lease("a")));
        assert!(!is_newer(&lease("a"), &lease("a")));
    }

    #[test]
    fn overruns_are_gathered_per_pass_and_the_last_is_kept() {
        let count = watch::Sender::new(0);
        let mut o = Overruns::new(count.clone());
        assert_eq!((o.close(), o.last()), (None, None));
        o.found(Duration::from_millis(800), 1_000);
        o.found(Duration::from_millis(2_500), 1_001);
        let first = Overrun {
            at_ms: 1_000,
            late_ms: 2_500,
            targets: 2,
            total: 2,
        };
        assert_eq!(o.close(), Some(first));
        assert_eq!((o.close(), o.last()), (None, Some(first)), "published once");
        o.found(Duration::from_millis(100), 5_000);
        let second = Overrun {
            at_ms: 5_000,
            late_ms: 100,
            targets: 1,
            total: 3,
        };
        assert_eq!((o.last(), o.close()), (Some(second), Some(second)));
        assert_eq!(*count.borrow(), 3);
    }
}
