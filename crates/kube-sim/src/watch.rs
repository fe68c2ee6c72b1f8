//! The watch protocol: a stream of newline-delimited JSON events read from the store's history
//! with a cursor, as kube-apiserver's cacher serves them.
//!
//! - start from a resourceVersion (every change after it, in order), or with initial ADDED
//!   events for the current state (resourceVersion unset or "0", or `sendInitialEvents`);
//! - an object that enters the selector arrives as ADDED, one that leaves as DELETED (with its
//!   previous content and the new resourceVersion, as the cacher sends it);
//! - BOOKMARK events when asked for, periodically and shortly before the timeout;
//! - history that was compacted ends the stream with one ERROR event carrying a 410 `Status`
//!   (HTTP 200 — kube-rs relists on that, and would retry forever on an HTTP 410).
//!
//! No task is spawned: the stream is a state machine polled by the HTTP body, so a client that
//! goes away simply drops it.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use futures::Stream;
use serde_json::json;
use tokio::time::Instant;

use super::registry::TypeId;
use super::status::StatusError;
use super::store::{EventKind, ObjectStore, Stored};

/// Events read from the history per wake-up; bounds the time the store lock is held.
const BATCH: usize = 1024;
/// After a commit wakes a watch, how long it waits for more before reading the history: a
/// burst of writes then costs each watcher one history read and one socket write instead of
/// one per event (kube-apiserver's cacher also dispatches in batches). Adds at most this much
/// delivery latency.
const COALESCE: Duration = Duration::from_millis(5);
/// Coalescing only happens with at least this much history, so the events of one window can
/// never push a watcher's position out of it (tests run with a history of a handful).
const COALESCE_MIN_HISTORY: usize = 1_000;
/// How long before the timeout the closing bookmark is sent.
const BOOKMARK_BEFORE_TIMEOUT: Duration = Duration::from_secs(2);

/// Encodes one object for the event (`first` is true for the stream's first event).
pub type Encoder = Arc<dyn Fn(&Stored, bool) -> Bytes + Send + Sync>;
/// Decides whether an object matches the watch's selectors.
pub type Filter = Arc<dyn Fn(&Stored) -> bool + Send + Sync>;

/// Where the watch starts.
#[derive(Debug, Clone, Copy)]
pub enum Start {
    /// Every change after this resourceVersion.
    After(u64),
    /// ADDED for every current match first; then, if `end_bookmark`, a BOOKMARK annotated
    /// `k8s.io/initial-events-end`.
    Initial { end_bookmark: bool },
}

/// Everything a watch needs.
pub struct WatchSpec {
    pub storage_type: TypeId,
    pub namespace: Option<String>,
    pub filter: Filter,
    pub encode: Encoder,
    pub start: Start,
    pub bookmarks: bool,
    pub bookmark_interval: Duration,
    pub timeout: Duration,
    /// `kind` and `apiVersion` of bookmark objects.
    pub kind: String,
    pub api_version: String,
}

struct State {
    store: Arc<ObjectStore>,
    spec: WatchSpec,
    rx: tokio::sync::watch::Receiver<u64>,
    cursor: u64,
    /// Encoded events not yet handed to the HTTP body: one buffer, so a burst of events is
    /// one chunk and each line is written once.
    pending: BytesMut,
    first: bool,
    deadline: Instant,
    /// When the next BOOKMARK is due (None: no more bookmarks on this watch).
    next_bookmark: Option<Instant>,
    started: bool,
    done: bool,
    /// See [`COALESCE_MIN_HISTORY`].
    coalesce: bool,
}

/// Appends one event line: `{"type":"…","object":…}\n`.
fn line(out: &mut BytesMut, kind: &str, object: &[u8]) {
    out.reserve(object.len() + 32);
    out.put_slice(b"{\"type\":\"");
    out.put_slice(kind.as_bytes());
    out.put_slice(b"\",\"object\":");
    out.put_slice(object);
    out.put_slice(b"}\n");
}

/// When the next bookmark is due, as the cacher's `nextBookmarkTime`: one interval from now,
/// but no later than shortly before the timeout; none once that point has passed.
fn next_bookmark_time(now: Instant, interval: Duration, deadline: Instant) -> Option<Instant> {
    let heartbeat = now + interval;
    let pre_timeout = deadline.checked_sub(BOOKMARK_BEFORE_TIMEOUT)?;
    let at = heartbeat.min(pre_timeout);
    (at >= now).then_some(at)
}

impl State {
    fn bookmark(&mut self, initial_end: bool) {
        let mut meta = json!({ "resourceVersion": self.cursor.to_string() });
        if initial_end {
            meta["annotations"] = json!({ "k8s.io/initial-events-end": "true" });
        }
        let obj = json!({ "kind": self.spec.kind, "apiVersion": self.spec.api_version, "metadata": meta });
        line(
            &mut self.pending,
            "BOOKMARK",
            &serde_json::to_vec(&obj).unwrap_or_default(),
        );
    }

    fn in_scope(&self, type_id: TypeId, namespace: &str) -> bool {
        type_id == self.spec.storage_type
            && self
                .spec
                .namespace
                .as_deref()
                .is_none_or(|ns| ns == namespace)
    }

    fn emit(&mut self, kind: &str, obj: &Stored) {
        let bytes = (self.spec.encode)(obj, self.first);
        self.first = false;
        line(&mut self.pending, kind, &bytes);
    }

    fn start(&mut self) {
        self.started = true;
        match self.spec.start {
            Start::After(rv) => self.cursor = rv,
            Start::Initial { end_bookmark } => {
                let (rv, items) = self
                    .store
                    .snapshot(self.spec.storage_type, self.spec.namespace.as_deref());
                self.cursor = rv;
                let filter = self.spec.filter.clone();
                for obj in items.iter().filter(|o| filter(o)) {
                    self.emit("ADDED", obj);
                }
                if end_bookmark {
                    self.bookmark(true);
                }
            }
        }
    }

    /// Reads new history; false when the stream must end (compacted).
    fn drain(&mut self) -> bool {
        loop {
            let events = match self.store.events_after(self.cursor, BATCH) {
                Ok(e) => e,
                Err(c) => {
                    let err = StatusError::expired(format!(
                        "too old resource version: {} ({})",
                        self.cursor, c.compacted
                    ));
                    line(
                        &mut self.pending,
                        "ERROR",
                        &serde_json::to_vec(&err.to_status()).unwrap_or_default(),
                    );
                    return false;
                }
            };
            let n = events.len();
            for e in events {
                self.cursor = e.rv;
                if !self.in_scope(e.type_id, &e.namespace) {
                    continue;
                }
                let now = (self.spec.filter)(&e.obj);
                let before = e.prev.as_ref().is_some_and(|p| (self.spec.filter)(p));
                match e.kind {
                    EventKind::Added if now => self.emit("ADDED", &e.obj),
                    EventKind::Deleted if before || now => self.emit("DELETED", &e.obj),
                    EventKind::Modified => match (before, now) {
                        (true, true) => self.emit("MODIFIED", &e.obj),
                        (false, true) => self.emit("ADDED", &e.obj),
                        // The cacher sends the previous content with the event's version
                        // (found by the real tier; the simulator sent the new state).
                        (true, false) => {
                            if let Some(prev) = &e.prev {
                                self.emit("DELETED", &prev.with_rv(e.rv));
                            }
                        }
                        (false, false) => {}
                    },
                    _ => {}
                }
            }
            if n < BATCH {
                return true;
            }
        }
    }

    fn take_pending(&mut self) -> Option<Bytes> {
        (!self.pending.is_empty()).then(|| self.pending.split().freeze())
    }
}

/// The event stream of one watch request.
pub fn stream(
    store: Arc<ObjectStore>,
    spec: WatchSpec,
) -> impl Stream<Item = Result<Bytes, Infallible>> + Send {
    let now = Instant::now();
    let rx = store.subscribe();
    let deadline = now + spec.timeout;
    let next_bookmark = if spec.bookmarks {
        next_bookmark_time(now, spec.bookmark_interval, deadline)
    } else {
        None
    };
    let coalesce = store.capacity() >= COALESCE_MIN_HISTORY;
    let state = State {
        deadline,
        next_bookmark,
        store,
        rx,
        spec,
        cursor: 0,
        pending: BytesMut::new(),
        first: true,
        started: false,
        done: false,
        coalesce,
    };
    futures::stream::unfold(state, |mut st| async move {
        if !st.started {
            st.start();
            if !st.drain() {
                st.done = true;
            }
        }
        loop {
            if let Some(chunk) = st.take_pending() {
                return Some((Ok(chunk), st));
            }
            if st.done {
                return None;
            }
            let now = Instant::now();
            if now >= st.deadline {
                return None;
            }
            let bookmark_at = st.next_bookmark;
            tokio::select! {
                changed = st.rx.changed() => {
                    if changed.is_err() {
                        // The store is gone: the simulator is shutting down.
                        return None;
                    }
                    if st.coalesce {
                        tokio::time::sleep(COALESCE).await;
                    }
                    if !st.drain() {
                        st.done = true;
                    }
                }
                _ = tokio::time::sleep_until(bookmark_at.unwrap_or(st.deadline)), if bookmark_at.is_some() => {
                    if !st.drain() {
                        st.done = true;
                        continue;
                    }
                    st.next_bookmark = next_bookmark_time(Instant::now(), st.spec.bookmark_interval, st.deadline);
                    st.bookmark(false);
                }
                _ = tokio::time::sleep_until(st.deadline) => return None,
            }
        }
    })
}
