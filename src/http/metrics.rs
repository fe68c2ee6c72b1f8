//! `GET /metrics`: the engine's registry in the OpenMetrics text format, for Prometheus. Not
//! in the OpenAPI document and without authentication, as is the convention for scrape
//! endpoints (it shows counts per cluster, never target keys or member names). Also the
//! middleware timing every request by method, matched route template and status class.

use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::state::AppState;
use crate::metrics::{self, Metrics};

/// Sets the gauges from the latest models, then encodes every metric.
pub async fn scrape(State(state): State<AppState>) -> Response {
    let engine = &state.engine;
    let m = engine.metrics();
    for c in &engine.config().clusters {
        if let Ok(view) = engine.view(&c.name).await {
            let mut gauges = view.model.gauges();
            gauges.mass_lapse_members = engine
                .mass_lapse(&view)
                .map_or(0, |l| l.lapsed.len() + l.late.len());
            m.observe_cluster(&gauges);
        }
    }
    m.set_acting(*engine.acting().borrow());
    match m.encode() {
        Ok(body) => (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static(metrics::CONTENT_TYPE),
            )],
            body,
        )
            .into_response(),
        Err(e) => ApiError::Internal(format!("encoding metrics: {e}")).into_response(),
    }
}

/// Records how long each request took to its response head. Applied with `Router::layer`, it
/// runs after routing, so the matched route template is known.
pub async fn track(State(metrics): State<Metrics>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = req.method().clone();
    let route = req.extensions().get::<MatchedPath>().cloned();
    let res = next.run(req).await;
    metrics.http_request(
        &method,
        route.as_ref().map(MatchedPath::as_str),
        res.status(),
        started.elapsed(),
    );
    res
}
