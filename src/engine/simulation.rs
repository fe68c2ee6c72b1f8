//! A seeded deterministic simulation of the member protocol (tests only): the control plane's real
//! decision core — the [`Index`] fed watch events at the control plane's own clock, with watch
//! probes, [`placement::decide_guarded`] and [`placement::LapseWatch`] — and the members' real
//! decision core — [`protocol::member`]'s `Authority`, `take` and `keep`, the functions
//! `leasehold agent` runs — against a modelled API server and modelled member processes, on
//! virtual time. Every Lease is built by the real `protocol` functions; every write is a
//! compare-and-swap on `resourceVersion`.
//!
//! Modelled, not run: the API server (one store, CAS, ordered watch streams); the member
//! processes around their decisions (requests awaited as long as the agent's: `2D/3` for an
//! acquisition or a member Lease write, `D/3` for a release; answers, one ordered
//! watch of every target Lease and of its hand-over plan, an app that works from the start of
//! the work to its stop, a planned stop's drain: say `leaving`, hand each target over as its
//! plan says, wait until everything was moved away or the drain timeout, then release the
//! member Lease and exit); and the control plane's writes (the read-decide-CAS sequences of
//! `k8s::leases`: a fence only of the exact record the index saw expire, a revoke only after
//! reading the member Lease fenced or released, a plan written or deleted only at the copy it
//! decided on).
//!
//! Faults, each placed by the seed: member crashes (some restart as a new process), planned
//! stops (some restart), network partitions of one member (what it sent meanwhile is delivered
//! when the link heals, as a blackholed TCP connection does), stalls of a member's process
//! (SIGSTOP: it takes in nothing until it resumes, its app goes on), an API server slow for
//! every member at once (a mass lapse), a lagging control-plane watch (silently stale),
//! control-plane crashes and restarts (a new index from a fresh list, a new lapse watch), and
//! every clock running at its own rate within ±ρ. Members can be run with a rule broken on
//! purpose ([`Broken`]) to show that the checker catches what the rule prevents. Invariants:
//! never two members' apps *working* on one target at once — except beside a stalled member's
//! app at a larger fencing generation (fenced, counted apart); once every fault has healed,
//! every target is worked on by exactly one live member within a bound; and when only the API
//! server was slow, healthy members are fenced in few seeds (docs/protocol.md says which
//! pattern still does it).

// Leases travel by value in events and answers: a simulation, not a hot path.
#![allow(clippy::large_enum_variant, clippy::result_large_err)]

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashSet};
use std::path::Path;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng as _};
use serde_json::json;

use super::placement::{self, Action, LapseWatch};
use crate::config::Config;
use crate::k8s::index::{Index, Kind};
use crate::protocol::member::{self, Acquired, Answer, Authority, Keep, Listing, Outcome, Take};
use crate::protocol::{self, Fence, Holding};

const PREFIX: &str = "leasehold";
const CLUSTER: &str = "c";
const NS: &str = "ns";
/// The lease duration `D` (ms).
const D: i64 = 3_000;
/// Clock-rate bound: every clock runs at a rate within 1 ± RHO of real time.
const RHO: f64 = 0.02;
/// A leaving member's drain timeout (ms, its own clock): it then stops and releases what was
/// not moved away.
const DRAIN: i64 = 3 * D;
/// A member's pause before retrying a member Lease write that failed (ms, its own clock), as
/// the agent's.
const BACKOFF: i64 = 250;
/// Wall-clock epoch of the simulation (ms), so timestamps look like real ones.
const EPOCH_MS: i64 = 1_790_000_000_000;

/// Who a request is from, and what to do with its answer.
#[derive(Debug, Clone)]
enum Ev {
    /// A member's timers and decisions (only the latest wake scheduled counts).
    MemberWake(usize, u64),
    /// A member's request reaches the server.
    MemberArrive { m: usize, id: u64, req: MemberReq },
    /// The answer reaches the member.
    MemberAnswer {
        m: usize,
        id: u64,
        req: MemberReq,
        result: Result<Lease, Option<Lease>>,
    },
    /// A member's request got no answer in time.
    MemberTimeout { m: usize, id: u64 },
    /// A Lease change reaches a member's watch.
    MemberWatch { m: usize, lease: Lease },
    /// A Lease change (or a probe) reaches the control plane's watch.
    CpWatch { epoch: u64, item: WatchItem },
    /// The control plane's pass.
    CpPass(u64),
    /// The control plane's probe timer.
    CpProbe(u64),
    /// Its probe write reaches the server (and its watch, in order).
    CpProbeCommitted { epoch: u64, sent: i64 },
    /// A step of one control-plane write reaches the server.
    CpArrive { epoch: u64, w: usize },
    /// Its answer reaches the control plane.
    CpAnswer {
        epoch: u64,
        w: usize,
        read: Option<Lease>,
        ok: bool,
    },
    /// A fault starts or ends.
    Fault(FaultEv),
}

#[derive(Debug, Clone)]
enum WatchItem {
    Lease(Box<Lease>),
    /// A Lease deleted (by name).
    Deleted(String),
    Probe(i64),
}

#[derive(Debug, Clone)]
enum MemberReq {
    Heartbeat {
        sent: member::Sent,
        lease: Lease,
        create: bool,
    },
    Acquire {
        target: String,
        lease: Lease,
        /// The member's tenure when it sent it (`member::after_acquire`).
        tenure: u64,
    },
    Release {
        lease: Lease,
    },
    /// The member Lease released at the end of a planned stop.
    SignOff {
        lease: Lease,
    },
}

#[derive(Debug, Clone, Copy)]
enum FaultEv {
    Crash {
        m: usize,
        restart_after: Option<i64>,
    },
    Restart(usize),
    Partition {
        m: usize,
        heal_after: i64,
    },
    Heal(usize),
    SlowAll {
        extra: i64,
        for_ms: i64,
    },
    SlowOver(i64),
    CpLag {
        extra: i64,
        for_ms: i64,
    },
    CpLagOver(i64),
    CpCrash {
        restart_after: i64,
    },
    CpRestart,
    /// A planned stop (SIGTERM): the member says it is leaving, its targets are moved away by
    /// handoffs, it signs off and exits (and maybe starts again later).
    Leave {
        m: usize,
        restart_after: Option<i64>,
    },
    /// The member's process stalls (SIGSTOP, a GC pause) for `for_ms`; its app does not.
    Stall {
        m: usize,
        for_ms: i64,
    },
    /// The stall ends (SIGCONT).
    Resume(usize),
}

impl FaultEv {
    /// How long after it starts a fault has healed (0: never, or at once).
    fn lasts(&self) -> i64 {
        match *self {
            FaultEv::Crash { restart_after, .. } => restart_after.unwrap_or(0),
            FaultEv::Partition { heal_after, .. } => heal_after,
            FaultEv::SlowAll { for_ms, .. } | FaultEv::CpLag { for_ms, .. } => for_ms,
            FaultEv::CpCrash { restart_after } => restart_after,
            FaultEv::Leave { restart_after, .. } => DRAIN + restart_after.unwrap_or(0),
            FaultEv::Stall { for_ms, .. } => for_ms,
            _ => 0,
        }
    }
}

/// One member: a process with its own clock, its member Lease and its holds.
struct Member {
    name: String,
    clock: Clock,
    alive: bool,
    /// Requests sent while partitioned wait here until the link heals.
    partitioned: bool,
    /// Our copy of our member Lease (`None`: create it).
    heart: Option<Lease>,
    /// The member Lease's clock, by `protocol::member`'s rules (on the member's local time).
    auth: Authority,
    /// The member Lease write in flight: its request id and what was sent.
    heart_in_flight: Option<(u64, member::Sent)>,
    /// Target Leases as our watch shows them.
    view: BTreeMap<String, Lease>,
    /// Targets we hold and work on.
    working: BTreeSet<String>,
    /// Targets held when a term lapsed (or acquired after it), not written since: tenure and
    /// generation (`member::Take::Resume`).
    dormant: BTreeMap<String, (u64, i32)>,
    /// Requests in flight (id → target, for acquires and releases).
    in_flight: BTreeMap<u64, String>,
    next_wake: Option<i64>,
    wake_token: u64,
    /// A planned stop: since when (local time) it has been leaving, and when it starts again
    /// after exiting (true time after the exit), if it does.
    leaving: Option<(i64, Option<i64>)>,
    /// Stalled (SIGSTOP, a long GC pause) until this true time: the member decides nothing,
    /// its timers, answers and watch events wait; its app goes on working.
    stalled_until: Option<i64>,
}

/// A party's clock: its own rate and origin, against the simulation's true time.
#[derive(Debug, Clone, Copy)]
struct Clock {
    rate: f64,
    offset: i64,
}

impl Clock {
    fn new(rng: &mut StdRng) -> Clock {
        Clock {
            rate: 1.0 + rng.random_range(-RHO..RHO),
            offset: rng.random_range(0..1_000_000),
        }
    }
    /// Its reading at true time `t` (ms).
    fn local(&self, t: i64) -> i64 {
        self.offset + (t as f64 * self.rate) as i64
    }
    /// The true time at which it reads `local`.
    fn true_at(&self, local: i64) -> i64 {
        ((local - self.offset) as f64 / self.rate).ceil() as i64
    }
    /// Its reading at `t` as a wall-clock timestamp.
    fn ts(&self, t: i64) -> Timestamp {
        Timestamp::from_millisecond(EPOCH_MS + self.local(t)).unwrap()
    }
}

impl Member {
    fn local(&self, t: i64) -> i64 {
        self.clock.local(t)
    }
    fn true_at(&self, local: i64) -> i64 {
        self.clock.true_at(local)
    }
}

/// One control-plane write in progress (the steps of `k8s::leases`).
#[derive(Debug, Clone)]
struct CpWrite {
    action: Action,
    step: Step,
    /// The target Lease as read (its version is the CAS's).
    target: Option<Lease>,
    tries: usize,
    done: bool,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Step {
    /// GET the Lease the action is about (the member Lease for a fence, the target otherwise).
    Read,
    /// GET the holder's member Lease (revocations).
    ReadMember,
    /// PUT.
    Write,
}

struct ControlPlane {
    epoch: u64,
    clock: Clock,
    index: Index,
    lapse: LapseWatch,
    /// Writes of the current batch.
    writes: Vec<CpWrite>,
    /// The second batch (everything but fences), waiting for the first.
    rest: Vec<Action>,
}

impl ControlPlane {
    fn local(&self, t: i64) -> i64 {
        self.clock.local(t)
    }
    fn ts(&self, t: i64) -> Timestamp {
        self.clock.ts(t)
    }
}

/// What one seed's run saw.
#[derive(Debug, Default, Clone)]
pub struct Report {
    pub events: u64,
    pub faults: Vec<String>,
    pub overlaps: Vec<String>,
    pub fences: Vec<(i64, String)>,
    pub not_converged: Option<String>,
    pub failovers_of_healthy: Vec<String>,
    /// Targets a leaving member stopped working on: how long until the next owner started (ms),
    /// and how many were given up at the drain timeout instead.
    pub planned_gaps: Vec<i64>,
    pub drained_by_timeout: usize,
    /// Moments a member started work on a target whose stalled former owner's app still
    /// worked on it, at a larger fencing generation (the app can refuse the stale owner's
    /// writes): what a stall past the deadline costs, told apart from `overlaps`.
    pub fenced_overlaps: usize,
    /// Members that found, on resuming, their authority ended by their own clock (the overrun
    /// the agent reports): they told their apps to stop then.
    pub overruns: usize,
    /// Targets worked on again without a write by a new term of their holder's tenure
    /// (`member::Take::Resume`), and taken again by a write while still naming their
    /// member (an earlier term's hold that could not be resumed).
    pub resumed: usize,
    pub retaken: usize,
    /// Hand-overs a stopping member made by its hand-over plan (`protocol::plan`): the desired
    /// owner written with the hand-over, one write.
    pub planned_moves: usize,
}

struct Sim {
    rng: StdRng,
    t: i64,
    seq: u64,
    queue: BinaryHeap<Reverse<(i64, u64)>>,
    events: BTreeMap<u64, Ev>,
    store: BTreeMap<String, Lease>,
    rv: u64,
    members: Vec<Member>,
    cp: Option<ControlPlane>,
    cp_epochs: u64,
    /// The control plane's watch stream: the last delivery time (watch order is kept).
    cp_watch_last: i64,
    /// Spells of control-plane watch lag in force (ms each).
    lags: Vec<i64>,
    member_watch_last: Vec<i64>,
    /// Spells of a slow API server in force (extra ms each way).
    slows: Vec<i64>,
    /// A deliberately broken member rule, to show the checker catches it.
    broken: Option<Broken>,
    /// Requests held by partitions, per member: (id, request).
    held: Vec<Vec<(u64, MemberReq)>>,
    next_id: u64,
    /// Who works on what, from when (true time).
    /// Who works on each target: since when, at which fencing generation.
    work: BTreeMap<String, BTreeMap<String, (i64, i32)>>,
    /// The largest fencing generation each target was worked on at so far, and by whom.
    generations: BTreeMap<String, (i32, String)>,
    config: Config,
    targets: Vec<String>,
    report: Report,
    /// Members ever crashed or partitioned (a fence of any other is of a healthy member).
    faulted: HashSet<usize>,
    /// Targets a leaving member stopped working on, and when (true time).
    handed: BTreeMap<String, i64>,
}

fn config(targets: &[String]) -> Config {
    let list = targets.join(", ");
    let yaml = format!(
        "clusters:\n- name: {CLUSTER}\n  namespace: {NS}\n  selector: {{app: c}}\n  headless_service: c\n  \
         targets: {{inline: [{list}]}}\n  \
         policy: {{lease_duration: {}s, on_join: off}}\n",
        D / 1000
    );
    Config::parse(&yaml, Path::new("sim.yaml")).expect("simulation config")
}

fn pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": NS, "labels": {"app": "c"}, "uid": format!("uid-{name}"),
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "c", "uid": "u"}]},
        "spec": {"containers": [], "nodeName": "node-1"},
        "status": {"phase": "Running", "podIP": "10.0.0.9",
            "conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .expect("pod")
}

fn holder(l: &Lease) -> Option<String> {
    Holding::of(l.spec.as_ref()).holder
}

fn rv(l: &Lease) -> Option<&str> {
    l.metadata.resource_version.as_deref()
}

impl Sim {
    fn new(seed: u64, n: usize, targets: usize) -> Sim {
        let mut rng = StdRng::seed_from_u64(seed);
        let targets: Vec<String> = (0..targets).map(|i| format!("t-{i:02}")).collect();
        let members = (0..n)
            .map(|i| Member {
                name: format!("c-{i}"),
                clock: Clock::new(&mut rng),
                alive: true,
                partitioned: false,
                heart: None,
                auth: Authority::new(D),
                heart_in_flight: None,
                view: BTreeMap::new(),
                working: BTreeSet::new(),
                dormant: BTreeMap::new(),
                in_flight: BTreeMap::new(),
                next_wake: None,
                wake_token: 0,
                leaving: None,
                stalled_until: None,
            })
            .collect();
        let config = config(&targets);
        Sim {
            rng,
            t: 0,
            seq: 0,
            queue: BinaryHeap::new(),
            events: BTreeMap::new(),
            store: BTreeMap::new(),
            rv: 0,
            members,
            cp: None,
            cp_epochs: 0,
            cp_watch_last: 0,
            lags: Vec::new(),
            member_watch_last: vec![0; n],
            slows: Vec::new(),
            broken: None,
            held: vec![Vec::new(); n],
            next_id: 0,
            work: BTreeMap::new(),
            generations: BTreeMap::new(),
            config,
            targets,
            report: Report::default(),
            faulted: HashSet::new(),
            handed: BTreeMap::new(),
        }
    }

    fn at(&mut self, t: i64, ev: Ev) {
        self.seq += 1;
        self.queue.push(Reverse((t.max(self.t), self.seq)));
        self.events.insert(self.seq, ev);
    }

    /// Extra delay of every request and answer each way now (the slowest spell in force).
    fn slow_extra(&self) -> i64 {
        self.slows.iter().copied().max().unwrap_or(0)
    }

    /// Extra delay of the control plane's watch now.
    fn cp_lag(&self) -> i64 {
        self.lags.iter().copied().max().unwrap_or(0)
    }

    fn net(&mut self) -> i64 {
        self.rng.random_range(1..15)
    }

    // ---- the API server ----

    /// A compare-and-swap write (`expect`: the version read; `None`: create). Returns the
    /// stored Lease, or the current one on a conflict.
    fn server_write(&mut self, lease: &Lease, create: bool) -> Result<Lease, Option<Lease>> {
        let name = lease.metadata.name.clone().expect("named");
        let current = self.store.get(&name);
        let ok = match (current, create) {
            (None, true) => true,
            (Some(c), false) => rv(c) == rv(lease),
            _ => false,
        };
        if std::env::var_os("LEASEHOLD_SIM_DEBUG").is_some() && name.contains("member") {
            eprintln!(
                "t={} server: {name} create={create} ok={ok} holder={:?}",
                self.t,
                holder(lease)
            );
        }
        if !ok {
            return Err(current.cloned());
        }
        self.rv += 1;
        let mut stored = lease.clone();
        stored.metadata.resource_version = Some(self.rv.to_string());
        if create {
            stored.metadata.uid = Some(format!("uid-{}", self.rv));
        }
        stored.metadata.namespace = Some(NS.into());
        self.store.insert(name, stored.clone());
        self.broadcast(&stored);
        Ok(stored)
    }

    /// Something committed now reaches the control plane's watch, after everything committed
    /// before it.
    fn cp_sees(&mut self, epoch: u64, item: WatchItem) {
        let d = self.net() + self.cp_lag();
        self.cp_watch_last = self.cp_watch_last.max(self.t + d);
        let when = self.cp_watch_last;
        self.at(when, Ev::CpWatch { epoch, item });
    }

    /// The target Leases stored now, as a member's (re)list shows them.
    fn target_leases(&self) -> BTreeMap<String, Lease> {
        self.store
            .iter()
            .filter(|(n, _)| Self::members_see(n))
            .map(|(n, l)| (n.clone(), l.clone()))
            .collect()
    }

    /// Whether members' watches deliver Lease `name`: target Leases, and hand-over plans (each
    /// member picks its own; a plan's deletion is not delivered — a plan left behind names
    /// targets its member no longer holds, or a term it no longer has, and is not acted on).
    fn members_see(name: &str) -> bool {
        name.starts_with(&protocol::names::target_lease_stem(PREFIX, CLUSTER))
            || name.starts_with(&format!("{PREFIX}-{CLUSTER}-plan-"))
    }

    /// Deletes Lease `name` if it is at `version`: the control plane's watch sees it go.
    fn server_delete(&mut self, name: &str, version: &str) -> bool {
        if self.store.get(name).and_then(rv) != Some(version) {
            return false;
        }
        self.store.remove(name);
        self.rv += 1;
        if let Some(cp) = &self.cp {
            let epoch = cp.epoch;
            self.cp_sees(epoch, WatchItem::Deleted(name.to_owned()));
        }
        true
    }

    fn broadcast(&mut self, lease: &Lease) {
        if let Some(cp) = &self.cp {
            let epoch = cp.epoch;
            self.cp_sees(epoch, WatchItem::Lease(Box::new(lease.clone())));
        }
        if lease
            .metadata
            .name
            .as_deref()
            .is_some_and(Self::members_see)
        {
            for m in 0..self.members.len() {
                if !self.members[m].alive || self.members[m].partitioned {
                    continue;
                }
                let d = self.net() + self.slow_extra();
                self.member_watch_last[m] = self.member_watch_last[m].max(self.t + d);
                let when = self.member_watch_last[m];
                self.at(
                    when,
                    Ev::MemberWatch {
                        m,
                        lease: lease.clone(),
                    },
                );
            }
        }
    }

    // ---- work ----

    /// Member `m` starts working on `target` at fencing generation `generation` (the target
    /// Lease's `leaseTransitions` it holds it at). Beside anyone else's work that is an overlap
    /// — unless the other is stalled and its generation is smaller (fenced: its app can refuse
    /// the stale owner's writes; it is told to stop when it resumes).
    fn start_work(&mut self, m: usize, target: &str, generation: i32) {
        let name = self.members[m].name.clone();
        let others: Vec<(String, i64, i32)> = self
            .work
            .get(target)
            .into_iter()
            .flatten()
            .filter(|(w, _)| **w != name)
            .map(|(w, (since, g))| (w.clone(), *since, *g))
            .collect();
        for (other, since, g) in others {
            if self.stalled(&other) && g < generation {
                self.report.fenced_overlaps += 1;
            } else {
                self.report.overlaps.push(format!(
                    "t={} {target}: {name} starts (generation {generation}) while {other} works \
                     since {since} (generation {g})",
                    self.t
                ));
            }
        }
        // Every start of work is at a larger generation than any before it (so an app can
        // fence whoever worked before) — but the member that started the largest one may
        // start again at it (a hold resumed in a new term of its tenure: nobody worked on the
        // target between, or they would have started above).
        if let Some((before, by)) = self.generations.get(target)
            && (generation < *before || (generation == *before && *by != name))
        {
            self.report.overlaps.push(format!(
                "t={} {target}: {name} starts at generation {generation}, not above {before} \
                 (started by {by})",
                self.t
            ));
        }
        let top = self
            .generations
            .entry(target.to_owned())
            .or_insert((generation, name.clone()));
        if generation > top.0 {
            *top = (generation, name.clone());
        }
        self.work
            .entry(target.to_owned())
            .or_default()
            .insert(name, (self.t, generation));
        self.members[m].working.insert(target.to_owned());
        if let Some(stopped) = self.handed.remove(target) {
            self.report.planned_gaps.push(self.t - stopped);
        }
    }

    /// Whether the member named `name` is stalled now.
    fn stalled(&self, name: &str) -> bool {
        self.members
            .iter()
            .any(|mm| mm.name == name && mm.stalled_until.is_some())
    }

    /// After a decision pass of a running member: any target its app still works on beside
    /// another member's is an overlap, unless that one is stalled at a smaller generation — so
    /// a member that resumes from a stall and leaves its app working is caught even though
    /// nobody starts anything.
    fn check_after_step(&mut self, m: usize) {
        let name = self.members[m].name.clone();
        let mut found = Vec::new();
        for (target, workers) in &self.work {
            let Some((_, mine)) = workers.get(&name) else {
                continue;
            };
            for (other, (_, g)) in workers {
                if *other != name && !(self.stalled(other) && g < mine) {
                    found.push(format!(
                        "t={} {target}: {name}'s app still works beside {other}'s",
                        self.t
                    ));
                }
            }
        }
        self.report.overlaps.extend(found);
    }

    fn stop_work(&mut self, m: usize, target: &str) {
        let name = self.members[m].name.clone();
        if self.members[m].leaving.is_some() && self.members[m].working.contains(target) {
            self.handed.insert(target.to_owned(), self.t);
        } else {
            self.handed.remove(target);
        }
        if let Some(w) = self.work.get_mut(target) {
            w.remove(&name);
        }
        self.members[m].working.remove(target);
    }

    /// A hold lost (authority ended, revoked, deleted): the app is told to stop — unless the
    /// member is broken so that it is not (`Broken::AppNotToldOnLoss`).
    fn lose_work(&mut self, m: usize, target: &str) {
        if self.broken == Some(Broken::AppNotToldOnLoss) {
            self.members[m].working.remove(target);
        } else {
            self.stop_work(m, target);
        }
    }

    fn lose_all(&mut self, m: usize) {
        for t in self.members[m].working.clone() {
            self.lose_work(m, &t);
        }
    }

    fn stop_all(&mut self, m: usize) {
        for t in self.members[m].working.clone() {
            self.stop_work(m, &t);
        }
    }

    // ---- members ----

    fn send(&mut self, m: usize, req: MemberReq) -> u64 {
        self.next_id += 1;
        let id = self.next_id;
        // Each write waits for its answer as long as the agent's does: an acquisition and a
        // member Lease write `2D/3` (`agent::writes::hold`, `Authority::write_timeout`), a
        // release `D/3`.
        let wait = match &req {
            MemberReq::Heartbeat { .. } | MemberReq::Acquire { .. } => {
                self.members[m].auth.write_timeout()
            }
            _ => D / 3,
        };
        let timeout = self.members[m].true_at(self.members[m].local(self.t) + wait);
        self.at(timeout, Ev::MemberTimeout { m, id });
        if self.members[m].partitioned {
            self.held[m].push((id, req));
        } else {
            let d = self.net() + self.slow_extra();
            self.at(self.t + d, Ev::MemberArrive { m, id, req });
        }
        id
    }

    fn wake_member_at(&mut self, m: usize, t: i64) {
        let t = t.max(self.t);
        if self.members[m]
            .next_wake
            .is_some_and(|w| w <= t && w >= self.t)
        {
            return;
        }
        self.members[m].next_wake = Some(t);
        self.members[m].wake_token += 1;
        let token = self.members[m].wake_token;
        self.at(t, Ev::MemberWake(m, token));
    }

    fn member_step(&mut self, m: usize) {
        if !self.members[m].alive {
            return;
        }
        self.members[m].next_wake = None;
        let now_local = self.members[m].local(self.t);
        let ts = self.members[m].clock.ts(self.t);
        // Past the renew deadline: every hold is lost, the work stops, nothing is written.
        if self.broken != Some(Broken::IgnoreDeadline)
            && let Some(ended) = self.members[m].auth.expire(now_local)
        {
            if now_local > ended && !self.members[m].working.is_empty() {
                self.report.overruns += 1;
            }
            // What it works on still names it: a next term of this tenure resumes it.
            let (me, tenure) = (&self.members[m].name, self.members[m].auth.tenure);
            let dormant: Vec<(String, i32)> = self.members[m]
                .working
                .iter()
                .filter_map(|t| Some((t.clone(), self.work.get(t)?.get(me)?.1)))
                .collect();
            for (t, g) in dormant {
                self.members[m].dormant.insert(t, (tenure, g));
            }
            self.lose_all(m);
        }
        let me = self.members[m].name.clone();
        if self.leave_step(m) {
            return;
        }
        let leaving = self.members[m].leaving.is_some();
        self.members[m].auth.leaving = leaving;
        // Renew (or register) when due.
        if self.members[m].heart_in_flight.is_none()
            && let Some(write) = self.members[m].auth.write_due(now_local)
        {
            let (mut lease, create) = member::member_lease_write(
                self.members[m].heart.as_ref(),
                write,
                (PREFIX, CLUSTER, &me),
                ts,
                (D / 1000) as i32,
                leaving,
            );
            lease.metadata.namespace = Some(NS.into());
            let base = self.members[m].heart.as_ref();
            let sent = self.members[m]
                .auth
                .sending(write, now_local, (base, &lease), &me);
            let id = self.send(
                m,
                MemberReq::Heartbeat {
                    sent: sent.clone(),
                    lease,
                    create,
                },
            );
            self.members[m].heart_in_flight = Some((id, sent));
        }
        // The held targets (`member::keep`): hand over what is no longer desired for us — stop
        // the work, then hand it to its next owner (or release it). The others
        // (`member::take`): take what is desired for us — free, or still ours from an earlier
        // term, by a write; handed to us under our current term, at once.
        let may_take = self.members[m].auth.may_take(now_local);
        let term = self.members[m].heart.as_ref().map(protocol::member_term);
        let busy: BTreeSet<String> = self.members[m].in_flight.values().cloned().collect();
        let plan = self.plan_of(m);
        for (_, lease) in self.members[m].view.clone() {
            let Some(v) = protocol::parse_native(&lease, CLUSTER) else {
                continue;
            };
            let protocol::LeaseRole::Target(target) = v.role.clone() else {
                continue;
            };
            if busy.contains(&target) {
                continue;
            }
            if self.members[m].working.contains(&target) {
                // Its hand-over plan, if it has one for this target: one write.
                let planned =
                    protocol::plan::planned(plan.as_deref(), &lease, &v, &me, term.as_deref());
                let by_plan = planned.is_some();
                let (lease, v) = planned.unwrap_or((lease, v));
                match member::keep(Some(&v), &me, false) {
                    Keep::HandOver => {
                        self.report.planned_moves += usize::from(by_plan);
                        self.stop_work(m, &target);
                        self.give_up(m, &lease, target);
                    }
                    Keep::Lost | Keep::Gone => self.lose_work(m, &target),
                    Keep::Keep => {}
                }
                continue;
            }
            // A broken member takes a handed target under any term as its own.
            let term = match self.broken {
                Some(Broken::IgnoreHandedTerm) => v.handed_term.clone(),
                _ => term.clone(),
            };
            // A broken member resumes what it held in any earlier tenure.
            let tenure = self.members[m].auth.tenure;
            let resumable = match (self.broken, self.members[m].dormant.get(&target)) {
                (Some(Broken::ResumeAnyTenure), Some((_, g))) => *g == v.holding.transitions,
                (_, dormant) => dormant == Some(&(tenure, v.holding.transitions)),
            };
            let held = (term.as_deref(), resumable);
            match member::take(&v, &me, may_take, held, Listing::FULL, now_local) {
                // The simulated cluster hands over exclusively (no overlap bound is written).
                Take::Prepare { .. } => {}
                Take::GiveUp => self.give_up(m, &lease, target),
                Take::Adopt | Take::Resume => {
                    if self.members[m].dormant.remove(&target).is_some() {
                        self.report.resumed += 1;
                    }
                    self.start_work(m, &target, v.holding.transitions);
                }
                Take::Acquire => {
                    let secs = (D / 1000) as i32;
                    self.members[m].dormant.remove(&target);
                    if v.holding.holder.as_deref() == Some(me.as_str()) {
                        self.report.retaken += 1;
                    }
                    let id = self.send(
                        m,
                        MemberReq::Acquire {
                            target: target.clone(),
                            lease: protocol::acquired(&lease, &me, ts, secs),
                            tenure,
                        },
                    );
                    self.members[m].in_flight.insert(id, target);
                }
                // One watch lists everything: never waits for another.
                Take::Wait { .. } | Take::Skip => {}
            }
        }
        // Next look: the renewal, the deadline, a retry, or a second at most.
        let auth = &self.members[m].auth;
        let mut next = now_local + 1_000;
        if let Some(deadline) = auth.deadline() {
            next = next.min(deadline);
        }
        if auth.due() > now_local {
            next = next.min(auth.due());
        }
        let when = self.members[m].true_at(next.max(now_local + 1));
        self.wake_member_at(m, when);
    }

    /// The hand-over plan member `m`'s watch shows for it, if any.
    fn plan_of(&self, m: usize) -> Option<std::sync::Arc<protocol::plan::Plan>> {
        let me = &self.members[m].name;
        let name = protocol::names::plan_lease(PREFIX, CLUSTER, me);
        let lease = self.members[m].view.get(&name)?;
        protocol::parse_native(lease, CLUSTER)?.plan
    }

    /// Gives target Lease `lease` up (`protocol::given_up`: straight to its next owner when
    /// the control plane wrote down that one's term), its work already stopped.
    fn give_up(&mut self, m: usize, lease: &Lease, target: String) {
        self.members[m].dormant.remove(&target);
        let ts = self.members[m].clock.ts(self.t);
        let me = self.members[m].name.clone();
        let id = self.send(
            m,
            MemberReq::Release {
                lease: protocol::given_up(lease, &me, ts),
            },
        );
        self.members[m].in_flight.insert(id, target);
    }

    /// A planned stop in progress: once nothing is held (or at the drain timeout, after
    /// stopping and releasing what is left) the member releases its member Lease and exits.
    /// Whether it exited.
    fn leave_step(&mut self, m: usize) -> bool {
        let Some((since, restart)) = self.members[m].leaving else {
            return false;
        };
        let now_local = self.members[m].local(self.t);
        let ts = self.members[m].clock.ts(self.t);
        let me = self.members[m].name.clone();
        let holds: Vec<(String, Lease)> = self.members[m]
            .view
            .iter()
            .filter(|(_, l)| holder(l).as_deref() == Some(me.as_str()))
            .map(|(n, l)| (n.clone(), l.clone()))
            .collect();
        if now_local >= since + DRAIN {
            let left: Vec<String> = self.members[m].working.iter().cloned().collect();
            self.report.drained_by_timeout += left.len();
            self.stop_all(m);
            for t in &left {
                self.handed.remove(t);
            }
            let busy: BTreeSet<String> = self.members[m].in_flight.values().cloned().collect();
            let plan = self.plan_of(m);
            let term = self.members[m].heart.as_ref().map(protocol::member_term);
            for (_, lease) in &holds {
                let Some(v) = protocol::parse_native(lease, CLUSTER) else {
                    continue;
                };
                let protocol::LeaseRole::Target(t) = v.role.clone() else {
                    continue;
                };
                if !busy.contains(&t) {
                    let lease =
                        protocol::plan::planned(plan.as_deref(), lease, &v, &me, term.as_deref())
                            .map_or_else(|| lease.clone(), |(l, _)| l);
                    self.give_up(m, &lease, t);
                }
            }
        }
        let drained = holds.is_empty()
            && self.members[m].in_flight.is_empty()
            && self.members[m].working.is_empty();
        if !drained && now_local < since + DRAIN + D {
            return false;
        }
        self.stop_all(m);
        if let Some(h) = self.members[m].heart.clone() {
            self.send(
                m,
                MemberReq::SignOff {
                    lease: protocol::released(&h, ts),
                },
            );
        }
        let mm = &mut self.members[m];
        mm.alive = false;
        mm.leaving = None;
        if let Some(after) = restart {
            self.at(self.t + after, Ev::Fault(FaultEv::Restart(m)));
        }
        true
    }

    fn member_arrive(&mut self, m: usize, id: u64, req: MemberReq) {
        let result = match &req {
            MemberReq::Heartbeat { lease, create, .. } => self.server_write(lease, *create),
            MemberReq::Acquire { lease, .. }
            | MemberReq::Release { lease, .. }
            | MemberReq::SignOff { lease } => self.server_write(lease, false),
        };
        if self.members[m].partitioned {
            return; // the answer is lost
        }
        let d = self.net() + self.slow_extra();
        self.at(self.t + d, Ev::MemberAnswer { m, id, req, result });
    }

    fn member_answer(
        &mut self,
        m: usize,
        id: u64,
        req: MemberReq,
        result: Result<Lease, Option<Lease>>,
    ) {
        if !self.members[m].alive {
            return;
        }
        let me = self.members[m].name.clone();
        match req {
            MemberReq::Heartbeat { sent, .. } => {
                if self.members[m].heart_in_flight.as_ref().map(|h| h.0) != Some(id) {
                    return; // timed out already
                }
                self.members[m].heart_in_flight = None;
                let fresh_holder = match &result {
                    Err(Some(fresh)) => Some(holder(fresh)),
                    _ => None,
                };
                let answer = match &result {
                    Ok(l) => Answer::Written(l),
                    Err(Some(_)) => Answer::Conflict(fresh_holder.as_ref().map(Option::as_deref)),
                    Err(None) => Answer::NotFound,
                };
                let now_local = self.members[m].local(self.t);
                let outcome = self.members[m]
                    .auth
                    .answered(sent, answer, &me, now_local, BACKOFF);
                self.members[m].heart = match result {
                    Ok(l) | Err(Some(l)) => Some(l),
                    Err(None) => None,
                };
                // A new tenure: nothing held before is resumed (unless broken so).
                let new_tenure = matches!(
                    outcome,
                    Outcome::Lost { .. }
                        | Outcome::Renewed {
                            new_term: true,
                            resumes: false
                        }
                );
                if new_tenure && self.broken != Some(Broken::ResumeAnyTenure) {
                    self.members[m].dormant.clear();
                }
                if let Outcome::Lost { .. } = outcome {
                    self.lose_all(m);
                }
            }
            MemberReq::Acquire { target, tenure, .. } => {
                if self.members[m].in_flight.remove(&id).is_none() {
                    return;
                }
                match result {
                    Ok(l) => {
                        let name = l.metadata.name.clone().unwrap();
                        self.members[m].view.insert(name, l.clone());
                        let now_local = self.members[m].local(self.t);
                        let auth = &self.members[m].auth;
                        let generation = Holding::of(l.spec.as_ref()).transitions;
                        match member::after_acquire(auth, tenure, false, now_local) {
                            Acquired::Work => self.start_work(m, &target, generation),
                            // Never started: given straight back.
                            Acquired::GiveBack => self.give_up(m, &l, target),
                            // Never started: left naming the member until its next term.
                            Acquired::Leave { resumable } => {
                                if resumable {
                                    let dormant = &mut self.members[m].dormant;
                                    dormant.insert(target, (tenure, generation));
                                }
                            }
                        }
                    }
                    Err(Some(fresh)) => {
                        let name = fresh.metadata.name.clone().unwrap();
                        self.members[m].view.insert(name, fresh);
                    }
                    Err(None) => {}
                }
            }
            MemberReq::SignOff { .. } => {}
            MemberReq::Release { .. } => {
                self.members[m].in_flight.remove(&id);
                if let Err(Some(fresh)) | Ok(fresh) = result {
                    let name = fresh.metadata.name.clone().unwrap();
                    self.members[m].view.insert(name, fresh);
                }
            }
        }
        self.wake_member_at(m, self.t);
    }

    fn member_timeout(&mut self, m: usize, id: u64) {
        let mm = &mut self.members[m];
        if mm.heart_in_flight.as_ref().map(|h| h.0) == Some(id) {
            let now_local = mm.local(self.t);
            let me = mm.name.clone();
            if let Some((_, sent)) = mm.heart_in_flight.take() {
                mm.auth
                    .answered(sent, Answer::Failed, &me, now_local, BACKOFF);
            }
            self.wake_member_at(m, self.t);
        } else if mm.in_flight.remove(&id).is_some() {
            self.wake_member_at(m, self.t);
        }
    }

    fn member_watch(&mut self, m: usize, lease: Lease) {
        if !self.members[m].alive {
            return;
        }
        let name = lease.metadata.name.clone().unwrap();
        let newer = self.members[m].view.get(&name).is_none_or(|old| {
            rv(old).and_then(|r| r.parse::<u64>().ok()) < rv(&lease).and_then(|r| r.parse().ok())
        });
        if newer {
            // Our hold ended by someone else's write (a revoke): the work stops.
            let me = self.members[m].name.clone();
            if let Some(v) = protocol::parse_native(&lease, CLUSTER)
                && let protocol::LeaseRole::Target(t) = &v.role
                && self.members[m].working.contains(t)
                && member::keep(Some(&v), &me, false) == Keep::Lost
            {
                self.lose_work(m, t);
            }
            self.members[m].view.insert(name, lease);
            self.wake_member_at(m, self.t);
        }
    }

    fn start_member(&mut self, m: usize) {
        let mm = &mut self.members[m];
        mm.alive = true;
        mm.heart = None;
        mm.auth = Authority::new(D);
        mm.heart_in_flight = None;
        mm.in_flight.clear();
        mm.dormant.clear();
        mm.next_wake = None;
        mm.leaving = None;
        // A new process lists the target Leases first.
        self.members[m].view = self.target_leases();
        self.wake_member_at(m, self.t);
    }

    // ---- the control plane ----

    fn start_cp(&mut self) {
        self.cp_epochs += 1;
        let epoch = self.cp_epochs;
        let mut index = Index::new(&self.config.clusters);
        index.require_proofs();
        let mut cp = ControlPlane {
            epoch,
            clock: Clock::new(&mut self.rng),
            index,
            lapse: LapseWatch::default(),
            writes: Vec::new(),
            rest: Vec::new(),
        };
        let now = cp.ts(self.t);
        let pods: Vec<Pod> = self.members.iter().map(|m| pod(&m.name)).collect();
        cp.index.reset::<Pod>(NS, &pods, now);
        cp.index.reset::<Service>(NS, &[], now);
        cp.index.reset::<EndpointSlice>(NS, &[], now);
        cp.index.reset::<ConfigMap>(NS, &[], now);
        let leases: Vec<Lease> = self.store.values().cloned().collect();
        cp.index.reset::<Lease>(NS, &leases, now);
        self.cp = Some(cp);
        self.cp_watch_last = self.t;
        self.at(self.t + 50, Ev::CpPass(epoch));
        self.at(self.t, Ev::CpProbe(epoch));
    }

    fn cp_probe(&mut self, epoch: u64) {
        let Some(cp) = &mut self.cp else { return };
        if cp.epoch != epoch {
            return;
        }
        let sent = cp.ts(self.t).as_millisecond();
        // Written (as slow as any request); committed when it reaches the server, and seen
        // back on the watch in commit order with every other change.
        let d = self.net() + self.slow_extra();
        self.at(self.t + d, Ev::CpProbeCommitted { epoch, sent });
        let next = self.t + ((D / 3) as f64 / self.cp.as_ref().unwrap().clock.rate) as i64;
        self.at(next, Ev::CpProbe(epoch));
    }

    fn cp_watch(&mut self, epoch: u64, item: WatchItem) {
        let t = self.t;
        let Some(cp) = &mut self.cp else { return };
        if cp.epoch != epoch {
            return;
        }
        let now = cp.ts(t);
        match item {
            WatchItem::Lease(l) => {
                cp.index.apply(&*l, now);
            }
            WatchItem::Deleted(name) => {
                cp.index.delete::<Lease>(NS, &name, now);
            }
            WatchItem::Probe(sent) => cp.index.prove(NS, Kind::Lease, sent),
        }
    }

    fn cp_pass(&mut self, epoch: u64) {
        let t = self.t;
        let Some(cp) = &mut self.cp else { return };
        if cp.epoch != epoch {
            return;
        }
        if !cp.writes.is_empty() || !cp.rest.is_empty() {
            self.at(t + 20, Ev::CpPass(epoch));
            return;
        }
        let now = cp.ts(t);
        let now_ms = cp.local(t);
        let Some(model) = cp.index.model(CLUSTER, now) else {
            return;
        };
        let guard = cp
            .lapse
            .guard(placement::DEFAULT_MASS_LAPSE_SHARE, now_ms, D);
        let decision =
            placement::decide_guarded(&model, (D / 1000) as i32, &HashSet::new(), &guard);
        if decision.decided {
            cp.lapse.lived(&decision, now_ms, D);
        } else {
            cp.lapse.stale(now_ms);
        }
        if std::env::var_os("LEASEHOLD_SIM_DEBUG").is_some()
            && (!decision.actions.is_empty()
                || std::env::var_os("LEASEHOLD_SIM_DEBUG_ALL").is_some())
        {
            let live: Vec<_> = model
                .instances
                .iter()
                .map(|i| {
                    (
                        i.name.clone(),
                        i.member_lease
                            .as_ref()
                            .map(|m| (m.liveness, m.unchanged_ms)),
                    )
                })
                .collect();
            eprintln!(
                "t={t} cp: decided {} {live:?} lapse {:?} recovering {:?} failed_over {:?} actions {:?}",
                decision.decided,
                decision.mass_lapse.as_ref().map(|m| (&m.lapsed, &m.late)),
                decision.recovering,
                decision.failed_over_in_lapse,
                decision
                    .actions
                    .iter()
                    .map(|a| format!("{a:?}").chars().take(60).collect::<String>())
                    .collect::<Vec<_>>()
            );
        }
        let (fences, rest): (Vec<Action>, Vec<Action>) = decision
            .actions
            .into_iter()
            .filter(|a| {
                matches!(
                    a,
                    Action::Fence { .. }
                        | Action::Desire { .. }
                        | Action::Revoke { .. }
                        | Action::Plan { .. }
                        | Action::DeletePlan { .. }
                )
            })
            .partition(|a| matches!(a, Action::Fence { .. }));
        cp.rest = rest;
        if fences.is_empty() {
            let rest = std::mem::take(&mut cp.rest);
            self.cp_start_batch(rest);
        } else {
            self.cp_start_batch(fences);
        }
        self.at(t + 50, Ev::CpPass(epoch));
    }

    fn cp_start_batch(&mut self, actions: Vec<Action>) {
        let Some(cp) = &mut self.cp else { return };
        let epoch = cp.epoch;
        cp.writes = actions
            .into_iter()
            .map(|action| CpWrite {
                action,
                step: Step::Read,
                target: None,
                tries: 0,
                done: false,
            })
            .collect();
        for w in 0..cp.writes.len() {
            let d = self.net() + self.slow_extra();
            self.at(self.t + d, Ev::CpArrive { epoch, w });
        }
    }

    /// The name a write's step reads or writes.
    fn cp_subject(w: &CpWrite) -> String {
        match (&w.action, w.step) {
            (Action::Fence { member }, _) => protocol::names::member_lease(PREFIX, CLUSTER, member),
            (Action::Revoke { holder, .. }, Step::ReadMember)
            | (
                Action::Desire {
                    revoke: Some(holder),
                    ..
                },
                Step::ReadMember,
            ) => protocol::names::member_lease(PREFIX, CLUSTER, holder),
            (Action::Desire { key, .. } | Action::Revoke { key, .. }, _) => {
                protocol::names::target_lease(PREFIX, CLUSTER, key)
            }
            (Action::Plan { plan, .. }, _) => {
                protocol::names::plan_lease(PREFIX, CLUSTER, &plan.member)
            }
            (Action::DeletePlan { lease, .. }, _) => lease.clone(),
            _ => String::new(),
        }
    }

    fn cp_arrive(&mut self, epoch: u64, w: usize) {
        let t = self.t;
        let Some(cp) = &self.cp else { return };
        if cp.epoch != epoch || w >= cp.writes.len() {
            return;
        }
        let write = cp.writes[w].clone();
        let (read, ok) = match write.step {
            Step::Read | Step::ReadMember => {
                (self.store.get(&Self::cp_subject(&write)).cloned(), true)
            }
            Step::Write if matches!(write.action, Action::DeletePlan { .. }) => {
                let Action::DeletePlan {
                    lease,
                    resource_version,
                    ..
                } = &write.action
                else {
                    unreachable!()
                };
                (None, self.server_delete(lease, resource_version))
            }
            Step::Write => {
                let lease = write.target.clone().expect("decided");
                let create = lease.metadata.resource_version.is_none();
                match self.server_write(&lease, create) {
                    Ok(l) => {
                        if let Action::Fence { member } = &write.action {
                            self.report.fences.push((t, member.clone()));
                        }
                        (Some(l), true)
                    }
                    Err(_) => (None, false),
                }
            }
        };
        let d = self.net() + self.slow_extra();
        self.at(t + d, Ev::CpAnswer { epoch, w, read, ok });
    }

    fn cp_answer(&mut self, epoch: u64, w: usize, read: Option<Lease>, ok: bool) {
        let t = self.t;
        let Some(cp) = &mut self.cp else { return };
        if cp.epoch != epoch || w >= cp.writes.len() {
            return;
        }
        let now = cp.ts(t);
        let secs = (D / 1000) as i32;
        let mut next: Option<Step> = None;
        {
            let write = &mut cp.writes[w];
            match (write.step, &write.action) {
                (Step::Read, Action::Fence { member }) => {
                    // `leases::fence`: only the exact record the index saw expire.
                    match read {
                        None => {
                            let mut l = protocol::new_fenced_member_lease(
                                PREFIX, CLUSTER, member, now, secs,
                            );
                            l.metadata.namespace = Some(NS.into());
                            write.target = Some(l);
                            next = Some(Step::Write);
                        }
                        Some(lease) => {
                            let fresh = Holding::of(lease.spec.as_ref());
                            let expired = cp.index.expired_member_record(CLUSTER, member, now);
                            if fresh.holder.as_deref() == Some(member.as_str())
                                && expired.as_ref() == Some(&fresh)
                            {
                                write.target = Some(protocol::fenced(&lease, Fence::Expired, now));
                                next = Some(Step::Write);
                            }
                        }
                    }
                }
                (
                    Step::Read,
                    Action::Desire {
                        expect,
                        desire,
                        revoke,
                        ..
                    },
                ) => {
                    if let Some(current) = read.clone() {
                        let view = protocol::parse_native(&current, CLUSTER);
                        let decided = view.as_ref().and_then(|v| v.desired.clone()) == *expect;
                        let held = revoke.as_ref().is_some_and(|h| {
                            view.as_ref().and_then(|v| v.holding.holder.as_deref())
                                == Some(h.as_str())
                        });
                        write.target = Some(current.clone());
                        if held {
                            next = Some(Step::ReadMember);
                        } else if decided {
                            write.target = Some(protocol::granted(
                                &protocol::with_desire(&current, desire),
                                desire,
                                now,
                            ));
                            next = Some(Step::Write);
                        }
                    } else if expect.is_none() && revoke.is_none() {
                        let mut l = protocol::new_target_lease(
                            PREFIX,
                            CLUSTER,
                            &desire_key(&write.action),
                            desire,
                        );
                        l.metadata.namespace = Some(NS.into());
                        write.target = Some(protocol::granted(&l, desire, now));
                        next = Some(Step::Write);
                    }
                }
                // `leases::put_at` / `delete_at`: a compare-and-swap on the copy decided on
                // (the read stands for the write's own check; a conflict is not retried).
                (Step::Read, Action::Plan { plan, expect })
                    if read.as_ref().and_then(rv) == expect.as_deref() =>
                {
                    let mut l = protocol::plan::lease(PREFIX, CLUSTER, plan);
                    l.metadata.namespace = Some(NS.into());
                    l.metadata.resource_version = expect.clone();
                    write.target = Some(l);
                    next = Some(Step::Write);
                }
                (
                    Step::Read,
                    Action::DeletePlan {
                        resource_version, ..
                    },
                ) if read.as_ref().and_then(rv) == Some(resource_version.as_str()) => {
                    next = Some(Step::Write);
                }
                (Step::Write, Action::Plan { .. } | Action::DeletePlan { .. }) => {}
                (Step::Read, Action::Revoke { holder: h, .. }) => {
                    if let Some(current) = read.clone()
                        && holder(&current).as_deref() == Some(h.as_str())
                    {
                        write.target = Some(current);
                        next = Some(Step::ReadMember);
                    }
                }
                (Step::ReadMember, action) => {
                    // `leases::may_revoke`: fenced or released, read after the target.
                    let revocable = read.as_ref().is_some_and(|l| {
                        protocol::parse_native(l, CLUSTER).is_some_and(|v| {
                            v.holding.holder.is_none() && !matches!(v.fence, Some(Fence::Absent))
                        })
                    });
                    let current = write.target.clone().expect("read");
                    match action {
                        Action::Desire { expect, desire, .. } => {
                            let view = protocol::parse_native(&current, CLUSTER);
                            let decided = view.as_ref().and_then(|v| v.desired.clone()) == *expect;
                            if revocable && decided {
                                write.target = Some(protocol::granted(
                                    &protocol::revoked(&current, desire, now),
                                    desire,
                                    now,
                                ));
                                next = Some(Step::Write);
                            } else if revocable {
                                write.target = Some(protocol::released(&current, now));
                                next = Some(Step::Write);
                            } else if decided {
                                write.target = Some(protocol::granted(
                                    &protocol::with_desire(&current, desire),
                                    desire,
                                    now,
                                ));
                                next = Some(Step::Write);
                            }
                        }
                        Action::Revoke { .. } if revocable => {
                            write.target = Some(protocol::released(&current, now));
                            next = Some(Step::Write);
                        }
                        _ => {}
                    }
                }
                // A conflict: read again and decide again (a fence is not retried).
                (Step::Write, action)
                    if !ok && write.tries < 8 && !matches!(action, Action::Fence { .. }) =>
                {
                    write.tries += 1;
                    next = Some(Step::Read);
                }
                _ => {}
            }
            match next {
                Some(step) => write.step = step,
                None => write.done = true,
            }
        }
        if next.is_some() {
            let d = self.net() + self.slow_extra();
            self.at(t + d, Ev::CpArrive { epoch, w });
        }
        let cp = self.cp.as_mut().unwrap();
        if cp.writes.iter().all(|w| w.done) {
            cp.writes.clear();
            let rest = std::mem::take(&mut cp.rest);
            if !rest.is_empty() {
                self.cp_start_batch(rest);
            }
        }
    }

    // ---- faults ----

    fn fault(&mut self, f: FaultEv) {
        match f {
            FaultEv::Crash { m, restart_after } => {
                if !self.members[m].alive {
                    return;
                }
                self.faulted.insert(m);
                self.stop_all(m);
                self.members[m].alive = false;
                self.held[m].clear();
                if let Some(after) = restart_after {
                    self.at(self.t + after, Ev::Fault(FaultEv::Restart(m)));
                }
            }
            FaultEv::Restart(m) => self.start_member(m),
            FaultEv::Partition { m, heal_after } => {
                self.faulted.insert(m);
                self.members[m].partitioned = true;
                self.at(self.t + heal_after, Ev::Fault(FaultEv::Heal(m)));
            }
            FaultEv::Heal(m) => {
                self.members[m].partitioned = false;
                // What was sent meanwhile passes now, in order.
                for (id, req) in std::mem::take(&mut self.held[m]) {
                    let d = self.net();
                    self.at(self.t + d, Ev::MemberArrive { m, id, req });
                }
                // Its watch relists.
                if self.members[m].alive {
                    for (_, l) in self.target_leases() {
                        let d = self.net();
                        self.at(self.t + d, Ev::MemberWatch { m, lease: l });
                    }
                }
            }
            // Spells overlap: the slowest one in force counts (`slow_extra`, `cp_lag`).
            FaultEv::SlowAll { extra, for_ms } => {
                self.slows.push(extra);
                self.at(self.t + for_ms, Ev::Fault(FaultEv::SlowOver(extra)));
            }
            FaultEv::SlowOver(extra) => end_spell(&mut self.slows, extra),
            FaultEv::CpLag { extra, for_ms } => {
                self.lags.push(extra);
                self.at(self.t + for_ms, Ev::Fault(FaultEv::CpLagOver(extra)));
            }
            FaultEv::CpLagOver(extra) => end_spell(&mut self.lags, extra),
            FaultEv::CpCrash { restart_after } => {
                self.cp = None;
                self.at(self.t + restart_after, Ev::Fault(FaultEv::CpRestart));
            }
            FaultEv::CpRestart => self.start_cp(),
            FaultEv::Stall { m, for_ms } => {
                if !self.members[m].alive || self.members[m].stalled_until.is_some() {
                    return;
                }
                self.faulted.insert(m);
                self.members[m].stalled_until = Some(self.t + for_ms);
                self.at(self.t + for_ms, Ev::Fault(FaultEv::Resume(m)));
            }
            FaultEv::Resume(m) => {
                self.members[m].stalled_until = None;
                self.wake_member_at(m, self.t);
            }
            FaultEv::Leave { m, restart_after } => {
                let mm = &mut self.members[m];
                if !mm.alive || mm.leaving.is_some() {
                    return;
                }
                self.faulted.insert(m);
                let now_local = mm.local(self.t);
                mm.leaving = Some((now_local, restart_after));
                self.wake_member_at(m, self.t);
            }
        }
    }

    fn run_until(&mut self, end: i64) {
        while let Some(Reverse((t, seq))) = self.queue.peek().copied() {
            if t > end {
                break;
            }
            self.queue.pop();
            self.t = t;
            let Some(ev) = self.events.remove(&seq) else {
                continue;
            };
            // A stalled member takes nothing in until it resumes: its events wait, in order.
            if let Ev::MemberWake(m, _)
            | Ev::MemberAnswer { m, .. }
            | Ev::MemberTimeout { m, .. }
            | Ev::MemberWatch { m, .. } = &ev
                && let Some(until) = self.members[*m].stalled_until
            {
                self.at(until, ev);
                continue;
            }
            self.report.events += 1;
            match ev {
                Ev::MemberWake(m, token) => {
                    if self.members[m].wake_token == token {
                        self.member_step(m);
                        if self.members[m].alive {
                            self.check_after_step(m);
                        }
                    }
                }
                Ev::MemberArrive { m, id, req } => self.member_arrive(m, id, req),
                Ev::MemberAnswer { m, id, req, result } => self.member_answer(m, id, req, result),
                Ev::MemberTimeout { m, id } => self.member_timeout(m, id),
                Ev::MemberWatch { m, lease } => self.member_watch(m, lease),
                Ev::CpWatch { epoch, item } => self.cp_watch(epoch, item),
                Ev::CpPass(e) => self.cp_pass(e),
                Ev::CpProbe(e) => self.cp_probe(e),
                Ev::CpProbeCommitted { epoch, sent } => {
                    if self.cp.as_ref().is_some_and(|cp| cp.epoch == epoch) {
                        self.cp_sees(epoch, WatchItem::Probe(sent));
                    }
                }
                Ev::CpArrive { epoch, w } => self.cp_arrive(epoch, w),
                Ev::CpAnswer { epoch, w, read, ok } => self.cp_answer(epoch, w, read, ok),
                Ev::Fault(f) => self.fault(f),
            }
        }
        self.t = end;
    }

    /// Who works on each target now.
    fn workers(&self) -> BTreeMap<String, Vec<String>> {
        self.targets
            .iter()
            .map(|t| {
                let w = self
                    .work
                    .get(t)
                    .map(|w| w.keys().cloned().collect())
                    .unwrap_or_default();
                (t.clone(), w)
            })
            .collect()
    }
}

/// Ends one spell of `extra` among `spells`.
fn end_spell(spells: &mut Vec<i64>, extra: i64) {
    if let Some(i) = spells.iter().position(|e| *e == extra) {
        spells.swap_remove(i);
    }
}

fn desire_key(a: &Action) -> String {
    match a {
        Action::Desire { key, .. } | Action::Revoke { key, .. } => key.clone(),
        _ => String::new(),
    }
}

/// Member rules broken on purpose, to show that the checker catches what they allow.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Broken {
    /// Members keep working past their renew deadline.
    IgnoreDeadline,
    /// Members work on a target handed to them under any term, not only their current one.
    IgnoreHandedTerm,
    /// Members that lose a hold (authority ended, revoked) do not tell their app — what a
    /// release hook cut to the time left before the deadline did after a stall.
    AppNotToldOnLoss,
    /// Members resume what they held when a term lapsed in any later term, not only one of the
    /// same tenure (after their member Lease was fenced, too).
    ResumeAnyTenure,
}

/// The kinds of run a seed makes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scenario {
    /// Crashes, partitions, control-plane crashes and watch lag, mixed.
    Faults,
    /// Only the API server slow for every member at once (and maybe a control-plane crash).
    SlowApiServer,
    /// Planned stops while another member is partitioned and the control plane's watch lags:
    /// handoffs to a member that is being fenced, registers again and is revoked.
    Handoffs,
    /// Members' processes stalled (SIGSTOP) for up to `3D` while their apps go on, beside
    /// planned stops and a lagging control-plane watch.
    Stalls,
}

/// Runs one seed: a placement, faults over ten lease durations, then until everything healed
/// plus the bound.
pub fn run(seed: u64, scenario: Scenario) -> Report {
    run_with(seed, scenario, None)
}

/// [`run`], with a member rule `broken` on purpose.
fn run_with(seed: u64, scenario: Scenario, broken: Option<Broken>) -> Report {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed);
    let n = rng.random_range(3..=5);
    let targets = rng.random_range(8..=24);
    let mut sim = Sim::new(seed, n, targets);
    sim.broken = broken;
    for m in 0..n {
        sim.start_member(m);
    }
    sim.start_cp();
    // Placed and settled first.
    let start = 4 * D;
    let window = 10 * D;
    let mut last_heal = start;
    let faults = rng.random_range(1..=4);
    let mut planned = Vec::new();
    if scenario == Scenario::Handoffs {
        // A planned stop (maybe a restart after it); another member, which may have been
        // handed targets of the stop, cut off around it (what it sent meanwhile lands when the
        // link heals); the control plane's watch lagging.
        let at = start + D + rng.random_range(0..window / 2);
        let leaver = rng.random_range(0..n);
        let other = (leaver + rng.random_range(1..n)) % n;
        planned.push((
            at,
            FaultEv::Leave {
                m: leaver,
                restart_after: rng.random_bool(0.5).then(|| rng.random_range(D / 2..3 * D)),
            },
        ));
        planned.push((
            at + rng.random_range(-D..D),
            FaultEv::Partition {
                m: other,
                heal_after: rng.random_range(D / 2..3 * D),
            },
        ));
        let for_ms = rng.random_range(D / 2..3 * D);
        planned.push((
            at + rng.random_range(-D..2 * D),
            FaultEv::CpLag {
                extra: rng.random_range(D / 10..D),
                for_ms,
            },
        ));
    }
    for _ in 0..faults {
        let at = start + rng.random_range(0..window);
        let f = match scenario {
            Scenario::Handoffs => continue,
            Scenario::Stalls => match rng.random_range(0..5) {
                0..=2 => FaultEv::Stall {
                    m: rng.random_range(0..n),
                    for_ms: rng.random_range(D / 2..3 * D),
                },
                3 => FaultEv::Leave {
                    m: rng.random_range(0..n),
                    restart_after: rng.random_bool(0.5).then(|| rng.random_range(D / 2..3 * D)),
                },
                _ => FaultEv::CpLag {
                    extra: rng.random_range(D / 3..2 * D),
                    for_ms: rng.random_range(D / 2..3 * D),
                },
            },
            Scenario::SlowApiServer => {
                if rng.random_bool(0.8) {
                    let for_ms = rng.random_range(D..4 * D);
                    FaultEv::SlowAll {
                        extra: rng.random_range(D / 2..2 * D),
                        for_ms,
                    }
                } else {
                    let after = rng.random_range(D / 2..2 * D);
                    FaultEv::CpCrash {
                        restart_after: after,
                    }
                }
            }
            Scenario::Faults => match rng.random_range(0..6) {
                0 => {
                    let restart = rng.random_bool(0.5).then(|| rng.random_range(D / 2..3 * D));
                    FaultEv::Crash {
                        m: rng.random_range(0..n),
                        restart_after: restart,
                    }
                }
                1 => {
                    let heal = rng.random_range(D / 3..3 * D);
                    FaultEv::Partition {
                        m: rng.random_range(0..n),
                        heal_after: heal,
                    }
                }
                2 => {
                    let for_ms = rng.random_range(D / 2..3 * D);
                    FaultEv::CpLag {
                        extra: rng.random_range(D / 3..2 * D),
                        for_ms,
                    }
                }
                3 => {
                    let after = rng.random_range(D / 2..2 * D);
                    FaultEv::CpCrash {
                        restart_after: after,
                    }
                }
                4 => {
                    let restart = rng.random_bool(0.5).then(|| rng.random_range(D / 2..3 * D));
                    FaultEv::Leave {
                        m: rng.random_range(0..n),
                        restart_after: restart,
                    }
                }
                _ => {
                    let for_ms = rng.random_range(D / 3..2 * D);
                    FaultEv::SlowAll {
                        extra: rng.random_range(D / 4..D),
                        for_ms,
                    }
                }
            },
        };
        planned.push((at, f));
    }
    for (at, f) in planned {
        last_heal = last_heal.max(at + f.lasts());
        sim.report.faults.push(format!("{at}: {f:?}"));
        sim.at(at, Ev::Fault(f));
    }
    // Everything placed before the faults?
    sim.run_until(start);
    let placed = sim.workers();
    if let Some((t, w)) = placed.iter().find(|(_, w)| w.len() != 1) {
        sim.report.not_converged = Some(format!("before the faults, {t} worked on by {w:?}"));
        return sim.report;
    }
    // The bound after the last fault healed: a mass lapse's grace (D), a failover (D + a
    // pass), the renewals that end a lapse (D/3), a new control plane's first proof (D/3).
    let bound = 4 * D;
    sim.run_until(last_heal + bound);
    let alive: BTreeSet<String> = sim
        .members
        .iter()
        .filter(|m| m.alive)
        .map(|m| m.name.clone())
        .collect();
    if let Some((t, w)) = sim
        .workers()
        .into_iter()
        .find(|(_, w)| w.len() != 1 || !alive.contains(&w[0]))
    {
        sim.report.not_converged = Some(format!(
            "{bound} ms after the last fault healed ({last_heal}), {t} worked on by {w:?} (alive: {alive:?})"
        ));
    }
    let names: Vec<String> = sim.members.iter().map(|m| m.name.clone()).collect();
    sim.report.failovers_of_healthy = sim
        .report
        .fences
        .iter()
        .filter(|(_, m)| {
            names
                .iter()
                .position(|n| n == m)
                .is_some_and(|i| !sim.faulted.contains(&i))
        })
        .map(|(t, m)| format!("{m} fenced at {t}"))
        .collect();
    sim.report
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Seeds per scenario: `LEASEHOLD_SIM_SEEDS` (default 100), from `LEASEHOLD_SIM_FIRST`.
    fn seeds() -> std::ops::Range<u64> {
        let n = std::env::var("LEASEHOLD_SIM_SEEDS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(100);
        let first = std::env::var("LEASEHOLD_SIM_FIRST")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        first..first + n
    }

    #[test]
    #[ignore]
    fn one_seed() {
        let seed: u64 = std::env::var("LEASEHOLD_SIM_FIRST")
            .unwrap()
            .parse()
            .unwrap();
        let slow = std::env::var_os("LEASEHOLD_SIM_SLOW").is_some();
        let r = run(
            seed,
            if slow {
                Scenario::SlowApiServer
            } else {
                Scenario::Faults
            },
        );
        eprintln!("{r:#?}");
    }

    /// Seed 447 of the faults: two members crash for good, the control plane fails one over
    /// during the mass lapse that makes, then a slow spell shows the server slow. The lapse
    /// counts the member failed over, so it does not end while the other stays dead; that
    /// member's targets stayed unworked for good until a lapse stopped holding failovers back a
    /// lease duration after the server was last seen slow.
    #[test]
    fn a_lapse_that_saw_the_server_slow_fails_over_its_dead_once_the_server_is_prompt() {
        let r = run(447, Scenario::Faults);
        let crashes = r.faults.iter().filter(|f| f.contains("Crash { m:")).count();
        assert!(
            crashes == 2 && r.faults.iter().any(|f| f.contains("SlowAll")),
            "seed 447 no longer makes this schedule: {:?}",
            r.faults
        );
        assert!(r.overlaps.is_empty() && r.not_converged.is_none(), "{r:#?}");
    }

    /// What the seeds of one scenario add up to.
    struct Explored {
        seeds: u64,
        events: u64,
        /// Seeds in which a healthy member was fenced.
        fenced: Vec<u64>,
        /// Planned-stop handoff gaps (ms of true time), and targets a drain gave up on.
        planned_gaps: Vec<i64>,
        drained_by_timeout: usize,
        fenced_overlaps: usize,
        overruns: usize,
        resumed: usize,
        retaken: usize,
        planned_moves: usize,
    }

    /// Runs every seed of `scenario`, checking the invariants; returns what they add up to,
    /// with the seeds in which a member that never crashed nor was partitioned was fenced.
    fn explore(scenario: Scenario) -> Explored {
        let mut events = 0;
        let mut fenced = Vec::new();
        let mut planned_gaps = Vec::new();
        let mut drained_by_timeout = 0;
        let (mut fenced_overlaps, mut overruns) = (0, 0);
        let (mut resumed, mut retaken) = (0, 0);
        let mut planned_moves = 0;
        let seeds = seeds();
        let count = seeds.end - seeds.start;
        for seed in seeds {
            let r = run(seed, scenario);
            events += r.events;
            assert!(
                r.overlaps.is_empty() && r.not_converged.is_none(),
                "seed {seed}: overlaps {:?}, not converged {:?}\nfaults {:?}",
                r.overlaps,
                r.not_converged,
                r.faults
            );
            if !r.failovers_of_healthy.is_empty() {
                fenced.push(seed);
            }
            planned_gaps.extend(r.planned_gaps);
            drained_by_timeout += r.drained_by_timeout;
            fenced_overlaps += r.fenced_overlaps;
            overruns += r.overruns;
            resumed += r.resumed;
            retaken += r.retaken;
            planned_moves += r.planned_moves;
        }
        planned_gaps.sort_unstable();
        Explored {
            seeds: count,
            events,
            fenced,
            planned_gaps,
            drained_by_timeout,
            fenced_overlaps,
            overruns,
            resumed,
            retaken,
            planned_moves,
        }
    }

    /// Faults, planned stops among them: no overlap, convergence; and the planned stops hand
    /// their targets over (one write each — by the stopping member's hand-over plan, which
    /// writes the desired owner with the hand-over — and the next owner works on a target
    /// handed to it under its current term without writing).
    #[test]
    fn under_faults_no_two_members_work_on_one_target_and_every_target_is_worked_on_again() {
        let e = explore(Scenario::Faults);
        let gaps = &e.planned_gaps;
        let pct = |p: usize| gaps.get((gaps.len() * p / 100).min(gaps.len().saturating_sub(1)));
        eprintln!(
            "simulation: {} seeds of faults, {} events, 0 overlaps; planned stops: {} targets \
             handed over ({} by plan), gap p50 {:?} / p99 {:?} / max {:?} ms, {} given up at \
             the drain timeout",
            e.seeds,
            e.events,
            gaps.len(),
            e.planned_moves,
            pct(50),
            pct(99),
            gaps.last(),
            e.drained_by_timeout
        );
        assert!(
            e.seeds < 20 || !gaps.is_empty(),
            "no planned stop handed a target over"
        );
        assert!(
            e.seeds < 20 || e.planned_moves > 0,
            "no planned stop handed a target over by its plan"
        );
    }

    /// Planned stops beside a partitioned member and a lagging control-plane watch: targets are
    /// handed to members that are being fenced, register again in a new term and have the
    /// handed targets revoked — no overlap, convergence.
    #[test]
    fn handoffs_beside_a_fenced_member_never_overlap() {
        let e = explore(Scenario::Handoffs);
        eprintln!(
            "simulation: {} seeds of planned stops beside a partition, {} events, 0 overlaps; \
             {} targets handed over, {} given up at the drain timeout",
            e.seeds,
            e.events,
            e.planned_gaps.len(),
            e.drained_by_timeout
        );
    }

    /// Members stalled past their deadline while their apps go on: the control plane fences
    /// them and moves their targets, so the next owner starts beside the stalled one's app —
    /// always at a larger generation (fenced) — and the stalled member stops all its work the
    /// moment it resumes (its own clock says its authority ended). No other overlap;
    /// convergence.
    #[test]
    fn stalled_members_are_fenced_and_stop_their_work_on_resuming() {
        let e = explore(Scenario::Stalls);
        eprintln!(
            "simulation: {} seeds of stalls, {} events, 0 unfenced overlaps; {} fenced overlaps \
             (a stalled member's app beside the next owner, at a larger generation), {} members \
             that found their authority ended on resuming; planned stops: {} targets handed over",
            e.seeds,
            e.events,
            e.fenced_overlaps,
            e.overruns,
            e.planned_gaps.len()
        );
        assert!(
            e.seeds < 20 || (e.fenced_overlaps > 0 && e.overruns > 0),
            "no stall lasted past a deadline with work moved: the scenario tests nothing"
        );
    }

    /// The checker can fail on a stall: a member that resumes past its deadline and does not
    /// tell its app to stop is caught, its app beside the owner its targets were moved to.
    #[test]
    fn an_app_left_working_after_a_stall_is_caught() {
        let seed = caught(Broken::AppNotToldOnLoss, Scenario::Stalls, 0..50);
        assert!(
            seed.is_some(),
            "no overlap in 50 seeds of members not telling their apps after a stall"
        );
    }

    /// The first seed in `seeds` whose run with `broken` shows two members working on one target.
    fn caught(broken: Broken, scenario: Scenario, seeds: std::ops::Range<u64>) -> Option<u64> {
        seeds
            .into_iter()
            .find(|seed| !run_with(*seed, scenario, Some(broken)).overlaps.is_empty())
    }

    /// The checker can fail: members that keep working past their renew deadline (a broken
    /// agent) are caught working on a target beside its new owner.
    #[test]
    fn a_member_working_past_its_deadline_is_caught() {
        let seed = caught(Broken::IgnoreDeadline, Scenario::Faults, 0..50);
        assert!(
            seed.is_some(),
            "no overlap in 50 seeds of members ignoring their deadline"
        );
    }

    /// Why a hold is resumed without a write only within its tenure: members that resume what
    /// they held under any later term — after their member Lease was fenced and the target
    /// revoked, too — are caught working beside the owner it was moved to. The schedule is the
    /// one below (a member cut off, fenced and revoked, registering again on its stale copy):
    /// the first of 0..800 planned-stop seeds that shows it is 217 (108 before hand-over
    /// plans); `LEASEHOLD_SIM_CAUGHT=a..b` searches others.
    /// Around the first planned-stop seed that shows the schedule both tests below need.
    const CAUGHT_AROUND: std::ops::Range<u64> = 213..223;

    #[test]
    fn a_member_resuming_a_hold_of_an_earlier_tenure_is_caught() {
        let seeds = caught_seeds(CAUGHT_AROUND);
        let seed = caught(Broken::ResumeAnyTenure, Scenario::Handoffs, seeds.clone());
        assert!(
            seed.is_some(),
            "no overlap in seeds {seeds:?} of members resuming holds of an earlier tenure"
        );
        eprintln!("caught in seed {seed:?}");
    }

    /// The seeds a mutation test runs: `LEASEHOLD_SIM_CAUGHT=a..b`, else `default` — around
    /// the first seed that shows the rare schedule it needs (a change to the simulation or
    /// the protocol moves it: search `0..800` again then).
    fn caught_seeds(default: std::ops::Range<u64>) -> std::ops::Range<u64> {
        std::env::var("LEASEHOLD_SIM_CAUGHT")
            .ok()
            .and_then(|r| {
                let (a, b) = r.split_once("..")?;
                Some(a.parse().ok()?..b.parse().ok()?)
            })
            .unwrap_or(default)
    }

    /// Why a handed target is worked on only under the term it was handed to: members that take
    /// it under any term are caught working beside the owner it was revoked for. The schedule
    /// is rare — a member handed a target, cut off, fenced and revoked, re-registering on its
    /// stale copy — so this runs the seeds around the first one of 0..800 that shows it (217);
    /// `LEASEHOLD_SIM_CAUGHT=a..b` searches others (after a change to the simulation moves it).
    #[test]
    fn a_member_working_on_a_target_handed_under_an_earlier_term_is_caught() {
        let seeds = caught_seeds(CAUGHT_AROUND);
        let seed = caught(Broken::IgnoreHandedTerm, Scenario::Handoffs, seeds.clone());
        assert!(
            seed.is_some(),
            "no overlap in seeds {seeds:?} of members ignoring the handed term"
        );
        eprintln!("caught in seed {seed:?}");
    }

    /// A slow API server: safety and convergence as under faults, and healthy members fenced
    /// in few seeds. Not none: when a slow spell ends for a moment, the members whose renewals
    /// got through look healthy and the rest dead, as in a partial outage (docs/protocol.md).
    #[test]
    fn an_api_server_slow_for_everyone_rarely_fences_anyone() {
        let Explored {
            seeds: count,
            events,
            fenced,
            resumed,
            retaken,
            ..
        } = explore(Scenario::SlowApiServer);
        eprintln!(
            "simulation: {count} seeds of a slow API server, {events} events, 0 overlaps, \
             healthy members fenced in {} seeds: {fenced:?}; targets resumed without a write \
             {resumed}, taken again by a write {retaken}",
            fenced.len()
        );
        assert!(
            count < 20 || resumed > retaken,
            "members that lapsed together took their targets back by writes ({retaken}) more \
             than without ({resumed})"
        );
        assert!(
            fenced.len() as u64 * 20 <= count,
            "healthy members fenced in more than 5% of the seeds: {fenced:?}"
        );
    }
}
