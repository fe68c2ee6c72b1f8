//! The scrape list over HTTP (`leasehold agent --scrape-sd-listen`), for the scraper in the
//! member's pod: Prometheus' HTTP service discovery (`GET /sd`) and the OpenTelemetry
//! Operator's Target Allocator collector API (`GET /scrape_configs`, `GET /jobs`,
//! `GET /jobs/{job}/targets?collector_id=ID`). Every list is what [`Scrape`] holds, and empty
//! once the member's authority has lapsed by this machine's clock, whether or not the member
//! loop has released its targets yet. Read-only; the formats are in `docs/scrape.md`.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::watch;

use super::{Group, Scrape};

/// What a path segment may hold unescaped (RFC 3986 unreserved): a job named `demo-app` is
/// linked as `/jobs/demo-app/targets`.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

#[derive(Clone)]
struct Served {
    scrape: Scrape,
    authority: watch::Receiver<Option<i64>>,
}

impl Served {
    /// The groups served at `now_unix_ms`: none without authority.
    fn groups(&self, now_unix_ms: i64) -> Vec<(Option<String>, Group)> {
        let holds = (*self.authority.borrow()).is_some_and(|d| now_unix_ms < d);
        if !holds {
            return Vec::new();
        }
        self.scrape.groups()
    }
}

/// The router: the lists of `scrape`, empty whenever `authority` (the member's published
/// deadline, [`crate::agent::Agent::authority`]) has passed.
pub fn router(scrape: Scrape, authority: watch::Receiver<Option<i64>>) -> axum::Router {
    axum::Router::new()
        .route("/sd", get(sd))
        .route("/scrape_configs", get(scrape_configs))
        .route("/jobs", get(jobs))
        .route("/jobs/{job}/targets", get(job_targets))
        .with_state(Served { scrape, authority })
}

fn now_unix_ms() -> i64 {
    jiff::Timestamp::now().as_millisecond()
}

/// `GET /sd`: every group, in Prometheus' HTTP SD format.
async fn sd(State(s): State<Served>) -> Json<Vec<Group>> {
    Json(
        s.groups(now_unix_ms())
            .into_iter()
            .map(|(_, g)| g)
            .collect(),
    )
}

/// `GET /scrape_configs`: job name → a scrape config naming only the job: the path and scheme
/// travel with each target as labels, the interval and timeout are the collector's own.
async fn scrape_configs(State(s): State<Served>) -> Json<BTreeMap<String, Value>> {
    Json(
        s.scrape
            .jobs()
            .into_iter()
            .map(|job| (job.clone(), json!({"job_name": job})))
            .collect(),
    )
}

/// `GET /jobs`: job name → the link to its targets.
async fn jobs(State(s): State<Served>) -> Json<BTreeMap<String, Value>> {
    Json(
        s.scrape
            .jobs()
            .into_iter()
            .map(|job| {
                let link = format!("/jobs/{}/targets", utf8_percent_encode(&job, SEGMENT));
                (job, json!({"_link": link}))
            })
            .collect(),
    )
}

#[derive(Deserialize)]
struct Collector {
    collector_id: Option<String>,
}

/// `GET /jobs/{job}/targets?collector_id=ID`: the groups of `job` (a target's `job`, or the
/// cluster's name) in HTTP SD format when `ID` is this member; `[]` for any other collector
/// (this agent serves its own member's targets only). 400 without `collector_id`.
async fn job_targets(
    State(s): State<Served>,
    Path(job): Path<String>,
    Query(q): Query<Collector>,
) -> Response {
    let Some(id) = q.collector_id else {
        return (
            StatusCode::BAD_REQUEST,
            "collector_id is required: this agent serves its own member's targets only\n",
        )
            .into_response();
    };
    let settings = s.scrape.settings();
    if id != settings.identity {
        return Json(Vec::<Group>::new()).into_response();
    }
    let groups: Vec<Group> = s
        .groups(now_unix_ms())
        .into_iter()
        .filter(|(j, _)| j.as_deref().unwrap_or(&settings.cluster) == job)
        .map(|(_, g)| g)
        .collect();
    Json(groups).into_response()
}

#[cfg(test)]
mod tests {
    use super::super::ScrapeSettings;
    use super::*;
    use crate::agent::{Assignment, Hooks};
    use http_body_util::BodyExt as _;
    use tower::ServiceExt as _;

    async fn get(router: &axum::Router, uri: &str) -> (StatusCode, Option<String>, Value) {
        let resp = router
            .clone()
            .oneshot(
                axum::http::Request::get(uri)
                    .body(axum::body::Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap();
        let status = resp.status();
        let ctype = resp
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_owned());
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        let value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        (status, ctype, value)
    }

    #[tokio::test]
    async fn the_lists_are_what_the_member_holds_and_empty_without_authority() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("targets.yaml");
        std::fs::write(
            &file,
            "- {key: a, scrape: {address: 'h:1', job: 'node/x'}}\n\
             - {key: b, scrape: {address: 'h:2', metrics_path: /m}}\n\
             - {key: c, scrape: {address: 'h:3'}}\n",
        )
        .unwrap();
        let scrape = Scrape::new(ScrapeSettings {
            targets_file: file,
            cluster: "c".into(),
            identity: "c-0".into(),
            collector: None,
        })
        .unwrap();
        let far = now_unix_ms() + 60_000;
        let (authority, rx) = watch::channel(Some(far));
        let router = router(scrape.clone(), rx);
        // Nothing held yet: an empty list, as JSON.
        let (status, ctype, body) = get(&router, "/sd").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(ctype.as_deref(), Some("application/json"));
        assert_eq!(body, json!([]));
        for (t, g) in [("a", 4), ("b", 2)] {
            let work = Assignment {
                target: t.into(),
                generation: g,
                deadline_unix_ms: Some(far),
            };
            scrape.on_acquire(&work).await.unwrap();
        }
        let (_, _, body) = get(&router, "/sd").await;
        assert_eq!(
            body,
            json!([
                {"targets": ["h:1"], "labels": {"job": "node/x", "leasehold_generation": "4", "leasehold_target": "a"}},
                {"targets": ["h:2"], "labels": {"__metrics_path__": "/m", "leasehold_generation": "2", "leasehold_target": "b"}},
            ])
        );
        // The Target Allocator's view: every job of the list, held here or not (c's is the
        // cluster's name); a job's targets for this collector only.
        let (_, _, body) = get(&router, "/scrape_configs").await;
        assert_eq!(
            body,
            json!({"c": {"job_name": "c"}, "node/x": {"job_name": "node/x"}})
        );
        let (_, _, body) = get(&router, "/jobs").await;
        assert_eq!(
            body,
            json!({"c": {"_link": "/jobs/c/targets"}, "node/x": {"_link": "/jobs/node%2Fx/targets"}})
        );
        let (status, ctype, body) = get(&router, "/jobs/node%2Fx/targets?collector_id=c-0").await;
        assert_eq!(
            (status, ctype.as_deref()),
            (StatusCode::OK, Some("application/json"))
        );
        assert_eq!(body.as_array().unwrap().len(), 1);
        assert_eq!(body[0]["targets"], json!(["h:1"]));
        let (_, _, body) = get(&router, "/jobs/c/targets?collector_id=c-0").await;
        assert_eq!(body[0]["labels"]["leasehold_target"], "b");
        let (_, _, body) = get(&router, "/jobs/c/targets?collector_id=c-1").await;
        assert_eq!(body, json!([]));
        let (status, _, _) = get(&router, "/jobs/c/targets").await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        // The member's renew deadline passes: nothing is served, before any release.
        authority.send_replace(Some(now_unix_ms() - 1));
        assert_eq!(get(&router, "/sd").await.2, json!([]));
        assert_eq!(
            get(&router, "/jobs/c/targets?collector_id=c-0").await.2,
            json!([])
        );
        authority.send_replace(None);
        assert_eq!(get(&router, "/sd").await.2, json!([]));
        // Renewed: served again.
        authority.send_replace(Some(far));
        assert_eq!(get(&router, "/sd").await.2.as_array().unwrap().len(), 2);
    }
}
