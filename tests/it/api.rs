//! Router tests of the REST API with `tower::ServiceExt::oneshot`: a real engine watching the
//! simulator (so the model is real), a fresh SQLite history per test, token-file
//! authentication with viewer / operator / admin users. Covers problem+json errors, target
//! paging and filters, dry-run plans, the auth matrix over every endpoint, security headers,
//! and that the committed OpenAPI document matches the code.

use crate::common;

use common::app::{app, call};

use axum::http::{StatusCode, header};
use leasehold::http::{self};
use serde_json::{Value, json};

#[test]
fn openapi_document_matches_the_committed_file() {
    let committed = std::fs::read_to_string("openapi/openapi.json").unwrap_or_default();
    let generated = leasehold::http::api::openapi_json();
    assert!(
        committed == generated,
        "openapi/openapi.json is out of date: run `cargo run -- openapi > openapi/openapi.json`"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_paging_filters_and_problem_errors() {
    let app = app().await;
    // No token: 401 as problem+json, with a challenge.
    let (s, h, v) = call(&app, "GET", "/api/v1/clusters", None, None).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    assert_eq!(h[header::CONTENT_TYPE], "application/problem+json");
    assert_eq!(v["type"], "urn:leasehold:problem:unauthenticated");
    assert!(h.contains_key(header::WWW_AUTHENTICATE));
    // A wrong token is the same.
    let (s, _, _) = call(&app, "GET", "/api/v1/clusters", Some("nope"), None).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);

    let (s, h, v) = call(&app, "GET", "/api/v1/clusters", Some("viewer-token"), None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v[0]["name"], "c");
    assert_eq!(v[0]["targets"]["total"], 5);
    assert_eq!(v[0]["targets"]["unassigned"], 5);
    assert!(
        h[header::CONTENT_SECURITY_POLICY]
            .to_str()
            .unwrap()
            .contains("frame-ancestors 'none'")
    );
    assert_eq!(h[header::X_CONTENT_TYPE_OPTIONS], "nosniff");

    // Paging: 2 + 2 + 1, in key order, each page continuing where the last ended.
    let mut keys = Vec::new();
    let mut uri = "/api/v1/clusters/c/targets?limit=2".to_owned();
    loop {
        let (s, _, v) = call(&app, "GET", &uri, Some("viewer-token"), None).await;
        assert_eq!(s, StatusCode::OK, "{v}");
        assert_eq!(v["total"], 5);
        for t in v["items"].as_array().unwrap() {
            keys.push(t["key"].as_str().unwrap().to_owned());
        }
        match v["next_cursor"].as_str() {
            Some(c) => uri = format!("/api/v1/clusters/c/targets?limit=2&cursor={c}"),
            None => break,
        }
    }
    assert_eq!(keys, ["t-0", "t-1", "t-2", "t-3", "t-4"]);
    // Filters.
    let (_, _, v) = call(
        &app,
        "GET",
        "/api/v1/clusters/c/targets?q=T-3",
        Some("viewer-token"),
        None,
    )
    .await;
    assert_eq!(v["total"], 1);
    assert_eq!(v["items"][0]["key"], "t-3");
    let (_, _, v) = call(
        &app,
        "GET",
        "/api/v1/clusters/c/targets?state=owned",
        Some("viewer-token"),
        None,
    )
    .await;
    assert_eq!(v["total"], 0);
    let (s, _, v) = call(
        &app,
        "GET",
        "/api/v1/clusters/c/targets?state=bogus",
        Some("viewer-token"),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    let (s, _, v) = call(
        &app,
        "GET",
        "/api/v1/clusters/c/targets?cursor=zzz",
        Some("viewer-token"),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_eq!(v["type"], "urn:leasehold:problem:bad-request");
    // One target with its (empty) history; unknown ones are 404.
    let (s, _, v) = call(
        &app,
        "GET",
        "/api/v1/clusters/c/targets/t-2",
        Some("viewer-token"),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["state"], "unassigned");
    assert!(v["history"].as_array().unwrap().is_empty());
    let (s, _, v) = call(
        &app,
        "GET",
        "/api/v1/clusters/c/targets/nope",
        Some("viewer-token"),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert_eq!(v["type"], "urn:leasehold:problem:not-found");
    let (s, _, _) = call(
        &app,
        "GET",
        "/api/v1/clusters/nope",
        Some("viewer-token"),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let (s, _, _) = call(
        &app,
        "GET",
        "/api/v1/clusters/c/instances/ghost",
        Some("viewer-token"),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    // Removing and uncordoning an instance the cluster has never had: 404 both ways.
    for uri in [
        "/api/v1/clusters/c/instances/ghost/remove",
        "/api/v1/clusters/c/instances/ghost/uncordon",
    ] {
        let (s, _, v) = call(&app, "POST", uri, Some("admin-token"), Some(json!({}))).await;
        assert_eq!(s, StatusCode::NOT_FOUND, "{uri}: {v}");
        assert_eq!(v["type"], "urn:leasehold:problem:not-found", "{uri}: {v}");
    }
    let (s, _, _) = call(
        &app,
        "GET",
        "/api/v1/nothing-here",
        Some("viewer-token"),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    // Operations and history start empty.
    let (s, _, v) = call(
        &app,
        "GET",
        "/api/v1/operations",
        Some("viewer-token"),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert!(v["items"].as_array().unwrap().is_empty());
    let (s, _, v) = call(
        &app,
        "GET",
        "/api/v1/history?kind=bogus",
        Some("viewer-token"),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    let (s, _, _) = call(
        &app,
        "GET",
        "/api/v1/operations/nope",
        Some("viewer-token"),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    // The document and the docs page are served.
    let (s, _, v) = call(&app, "GET", "/openapi.json", None, None).await;
    assert_eq!(s, StatusCode::OK);
    assert!(v["paths"]["/clusters/{cluster}/rebalance"].is_object());
    // A dry-run rebalance by an operator returns the plan (no member: nothing to move).
    let (s, _, v) = call(
        &app,
        "POST",
        "/api/v1/clusters/c/rebalance",
        Some("operator-token"),
        Some(json!({})),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert!(v["moves"].as_array().unwrap().is_empty());
    assert!(v["imbalance_before"].is_number());
    // Unknown fields are refused, not ignored, as a problem like every other error.
    let (s, h, v) = call(
        &app,
        "POST",
        "/api/v1/clusters/c/rebalance",
        Some("operator-token"),
        Some(json!({"dryrun": false})),
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_eq!(h[header::CONTENT_TYPE], "application/problem+json");
    assert_eq!(v["type"], "urn:leasehold:problem:bad-request");
    assert!(v["detail"].as_str().unwrap().contains("dryrun"), "{v}");
    // A JSON null body is no body: the plan.
    let (s, _, v) = call(
        &app,
        "POST",
        "/api/v1/clusters/c/rebalance",
        Some("operator-token"),
        Some(Value::Null),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert!(v["moves"].is_array());
    // The demo-only controls are not mounted outside `leasehold demo`.
    let (s, _, v) = call(
        &app,
        "POST",
        "/demo/clusters/c/members",
        Some("admin-token"),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{v}");
    // A bad query parameter is a problem too, not axum's plain text.
    let (s, h, _) = call(
        &app,
        "GET",
        "/api/v1/clusters/c/targets?limit=-1",
        Some("viewer-token"),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_eq!(h[header::CONTENT_TYPE], "application/problem+json");
    // A body over the limit is refused.
    let big = json!({"reason": "x".repeat(http::BODY_LIMIT + 1)});
    let (s, _, _) = call(
        &app,
        "POST",
        "/api/v1/clusters/c/rebalance",
        Some("operator-token"),
        Some(big),
    )
    .await;
    assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE);
}

/// `POST /operations/{id}/approve`: a proposal runs only while it still fits the cluster, only
/// once, only when nothing else runs there, and only for someone who may rebalance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approving_a_proposal() {
    let app = app().await;
    let approve = |id: &str| format!("/api/v1/operations/{id}/approve");
    // Cluster c has no members: a proposal sending t-0 to x no longer fits.
    let stale = app.propose(&[("t-0", None, "x"), ("t-1", None, "x")]).await;
    let (s, h, v) = call(&app, "POST", &approve(&stale), Some("operator-token"), None).await;
    assert_eq!(s, StatusCode::CONFLICT, "{v}");
    assert_eq!(h[header::CONTENT_TYPE], "application/problem+json");
    assert_eq!(v["type"], "urn:leasehold:problem:conflict");
    let detail = v["detail"].as_str().unwrap();
    assert!(
        detail.contains("2 of 2 moves are out of date") && detail.contains("destination x is gone"),
        "{detail}"
    );
    let (_, _, v) = call(
        &app,
        "GET",
        &format!("/api/v1/operations/{stale}"),
        Some("viewer-token"),
        None,
    )
    .await;
    assert_eq!(
        v["state"], "proposed",
        "a refused approval leaves it proposed"
    );

    // A viewer may not approve; an operator may, once.
    let fits = app.propose(&[]).await;
    let (s, _, v) = call(&app, "POST", &approve(&fits), Some("viewer-token"), None).await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{v}");
    let (s, h, v) = call(&app, "POST", &approve(&fits), Some("operator-token"), None).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{v}");
    assert_eq!(h[header::LOCATION], format!("/api/v1/operations/{fits}"));
    assert_eq!(v["id"], fits.as_str());
    assert_ne!(v["state"], "proposed", "{v}");
    let (s, _, v) = call(&app, "POST", &approve(&fits), Some("operator-token"), None).await;
    assert_eq!(s, StatusCode::CONFLICT, "{v}");
    assert!(v["detail"].as_str().unwrap().contains(&fits), "{v}");

    // Unknown: 404. While the approved one is unfinished (this engine does not act, so it
    // stays pending), no other proposal of the cluster may start.
    let (s, _, v) = call(&app, "POST", &approve("nope"), Some("operator-token"), None).await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{v}");
    let other = app.propose(&[]).await;
    let (s, _, v) = call(&app, "POST", &approve(&other), Some("operator-token"), None).await;
    assert_eq!(s, StatusCode::CONFLICT, "{v}");
    assert!(
        v["detail"].as_str().unwrap().contains("still unfinished"),
        "{v}"
    );

    // Every attempt by an allowed caller is audited, refused or not.
    let (_, _, v) = call(
        &app,
        "GET",
        "/api/v1/history?kind=audit",
        Some("viewer-token"),
        None,
    )
    .await;
    let audited: Vec<String> = v["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.to_string())
        .filter(|e| e.contains("approve operation"))
        .collect();
    // The stale one, the approval, the second approval, the busy one; not the viewer's (refused
    // before anything is looked at) nor the unknown id.
    assert_eq!(audited.len(), 4, "{audited:?}");
    assert_eq!(
        audited.iter().filter(|e| e.contains("refused")).count(),
        3,
        "{audited:?}"
    );
}

/// Every endpoint × anonymous / no role / viewer / operator / admin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_matrix() {
    let app = app().await;
    let reads = [
        "/api/v1/clusters",
        "/api/v1/clusters/c",
        "/api/v1/clusters/c/instances",
        "/api/v1/clusters/c/targets",
        "/api/v1/clusters/c/targets/t-1",
        "/api/v1/operations",
        "/api/v1/history",
    ];
    // Dry runs and an uncordon of an instance that is not cordoned: harmless when allowed.
    let writes = [
        "/api/v1/clusters/c/rebalance",
        "/api/v1/clusters/c/instances/x/uncordon",
        "/api/v1/operations/none/cancel",
        "/api/v1/operations/none/approve",
    ];
    for who in [
        None,
        Some("nobody-token"),
        Some("viewer-token"),
        Some("operator-token"),
        Some("admin-token"),
    ] {
        for uri in reads {
            let (s, _, v) = call(&app, "GET", uri, who, None).await;
            let want = match who {
                None => StatusCode::UNAUTHORIZED,
                Some("nobody-token") => StatusCode::FORBIDDEN,
                _ => StatusCode::OK,
            };
            assert_eq!(s, want, "GET {uri} as {who:?}: {v}");
        }
        for uri in writes {
            let (s, _, v) = call(&app, "POST", uri, who, Some(json!({}))).await;
            match who {
                None => assert_eq!(s, StatusCode::UNAUTHORIZED, "POST {uri} as {who:?}: {v}"),
                Some("nobody-token" | "viewer-token") => {
                    assert_eq!(s, StatusCode::FORBIDDEN, "POST {uri} as {who:?}: {v}");
                    assert_eq!(v["type"], "urn:leasehold:problem:forbidden");
                }
                _ => assert!(
                    s != StatusCode::UNAUTHORIZED
                        && s != StatusCode::FORBIDDEN
                        && !s.is_server_error(),
                    "POST {uri} as {who:?}: {s} {v}"
                ),
            }
        }
    }
}

/// A page on another site whose name resolves to this server (DNS rebinding) sends its own
/// name as `Host`, and as `Origin` with `Sec-Fetch-Site: same-origin`: the CSRF guard alone
/// would take it for this server. The `Host` check refuses it first, for reads and writes;
/// this server's own names, and the probes and scrapers, pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_that_does_not_name_this_server_is_refused() {
    use tower::ServiceExt as _;
    let app = app().await;
    let send = |method: &str, uri: &str, host: &str| {
        let req = axum::http::Request::builder()
            .method(method)
            .uri(uri)
            .header(header::HOST, host)
            .header(header::AUTHORIZATION, "Bearer admin-token")
            .header(header::ORIGIN, format!("http://{host}"))
            .header("sec-fetch-site", "same-origin")
            .header(header::CONTENT_TYPE, "application/json")
            .body(axum::body::Body::from(if method == "POST" {
                "{}"
            } else {
                ""
            }))
            .unwrap();
        let router = app.router.clone();
        async move { router.oneshot(req).await.unwrap() }
    };
    for (method, uri) in [
        ("GET", "/api/v1/clusters"),
        ("GET", "/"),
        ("POST", "/api/v1/clusters/c/rebalance"),
    ] {
        let res = send(method, uri, "rebind.attacker.example:8080").await;
        assert_eq!(res.status(), StatusCode::BAD_REQUEST, "{method} {uri}");
        let body = axum::body::to_bytes(res.into_body(), 1 << 16)
            .await
            .unwrap();
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["type"], "urn:leasehold:problem:host", "{v}");
    }
    for host in ["localhost:8080", "127.0.0.1:8080", "[::1]:8080"] {
        let res = send("GET", "/api/v1/clusters", host).await;
        assert_eq!(res.status(), StatusCode::OK, "{host}");
    }
    for uri in ["/healthz", "/readyz", "/metrics"] {
        let res = send("GET", uri, "10.0.0.7:8080").await;
        assert_eq!(res.status(), StatusCode::OK, "{uri}");
    }
}

/// Refused mutating requests are audited — who (the user when known), what, why — and at
/// most `refusals::PER_MINUTE` of them a minute, so a flood cannot fill the history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_mutating_requests_are_audited_within_a_budget() {
    let app = app().await;
    let rebalance = "/api/v1/clusters/c/rebalance";
    let (s, _, _) = call(
        &app,
        "POST",
        rebalance,
        Some("viewer-token"),
        Some(json!({})),
    )
    .await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let (s, _, _) = call(&app, "POST", rebalance, None, Some(json!({}))).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    let (s, _, _) = call(
        &app,
        "POST",
        rebalance,
        Some("wrong-token"),
        Some(json!({})),
    )
    .await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    // Reads are not audited, refused or not.
    let (s, _, _) = call(&app, "GET", "/api/v1/clusters", None, None).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    let audit = |limit: u32| {
        let app = &app;
        async move {
            let uri = format!("/api/v1/history?kind=audit&limit={limit}");
            let (s, _, v) = call(app, "GET", &uri, Some("admin-token"), None).await;
            assert_eq!(s, StatusCode::OK, "{v}");
            v["items"].as_array().unwrap().clone()
        }
    };
    let entries = audit(100).await;
    assert_eq!(entries.len(), 3, "{entries:#?}");
    let text = serde_json::to_string(&entries).unwrap();
    assert!(text.contains("\"vera\""), "{text}");
    assert!(text.contains("may not rebalance"), "{text}");
    assert!(text.matches("unauthenticated").count() >= 2, "{text}");
    assert!(text.contains("POST /api/v1/clusters/c/rebalance"), "{text}");
    assert!(
        !text.contains("wrong-token"),
        "a token in the audit: {text}"
    );
    // A flood: only the budget's worth is recorded this minute.
    for _ in 0..100 {
        call(&app, "POST", rebalance, None, Some(json!({}))).await;
    }
    let entries = audit(1000).await;
    assert_eq!(
        entries.len(),
        leasehold::http::refusals::PER_MINUTE as usize,
        "{}",
        entries.len()
    );
}

/// A start that names the plan it previewed runs exactly that plan or nothing: with a plan id
/// the cluster no longer gives, it is refused (409 `plan-changed`) with the fresh plan, and no
/// operation is created; with the fresh id it starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_naming_a_stale_plan_is_refused_with_the_fresh_one() {
    let app = app().await;
    let rebalance = "/api/v1/clusters/c/rebalance";
    let (s, _, preview) = call(
        &app,
        "POST",
        rebalance,
        Some("operator-token"),
        Some(json!({})),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{preview}");
    let id = preview["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("p-"), "{preview}");
    let stale = json!({"dry_run": false, "plan_id": "p-0123456789abcdef"});
    let (s, h, v) = call(&app, "POST", rebalance, Some("operator-token"), Some(stale)).await;
    assert_eq!(s, StatusCode::CONFLICT, "{v}");
    assert_eq!(h[header::CONTENT_TYPE], "application/problem+json");
    assert_eq!(v["type"], "urn:leasehold:problem:plan-changed");
    assert!(
        v["detail"].as_str().unwrap().contains("p-0123456789abcdef"),
        "{v}"
    );
    assert_eq!(v["plan"]["id"], id.as_str(), "{v}");
    let (_, _, ops) = call(
        &app,
        "GET",
        "/api/v1/operations",
        Some("viewer-token"),
        None,
    )
    .await;
    assert_eq!(ops["items"].as_array().unwrap().len(), 0, "{ops}");
    // Other problems carry no plan.
    let (_, _, v) = call(
        &app,
        "GET",
        "/api/v1/clusters/nope",
        Some("viewer-token"),
        None,
    )
    .await;
    assert!(v.get("plan").is_none(), "{v}");
    let fresh = json!({"dry_run": false, "plan_id": id});
    let (s, _, v) = call(&app, "POST", rebalance, Some("operator-token"), Some(fresh)).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{v}");
}
