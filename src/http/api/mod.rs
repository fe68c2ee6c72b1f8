//! The REST API under `/api/v1`: each submodule exposes a `router()` whose handlers carry
//! their utoipa annotations; [`api_router`] nests them and yields the OpenAPI document
//! (committed at `openapi/openapi.json`, checked for drift by a test), and `input` holds every
//! request to what that document says its operation takes.

pub(crate) mod clusters;
mod events;
mod input;
mod operations;

use std::sync::Arc;

use axum::Router;
use axum::extract::Json;
use axum::http::StatusCode;
use axum::middleware;
use axum::response::{IntoResponse, Response};
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;

use super::caller::Caller;
use super::error::Problem;
use super::state::AppState;
use crate::store::{Operation, now_ms};

pub use input::API_BASE;
use input::{ApiPath, ApiQuery, Inputs, OptionalJson};

pub use clusters::{ClusterDetail, ClusterSummary, TargetPage};

/// The document's fixed parts; paths and schemas come from the handlers.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Leasehold",
        description = "See and steer who owns what in Lease-coordinated Kubernetes clusters. \
            Errors are application/problem+json with a stable `type` (urn:leasehold:problem:<slug>) \
            and a `detail` that names the parameter at fault and what it takes. Input is strict: \
            a query parameter an operation does not list is refused (400), and so is a value \
            outside the range its schema states; a request body must be JSON sent as \
            `Content-Type: application/json` (or another `application/*+json` type; 415 \
            otherwise) and name only the fields its schema lists (400). A path the document does \
            not list answers 404, and a method a path does not list 405 (with `Allow`), both \
            problem+json. Authenticate with `Authorization: Bearer <token>`.",
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

/// The API routes (to be nested under [`API_BASE`]) and the OpenAPI document. Every route
/// takes only what the document says it takes (`input::strict`).
pub fn api_router() -> (Router<AppState>, utoipa::openapi::OpenApi) {
    let (router, mut doc) = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .merge(clusters::router())
        .merge(operations::router())
        .merge(events::router())
        .split_for_parts();
    doc.servers = Some(vec![utoipa::openapi::Server::new(API_BASE)]);
    document_common_errors(&mut doc);
    let inputs = Arc::new(Inputs::new(&doc));
    let router = router.route_layer(middleware::from_fn_with_state(inputs, input::strict));
    (router, doc)
}

/// The `Idempotency-Key` header every POST takes, exactly as `http::idempotency` reads it: 1
/// to 255 ([`MAX_KEY_LEN`](super::idempotency::MAX_KEY_LEN)) visible ASCII characters, bare
/// (not both starting and ending with `"`) or an RFC 8941 quoted string (`\"` and `\\`
/// escapes), with blanks around either ignored.
#[derive(utoipa::IntoParams)]
#[into_params(names("Idempotency-Key"), parameter_in = Header)]
pub struct IdempotencyKey(
    /// Retry-safe key: a retry with the same body gets the first response (kept 24 h); the
    /// same key with another body is refused (422). Bare, or an RFC 8941 quoted string.
    #[param(
        min_length = 1,
        max_length = 255,
        pattern = r#"^[\t ]*(?:"(?:[\t !#-\[\]-~]|\\["\\]){1,255}"|[!#-~](?:[\t -~]{0,253}[!-~])?|"(?:[\t -~]{0,253}[!#-~])?)[\t ]*$"#
    )]
    pub Option<String>,
);

/// The body of a request that takes no parameters: none, `null` or `{}`.
#[derive(Debug, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NoParameters {}

/// Adds to every operation the errors any of them can answer, from the layers in front of the
/// handlers: 400 (a query parameter the operation does not list or a value outside its range,
/// a body that does not match its schema, or a `Host` this server does not answer to), 401
/// and 403 (authentication, authorisation, the CSRF guard), 413 (a body over the limit), 503
/// (the authentication backend is down, the model is stale, or the request timed out); and to
/// every POST 415 (a body not declared JSON) and those of `Idempotency-Key`: 409 (the same key
/// in flight), 422 (the key reused with another body). A handler's own description of a status
/// is kept.
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
            "A query parameter this operation does not list, a value outside the type, range or \
             words it states, a body that does not match its schema, or a Host this server does \
             not answer to; the detail names the parameter and what it takes",
        ),
        ("401", "No credential, or one nobody holds"),
        (
            "403",
            "The caller may not do this, or the request came from another site",
        ),
        ("413", "The body is larger than the server takes (64 KiB)"),
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
        (
            "415",
            "A body not sent as JSON (Content-Type: application/json or another \
             application/*+json type)",
        ),
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
