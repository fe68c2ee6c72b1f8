//! Several members in one process sharing one watch of their cluster's target
//! Leases ([`SharedLeases`]).
//!
//! On its own, a member holds two label-selected watches: the target Leases desired for it
//! and those it holds. The kube-apiserver's watch cache hands every event of a namespace to
//! every watcher of that namespace, and each watcher evaluates its own selector
//! (`k8s.io/apiserver/pkg/storage/cacher`, `dispatchEvent`), so 1,000 members are 2,000
//! watchers, each fed every target Lease write of a placement — the API server closes them for
//! lagging (docs/benchmarks.md, 50,000 targets × 1,000 members). Members that share a process
//! can share one watch instead: the process then is one watcher, and each member is handed
//! exactly what its own two watches would have delivered — the Leases whose desired-owner label
//! names it (source 0) and those whose holder label names it (source 1), a `Delete` when a Lease
//! stops matching (as a selector watch sends one), and its own initial list when it subscribes
//! or the shared watch lists again. Both sources come from one watch, so a member sees them in
//! the order the API server wrote them.
//!
//! The feed is a task its owner runs ([`SharedLeases::run`]) for as long as any member uses it:
//! when it stops, every subscribed member's watch ends (and the member's `run` returns an
//! error), as when its own watch ends.

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};

use futures::StreamExt as _;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};
use tokio::sync::mpsc;

use crate::protocol::{self, names};

/// What a member's Lease watch delivers: the source bit's index (0: desired for the member,
/// 1: held by it) and an event or a watch error.
pub(super) type WatchItem = (u8, Result<Event<Lease>, String>);

/// One watch of a cluster's target Leases, shared by the members of this process (see the
/// module header). Cloning shares it.
#[derive(Clone)]
pub struct SharedLeases {
    api: Api<Lease>,
    cluster: String,
    namespace: String,
    state: Arc<Mutex<State>>,
}

impl std::fmt::Debug for SharedLeases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedLeases")
            .field("cluster", &self.cluster)
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl SharedLeases {
    /// A feed of the target Leases of `cluster` in `namespace` (where the cluster's target
    /// Leases are: the members' [`super::AgentConfig::namespace`]). Nothing is watched until
    /// [`Self::run`].
    pub fn new(client: kube::Client, namespace: &str, cluster: &str) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            cluster: cluster.to_owned(),
            namespace: namespace.to_owned(),
            state: Arc::default(),
        }
    }

    /// The cluster whose target Leases this feed watches.
    pub fn cluster(&self) -> &str {
        &self.cluster
    }

    /// The namespace it watches.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// Watches until `shutdown`, handing each event to the members it concerns. Run it for as
    /// long as any member subscribed to it runs, shut down or not: a member moving its targets
    /// away before it exits still needs its watch. Returning ends every member's watch.
    pub async fn run(&self, shutdown: impl Future<Output = ()>) {
        // Target Leases, and the hand-over plans the control plane writes for stopping members
        // (`protocol::plan`), which carry their member as desired owner.
        let selector = format!(
            "{}={},{} in ({},{})",
            protocol::LABEL_CLUSTER,
            self.cluster,
            protocol::LABEL_ROLE,
            protocol::ROLE_TARGET,
            protocol::plan::ROLE_PLAN,
        );
        let stream = watcher::watcher(
            self.api.clone(),
            watcher::Config::default().labels(&selector),
        )
        .default_backoff();
        tokio::pin!(stream, shutdown);
        loop {
            tokio::select! {
                ev = stream.next() => match ev {
                    Some(Ok(ev)) => self.lock().on_event(ev),
                    Some(Err(error)) => {
                        tracing::warn!(%error, cluster = %self.cluster, "shared lease watch failed; retrying");
                        self.lock().broadcast(&error.to_string());
                    }
                    None => break,
                },
                () = &mut shutdown => break,
            }
        }
        // Every member's watch ends with it.
        self.lock().subscribers.clear();
    }

    /// A member's view: what its two label-selected watches would deliver. When the feed has
    /// listed, the view starts with the member's own initial list.
    pub(super) fn subscribe(&self, identity: &str) -> mpsc::UnboundedReceiver<WatchItem> {
        let (tx, rx) = mpsc::unbounded_channel();
        let me = names::identity_label(identity);
        let mut state = self.lock();
        if state.listed {
            for source in [DESIRED, HOLDER] {
                let names = state.index[usize::from(source)].get(&me);
                let leases = names
                    .into_iter()
                    .flatten()
                    .filter_map(|n| state.leases.get(n));
                let _ = tx.send((source, Ok(Event::Init)));
                for lease in leases {
                    let _ = tx.send((source, Ok(Event::InitApply(lease.clone()))));
                }
                let _ = tx.send((source, Ok(Event::InitDone)));
            }
        }
        state.subscribers.entry(me).or_default().push(tx);
        rx
    }

    /// How many members read this feed now (those that stopped are not counted).
    pub fn members(&self) -> usize {
        let mut state = self.lock();
        state.prune();
        state.subscribers.values().map(Vec::len).sum()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is consistent after every statement that can panic; a panic elsewhere
        // does not make it unusable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Source 0: the Lease's desired owner names the member.
const DESIRED: u8 = 0;
/// Source 1: its holder names the member.
const HOLDER: u8 = 1;
/// The label each source selects on.
const LABELS: [&str; 2] = [protocol::LABEL_DESIRED_OWNER, protocol::LABEL_HOLDER];

#[derive(Default)]
struct State {
    /// The newest copy of each target Lease, by name, once listed.
    leases: HashMap<String, Lease>,
    /// Per source, the Lease names by label value (identity label).
    index: [HashMap<String, BTreeSet<String>>; 2],
    /// A (re)list in progress.
    listing: Vec<Lease>,
    /// The watch has listed at least once.
    listed: bool,
    /// Members' views, by identity label.
    subscribers: HashMap<String, Vec<mpsc::UnboundedSender<WatchItem>>>,
}

fn label(lease: &Lease, source: u8) -> Option<&str> {
    lease
        .metadata
        .labels
        .as_ref()?
        .get(LABELS[usize::from(source)])
        .map(String::as_str)
}

impl State {
    fn on_event(&mut self, ev: Event<Lease>) {
        match ev {
            Event::Init => self.listing.clear(),
            Event::InitApply(mut lease) => {
                lease.metadata.managed_fields = None;
                self.listing.push(lease);
            }
            Event::InitDone => self.relisted(),
            Event::Apply(mut lease) => {
                lease.metadata.managed_fields = None;
                let Some(name) = lease.metadata.name.clone() else {
                    return;
                };
                let old = self.leases.insert(name.clone(), lease.clone());
                for source in [DESIRED, HOLDER] {
                    let before = old.as_ref().and_then(|o| label(o, source));
                    let now = label(&lease, source);
                    if let Some(b) = before.filter(|b| Some(*b) != now) {
                        self.unindex(source, b, &name);
                        self.send(b, source, Event::Delete(lease.clone()));
                    }
                    if let Some(n) = now {
                        let n = n.to_owned();
                        self.index[usize::from(source)]
                            .entry(n.clone())
                            .or_default()
                            .insert(name.clone());
                        self.send(&n, source, Event::Apply(lease.clone()));
                    }
                }
            }
            Event::Delete(lease) => {
                let Some(name) = lease.metadata.name.clone() else {
                    return;
                };
                let old = self.leases.remove(&name).unwrap_or(lease);
                for source in [DESIRED, HOLDER] {
                    if let Some(b) = label(&old, source) {
                        let b = b.to_owned();
                        self.unindex(source, &b, &name);
                        self.send(&b, source, Event::Delete(old.clone()));
                    }
                }
            }
        }
    }

    /// A (re)list is complete: it replaces what was known, and every member gets its part of
    /// it as an initial list of each source.
    fn relisted(&mut self) {
        let listing = std::mem::take(&mut self.listing);
        self.leases.clear();
        self.index = Default::default();
        for sender in self.subscribers.values().flatten() {
            let _ = sender.send((DESIRED, Ok(Event::Init)));
            let _ = sender.send((HOLDER, Ok(Event::Init)));
        }
        for lease in listing {
            let Some(name) = lease.metadata.name.clone() else {
                continue;
            };
            for source in [DESIRED, HOLDER] {
                if let Some(v) = label(&lease, source).map(str::to_owned) {
                    self.index[usize::from(source)]
                        .entry(v.clone())
                        .or_default()
                        .insert(name.clone());
                    self.send(&v, source, Event::InitApply(lease.clone()));
                }
            }
            self.leases.insert(name, lease);
        }
        for sender in self.subscribers.values().flatten() {
            let _ = sender.send((DESIRED, Ok(Event::InitDone)));
            let _ = sender.send((HOLDER, Ok(Event::InitDone)));
        }
        self.listed = true;
        self.prune();
    }

    fn unindex(&mut self, source: u8, value: &str, name: &str) {
        let index = &mut self.index[usize::from(source)];
        if let Some(names) = index.get_mut(value) {
            names.remove(name);
            if names.is_empty() {
                index.remove(value);
            }
        }
    }

    /// Hands `ev` to the members named `who` (an identity label).
    fn send(&mut self, who: &str, source: u8, ev: Event<Lease>) {
        if let Some(senders) = self.subscribers.get_mut(who) {
            senders.retain(|s| s.send((source, Ok(ev.clone()))).is_ok());
            if senders.is_empty() {
                self.subscribers.remove(who);
            }
        }
    }

    /// A watch error, told to every member (as its own watches would have failed too).
    fn broadcast(&mut self, error: &str) {
        for sender in self.subscribers.values().flatten() {
            let _ = sender.send((DESIRED, Err(error.to_owned())));
        }
        self.prune();
    }

    /// Forgets members that stopped.
    fn prune(&mut self) {
        self.subscribers.retain(|_, senders| {
            senders.retain(|s| !s.is_closed());
            !senders.is_empty()
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use std::collections::BTreeMap;

    fn lease(name: &str, desired: Option<&str>, holder: Option<&str>, rv: u32) -> Lease {
        let mut labels = BTreeMap::new();
        if let Some(d) = desired {
            labels.insert(protocol::LABEL_DESIRED_OWNER.to_owned(), d.to_owned());
        }
        if let Some(h) = holder {
            labels.insert(protocol::LABEL_HOLDER.to_owned(), h.to_owned());
        }
        Lease {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                labels: Some(labels),
                resource_version: Some(rv.to_string()),
                ..Default::default()
            },
            spec: None,
        }
    }

    /// What a view received, as `source kind name@rv` lines.
    fn drain(rx: &mut mpsc::UnboundedReceiver<WatchItem>) -> Vec<String> {
        let mut out = Vec::new();
        while let Ok((source, ev)) = rx.try_recv() {
            let name = |l: &Lease| {
                format!(
                    "{}@{}",
                    l.metadata.name.as_deref().unwrap_or("?"),
                    l.metadata.resource_version.as_deref().unwrap_or("?")
                )
            };
            out.push(match ev {
                Ok(Event::Init) => format!("{source} init"),
                Ok(Event::InitApply(l)) => format!("{source} list {}", name(&l)),
                Ok(Event::InitDone) => format!("{source} listed"),
                Ok(Event::Apply(l)) => format!("{source} apply {}", name(&l)),
                Ok(Event::Delete(l)) => format!("{source} delete {}", name(&l)),
                Err(e) => format!("{source} error {e}"),
            });
        }
        out
    }

    fn feed() -> (SharedLeases, tokio::runtime::Runtime) {
        // kube::Client needs a runtime to exist; it is never used here.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let client = rt.block_on(async {
            let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
            kube::Client::try_from(config).unwrap()
        });
        (SharedLeases::new(client, "ns", "c"), rt)
    }

    /// Each member sees what its two selector watches would: its initial list per source, a
    /// Lease that starts to match as an apply, one that stops matching as a delete on that
    /// source only, and nothing about other members' Leases.
    #[test]
    fn a_member_sees_what_its_two_selector_watches_would() {
        let (feed, _rt) = feed();
        let mut early = feed.subscribe("a");
        {
            let mut s = feed.lock();
            s.on_event(Event::Init);
            s.on_event(Event::InitApply(lease("t1", Some("a"), Some("a"), 1)));
            s.on_event(Event::InitApply(lease("t2", Some("b"), None, 2)));
            s.on_event(Event::InitApply(lease("t3", Some("b"), Some("a"), 3)));
            s.on_event(Event::InitDone);
        }
        assert_eq!(
            drain(&mut early),
            [
                "0 init",
                "1 init",
                "0 list t1@1",
                "1 list t1@1",
                "1 list t3@3",
                "0 listed",
                "1 listed"
            ]
        );
        // A member subscribing after the list gets its own initial list, in the same shape.
        let mut late = feed.subscribe("b");
        assert_eq!(
            drain(&mut late),
            [
                "0 init",
                "0 list t2@2",
                "0 list t3@3",
                "0 listed",
                "1 init",
                "1 listed"
            ]
        );
        {
            let mut s = feed.lock();
            // t3 handed from a to b: a's holder view drops it, b's gets it.
            s.on_event(Event::Apply(lease("t3", Some("b"), Some("b"), 4)));
            // t1 desired for b now, still held by a.
            s.on_event(Event::Apply(lease("t1", Some("b"), Some("a"), 5)));
            // t2 deleted.
            s.on_event(Event::Delete(lease("t2", Some("b"), None, 6)));
        }
        assert_eq!(
            drain(&mut early),
            ["1 delete t3@4", "0 delete t1@5", "1 apply t1@5"]
        );
        assert_eq!(
            drain(&mut late),
            [
                "0 apply t3@4",
                "1 apply t3@4",
                "0 apply t1@5",
                "0 delete t2@2"
            ]
        );
        // A relist replaces everything; a member that stopped is forgotten.
        drop(late);
        {
            let mut s = feed.lock();
            s.on_event(Event::Init);
            s.on_event(Event::InitApply(lease("t1", Some("a"), Some("a"), 7)));
            s.on_event(Event::InitDone);
            assert!(!s.subscribers.contains_key("b"));
            assert_eq!(s.leases.len(), 1);
            assert!(!s.index[1].contains_key("b"));
        }
        assert_eq!(
            drain(&mut early),
            [
                "0 init",
                "1 init",
                "0 list t1@7",
                "1 list t1@7",
                "0 listed",
                "1 listed"
            ]
        );
    }
}
