//! Router tests of the dashboard with `tower::ServiceExt::oneshot` (the browser tests in
//! `tests/it/browser.rs` drive the same pages in Chromium): every page renders for a viewer and
//! sends a stranger to the login page; login starts a session with a safe cookie; forms
//! without the session's CSRF token, or from another site, are refused; logout ends the
//! session; a viewer cannot change anything; static assets revalidate with an ETag; under
//! `leasehold demo`, the demo controls offer what applies and say what they did; `/docs` has
//! a viewport.

use crate::common;

use std::collections::BTreeMap;

use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode, header};
use http_body_util::BodyExt as _;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use leasehold::http::demo::{Answer, DemoAction, DemoControls, MemberState, Outcome};
use tower::ServiceExt as _;

use common::app::{App, app, app_with_demo, app_with_tls, call};

/// What a request came back with.
struct Res {
    status: StatusCode,
    headers: HeaderMap,
    body: String,
}

async fn send(app: &App, req: Request<Body>) -> Res {
    let res = app.router.clone().oneshot(req).await.unwrap();
    let status = res.status();
    let headers = res.headers().clone();
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    Res {
        status,
        headers,
        body: String::from_utf8_lossy(&bytes).into_owned(),
    }
}

async fn get(app: &App, uri: &str, auth: Auth<'_>) -> Res {
    send(
        app,
        auth.apply(Request::get(uri)).body(Body::empty()).unwrap(),
    )
    .await
}

async fn post_form(app: &App, uri: &str, auth: Auth<'_>, form: &[(&str, &str)]) -> Res {
    let body = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(form)
        .finish();
    let req = auth
        .apply(Request::post(uri))
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from(body))
        .unwrap();
    send(app, req).await
}

/// How a request proves who it is.
#[derive(Clone, Copy)]
enum Auth<'a> {
    None,
    Bearer(&'a str),
    Cookie(&'a str),
    /// A session cookie on a request another site's page made.
    CrossSite(&'a str),
}

impl Auth<'_> {
    fn apply(self, b: axum::http::request::Builder) -> axum::http::request::Builder {
        match self {
            Auth::None => b,
            Auth::Bearer(t) => b.header(header::AUTHORIZATION, format!("Bearer {t}")),
            Auth::Cookie(c) => b.header(header::COOKIE, c),
            Auth::CrossSite(c) => b
                .header(header::COOKIE, c)
                .header("sec-fetch-site", "cross-site")
                .header(header::ORIGIN, "https://evil.example"),
        }
    }
}

/// Logs in with `token`: the session cookie (`name=value`) and the page's CSRF token.
async fn login(app: &App, token: &str) -> (String, String) {
    let res = post_form(
        app,
        "/login",
        Auth::None,
        &[("token", token), ("next", "/")],
    )
    .await;
    assert_eq!(res.status, StatusCode::SEE_OTHER, "{}", res.body);
    let set = res.headers[header::SET_COOKIE].to_str().unwrap().to_owned();
    for attr in ["HttpOnly", "SameSite=Strict", "Path=/", "Max-Age="] {
        assert!(set.contains(attr), "cookie without {attr}: {set}");
    }
    assert!(!set.contains(token), "the cookie must not carry the token");
    let cookie = set.split(';').next().unwrap().to_owned();
    let page = get(app, "/", Auth::Cookie(&cookie)).await;
    assert_eq!(page.status, StatusCode::OK);
    (cookie, csrf_of(&page.body))
}

fn csrf_of(html: &str) -> String {
    let at = html
        .find(r#"name="csrf" value=""#)
        .expect("a form with the CSRF token");
    let rest = &html[at + r#"name="csrf" value=""#.len()..];
    rest[..rest.find('"').unwrap()].to_owned()
}

/// Two ready members, `c-0` and `c-1` (no kubelet here: the test reports them ready), each
/// with a live member Lease (an hour long: no agent renews it here).
async fn with_member(app: &App) {
    let pods: Api<Pod> = Api::namespaced(app.t.client.clone(), &app.ns);
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(app.t.client.clone(), &app.ns);
    for (name, ip) in [("c-0", "10.0.0.10"), ("c-1", "10.0.0.11")] {
        let member = leasehold::protocol::new_member_lease(
            "leasehold",
            "c",
            name,
            jiff::Timestamp::now(),
            3600,
            false,
        );
        leases
            .create(&PostParams::default(), &member)
            .await
            .unwrap();
        let pod = serde_json::from_value(common::mk_pod(name, serde_json::json!({"app": "c"})));
        pods.create(&PostParams::default(), &pod.unwrap())
            .await
            .unwrap();
        let status = serde_json::json!({"status": {"phase": "Running", "podIP": ip,
            "conditions": [{"type": "Ready", "status": "True"}]}});
        pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .unwrap();
    }
    let seen = common::eventually(std::time::Duration::from_secs(10), || async {
        let res = get(app, "/clusters/c/instances", Auth::Bearer("viewer-token")).await;
        (res.body.matches("tag ok\">ready").count() == 2).then_some(())
    })
    .await;
    assert!(seen.is_some(), "the members never showed up ready");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_renders_and_strangers_are_sent_to_log_in() {
    let app = app().await;
    with_member(&app).await;
    let pages = [
        ("/", "Clusters"),
        ("/clusters/c", "Recent events"),
        ("/clusters/c/instances", "Replication instances of c"),
        (
            "/clusters/c/instances/c-0",
            "calls no webhook (none configured)",
        ),
        ("/clusters/c/targets", "t-0"),
        ("/clusters/c/targets?q=T-3", "t-3"),
        (
            "/clusters/c/targets?state=unassigned",
            "1–5 of 5 targets that match",
        ),
        ("/clusters/c/targets/t-2", "Ownership timeline"),
        ("/operations", "Operations"),
        (
            "/operations?kind=remove_instance",
            "<option value=\"remove_instance\" selected>remove instance</option>",
        ),
        ("/history", "History"),
        ("/history?cluster=c&kind=instance", "History"),
    ];
    for (uri, marker) in pages {
        let res = get(&app, uri, Auth::Bearer("viewer-token")).await;
        assert_eq!(res.status, StatusCode::OK, "{uri}: {}", res.body);
        assert!(
            res.headers[header::CONTENT_TYPE]
                .to_str()
                .unwrap()
                .starts_with("text/html"),
            "{uri}"
        );
        assert!(res.body.contains(marker), "{uri} lacks {marker:?}");
        assert!(!res.body.contains("<script>"), "{uri} has an inline script");
        let csp = res.headers[header::CONTENT_SECURITY_POLICY]
            .to_str()
            .unwrap();
        assert!(csp.contains("script-src 'self'"), "{uri}: {csp}");

        let stranger = get(&app, uri, Auth::None).await;
        assert_eq!(stranger.status, StatusCode::SEE_OTHER, "{uri}");
        let to = stranger.headers[header::LOCATION].to_str().unwrap();
        assert!(to.starts_with("/login?next=%2F"), "{uri} → {to}");
    }
    // The plans are for everyone who may read; a viewer sees them read-only, told what
    // starting one needs instead of the button.
    for uri in ["/clusters/c/rebalance", "/clusters/c/instances/c-0/remove"] {
        let viewer = get(&app, uri, Auth::Bearer("viewer-token")).await;
        assert_eq!(viewer.status, StatusCode::OK, "{uri}: {}", viewer.body);
        assert!(viewer.body.contains("Imbalance before"), "{uri}");
        assert!(
            viewer.body.contains("needs the operator role or higher"),
            "{uri}: {}",
            viewer.body
        );
        assert!(!viewer.body.contains("id=\"confirm\""), "{uri}");
        let operator = get(&app, uri, Auth::Bearer("operator-token")).await;
        assert_eq!(operator.status, StatusCode::OK, "{uri}: {}", operator.body);
        assert!(operator.body.contains("Imbalance before"), "{uri}");
        assert!(!operator.body.contains("id=\"needs\""), "{uri}");
    }
    // Errors are pages too.
    let missing = get(&app, "/clusters/nope", Auth::Bearer("viewer-token")).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert!(missing.body.contains("<!doctype html>"));
    let bad = get(
        &app,
        "/clusters/c/targets?state=lost",
        Auth::Bearer("viewer-token"),
    )
    .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    // Someone with no role is known but may read nothing.
    let nobody = get(&app, "/", Auth::Bearer("nobody-token")).await;
    assert_eq!(nobody.status, StatusCode::FORBIDDEN);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_sessions_csrf_and_logout() {
    let app = app().await;
    with_member(&app).await;

    let wrong = post_form(&app, "/login", Auth::None, &[("token", "guess")]).await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    assert!(wrong.body.contains("not valid"));
    assert!(!wrong.headers.contains_key(header::SET_COOKIE));
    // `next` never leaves the site.
    let off = post_form(
        &app,
        "/login",
        Auth::None,
        &[("token", "viewer-token"), ("next", "//evil.example/")],
    )
    .await;
    assert_eq!(off.headers[header::LOCATION], "/");

    let (cookie, csrf) = login(&app, "operator-token").await;
    let uncordon = "/clusters/c/instances/c-0/uncordon";
    // No token, a wrong token, and the right token from another site: refused.
    for (auth, form) in [
        (Auth::Cookie(&cookie), vec![]),
        (Auth::Cookie(&cookie), vec![("csrf", "forged")]),
        (Auth::CrossSite(&cookie), vec![("csrf", csrf.as_str())]),
    ] {
        let res = post_form(&app, uncordon, auth, &form).await;
        assert_eq!(res.status, StatusCode::FORBIDDEN, "{form:?}: {}", res.body);
        assert!(
            res.body.contains("urn:leasehold:problem:csrf"),
            "{}",
            res.body
        );
    }
    let ok = post_form(&app, uncordon, Auth::Cookie(&cookie), &[("csrf", &csrf)]).await;
    assert_eq!(ok.status, StatusCode::SEE_OTHER, "{}", ok.body);
    assert_eq!(ok.headers[header::LOCATION], "/clusters/c/instances");

    // The JSON API with a session cookie wants the token in a header.
    let api = |token: Option<&str>| {
        let mut b = Request::post("/api/v1/clusters/c/rebalance")
            .header(header::COOKIE, &cookie)
            .header(header::CONTENT_TYPE, "application/json");
        if let Some(t) = token {
            b = b.header("x-csrf-token", t);
        }
        b.body(Body::from("{}")).unwrap()
    };
    assert_eq!(send(&app, api(None)).await.status, StatusCode::FORBIDDEN);
    assert_eq!(
        send(&app, api(Some("forged"))).await.status,
        StatusCode::FORBIDDEN
    );
    assert_eq!(send(&app, api(Some(&csrf))).await.status, StatusCode::OK);

    // The audit names the operator behind the session.
    let history = get(&app, "/history?kind=audit", Auth::Cookie(&cookie)).await;
    assert!(history.body.contains("otto"), "{}", history.body);
    assert!(history.body.contains("Uncordon c-0"), "{}", history.body);

    // Logout needs the token too, then the cookie is worthless.
    let res = post_form(&app, "/logout", Auth::Cookie(&cookie), &[]).await;
    assert_eq!(res.status, StatusCode::FORBIDDEN);
    let res = post_form(&app, "/logout", Auth::Cookie(&cookie), &[("csrf", &csrf)]).await;
    assert_eq!(res.status, StatusCode::SEE_OTHER);
    assert!(
        res.headers[header::SET_COOKIE]
            .to_str()
            .unwrap()
            .contains("Max-Age=0")
    );
    let after = get(&app, "/", Auth::Cookie(&cookie)).await;
    assert_eq!(after.status, StatusCode::SEE_OTHER);

    // A viewer's session can look but not change.
    let (cookie, csrf) = login(&app, "viewer-token").await;
    let res = post_form(&app, uncordon, Auth::Cookie(&cookie), &[("csrf", &csrf)]).await;
    assert_eq!(res.status, StatusCode::FORBIDDEN);
    assert!(res.body.contains("may not uncordon"), "{}", res.body);
}

/// A proposed rebalance shows an Approve form (CSRF-guarded like every form); approving runs
/// it, and a proposal that no longer fits is refused with the reason on the error page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proposal_is_approved_from_its_page() {
    let app = app().await;
    let (cookie, csrf) = login(&app, "operator-token").await;
    let fits = app.propose(&[]).await;
    let page = format!("/operations/{fits}");
    let shown = get(&app, &page, Auth::Cookie(&cookie)).await;
    assert_eq!(shown.status, StatusCode::OK);
    assert!(shown.body.contains(r#"id="approve""#), "{}", shown.body);
    let approve = format!("{page}/approve");
    let forged = post_form(&app, &approve, Auth::Cookie(&cookie), &[("csrf", "forged")]).await;
    assert_eq!(forged.status, StatusCode::FORBIDDEN);
    let ok = post_form(&app, &approve, Auth::Cookie(&cookie), &[("csrf", &csrf)]).await;
    assert_eq!(ok.status, StatusCode::SEE_OTHER, "{}", ok.body);
    let back = ok.headers[header::LOCATION].to_str().unwrap();
    assert_eq!(
        percent_encoding::percent_decode_str(back)
            .decode_utf8()
            .unwrap(),
        page
    );
    let after = get(&app, back, Auth::Cookie(&cookie)).await;
    assert!(!after.body.contains(r#"id="approve""#), "{}", after.body);

    app.engine.cancel(&fits, "test").await.unwrap();
    let stale = app.propose(&[("t-0", None, "x")]).await;
    let res = post_form(
        &app,
        &format!("/operations/{stale}/approve"),
        Auth::Cookie(&cookie),
        &[("csrf", &csrf)],
    )
    .await;
    assert_eq!(res.status, StatusCode::CONFLICT, "{}", res.body);
    assert!(res.body.contains("destination x is gone"), "{}", res.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_assets_are_compiled_in_and_revalidate() {
    let app = app().await;
    for (file, mime) in [
        ("app.css", "text/css"),
        ("app.js", "text/javascript"),
        ("favicon.svg", "image/svg+xml"),
    ] {
        let uri = format!("/static/{file}");
        let res = get(&app, &uri, Auth::None).await;
        assert_eq!(res.status, StatusCode::OK, "{file}");
        assert!(
            res.headers[header::CONTENT_TYPE]
                .to_str()
                .unwrap()
                .starts_with(mime)
        );
        assert_eq!(
            res.body,
            std::fs::read_to_string(format!("static/{file}")).unwrap()
        );
        let etag = res.headers[header::ETAG].clone();
        let again = send(
            &app,
            Request::get(&uri)
                .header(header::IF_NONE_MATCH, etag)
                .body(Body::empty())
                .unwrap(),
        )
        .await;
        assert_eq!(again.status, StatusCode::NOT_MODIFIED, "{file}");
    }
    assert_eq!(
        get(&app, "/static/nope.js", Auth::None).await.status,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_cookies_are_secure_under_tls() {
    for (tls, secure) in [(true, true), (false, false)] {
        let app = app_with_tls(tls).await;
        let res = post_form(&app, "/login", Auth::None, &[("token", "viewer-token")]).await;
        assert_eq!(res.status, StatusCode::SEE_OTHER);
        let set = res.headers[header::SET_COOKIE].to_str().unwrap();
        assert_eq!(set.contains("; Secure"), secure, "tls {tls}: {set}");
    }
}

/// The rebalance page carries the id of the plan it shows, inside the live region (so it
/// follows the plan shown); a start with a plan the cluster no longer gives is refused with
/// the fresh plan on the page, to review and start, and nothing runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_preview_is_refused_and_the_fresh_plan_shown() {
    let app = app().await;
    let (cookie, csrf) = login(&app, "operator-token").await;
    let page = "/clusters/c/rebalance";
    // Nothing to move yet: the form starts nothing and records no operation, and says so.
    let nothing = post_form(&app, page, Auth::Cookie(&cookie), &[("csrf", &csrf)]).await;
    assert_eq!(nothing.status, StatusCode::OK, "{}", nothing.body);
    assert!(nothing.body.contains("Nothing to move"), "{}", nothing.body);
    app.imbalance().await;
    let shown = get(&app, page, Auth::Cookie(&cookie)).await;
    assert_eq!(shown.status, StatusCode::OK);
    let live = &shown.body[shown.body.find(r#"id="plan""#).unwrap()..];
    let id_at = live
        .find(r#"name="plan_id""#)
        .expect("the plan id is in the live region");
    let id = live[id_at..]
        .split("value=\"")
        .nth(1)
        .and_then(|v| v.split('"').next())
        .unwrap()
        .to_owned();
    assert!(id.starts_with("p-"), "{id}");
    let stale = post_form(
        &app,
        page,
        Auth::Cookie(&cookie),
        &[("csrf", &csrf), ("plan_id", "p-0123456789abcdef")],
    )
    .await;
    assert_eq!(stale.status, StatusCode::CONFLICT, "{}", stale.body);
    assert!(
        stale.body.contains(r#"id="plan-changed""#),
        "{}",
        stale.body
    );
    assert!(stale.body.contains("p-0123456789abcdef"), "{}", stale.body);
    assert!(
        stale.body.contains(&format!(r#"value="{id}""#)),
        "the fresh plan's id, to start it: {}",
        stale.body
    );
    let ops = app
        .engine
        .store()
        .operations(&Default::default())
        .await
        .unwrap();
    assert!(ops.items.is_empty(), "nothing started: {:?}", ops.items);
    let ok = post_form(
        &app,
        page,
        Auth::Cookie(&cookie),
        &[("csrf", &csrf), ("plan_id", &id)],
    )
    .await;
    assert_eq!(ok.status, StatusCode::SEE_OTHER, "{}", ok.body);
}

/// The cluster page says whether a join starts a rebalance, and pauses and resumes it (an
/// operator's form, audited); the API agrees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn automatic_rebalancing_is_paused_and_resumed_from_the_cluster_page() {
    let app = app().await;
    let (cookie, csrf) = login(&app, "operator-token").await;
    let page = get(&app, "/clusters/c", Auth::Cookie(&cookie)).await;
    assert!(
        page.body.contains("Pause automatic rebalancing"),
        "{}",
        page.body
    );
    let paused = post_form(
        &app,
        "/clusters/c/automation",
        Auth::Cookie(&cookie),
        &[
            ("csrf", &csrf),
            ("paused", "true"),
            ("reason", "change freeze"),
        ],
    )
    .await;
    assert_eq!(paused.status, StatusCode::SEE_OTHER, "{}", paused.body);
    // A viewer sees the pause, and what resuming it would need instead of the button.
    let page = get(&app, "/clusters/c", Auth::Bearer("viewer-token")).await;
    assert!(page.body.contains("change freeze"), "{}", page.body);
    assert!(
        !page.body.contains("Resume automatic rebalancing")
            && page.body.contains("id=\"automation-needs\"")
            && page.body.contains("resuming needs the operator role"),
        "{}",
        page.body
    );
    let page = get(&app, "/clusters/c", Auth::Cookie(&cookie)).await;
    assert!(
        page.body.contains("Resume automatic rebalancing"),
        "{}",
        page.body
    );
    let api = get(
        &app,
        "/api/v1/clusters/c/automation",
        Auth::Bearer("viewer-token"),
    )
    .await;
    assert!(api.body.contains("change freeze"), "{}", api.body);
    let resumed = post_form(
        &app,
        "/clusters/c/automation",
        Auth::Cookie(&cookie),
        &[("csrf", &csrf), ("paused", "false")],
    )
    .await;
    assert_eq!(resumed.status, StatusCode::SEE_OTHER);
    let page = get(&app, "/clusters/c", Auth::Cookie(&cookie)).await;
    assert!(
        page.body.contains("Pause automatic rebalancing"),
        "{}",
        page.body
    );
    let audit = app
        .engine
        .store()
        .history(&leasehold::store::HistoryQuery {
            kind: Some(leasehold::store::HistoryKind::Audit),
            ..Default::default()
        })
        .await
        .unwrap();
    let said: Vec<String> = audit.items.iter().filter_map(|e| e.event.clone()).collect();
    assert!(
        said.iter()
            .any(|e| e.starts_with("pause automatic rebalancing: change freeze")),
        "{said:?}"
    );
    assert!(
        said.iter()
            .any(|e| e.starts_with("resume automatic rebalancing")),
        "{said:?}"
    );
}

/// An instance's page says what removing it would do here; an unknown instance is a 404 page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_page_states_what_removal_does_and_unknown_ones_are_404() {
    let app = app().await;
    with_member(&app).await;
    let page = get(
        &app,
        "/clusters/c/instances/c-1",
        Auth::Bearer("viewer-token"),
    )
    .await;
    assert_eq!(page.status, StatusCode::OK);
    for says in [
        "moves its 0 targets",
        "calls no webhook (none configured)",
        "leaves its pod alone",
        "/clusters/c/instances/c-1/remove",
        "10.0.0.11",
    ] {
        assert!(page.body.contains(says), "lacks {says:?}: {}", page.body);
    }
    let missing = get(
        &app,
        "/clusters/c/instances/nope",
        Auth::Bearer("viewer-token"),
    )
    .await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND, "{}", missing.body);
}

/// Serves the demo controls for cluster `c` as `leasehold demo`'s task would, without agents:
/// members `c-0` (running) and `c-1` (already stopping); an added member is `c-2`, `c-3`, …
fn fake_demo() -> DemoControls {
    let (controls, mut inbox) = DemoControls::channel();
    tokio::spawn(async move {
        let mut states = BTreeMap::from([
            ("c-0".to_owned(), MemberState::Running),
            ("c-1".to_owned(), MemberState::Stopping),
        ]);
        let mut next = 2;
        loop {
            inbox
                .members
                .send_replace(BTreeMap::from([("c".into(), states.clone())]));
            let Some(req) = inbox.requests.recv().await else {
                return;
            };
            let answer = match req.action {
                DemoAction::AddMember { .. } => {
                    let m = format!("c-{next}");
                    next += 1;
                    states.insert(m.clone(), MemberState::Running);
                    Answer::about(Outcome::Added, &m, format!("{m} started"))
                }
                DemoAction::StopMember { instance: m, .. } => match states.get(&m) {
                    Some(MemberState::Running) => {
                        states.insert(m.clone(), MemberState::Stopped);
                        Answer::about(Outcome::Stopped, &m, format!("{m} stopped"))
                    }
                    Some(MemberState::Crashed) => {
                        states.insert(m.clone(), MemberState::Stopped);
                        Answer::about(Outcome::PodDeleted, &m, format!("{m}'s pod deleted"))
                    }
                    _ => Answer::about(Outcome::StopRefused, &m, format!("{m} is not running")),
                },
                DemoAction::CrashMember { instance: m, .. } => match states.get(&m) {
                    Some(MemberState::Running) => {
                        states.insert(m.clone(), MemberState::Crashed);
                        Answer::about(Outcome::Crashed, &m, format!("{m} crashed"))
                    }
                    Some(MemberState::Crashed) => {
                        Answer::about(Outcome::AlreadyCrashed, &m, format!("{m} has crashed"))
                    }
                    _ => Answer::about(Outcome::CrashRefused, &m, format!("{m} is not running")),
                },
            };
            // The new states are published before the answer, as the demo task does.
            inbox
                .members
                .send_replace(BTreeMap::from([("c".into(), states.clone())]));
            let _ = req.reply.send(answer);
        }
    });
    controls
}

/// A demo control posted from the cluster page: the 303 and the page it leads to.
async fn demo_post(app: &App, path: &str, cookie: &str, csrf: &str) -> (String, Res) {
    let res = post_form(app, path, Auth::Cookie(cookie), &[("csrf", csrf)]).await;
    assert_eq!(res.status, StatusCode::SEE_OTHER, "{}", res.body);
    let to = res.headers[header::LOCATION].to_str().unwrap().to_owned();
    assert!(to.ends_with("#demo-h"), "lands on the demo section: {to}");
    let page = get(app, to.split('#').next().unwrap(), Auth::Cookie(cookie)).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    (to, page)
}

/// The text of the page's demo notice and whether it is an error, if there is one.
fn demo_notice(html: &str) -> Option<(bool, String)> {
    let at = html.find(r#"<p id="demo-notice""#)?;
    let p = &html[at..at + html[at..].find("</p>").unwrap()];
    let alert = p.contains(r#"class="error-box" role="alert""#);
    assert!(alert || p.contains(r#"role="status""#), "{p}");
    let text = p[p.find('>').unwrap() + 1..].replace(r#"<span class="tag ok">done</span> "#, "");
    Some((alert, text))
}

/// Under `leasehold demo` the cluster page offers each member only the controls that apply (a
/// member already stopping none, a crashed one the deletion of its pod), and after each control
/// the page it lands on says what was done, or why nothing was, in words; the query carrying
/// that is checked, not shown. (It used to land on the bare cluster page, and offered Stop and
/// Crash for every member.) The JSON answers are unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_controls_say_what_they_did_and_offer_only_what_applies() {
    let app = app_with_demo(fake_demo()).await;
    with_member(&app).await;
    let (cookie, csrf) = login(&app, "operator-token").await;

    let page = get(&app, "/clusters/c", Auth::Cookie(&cookie)).await;
    assert_eq!(page.status, StatusCode::OK);
    let body = &page.body;
    for offered in [
        "/members/c-0/stop",
        "/members/c-0/crash",
        "/demo/clusters/c/members\"",
    ] {
        assert!(body.contains(offered), "{offered} not offered: {body}");
    }
    for not in ["/members/c-1/stop", "/members/c-1/crash"] {
        assert!(
            !body.contains(not),
            "a stopping member offered {not}: {body}"
        );
    }
    assert!(
        body.contains(r#"<span class="tag warn">stopping</span>"#),
        "{body}"
    );
    assert_eq!(demo_notice(body), None);

    let (to, page) = demo_post(&app, "/demo/clusters/c/members", &cookie, &csrf).await;
    assert_eq!(to, "/clusters/c?demo=added&member=c-2#demo-h");
    let (alert, text) = demo_notice(&page.body).expect("a notice after adding");
    assert!(!alert && text.starts_with("Added member c-2:"), "{text}");

    let (_, page) = demo_post(&app, "/demo/clusters/c/members/c-0/crash", &cookie, &csrf).await;
    let (alert, text) = demo_notice(&page.body).expect("a notice after crashing");
    assert!(
        !alert && text.starts_with("Crashed c-0 (as SIGKILL would):"),
        "{text}"
    );
    assert!(text.contains("fail over"), "{text}");
    assert!(
        !page.body.contains("/members/c-0/crash"),
        "crashed: {}",
        page.body
    );
    assert!(
        page.body
            .contains(r#"<span class="tag bad">crashed</span>"#)
    );
    assert!(page.body.contains("Delete its failed pod"));

    let (_, page) = demo_post(&app, "/demo/clusters/c/members/c-0/stop", &cookie, &csrf).await;
    let (alert, text) = demo_notice(&page.body).expect("a notice after deleting the pod");
    assert!(
        !alert && text.starts_with("Deleted the failed pod of c-0"),
        "{text}"
    );

    let (_, page) = demo_post(&app, "/demo/clusters/c/members/c-2/stop", &cookie, &csrf).await;
    let (alert, text) = demo_notice(&page.body).expect("a notice after stopping");
    assert!(
        !alert && text.starts_with("Stopped c-2 gracefully (as SIGTERM would):"),
        "{text}"
    );
    assert!(text.contains("handed its targets over"), "{text}");

    // A refusal is an error on the same page, not an error page.
    let (to, page) = demo_post(&app, "/demo/clusters/c/members/c-1/crash", &cookie, &csrf).await;
    assert_eq!(to, "/clusters/c?demo=crash-refused&member=c-1#demo-h");
    let (alert, text) = demo_notice(&page.body).expect("a notice after a refusal");
    assert!(alert, "{text}");
    assert!(
        text.starts_with("Did not crash c-1: it is not a running member"),
        "{text}"
    );
    assert!(text.contains("/history?cluster=c&amp;kind=audit"), "{text}");

    // Only what the demo could have said is shown: a known key, a member it knows (for what
    // was done) or at least a pod's name (for a refusal).
    for forged in [
        "/clusters/c?demo=added&member=x-9",
        "/clusters/c?demo=added",
        "/clusters/c?demo=%3Cb%3Ehi&member=c-0",
        "/clusters/c?demo=stop-refused&member=Hello%20world",
    ] {
        let page = get(&app, forged, Auth::Cookie(&cookie)).await;
        assert_eq!(page.status, StatusCode::OK);
        assert_eq!(demo_notice(&page.body), None, "{forged}");
    }

    // The JSON API answers as before: the message, or a 400 problem.
    let (s, _, v) = call(
        &app,
        "POST",
        "/demo/clusters/c/members",
        Some("operator-token"),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v, serde_json::json!({"message": "c-3 started"}));
    let (s, h, v) = call(
        &app,
        "POST",
        "/demo/clusters/c/members/c-1/stop",
        Some("operator-token"),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(h[header::CONTENT_TYPE], "application/problem+json");
    assert_eq!(v["detail"], "c-1 is not running");
    // A viewer may not use them.
    let (s, _, _) = call(
        &app,
        "POST",
        "/demo/clusters/c/members",
        Some("viewer-token"),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::FORBIDDEN);
}

/// `/docs` (Swagger UI, vendored) has a viewport, so a phone does not lay it out as a shrunk
/// desktop page (its own `index.html` has none), and still loads: every asset its page names is
/// served from here, its initializer points at the document, under the docs' strict CSP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_docs_have_a_viewport_and_load_their_assets() {
    let app = app().await;
    let to = get(&app, "/docs", Auth::None).await;
    assert_eq!(to.headers[header::LOCATION], "/docs/");
    for uri in ["/docs/", "/docs/index.html"] {
        let page = get(&app, uri, Auth::None).await;
        assert_eq!(page.status, StatusCode::OK, "{uri}: {}", page.body);
        assert!(
            page.headers[header::CONTENT_TYPE]
                .to_str()
                .unwrap()
                .starts_with("text/html"),
            "{uri}"
        );
        let viewport = r#"<meta name="viewport" content="width=device-width, initial-scale=1">"#;
        assert_eq!(
            page.body.matches(viewport).count(),
            1,
            "{uri}: {}",
            page.body
        );
        let head = &page.body[..page.body.find("</head>").expect("a head")];
        assert!(head.contains(viewport), "{}", page.body);
        assert_eq!(
            page.headers[header::CONTENT_SECURITY_POLICY],
            leasehold::http::CSP_DOCS,
            "{uri}"
        );
        assert!(
            !page.body.contains("<script>"),
            "{uri} has an inline script"
        );
        assert!(
            !page.body.contains("http"),
            "{uri} names another site: {}",
            page.body
        );
        // Every asset the page names loads.
        let mut assets = Vec::new();
        for attr in ["src=\"", "href=\""] {
            for part in page.body.split(attr).skip(1) {
                assets.push(part[..part.find('"').unwrap()].to_owned());
            }
        }
        assert!(assets.len() >= 5, "{assets:?}");
        for asset in &assets {
            let path = format!("/docs/{}", asset.trim_start_matches("./"));
            let res = get(&app, &path, Auth::None).await;
            assert_eq!(res.status, StatusCode::OK, "{path}");
            assert!(!res.body.is_empty(), "{path}");
        }
    }
    let init = get(&app, "/docs/swagger-initializer.js", Auth::None).await;
    assert_eq!(init.status, StatusCode::OK);
    assert!(init.body.contains("\"/openapi.json\""), "{}", init.body);
    let doc = get(&app, "/openapi.json", Auth::None).await;
    assert_eq!(doc.status, StatusCode::OK);
    assert!(doc.body.contains("\"openapi\""));
}

/// The cluster page keeps its history rows between renders (`src/http/ui/recent.rs`); a move
/// made after a render still shows at once in its recent events and in its load over time, as
/// the API's history has it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_page_shows_a_move_made_after_it_was_rendered() {
    use k8s_openapi::api::coordination::v1::Lease;
    use leasehold::model::Cause;
    use leasehold::protocol::{self, Desire};

    let app = app().await;
    with_member(&app).await;
    let leases: Api<Lease> = Api::namespaced(app.t.client.clone(), &app.ns);
    let desire = Desire {
        overlap_ms: None,
        term: None,
        owner: "c-0".into(),
        cause: Cause::Initial,
        operation: None,
        duration_s: 60,
    };
    let lease = protocol::new_target_lease("leasehold", "c", "t-0", &desire);
    let name = lease.metadata.name.clone().unwrap();
    let lease = protocol::acquired(&lease, "c-0", jiff::Timestamp::now(), 60);
    leases.create(&PostParams::default(), &lease).await.unwrap();
    // The load table's row of `member`: now, fewest, most.
    let load = |html: &str, member: &str| -> Option<(u32, u32, u32)> {
        let table = &html[html.find(r#"<table id="load-table">"#)?..];
        let row = &table[table.find(&format!("<tr><td>{member}</td>"))?..];
        let row = &row[..row.find("</tr>")?];
        let n: Vec<u32> = row
            .split(r#"<td class="num">"#)
            .skip(1)
            .map(|c| c[..c.find('<').unwrap()].parse().unwrap())
            .collect();
        Some((n[0], n[1], n[2]))
    };
    let page = || async {
        get(&app, "/clusters/c", Auth::Bearer("viewer-token"))
            .await
            .body
    };
    // Rendered (and kept) once c-0 holds t-0.
    let first = common::eventually(std::time::Duration::from_secs(10), || async {
        let html = page().await;
        (load(&html, "c-0") == Some((1, 0, 1)) && html.contains("nobody → c-0")).then_some(html)
    })
    .await;
    let first = first.expect("the page never showed c-0 taking t-0");
    assert_eq!(load(&first, "c-1"), Some((0, 0, 0)), "{first}");

    let lease = leases.get(&name).await.unwrap();
    let lease = protocol::acquired(&lease, "c-1", jiff::Timestamp::now(), 60);
    leases
        .replace(&name, &PostParams::default(), &lease)
        .await
        .unwrap();
    // Load over time: c-0 held t-0 until the move, c-1 since. (The counts now come from the
    // latest model, which may reach the page a moment after history does.) Sooner than the
    // kept rows are read again in full (10 s): the new row is read by itself.
    let moved = common::eventually(std::time::Duration::from_secs(5), || async {
        let html = page().await;
        (html.contains("c-0 → c-1")
            && load(&html, "c-0") == Some((0, 0, 1))
            && load(&html, "c-1") == Some((1, 0, 1)))
        .then_some(html)
    })
    .await;
    let moved = moved.expect("the move never showed in the recent events and the load");
    // And the events agree with the API's history: the newest change first.
    let (s, _, v) = call(
        &app,
        "GET",
        "/api/v1/history?cluster=c&kind=ownership",
        Some("viewer-token"),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    let items = v["items"].as_array().unwrap();
    assert_eq!(items.len(), 2, "{v}");
    assert_eq!(
        (items[0]["from"].as_str(), items[0]["to"].as_str()),
        (Some("c-0"), Some("c-1"))
    );
    let events = &moved[moved.find(r#"id="cluster-events""#).unwrap()..];
    assert!(
        events.find("c-0 → c-1").unwrap() < events.find("nobody → c-0").unwrap(),
        "{events}"
    );
}

/// The counts a story states are the whole event's, not a page's (issue 34). An instance's page
/// lists its newest 50 history rows: with 30 of c-0's 100 placements among them it reads "100
/// targets placed"; after a crash that moved 75 (instance events among its rows) it reads "75
/// targets left", on the page of the instance that lost them and of the one that took them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_page_counts_each_event_whole() {
    use leasehold::model::{Cause, InstanceEventKind};
    use leasehold::store::{InstanceEvent, OwnershipChange, now_ms};

    let app = app().await;
    with_member(&app).await;
    let store = app.engine.store();
    let start = now_ms() - 20 * 60_000;
    let change = |target: String, from: Option<&str>, to: &str, cause, at_ms| OwnershipChange {
        overlap: None,
        cluster: "c".into(),
        target,
        from: from.map(Into::into),
        to: Some(to.into()),
        cause,
        operation: None,
        at_ms,
        acquired_at_ms: Some(at_ms),
        gap_ms: from.map(|_| 30),
    };
    // Every "N targets" a page states, and the page of `instance`.
    let counts = |html: &str| -> Vec<u32> {
        html.split("<strong>")
            .skip(1)
            .filter_map(|s| s.split_once(" targets</strong>"))
            .filter_map(|(n, _)| n.parse().ok())
            .collect()
    };
    let page = async |instance: &str| {
        let uri = format!("/clusters/c/instances/{instance}");
        let res = get(&app, &uri, Auth::Bearer("viewer-token")).await;
        assert_eq!(res.status, StatusCode::OK, "{}", res.body);
        res.body
    };

    // First placement: 100 targets on c-0 and 75 on c-1, one event.
    let placed: Vec<OwnershipChange> = (0..175)
        .map(|i| {
            let to = if i < 100 { "c-0" } else { "c-1" };
            change(format!("p-{i}"), None, to, Cause::Initial, start + i)
        })
        .collect();
    store.record_ownerships(&placed).await.unwrap();
    // Five minutes on, c-0 hands 20 over to c-1.
    let handed: Vec<OwnershipChange> = (0..20)
        .map(|i| {
            let at = start + 5 * 60_000 + i;
            change(format!("p-{i}"), Some("c-0"), "c-1", Cause::Handoff, at)
        })
        .collect();
    store.record_ownerships(&handed).await.unwrap();
    // Each page: the 20 handed over and 30 of its placements, told whole.
    let c0 = page("c-0").await;
    assert_eq!(counts(&c0), [20, 100], "{c0}");
    assert!(c0.contains("<strong>100 targets</strong> placed"), "{c0}");
    assert!(c0.contains("on c-0 (100) in"), "{c0}");
    assert!(c0.contains("and 70 more, not listed here"), "{c0}");
    let c1 = page("c-1").await;
    assert_eq!(counts(&c1), [20, 75], "{c1}");
    assert!(c1.contains("on c-1 (75) in"), "{c1}");
    // The history page, filtered the same way, tells the same.
    let res = get(
        &app,
        "/history?cluster=c&instance=c-0",
        Auth::Bearer("viewer-token"),
    )
    .await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
    assert_eq!(counts(&res.body), [20, 100], "{}", res.body);

    // Five more minutes, c-1 crashes: its 75 fail over to c-0, with instance events among them.
    for i in 0..75 {
        let at = start + 10 * 60_000 + i * 10;
        let c = change(
            format!("p-{}", 100 + i),
            Some("c-1"),
            "c-0",
            Cause::Failover,
            at,
        );
        store.record_ownership(&c).await.unwrap();
        if i % 30 == 29 {
            let e = InstanceEvent {
                cluster: "c".into(),
                instance: "c-1".into(),
                kind: InstanceEventKind::NotReady,
                at_ms: at,
                detail: None,
            };
            store.record_instance_event(&e).await.unwrap();
        }
    }
    // c-0's newest 50 are the newest 50 of those moves; c-1's, some fewer between its events.
    for instance in ["c-0", "c-1"] {
        let html = page(instance).await;
        assert_eq!(counts(&html), [75], "{instance}: {html}");
        assert!(
            html.contains("<strong>75 targets</strong> left c-1"),
            "{html}"
        );
        assert!(html.contains("for c-0 (75) in"), "{html}");
    }
}

/// One definition of imbalance (issue 34): for one cluster, the overview, the cluster page, the
/// rebalance page and every instance's removal page (the plan's "before", with the instance to
/// remove counted as it is now), and the API's summary and dry runs state the same value.
/// c-0 holds three of the five targets and c-1 two: the most loaded carries 3 against a fair
/// share of 2.5, 20 % over — balanced, as 3 and 2 is as even as five whole targets go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_and_the_api_state_one_imbalance() {
    use k8s_openapi::api::coordination::v1::Lease;
    use leasehold::model::Cause;
    use leasehold::protocol::{self, Desire};

    let app = app().await;
    with_member(&app).await;
    let leases: Api<Lease> = Api::namespaced(app.t.client.clone(), &app.ns);
    for (target, owner) in [
        ("t-0", "c-0"),
        ("t-1", "c-0"),
        ("t-2", "c-0"),
        ("t-3", "c-1"),
        ("t-4", "c-1"),
    ] {
        let desire = Desire {
            overlap_ms: None,
            term: None,
            owner: owner.into(),
            cause: Cause::Initial,
            operation: None,
            duration_s: 3600,
        };
        let lease = protocol::new_target_lease("leasehold", "c", target, &desire);
        let lease = protocol::acquired(&lease, owner, jiff::Timestamp::now(), 3600);
        leases.create(&PostParams::default(), &lease).await.unwrap();
    }
    // What follows `marker` up to the next tag.
    let after = |html: &str, marker: &str| -> Option<String> {
        let rest = &html[html.find(marker)? + marker.len()..];
        Some(rest[..rest.find('<')?].trim().to_owned())
    };
    let overview = common::eventually(std::time::Duration::from_secs(10), || async {
        let html = get(&app, "/", Auth::Bearer("viewer-token")).await.body;
        let shown = after(&html, "<dt>Imbalance</dt><dd>")?;
        (shown != "0 %").then_some(shown)
    })
    .await
    .expect("the overview never showed the targets held");
    assert_eq!(overview, "20 %");
    let cluster = get(&app, "/clusters/c", Auth::Bearer("viewer-token")).await;
    assert_eq!(
        after(&cluster.body, "<dt>Imbalance</dt><dd>").as_deref(),
        Some("20 %")
    );
    for uri in [
        "/clusters/c/rebalance",
        "/clusters/c/instances/c-0/remove",
        "/clusters/c/instances/c-1/remove",
    ] {
        let plan = get(&app, uri, Auth::Bearer("operator-token")).await;
        assert_eq!(plan.status, StatusCode::OK, "{uri}: {}", plan.body);
        let before = after(&plan.body, "<dt>Imbalance before</dt><dd>");
        assert_eq!(before.as_deref(), Some("20 %"), "{uri}");
        assert!(
            plan.body
                .contains("<dt>Imbalance before</dt><dd>20 % <span class=\"muted\">(balanced)"),
            "{uri}"
        );
    }
    // The API says the same number.
    let (s, _, v) = call(&app, "GET", "/api/v1/clusters", Some("viewer-token"), None).await;
    assert_eq!(s, StatusCode::OK);
    let now = v[0]["imbalance"].as_f64().unwrap();
    assert!((now - 0.2).abs() < 1e-9, "{v}");
    for uri in [
        "/api/v1/clusters/c/rebalance",
        "/api/v1/clusters/c/instances/c-0/remove",
        "/api/v1/clusters/c/instances/c-1/remove",
    ] {
        let body = serde_json::json!({ "dry_run": true });
        let (s, _, v) = call(&app, "POST", uri, Some("operator-token"), Some(body)).await;
        assert_eq!(s, StatusCode::OK, "{uri}: {v}");
        assert_eq!(v["imbalance_before"].as_f64(), Some(now), "{uri}: {v}");
    }
}
