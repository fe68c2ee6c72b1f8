//! The member's authority, offered to its app over HTTP (`leasehold agent --authority-listen`):
//! `GET /authority` answers when the member's authority to work ends unless it is renewed
//! meanwhile, so that an app can stay safe even when its agent stalls — a paused or starved
//! agent cannot tell it to stop, but the deadline it last gave passes all the same.
//!
//! Two ways to use it (`docs/protocol.md`, "Hooks"): the app polls it and stops all its work
//! once the last deadline it got has passed (no answer is no news: the deadline stands); or the
//! app container's liveness probe points at it, and the kubelet restarts the app when the agent
//! says it holds no authority or does not answer. Only this module knows the wire format; it
//! reads the agent's published deadline and nothing else. A managed app's report
//! (`agent::gnmic`, `GET /app`) is served beside it on the same address.

use std::future::Future;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use serde::Serialize;
use tokio::sync::watch;

/// The answer of `GET /authority`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct AuthorityBody {
    /// The member may work now.
    pub authority: bool,
    /// When its authority ends unless renewed: milliseconds since the Unix epoch, by this
    /// machine's clock (`null` without authority).
    pub deadline_unix_ms: Option<i64>,
    /// What is left of it, in ms, when the answer was made (`null` without authority).
    pub remaining_ms: Option<i64>,
}

/// The answer at `now_unix_ms` for the published deadline: 200 with authority, 503 without.
pub fn answer(deadline_unix_ms: Option<i64>, now_unix_ms: i64) -> (StatusCode, AuthorityBody) {
    let remaining_ms = deadline_unix_ms.map(|d| d - now_unix_ms).filter(|r| *r > 0);
    let body = AuthorityBody {
        authority: remaining_ms.is_some(),
        deadline_unix_ms: remaining_ms.and(deadline_unix_ms),
        remaining_ms,
    };
    let status = if body.authority {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, body)
}

/// The router: `GET /authority` from `authority` (see [`crate::agent::Agent::authority`]).
pub fn router(authority: watch::Receiver<Option<i64>>) -> axum::Router {
    axum::Router::new()
        .route(
            "/authority",
            get(
                |State(rx): State<watch::Receiver<Option<i64>>>| async move {
                    let deadline = *rx.borrow();
                    let (status, body) = answer(deadline, jiff::Timestamp::now().as_millisecond());
                    (status, Json(body))
                },
            ),
        )
        .with_state(authority)
}

/// Serves `router` — an endpoint the agent offers its app or its collector ([`router`],
/// `gnmic::router`, `scrape::sd::router`) — on `listener` until `shutdown`.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authority_is_what_is_left_of_the_deadline() {
        let (status, body) = answer(Some(10_000), 9_400);
        assert_eq!(status, StatusCode::OK);
        assert_eq!(
            body,
            AuthorityBody {
                authority: true,
                deadline_unix_ms: Some(10_000),
                remaining_ms: Some(600),
            }
        );
        // Passed, or none: no authority, and a failing probe.
        for (deadline, now) in [(Some(10_000), 10_000), (Some(10_000), 12_000), (None, 0)] {
            let (status, body) = answer(deadline, now);
            assert_eq!(
                status,
                StatusCode::SERVICE_UNAVAILABLE,
                "{deadline:?} {now}"
            );
            assert!(
                !body.authority && body.deadline_unix_ms.is_none() && body.remaining_ms.is_none()
            );
        }
    }
}
