//! What uncordoning an instance would set off, said before it is done: an uncordoned, ready
//! instance is a member joining, and the cluster's `on_join` policy (unless a person paused
//! it) then proposes or starts a rebalance once membership has been still for `join_settle`
//! (docs/concepts.md, "Automation"). The engine makes the plan; this says what follows.
//!
//! Pure: the policy, the pause and the plan come in, the preview goes out.

use serde::Serialize;

use super::planner::Plan;
use crate::config::{Cluster, OnJoin};
use crate::store::Pause;

/// What follows an uncordon.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AfterUncordon {
    /// Nothing moves by itself: the instance gets only targets that need a home.
    Nothing,
    /// The rebalance is proposed, for a person to approve.
    Proposal,
    /// The rebalance starts by itself.
    Rebalance,
}

/// What uncordoning an instance would do now.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct UncordonPreview {
    /// Whether the instance is cordoned now (if not, uncordoning changes nothing).
    pub cordoned: bool,
    /// What the uncordon sets off by itself.
    pub triggers: AfterUncordon,
    /// The same, in words.
    pub message: String,
    /// The rebalance the cluster would get with the instance uncordoned: what [`Self::triggers`]
    /// proposes or starts, or what a person could start.
    pub plan: Plan,
}

/// The preview of uncordoning `instance` of `spec`, with automation paused by `pause` or not,
/// given `plan`, the rebalance with the instance uncordoned.
pub fn preview(
    spec: &Cluster,
    instance: &str,
    cordoned: bool,
    ready: bool,
    pause: Option<&Pause>,
    plan: Plan,
) -> UncordonPreview {
    let n = plan.moves.len();
    let moves = format!("{n} move{}", if n == 1 { "" } else { "s" });
    let settle = spec.policy.join_settle.as_secs_f64();
    let when = if ready {
        format!("Once membership has been still for {settle} s")
    } else {
        format!("{instance} is not ready: once it is, and membership has been still for {settle} s")
    };
    let (triggers, message) = if !cordoned {
        (
            AfterUncordon::Nothing,
            format!("{instance} is not cordoned: uncordoning it changes nothing."),
        )
    } else if n == 0 {
        (
            AfterUncordon::Nothing,
            format!(
                "{instance} receives targets again; the cluster stays balanced without moving any: nothing moves."
            ),
        )
    } else {
        match (spec.policy.on_join, pause) {
            (OnJoin::Off, _) => (
                AfterUncordon::Nothing,
                format!(
                    "Nothing moves by itself (on_join: off): {instance} gets only targets that need a home. The rebalance below ({moves}) is what a person could start."
                ),
            ),
            (_, Some(p)) => (
                AfterUncordon::Nothing,
                format!(
                    "Automatic rebalancing is paused (by {}: {}): nothing moves until it is resumed. The rebalance below ({moves}) is what a person could start.",
                    p.paused_by, p.reason
                ),
            ),
            (OnJoin::Propose, None) => (
                AfterUncordon::Proposal,
                format!("{when}, a rebalance of {moves} is proposed for someone to approve."),
            ),
            (OnJoin::Auto, None) => (
                AfterUncordon::Rebalance,
                format!("{when}, a rebalance of {moves} starts by itself (on_join: auto)."),
            ),
        }
    };
    UncordonPreview {
        cordoned,
        triggers,
        message,
        plan,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::planner::{Move, MoveReason, plan_id};

    fn plan(n: usize) -> Plan {
        let moves: Vec<Move> = (0..n)
            .map(|i| Move {
                target: format!("t-{i}"),
                from: Some("a".into()),
                to: "b".into(),
                reason: MoveReason::Balance,
            })
            .collect();
        Plan {
            id: plan_id(&moves),
            moves,
            before: vec![],
            after: vec![],
            imbalance_before: 0.0,
            imbalance_after: 0.0,
            blocked: vec![],
            truncated: false,
            warnings: vec![],
        }
    }

    fn cluster(on_join: OnJoin) -> Cluster {
        let text = "clusters:\n- name: c\n  namespace: ns\n  selector: {app: c}\n  targets: {inline: [t]}\n";
        let mut c = crate::config::Config::parse(text, std::path::Path::new("t.yaml"))
            .unwrap()
            .clusters
            .remove(0);
        c.policy.on_join = on_join;
        c
    }

    #[test]
    fn says_what_the_policy_does_with_the_join() {
        let pause = Pause {
            paused_by: "alice".into(),
            paused_at_ms: 0,
            reason: "incident 42".into(),
        };
        let cases = [
            (
                OnJoin::Auto,
                None,
                true,
                3,
                AfterUncordon::Rebalance,
                "a rebalance of 3 moves starts by itself",
            ),
            (
                OnJoin::Propose,
                None,
                true,
                1,
                AfterUncordon::Proposal,
                "a rebalance of 1 move is proposed",
            ),
            (
                OnJoin::Off,
                None,
                true,
                3,
                AfterUncordon::Nothing,
                "on_join: off",
            ),
            (
                OnJoin::Auto,
                Some(&pause),
                true,
                3,
                AfterUncordon::Nothing,
                "paused (by alice: incident 42)",
            ),
            (
                OnJoin::Auto,
                None,
                true,
                0,
                AfterUncordon::Nothing,
                "nothing moves",
            ),
            (
                OnJoin::Auto,
                None,
                false,
                3,
                AfterUncordon::Nothing,
                "not cordoned",
            ),
        ];
        for (on_join, pause, cordoned, n, triggers, says) in cases {
            let p = preview(&cluster(on_join), "m-3", cordoned, true, pause, plan(n));
            assert_eq!(p.triggers, triggers, "{on_join:?} {n}: {}", p.message);
            assert!(p.message.contains(says), "{on_join:?} {n}: {}", p.message);
            assert_eq!(p.plan.moves.len(), n);
        }
        let p = preview(&cluster(OnJoin::Auto), "m-3", true, false, None, plan(2));
        assert!(
            p.message.starts_with("m-3 is not ready: once it is"),
            "{}",
            p.message
        );
    }
}
