//! The `Idempotency-Key` header on POSTs under `/api/v1`
//! (draft-ietf-httpapi-idempotency-key-header, the way Stripe does it): a retried request with
//! the same key and body gets the first response again (with `Idempotent-Replayed: true`)
//! instead of doing the work twice. Keys live in the store, so replicas sharing a PostgreSQL
//! agree; they are scoped by the authenticated caller (from the [`Caller`] extractor), method
//! and path, fingerprinted by the SHA-256 of the body, and forgotten after [`KEY_TTL`].
//!
//! - same key, same body, finished: the stored response is replayed;
//! - same key, another body: 422 `idempotency-key-reused`;
//! - same key while the first request runs: 409 `idempotency-key-in-flight` (`Retry-After`);
//! - an empty key or one over [`MAX_KEY_LEN`] characters, or two keys: 400.
//!
//! Only answers a retry would get again are stored ([`storable`]): 2xx and the 4xx that say
//! the request itself is wrong. A 5xx, 401, 403, 409 or 429 releases the key, so a retry runs.
//! Requests without the header, and other methods and paths, pass through untouched.
//!
//! It must not log a key (a retry's key is as good as the request it replays) or a token.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{FromRequestParts as _, Request, State};
use axum::http::{HeaderName, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt as _;

use super::caller::Caller;
use super::error::ApiError;
use super::state::AppState;
use super::{BODY_LIMIT, REQUEST_TIMEOUT};
use crate::store::{Claim, KeyScope, StoredResponse, now_ms};

/// The request header.
pub const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");
/// Set on a replayed response.
pub const IDEMPOTENT_REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");
/// How long a key is remembered (Stripe's 24 h; the draft leaves it to the server).
pub const KEY_TTL: Duration = Duration::from_secs(24 * 3600);
/// Longest key accepted, in characters (Stripe's limit).
pub const MAX_KEY_LEN: usize = 255;
/// A key claimed this long ago without a response belongs to a request that died (a crashed
/// replica, a dropped connection): another request may take it over. Requests are bounded by
/// [`REQUEST_TIMEOUT`]; twice that leaves room for the store's writes.
pub const STALE_CLAIM: Duration = Duration::from_secs(2 * REQUEST_TIMEOUT.as_secs());
/// Largest response body kept for replay. A bigger one (a large dry-run plan, which is safe
/// to repeat anyway) is answered but not kept, and the key is released.
pub const MAX_STORED_BODY: usize = 1024 * 1024;
/// `Retry-After` (seconds) on the 409 for a key in flight.
const RETRY_AFTER_SECS: &str = "1";
/// The response headers stored and replayed (the rest are added by the middleware again).
const REPLAYED_HEADERS: [HeaderName; 2] = [header::CONTENT_TYPE, header::LOCATION];

/// The middleware (between the body limit and the timeout, so a timed-out request's 503
/// reaches it and releases the key).
pub async fn middleware(State(state): State<AppState>, req: Request, next: Next) -> Response {
    if req.method() != Method::POST || !req.uri().path().starts_with("/api/v1/") {
        return next.run(req).await;
    }
    let key = match parse_key(&req) {
        Ok(Some(key)) => key,
        Ok(None) => return next.run(req).await,
        Err(e) => return e.into_response(),
    };
    let (mut parts, body) = req.into_parts();
    let caller = match Caller::from_request_parts(&mut parts, &state).await {
        Ok(c) => c,
        Err(e) => return e.into_response(),
    };
    let body = match axum::body::to_bytes(body, BODY_LIMIT).await {
        Ok(b) => b,
        Err(e) => return body_error(&e),
    };
    let path = parts.uri.path().to_owned();
    let scope = KeyScope {
        principal: caller.name(),
        method: Method::POST.as_str(),
        path: &path,
        key: &key,
    };
    let store = state.engine.store();
    let now = now_ms();
    let claim = store
        .claim_idempotency_key(
            &scope,
            &fingerprint(&body),
            now,
            now.saturating_add(millis(KEY_TTL)),
            now.saturating_sub(millis(STALE_CLAIM)),
        )
        .await;
    let claim_id = match claim {
        Ok(Claim::Claimed(id)) => id,
        Ok(Claim::Replay(stored)) => return replay(stored).unwrap_or_else(|e| e.into_response()),
        Ok(Claim::Mismatch) => return ApiError::IdempotencyKeyReused.into_response(),
        Ok(Claim::InFlight) => {
            let mut res = ApiError::IdempotencyKeyInFlight.into_response();
            res.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from_static(RETRY_AFTER_SECS),
            );
            return res;
        }
        Err(e) => return ApiError::from(e).into_response(),
    };

    let res = next.run(Request::from_parts(parts, Body::from(body))).await;
    let (res_parts, res_body) = res.into_parts();
    let (res_body, keep) = match res_body.collect().await {
        Ok(b) => {
            let b = b.to_bytes();
            let keep = storable(res_parts.status) && b.len() <= MAX_STORED_BODY;
            (b, keep)
        }
        Err(e) => {
            tracing::error!(error = %e, %path, "reading the response to keep it failed");
            (Bytes::new(), false)
        }
    };
    let stored = keep
        .then(|| to_stored(res_parts.status, &res_parts.headers, &res_body))
        .flatten();
    let recorded = match &stored {
        Some(s) => store
            .complete_idempotency_key(&scope, &claim_id, s, now_ms())
            .await
            .map(|_| ()),
        None => store
            .release_idempotency_key(&scope, &claim_id)
            .await
            .map(|_| ()),
    };
    if let Err(error) = recorded {
        // The key stays claimed until it goes stale: a retry meanwhile gets 409.
        tracing::error!(%error, %path, "could not record the outcome of an idempotent request");
    }
    Response::from_parts(res_parts, Body::from(res_body))
}

/// The request's key: `None` without the header; 400 for two, an empty one, one too long or
/// not visible ASCII. A structured-field string (`"…"`, the draft's form) is unquoted; a bare
/// token (Stripe's form) is taken as it is.
fn parse_key(req: &Request) -> Result<Option<String>, ApiError> {
    let mut values = req.headers().get_all(IDEMPOTENCY_KEY).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(bad_key("send one Idempotency-Key header, not several"));
    }
    let raw = value
        .to_str()
        .map_err(|_| bad_key("the Idempotency-Key must be visible ASCII"))?
        .trim();
    let key = match raw.strip_prefix('"').and_then(|r| r.strip_suffix('"')) {
        Some(quoted) => unquote(quoted)?,
        None => raw.to_owned(),
    };
    if key.is_empty() {
        return Err(bad_key("the Idempotency-Key is empty"));
    }
    if key.chars().count() > MAX_KEY_LEN {
        return Err(bad_key(&format!(
            "the Idempotency-Key is longer than {MAX_KEY_LEN} characters"
        )));
    }
    Ok(Some(key))
}

/// The content of a structured-field string (RFC 8941 §3.3.3): `\"` and `\\` escapes.
fn unquote(s: &str) -> Result<String, ApiError> {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(e @ ('"' | '\\')) => out.push(e),
                _ => return Err(bad_key("a bad escape in the quoted Idempotency-Key")),
            },
            '"' => return Err(bad_key("an unescaped quote in the Idempotency-Key")),
            c => out.push(c),
        }
    }
    Ok(out)
}

fn bad_key(why: &str) -> ApiError {
    ApiError::BadRequest(why.to_owned())
}

/// Answers a body that could not be read the way axum's extractors do (413 over the limit).
fn body_error(e: &axum::Error) -> Response {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if s.is::<http_body_util::LengthLimitError>() {
            return (StatusCode::PAYLOAD_TOO_LARGE, "length limit exceeded").into_response();
        }
        source = s.source();
    }
    ApiError::BadRequest(format!("could not read the request body: {e}")).into_response()
}

/// Whether a retry would get this answer again: success, or the request itself is wrong (bad
/// syntax or parameters, no such thing, unprocessable). Not authentication or permission
/// (they may change), conflicts with the current state, rate limits or server errors.
pub fn storable(status: StatusCode) -> bool {
    status.is_success()
        || matches!(
            status,
            StatusCode::BAD_REQUEST
                | StatusCode::NOT_FOUND
                | StatusCode::METHOD_NOT_ALLOWED
                | StatusCode::UNSUPPORTED_MEDIA_TYPE
                | StatusCode::UNPROCESSABLE_ENTITY
        )
}

/// SHA-256 of the request body, hex.
fn fingerprint(body: &[u8]) -> String {
    use std::fmt::Write as _;
    let digest = ring::digest::digest(&ring::digest::SHA256, body);
    let mut hex = String::with_capacity(64);
    for b in digest.as_ref() {
        // Writing to a String cannot fail.
        let _ = write!(hex, "{b:02x}");
    }
    hex
}

/// The response to keep; `None` when a replayed header is not visible ASCII (then it is not
/// kept).
fn to_stored(
    status: StatusCode,
    headers: &axum::http::HeaderMap,
    body: &[u8],
) -> Option<StoredResponse> {
    let mut kept = Vec::new();
    for name in REPLAYED_HEADERS {
        for value in headers.get_all(&name) {
            kept.push((name.as_str().to_owned(), value.to_str().ok()?.to_owned()));
        }
    }
    Some(StoredResponse {
        status: status.as_u16(),
        headers: kept,
        body: body.to_vec(),
    })
}

/// A stored response, marked as replayed.
fn replay(stored: StoredResponse) -> Result<Response, ApiError> {
    let corrupt = |what: &str| ApiError::Internal(format!("stored idempotent response: {what}"));
    let mut res = Response::new(Body::from(stored.body));
    *res.status_mut() = StatusCode::from_u16(stored.status).map_err(|_| corrupt("status"))?;
    for (name, value) in stored.headers {
        let name = HeaderName::try_from(name).map_err(|_| corrupt("header name"))?;
        let value = HeaderValue::try_from(value).map_err(|_| corrupt("header value"))?;
        res.headers_mut().append(name, value);
    }
    res.headers_mut()
        .insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
    Ok(res)
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key_of(values: &[&str]) -> Result<Option<String>, ApiError> {
        let mut req = Request::new(Body::empty());
        for v in values {
            req.headers_mut()
                .append(IDEMPOTENCY_KEY, HeaderValue::from_str(v).unwrap());
        }
        parse_key(&req)
    }

    #[test]
    fn keys_bare_quoted_and_refused() {
        assert_eq!(key_of(&[]).unwrap(), None);
        assert_eq!(key_of(&["abc-1"]).unwrap().as_deref(), Some("abc-1"));
        assert_eq!(
            key_of(&[r#""8e03978e-40d5""#]).unwrap().as_deref(),
            Some("8e03978e-40d5")
        );
        assert_eq!(
            key_of(&[r#""a\"b\\c""#]).unwrap().as_deref(),
            Some(r#"a"b\c"#)
        );
        assert_eq!(
            key_of(&[&"k".repeat(MAX_KEY_LEN)])
                .unwrap()
                .map(|k| k.len()),
            Some(MAX_KEY_LEN)
        );
        for bad in [
            vec![""],
            vec!["\"\""],
            vec!["  "],
            vec![r#""a\b""#],
            vec![r#""a"b""#],
        ] {
            assert!(
                matches!(key_of(&bad), Err(ApiError::BadRequest(_))),
                "{bad:?}"
            );
        }
        let long = "k".repeat(MAX_KEY_LEN + 1);
        assert!(matches!(key_of(&[&long]), Err(ApiError::BadRequest(_))));
        assert!(matches!(key_of(&["a", "b"]), Err(ApiError::BadRequest(_))));
    }

    #[test]
    fn what_is_kept() {
        for s in [200, 201, 202, 400, 404, 422] {
            assert!(storable(StatusCode::from_u16(s).unwrap()), "{s}");
        }
        for s in [401, 403, 409, 429, 500, 503] {
            assert!(!storable(StatusCode::from_u16(s).unwrap()), "{s}");
        }
        assert_eq!(
            fingerprint(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn stored_responses_replay_with_their_headers() {
        let mut headers = axum::http::HeaderMap::new();
        headers.insert(header::CONTENT_TYPE, "application/json".parse().unwrap());
        headers.insert(header::LOCATION, "/api/v1/operations/1".parse().unwrap());
        headers.insert(header::CACHE_CONTROL, "no-store".parse().unwrap());
        let stored = to_stored(StatusCode::ACCEPTED, &headers, b"{}").unwrap();
        assert_eq!(stored.headers.len(), 2, "only Content-Type and Location");
        let res = replay(stored).unwrap();
        assert_eq!(res.status(), StatusCode::ACCEPTED);
        assert_eq!(res.headers()[header::LOCATION], "/api/v1/operations/1");
        assert_eq!(res.headers()[IDEMPOTENT_REPLAYED], "true");
        assert!(!res.headers().contains_key(header::CACHE_CONTROL));
    }
}
