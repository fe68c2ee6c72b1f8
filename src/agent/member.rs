//! The member's decision loop. One task owns all state (the member Lease, the target Leases
//! seen by the watches, and the Leases held with their phase); Lease writes and hook calls run
//! as owned tasks in a `JoinSet` and report back. The loop re-decides after every batch of
//! watcher events and finished tasks and at every timer (the member Lease's next renewal or
//! renew deadline, a wait for a handed Lease, a write's backoff, or the periodic tick), so a
//! handoff is acted on as soon as its watch event arrives.
//!
//! A pass costs what changed, not the cluster's size: it revisits only the Leases touched
//! since the last pass (`dirty`), and an acquisition pass looks only at `candidates` — Leases
//! not held but desired for us or held by us.
//!
//! Per target the phases are: acquiring (PUT in flight) → starting (held, `on_acquire`
//! running) → working → stopping (`on_release` running) → releasing (PUT of
//! `protocol::given_up`: handed straight to the next owner, or released — for a target the
//! member's hand-over plan names (`protocol::plan`), with the planned desired owner written in
//! the same PUT). At most as many
//! targets are stopping or releasing for a handover at a time as an adaptive limit of their
//! own allows (`handovers`: from [`HANDOVERS_AT_START`], growing while handover writes are
//! answered promptly, shrinking when they slow down or are refused, at most `--max-parallel`):
//! a target's stop and its handover write stay together, and the others moved away go on
//! working until a slot frees. Hook calls run under an adaptive limit of
//! their own (`hook_gate`; not for hooks whose calls are in-process, `Hooks::limited`), but a
//! stop for a lost authority never waits for it.
//!
//! Holds are never renewed: the member Lease (`Heart`) is, and past its renew deadline — or
//! when it is found fenced or deleted — every hold is lost at once, without a write. What was
//! held when the deadline passed is kept as `dormant`, and a new term of the same tenure works
//! on it again without a write (`Take::Resume`). The decisions are `protocol::member`'s pure
//! rules (`Authority`, `take`, `keep`, `after_acquire`), the ones the seeded simulation
//! checks; this loop runs them.
//! Two label-selected watches (or their equivalent from the process's `SharedLeases`) feed
//! `seen`, each Lease remembering which of them list it. A Lease handed to us is adopted only
//! once both list it. On shutdown the member first drains:
//! it writes `leaving` and waits (at most the drain timeout) until the control plane has moved
//! everything away.
//!
//! In an overlap hand-off (`leasehold.io/overlap-ms` on the Lease) the next owner starts its
//! app ahead of the hand-over (`preparing`: `on_prepare` until the app proves it, then one
//! `ready` write) and the holder keeps working until that word, at most the bound (`awaiting`),
//! before it stops and hands over; a move called off is undone (`on_unprepare`).
//!
//! A failing `on_acquire` is logged and the Lease is kept: the desired owner is still this
//! member, giving the Lease up would only make the control plane move it back, and the app can
//! retry on its own. `on_release` failures are logged too; the release goes ahead — unless
//! the hooks confirm their stops (`Hooks::confirms_stop`: managed gnmic, scrape targets proven
//! by the scraper's API): then the target is kept, and its stop asked for again, until the app
//! says it stopped.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt as _, StreamExt as _};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::Api;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::watcher::{self, Event};
use tokio::sync::watch;
use tokio::task::{AbortHandle, JoinSet};
use tokio::time::Instant;

use super::AgentConfig;
use super::hooks::{Assignment, HookEvent, Hooks, call_bounded};
use super::shared::{SharedLeases, WatchItem};
use super::state::{Gate, Heart, Held, Overruns, Permits, Phase, Preparing, Seen, is_newer};
use super::writes::{self, WriteError};
use crate::k8s::pacing::Sample;
use crate::protocol::member::{self, Acquired, Answer, Authority, Keep, Listing, Outcome, Take};
use crate::protocol::{self, Holding, LeaseRole};

/// Longest time between two decision passes when nothing happens.
const TICK: Duration = Duration::from_secs(1);
/// Pause before retrying a write that failed for another reason than a 409 (a 409 is
/// re-decided at once on the fresh copy).
const WRITE_BACKOFF: Duration = Duration::from_millis(250);
/// The `reportingController` of the Kubernetes Events a member publishes.
const REPORTING_CONTROLLER: &str = "leasehold.io/agent";
/// Handovers a member begins at once before its limit adapts (`handovers`). Small: a handoff's
/// gap is mostly its write's latency, and writes sent together are answered one behind the
/// other — 30 at once took 35–66 ms on the whole-cluster tier, and beginning 16 at once (the
/// write gate's limit) made a rolling update's gap p99 110 ms there, against 61–82 ms with 4
/// (docs/real-apiserver.md). The limit then grows by about one per round of prompt answers,
/// so a member stopping thousands of targets hands them over as fast as the server answers.
const HANDOVERS_AT_START: usize = 4;

/// How much longer than the fastest recent answer hand-over writes may take on average before
/// the member stops adding hand-overs in flight (`pacing::Limiter::prompt_within`): the
/// answer's wait is the target's gap (its app stopped before the write), so the budget is a
/// gap budget; below it a busy server is busy, not refusing. (Judged answer by answer against
/// four times the fastest, the limit stayed at 4–6 on the real tier — 85–100 hand-overs a
/// second while the server took 280: docs/benchmarks.md.)
pub(super) const HANDOVER_PROMPT: Duration = Duration::from_millis(60);
/// Most hook calls running at once, before the limit adapts to how long the app takes
/// (`Gate`: a call slower than the hook timeout counts as overload). A member stopping
/// thousands of targets once started a process per target within 0.18 s (load 1,103 with nine
/// members stopping, issue 32): the machine stalled and the member missed its own renewals.
/// A stop for a lost authority never waits for a slot (the app must stop by the deadline).
const HOOKS_AT_ONCE: usize = 32;
/// After an app's "not yet" to a start ahead of a hand-over (`on_prepare`), the shortest
/// pause before it is asked again: an app may answer at once, and the member must not ask in a
/// busy loop (the scrape kind's own call waits up to 500 ms for its scraper's proof).
const PREPARE_RETRY: Duration = Duration::from_millis(200);
/// Most watch events and finished tasks taken in before one decision pass.
const MAX_BATCH: usize = 1024;

/// The held set (`Agent::held`) is published at most this often while it keeps changing (a
/// planned stop changes it on every pass), and at once otherwise.
const PUBLISH_EVERY: Duration = Duration::from_millis(100);

/// What a task reports back.
enum Done {
    Acquired {
        name: String,
        sent: Instant,
        result: Result<Lease, WriteError>,
    },
    Released {
        name: String,
        sent: Instant,
        /// The Lease as written (absent when it was already gone or taken).
        result: Result<Option<Lease>, String>,
    },
    Hook {
        name: String,
        event: HookEvent,
        result: Result<(), String>,
        /// When it started and how long it took, if it ran under `hook_gate`.
        gated: Option<(Instant, Duration)>,
    },
    /// An overrun report published as a Kubernetes Event.
    Reported { result: Result<(), String> },
    /// The `ready` write of an overlap hand-off to us (`protocol::ready`).
    Readied {
        name: String,
        sent: Instant,
        result: Result<Lease, WriteError>,
    },
    /// A member Lease write (`write.at` is set from `sent` on its return).
    Heartbeat {
        write: member::Sent,
        sent: Instant,
        result: Result<Lease, WriteError>,
    },
}

pub(super) struct Member {
    api: Api<Lease>,
    /// Where the member Lease is ([`AgentConfig::member_namespace`]).
    member_api: Api<Lease>,
    cfg: AgentConfig,
    hooks: Arc<dyn Hooks>,
    published: watch::Sender<BTreeSet<String>>,
    /// When this member's authority ends unless renewed (Unix ms; `None`: none now), published
    /// for the app (`Agent::authority`) and passed in every hook call.
    authority: watch::Sender<Option<i64>>,
    /// The authority's deadline on our clock that `authority` was last computed from.
    authority_ms: Option<i64>,
    /// Holds found already ended by our clock (see `Agent::overruns`).
    overruns: Overruns,
    /// Publishes overrun reports as Kubernetes Events about the member's pod.
    events: Recorder,
    clock: Instant,
    seen: BTreeMap<String, Seen>,
    held: BTreeMap<String, Held>,
    /// Leases held by us in the API that we do not track (a former run of this pod, or a
    /// write whose answer was lost) and are releasing without hooks.
    orphans: BTreeSet<String>,
    /// No acquisition attempt of these before the instant (after a failed one).
    not_before: BTreeMap<String, Instant>,
    /// Leases handed to us under our current term that one watch lists and the other not
    /// yet, and until when (our clock, ms) we wait for it before taking them with a write.
    handed_wait: BTreeMap<String, i64>,
    /// Targets to hand over that wait for a slot ([`Member::handover_slots`]; still
    /// worked on), and how many handovers are under way (`on_release` running or the release
    /// write due or in flight) in the current pass, counted when first needed (a pass without
    /// handovers does not walk what is held).
    handovers_waiting: BTreeSet<String>,
    handing_over: Option<usize>,
    /// Leases we held when a term lapsed (or whose acquisition was answered after it), not
    /// written since, with the tenure and the generation they were held in: a new term of the
    /// same tenure works on them again without a write (`protocol::member::Take::Resume`).
    dormant: BTreeMap<String, (u64, i32)>,
    tasks: JoinSet<Done>,
    /// Targets being handed to us in an overlap hand-off, their app started ahead of it
    /// (`Take::Prepare`).
    preparing: BTreeMap<String, Preparing>,
    /// Held targets to hand over in an overlap hand-off, still worked on while the next
    /// owner's word is awaited: the desired term seen, since when, and until when at most
    /// (`None` once over: the stop has begun).
    awaiting: BTreeMap<String, (String, Instant, Option<Instant>)>,
    /// The target Lease writes' adaptive limit (the member Lease's writes are not under it).
    gate: Gate,
    /// Hook calls' adaptive limit ([`HOOKS_AT_ONCE`]); a stop for a lost authority is not
    /// under it.
    hook_gate: Gate,
    /// How many handovers may be under way ([`HANDOVERS_AT_START`]; `Member::handover_slots`).
    handovers: crate::k8s::pacing::Limiter,
    /// Target Lease writes that failed in a row (not 409s), for the backoff.
    failures: BTreeMap<String, u32>,
    /// Target Lease writes the server turned away in a row (429, 5xx, no answer in time), any
    /// target: how long the gate pauses ([`Gate::pause_until`]).
    busy_in_a_row: u32,
    /// Leases touched since the last pass (seen, written, hooked, deleted).
    dirty: BTreeSet<String>,
    /// Leases neither held nor orphaned that are desired for us or held by us.
    candidates: BTreeSet<String>,
    /// The published set of held targets may have changed.
    publish_due: bool,
    /// When it was last published ([`PUBLISH_EVERY`]).
    published_at: Option<Instant>,
    synced: bool,
    /// Watches that have listed once (a bit each).
    synced_sources: u8,
    stopping: bool,
    /// The member Lease.
    heart: Heart,
    /// Shutting down; targets are being moved away until then.
    drain_until: Option<Instant>,
    /// This process's shared watch of the target Leases, used instead of two
    /// watches of our own.
    shared: Option<SharedLeases>,
    /// The name of this member's hand-over plan Lease (`protocol::plan`), which its
    /// desired-owner watch lists while the control plane has one for it.
    plan_name: String,
}

impl Member {
    pub(super) fn new(
        client: kube::Client,
        cfg: AgentConfig,
        hooks: Arc<dyn Hooks>,
        published: watch::Sender<BTreeSet<String>>,
        (authority, overruns): (watch::Sender<Option<i64>>, watch::Sender<u64>),
        shared: Option<SharedLeases>,
    ) -> Self {
        let heart_duration = cfg.lease_duration;
        let plan_name = protocol::names::plan_lease(&cfg.lease_prefix, &cfg.cluster, &cfg.identity);
        let reporter = Reporter {
            controller: REPORTING_CONTROLLER.to_owned(),
            instance: Some(cfg.identity.clone()),
        };
        Self {
            overruns: Overruns::new(overruns),
            events: Recorder::new(client.clone(), reporter),
            api: Api::namespaced(client.clone(), &cfg.namespace),
            member_api: Api::namespaced(client, &cfg.member_namespace),
            gate: Gate::new(cfg.max_parallel, cfg.lease_duration / 3),
            hook_gate: Gate::new(HOOKS_AT_ONCE, cfg.hook_timeout),
            handovers: crate::k8s::pacing::Limiter::starting_at(HANDOVERS_AT_START)
                .prompt_within(HANDOVER_PROMPT),
            failures: BTreeMap::new(),
            busy_in_a_row: 0,
            cfg,
            hooks,
            published,
            authority,
            authority_ms: None,
            clock: Instant::now(),
            seen: BTreeMap::new(),
            held: BTreeMap::new(),
            orphans: BTreeSet::new(),
            not_before: BTreeMap::new(),
            handed_wait: BTreeMap::new(),
            handovers_waiting: BTreeSet::new(),
            handing_over: None,
            dormant: BTreeMap::new(),
            preparing: BTreeMap::new(),
            awaiting: BTreeMap::new(),
            tasks: JoinSet::new(),
            dirty: BTreeSet::new(),
            candidates: BTreeSet::new(),
            publish_due: false,
            published_at: None,
            synced: false,
            synced_sources: 0,
            stopping: false,
            heart: Heart {
                lease: None,
                auth: Authority::new(ms(heart_duration)),
                writing: false,
                failures: 0,
            },
            drain_until: None,
            shared,
            plan_name,
        }
    }

    /// How many targets may be handed over at once: the `handovers` limit, at most
    /// `--max-parallel`. Handovers are begun only as fast as their writes are answered, not all
    /// at once; waiting costs no gap: the work goes on meanwhile, and the next owner starts
    /// only on the handover. (A constant 4 until issue 32: a member holding 5,000 targets then
    /// handed 618 of them over within its 10 s drain on the real tier; docs/benchmarks.md,
    /// "Planned stop".)
    fn handover_slots(&self) -> usize {
        self.handovers.limit().min(self.cfg.max_parallel)
    }

    /// How many handovers are under way in this pass (see `handing_over`). A stop takes a
    /// slot only where it is the app's own work (`Hooks::limited`): an in-process stop that
    /// waits for its app's proof (the scrape kind: a scraper drops many targets in one pass
    /// of its pipeline, 5–15 s for Prometheus) takes none, and only its handover write does.
    fn handovers_under_way(&mut self) -> usize {
        let (held, seen) = (&self.held, &self.seen);
        let stops_take_slots = self.hooks.limited();
        *self.handing_over.get_or_insert_with(|| {
            held.iter()
                .filter(|(name, h)| {
                    let slot = match h.phase {
                        Phase::Stopping { release: true } => stops_take_slots,
                        Phase::Releasing => true,
                        _ => false,
                    };
                    slot && !covered(seen, name)
                })
                .count()
        })
    }

    fn now_ms(&self) -> i64 {
        ms(self.clock.elapsed())
    }

    /// `at` on this member's clock in ms (the time of `protocol::member`'s rules).
    fn ms_of(&self, at: Instant) -> i64 {
        ms(at.saturating_duration_since(self.clock))
    }

    /// The instant of `ms` on this member's clock.
    fn instant(&self, ms: i64) -> Instant {
        instant_at(self.clock, ms)
    }

    /// Runs until `shutdown`, then releases everything and returns.
    pub(super) async fn run(mut self, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
        let cluster = format!("{}={}", protocol::LABEL_CLUSTER, self.cfg.cluster);
        let watch = |selector: String, source: u8| {
            watcher::watcher(
                self.api.clone(),
                watcher::Config::default().labels(&selector),
            )
            .default_backoff()
            .map(move |ev| (source, ev.map_err(|e| e.to_string())))
        };
        // Only the target Leases desired for this member and those it holds (two label
        // selectors), so it hears of its own targets' moves only — from this process's shared
        // watch when it has one, which delivers the same.
        let stream = if let Some(shared) = &self.shared {
            tokio_stream::wrappers::UnboundedReceiverStream::new(
                shared.subscribe(&self.cfg.identity),
            )
            .boxed()
        } else {
            let me = protocol::names::identity_label(&self.cfg.identity);
            futures::stream::select(
                watch(
                    format!("{cluster},{}={me}", protocol::LABEL_DESIRED_OWNER),
                    0,
                ),
                watch(format!("{cluster},{}={me}", protocol::LABEL_HOLDER), 1),
            )
            .boxed()
        };
        tokio::pin!(stream, shutdown);
        let mut init: [Vec<Lease>; 2] = [Vec::new(), Vec::new()];
        let mut wake = Instant::now();
        loop {
            if self.stopping && self.held.is_empty() && self.tasks.is_empty() {
                self.publish();
                self.sign_off().await;
                return Ok(());
            }
            tokio::select! {
                () = &mut shutdown, if !self.stopping && self.drain_until.is_none() => {
                    let now = Instant::now();
                    let now_ms = self.now_ms();
                    let h = &mut self.heart;
                    if h.auth.holds(now_ms) && !self.held.is_empty() && !self.cfg.drain_timeout.is_zero() {
                        tracing::info!(targets = self.held.len(), "shutting down: asking for this member's targets to be moved away first");
                        h.auth.leaving = true;
                        self.drain_until = Some(now + self.cfg.drain_timeout);
                    } else {
                        self.stopping = true;
                        self.unprepare_all();
                        self.dirty.extend(self.held.keys().cloned());
                    }
                }
                ev = stream.next(), if !self.stopping => self.on_watch(ev, &mut init)?,
                Some(done) = self.tasks.join_next() => self.on_joined(done)?,
                () = tokio::time::sleep_until(wake) => {}
            }
            // Take in what is already waiting, so that a burst of events costs one pass.
            for _ in 0..MAX_BATCH {
                if self.stopping {
                    break;
                }
                match stream.next().now_or_never() {
                    Some(ev) => self.on_watch(ev, &mut init)?,
                    None => break,
                }
            }
            for _ in 0..MAX_BATCH {
                match self.tasks.try_join_next() {
                    Some(done) => self.on_joined(done)?,
                    None => break,
                }
            }
            wake = self.step();
            if self.publish_due {
                let next = self.published_at.map(|at| at + PUBLISH_EVERY);
                match next {
                    Some(next) if next > Instant::now() => wake = wake.min(next),
                    _ => {
                        self.publish_due = false;
                        self.published_at = Some(Instant::now());
                        self.publish();
                    }
                }
            }
        }
    }

    fn on_watch(
        &mut self,
        ev: Option<WatchItem>,
        init: &mut [Vec<Lease>; 2],
    ) -> anyhow::Result<()> {
        match ev {
            Some((source, Ok(ev))) => self.on_event(ev, source, &mut init[usize::from(source)]),
            Some((_, Err(error))) => tracing::warn!(%error, "lease watch failed; retrying"),
            None => anyhow::bail!("the lease watch ended"),
        }
        Ok(())
    }

    fn on_joined(&mut self, done: Result<Done, tokio::task::JoinError>) -> anyhow::Result<()> {
        match done {
            Ok(done) => self.on_done(done),
            // An `on_acquire` aborted because its Lease was lost.
            Err(e) if e.is_cancelled() => {}
            Err(e) => anyhow::bail!("an agent task died: {e}"),
        }
        Ok(())
    }

    fn on_event(&mut self, ev: Event<Lease>, source: u8, init: &mut Vec<Lease>) {
        let bit = 1u8 << source;
        match ev {
            Event::Apply(lease) => self.apply_from(lease, Some(bit)),
            Event::Delete(lease) => {
                // Deleted, or no longer matching this watch's selector: gone once no
                // watch lists it. A watch that stops listing an object that still exists sends
                // the content it had *before* the change under the change's resourceVersion
                // (the kube-apiserver's watch cache does; so does the simulator): never take
                // that copy in — as the newest version it would hide the real change, which
                // the other watch brings, and become the base of our next write, undoing it.
                let Some(name) = lease.metadata.name else {
                    return;
                };
                let listed = self.seen.get_mut(&name).is_some_and(|s| {
                    s.sources &= !bit;
                    s.sources != 0
                });
                if !listed {
                    self.seen.remove(&name);
                    self.dirty.insert(name);
                }
            }
            Event::Init => init.clear(),
            Event::InitApply(lease) => init.push(lease),
            Event::InitDone => {
                let names: BTreeSet<String> = init
                    .iter()
                    .filter_map(|l| l.metadata.name.clone())
                    .collect();
                let dirty = &mut self.dirty;
                self.seen.retain(|n, s| {
                    if !names.contains(n) {
                        s.sources &= !bit;
                    }
                    let keep = s.sources != 0;
                    if !keep {
                        dirty.insert(n.clone());
                    }
                    keep
                });
                for lease in init.drain(..) {
                    self.apply_from(lease, Some(bit));
                }
                self.synced_sources |= bit;
                self.synced = self.synced_sources == 0b11;
            }
        }
    }

    /// Takes in a copy of a Lease from a fresh read or a write's answer.
    fn apply(&mut self, lease: Lease) {
        self.apply_from(lease, None);
    }

    /// Takes in a copy of a Lease; `source` is the watch bit when a watch listed it. A copy no
    /// watch lists is not added (it does not concern this member, or will be listed).
    fn apply_from(&mut self, mut lease: Lease, source: Option<u8>) {
        lease.metadata.managed_fields = None;
        let Some(view) = protocol::parse_native(&lease, &self.cfg.cluster) else {
            // Not (or no longer) one of ours: forget it, as if deleted.
            if let Some(name) = lease.metadata.name {
                self.seen.remove(&name);
                self.dirty.insert(name);
            }
            return;
        };
        if view.role == LeaseRole::Leader {
            return;
        }
        let name = view.name.clone();
        self.dirty.insert(name.clone());
        if let Some(h) = self.held.get_mut(&name)
            && is_newer(&lease, &h.lease)
        {
            h.lease = lease.clone();
            // Someone else wrote the holder after our last write: it is not ours any more.
            if member::keep(Some(&view), &self.cfg.identity, false) == Keep::Lost
                && !matches!(h.phase, Phase::Acquiring | Phase::Releasing)
            {
                tracing::warn!(target = %h.target, holder = ?view.holding.holder, "lease taken by another holder; stopping work");
                let clock = self.clock;
                let auth = &self.heart.auth;
                let ended = auth
                    .renewed
                    .map(|r| instant_at(clock, r + auth.duration_ms));
                Self::lose(
                    &mut self.tasks,
                    &self.hooks,
                    call(self.cfg.hook_timeout, &self.authority, None),
                    &mut self.overruns,
                    &name,
                    h,
                    ended,
                );
            }
        }
        match (self.seen.get_mut(&name), source) {
            (Some(s), _) => {
                s.sources |= source.unwrap_or(0);
                if is_newer(&lease, &s.lease) {
                    s.lease = lease;
                    s.view = view;
                }
            }
            (None, None) => {}
            (None, Some(sources)) => {
                self.seen.insert(
                    name,
                    Seen {
                        lease,
                        view,
                        sources,
                    },
                );
            }
        }
    }

    /// The Lease is lost (renew deadline passed, or another holder): stop the work without a
    /// release write. The app is told with the full hook timeout even when the hold has already
    /// ended by our clock (we were paused past it): cutting the call short there would leave
    /// the app working beside the next owner indefinitely, never told.
    /// `ended` is when the member Lease's authority ended by our clock (`None`: not known, and
    /// the hold's own start plus `D` stands for it).
    fn lose(
        tasks: &mut JoinSet<Done>,
        hooks: &Arc<dyn Hooks>,
        call: Call,
        overruns: &mut Overruns,
        name: &str,
        h: &mut Held,
        ended: Option<Instant>,
    ) {
        if let Some(a) = h.starting.take() {
            a.abort();
        }
        match h.phase {
            Phase::Stopping { .. } => h.phase = Phase::Stopping { release: false },
            Phase::Starting | Phase::Working => {
                h.phase = Phase::Stopping { release: false };
                let ended = ended.unwrap_or(h.renewed + h.duration);
                let now = Instant::now();
                if now > ended {
                    tracing::error!(
                        target = %h.target,
                        late_ms = (now - ended).as_millis() as u64,
                        "this member was paused past the end of its hold: another member may have \
                         worked on the target meanwhile; telling the app to stop now"
                    );
                    overruns.found(now - ended, jiff::Timestamp::now().as_millisecond());
                }
                spawn_hook(tasks, hooks, name, h, HookEvent::Release, call);
            }
            Phase::Acquiring | Phase::Releasing => {}
        }
    }

    fn on_done(&mut self, done: Done) {
        let done = match done {
            Done::Heartbeat {
                write,
                sent,
                result,
            } => {
                self.on_heartbeat(write, sent, result);
                self.refresh_authority();
                return;
            }
            other => other,
        };
        let done = match done {
            Done::Readied { name, sent, result } => {
                self.on_readied(name, sent, result);
                return;
            }
            Done::Hook {
                name,
                event: event @ (HookEvent::Prepare | HookEvent::Unprepare),
                result,
                gated,
            } => {
                if let Some((started, took)) = gated {
                    self.hook_gate.observe(started, Sample::Answered(took));
                }
                self.on_prepared(name, event, result);
                return;
            }
            other => other,
        };
        let name = match &done {
            Done::Acquired { name, .. } | Done::Released { name, .. } | Done::Hook { name, .. } => {
                name.clone()
            }
            Done::Readied { .. } => return,
            Done::Heartbeat { .. } => return,
            Done::Reported { result } => {
                if let Err(error) = result {
                    tracing::warn!(%error, "could not publish the overrun as a Kubernetes Event");
                }
                return;
            }
        };
        self.publish_due = true;
        self.dirty.insert(name);
        let now = Instant::now();
        match &done {
            Done::Acquired { sent, result, .. } => {
                self.gate
                    .observe(*sent, WriteError::sample(result, now - *sent));
                match result {
                    Err(WriteError::Busy { retry_after, .. }) => self.busy(*retry_after),
                    Err(_) => {}
                    Ok(_) => self.busy_in_a_row = 0,
                }
            }
            Done::Released { sent, result, .. } => {
                let sample = match result {
                    Ok(_) => Sample::Answered(now - *sent),
                    Err(_) => Sample::Overloaded,
                };
                self.gate.observe(*sent, sample);
                self.handovers
                    .observe(sent.into_std(), sample, now.into_std());
                self.handovers.cap(self.cfg.max_parallel);
                match result {
                    Err(_) => self.busy(None),
                    Ok(_) => self.busy_in_a_row = 0,
                }
            }
            _ => {}
        }
        match done {
            Done::Acquired { name, sent, result } => {
                let Some(h) = self.held.get_mut(&name) else {
                    return;
                };
                h.writing = false;
                match result {
                    Ok(lease) => {
                        h.renewed = sent;
                        h.lease = lease.clone();
                        self.failures.remove(&name);
                        tracing::info!(target = %h.target, "acquired");
                        let now_ms = ms(self.clock.elapsed());
                        let next = member::after_acquire(
                            &self.heart.auth,
                            h.tenure,
                            self.stopping,
                            now_ms,
                        );
                        match next {
                            Acquired::Work => {
                                h.phase = Phase::Starting;
                                h.starting = Some(spawn_hook(
                                    &mut self.tasks,
                                    &self.hooks,
                                    &name,
                                    h,
                                    HookEvent::Acquire,
                                    call(
                                        self.cfg.hook_timeout,
                                        &self.authority,
                                        self.hooks.limited().then_some(&self.hook_gate),
                                    ),
                                ));
                            }
                            // Never started: give it straight back.
                            Acquired::GiveBack => h.phase = Phase::Releasing,
                            // Never started: left naming this member, taken again under the
                            // next term — without a write when that one keeps the tenure.
                            Acquired::Leave { resumable } => {
                                tracing::info!(target = %h.target, resumable, "acquired after this member's authority lapsed: not started, left for its next term");
                                if resumable {
                                    let generation = Holding::of(lease.spec.as_ref()).transitions;
                                    self.dormant.insert(name.clone(), (h.tenure, generation));
                                }
                                self.held.remove(&name);
                                self.publish_due = true;
                            }
                        }
                        self.apply(lease);
                    }
                    Err(e) => {
                        let target = h.target.clone();
                        self.held.remove(&name);
                        if let Some(pause) = self.backoff(&name, &e) {
                            self.not_before.insert(name.clone(), Instant::now() + pause);
                        }
                        self.write_failed(&name, &target, "acquire", e);
                    }
                }
            }
            Done::Released { name, result, .. } => {
                let stray = self.orphans.remove(&name);
                let held = self.held.remove(&name);
                match (result, held) {
                    (Ok(written), held) => {
                        if let Some(h) = held {
                            tracing::info!(target = %h.target, "released");
                        }
                        if let Some(l) = written {
                            self.apply(l);
                        }
                    }
                    (Err(error), Some(h)) => {
                        tracing::warn!(target = %h.target, %error, "release failed; the lease will expire")
                    }
                    (Err(error), None) => {
                        if stray {
                            tracing::warn!(lease = %name, %error, "releasing a stray lease failed");
                        }
                        let pause = self.backoff(&name, &WriteError::Other(String::new()));
                        self.not_before
                            .insert(name, Instant::now() + pause.unwrap_or(WRITE_BACKOFF));
                    }
                }
            }
            Done::Heartbeat { .. } | Done::Reported { .. } | Done::Readied { .. } => {}
            Done::Hook {
                name,
                event,
                result,
                gated,
            } => {
                if let Some((started, took)) = gated {
                    // A call as long as the hook timeout counts as the app overwhelmed.
                    self.hook_gate.observe(started, Sample::Answered(took));
                }
                let Some(h) = self.held.get_mut(&name) else {
                    return;
                };
                let unconfirmed = event == HookEvent::Release
                    && h.phase == (Phase::Stopping { release: true })
                    && result.is_err()
                    && self.hooks.confirms_stop();
                match &result {
                    // An app that confirms its stops may take a while to (a scraper's own
                    // pipeline takes seconds): said as a warning once it has kept the target
                    // a lease duration, until then at debug.
                    Err(error) if unconfirmed => {
                        let since = *h.unconfirmed_since.get_or_insert_with(Instant::now);
                        if since.elapsed() >= self.cfg.lease_duration {
                            tracing::warn!(cluster = %self.cfg.cluster, target = %h.target, %error, waited = ?since.elapsed(), "the app has not confirmed it stopped: keeping the target");
                        } else {
                            tracing::debug!(target = %h.target, %error, "the app has not confirmed it stopped yet: keeping the target");
                        }
                    }
                    Err(error) => {
                        tracing::warn!(cluster = %self.cfg.cluster, target = %h.target, event = event.as_str(), %error, "hook failed");
                    }
                    Ok(()) => h.unconfirmed_since = None,
                }
                match (event, h.phase) {
                    (HookEvent::Acquire, Phase::Starting) => {
                        h.starting = None;
                        h.phase = Phase::Working;
                    }
                    (HookEvent::Release, Phase::Stopping { release: true }) if unconfirmed => {
                        // The app may still work on it: not handed over; the next pass asks
                        // again (the hook's own wait paces it).
                        h.phase = Phase::Working;
                    }
                    (HookEvent::Release, Phase::Stopping { release: true }) => {
                        h.phase = Phase::Releasing;
                    }
                    (HookEvent::Release, Phase::Stopping { release: false }) => {
                        tracing::info!(target = %h.target, "work stopped on a lost lease");
                        self.held.remove(&name);
                    }
                    _ => {}
                }
            }
        }
    }

    /// A failed write: a 409 brings a fresh copy to decide on; anything else waits for the
    /// next pass.
    fn write_failed(&mut self, name: &str, target: &str, what: &str, e: WriteError) {
        match e {
            WriteError::Conflict(fresh) => {
                tracing::debug!(%target, what, "conflict; re-reading");
                if let Some(l) = fresh {
                    self.apply(*l);
                }
            }
            WriteError::NotFound => {
                tracing::info!(%target, what, "lease deleted");
                self.seen.remove(name);
            }
            WriteError::Busy { error, .. } | WriteError::Other(error) => {
                tracing::warn!(%target, what, %error, "lease write failed")
            }
        }
    }

    /// After target Lease write `name` failed with `e`: how long to wait before the next try
    /// (`writes::retry_delay`: jittered, growing with the failures in a row, at least what a
    /// 429 asked, at most `D/3`), or `None` for a 409 or a 404, which are re-decided at once.
    /// The server turned a target Lease write away (429, 5xx, no answer in time): every
    /// target Lease write waits, for a pause that grows with such answers in a row (as one
    /// target's retries do, [`writes::retry_delay`]) and is never shorter than `retry_after`.
    /// Backing off per target alone would go on sending the member's other targets' writes at
    /// the gate's limit — and a server too slow to answer in time still works through the
    /// writes it was sent and their callers gave up, so a member that keeps its limit's worth
    /// in flight keeps its queue full (docs/benchmarks.md, the overload benchmark past its
    /// acceptance). The member Lease's writes never wait for this.
    fn busy(&mut self, retry_after: Option<Duration>) {
        self.busy_in_a_row = self.busy_in_a_row.saturating_add(1);
        let pause = writes::retry_delay(
            self.busy_in_a_row,
            retry_after,
            self.cfg.lease_duration / 3,
            rand::random(),
        );
        self.gate.pause_until(Instant::now() + pause);
    }

    fn backoff(&mut self, name: &str, e: &WriteError) -> Option<Duration> {
        let retry_after = match e {
            WriteError::Conflict(_) | WriteError::NotFound => return None,
            WriteError::Busy { retry_after, .. } => *retry_after,
            WriteError::Other(_) => None,
        };
        let failures = self.failures.entry(name.to_owned()).or_default();
        *failures = failures.saturating_add(1);
        Some(writes::retry_delay(
            *failures,
            retry_after,
            self.cfg.lease_duration / 3,
            rand::random(),
        ))
    }

    /// One decision pass over what changed and what is due; returns when the next one is due
    /// at the latest.
    fn step(&mut self) -> Instant {
        let now = Instant::now();
        let now_ms = self.now_ms();
        let heart_wake = self.step_heart(now);
        self.refresh_authority();
        self.handing_over = None;
        // As many of the waiting handovers as there are free slots, in order: the others would
        // only wait again (a member holding 5,000 revisited them all on every pass, a core's
        // worth of CPU on the real tier while it handed over a hundred a second).
        if !self.handovers_waiting.is_empty() {
            let free = self
                .handover_slots()
                .saturating_sub(self.handovers_under_way());
            for _ in 0..free {
                let Some(name) = self.handovers_waiting.pop_first() else {
                    break;
                };
                self.dirty.insert(name);
            }
        }
        let held = &self.held;
        self.awaiting.retain(|name, _| held.contains_key(name));
        for (name, (_, _, until)) in &self.awaiting {
            if until.is_some_and(|u| u <= now) {
                self.dirty.insert(name.clone());
            }
        }
        let mut dirty = std::mem::take(&mut self.dirty);
        if dirty.contains(&self.plan_name) {
            // The hand-over plan changed: every hold may be concerned.
            dirty.extend(self.held.keys().cloned());
        }
        for name in &dirty {
            if self.held.contains_key(name) {
                self.step_held(name);
            }
        }
        for name in dirty {
            self.classify(name);
        }
        let mut wake = now + TICK.min(self.cfg.lease_duration / 3);
        if let Some(at) = heart_wake {
            wake = wake.min(at);
        }
        if let Some(at) = self
            .awaiting
            .values()
            .filter_map(|(_, _, until)| *until)
            .min()
        {
            wake = wake.min(at.max(now));
        }
        if let Some(at) = self
            .preparing
            .values()
            .filter(|p| p.call.is_none() && !p.proven)
            .filter_map(|p| p.retry_at)
            .min()
        {
            wake = wake.min(at.max(now));
        }
        if self.synced && !self.stopping {
            wake = wake.min(self.acquire_pass(now_ms));
        }
        if let Some(o) = self.overruns.close() {
            self.report_overrun(o);
        }
        wake
    }

    /// Recomputes the authority's deadline in Unix ms when it changed on our clock (a renewal,
    /// a new term, or its end) and publishes it. Computed from the wall clock at that moment,
    /// so a step of the wall clock is taken in at the next renewal.
    fn refresh_authority(&mut self) {
        let now_ms = self.now_ms();
        let deadline = self.heart.auth.deadline().filter(|d| *d > now_ms);
        if deadline == self.authority_ms {
            return;
        }
        self.authority_ms = deadline;
        let until = deadline.map(|d| jiff::Timestamp::now().as_millisecond() + (d - now_ms));
        self.authority.send_replace(until);
    }

    /// Publishes an overrun report as a Kubernetes Event (Warning `PausedPastHold`) about this
    /// member's pod and its member Lease; the member Lease carries it
    /// from its next write on (the control plane records it in history).
    fn report_overrun(&mut self, o: protocol::Overrun) {
        let pod = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            namespace: Some(self.cfg.namespace.clone()),
            name: Some(self.cfg.identity.clone()),
            ..Default::default()
        };
        let lease = Some(ObjectReference {
            api_version: Some("coordination.k8s.io/v1".into()),
            kind: Some("Lease".into()),
            namespace: Some(self.cfg.member_namespace.clone()),
            name: Some(protocol::names::member_lease(
                &self.cfg.lease_prefix,
                &self.cfg.cluster,
                &self.cfg.identity,
            )),
            ..Default::default()
        });
        let recorder = self.events.clone();
        self.tasks.spawn(async move {
            let result = writes::publish_overrun(&recorder, &pod, lease, &o).await;
            Done::Reported { result }
        });
    }

    /// Decides on one held Lease: hand it over when it is no longer desired for us (or on
    /// shutdown), and release it once the work stopped.
    fn step_held(&mut self, name: &str) {
        // Under a hand-over plan, as if the control plane had written the planned desired owner.
        let planned = self
            .seen
            .get(name)
            .and_then(|s| self.planned(&s.lease, &s.view));
        let view = planned
            .as_ref()
            .map(|(_, v)| v)
            .or(self.seen.get(name).map(|s| &s.view));
        // `Keep::Lost` is acted on as soon as the copy showing it arrives (`apply_from`).
        let decision = member::keep(view, &self.cfg.identity, self.stopping);
        let desired = view.and_then(|v| v.desired.clone());
        // The copy a hand-over is written from, under the plan (`Phase::Releasing` is entered
        // when the stop is answered, never within this step).
        let planned_hold = self
            .held
            .get(name)
            .filter(|h| h.phase == Phase::Releasing && !h.writing)
            .and_then(|h| {
                let v = protocol::parse_native(&h.lease, &self.cfg.cluster)?;
                self.planned(&h.lease, &v).map(|(l, _)| l)
            });
        let mut wanted = matches!(decision, Keep::Keep | Keep::Lost);
        let exists = decision != Keep::Gone;
        // A handover waits for a slot (`handover_slots`); on shutdown everything goes.
        let handover = decision == Keep::HandOver && !self.stopping;
        if handover && self.overlap_wait(name) {
            wanted = true;
        } else if !handover {
            self.awaiting.remove(name);
        }
        // A target its next owner already works on (an overlap hand-off, its word given) costs
        // no gap while it stops: it takes no slot, and stops as soon as the word comes — a
        // scraper drops many targets in one pass of its pipeline, not one after another.
        let covered = covered(&self.seen, name);
        // Nor does a stop that waits for its app's proof in-process (`handovers_under_way`).
        let slotless = covered || !self.hooks.limited();
        let full = handover
            && !slotless
            && self
                .held
                .get(name)
                .is_some_and(|h| h.phase == Phase::Working)
            && self.handovers_under_way() >= self.handover_slots();
        if wanted {
            self.handovers_waiting.remove(name);
        }
        let Some(h) = self.held.get_mut(name) else {
            return;
        };
        let mut waits = false;
        if !wanted && h.phase == Phase::Working {
            waits = full;
            if waits {
                self.handovers_waiting.insert(name.to_owned());
            } else {
                self.handovers_waiting.remove(name);
                if let Some(n) = self.handing_over.as_mut().filter(|_| handover && !slotless) {
                    *n += 1;
                }
            }
        }
        if !wanted && h.phase == Phase::Working && !waits {
            if self.stopping {
                tracing::info!(target = %h.target, "shutting down: stopping work");
            } else {
                tracing::info!(target = %h.target, ?desired, "handing over: stopping work");
            }
            h.phase = Phase::Stopping { release: exists };
            spawn_hook(
                &mut self.tasks,
                &self.hooks,
                name,
                h,
                HookEvent::Release,
                call(
                    self.cfg.hook_timeout,
                    &self.authority,
                    self.hooks.limited().then_some(&self.hook_gate),
                ),
            );
        }
        if h.phase == Phase::Releasing && !h.writing {
            if !exists {
                self.held.remove(name);
                self.publish_due = true;
                return;
            }
            h.writing = true;
            // Written with the planned desired owner, if the plan has the target: one write.
            let lease = planned_hold.unwrap_or_else(|| h.lease.clone());
            // When the app last worked on it, if its stops are proven and it knows: written
            // with the hand-over, for history's work-level gap.
            let stopped_at = self
                .hooks
                .confirms_stop()
                .then(|| {
                    let work = Assignment::of(&h.target, &h.lease, None);
                    self.hooks.last_worked_ms(&work)
                })
                .flatten();
            self.spawn_release(name.to_owned(), lease, stopped_at);
        }
    }

    /// `lease` (seen as `view`) as this member acts on it under its hand-over plan, if the plan
    /// has it (`protocol::plan::planned`): its current term's, for a target it holds and that
    /// is still desired for it.
    fn planned(
        &self,
        lease: &Lease,
        view: &protocol::LeaseView,
    ) -> Option<(Lease, protocol::LeaseView)> {
        let plan = self.seen.get(&self.plan_name)?.view.plan.as_deref()?;
        let term = self.heart.lease.as_ref().map(protocol::member_term);
        protocol::plan::planned(Some(plan), lease, view, &self.cfg.identity, term.as_deref())
    }

    /// Keeps `candidates` true for one Lease: in it when not held, not being released as an
    /// orphan, and a target Lease desired for us or held by us.
    fn classify(&mut self, name: String) {
        let me = self.cfg.identity.as_str();
        let candidate = !self.held.contains_key(&name)
            && !self.orphans.contains(&name)
            && self.seen.get(&name).is_some_and(|s| {
                matches!(s.view.role, LeaseRole::Target(_))
                    && (s.view.desired.as_deref() == Some(me)
                        || s.view.holding.holder.as_deref() == Some(me))
            });
        if candidate {
            self.candidates.insert(name);
        } else {
            self.candidates.remove(&name);
        }
    }

    /// Starts acquisitions of the Leases desired for us, and releases stray ones held by us.
    fn acquire_pass(&mut self, now_ms: i64) -> Instant {
        let me = self.cfg.identity.as_str();
        let mut wake_ms = i64::MAX;
        let mut acquire = Vec::new();
        let mut strays = Vec::new();
        let now = Instant::now();
        // Acquire only under a live member Lease, and not while leaving.
        let may_acquire = self.heart.auth.may_take(now_ms);
        // The term we hold our member Lease in now, while we may take targets.
        let term = Some(&self.heart)
            .filter(|_| may_acquire)
            .and_then(|h| h.lease.as_ref())
            .map(protocol::member_term);
        let tenure = self.heart.auth.tenure;
        self.dormant.retain(|_, (t, _)| *t == tenure);
        let mut adopt = Vec::new();
        let mut prepare = Vec::new();
        let mut skipped = Vec::new();
        self.not_before.retain(|_, t| *t > now);
        let candidates = &self.candidates;
        self.handed_wait.retain(|n, _| candidates.contains(n));
        // A hold lasts as long as the member Lease; its duration is that one's.
        let duration = Duration::from_secs(self.cfg.lease_duration.as_secs().max(1));
        for name in &self.candidates {
            if self.not_before.contains_key(name) {
                continue;
            }
            let Some(s) = self.seen.get(name) else {
                continue;
            };
            let LeaseRole::Target(target) = &s.view.role else {
                continue;
            };
            // `protocol::member::take`. Only a copy both watches list is adopted as it is: one
            // watch may still show a Lease the other dropped (its next move already seen, maybe
            // by our own handover, and forgotten).
            let listing = Listing {
                by_all: s.sources == 0b11,
                waiting_until: self.handed_wait.get(name).copied(),
            };
            let resumable = self.dormant.get(name) == Some(&(tenure, s.view.holding.transitions));
            let held = (term.as_deref(), resumable);
            match member::take(&s.view, me, may_acquire, held, listing, now_ms) {
                Take::Skip => skipped.push(name.clone()),
                Take::GiveUp => {
                    skipped.push(name.clone());
                    strays.push((name.clone(), s.lease.clone()));
                }
                Take::Adopt => {
                    self.handed_wait.remove(name);
                    adopt.push((name.clone(), target.clone(), s.lease.clone(), false));
                }
                Take::Resume => adopt.push((name.clone(), target.clone(), s.lease.clone(), true)),
                Take::Wait { until } => {
                    self.handed_wait.insert(name.clone(), until);
                    wake_ms = wake_ms.min(until);
                }
                Take::Acquire => acquire.push((name.clone(), target.clone(), s.lease.clone())),
                Take::Prepare { said } if self.hooks.prepares() => {
                    prepare.push((name.clone(), target.clone(), s.lease.clone(), said));
                }
                Take::Prepare { .. } => skipped.push(name.clone()),
            }
        }
        // Overlap hand-offs to us: kept while the Lease still asks for them, called off
        // otherwise; taken over silently by the acquisition or adoption (the hook lists it).
        let keep: BTreeSet<&String> = prepare.iter().map(|p| &p.0).collect();
        let skipped: BTreeSet<&String> = skipped.iter().collect();
        let taken: BTreeSet<&String> = acquire
            .iter()
            .map(|a| &a.0)
            .chain(adopt.iter().map(|a| &a.0))
            .collect();
        let candidates = &self.candidates;
        let off: Vec<String> = self
            .preparing
            .keys()
            .filter(|n| {
                !candidates.contains(*n)
                    || taken.contains(n)
                    || (skipped.contains(*n) && !keep.contains(n))
            })
            .cloned()
            .collect();
        for name in off {
            if taken.contains(&name) {
                if let Some(p) = self.preparing.remove(&name)
                    && let Some(c) = p.call
                {
                    c.abort();
                }
            } else {
                self.unprepare(&name);
            }
        }
        for (name, target, lease, said) in prepare {
            self.prepare(name, target, &lease, said, term.as_deref());
        }
        for (name, target, lease) in acquire {
            tracing::debug!(%target, "acquiring");
            self.handed_wait.remove(&name);
            self.candidates.remove(&name);
            self.dormant.remove(&name);
            let mut h = Held::new(target, duration, lease.clone(), Phase::Acquiring);
            h.tenure = tenure;
            self.held.insert(name.clone(), h);
            self.spawn_acquire(name, lease, duration);
        }
        for (name, target, lease, resumed) in adopt {
            if resumed {
                tracing::info!(%target, "held when this member's last term lapsed: working on it again");
            } else {
                tracing::info!(%target, "handed over to this member: starting work");
            }
            self.candidates.remove(&name);
            self.dormant.remove(&name);
            let mut h = Held::new(target, duration, lease, Phase::Starting);
            h.starting = Some(spawn_hook(
                &mut self.tasks,
                &self.hooks,
                &name,
                &h,
                HookEvent::Acquire,
                call(
                    self.cfg.hook_timeout,
                    &self.authority,
                    self.hooks.limited().then_some(&self.hook_gate),
                ),
            ));
            self.held.insert(name.clone(), h);
            self.dirty.insert(name);
            self.publish_due = true;
        }
        for (name, lease) in strays {
            tracing::info!(lease = %name, "releasing a lease held by this identity but not desired for it");
            self.candidates.remove(&name);
            self.dormant.remove(&name);
            self.orphans.insert(name.clone());
            self.spawn_release(name, lease, None);
        }
        let delay = u64::try_from(wake_ms.saturating_sub(now_ms)).unwrap_or(0);
        let wake = now + Duration::from_millis(delay.min(3_600_000));
        self.not_before.values().copied().fold(wake, Instant::min)
    }

    /// Acquire, as an owned task within the write budget.
    fn spawn_acquire(&mut self, name: String, lease: Lease, duration: Duration) {
        let api = self.api.clone();
        let me = self.cfg.identity.clone();
        let permits = self.gate.permits();
        self.tasks.spawn(async move {
            let _permit = permits.acquire().await;
            let sent = Instant::now();
            let result = writes::acquire(&api, &name, &lease, &me, duration).await;
            Done::Acquired { name, sent, result }
        });
    }

    /// Release, as an owned task within the write budget.
    fn spawn_release(&mut self, name: String, lease: Lease, stopped_at_ms: Option<i64>) {
        let api = self.api.clone();
        let me = self.cfg.identity.clone();
        let permits = self.gate.permits();
        self.tasks.spawn(async move {
            let _permit = permits.acquire().await;
            let sent = Instant::now();
            let how = writes::LetGo::GiveUp { stopped_at_ms };
            let result = writes::release(&api, &name, lease, &me, how).await;
            Done::Released { name, sent, result }
        });
    }

    /// Keeps the member Lease by `protocol::member::Authority`'s rules. Past the
    /// renew deadline every hold is lost (the work stops; nothing is written), and the next
    /// successful write starts a new term. Writes when due; ends the drain on shutdown.
    /// Returns when it next needs a look.
    fn step_heart(&mut self, now: Instant) -> Option<Instant> {
        let drained = self.held.is_empty();
        if let Some(until) = self.drain_until
            && !self.stopping
            && (drained || now >= until)
        {
            if drained {
                tracing::info!("every target moved away; stopping");
            } else {
                tracing::warn!(
                    targets = self.held.len(),
                    "drain timeout: releasing what was not moved away"
                );
            }
            self.stopping = true;
            self.unprepare_all();
            self.dirty.extend(self.held.keys().cloned());
        }
        let now_ms = self.now_ms();
        if let Some(ended) = self.heart.auth.expire(now_ms) {
            tracing::warn!("member lease not renewed within its renew deadline; stopping all work");
            let ended = self.instant(ended);
            self.lose_all(Some(ended), true);
        }
        let clock = self.clock;
        let heart = &mut self.heart;
        let deadline = heart.auth.deadline().map(|d| instant_at(clock, d));
        // Signing off: no more renewals once nothing is held (the exit releases the Lease).
        if heart.writing || (self.stopping && self.held.is_empty()) {
            return deadline;
        }
        let Some(write) = heart.auth.write_due(now_ms) else {
            let due = instant_at(clock, heart.auth.due());
            return Some(deadline.map_or(due, |d| d.min(due)));
        };
        heart.writing = true;
        let api = self.member_api.clone();
        let current = heart.lease.clone();
        let (prefix, cluster, me) = (
            self.cfg.lease_prefix.clone(),
            self.cfg.cluster.clone(),
            self.cfg.identity.clone(),
        );
        let duration = self.cfg.lease_duration;
        let secs = i32::try_from(duration.as_secs()).unwrap_or(i32::MAX);
        let next = member::member_lease_write(
            current.as_ref(),
            write,
            (&prefix, &cluster, &me),
            jiff::Timestamp::now(),
            secs,
            heart.auth.leaving,
        );
        let sending = heart
            .auth
            .sending(write, now_ms, (current.as_ref(), &next.0), &me);
        let timeout = Duration::from_millis(u64::try_from(heart.auth.write_timeout()).unwrap_or(0));
        let overrun = self.overruns.last();
        let app = self.hooks.work();
        self.tasks.spawn(async move {
            let sent = Instant::now();
            let names = (prefix.as_str(), cluster.as_str(), me.as_str());
            let reports = (overrun.as_ref(), app.as_ref());
            let result = writes::heartbeat(&api, next, names, reports, timeout).await;
            Done::Heartbeat {
                write: sending,
                sent,
                result,
            }
        });
        deadline
    }

    /// A member Lease write came back (`protocol::member::Authority::answered`).
    fn on_heartbeat(
        &mut self,
        mut write: member::Sent,
        sent: Instant,
        result: Result<Lease, WriteError>,
    ) {
        let now = self.now_ms();
        write.at = self.ms_of(sent);
        let me = self.cfg.identity.clone();
        let heart = &mut self.heart;
        heart.writing = false;
        // A 409's fresh copy: who holds our member Lease now.
        let holder = match &result {
            Err(WriteError::Conflict(Some(fresh))) => Some(Holding::of(fresh.spec.as_ref()).holder),
            _ => None,
        };
        let answer = match &result {
            Ok(lease) => Answer::Written(lease),
            Err(WriteError::Conflict(_)) => Answer::Conflict(holder.as_ref().map(Option::as_deref)),
            Err(WriteError::NotFound) => Answer::NotFound,
            Err(WriteError::Busy { error, .. } | WriteError::Other(error)) => {
                tracing::warn!(%error, "member lease write failed");
                Answer::Failed
            }
        };
        // A failed write is retried after a jittered backoff, at least what a 429 asked —
        // within `D/6`, so that a retry still lands within the renew deadline.
        let backoff = match (&answer, &result) {
            (Answer::Failed, Err(e)) => {
                heart.failures = heart.failures.saturating_add(1);
                let retry_after = match e {
                    WriteError::Busy { retry_after, .. } => *retry_after,
                    _ => None,
                };
                let cap =
                    Duration::from_millis(u64::try_from(heart.auth.duration_ms / 6).unwrap_or(0));
                ms(writes::retry_delay(
                    heart.failures,
                    retry_after,
                    cap,
                    rand::random(),
                ))
            }
            _ => {
                heart.failures = 0;
                ms(WRITE_BACKOFF)
            }
        };
        let outcome = heart.auth.answered(write, answer, &me, now, backoff);
        match result {
            Ok(lease) => heart.lease = Some(lease),
            Err(WriteError::Conflict(Some(fresh))) => heart.lease = Some(*fresh),
            Err(WriteError::NotFound) => heart.lease = None,
            Err(_) => {}
        }
        match outcome {
            Outcome::Renewed {
                new_term: true,
                resumes,
            } => {
                tracing::info!(
                    resumes,
                    "member lease held: this member may work{}",
                    if resumes {
                        " (and on what it held when its last term lapsed, without a write)"
                    } else {
                        ""
                    }
                );
                if !resumes {
                    self.dormant.clear();
                }
            }
            Outcome::Lost { ended } => {
                // Fenced by the control plane (or released by an earlier run), or deleted:
                // whatever it decided, this member's holds may be given away now.
                tracing::warn!(
                    holder = ?holder.flatten(),
                    "member lease fenced, taken or deleted: stopping all work and registering again"
                );
                let ended = self.instant(ended);
                self.lose_all(Some(ended), false);
                self.dormant.clear();
            }
            Outcome::Renewed {
                new_term: false, ..
            }
            | Outcome::Retry
            | Outcome::Nothing => {}
        }
    }

    /// Every hold ends (the authority is gone): stop the work, write nothing.
    /// `lapsed`: the renew deadline passed (nobody else wrote the member Lease), so what is
    /// held with no write in flight may be resumed by a next term of the same tenure.
    fn lose_all(&mut self, ended: Option<Instant>, lapsed: bool) {
        self.unprepare_all();
        let tenure = self.heart.auth.tenure;
        for (name, h) in self.held.iter_mut() {
            if lapsed && !h.writing && !matches!(h.phase, Phase::Acquiring | Phase::Releasing) {
                let generation = Holding::of(h.lease.spec.as_ref()).transitions;
                self.dormant.insert(name.clone(), (tenure, generation));
            }
            Self::lose(
                &mut self.tasks,
                &self.hooks,
                call(self.cfg.hook_timeout, &self.authority, None),
                &mut self.overruns,
                name,
                h,
                ended,
            );
            self.dirty.insert(name.clone());
        }
        self.publish_due = true;
    }

    /// Whether held target `name`, to be handed over, is kept working a while longer in an
    /// overlap hand-off (`protocol::member::await_next`): until the next owner says its app
    /// works on it, or the bound passed since we first saw this move (then it is stopped
    /// first, as in an exclusive hand-off, and said).
    fn overlap_wait(&mut self, name: &str) -> bool {
        let Some(view) = self.seen.get(name).map(|s| &s.view) else {
            return false;
        };
        let Some(term) = view.desired_term.clone() else {
            return false;
        };
        if view.overlap_ms.is_none() {
            return false;
        }
        let now = Instant::now();
        let (since, over) = match self.awaiting.get(name) {
            Some((t, since, until)) if *t == term => (*since, until.is_none()),
            _ => (now, false),
        };
        if over {
            return false;
        }
        let waited = ms(now - since);
        match member::await_next(view, waited) {
            Some(left) => {
                let until = now + Duration::from_millis(u64::try_from(left).unwrap_or(0));
                self.awaiting
                    .insert(name.to_owned(), (term, since, Some(until)));
                true
            }
            None => {
                self.awaiting
                    .insert(name.to_owned(), (term.clone(), since, None));
                let said = view.ready.as_ref().is_some_and(|r| r.0 == term);
                let target = self.held.get(name).map(|h| h.target.clone());
                if said {
                    tracing::info!(target = ?target, waited_ms = waited, "overlap hand-off: the next owner's app works on it; stopping ours");
                } else {
                    tracing::warn!(target = ?target, waited_ms = waited, "overlap hand-off: the next owner's app did not prove it works within the bound; stopping ours first");
                }
                false
            }
        }
    }

    /// Starts (or goes on with) an overlap hand-off to us of target Lease `name` at `lease`:
    /// the app is asked to start ahead of it (again after a "not yet"), and once it has
    /// proven it works our word goes on the Lease (`protocol::ready`), unless `said`.
    fn prepare(
        &mut self,
        name: String,
        target: String,
        lease: &Lease,
        said: bool,
        term: Option<&str>,
    ) {
        let Some(term) = term else { return };
        let generation =
            u64::try_from(Holding::of(lease.spec.as_ref()).transitions).unwrap_or(0) + 1;
        let p = self
            .preparing
            .entry(name.clone())
            .or_insert_with(|| Preparing {
                target: target.clone(),
                generation,
                call: None,
                proven: false,
                writing: false,
                retry_at: None,
            });
        if p.call.is_none() && !p.proven && p.retry_at.is_none_or(|t| t <= Instant::now()) {
            tracing::debug!(%target, generation, "overlap hand-off to this member: starting ahead of it");
            let work = Assignment {
                target,
                generation: p.generation,
                deadline_unix_ms: *self.authority.borrow(),
            };
            let call = call(
                self.cfg.hook_timeout,
                &self.authority,
                self.hooks.limited().then_some(&self.hook_gate),
            );
            p.call = Some(spawn_call(
                &mut self.tasks,
                &self.hooks,
                &name,
                work,
                HookEvent::Prepare,
                call,
            ));
            return;
        }
        if p.proven && !said && !p.writing && !self.not_before.contains_key(&name) {
            p.writing = true;
            let api = self.api.clone();
            let lease = lease.clone();
            let term = term.to_owned();
            let duration = self.cfg.lease_duration;
            let permits = self.gate.permits();
            self.tasks.spawn(async move {
                let _permit = permits.acquire().await;
                let sent = Instant::now();
                let at_ms = jiff::Timestamp::now().as_millisecond();
                let result = writes::ready(&api, &name, &lease, (&term, at_ms), duration).await;
                Done::Readied { name, sent, result }
            });
        }
    }

    /// Calls off the overlap hand-off to us of `name`: the app is told to undo its start.
    fn unprepare(&mut self, name: &str) {
        let Some(p) = self.preparing.remove(name) else {
            return;
        };
        if let Some(c) = p.call {
            c.abort();
        }
        tracing::debug!(target = %p.target, "overlap hand-off to this member called off");
        let work = Assignment {
            target: p.target,
            generation: p.generation,
            deadline_unix_ms: *self.authority.borrow(),
        };
        let call = call(self.cfg.hook_timeout, &self.authority, None);
        spawn_call(
            &mut self.tasks,
            &self.hooks,
            name,
            work,
            HookEvent::Unprepare,
            call,
        );
    }

    fn unprepare_all(&mut self) {
        let names: Vec<String> = self.preparing.keys().cloned().collect();
        for name in names {
            self.unprepare(&name);
        }
    }

    /// A `prepare` call answered: proven (our word is written next), or not yet (asked again
    /// at the next pass, the call's own wait pacing it).
    fn on_prepared(&mut self, name: String, event: HookEvent, result: Result<(), String>) {
        if event == HookEvent::Unprepare {
            if let Err(error) = result {
                tracing::warn!(lease = %name, %error, "undoing a start ahead of a hand-over failed");
            }
            return;
        }
        let Some(p) = self.preparing.get_mut(&name) else {
            return;
        };
        p.call = None;
        match result {
            Ok(()) => {
                tracing::info!(target = %p.target, "overlap hand-off: this member's app works on it; saying so");
                p.proven = true;
            }
            Err(error) => {
                tracing::debug!(target = %p.target, %error, "overlap hand-off: not proven yet");
                p.retry_at = Some(Instant::now() + PREPARE_RETRY);
            }
        }
        self.dirty.insert(name);
    }

    /// Our `ready` write answered: the fresh Lease is taken in (a 409 re-decides on it).
    fn on_readied(&mut self, name: String, sent: Instant, result: Result<Lease, WriteError>) {
        let now = Instant::now();
        self.gate
            .observe(sent, WriteError::sample(&result, now - sent));
        self.dirty.insert(name.clone());
        let Some(p) = self.preparing.get_mut(&name) else {
            if let Ok(lease) = result {
                self.apply(lease);
            }
            return;
        };
        p.writing = false;
        let target = p.target.clone();
        match result {
            Ok(lease) => {
                self.busy_in_a_row = 0;
                self.failures.remove(&name);
                self.apply(lease);
            }
            Err(e) => {
                if let WriteError::Busy { retry_after, .. } = &e {
                    self.busy(*retry_after);
                }
                if let Some(pause) = self.backoff(&name, &e) {
                    self.not_before.insert(name.clone(), Instant::now() + pause);
                }
                self.write_failed(&name, &target, "ready", e);
            }
        }
    }

    /// At exit: releases the member Lease, telling the control plane that this
    /// member has stopped all its work (its remaining holds may be revoked at once).
    async fn sign_off(&mut self) {
        let Some(lease) = self.heart.lease.clone() else {
            return;
        };
        let name = protocol::names::member_lease(
            &self.cfg.lease_prefix,
            &self.cfg.cluster,
            &self.cfg.identity,
        );
        let how = writes::LetGo::Release;
        match writes::release(&self.member_api, &name, lease, &self.cfg.identity, how).await {
            Ok(_) => tracing::info!("member lease released"),
            Err(error) => {
                tracing::warn!(%error, "releasing the member lease failed; it will expire")
            }
        }
    }

    fn publish(&self) {
        let working = || self.held.values().filter(|h| h.phase != Phase::Acquiring);
        // Built anew only when it changed: most passes (a hook answered, a write under way)
        // change nothing of it. (Built on every pass, a set of 5,000 names was the member's
        // largest cost while it handed them over; hence also `PUBLISH_EVERY`.)
        let same = {
            let cur = self.published.borrow();
            working().count() == cur.len() && working().all(|h| cur.contains(&h.target))
        };
        if !same {
            let now: BTreeSet<String> = working().map(|h| h.target.clone()).collect();
            self.published.send_replace(now);
        }
    }
}

/// `d` in whole ms, as `protocol::member`'s rules count time.
/// Whether target Lease `name` is in an overlap hand-off whose next owner has said its app
/// works on it (`leasehold.io/ready-term` equal to the desired term).
fn covered(seen: &BTreeMap<String, Seen>, name: &str) -> bool {
    seen.get(name).is_some_and(|s| {
        let v = &s.view;
        v.overlap_ms.is_some()
            && v.desired_term.is_some()
            && v.ready.as_ref().map(|r| &r.0) == v.desired_term.as_ref()
    })
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// The instant `ms` after `clock` (the member's clock origin); before it, the origin.
fn instant_at(clock: Instant, ms: i64) -> Instant {
    clock + Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

/// How a hook is called now: its bound, the authority's deadline it carries, and the limit it
/// waits for (none for a stop for a lost authority).
struct Call {
    timeout: Duration,
    /// Unix ms ([`Assignment::deadline_unix_ms`]).
    until: Option<i64>,
    permits: Option<Permits>,
}

/// A hook call bounded by `timeout` that carries the deadline `authority` publishes and waits
/// for a slot of `gate`, if given.
fn call(timeout: Duration, authority: &watch::Sender<Option<i64>>, gate: Option<&Gate>) -> Call {
    Call {
        timeout,
        until: *authority.borrow(),
        permits: gate.map(Gate::permits),
    }
}

/// Runs one hook as an owned task and reports back.
fn spawn_hook(
    tasks: &mut JoinSet<Done>,
    hooks: &Arc<dyn Hooks>,
    name: &str,
    h: &Held,
    event: HookEvent,
    call: Call,
) -> AbortHandle {
    // The generation of our hold: the Lease as our acquiring write (or the handover to us) left
    // it.
    let work = Assignment::of(&h.target, &h.lease, call.until);
    spawn_call(tasks, hooks, name, work, event, call)
}

/// Runs one hook call for `work` as an owned task and reports back.
fn spawn_call(
    tasks: &mut JoinSet<Done>,
    hooks: &Arc<dyn Hooks>,
    name: &str,
    work: Assignment,
    event: HookEvent,
    call: Call,
) -> AbortHandle {
    let hooks = hooks.clone();
    let name = name.to_owned();
    tasks.spawn(async move {
        let permit = match &call.permits {
            Some(p) => p.acquire().await,
            None => None,
        };
        let started = Instant::now();
        let result = call_bounded(hooks, event, work, call.timeout).await;
        let gated = permit.map(|_| (started, started.elapsed()));
        Done::Hook {
            name,
            event,
            result,
            gated,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::hooks::NoHooks;
    use crate::model::Cause;
    use crate::protocol::Desire;

    fn member() -> Member {
        member_with(AgentConfig::new("c", "apps", "c-1"))
    }

    fn member_with(cfg: AgentConfig) -> Member {
        member_hooked(cfg, Arc::new(NoHooks))
    }

    fn member_hooked(cfg: AgentConfig, hooks: Arc<dyn Hooks>) -> Member {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        Member::new(
            client,
            cfg,
            hooks,
            watch::channel(BTreeSet::new()).0,
            (watch::channel(None).0, watch::channel(0).0),
            None,
        )
    }

    fn at_rv(mut lease: Lease, rv: u64) -> Lease {
        lease.metadata.resource_version = Some(rv.to_string());
        lease
    }

    fn desired(m: &Member, name: &str) -> Option<String> {
        m.seen.get(name).and_then(|s| s.view.desired.clone())
    }

    /// The control plane moves a target held by c-1 to c-2: the watch by desired owner stops
    /// listing it and sends the pre-change content under the new resourceVersion (as the
    /// kube-apiserver's watch cache does); the watch by holder sends the change. In either
    /// order, the member must end with the change — the old content at the new version once
    /// hid it (the move was never noticed and the release wrote the old desired owner back).
    #[tokio::test]
    async fn a_watch_that_stops_listing_a_lease_does_not_hide_the_change_the_other_brings() {
        let desire = |owner: &str| Desire {
            overlap_ms: None,
            term: None,
            owner: owner.to_owned(),
            cause: Cause::Initial,
            operation: None,
            duration_s: 2,
        };
        let created = protocol::new_target_lease("leasehold", "c", "t-1", &desire("c-1"));
        let held = at_rv(
            protocol::acquired(&created, "c-1", jiff::Timestamp::now(), 2),
            10,
        );
        let moved = at_rv(protocol::with_desire(&held, &desire("c-2")), 11);
        // What the desired-owner watch sends: the old content, the new version.
        let unlisted = at_rv(held.clone(), 11);
        let name = held.metadata.name.clone().unwrap();
        for delete_first in [true, false] {
            let mut m = member();
            let mut init = Vec::new();
            m.on_event(Event::Apply(held.clone()), 0, &mut init);
            m.on_event(Event::Apply(held.clone()), 1, &mut init);
            assert_eq!(desired(&m, &name).as_deref(), Some("c-1"));
            let events = [
                (Event::Delete(unlisted.clone()), 0),
                (Event::Apply(moved.clone()), 1),
            ];
            let order: Vec<_> = if delete_first {
                events.into_iter().collect()
            } else {
                events.into_iter().rev().collect()
            };
            for (ev, source) in order {
                m.on_event(ev, source, &mut init);
            }
            assert_eq!(
                desired(&m, &name).as_deref(),
                Some("c-2"),
                "delete first: {delete_first}"
            );
            assert_eq!(m.seen[&name].sources, 0b10);
            // Once the holder watch stops listing it too (released), it is forgotten.
            m.on_event(Event::Delete(at_rv(moved.clone(), 12)), 1, &mut init);
            assert!(!m.seen.contains_key(&name));
        }
    }
    /// A target handed to this member under its current term, and listed by both its watches,
    /// is worked on at once, with no write of its own; one handed under another term (an
    /// earlier one, or a term the control plane saw before this member registered again) is
    /// acquired by a write first. Listed by one watch only (a copy the other watch may already
    /// have moved past), it is neither worked on nor written at first: once the other watch
    /// lists it too it is adopted without a write (a write there was a second acquisition per
    /// handover, recorded twice in history); if the other watch has not listed it after
    /// `protocol::member::HANDED_WAIT_MS`, it is acquired by a write.
    #[tokio::test]
    async fn a_target_handed_over_under_this_members_term_is_worked_on_without_a_write() {
        let mut heart =
            protocol::new_member_lease("leasehold", "c", "c-2", jiff::Timestamp::now(), 2, false);
        heart.metadata.uid = Some("u-2".into());
        let term = protocol::member_term(&heart);
        #[derive(Debug, Clone, Copy, PartialEq)]
        enum Listed {
            Both,
            OneThenOther,
            OneOnly,
        }
        for (handed, listed, adopted) in [
            (term.as_str(), Listed::Both, true),
            (term.as_str(), Listed::OneThenOther, true),
            (term.as_str(), Listed::OneOnly, false),
            ("7@u-2", Listed::Both, false),
            ("0@u-old", Listed::Both, false),
        ] {
            let mut m = member();
            m.cfg.identity = "c-2".into();
            let now_ms = m.now_ms();
            {
                let h = &mut m.heart;
                h.lease = Some(heart.clone());
                h.auth.renewed = Some(now_ms);
            }
            m.synced = true;
            let desire = Desire {
                overlap_ms: None,
                term: Some(handed.to_owned()),
                owner: "c-2".to_owned(),
                cause: Cause::Rebalance,
                operation: None,
                duration_s: 2,
            };
            let created = protocol::new_target_lease("leasehold", "c", "t-1", &desire);
            let held = protocol::acquired(&created, "c-1", jiff::Timestamp::now(), 2);
            let out = at_rv(protocol::given_up(&held, "c-1", jiff::Timestamp::now()), 12);
            let name = out.metadata.name.clone().unwrap();
            m.on_event(Event::Apply(out.clone()), 1, &mut Vec::new());
            if listed == Listed::Both {
                m.on_event(Event::Apply(out.clone()), 0, &mut Vec::new());
            } else {
                // One watch lists it: no work, no write yet.
                m.step();
                assert!(!m.held.contains_key(&name), "{listed:?}: waits");
                match listed {
                    Listed::OneThenOther => {
                        m.on_event(Event::Apply(out.clone()), 0, &mut Vec::new());
                    }
                    // The other watch stays silent past the wait (our clock moved on).
                    _ => m.clock -= Duration::from_millis(member::HANDED_WAIT_MS as u64 + 50),
                }
            }
            m.step();
            let h = &m.held[&name];
            if adopted {
                assert_eq!(h.phase, Phase::Starting, "handed under {handed}");
                assert!(!h.writing);
                assert_eq!(h.lease, out, "works at the handed generation");
            } else {
                assert_eq!(
                    h.phase,
                    Phase::Acquiring,
                    "handed under {handed}, listed: {listed:?}"
                );
                assert!(h.writing);
            }
        }
    }

    /// Hooks whose calls are in-process waits for the app's proof (`Hooks::limited` false,
    /// as the scrape kind's).
    struct InProcess;

    impl Hooks for InProcess {
        fn on_acquire(
            &self,
            _work: &Assignment,
        ) -> futures::future::BoxFuture<'_, Result<(), String>> {
            futures::future::ready(Ok(())).boxed()
        }
        fn on_release(
            &self,
            _work: &Assignment,
        ) -> futures::future::BoxFuture<'_, Result<(), String>> {
            futures::future::ready(Ok(())).boxed()
        }
        fn limited(&self) -> bool {
            false
        }
    }

    /// Ten held targets of `m`, each moved away by the control plane (`c-1` → `c-2`).
    fn moved_away(m: &mut Member) -> Vec<String> {
        let desire = |owner: &str| Desire {
            overlap_ms: None,
            term: None,
            owner: owner.to_owned(),
            cause: Cause::Rebalance,
            operation: None,
            duration_s: 2,
        };
        let now = jiff::Timestamp::now();
        let mut names = Vec::new();
        for i in 0..10 {
            let created =
                protocol::new_target_lease("leasehold", "c", &format!("t-{i}"), &desire("c-1"));
            let held = at_rv(protocol::acquired(&created, "c-1", now, 2), 10 + i);
            let moved = at_rv(protocol::with_desire(&held, &desire("c-2")), 100 + i);
            let name = held.metadata.name.clone().unwrap();
            let mut h = Held::new(
                format!("t-{i}"),
                Duration::from_secs(2),
                held,
                Phase::Working,
            );
            h.renewed = Instant::now();
            m.held.insert(name.clone(), h);
            m.on_event(Event::Apply(moved), 1, &mut Vec::new());
            names.push(name);
        }
        names
    }

    /// A target the control plane moves by this member's hand-over plan (still desired for
    /// the member) is stopped once the plan is seen, and handed over in one write that also
    /// names its next owner as desired owner; a plan of another term of the member is not
    /// acted on.
    #[tokio::test]
    async fn a_planned_target_is_handed_over_with_its_desired_owner_in_one_write() {
        use crate::protocol::plan::{self, Destination, Plan};
        let mut heart =
            protocol::new_member_lease("leasehold", "c", "c-1", jiff::Timestamp::now(), 2, true);
        heart.metadata.uid = Some("u-1".into());
        let term = protocol::member_term(&heart);
        for (plan_term, acted) in [(term.as_str(), true), ("9@u-0", false)] {
            let mut m = member();
            m.heart.lease = Some(heart.clone());
            // Held, desired for it: nothing to do without the plan.
            let desire = Desire {
                overlap_ms: None,
                term: None,
                owner: "c-1".into(),
                cause: Cause::Initial,
                operation: None,
                duration_s: 2,
            };
            let created = protocol::new_target_lease("leasehold", "c", "t-0", &desire);
            let held = at_rv(
                protocol::acquired(&created, "c-1", jiff::Timestamp::now(), 2),
                10,
            );
            let name = held.metadata.name.clone().unwrap();
            let mut h = Held::new(
                "t-0".into(),
                Duration::from_secs(2),
                held.clone(),
                Phase::Working,
            );
            h.renewed = Instant::now();
            m.held.insert(name.clone(), h);
            m.on_event(Event::Apply(held.clone()), 1, &mut Vec::new());
            m.step();
            assert_eq!(phases(&m), (0, 1), "no plan: kept");
            let plan = Plan {
                member: "c-1".into(),
                term: plan_term.into(),
                duration_s: 2,
                moves: BTreeMap::from([(
                    "t-0".to_owned(),
                    Destination {
                        owner: "c-2".into(),
                        term: "3@u-2".into(),
                    },
                )]),
            };
            let plan_lease = at_rv(plan::lease("leasehold", "c", &plan), 20);
            m.on_event(Event::Apply(plan_lease), 0, &mut Vec::new());
            m.step();
            let want = if acted { (1, 0) } else { (0, 1) };
            assert_eq!(phases(&m), want, "plan of term {plan_term}");
            if !acted {
                continue;
            }
            // What the hand-over writes: holder and desired owner both the next owner.
            let view = protocol::parse_native(&held, "c").unwrap();
            let (lease, _) = m.planned(&held, &view).expect("planned");
            let written = protocol::given_up(&lease, "c-1", jiff::Timestamp::now());
            let after = protocol::parse_native(&written, "c").unwrap();
            assert_eq!(after.holding.holder.as_deref(), Some("c-2"));
            assert_eq!(after.desired.as_deref(), Some("c-2"));
            assert_eq!(after.handed_term.as_deref(), Some("3@u-2"));
            assert_eq!(written.metadata.resource_version.as_deref(), Some("10"));
        }
    }

    /// (stopping for a handover, still working)
    fn phases(m: &Member) -> (usize, usize) {
        let stopping = m
            .held
            .values()
            .filter(|h| matches!(h.phase, Phase::Stopping { release: true }))
            .count();
        let working = m
            .held
            .values()
            .filter(|h| h.phase == Phase::Working)
            .count();
        (stopping, working)
    }

    /// A stop that waits in-process for its app's proof (the scrape kind's: Prometheus drops
    /// many targets in one pass of its pipeline, 5–15 s) takes no handover slot: every target
    /// moved away begins stopping at once, and only the handover writes count against the
    /// limit. (Each proven stop once held a slot, and a leaving member holding 75 targets
    /// handed 19 over within a 40 s drain.)
    #[tokio::test]
    async fn stops_that_wait_for_their_apps_proof_take_no_handover_slot() {
        let mut m = member_hooked(AgentConfig::new("c", "apps", "c-1"), Arc::new(InProcess));
        let names = moved_away(&mut m);
        m.step();
        assert_eq!(phases(&m), (10, 0));
        // Their writes do take slots: with every stop done, the writes under way are counted.
        for n in &names {
            m.held.get_mut(n).unwrap().phase = Phase::Releasing;
        }
        m.handing_over = None;
        assert_eq!(m.handovers_under_way(), 10);
    }

    /// Targets moved away are handed over [`HANDOVERS_AT_START`] at a time at first: the
    /// others stay worked on (no `on_release`, nothing written) until one of those under way
    /// is released; when the API server's answers turn slow the limit, and with it the
    /// handovers begun, comes down (and it grows with prompt answers:
    /// `the_handover_limit_grows_with_prompt_answers`); on shutdown everything is stopped at
    /// once.
    #[tokio::test]
    async fn targets_moved_away_are_handed_over_as_fast_as_writes_are_answered() {
        let mut m = member();
        let slots = m.handover_slots();
        assert_eq!(slots, HANDOVERS_AT_START);
        let mut names = moved_away(&mut m);
        // Two handovers under way end (released and forgotten).
        let end_two = |m: &mut Member, names: &mut Vec<String>| {
            let done: Vec<String> = names
                .iter()
                .filter(|n| m.held[*n].phase != Phase::Working)
                .take(2)
                .cloned()
                .collect();
            for n in &done {
                m.held.remove(n);
            }
            names.retain(|n| !done.contains(n));
        };
        m.step();
        assert_eq!(phases(&m), (slots, 10 - slots));
        // Nothing new while all slots are taken, however often the member looks.
        m.dirty.extend(names.iter().cloned());
        m.step();
        assert_eq!(phases(&m), (slots, 10 - slots));
        // Two handovers end: two more begin.
        end_two(&mut m, &mut names);
        m.step();
        assert_eq!(phases(&m), (slots, 8 - slots));
        // The server turns slow (a handover write refused for load): the limit comes down to
        // 2, so two more ending begin none while 2 are still under way.
        let t = std::time::Instant::now();
        m.handovers
            .observe(t, crate::k8s::pacing::Sample::Overloaded, t);
        assert_eq!(m.handover_slots(), 2);
        end_two(&mut m, &mut names);
        m.dirty.extend(names.iter().cloned());
        m.step();
        assert_eq!(phases(&m), (2, 4));
        // Shutting down: the rest stop at once.
        m.stopping = true;
        m.dirty.extend(names.iter().cloned());
        m.step();
        assert_eq!(phases(&m), (6, 0));
    }

    /// Handover writes answered promptly let more handovers begin at once, up to
    /// `--max-parallel`: a member stopping thousands of targets hands them over as fast as the
    /// API server answers.
    #[test]
    fn the_handover_limit_grows_with_prompt_answers() {
        let mut cfg = AgentConfig::new("c", "apps", "c-1");
        cfg.max_parallel = 12;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let _guard = rt.enter();
        let mut m = member_with(cfg);
        assert_eq!(m.handover_slots(), HANDOVERS_AT_START);
        let mut grew = vec![m.handover_slots()];
        for _ in 0..200 {
            let t = std::time::Instant::now();
            m.handovers.observe(
                t,
                crate::k8s::pacing::Sample::Answered(Duration::from_millis(5)),
                t,
            );
            m.handovers.cap(m.cfg.max_parallel);
            grew.push(m.handover_slots());
        }
        assert!(grew.windows(2).all(|w| w[0] <= w[1]), "{grew:?}");
        assert_eq!(m.handover_slots(), 12, "capped at --max-parallel");
    }
}
