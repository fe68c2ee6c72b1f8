//! Logging in and out. The login form takes a bearer token (a Kubernetes token in mode
//! `kubernetes`, a token-file token in mode `token`), checks it once and starts a server-side
//! session: the cookie holds only a random id (HttpOnly, SameSite=Strict, `Secure` under TLS,
//! `Max-Age` the session's absolute lifetime). The token itself is neither kept nor logged.
//! In mode `none` there is nothing to log in to.

use askama::Template;
use axum::Form;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::super::auth::SessionId;
use super::super::caller::{SESSION_COOKIE, cookie};
use super::super::error::ApiError;
use super::super::state::AppState;
use super::page::{UiError, render, see_other, span};
use crate::config::http::Mode;

#[derive(Template)]
#[template(path = "login.html")]
struct LoginPage {
    next: String,
    error: Option<String>,
    hint: &'static str,
    ttl: String,
}

/// Where to go after logging in.
#[derive(Debug, Deserialize)]
pub struct Next {
    next: Option<String>,
}

/// The login form's fields.
#[derive(Deserialize)]
pub struct LoginForm {
    token: String,
    #[serde(default)]
    next: String,
}

/// Only a local path: `next` must not send the browser to another site.
fn local(next: Option<&str>) -> String {
    match next {
        Some(n) if n.starts_with('/') && !n.starts_with("//") && !n.contains('\\') => n.into(),
        _ => "/".into(),
    }
}

fn page(state: &AppState, next: String, error: Option<String>) -> LoginPage {
    LoginPage {
        next,
        error,
        hint: match state.auth.mode() {
            Mode::Kubernetes => "Kubernetes bearer token (e.g. kubectl create token NAME)",
            _ => "Access token",
        },
        ttl: span(state.auth.sessions().ttl().as_millis() as i64),
    }
}

/// The login form.
pub async fn form(State(state): State<AppState>, Query(q): Query<Next>) -> Response {
    let next = local(q.next.as_deref());
    if state.auth.mode() == Mode::None {
        return see_other(&next);
    }
    render(&page(&state, next, None)).unwrap_or_else(IntoResponse::into_response)
}

/// Checks the token and starts a session.
pub async fn login(
    State(state): State<AppState>,
    Form(f): Form<LoginForm>,
) -> Result<Response, UiError> {
    let next = local(Some(&f.next));
    if state.auth.mode() == Mode::None {
        return Ok(see_other(&next));
    }
    let principal = match state.auth.authenticate(f.token.trim()).await {
        Ok(Some(p)) => p,
        Ok(None) => {
            let mut res = render(&page(&state, next, Some("That token is not valid.".into())))?;
            *res.status_mut() = StatusCode::UNAUTHORIZED;
            return Ok(res);
        }
        Err(e) => return Err(UiError(ApiError::from(e))),
    };
    tracing::info!(user = %principal.user, "dashboard login");
    let (id, _csrf) = state
        .auth
        .sessions()
        .create(principal)
        .map_err(ApiError::from)?;
    let ttl = state.auth.sessions().ttl().as_secs();
    let secure = if state.tls { "; Secure" } else { "" };
    let cookie = format!(
        "{SESSION_COOKIE}={}; Path=/; HttpOnly; SameSite=Strict; Max-Age={ttl}{secure}",
        id.expose()
    );
    let mut res = see_other(&next);
    res.headers_mut().insert(
        header::SET_COOKIE,
        cookie
            .parse()
            .map_err(|_| ApiError::Internal("a session cookie that is not a header".into()))?,
    );
    Ok(res)
}

/// Ends the session (the CSRF guard has checked the form's token) and clears the cookie.
pub async fn logout(State(state): State<AppState>, headers: HeaderMap) -> Response {
    if let Some(id) = cookie(&headers, SESSION_COOKIE) {
        state.auth.sessions().remove(&SessionId::from_presented(id));
    }
    let secure = if state.tls { "; Secure" } else { "" };
    let mut res = see_other("/login");
    if let Ok(v) =
        format!("{SESSION_COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0{secure}").parse()
    {
        res.headers_mut().insert(header::SET_COOKIE, v);
    }
    res
}

#[cfg(test)]
mod tests {
    use super::local;

    #[test]
    fn next_stays_on_this_site() {
        assert_eq!(local(Some("/clusters/a?x=1")), "/clusters/a?x=1");
        assert_eq!(local(Some("//evil.example/")), "/");
        assert_eq!(local(Some("https://evil.example/")), "/");
        assert_eq!(local(Some("/\\evil.example")), "/");
        assert_eq!(local(None), "/");
    }
}
