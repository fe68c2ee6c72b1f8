use std::collections::BTreeSet;
use std::path::Path;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use serde_json::json;

use super::*;
use crate::config::Config;
use crate::k8s::model::TargetState;
use crate::protocol::{self, Desire};

const CONFIG: &str = "
clusters:
- name: c
  namespace: ns
  selector: {app: c}
  headless_service: c
  roles: [{name: controlling, selector: {role: controlling}}]
  targets:
    inline: [t1, t2, {key: T/3, weight: 2}]
    config_map: {name: more, key: list}
- name: g
  namespace: ns
  selector: {app: gnmic}
  protocol: gnmic
";

fn at(ms: i64) -> Timestamp {
    Timestamp::from_millisecond(ms).unwrap()
}

fn index() -> Index {
    let config = Config::parse(CONFIG, Path::new("t.yaml")).unwrap();
    let mut ix = Index::new(&config.clusters);
    // Start synced and empty, so changes are reported.
    ix.reset::<Pod>("ns", &[], at(0));
    ix.reset::<Lease>("ns", &[], at(0));
    ix.reset::<ConfigMap>("ns", &[], at(0));
    ix
}

fn mk_pod(name: &str, ready: bool, extra_labels: serde_json::Value) -> Pod {
    let mut labels = json!({"app": "c"});
    labels
        .as_object_mut()
        .unwrap()
        .extend(extra_labels.as_object().unwrap().clone());
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns", "labels": labels,
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "c", "uid": "u"}]},
        "spec": {"containers": [], "nodeName": "node-1"},
        "status": {"phase": "Running", "podIP": "10.0.0.9",
            "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}
    }))
    .unwrap()
}

fn mk_lease(key: &str, desired: &str, holder: Option<&str>, acquire_s: i64) -> Lease {
    let d = Desire {
        overlap_ms: None,
        term: None,
        owner: desired.into(),
        cause: Cause::Rebalance,
        operation: Some("op-1".into()),
        duration_s: 10,
    };
    let mut l = protocol::new_target_lease("leasehold", "c", key, &d);
    l.metadata.namespace = Some("ns".into());
    if let Some(h) = holder {
        l = protocol::acquired(&l, h, at(acquire_s * 1000), 10);
    }
    l
}

/// A member Lease of `id`, written by it at `at_ms` (duration 10 s).
fn mk_member(id: &str, at_ms: i64) -> Lease {
    let mut l = protocol::new_member_lease("leasehold", "c", id, at(at_ms), 10, false);
    l.metadata.namespace = Some("ns".into());
    l.metadata.resource_version = Some(at_ms.to_string());
    l
}

/// Members `ids` registered at `at_ms`: their holds are live for 10 s of our clock from then.
fn live_members(ix: &mut Index, ids: &[&str], at_ms: i64) {
    for id in ids {
        ix.apply(&mk_member(id, at_ms), at(at_ms));
    }
}

fn ownership(changes: &[Change]) -> Vec<(String, Option<String>, Option<String>, Cause)> {
    changes
        .iter()
        .filter_map(|c| match c {
            Change::Ownership {
                target,
                from,
                to,
                cause,
                ..
            } => Some((target.clone(), from.clone(), to.clone(), *cause)),
            _ => None,
        })
        .collect()
}

#[test]
fn instance_lifecycle_is_reported_once_synced() {
    let config = Config::parse(CONFIG, Path::new("t.yaml")).unwrap();
    let mut ix = Index::new(&config.clusters);
    // The initial list is the starting state, not a change.
    assert!(
        ix.reset("ns", &[mk_pod("c-0", true, json!({}))], at(0))
            .is_empty()
    );
    let ch = ix.apply(&mk_pod("c-1", false, json!({})), at(1));
    assert_eq!(ch.len(), 1);
    assert!(
        matches!(&ch[0], Change::Instance { instance, kind: InstanceEventKind::Joined, .. } if instance == "c-1")
    );
    let ch = ix.apply(&mk_pod("c-1", true, json!({})), at(2));
    assert!(matches!(
        &ch[0],
        Change::Instance {
            kind: InstanceEventKind::Ready,
            ..
        }
    ));
    assert!(ix.apply(&mk_pod("c-1", true, json!({})), at(3)).is_empty());
    let ch = ix.delete::<Pod>("ns", "c-1", at(4));
    assert!(matches!(
        &ch[0],
        Change::Instance {
            kind: InstanceEventKind::Left,
            ..
        }
    ));
    assert_eq!(ix.departed_ip("c", "c-1").as_deref(), Some("10.0.0.9"));
    // A pod of another app is not a member.
    let mut other = mk_pod("x", true, json!({}));
    other.metadata.labels = Some([("app".to_owned(), "x".to_owned())].into());
    assert!(ix.apply(&other, at(5)).is_empty());
}

#[test]
fn instances_carry_role_ordinal_dns_and_load() {
    let mut ix = index();
    ix.apply(&mk_pod("c-0", true, json!({"role": "controlling"})), at(0));
    ix.apply(&mk_pod("c-1", true, json!({})), at(0));
    live_members(&mut ix, &["c-0", "c-1"], 0);
    ix.apply(&mk_lease("t1", "c-0", Some("c-0"), 0), at(0));
    ix.apply(&mk_lease("T/3", "c-0", Some("c-0"), 0), at(0));
    let m = ix.model("c", at(500)).unwrap();
    let i0 = m.instance("c-0").unwrap();
    assert_eq!(i0.role.as_deref(), Some("controlling"));
    assert_eq!(i0.ordinal, Some(0));
    assert_eq!(i0.dns.as_deref(), Some("c-0.c.ns.svc.cluster.local"));
    assert_eq!((i0.owned, i0.owned_weight), (2, 3));
    assert_eq!(i0.lease_renew_age_ms, Some(500));
    assert!(i0.eligible());
    assert_eq!(m.instance("c-1").unwrap().role, None);
    assert_eq!(m.counts.total, 3);
    assert_eq!((m.counts.owned, m.counts.unassigned), (2, 1));
}

#[test]
fn ownership_changes_name_previous_holder_and_cause() {
    let mut ix = index();
    ix.apply(&mk_pod("c-0", true, json!({})), at(0));
    ix.apply(&mk_pod("c-1", true, json!({})), at(0));
    live_members(&mut ix, &["c-0", "c-1"], 0);
    let l = mk_lease("t1", "c-0", None, 0);
    assert!(
        ix.apply(&l, at(0)).is_empty(),
        "a free lease has no owner yet"
    );
    let held = protocol::acquired(&l, "c-0", at(1000), 10);
    let mut initial = held.clone();
    initial
        .metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert(protocol::ANN_CAUSE.into(), "initial".into());
    assert_eq!(
        ownership(&ix.apply(&initial, at(1000))),
        [("t1".into(), None, Some("c-0".into()), Cause::Initial)]
    );
    // The same copy again is no change.
    assert!(ix.apply(&initial, at(2000)).is_empty());
    // Rebalance: desired moves to c-1, c-0 releases, c-1 acquires: one change c-0 -> c-1.
    let d = Desire {
        overlap_ms: None,
        term: None,
        owner: "c-1".into(),
        cause: Cause::Rebalance,
        operation: Some("op-9".into()),
        duration_s: 10,
    };
    let moving = protocol::with_desire(&initial, &d);
    assert!(ix.apply(&moving, at(3000)).is_empty());
    assert_eq!(
        ix.model("c", at(3000)).unwrap().target("t1").unwrap().state,
        TargetState::Moving
    );
    let released = protocol::released(&moving, at(3100));
    assert!(ix.apply(&released, at(3100)).is_empty());
    assert_eq!(
        ix.model("c", at(3100)).unwrap().target("t1").unwrap().state,
        TargetState::Unassigned
    );
    let ch = ix.apply(
        &protocol::acquired(&released, "c-1", at(3200), 10),
        at(3200),
    );
    assert_eq!(
        ownership(&ch),
        [(
            "t1".into(),
            Some("c-0".into()),
            Some("c-1".into()),
            Cause::Rebalance
        )]
    );
    match &ch[0] {
        Change::Ownership {
            operation,
            acquired_at_ms,
            ..
        } => {
            assert_eq!(operation.as_deref(), Some("op-9"));
            assert_eq!(*acquired_at_ms, Some(3200));
        }
        _ => unreachable!(),
    }
    // Someone other than the desired owner takes it: external.
    let current = mk_lease("t1", "c-1", Some("c-1"), 4);
    let stolen = protocol::acquired(&protocol::released(&current, at(4000)), "c-0", at(4001), 10);
    assert_eq!(
        ownership(&ix.apply(&stolen, at(4001)))[0].3,
        Cause::External
    );
}

fn gaps(changes: &[Change]) -> Vec<Option<i64>> {
    changes
        .iter()
        .filter_map(|c| match c {
            Change::Ownership { gap_ms, .. } => Some(*gap_ms),
            _ => None,
        })
        .collect()
}

/// A member Lease that changes what is shown of its member (taken, fenced,
/// deleted) is a `Members` change for live views; a renewal is not.
#[test]
fn member_lease_changes_but_not_renewals_are_reported() {
    use crate::protocol::Fence;
    let mut ix = index_with("");
    let members = |ch: &[Change]| {
        ch.iter()
            .filter(|c| matches!(c, Change::Members { cluster } if cluster == "c"))
            .count()
    };
    let mut member = protocol::new_member_lease("leasehold", "c", "c-0", at(0), 10, false);
    member.metadata.namespace = Some("ns".into());
    assert_eq!(members(&ix.apply(&member, at(0))), 1, "taken");
    let renewed = protocol::member_renewed(&member, "c-0", at(3_000), 10, false);
    assert_eq!(members(&ix.apply(&renewed, at(3_000))), 0, "renewed");
    let fenced = protocol::fenced(&renewed, Fence::Expired, at(14_000));
    assert_eq!(members(&ix.apply(&fenced, at(14_000))), 1, "fenced");
    let name = fenced.metadata.name.clone().unwrap();
    assert_eq!(
        members(&ix.delete::<Lease>("ns", &name, at(15_000))),
        1,
        "deleted"
    );
}

/// A member that stops renewing is reported to live views when its member Lease
/// goes late (over 2/3 of its duration unchanged) and lost (all of it), and again when it
/// renews; nothing between.
#[test]
fn heartbeats_going_late_and_lost_by_the_clock_are_reported() {
    let mut ix = index_with("");
    let mut member = protocol::new_member_lease("leasehold", "c", "c-0", at(0), 9, false);
    member.metadata.namespace = Some("ns".into());
    ix.apply(&member, at(0));
    let reported = |ix: &mut Index, ms: i64| {
        let before = ix.revision();
        let ch = ix.heartbeats(at(ms));
        assert_eq!(ix.revision() > before, !ch.is_empty(), "revision at {ms}");
        matches!(&ch[..], [Change::Members { cluster }] if cluster == "c")
    };
    assert!(!reported(&mut ix, 5_000), "fresh");
    assert!(reported(&mut ix, 6_001), "late past 6 s of 9");
    assert!(!reported(&mut ix, 7_000), "still late: said once");
    assert!(reported(&mut ix, 9_000), "lost at 9 s");
    let renewed = protocol::member_renewed(&member, "c-0", at(9_500), 9, false);
    ix.apply(&renewed, at(9_500));
    assert!(reported(&mut ix, 9_600), "renewed again");
    assert!(!reported(&mut ix, 9_900));
}

/// Target Leases are never renewed, so a failover's gap counts from the old
/// holder's member Lease last seen renewed (not from the revoke), a handoff's from the release.
#[test]
fn a_failover_gap_counts_from_the_members_last_renewal() {
    use crate::protocol::{Desire, Fence};
    let mut ix = index_with("");
    let mut member = protocol::new_member_lease("leasehold", "c", "c-0", at(0), 10, false);
    member.metadata.namespace = Some("ns".into());
    ix.apply(&member, at(0));
    let t1 = protocol::acquired(&mk_lease("t1", "c-0", None, 0), "c-0", at(100), 10);
    assert_eq!(gaps(&ix.apply(&t1, at(100))), [None], "first owner");
    // c-0 renews until 2,000 and goes silent; fenced at 12,500, t1 revoked at 12,600 for
    // c-1, which takes it at 12,650.
    let renewed = protocol::member_renewed(&member, "c-0", at(2_000), 10, false);
    ix.apply(&renewed, at(2_000));
    ix.apply(
        &protocol::fenced(&renewed, Fence::Expired, at(12_500)),
        at(12_500),
    );
    let failover = Desire {
        overlap_ms: None,
        term: None,
        owner: "c-1".into(),
        cause: Cause::Failover,
        operation: None,
        duration_s: 10,
    };
    let revoked = protocol::revoked(&t1, &failover, at(12_600));
    ix.apply(&revoked, at(12_600));
    let taken = protocol::acquired(&revoked, "c-1", at(12_650), 10);
    assert_eq!(gaps(&ix.apply(&taken, at(12_650))), [Some(10_650)]);
    // A handoff back (c-1 releases at 30,000, c-0 takes it at 30,040): from the release,
    // though the target Lease was written 17 s before.
    let handoff = Desire {
        overlap_ms: None,
        term: None,
        owner: "c-0".into(),
        cause: Cause::Handoff,
        operation: None,
        duration_s: 10,
    };
    let desired = protocol::with_desire(&taken, &handoff);
    ix.apply(&desired, at(29_000));
    let released = protocol::released(&desired, at(30_000));
    ix.apply(&released, at(30_000));
    let back = protocol::acquired(&released, "c-0", at(30_040), 10);
    assert_eq!(gaps(&ix.apply(&back, at(30_040))), [Some(40)]);
}

#[test]
fn target_states_follow_observation_and_membership() {
    let mut ix = index();
    ix.apply(&mk_pod("c-0", true, json!({})), at(0));
    live_members(&mut ix, &["c-0"], 0);
    ix.apply(&mk_lease("t1", "c-0", Some("c-0"), 0), at(0));
    ix.apply(&mk_lease("t2", "ghost-7", Some("ghost-7"), 0), at(0));
    ix.apply(&mk_lease("gone", "c-0", Some("c-0"), 0), at(0));
    let m = ix.model("c", at(9_999)).unwrap();
    assert_eq!(m.target("t1").unwrap().state, TargetState::Owned);
    assert_eq!(
        m.target("t2").unwrap().state,
        TargetState::Expired,
        "holder has no pod and no member Lease: nobody works on it"
    );
    assert_eq!(
        m.target("gone").unwrap().state,
        TargetState::Orphaned,
        "not configured"
    );
    assert_eq!(m.target("T/3").unwrap().state, TargetState::Unassigned);
    let ghost = m.instance("ghost-7").unwrap();
    assert!(ghost.ghost && !ghost.eligible());
    assert_eq!(ghost.owned, 0, "an expired hold carries no load");
    // Its holder's member Lease unchanged for a full duration by our clock: expired (whatever
    // renewTime says).
    let m = ix.model("c", at(10_000)).unwrap();
    assert_eq!(m.target("t1").unwrap().state, TargetState::Expired);
    assert_eq!(
        m.instance("c-0").unwrap().owned,
        0,
        "expired leases carry no load"
    );
    // Cordons show, even for instances without a pod.
    ix.set_cordons("c", BTreeSet::from(["c-0".to_owned(), "old-3".to_owned()]));
    let m = ix.model("c", at(10_000)).unwrap();
    assert!(m.instance("c-0").unwrap().cordoned);
    assert!(!m.instance("c-0").unwrap().eligible());
    assert!(m.instance("old-3").unwrap().ghost);
}

/// A first list reports no change, except each holder's acquisition (when it is identified by
/// an `acquireTime`) as a replayed change, for history to record if nobody did: from unknown,
/// cause and operation from the Lease, no gap. A relist afterwards reports only real changes.
#[test]
fn a_first_list_replays_identified_acquisitions_only() {
    let config = Config::parse(CONFIG, Path::new("t.yaml")).unwrap();
    let mut ix = Index::new(&config.clusters);
    let held = mk_lease("t1", "c-1", Some("c-1"), 7);
    let mut unidentified = mk_lease("t2", "c-0", Some("c-0"), 8);
    unidentified.spec.as_mut().unwrap().acquire_time = None;
    let unheld = mk_lease("t3", "c-0", None, 0);
    let all = [held.clone(), unidentified, unheld];
    let ch = ix.reset::<Lease>("ns", &all, at(9000));
    assert_eq!(ch.len(), 1, "{ch:?}");
    match &ch[0] {
        Change::Ownership {
            target,
            from,
            to,
            cause,
            operation,
            acquired_at_ms,
            gap_ms,
            replayed,
            at_ms,
            ..
        } => {
            assert_eq!(target, "t1");
            assert_eq!((from, to.as_deref()), (&None, Some("c-1")));
            assert_eq!(*cause, Cause::Rebalance);
            assert_eq!(operation.as_deref(), Some("op-1"));
            assert_eq!((*acquired_at_ms, *gap_ms, *at_ms), (Some(7000), None, 9000));
            assert!(replayed);
        }
        other => panic!("{other:?}"),
    }
    // Synced now: the same Lease again is no change; a new holder is a live one.
    assert!(ownership(&ix.reset::<Lease>("ns", &all, at(9500))).is_empty());
    let moved = protocol::held_by(
        &protocol::released(&held, at(10_000)),
        "c-0",
        at(10_001),
        10,
    );
    let ch = ix.apply(&moved, at(10_001));
    assert!(
        matches!(&ch[..], [Change::Ownership { replayed: false, from: Some(f), .. }] if f == "c-1"),
        "{ch:?}"
    );
}

#[test]
fn relist_reports_what_changed_while_away() {
    let mut ix = index();
    ix.apply(&mk_pod("c-0", true, json!({})), at(0));
    ix.apply(&mk_pod("c-1", true, json!({})), at(0));
    let ch = ix.reset(
        "ns",
        &[
            mk_pod("c-1", false, json!({})),
            mk_pod("c-2", true, json!({})),
        ],
        at(5),
    );
    let mut got: Vec<_> = ch
        .iter()
        .map(|c| match c {
            Change::Instance { instance, kind, .. } => format!("{instance} {kind}"),
            other => format!("{other:?}"),
        })
        .collect();
    got.sort();
    assert_eq!(
        got,
        ["c-0 left", "c-1 not_ready", "c-2 joined", "c-2 ready"]
    );
}

#[test]
fn config_map_targets_reload_and_bad_content_keeps_last_good() {
    let mut ix = index();
    let cm = |text: &str| -> ConfigMap {
        serde_json::from_value(
            json!({"metadata": {"name": "more", "namespace": "ns"}, "data": {"list": text}}),
        )
        .unwrap()
    };
    let ch = ix.apply(&cm("- extra-1\n- {key: extra-2, weight: 5}\n"), at(0));
    assert!(matches!(&ch[..], [Change::Targets { cluster }] if cluster == "c"));
    let m = ix.model("c", at(0)).unwrap();
    assert_eq!(m.counts.total, 5);
    assert_eq!(m.target("extra-2").unwrap().weight, 5);
    assert!(ix.apply(&cm("- [not, a, target"), at(1)).is_empty());
    let m = ix.model("c", at(1)).unwrap();
    assert_eq!(m.counts.total, 5, "last good list kept");
    assert!(
        m.targets_error
            .as_deref()
            .unwrap()
            .contains("ConfigMap more key \"list\"")
    );
}

#[test]
fn gnmic_clusters_are_read_from_their_own_layout() {
    let mut ix = index();
    let mut pod = mk_pod("gnmic-1", true, json!({}));
    pod.metadata.labels = Some([("app".to_owned(), "gnmic".to_owned())].into());
    ix.apply(&pod, at(0));
    // (An upper-case key never gets a Lease from gnmic itself; another writer's would still
    // be read by its annotation.)
    let key = "gnmic/g/targets/Router-1";
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": "gnmic-g-targets-router-1", "namespace": "ns",
            "labels": {"app": "gnmic"},
            "annotations": {"original-key": key, "original-value": "gnmic-1"}},
        "spec": {"holderIdentity": "5b1e0d2c-uuid", "leaseDurationSeconds": 10}
    }))
    .unwrap();
    let ch = ix.apply(&lease, at(0));
    assert_eq!(
        ownership(&ch),
        [(
            "Router-1".into(),
            None,
            Some("gnmic-1".into()),
            Cause::Initial
        )]
    );
    let m = ix.model("g", at(1)).unwrap();
    assert_eq!(m.target("Router-1").unwrap().state, TargetState::Owned);
    assert_eq!(m.instance("gnmic-1").unwrap().owned, 1);
    // The native cluster in the same namespace does not see it.
    assert!(ix.model("c", at(1)).unwrap().target("Router-1").is_none());
}

/// A target whose holder cannot be working on it is `unworked`, not `owned` or `moving`, while
/// the hold has yet to lapse: the holder's pod failed (a crash), or its managed app says it
/// does not work on it (with the app's reason). Nothing else changes for the engine.
#[test]
fn targets_nobody_works_on_are_unworked_before_their_hold_lapses() {
    let mut ix = index();
    for p in ["c-0", "c-1"] {
        ix.apply(&mk_pod(p, true, json!({})), at(0));
    }
    live_members(&mut ix, &["c-0", "c-1"], 1_000);
    ix.apply(&mk_lease("t1", "c-0", Some("c-0"), 1), at(1_000));
    ix.apply(&mk_lease("t2", "c-1", Some("c-1"), 1), at(1_000));
    ix.apply(&mk_lease("T/3", "c-1", Some("c-1"), 1), at(1_000));
    let m = ix.model("c", at(2_000)).unwrap();
    assert_eq!(m.target("t1").unwrap().state, TargetState::Owned);
    assert_eq!(m.target("t1").unwrap().app_working, None);
    // c-0 crashes: its pod fails; its member Lease is still within its duration.
    let mut failed = mk_pod("c-0", false, json!({}));
    failed.status.as_mut().unwrap().phase = Some("Failed".into());
    ix.apply(&failed, at(2_000));
    // c-1's app says it does not work on t3.
    let mut member = mk_member("c-1", 3_000);
    protocol::report_app_work(
        &mut member,
        &protocol::AppWork::of(
            "gnmic",
            true,
            [
                ("t2", true, None),
                ("T/3", false, Some("gnmic: failed: refused")),
            ],
        ),
    );
    ix.apply(&member, at(3_000));
    let m = ix.model("c", at(3_500)).unwrap();
    let t1 = m.target("t1").unwrap();
    assert_eq!(
        t1.state,
        TargetState::Unworked,
        "a failed pod works on nothing"
    );
    let (t2, t3) = (m.target("t2").unwrap(), m.target("T/3").unwrap());
    assert_eq!((t2.state, t2.app_working), (TargetState::Owned, Some(true)));
    assert_eq!(
        (t3.state, t3.app_working),
        (TargetState::Unworked, Some(false))
    );
    assert_eq!(t3.app_problem.as_deref(), Some("gnmic: failed: refused"));
    assert_eq!((m.counts.unworked, m.counts.owned), (2, 1));
    assert!(TargetState::Unworked.unworked() && !TargetState::Moving.unworked());
    // Its hold lapses: expired, as before.
    let m = ix.model("c", at(12_000)).unwrap();
    assert_eq!(m.target("t1").unwrap().state, TargetState::Expired);
}

/// gnmic's own move — it deletes the Lease (its release), and another member's Lease for the
/// target follows — is one change with its gap; a hold taken over after it expired is a
/// failover, its gap counted from the silent holder's last renewal; a release nobody follows
/// is recorded alone once the window has passed.
#[test]
fn gnmic_moves_and_failovers_are_told_as_what_they_were() {
    let mut ix = index();
    for p in ["gnmic-1", "gnmic-2"] {
        let mut pod = mk_pod(p, true, json!({}));
        pod.metadata.labels = Some([("app".to_owned(), "gnmic".to_owned())].into());
        ix.apply(&pod, at(0));
    }
    let lease = |target: &str, holder: &str, rv: u64| -> Lease {
        let key = format!("gnmic/g/targets/{target}");
        serde_json::from_value(json!({
            "metadata": {"name": protocol::names::gnmic_lease(&key).unwrap(), "namespace": "ns",
                "resourceVersion": rv.to_string(),
                "labels": {"app": "gnmic"},
                "annotations": {"original-key": key, "original-value": holder}},
            "spec": {"holderIdentity": format!("{holder}-uuid"), "leaseDurationSeconds": 10}
        }))
        .unwrap()
    };
    let gap = |changes: &[Change]| -> Vec<Option<i64>> {
        changes
            .iter()
            .filter_map(|c| match c {
                Change::Ownership { gap_ms, .. } => Some(*gap_ms),
                _ => None,
            })
            .collect()
    };
    ix.apply(&lease("r1", "gnmic-1", 1), at(1_000));
    let name = protocol::names::gnmic_lease("gnmic/g/targets/r1").unwrap();
    // gnmic moves it: delete, then 11 ms later the other member's Lease.
    let ch = ix.delete::<Lease>("ns", &name, at(5_000));
    assert_eq!(ownership(&ch), [], "a release alone is not told yet");
    let ch = ix.apply(&lease("r1", "gnmic-2", 3), at(5_011));
    assert_eq!(
        ownership(&ch),
        [(
            "r1".into(),
            Some("gnmic-1".into()),
            Some("gnmic-2".into()),
            Cause::External
        )]
    );
    assert_eq!(gap(&ch), [Some(11)]);
    // gnmic-2 goes silent: unchanged past its duration, the hold is taken over: a failover,
    // from its last renewal (5.011 s) to the take-over.
    let ch = ix.apply(&lease("r1", "gnmic-1", 4), at(17_000));
    assert_eq!(
        ownership(&ch),
        [(
            "r1".into(),
            Some("gnmic-2".into()),
            Some("gnmic-1".into()),
            Cause::Failover
        )]
    );
    assert_eq!(gap(&ch), [Some(17_000 - 5_011)]);
    // Deleted after it expired, taken by another: a failover as well.
    let ch = ix.delete::<Lease>("ns", &name, at(40_000));
    assert_eq!(ownership(&ch), []);
    let ch = ix.apply(&lease("r1", "gnmic-2", 6), at(40_500));
    assert_eq!(
        ownership(&ch),
        [(
            "r1".into(),
            Some("gnmic-1".into()),
            Some("gnmic-2".into()),
            Cause::Failover
        )]
    );
    assert_eq!(gap(&ch), [Some(40_500 - 17_000)]);
    // Released, and nobody takes it: told as a release once the window has passed (at the
    // next event), at the time of the release.
    ix.delete::<Lease>("ns", &name, at(41_000));
    let ch = ix.apply(&lease("r2", "gnmic-1", 7), at(41_000 + 60_001));
    assert_eq!(
        ownership(&ch),
        [
            ("r1".into(), Some("gnmic-2".into()), None, Cause::External),
            ("r2".into(), None, Some("gnmic-1".into()), Cause::Initial),
        ]
    );
}

/// gnmic takes over a Lease once its hold expired by gnmic's clock; we saw the last renewal a
/// watch delivery late, so the take-over can come before the expiry by our clock. The Lease's
/// own times say what gnmic decided: a failover, its gap from the last renewal seen — not
/// gnmic's own move with no gap. A holder change before the expiry by either clock stays
/// gnmic's own.
#[test]
fn a_gnmic_take_over_seen_just_before_our_expiry_is_a_failover() {
    let mut ix = index();
    for p in ["gnmic-1", "gnmic-2"] {
        let mut pod = mk_pod(p, true, json!({}));
        pod.metadata.labels = Some([("app".to_owned(), "gnmic".to_owned())].into());
        ix.apply(&pod, at(0));
    }
    // As gnmic's locker writes it: acquireTime and renewTime both set at every write.
    let lease = |target: &str, holder: &str, written_ms: i64, rv: u64| -> Lease {
        let key = format!("gnmic/g/targets/{target}");
        let name = protocol::names::gnmic_lease(&key).unwrap();
        let t = at(written_ms).to_string();
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv.to_string(),
                "labels": {"app": "gnmic", name.clone(): holder},
                "annotations": {"original-key": key}},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 4,
                "acquireTime": t, "renewTime": t}
        }))
        .unwrap()
    };
    let gaps = |changes: &[Change]| -> Vec<Option<i64>> {
        changes
            .iter()
            .filter_map(|c| match c {
                Change::Ownership { gap_ms, .. } => Some(*gap_ms),
                _ => None,
            })
            .collect()
    };
    // Renewed at 10 s, seen 300 ms late; taken over 50 ms after its expiry (14.05 s), seen at
    // once: 3.75 s after the renewal by our clock, short of the 4 s.
    ix.apply(&lease("r1", "gnmic-1", 10_000, 1), at(10_300));
    let ch = ix.apply(&lease("r1", "gnmic-2", 14_050, 2), at(14_050));
    assert_eq!(
        ownership(&ch),
        [(
            "r1".into(),
            Some("gnmic-1".into()),
            Some("gnmic-2".into()),
            Cause::Failover
        )]
    );
    assert_eq!(gaps(&ch), [Some(14_050 - 10_300)]);
    // A live hold given to another (its renewal 1 s old by the Lease's times and ours): not
    // gnmic's take-over of an expired lock (a release and a new Lease, seen as one update).
    ix.apply(&lease("r2", "gnmic-1", 20_000, 3), at(20_000));
    let ch = ix.apply(&lease("r2", "gnmic-2", 21_000, 4), at(21_000));
    assert_eq!(
        ownership(&ch),
        [(
            "r2".into(),
            Some("gnmic-1".into()),
            Some("gnmic-2".into()),
            Cause::External
        )]
    );
}

/// A renewal of a live member Lease leaves the revision alone (a model built before it is
/// current but for ages); everything else the model shows moves it.
#[test]
fn the_revision_moves_on_changes_but_not_on_renewals() {
    let mut ix = index();
    let r = ix.revision();
    ix.apply(&mk_pod("c-0", true, json!({})), at(0));
    assert!(ix.revision() > r, "a new pod");
    let member = mk_member("c-0", 1_000);
    ix.apply(&member, at(1_000));
    let held = mk_lease("t1", "c-0", Some("c-0"), 1);
    ix.apply(&held, at(1_000));
    let r = ix.revision();
    assert!(r > 0);

    let mut renewed = protocol::member_renewed(&member, "c-0", at(4_000), 10, false);
    renewed.metadata.resource_version = Some("4000".into());
    ix.apply(&renewed, at(4_000));
    assert_eq!(ix.revision(), r, "a renewal of a live member Lease");
    ix.apply(&renewed, at(5_000));
    assert_eq!(ix.revision(), r, "the same copy again");
    assert_eq!(
        ix.model("c", at(5_000)).unwrap().instances[0].lease_renew_age_ms,
        Some(1_000),
        "the renewal is in the index all the same"
    );

    // Unchanged for a full duration by our clock, the member Lease and its holds are expired:
    // a renewal now revives them, which the model shows as a state change.
    assert!(
        ix.model("c", at(14_000))
            .unwrap()
            .target("t1")
            .unwrap()
            .state
            == TargetState::Expired
    );
    let mut revived = protocol::member_renewed(&renewed, "c-0", at(14_000), 10, false);
    revived.metadata.resource_version = Some("14000".into());
    ix.apply(&revived, at(14_000));
    assert!(ix.revision() > r, "a revived hold");
    let revived = held;

    let r = ix.revision();
    let d = Desire {
        overlap_ms: None,
        term: None,
        owner: "c-1".into(),
        cause: Cause::Rebalance,
        operation: Some("op-2".into()),
        duration_s: 10,
    };
    ix.apply(&protocol::with_desire(&revived, &d), at(15_000));
    assert!(ix.revision() > r, "a new desired owner");

    let r = ix.revision();
    ix.apply(&protocol::released(&revived, at(16_000)), at(16_000));
    assert!(ix.revision() > r, "a release");

    let r = ix.revision();
    ix.set_cordons("c", BTreeSet::from(["c-0".to_owned()]));
    assert!(ix.revision() > r, "a cordon");
    let r = ix.revision();
    ix.set_stale("ns", Kind::Lease, true);
    assert!(ix.revision() > r, "a watch down");
}

/// A new desired owner restarts the clock of how long the target has waited for its owner,
/// not the holder record's (the expiry clock): the failover of a target released long ago is
/// measured from the failover.
#[test]
fn a_new_desired_owner_restarts_its_own_clock_only() {
    let mut ix = index();
    ix.apply(&mk_pod("c-0", true, json!({})), at(0));
    ix.apply(&mk_pod("c-1", true, json!({})), at(0));
    let held = protocol::held_by(&mk_lease("t1", "c-0", None, 0), "c-0", at(1_000), 10);
    ix.apply(&held, at(1_000));
    let released = protocol::released(&held, at(2_000));
    ix.apply(&released, at(2_000));
    let t = ix
        .model("c", at(30_000))
        .unwrap()
        .target("t1")
        .cloned()
        .unwrap();
    assert_eq!(
        (t.unchanged_ms, t.desired_unchanged_ms),
        (Some(28_000), Some(29_000))
    );
    let d = Desire {
        overlap_ms: None,
        term: None,
        owner: "c-1".into(),
        cause: Cause::Failover,
        operation: None,
        duration_s: 10,
    };
    ix.apply(&protocol::with_desire(&released, &d), at(30_000));
    let t = ix
        .model("c", at(30_500))
        .unwrap()
        .target("t1")
        .cloned()
        .unwrap();
    assert_eq!(t.desired.as_deref(), Some("c-1"));
    assert_eq!(
        (t.unchanged_ms, t.desired_unchanged_ms),
        (Some(28_500), Some(500))
    );
}

/// An index of `CONFIG`'s cluster `c` with `extra` lines in its spec, its
/// own namespace's kinds listed at 0 (pod `c-0`, ready; nothing else).
fn index_with(extra: &str) -> Index {
    let yaml = CONFIG.replace(
        "  headless_service: c\n",
        &format!("  headless_service: c\n{extra}"),
    );
    let config = Config::parse(&yaml, Path::new("t.yaml")).unwrap();
    let mut ix = Index::new(&config.clusters);
    ix.reset::<Pod>("ns", &[mk_pod("c-0", true, json!({}))], at(0));
    ix.reset::<Lease>("ns", &[], at(0));
    ix.reset::<ConfigMap>("ns", &[], at(0));
    ix.reset::<k8s_openapi::api::core::v1::Service>("ns", &[], at(0));
    ix.reset::<k8s_openapi::api::discovery::v1::EndpointSlice>("ns", &[], at(0));
    ix
}

#[test]
fn member_leases_of_departed_pods_that_hold_nothing_and_stopped_are_garbage() {
    use crate::protocol::Fence;
    let mut ix = index_with("");
    let member = |id: &str| {
        let mut l = protocol::new_member_lease("leasehold", "c", id, at(0), 10, false);
        l.metadata.namespace = Some("ns".into());
        l
    };
    // c-0: pod present, released. c-1: pod gone, released. c-2: pod gone, fenced, still
    // named as holder of t1. c-3: pod gone, member Lease live (a partitioned agent).
    ix.apply(&protocol::released(&member("c-0"), at(1)), at(1));
    ix.apply(&protocol::released(&member("c-1"), at(1)), at(1));
    ix.apply(
        &protocol::fenced(&member("c-2"), Fence::Expired, at(1)),
        at(1),
    );
    ix.apply(&member("c-3"), at(1));
    let mut t1 = protocol::acquired(&mk_lease("t1", "c-2", None, 0), "c-2", at(0), 10);
    t1.metadata.resource_version = Some("1".into());
    ix.apply(&t1, at(1));
    let now = at(2000);
    assert_eq!(ix.model("c", now).unwrap().departed_member_leases, ["c-1"]);
    assert!(ix.member_lease_is_garbage("c", "c-1", now));
    for kept in ["c-0", "c-2", "c-3"] {
        assert!(!ix.member_lease_is_garbage("c", kept, now), "{kept}");
    }
    // Once t1 is revoked (its holder cleared), c-2's fenced Lease is garbage too.
    let mut revoked = protocol::released(&t1, at(3));
    revoked.metadata.resource_version = Some("2".into());
    ix.apply(&revoked, at(3));
    assert_eq!(
        ix.model("c", now).unwrap().departed_member_leases,
        ["c-1", "c-2"]
    );
    assert!(ix.member_lease_is_garbage("c", "c-2", now));
    // gnmic clusters have no member Leases.
    assert!(
        ix.model("g", now)
            .unwrap()
            .departed_member_leases
            .is_empty()
    );
}

#[test]
fn member_leases_kept_apart_count_only_from_their_own_namespace() {
    let mut ix = index_with("  member_lease_namespace: ns-members\n");
    assert_eq!(
        ix.member_namespaces(),
        BTreeSet::from(["ns-members".into()])
    );
    assert!(
        !ix.model("c", at(0)).unwrap().synced,
        "not synced before the member Leases are listed"
    );
    assert!(
        !ix.current("c", at(0)),
        "no absence is acted on before every watch listed"
    );
    let member = |ns: &str| {
        let mut l = protocol::new_member_lease("leasehold", "c", "c-0", at(0), 10, false);
        l.metadata.namespace = Some(ns.into());
        l
    };
    ix.reset::<MemberNamespaceLease>("ns-members", &[], at(0));
    assert!(ix.model("c", at(0)).unwrap().synced);
    assert!(ix.current("c", at(0)));
    // A member Lease in the cluster's own namespace is not this cluster's (an agent started
    // without --member-lease-namespace): the member is not live.
    ix.apply(&member("ns"), at(1));
    assert!(!ix.alive("c", "c-0", at(2)));
    ix.apply(&MemberNamespaceLease(member("ns-members")), at(1));
    assert!(ix.alive("c", "c-0", at(2)));
    // A relist of the cluster's own Leases leaves the member Leases alone; theirs does not.
    ix.reset::<Lease>("ns", &[], at(3));
    assert!(ix.alive("c", "c-0", at(4)));
    let stray = member("ns").metadata.name.unwrap();
    ix.delete::<Lease>("ns", &stray, at(4));
    assert!(
        ix.alive("c", "c-0", at(4)),
        "the stray's deletion is not the member's"
    );
    // The member-Lease watch going down makes the cluster stale.
    ix.set_stale("ns-members", Kind::MemberLease, true);
    assert!(ix.model("c", at(5)).unwrap().stale);
    assert!(!ix.current("c", at(5)));
    ix.reset::<MemberNamespaceLease>("ns-members", &[], at(6));
    assert!(!ix.model("c", at(6)).unwrap().stale);
    assert!(ix.current("c", at(6)));
    assert!(!ix.alive("c", "c-0", at(6)));
}

/// An index (member Leases apart in `ns-members` when `apart`) with proofs required, synced
/// at 0, with member `c-0` seen renewing at 1 s (its Lease's duration: 10 s).
fn proving(apart: bool) -> Index {
    let policy = "  policy: {lease_duration: 10s}\n";
    let mut ix = if apart {
        index_with(&format!("{policy}  member_lease_namespace: ns-members\n"))
    } else {
        index_with(policy)
    };
    ix.require_proofs();
    let ns = if apart { "ns-members" } else { "ns" };
    let mut l = protocol::new_member_lease("leasehold", "c", "c-0", at(1000), 10, false);
    l.metadata.namespace = Some(ns.into());
    if apart {
        ix.reset::<MemberNamespaceLease>(ns, &[MemberNamespaceLease(l)], at(1000));
    } else {
        ix.apply(&l, at(1000));
    }
    ix
}

#[test]
fn with_proofs_required_a_hold_expires_only_once_a_probe_sent_a_duration_later_came_back() {
    use crate::k8s::model::Liveness;
    let mut ix = proving(false);
    let liveness = |ix: &Index, ms| {
        ix.model("c", at(ms)).unwrap().instances[0]
            .member_lease
            .as_ref()
            .unwrap()
            .liveness
    };
    // No proof yet: stale, and nothing expires however long the clock runs.
    let snap = ix.snapshot("c", at(30_000)).unwrap();
    assert!(snap.model.stale);
    assert_eq!(liveness(&ix, 30_000), Liveness::Live);
    assert!(
        snap.awaiting_proof,
        "expired by the clock: a probe is wanted"
    );
    assert_eq!(
        ix.stale_clusters(at(30_000)),
        ["c"],
        "gnmic clusters are not probed"
    );
    assert!(ix.expired_member_record("c", "c-0", at(30_000)).is_none());
    // A probe sent before the hold was a duration old proves the watch, not the expiry.
    ix.prove("ns", Kind::Lease, 10_999);
    let snap = ix.snapshot("c", at(12_000)).unwrap();
    assert!(!snap.model.stale);
    assert!(snap.awaiting_proof);
    assert_eq!(liveness(&ix, 12_000), Liveness::Live);
    assert!(ix.alive("c", "c-0", at(12_000)));
    assert!(ix.stale_clusters(at(12_000)).is_empty());
    // One sent a full duration after the last change seen: expired.
    ix.prove("ns", Kind::Lease, 11_000);
    assert_eq!(liveness(&ix, 12_000), Liveness::Expired);
    assert!(!ix.snapshot("c", at(12_000)).unwrap().awaiting_proof);
    assert!(ix.expired_member_record("c", "c-0", at(12_000)).is_some());
    assert!(!ix.alive("c", "c-0", at(12_000)));
    // An older proof arriving late takes nothing back; without a newer one within a duration
    // the model turns stale again.
    ix.prove("ns", Kind::Lease, 5_000);
    assert_eq!(liveness(&ix, 12_000), Liveness::Expired);
    assert!(!ix.model("c", at(20_999)).unwrap().stale);
    assert!(ix.model("c", at(21_000)).unwrap().stale);
    // The model's exactness ends where staleness would begin.
    assert_eq!(
        ix.snapshot("c", at(20_000)).unwrap().exact_for,
        Some(std::time::Duration::from_secs(1))
    );
}

#[test]
fn member_leases_kept_apart_are_proven_by_their_own_watch() {
    use crate::k8s::model::Liveness;
    let mut ix = proving(true);
    let liveness = |ix: &Index| {
        ix.model("c", at(12_000)).unwrap().instances[0]
            .member_lease
            .as_ref()
            .unwrap()
            .liveness
    };
    // The cluster namespace's Lease watch proves only itself.
    ix.prove("ns", Kind::Lease, 11_500);
    assert_eq!(liveness(&ix), Liveness::Live);
    assert!(
        ix.model("c", at(12_000)).unwrap().stale,
        "member watch unproven"
    );
    // A proof on the Lease watch of another namespace, or of the member namespace's other
    // kind, is not this one's.
    ix.prove("ns-members", Kind::Lease, 11_500);
    ix.prove("elsewhere", Kind::MemberLease, 11_500);
    assert_eq!(liveness(&ix), Liveness::Live);
    ix.prove("ns-members", Kind::MemberLease, 11_500);
    assert_eq!(liveness(&ix), Liveness::Expired);
    assert!(!ix.model("c", at(12_000)).unwrap().stale);
}

/// A target's hold, as `Index::target` tells it (what a move waits for), lasts
/// while its holder's member Lease is live, however old the target Lease's own record is —
/// a member never renews it. (It once expired by that record's age, as a renewed Lease's does: a
/// move resumed by a replica that saw the handoff more than a duration before waited for a
/// write that never came, and failed with "c-3 did not take the lease (holder: c-3)".)
#[test]
fn a_targets_hold_lasts_while_its_holders_member_lease_is_live() {
    use crate::protocol::Fence;
    let mut ix = index_with("");
    let mut member = protocol::new_member_lease("leasehold", "c", "c-0", at(0), 10, false);
    member.metadata.namespace = Some("ns".into());
    ix.apply(&member, at(0));
    let t1 = protocol::acquired(&mk_lease("t1", "c-0", None, 0), "c-0", at(100), 10);
    ix.apply(&t1, at(100));
    let renewed = protocol::member_renewed(&member, "c-0", at(9_000), 10, false);
    ix.apply(&renewed, at(9_000));
    let t = ix.target("c", "t1", at(12_000)).unwrap();
    assert_eq!(t.holder.as_deref(), Some("c-0"));
    assert!(
        !t.expired,
        "unchanged for 11.9 s of 10, but c-0 renewed at 9 s"
    );
    ix.apply(
        &protocol::fenced(&renewed, Fence::Expired, at(19_500)),
        at(19_500),
    );
    assert!(ix.target("c", "t1", at(19_500)).unwrap().expired, "fenced");
}

#[test]
fn without_proofs_required_expiry_is_by_the_clock() {
    let mut ix = index();
    live_members(&mut ix, &["c-0"], 0);
    ix.apply(&mk_lease("t1", "c-0", Some("c-0"), 0), at(0));
    let t = ix.target("c", "t1", at(10_000)).unwrap();
    assert!(t.expired);
    assert!(!ix.model("c", at(10_000)).unwrap().stale);
    ix.require_proofs();
    let t = ix.target("c", "t1", at(10_000)).unwrap();
    assert!(!t.expired, "now a probe must prove it");
    ix.prove("ns", Kind::Lease, 10_000);
    assert!(ix.target("c", "t1", at(10_000)).unwrap().expired);
}

#[test]
fn overrun_reports_on_member_leases_are_changes_once_each() {
    let config = Config::parse(CONFIG, Path::new("t.yaml")).unwrap();
    let mut ix = Index::new(&config.clusters);
    let report = |at_ms, targets| protocol::Overrun {
        at_ms,
        late_ms: 1_500,
        targets,
        total: u64::from(targets),
    };
    let member = |o: Option<protocol::Overrun>, rv: &str| {
        let mut l = protocol::new_member_lease("leasehold", "c", "c-0", at(0), 10, false);
        l.metadata.namespace = Some("ns".into());
        l.metadata.resource_version = Some(rv.into());
        if let Some(o) = &o {
            protocol::report_overrun(&mut l, o);
        }
        l
    };
    let overruns = |ch: Vec<Change>| -> Vec<(String, protocol::Overrun, bool)> {
        ch.into_iter()
            .filter_map(|c| match c {
                Change::Overrun {
                    instance,
                    overrun,
                    replayed,
                    ..
                } => Some((instance, overrun, replayed)),
                _ => None,
            })
            .collect()
    };
    // Found in the first list: a change all the same (it may never have been recorded), but
    // marked replayed.
    let first = report(5_000, 3);
    let ch = ix.reset::<Lease>("ns", &[member(Some(first), "1")], at(10));
    assert_eq!(overruns(ch), [("c-0".to_owned(), first, true)]);
    // Renewals carrying the same report, a relist, the Lease deleted and written again: nothing.
    assert!(overruns(ix.apply(&member(Some(first), "2"), at(11))).is_empty());
    assert!(overruns(ix.reset::<Lease>("ns", &[member(Some(first), "3")], at(12))).is_empty());
    let name = member(None, "3").metadata.name.unwrap();
    ix.delete::<Lease>("ns", &name, at(13));
    assert!(overruns(ix.apply(&member(Some(first), "4"), at(14))).is_empty());
    // A new report, seen live.
    let second = report(9_000, 1);
    assert_eq!(
        overruns(ix.apply(&member(Some(second), "5"), at(15))),
        [("c-0".to_owned(), second, false)]
    );
    // Nothing changes in the model for it.
    assert!(overruns(ix.apply(&member(None, "6"), at(16))).is_empty());
}

/// An EndpointSlice of Service `service` (`kubernetes.io/service-name`) with one port and
/// `endpoints`: (address, ready, pod).
fn mk_slice(
    name: &str,
    service: &str,
    port: (&str, i32),
    endpoints: &[(&str, Option<bool>, &str)],
) -> k8s_openapi::api::discovery::v1::EndpointSlice {
    let endpoints: Vec<serde_json::Value> = endpoints
        .iter()
        .map(|(address, ready, pod)| {
            json!({"addresses": [address], "conditions": {"ready": ready},
                "targetRef": {"kind": "Pod", "name": pod, "namespace": "ns"}})
        })
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns",
            "labels": {"kubernetes.io/service-name": service}},
        "addressType": "IPv4",
        "ports": [{"name": port.0, "port": port.1, "protocol": "TCP"}],
        "endpoints": endpoints,
    }))
    .unwrap()
}

/// Keys of the configured targets of cluster `c` (its inline t1, t2, T/3 left out).
fn endpoint_targets(ix: &Index) -> Vec<(String, u32)> {
    ix.model("c", at(10_000))
        .unwrap()
        .targets
        .iter()
        .filter(|t| t.configured && t.key.contains('/') && *t.key != *"T/3")
        .map(|t| (t.key.to_string(), t.weight))
        .collect()
}

/// The targets of an `endpoints` entry follow the ready endpoints of its Service's
/// EndpointSlices: slices appearing, endpoints turning unready (or terminating: the
/// controller's `ready: false`) and back, slices going. A port the Service does not have keeps
/// the last good targets and says why (deletions wait: `engine::placement`), as a broken
/// ConfigMap does; so does a ConfigMap that breaks meanwhile.
#[test]
fn endpoint_targets_follow_the_ready_endpoints_of_the_services_slices() {
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    let mut ix = index();
    ix.reset::<EndpointSlice>("ns", &[], at(0));
    // Slices seen before any entry names their Service are kept for when one does.
    let a = mk_slice(
        "web-a",
        "web",
        ("metrics", 9100),
        &[
            ("10.0.0.1", Some(true), "web-0"),
            ("10.0.0.2", None, "web-1"),
        ],
    );
    assert!(ix.apply(&a, at(1)).is_empty());
    let cm = |text: &str| -> ConfigMap {
        serde_json::from_value(
            json!({"metadata": {"name": "more", "namespace": "ns"}, "data": {"list": text}}),
        )
        .unwrap()
    };
    let list = "- {endpoints: {service: web, port: metrics, scrape: {job: web}}, weight: 3}\n";
    let ch = ix.apply(&cm(list), at(2));
    assert!(matches!(&ch[..], [Change::Targets { cluster }] if cluster == "c"));
    assert_eq!(
        endpoint_targets(&ix),
        [
            ("web/web-0/10.0.0.1:9100".into(), 3),
            ("web/web-1/10.0.0.2:9100".into(), 3)
        ]
    );
    // A second slice appears; another Service's slice changes nothing.
    let b = mk_slice(
        "web-b",
        "web",
        ("metrics", 9100),
        &[("10.0.0.3", Some(true), "web-2")],
    );
    assert!(matches!(&ix.apply(&b, at(3))[..], [Change::Targets { .. }]));
    let other = mk_slice("db-a", "db", ("pg", 5432), &[("10.0.1.1", None, "db-0")]);
    assert!(ix.apply(&other, at(3)).is_empty());
    assert_eq!(endpoint_targets(&ix).len(), 3);
    // web-0 turns unready (or starts terminating): no longer a target; its Lease, if any,
    // would be an unconfigured target's, deleted by the engine.
    let a_unready = mk_slice(
        "web-a",
        "web",
        ("metrics", 9100),
        &[
            ("10.0.0.1", Some(false), "web-0"),
            ("10.0.0.2", None, "web-1"),
        ],
    );
    assert!(matches!(
        &ix.apply(&a_unready, at(4))[..],
        [Change::Targets { .. }]
    ));
    let keys: Vec<String> = endpoint_targets(&ix).into_iter().map(|t| t.0).collect();
    assert_eq!(keys, ["web/web-1/10.0.0.2:9100", "web/web-2/10.0.0.3:9100"]);
    // Its Lease, held, is then orphaned (not configured) and the list is not in doubt.
    ix.apply(&mk_pod("c-0", true, json!({})), at(4));
    live_members(&mut ix, &["c-0"], 4_000);
    ix.apply(
        &mk_lease("web/web-0/10.0.0.1:9100", "c-0", Some("c-0"), 4),
        at(4_000),
    );
    let m = ix.model("c", at(4_500)).unwrap();
    let t = m.target("web/web-0/10.0.0.1:9100").unwrap();
    assert!(!t.configured && t.state == TargetState::Orphaned);
    assert_eq!(m.targets_error, None);
    // Ready again: configured again, and owned by its holder.
    assert!(matches!(
        &ix.apply(&a, at(5_000))[..],
        [Change::Targets { .. }]
    ));
    let m = ix.model("c", at(5_000)).unwrap();
    let t = m.target("web/web-0/10.0.0.1:9100").unwrap();
    assert!(t.configured && t.state == TargetState::Owned, "{t:?}");
    // A slice goes: its endpoints' targets go.
    let ch = ix.delete::<EndpointSlice>("ns", "web-b", at(5_001));
    assert!(matches!(&ch[..], [Change::Targets { .. }]));
    assert_eq!(endpoint_targets(&ix).len(), 2);
    // The entry names a port the Service does not have: the last good targets stay, and the
    // model says why (the engine deletes no Lease while it does).
    let wrong = "- {endpoints: {service: web, port: admin}}\n";
    ix.apply(&cm(wrong), at(5_002));
    let m = ix.model("c", at(5_002)).unwrap();
    assert_eq!(endpoint_targets(&ix).len(), 2, "last good targets kept");
    let e = m.targets_error.unwrap();
    assert!(
        e.contains("no port \"admin\"") && e.contains("metrics (9100)"),
        "{e}"
    );
    // Fixed: the error goes; a broken ConfigMap then keeps the entry, whose targets still
    // follow the slices.
    ix.apply(&cm(list), at(5_003));
    assert_eq!(ix.model("c", at(5_003)).unwrap().targets_error, None);
    assert!(
        ix.apply(&cm("- {endpoints: {port: metrics}}\n"), at(5_004))
            .is_empty()
    );
    assert!(matches!(
        &ix.apply(&b, at(5_005))[..],
        [Change::Targets { .. }]
    ));
    let m = ix.model("c", at(5_005)).unwrap();
    assert!(m.targets_error.unwrap().contains("missing field `service`"));
    assert_eq!(endpoint_targets(&ix).len(), 3);
    // A relist that no longer has a slice forgets it (and its targets).
    ix.reset::<EndpointSlice>("ns", &[a.clone(), other], at(6_000));
    assert_eq!(endpoint_targets(&ix).len(), 2);
}

/// A cluster whose targets are all listed, with no ConfigMap, keeps no slices but its headless
/// Service's.
#[test]
fn clusters_without_endpoints_entries_keep_no_other_slices() {
    let config = Config::parse(
        "clusters:\n- {name: d, namespace: ns, selector: {app: d}, targets: {inline: [x]}}\n",
        Path::new("t.yaml"),
    )
    .unwrap();
    let mut ix = Index::new(&config.clusters);
    let s = mk_slice("web-a", "web", ("m", 1), &[("10.0.0.1", None, "web-0")]);
    ix.apply(&s, at(1));
    assert!(ix.clusters[0].endpoint_slices.is_empty());
    // `index()`'s cluster `c` reads a ConfigMap, which may gain an `endpoints` entry: kept.
    let mut ix = index();
    ix.apply(&s, at(1));
    assert_eq!(ix.clusters[0].endpoint_slices.len(), 1);
}

/// A hand-over that says when the old holder's app last worked on the target
/// (`leasehold.io/stopped-at`), followed by the new holder's report of its app's first work on
/// it (`app-work`'s `started`), is the hand-off's work-level gap, told once; a report by
/// another member, or one after the target changed hands again without the annotation, is not.
#[test]
fn a_hand_over_and_the_next_owners_first_work_give_the_work_gap() {
    let mut ix = index();
    for p in ["c-0", "c-1", "c-2"] {
        ix.apply(&mk_pod(p, true, json!({})), at(0));
    }
    live_members(&mut ix, &["c-0", "c-1", "c-2"], 1_000);
    let held = mk_lease("t1", "c-0", Some("c-0"), 1);
    ix.apply(&held, at(1_000));
    let moved = protocol::with_desire(
        &held,
        &Desire {
            overlap_ms: None,
            term: Some("1@c-1".into()),
            owner: "c-1".into(),
            cause: Cause::Rebalance,
            operation: None,
            duration_s: 10,
        },
    );
    let handed = protocol::with_stopped_at(
        protocol::given_up(&moved, "c-0", at(5_000)),
        "c-0",
        Some(4_200),
    );
    assert_eq!(
        protocol::Holding::of(handed.spec.as_ref())
            .holder
            .as_deref(),
        Some("c-1")
    );
    ix.apply(&handed, at(5_000));
    let report = |id: &str, at_ms: i64, started: &[(&str, i64)]| {
        let mut member = mk_member(id, at_ms);
        let mut work = protocol::AppWork::of("scraper", true, [("t1", true, None)]);
        work.started = started
            .iter()
            .map(|(t, at)| ((*t).to_owned(), *at))
            .collect();
        protocol::report_app_work(&mut member, &work);
        member
    };
    let gaps = |changes: Vec<Change>| -> Vec<(String, String, i64)> {
        changes
            .into_iter()
            .filter_map(|c| match c {
                Change::WorkGap {
                    target, to, gap_ms, ..
                } => Some((target, to, gap_ms)),
                _ => None,
            })
            .collect()
    };
    // Another member's start of t1 is not this hand-off's.
    assert_eq!(
        gaps(ix.apply(&report("c-2", 6_000, &[("t1", 9_000)]), at(6_000))),
        []
    );
    let told = gaps(ix.apply(&report("c-1", 6_000, &[("t1", 18_300)]), at(6_000)));
    assert_eq!(told, [("t1".to_owned(), "c-1".to_owned(), 14_100)]);
    // The next renewal carries the same report: told once.
    assert_eq!(
        gaps(ix.apply(&report("c-1", 9_000, &[("t1", 18_300)]), at(9_000))),
        []
    );
    // Handed back without the annotation (an app that does not know): nothing to tell.
    let back = protocol::given_up(
        &protocol::with_desire(
            &handed,
            &Desire {
                overlap_ms: None,
                term: Some("1@c-0".into()),
                owner: "c-0".into(),
                cause: Cause::Rebalance,
                operation: None,
                duration_s: 10,
            },
        ),
        "c-1",
        at(20_000),
    );
    assert!(
        back.metadata
            .annotations
            .as_ref()
            .unwrap()
            .get(protocol::ANN_STOPPED_AT)
            .is_none()
    );
    ix.apply(&back, at(20_000));
    assert_eq!(
        gaps(ix.apply(&report("c-0", 21_000, &[("t1", 22_000)]), at(21_000))),
        []
    );
}
