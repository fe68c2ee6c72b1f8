//! `/operations` and `/history`: operations with their moves, approval of proposed ones,
//! cancellation, and the history
//! of ownership changes, instance events, operation steps and audited requests.

use axum::Json;
use axum::extract::State;
use axum::response::Response;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::store::{HistoryEntry, HistoryQuery, Operation, OperationQuery, OperationSummary, Page};

use super::super::actions;
use super::super::auth::Action;
use super::super::caller::Caller;
use super::super::error::{ApiError, Problem};
use super::super::state::AppState;
use super::{ApiPath, ApiQuery, accepted};

pub(super) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_operations))
        .routes(routes!(get_operation))
        .routes(routes!(approve_operation))
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
    ApiQuery(q): ApiQuery<OperationQuery>,
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
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Operation>, ApiError> {
    caller.require(&state, Action::Read, None).await?;
    Ok(Json(state.engine.operation(&id).await?))
}

/// Approves a proposed operation (a rebalance planned by `on_join: propose`): it runs if every
/// move still fits the cluster (same owners, destinations still eligible); otherwise 409 and
/// it stays proposed. Needs the right to rebalance its cluster.
#[utoipa::path(post, path = "/operations/{id}/approve", tag = "operations",
    params(("id" = String, Path, description = "Operation id"),
        ("Idempotency-Key" = Option<String>, Header, description = "Retry-safe key: a retry with the same body gets the first response (kept 24 h)")),
    responses((status = 202, description = "Approved; Location names the operation, now pending", body = Operation),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Not proposed, another operation is unfinished on the cluster, or the proposal no longer fits", body = Problem, content_type = "application/problem+json"),
        (status = 422, body = Problem, content_type = "application/problem+json"),
        (status = 503, body = Problem, content_type = "application/problem+json")))]
async fn approve_operation(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<Response, ApiError> {
    Ok(accepted(actions::approve(&state, &caller, &id).await?))
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
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Operation>, ApiError> {
    Ok(Json(actions::cancel(&state, &caller, &id).await?))
}

/// The history, newest first.
#[utoipa::path(get, path = "/history", tag = "history", params(HistoryQuery),
    responses((status = 200, body = Page<HistoryEntry>),
        (status = 400, body = Problem, content_type = "application/problem+json")))]
async fn list_history(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(q): ApiQuery<HistoryQuery>,
) -> Result<Json<Page<HistoryEntry>>, ApiError> {
    caller
        .require(&state, Action::Read, q.cluster.as_deref())
        .await?;
    Ok(Json(state.engine.store().history(&q).await?))
}
