//! Router tests of the REST API with `tower::ServiceExt::oneshot`: a real engine watching the
//! simulator (so the model is real), a fresh SQLite history per test, token-file
//! authentication with viewer / operator / admin users. Covers problem+json errors, target
//! paging and filters, dry-run plans, the auth matrix over every API operation and dashboard
//! page, security headers,
//! and that the committed OpenAPI document matches the code.

use crate::common;

use common::app::{App, app, call};

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

/// What an operation or a page needs of its caller.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Needs {
    /// Nothing: the login page and form, logout, the static assets.
    Nobody,
    /// The right to read (a viewer's).
    Read,
    /// The right to change the cluster (an operator's; Kubernetes: the verb of the action).
    Operate,
    /// The right to read; the page offers an action (its `#confirm` button) only to a caller
    /// who may operate, and shows anyone else what that would need instead (`#needs`).
    ReadOffering,
}

/// One request of the authorisation matrix: the route as the router or the OpenAPI document
/// names it, the request made for it, what it needs, and how it is answered when allowed.
struct Row {
    method: &'static str,
    route: &'static str,
    uri: String,
    /// A JSON body (API) or a form (dashboard).
    body: Sent,
    needs: Needs,
    allowed: StatusCode,
}

enum Sent {
    Nothing,
    Json(Value),
    Form(&'static str),
}

/// Who asks: no credential, someone with no role, and each role.
const WHO: [(Option<&str>, &str); 5] = [
    (None, "anonymous"),
    (Some("nobody-token"), "no role"),
    (Some("viewer-token"), "viewer"),
    (Some("operator-token"), "operator"),
    (Some("admin-token"), "admin"),
];

/// One request of the matrix: its status, `Location` and body (not read from an event stream,
/// which never ends).
async fn ask(app: &App, row: &Row, token: Option<&str>) -> (StatusCode, String, String) {
    use http_body_util::BodyExt as _;
    use tower::ServiceExt as _;
    let mut req = axum::http::Request::builder()
        .method(row.method)
        .uri(&row.uri);
    if let Some(t) = token {
        req = req.header(header::AUTHORIZATION, format!("Bearer {t}"));
    }
    let req = match &row.body {
        Sent::Nothing => req.body(axum::body::Body::empty()),
        Sent::Json(v) => req
            .header(header::CONTENT_TYPE, "application/json")
            .body(axum::body::Body::from(v.to_string())),
        Sent::Form(f) => req
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(axum::body::Body::from(*f)),
    }
    .unwrap();
    let res = app.router.clone().oneshot(req).await.unwrap();
    let status = res.status();
    let location = res
        .headers()
        .get(header::LOCATION)
        .map(|l| l.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let stream = res
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|c| c.to_str().unwrap().starts_with("text/event-stream"));
    let body = if stream {
        String::new()
    } else {
        let bytes = res.into_body().collect().await.unwrap().to_bytes();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    (status, location, body)
}

/// The dashboard's routes as its router declares them (`src/http/ui/mod.rs`): (method, path).
fn dashboard_routes() -> std::collections::BTreeSet<(String, String)> {
    let src = std::fs::read_to_string("src/http/ui/mod.rs").unwrap();
    let mut routes = std::collections::BTreeSet::new();
    for chunk in src.split(".route(").skip(1) {
        let path = chunk.split('"').nth(1).unwrap().to_owned();
        let handlers = chunk.split(";\n").next().unwrap();
        for (method, call) in [("GET", "get("), ("POST", "post(")] {
            if handlers.contains(call) {
                routes.insert((method.to_owned(), path.clone()));
            }
        }
    }
    assert!(routes.len() > 10, "no routes read: {routes:?}");
    routes
}

/// Every API operation in the OpenAPI document and every dashboard page and form in the
/// router, each asked by no one, someone with no role, a viewer, an operator and an admin: a
/// viewer may read everything — the rebalance and removal plans included, read-only, with what
/// starting them needs in place of the button — and change nothing; an operator and an admin
/// may do all of it. The rows are checked against the document and the router, so an
/// operation or page added without its row here fails this test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_matrix() {
    let app = app().await;
    // Members c-0 and c-1, c-0 holding four targets: both plans have moves.
    app.imbalance().await;
    let proposed = app.propose(&[]).await;
    let row = |method, route, uri: &str, body, needs, allowed| Row {
        method,
        route,
        uri: uri.to_owned(),
        body,
        needs,
        allowed,
    };
    use Needs::*;
    use Sent::*;
    use StatusCode as S;
    let op = format!("/operations/{proposed}");
    let api = |route: &'static str, uri: &str, needs, allowed| {
        let (method, body) = match needs {
            Operate => ("POST", Json(json!({}))),
            _ => ("GET", Nothing),
        };
        row(
            method,
            route,
            &format!("/api/v1{uri}"),
            body,
            needs,
            allowed,
        )
    };
    // Dry runs (the API's default), an uncordon of an instance that is not cordoned, a resume
    // of what is not paused, and operations that do not exist: harmless when allowed.
    let api_rows = [
        api("/clusters", "/clusters", Read, S::OK),
        api("/clusters/{cluster}", "/clusters/c", Read, S::OK),
        api(
            "/clusters/{cluster}/instances",
            "/clusters/c/instances",
            Read,
            S::OK,
        ),
        api(
            "/clusters/{cluster}/instances/{instance}",
            "/clusters/c/instances/c-0",
            Read,
            S::OK,
        ),
        api(
            "/clusters/{cluster}/instances/{instance}/remove",
            "/clusters/c/instances/c-0/remove",
            Operate,
            S::OK,
        ),
        api(
            "/clusters/{cluster}/instances/{instance}/uncordon",
            "/clusters/c/instances/c-1/uncordon",
            Operate,
            S::OK,
        ),
        row(
            "GET",
            "/clusters/{cluster}/instances/{instance}/uncordon",
            "/api/v1/clusters/c/instances/c-1/uncordon",
            Nothing,
            Read,
            S::OK,
        ),
        api(
            "/clusters/{cluster}/rebalance",
            "/clusters/c/rebalance",
            Operate,
            S::OK,
        ),
        api(
            "/clusters/{cluster}/targets",
            "/clusters/c/targets",
            Read,
            S::OK,
        ),
        api(
            "/clusters/{cluster}/targets/{target}",
            "/clusters/c/targets/t-1",
            Read,
            S::OK,
        ),
        api(
            "/clusters/{cluster}/automation",
            "/clusters/c/automation",
            Read,
            S::OK,
        ),
        // Resuming what is not paused.
        row(
            "POST",
            "/clusters/{cluster}/automation",
            "/api/v1/clusters/c/automation",
            Json(json!({"paused": false, "reason": "matrix"})),
            Operate,
            S::OK,
        ),
        api(
            "/clusters/{cluster}/as-of",
            "/clusters/c/as-of?at=2026-01-01T00:00:00Z",
            Read,
            S::OK,
        ),
        api("/events", "/events", Read, S::OK),
        api("/history", "/history", Read, S::OK),
        api("/operations", "/operations", Read, S::OK),
        api("/operations/{id}", &op, Read, S::OK),
        api(
            "/operations/{id}/approve",
            "/operations/none/approve",
            Operate,
            S::NOT_FOUND,
        ),
        api(
            "/operations/{id}/cancel",
            "/operations/none/cancel",
            Operate,
            S::NOT_FOUND,
        ),
    ];
    // Starts name a plan that is not the plan (refused with the fresh one: nothing starts).
    let stale = "plan_id=stale&reason=matrix";
    let page_rows = [
        row("GET", "/", "/", Nothing, Read, S::OK),
        row("GET", "/login", "/login", Nothing, Nobody, S::OK),
        row(
            "POST",
            "/login",
            "/login",
            Form("token=wrong"),
            Nobody,
            S::UNAUTHORIZED,
        ),
        row("POST", "/logout", "/logout", Nothing, Nobody, S::SEE_OTHER),
        row(
            "GET",
            "/clusters/{cluster}",
            "/clusters/c",
            Nothing,
            Read,
            S::OK,
        ),
        row(
            "GET",
            "/clusters/{cluster}/instances",
            "/clusters/c/instances",
            Nothing,
            Read,
            S::OK,
        ),
        row(
            "GET",
            "/clusters/{cluster}/instances/{instance}",
            "/clusters/c/instances/c-0",
            Nothing,
            Read,
            S::OK,
        ),
        row(
            "GET",
            "/clusters/{cluster}/instances/{instance}/remove",
            "/clusters/c/instances/c-0/remove",
            Nothing,
            ReadOffering,
            S::OK,
        ),
        row(
            "POST",
            "/clusters/{cluster}/instances/{instance}/remove",
            "/clusters/c/instances/c-0/remove",
            Form(stale),
            Operate,
            S::CONFLICT,
        ),
        // (c-1 is not cordoned here, so the page offers nothing to anyone: the offer is
        // checked in `an_uncordon_says_what_it_sets_off_before_it_does`.)
        row(
            "GET",
            "/clusters/{cluster}/instances/{instance}/uncordon",
            "/clusters/c/instances/c-1/uncordon",
            Nothing,
            Read,
            S::OK,
        ),
        row(
            "POST",
            "/clusters/{cluster}/instances/{instance}/uncordon",
            "/clusters/c/instances/c-1/uncordon",
            Nothing,
            Operate,
            S::SEE_OTHER,
        ),
        row(
            "GET",
            "/clusters/{cluster}/targets",
            "/clusters/c/targets",
            Nothing,
            Read,
            S::OK,
        ),
        row(
            "GET",
            "/clusters/{cluster}/targets/{target}",
            "/clusters/c/targets/t-1",
            Nothing,
            Read,
            S::OK,
        ),
        row(
            "GET",
            "/clusters/{cluster}/rebalance",
            "/clusters/c/rebalance",
            Nothing,
            ReadOffering,
            S::OK,
        ),
        row(
            "POST",
            "/clusters/{cluster}/rebalance",
            "/clusters/c/rebalance",
            Form(stale),
            Operate,
            S::CONFLICT,
        ),
        row(
            "POST",
            "/clusters/{cluster}/automation",
            "/clusters/c/automation",
            Form("paused=false&reason=matrix"),
            Operate,
            S::SEE_OTHER,
        ),
        row("GET", "/operations", "/operations", Nothing, Read, S::OK),
        row("GET", "/operations/{id}", &op, Nothing, Read, S::OK),
        row(
            "POST",
            "/operations/{id}/approve",
            "/operations/none/approve",
            Nothing,
            Operate,
            S::NOT_FOUND,
        ),
        row(
            "POST",
            "/operations/{id}/cancel",
            "/operations/none/cancel",
            Nothing,
            Operate,
            S::NOT_FOUND,
        ),
        row("GET", "/history", "/history", Nothing, Read, S::OK),
        row(
            "GET",
            "/clusters/{cluster}/as-of",
            "/clusters/c/as-of",
            Nothing,
            Read,
            S::OK,
        ),
        row(
            "GET",
            "/static/{file}",
            "/static/app.css",
            Nothing,
            Nobody,
            S::OK,
        ),
    ];

    // Every operation of the document and every route of the dashboard has its row, once.
    let doc: Value = serde_json::from_str(&leasehold::http::api::openapi_json()).unwrap();
    let documented: std::collections::BTreeSet<(String, String)> = doc["paths"]
        .as_object()
        .unwrap()
        .iter()
        .flat_map(|(path, ops)| {
            ops.as_object()
                .unwrap()
                .keys()
                .map(move |m| (m.to_uppercase(), path.clone()))
        })
        .collect();
    let rows_of = |rows: &[Row]| -> std::collections::BTreeSet<(String, String)> {
        rows.iter()
            .map(|r| (r.method.to_owned(), r.route.to_owned()))
            .collect()
    };
    assert_eq!(
        rows_of(&api_rows),
        documented,
        "API operations without a row"
    );
    assert_eq!(api_rows.len(), documented.len());
    let routed = dashboard_routes();
    assert_eq!(
        rows_of(&page_rows),
        routed,
        "dashboard routes without a row"
    );
    assert_eq!(page_rows.len(), routed.len());

    for (token, who) in WHO {
        for r in api_rows.iter().chain(&page_rows) {
            let (status, location, body) = ask(&app, r, token).await;
            let what = format!(
                "{} {} as {who}: {status} {location} {body:.300}",
                r.method, r.uri
            );
            let is_api = r.uri.starts_with("/api/");
            let allowed = match (r.needs, who) {
                (Nobody, _) => true,
                (_, "anonymous" | "no role") => false,
                (Read | ReadOffering, _) => true,
                (Operate, "viewer") => false,
                (Operate, _) => true,
            };
            if allowed {
                assert_eq!(status, r.allowed, "{what}");
            } else if token.is_none() && is_api {
                assert_eq!(status, S::UNAUTHORIZED, "{what}");
            } else if token.is_none() {
                // A stranger's browser is sent to log in, and comes back where it was.
                assert_eq!(status, S::SEE_OTHER, "{what}");
                assert!(location.starts_with("/login?next=%2F"), "{what}");
            } else {
                assert_eq!(status, S::FORBIDDEN, "{what}");
                if is_api {
                    assert!(body.contains("urn:leasehold:problem:forbidden"), "{what}");
                } else {
                    assert!(body.contains("may not"), "{what}");
                }
            }
            // A plan's page offers its start to whoever may, and tells anyone else what it
            // would need.
            if r.needs == ReadOffering && allowed {
                let operates = matches!(who, "operator" | "admin");
                assert_eq!(body.contains("id=\"confirm\""), operates, "{what}");
                assert_eq!(body.contains("id=\"needs\""), !operates, "{what}");
                if !operates {
                    assert!(body.contains("needs the operator role or higher"), "{what}");
                }
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
    app.imbalance().await;
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
    assert_eq!(operation_count(&app).await, 0);
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
    let (s, h, v) = call(&app, "POST", rebalance, Some("operator-token"), Some(fresh)).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{v}");
    assert_eq!(
        h[header::LOCATION],
        format!("/api/v1/operations/{}", v["id"].as_str().unwrap())
    );
    assert_eq!(operation_count(&app).await, 1);
}

/// How many operations the API lists.
/// An uncordon says what it sets off before it does (issue 34, item 4), and a removal's plan
/// says what it means for the cluster (item 3): c-1 cordoned (by a removal this engine, which
/// does not act, never runs), its uncordon's preview is the rebalance the join policy would
/// propose — offered to an operator, read-only for a viewer; removing c-0 then is warned as
/// removing the last ready member, whose targets have nowhere to go. Each move says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncordon_says_what_it_sets_off_before_it_does() {
    let app = app().await;
    app.imbalance().await;
    let preview = "/api/v1/clusters/c/instances/c-1/uncordon";
    let (s, _, v) = call(&app, "GET", preview, Some("viewer-token"), None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["cordoned"], false, "{v}");
    assert!(
        v["message"].as_str().unwrap().contains("not cordoned"),
        "{v}"
    );

    let (s, _, v) = call(
        &app,
        "POST",
        "/api/v1/clusters/c/instances/c-1/remove",
        Some("operator-token"),
        Some(json!({"dry_run": false})),
    )
    .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{v}");
    let (s, _, v) = call(&app, "GET", preview, Some("viewer-token"), None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["cordoned"], true, "{v}");
    // The cluster's on_join is the default, propose.
    assert_eq!(v["triggers"], "proposal", "{v}");
    let moves = v["plan"]["moves"].as_array().unwrap();
    assert_eq!(moves.len(), 2, "{v}");
    // t-4 has no owner yet; one of c-0's four goes to c-1 to even them out.
    let why: Vec<(&Value, &str)> = moves
        .iter()
        .map(|m| {
            assert_eq!(m["to"], "c-1", "{v}");
            (&m["from"], m["reason"].as_str().unwrap())
        })
        .collect();
    assert_eq!(
        why,
        [(&json!("c-0"), "balance"), (&Value::Null, "unowned")],
        "{v}"
    );
    let message = v["message"].as_str().unwrap();
    assert!(
        message.contains("a rebalance of 2 moves is proposed for someone to approve"),
        "{message}"
    );
    // Nothing changed by looking.
    let (_, _, v) = call(&app, "GET", preview, Some("viewer-token"), None).await;
    assert_eq!(v["cordoned"], true, "{v}");

    // The page: the same words, with the button for an operator, what it needs for a viewer.
    let page = "/clusters/c/instances/c-1/uncordon";
    let (s, _, body) = call(&app, "GET", page, Some("operator-token"), None).await;
    let body = body.as_str().unwrap().to_owned();
    assert_eq!(s, StatusCode::OK, "{body}");
    assert!(
        body.contains("a rebalance of 2 moves is proposed"),
        "{body}"
    );
    assert!(
        body.contains("id=\"confirm\"") && !body.contains("id=\"needs\""),
        "{body}"
    );
    assert!(
        body.contains("c-0 carries more than its share, c-1 less"),
        "{body}"
    );
    let (_, _, body) = call(&app, "GET", page, Some("viewer-token"), None).await;
    let body = body.as_str().unwrap().to_owned();
    assert!(
        !body.contains("id=\"confirm\"") && body.contains("id=\"needs\""),
        "{body}"
    );
    // The instance page links to it instead of uncordoning at once.
    let (_, _, body) = call(
        &app,
        "GET",
        "/clusters/c/instances/c-1",
        Some("operator-token"),
        None,
    )
    .await;
    let body = body.as_str().unwrap().to_owned();
    assert!(
        body.contains("href=\"/clusters/c/instances/c-1/uncordon\""),
        "{body}"
    );
    assert!(
        !body.contains("action=\"/clusters/c/instances/c-1/uncordon\""),
        "{body}"
    );

    // With c-1 cordoned, removing c-0 would leave nobody to work its four targets.
    let (s, _, v) = call(
        &app,
        "POST",
        "/api/v1/clusters/c/instances/c-0/remove",
        Some("operator-token"),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let kinds: Vec<&str> = v["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["last_ready_member", "no_active_member"], "{v}");
    let (_, _, body) = call(
        &app,
        "GET",
        "/clusters/c/instances/c-0/remove",
        Some("operator-token"),
        None,
    )
    .await;
    let body = body.as_str().unwrap().to_owned();
    assert!(body.contains("c-0 is the last ready member"), "{body}");
}

async fn operation_count(app: &App) -> usize {
    let (s, _, ops) = call(app, "GET", "/api/v1/operations", Some("viewer-token"), None).await;
    assert_eq!(s, StatusCode::OK, "{ops}");
    ops["items"].as_array().unwrap().len()
}

/// One request with these headers and body: status, headers, body (JSON, else a string).
async fn send(
    app: &App,
    method: &str,
    uri: &str,
    headers: &[(&str, &str)],
    body: impl Into<axum::body::Body>,
) -> (StatusCode, axum::http::HeaderMap, Value) {
    use http_body_util::BodyExt as _;
    use tower::ServiceExt as _;
    let mut req = axum::http::Request::builder().method(method).uri(uri);
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    let res = app
        .router
        .clone()
        .oneshot(req.body(body.into()).unwrap())
        .await
        .unwrap();
    let status = res.status();
    let headers = res.headers().clone();
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    let v = serde_json::from_slice(&bytes)
        .unwrap_or(Value::String(String::from_utf8_lossy(&bytes).into()));
    (status, headers, v)
}

const OPERATOR: (&str, &str) = ("authorization", "Bearer operator-token");
const VIEWER: (&str, &str) = ("authorization", "Bearer viewer-token");

/// `detail` of a problem with this status and type slug (and the problem+json content type).
#[track_caller]
fn problem(
    answer: &(StatusCode, axum::http::HeaderMap, Value),
    status: StatusCode,
    slug: &str,
) -> String {
    let (s, h, v) = answer;
    assert_eq!(*s, status, "{v}");
    assert_eq!(h[header::CONTENT_TYPE], "application/problem+json", "{v}");
    assert_eq!(v["type"], format!("urn:leasehold:problem:{slug}"), "{v}");
    assert_eq!(v["status"], status.as_u16(), "{v}");
    v["detail"].as_str().unwrap().to_owned()
}

/// A body is JSON only when it says so: without `Content-Type`, or with another type, it is
/// refused (415) rather than ignored — a run is never taken for a dry run. JSON with a
/// charset, and `application/*+json` types, are JSON; an empty body is no body (the
/// defaults). The same holds for a POST that takes no parameters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_is_taken_only_as_declared_json() {
    let app = app().await;
    let rebalance = "/api/v1/clusters/c/rebalance";
    let run = r#"{"dry_run": false, "bogus": 1}"#;
    for headers in [
        vec![OPERATOR],
        vec![OPERATOR, ("content-type", "text/plain")],
    ] {
        let answer = send(&app, "POST", rebalance, &headers, run).await;
        let detail = problem(
            &answer,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported-media-type",
        );
        assert!(
            detail.contains("Content-Type: application/json"),
            "{detail}"
        );
    }
    let form = [
        OPERATOR,
        ("content-type", "application/x-www-form-urlencoded"),
    ];
    let answer = send(&app, "POST", rebalance, &form, "dry_run=false").await;
    let detail = problem(
        &answer,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported-media-type",
    );
    assert!(
        detail.contains("application/x-www-form-urlencoded"),
        "{detail}"
    );
    for json_type in [
        "application/json; charset=utf-8",
        "application/merge-patch+json",
    ] {
        let (s, _, v) = send(
            &app,
            "POST",
            rebalance,
            &[OPERATOR, ("content-type", json_type)],
            "{}",
        )
        .await;
        assert_eq!(s, StatusCode::OK, "{json_type}: {v}");
        assert!(v["moves"].is_array(), "{json_type}: {v}");
    }
    let (s, _, v) = send(&app, "POST", rebalance, &[OPERATOR], "").await;
    assert_eq!(s, StatusCode::OK, "no body is a dry run: {v}");
    assert!(v["moves"].is_array(), "{v}");
    let cancel = "/api/v1/operations/none/cancel";
    let answer = send(&app, "POST", cancel, &[OPERATOR], "{}").await;
    problem(
        &answer,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported-media-type",
    );
    assert_eq!(operation_count(&app).await, 0, "nothing ran");
}

/// A body field the schema does not name, or a value outside its type or range, is a 400
/// that names the field and says what it takes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_fields_are_named_with_what_they_take() {
    let app = app().await;
    let post = |uri: &'static str, body: Value| {
        let app = &app;
        async move { call(app, "POST", uri, Some("operator-token"), Some(body)).await }
    };
    let rebalance = "/api/v1/clusters/c/rebalance";
    let answer = post(rebalance, json!({"max_moves": -3})).await;
    let detail = problem(&answer, StatusCode::BAD_REQUEST, "bad-request");
    assert!(
        detail.starts_with("max_moves: must be a whole number from 1 to ")
            && detail.ends_with(", not -3"),
        "{detail}"
    );
    let answer = post(rebalance, json!({"max_moves": 0})).await;
    let detail = problem(&answer, StatusCode::BAD_REQUEST, "bad-request");
    assert!(
        detail.starts_with("max_moves: must be a whole number from 1 to "),
        "{detail}"
    );
    let answer = post(rebalance, json!({"dry_run": false, "bogus": 1})).await;
    assert_eq!(
        problem(&answer, StatusCode::BAD_REQUEST, "bad-request"),
        "unknown field \"bogus\" in the body; it takes dry_run, max_moves, plan_id, reason"
    );
    let answer = post(rebalance, json!({"dry_run": "false"})).await;
    assert_eq!(
        problem(&answer, StatusCode::BAD_REQUEST, "bad-request"),
        "dry_run: must be true or false, not \"false\""
    );
    let answer = post("/api/v1/clusters/c/instances/x/remove", json!([true])).await;
    let detail = problem(&answer, StatusCode::BAD_REQUEST, "bad-request");
    assert!(
        detail.starts_with("the body must be a JSON object"),
        "{detail}"
    );
    let answer = post("/api/v1/operations/none/cancel", json!({"force": true})).await;
    assert_eq!(
        problem(&answer, StatusCode::BAD_REQUEST, "bad-request"),
        "unknown field \"force\" in the body; this request takes no parameters: send nothing, \
         null or {}"
    );
    let answer = send(
        &app,
        "POST",
        rebalance,
        &[OPERATOR, ("content-type", "application/json")],
        "{",
    )
    .await;
    let detail = problem(&answer, StatusCode::BAD_REQUEST, "bad-request");
    assert!(detail.starts_with("the body is not valid JSON"), "{detail}");
}

/// A query parameter the operation does not list is a 400 naming it and those it takes, on
/// every API path (one that takes none included).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_query_parameters_are_refused() {
    let app = app().await;
    let get = |uri: &'static str| {
        let app = &app;
        async move { call(app, "GET", uri, Some("viewer-token"), None).await }
    };
    let answer = get("/api/v1/clusters/c/targets?ownr=c-0").await;
    assert_eq!(
        problem(&answer, StatusCode::BAD_REQUEST, "bad-request"),
        "unknown query parameter \"ownr\": GET /clusters/{cluster}/targets takes owner, state, \
         q, cursor, limit"
    );
    let answer = get("/api/v1/history?operation_id=x").await;
    let detail = problem(&answer, StatusCode::BAD_REQUEST, "bad-request");
    assert!(
        detail.contains("\"operation_id\"") && detail.contains("operation, since_ms"),
        "{detail}"
    );
    let answer = get("/api/v1/clusters?verbose=1").await;
    assert_eq!(
        problem(&answer, StatusCode::BAD_REQUEST, "bad-request"),
        "unknown query parameter \"verbose\": GET /clusters takes no query parameters"
    );
    let answer = call(
        &app,
        "POST",
        "/api/v1/clusters/c/rebalance?dry_run=false",
        Some("operator-token"),
        None,
    )
    .await;
    let detail = problem(&answer, StatusCode::BAD_REQUEST, "bad-request");
    assert!(detail.contains("\"dry_run\""), "{detail}");
    let answer = get("/api/v1/operations?limit=5&limit=6").await;
    assert_eq!(
        problem(&answer, StatusCode::BAD_REQUEST, "bad-request"),
        "limit: given more than once; give it once"
    );
    let (s, _, v) = get("/api/v1/clusters/c/targets?owner=c-0&limit=2").await;
    assert_eq!(s, StatusCode::OK, "{v}");
}

/// A value outside a parameter's type, range or words is a 400 that names the parameter and
/// says in words what it takes; `limit` is 1 to 1000 on every list, as the document says
/// (0 is refused, not taken as 1 or as the default).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_values_are_named_with_their_range() {
    let app = app().await;
    let get = |uri: String| {
        let app = &app;
        async move { call(app, "GET", &uri, Some("viewer-token"), None).await }
    };
    for list in [
        "/api/v1/clusters/c/targets",
        "/api/v1/operations",
        "/api/v1/history",
    ] {
        for bad in ["-1", "0", "1001", "ten", "2.5", ""] {
            let answer = get(format!("{list}?limit={bad}")).await;
            assert_eq!(
                problem(&answer, StatusCode::BAD_REQUEST, "bad-request"),
                format!("limit: must be a whole number from 1 to 1000, not {bad:?}"),
                "{list}"
            );
        }
        let (s, _, v) = get(format!("{list}?limit=1000")).await;
        assert_eq!(s, StatusCode::OK, "{list}: {v}");
        let (s, _, v) = get(format!("{list}?limit=1")).await;
        assert_eq!(s, StatusCode::OK, "{list}: {v}");
    }
    let answer = get("/api/v1/clusters/c/targets?state=bogus".into()).await;
    assert_eq!(
        problem(&answer, StatusCode::BAD_REQUEST, "bad-request"),
        "state: must be one of owned, unassigned, moving, expired, unworked, orphaned, not \"bogus\""
    );
    let answer = get("/api/v1/operations?state=done".into()).await;
    let detail = problem(&answer, StatusCode::BAD_REQUEST, "bad-request");
    assert!(
        detail.starts_with("state: must be one of ") && detail.contains("succeeded"),
        "{detail}"
    );
    let answer = get("/api/v1/history?since_ms=-5".into()).await;
    assert_eq!(
        problem(&answer, StatusCode::BAD_REQUEST, "bad-request"),
        "since_ms: must be a whole number from 0 to 9223372036854775807, not \"-5\""
    );
    let answer = get("/api/v1/clusters/c/targets?cursor=zzz".into()).await;
    let detail = problem(&answer, StatusCode::BAD_REQUEST, "bad-request");
    assert!(detail.starts_with("cursor: "), "{detail}");
}

/// A filter naming a cluster the configuration does not have is a 404, not an empty list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filter_naming_an_unknown_cluster_is_not_found() {
    let app = app().await;
    for list in ["/api/v1/operations", "/api/v1/history"] {
        let answer = call(
            &app,
            "GET",
            &format!("{list}?cluster=nope"),
            Some("viewer-token"),
            None,
        )
        .await;
        assert_eq!(
            problem(&answer, StatusCode::NOT_FOUND, "not-found"),
            "cluster: no cluster named \"nope\"; the clusters are c",
            "{list}"
        );
        let (s, _, v) = call(
            &app,
            "GET",
            &format!("{list}?cluster=c"),
            Some("viewer-token"),
            None,
        )
        .await;
        assert_eq!(s, StatusCode::OK, "{list}: {v}");
    }
}

/// Errors answered outside the handlers are problem+json too: a method a path does not take
/// (405, the methods it takes in `Allow`), a body over the limit (413,
/// whether `Content-Length` says so up front or the body runs over), an unknown path (404).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_error_status_is_a_problem() {
    let app = app().await;
    let answer = send(&app, "DELETE", "/api/v1/clusters/c", &[VIEWER], "").await;
    let detail = problem(
        &answer,
        StatusCode::METHOD_NOT_ALLOWED,
        "method-not-allowed",
    );
    assert_eq!(answer.1[header::ALLOW], "GET,HEAD");
    assert_eq!(
        detail,
        "DELETE is not allowed on /api/v1/clusters/c; the Allow header lists the methods it takes"
    );
    let answer = send(&app, "GET", "/api/v1/clusters/c/rebalance", &[VIEWER], "").await;
    problem(
        &answer,
        StatusCode::METHOD_NOT_ALLOWED,
        "method-not-allowed",
    );
    let big = format!(r#"{{"reason": "{}"}}"#, "x".repeat(http::BODY_LIMIT));
    let length = big.len().to_string();
    let json = ("content-type", "application/json");
    let rebalance = "/api/v1/clusters/c/rebalance";
    let declared = send(
        &app,
        "POST",
        rebalance,
        &[OPERATOR, json, ("content-length", &length)],
        big.clone(),
    )
    .await;
    let streamed = send(&app, "POST", rebalance, &[OPERATOR, json], big).await;
    for answer in [declared, streamed] {
        let detail = problem(&answer, StatusCode::PAYLOAD_TOO_LARGE, "too-large");
        assert_eq!(
            detail,
            format!("the request body is larger than {} bytes", http::BODY_LIMIT)
        );
    }
    let answer = send(&app, "GET", "/api/v1/nothing-here", &[VIEWER], "").await;
    let detail = problem(&answer, StatusCode::NOT_FOUND, "not-found");
    assert!(detail.contains("/api/v1/nothing-here"), "{detail}");
}

/// A run (`dry_run: false`) with nothing to move starts nothing and records no operation: the
/// answer is the plan (200, no `Location`), and the audit says so. A run with moves starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_with_nothing_to_move_records_no_operation() {
    let app = app().await;
    let rebalance = "/api/v1/clusters/c/rebalance";
    let run = json!({"dry_run": false, "reason": "nothing to do"});
    let (s, h, v) = call(
        &app,
        "POST",
        rebalance,
        Some("operator-token"),
        Some(run.clone()),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert!(!h.contains_key(header::LOCATION), "{h:?}");
    assert!(v["id"].as_str().unwrap().starts_with("p-"), "the plan: {v}");
    assert_eq!(v["moves"], json!([]), "{v}");
    assert_eq!(operation_count(&app).await, 0);
    let (_, _, audit) = call(
        &app,
        "GET",
        "/api/v1/history?kind=audit",
        Some("viewer-token"),
        None,
    )
    .await;
    assert_eq!(
        audit["items"][0]["event"], "rebalance: nothing to move",
        "{audit}"
    );
    assert!(audit["items"][0]["operation"].is_null(), "{audit}");

    app.imbalance().await;
    let (s, h, v) = call(&app, "POST", rebalance, Some("operator-token"), Some(run)).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{v}");
    assert!(h.contains_key(header::LOCATION), "{h:?}");
    assert_eq!(operation_count(&app).await, 1);
}

/// History for an incident, over the router: the cluster as it was at a moment (API and page)
/// from the history recorded, each bad input a clear 400 (or 404) naming what it takes, never a
/// 500; the history page's time range, kept by its paging; an operation's lifecycle as one
/// entry with its moves counted whole; audit rows naming the action and linking the operation
/// they created; no stored word (`leases_cleaned`) on the page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_as_of_time_ranges_lifecycles_and_audit_words() {
    use leasehold::model::{Cause, OperationKind, OperationState};
    use leasehold::store::{NewMove, NewOperation, OwnershipChange};
    let app = app().await;
    let store = app.engine.store();
    // Whole seconds, an hour ago: t-0 and t-1 placed on c-0; over a minute later, 120 more
    // placements a second apart (longer than two pages); a removal of c-0 moves t-0 and t-1 to
    // c-1.
    let t0 = (leasehold::store::now_ms() / 1000 - 3600) * 1000;
    let iso = |ms: i64| jiff::Timestamp::from_millisecond(ms).unwrap().to_string();
    let field = |ms: i64| {
        jiff::Timestamp::from_millisecond(ms)
            .unwrap()
            .strftime("%Y-%m-%dT%H:%M:%S")
            .to_string()
    };
    let change = |target: &str, from: Option<&str>, to: &str, cause, op: Option<&str>, at_ms| {
        OwnershipChange {
            overlap: None,
            cluster: "c".into(),
            target: target.into(),
            from: from.map(Into::into),
            to: Some(to.into()),
            cause,
            operation: op.map(Into::into),
            at_ms,
            acquired_at_ms: Some(at_ms),
            gap_ms: from.map(|_| 40),
        }
    };
    let mut placed: Vec<OwnershipChange> = ["t-0", "t-1"]
        .iter()
        .map(|t| change(t, None, "c-0", Cause::Initial, None, t0))
        .collect();
    placed.extend((0..120).map(|i| {
        change(
            &format!("x-{i:03}"),
            None,
            "c-1",
            Cause::Initial,
            None,
            t0 + 70_000 + i * 1000,
        )
    }));
    store.record_ownerships(&placed).await.unwrap();
    let op = store
        .create_operation(&NewOperation {
            cluster: "c".into(),
            kind: OperationKind::RemoveInstance,
            state: OperationState::Pending,
            requested_by: "olga".into(),
            reason: "node drain".into(),
            instance: Some("c-0".into()),
            params: json!({}),
            moves: ["t-0", "t-1"]
                .iter()
                .map(|t| NewMove {
                    target: (*t).into(),
                    from: Some("c-0".into()),
                    to: "c-1".into(),
                })
                .collect(),
            now_ms: t0 + 200_000,
        })
        .await
        .unwrap();
    store
        .record_audit(
            "c",
            "olga",
            "remove instance c-0",
            "ok",
            Some(&op.id),
            t0 + 200_000,
        )
        .await
        .unwrap();
    let to_running = [OperationState::Pending];
    store
        .set_operation_state(
            &op.id,
            &to_running,
            OperationState::Running,
            None,
            t0 + 201_000,
        )
        .await
        .unwrap();
    store
        .record_ownerships(&[
            change(
                "t-0",
                Some("c-0"),
                "c-1",
                Cause::Removal,
                Some(&op.id),
                t0 + 202_000,
            ),
            change(
                "t-1",
                Some("c-0"),
                "c-1",
                Cause::Removal,
                Some(&op.id),
                t0 + 203_000,
            ),
        ])
        .await
        .unwrap();
    store
        .set_operation_phase(&op.id, "leases_cleaned", t0 + 204_000)
        .await
        .unwrap();
    store
        .set_operation_state(
            &op.id,
            &[OperationState::Running],
            OperationState::Succeeded,
            None,
            t0 + 205_000,
        )
        .await
        .unwrap();
    store
        .record_audit(
            "c",
            "vera",
            "pause automatic rebalancing: incident",
            "refused: vera may not rebalance cluster c",
            None,
            t0 + 206_000,
        )
        .await
        .unwrap();
    let get = async |uri: &str| call(&app, "GET", uri, Some("viewer-token"), None).await;
    let html = |v: Value| v.as_str().unwrap_or_default().to_owned();

    // The API, as a viewer: before the removal t-0 was held by c-0; after, by c-1; t-2 (never
    // moved) is not recorded; the operation was under way in between.
    let (s, _, v) = get(&format!(
        "/api/v1/clusters/c/as-of?at={}",
        iso(t0 + 100_000)
    ))
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let target = |v: &Value, key: &str| {
        v["targets"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["target"] == key)
            .cloned()
            .unwrap_or_else(|| panic!("no {key} in {v}"))
    };
    assert_eq!(target(&v, "t-0")["state"], "held");
    assert_eq!(target(&v, "t-0")["holder"], "c-0");
    assert_eq!(target(&v, "t-2")["state"], "not_recorded");
    assert_eq!(v["history_from_ms"], t0);
    assert!(
        v["limits"].as_str().unwrap().contains("not recorded"),
        "{v}"
    );
    let (_, _, mid) = get(&format!(
        "/api/v1/clusters/c/as-of?at={}",
        iso(t0 + 202_500)
    ))
    .await;
    assert_eq!(target(&mid, "t-0")["holder"], "c-1");
    assert_eq!(target(&mid, "t-1")["holder"], "c-0");
    assert_eq!(mid["operations"][0]["id"], op.id.as_str());
    assert_eq!(mid["operations"][0]["step"], "running");
    let (_, _, after) = get(&format!(
        "/api/v1/clusters/c/as-of?at={}",
        iso(t0 + 300_000)
    ))
    .await;
    assert_eq!(target(&after, "t-1")["holder"], "c-1");
    assert_eq!(target(&after, "t-1")["cause"], "removal");
    assert!(after["operations"].as_array().unwrap().is_empty(), "ended");
    // Bad input: 400 naming `at` and what it takes; unknown parameters and clusters.
    for (uri, want, says) in [
        (
            "/api/v1/clusters/c/as-of",
            StatusCode::BAD_REQUEST,
            "at: required",
        ),
        (
            "/api/v1/clusters/c/as-of?at=yesterday",
            StatusCode::BAD_REQUEST,
            "RFC 3339",
        ),
        (
            "/api/v1/clusters/c/as-of?at=2026-12-07T02:43:00",
            StatusCode::BAD_REQUEST,
            "offset",
        ),
        (
            "/api/v1/clusters/c/as-of?at=2026-12-07T02:43:00Z&when=1",
            StatusCode::BAD_REQUEST,
            "when",
        ),
        (
            "/api/v1/clusters/nope/as-of?at=2026-12-07T02:43:00Z",
            StatusCode::NOT_FOUND,
            "nope",
        ),
    ] {
        let (s, h, v) = get(uri).await;
        assert_eq!(s, want, "{uri}: {v}");
        assert_eq!(h[header::CONTENT_TYPE], "application/problem+json", "{uri}");
        assert!(v["detail"].as_str().unwrap().contains(says), "{uri}: {v}");
    }

    // The page: reconstructed, and saying so; c-0 held both then.
    let (s, _, page) = get(&format!("/clusters/c/as-of?t={}", field(t0 + 100_000))).await;
    let page = html(page);
    assert_eq!(s, StatusCode::OK, "{page}");
    assert!(page.contains("Reconstructed from the history"), "{page}");
    assert!(page.contains("c-0 held 2"), "{page}");
    assert!(page.contains("not recorded"), "{page}");
    for bad in ["yesterday", "2026-02-30T00:00"] {
        let (s, _, page) = get(&format!("/clusters/c/as-of?t={bad}")).await;
        let page = html(page);
        assert_eq!(s, StatusCode::BAD_REQUEST, "{page}");
        assert!(
            page.contains("id=\"as-of-problem\"") && page.contains("is not a time"),
            "{page}"
        );
        assert!(page.contains("<form"), "the form stays to fix it");
    }
    let (s, _, _) = get("/clusters/nope/as-of").await;
    assert_eq!(s, StatusCode::NOT_FOUND);

    // The history page's time range: only what is in it, paged with the range kept.
    let range = format!(
        "/history?cluster=c&from={}&to={}",
        field(t0 + 70_000),
        field(t0 + 200_000)
    );
    let (s, _, page) = get(&range).await;
    let page = html(page);
    assert_eq!(s, StatusCode::OK, "{page}");
    assert!(
        page.contains("120 targets</strong> placed"),
        "counted whole: {page}"
    );
    assert!(
        !page.contains("t-0</code>"),
        "t-0's placement is before the range"
    );
    // Older pages, each with the range kept, each counting the placements whole.
    let mut pages = 1;
    let mut at = page.clone();
    while let Some(link) = at
        .split("rel=\"next\"")
        .next()
        .filter(|_| at.contains("rel=\"next\""))
    {
        let older = link
            .rsplit("href=\"")
            .next()
            .unwrap()
            .split('"')
            .next()
            .unwrap()
            .replace("&#38;", "&")
            .replace("&amp;", "&");
        assert!(older.contains("from=") && older.contains("to="), "{older}");
        let (s, _, next) = get(&older).await;
        at = html(next);
        assert_eq!(s, StatusCode::OK);
        assert!(at.contains("120 targets</strong> placed"), "{at}");
        pages += 1;
    }
    assert_eq!(pages, 3, "120 rows, 50 a page");
    // Each line's time opens its cluster as it was then.
    assert!(page.contains("/clusters/c/as-of?t="), "{page}");
    // Bad values: an error box and the form, not a 500.
    for (q, want, says) in [
        (
            "from=yesterday",
            StatusCode::BAD_REQUEST,
            "From: &#34;yesterday&#34; is not a time",
        ),
        (
            "from=2026-12-07T03:00&to=2026-12-07T02:00",
            StatusCode::BAD_REQUEST,
            "before it starts",
        ),
        ("kind=moves", StatusCode::BAD_REQUEST, "the kinds are"),
        ("cluster=nope", StatusCode::NOT_FOUND, "no cluster named"),
    ] {
        let (s, _, page) = get(&format!("/history?{q}")).await;
        let page = html(page);
        assert_eq!(s, want, "{q}: {page}");
        assert!(page.contains("id=\"history-problem\""), "{q}: {page}");
        assert!(page.contains(says), "{q}: {page}");
        assert!(page.contains("<form"), "{q}");
    }

    // The removal as one entry: its lifecycle and its moves, counted, linked; the audit rows
    // name the action and link the operation; no stored word is shown.
    let (_, _, page) = get("/history?cluster=c&kind=").await;
    let page = html(page);
    assert_eq!(
        page.matches(&format!("data-operation=\"{}\"", op.id))
            .count(),
        1,
        "{page}"
    );
    assert!(page.contains("Remove instance c-0</strong>"), "{page}");
    assert!(page.contains("2 targets moved"), "{page}");
    assert!(page.contains("leftover Leases cleaned up"), "{page}");
    assert!(page.contains(">started<"), "{page}");
    assert!(
        page.contains("olga</strong> asked: <span class=\"action\">Remove instance c-0</span>"),
        "{page}"
    );
    assert!(
        page.contains(&format!(
            "→ <a href=\"/operations/{}\">its operation</a>",
            op.id
        )),
        "{page}"
    );
    assert!(
        page.contains("Pause automatic rebalancing: incident"),
        "{page}"
    );
    assert!(page.contains("vera may not rebalance cluster c"), "{page}");
    for raw in ["leases_cleaned", "remove_instance"] {
        assert!(!page.contains(raw), "{raw} shown: {page}");
    }
    // Listed without its moves (only operation steps), it still counts them all.
    let (_, _, steps) = get("/history?cluster=c&kind=operation").await;
    let steps = html(steps);
    assert!(steps.contains("2 targets moved"), "{steps}");
    assert!(steps.contains("data-moved=\"2\""), "{steps}");
}
