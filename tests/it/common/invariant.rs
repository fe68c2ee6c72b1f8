//! `InvariantChecker`: records when each member starts and stops working on each target and
//! flags any moment two members work on one target at once, and any acquisition whose fencing
//! generation is not larger than every earlier one of the target (hooks report it). Work on a target counts from the
//! start of `on_acquire` to the end of `on_release` (or a crash). Use [`InvariantChecker::hooks`]
//! to get agent hooks that record into it, or call `acquired`/`released` yourself.
//!
//! It records rather than panics inside hooks (a panic there would only kill an agent task);
//! tests call [`InvariantChecker::assert_ok`] at the end.
//!
//! A test that pauses a member on purpose (SIGSTOP past its hold) calls
//! [`InvariantChecker::tolerate_fenced_overlaps`]: the paused member's app goes on working until
//! the member runs again and tells it to stop, and the next owner may already work meanwhile.
//! That overlap is harmless only if the newcomer's generation is larger than the stale one's
//! (the app can refuse the stale owner's writes): it is then recorded as *fenced*, not as a
//! violation. [`InvariantChecker::http_app`] is the app for agents run as processes, reached by
//! their HTTP hooks; as [`leasehold::demo::MemberApps`] it is the app beside the demo's members
//! (their hooks, and a member the demo kills counts as crashed).
//!
//! [`InvariantChecker::unworked`] compares the work with the owners a test reads (from the
//! model or the API): every target worked on by its owner alone.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures::FutureExt as _;
use futures::future::BoxFuture;
use leasehold::agent::{Assignment, Hooks};

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `on_acquire` started: the member works on the target from now.
    Acquired,
    /// `on_release` finished: the member no longer works on it.
    Released,
    /// The member crashed: it no longer works on anything.
    Crashed,
}

/// One recorded hook call.
#[derive(Debug, Clone)]
pub struct Record {
    pub at: Instant,
    pub target: String,
    pub member: String,
    pub kind: Kind,
}

#[derive(Default)]
struct Inner {
    /// Who works on each target now, since when.
    working: BTreeMap<String, BTreeMap<String, Instant>>,
    /// The largest fencing generation each target was acquired at, and by whom.
    generations: BTreeMap<String, (u64, String)>,
    /// The generation of each (target, member) work in progress, when known.
    working_at: BTreeMap<(String, String), u64>,
    /// Overlaps with a stale owner that the newcomer's larger generation fences.
    fenced: Vec<String>,
    tolerate_fenced: bool,
    log: Vec<Record>,
    violations: Vec<String>,
    /// Members reported crashed.
    crashed: BTreeSet<String>,
}

/// Shared recorder of who works on what; clone it freely.
#[derive(Clone, Default)]
pub struct InvariantChecker {
    inner: Arc<Mutex<Inner>>,
}

impl InvariantChecker {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `member` starts working on `target`; a violation if anyone else works on it now.
    pub fn acquired(&self, target: &str, member: &str) {
        self.start(target, member, None);
    }

    fn start(&self, target: &str, member: &str, generation: Option<u64>) {
        let now = Instant::now();
        let mut g = self.lock();
        let workers = g.working.entry(target.to_owned()).or_default();
        let others: Vec<String> = workers.keys().filter(|m| *m != member).cloned().collect();
        workers.insert(member.to_owned(), now);
        if let Some(gen_) = generation {
            g.working_at
                .insert((target.to_owned(), member.to_owned()), gen_);
        }
        if !others.is_empty() {
            let fenced = generation.is_some_and(|new| {
                others.iter().all(|o| {
                    g.working_at
                        .get(&(target.to_owned(), o.clone()))
                        .is_some_and(|old| *old < new)
                })
            });
            let what =
                format!("{member} started on {target:?} while {others:?} still worked on it");
            if fenced && g.tolerate_fenced {
                g.fenced.push(what);
            } else if fenced {
                g.violations
                    .push(format!("{what} (fenced by a larger generation)"));
            } else {
                g.violations.push(what);
            }
        }
        g.log.push(Record {
            at: now,
            target: target.to_owned(),
            member: member.to_owned(),
            kind: Kind::Acquired,
        });
    }

    /// `member` starts working on `target` at fencing generation `generation`: as
    /// [`InvariantChecker::acquired`], and a violation unless the generation is larger than
    /// every earlier acquisition's of the target (then a stale owner could not be fenced) —
    /// or equal to the largest, taken by this same member: a hold it resumes in a new term of
    /// its tenure, which nobody else held meanwhile (they would have raised it).
    pub fn acquired_at(&self, target: &str, member: &str, generation: u64) {
        {
            let mut g = self.lock();
            let previous = g
                .generations
                .insert(target.to_owned(), (generation, member.to_owned()));
            if let Some((before, by)) = previous
                && (generation < before || (generation == before && by != member))
            {
                g.violations.push(format!(
                    "{member} acquired {target:?} at generation {generation}, not above \
                     {by}'s {before}"
                ));
                let max = (before, by);
                g.generations.insert(target.to_owned(), max);
            }
        }
        self.start(target, member, Some(generation));
    }

    /// From now on, an overlap fenced by a larger generation is recorded apart
    /// ([`InvariantChecker::fenced_overlaps`]) instead of as a violation.
    pub fn tolerate_fenced_overlaps(&self) {
        self.lock().tolerate_fenced = true;
    }

    /// The overlaps recorded as fenced.
    pub fn fenced_overlaps(&self) -> Vec<String> {
        self.lock().fenced.clone()
    }

    /// `member` stopped working on `target`.
    pub fn released(&self, target: &str, member: &str) {
        let now = Instant::now();
        let mut g = self.lock();
        if let Some(w) = g.working.get_mut(target) {
            w.remove(member);
        }
        g.working_at.remove(&(target.to_owned(), member.to_owned()));
        g.log.push(Record {
            at: now,
            target: target.to_owned(),
            member: member.to_owned(),
            kind: Kind::Released,
        });
    }

    /// `member` crashed (its agent task was aborted): all its work ends now.
    pub fn crashed(&self, member: &str) {
        self.lock().crashed.insert(member.to_owned());
        self.end_all(member, Kind::Crashed);
    }

    /// `member`'s app stopped all its work on its own (its agent's authority deadline passed:
    /// [`watchdog`]); a later acquisition starts work again.
    pub fn stopped_all(&self, member: &str) {
        self.end_all(member, Kind::Released);
    }

    fn end_all(&self, member: &str, kind: Kind) {
        let now = Instant::now();
        let mut g = self.lock();
        let mut ended = Vec::new();
        for (target, w) in g.working.iter_mut() {
            if w.remove(member).is_some() {
                ended.push(target.clone());
            }
        }
        g.working_at.retain(|(_, m), _| m != member);
        for target in ended {
            g.log.push(Record {
                at: now,
                target,
                member: member.to_owned(),
                kind,
            });
        }
    }

    /// Who works on `target` now.
    pub fn workers(&self, target: &str) -> Vec<String> {
        self.lock()
            .working
            .get(target)
            .map(|w| w.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Targets `member` works on now.
    pub fn working_on(&self, member: &str) -> Vec<String> {
        self.lock()
            .working
            .iter()
            .filter(|(_, w)| w.contains_key(member))
            .map(|(t, _)| t.clone())
            .collect()
    }

    /// Who works on what now: member → targets (only members working on something).
    pub fn work(&self) -> BTreeMap<String, Vec<String>> {
        let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (target, w) in &self.lock().working {
            for member in w.keys() {
                out.entry(member.clone()).or_default().push(target.clone());
            }
        }
        out
    }

    /// Members reported crashed so far ([`InvariantChecker::crashed`]).
    pub fn crashed_members(&self) -> BTreeSet<String> {
        self.lock().crashed.clone()
    }

    /// Of `owners` (each target with its owner, if any), those whose workers are not exactly
    /// their owner: (target, owner, workers). Empty when every owned target's owner works on it
    /// alone and nobody works on an unowned one.
    pub fn unworked(
        &self,
        owners: impl IntoIterator<Item = (String, Option<String>)>,
    ) -> Vec<(String, Option<String>, Vec<String>)> {
        owners
            .into_iter()
            .filter_map(|(target, owner)| {
                let workers = self.workers(&target);
                (workers != owner.iter().cloned().collect::<Vec<_>>())
                    .then_some((target, owner, workers))
            })
            .collect()
    }

    /// Every record, in order.
    pub fn log(&self) -> Vec<Record> {
        self.lock().log.clone()
    }

    /// Records of one target, in order.
    pub fn log_of(&self, target: &str) -> Vec<Record> {
        self.log()
            .into_iter()
            .filter(|r| r.target == target)
            .collect()
    }

    /// Overlaps seen so far.
    pub fn violations(&self) -> Vec<String> {
        self.lock().violations.clone()
    }

    /// Panics if two members ever worked on one target at once, or a target was acquired
    /// without a larger fencing generation.
    #[track_caller]
    pub fn assert_ok(&self) {
        let v = self.violations();
        assert!(
            v.is_empty(),
            "ownership invariant violated:\n{}",
            v.join("\n")
        );
    }

    /// For each handoff of a target from one member to another: the time from the old
    /// member's end of work (release or crash) to the new member's start.
    pub fn handoffs(&self) -> Vec<(String, Duration)> {
        let mut last_end: BTreeMap<String, (String, Instant)> = BTreeMap::new();
        let mut out = Vec::new();
        for r in self.log() {
            match r.kind {
                Kind::Released | Kind::Crashed => {
                    last_end.insert(r.target.clone(), (r.member.clone(), r.at));
                }
                Kind::Acquired => {
                    if let Some((from, at)) = last_end.remove(&r.target)
                        && from != r.member
                    {
                        out.push((r.target.clone(), r.at.duration_since(at)));
                    }
                }
            }
        }
        out
    }

    /// The app of agents run as processes (`leasehold agent --hook-url <base>`): `POST
    /// <base>/acquire` and `<base>/release` with the agent's JSON body record the start and the
    /// end of the instance's work on the target, as the in-process [`InvariantChecker::hooks`] do.
    pub fn http_app(&self) -> axum::Router {
        use axum::routing::post;
        #[derive(serde::Deserialize)]
        struct Work {
            target: String,
            generation: u64,
            instance: String,
        }
        let acquire = self.clone();
        let release = self.clone();
        axum::Router::new()
            .route(
                "/hooks/acquire",
                post(move |axum::Json(w): axum::Json<Work>| async move {
                    acquire.acquired_at(&w.target, &w.instance, w.generation);
                }),
            )
            .route(
                "/hooks/release",
                post(move |axum::Json(w): axum::Json<Work>| async move {
                    release.released(&w.target, &w.instance);
                }),
            )
    }

    /// Agent hooks for `member` that record into this checker; `work` is how long each hook
    /// takes (to widen race windows).
    pub fn hooks(&self, member: &str, work: Duration) -> Arc<dyn Hooks> {
        Arc::new(RecordingHooks {
            checker: self.clone(),
            member: member.to_owned(),
            work,
        })
    }
}

impl InvariantChecker {
    /// Hooks of an app that records like [`InvariantChecker::hooks`] but cannot stop its work
    /// while `stuck` is set: its release fails and it goes on working. It confirms its stops
    /// (`Hooks::confirms_stop`, as managed gnmic does), so its agent must keep such a target.
    pub fn stuck_hooks(
        &self,
        member: &str,
        stuck: Arc<std::sync::atomic::AtomicBool>,
    ) -> Arc<dyn Hooks> {
        Arc::new(StuckHooks {
            inner: RecordingHooks {
                checker: self.clone(),
                member: member.to_owned(),
                work: Duration::from_millis(5),
            },
            stuck,
        })
    }
}

struct StuckHooks {
    inner: RecordingHooks,
    stuck: Arc<std::sync::atomic::AtomicBool>,
}

impl Hooks for StuckHooks {
    fn on_acquire(&self, work: &Assignment) -> BoxFuture<'_, Result<(), String>> {
        self.inner.on_acquire(work)
    }

    fn on_release(&self, work: &Assignment) -> BoxFuture<'_, Result<(), String>> {
        if self.stuck.load(std::sync::atomic::Ordering::SeqCst) {
            return async {
                tokio::time::sleep(Duration::from_millis(100)).await;
                Err("the app cannot stop".to_owned())
            }
            .boxed();
        }
        self.inner.on_release(work)
    }

    fn confirms_stop(&self) -> bool {
        true
    }
}

struct RecordingHooks {
    checker: InvariantChecker,
    member: String,
    work: Duration,
}

impl Hooks for RecordingHooks {
    fn on_acquire(&self, work: &Assignment) -> BoxFuture<'_, Result<(), String>> {
        self.checker
            .acquired_at(&work.target, &self.member, work.generation);
        let work = self.work;
        async move {
            tokio::time::sleep(work).await;
            Ok(())
        }
        .boxed()
    }

    fn on_release(&self, work: &Assignment) -> BoxFuture<'_, Result<(), String>> {
        let target = work.target.clone();
        async move {
            tokio::time::sleep(self.work).await;
            self.checker.released(&target, &self.member);
            Ok(())
        }
        .boxed()
    }
}

/// How long each hook of a demo member's app takes.
const DEMO_WORK: Duration = Duration::from_millis(5);

/// The app beside each of the demo's members records into the checker; member names are
/// unique across the demo's clusters, and so are target keys, so one checker serves both.
impl leasehold::demo::MemberApps for InvariantChecker {
    fn hooks(&self, _cluster: &str, member: &str) -> Arc<dyn Hooks> {
        InvariantChecker::hooks(self, member, DEMO_WORK)
    }

    fn killed(&self, _cluster: &str, member: &str) {
        self.crashed(member);
    }
}

/// The app beside a process member as `docs/protocol.md` ("Hooks") tells app authors to write
/// it when two workers on one target must never happen, even while the agent stalls: it polls
/// the agent's `GET /authority` every 50 ms (each try bounded by 300 ms) and stops all its work
/// ([`InvariantChecker::stopped_all`]) once the last deadline it was given has passed, or the
/// agent says it holds none. No answer is no news: the deadline it had stands. Runs until
/// aborted.
pub fn watchdog(
    checker: InvariantChecker,
    member: String,
    agent: std::net::SocketAddr,
) -> tokio::task::JoinHandle<()> {
    use http_body_util::{BodyExt as _, Empty};
    use hyper::body::Bytes;
    tokio::spawn(async move {
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build_http::<Empty<Bytes>>();
        let url: hyper::Uri = format!("http://{agent}/authority").parse().unwrap();
        let mut deadline: Option<i64> = None;
        let mut working = true;
        loop {
            let answer = tokio::time::timeout(Duration::from_millis(300), async {
                let resp = client.get(url.clone()).await.ok()?;
                let body = resp.into_body().collect().await.ok()?.to_bytes();
                serde_json::from_slice::<leasehold::agent::authority::AuthorityBody>(&body).ok()
            })
            .await
            .ok()
            .flatten();
            if let Some(a) = answer {
                deadline = a.deadline_unix_ms;
            }
            let now = jiff::Timestamp::now().as_millisecond();
            let holds = deadline.is_some_and(|d| now < d);
            if !holds && working {
                checker.stopped_all(&member);
            }
            working = holds;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
}
