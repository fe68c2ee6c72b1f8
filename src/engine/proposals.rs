//! Approving a proposed operation (`on_join: propose`): whether its moves still fit the
//! cluster. A proposal is a plan made when members joined; by the time someone approves it,
//! targets may have changed hands and its destinations may be gone or cordoned. Running it
//! then would move targets on stale grounds, so approval checks every move against the current
//! model first and refuses the whole proposal if any no longer fits. Pure: the caller builds
//! the model.

use std::collections::{HashMap, HashSet};

use super::placement;
use crate::k8s::model::ClusterModel;
use crate::store::MoveRecord;

/// Why each of `moves` no longer fits `model`, one line per stale move, in move order; empty
/// when every move still does. A move fits while its target is still configured and where the
/// plan found it (the same owner as the planner sees it: the desired owner if live, else the
/// live holder; `duration_ms` is the cluster's Lease duration), and its destination may still
/// receive targets.
pub(crate) fn drift(model: &ClusterModel, moves: &[MoveRecord], duration_ms: i64) -> Vec<String> {
    let wanted: HashSet<&str> = moves.iter().map(|m| m.target.as_str()).collect();
    let owners: HashMap<String, Option<String>> =
        placement::targets(model, &HashSet::new(), duration_ms)
            .into_iter()
            .filter(|t| wanted.contains(t.key.as_str()))
            .map(|t| (t.key, t.owner))
            .collect();
    let who = |o: Option<&str>| o.unwrap_or("nobody").to_owned();
    moves
        .iter()
        .filter_map(|m| {
            let Some(owner) = owners.get(&m.target) else {
                return Some(format!("target {} is no longer configured", m.target));
            };
            if owner.as_deref() != m.from.as_deref() {
                return Some(format!(
                    "target {} is now on {}, not {}",
                    m.target,
                    who(owner.as_deref()),
                    who(m.from.as_deref())
                ));
            }
            match model.instance(&m.to) {
                None => Some(format!("destination {} is gone", m.to)),
                Some(i) if !i.eligible() => Some(format!(
                    "destination {} can no longer take targets ({})",
                    m.to,
                    if i.cordoned {
                        "cordoned"
                    } else if i.terminating {
                        "terminating"
                    } else if i.ghost {
                        "no pod"
                    } else {
                        "not ready"
                    }
                )),
                Some(_) => None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::k8s::model::{Instance, Target, TargetState};
    use crate::model::MoveState;

    fn mv(seq: u32, target: &str, from: Option<&str>, to: &str) -> MoveRecord {
        MoveRecord {
            seq,
            target: target.into(),
            from: from.map(Into::into),
            to: to.into(),
            state: MoveState::Pending,
            attempts: 0,
            started_at_ms: None,
            finished_at_ms: None,
            error: None,
        }
    }

    fn owned(key: &str, owner: &str) -> Target {
        Target::for_tests(key, Some(owner), Some(owner), TargetState::Owned, true)
    }

    fn cluster(instances: Vec<Instance>, mut targets: Vec<Target>) -> ClusterModel {
        targets.sort_by(|a, b| a.key.cmp(&b.key));
        ClusterModel::for_tests(instances, targets)
    }

    const D: i64 = 10_000;

    #[test]
    fn a_proposal_on_an_unchanged_cluster_fits() {
        let m = cluster(
            vec![
                Instance::for_tests("a", true, false, false),
                Instance::for_tests("b", true, false, false),
            ],
            vec![
                owned("t1", "a"),
                owned("t2", "a"),
                Target::for_tests("t3", None, None, TargetState::Unassigned, true),
            ],
        );
        let moves = [mv(1, "t1", Some("a"), "b"), mv(2, "t3", None, "b")];
        assert_eq!(drift(&m, &moves, D), Vec::<String>::new());
        assert_eq!(drift(&m, &[], D), Vec::<String>::new());
    }

    #[test]
    fn every_kind_of_change_since_the_proposal_is_named_in_move_order() {
        let m = cluster(
            vec![
                Instance::for_tests("a", true, false, false),
                Instance::for_tests("b", true, false, false),
                Instance::for_tests("cordoned", true, true, false),
                Instance::for_tests("unready", false, false, false),
                Instance::for_tests("ghost", true, false, true),
            ],
            vec![
                owned("t1", "b"),
                // Handed to b by someone else since: the planner counts it as b's already.
                Target::for_tests("t2", Some("a"), Some("b"), TargetState::Moving, true),
                owned("t3", "a"),
                owned("t4", "a"),
                owned("t5", "a"),
                owned("t6", "a"),
                Target::for_tests("t7", Some("a"), Some("a"), TargetState::Owned, false),
            ],
        );
        let moves = [
            mv(1, "t1", Some("a"), "b"),
            mv(2, "t2", Some("a"), "b"),
            mv(3, "t3", Some("a"), "cordoned"),
            mv(4, "t4", Some("a"), "unready"),
            mv(5, "t5", Some("a"), "ghost"),
            mv(6, "t6", Some("a"), "left"),
            mv(7, "gone", Some("a"), "b"),
            mv(8, "t7", Some("a"), "b"),
            mv(9, "t6", Some("a"), "b"),
        ];
        assert_eq!(
            drift(&m, &moves, D),
            [
                "target t1 is now on b, not a",
                "target t2 is now on b, not a",
                "destination cordoned can no longer take targets (cordoned)",
                "destination unready can no longer take targets (not ready)",
                "destination ghost can no longer take targets (no pod)",
                "destination left is gone",
                "target gone is no longer configured",
                "target t7 is no longer configured",
            ]
        );
    }

    #[test]
    fn an_owner_that_died_leaves_its_targets_homeless_as_the_planner_sees_them() {
        // The plan found t1 with nobody (its holder dead); a proposal sending it to b fits
        // while that is still so, and not once a live member holds it.
        let dead = cluster(
            vec![
                Instance::for_tests("b", true, false, false),
                Instance::for_tests("dead", false, false, true),
            ],
            vec![Target::for_tests(
                "t1",
                Some("dead"),
                None,
                TargetState::Expired,
                true,
            )],
        );
        assert_eq!(
            drift(&dead, &[mv(1, "t1", None, "b")], D),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_target_placed_since_the_proposal_is_stale_too() {
        let m = cluster(
            vec![Instance::for_tests("a", true, false, false)],
            vec![owned("t1", "a")],
        );
        assert_eq!(
            drift(&m, &[mv(1, "t1", None, "a")], D),
            ["target t1 is now on a, not nobody"]
        );
    }
}
