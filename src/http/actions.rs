//! The cluster-changing requests, shared by both faces (API handlers and dashboard forms):
//! each checks the caller's permission, asks the engine, and records who asked for what and
//! how it went in the history (`kind=audit`). Plans (dry runs) change nothing and are not
//! audited. A run with nothing to move records no operation (`run_rebalance`).

use crate::engine::PlanRequest;
use crate::engine::planner::Plan;
use crate::store::Operation;

use super::api::audit;
use super::auth::Action;
use super::caller::Caller;
use super::error::ApiError;
use super::state::AppState;

/// The rebalance a request for at most `max_moves` moves would make.
pub async fn plan_rebalance(
    state: &AppState,
    caller: &Caller,
    cluster: &str,
    max_moves: Option<usize>,
) -> Result<Plan, ApiError> {
    caller
        .require(state, Action::Rebalance, Some(cluster))
        .await?;
    Ok(state
        .engine
        .plan_rebalance(
            cluster,
            &PlanRequest {
                budget: max_moves,
                expected: None,
            },
        )
        .await?)
}

/// What a request to run a rebalance did.
#[derive(Debug)]
pub enum Run {
    /// The operation it started.
    Started(Operation),
    /// Nothing: the plan has no move. No operation is recorded (an empty one would read as
    /// work done); the plan says why (balanced, or blocked targets).
    NothingToMove(Plan),
}

/// As [`rebalance`], but a plan with no move (the one `plan_id` names, or the fresh one when
/// none is named) starts nothing: the answer is the plan. Audited either way.
///
/// The plan is made once here and again by the start, so a cluster that becomes balanced in
/// between can still record an empty operation; only the engine's start could close that gap.
pub async fn run_rebalance(
    state: &AppState,
    caller: &Caller,
    cluster: &str,
    max_moves: Option<usize>,
    plan_id: Option<&str>,
    reason: &str,
) -> Result<Run, ApiError> {
    let plan = plan_rebalance(state, caller, cluster, max_moves).await;
    // A plan that could not be made: the start says why, and audits it.
    if let Ok(plan) = plan
        && plan.moves.is_empty()
        && plan_id.is_none_or(|id| id == plan.id)
    {
        let ok: Result<Option<&str>, &ApiError> = Ok(None);
        audit(state, cluster, caller, "rebalance: nothing to move", ok).await;
        return Ok(Run::NothingToMove(plan));
    }
    rebalance(state, caller, cluster, max_moves, plan_id, reason)
        .await
        .map(Run::Started)
}

/// Starts a rebalance of at most `max_moves` moves: exactly the plan `plan_id` when given (the
/// one previewed), refused with the fresh plan if that is no longer the plan.
pub async fn rebalance(
    state: &AppState,
    caller: &Caller,
    cluster: &str,
    max_moves: Option<usize>,
    plan_id: Option<&str>,
    reason: &str,
) -> Result<Operation, ApiError> {
    caller
        .require(state, Action::Rebalance, Some(cluster))
        .await?;
    let req = PlanRequest {
        budget: max_moves,
        expected: plan_id.map(str::to_owned),
    };
    let result = state
        .engine
        .start_rebalance(cluster, &req, caller.name(), reason, false)
        .await;
    let outcome = result.as_ref().map(|op| Some(op.id.as_str()));
    audit(state, cluster, caller, "rebalance", outcome).await;
    Ok(result?)
}

/// The drain plan of removing `instance`.
pub async fn plan_remove(
    state: &AppState,
    caller: &Caller,
    cluster: &str,
    instance: &str,
) -> Result<Plan, ApiError> {
    caller
        .require(state, Action::RemoveInstance, Some(cluster))
        .await?;
    Ok(state.engine.plan_remove(cluster, instance).await?)
}

/// Starts removing `instance`: cordon, drain, webhook, optional pod deletion; with `plan_id`
/// (the drain plan previewed), only if that is still the drain plan.
pub async fn remove(
    state: &AppState,
    caller: &Caller,
    cluster: &str,
    instance: &str,
    plan_id: Option<&str>,
) -> Result<Operation, ApiError> {
    caller
        .require(state, Action::RemoveInstance, Some(cluster))
        .await?;
    let result = state
        .engine
        .start_remove(cluster, instance, caller.name(), plan_id)
        .await;
    let what = format!("remove instance {instance}");
    let outcome = result.as_ref().map(|op| Some(op.id.as_str()));
    audit(state, cluster, caller, &what, outcome).await;
    Ok(result?)
}

/// Lets a cordoned instance take targets again; whether it was cordoned.
pub async fn uncordon(
    state: &AppState,
    caller: &Caller,
    cluster: &str,
    instance: &str,
) -> Result<bool, ApiError> {
    caller
        .require(state, Action::Uncordon, Some(cluster))
        .await?;
    let result = state
        .engine
        .uncordon(cluster, instance, caller.name())
        .await;
    let what = format!("uncordon {instance}");
    audit(state, cluster, caller, &what, result.as_ref().map(|_| None)).await;
    Ok(result?)
}

/// Pauses or resumes `cluster`'s automatic rebalancing (a rebalancing right), audited.
pub async fn set_automation(
    state: &AppState,
    caller: &Caller,
    cluster: &str,
    paused: bool,
    reason: &str,
) -> Result<(bool, Option<crate::store::Pause>), ApiError> {
    caller
        .require(state, Action::Rebalance, Some(cluster))
        .await?;
    let result = state
        .engine
        .set_automation(cluster, paused.then_some(reason), caller.name())
        .await;
    let what = if paused {
        format!("pause automatic rebalancing: {reason}")
    } else {
        format!("resume automatic rebalancing: {reason}")
    };
    audit(state, cluster, caller, &what, result.as_ref().map(|_| None)).await;
    Ok(result?)
}

/// Operation `id`, once the caller may do `action` on its cluster. The operation is looked up
/// first so that the permission is asked for its cluster; an unknown id is asked for no
/// cluster, so the caller's rights are checked before it learns the id does not exist.
async fn operation_for(
    state: &AppState,
    caller: &Caller,
    id: &str,
    action: Action,
) -> Result<Operation, ApiError> {
    let op = state.engine.operation(id).await;
    let cluster = op.as_ref().ok().map(|o| o.cluster.clone());
    caller.require(state, action, cluster.as_deref()).await?;
    Ok(op?)
}

/// Cancels operation `id` (no new move starts); the operation as it is now.
pub async fn cancel(state: &AppState, caller: &Caller, id: &str) -> Result<Operation, ApiError> {
    let op = operation_for(state, caller, id, Action::CancelOperation).await?;
    let result = state.engine.cancel(id, caller.name()).await;
    let what = format!("cancel operation {id}");
    audit(
        state,
        &op.cluster,
        caller,
        &what,
        result.as_ref().map(|()| None),
    )
    .await;
    result?;
    Ok(state.engine.operation(id).await?)
}

/// Approves proposed operation `id` (a rebalance the join policy planned): it runs if its
/// moves still fit the cluster. Needs the right to rebalance the operation's cluster.
pub async fn approve(state: &AppState, caller: &Caller, id: &str) -> Result<Operation, ApiError> {
    let op = operation_for(state, caller, id, Action::Rebalance).await?;
    let result = state.engine.approve(id, caller.name()).await;
    let what = format!("approve operation {id}");
    let outcome = result.as_ref().map(|op| Some(op.id.as_str()));
    audit(state, &op.cluster, caller, &what, outcome).await;
    Ok(result?)
}
