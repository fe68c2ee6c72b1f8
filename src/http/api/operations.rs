//! `/operations` and `/history`: operations with their moves, approval of proposed ones,
//! cancellation, and the history
//! of ownership changes, instance events, operation steps and audited requests. The lists'
//! filters are the API's own types (their ranges are the document's), turned into the store's
//! queries; a filter naming a cluster the configuration does not have is a 404.

use axum::Json;
use axum::extract::State;
use axum::response::Response;
use serde::Deserialize;
use utoipa::IntoParams;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::model::{OperationKind, OperationState};
use crate::store::{
    HistoryEntry, HistoryKind, HistoryQuery, Operation, OperationQuery, OperationSummary, Page,
};

use super::super::actions;
use super::super::auth::Action;
use super::super::caller::Caller;
use super::super::error::{ApiError, Problem};
use super::super::state::AppState;
use super::{ApiPath, ApiQuery, IdempotencyKey, NoParameters, OptionalJson, accepted};

pub(super) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_operations))
        .routes(routes!(get_operation))
        .routes(routes!(approve_operation))
        .routes(routes!(cancel_operation))
        .routes(routes!(list_history))
}

/// Filters of the operation list.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct OperationFilter {
    /// Only this cluster's (a cluster the configuration has).
    cluster: Option<String>,
    /// Only in this state.
    state: Option<OperationState>,
    /// Only of this kind.
    kind: Option<OperationKind>,
    /// `next_cursor` of the page before.
    cursor: Option<String>,
    /// Page size, 1 to 1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<u32>,
}

/// Filters of the history.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct HistoryFilter {
    /// Only this cluster's (a cluster the configuration has).
    cluster: Option<String>,
    /// Only about this target.
    target: Option<String>,
    /// Matches an ownership change's `from` or `to`, or the instance of an instance or
    /// operation entry.
    instance: Option<String>,
    /// Only entries of this kind.
    kind: Option<HistoryKind>,
    /// Only entries of this operation: its lifecycle, the moves it made, its audit.
    operation: Option<String>,
    /// Only at or after this time (Unix milliseconds).
    #[param(minimum = 0, maximum = 9223372036854775807_i64)]
    since_ms: Option<i64>,
    /// Only before this time (Unix milliseconds).
    #[param(minimum = 0, maximum = 9223372036854775807_i64)]
    until_ms: Option<i64>,
    /// `next_cursor` of the page before.
    cursor: Option<String>,
    /// Page size, 1 to 1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<u32>,
}

/// A cluster filter must name a configured cluster: an unknown one is a 404, not an empty list.
fn known_cluster(state: &AppState, cluster: Option<&str>) -> Result<(), ApiError> {
    let Some(name) = cluster else { return Ok(()) };
    let config = state.engine.config();
    if config.cluster(name).is_some() {
        return Ok(());
    }
    let names: Vec<&str> = config.clusters.iter().map(|c| c.name.as_str()).collect();
    Err(ApiError::NotFound(format!(
        "cluster: no cluster named {name:?}; the clusters are {}",
        names.join(", ")
    )))
}

/// Lists operations, newest first.
#[utoipa::path(get, path = "/operations", tag = "operations", params(OperationFilter),
    responses((status = 200, body = Page<OperationSummary>),
        (status = 400, description = "A query parameter this list does not take, a value outside its range or words, or a cursor it did not hand out", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "The cluster filter names no configured cluster", body = Problem, content_type = "application/problem+json")))]
async fn list_operations(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(f): ApiQuery<OperationFilter>,
) -> Result<Json<Page<OperationSummary>>, ApiError> {
    caller
        .require(&state, Action::Read, f.cluster.as_deref())
        .await?;
    known_cluster(&state, f.cluster.as_deref())?;
    let q = OperationQuery {
        cluster: f.cluster,
        state: f.state,
        kind: f.kind,
        cursor: f.cursor,
        limit: f.limit.unwrap_or_default(),
    };
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
        IdempotencyKey),
    request_body(content = Option<NoParameters>, description = "None, `null` or `{}`: it takes no parameters"),
    responses((status = 202, description = "Approved; Location names the operation, now pending", body = Operation),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Not proposed, another operation is unfinished on the cluster, or the proposal no longer fits", body = Problem, content_type = "application/problem+json"),
        (status = 422, body = Problem, content_type = "application/problem+json"),
        (status = 503, body = Problem, content_type = "application/problem+json")))]
async fn approve_operation(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    _body: OptionalJson<NoParameters>,
) -> Result<Response, ApiError> {
    Ok(accepted(actions::approve(&state, &caller, &id).await?))
}

/// Cancels an operation: no new move starts; moves in flight finish.
#[utoipa::path(post, path = "/operations/{id}/cancel", tag = "operations",
    params(("id" = String, Path, description = "Operation id"),
        IdempotencyKey),
    request_body(content = Option<NoParameters>, description = "None, `null` or `{}`: it takes no parameters"),
    responses((status = 200, body = Operation),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 409, body = Problem, content_type = "application/problem+json")))]
async fn cancel_operation(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    _body: OptionalJson<NoParameters>,
) -> Result<Json<Operation>, ApiError> {
    Ok(Json(actions::cancel(&state, &caller, &id).await?))
}

/// The history, newest first.
#[utoipa::path(get, path = "/history", tag = "history", params(HistoryFilter),
    responses((status = 200, body = Page<HistoryEntry>),
        (status = 400, description = "A query parameter the history does not take, a value outside its range or words, or a cursor it did not hand out", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "The cluster filter names no configured cluster", body = Problem, content_type = "application/problem+json")))]
async fn list_history(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(f): ApiQuery<HistoryFilter>,
) -> Result<Json<Page<HistoryEntry>>, ApiError> {
    caller
        .require(&state, Action::Read, f.cluster.as_deref())
        .await?;
    known_cluster(&state, f.cluster.as_deref())?;
    let q = HistoryQuery {
        cluster: f.cluster,
        target: f.target,
        instance: f.instance,
        kind: f.kind,
        operation: f.operation,
        since_ms: f.since_ms,
        until_ms: f.until_ms,
        cursor: f.cursor,
        // 0: the store's default page.
        limit: f.limit.unwrap_or_default(),
    };
    Ok(Json(state.engine.store().history(&q).await?))
}
