//! The overlap hand-off's state machine (docs/protocol.md, "Overlap hand-off") with in-process
//! agents whose app can start ahead of a hand-over: a fake app ([`App`]) that says it prepares
//! (`Hooks::prepares`, and `prepares` in the app report on its member Lease, so the control
//! plane asks for overlap), records every hook call with its generation and time, and proves a
//! start only when the test flips its switch. Each test moves a target from c-0 (A) to c-1 (B)
//! and checks the calls, the target Lease as it changed (a watch records every version) and
//! history:
//!
//! - proven: B is asked to prepare at the generation the hand-over gives, A keeps working
//!   until B's word, then stops, hands over, and B works at that generation; history says
//!   `proven` with `overlap_ms`;
//! - never proven: A stops first once `overlap_wait` passed; history says `unproven`;
//! - called off (B's pod deleted, B's agent stopping) and B cut off from the API server: B's
//!   app is told to undo its start and never works on the target;
//! - `handoff: exclusive`: nobody is asked to prepare.
//!
//! Two more measure edges: an app that answers "not yet" at once (asked in a busy loop today:
//! that test fails), and a next owner whose authority lapses only briefly (the move then waits
//! out the whole bound and ends unproven).
//!
//! The invariant checker counts work from `on_acquire` to the end of `on_release` (the hold),
//! not a prepared start: two holds of one target never overlap here either.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::{FutureExt as _, StreamExt as _};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::runtime::watcher;
use leasehold::agent::{Agent, AgentConfig, Assignment, Hooks};
use leasehold::engine::PlanRequest;
use leasehold::model::{Cause, OperationState, Overlap};
use leasehold::protocol::{self, AppWork};
use leasehold::store::{HistoryEntry, HistoryKind, Operation};
use tokio::sync::oneshot;

/// A link to the API server a test can cut ([`common::Link`]).
type Link = tokio::sync::watch::Sender<common::Link>;

use common::cluster::*;
use common::eventually;
use common::invariant::InvariantChecker;

const A: &str = "c-0";
const B: &str = "c-1";
/// How long the fake app looks for proof of a start before it answers "not yet" (a real app
/// polls its own state; the agent asks again at once).
const NOT_YET: Duration = Duration::from_millis(100);

/// The cluster: `targets` targets, nothing moved on a join, and `policy` (`, key: value`).
fn yaml(targets: usize, policy: &str) -> String {
    let list: Vec<String> = (0..targets).map(|i| format!("t-{i:03}")).collect();
    format!(
        "control_plane: {{namespace: {NS}, lease_duration: 2s}}
clusters:
- name: {CLUSTER}
  namespace: {NS}
  selector: {{app: c}}
  headless_service: c
  targets: {{inline: [{}]}}
  policy: {{lease_duration: {LEASE_S}s, join_settle: 1s, move_timeout: 4s, on_join: off{policy}}}
",
        list.join(", ")
    )
}

/// What a hook call was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum What {
    /// `on_prepare` called.
    Prepare,
    /// ... answered `Ok`: the start is proven.
    Proven,
    /// ... answered `Err`: not yet.
    NotYet,
    /// `on_unprepare` called.
    Unprepare,
    /// `on_acquire` called.
    Acquire,
    /// `on_release` called.
    Release,
    /// ... returned: the work stopped.
    Released,
}

/// One recorded hook call (or its answer).
#[derive(Debug, Clone)]
struct Call {
    at: Instant,
    unix_ms: i64,
    member: String,
    what: What,
    target: String,
    generation: u64,
}

/// Every member's calls, in order.
#[derive(Clone, Default)]
struct Calls(Arc<Mutex<Vec<Call>>>);

impl Calls {
    fn push(&self, member: &str, what: What, work: &Assignment) {
        self.0.lock().unwrap().push(Call {
            at: Instant::now(),
            unix_ms: jiff::Timestamp::now().as_millisecond(),
            member: member.to_owned(),
            what,
            target: work.target.clone(),
            generation: work.generation,
        });
    }

    /// `member`'s calls of `what` on `target`.
    fn of(&self, member: &str, what: What, target: &str) -> Vec<Call> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|c| c.member == member && c.what == what && c.target == target)
            .cloned()
            .collect()
    }

    /// `member`'s calls of `what`, any target.
    fn all(&self, member: &str, what: What) -> Vec<Call> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|c| c.member == member && c.what == what)
            .cloned()
            .collect()
    }

    fn first(&self, member: &str, what: What, target: &str) -> Option<Call> {
        self.of(member, what, target).into_iter().next()
    }

    /// Every call on `target`, for a failure message.
    fn story(&self, target: &str) -> String {
        let calls = self.0.lock().unwrap();
        let start = calls.first().map(|c| c.at);
        calls
            .iter()
            .filter(|c| c.target == target)
            .map(|c| {
                format!(
                    "  +{:>6} ms {} {:?} gen {}",
                    start.map_or(0, |s| c.at.duration_since(s).as_millis()),
                    c.member,
                    c.what,
                    c.generation
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// The fake app's state.
#[derive(Default)]
struct AppState {
    /// Every start is proven.
    proven_all: bool,
    /// Targets whose start is proven.
    proven: BTreeSet<String>,
    /// Targets started ahead of a hand-over, at the generation it will give.
    prepared: BTreeMap<String, u64>,
    /// Targets held and worked on, at their generation.
    working: BTreeMap<String, u64>,
    /// How long it looks for proof before answering "not yet" (`None`: [`NOT_YET`]).
    not_yet: Option<Duration>,
}

/// The app beside one member: it can start ahead of a hand-over and prove it, when the test
/// says so. Its holds are recorded into the invariant checker as the harness's own app does.
struct App {
    member: String,
    calls: Calls,
    checker: InvariantChecker,
    state: Mutex<AppState>,
}

impl App {
    fn new(member: &str, calls: &Calls, checker: &InvariantChecker) -> Arc<App> {
        Arc::new(App {
            member: member.to_owned(),
            calls: calls.clone(),
            checker: checker.clone(),
            state: Mutex::new(AppState::default()),
        })
    }

    fn state(&self) -> MutexGuard<'_, AppState> {
        self.state.lock().unwrap()
    }

    /// From now on every start is proven.
    fn prove_all(&self) {
        self.state().proven_all = true;
    }

    /// From now on a prepare answers "not yet" after `wait` (zero: at once).
    fn not_yet_after(&self, wait: Duration) {
        self.state().not_yet = Some(wait);
    }

    fn is_proven(&self, target: &str) -> bool {
        let s = self.state();
        s.proven_all || s.proven.contains(target)
    }

    /// Targets started ahead of a hand-over and not undone (nor taken over by a hold).
    fn prepared(&self) -> BTreeMap<String, u64> {
        self.state().prepared.clone()
    }

    fn record(&self, what: What, work: &Assignment) {
        self.calls.push(&self.member, what, work);
    }
}

impl Hooks for App {
    fn on_acquire(&self, work: &Assignment) -> BoxFuture<'_, Result<(), String>> {
        self.record(What::Acquire, work);
        self.checker
            .acquired_at(&work.target, &self.member, work.generation);
        {
            let mut s = self.state();
            s.prepared.remove(&work.target);
            s.working.insert(work.target.clone(), work.generation);
        }
        async move {
            tokio::time::sleep(HOOK_WORK).await;
            Ok(())
        }
        .boxed()
    }

    fn on_release(&self, work: &Assignment) -> BoxFuture<'_, Result<(), String>> {
        self.record(What::Release, work);
        let work = work.clone();
        async move {
            tokio::time::sleep(HOOK_WORK).await;
            let mine = self.state().working.get(&work.target) == Some(&work.generation);
            if mine {
                self.state().working.remove(&work.target);
            }
            self.checker.released(&work.target, &self.member);
            self.record(What::Released, &work);
            Ok(())
        }
        .boxed()
    }

    fn prepares(&self) -> bool {
        true
    }

    fn on_prepare(&self, work: &Assignment) -> BoxFuture<'_, Result<(), String>> {
        self.record(What::Prepare, work);
        self.state()
            .prepared
            .insert(work.target.clone(), work.generation);
        let work = work.clone();
        let wait = self.state().not_yet.unwrap_or(NOT_YET);
        async move {
            if !self.is_proven(&work.target) && !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
            if self.is_proven(&work.target) {
                self.record(What::Proven, &work);
                Ok(())
            } else {
                self.record(What::NotYet, &work);
                Err("not proven yet".to_owned())
            }
        }
        .boxed()
    }

    fn on_unprepare(&self, work: &Assignment) -> BoxFuture<'_, Result<(), String>> {
        self.record(What::Unprepare, work);
        let mut s = self.state();
        if s.prepared.get(&work.target) == Some(&work.generation) {
            s.prepared.remove(&work.target);
        }
        futures::future::ready(Ok(())).boxed()
    }

    fn work(&self) -> Option<AppWork> {
        let working: Vec<String> = self.state().working.keys().cloned().collect();
        Some(AppWork {
            prepares: true,
            ..AppWork::of(
                "fake",
                true,
                working.iter().map(|t| (t.as_str(), true, None)),
            )
        })
    }
}

/// Starts `name`'s agent in this process with `app` for its hooks, its API requests going
/// through `client` (the members' account, or a link a test can cut), as the harness's own
/// in-process members are started.
fn start_agent(h: &mut Harness, name: &str, app: Arc<App>, client: kube::Client) {
    let mut cfg = AgentConfig::new(CLUSTER, &h.ns, name);
    cfg.member_namespace = h.member_ns.clone();
    cfg.lease_duration = Duration::from_secs(LEASE_S);
    cfg.hook_timeout = HOOK_TIMEOUT;
    cfg.drain_timeout = h.drain_timeout;
    let agent = Agent::new(cfg, app);
    let (stop, rx) = oneshot::channel();
    let task = tokio::spawn(async move {
        agent
            .run(client, async {
                let _ = rx.await;
            })
            .await
    });
    h.members.insert(
        name.into(),
        Member {
            task,
            stop: Some(stop),
        },
    );
}

/// Every version of the cluster's target Leases as a watch delivered it.
#[derive(Clone, Default)]
struct Versions(Arc<Mutex<Vec<(Instant, Lease)>>>);

impl Versions {
    /// Watches the target Leases of `h`'s cluster until the returned task is aborted.
    fn watch(h: &Harness) -> (Versions, tokio::task::JoinHandle<()>) {
        let v = Versions::default();
        let api: Api<Lease> = Api::namespaced(h.t.client.clone(), &h.ns);
        let selector = format!(
            "{}={CLUSTER},{}={}",
            protocol::LABEL_CLUSTER,
            protocol::LABEL_ROLE,
            protocol::ROLE_TARGET
        );
        let into = v.clone();
        let task = tokio::spawn(async move {
            let mut events =
                watcher::watcher(api, watcher::Config::default().labels(&selector)).boxed();
            while let Some(ev) = events.next().await {
                if let Ok(watcher::Event::Apply(l) | watcher::Event::InitApply(l)) = ev {
                    into.0.lock().unwrap().push((Instant::now(), l));
                }
            }
        });
        (v, task)
    }

    /// The versions of `key`'s Lease, in order.
    fn of(&self, key: &str) -> Vec<(Instant, Lease)> {
        let name = protocol::names::target_lease("leasehold", CLUSTER, key);
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, l)| l.metadata.name.as_deref() == Some(&name))
            .cloned()
            .collect()
    }

    /// `key`'s Lease as it changed, for a message.
    fn story(&self, key: &str) -> String {
        self.of(key)
            .iter()
            .map(|(_, l)| {
                format!(
                    "  holder {:?} gen {} desired {:?} term {:?} overlap {:?} ready {:?} handed {:?}",
                    holder(l),
                    transitions(l),
                    ann(l, protocol::ANN_DESIRED_OWNER),
                    ann(l, protocol::ANN_DESIRED_TERM),
                    ann(l, protocol::ANN_OVERLAP_MS),
                    ann(l, protocol::ANN_READY_TERM),
                    ann(l, protocol::ANN_HANDED_TERM),
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

fn ann<'a>(l: &'a Lease, key: &str) -> Option<&'a str> {
    l.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

fn holder(l: &Lease) -> Option<&str> {
    l.spec.as_ref().and_then(|s| s.holder_identity.as_deref())
}

fn transitions(l: &Lease) -> u64 {
    let t = l.spec.as_ref().and_then(|s| s.lease_transitions);
    u64::try_from(t.unwrap_or(0)).unwrap_or(0)
}

fn acquired_ms(l: &Lease) -> Option<i64> {
    l.spec
        .as_ref()
        .and_then(|s| s.acquire_time.as_ref())
        .map(|t| t.0.as_millisecond())
}

async fn target_lease(h: &Harness, key: &str) -> Lease {
    let api: Api<Lease> = Api::namespaced(h.t.client.clone(), &h.ns);
    api.get(&protocol::names::target_lease("leasehold", CLUSTER, key))
        .await
        .unwrap()
}

/// `member`'s term as its member Lease says now.
async fn member_term(h: &Harness, member: &str) -> String {
    let api: Api<Lease> = Api::namespaced(h.t.client.clone(), &h.member_ns);
    let l = api
        .get(&protocol::names::member_lease("leasehold", CLUSTER, member))
        .await
        .unwrap();
    protocol::member_term(&l)
}

fn keys(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("t-{i:03}")).collect()
}

/// A holds every one of `targets` (placed while it was the only member); then B joins with
/// its own app, and the control plane knows that B's app prepares. `link_b`: B reaches the API
/// server through a link the test can cut (returned), else as the harness's members do.
async fn a_holds_all_then_b_joins(
    targets: usize,
    policy: &str,
    link_b: bool,
) -> (Harness, Calls, Arc<App>, Arc<App>, Option<Link>) {
    let mut h = Harness::new(&yaml(targets, policy)).await;
    let calls = Calls::default();
    let a = App::new(A, &calls, &h.checker);
    let b = App::new(B, &calls, &h.checker);
    h.add_pod(A).await;
    let client = h.accounts.member.clone();
    start_agent(&mut h, A, a.clone(), client);
    h.wait_pods_ready(1).await;
    h.wait_registered(&[A]).await;
    h.start_engine("cp-a").await;
    h.wait_balanced(&[(A, targets)], Duration::from_secs(20))
        .await;
    h.add_pod(B).await;
    let (client, link) = if link_b {
        let (client, link) = h.linked_member_client().await;
        (client, Some(link))
    } else {
        (h.accounts.member.clone(), None)
    };
    start_agent(&mut h, B, b.clone(), client);
    h.wait_ready(B).await;
    eventually(Duration::from_secs(10), || async {
        h.engine()
            .shared()
            .read(|ix| ix.prepares(CLUSTER, B))
            .then_some(())
    })
    .await
    .expect("the control plane never saw that c-1's app prepares");
    (h, calls, a, b, link)
}

async fn remove(h: &Harness, instance: &str) -> Operation {
    eventually(Duration::from_secs(15), || async {
        h.engine()
            .start_remove(CLUSTER, instance, "test", None)
            .await
            .ok()
    })
    .await
    .expect("remove-instance never started")
}

async fn rebalance(h: &Harness) -> Operation {
    eventually(Duration::from_secs(15), || async {
        h.engine()
            .start_rebalance(CLUSTER, &PlanRequest::default(), "test", "test", false)
            .await
            .ok()
    })
    .await
    .expect("the rebalance never started")
}

/// Waits until operation `id` has ended; returns it.
async fn ended(h: &Harness, id: &str, within: Duration) -> Operation {
    eventually(within, || async {
        let op = h.engine().operation(id).await.ok()?;
        matches!(
            op.state,
            OperationState::Succeeded | OperationState::Failed | OperationState::Cancelled
        )
        .then_some(op)
    })
    .await
    .unwrap_or_else(|| panic!("operation {id} never ended"))
}

/// The history row of the hand-over of `key` to `to` (waits for the recorder).
async fn handed_row(h: &Harness, key: &str, to: &str) -> HistoryEntry {
    eventually(Duration::from_secs(10), || async {
        h.history(HistoryKind::Ownership)
            .await
            .into_iter()
            .find(|r| r.target.as_deref() == Some(key) && r.to.as_deref() == Some(to))
    })
    .await
    .unwrap_or_else(|| panic!("no history row of {key} to {to}"))
}

/// Waits until each of `keys` is held by `member` and worked on by it alone.
async fn worked_by(h: &Harness, keys: &[String], member: &str, within: Duration) {
    let done = eventually(within, || async {
        let m = h.model();
        keys.iter()
            .all(|k| {
                m.target(k).and_then(|t| t.owner.as_deref()) == Some(member)
                    && h.checker.workers(k) == [member]
            })
            .then_some(())
    })
    .await;
    assert!(
        done.is_some(),
        "not all of {keys:?} worked on by {member} alone: {}",
        h.diagnosis(0)
    );
}

/// Waits until B has answered "not yet" `n` times for each of `keys`.
async fn b_not_yet(calls: &Calls, keys: &[String], n: usize) {
    let asked = eventually(Duration::from_secs(15), || async {
        keys.iter()
            .all(|k| calls.of(B, What::NotYet, k).len() >= n)
            .then_some(())
    })
    .await;
    assert!(
        asked.is_some(),
        "c-1 was not asked to prepare: {}",
        keys.iter()
            .map(|k| calls.story(k))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// 1. A remove-instance move A → B in an overlap hand-off, proven: B is asked to prepare at
/// the generation the hand-over gives (`leaseTransitions` + 1), again and again while its app
/// answers "not yet", and A keeps working all along; once B's app proves its start, B's word
/// (`ready-term`) goes on the Lease while A still holds it, A stops, hands over, and B works
/// at that same generation. History records the move as `overlap: proven` with its
/// `overlap_ms` (the hand-over's `acquireTime` minus `ready-at`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_proven_start_lets_the_holder_stop_and_hand_over() {
    let n = 3;
    let (h, calls, _a, b, _) = a_holds_all_then_b_joins(n, ", overlap_wait: 10s", false).await;
    let keys = keys(n);
    let (versions, watch) = Versions::watch(&h);
    let mut held_at = BTreeMap::new();
    for k in &keys {
        let l = target_lease(&h, k).await;
        assert_eq!(holder(&l), Some(A));
        held_at.insert(k.clone(), transitions(&l));
    }
    let b_term = member_term(&h, B).await;
    let op = remove(&h, A).await;
    let moving = Instant::now();
    // B is asked, and asked again; its app says "not yet" three times a target meanwhile.
    b_not_yet(&calls, &keys, 3).await;
    let unproven_for = moving.elapsed();
    for k in &keys {
        let l = target_lease(&h, k).await;
        assert_eq!(holder(&l), Some(A), "{k}: handed over before any proof");
        assert_eq!(ann(&l, protocol::ANN_DESIRED_OWNER), Some(B));
        assert_eq!(ann(&l, protocol::ANN_DESIRED_TERM), Some(b_term.as_str()));
        assert_eq!(ann(&l, protocol::ANN_OVERLAP_MS), Some("10000"), "{k}");
        assert_eq!(
            ann(&l, protocol::ANN_READY_TERM),
            None,
            "{k}: a word before any proof"
        );
        assert!(
            calls.of(A, What::Release, k).is_empty(),
            "{k}: A stopped before B's proof:\n{}",
            calls.story(k)
        );
        assert_eq!(h.checker.workers(k), [A], "{k}");
        for c in calls.of(B, What::Prepare, k) {
            assert_eq!(c.generation, held_at[k] + 1, "{k}: prepare's generation");
        }
    }
    b.prove_all();
    let done = ended(&h, &op.id, Duration::from_secs(20)).await;
    assert_eq!(done.state, OperationState::Succeeded, "{done:?}");
    worked_by(&h, &keys, B, Duration::from_secs(10)).await;
    for k in &keys {
        let story = || format!("calls:\n{}\nLease:\n{}", calls.story(k), versions.story(k));
        let gen_ = held_at[k] + 1;
        let prepares = calls.of(B, What::Prepare, k);
        let not_yet = calls.of(B, What::NotYet, k).len();
        let proven = calls.first(B, What::Proven, k).expect("B's start proven");
        let release = calls.first(A, What::Release, k).expect("A stopped");
        let released = calls
            .first(A, What::Released, k)
            .expect("A's stop returned");
        let acquire = calls.first(B, What::Acquire, k).expect("B works on it");
        let l = target_lease(&h, k).await;
        // The Lease: handed to B at the generation B prepared at, with B's word on it.
        assert_eq!(holder(&l), Some(B), "{}", story());
        assert_eq!(transitions(&l), gen_, "{}", story());
        assert_eq!(ann(&l, protocol::ANN_HANDED_TERM), Some(b_term.as_str()));
        assert_eq!(ann(&l, protocol::ANN_READY_TERM), Some(b_term.as_str()));
        let ready_at: i64 = ann(&l, protocol::ANN_READY_AT).unwrap().parse().unwrap();
        let acquired = acquired_ms(&l).unwrap();
        // Every call at the hand-over's generation.
        assert!(prepares.iter().all(|c| c.generation == gen_), "{}", story());
        assert_eq!(acquire.generation, gen_, "{}", story());
        assert_eq!(release.generation, held_at[k], "{}", story());
        // In order: B proven, B's word, A stops, A's stop returns, B's hold starts.
        assert!(proven.unix_ms <= ready_at, "word before proof: {}", story());
        assert!(
            ready_at <= release.unix_ms,
            "A stopped before B's word: {}",
            story()
        );
        assert!(released.at <= acquire.at, "{}", story());
        assert!(calls.of(B, What::Unprepare, k).is_empty(), "{}", story());
        assert_eq!(calls.of(B, What::Acquire, k).len(), 1, "{}", story());
        // The watch saw B's word on the Lease while A still held it.
        assert!(
            versions.of(k).iter().any(|(_, v)| holder(v) == Some(A)
                && ann(v, protocol::ANN_READY_TERM) == Some(b_term.as_str())),
            "B's word never seen on A's hold:\n{}",
            story()
        );
        // History: a proven overlap, as long as the Lease says.
        let row = handed_row(&h, k, B).await;
        assert_eq!(row.from.as_deref(), Some(A), "{row:?}");
        assert_eq!(row.cause, Some(Cause::Removal), "{row:?}");
        assert_eq!(row.overlap, Some(Overlap::Proven), "{row:?}\n{}", story());
        assert_eq!(row.overlap_ms, Some(acquired - ready_at), "{row:?}");
        eprintln!(
            "overlap proven {k}: gen {gen_}, {} prepare calls ({not_yet} not yet, held \
             unproven {:.1} s), proof → word {} ms, word → A's stop {} ms, A's stop {} ms, \
             A stopped → B's hold {} ms, history overlap_ms {:?}",
            prepares.len(),
            unproven_for.as_secs_f64(),
            ready_at - proven.unix_ms,
            release.unix_ms - ready_at,
            released.at.duration_since(release.at).as_millis(),
            acquire.at.duration_since(released.at).as_millis(),
            row.overlap_ms
        );
    }
    watch.abort();
    h.finish().await;
}

/// 2. B's app never proves its start (every prepare answers "not yet"): A stops first once the
/// bound (`overlap_wait`, 3 s here) has passed since it saw the move, and hands over; B works
/// at the hand-over's generation. History records `overlap: unproven`, no `overlap_ms`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_proof_the_holder_stops_first_once_the_bound_passed() {
    let n = 2;
    let bound = Duration::from_secs(3);
    let (h, calls, _a, b, _) = a_holds_all_then_b_joins(n, ", overlap_wait: 3s", false).await;
    let keys = keys(n);
    let (versions, watch) = Versions::watch(&h);
    let mut held_at = BTreeMap::new();
    for k in &keys {
        held_at.insert(k.clone(), transitions(&target_lease(&h, k).await));
    }
    let op = remove(&h, A).await;
    let done = ended(&h, &op.id, Duration::from_secs(20)).await;
    assert_eq!(done.state, OperationState::Succeeded, "{done:?}");
    worked_by(&h, &keys, B, Duration::from_secs(10)).await;
    for k in &keys {
        let story = || format!("calls:\n{}\nLease:\n{}", calls.story(k), versions.story(k));
        let gen_ = held_at[k] + 1;
        let first = calls.first(B, What::Prepare, k).expect("B was asked");
        let release = calls.first(A, What::Release, k).expect("A stopped");
        let released = calls
            .first(A, What::Released, k)
            .expect("A's stop returned");
        let acquire = calls.first(B, What::Acquire, k).expect("B works on it");
        let prepares = calls.of(B, What::Prepare, k).len();
        assert!(calls.of(B, What::Proven, k).is_empty(), "{}", story());
        assert!(!b.is_proven(k));
        // A waited about the bound (from when it saw the move; B was asked then too).
        let waited = release.at.duration_since(first.at);
        assert!(
            waited >= bound - Duration::from_millis(500)
                && waited <= bound + Duration::from_secs(3),
            "A stopped {waited:?} after B was first asked, bound {bound:?}: {}",
            story()
        );
        assert!(released.at <= acquire.at, "{}", story());
        assert_eq!(acquire.generation, gen_, "{}", story());
        assert!(calls.of(B, What::Unprepare, k).is_empty(), "{}", story());
        let l = target_lease(&h, k).await;
        assert_eq!(holder(&l), Some(B));
        assert_eq!(transitions(&l), gen_);
        assert_eq!(ann(&l, protocol::ANN_READY_TERM), None, "{}", story());
        let row = handed_row(&h, k, B).await;
        assert_eq!(row.overlap, Some(Overlap::Unproven), "{row:?}");
        assert_eq!(row.overlap_ms, None, "{row:?}");
        eprintln!(
            "overlap unproven {k}: A stopped {:.2} s after B was first asked (bound {bound:?}), \
             {prepares} prepare calls ({:.0}/s), A stopped → B's hold {} ms",
            waited.as_secs_f64(),
            prepares as f64 / waited.as_secs_f64(),
            acquire.at.duration_since(released.at).as_millis()
        );
    }
    watch.abort();
    h.finish().await;
}

/// 2b. An app that answers "not yet" at once (`Hooks::on_prepare` asks for nothing else: `Err`
/// "when not yet (asked again)"): how often is it asked while the holder waits out the bound?
/// A sane pace is a few calls a second per target. Fails today: the agent asks again as soon
/// as an answer comes back (`on_prepared` marks the Lease dirty, the next pass calls
/// `prepare` again), so the rate is bounded only by how fast the app answers — 11,000 to
/// 18,000 calls a second for one target here, for the whole bound (30 s by default).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_app_answering_not_yet_at_once_is_not_asked_in_a_busy_loop() {
    let bound = Duration::from_secs(3);
    let (h, calls, _a, b, _) = a_holds_all_then_b_joins(1, ", overlap_wait: 3s", false).await;
    b.not_yet_after(Duration::ZERO);
    let key = keys(1).remove(0);
    let op = remove(&h, A).await;
    let done = ended(&h, &op.id, Duration::from_secs(20)).await;
    assert_eq!(done.state, OperationState::Succeeded, "{done:?}");
    worked_by(&h, std::slice::from_ref(&key), B, Duration::from_secs(10)).await;
    let first = calls.first(B, What::Prepare, &key).expect("B was asked");
    let release = calls.first(A, What::Release, &key).expect("A stopped");
    let asked = calls.of(B, What::Prepare, &key).len();
    let waited = release.at.duration_since(first.at);
    let rate = asked as f64 / waited.as_secs_f64();
    eprintln!(
        "overlap, app answering not yet at once: {asked} prepare calls in {:.2} s ({rate:.0}/s) \
         for one target (bound {bound:?})",
        waited.as_secs_f64()
    );
    h.finish().await;
    assert!(
        rate <= 100.0,
        "asked to prepare {asked} times in {waited:?} ({rate:.0}/s): a busy loop"
    );
}

/// 4b. B loses its authority only briefly while preparing: cut off just past its renew
/// deadline, back before the control plane sees it lapse. Its app undoes its start (as in 4),
/// and B's next term is another term than the one the move names; the operation writes the
/// new term down as soon as B is live under it, and B is asked to prepare again. Checked: the
/// move still ends with B working on the target alone, never two holds at once, B asked again
/// after its undo. Measured (printed): how long A went on working (B's app here never proves,
/// so the bound, counted from the move written again) and B's generation.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_next_owner_that_lapses_briefly_still_gets_the_target() {
    let bound = Duration::from_secs(5);
    let (h, calls, _a, b, link) = a_holds_all_then_b_joins(2, ", overlap_wait: 5s", true).await;
    let link = link.unwrap();
    let (versions, watch) = Versions::watch(&h);
    let op = rebalance(&h).await;
    assert_eq!(op.moves.len(), 1, "{op:?}");
    let key = op.moves[0].target.clone();
    let one = std::slice::from_ref(&key);
    b_not_yet(&calls, one, 2).await;
    let moved = calls.first(B, What::Prepare, &key).unwrap().at;
    let cut = Instant::now();
    link.send_replace(common::Link::Cut);
    let undo = eventually(Duration::from_secs(10), || async {
        calls.first(B, What::Unprepare, &key)
    })
    .await
    .expect("B undid its start");
    link.send_replace(common::Link::Up);
    let cut_for = cut.elapsed();
    let done = ended(&h, &op.id, Duration::from_secs(30)).await;
    assert_eq!(done.state, OperationState::Succeeded, "{done:?}");
    worked_by(&h, one, B, Duration::from_secs(20)).await;
    // The operation wrote B's new term down once B was live under it: B was asked again.
    let again = calls
        .of(B, What::Prepare, &key)
        .into_iter()
        .filter(|c| c.at > undo.at)
        .count();
    assert!(
        again > 0,
        "B was never asked again under its new term:\n{}",
        calls.story(&key)
    );
    assert!(b.prepared().is_empty(), "{:?}", b.prepared());
    let released = calls.first(A, What::Released, &key).expect("A stopped");
    let acquired = calls.first(B, What::Acquire, &key).expect("B works on it");
    assert!(released.at <= acquired.at, "{}", calls.story(&key));
    let row = handed_row(&h, &key, B).await;
    eprintln!(
        "overlap, next owner lapsed briefly (cut {} ms): undone {} ms after the move began; A \
         went on working {} ms after the move began (bound {bound:?}); B's hold {} ms after \
         A's stop, at generation {} (the move's was {}); history {:?} {:?}\nLease:\n{}",
        cut_for.as_millis(),
        undo.at.duration_since(moved).as_millis(),
        released.at.duration_since(moved).as_millis(),
        acquired.at.duration_since(released.at).as_millis(),
        acquired.generation,
        undo.generation,
        row.overlap,
        row.overlap_ms,
        versions.story(&key)
    );
    watch.abort();
    h.finish().await;
}

/// Waits until the control plane has given `key` another desired owner than B (the move
/// called off), and until its desired owner works on it alone; returns that owner.
async fn redirected(h: &Harness, key: &str, versions: &Versions) -> String {
    let owner = eventually(Duration::from_secs(20), || async {
        let l = target_lease(h, key).await;
        ann(&l, protocol::ANN_DESIRED_OWNER)
            .filter(|d| *d != B)
            .map(str::to_owned)
    })
    .await
    .unwrap_or_else(|| {
        panic!(
            "the move to B was never called off:\n{}",
            versions.story(key)
        )
    });
    worked_by(h, &[key.to_owned()], &owner, Duration::from_secs(20)).await;
    owner
}

/// B was not asked to prepare `key` after `undo`.
fn called_off_then(calls: &Calls, key: &str, undo: &Call) {
    let late = calls
        .of(B, What::Prepare, key)
        .into_iter()
        .filter(|c| c.at > undo.at)
        .count();
    assert_eq!(
        late,
        0,
        "asked to prepare after the undo:\n{}",
        calls.story(key)
    );
}

/// What B was asked about `key` before and after its move was called off: asserts B undid its
/// start (an unprepare at the generation it prepared at, after its last prepare call began),
/// never held the target, and its app keeps no start of it; returns the unprepare.
fn called_off(calls: &Calls, b: &App, key: &str) -> Call {
    let story = calls.story(key);
    let prepares = calls.of(B, What::Prepare, key);
    let first = prepares.first().expect("B was asked to prepare");
    let undo = calls.first(B, What::Unprepare, key).unwrap_or_else(|| {
        panic!("B never told to undo its start of {key}:\n{story}");
    });
    assert_eq!(undo.generation, first.generation, "{story}");
    assert!(
        calls.of(B, What::Acquire, key).is_empty(),
        "B worked on {key}:\n{story}"
    );
    assert!(
        !b.prepared().contains_key(key),
        "B's app still started on {key}:\n{story}"
    );
    undo
}

/// 3a. A rebalance moves one of A's two targets to B; while B's app is not yet proven, B's pod
/// is deleted (its agent goes on): the move is called off — the control plane gives the target
/// another home — and B's app is told to undo its start; B never works on it. A keeps it
/// (the only other member) without ever having stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_move_called_off_when_the_next_owners_pod_goes_is_undone() {
    let (h, calls, _a, b, _) = a_holds_all_then_b_joins(2, ", overlap_wait: 10s", false).await;
    let (versions, watch) = Versions::watch(&h);
    let op = rebalance(&h).await;
    assert_eq!(op.moves.len(), 1, "{op:?}");
    let key = op.moves[0].target.clone();
    b_not_yet(&calls, std::slice::from_ref(&key), 2).await;
    let deleted = Instant::now();
    kube_sim::kubelet::crash(&h.t.client, &h.ns, B)
        .await
        .unwrap();
    let undone = eventually(Duration::from_secs(15), || async {
        calls.first(B, What::Unprepare, &key)
    })
    .await;
    assert!(
        undone.is_some(),
        "B never undid its start:\n{}\nLease:\n{}",
        calls.story(&key),
        versions.story(&key)
    );
    assert_eq!(redirected(&h, &key, &versions).await, A);
    let undo = called_off(&calls, &b, &key);
    called_off_then(&calls, &key, &undo);
    assert!(
        calls.of(A, What::Release, &key).is_empty(),
        "A stopped a target that came back to it:\n{}",
        calls.story(&key)
    );
    eprintln!(
        "overlap called off (next owner's pod deleted): {key} undone by B {} ms after the \
         deletion; desired owner back to A, A never stopped; operation {:?}",
        undo.at.duration_since(deleted).as_millis(),
        ended(&h, &op.id, Duration::from_secs(20)).await.state
    );
    watch.abort();
    h.finish().await;
}

/// 3b. The same, but B's agent stops (it holds nothing, so it skips its drain): its app is
/// told to undo its start before it exits; B never works on the target, which stays with A.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_move_called_off_when_the_next_owner_stops_is_undone() {
    let (mut h, calls, _a, b, _) = a_holds_all_then_b_joins(2, ", overlap_wait: 10s", false).await;
    let (versions, watch) = Versions::watch(&h);
    let op = rebalance(&h).await;
    assert_eq!(op.moves.len(), 1, "{op:?}");
    let key = op.moves[0].target.clone();
    b_not_yet(&calls, std::slice::from_ref(&key), 2).await;
    let stopping = Instant::now();
    let member = h.members.get_mut(B).unwrap();
    let _ = member.stop.take().unwrap().send(());
    // (Its result is the harness's to check, at the end.)
    let exited = eventually(Duration::from_secs(10), || async {
        h.members[B].task.is_finished().then_some(())
    })
    .await;
    assert!(exited.is_some(), "B did not exit");
    let exit_took = stopping.elapsed();
    let undo = called_off(&calls, &b, &key);
    assert!(
        undo.at <= stopping + exit_took,
        "undone only after the exit"
    );
    assert_eq!(redirected(&h, &key, &versions).await, A);
    called_off_then(&calls, &key, &undo);
    assert!(
        calls.of(A, What::Release, &key).is_empty(),
        "A stopped a target that came back to it:\n{}\nLease:\n{}",
        calls.story(&key),
        versions.story(&key)
    );
    eprintln!(
        "overlap called off (next owner stopping): {key} undone {} ms after B's stop began, B \
         exited after {} ms; target back with A, A never stopped; operation {:?}",
        undo.at.duration_since(stopping).as_millis(),
        exit_took.as_millis(),
        ended(&h, &op.id, Duration::from_secs(20)).await.state
    );
    watch.abort();
    h.finish().await;
}

/// 4. B is cut off from the API server while its app is not yet proven: once its renew
/// deadline (2D/3) passes it has no authority, and its app is told to undo its start; it is
/// not asked to prepare again while cut off, and never works on the target. The control plane
/// gives the target another home (A, the only other member). No two members hold the target at
/// once (the invariant checker). Once the link is back B registers again, and is still not
/// asked to prepare the move it lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_next_owner_without_authority_undoes_its_start() {
    let (h, calls, _a, b, link) = a_holds_all_then_b_joins(2, ", overlap_wait: 10s", true).await;
    let link = link.unwrap();
    let (versions, watch) = Versions::watch(&h);
    let op = rebalance(&h).await;
    assert_eq!(op.moves.len(), 1, "{op:?}");
    let key = op.moves[0].target.clone();
    let one = std::slice::from_ref(&key);
    b_not_yet(&calls, one, 2).await;
    let cut = Instant::now();
    link.send_replace(common::Link::Cut);
    let undo = eventually(Duration::from_secs(10), || async {
        calls.first(B, What::Unprepare, &key)
    })
    .await
    .unwrap_or_else(|| {
        panic!(
            "B never undid its start after losing its authority:\n{}\nLease:\n{}",
            calls.story(&key),
            versions.story(&key)
        )
    });
    let undone_after = undo.at.duration_since(cut);
    // The renew deadline is 2D/3 after the last renewal was sent (at most D/3 before the cut).
    let renew_deadline = Duration::from_millis(LEASE_S * 1000 * 2 / 3);
    assert!(
        undone_after <= renew_deadline + Duration::from_secs(1),
        "undone {undone_after:?} after the cut"
    );
    // The control plane sees B lapse, and gives the target another home (A, the only other).
    assert_eq!(redirected(&h, &key, &versions).await, A);
    let back = cut.elapsed();
    called_off_then(&calls, &key, &undo);
    // The link is back: B registers again, and the move it lost is not its any more.
    link.send_replace(common::Link::Up);
    h.wait_ready(B).await;
    called_off(&calls, &b, &key);
    called_off_then(&calls, &key, &undo);
    let l = target_lease(&h, &key).await;
    assert_eq!(
        ann(&l, protocol::ANN_DESIRED_OWNER),
        Some(A),
        "{}",
        versions.story(&key)
    );
    eprintln!(
        "overlap, next owner cut off: {key} undone by B {} ms after the cut, worked on by A \
         alone again (desired A) {} ms after it, A stopped it {} times; operation {:?}",
        undone_after.as_millis(),
        back.as_millis(),
        calls.of(A, What::Release, &key).len(),
        ended(&h, &op.id, Duration::from_secs(20)).await.state
    );
    watch.abort();
    h.finish().await;
}

/// 5. `handoff: exclusive`: though B's app prepares (its member Lease says so), the control plane
/// asks for no overlap — no `overlap-ms` on the Lease at any version — and B is never asked to
/// prepare: A stops, then B works. History records no overlap.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_handoff_exclusive_nobody_is_asked_to_prepare() {
    let n = 2;
    let (h, calls, _a, _b, _) = a_holds_all_then_b_joins(n, ", handoff: exclusive", false).await;
    let keys = keys(n);
    let (versions, watch) = Versions::watch(&h);
    let op = remove(&h, A).await;
    let done = ended(&h, &op.id, Duration::from_secs(20)).await;
    assert_eq!(done.state, OperationState::Succeeded, "{done:?}");
    worked_by(&h, &keys, B, Duration::from_secs(10)).await;
    assert!(
        calls.all(B, What::Prepare).is_empty() && calls.all(A, What::Prepare).is_empty(),
        "asked to prepare in an exclusive hand-off:\n{}",
        keys.iter()
            .map(|k| calls.story(k))
            .collect::<Vec<_>>()
            .join("\n")
    );
    for k in &keys {
        let story = || format!("calls:\n{}\nLease:\n{}", calls.story(k), versions.story(k));
        assert!(
            versions
                .of(k)
                .iter()
                .all(|(_, l)| ann(l, protocol::ANN_OVERLAP_MS).is_none()),
            "{}",
            story()
        );
        let released = calls.first(A, What::Released, k).expect("A stopped");
        let acquire = calls.first(B, What::Acquire, k).expect("B works on it");
        assert!(released.at <= acquire.at, "{}", story());
        let row = handed_row(&h, k, B).await;
        assert_eq!(row.overlap, None, "{row:?}");
        assert_eq!(row.overlap_ms, None, "{row:?}");
        eprintln!(
            "exclusive {k}: no prepare call, A stopped → B's hold {} ms",
            acquire.at.duration_since(released.at).as_millis()
        );
    }
    watch.abort();
    h.finish().await;
}
