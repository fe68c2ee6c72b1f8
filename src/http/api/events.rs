//! `GET /events`: the live feed as Server-Sent Events, resumable with `Last-Event-ID`.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures::Stream;
use futures::StreamExt as _;
use tokio_stream::wrappers::BroadcastStream;
use tokio_stream::wrappers::errors::BroadcastStreamRecvError;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::super::auth::Action;
use super::super::caller::Caller;
use super::super::error::{ApiError, Problem};
use super::super::events::Event;
use super::super::state::AppState;
use super::ApiQuery;

/// Interval of SSE comments that keep idle connections (and proxies) open.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

pub(super) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(events))
}

/// Where a new connection starts.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// Resume after this event id, as `Last-Event-ID` does (the header wins): a dashboard page
    /// passes the id it was rendered at, so nothing between its render and its connection is
    /// missed. At most the largest int64, the document's format for it (ids never get near).
    #[param(minimum = 0, maximum = 9223372036854775807_i64)]
    pub after: Option<u64>,
}

/// The live feed: `ownership`, `instance`, `leader`, `operation`, `targets` and `resync`
/// events, each with an `id:`; reconnect with `Last-Event-ID` (or `?after=`) to resume.
#[utoipa::path(get, path = "/events", tag = "events",
    params(("Last-Event-ID" = Option<String>, Header, description = "Resume after this event"), EventsQuery),
    responses((status = 200, description = "An SSE stream of events", content_type = "text/event-stream", body = Event),
        (status = 401, body = Problem, content_type = "application/problem+json")))]
async fn events(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    ApiQuery(q): ApiQuery<EventsQuery>,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, ApiError> {
    caller.require(&state, Action::Read, None).await?;
    let last = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .or(q.after);
    let sub = state.events.subscribe(last);
    let backlog = futures::stream::iter(sub.backlog);
    let live = BroadcastStream::new(sub.live).map(|r| match r {
        Ok(e) => e,
        Err(BroadcastStreamRecvError::Lagged(_)) => (0, std::sync::Arc::new(Event::Resync)),
    });
    let stream = backlog.chain(live).map(|(id, e)| {
        let data = serde_json::to_string(&*e).unwrap_or_default();
        let mut ev = SseEvent::default().event(e.name()).data(data);
        if id > 0 {
            ev = ev.id(id.to_string());
        }
        Ok(ev)
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(KEEP_ALIVE)))
}
