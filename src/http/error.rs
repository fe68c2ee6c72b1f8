//! The HTTP boundary's one error type. Every error leaves as `application/problem+json`
//! (RFC 9457) with a stable `type` (`urn:leasehold:problem:<slug>`, listed in `docs/api.md`).
//! A 500 hides its cause from the caller; the cause travels in a response extension and is
//! logged by the middleware inside the trace span (`log_internal`), never here. Errors answered
//! outside this type (axum's 405, the body limit's 413, an extractor's plain text) are turned
//! into the same documents by `bare_errors_as_problems`.

use axum::Json;
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::engine::EngineError;
use crate::engine::planner::Plan;
use crate::store::StoreError;

use super::BODY_LIMIT;
use super::auth::AuthError;
use super::refusals::Refusal;

/// A problem document.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Problem {
    /// Stable identifier of the kind of problem, `urn:leasehold:problem:<slug>`.
    #[serde(rename = "type")]
    pub type_: String,
    /// Short summary of the kind of problem.
    pub title: String,
    /// The HTTP status.
    pub status: u16,
    /// What went wrong in this case.
    pub detail: String,
    /// For `urn:leasehold:problem:plan-changed` only: the plan a start would run now, to review
    /// and start with its `id`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan: Option<Box<Plan>>,
}

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// No credentials, or credentials nobody knows.
    #[error("authentication required: send a bearer token or log in")]
    Unauthenticated,
    /// Known caller, not allowed.
    #[error("{0}")]
    Forbidden(String),
    /// A state-changing request from another site, or without the session's CSRF token.
    #[error("{0}")]
    Csrf(String),
    /// No such thing.
    #[error("{0}")]
    NotFound(String),
    /// The request itself is wrong.
    #[error("{0}")]
    BadRequest(String),
    /// The path exists, the method does not (the detail names those it allows).
    #[error("{0}")]
    MethodNotAllowed(String),
    /// The body is over [`BODY_LIMIT`].
    #[error("the request body is larger than {BODY_LIMIT} bytes")]
    TooLarge,
    /// A body the operation does not take: not declared JSON, or sent where none is taken.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// The authenticated caller `actor` may not do this (a 403 like [`ApiError::Forbidden`],
    /// whose audit entry names the caller).
    #[error("{detail}")]
    Denied {
        /// Who asked.
        actor: String,
        /// What they may not do.
        detail: String,
    },
    /// The `Host` does not name this server (see `http::host`).
    #[error("{0}")]
    Host(String),
    /// The request conflicts with the current state (an operation running, wrong state).
    #[error("{0}")]
    Conflict(String),
    /// A start named a previewed plan that is no longer the plan (see
    /// `EngineError::PlanChanged`); carries the fresh one.
    #[error("{detail}")]
    PlanChanged {
        /// The engine's explanation.
        detail: String,
        /// The plan a start would run now.
        fresh: Box<Plan>,
    },
    /// The request cannot be done on this cluster (read-only, blocked plan).
    #[error("{0}")]
    Unprocessable(String),
    /// The `Idempotency-Key` was used before with a different request body.
    #[error("this Idempotency-Key was already used with a different request body")]
    IdempotencyKeyReused,
    /// A request with this `Idempotency-Key` is still being processed.
    #[error("a request with this Idempotency-Key is still being processed; retry later")]
    IdempotencyKeyInFlight,
    /// Not now: the model is stale or not synced, or a dependency is down.
    #[error("{0}")]
    Unavailable(String),
    /// Anything else; the cause is logged, not shown.
    #[error("internal error")]
    Internal(String),
}

/// The cause of a 500, for the logging middleware.
#[derive(Clone)]
struct InternalCause(String);

impl ApiError {
    fn slug(&self) -> (&'static str, &'static str, StatusCode) {
        use StatusCode as S;
        match self {
            ApiError::Unauthenticated => ("unauthenticated", "Unauthenticated", S::UNAUTHORIZED),
            ApiError::Forbidden(_) | ApiError::Denied { .. } => {
                ("forbidden", "Forbidden", S::FORBIDDEN)
            }
            ApiError::Csrf(_) => ("csrf", "Cross-site request refused", S::FORBIDDEN),
            ApiError::NotFound(_) => ("not-found", "Not found", S::NOT_FOUND),
            ApiError::BadRequest(_) => ("bad-request", "Bad request", S::BAD_REQUEST),
            ApiError::MethodNotAllowed(_) => (
                "method-not-allowed",
                "Method not allowed",
                S::METHOD_NOT_ALLOWED,
            ),
            ApiError::TooLarge => ("too-large", "Request body too large", S::PAYLOAD_TOO_LARGE),
            ApiError::UnsupportedMediaType(_) => (
                "unsupported-media-type",
                "Unsupported media type",
                S::UNSUPPORTED_MEDIA_TYPE,
            ),
            ApiError::Host(_) => ("host", "Unknown host", S::BAD_REQUEST),
            ApiError::Conflict(_) => ("conflict", "Conflict", S::CONFLICT),
            ApiError::PlanChanged { .. } => (
                "plan-changed",
                "The plan changed since it was previewed",
                S::CONFLICT,
            ),
            ApiError::Unprocessable(_) => (
                "unprocessable",
                "Cannot be done on this cluster",
                S::UNPROCESSABLE_ENTITY,
            ),
            ApiError::IdempotencyKeyReused => (
                "idempotency-key-reused",
                "Idempotency key reused",
                S::UNPROCESSABLE_ENTITY,
            ),
            ApiError::IdempotencyKeyInFlight => (
                "idempotency-key-in-flight",
                "Idempotency key in flight",
                S::CONFLICT,
            ),
            ApiError::Unavailable(_) => ("unavailable", "Unavailable", S::SERVICE_UNAVAILABLE),
            ApiError::Internal(_) => ("internal", "Internal error", S::INTERNAL_SERVER_ERROR),
        }
    }

    /// The problem document for this error.
    pub fn problem(&self) -> (StatusCode, Problem) {
        let (slug, title, status) = self.slug();
        (
            status,
            Problem {
                type_: format!("urn:leasehold:problem:{slug}"),
                title: title.to_owned(),
                status: status.as_u16(),
                detail: self.to_string(),
                plan: match self {
                    ApiError::PlanChanged { fresh, .. } => Some(fresh.clone()),
                    _ => None,
                },
            },
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, problem) = self.problem();
        let detail = problem.detail.clone();
        let mut res = (status, Json(problem)).into_response();
        res.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if status == StatusCode::UNAUTHORIZED {
            res.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"leasehold\""),
            );
        }
        // What `refusals::audit` records of a refused request.
        let refusal = |actor: Option<String>| Refusal { actor, detail };
        match self {
            ApiError::Internal(cause) => {
                res.extensions_mut().insert(InternalCause(cause));
            }
            ApiError::Unauthenticated | ApiError::Csrf(_) | ApiError::Forbidden(_) => {
                res.extensions_mut().insert(refusal(None));
            }
            ApiError::Denied { actor, .. } => {
                res.extensions_mut().insert(refusal(Some(actor)));
            }
            _ => {}
        }
        res
    }
}

/// Logs the hidden cause of a 500 inside the request's trace span.
pub async fn log_internal(req: Request, next: Next) -> Response {
    let res = next.run(req).await;
    if let Some(InternalCause(cause)) = res.extensions().get::<InternalCause>() {
        tracing::error!(error = %cause, "request failed");
    }
    res
}

/// Largest plain-text error body [`bare_errors_as_problems`] keeps as the `detail`.
const BARE_TEXT_LIMIT: usize = 4 * 1024;

/// Gives the error answers made outside this type — the method router's 405 (whose `Allow`
/// axum adds afterwards), the body limit's 413, an axum extractor's plain-text refusal (the
/// dashboard's forms), `/readyz`'s 503 — the problem document of their status, so that every
/// error of this server reads the same. Problem documents and the dashboard's HTML error
/// pages pass as they are, and so would a status no error here has (none is answered today).
pub async fn bare_errors_as_problems(req: Request, next: Next) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let res = next.run(req).await;
    let status = res.status();
    if !status.is_client_error() && !status.is_server_error() {
        return res;
    }
    let media_type = res
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if media_type.starts_with("application/problem+json") || media_type.starts_with("text/html") {
        return res;
    }
    let text = media_type.starts_with("text/plain");
    let make: fn(String) -> ApiError = match status {
        StatusCode::BAD_REQUEST => ApiError::BadRequest,
        StatusCode::NOT_FOUND => ApiError::NotFound,
        StatusCode::METHOD_NOT_ALLOWED => ApiError::MethodNotAllowed,
        StatusCode::PAYLOAD_TOO_LARGE => |_| ApiError::TooLarge,
        StatusCode::UNSUPPORTED_MEDIA_TYPE => ApiError::UnsupportedMediaType,
        StatusCode::UNPROCESSABLE_ENTITY => ApiError::Unprocessable,
        StatusCode::SERVICE_UNAVAILABLE => ApiError::Unavailable,
        _ => return res,
    };
    let (parts, body) = res.into_parts();
    let detail = if status == StatusCode::METHOD_NOT_ALLOWED {
        // axum sets `Allow` outside every layer, on the way out.
        format!("{method} is not allowed on {path}; the Allow header lists the methods it takes")
    } else {
        let said = if text {
            axum::body::to_bytes(body, BARE_TEXT_LIMIT).await.ok()
        } else {
            None
        };
        said.map(|b| String::from_utf8_lossy(&b).trim().to_owned())
            .filter(|t| !t.is_empty())
            .unwrap_or_else(|| status.canonical_reason().unwrap_or_default().to_owned())
    };
    let mut problem = make(detail).into_response();
    for (name, value) in &parts.headers {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            problem
                .headers_mut()
                .entry(name)
                .or_insert_with(|| value.clone());
        }
    }
    problem
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::UnknownCluster(_)
            | EngineError::UnknownInstance { .. }
            | EngineError::UnknownOperation(_) => ApiError::NotFound(e.to_string()),
            EngineError::ReadOnly(_) | EngineError::Blocked(_) => {
                ApiError::Unprocessable(e.to_string())
            }
            EngineError::Stale(_) => ApiError::Unavailable(e.to_string()),
            EngineError::Busy(_)
            | EngineError::WrongState { .. }
            | EngineError::Outdated { .. } => ApiError::Conflict(e.to_string()),
            EngineError::PlanChanged { ref fresh, .. } => ApiError::PlanChanged {
                detail: e.to_string(),
                fresh: fresh.clone(),
            },
            EngineError::Store(s) => s.into(),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::BadCursor => ApiError::BadRequest(
                "cursor: must be a next_cursor or previous_cursor this listing handed out, \
                 passed unchanged"
                    .into(),
            ),
            e => ApiError::Internal(format!("history store: {e}")),
        }
    }
}

impl From<AuthError> for ApiError {
    fn from(e: AuthError) -> Self {
        ApiError::Unavailable(format!("authentication backend: {e}"))
    }
}
