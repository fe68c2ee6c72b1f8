//! Router tests of `GET /metrics` with `tower::ServiceExt::oneshot`: a real engine watching the
//! simulator, a fresh SQLite history per test, token-file authentication. Checks that the
//! scrape needs no token and is OpenMetrics, that HTTP requests are timed under their route
//! template (never the raw path), that the watchers and the control loop record, and that a
//! handoff written to a target Lease shows up in the handoff-gap histogram.

use crate::common;

use common::app::{App, app_acting as app};

use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt as _;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, PostParams};
use leasehold::model::Cause;
use leasehold::protocol::{self, Desire};
use serde_json::json;
use tower::ServiceExt as _;

async fn get(app: &App, uri: &str, token: Option<&str>) -> (StatusCode, String, String) {
    let mut req = Request::builder().uri(uri);
    if let Some(t) = token {
        req = req.header(header::AUTHORIZATION, format!("Bearer {t}"));
    }
    let res = app
        .router
        .clone()
        .oneshot(req.body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = res.status();
    let ct = res
        .headers()
        .get(header::CONTENT_TYPE)
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    (status, ct, String::from_utf8(bytes.to_vec()).unwrap())
}

/// A scrape, without a token.
async fn scrape(app: &App) -> String {
    let (status, ct, body) = get(app, "/metrics", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        ct,
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    assert!(body.ends_with("# EOF\n"), "{body}");
    body
}

/// The value of the sample `series` (name and labels exactly as exposed), if present.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| v.parse().unwrap())
}

/// Scrapes until `series` is at least `min`; returns the last scrape.
async fn scrape_until(app: &App, series: &str, min: f64) -> String {
    let text = common::eventually(Duration::from_secs(20), || async {
        let text = scrape(app).await;
        sample(&text, series)
            .is_some_and(|v| v >= min)
            .then_some(text)
    })
    .await;
    match text {
        Some(t) => t,
        None => panic!("{series} never reached {min}:\n{}", scrape(app).await),
    }
}

#[tokio::test]
async fn scrape_shows_http_watch_and_reconcile_metrics() {
    let app = app().await;
    // A routed request (twice), an unauthenticated one and a path nobody routes.
    for _ in 0..2 {
        let (status, _, body) = get(&app, "/api/v1/clusters/c", Some("viewer-token")).await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    let (status, _, _) = get(&app, "/api/v1/clusters/c", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _, _) = get(&app, "/no/such/thing-42", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // A member pod appears: the Pod watch delivers an event.
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(app.t.client.clone(), &app.ns);
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "metadata": {"name": "c-0", "labels": {"app": "c"}},
            "spec": {"containers": [{"name": "m", "image": "busybox"}]}
        }))
        .unwrap(),
    )
    .await
    .unwrap();
    scrape_until(
        &app,
        &format!(
            r#"leasehold_watch_events_total{{namespace="{}",kind="pod",event="apply"}}"#,
            app.ns
        ),
        1.0,
    )
    .await;
    // The control loop runs once this replica acts.
    let text = scrape_until(
        &app,
        r#"leasehold_reconcile_duration_seconds_count{cluster="c"}"#,
        1.0,
    )
    .await;

    let route = r#"leasehold_http_request_duration_seconds_count{method="GET",route="/api/v1/clusters/{cluster}","#;
    assert_eq!(
        sample(&text, &format!(r#"{route}status="2xx"}}"#)),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, &format!(r#"{route}status="4xx"}}"#)),
        Some(1.0),
        "{text}"
    );
    assert!(
        sample(
            &text,
            r#"leasehold_http_request_duration_seconds_count{method="GET",route="unmatched",status="4xx"}"#
        )
        .is_some(),
        "{text}"
    );
    assert!(
        text.contains(
            r#"leasehold_http_request_duration_seconds_bucket{le="+Inf",method="GET",route="/api/v1/clusters/{cluster}",status="2xx"} 2"#
        ),
        "{text}"
    );
    assert!(
        !text.contains("/api/v1/clusters/c\"") && !text.contains("thing-42"),
        "raw paths leak into labels:\n{text}"
    );
    for kind in ["pod", "service", "endpointslice", "lease", "configmap"] {
        assert!(
            sample(
                &text,
                &format!(
                    r#"leasehold_watch_lists_total{{namespace="{}",kind="{kind}"}}"#,
                    app.ns
                )
            )
            .is_some_and(|v| v >= 1.0),
            "no list of {kind}:\n{text}"
        );
    }
    // Gauges from the model (a read may lag the index by up to 250 ms): one member, not
    // ready; five configured targets, none held.
    let text = scrape_until(&app, r#"leasehold_members{cluster="c"}"#, 1.0).await;
    assert_eq!(
        sample(&text, r#"leasehold_members_ready{cluster="c"}"#),
        Some(0.0)
    );
    assert_eq!(
        sample(
            &text,
            r#"leasehold_targets{cluster="c",state="unassigned"}"#
        ),
        Some(5.0)
    );
    assert_eq!(sample(&text, "leasehold_control_plane_acting"), Some(1.0));
    // The scrapes themselves are timed under their own route.
    assert!(text.contains(r#"route="/metrics",status="2xx""#), "{text}");
}

/// Writes `f(lease)` over the current Lease, again on conflict (the control loop may write the
/// desired owner in between).
async fn update(api: &Api<Lease>, name: &str, f: impl Fn(&Lease) -> Lease) {
    for _ in 0..20 {
        let current = api.get(name).await.unwrap();
        match api
            .replace(name, &PostParams::default(), &f(&current))
            .await
        {
            Ok(_) => return,
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => panic!("{e}"),
        }
    }
    panic!("too many conflicts on {name}");
}

/// A target released by one member and taken by another 300 ms later is one handoff of about
/// 300 ms in the histogram; the first owner is not a handoff.
#[tokio::test]
async fn handoff_gap_is_measured_from_release_to_acquire() {
    let app = app().await;
    let leases: Api<Lease> = Api::namespaced(app.t.client.clone(), &app.ns);
    let desire = Desire {
        overlap_ms: None,
        term: None,
        owner: "m-a".into(),
        cause: Cause::Initial,
        operation: None,
        duration_s: 10,
    };
    let lease = protocol::new_target_lease("leasehold", "c", "t-0", &desire);
    let name = lease.metadata.name.clone().unwrap();
    leases.create(&PostParams::default(), &lease).await.unwrap();
    let now = || jiff::Timestamp::now();
    update(&leases, &name, |l| protocol::held_by(l, "m-a", now(), 10)).await;
    scrape_until(
        &app,
        r#"leasehold_ownership_changes_total{cluster="c",cause="initial"}"#,
        1.0,
    )
    .await;
    update(&leases, &name, |l| protocol::released(l, now())).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    update(&leases, &name, |l| protocol::held_by(l, "m-b", now(), 10)).await;
    let text = scrape_until(
        &app,
        r#"leasehold_handoff_gap_seconds_count{cluster="c"}"#,
        1.0,
    )
    .await;
    assert_eq!(
        sample(&text, r#"leasehold_handoff_gap_seconds_count{cluster="c"}"#),
        Some(1.0),
        "{text}"
    );
    let sum = sample(&text, r#"leasehold_handoff_gap_seconds_sum{cluster="c"}"#).unwrap();
    assert!((0.25..5.0).contains(&sum), "gap {sum} s:\n{text}");
    assert!(!text.contains("m-a") && !text.contains("t-0"), "{text}");
}
