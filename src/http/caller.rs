//! Who is calling: the [`Caller`] extractor reads a bearer token (scripts, kubectl-style
//! clients) and asks `auth` who it belongs to, else the browser's session cookie (see
//! `ui::login`), else, in mode `none` (loopback only), takes the anonymous principal. Handlers
//! then ask [`Caller::require`] for the action they perform. Tokens, session ids and CSRF
//! tokens are never logged. Cross-site requests and CSRF tokens are checked before any
//! handler runs, by `csrf`.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, header};

use super::auth::{Action, Principal, Session, SessionId};
use super::error::ApiError;
use super::state::AppState;

/// The authenticated caller of a request.
#[derive(Debug, Clone)]
pub struct Caller {
    /// Who.
    pub principal: Principal,
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        if let Some(value) = parts.headers.get(header::AUTHORIZATION) {
            let token = value
                .to_str()
                .ok()
                .and_then(|v| v.strip_prefix("Bearer "))
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .ok_or(ApiError::Unauthenticated)?;
            return match state.auth.authenticate(token).await? {
                Some(principal) => Ok(Caller { principal }),
                None => Err(ApiError::Unauthenticated),
            };
        }
        if let Some(session) = session(&parts.headers, state) {
            return Ok(Caller {
                principal: session.principal,
            });
        }
        match state.auth.anonymous() {
            Some(principal) => Ok(Caller { principal }),
            None => Err(ApiError::Unauthenticated),
        }
    }
}

/// The name of the browser session cookie.
pub const SESSION_COOKIE: &str = "leasehold_session";

/// The value of cookie `name` in the request's `Cookie` headers, if any.
pub fn cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim())
}

/// The live session the request's session cookie names, if any.
pub fn session(headers: &HeaderMap, state: &AppState) -> Option<Session> {
    let id = cookie(headers, SESSION_COOKIE)?;
    state.auth.sessions().get(&SessionId::from_presented(id))
}

impl Caller {
    /// Fails with 403 unless the caller may do `action` (on `cluster`, when it is about one).
    pub async fn require(
        &self,
        state: &AppState,
        action: Action,
        cluster: Option<&str>,
    ) -> Result<(), ApiError> {
        if state
            .auth
            .authorize(&self.principal, action, cluster)
            .await?
        {
            return Ok(());
        }
        let on = cluster
            .map(|c| format!(" on cluster {c:?}"))
            .unwrap_or_default();
        Err(ApiError::Denied {
            actor: self.principal.user.clone(),
            detail: format!(
                "{:?} may not {}{on}",
                self.principal.user,
                action.describe()
            ),
        })
    }

    /// The name recorded as the actor of what this caller does.
    pub fn name(&self) -> &str {
        &self.principal.user
    }
}
