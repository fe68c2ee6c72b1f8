//! The watchers that feed the index: one kube-rs `watcher` per (namespace, kind) — and one of
//! the Leases of each namespace kept apart for member Leases — each with
//! the default backoff, applying events to the shared [`Index`] as they arrive and publishing
//! what changed (a small broadcast for readers that resync when they lag, and a journal that
//! the history recorder reads without gaps). A watch error marks the namespace's kind stale (the model is then shown as last
//! known and never acted on) until the watch is back: an event arrives, or the API server
//! answers a probe and the watch starts over with a fresh list. Readiness waits for every first
//! sync. The Lease watchers hand the index each of this replica's watch probes they see come
//! back (`k8s::probe`), which is what lets it judge expiries. Events, lists, errors and what the index reports (ownership changes, handoff gaps) are
//! counted in [`WatchMetrics`], which this module registers in the engine's registry.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, RwLockWriteGuard, TryLockError};
use std::time::Duration;

use futures::StreamExt as _;
use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::ListParams;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use serde::de::DeserializeOwned;
use tokio::sync::{Mutex, MutexGuard, broadcast, mpsc, watch};
use tokio::task::JoinSet;
use tracing::{Instrument as _, info_span, warn};

mod metrics;

pub use self::metrics::{WatchEvent, WatchMetrics};
use super::index::{Change, Index, Indexed, Kind, MemberNamespaceLease};
use super::probe::Probes;

/// Changes kept for slow [subscribers](SharedIndex::subscribe) before they miss some (they then
/// resync from the model). A broadcast ring is allocated whole (about 190 bytes a slot), so it
/// stays small: at 65,536 it alone was 12.6 MB of the control plane's resident memory.
const CHANGE_BUFFER: usize = 4_096;

/// Changes the [journal](SharedIndex::journal) holds while its consumer (the history recorder)
/// writes them out: a burst such as the first list of 50,000 held Leases, or a failover. The
/// queue is allocated as it fills and freed as it drains.
const JOURNAL_CAPACITY: usize = 65_536;

/// The index and its change feed, shared by the watchers (writers) and everyone else (readers).
#[derive(Debug)]
pub struct SharedIndex {
    index: RwLock<Index>,
    changes: broadcast::Sender<Change>,
    journal: mpsc::Sender<Change>,
    journal_rx: Mutex<JournalRx>,
    /// Changes the journal could not take since its consumer last heard.
    journal_missed: AtomicU64,
    /// Changes offered to the journal so far (taken or missed).
    journal_offered: AtomicU64,
    /// Of those, how many the consumer has dealt with (see [`Journal::done`]).
    journal_done: watch::Sender<u64>,
    version: watch::Sender<u64>,
}

impl SharedIndex {
    /// Wraps an index.
    pub fn new(index: Index) -> Arc<SharedIndex> {
        let (journal, journal_rx) = mpsc::channel(JOURNAL_CAPACITY);
        Arc::new(SharedIndex {
            index: RwLock::new(index),
            changes: broadcast::channel(CHANGE_BUFFER).0,
            journal,
            journal_rx: Mutex::new(JournalRx {
                rx: journal_rx,
                taken: 0,
            }),
            journal_missed: AtomicU64::new(0),
            journal_offered: AtomicU64::new(0),
            journal_done: watch::channel(0).0,
            version: watch::channel(0).0,
        })
    }

    /// Reads the index.
    pub fn read<T>(&self, f: impl FnOnce(&Index) -> T) -> T {
        f(&self.index.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Changes the index (and publishes what changed). The changes enter the journal before
    /// the write lock is let go, so whoever reads the new state knows the journal has them
    /// (see [`SharedIndex::journal_caught_up`]).
    pub fn write<T>(&self, f: impl FnOnce(&mut Index) -> (T, Vec<Change>)) -> T {
        let (value, changes, revision) = {
            let mut guard = self.lock_for_write();
            let (value, changes) = f(&mut guard);
            self.offer_to_journal(&changes);
            (value, changes, guard.revision())
        };
        self.publish(changes, revision);
        value
    }

    fn offer_to_journal(&self, changes: &[Change]) {
        for c in changes {
            if self.journal.try_send(c.clone()).is_err() {
                self.journal_missed.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.journal_offered
            .fetch_add(changes.len() as u64, Ordering::Release);
    }

    /// Waits (up to `within`) until the journal's consumer has dealt with every change the
    /// index made so far — for a writer of history that must not store a row before the
    /// changes that came earlier (the recorder's). Whether it did in time.
    pub async fn journal_caught_up(&self, within: Duration) -> bool {
        let offered = self.journal_offered.load(Ordering::Acquire);
        let mut done = self.journal_done.subscribe();
        tokio::time::timeout(within, done.wait_for(|d| *d >= offered))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// The write lock. Building a large cluster's model holds the read lock for tens of
    /// milliseconds (on a blocking thread); a watcher that waits for it on an async worker
    /// would stall every request queued on that worker. So when the lock is taken, the wait
    /// happens in `block_in_place` (the worker's other tasks move to another thread).
    fn lock_for_write(&self) -> RwLockWriteGuard<'_, Index> {
        match self.index.try_write() {
            Ok(guard) => guard,
            Err(TryLockError::Poisoned(e)) => e.into_inner(),
            Err(TryLockError::WouldBlock) => {
                let wait = || self.index.write().unwrap_or_else(|e| e.into_inner());
                let multi_thread = tokio::runtime::Handle::try_current().is_ok_and(|h| {
                    h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread
                });
                if multi_thread {
                    tokio::task::block_in_place(wait)
                } else {
                    wait()
                }
            }
        }
    }

    fn publish(&self, changes: Vec<Change>, revision: u64) {
        if self.changes.receiver_count() > 0 {
            for c in changes {
                let _ = self.changes.send(c);
            }
        }
        // Two writers may publish out of order: the version only moves forward.
        self.version.send_if_modified(|v| {
            let newer = revision > *v;
            if newer {
                *v = revision;
            }
            newer
        });
    }

    /// Every change from now on, for readers that can resync from the model when they fall
    /// more than a few thousand changes behind (`RecvError::Lagged`).
    pub fn subscribe(&self) -> broadcast::Receiver<Change> {
        self.changes.subscribe()
    }

    /// Every change since the index was created, in order, for the one consumer that must not
    /// miss any (the history recorder). It holds the journal while it runs; a second caller
    /// waits for the first to let go.
    pub async fn journal(&self) -> Journal<'_> {
        Journal {
            rx: self.journal_rx.lock().await,
            missed: &self.journal_missed,
            done: &self.journal_done,
        }
    }

    /// The index's [revision](Index::revision) as each write leaves it: wake-ups for loops
    /// that re-read the model (a Lease renewal of a live hold wakes nobody).
    pub fn versions(&self) -> watch::Receiver<u64> {
        self.version.subscribe()
    }

    /// The current version (see [`SharedIndex::versions`]).
    pub fn version(&self) -> u64 {
        *self.version.borrow()
    }

    /// Every watch has synced once.
    pub fn synced(&self) -> bool {
        self.read(Index::synced)
    }
}

/// The consumer's end of [`SharedIndex::journal`].
#[derive(Debug)]
pub struct Journal<'a> {
    rx: MutexGuard<'a, JournalRx>,
    missed: &'a AtomicU64,
    done: &'a watch::Sender<u64>,
}

/// The journal's receiving end, and how many changes were taken from it (or missed) since the
/// index was created.
#[derive(Debug)]
struct JournalRx {
    rx: mpsc::Receiver<Change>,
    taken: u64,
}

impl Journal<'_> {
    /// The next change. `Err(n)` first when `n` changes were dropped because the journal was
    /// full ([`JOURNAL_CAPACITY`] behind).
    pub async fn next(&mut self) -> Result<Change, u64> {
        let mut batch = self.next_batch(1).await?;
        Ok(batch.pop().expect("a batch holds at least one change"))
    }

    /// The next changes, at least one and at most `max`, in order: all that are queued, without
    /// waiting for more. `Err(n)` first when `n` changes were dropped because the journal was
    /// full ([`JOURNAL_CAPACITY`] behind).
    pub async fn next_batch(&mut self, max: usize) -> Result<Vec<Change>, u64> {
        let missed = self.missed.swap(0, Ordering::Relaxed);
        if missed > 0 {
            self.rx.taken += missed;
            return Err(missed);
        }
        let mut batch = Vec::new();
        // The sender lives in `SharedIndex`, as does this receiver's lock: never closed.
        if self.rx.rx.recv_many(&mut batch, max.max(1)).await == 0 {
            std::future::pending::<()>().await;
        }
        self.rx.taken += batch.len() as u64;
        Ok(batch)
    }

    /// Everything taken so far has been dealt with (written out, or given up on): wakes
    /// [`SharedIndex::journal_caught_up`].
    pub fn done(&self) {
        let taken = self.rx.taken;
        self.done.send_if_modified(|d| {
            let newer = taken > *d;
            *d = taken;
            newer
        });
    }
}

/// Runs one watcher per namespace and kind until one fails for good (they retry with backoff,
/// so in practice: forever). With `probes`, the Lease watchers hand the index each of this
/// replica's watch probes they see come back (see `k8s::probe`).
pub async fn run(
    client: Client,
    shared: Arc<SharedIndex>,
    metrics: WatchMetrics,
    probes: Option<Arc<Probes>>,
) -> anyhow::Result<()> {
    let mut tasks = JoinSet::new();
    let w = (&client, &shared, &metrics, &probes);
    for ns in shared.read(Index::namespaces) {
        spawn::<Pod>(&mut tasks, w, &ns);
        spawn::<Service>(&mut tasks, w, &ns);
        spawn::<EndpointSlice>(&mut tasks, w, &ns);
        spawn::<Lease>(&mut tasks, w, &ns);
        spawn::<ConfigMap>(&mut tasks, w, &ns);
    }
    for ns in shared.read(Index::member_namespaces) {
        spawn::<MemberNamespaceLease>(&mut tasks, w, &ns);
    }
    tasks.spawn(heartbeats(shared.clone()));
    match tasks.join_next().await {
        Some(Ok(())) | None => anyhow::bail!("a watcher ended"),
        Some(Err(e)) => Err(e.into()),
    }
}

/// How often members' heartbeats are looked at by the clock ([`Index::heartbeats`]).
const HEARTBEATS_EVERY: Duration = Duration::from_millis(250);

/// Tells live views (through the changes) when a member's heartbeat goes late or lost by the
/// clock alone, with no Lease event to say so.
async fn heartbeats(shared: Arc<SharedIndex>) {
    let mut tick = tokio::time::interval(HEARTBEATS_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let now = Timestamp::now();
        shared.write(|ix| ((), ix.heartbeats(now)));
    }
}

type Watching<'a> = (
    &'a Client,
    &'a Arc<SharedIndex>,
    &'a WatchMetrics,
    &'a Option<Arc<Probes>>,
);

fn spawn<K>(tasks: &mut JoinSet<()>, (client, shared, metrics, probes): Watching<'_>, ns: &str)
where
    K: Indexed + kube::Resource<Scope = k8s_openapi::NamespaceResourceScope> + DeserializeOwned,
    K::DynamicType: Default,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    let span = info_span!("watch", namespace = ns, kind = ?K::KIND);
    // Only Lease watches can see a probe.
    let probes = matches!(K::KIND, Kind::Lease | Kind::MemberLease)
        .then(|| probes.clone())
        .flatten();
    tasks.spawn(
        watch_kind(api, ns.to_owned(), shared.clone(), metrics.clone(), probes).instrument(span),
    );
}

/// While a watch is failing, the API server is probed this often; once it answers, the watch
/// starts over with a fresh list (instead of waiting out kube-rs's backoff of up to 30 s), so the
/// model is fresh again within about this long of the API server's return.
const PROBE_EVERY: Duration = Duration::from_secs(1);

/// Completes once a one-item list of `K` succeeds.
async fn reachable<K>(api: &Api<K>)
where
    K: Indexed + DeserializeOwned,
{
    loop {
        tokio::time::sleep(PROBE_EVERY).await;
        if api
            .list_metadata(&ListParams::default().limit(1))
            .await
            .is_ok()
        {
            return;
        }
    }
}

async fn watch_kind<K>(
    api: Api<K>,
    ns: String,
    shared: Arc<SharedIndex>,
    metrics: WatchMetrics,
    probes: Option<Arc<Probes>>,
) where
    K: Indexed + DeserializeOwned,
    K::DynamicType: Default,
{
    loop {
        let mut stream = watcher::watcher(api.clone(), watcher::Config::default())
            .default_backoff()
            .boxed();
        let mut seen = BTreeSet::new();
        let mut failing = false;
        // A probe met in a relist proves it only once the whole list is applied.
        let mut listed_probe: Option<i64> = None;
        loop {
            let event = if failing {
                tokio::select! {
                    e = stream.next() => e,
                    () = reachable(&api) => {
                        tracing::info!("API server reachable again; relisting");
                        break;
                    }
                }
            } else {
                stream.next().await
            };
            let Some(event) = event else {
                return;
            };
            let now = Timestamp::now();
            match event {
                Ok(event) => {
                    let recovered = std::mem::take(&mut failing);
                    if recovered {
                        tracing::info!("watch is back");
                    }
                    let counted = match &event {
                        Event::Init => {
                            metrics.list(&ns, K::KIND);
                            None
                        }
                        Event::InitApply(_) => Some(WatchEvent::List),
                        Event::InitDone => None,
                        Event::Apply(_) => Some(WatchEvent::Apply),
                        Event::Delete(_) => Some(WatchEvent::Delete),
                    };
                    if let Some(e) = counted {
                        metrics.event(&ns, K::KIND, e);
                    }
                    let returned = |o: &K| probes.as_ref().and_then(|p| p.returned(&ns, o.meta()));
                    shared.write(|ix| {
                        if recovered {
                            ix.set_stale(&ns, K::KIND, false);
                        }
                        let changes = match event {
                            Event::Init => {
                                seen.clear();
                                listed_probe = None;
                                Vec::new()
                            }
                            Event::InitApply(o) => {
                                seen.extend(o.meta().name.clone());
                                listed_probe = returned(&o).or(listed_probe);
                                ix.apply(&o, now)
                            }
                            Event::InitDone => {
                                let changes = ix.finish_relist::<K>(&ns, &seen, now);
                                if let Some(sent) = listed_probe.take() {
                                    ix.prove(&ns, K::KIND, sent);
                                }
                                changes
                            }
                            Event::Apply(o) => {
                                let changes = ix.apply(&o, now);
                                if let Some(sent) = returned(&o) {
                                    ix.prove(&ns, K::KIND, sent);
                                }
                                changes
                            }
                            Event::Delete(o) => {
                                let name = o.meta().name.clone().unwrap_or_default();
                                ix.delete::<K>(&ns, &name, now)
                            }
                        };
                        metrics.changes(&changes);
                        ((), changes)
                    });
                }
                Err(error) => {
                    metrics.error(&ns, K::KIND);
                    if !failing {
                        warn!(%error, "watch failed; the model is stale until it is back");
                        failing = true;
                    }
                    shared.write(|ix| {
                        ix.set_stale(&ns, K::KIND, true);
                        ((), Vec::new())
                    });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::Config;

    fn shared() -> Arc<SharedIndex> {
        let config = Config::parse(
            "clusters: [{name: c, namespace: ns, selector: {app: c}, targets: {inline: [t]}}]",
            Path::new("t.yaml"),
        )
        .unwrap();
        SharedIndex::new(Index::new(&config.clusters))
    }

    fn change(i: usize) -> Change {
        Change::Targets {
            cluster: format!("c{i}"),
        }
    }

    #[tokio::test]
    async fn the_journal_keeps_every_change_in_order_where_subscribers_lag() {
        let shared = shared();
        let mut subscriber = shared.subscribe();
        let n = 3 * CHANGE_BUFFER;
        for i in 0..n {
            shared.write(|_| ((), vec![change(i)]));
        }
        // A subscriber that fell this far behind is told so (and resyncs from the model).
        assert!(matches!(
            subscriber.recv().await,
            Err(broadcast::error::RecvError::Lagged(_))
        ));
        // The journal, read only now, has all of them, including those from before any read.
        let mut journal = shared.journal().await;
        for i in 0..n {
            assert_eq!(journal.next().await, Ok(change(i)));
        }
    }

    #[tokio::test]
    async fn a_full_journal_counts_what_it_dropped_and_says_so_once() {
        let shared = shared();
        for i in 0..JOURNAL_CAPACITY + 5 {
            shared.write(|_| ((), vec![change(i)]));
        }
        let mut journal = shared.journal().await;
        assert_eq!(journal.next().await, Err(5));
        for i in 0..JOURNAL_CAPACITY {
            assert_eq!(journal.next().await, Ok(change(i)));
        }
        shared.write(|_| ((), vec![change(0)]));
        assert_eq!(journal.next().await, Ok(change(0)));
    }

    /// A batch is what is queued, in order, up to the limit; the journal counts as caught up
    /// only once its consumer said it dealt with everything offered, dropped changes included.
    #[tokio::test]
    async fn the_journal_is_caught_up_once_its_consumer_dealt_with_every_change() {
        let shared = shared();
        let short = Duration::from_millis(20);
        assert!(shared.journal_caught_up(short).await, "nothing offered yet");
        for i in 0..5 {
            shared.write(|_| ((), vec![change(i)]));
        }
        let mut journal = shared.journal().await;
        let first = journal.next_batch(3).await.unwrap();
        assert_eq!(first, (0..3).map(change).collect::<Vec<_>>());
        journal.done();
        assert!(!shared.journal_caught_up(short).await, "two still queued");
        assert_eq!(
            journal.next_batch(100).await.unwrap(),
            [change(3), change(4)]
        );
        assert!(
            !shared.journal_caught_up(short).await,
            "taken but not yet done"
        );
        journal.done();
        assert!(shared.journal_caught_up(short).await);
        // A waiter is woken when the consumer is done, not only when it asks.
        shared.write(|_| ((), vec![change(5)]));
        let (caught_up, ()) =
            tokio::join!(shared.journal_caught_up(Duration::from_secs(5)), async {
                assert_eq!(journal.next().await, Ok(change(5)));
                journal.done();
            });
        assert!(caught_up);
        drop(journal);
        // Dropped changes count as dealt with once the consumer has been told of them.
        for i in 0..JOURNAL_CAPACITY + 2 {
            shared.write(|_| ((), vec![change(i)]));
        }
        let mut journal = shared.journal().await;
        assert_eq!(journal.next_batch(10).await, Err(2));
        for _ in 0..2 {
            if shared.journal_caught_up(Duration::ZERO).await {
                break;
            }
            journal.next_batch(JOURNAL_CAPACITY).await.unwrap();
            journal.done();
        }
        assert!(shared.journal_caught_up(Duration::ZERO).await);
    }
}
