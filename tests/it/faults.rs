//! The fault suite: a cluster of three real `leasehold agent` processes (60
//! targets, member Leases of `PROCESS_LEASE_S` = 3 s) whose HTTP hooks reach an app in the test
//! that feeds the work-level invariant checker, and the control plane in this process, on the
//! simulator or the real kube-apiserver. Each scenario injects one fault — a member killed
//! (SIGKILL, its pod kept Ready), sent SIGTERM (pod kept Ready), paused with SIGSTOP past its
//! hold then resumed; the control plane killed in the middle of a rebalance with a standby
//! replica on the same history (SQLite, and PostgreSQL when a server is given); its API
//! connection blackholed or refused — and then
//! checks, every time:
//!
//! - no two members ever worked on one target at once (hooks, not Leases); after SIGSTOP the
//!   only overlaps allowed are those a larger fencing generation fences, and they end once the
//!   paused member runs again — and none at all when the paused member's app is the watchdog
//!   app `docs/protocol.md` describes (it stops on its own once its agent's authority deadline
//!   has passed);
//! - every target is owned again within the bound the scenario states, by a member working on
//!   it, and by nobody else;
//! - history is complete: each target's last ownership row names its owner, and an operation's
//!   moves each appear once (none lost, none doubled).
//!
//! The moment of the fault and the member it hits come from a seed; each scenario runs once per
//! seed in `LEASEHOLD_FAULT_SEEDS` (a count, seeds 1..=N; 1 when unset, CI's short form).
//! `scripts/faults.sh` runs the suite with more seeds, on either tier. A failure names its
//! seed; rerun it alone with `LEASEHOLD_FAULT_SEED=<seed>`.

use crate::common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use leasehold::engine::PlanRequest;
use leasehold::k8s::model::Liveness;
use leasehold::model::{Cause, MoveState, OperationState};
use leasehold::protocol;
use leasehold::store::HistoryKind;
use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng as _};

use common::cluster::*;
use common::eventually;

const TARGETS: usize = 60;
const MEMBERS: [&str; 3] = ["c-0", "c-1", "c-2"];
/// The member Leases' duration.
const D: Duration = Duration::from_secs(PROCESS_LEASE_S);
/// Slack for a busy 2-core machine running the whole suite, on top of each stated bound.
const SLACK: Duration = Duration::from_secs(1);

/// The seeds to run each scenario with.
fn seeds() -> Vec<u64> {
    if let Some(one) = std::env::var("LEASEHOLD_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        return vec![one];
    }
    let n: u64 = std::env::var("LEASEHOLD_FAULT_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    (1..=n).collect()
}

/// Three process members sharing the targets evenly, the control plane `cp-a` acting; `policy`
/// is added to the cluster's policy.
async fn cluster(policy: &str) -> Harness {
    let mut h = Harness::new(&config_yaml(TARGETS, policy)).await;
    start_cluster(&mut h, None).await;
    h
}

/// Starts [`cluster`]'s members and control plane (reaching the API through `client`, when
/// given) in `h`.
async fn start_cluster(h: &mut Harness, client: Option<kube::Client>) {
    for m in MEMBERS {
        h.add_process_member(m).await;
    }
    h.wait_pods_ready(MEMBERS.len()).await;
    registered(h, &MEMBERS).await;
    match client {
        Some(c) => h.start_engine_with("cp-a", c).await,
        None => h.start_engine("cp-a").await,
    };
    h.wait_balanced(
        &[("c-0", 20), ("c-1", 20), ("c-2", 20)],
        Duration::from_secs(30),
    )
    .await;
}

/// Waits until each of `members` holds its member Lease (its agent runs and may be given work;
/// the first placement sees only members that do).
async fn registered(h: &Harness, members: &[&str]) {
    let leases: Api<Lease> = Api::namespaced(h.t.client.clone(), &h.member_ns);
    for m in members {
        let name = protocol::names::member_lease("leasehold", CLUSTER, m);
        eventually(Duration::from_secs(15), || async {
            let l = leases.get_opt(&name).await.ok()??;
            l.spec?.holder_identity.filter(|h| h == m).map(|_| ())
        })
        .await
        .unwrap_or_else(|| panic!("{m} never registered:\n{}", h.processes[*m].log()));
    }
}

/// A member chosen by the seed, and a moment within one member-Lease renewal period.
fn victim_and_moment(rng: &mut StdRng) -> (&'static str, Duration) {
    let victim = MEMBERS[rng.random_range(0..MEMBERS.len())];
    let moment = Duration::from_millis(rng.random_range(0..D.as_millis() as u64 / 3));
    (victim, moment)
}

/// The member Lease's last renewal of `member` (read 300 ms after a fault, so a renewal in
/// flight at that moment has landed).
async fn last_renewal(h: &Harness, member: &str) -> jiff::Timestamp {
    tokio::time::sleep(Duration::from_millis(300)).await;
    let leases: Api<Lease> = Api::namespaced(h.t.client.clone(), &h.member_ns);
    let name = protocol::names::member_lease("leasehold", CLUSTER, member);
    let l = leases.get(&name).await.unwrap();
    l.spec.unwrap().renew_time.unwrap().0
}

/// Every target owned among `members` (none on others) in the model, each worked on by its
/// owner alone (hooks), and its last ownership row in history naming that owner.
async fn settled(h: &Harness, members: &[&str], within: Duration, seed: u64) {
    let ok = eventually(within, || async {
        let m = h.model();
        let counts = &m.counts;
        if counts.owned != counts.total || counts.total != TARGETS {
            return None;
        }
        let by_work = m.targets.iter().all(|t| {
            let workers = h.checker.workers(&t.key);
            t.owner
                .as_deref()
                .is_some_and(|o| members.contains(&o) && workers == [o.to_owned()])
        });
        by_work.then_some(m)
    })
    .await;
    let m = ok.unwrap_or_else(|| {
        let m = h.model();
        let split: Vec<_> = m
            .targets
            .iter()
            .filter(|t| {
                h.checker.workers(&t.key)
                    != t.owner.iter().map(|o| o.to_string()).collect::<Vec<_>>()
            })
            .map(|t| (t.key.clone(), t.owner.clone(), h.checker.workers(&t.key)))
            .collect();
        panic!(
            "seed {seed}: not settled on {members:?} within {within:?}: {:?}; owner vs workers \
             where they differ: {split:?}",
            m.counts
        )
    });
    let owners: BTreeMap<String, String> = m
        .targets
        .iter()
        .map(|t| (t.key.to_string(), t.owner.as_deref().unwrap().to_owned()))
        .collect();
    let last_owners = || async {
        let mut last: BTreeMap<String, Option<String>> = BTreeMap::new();
        // Newest first: the first row of each target is its last change.
        for row in h.history(HistoryKind::Ownership).await {
            let target = row.target.clone().unwrap();
            last.entry(target).or_insert(row.to);
        }
        last.into_iter()
            .filter_map(|(t, to)| Some((t, to?)))
            .collect::<BTreeMap<String, String>>()
    };
    let complete = eventually(Duration::from_secs(10), || async {
        (last_owners().await == owners).then_some(())
    })
    .await;
    if complete.is_none() {
        let named = last_owners().await;
        let all = h.history(HistoryKind::Ownership).await;
        let differ: Vec<_> = owners
            .iter()
            .filter(|(t, o)| named.get(*t) != Some(*o))
            .map(|(t, o)| {
                let rows: Vec<_> = all
                    .iter()
                    .filter(|r| r.target.as_deref() == Some(t.as_str()))
                    .map(|r| (r.id, r.at_ms, &r.from, &r.to, r.cause, r.acquired_at_ms))
                    .collect();
                format!(
                    "{t}: owner {o}, history's last {:?}; rows {rows:?}",
                    named.get(t)
                )
            })
            .collect();
        panic!("seed {seed}: history's last owners are not the model's:\n{differ:#?}");
    }
}

/// Every target that left `from` is in history as leaving it, 20 of them, all for `cause`.
async fn assert_causes(h: &Harness, from: &str, cause: Cause, seed: u64) {
    let rows = eventually(Duration::from_secs(10), || async {
        let rows: Vec<_> = ownership_rows(h, 0)
            .await
            .into_iter()
            .filter(|(_, f, ..)| f.as_deref() == Some(from))
            .collect();
        (rows.len() == 20).then_some(rows)
    })
    .await
    .unwrap_or_else(|| panic!("seed {seed}: not 20 rows of targets leaving {from}"));
    assert!(
        rows.iter().all(|(.., c)| *c == Some(cause)),
        "seed {seed}: {from}'s targets left it for {rows:?}, not all {cause:?}"
    );
}

/// Ownership changes recorded since `since_ms`: (target, from, to, cause).
async fn ownership_rows(
    h: &Harness,
    since_ms: i64,
) -> Vec<(
    Option<String>,
    Option<String>,
    Option<String>,
    Option<Cause>,
)> {
    h.history(HistoryKind::Ownership)
        .await
        .into_iter()
        .filter(|r| r.at_ms >= since_ms)
        .map(|r| (r.target, r.from, r.to, r.cause))
        .collect()
}

/// A member killed (SIGKILL) while its pod stays Ready: only its member Lease tells. Its targets
/// are owned by the others within D + 1 s of its last renewal (plus slack), with no overlap.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_member_fails_over_within_the_bound() {
    for seed in seeds() {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut h = cluster("on_join: off").await;
        let (victim, moment) = victim_and_moment(&mut rng);
        tokio::time::sleep(moment).await;
        let mut p = h.processes.remove(victim).unwrap();
        p.child.kill().await.unwrap();
        h.checker.crashed(victim);
        let last = last_renewal(&h, victim).await;
        let others: Vec<&str> = MEMBERS.iter().copied().filter(|m| *m != victim).collect();
        let bound = D + Duration::from_secs(1);
        settled(&h, &others, bound + SLACK + Duration::from_secs(2), seed).await;
        let took = jiff::Timestamp::now().duration_since(last);
        eprintln!(
            "seed {seed}: {victim} killed; its targets owned again {took:?} after its last renewal"
        );
        assert!(
            took <= jiff::SignedDuration::try_from(bound + SLACK).unwrap(),
            "seed {seed}: failover took {took:?} after the last renewal (bound {bound:?})"
        );
        assert!(
            took >= jiff::SignedDuration::try_from(D).unwrap(),
            "seed {seed}: taken over {took:?} after the last renewal, before it expired"
        );
        assert_causes(&h, victim, Cause::Failover, seed).await;
        h.finish().await;
    }
}

/// A member sent SIGTERM while its pod stays Ready: it hands every target over before it
/// exits (the next owner works on each before the process is gone), with no overlap and no
/// target left without a worker for longer than a hand-off.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_member_sent_sigterm_hands_everything_over_before_it_exits() {
    for seed in seeds() {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut h = cluster("on_join: off").await;
        let (victim, moment) = victim_and_moment(&mut rng);
        tokio::time::sleep(moment).await;
        let mut p = h.processes.remove(victim).unwrap();
        let theirs: Vec<String> = h.checker.working_on(victim);
        assert_eq!(theirs.len(), 20);
        let signalled = Instant::now();
        p.signal("-TERM");
        let status = tokio::time::timeout(Duration::from_secs(15), p.child.wait())
            .await
            .unwrap_or_else(|_| panic!("seed {seed}: {victim} did not exit:\n{}", p.log()))
            .unwrap();
        let exited = signalled.elapsed();
        assert!(status.success(), "seed {seed}: {status}\n{}", p.log());
        // Every target handed over before the exit: the member stopped its work on each and
        // released it to the next owner the control plane named (who may start a moment later:
        // the hand-off's gap, below).
        let still = h.checker.working_on(victim);
        assert!(
            still.is_empty(),
            "seed {seed}: at its exit {victim} still works on {still:?}"
        );
        let model = h.model();
        for t in &theirs {
            let desired = model.target(t).and_then(|t| t.desired.clone());
            assert!(
                desired.as_deref().is_some_and(|d| d != victim),
                "seed {seed}: at {victim}'s exit {t} is desired for {desired:?}"
            );
        }
        let others: Vec<&str> = MEMBERS.iter().copied().filter(|m| *m != victim).collect();
        settled(&h, &others, Duration::from_secs(5), seed).await;
        let gaps: Vec<Duration> = h
            .checker
            .handoffs()
            .into_iter()
            .filter(|(t, _)| theirs.contains(t))
            .map(|(_, d)| d)
            .collect();
        assert_eq!(gaps.len(), 20, "seed {seed}: {gaps:?}");
        let worst = gaps.iter().max().unwrap();
        eprintln!(
            "seed {seed}: {victim} handed 20 targets over and exited {exited:?} after SIGTERM; longest gap {worst:?}"
        );
        assert!(
            *worst <= Duration::from_millis(500),
            "seed {seed}: a target had no worker for {worst:?}"
        );
        // History tells a planned stop from a crash.
        assert_causes(&h, victim, Cause::Handoff, seed).await;
        h.finish().await;
    }
}

/// A member paused (SIGSTOP) past its hold, then resumed: the others take its targets over at
/// larger generations (its app, still working, is fenced); once it runs again it tells its app
/// to stop at once, reports the overrun (history), and the overlap ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_member_paused_past_its_hold_is_fenced_and_stops_when_it_resumes() {
    for seed in seeds() {
        let mut rng = StdRng::seed_from_u64(seed);
        let h = cluster("on_join: off").await;
        h.checker.tolerate_fenced_overlaps();
        let (victim, moment) = victim_and_moment(&mut rng);
        tokio::time::sleep(moment).await;
        let pause = D + Duration::from_millis(rng.random_range(1_000..3_000));
        let p = &h.processes[victim];
        p.signal("-STOP");
        tokio::time::sleep(pause).await;
        p.signal("-CONT");
        let resumed = Instant::now();
        // Within its hook timeout (1 s) of running again, no target has two workers.
        let overlap_ended = eventually(Duration::from_secs(1) + SLACK, || async {
            let model = h.model();
            model
                .targets
                .iter()
                .all(|t| h.checker.workers(&t.key).len() <= 1)
                .then_some(())
        })
        .await;
        assert!(
            overlap_ended.is_some(),
            "seed {seed}: {victim} still works beside the new owners {:?} after resuming:\n{}",
            resumed.elapsed(),
            p.log()
        );
        let fenced = h.checker.fenced_overlaps();
        eprintln!(
            "seed {seed}: {victim} paused {pause:?}: {} fenced overlaps, ended within {:?} of SIGCONT",
            fenced.len(),
            resumed.elapsed()
        );
        let overrun = eventually(Duration::from_secs(10), || async {
            h.history(HistoryKind::Instance)
                .await
                .into_iter()
                .find(|r| {
                    r.instance.as_deref() == Some(victim) && r.event.as_deref() == Some("overrun")
                })
        })
        .await;
        assert!(
            overrun.is_some(),
            "seed {seed}: no overrun of {victim} in history:\n{}",
            p.log()
        );
        // It registers again; the cluster settles with everyone (it may get targets back only
        // through a rebalance: the join policy is off).
        settled(&h, &MEMBERS, Duration::from_secs(10), seed).await;
        h.finish().await;
    }
}

/// The same pause, but the app beside each member is the watchdog app docs/protocol.md
/// ("Hooks") describes ([`common::invariant::watchdog`]): it stops all its work on its own once
/// the authority deadline its agent last gave has passed. Then no two members ever work on one
/// target, fenced or not: the paused member's app has stopped by its renew deadline (2D/3 after
/// its last renewal was sent) before the control plane may fence it (a full D after it saw that
/// renewal) and give its targets away. (Without it, issue 32 measured 120 targets worked twice
/// on the real tier after a 15 s stall of the agent alone.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_member_paused_past_its_hold_beside_a_watchdog_app_never_overlaps() {
    for seed in seeds() {
        let mut rng = StdRng::seed_from_u64(seed);
        let h = cluster("on_join: off").await;
        let watchdogs: Vec<_> = MEMBERS
            .iter()
            .map(|m| {
                common::invariant::watchdog(
                    h.checker.clone(),
                    (*m).to_owned(),
                    h.processes[*m].authority,
                )
            })
            .collect();
        let (victim, moment) = victim_and_moment(&mut rng);
        tokio::time::sleep(moment).await;
        let held = h.checker.working_on(victim);
        assert!(!held.is_empty(), "seed {seed}: {victim} works on nothing");
        let pause = D + Duration::from_millis(rng.random_range(1_000..3_000));
        let p = &h.processes[victim];
        p.signal("-STOP");
        tokio::time::sleep(pause).await;
        // Before it runs again its app has stopped on its own (no news: the deadline passed).
        let stopped = h.checker.working_on(victim);
        p.signal("-CONT");
        assert!(
            stopped.is_empty(),
            "seed {seed}: {victim}'s app still worked on {stopped:?} after its {pause:?} pause"
        );
        // Its targets are taken over (during the pause, or just after it when the fence came
        // late), each by one other member.
        let taken = eventually(Duration::from_secs(5), || async {
            held.iter()
                .all(|t| {
                    let w = h.checker.workers(t);
                    w.len() == 1 && w[0] != victim
                })
                .then_some(())
        })
        .await;
        assert!(
            taken.is_some(),
            "seed {seed}: {victim}'s {} targets were not all taken over",
            held.len()
        );
        eprintln!(
            "seed {seed}: {victim} paused {pause:?}: its app stopped {} targets on its own, taken over with no overlap",
            held.len()
        );
        settled(&h, &MEMBERS, Duration::from_secs(10), seed).await;
        for w in watchdogs {
            w.abort();
        }
        // `finish` fails on any overlap: none was tolerated here.
        h.finish().await;
    }
}

/// The acting control plane killed in the middle of a rebalance (its task aborted: no release
/// of the control-plane Lease) with a standby replica on the same SQLite history: the standby
/// takes over and finishes the operation; every move is done once and recorded once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_control_plane_killed_mid_rebalance_is_replaced_and_nothing_is_lost() {
    control_plane_killed_mid_rebalance(false).await;
}

/// The same with the two replicas sharing a PostgreSQL history, the HA setup (when
/// `LEASEHOLD_TEST_POSTGRES_URL` names a server, as in `scripts/test.sh` with PostgreSQL
/// installed; otherwise it says it skipped).
///
/// This found two faults in history (fixed): on PostgreSQL each insert took a round trip of
/// about 40 ms (sqlx 0.9.0 leaves Nagle's algorithm on), so the acting replica's recorder fell
/// seconds behind a first placement; killed then, its unwritten rows were lost, because the
/// standby had found those holders in its first list and recorded nothing from a first list.
/// And the move's own write of its row could land before the recorder's older row of the same
/// target, leaving an older change as history's newest ("nobody → c-1, initial" after
/// "c-1 → c-3, rebalance").
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_postgresql_a_control_plane_killed_mid_rebalance_is_replaced_and_nothing_is_lost() {
    control_plane_killed_mid_rebalance(true).await;
}

async fn control_plane_killed_mid_rebalance(postgres: bool) {
    for seed in seeds() {
        let mut rng = StdRng::seed_from_u64(seed);
        let policy = "on_join: off, max_concurrent_moves: 2";
        let mut h = if postgres {
            // The cluster comes up with its history on PostgreSQL from the first engine on.
            let mut h = Harness::new(&config_yaml(TARGETS, policy)).await;
            if !h.use_postgres().await {
                eprintln!("skipped: LEASEHOLD_TEST_POSTGRES_URL is not set");
                return;
            }
            start_cluster(&mut h, None).await;
            h
        } else {
            cluster(policy).await
        };
        let standby = h.start_engine("cp-b").await;
        h.add_process_member("c-3").await;
        for e in [&h.engines["cp-a"].0, &standby] {
            eventually(Duration::from_secs(15), || async {
                let m = e.model(CLUSTER).ok()?;
                let live = m.instance("c-3")?.member_lease.as_ref()?.liveness;
                (m.instance("c-3")?.ready && live == Liveness::Live).then_some(())
            })
            .await
            .unwrap_or_else(|| panic!("seed {seed}: c-3 never live"));
        }
        let acting = h.engines["cp-a"].0.clone();
        let op = acting
            .start_rebalance(CLUSTER, &PlanRequest::default(), "faults", "seeded", false)
            .await
            .unwrap();
        assert_eq!(op.moves.len(), 15, "seed {seed}");
        let kill_after = rng.random_range(1..=10);
        eventually(Duration::from_secs(30), || async {
            let op = acting.operation(&op.id).await.ok()?;
            (op.moves
                .iter()
                .filter(|m| m.state == MoveState::Done)
                .count()
                >= kill_after)
                .then_some(())
        })
        .await
        .unwrap_or_else(|| panic!("seed {seed}: {kill_after} moves never done"));
        let (_, task) = h.engines.remove("cp-a").unwrap();
        task.abort();
        let _ = task.await;
        let killed = Instant::now();
        let done = eventually(Duration::from_secs(40), || async {
            let op = standby.operation(&op.id).await.ok()?;
            op.state.is_final().then_some(op)
        })
        .await
        .unwrap_or_else(|| panic!("seed {seed}: the standby never finished the operation"));
        eprintln!(
            "seed {seed}: control plane killed after {kill_after} moves; the standby finished {:?} later",
            killed.elapsed()
        );
        assert_eq!(
            done.state,
            OperationState::Succeeded,
            "seed {seed}: {done:?}"
        );
        assert!(done.moves.iter().all(|m| m.state == MoveState::Done));
        h.wait_balanced(
            &[("c-0", 15), ("c-1", 15), ("c-2", 15), ("c-3", 15)],
            Duration::from_secs(20),
        )
        .await;
        let members = ["c-0", "c-1", "c-2", "c-3"];
        settled(&h, &members, Duration::from_secs(10), seed).await;
        // Each move once in history: none lost, none doubled.
        let mut moved: Vec<String> = h
            .history(HistoryKind::Ownership)
            .await
            .into_iter()
            .filter(|r| r.operation.as_deref() == Some(op.id.as_str()))
            .map(|r| r.target.unwrap())
            .collect();
        moved.sort();
        let mut planned: Vec<String> = done.moves.iter().map(|m| m.target.clone()).collect();
        planned.sort();
        assert_eq!(moved, planned, "seed {seed}");
        h.finish().await;
    }
}

async fn api_connection_lost(link_state: common::Link) {
    for seed in seeds() {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut h = Harness::new(&config_yaml(TARGETS, "on_join: off")).await;
        // The members reach the API directly; only the control plane's link fails.
        let (client, link) = h.linked_control_plane_client().await;
        start_cluster(&mut h, Some(client)).await;
        let engine = h.engines["cp-a"].0.clone();
        let (_, moment) = victim_and_moment(&mut rng);
        tokio::time::sleep(moment).await;
        let lost = leasehold::store::now_ms();
        link.send_replace(link_state);
        eventually(D + SLACK, || async {
            engine.model(CLUSTER).unwrap().stale.then_some(())
        })
        .await
        .unwrap_or_else(|| {
            panic!("seed {seed}: the lost connection ({link_state:?}) was not noticed")
        });
        let outage = 2 * D + Duration::from_millis(rng.random_range(0..2_000));
        tokio::time::sleep(outage).await;
        link.send_replace(common::Link::Up);
        eventually(Duration::from_secs(15), || async {
            (!engine.model(CLUSTER).unwrap().stale).then_some(())
        })
        .await
        .unwrap_or_else(|| panic!("seed {seed}: never fresh again after {link_state:?}"));
        // Members kept renewing throughout: nobody was failed over, nothing moved.
        tokio::time::sleep(D).await;
        let moved = ownership_rows(&h, lost).await;
        assert!(
            moved.is_empty(),
            "seed {seed}: targets of live members moved after {link_state:?} for {outage:?}: {moved:?}"
        );
        settled(&h, &MEMBERS, Duration::from_secs(10), seed).await;
        eprintln!(
            "seed {seed}: control plane's API connection {link_state:?} for {outage:?}: no failover"
        );
        h.finish().await;
    }
}

/// The control plane's API connection hangs (open, nothing passes) for over two member-Lease
/// durations: the model turns stale, nothing is decided on it, and when it heals no live member
/// is failed over.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_control_planes_api_connection_blackholed_fails_over_nobody() {
    api_connection_lost(common::Link::Blackhole).await;
}

/// The same with the connection refused (dropped, new ones refused).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_control_planes_api_connection_refused_fails_over_nobody() {
    api_connection_lost(common::Link::Cut).await;
}
