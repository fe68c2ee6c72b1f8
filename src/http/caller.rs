//! Who is calling: the [`Caller`] extractor reads a bearer token (scripts, kubectl-style
//! clients) and asks `auth` who it belongs to; in mode `none` (loopback only) everyone is the
//! anonymous principal. Handlers then ask [`Caller::require`] for the action they perform.
//! Tokens are never logged.

use axum::extract::FromRequestParts;
use axum::http::header;
use axum::http::request::Parts;

use super::auth::{Action, Principal};
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
        match state.auth.anonymous() {
            Some(principal) => Ok(Caller { principal }),
            None => Err(ApiError::Unauthenticated),
        }
    }
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
        Err(ApiError::Forbidden(format!(
            "{:?} may not {}{on}",
            self.principal.user,
            action.describe()
        )))
    }

    /// The name recorded as the actor of what this caller does.
    pub fn name(&self) -> &str {
        &self.principal.user
    }
}
