//! `/operations` and `/history`: operations with their moves, cancellation, and the history
//! of ownership changes, instance events, operation steps and audited requests.

use axum::Json;
use axum::extract::{Path, Query, State};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::model::{OperationKind, OperationState};
use crate::store::{
    HistoryEntry, HistoryKind, HistoryQuery, Operation, OperationQuery, OperationSummary,
};

use super::super::auth::Action;
use super::super::caller::Caller;
use super::super::error::{ApiError, Problem};
use super::super::state::AppState;
use super::audit;

pub(super) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_operations))
        .routes(routes!(get_operation))
        .routes(routes!(cancel_operation))
        .routes(routes!(list_history))
}

/// Filters of the operation list.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct OperationFilter {
    /// Only this cluster's.
    pub cluster: Option<String>,
    /// Only in this state.
    pub state: Option<OperationState>,
    /// Only of this kind.
    pub kind: Option<OperationKind>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
    /// Page size (default 100, at most 1000).
    pub limit: Option<u32>,
}

/// A page of operations, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct OperationPage {
    /// The operations.
    pub items: Vec<OperationSummary>,
    /// Pass as `cursor` for the next page; absent on the last.
    pub next_cursor: Option<String>,
}

/// Filters of the history.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct HistoryFilter {
    /// Only this cluster's.
    pub cluster: Option<String>,
    /// Only about this target.
    pub target: Option<String>,
    /// Only about this instance (as subject, previous or new owner).
    pub instance: Option<String>,
    /// Only entries of this kind.
    pub kind: Option<HistoryKind>,
    /// Only at or after this time (unix ms).
    pub since_ms: Option<i64>,
    /// Only before this time (unix ms).
    pub until_ms: Option<i64>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
    /// Page size (default 100, at most 1000).
    pub limit: Option<u32>,
}

/// A page of history, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct HistoryPage {
    /// The entries.
    pub items: Vec<HistoryEntry>,
    /// Pass as `cursor` for the next page; absent on the last.
    pub next_cursor: Option<String>,
}

/// Lists operations, newest first.
#[utoipa::path(get, path = "/operations", tag = "operations", params(OperationFilter),
    responses((status = 200, body = OperationPage),
        (status = 400, body = Problem, content_type = "application/problem+json")))]
async fn list_operations(
    State(state): State<AppState>,
    caller: Caller,
    Query(f): Query<OperationFilter>,
) -> Result<Json<OperationPage>, ApiError> {
    caller
        .require(&state, Action::Read, f.cluster.as_deref())
        .await?;
    let page = state
        .engine
        .store()
        .operations(&OperationQuery {
            cluster: f.cluster,
            state: f.state,
            kind: f.kind,
            cursor: f.cursor,
            limit: f.limit.unwrap_or(0),
        })
        .await?;
    Ok(Json(OperationPage {
        items: page.items,
        next_cursor: page.next_cursor,
    }))
}

/// One operation with its moves.
#[utoipa::path(get, path = "/operations/{id}", tag = "operations",
    params(("id" = String, Path, description = "Operation id")),
    responses((status = 200, body = Operation),
        (status = 404, body = Problem, content_type = "application/problem+json")))]
async fn get_operation(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Operation>, ApiError> {
    caller.require(&state, Action::Read, None).await?;
    Ok(Json(state.engine.operation(&id).await?))
}

/// Cancels an operation: no new move starts; moves in flight finish.
#[utoipa::path(post, path = "/operations/{id}/cancel", tag = "operations",
    params(("id" = String, Path, description = "Operation id")),
    responses((status = 200, body = Operation),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 409, body = Problem, content_type = "application/problem+json")))]
async fn cancel_operation(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Operation>, ApiError> {
    let op = state.engine.operation(&id).await;
    let cluster = op.as_ref().ok().map(|o| o.cluster.clone());
    caller
        .require(&state, Action::CancelOperation, cluster.as_deref())
        .await?;
    let op = op?;
    let result = state.engine.cancel(&id, caller.name()).await;
    audit(
        &state,
        &op.cluster,
        &caller,
        &format!("cancel operation {id}"),
        &result,
    )
    .await;
    result?;
    Ok(Json(state.engine.operation(&id).await?))
}

/// The history, newest first.
#[utoipa::path(get, path = "/history", tag = "history", params(HistoryFilter),
    responses((status = 200, body = HistoryPage),
        (status = 400, body = Problem, content_type = "application/problem+json")))]
async fn list_history(
    State(state): State<AppState>,
    caller: Caller,
    Query(f): Query<HistoryFilter>,
) -> Result<Json<HistoryPage>, ApiError> {
    caller
        .require(&state, Action::Read, f.cluster.as_deref())
        .await?;
    let page = state
        .engine
        .store()
        .history(&HistoryQuery {
            cluster: f.cluster,
            target: f.target,
            instance: f.instance,
            kind: f.kind,
            since_ms: f.since_ms,
            until_ms: f.until_ms,
            cursor: f.cursor,
            limit: f.limit.unwrap_or(0),
        })
        .await?;
    Ok(Json(HistoryPage {
        items: page.items,
        next_cursor: page.next_cursor,
    }))
}
