//! The live event feed behind `GET /api/v1/events` (SSE) and the dashboard: one hub task
//! turns index changes (ownership, instance lifecycle, leadership) and operation progress into
//! numbered, typed events, keeps the last [`REPLAY`] for clients that reconnect with
//! `Last-Event-ID`, and broadcasts them. A client too far behind gets a `resync` event (reload
//! the state) instead of a silent gap.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::broadcast;

use crate::engine::Engine;
use crate::k8s::index::Change;
use crate::model::{Cause, InstanceEventKind, OperationState};
use crate::store::OperationQuery;

/// Events kept for replay after a reconnect.
pub const REPLAY: usize = 10_000;
/// How often operation progress is read from the store.
const OPERATION_POLL: Duration = Duration::from_millis(500);
/// Events buffered per slow subscriber before it is told to resync.
const FANOUT_BUFFER: usize = 4_096;

/// One event of the feed.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    /// A target changed hands.
    Ownership {
        /// Cluster.
        cluster: String,
        /// Target key.
        target: String,
        /// Previous holder.
        from: Option<String>,
        /// New holder (`None`: its Lease was deleted while held).
        to: Option<String>,
        /// Why.
        cause: Cause,
        /// The operation that moved it.
        operation: Option<String>,
        /// When (unix ms).
        at_ms: i64,
    },
    /// An instance joined, left, became (not) ready, was cordoned…
    Instance {
        /// Cluster.
        cluster: String,
        /// Instance.
        instance: String,
        /// What happened.
        kind: InstanceEventKind,
        /// When (unix ms).
        at_ms: i64,
    },
    /// Leadership changed in a cluster.
    Leader {
        /// Cluster.
        cluster: String,
        /// The instance that gained or lost it.
        instance: String,
        /// Gained (true) or lost.
        gained: bool,
        /// When (unix ms).
        at_ms: i64,
    },
    /// An operation changed state or made progress.
    Operation {
        /// Operation id.
        id: String,
        /// Cluster.
        cluster: String,
        /// Its state.
        state: OperationState,
        /// Moves done.
        done: u32,
        /// Moves failed.
        failed: u32,
        /// Moves in all.
        total: u32,
        /// Its phase (removals).
        phase: Option<String>,
    },
    /// The target list of a cluster changed.
    Targets {
        /// Cluster.
        cluster: String,
    },
    /// A member's Lease changed what is shown of it (taken, leaving, released,
    /// fenced, deleted; renewals are not events).
    Members {
        /// Cluster.
        cluster: String,
    },
    /// Events were missed: reload the state.
    Resync,
}

impl Event {
    /// The SSE `event:` name.
    pub fn name(&self) -> &'static str {
        match self {
            Event::Ownership { .. } => "ownership",
            Event::Instance { .. } => "instance",
            Event::Leader { .. } => "leader",
            Event::Operation { .. } => "operation",
            Event::Targets { .. } => "targets",
            Event::Members { .. } => "members",
            Event::Resync => "resync",
        }
    }

    /// The feed's event for an index change; `None` for one not to broadcast (an ownership
    /// change or overrun report replayed from a first list).
    fn from_change(c: Change) -> Option<Event> {
        Some(match c {
            Change::Ownership { replayed: true, .. } => return None,
            Change::Ownership {
                cluster,
                target,
                from,
                to,
                cause,
                operation,
                at_ms,
                ..
            } => Event::Ownership {
                cluster,
                target,
                from,
                to,
                cause,
                operation,
                at_ms,
            },
            Change::Instance {
                cluster,
                instance,
                kind: kind @ (InstanceEventKind::LeaderGained | InstanceEventKind::LeaderLost),
                at_ms,
            } => Event::Leader {
                cluster,
                instance,
                gained: kind == InstanceEventKind::LeaderGained,
                at_ms,
            },
            Change::Instance {
                cluster,
                instance,
                kind,
                at_ms,
            } => Event::Instance {
                cluster,
                instance,
                kind,
                at_ms,
            },
            Change::Overrun {
                cluster,
                instance,
                overrun,
                replayed: false,
            } => Event::Instance {
                cluster,
                instance,
                kind: InstanceEventKind::Overrun,
                at_ms: overrun.at_ms,
            },
            Change::Overrun { replayed: true, .. } => return None,
            Change::Targets { cluster } => Event::Targets { cluster },
            // History's detail of a move already told; the feed has no kind for it.
            Change::WorkGap { .. } => return None,
            Change::Members { cluster } => Event::Members { cluster },
        })
    }
}

/// The numbered feed.
#[derive(Clone)]
pub struct Hub {
    inner: Arc<HubInner>,
}

struct HubInner {
    /// The last [`REPLAY`] events with their ids (consecutive, from 1).
    /// With when each was published.
    log: Mutex<VecDeque<(u64, Arc<Event>, Instant)>>,
    tx: broadcast::Sender<(u64, Arc<Event>)>,
}

/// The id the next event gets: one after the newest kept.
fn next_id(log: &VecDeque<(u64, Arc<Event>, Instant)>) -> u64 {
    log.back().map_or(1, |(n, ..)| n + 1)
}

impl Default for Hub {
    fn default() -> Self {
        Hub {
            inner: Arc::new(HubInner {
                log: Mutex::new(VecDeque::with_capacity(1024)),
                tx: broadcast::channel(FANOUT_BUFFER).0,
            }),
        }
    }
}

/// What a new subscriber gets: the events after its `Last-Event-ID`, then the live feed.
pub struct Subscription {
    /// Events to send first (or a single `resync` when the id is too old).
    pub backlog: Vec<(u64, Arc<Event>)>,
    /// Every event from now on.
    pub live: broadcast::Receiver<(u64, Arc<Event>)>,
}

impl Hub {
    /// Numbers, keeps and broadcasts one event.
    pub fn publish(&self, e: Event) {
        let e = Arc::new(e);
        let mut log = self.inner.log.lock().unwrap_or_else(|e| e.into_inner());
        let id = next_id(&log);
        if log.len() == REPLAY {
            log.pop_front();
        }
        log.push_back((id, e.clone(), Instant::now()));
        // No subscriber is fine.
        let _ = self.inner.tx.send((id, e));
    }

    /// The id of the newest event (0 before the first).
    pub fn last_id(&self) -> u64 {
        let log = self.inner.log.lock().unwrap_or_else(|e| e.into_inner());
        next_id(&log) - 1
    }

    /// The newest event published before `t`: a page showing a model built at `t` includes
    /// every change up to it (an event is published after the change it tells of), and resumes
    /// the feed after it; a later event may or may not be in the page, and costs it one more
    /// look. 0 before the first event.
    pub fn last_id_before(&self, t: Instant) -> u64 {
        let log = self.inner.log.lock().unwrap_or_else(|e| e.into_inner());
        match log.iter().rev().find(|(_, _, at)| *at < t) {
            Some((n, ..)) => *n,
            // Everything kept came after `t`: what came before was dropped, and was older.
            None => log.front().map_or(0, |(first, ..)| first - 1),
        }
    }

    /// Subscribes, replaying what came after `last_id` when it is still kept.
    pub fn subscribe(&self, last_id: Option<u64>) -> Subscription {
        // Hold the log so nothing is published between the backlog and the subscription.
        let log = self.inner.log.lock().unwrap_or_else(|e| e.into_inner());
        let live = self.inner.tx.subscribe();
        let next = next_id(&log);
        let backlog = match last_id {
            None => Vec::new(),
            Some(id) if id + 1 >= next => Vec::new(),
            Some(id) => match log.front() {
                Some((first, ..)) if *first <= id + 1 => log
                    .iter()
                    .filter(|(n, ..)| *n > id)
                    .map(|(n, e, _)| (*n, e.clone()))
                    .collect(),
                _ => vec![(next - 1, Arc::new(Event::Resync))],
            },
        };
        Subscription { backlog, live }
    }

    /// Feeds the hub until the index's change feed closes: index changes as they come, and
    /// operation progress read from the store every [`OPERATION_POLL`].
    pub async fn run(self, engine: Engine) {
        let mut changes = engine.shared().subscribe();
        let mut tick = tokio::time::interval(OPERATION_POLL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut seen: HashMap<String, (i64, u32, u32)> = HashMap::new();
        loop {
            tokio::select! {
                c = changes.recv() => match c {
                    Ok(c) => {
                        if let Some(e) = Event::from_change(c) {
                            self.publish(e);
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => self.publish(Event::Resync),
                    Err(broadcast::error::RecvError::Closed) => return,
                },
                _ = tick.tick() => self.poll_operations(&engine, &mut seen).await,
            }
        }
    }

    async fn poll_operations(&self, engine: &Engine, seen: &mut HashMap<String, (i64, u32, u32)>) {
        let page = match engine
            .store()
            .operations(&OperationQuery {
                limit: 20,
                ..Default::default()
            })
            .await
        {
            Ok(p) => p,
            Err(error) => {
                tracing::warn!(%error, "reading operations for the event feed failed");
                return;
            }
        };
        for op in page.items {
            let mark = (op.updated_at_ms, op.moves.done, op.moves.failed);
            if seen.get(&op.id) == Some(&mark) {
                continue;
            }
            seen.insert(op.id.clone(), mark);
            self.publish(Event::Operation {
                id: op.id,
                cluster: op.cluster,
                state: op.state,
                done: op.moves.done,
                failed: op.moves.failed,
                total: op.moves.total,
                phase: op.phase,
            });
        }
        if seen.len() > 1000 {
            seen.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(s: &Subscription) -> Vec<u64> {
        s.backlog.iter().map(|(n, _)| *n).collect()
    }

    /// A page built from a model taken at `t` resumes after the last event published before
    /// `t`, however many came after.
    #[test]
    fn the_last_event_before_a_time_is_the_one_a_page_includes() {
        let hub = Hub::default();
        let t0 = Instant::now();
        assert_eq!(hub.last_id_before(t0), 0);
        let targets = || Event::Targets {
            cluster: "c".into(),
        };
        hub.publish(targets());
        hub.publish(targets());
        std::thread::sleep(Duration::from_millis(5));
        let t = Instant::now();
        std::thread::sleep(Duration::from_millis(5));
        hub.publish(targets());
        assert_eq!(hub.last_id(), 3);
        assert_eq!(hub.last_id_before(t), 2);
        assert_eq!(hub.last_id_before(t0), 0);
        assert_eq!(hub.last_id_before(Instant::now()), 3);
        // Only later events kept: the dropped ones were older.
        for _ in 0..REPLAY {
            hub.publish(targets());
        }
        assert_eq!(hub.last_id_before(t), 3);
    }

    #[test]
    fn replays_after_the_last_id_and_asks_for_a_resync_when_too_old() {
        let hub = Hub::default();
        assert!(hub.subscribe(Some(0)).backlog.is_empty());
        for _ in 0..3 {
            hub.publish(Event::Targets {
                cluster: "c".into(),
            });
        }
        assert_eq!(ids(&hub.subscribe(None)), Vec::<u64>::new());
        assert_eq!(ids(&hub.subscribe(Some(1))), [2, 3]);
        assert_eq!(ids(&hub.subscribe(Some(3))), Vec::<u64>::new());
        let mut live = hub.subscribe(Some(3)).live;
        hub.publish(Event::Resync);
        assert_eq!(live.try_recv().map(|(n, _)| n).ok(), Some(4));
        for _ in 0..REPLAY {
            hub.publish(Event::Resync);
        }
        let old = hub.subscribe(Some(1));
        assert_eq!(old.backlog.len(), 1);
        assert!(matches!(*old.backlog[0].1, Event::Resync));
        assert_eq!(
            ids(&hub.subscribe(Some(REPLAY as u64))),
            [
                REPLAY as u64 + 1,
                REPLAY as u64 + 2,
                REPLAY as u64 + 3,
                REPLAY as u64 + 4
            ]
        );
    }
}
