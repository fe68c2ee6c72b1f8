//! Router tests of the `Idempotency-Key` header with `tower::ServiceExt::oneshot`: a real
//! engine watching the simulator, a fresh SQLite store per test, token-file authentication.
//! A replay returns the first response (the same operation) and creates nothing; another
//! body is 422; a key in flight is 409; bad keys are 400; keys are per caller; requests
//! without the header behave as before.

use crate::common;

use common::app::{App, app};

use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode, header};
use http_body_util::BodyExt as _;
use leasehold::store::{Claim, KeyScope, now_ms};
use serde_json::{Value, json};
use tower::ServiceExt as _;

const REBALANCE: &str = "/api/v1/clusters/c/rebalance";

/// POSTs `body` (JSON) as `token`, with `key` as the Idempotency-Key when given.
async fn post(
    app: &App,
    uri: &str,
    token: &str,
    key: Option<&str>,
    body: Value,
) -> (StatusCode, HeaderMap, Value) {
    let mut req = Request::builder()
        .method("POST")
        .uri(uri)
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .header(header::CONTENT_TYPE, "application/json");
    if let Some(k) = key {
        req = req.header("idempotency-key", k);
    }
    let req = req.body(Body::from(body.to_string())).unwrap();
    let res = app.router.clone().oneshot(req).await.unwrap();
    let status = res.status();
    let headers = res.headers().clone();
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    let v = serde_json::from_slice(&bytes)
        .unwrap_or(Value::String(String::from_utf8_lossy(&bytes).into()));
    (status, headers, v)
}

/// Every operation's id, newest first (as the API lists them).
async fn operation_ids(app: &App) -> Vec<String> {
    let req = Request::builder()
        .uri("/api/v1/operations")
        .header(header::AUTHORIZATION, "Bearer viewer-token")
        .body(Body::empty())
        .unwrap();
    let res = app.router.clone().oneshot(req).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    let v: Value = serde_json::from_slice(&bytes).unwrap();
    v["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["id"].as_str().unwrap().to_owned())
        .collect()
}

/// Ends operation `id` (it cannot run: the test's control plane never becomes the acting
/// replica) by cancelling it, so the cluster takes another.
async fn finish(app: &App, id: &str) {
    let (s, _, v) = post(
        app,
        &format!("/api/v1/operations/{id}/cancel"),
        "admin-token",
        None,
        json!({}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["state"], "cancelled", "{v}");
}

fn replayed(h: &HeaderMap) -> bool {
    h.get("idempotent-replayed").is_some_and(|v| v == "true")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_replays_the_first_response_and_creates_nothing() {
    let app = app().await;
    // Something to move: a run with nothing to move starts no operation.
    app.imbalance().await;
    let start = json!({"dry_run": false, "reason": "retry-safe"});
    let (s, h1, first) = post(
        &app,
        REBALANCE,
        "operator-token",
        Some("k-1"),
        start.clone(),
    )
    .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{first}");
    assert!(!replayed(&h1));
    let id = first["id"].as_str().unwrap().to_owned();

    // The retry gets the same operation, Location and body, marked as a replay.
    let (s, h2, again) = post(
        &app,
        REBALANCE,
        "operator-token",
        Some("k-1"),
        start.clone(),
    )
    .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{again}");
    assert!(replayed(&h2));
    assert_eq!(again["id"], id.as_str());
    assert_eq!(again, first);
    assert_eq!(h2[header::LOCATION], h1[header::LOCATION]);
    assert_eq!(h2[header::CONTENT_TYPE], "application/json");
    // The middleware's headers are still set on a replay.
    assert!(h2.contains_key(header::CONTENT_SECURITY_POLICY));
    assert_eq!(operation_ids(&app).await, std::slice::from_ref(&id));

    // The same key is replayed even after the operation ended.
    finish(&app, &id).await;
    let (s, h, v) = post(
        &app,
        REBALANCE,
        "operator-token",
        Some("k-1"),
        start.clone(),
    )
    .await;
    assert_eq!(
        (s, replayed(&h), v["id"].as_str()),
        (StatusCode::ACCEPTED, true, Some(id.as_str()))
    );
    assert_eq!(operation_ids(&app).await, std::slice::from_ref(&id));

    // The quoted form of the draft (a structured-field string) is the same key.
    let (s, h, v) = post(
        &app,
        REBALANCE,
        "operator-token",
        Some("\"k-1\""),
        start.clone(),
    )
    .await;
    assert_eq!(
        (s, replayed(&h), v["id"].as_str()),
        (StatusCode::ACCEPTED, true, Some(id.as_str()))
    );

    // Another caller's key of the same name is theirs: it runs.
    let (s, h, v) = post(&app, REBALANCE, "admin-token", Some("k-1"), start.clone()).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{v}");
    assert!(!replayed(&h));
    assert_ne!(v["id"], id.as_str());
    assert_eq!(operation_ids(&app).await.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_body_in_flight_and_bad_keys_are_refused() {
    let app = app().await;
    // Something to move: a run with nothing to move starts no operation.
    app.imbalance().await;
    let (s, _, first) = post(
        &app,
        REBALANCE,
        "operator-token",
        Some("k-2"),
        json!({"dry_run": false, "reason": "one"}),
    )
    .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{first}");
    // The same key with another body: 422, and nothing happens.
    let (s, h, v) = post(
        &app,
        REBALANCE,
        "operator-token",
        Some("k-2"),
        json!({"dry_run": false, "reason": "two"}),
    )
    .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    assert_eq!(h[header::CONTENT_TYPE], "application/problem+json");
    assert_eq!(v["type"], "urn:leasehold:problem:idempotency-key-reused");
    assert!(!replayed(&h));
    assert_eq!(operation_ids(&app).await.len(), 1);

    // A key whose request is still running: 409 with Retry-After. (Claimed through the store,
    // as another replica would while its request runs.)
    let scope = KeyScope {
        principal: "otto",
        method: "POST",
        path: REBALANCE,
        key: "k-busy",
    };
    let fp = "ignored: the running request's body is another";
    let now = now_ms();
    let claim = app
        .engine
        .store()
        .claim_idempotency_key(&scope, fp, now, now + 60_000, 0);
    assert!(matches!(claim.await.unwrap(), Claim::Claimed(_)));
    let (s, h, v) = post(&app, REBALANCE, "operator-token", Some("k-busy"), json!({})).await;
    assert_eq!(
        s,
        StatusCode::UNPROCESSABLE_ENTITY,
        "another body wins over in-flight: {v}"
    );
    let fp_of_empty_object = "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a";
    let scope2 = KeyScope {
        key: "k-busy-2",
        ..scope
    };
    let claim =
        app.engine
            .store()
            .claim_idempotency_key(&scope2, fp_of_empty_object, now, now + 60_000, 0);
    assert!(matches!(claim.await.unwrap(), Claim::Claimed(_)));
    let (s, h2, v) = post(
        &app,
        REBALANCE,
        "operator-token",
        Some("k-busy-2"),
        json!({}),
    )
    .await;
    assert_eq!(s, StatusCode::CONFLICT, "{v}");
    assert_eq!(v["type"], "urn:leasehold:problem:idempotency-key-in-flight");
    assert_eq!(h2[header::RETRY_AFTER], "1");
    assert!(!replayed(&h));

    // Empty, too long, or two keys: 400, before anything runs.
    let long = "k".repeat(256);
    for key in ["", "\"\"", long.as_str()] {
        let (s, _, v) = post(&app, REBALANCE, "operator-token", Some(key), json!({})).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{key:?}: {v}");
        assert_eq!(v["type"], "urn:leasehold:problem:bad-request");
    }
    let req = Request::builder()
        .method("POST")
        .uri(REBALANCE)
        .header(header::AUTHORIZATION, "Bearer operator-token")
        .header("idempotency-key", "a")
        .header("idempotency-key", "b")
        .body(Body::empty())
        .unwrap();
    let res = app.router.clone().oneshot(req).await.unwrap();
    assert_eq!(res.status(), StatusCode::BAD_REQUEST);
    let (s, _, v) = post(
        &app,
        REBALANCE,
        "operator-token",
        Some(&"k".repeat(255)),
        json!({}),
    )
    .await;
    assert_eq!(
        s,
        StatusCode::OK,
        "255 characters are fine (a dry run): {v}"
    );

    // Unauthenticated: 401 whether or not a key is sent, and the key is not taken.
    let (s, _, _) = post(&app, REBALANCE, "wrong-token", Some("k-3"), json!({})).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    // Forbidden is not kept (permissions may change): no replay on the next try.
    for _ in 0..2 {
        let (s, h, _) = post(&app, REBALANCE, "viewer-token", Some("k-3"), json!({})).await;
        assert_eq!(s, StatusCode::FORBIDDEN);
        assert!(!replayed(&h));
    }
    // A validation error (an unknown field: 400) is kept: the retry is the same 400, replayed.
    let bad = json!({"dryrun": false});
    let (s, h, _) = post(&app, REBALANCE, "operator-token", Some("k-4"), bad.clone()).await;
    assert_eq!((s, replayed(&h)), (StatusCode::BAD_REQUEST, false));
    let (s, h, _) = post(&app, REBALANCE, "operator-token", Some("k-4"), bad).await;
    assert_eq!((s, replayed(&h)), (StatusCode::BAD_REQUEST, true));
    assert_eq!(operation_ids(&app).await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_key_each_request_runs() {
    let app = app().await;
    // Something to move: a run with nothing to move starts no operation.
    app.imbalance().await;
    let start = json!({"dry_run": false});
    let (s, h, first) = post(&app, REBALANCE, "operator-token", None, start.clone()).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{first}");
    assert!(!replayed(&h));
    let first = first["id"].as_str().unwrap().to_owned();
    finish(&app, &first).await;
    let (s, h, second) = post(&app, REBALANCE, "operator-token", None, start).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{second}");
    assert!(!replayed(&h));
    let second = second["id"].as_str().unwrap().to_owned();
    assert_ne!(first, second);
    assert_eq!(operation_ids(&app).await, [second, first]);
}
