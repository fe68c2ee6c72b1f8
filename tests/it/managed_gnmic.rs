//! Managed gnmic with real gnmic processes: a `gnmic collect` per member, each driven by its
//! member's `leasehold agent --gnmic-api` process, collecting from a live gNMI device (a second
//! gnmic's gNMI server). What is checked is read from gnmic's own API ([`Watch`]), never from
//! Leasehold: every 50 ms, which collectors run which targets.
//!
//! One scenario, in order: three members take the targets; a fourth joins and is given its
//! share; it is removed again (remove-instance: a planned stop with hand-over); a gnmic is
//! killed and restarted (it forgets every target: its agent gives them back); a member is
//! stopped with SIGTERM (a scale-down's or rolling update's stop: everything handed over before
//! it exits); a member crashes with its gnmic (the others take its targets once its member
//! Lease lapses). Throughout, no target is run by two gnmics at once; each phase's collection
//! gaps are printed, and the planned ones are bounded.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use leasehold::k8s::model::TargetState;
use leasehold::model::OperationState;

use crate::common;
use common::cluster::*;
use common::eventually;
use common::gnmic::{self, Gnmic, Watch};

const TARGETS: usize = 12;
const POLL: Duration = Duration::from_millis(50);

/// The target list, shared by the control plane (inline) and the agents (a file): each target
/// collected from `device`.
fn target_list(device: std::net::SocketAddr) -> Vec<String> {
    (0..TARGETS)
        .map(|i| {
            format!(
                "{{key: dev-{i:02}, gnmic: {{address: '{device}', insecure: true, timeout: 2s}}}}"
            )
        })
        .collect()
}

/// Waits until every target is collected by exactly one gnmic, its owner's, and the owners are
/// `members` (each with its even share when `balanced`).
async fn collected_by_owners(h: &Harness, watch: &Watch, members: &[&str], within: Duration) {
    let members: BTreeSet<String> = members.iter().map(|m| (*m).to_owned()).collect();
    let ok = eventually(within, || async {
        let m = h.model();
        let owners: BTreeMap<String, String> = m
            .targets
            .iter()
            .filter_map(|t| Some((t.key.to_string(), t.owner.clone()?.to_string())))
            .collect();
        if m.targets.is_empty()
            || owners.len() != m.targets.len()
            || !owners.values().all(|o| members.contains(o))
        {
            return None;
        }
        let collecting = watch.collecting();
        owners
            .iter()
            .all(|(t, o)| {
                collecting
                    .get(t)
                    .is_some_and(|c| c.len() == 1 && c.contains(o))
            })
            .then_some(())
    })
    .await;
    if ok.is_none() {
        panic!(
            "not every target collected by its owner among {members:?} within {within:?}: gnmic \
             collects {:?}, run by two at once: {:?}; {}",
            watch.collecting(),
            watch.overlaps(),
            h.diagnosis(30)
        );
    }
}

/// The gaps `watch` recorded since the last call: printed as `phase`, and their longest.
fn gaps(watch: &Watch, phase: &str) -> Duration {
    let gaps = watch.take_gaps();
    let mut d: Vec<Duration> = gaps.iter().map(|(_, g)| *g).collect();
    d.sort();
    let max = d.last().copied().unwrap_or_default();
    let p99 = d
        .get((d.len() * 99).div_ceil(100).saturating_sub(1))
        .copied()
        .unwrap_or_default();
    eprintln!(
        "gnmic {phase}: {} targets with a collection gap, p99 {p99:?}, max {max:?}",
        d.len()
    );
    max
}

/// Fails if any target was run by two gnmics at once so far.
fn no_overlap(watch: &Watch, phase: &str) {
    let overlaps = watch.overlaps();
    assert!(
        overlaps.is_empty(),
        "{phase}: targets run by two gnmics at once: {overlaps:?}"
    );
}

#[tokio::test]
async fn managed_gnmic_never_runs_a_target_twice_through_join_removal_restart_and_crash() {
    let Some(bin) = gnmic::binary() else { return };
    let dir = tempfile::tempdir().unwrap();
    let device = Gnmic::device(&bin, dir.path(), "d");
    device.listening().await;
    let list = target_list(device.addr);
    let (mut h, targets_file) = managed_harness(&list, dir.path()).await;
    let watch = Watch::start(POLL);
    let mut collectors = BTreeMap::new();
    for m in ["c-0", "c-1", "c-2"] {
        let g = Gnmic::collector(&bin, dir.path(), m);
        g.listening().await;
        watch.add(m, g.addr);
        h.add_gnmic_member(m, g.addr, &targets_file).await;
        collectors.insert(m, g);
    }
    h.wait_pods_ready(3).await;
    h.wait_registered(&["c-0", "c-1", "c-2"]).await;
    h.start_engine("cp-a").await;
    collected_by_owners(&h, &watch, &["c-0", "c-1", "c-2"], Duration::from_secs(30)).await;
    gaps(&watch, "placement");
    // Each agent tells the control plane, on its member Lease, that gnmic collects all it holds.
    eventually(Duration::from_secs(10), || async {
        let m = h.model();
        ["c-0", "c-1", "c-2"]
            .iter()
            .all(|n| {
                m.instance(n).is_some_and(|i| {
                    i.member_lease
                        .as_ref()
                        .and_then(|l| l.app_work.as_ref())
                        .is_some_and(|w| {
                            w.app == "gnmic" && w.held as usize == i.owned && w.working == w.held
                        })
                })
            })
            .then_some(())
    })
    .await
    .expect("the members never reported gnmic collecting all they hold");

    // A fourth member joins: its share is handed to it (on_join: auto).
    let g = Gnmic::collector(&bin, dir.path(), "c-3");
    g.listening().await;
    watch.add("c-3", g.addr);
    h.add_gnmic_member("c-3", g.addr, &targets_file).await;
    collectors.insert("c-3", g);
    eventually(Duration::from_secs(30), || async {
        let m = h.model();
        (m.instance("c-3")?.owned == TARGETS / 4).then_some(())
    })
    .await
    .expect("c-3 was never given its share");
    collected_by_owners(
        &h,
        &watch,
        &["c-0", "c-1", "c-2", "c-3"],
        Duration::from_secs(30),
    )
    .await;
    let join = gaps(&watch, "scale-up 3 → 4 (hand-over)");

    // It is removed: its targets are handed over before its gnmic stops.
    no_overlap(&watch, "scale-up");
    // (Once the join's rebalance has finished: one operation at a time.)
    let op = eventually(Duration::from_secs(30), || async {
        h.engine()
            .start_remove(CLUSTER, "c-3", "test", None)
            .await
            .ok()
    })
    .await
    .expect("remove-instance never started");
    let done = eventually(Duration::from_secs(30), || async {
        let op = h.engine().operation(&op.id).await.ok()?;
        (op.state == OperationState::Succeeded).then_some(op)
    })
    .await;
    assert!(done.is_some(), "removing c-3 never succeeded");
    collected_by_owners(&h, &watch, &["c-0", "c-1", "c-2"], Duration::from_secs(30)).await;
    let removal = gaps(&watch, "remove-instance (hand-over)");
    no_overlap(&watch, "remove-instance");
    assert!(
        watch.collecting().values().all(|c| !c.contains("c-3")),
        "c-3's gnmic still collects after its removal"
    );

    // c-0's gnmic restarts and forgets everything: its agent gives the targets back.
    let g0 = collectors.get_mut("c-0").unwrap();
    g0.kill().await;
    // (Until the watch has seen it gone: the measure below starts from a gnmic collecting
    // nothing, never from a round read before the kill.)
    watch.fresh_round().await;
    g0.start();
    g0.listening().await;
    let restarted = tokio::time::Instant::now();
    collected_by_owners(&h, &watch, &["c-0", "c-1", "c-2"], Duration::from_secs(10)).await;
    let back = restarted.elapsed();
    eprintln!("gnmic restart: every target collected again {back:?} after gnmic listened");
    gaps(&watch, "gnmic restart");
    no_overlap(&watch, "gnmic restart");
    assert!(
        back <= Duration::from_secs(2),
        "a restarted gnmic was given its targets back only after {back:?}"
    );

    // c-1 is stopped (SIGTERM, as a scale-down or rolling update does): its agent has every
    // target handed over — each stopped in its gnmic first — before it exits; then its pod
    // (and gnmic) goes.
    let mut p = h.processes.remove("c-1").unwrap();
    p.signal("-TERM");
    let status = tokio::time::timeout(Duration::from_secs(20), p.child.wait())
        .await
        .unwrap_or_else(|_| panic!("c-1 did not exit on SIGTERM:\n{}", p.log()))
        .unwrap();
    assert!(status.success(), "{status}\n{}", p.log());
    // (A round of the watch that began after the exit.)
    watch.fresh_round().await;
    let left = watch.collecting();
    assert!(
        left.values().all(|c| !c.contains("c-1")),
        "c-1's gnmic still collects at its agent's exit: {left:?}"
    );
    collectors.get_mut("c-1").unwrap().kill().await;
    watch.remove("c-1");
    collected_by_owners(&h, &watch, &["c-0", "c-2"], Duration::from_secs(30)).await;
    let stop = gaps(&watch, "planned stop (SIGTERM, hand-over)");
    no_overlap(&watch, "planned stop");

    // c-2 crashes with its gnmic: its targets are taken once its member Lease lapses.
    let mut p = h.processes.remove("c-2").unwrap();
    p.signal("-KILL");
    let _ = p.child.wait().await;
    collectors.get_mut("c-2").unwrap().kill().await;
    watch.remove("c-2");
    collected_by_owners(&h, &watch, &["c-0"], Duration::from_secs(30)).await;
    gaps(&watch, "crash (failover)");

    eprintln!(
        "gnmic: {} watch rounds over {:?}",
        watch.rounds(),
        watch.elapsed()
    );
    no_overlap(&watch, "crash");
    // A planned hand-over: the old gnmic stopped, the Lease written, the new one started and
    // connected — well under a second on loopback; a round of the watch is ~2 × 50 ms.
    for (phase, max) in [
        ("scale-up", join),
        ("remove-instance", removal),
        ("planned stop", stop),
    ] {
        assert!(
            max <= Duration::from_secs(1),
            "{phase}: a target went uncollected for {max:?}"
        );
    }
    drop(watch);
    h.finish().await;
    drop(collectors);
}

/// gnmic never retries a target whose first start failed; the agent restarts it (disable,
/// enable, with backoff): a device that comes up after its target is collected. And a gnmic
/// that does not answer cannot confirm it stopped: its member keeps its targets (nobody else
/// starts them) until it answers again, and only then hands them over.
#[tokio::test]
async fn a_late_device_is_collected_and_a_gnmic_that_cannot_confirm_a_stop_keeps_its_targets() {
    let Some(bin) = gnmic::binary() else { return };
    let dir = tempfile::tempdir().unwrap();
    let device = Gnmic::device(&bin, dir.path(), "d");
    device.listening().await;
    let late = gnmic::free_addr();
    let mut list = target_list(device.addr);
    list.truncate(6);
    list.push(format!(
        "{{key: late, gnmic: {{address: '{late}', insecure: true, timeout: 1s}}}}"
    ));
    let (mut h, targets_file) = managed_harness(&list, dir.path()).await;
    let watch = Watch::start(POLL);
    let mut collectors = BTreeMap::new();
    for m in ["c-0", "c-1"] {
        let g = Gnmic::collector(&bin, dir.path(), m);
        g.listening().await;
        watch.add(m, g.addr);
        h.add_gnmic_member(m, g.addr, &targets_file).await;
        collectors.insert(m, g);
    }
    h.wait_pods_ready(2).await;
    h.wait_registered(&["c-0", "c-1"]).await;
    h.start_engine("cp-a").await;
    // Placed; `late`'s device is down, so its gnmic lists it as failed, not collecting.
    eventually(Duration::from_secs(20), || async {
        let m = h.model();
        (m.counts.owned == m.counts.total && m.counts.total == 7).then_some(())
    })
    .await
    .expect("never placed");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!watch.collecting().contains_key("late"));
    // Its holder says so: held, not collected, and why (gnmic's own reason).
    let why = eventually(Duration::from_secs(10), || async {
        let m = h.model();
        let owner = m
            .targets
            .iter()
            .find(|t| t.key.as_ref() == "late")?
            .owner
            .clone()?;
        let w = m
            .instance(&owner)?
            .member_lease
            .as_ref()?
            .app_work
            .clone()?;
        w.not_working.get("late").cloned()
    })
    .await
    .expect("the holder of `late` never reported it not collected");
    assert!(gnmic_says_why(&why), "{why}");
    // The control plane shows it as unworked (held, nobody collecting it), with gnmic's reason,
    // and the cluster's counts say so.
    let shown = eventually(Duration::from_secs(10), || async {
        let m = h.model();
        let t = m.targets.iter().find(|t| t.key.as_ref() == "late")?;
        (t.state == TargetState::Unworked && m.counts.unworked >= 1).then(|| t.clone())
    })
    .await
    .expect("`late` never shown as unworked");
    assert_eq!(shown.app_working, Some(false));
    assert!(
        shown.app_problem.as_deref().is_some_and(gnmic_says_why),
        "{shown:?}"
    );
    let _late_device = Gnmic::device_at(&bin, dir.path(), "late", late);
    _late_device.listening().await;
    let up = tokio::time::Instant::now();
    collected_by_owners(&h, &watch, &["c-0", "c-1"], Duration::from_secs(20)).await;
    eprintln!(
        "gnmic: a device up after its target failed: collected {:?} later",
        up.elapsed()
    );
    let worked = eventually(Duration::from_secs(10), || async {
        let m = h.model();
        let t = m.targets.iter().find(|t| t.key.as_ref() == "late")?;
        (t.state == TargetState::Owned && t.app_working == Some(true) && m.counts.unworked == 0)
            .then_some(())
    })
    .await;
    assert!(
        worked.is_some(),
        "`late` collected, but not shown as worked"
    );

    // c-1's gnmic stops answering (SIGSTOP); c-1 is removed. Its targets must stay with it,
    // run by nobody else, for as long as its gnmic cannot say it stopped them.
    let held: Vec<String> = h
        .model()
        .targets
        .iter()
        .filter(|t| t.owner.as_deref() == Some("c-1"))
        .map(|t| t.key.to_string())
        .collect();
    assert!(!held.is_empty());
    collectors["c-1"].signal("-STOP");
    let op = h
        .engine()
        .start_remove(CLUSTER, "c-1", "test", None)
        .await
        .expect("remove-instance starts");
    let until = tokio::time::Instant::now() + Duration::from_secs(4);
    while tokio::time::Instant::now() < until {
        let m = h.model();
        for t in &held {
            let owner = m
                .targets
                .iter()
                .find(|x| x.key.as_ref() == t.as_str())
                .and_then(|x| x.owner.clone());
            assert_eq!(
                owner.as_deref(),
                Some("c-1"),
                "{t} left c-1 while its gnmic could not confirm it stopped"
            );
            assert!(
                !watch.collecting().get(t).is_some_and(|c| c.contains("c-0")),
                "{t} started on c-0 while c-1's gnmic may still run it"
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    collectors["c-1"].signal("-CONT");
    collected_by_owners(&h, &watch, &["c-0"], Duration::from_secs(20)).await;
    let done = eventually(Duration::from_secs(30), || async {
        let op = h.engine().operation(&op.id).await.ok()?;
        (op.state == OperationState::Succeeded).then_some(())
    })
    .await;
    assert!(done.is_some(), "removing c-1 never succeeded");
    no_overlap(&watch, "a gnmic that could not confirm its stops");
    drop(watch);
    h.finish().await;
    drop(collectors);
}

/// Whether a "not collected" reason for the target whose device is down is gnmic's own: its
/// first start `failed`, or — once the agent restarted it (disable, enable) — `running` with the
/// dial's error while gnmic retries the connection.
fn gnmic_says_why(why: &str) -> bool {
    why.starts_with("gnmic: failed")
        || (why.starts_with("gnmic: running: ") && why.contains("connection refused"))
}
