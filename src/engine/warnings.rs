//! The warnings a plan carries that need more than the planner's input: what removing an
//! instance means for the cluster's roles, its elected leader and its ready members, and which
//! of the plan's targets moved often lately (docs/concepts.md, "Plan warnings"). Every entry
//! point that shows or returns a plan — the API's dry runs and plans, the dashboard's rebalance,
//! removal and uncordon pages — gets them from [`Engine`](super::Engine)'s plan functions, so
//! they cannot differ between pages.
//!
//! Pure: the model, the plan and the history's counts come in, warnings go out.

use std::time::Duration;

use super::planner::{Plan, Warning, WarningKind};
use crate::k8s::model::ClusterModel;
use crate::store::FrequentMover;

/// The window [`FrequentMover`]s are counted over.
pub const CHURN_WINDOW: Duration = Duration::from_secs(10 * 60);
/// A target that moved more than this many times in [`CHURN_WINDOW`] is named.
pub const CHURN_LIMIT: i64 = 3;
/// Targets named in one warning at most.
pub const CHURN_NAMED: usize = 5;

/// The warnings of removing `instance` of `model`, before those of the plan itself.
pub fn removal(model: &ClusterModel, instance: &str) -> Vec<Warning> {
    let mut out = Vec::new();
    let Some(i) = model.instance(instance) else {
        return out;
    };
    if let Some(role) = &i.role {
        let others = model
            .instances
            .iter()
            .filter(|o| o.name != instance && o.role.as_deref() == Some(role.as_str()) && o.ready)
            .count();
        if others == 0 {
            out.push(Warning {
                kind: WarningKind::OnlyInstanceOfRole,
                message: format!(
                    "{instance} is the only ready instance with the role {role}: removing it leaves the cluster without one."
                ),
            });
        }
    }
    if i.leader {
        out.push(Warning {
            kind: WarningKind::ElectedLeader,
            message: format!(
                "{instance} is the cluster's elected leader: removing it makes the members elect another."
            ),
        });
    }
    let ready_others = model
        .instances
        .iter()
        .filter(|o| o.name != instance && o.eligible())
        .count();
    if ready_others == 0 {
        out.push(Warning {
            kind: WarningKind::LastReadyMember,
            message: format!(
                "{instance} is the last ready member: no other member can take its targets, they stay unworked."
            ),
        });
    }
    out
}

/// The warning naming the plan's targets among `movers` (the history's frequent movers of the
/// cluster), if any.
pub fn churn(plan: &Plan, movers: &[FrequentMover]) -> Option<Warning> {
    let moving: std::collections::HashSet<&str> =
        plan.moves.iter().map(|m| m.target.as_str()).collect();
    let named: Vec<String> = movers
        .iter()
        .filter(|m| moving.contains(m.target.as_str()))
        .map(|m| format!("{} ({} times)", m.target, m.moves))
        .collect();
    let more = named.len().saturating_sub(CHURN_NAMED);
    (!named.is_empty()).then(|| Warning {
        kind: WarningKind::FrequentMoves,
        message: format!(
            "{} target{} of this plan moved more than {CHURN_LIMIT} times in the last {} minutes: {}{}.",
            named.len(),
            if named.len() == 1 { "" } else { "s" },
            CHURN_WINDOW.as_secs() / 60,
            named[..named.len().min(CHURN_NAMED)].join(", "),
            if more > 0 { format!(" and {more} more") } else { String::new() },
        ),
    })
}

/// `plan` with `first` (the situation's warnings) before its own, then `last`.
pub fn attach(plan: &mut Plan, first: Vec<Warning>, last: Option<Warning>) {
    let own = std::mem::take(&mut plan.warnings);
    plan.warnings = first.into_iter().chain(own).chain(last).collect();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::planner::{Move, MoveReason, plan_id};
    use crate::k8s::model::Instance;

    fn model(instances: Vec<Instance>) -> ClusterModel {
        ClusterModel::for_tests(instances, Vec::new())
    }

    fn with_role(mut i: Instance, role: &str) -> Instance {
        i.role = Some(role.into());
        i
    }

    fn kinds(w: &[Warning]) -> Vec<WarningKind> {
        w.iter().map(|w| w.kind).collect()
    }

    #[test]
    fn removing_the_controlling_instance_and_leader_says_both() {
        let mut controlling = with_role(
            Instance::for_tests("db-0", true, false, false),
            "controlling",
        );
        controlling.leader = true;
        let m = model(vec![
            controlling,
            with_role(Instance::for_tests("db-1", true, false, false), "copy"),
            with_role(Instance::for_tests("db-2", true, false, false), "copy"),
        ]);
        let w = removal(&m, "db-0");
        assert_eq!(
            kinds(&w),
            [WarningKind::OnlyInstanceOfRole, WarningKind::ElectedLeader]
        );
        assert!(w[0].message.contains("db-0") && w[0].message.contains("controlling"));
        // A copy has another copy: nothing to say.
        assert!(removal(&m, "db-1").is_empty());
        // Unknown instance: nothing (the engine refuses it before).
        assert!(removal(&m, "nope").is_empty());
    }

    #[test]
    fn removing_the_last_ready_member_says_so() {
        let m = model(vec![
            Instance::for_tests("a", true, false, false),
            Instance::for_tests("b", false, false, false),
            Instance::for_tests("c", true, true, false),
        ]);
        assert_eq!(kinds(&removal(&m, "a")), [WarningKind::LastReadyMember]);
        // Removing a not-ready one leaves `a`.
        assert!(removal(&m, "b").is_empty());
    }

    #[test]
    fn churn_names_only_the_plans_targets_and_counts_the_rest() {
        let mv = |t: &str| Move {
            target: t.into(),
            from: Some("a".into()),
            to: "b".into(),
            reason: MoveReason::Balance,
        };
        let moves: Vec<Move> = (0..8).map(|i| mv(&format!("t-{i}"))).collect();
        let plan = Plan {
            id: plan_id(&moves),
            moves,
            before: vec![],
            after: vec![],
            imbalance_before: 0.0,
            imbalance_after: 0.0,
            blocked: vec![],
            truncated: false,
            warnings: vec![],
        };
        let movers: Vec<FrequentMover> = ["x", "t-0", "t-1", "t-2", "t-3", "t-4", "t-5"]
            .iter()
            .map(|t| FrequentMover {
                target: (*t).into(),
                moves: 4,
            })
            .collect();
        let w = churn(&plan, &movers).unwrap();
        assert_eq!(w.kind, WarningKind::FrequentMoves);
        assert_eq!(
            w.message,
            "6 targets of this plan moved more than 3 times in the last 10 minutes: t-0 (4 times), t-1 (4 times), t-2 (4 times), t-3 (4 times), t-4 (4 times) and 1 more."
        );
        assert!(churn(&plan, &movers[..1]).is_none());
    }
}
