//! The REST API under `/api/v1`: each submodule exposes a `router()` whose handlers carry
//! their utoipa annotations; [`api_router`] nests them and yields the OpenAPI document
//! (committed at `openapi/openapi.json`, checked for drift by a test).

pub(crate) mod clusters;
mod events;
mod operations;

use axum::Router;
use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Json, Path, Query, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;

use super::caller::Caller;
use super::error::{ApiError, Problem};
use super::state::AppState;
use crate::store::{Operation, now_ms};

pub use clusters::{ClusterDetail, ClusterSummary, TargetPage};

/// The document's fixed parts; paths and schemas come from the handlers.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Leasehold",
        description = "See and steer who owns what in Lease-coordinated Kubernetes clusters. \
            Errors are application/problem+json with a stable `type` (urn:leasehold:problem:<slug>). \
            Authenticate with `Authorization: Bearer <token>`.",
        license(name = "Apache-2.0", identifier = "Apache-2.0")
    ),
    components(schemas(Problem)),
    modifiers(&BearerAuth),
    security(("bearer" = [])),
    tags(
        (name = "clusters", description = "Managed clusters, rebalancing"),
        (name = "instances", description = "Member instances: removal, uncordon"),
        (name = "targets", description = "Targets and their owners"),
        (name = "operations", description = "Rebalances and removals"),
        (name = "history", description = "Ownership changes, instance events, audit"),
        (name = "events", description = "Live change stream (SSE)")
    )
)]
pub struct ApiDoc;

struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The API routes (to be nested under `/api/v1`) and the OpenAPI document.
pub fn api_router() -> (Router<AppState>, utoipa::openapi::OpenApi) {
    let (router, mut doc) = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .merge(clusters::router())
        .merge(operations::router())
        .merge(events::router())
        .split_for_parts();
    doc.servers = Some(vec![utoipa::openapi::Server::new("/api/v1")]);
    document_common_errors(&mut doc);
    (router, doc)
}

/// Adds to every operation the errors any of them can answer, from the layers in front of the
/// handlers: 400 (a parameter or body that does not parse, or a `Host` this server does not
/// answer to), 401 and 403 (authentication, authorisation, the CSRF guard), 503 (the
/// authentication backend is down, the model is stale, or the request timed out); and to every
/// POST those of `Idempotency-Key` and the body limit: 409 (the same key in flight), 413, 422
/// (the key reused with another body). A handler's own description of a status is kept.
fn document_common_errors(doc: &mut utoipa::openapi::OpenApi) {
    use utoipa::openapi::schema::Ref;
    use utoipa::openapi::{ContentBuilder, RefOr, ResponseBuilder};
    let problem = |description: &str| {
        RefOr::T(
            ResponseBuilder::new()
                .description(description)
                .content(
                    "application/problem+json",
                    ContentBuilder::new()
                        .schema(Some(Ref::from_schema_name("Problem")))
                        .build(),
                )
                .build(),
        )
    };
    let every = [
        (
            "400",
            "A parameter or body that does not parse, or a Host this server does not answer to",
        ),
        ("401", "No credential, or one nobody holds"),
        (
            "403",
            "The caller may not do this, or the request came from another site",
        ),
        (
            "503",
            "The authentication backend or the model is unavailable, or the request timed out",
        ),
    ];
    let posts = [
        (
            "409",
            "A request with this Idempotency-Key is still being processed",
        ),
        ("413", "The body is larger than the server takes"),
        ("422", "This Idempotency-Key was used with another body"),
    ];
    for item in doc.paths.paths.values_mut() {
        let ops = [
            (&mut item.get, false),
            (&mut item.post, true),
            (&mut item.put, true),
            (&mut item.delete, true),
        ];
        for (op, mutating) in ops {
            let Some(op) = op.as_mut() else { continue };
            let extra = every.iter().chain(if mutating { &posts[..] } else { &[] });
            for (status, description) in extra {
                op.responses
                    .responses
                    .entry((*status).to_owned())
                    .or_insert_with(|| problem(description));
            }
        }
    }
}

/// The OpenAPI document as committed (pretty JSON with a final newline).
pub fn openapi_json() -> String {
    let (_, doc) = api_router();
    let mut s = doc.to_pretty_json().unwrap_or_default();
    s.push('\n');
    s
}

/// Records a mutating request in the history: who, what, and how it ended (`Ok` with the
/// operation it created, if any). A failure to record is logged; the request's own outcome
/// stands. Also used by the demo controls (`http::demo`) and `http::actions`.
pub(crate) async fn audit<E: std::fmt::Display>(
    state: &AppState,
    cluster: &str,
    caller: &Caller,
    what: &str,
    result: Result<Option<&str>, &E>,
) {
    let (outcome, operation) = match result {
        Ok(op) => ("ok".to_owned(), op),
        Err(e) => (format!("refused: {e}"), None),
    };
    if let Err(error) = state
        .engine
        .store()
        .record_audit(cluster, caller.name(), what, &outcome, operation, now_ms())
        .await
    {
        tracing::error!(%error, cluster, what, "could not record the audit entry");
    }
}

/// axum's `Path`, with a path segment that does not decode answered as a 400 problem, like
/// every other error the document lists, instead of axum's plain text.
pub(super) struct ApiPath<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(v)) => Ok(ApiPath(v)),
            Err(e @ PathRejection::FailedToDeserializePathParams(_)) => {
                Err(ApiError::BadRequest(e.body_text()))
            }
            Err(e) => Err(ApiError::Internal(e.body_text())),
        }
    }
}

/// axum's `Query`, with a bad query string answered as a 400 problem.
pub(super) struct ApiQuery<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(v)| ApiQuery(v))
            .map_err(|e: QueryRejection| ApiError::BadRequest(e.body_text()))
    }
}

/// An optional JSON body: none, or `null`, is `None`. A body that is not JSON, has unknown
/// fields or wrong types is a 400 problem; one over the body limit stays axum's 413.
pub(super) struct OptionalJson<T>(pub Option<T>);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for OptionalJson<T> {
    type Rejection = Response;

    async fn from_request(req: Request, state: &S) -> Result<Self, Response> {
        match Option::<Json<Option<T>>>::from_request(req, state).await {
            Ok(body) => Ok(OptionalJson(body.and_then(|Json(b)| b))),
            Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => Err(e.into_response()),
            Err(e) => {
                let e: JsonRejection = e;
                Err(ApiError::BadRequest(e.body_text()).into_response())
            }
        }
    }
}

/// 202 with the operation and its `Location`.
pub(super) fn accepted(op: Operation) -> Response {
    let location = format!("/api/v1/operations/{}", op.id);
    (
        StatusCode::ACCEPTED,
        [(axum::http::header::LOCATION, location)],
        Json(op),
    )
        .into_response()
}
