//! `/operations` and `/history`: operations with their moves, cancellation, and the history
//! of ownership changes, instance events, operation steps and audited requests.

use axum::Json;
use axum::extract::{Path, Query, State};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::store::{HistoryEntry, HistoryQuery, Operation, OperationQuery, OperationSummary, Page};

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

/// Lists operations, newest first.
#[utoipa::path(get, path = "/operations", tag = "operations", params(OperationQuery),
    responses((status = 200, body = Page<OperationSummary>),
        (status = 400, body = Problem, content_type = "application/problem+json")))]
async fn list_operations(
    State(state): State<AppState>,
    caller: Caller,
    Query(q): Query<OperationQuery>,
) -> Result<Json<Page<OperationSummary>>, ApiError> {
    caller
        .require(&state, Action::Read, q.cluster.as_deref())
        .await?;
    Ok(Json(state.engine.store().operations(&q).await?))
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
    params(("id" = String, Path, description = "Operation id"),
        ("Idempotency-Key" = Option<String>, Header, description = "Retry-safe key: a retry with the same body gets the first response (kept 24 h)")),
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
    let what = format!("cancel operation {id}");
    audit(
        &state,
        &op.cluster,
        &caller,
        &what,
        result.as_ref().map(|()| None),
    )
    .await;
    result?;
    Ok(Json(state.engine.operation(&id).await?))
}

/// The history, newest first.
#[utoipa::path(get, path = "/history", tag = "history", params(HistoryQuery),
    responses((status = 200, body = Page<HistoryEntry>),
        (status = 400, body = Problem, content_type = "application/problem+json")))]
async fn list_history(
    State(state): State<AppState>,
    caller: Caller,
    Query(q): Query<HistoryQuery>,
) -> Result<Json<Page<HistoryEntry>>, ApiError> {
    caller
        .require(&state, Action::Read, q.cluster.as_deref())
        .await?;
    Ok(Json(state.engine.store().history(&q).await?))
}
