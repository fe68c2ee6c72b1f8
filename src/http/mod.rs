//! The faces of Leasehold: the REST API under `/api/v1` (with its OpenAPI document and Swagger
//! UI at `/docs`), the SSE feed, health and readiness, Prometheus metrics at `/metrics`, behind
//! authentication and authorisation (not `/metrics`, by convention), with security headers,
//! body limits and timeouts on every response, and every error as problem+json (405 and 413
//! included).
//! `http` reads the model and calls the engine; nothing below it imports `http`.
//!
//! `api` holds the handlers, `auth` who callers are and what they may do, `caller` the
//! extractor that asks it, `error` the one error type (problem+json), `events` the numbered
//! live feed, `state` the shared state, `demo` the controls only `leasehold demo` mounts,
//! `idempotency` the `Idempotency-Key` header on POSTs, `tls` HTTPS when `http.tls` is set,
//! `ui` the dashboard, `metrics` the scrape endpoint and request timing, `csrf` the guard of state-changing browser requests, `actions` the
//! changes both faces make.

pub mod actions;
pub mod api;
pub mod auth;
pub mod caller;
pub mod csrf;
pub mod demo;
pub mod error;
pub mod events;
pub mod host;
pub mod idempotency;
pub mod metrics;
pub mod refusals;
pub mod state;
pub mod tls;
pub mod ui;

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, Uri, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::trace::{DefaultOnFailure, TraceLayer};

use self::auth::Auth;
use self::demo::DemoControls;
use self::error::ApiError;
use self::events::Hub;
use self::state::AppState;
use self::tls::TlsListener;
use crate::config::http::HttpSettings;
use crate::engine::Engine;

/// Largest request body accepted (requests are small JSON documents).
pub const BODY_LIMIT: usize = 64 * 1024;
/// Bound on handling one request (the SSE stream excepted).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The whole application: API, OpenAPI, Swagger UI, health, with the middleware stack.
pub fn router(state: AppState) -> Router {
    let (api, doc) = api::api_router();
    // The base layout: without the search bar, whose unlabelled URL field and low-contrast
    // button were the only accessibility violations axe-core found there that were not inside
    // Swagger UI's operation list.
    let swagger = utoipa_swagger_ui::SwaggerUi::new("/docs")
        .url("/openapi.json", doc)
        .config(utoipa_swagger_ui::Config::from("/openapi.json").use_base_layout());
    let swagger = Router::from(swagger).layer(middleware::from_fn(docs_viewport));
    let demo = state.demo.is_some().then(demo::router);
    let pages = ui::router();
    let recorder = state.engine.metrics().clone();
    let state_for_host = state.clone();
    Router::new()
        .nest(api::API_BASE, api)
        .merge(demo.unwrap_or_default())
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .merge(pages)
        .route("/metrics", get(metrics::scrape))
        .fallback(not_found)
        .merge(swagger)
        .layer(middleware::from_fn_with_state(state.clone(), csrf::guard))
        // Outside the CSRF guard, so its refusals are audited too.
        .layer(middleware::from_fn_with_state(
            state.clone(),
            refusals::audit,
        ))
        .with_state(state.clone())
        .layer(middleware::from_fn(timeout_unless_stream))
        // Outside the timeout, so a timed-out request's 503 still releases its key.
        .layer(middleware::from_fn_with_state(
            state,
            idempotency::middleware,
        ))
        .layer(RequestBodyLimitLayer::new(BODY_LIMIT))
        // Around the body limit, whose 413 is plain text, and each route's plain 405.
        .layer(middleware::from_fn(error::bare_errors_as_problems))
        .layer(middleware::from_fn(error::log_internal))
        // A 5xx with a cause is logged by `log_internal` above; the others are expected answers
        // (`/readyz` says 503 until the first sync, a stale model 503), not errors to log.
        .layer(
            TraceLayer::new_for_http()
                .on_failure(DefaultOnFailure::new().level(tracing::Level::DEBUG)),
        )
        .layer(middleware::from_fn_with_state(state_for_host, host::check))
        .layer(middleware::from_fn(security_headers))
        .layer(middleware::from_fn_with_state(recorder, metrics::track))
}

/// Builds the state, starts the event hub, and serves until `shutdown` (`demo`: the demo's
/// controls, only under `leasehold demo`).
pub async fn run(
    engine: Engine,
    settings: &HttpSettings,
    listener: tokio::net::TcpListener,
    demo: Option<DemoControls>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let addr = listener.local_addr()?;
    let tls = settings.tls.as_ref().map(tls::server_config).transpose()?;
    let auth = Auth::new(&settings.auth, addr, Some(engine.client().clone())).await?;
    let hosts = host::AllowedHosts::new(&settings.allowed_hosts, addr)?;
    let state = AppState {
        engine: engine.clone(),
        auth,
        events: Hub::default(),
        tls: tls.is_some(),
        demo,
        hosts,
        refusals: refusals::Budget::default(),
    };
    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(state.events.clone().run(engine.clone()));
    let app = router(state);
    let server = match tls {
        Some(config) => {
            tracing::info!(%addr, "serving HTTPS");
            axum::serve(TlsListener::new(listener, config), app)
                .with_graceful_shutdown(shutdown)
                .into_future()
        }
        None => {
            tracing::info!(%addr, "serving HTTP");
            axum::serve(listener, app)
                .with_graceful_shutdown(shutdown)
                .into_future()
        }
    };
    tokio::select! {
        r = server => r?,
        Some(r) = tasks.join_next() => {
            r?;
            anyhow::bail!("an HTTP background task ended");
        }
    }
    Ok(())
}

async fn healthz() -> &'static str {
    "ok"
}

/// Ready once every watch has synced (models are built from the index on demand) and while no
/// cluster's model is stale (a watch down, or not proven current by a watch probe).
async fn readyz(State(state): State<AppState>) -> Response {
    let shared = state.engine.shared();
    if !shared.synced() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: watches syncing",
        )
            .into_response();
    }
    let stale = shared.read(|ix| ix.stale_clusters(jiff::Timestamp::now()));
    if stale.is_empty() {
        "ready".into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: stale model of {}", stale.join(", ")),
        )
            .into_response()
    }
}

async fn not_found(uri: Uri) -> ApiError {
    ApiError::NotFound(format!(
        "no such path: {} (the API's paths are listed in /openapi.json)",
        uri.path()
    ))
}

/// Bounds every request but the event stream (which lives as long as the client).
async fn timeout_unless_stream(req: Request, next: Next) -> Response {
    if req.uri().path() == "/api/v1/events" {
        return next.run(req).await;
    }
    match tokio::time::timeout(REQUEST_TIMEOUT, next.run(req)).await {
        Ok(res) => res,
        Err(_) => ApiError::Unavailable("the request timed out".into()).into_response(),
    }
}

/// The Content-Security-Policy of every response: only our own scripts, styles and
/// connections; no framing.
pub const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
    img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; \
    form-action 'self'; object-src 'none'";

/// The CSP of the Swagger UI pages (`/docs/…`): as [`CSP`], but the vendored Swagger UI
/// bundle sets inline styles, so it may (styles only; scripts stay `'self'`). Checked in
/// Chromium by `tests/it/browser.rs`.
pub const CSP_DOCS: &str = "default-src 'self'; script-src 'self'; \
    style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; \
    frame-ancestors 'none'; base-uri 'none'; form-action 'self'; object-src 'none'";

/// The viewport Swagger UI's page lacks: without it a phone lays `/docs` out as a desktop
/// page shrunk to fit.
const DOCS_VIEWPORT: &str =
    r#"<meta name="viewport" content="width=device-width, initial-scale=1">"#;

/// Largest Swagger UI page [`docs_viewport`] reads (its `index.html` is under 1 KiB).
const DOCS_PAGE_LIMIT: usize = 64 * 1024;

/// Around Swagger UI's routes: gives its page (`/docs/`, its `index.html`) the
/// [`DOCS_VIEWPORT`] it lacks, first in its `<head>`. Its assets pass untouched, and nothing
/// is loaded from elsewhere, so [`CSP_DOCS`] holds as before.
async fn docs_viewport(req: Request, next: Next) -> Response {
    let res = next.run(req).await;
    let html = res
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/html"));
    if !html
        || res.status() != StatusCode::OK
        || res.headers().contains_key(header::CONTENT_ENCODING)
    {
        return res;
    }
    let (mut parts, body) = res.into_parts();
    let html = match axum::body::to_bytes(body, DOCS_PAGE_LIMIT).await {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(e) => {
            return ApiError::Internal(format!("reading Swagger UI's page: {e}")).into_response();
        }
    };
    let html = match html.find("<head>") {
        Some(at) => {
            let (head, rest) = html.split_at(at + "<head>".len());
            format!("{head}\n    {DOCS_VIEWPORT}{rest}")
        }
        None => html,
    };
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(html))
}

async fn security_headers(req: Request, next: Next) -> Response {
    let docs = req.uri().path().starts_with("/docs");
    let mut res = next.run(req).await;
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(if docs { CSP_DOCS } else { CSP }),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    h.entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    res
}
