//! Demo-only controls (`leasehold demo`): add a member, stop one gracefully, crash one, so a
//! visitor sees failover, rebalance and removal. The HTTP side only sends a [`DemoAction`] to
//! the demo's own task and waits for its answer; nothing outside the demo creates
//! [`DemoControls`], and the routes ([`router`]) are only mounted when the state has them, so
//! `leasehold serve` has neither. They are not part of `/api/v1` nor of the OpenAPI document.
//! CSRF for the dashboard's form posts is checked by middleware, not here.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use tokio::sync::{mpsc, oneshot};

use super::api::audit;
use super::auth::Action;
use super::caller::Caller;
use super::error::ApiError;
use super::state::AppState;

/// What a visitor may do to the demo's simulated cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DemoAction {
    /// Start one more member pod with its agent.
    AddMember {
        /// Cluster.
        cluster: String,
    },
    /// Stop a member's agent gracefully (it releases its targets), then delete its pod.
    StopMember {
        /// Cluster.
        cluster: String,
        /// Member (pod name).
        instance: String,
    },
    /// Kill a member's agent without releasing anything; its pod turns unready (a crash).
    CrashMember {
        /// Cluster.
        cluster: String,
        /// Member (pod name).
        instance: String,
    },
}

impl DemoAction {
    /// The cluster it concerns.
    pub fn cluster(&self) -> &str {
        match self {
            DemoAction::AddMember { cluster }
            | DemoAction::StopMember { cluster, .. }
            | DemoAction::CrashMember { cluster, .. } => cluster,
        }
    }

    /// What it is, for the audit entry.
    pub fn describe(&self) -> String {
        match self {
            DemoAction::AddMember { .. } => "demo: add a member".into(),
            DemoAction::StopMember { instance, .. } => format!("demo: stop member {instance}"),
            DemoAction::CrashMember { instance, .. } => format!("demo: crash member {instance}"),
        }
    }
}

/// One request to the demo task, with where to send its outcome (a message for people).
#[derive(Debug)]
pub struct DemoRequest {
    /// What to do.
    pub action: DemoAction,
    /// The outcome: what was done, or why not.
    pub reply: oneshot::Sender<Result<String, String>>,
}

/// The HTTP side's handle on the demo task.
#[derive(Debug, Clone)]
pub struct DemoControls {
    tx: mpsc::Sender<DemoRequest>,
}

impl DemoControls {
    /// A handle and the receiver the demo task serves.
    pub fn channel() -> (DemoControls, mpsc::Receiver<DemoRequest>) {
        let (tx, rx) = mpsc::channel(16);
        (DemoControls { tx }, rx)
    }

    /// Asks the demo task to do `action` and waits for its answer.
    pub async fn send(&self, action: DemoAction) -> Result<String, ApiError> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(DemoRequest { action, reply })
            .await
            .map_err(|_| ApiError::Unavailable("the demo has stopped".into()))?;
        answer
            .await
            .map_err(|_| ApiError::Unavailable("the demo has stopped".into()))?
            .map_err(ApiError::BadRequest)
    }
}

/// The demo-only routes (mounted by `http::router` only when the state has [`DemoControls`]).
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/demo/clusters/{cluster}/members", post(add_member))
        .route(
            "/demo/clusters/{cluster}/members/{instance}/stop",
            post(stop_member),
        )
        .route(
            "/demo/clusters/{cluster}/members/{instance}/crash",
            post(crash_member),
        )
}

/// Starts one more member (the next ordinal's pod and its agent).
async fn add_member(
    State(state): State<AppState>,
    caller: Caller,
    Path(cluster): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    control(&state, &caller, &headers, DemoAction::AddMember { cluster }).await
}

/// Stops a member gracefully (it releases its targets), then deletes its pod.
async fn stop_member(
    State(state): State<AppState>,
    caller: Caller,
    Path((cluster, instance)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let action = DemoAction::StopMember { cluster, instance };
    control(&state, &caller, &headers, action).await
}

/// Crashes a member: its agent dies holding its targets, its pod fails.
async fn crash_member(
    State(state): State<AppState>,
    caller: Caller,
    Path((cluster, instance)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let action = DemoAction::CrashMember { cluster, instance };
    control(&state, &caller, &headers, action).await
}

/// Checks the caller may change the cluster's members (the operator permission of removing an
/// instance), has the demo task do `action`, audits it, and answers `{"message": …}`, or for a
/// dashboard form post (whose `csrf` field is the middleware's business) `303 See Other` to the
/// cluster's page.
async fn control(
    state: &AppState,
    caller: &Caller,
    headers: &HeaderMap,
    action: DemoAction,
) -> Result<Response, ApiError> {
    let cluster = action.cluster().to_owned();
    caller
        .require(state, Action::RemoveInstance, Some(&cluster))
        .await?;
    let demo = state
        .demo
        .as_ref()
        .ok_or_else(|| ApiError::NotFound("no such path".into()))?;
    let what = action.describe();
    let result = demo.send(action).await;
    audit(
        state,
        &cluster,
        caller,
        &what,
        result.as_ref().map(|_| None),
    )
    .await;
    let message = result?;
    if !is_form(headers) {
        return Ok(Json(serde_json::json!({ "message": message })).into_response());
    }
    let location = HeaderValue::try_from(format!("/clusters/{cluster}"))
        .map_err(|_| ApiError::BadRequest(format!("cluster name {cluster:?} is not a path")))?;
    Ok((StatusCode::SEE_OTHER, [(header::LOCATION, location)]).into_response())
}

/// Whether the request is an HTML form post.
fn is_form(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| {
            v.trim()
                .eq_ignore_ascii_case("application/x-www-form-urlencoded")
        })
}
