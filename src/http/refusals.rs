//! Refused mutating requests are audited too: every request other than GET, HEAD and OPTIONS
//! answered 401 (no or an unknown credential) or 403 (not allowed, or refused as cross-site) is
//! recorded in the history as an `audit` entry — who (the user when known, else
//! `unauthenticated`), what (`POST /api/v1/clusters/c/rebalance`), and why. Bounded: at most
//! [`PER_MINUTE`] such entries a minute per replica, so a flood of refused requests cannot fill
//! the history; what is over is counted and recorded as one entry when the next minute opens.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;

use super::state::AppState;
use crate::store::now_ms;

/// Refused requests audited a minute, at most, per replica.
pub const PER_MINUTE: u32 = 60;

const WINDOW: Duration = Duration::from_secs(60);

/// Why a request was refused, as its error response says: set on 401 and 403 answers.
#[derive(Debug, Clone)]
pub struct Refusal {
    /// The caller, when it was known (an authenticated user not allowed to do this).
    pub actor: Option<String>,
    /// The problem's detail (never a credential).
    pub detail: String,
}

/// The per-minute budget of audited refusals (cheap to clone; clones share it).
#[derive(Debug, Clone)]
pub struct Budget(Arc<Mutex<Window>>);

#[derive(Debug)]
struct Window {
    opened: Instant,
    used: u32,
    /// Refusals over the budget since the last summary.
    dropped: u64,
}

impl Default for Budget {
    fn default() -> Self {
        Budget(Arc::new(Mutex::new(Window {
            opened: Instant::now(),
            used: 0,
            dropped: 0,
        })))
    }
}

impl Budget {
    /// Whether one more refusal may be recorded now, and how many were dropped before this
    /// minute (to record as a summary first).
    fn take(&self, now: Instant) -> (bool, u64) {
        let mut w = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let mut dropped = 0;
        if now.duration_since(w.opened) >= WINDOW {
            w.opened = now;
            w.used = 0;
            dropped = std::mem::take(&mut w.dropped);
        }
        if w.used < PER_MINUTE {
            w.used += 1;
            (true, dropped)
        } else {
            w.dropped += 1;
            (false, dropped)
        }
    }
}

/// The cluster a path names (`/api/v1/clusters/{c}/…`, `/clusters/{c}/…`), if any.
fn cluster_of(path: &str) -> &str {
    let mut parts = path.split('/').skip_while(|p| *p != "clusters").skip(1);
    parts.next().unwrap_or("")
}

/// Records refused mutating requests (see the module header).
pub async fn audit(State(state): State<AppState>, req: Request, next: Next) -> Response {
    // Reads are never audited: they pass through without any work here.
    if matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS) {
        return next.run(req).await;
    }
    let what = format!("{} {}", req.method(), req.uri().path());
    let res = next.run(req).await;
    let Some(refusal) = res.extensions().get::<Refusal>().cloned() else {
        return res;
    };
    let (record, dropped) = state.refusals.take(Instant::now());
    let store = state.engine.store();
    let at = now_ms();
    if dropped > 0 {
        let why = format!(
            "{dropped} more refused requests were not audited (over {PER_MINUTE} a minute)"
        );
        if let Err(error) = store
            .record_audit("", "-", "refused requests", &why, None, at)
            .await
        {
            tracing::error!(%error, "could not record the audit entry");
        }
    }
    if record {
        let actor = refusal.actor.as_deref().unwrap_or("unauthenticated");
        let outcome = format!("refused ({}): {}", res.status().as_u16(), refusal.detail);
        let cluster = cluster_of(&what);
        if let Err(error) = store
            .record_audit(cluster, actor, &what, &outcome, None, at)
            .await
        {
            tracing::error!(%error, what, "could not record the audit entry");
        }
    }
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_their_cluster() {
        assert_eq!(cluster_of("/api/v1/clusters/c/rebalance"), "c");
        assert_eq!(cluster_of("/clusters/db/instances/x/remove"), "db");
        assert_eq!(cluster_of("/api/v1/operations/o-1/cancel"), "");
    }

    #[test]
    fn the_budget_is_per_minute_and_counts_what_it_drops() {
        let b = Budget::default();
        let t0 = Instant::now();
        for _ in 0..PER_MINUTE {
            assert_eq!(b.take(t0), (true, 0));
        }
        assert_eq!(b.take(t0), (false, 0));
        assert_eq!(b.take(t0 + Duration::from_secs(59)), (false, 0));
        assert_eq!(b.take(t0 + Duration::from_secs(61)), (true, 2));
        assert_eq!(b.take(t0 + Duration::from_secs(62)), (true, 0));
    }
}
