//! The latest model of each cluster, shared by the control loop and readers (the HTTP API, the
//! dashboard, `/metrics`). Building a model walks every target (~30 ms of CPU at 50,000), so a
//! model is built once and shared, always on the engine's model thread (`models`), one build
//! per cluster at a time. The control loop builds one on every pass that is not settled (see
//! `control`), and a plan or a removal's last step builds a fresh one; each leaves it here. A
//! reader gets the latest as [`judge`] rules:
//! - **current** — at most [`MAX_READ_AGE`] old whatever changed since; or built at the
//!   index's current [revision](crate::k8s::index::Index::revision) (nothing but renewals
//!   since), before the first hold it shows as live could expire, and at most
//!   [`MAX_AGE_UNCHANGED`] old — exact then but for its ages (how long ago things were
//!   renewed): taken as it is;
//! - **stale** — none of that, but it took longer than [`SLOW_BUILD`] to build and is at most
//!   [`MAX_STALE`] old ([`MAX_STALE_EXACT`] if exact but for its ages): taken at once, while one
//!   rebuild runs in the background (stale-while-revalidate). A request never waits for a large
//!   cluster's build, and requests arriving together start one rebuild, not one each. A change
//!   reaches readers about a second late at worst (on the acting replica the control loop
//!   rebuilds within half a second of any change anyway);
//! - otherwise (a small cluster, whose build costs less than waiting for it is worth; or a very
//!   old view) the reader waits for a fresh build, shared with whoever waits beside it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::k8s::index::Snapshot;
use crate::k8s::model::ClusterModel;

/// A view this young is current, whatever changed since it was built.
pub const MAX_READ_AGE: Duration = Duration::from_millis(250);
/// A view that is exact but for its ages is current while this young.
pub const MAX_AGE_UNCHANGED: Duration = Duration::from_secs(2);
/// Builds that took longer than this are not waited for while a stale view is at hand.
pub const SLOW_BUILD: Duration = Duration::from_millis(10);
/// The oldest view a reader is given without waiting for a rebuild.
pub const MAX_STALE: Duration = Duration::from_secs(1);
/// The same for a view exact but for its ages: longer than [`MAX_AGE_UNCHANGED`], so a view
/// that ages out while nothing changes is rebuilt in the background, not waited for.
pub const MAX_STALE_EXACT: Duration = Duration::from_secs(10);

/// One built model and what readers derive from it once.
#[derive(Debug)]
pub struct View {
    /// The model.
    pub model: ClusterModel,
    /// The index revision it was built from.
    revision: u64,
    built: Instant,
    /// When the first hold it shows as live expires (`None`: none is held).
    exact_until: Option<Instant>,
    /// How long building it took.
    cost: Duration,
    /// Its imbalance, the one measure (`planner::imbalance`), once asked for.
    imbalance: OnceLock<f64>,
    /// A hold in it is expired by the clock but not yet proven so by a watch probe.
    pub awaiting_proof: bool,
}

impl View {
    /// When its model was taken.
    pub fn built(&self) -> Instant {
        self.built
    }

    /// What it was built from (see [`exact`]).
    pub fn exactness(&self) -> Exactness {
        Exactness {
            revision: self.revision,
            until: self.exact_until,
        }
    }

    /// `f` computed on first use, then remembered for this model.
    pub(super) fn imbalance(&self, f: impl FnOnce(&ClusterModel) -> f64) -> f64 {
        *self.imbalance.get_or_init(|| f(&self.model))
    }
}

/// How a reader may use a view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freshness {
    /// As it is.
    Current,
    /// At once, while a rebuild runs.
    Stale,
    /// Not without waiting for a rebuild.
    Outdated,
}

/// What a view was built from, to tell later whether it is still exact (without holding the
/// model).
#[derive(Debug, Clone, Copy)]
pub struct Exactness {
    revision: u64,
    until: Option<Instant>,
}

impl Exactness {
    /// Whether nothing but ages can differ between the view and a model built now at index
    /// `revision`.
    pub fn holds(&self, revision: u64) -> bool {
        self.revision == revision && self.until.is_none_or(|t| Instant::now() < t)
    }
}

/// Whether nothing but ages can differ between `view` and a model built now at index
/// `revision`.
pub fn exact(view: &View, revision: u64) -> bool {
    view.exactness().holds(revision)
}

/// The rule of the module header, for a view `age` old that took `cost` to build and is
/// [`exact`] or not.
pub fn judge(exact: bool, age: Duration, cost: Duration) -> Freshness {
    if age < MAX_READ_AGE || (exact && age < MAX_AGE_UNCHANGED) {
        Freshness::Current
    } else if cost > SLOW_BUILD && age < if exact { MAX_STALE_EXACT } else { MAX_STALE } {
        Freshness::Stale
    } else {
        Freshness::Outdated
    }
}

/// A cluster's latest view and the right to build the next.
#[derive(Debug, Default)]
struct Slot {
    latest: Mutex<Option<Arc<View>>>,
    /// Views replaced while readers may still hold them. Freeing a large model takes
    /// milliseconds, so it happens here, on the model thread, once no reader holds
    /// it — never at the end of a request on an async worker.
    retired: Mutex<Vec<Arc<View>>>,
    /// Held while a model is built: one build at a time.
    building: Arc<tokio::sync::Mutex<()>>,
}

impl Slot {
    /// Removes the retired views only the retired list holds.
    fn unheld(&self) -> Vec<Arc<View>> {
        let mut retired = self.retired.lock().unwrap_or_else(|e| e.into_inner());
        let (unheld, held) = retired.drain(..).partition(|v| Arc::strong_count(v) == 1);
        *retired = held;
        unheld
    }
}

/// The latest view per cluster.
#[derive(Debug)]
pub(super) struct Views {
    slots: HashMap<String, Slot>,
}

impl Views {
    /// Empty slots for the named clusters.
    pub(super) fn new<'a>(clusters: impl IntoIterator<Item = &'a str>) -> Views {
        Views {
            slots: clusters
                .into_iter()
                .map(|c| (c.to_owned(), Slot::default()))
                .collect(),
        }
    }

    /// Keeps the model of `snapshot`, taken at `built` and built in `cost`, as the cluster's
    /// latest, and returns it.
    pub(super) fn keep(&self, snapshot: Snapshot, built: Instant, cost: Duration) -> Arc<View> {
        let view = Arc::new(View {
            revision: snapshot.revision,
            built,
            exact_until: snapshot.exact_for.map(|d| built + d),
            cost,
            imbalance: OnceLock::new(),
            awaiting_proof: snapshot.awaiting_proof,
            model: snapshot.model,
        });
        let Some(slot) = self.slots.get(&view.model.name) else {
            return view;
        };
        let (kept, unused) = {
            let mut latest = slot.latest.lock().unwrap_or_else(|e| e.into_inner());
            match &*latest {
                // A slower builder must not replace a view built from a newer index.
                Some(cur) if cur.revision > view.revision => (cur.clone(), Some(view)),
                _ => (view.clone(), latest.replace(view)),
            }
        };
        // Freed here (the model thread, where it was built), outside the lock readers take.
        slot.retired
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(unused);
        drop(slot.unheld());
        kept
    }

    /// The latest view of `cluster` and how a reader at index `revision` may use it.
    pub(super) fn pick(&self, cluster: &str, revision: u64) -> Option<(Arc<View>, Freshness)> {
        let slot = self.slots.get(cluster)?;
        let latest = slot.latest.lock().unwrap_or_else(|e| e.into_inner());
        let v = latest.as_ref()?;
        let freshness = judge(exact(v, revision), v.built.elapsed(), v.cost);
        Some((v.clone(), freshness))
    }

    /// The latest view of `cluster`, however old.
    pub(super) fn latest(&self, cluster: &str) -> Option<Arc<View>> {
        let slot = self.slots.get(cluster)?;
        slot.latest
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Removes the retired views no reader holds any more, for the caller to free off the
    /// async workers (builds free them too, but a settled cluster may see no build for a
    /// while).
    pub(super) fn take_unheld(&self) -> Vec<Arc<View>> {
        self.slots.values().flat_map(Slot::unheld).collect()
    }

    /// The lock a builder of `cluster`'s model holds.
    pub(super) fn builder(&self, cluster: &str) -> Option<Arc<tokio::sync::Mutex<()>>> {
        self.slots.get(cluster).map(|s| s.building.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_young_view_is_current_whatever_changed() {
        for (exact, cost) in [(false, MS), (false, 100 * MS), (true, MS)] {
            assert_eq!(judge(exact, Duration::ZERO, cost), Freshness::Current);
            assert_eq!(judge(exact, 249 * MS, cost), Freshness::Current);
        }
    }

    #[test]
    fn an_exact_view_is_current_until_its_ages_are_too_old() {
        assert_eq!(judge(true, 1999 * MS, MS), Freshness::Current);
        assert_eq!(judge(true, 2000 * MS, MS), Freshness::Outdated);
        assert_eq!(judge(false, 250 * MS, MS), Freshness::Outdated);
    }

    #[test]
    fn only_a_slow_build_is_served_stale_and_only_for_a_while() {
        // A cheap build is waited for: the reader sees every change.
        assert_eq!(judge(false, 300 * MS, SLOW_BUILD), Freshness::Outdated);
        // An expensive one is not, up to MAX_STALE.
        assert_eq!(judge(false, 300 * MS, 120 * MS), Freshness::Stale);
        assert_eq!(judge(false, 999 * MS, 120 * MS), Freshness::Stale);
        assert_eq!(judge(false, 1000 * MS, 120 * MS), Freshness::Outdated);
        // An exact view whose ages are too old is rebuilt in the background, not waited for.
        assert_eq!(judge(true, MAX_AGE_UNCHANGED, 120 * MS), Freshness::Stale);
        assert_eq!(judge(true, 9999 * MS, 120 * MS), Freshness::Stale);
        assert_eq!(judge(true, 10_000 * MS, 120 * MS), Freshness::Outdated);
    }

    fn view(revision: u64, exact_for: Option<Duration>) -> View {
        View {
            revision,
            built: Instant::now(),
            exact_until: exact_for.map(|d| Instant::now() + d),
            cost: MS,
            imbalance: OnceLock::new(),
            awaiting_proof: false,
            model: model(),
        }
    }

    fn model() -> ClusterModel {
        ClusterModel::for_tests(Vec::new(), Vec::new())
    }

    fn snapshot(revision: u64) -> Snapshot {
        Snapshot {
            model: model(),
            revision,
            exact_for: None,
            awaiting_proof: false,
        }
    }

    #[test]
    fn a_replaced_view_is_freed_by_a_later_build_once_no_reader_holds_it() {
        let views = Views::new(["c"]);
        let held = views.keep(snapshot(1), Instant::now(), MS);
        let weak = Arc::downgrade(&held);
        views.keep(snapshot(2), Instant::now(), MS);
        assert!(weak.upgrade().is_some(), "retired, not freed, while held");
        drop(held);
        assert!(
            weak.upgrade().is_some(),
            "a reader letting go does not free it"
        );
        views.keep(snapshot(3), Instant::now(), MS);
        assert!(weak.upgrade().is_none(), "the next build frees it");
    }

    #[test]
    fn unheld_retired_views_can_be_taken_to_free_elsewhere() {
        let views = Views::new(["c"]);
        let held = views.keep(snapshot(1), Instant::now(), MS);
        views.keep(snapshot(2), Instant::now(), MS);
        assert!(views.take_unheld().is_empty(), "a reader still holds it");
        drop(held);
        let unheld = views.take_unheld();
        assert_eq!(unheld.len(), 1);
        assert_eq!(unheld[0].revision, 1);
        assert!(views.take_unheld().is_empty());
        assert_eq!(views.latest("c").unwrap().revision, 2);
    }

    #[test]
    fn an_older_build_does_not_replace_a_newer_view() {
        let views = Views::new(["c"]);
        views.keep(snapshot(5), Instant::now(), MS);
        let kept = views.keep(snapshot(4), Instant::now(), MS);
        assert_eq!(kept.revision, 5);
        assert_eq!(views.pick("c", 5).unwrap().0.revision, 5);
    }

    #[test]
    fn a_view_is_exact_at_its_revision_until_a_hold_could_expire() {
        assert!(exact(&view(3, None), 3));
        assert!(exact(&view(3, Some(Duration::from_secs(60))), 3));
        assert!(!exact(&view(3, Some(Duration::from_secs(60))), 4));
        assert!(!exact(&view(3, Some(Duration::ZERO)), 3));
    }
}
