//! Cross-site request forgery defence, before any handler runs, for every state-changing
//! request (any method but GET, HEAD and OPTIONS). A request with an `Authorization` header
//! passes: browsers never attach one on their own, so it was not forged. Every other request
//! must
//!
//! 1. not come from another site: `Sec-Fetch-Site`, which every current browser sends, must be
//!    `same-origin` or `none` when present; without it, `Origin`, when present, must name this
//!    server (its host and port equal `Host`) — this also guards mode `none` and the login
//!    form, which have no session yet;
//! 2. when it carries a live session cookie, present that session's CSRF token: the
//!    `X-CSRF-Token` header (scripts) or the `csrf` field of a form body (the dashboard's
//!    forms). Session cookies are also `SameSite=Strict`; the token is the second lock.
//!
//! Anything else is refused with 403 `urn:leasehold:problem:csrf`. Tokens are never logged.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::BODY_LIMIT;
use super::caller::session;
use super::error::ApiError;
use super::state::AppState;

/// The header scripts send the CSRF token in.
pub const CSRF_HEADER: &str = "x-csrf-token";
/// The form field the dashboard's forms send it in.
pub const CSRF_FIELD: &str = "csrf";

/// The middleware: see the module header.
pub async fn guard(State(state): State<AppState>, req: Request, next: Next) -> Response {
    if matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS)
        || req.headers().contains_key(header::AUTHORIZATION)
    {
        return next.run(req).await;
    }
    if let Err(why) = same_site(req.headers()) {
        return ApiError::Csrf(why.into()).into_response();
    }
    let Some(session) = session(req.headers(), &state) else {
        return next.run(req).await;
    };
    if let Some(token) = req.headers().get(CSRF_HEADER) {
        return match token.to_str() {
            Ok(t) if session.csrf_matches(t) => next.run(req).await,
            _ => ApiError::Csrf("the CSRF token does not match the session".into()).into_response(),
        };
    }
    if !is_form(req.headers()) {
        return ApiError::Csrf(format!(
            "a request with a session cookie needs the {CSRF_HEADER} header"
        ))
        .into_response();
    }
    let (parts, body) = req.into_parts();
    let bytes = match axum::body::to_bytes(body, BODY_LIMIT).await {
        Ok(b) => b,
        Err(_) => {
            return ApiError::BadRequest("the form body is too large or unreadable".into())
                .into_response();
        }
    };
    let presented = form_urlencoded::parse(&bytes)
        .find(|(k, _)| k == CSRF_FIELD)
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default();
    if !session.csrf_matches(&presented) {
        return ApiError::Csrf(
            "the form's CSRF token does not match the session (reload the page)".into(),
        )
        .into_response();
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// Whether the request says it comes from this server's own pages (or from no browser).
/// `Sec-Fetch-Site` is set by the browser and cannot be forged by a page, so when present it
/// decides; older browsers send only `Origin`, which must then name this server.
fn same_site(headers: &HeaderMap) -> Result<(), &'static str> {
    if let Some(site) = headers.get("sec-fetch-site") {
        return if matches!(site.as_bytes(), b"same-origin" | b"none") {
            Ok(())
        } else {
            Err("a state-changing request from another site")
        };
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
        let origin_host = origin
            .to_str()
            .ok()
            .and_then(|o| o.split_once("://"))
            .map(|(_, rest)| rest.trim_end_matches('/'));
        if origin_host.is_none() || origin_host != host {
            return Err("a state-changing request whose Origin is not this server");
        }
    }
    Ok(())
}

fn is_form(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn refuses_other_sites_and_accepts_this_one_and_non_browsers() {
        assert!(same_site(&headers(&[])).is_ok());
        assert!(same_site(&headers(&[("sec-fetch-site", "same-origin")])).is_ok());
        assert!(same_site(&headers(&[("sec-fetch-site", "none")])).is_ok());
        assert!(same_site(&headers(&[("sec-fetch-site", "cross-site")])).is_err());
        assert!(same_site(&headers(&[("sec-fetch-site", "same-site")])).is_err());
        let own = [
            ("origin", "http://127.0.0.1:8080"),
            ("host", "127.0.0.1:8080"),
        ];
        assert!(same_site(&headers(&own)).is_ok());
        let other = [
            ("origin", "http://evil.example"),
            ("host", "127.0.0.1:8080"),
        ];
        assert!(same_site(&headers(&other)).is_err());
        let port = [
            ("origin", "http://127.0.0.1:9999"),
            ("host", "127.0.0.1:8080"),
        ];
        assert!(same_site(&headers(&port)).is_err());
        assert!(same_site(&headers(&[("origin", "null"), ("host", "h")])).is_err());
        // The browser's own word wins over an Origin it blanked (`null`).
        let nulled = [
            ("sec-fetch-site", "same-origin"),
            ("origin", "null"),
            ("host", "h"),
        ];
        assert!(same_site(&headers(&nulled)).is_ok());
        let forged = [
            ("sec-fetch-site", "cross-site"),
            ("origin", "http://h"),
            ("host", "h"),
        ];
        assert!(same_site(&headers(&forged)).is_err());
    }
}
