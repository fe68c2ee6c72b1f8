//! The dashboard: server-rendered pages (askama templates in `templates/`, one struct per
//! page next to its handler) over the same model, store and [`super::actions`] as the API,
//! updated live by `static/app.js`, which follows the SSE feed and swaps the page's
//! `data-live` regions when an event concerns them. Login and logout (`login`) hold
//! server-side sessions; every form carries the session's CSRF token, checked by
//! [`super::csrf`] before a handler runs; a form's result is a 303 to the page that shows it.
//!
//! The assets in `static/` are compiled into the binary (`assets`), so the one executable
//! serves the whole dashboard wherever it runs (no asset directory to ship or mount, a
//! read-only root filesystem is fine); nothing is loaded from anywhere else.

mod assets;
mod charts;
mod clusters;
mod login;
mod operations;
mod page;
mod plan;
mod recent;
mod story;
mod targets;

use axum::Router;
use axum::routing::{get, post};

use super::state::AppState;

/// The dashboard's routes. The cluster page's kept history (`recent`) is made here, so each
/// router built (each served app, each test's) has its own.
pub fn router() -> Router<AppState> {
    let recent = recent::Recent::default();
    Router::new()
        .route("/", get(clusters::overview))
        .route("/login", get(login::form).post(login::login))
        .route("/logout", post(login::logout))
        .route(
            "/clusters/{cluster}",
            get(move |state, viewer, path, query| {
                clusters::cluster(state, recent.clone(), viewer, path, query)
            }),
        )
        .route("/clusters/{cluster}/instances", get(clusters::instances))
        .route(
            "/clusters/{cluster}/instances/{instance}",
            get(clusters::instance),
        )
        .route(
            "/clusters/{cluster}/instances/{instance}/remove",
            get(clusters::remove_preview).post(clusters::remove),
        )
        .route(
            "/clusters/{cluster}/instances/{instance}/uncordon",
            get(clusters::uncordon_preview).post(clusters::uncordon),
        )
        .route("/clusters/{cluster}/targets", get(targets::list))
        .route("/clusters/{cluster}/targets/{target}", get(targets::one))
        .route(
            "/clusters/{cluster}/rebalance",
            get(operations::rebalance_preview).post(operations::rebalance),
        )
        .route(
            "/clusters/{cluster}/automation",
            post(operations::automation),
        )
        .route("/operations", get(operations::list))
        .route("/operations/{id}", get(operations::one))
        .route("/operations/{id}/approve", post(operations::approve))
        .route("/operations/{id}/cancel", post(operations::cancel))
        .route("/history", get(story::page::history))
        .route("/clusters/{cluster}/as-of", get(story::as_of::as_of))
        .route("/static/{file}", get(assets::serve))
}

/// A value as one URL path segment.
fn segment(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// The dashboard page of operation `id`.
fn operation_href(id: &str) -> String {
    format!("/operations/{}", segment(id))
}
