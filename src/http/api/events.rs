//! The history as it happens and as it was: `GET /events`, the live feed as Server-Sent
//! Events, resumable with `Last-Event-ID`; and `GET /clusters/{cluster}/as-of`, a cluster as
//! its history recorded it at one moment (each target's holder then, each instance's last
//! event, the operations under way), reconstructed from the history store and saying what it
//! cannot know.

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
use super::{ApiPath, ApiQuery};
use crate::model::{Cause, InstanceEventKind};
use crate::store::HistoryEntry;

/// Interval of SSE comments that keep idle connections (and proxies) open.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

pub(super) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(events))
        .routes(routes!(as_of))
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

/// The moment asked for.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AsOfQuery {
    /// The moment: an RFC 3339 time with its offset (`2026-12-07T02:43:00Z`).
    #[param(required = true, format = DateTime)]
    pub at: Option<String>,
}

/// What history recorded of a target's holder at the moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AsOfState {
    /// Its last change at or before the moment gave it a holder (`holder`). Whether the holder
    /// was working on it then is not recorded.
    Held,
    /// Its last change at or before the moment left it with nobody.
    Released,
    /// No change of it is recorded at or before the moment: it had not moved since history
    /// began, or retention pruned its changes.
    NotRecorded,
}

/// A target at the moment.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct TargetAsOf {
    pub target: String,
    pub state: AsOfState,
    /// Its holder then (`held` only).
    pub holder: Option<String>,
    /// When its last change before the moment was seen (unix ms).
    pub since_ms: Option<i64>,
    /// Why it changed hands then.
    pub cause: Option<Cause>,
    /// The operation that moved it then, if any.
    pub operation: Option<String>,
}

/// An instance at the moment, from its last events then.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct InstanceAsOf {
    pub instance: String,
    /// Its last event of `joined`, `ready`, `not_ready`, `left`, `removed` at or before the
    /// moment.
    pub last_event: Option<InstanceEventKind>,
    /// When that was seen (unix ms).
    pub last_event_ms: Option<i64>,
    /// Cordoned then.
    pub cordoned: bool,
    /// The cluster's elected member leader then.
    pub leader: bool,
    /// How many targets it held then (`held` targets naming it).
    pub holds: u64,
}

/// An operation with a step at or before the moment.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct OperationAsOf {
    pub id: String,
    /// Its last step then: `created`, `phase`, or the state it entered (`pending`, `running`,
    /// `succeeded`, `failed`, `cancelled`).
    pub step: String,
    /// When that step was seen (unix ms).
    pub since_ms: i64,
    /// Whether it had ended by then.
    pub ended: bool,
}

/// A cluster as its history recorded it at one moment.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct ClusterAsOf {
    pub cluster: String,
    /// The moment (RFC 3339, UTC).
    pub at: String,
    /// The moment (unix ms).
    pub at_ms: i64,
    /// When the oldest history row of the cluster still kept was seen (unix ms); before it
    /// nothing is known. `null`: the cluster has no history.
    pub history_from_ms: Option<i64>,
    /// What this cannot know, in plain words.
    pub limits: String,
    /// Every target the cluster has now and every one with a change recorded before the
    /// moment, by key.
    pub targets: Vec<TargetAsOf>,
    /// Every instance with an event recorded at or before the moment, by name.
    pub instances: Vec<InstanceAsOf>,
    /// Operations under way at the moment (with a step recorded then, not yet ended).
    pub operations: Vec<OperationAsOf>,
}

/// What a view reconstructed from history cannot know.
pub const AS_OF_LIMITS: &str = "Reconstructed from the history: each target's holder is the \
    one its last ownership change recorded at or before the moment left it with. Whether a \
    holder was working on a target then (renewals, expiry) is not recorded, so these are not \
    the live states; a target with no change recorded before the moment (it had not moved since \
    history began, or retention pruned its changes) is not_recorded.";

/// Parses an RFC 3339 time (`at`) into unix ms, or says what it takes.
fn moment(at: Option<&str>) -> Result<i64, ApiError> {
    let at = at.ok_or_else(|| {
        ApiError::BadRequest(
            "at: required, an RFC 3339 time with its offset, such as 2026-12-07T02:43:00Z".into(),
        )
    })?;
    at.trim()
        .parse::<jiff::Timestamp>()
        .map(|t| t.as_millisecond())
        .map_err(|_| {
            ApiError::BadRequest(format!(
                "at: an RFC 3339 time with its offset, such as 2026-12-07T02:43:00Z, not {:?}",
                at.chars().take(64).collect::<String>()
            ))
        })
}

/// The cluster as its history recorded it at a moment.
///
/// Each target's holder at `at` (the last ownership change recorded at or before it; every
/// target the cluster has now and every one history names), each instance's last event,
/// cordon and leadership then, and the operations under way. Reconstructed from history:
/// `limits` says what it cannot know (liveness is not recorded; history pruned or not yet
/// begun).
#[utoipa::path(get, path = "/clusters/{cluster}/as-of", tag = "history",
    params(("cluster" = String, Path, description = "Cluster name"), AsOfQuery),
    responses((status = 200, body = ClusterAsOf),
        (status = 400, description = "`at` missing or not an RFC 3339 time", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such cluster", body = Problem, content_type = "application/problem+json")))]
async fn as_of(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(cluster): ApiPath<String>,
    ApiQuery(q): ApiQuery<AsOfQuery>,
) -> Result<axum::Json<ClusterAsOf>, ApiError> {
    caller.require(&state, Action::Read, Some(&cluster)).await?;
    let at_ms = moment(q.at.as_deref())?;
    let snap = super::clusters::snapshot(&state, &cluster).await?;
    let past = state.engine.store().as_of(&cluster, at_ms).await?;
    let targets: Vec<TargetAsOf> = past
        .targets_with(snap.model.targets.iter().map(|t| &*t.key))
        .into_iter()
        .map(|t| {
            let state = match t.state() {
                "held" => AsOfState::Held,
                "released" => AsOfState::Released,
                _ => AsOfState::NotRecorded,
            };
            let last: Option<&HistoryEntry> = t.last.as_ref();
            TargetAsOf {
                holder: t.holder().map(str::to_owned),
                since_ms: last.map(|e| e.at_ms),
                cause: last.and_then(|e| e.cause),
                operation: last.and_then(|e| e.operation.clone()),
                target: t.target,
                state,
            }
        })
        .collect();
    let instances = past
        .instances()
        .into_iter()
        .map(|i| InstanceAsOf {
            holds: targets
                .iter()
                .filter(|t| t.holder.as_deref() == Some(i.instance.as_str()))
                .count() as u64,
            last_event: i.presence.map(|(k, _)| k),
            last_event_ms: i.presence.map(|(_, at)| at),
            cordoned: i.cordoned,
            leader: i.leader,
            instance: i.instance,
        })
        .collect();
    let operations = past
        .operations
        .iter()
        .filter_map(|e| {
            let step = e.event.clone()?;
            let ended = step
                .parse::<crate::model::OperationState>()
                .is_ok_and(|s| s.is_final());
            Some(OperationAsOf {
                id: e.operation.clone()?,
                step,
                since_ms: e.at_ms,
                ended,
            })
        })
        .filter(|o| !o.ended)
        .collect();
    Ok(axum::Json(ClusterAsOf {
        cluster,
        at: jiff::Timestamp::from_millisecond(at_ms)
            .map(|t| t.to_string())
            .unwrap_or_default(),
        at_ms,
        history_from_ms: past.kept_from_ms,
        limits: AS_OF_LIMITS.into(),
        targets,
        instances,
        operations,
    }))
}
