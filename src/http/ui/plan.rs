//! A plan as the dashboard shows it (the rebalance and removal previews): the moves, the
//! imbalance before and after (the planner's one measure, [`planner::imbalance`], so the
//! "before" of every plan is what the overview shows), and the load per instance before and
//! after as a bar chart ([`LoadChart`]) with the same numbers in a table.
//!
//! A preview is a read: anyone who may read the cluster sees it ([`rebalance_preview`],
//! [`remove_preview`], [`uncordon_preview`]); one who may not start it sees it read-only, told what starting it
//! would need ([`PlanView::needs`]). Starting stays with `http::actions`, which checks the
//! right to.

use super::charts::LoadChart;
use crate::engine::PlanRequest;
use crate::engine::planner::{self, Blocked, Move, Plan, Warning};
use crate::http::auth::Action;
use crate::http::caller::Caller;
use crate::http::error::ApiError;
use crate::http::state::AppState;

/// A plan, ready for the template.
pub struct PlanView {
    /// The plan's id: starting it runs exactly these moves, or is refused.
    pub id: String,
    /// The moves.
    pub moves: Vec<Move>,
    /// Load per instance, before and after.
    pub chart: LoadChart,
    /// Imbalance before and after, as percentages over fair share.
    pub imbalance_before: String,
    /// See `imbalance_before`.
    pub imbalance_after: String,
    /// Whether the cluster counts as balanced before and after ([`planner::balanced`]).
    pub balanced_before: bool,
    /// See `balanced_before`.
    pub balanced_after: bool,
    /// Targets that cannot be placed.
    pub blocked: Vec<Blocked>,
    /// The move budget cut the plan short.
    pub truncated: bool,
    /// What to know before starting it.
    pub warnings: Vec<Warning>,
    /// `None` when the viewer may start the plan; else what starting it would need (the page
    /// shows this instead of the button).
    pub needs: Option<String>,
}

impl PlanView {
    /// Why `m` is in the plan, in words.
    pub fn why(&self, m: &Move) -> String {
        m.reason.describe(m.from.as_deref(), &m.to)
    }
}

/// A plan its viewer may start: the one a start just made (the start checked the right to).
impl From<Plan> for PlanView {
    fn from(p: Plan) -> Self {
        PlanView {
            chart: LoadChart::new(p.loads()),
            id: p.id,
            moves: p.moves,
            imbalance_before: percent(p.imbalance_before),
            imbalance_after: percent(p.imbalance_after),
            balanced_before: planner::balanced(&p.before),
            balanced_after: planner::balanced(&p.after),
            blocked: p.blocked,
            truncated: p.truncated,
            warnings: p.warnings,
            needs: None,
        }
    }
}

/// The rebalance of at most `budget` moves the cluster would get now, for anyone who may read
/// `cluster`.
pub async fn rebalance_preview(
    state: &AppState,
    caller: &Caller,
    cluster: &str,
    budget: Option<usize>,
) -> Result<PlanView, ApiError> {
    caller.require(state, Action::Read, Some(cluster)).await?;
    let req = PlanRequest {
        budget,
        expected: None,
    };
    let plan = state.engine.plan_rebalance(cluster, &req).await?;
    preview(state, caller, plan, Action::Rebalance, cluster).await
}

/// The drain plan of removing `instance`, for anyone who may read `cluster`.
pub async fn remove_preview(
    state: &AppState,
    caller: &Caller,
    cluster: &str,
    instance: &str,
) -> Result<PlanView, ApiError> {
    caller.require(state, Action::Read, Some(cluster)).await?;
    let plan = state.engine.plan_remove(cluster, instance).await?;
    preview(state, caller, plan, Action::RemoveInstance, cluster).await
}

/// What uncordoning an instance would do, for the confirmation page.
pub struct UncordonView {
    /// Whether it is cordoned now.
    pub cordoned: bool,
    /// What follows the uncordon by itself, in words.
    pub then: String,
    /// The rebalance the cluster would get with it uncordoned.
    pub plan: PlanView,
}

/// What uncordoning `instance` would do now, for anyone who may read `cluster`.
pub async fn uncordon_preview(
    state: &AppState,
    caller: &Caller,
    cluster: &str,
    instance: &str,
) -> Result<UncordonView, ApiError> {
    caller.require(state, Action::Read, Some(cluster)).await?;
    let p = state.engine.plan_uncordon(cluster, instance).await?;
    Ok(UncordonView {
        cordoned: p.cordoned,
        then: p.message,
        plan: preview(state, caller, p.plan, Action::Uncordon, cluster).await?,
    })
}

/// `None` when `caller` may do `action` on `cluster`; else what it would need, for a page to
/// show instead of the button.
pub async fn needs(
    state: &AppState,
    caller: &Caller,
    action: Action,
    cluster: &str,
) -> Result<Option<String>, ApiError> {
    let may = state
        .auth
        .authorize(&caller.principal, action, Some(cluster))
        .await?;
    Ok((!may).then(|| state.auth.requirement(action, Some(cluster))))
}

/// `plan` for `caller`, with what starting it (`action`) would need when the caller may not.
async fn preview(
    state: &AppState,
    caller: &Caller,
    plan: Plan,
    action: Action,
    cluster: &str,
) -> Result<PlanView, ApiError> {
    Ok(PlanView {
        needs: needs(state, caller, action, cluster).await?,
        ..plan.into()
    })
}

/// An imbalance (0.25) as people read it ("25 %"): every page shows it through this.
pub fn percent(x: f64) -> String {
    format!("{:.0} %", x * 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::planner::{MemberLoad, MemberState, plan_id};

    fn load(member: &str, targets: usize) -> MemberLoad {
        MemberLoad {
            member: member.into(),
            capacity: 1,
            state: MemberState::Active,
            targets,
            weight: targets as u64,
        }
    }

    #[test]
    fn new_members_come_after_the_old_ones_with_nothing_before() {
        let v = PlanView::from(Plan {
            id: plan_id(&[]),
            moves: vec![],
            before: vec![load("a", 10), load("b", 5)],
            after: vec![load("a", 5), load("b", 5), load("c", 5)],
            imbalance_before: 0.333,
            imbalance_after: 0.0,
            blocked: vec![],
            truncated: false,
            warnings: vec![],
        });
        let rows: Vec<_> = v
            .chart
            .rows
            .iter()
            .map(|r| (r.member.as_str(), r.before, r.after))
            .collect();
        assert_eq!(rows, [("a", 10, 5), ("b", 5, 5), ("c", 0, 5)]);
        assert_eq!(v.imbalance_before, "33 %");
        // 10 against 5 is a whole target too many; 5, 5, 5 is even.
        assert!(!v.balanced_before);
        assert!(v.balanced_after);
    }
}
