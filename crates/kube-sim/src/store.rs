//! The simulator's storage: the equivalent of etcd plus the watch cache.
//!
//! One global, strictly increasing resourceVersion across all kinds. Objects are kept as their
//! serialized JSON (shared, immutable [`Stored`] values) plus the labels and selectable fields
//! needed to filter them, so lists and watch fan-out copy bytes instead of re-encoding.
//! Every change is appended to a bounded history of [`Event`]s; watches read from it with a
//! cursor, and lists at an older resourceVersion (continue tokens, `resourceVersionMatch=Exact`)
//! are answered by undoing the newer events — a small MVCC. What fell out of the history is
//! "compacted": asking for it gives 410 Expired, as etcd compaction does.
//!
//! The store knows nothing of HTTP, validation or patches; callers decide the new object and
//! commit it inside [`ObjectStore::transact`], which makes read-modify-write atomic.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use serde_json::Value;
use tokio::sync::watch;

use super::registry::{TYPES, TypeId};

/// The default number of events kept for watch resumption and consistent pagination.
/// 50,000 events is ~10 s at the benchmark's 5,000 writes/s and ~40 MB of history.
pub const DEFAULT_HISTORY: usize = 50_000;

/// An immutable stored object.
#[derive(Debug)]
pub struct Stored {
    pub rv: u64,
    /// The full object as served, `metadata.resourceVersion` included.
    pub json: Bytes,
    /// Where `json`'s leading `"kind"` and `"apiVersion"` members end (the byte of the `,` or
    /// `}` after them); 0 when the object does not start with both. List items are served
    /// without them, as the apiserver does.
    pub type_meta_end: usize,
    pub labels: BTreeMap<String, String>,
    /// Values of the selectable fields (`metadata.name`, `status.phase`, …).
    pub fields: Vec<(&'static str, String)>,
}

impl Stored {
    /// Parses the stored JSON back into a value.
    pub fn value(&self) -> Value {
        // The bytes were produced by serde_json from a Value, so parsing cannot fail; an empty
        // object is the harmless fallback should that ever be untrue.
        serde_json::from_slice(&self.json).unwrap_or_else(|_| Value::Object(Default::default()))
    }

    /// This state carrying another resourceVersion: what a watcher whose selector the object
    /// left receives, as the cacher sends it (the previous content, the event's version).
    pub fn with_rv(&self, rv: u64) -> Stored {
        let mut value = self.value();
        if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert("resourceVersion".into(), Value::String(rv.to_string()));
        }
        let type_meta_end = type_meta_first(&mut value);
        Stored {
            rv,
            json: Bytes::from(serde_json::to_vec(&value).unwrap_or_default()),
            type_meta_end,
            labels: self.labels.clone(),
            fields: self.fields.clone(),
        }
    }

    /// The object as a list item: without `kind` and `apiVersion` (a typed list's items carry
    /// no TypeMeta in the apiserver's JSON).
    pub fn list_item_json(&self) -> std::borrow::Cow<'_, [u8]> {
        match self.json.get(self.type_meta_end) {
            Some(b',') if self.type_meta_end > 0 => {
                let mut out = Vec::with_capacity(self.json.len() - self.type_meta_end);
                out.push(b'{');
                out.extend_from_slice(&self.json[self.type_meta_end + 1..]);
                std::borrow::Cow::Owned(out)
            }
            Some(b'}') if self.type_meta_end > 0 => std::borrow::Cow::Borrowed(b"{}"),
            _ => std::borrow::Cow::Borrowed(&self.json),
        }
    }

    /// The value of a selectable field ("" when absent, as the apiserver treats it).
    pub fn field(&self, name: &str) -> Option<String> {
        self.fields
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.clone())
    }
}

/// What happened to an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Added,
    Modified,
    Deleted,
}

/// One committed change.
#[derive(Debug)]
pub struct Event {
    pub rv: u64,
    pub type_id: TypeId,
    pub kind: EventKind,
    pub namespace: String,
    pub name: String,
    /// The new state (for Deleted: the last state, carrying the deletion's resourceVersion).
    pub obj: Arc<Stored>,
    /// The state before, if the object existed.
    pub prev: Option<Arc<Stored>>,
}

/// Object key within a type: (namespace, name); cluster-scoped objects use "".
pub type Key = (String, String);

/// The requested resourceVersion is no longer in the history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compacted {
    /// The newest resourceVersion that is gone.
    pub compacted: u64,
}

struct Inner {
    rv: u64,
    objects: Vec<BTreeMap<Key, Arc<Stored>>>,
    history: VecDeque<Arc<Event>>,
    compacted: u64,
    capacity: usize,
}

/// The in-memory object store.
pub struct ObjectStore {
    inner: Mutex<Inner>,
    notify: watch::Sender<u64>,
}

/// A page of a list.
#[derive(Debug)]
pub struct Page {
    /// The resourceVersion the page reflects.
    pub rv: u64,
    pub items: Vec<Arc<Stored>>,
    /// Set when more items follow: the key of the last item returned.
    pub last_key: Option<Key>,
    /// Items after this page, when known without filtering.
    pub remaining: Option<u64>,
}

/// How a list is cut and filtered.
pub struct ListQuery<'a> {
    pub type_id: TypeId,
    pub namespace: Option<&'a str>,
    /// Serve the state at this resourceVersion (None: the newest).
    pub at: Option<u64>,
    /// Start strictly after this key (a continue token).
    pub after: Option<Key>,
    /// At most this many items (0: no limit).
    pub limit: usize,
    pub filter: &'a dyn Fn(&Stored) -> bool,
    /// Whether the filter is a real selector (disables `remainingItemCount`).
    pub filtered: bool,
}

impl ObjectStore {
    /// An empty store keeping `capacity` events of history.
    pub fn new(capacity: usize) -> Self {
        let (notify, _) = watch::channel(1);
        Self {
            inner: Mutex::new(Inner {
                rv: 1,
                objects: TYPES.iter().map(|_| BTreeMap::new()).collect(),
                history: VecDeque::new(),
                compacted: 0,
                capacity: capacity.max(1),
            }),
            notify,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave a half-written object (commits are a
        // single insert + push), so a poisoned lock is still consistent.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The newest resourceVersion.
    pub fn rv(&self) -> u64 {
        self.lock().rv
    }

    /// How many events the history keeps.
    pub fn capacity(&self) -> usize {
        self.lock().capacity
    }

    /// A receiver that changes whenever something is committed.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.notify.subscribe()
    }

    /// Reads one object.
    pub fn get(&self, type_id: TypeId, namespace: &str, name: &str) -> Option<Arc<Stored>> {
        self.lock().objects[type_id as usize]
            .get(&(namespace.to_owned(), name.to_owned()))
            .cloned()
    }

    /// Runs `f` with exclusive access; everything it commits is one atomic step for readers.
    pub fn transact<R>(&self, f: impl FnOnce(&mut Txn<'_>) -> R) -> R {
        let mut inner = self.lock();
        let before = inner.rv;
        let out = f(&mut Txn { inner: &mut inner });
        let after = inner.rv;
        drop(inner);
        if after != before {
            self.notify.send_replace(after);
        }
        out
    }

    /// Events with resourceVersion > `rv`, at most `max` of them.
    pub fn events_after(&self, rv: u64, max: usize) -> Result<Vec<Arc<Event>>, Compacted> {
        let inner = self.lock();
        if rv < inner.compacted {
            return Err(Compacted {
                compacted: inner.compacted,
            });
        }
        let start = inner.history.partition_point(|e| e.rv <= rv);
        Ok(inner.history.range(start..).take(max).cloned().collect())
    }

    /// Current objects of a type and the resourceVersion they reflect, in key order.
    pub fn snapshot(&self, type_id: TypeId, namespace: Option<&str>) -> (u64, Vec<Arc<Stored>>) {
        let inner = self.lock();
        (
            inner.rv,
            collect(&inner.objects[type_id as usize], namespace),
        )
    }

    /// Lists a type, optionally at an older resourceVersion and after a key.
    pub fn list(&self, q: &ListQuery<'_>) -> Result<Page, Compacted> {
        let inner = self.lock();
        let at = q.at.unwrap_or(inner.rv).min(inner.rv);
        let map = &inner.objects[q.type_id as usize];
        let in_scope = |k: &Key| {
            q.namespace.is_none_or(|ns| k.0 == ns) && q.after.as_ref().is_none_or(|a| k > a)
        };

        // State at `at`: the newest objects, with every later change undone. The first event
        // after `at` for a key holds the key's state at `at` in `prev`.
        let mut undo: BTreeMap<Key, Option<Arc<Stored>>> = BTreeMap::new();
        if at < inner.rv {
            if at < inner.compacted {
                return Err(Compacted {
                    compacted: inner.compacted,
                });
            }
            let start = inner.history.partition_point(|e| e.rv <= at);
            for e in inner.history.range(start..) {
                if e.type_id != q.type_id {
                    continue;
                }
                let key = (e.namespace.clone(), e.name.clone());
                if in_scope(&key) {
                    undo.entry(key).or_insert_with(|| e.prev.clone());
                }
            }
        }

        let current: Box<dyn Iterator<Item = (&Key, &Arc<Stored>)>> = match (&q.after, q.namespace)
        {
            (Some(after), Some(ns)) if after.0 == ns => Box::new(
                map.range((
                    std::ops::Bound::Excluded(after.clone()),
                    std::ops::Bound::Unbounded,
                ))
                .take_while(move |(k, _)| k.0 == ns),
            ),
            (Some(after), None) => Box::new(map.range((
                std::ops::Bound::Excluded(after.clone()),
                std::ops::Bound::Unbounded,
            ))),
            (_, Some(ns)) => Box::new(ns_range(map, ns).filter(move |(k, _)| in_scope(k))),
            (None, None) => Box::new(map.iter()),
        };

        /// Collects one page; once it is full, later objects only count as remaining.
        struct Acc<'f> {
            items: Vec<Arc<Stored>>,
            last_key: Option<Key>,
            more: bool,
            remaining: u64,
            limit: usize,
            filter: &'f dyn Fn(&Stored) -> bool,
        }
        impl Acc<'_> {
            fn visit(&mut self, key: &Key, obj: Option<&Arc<Stored>>) {
                let Some(obj) = obj else { return };
                if self.more {
                    self.remaining += 1;
                } else if (self.filter)(obj) {
                    if self.limit > 0 && self.items.len() == self.limit {
                        self.more = true;
                        self.remaining += 1;
                    } else {
                        self.items.push(obj.clone());
                        self.last_key = Some(key.clone());
                    }
                }
            }
        }
        let mut acc = Acc {
            items: Vec::new(),
            last_key: None,
            more: false,
            remaining: 0,
            limit: q.limit,
            filter: q.filter,
        };
        // Merge the newest objects with the undone keys, in key order. Once the page is full,
        // a filtered list stops (no remainingItemCount); an unfiltered one counts the rest
        // without visiting each object, unless undone keys still have to be merged.
        let mut undo_iter = undo.iter().peekable();
        for (key, obj) in current {
            while let Some((uk, _)) = undo_iter.peek() {
                if *uk < key {
                    let (uk, uv) = undo_iter.next().expect("peeked");
                    acc.visit(uk, uv.as_ref());
                } else {
                    break;
                }
            }
            if let Some((uk, uv)) = undo_iter.peek()
                && *uk == key
            {
                acc.visit(uk, uv.as_ref());
                undo_iter.next();
            } else {
                acc.visit(key, Some(obj));
            }
            if acc.more && (q.filtered || undo_iter.peek().is_none()) {
                if !q.filtered {
                    // Count the rest with a bounded range: no key is compared or even read.
                    let from = std::ops::Bound::Excluded(key.clone());
                    let rest = match q.namespace {
                        Some(ns) => map
                            .range((
                                from,
                                std::ops::Bound::Excluded((format!("{ns}\u{0}"), String::new())),
                            ))
                            .count(),
                        None => map.range((from, std::ops::Bound::Unbounded)).count(),
                    };
                    acc.remaining += rest as u64;
                }
                break;
            }
        }
        if !(acc.more && q.filtered) {
            for (uk, uv) in undo_iter {
                acc.visit(uk, uv.as_ref());
            }
        }
        let Acc {
            items,
            last_key,
            more,
            remaining,
            ..
        } = acc;
        Ok(Page {
            rv: at,
            items,
            last_key: if more { last_key } else { None },
            remaining: (more && !q.filtered).then_some(remaining),
        })
    }
}

/// Every object of one type's map in a namespace (or all of them), in key order.
fn collect(map: &BTreeMap<Key, Arc<Stored>>, namespace: Option<&str>) -> Vec<Arc<Stored>> {
    match namespace {
        Some(ns) => ns_range(map, ns).map(|(_, v)| v.clone()).collect(),
        None => map.values().cloned().collect(),
    }
}

fn ns_range<'a>(
    map: &'a BTreeMap<Key, Arc<Stored>>,
    ns: &str,
) -> impl Iterator<Item = (&'a Key, &'a Arc<Stored>)> {
    let ns_owned = ns.to_owned();
    map.range((ns.to_owned(), String::new())..)
        .take_while(move |(k, _)| k.0 == ns_owned)
}

/// `ObjectMeta`'s fields in Go struct order, which is the order kube-apiserver serialises them
/// in (and so the order clients and error messages show).
const OBJECT_META_ORDER: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

/// Reorders metadata keys into [`OBJECT_META_ORDER`]; unknown keys keep their order after them.
fn go_field_order(meta: &mut serde_json::Map<String, Value>) {
    let mut ordered = serde_json::Map::with_capacity(meta.len());
    for k in OBJECT_META_ORDER {
        if let Some(v) = meta.remove(*k) {
            ordered.insert((*k).to_owned(), v);
        }
    }
    ordered.append(meta);
    *meta = ordered;
}

/// Puts `kind` then `apiVersion` first, in Go's TypeMeta order, and returns how many bytes
/// they take in the serialised object (`{"kind":…,"apiVersion":…`), or 0 when either is
/// missing.
fn type_meta_first(value: &mut Value) -> usize {
    let Some(obj) = value.as_object_mut() else {
        return 0;
    };
    let (Some(kind), Some(av)) = (obj.shift_remove("kind"), obj.shift_remove("apiVersion")) else {
        return 0;
    };
    let mut ordered = serde_json::Map::with_capacity(obj.len() + 2);
    ordered.insert("kind".into(), kind);
    ordered.insert("apiVersion".into(), av);
    let head = serde_json::to_vec(&ordered).unwrap_or_default();
    ordered.append(obj);
    *obj = ordered;
    head.len().saturating_sub(1)
}

/// Exclusive access to the store inside [`ObjectStore::transact`].
pub struct Txn<'a> {
    inner: &'a mut Inner,
}

/// Computes labels and selectable fields of an object about to be stored.
pub type Indexer = fn(TypeId, &Value) -> (BTreeMap<String, String>, Vec<(&'static str, String)>);

impl Txn<'_> {
    /// Reads one object.
    pub fn get(&self, type_id: TypeId, namespace: &str, name: &str) -> Option<Arc<Stored>> {
        self.inner.objects[type_id as usize]
            .get(&(namespace.to_owned(), name.to_owned()))
            .cloned()
    }

    /// All objects of a type in a namespace (or everywhere), in key order.
    pub fn all(&self, type_id: TypeId, namespace: Option<&str>) -> Vec<Arc<Stored>> {
        collect(&self.inner.objects[type_id as usize], namespace)
    }

    fn stamp(&mut self, mut value: Value, index: Indexer, type_id: TypeId) -> (Arc<Stored>, Value) {
        self.inner.rv += 1;
        let rv = self.inner.rv;
        if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert("resourceVersion".into(), Value::String(rv.to_string()));
            go_field_order(meta);
        }
        let type_meta_end = type_meta_first(&mut value);
        let (labels, fields) = index(type_id, &value);
        let json = Bytes::from(serde_json::to_vec(&value).unwrap_or_default());
        let stored = Arc::new(Stored {
            rv,
            json,
            type_meta_end,
            labels,
            fields,
        });
        (stored, value)
    }

    /// Stores `value` (created or replaced) with a new resourceVersion, recording the event.
    pub fn put(
        &mut self,
        type_id: TypeId,
        namespace: &str,
        name: &str,
        value: Value,
        index: Indexer,
    ) -> Arc<Stored> {
        self.put_value(type_id, namespace, name, value, index).0
    }

    /// [`Txn::put`], also handing back the stored object as a value (no re-parse for the
    /// response).
    pub fn put_value(
        &mut self,
        type_id: TypeId,
        namespace: &str,
        name: &str,
        value: Value,
        index: Indexer,
    ) -> (Arc<Stored>, Value) {
        let (obj, value) = self.stamp(value, index, type_id);
        let key = (namespace.to_owned(), name.to_owned());
        let prev = self.inner.objects[type_id as usize].insert(key, obj.clone());
        let kind = if prev.is_some() {
            EventKind::Modified
        } else {
            EventKind::Added
        };
        self.record(type_id, kind, namespace, name, obj.clone(), prev);
        (obj, value)
    }

    /// Removes an object; `last` is its final state, stored in the event with a new resourceVersion.
    pub fn delete(
        &mut self,
        type_id: TypeId,
        namespace: &str,
        name: &str,
        last: Value,
        index: Indexer,
    ) -> Option<Arc<Stored>> {
        let key = (namespace.to_owned(), name.to_owned());
        let prev = self.inner.objects[type_id as usize].remove(&key)?;
        let (obj, _) = self.stamp(last, index, type_id);
        self.record(
            type_id,
            EventKind::Deleted,
            namespace,
            name,
            obj.clone(),
            Some(prev),
        );
        Some(obj)
    }

    fn record(
        &mut self,
        type_id: TypeId,
        kind: EventKind,
        namespace: &str,
        name: &str,
        obj: Arc<Stored>,
        prev: Option<Arc<Stored>>,
    ) {
        let inner = &mut *self.inner;
        inner.history.push_back(Arc::new(Event {
            rv: obj.rv,
            type_id,
            kind,
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            obj,
            prev,
        }));
        while inner.history.len() > inner.capacity {
            if let Some(old) = inner.history.pop_front() {
                inner.compacted = old.rv;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::id_of;
    use serde_json::json;

    fn idx(_: TypeId, v: &Value) -> (BTreeMap<String, String>, Vec<(&'static str, String)>) {
        let labels = v["metadata"]["labels"]
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_owned()))
                    .collect()
            })
            .unwrap_or_default();
        (labels, vec![])
    }

    fn mk_lease(name: &str, holder: &str) -> Value {
        json!({"metadata": {"name": name, "namespace": "default"}, "spec": {"holderIdentity": holder}})
    }

    fn names(page: &Page) -> Vec<String> {
        page.items
            .iter()
            .map(|s| s.value()["metadata"]["name"].as_str().unwrap().to_owned())
            .collect()
    }

    fn all<'a>() -> &'a dyn Fn(&Stored) -> bool {
        &|_| true
    }

    #[test]
    fn metadata_is_stored_in_go_field_order() {
        let s = ObjectStore::new(10);
        let t = id_of("coordination.k8s.io", "leases");
        let v = json!({"metadata": {"labels": {"a": "b"}, "uid": "u", "name": "x", "creationTimestamp": "t", "custom": 1}});
        let stored = s.transact(|x| x.put(t, "default", "x", v, idx));
        let keys: Vec<String> = stored.value()["metadata"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        assert_eq!(
            keys,
            [
                "name",
                "uid",
                "resourceVersion",
                "creationTimestamp",
                "labels",
                "custom"
            ]
        );
    }

    #[test]
    fn resource_versions_increase_across_kinds() {
        let s = ObjectStore::new(100);
        let leases = id_of("coordination.k8s.io", "leases");
        let cms = id_of("", "configmaps");
        let a = s.transact(|t| t.put(leases, "default", "a", mk_lease("a", "x"), idx));
        let b = s.transact(|t| t.put(cms, "default", "b", mk_lease("b", "x"), idx));
        assert!(b.rv > a.rv);
        assert_eq!(s.rv(), b.rv);
        assert_eq!(
            a.value()["metadata"]["resourceVersion"],
            json!(a.rv.to_string())
        );
    }

    #[test]
    fn list_at_an_older_version_undoes_later_changes() {
        let s = ObjectStore::new(100);
        let t = id_of("coordination.k8s.io", "leases");
        for n in ["a", "b", "c"] {
            s.transact(|x| x.put(t, "default", n, mk_lease(n, "old"), idx));
        }
        let at = s.rv();
        s.transact(|x| {
            x.put(t, "default", "b", mk_lease("b", "new"), idx);
            x.delete(t, "default", "a", mk_lease("a", "old"), idx);
            x.put(t, "default", "d", mk_lease("d", "new"), idx);
        });
        let q = ListQuery {
            type_id: t,
            namespace: Some("default"),
            at: Some(at),
            after: None,
            limit: 2,
            filter: all(),
            filtered: false,
        };
        let p1 = s.list(&q).unwrap();
        assert_eq!(names(&p1), ["a", "b"]);
        assert_eq!(p1.items[1].value()["spec"]["holderIdentity"], "old");
        assert_eq!(p1.remaining, Some(1));
        let q2 = ListQuery {
            after: p1.last_key.clone(),
            ..q
        };
        let p2 = s.list(&q2).unwrap();
        assert_eq!(names(&p2), ["c"]);
        assert!(p2.last_key.is_none());
        let now = s
            .list(&ListQuery {
                at: None,
                after: None,
                limit: 0,
                ..q2
            })
            .unwrap();
        assert_eq!(names(&now), ["b", "c", "d"]);
    }

    #[test]
    fn pages_count_the_rest_and_filtered_pages_do_not() {
        let s = ObjectStore::new(100);
        let t = id_of("coordination.k8s.io", "leases");
        for i in 0..10 {
            let mut v = mk_lease(&format!("l{i}"), "x");
            v["metadata"]["labels"] = json!({"even": (i % 2 == 0).to_string()});
            s.transact(|x| x.put(t, "default", &format!("l{i}"), v, idx));
        }
        let q = ListQuery {
            type_id: t,
            namespace: Some("default"),
            at: None,
            after: None,
            limit: 3,
            filter: all(),
            filtered: false,
        };
        let p = s.list(&q).unwrap();
        assert_eq!(names(&p), ["l0", "l1", "l2"]);
        assert_eq!(p.remaining, Some(7));
        let p2 = s
            .list(&ListQuery {
                after: p.last_key.clone(),
                ..q
            })
            .unwrap();
        assert_eq!(names(&p2), ["l3", "l4", "l5"]);
        assert_eq!(p2.remaining, Some(4));
        let even = |o: &Stored| o.labels.get("even").is_some_and(|v| v == "true");
        let f = ListQuery {
            type_id: t,
            namespace: Some("default"),
            at: None,
            after: None,
            limit: 2,
            filter: &even,
            filtered: true,
        };
        let p3 = s.list(&f).unwrap();
        assert_eq!(names(&p3), ["l0", "l2"]);
        assert_eq!(p3.remaining, None);
        assert!(p3.last_key.is_some());
        let p4 = s
            .list(&ListQuery {
                after: p3.last_key.clone(),
                limit: 0,
                ..f
            })
            .unwrap();
        assert_eq!(names(&p4), ["l4", "l6", "l8"]);
        assert!(p4.last_key.is_none());
    }

    #[test]
    fn history_is_bounded_and_compaction_is_reported() {
        let s = ObjectStore::new(3);
        let t = id_of("coordination.k8s.io", "leases");
        for i in 0..10 {
            s.transact(|x| x.put(t, "default", "a", mk_lease("a", &i.to_string()), idx));
        }
        let rv = s.rv();
        assert!(s.events_after(rv - 3, 10).is_ok());
        assert_eq!(s.events_after(rv - 5, 10).unwrap_err().compacted, rv - 3);
        let q = ListQuery {
            type_id: t,
            namespace: None,
            at: Some(2),
            after: None,
            limit: 0,
            filter: all(),
            filtered: false,
        };
        assert!(s.list(&q).is_err());
    }

    #[test]
    fn events_after_returns_changes_in_order() {
        let s = ObjectStore::new(100);
        let t = id_of("coordination.k8s.io", "leases");
        let start = s.rv();
        s.transact(|x| x.put(t, "default", "a", mk_lease("a", "1"), idx));
        s.transact(|x| x.put(t, "default", "a", mk_lease("a", "2"), idx));
        s.transact(|x| x.delete(t, "default", "a", mk_lease("a", "2"), idx));
        let ev = s.events_after(start, 10).unwrap();
        let kinds: Vec<_> = ev.iter().map(|e| e.kind).collect();
        assert_eq!(
            kinds,
            [EventKind::Added, EventKind::Modified, EventKind::Deleted]
        );
        assert!(ev.windows(2).all(|w| w[0].rv < w[1].rv));
    }
}
