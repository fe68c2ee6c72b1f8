//! The member side against the simulator (or a real kube-apiserver) over real HTTP:
//! `k8s::election` (leader election on a Lease) and `agent` (acquire what is desired for us,
//! hand over, release; renew the member Lease). The tests play the control plane themselves:
//! they create target Leases with `protocol::new_target_lease` and move desired owners with
//! `protocol::with_desire` (PUT with resourceVersion) as its control plane does, with the
//! desired owner's term (so the holder hands the target straight over), granting a target
//! without a holder to an owner whose term they know, and fencing and revoking. Short durations
//! (2 s) keep the file quick.
//!
//! The agent tests check the work at the work level: the invariant checker records the hooks
//! (who works on what), and a target counts as moved once its new owner works on it, not when a
//! Lease names it.

use crate::common;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::invariant::{InvariantChecker, Kind};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, PostParams};
use leasehold::agent::{Agent, AgentConfig, Hooks, HttpHooks};
use leasehold::k8s::election::{ElectionConfig, LeaderElector};
use leasehold::model::Cause;
use leasehold::protocol::{self, Desire, Holding, names};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

const CLUSTER: &str = "lab";
const PREFIX: &str = "leasehold";
/// Lease duration used throughout (seconds).
const DUR_S: i32 = 2;
const DUR: Duration = Duration::from_secs(DUR_S as u64);

// ---------------------------------------------------------------------------------------------
// The control plane's side, done by hand.

/// What the control plane asks of a target for `owner`, with the owner's current term when it
/// has one (then the holder hands the target straight over, or the control plane grants it when
/// nobody holds it).
async fn desire(client: &kube::Client, owner: &str) -> Desire {
    let term = member_term(client, owner).await;
    Desire {
        overlap_ms: None,
        term,
        owner: owner.into(),
        cause: Cause::Manual,
        operation: None,
        duration_s: DUR_S,
    }
}

/// The term of `identity`'s member Lease while the member holds it.
async fn member_term(client: &kube::Client, identity: &str) -> Option<String> {
    let api: Api<Lease> = Api::default_namespaced(client.clone());
    let lease = api
        .get_opt(&names::member_lease(PREFIX, CLUSTER, identity))
        .await
        .expect("get member lease")?;
    let held = Holding::of(lease.spec.as_ref()).holder.as_deref() == Some(identity);
    held.then(|| protocol::member_term(&lease))
}

fn lease_name(key: &str) -> String {
    names::target_lease(PREFIX, CLUSTER, key)
}

/// Creates a target Lease desired for `owner`: granted to it at once when its term is known (as the control plane's first placement does), else left for it to acquire.
async fn create_target(client: &kube::Client, key: &str, owner: &str) {
    let api: Api<Lease> = Api::default_namespaced(client.clone());
    let d = desire(client, owner).await;
    let lease = protocol::granted(
        &protocol::new_target_lease(PREFIX, CLUSTER, key, &d),
        &d,
        jiff::Timestamp::now(),
    );
    api.create(&PostParams::default(), &lease)
        .await
        .expect("create target lease");
}

/// Sets the desired owner as the control plane does: read, change, PUT with the
/// resourceVersion read; a 409 means read again. A target nobody holds is granted to an owner whose term is known in the same write.
async fn set_desired(client: &kube::Client, key: &str, owner: &str) {
    let api: Api<Lease> = Api::default_namespaced(client.clone());
    let d = desire(client, owner).await;
    for _ in 0..50 {
        let lease = api.get(&lease_name(key)).await.expect("get target lease");
        let next = protocol::granted(
            &protocol::with_desire(&lease, &d),
            &d,
            jiff::Timestamp::now(),
        );
        match api
            .replace(&lease_name(key), &PostParams::default(), &next)
            .await
        {
            Ok(_) => return,
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => panic!("set desired owner of {key}: {e}"),
        }
    }
    panic!("set desired owner of {key}: too many conflicts");
}

async fn get_target(client: &kube::Client, key: &str) -> Lease {
    let api: Api<Lease> = Api::default_namespaced(client.clone());
    api.get(&lease_name(key)).await.expect("get target lease")
}

async fn holding(client: &kube::Client, name: &str) -> Holding {
    let api: Api<Lease> = Api::default_namespaced(client.clone());
    let lease = api.get(name).await.expect("get lease");
    Holding::of(lease.spec.as_ref())
}

async fn holder(client: &kube::Client, key: &str) -> Option<String> {
    holding(client, &lease_name(key)).await.holder
}

/// Waits until every key is held by `owner` (None: free); panics with the holders otherwise.
async fn wait_holders(
    client: &kube::Client,
    keys: &[String],
    owner: Option<&str>,
    within: Duration,
) {
    let ok = common::eventually(within, || async {
        for k in keys {
            if holder(client, k).await.as_deref() != owner {
                return None;
            }
        }
        Some(())
    })
    .await;
    if ok.is_none() {
        let mut seen = Vec::new();
        for k in keys {
            seen.push((k.clone(), holder(client, k).await));
        }
        panic!("expected {owner:?} to hold every key within {within:?}; holders: {seen:?}");
    }
}

/// Waits until every key is held by `owner` and — at the work level — `owner`'s app works on
/// it alone (its `on_acquire` ran; nobody else's work goes on): a target handed
/// or granted to a member names it as holder before the member has started work.
async fn wait_owned(
    client: &kube::Client,
    checker: &InvariantChecker,
    keys: &[String],
    owner: &str,
    within: Duration,
) {
    let started = Instant::now();
    wait_holders(client, keys, Some(owner), within).await;
    let left = within.saturating_sub(started.elapsed());
    let alone = || {
        keys.iter()
            .filter(|k| checker.workers(k) != [owner.to_owned()])
            .map(|k| (k.clone(), checker.workers(k)))
            .collect::<Vec<_>>()
    };
    common::eventually(left, || async { alone().is_empty().then_some(()) })
        .await
        .unwrap_or_else(|| {
            panic!(
                "{owner} holds every key but does not work on each alone: {:?}",
                alone()
            )
        });
}

// ---------------------------------------------------------------------------------------------
// Running agents.

/// How long an agent drains when stopped: these tests' control plane never moves a leaving
/// member's targets away, so each stop waits out the whole drain before releasing.
const DRAIN: Duration = Duration::from_secs(1);

fn agent_cfg(ns: &str, identity: &str) -> AgentConfig {
    AgentConfig {
        lease_duration: DUR,
        // At most a third of the member Lease's duration.
        hook_timeout: Duration::from_millis(500),
        drain_timeout: DRAIN,
        ..AgentConfig::new(CLUSTER, ns, identity)
    }
}

struct Running {
    task: JoinHandle<anyhow::Result<()>>,
    stop: oneshot::Sender<()>,
    held: watch::Receiver<BTreeSet<String>>,
    leader: watch::Receiver<bool>,
}

fn spawn_agent(client: &kube::Client, identity: &str, hooks: Arc<dyn Hooks>) -> Running {
    let agent = Agent::new(agent_cfg(client.default_namespace(), identity), hooks);
    let held = agent.held();
    let leader = agent.leader();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(agent.run(client.clone(), async {
        let _ = stopped.await;
    }));
    Running {
        task,
        stop,
        held,
        leader,
    }
}

impl Running {
    /// Graceful shutdown; returns how long it took.
    async fn shutdown(self) -> Duration {
        let t = Instant::now();
        let _ = self.stop.send(());
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("agent stops within 10 s")
            .expect("agent task")
            .expect("agent ends without error");
        t.elapsed()
    }

    /// A crash: the task is aborted, nothing is released.
    async fn crash(self) {
        self.task.abort();
        let _ = self.task.await;
    }

    fn held(&self) -> BTreeSet<String> {
        self.held.borrow().clone()
    }
}

/// Whom the agents under test act as: the members' ServiceAccount of `deploy/` on the real tier
/// (the test itself plays the control plane, as the admin), the admin on the simulator.
async fn members(sim: &common::TestSim) -> common::accounts::Accounts {
    common::accounts::Accounts::for_test(sim, &sim.ns, &sim.ns, &[]).await
}

/// Logs to the test output (`RUST_LOG`, default warn).
fn logs() {
    let _ = tracing_subscriber::fmt()
        .with_test_writer()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .try_init();
}

fn keys(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

// ---------------------------------------------------------------------------------------------
// The invariant checker itself.

#[test]
fn invariant_checker_flags_two_members_on_one_target() {
    let c = InvariantChecker::new();
    c.acquired("t", "a");
    c.released("t", "a");
    c.acquired("t", "b");
    assert!(c.violations().is_empty());
    assert_eq!(c.handoffs().len(), 1);
    c.acquired("t", "a");
    assert_eq!(c.violations().len(), 1, "{:?}", c.violations());
    c.crashed("a");
    c.crashed("b");
    assert!(c.workers("t").is_empty());
    let r = std::panic::catch_unwind(|| c.assert_ok());
    assert!(r.is_err(), "assert_ok must panic on an overlap");
}

#[test]
fn invariant_checker_flags_a_generation_that_does_not_grow() {
    let c = InvariantChecker::new();
    c.acquired_at("t", "a", 0);
    c.released("t", "a");
    c.acquired_at("t", "b", 1);
    c.released("t", "b");
    c.acquired_at("u", "b", 0);
    assert!(c.violations().is_empty(), "{:?}", c.violations());
    // A stale owner's generation, or the same one again: it could not be fenced.
    c.released("u", "b");
    c.acquired_at("t", "a", 1);
    assert_eq!(c.violations().len(), 1, "{:?}", c.violations());
    assert!(c.violations()[0].contains("generation 1, not above b's 1"));
    c.released("t", "a");
    c.acquired_at("t", "c", 2);
    assert_eq!(c.violations().len(), 1, "{:?}", c.violations());
}

// ---------------------------------------------------------------------------------------------
// Leader election.

fn election(ns: &str, identity: &str) -> ElectionConfig {
    let mut cfg = ElectionConfig::new(ns, "elect-test", identity).with_duration(DUR);
    cfg.retry_period = Duration::from_millis(300);
    cfg
}

struct Candidate {
    task: JoinHandle<()>,
    stop: oneshot::Sender<()>,
    leading: watch::Receiver<bool>,
}

fn candidate(client: &kube::Client, identity: &str) -> Candidate {
    let (tx, leading) = watch::channel(false);
    let (stop, stopped) = oneshot::channel::<()>();
    let elector = LeaderElector::new(election(client.default_namespace(), identity));
    let task = tokio::spawn(elector.run(client.clone(), tx, async {
        let _ = stopped.await;
    }));
    Candidate {
        task,
        stop,
        leading,
    }
}

/// Samples both candidates every 10 ms for `d`; panics if both ever lead; returns how many
/// samples had a leader, and how many were taken (fewer than `d` / 10 ms on a busy machine).
async fn sample_exclusive(a: &Candidate, b: &Candidate, d: Duration) -> (usize, usize) {
    let end = Instant::now() + d;
    let (mut led, mut taken) = (0, 0);
    while Instant::now() < end {
        let (x, y) = (*a.leading.borrow(), *b.leading.borrow());
        assert!(!(x && y), "two leaders at once");
        led += usize::from(x || y);
        taken += 1;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    (led, taken)
}

async fn wait_leading(c: &Candidate, within: Duration) -> Option<Duration> {
    let t = Instant::now();
    let mut rx = c.leading.clone();
    tokio::time::timeout(within, rx.wait_for(|l| *l))
        .await
        .ok()
        .map(|_| t.elapsed())
}

/// Leader election (`k8s::election`): the same in both protocols.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elector_two_candidates_one_leader_and_failover_after_a_duration() {
    let sim = common::start().await;
    let a = candidate(&sim.client, "a");
    assert!(wait_leading(&a, Duration::from_secs(3)).await.is_some());
    let b = candidate(&sim.client, "b");
    let (led, taken) = sample_exclusive(&a, &b, Duration::from_secs(3)).await;
    assert!(
        led == taken && taken > 50,
        "a leader all the time ({led} of {taken} samples)"
    );
    assert!(
        *a.leading.borrow() && !*b.leading.borrow(),
        "the first leader keeps leading"
    );
    assert_eq!(
        holding(&sim.client, "elect-test").await.holder.as_deref(),
        Some("a")
    );

    // Crash the leader: no release. b may take over only once the record has been unchanged
    // for a full duration by its own clock: at least DUR after a's last renewal, which was at
    // most one retry period before the crash.
    let last = holding(&sim.client, "elect-test").await;
    a.task.abort();
    let crashed = Instant::now();
    let took = wait_leading(&b, Duration::from_secs(6))
        .await
        .expect("b takes over after a crash");
    let retry = Duration::from_millis(300);
    println!("elector failover after a crash: {took:?}");
    assert!(
        took >= DUR - retry - Duration::from_millis(100),
        "took over too early: {took:?}"
    );
    assert!(
        took <= DUR + 3 * retry + Duration::from_millis(500),
        "took over too late: {took:?}"
    );
    let now = holding(&sim.client, "elect-test").await;
    assert_eq!(now.holder.as_deref(), Some("b"));
    assert_eq!(now.transitions, last.transitions + 1);
    let gap = now.acquire.unwrap().duration_since(last.renew.unwrap());
    assert!(
        gap >= jiff::SignedDuration::from_secs(DUR_S.into()),
        "{gap:?}"
    );
    let _ = crashed;
    let _ = b.stop.send(());
    b.task.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elector_graceful_release_hands_over_within_a_retry_period() {
    let sim = common::start().await;
    let a = candidate(&sim.client, "a");
    assert!(wait_leading(&a, Duration::from_secs(3)).await.is_some());
    let b = candidate(&sim.client, "b");
    sample_exclusive(&a, &b, Duration::from_millis(800)).await;
    let mut a_leading = a.leading.clone();
    let _ = a.stop.send(());
    a.task.await.unwrap();
    assert!(!*a_leading.borrow_and_update(), "a says it stopped leading");
    let h = holding(&sim.client, "elect-test").await;
    assert_eq!(h.holder, None, "released on shutdown");
    assert_eq!(h.duration_s, protocol::RELEASED_DURATION_SECONDS);
    let took = wait_leading(&b, Duration::from_secs(3))
        .await
        .expect("b leads after a's release");
    println!("elector handover after a graceful release: {took:?}");
    assert!(
        took <= Duration::from_millis(300 + 400),
        "handover took {took:?}"
    );
    let _ = b.stop.send(());
    b.task.await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// The agent.

/// Targets desired for members whose term nobody knew yet (created before the
/// agents ran) are acquired by each member's own write; a desire without the annotation (the
/// label alone still names m-0) gives nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_acquires_exactly_the_leases_desired_for_it() {
    let sim = common::start().await;
    let c = &sim.client;
    let accounts = members(&sim).await;
    let mc = &accounts.member;
    let ks = keys("dev", 6);
    for (i, k) in ks.iter().enumerate() {
        create_target(c, k, &format!("m-{}", i % 2)).await;
    }
    create_target(c, "nobody", "m-9").await;
    // A target whose desired owner was removed.
    create_target(c, "undesired", "m-0").await;
    let api: Api<Lease> = Api::default_namespaced(c.clone());
    let mut l = get_target(c, "undesired").await;
    l.metadata
        .annotations
        .as_mut()
        .unwrap()
        .remove(protocol::ANN_DESIRED_OWNER);
    api.replace(&lease_name("undesired"), &PostParams::default(), &l)
        .await
        .unwrap();

    let checker = InvariantChecker::new();
    let m0 = spawn_agent(mc, "m-0", checker.hooks("m-0", Duration::ZERO));
    let m1 = spawn_agent(mc, "m-1", checker.hooks("m-1", Duration::ZERO));
    let even: Vec<String> = ks.iter().step_by(2).cloned().collect();
    let odd: Vec<String> = ks.iter().skip(1).step_by(2).cloned().collect();
    wait_owned(c, &checker, &even, "m-0", Duration::from_secs(5)).await;
    wait_owned(c, &checker, &odd, "m-1", Duration::from_secs(5)).await;
    // Give any wrong acquisition time to happen.
    tokio::time::sleep(Duration::from_millis(700)).await;
    wait_holders(
        c,
        &["nobody".into(), "undesired".into()],
        None,
        Duration::ZERO,
    )
    .await;
    assert_eq!(m0.held(), even.iter().cloned().collect());
    assert_eq!(m1.held(), odd.iter().cloned().collect());
    for (m, want) in [("m-0", &even), ("m-1", &odd)] {
        let mut w = checker.working_on(m);
        w.sort();
        assert_eq!(
            &w, want,
            "on_acquire ran for exactly the targets desired for {m}"
        );
    }
    checker.assert_ok();
    m0.shutdown().await;
    m1.shutdown().await;
}

/// Each move is one write by the holder, after its app stopped — the target handed straight to
/// the new owner under the term the control plane wrote down — and the new owner's app starts
/// only then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moving_the_desired_owner_hands_over_release_before_acquire() {
    logs();
    let sim = common::start().await;
    let c = &sim.client;
    let accounts = members(&sim).await;
    let mc = &accounts.member;
    let ks = keys("move", 20);
    let checker = InvariantChecker::new();
    // Hooks take 30 ms, to widen any window in which both could be working.
    let m0 = spawn_agent(mc, "m-0", checker.hooks("m-0", Duration::from_millis(30)));
    let m1 = spawn_agent(mc, "m-1", checker.hooks("m-1", Duration::from_millis(30)));
    // Both registered, so that the control plane knows their terms: m-0 is granted its
    // targets, and every move is a handover in one write.
    common::eventually(Duration::from_secs(5), || async {
        (member_term(c, "m-0").await.is_some() && member_term(c, "m-1").await.is_some())
            .then_some(())
    })
    .await
    .expect("both members hold their member Leases");
    for k in &ks {
        create_target(c, k, "m-0").await;
    }
    wait_owned(c, &checker, &ks, "m-0", Duration::from_secs(5)).await;

    // Move every target to m-1, then back to m-0.
    for (to, from) in [("m-1", "m-0"), ("m-0", "m-1")] {
        let moved = Instant::now();
        futures::future::join_all(ks.iter().map(|k| set_desired(c, k, to))).await;
        wait_owned(c, &checker, &ks, to, Duration::from_secs(5)).await;
        println!(
            "moved {} targets {from} -> {to} in {:?}",
            ks.len(),
            moved.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    checker.assert_ok();
    for k in &ks {
        let log: Vec<(String, Kind)> = checker
            .log_of(k)
            .into_iter()
            .map(|r| (r.member, r.kind))
            .collect();
        assert_eq!(
            log,
            vec![
                ("m-0".into(), Kind::Acquired),
                ("m-0".into(), Kind::Released),
                ("m-1".into(), Kind::Acquired),
                ("m-1".into(), Kind::Released),
                ("m-0".into(), Kind::Acquired),
            ],
            "hook order of {k}"
        );
        let h = holder(c, k).await;
        assert_eq!(h.as_deref(), Some("m-0"));
        let t = holding(c, &lease_name(k)).await.transitions;
        // The fencing generation: one more for each hold. A new owner whose two watches had
        // not both shown it the handed Lease yet acquires it with a write of its own, a hold
        // more (the checker saw every acquisition's generation grow).
        assert!(t >= 2, "two changes of hands recorded on {k}: {t}");
    }
    let mut lat: Vec<Duration> = checker.handoffs().into_iter().map(|(_, d)| d).collect();
    assert_eq!(lat.len(), 2 * ks.len());
    lat.sort();
    let (p50, p99, max) = (
        percentile(&lat, 0.5),
        percentile(&lat, 0.99),
        lat[lat.len() - 1],
    );
    println!(
        "handoff latency (old on_release done -> new on_acquire): p50 {p50:?} p99 {p99:?} max {max:?}"
    );
    assert!(
        p99 <= Duration::from_millis(500),
        "handoff p99 {p99:?} (max {max:?})"
    );
    assert_eq!(m0.held(), ks.iter().cloned().collect());
    assert!(m1.held().is_empty());
    m0.shutdown().await;
    m1.shutdown().await;
}

/// A stopping member says it is leaving on its member Lease; nobody moves its
/// targets here, so after its drain it tells its app to stop each, releases them, then the
/// leader Lease and its member Lease — which says it stopped all work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_releases_everything() {
    let sim = common::start().await;
    let c = &sim.client;
    let accounts = members(&sim).await;
    let mc = &accounts.member;
    let ks = keys("bye", 5);
    for k in &ks {
        create_target(c, k, "m-0").await;
    }
    let checker = InvariantChecker::new();
    let m0 = spawn_agent(mc, "m-0", checker.hooks("m-0", Duration::from_millis(20)));
    wait_owned(c, &checker, &ks, "m-0", Duration::from_secs(5)).await;
    let mut leader = m0.leader.clone();
    tokio::time::timeout(Duration::from_secs(3), leader.wait_for(|l| *l))
        .await
        .expect("a lone agent leads")
        .unwrap();
    let held = m0.held.clone();
    let member = names::member_lease(PREFIX, CLUSTER, "m-0");
    // Leaving is announced while the member still holds everything (its drain).
    let api: Api<Lease> = Api::default_namespaced(c.clone());
    let leaving = async {
        common::eventually(DRAIN, || async {
            let l = api.get(&member).await.ok()?;
            protocol::parse_native(&l, CLUSTER)?.leaving.then_some(())
        })
        .await
    };
    let (took, leaving) = tokio::join!(m0.shutdown(), leaving);
    println!("shutdown took {took:?}");
    assert!(leaving.is_some(), "m-0 said it was leaving");
    wait_holders(c, &ks, None, Duration::ZERO).await;
    assert_eq!(
        holding(c, &member).await.holder,
        None,
        "member lease released: all work stopped"
    );
    let lh = holding(c, &names::leader_lease(PREFIX, CLUSTER)).await;
    assert_eq!(lh.holder, None, "leader lease released");
    assert!(!*leader.borrow(), "no longer leader");
    assert!(
        checker.working_on("m-0").is_empty(),
        "on_release ran for every target"
    );
    assert!(held.borrow().is_empty(), "held() is empty after shutdown");
    for k in &ks {
        let h = holding(c, &lease_name(k)).await;
        assert_eq!(h.duration_s, protocol::RELEASED_DURATION_SECONDS);
    }
    assert!(
        took < DRAIN + Duration::from_secs(3),
        "shutdown took {took:?}"
    );
    checker.assert_ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_agents_elect_exactly_one_leader() {
    logs();
    let sim = common::start().await;
    let c = &sim.client;
    let accounts = members(&sim).await;
    let mc = &accounts.member;
    let agents: Vec<Running> = ["m-0", "m-1", "m-2"]
        .iter()
        .map(|m| spawn_agent(mc, m, Arc::new(leasehold::agent::NoHooks)))
        .collect();
    let leaders = |a: &[Running]| -> Vec<usize> {
        a.iter()
            .enumerate()
            .filter(|(_, r)| *r.leader.borrow())
            .map(|(i, _)| i)
            .collect()
    };
    let end = Instant::now() + Duration::from_secs(3);
    let mut with_leader = 0;
    while Instant::now() < end {
        let l = leaders(&agents);
        assert!(l.len() <= 1, "several leaders: {l:?}");
        with_leader += usize::from(l.len() == 1);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        with_leader > 200,
        "a leader most of the time ({with_leader} samples)"
    );
    let l = leaders(&agents);
    assert_eq!(l.len(), 1);
    let lh = holding(c, &names::leader_lease(PREFIX, CLUSTER)).await;
    assert_eq!(lh.holder, Some(format!("m-{}", l[0])));

    // The leader leaves gracefully: another one leads soon, never two.
    let mut agents = agents;
    let gone = agents.remove(l[0]);
    gone.shutdown().await;
    let t = Instant::now();
    let end = t + Duration::from_secs(2);
    let mut next = None;
    while Instant::now() < end {
        let l = leaders(&agents);
        assert!(l.len() <= 1, "several leaders: {l:?}");
        if l.len() == 1 && next.is_none() {
            next = Some(t.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let next = next.expect("a new leader after the old one left");
    println!("agent leader handover after a graceful shutdown: {next:?}");
    assert!(next <= Duration::from_secs(1), "handover took {next:?}");
    for a in agents {
        a.shutdown().await;
    }
}

/// Identities and keys also appear in label values and Lease names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn awkward_target_keys_work() {
    let sim = common::start().await;
    let c = &sim.client;
    let accounts = members(&sim).await;
    let mc = &accounts.member;
    let ks: Vec<String> = [
        "Router-1",
        "spine/1",
        "Leaf_2/Ethernet1/1",
        "café",
        "10.0.0.1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for k in &ks {
        create_target(c, k, "m-0").await;
    }
    let checker = InvariantChecker::new();
    let m0 = spawn_agent(mc, "m-0", checker.hooks("m-0", Duration::ZERO));
    let m1 = spawn_agent(mc, "m-1", checker.hooks("m-1", Duration::ZERO));
    wait_owned(c, &checker, &ks, "m-0", Duration::from_secs(5)).await;
    // The Lease names its holder a moment before the member has read its write's answer.
    let all: BTreeSet<String> = ks.iter().cloned().collect();
    common::eventually(Duration::from_secs(5), || async {
        (m0.held() == all).then_some(())
    })
    .await;
    assert_eq!(m0.held(), all);
    for k in &ks {
        set_desired(c, k, "m-1").await;
    }
    wait_holders(c, &ks, Some("m-1"), Duration::from_secs(5)).await;
    let mut want = ks.clone();
    want.sort();
    // A member starts work after it holds the Lease: its acquire hook may still be running.
    let working = || {
        let mut w = checker.working_on("m-1");
        w.sort();
        w
    };
    common::eventually(Duration::from_secs(5), || async {
        (working() == want).then_some(())
    })
    .await;
    assert_eq!(working(), want, "hooks got the raw keys");
    checker.assert_ok();
    m0.shutdown().await;
    m1.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// Hooks over HTTP, and a member cut off from the API.

/// A local "member app" recording hook POSTs; answers 500 to acquires while `fail` is set.
async fn hook_app(
    fail: Arc<Mutex<bool>>,
) -> (SocketAddr, Arc<Mutex<Vec<(String, serde_json::Value)>>>) {
    use axum::routing::post;
    let calls: Arc<Mutex<Vec<(String, serde_json::Value)>>> = Arc::default();
    let rec = calls.clone();
    let app = axum::Router::new().route(
        "/leasehold/{event}",
        post(
            move |axum::extract::Path(event): axum::extract::Path<String>,
                  axum::Json(body): axum::Json<serde_json::Value>| {
                let rec = rec.clone();
                let fail = fail.clone();
                async move {
                    let failing = event == "acquire" && *fail.lock().unwrap();
                    rec.lock().unwrap().push((event, body));
                    if failing {
                        http::StatusCode::INTERNAL_SERVER_ERROR
                    } else {
                        http::StatusCode::NO_CONTENT
                    }
                }
            },
        ),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, calls)
}

/// The app's calls are the work here (the invariant checker is not involved).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_hooks_tell_the_app_and_a_failed_acquire_hook_keeps_the_lease() {
    let sim = common::start().await;
    let c = &sim.client;
    let accounts = members(&sim).await;
    let mc = &accounts.member;
    let fail = Arc::new(Mutex::new(true));
    let (addr, calls) = hook_app(fail.clone()).await;
    create_target(c, "Spine/7", "m-0").await;
    let hooks = Arc::new(HttpHooks::new(
        &format!("http://{addr}/leasehold/{{event}}"),
        CLUSTER,
        "m-0",
    ));
    let m0 = spawn_agent(mc, "m-0", hooks);
    wait_holders(c, &["Spine/7".into()], Some("m-0"), Duration::from_secs(5)).await;
    common::eventually(Duration::from_secs(2), || async {
        (!calls.lock().unwrap().is_empty()).then_some(())
    })
    .await
    .expect("acquire hook called");
    // The hook failed (500); the lease is kept (documented choice) past a member Lease's
    // duration.
    tokio::time::sleep(DUR + Duration::from_millis(300)).await;
    assert_eq!(holder(c, "Spine/7").await.as_deref(), Some("m-0"));
    // m-1 has no member Lease: no term to hand it over under, so m-0 releases it.
    set_desired(c, "Spine/7", "m-1").await;
    wait_holders(c, &["Spine/7".into()], None, Duration::from_secs(3)).await;
    let mut calls = calls.lock().unwrap().clone();
    // Each call carries the member's authority deadline: later than the call, and within a
    // renew deadline (2D/3) of it — the release's later than the acquire's (renewed since).
    let deadlines: Vec<i64> = calls
        .iter_mut()
        .map(|(_, body)| {
            body.as_object_mut()
                .unwrap()
                .remove("deadline_unix_ms")
                .and_then(|d| d.as_i64())
                .expect("a deadline in every call")
        })
        .collect();
    let now = jiff::Timestamp::now().as_millisecond();
    assert!(
        deadlines.windows(2).all(|w| w[0] < w[1])
            && deadlines[1] <= now + 2 * DUR_S as i64 * 1000 / 3,
        "{deadlines:?} at {now}"
    );
    // The first hold of a new Lease: generation 0 (the invariant checker sees later ones grow).
    let expect_body = serde_json::json!(
        {"target": "Spine/7", "generation": 0, "cluster": CLUSTER, "instance": "m-0"}
    );
    assert_eq!(
        calls,
        vec![
            ("acquire".into(), expect_body.clone()),
            ("release".into(), expect_body)
        ]
    );
    m0.shutdown().await;
}

/// A member cut off from the API cannot renew its member Lease; it stops all work
/// within its renew deadline (two thirds of the duration after its last renewal), before the
/// control plane (played here) has seen that Lease unchanged for a full duration, fenced it,
/// and revoked its target, granting it to another member in the same write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_cut_off_from_the_api_stops_work_before_it_is_fenced() {
    let sim = common::start().await;
    let c = &sim.client;
    let accounts = members(&sim).await;
    let mc = &accounts.member;
    let (cut_client, link) =
        common::linked_product_client_as(&sim, &accounts.member_kubeconfig).await;
    let checker = InvariantChecker::new();
    let m0 = spawn_agent(&cut_client, "m-0", checker.hooks("m-0", Duration::ZERO));
    let m1 = spawn_agent(mc, "m-1", checker.hooks("m-1", Duration::ZERO));
    common::eventually(Duration::from_secs(5), || async {
        (member_term(c, "m-0").await.is_some() && member_term(c, "m-1").await.is_some())
            .then_some(())
    })
    .await
    .expect("both members hold their member Leases");
    create_target(c, "island", "m-0").await;
    wait_owned(
        c,
        &checker,
        &["island".into()],
        "m-0",
        Duration::from_secs(5),
    )
    .await;

    let api: Api<Lease> = Api::default_namespaced(c.clone());
    let member = names::member_lease(PREFIX, CLUSTER, "m-0");
    link.send_replace(common::Link::Cut);
    let cut_at = Instant::now();
    // The control plane's view: the member Lease's record, and how long it has stood unchanged
    // (any renewal in flight at the cut lands or fails within a moment).
    let mut seen = api.get(&member).await.unwrap();
    let mut seen_at = Instant::now();
    let stopped = common::eventually(DUR * 2, || async {
        checker
            .working_on("m-0")
            .is_empty()
            .then(|| cut_at.elapsed())
    });
    let unchanged = async {
        loop {
            let now = api.get(&member).await.unwrap();
            if now.metadata.resource_version != seen.metadata.resource_version {
                (seen, seen_at) = (now, Instant::now());
            } else if seen_at.elapsed() >= DUR {
                return seen_at;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let (stopped, since) = tokio::join!(stopped, unchanged);
    let stopped = stopped.expect("m-0 stops working when it cannot renew");
    // Its last renewal was sent at most a third of a duration before the cut; it must have
    // stopped two thirds of a duration after that (and the hook's time).
    assert!(
        stopped < DUR * 2 / 3 + Duration::from_millis(300),
        "{stopped:?}"
    );
    assert!(
        checker.working_on("m-0").is_empty(),
        "m-0 stopped before it was fenced"
    );
    // Fence: a compare-and-swap on the record seen unchanged.
    let fenced = protocol::fenced(&seen, protocol::Fence::Expired, jiff::Timestamp::now());
    api.replace(&member, &PostParams::default(), &fenced)
        .await
        .expect("fence m-0's member Lease");
    // Revoke, granting the target to m-1 under its term.
    let d = desire(c, "m-1").await;
    assert!(d.term.is_some(), "m-1's term is known");
    let target = get_target(c, "island").await;
    let revoked = protocol::granted(
        &protocol::revoked(&target, &d, jiff::Timestamp::now()),
        &d,
        jiff::Timestamp::now(),
    );
    api.replace(&lease_name("island"), &PostParams::default(), &revoked)
        .await
        .expect("revoke the target");
    wait_owned(
        c,
        &checker,
        &["island".into()],
        "m-1",
        Duration::from_secs(3),
    )
    .await;
    println!(
        "cut-off member stopped work after {stopped:?}; fenced {:?} after its Lease was \
         last seen changing; m-1 works on it {:?} after the cut",
        since.elapsed(),
        cut_at.elapsed()
    );
    checker.assert_ok();
    assert!(m0.held().is_empty(), "m-0 forgot what it could not renew");
    m0.crash().await;
    m1.shutdown().await;
}

/// A member paused past its member Lease (SIGSTOP for longer than the duration, then SIGCONT:
/// a GC pause, a starved node): every hold ends at once, and it still tells its app to stop
/// every target, with the full hook timeout, says so in its log and reports it — a Warning
/// Event `PausedPastHold` about its pod, and on the member Lease
/// (`leasehold.io/last-overrun`), from which the control plane records it in history. The
/// agent runs as its own process, as in a pod. (The release hook was once bounded by what was
/// left of the hold — nothing, after such a pause — and killed before it could tell the app;
/// and the overrun was only counted in memory.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_paused_past_its_lease_stops_everything_and_reports_it() {
    // The release hook's bound is within a third of the member Lease's duration.
    let (dur, hook_timeout) = (Duration::from_secs(3), 1);
    let sim = common::start().await;
    let c = &sim.client;
    let accounts = members(&sim).await;
    let keys = keys("paused", 3);
    for k in &keys {
        create_target(c, k, "m-0").await;
    }
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("hooks.log");
    let stderr = std::fs::File::create(dir.path().join("agent.log")).unwrap();
    let mut agent = tokio::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["agent", "--cluster", CLUSTER, "--namespace", &sim.ns])
        .args(["--identity", "m-0", "--lease-prefix", PREFIX])
        .args([
            "--lease-duration",
            &dur.as_secs().to_string(),
            "--hook-timeout",
            &hook_timeout.to_string(),
        ])
        .arg("--kubeconfig")
        .arg(&accounts.member_kubeconfig)
        .arg("--on-acquire")
        .arg(format!(
            "echo acquire $LEASEHOLD_TARGET >> '{}'",
            log.display()
        ))
        // Slow enough that a hook given no time is killed before it writes.
        .arg("--on-release")
        .arg(format!(
            "sleep 0.3; echo release $LEASEHOLD_TARGET >> '{}'",
            log.display()
        ))
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(stderr)
        .kill_on_drop(true)
        .spawn()
        .expect("leasehold agent starts");
    let lines = |event: &str| -> usize {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with(&format!("{event} ")))
            .count()
    };
    common::eventually(Duration::from_secs(10), || async {
        (lines("acquire") == keys.len()).then_some(())
    })
    .await
    .unwrap_or_else(|| {
        panic!(
            "the agent did not start work on its targets:\n{}",
            std::fs::read_to_string(dir.path().join("agent.log")).unwrap_or_default()
        )
    });

    let pid = agent.id().unwrap().to_string();
    let signal = |sig: &str| {
        let ok = std::process::Command::new("kill")
            .args([sig, &pid])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {sig} {pid}");
    };
    signal("-STOP");
    tokio::time::sleep(dur + Duration::from_millis(1500)).await;
    signal("-CONT");
    common::eventually(Duration::from_secs(5), || async {
        (lines("release") == keys.len()).then_some(())
    })
    .await
    .unwrap_or_else(|| {
        panic!(
            "the app was told to stop {} of {} targets after the pause:\n{}",
            lines("release"),
            keys.len(),
            std::fs::read_to_string(dir.path().join("agent.log")).unwrap_or_default()
        )
    });
    let agent_log = || std::fs::read_to_string(dir.path().join("agent.log")).unwrap();
    // The report: an Event about the pod, telling how many targets were stopped late.
    let events: Api<Event> = Api::namespaced(c.clone(), &sim.ns);
    let reported = common::eventually(Duration::from_secs(5), || async {
        let listed = events.list(&Default::default()).await.ok()?;
        let ours: Vec<Event> = listed
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("PausedPastHold"))
            .collect();
        let told: usize = ours
            .iter()
            .filter_map(|e| {
                e.note
                    .as_deref()?
                    .split(" late")
                    .next()?
                    .rsplit(" stop ")
                    .next()
            })
            .filter_map(|n| n.split(' ').next()?.parse::<usize>().ok())
            .sum();
        (told == keys.len()).then_some(ours)
    })
    .await
    .unwrap_or_else(|| panic!("no PausedPastHold Event for every target\n{}", agent_log()));
    for e in &reported {
        let about = e.regarding.as_ref().unwrap();
        assert_eq!(
            (about.kind.as_deref(), about.name.as_deref()),
            (Some("Pod"), Some("m-0"))
        );
        assert_eq!(e.type_.as_deref(), Some("Warning"));
        assert_eq!(e.reporting_instance.as_deref(), Some("m-0"));
    }
    {
        // All three in one report, carried by the member Lease from its next write on.
        let leases: Api<Lease> = Api::namespaced(c.clone(), &sim.ns);
        let member = names::member_lease(PREFIX, CLUSTER, "m-0");
        let on_lease = common::eventually(Duration::from_secs(5), || async {
            let l = leases.get(&member).await.ok()?;
            protocol::parse_native(&l, CLUSTER)?.overrun
        })
        .await
        .expect("the overrun on the member Lease");
        assert_eq!((on_lease.targets, on_lease.total), (3, 3), "{on_lease:?}");
        assert!(on_lease.late_ms > 0, "{on_lease:?}");
        assert_eq!(reported.len(), 1, "one report: {reported:?}");
        let regarding_lease = reported[0].related.as_ref().unwrap();
        assert_eq!(regarding_lease.name.as_deref(), Some(member.as_str()));
    }
    agent.kill().await.unwrap();
    let agent_log = agent_log();
    assert_eq!(
        agent_log.matches("paused past the end of its hold").count(),
        keys.len(),
        "{agent_log}"
    );
}

/// The product's client (`leasehold::k8s::client`, which `leasehold agent` and `serve` use)
/// speaks HTTP/2 to a kube-apiserver, which offers it, so a member's burst of writes shares one
/// connection instead of opening one per request; the simulator serves plain HTTP/1.1.
#[tokio::test]
async fn the_products_client_speaks_http2_where_the_api_server_offers_it() {
    let sim = common::start().await;
    let client = leasehold::k8s::client::connect(Some(&sim.kubeconfig))
        .await
        .unwrap();
    let want = if sim.is_real() {
        http::Version::HTTP_2
    } else {
        http::Version::HTTP_11
    };
    let answers = futures::future::join_all((0..32).map(|_| {
        let client = client.clone();
        async move {
            let request = http::Request::get("/version")
                .body(kube::client::Body::empty())
                .unwrap();
            client.send(request).await.unwrap()
        }
    }))
    .await;
    for answer in answers {
        assert!(answer.status().is_success(), "{answer:?}");
        assert_eq!(answer.version(), want);
    }
    // And an ordinary typed call through kube's middleware (auth, base URI) works over it.
    let leases: Api<Lease> = Api::namespaced(client, &sim.ns);
    leases.list(&Default::default()).await.unwrap();
}
