//! The scrape list over HTTP (`leasehold agent --scrape-sd-listen`), for the scraper in the
//! member's pod: Prometheus' HTTP service discovery (`GET /sd`) and the OpenTelemetry
//! Operator's Target Allocator collector API (`GET /scrape_configs`, `GET /jobs`,
//! `GET /jobs/{job}/targets?collector_id=ID`) — and the same list as a file for Prometheus'
//! file SD ([`write_file`], `--scrape-sd-file`), which Prometheus reads as soon as it changes
//! instead of at its next poll. Every list is what [`Scrape`] holds, and empty once the
//! member's authority has lapsed by this machine's clock, whether or not the member loop has
//! released its targets yet. Read-only; the formats are in `docs/scrape.md`.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};
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

/// Keeps `path` holding what `GET /sd` would answer (Prometheus' file SD reads the same
/// format), rewritten — atomically: a new file renamed over the old — whenever the list changes,
/// the definitions file changes (looked at every second) or the member's authority (the
/// published deadline) ends; runs until dropped. Write errors are logged and retried at the
/// next change or second.
pub async fn write_file(
    scrape: Scrape,
    mut authority: watch::Receiver<Option<i64>>,
    path: std::path::PathBuf,
) {
    let served = Served {
        scrape: scrape.clone(),
        authority: authority.clone(),
    };
    let mut changes = scrape.changes();
    let mut written: Option<Vec<u8>> = None;
    loop {
        let now = now_unix_ms();
        let groups: Vec<Group> = served.groups(now).into_iter().map(|(_, g)| g).collect();
        let body = serde_json::to_vec(&groups).unwrap_or_else(|_| b"[]".to_vec());
        if written.as_ref() != Some(&body) {
            match write_atomically(&path, &body) {
                Ok(()) => written = Some(body),
                Err(error) => {
                    tracing::warn!(path = %path.display(), %error, "could not write the scrape SD file")
                }
            }
        }
        // Until the next change, the deadline, or a second (the definitions file).
        let deadline = (*authority.borrow()).filter(|d| *d > now);
        let mut wait = std::time::Duration::from_secs(1);
        if let Some(d) = deadline {
            wait = wait.min(std::time::Duration::from_millis(
                u64::try_from(d - now).unwrap_or(0),
            ));
        }
        tokio::select! {
            _ = changes.changed() => {}
            _ = authority.changed() => {}
            () = tokio::time::sleep(wait) => {}
        }
    }
}

/// Writes `body` to `path` through a file beside it renamed over it, so that a reader never
/// sees half a list.
pub fn write_atomically(path: &std::path::Path, body: &[u8]) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    std::fs::write(&tmp, body)?;
    std::fs::rename(&tmp, path)
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

/// The job named by the raw path segment `raw`, decoded as the Target Allocator does
/// (`url.QueryUnescape`): the OpenTelemetry Collector's receiver escapes the job with Go's
/// `url.QueryEscape`, which writes a space as `+`, so `+` is a space and `%2B` a plus.
fn job_of_segment(raw: &str) -> String {
    let spaced = raw.replace('+', " ");
    percent_decode_str(&spaced).decode_utf8_lossy().into_owned()
}

/// `GET /jobs/{job}/targets?collector_id=ID`: the groups of `job` (a target's `job`, or the
/// cluster's name) in HTTP SD format when `ID` is this member; `[]` for any other collector
/// (this agent serves its own member's targets only). 400 without `collector_id`.
async fn job_targets(
    State(s): State<Served>,
    uri: axum::http::Uri,
    Query(q): Query<Collector>,
) -> Response {
    // The raw segment: the extractor's decoding would keep a `+` (the Collector's space).
    let raw = uri
        .path()
        .strip_prefix("/jobs/")
        .and_then(|p| p.strip_suffix("/targets"))
        .unwrap_or_default();
    let job = job_of_segment(raw);
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

    /// Whether `v` is a list in Prometheus' HTTP SD format as its documentation states it —
    /// an array of `{"targets": [<host:port>, …], "labels": {<name>: <string>, …}}` — with the
    /// labels a scraper accepts (names `[a-zA-Z_][a-zA-Z0-9_]*`; of Prometheus' own `__…`
    /// only the path and scheme) and no two groups with one label set (a scraper would merge
    /// them into one target).
    fn http_sd_conforms(v: &Value) -> Result<(), String> {
        let groups = v.as_array().ok_or("not an array")?;
        let mut label_sets = std::collections::BTreeSet::new();
        for g in groups {
            let o = g.as_object().ok_or(format!("{g}: not an object"))?;
            let mut keys: Vec<&str> = o.keys().map(String::as_str).collect();
            keys.sort_unstable();
            if keys != ["labels", "targets"] {
                return Err(format!("{g}: fields {keys:?}"));
            }
            let targets = o["targets"].as_array().ok_or("targets: not an array")?;
            if targets.is_empty() {
                return Err(format!("{g}: no targets"));
            }
            for t in targets {
                let t = t.as_str().ok_or(format!("{t}: not a string"))?;
                let (host, port) = t.rsplit_once(':').ok_or(format!("{t}: not host:port"))?;
                if host.is_empty() || port.parse::<u16>().is_err() {
                    return Err(format!("{t}: not host:port"));
                }
            }
            let labels = o["labels"].as_object().ok_or("labels: not an object")?;
            for (name, value) in labels {
                value
                    .as_str()
                    .ok_or(format!("label {name}: {value} is not a string"))?;
                let mut c = name.chars();
                let valid = c
                    .next()
                    .is_some_and(|f| f.is_ascii_alphabetic() || f == '_')
                    && c.all(|ch| ch.is_ascii_alphanumeric() || ch == '_');
                let own = name.starts_with("__")
                    && !matches!(name.as_str(), "__metrics_path__" | "__scheme__");
                if !valid || own {
                    return Err(format!("label name {name:?} would be refused"));
                }
            }
            if !label_sets.insert(o["labels"].to_string()) {
                return Err(format!("two groups with the labels {}", o["labels"]));
            }
        }
        Ok(())
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        /// Whatever the target list holds (keys of any characters, jobs, labels, paths,
        /// schemes) and whichever targets the member holds: `/sd` and each job's
        /// `/jobs/{job}/targets?collector_id=` are in the HTTP SD format, the jobs' lists
        /// together are `/sd`, `/scrape_configs` and `/jobs` name every job of the list, and
        /// another collector gets `[]`.
        #[test]
        fn every_answer_is_in_the_formats_scrapers_read(
            defs in proptest::collection::vec((
                "\\PC{1,12}",
                proptest::option::of(proptest::sample::select(vec!["node/x", "c", "web app", "ü", "a+b"])),
                proptest::collection::btree_map("[a-zA-Z_][a-zA-Z0-9_]{0,6}", "\\PC{0,6}", 0..3),
                proptest::option::of("/[a-z]{0,6}"),
                proptest::option::of(proptest::bool::ANY),
                proptest::option::of(0u64..100),
            ), 0..10),
        ) {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async move {
                let dir = tempfile::tempdir().unwrap();
                let file = dir.path().join("targets.yaml");
                // JSON is YAML: the list as a user could write it.
                let mut seen = std::collections::BTreeSet::new();
                let list: Vec<Value> = defs
                    .iter()
                    .enumerate()
                    .filter(|(_, d)| seen.insert(d.0.clone()))
                    .map(|(i, (key, job, labels, path, https, _))| {
                        let labels: BTreeMap<&String, &String> = labels
                            .iter()
                            .filter(|(n, _)| !n.starts_with("__") && !n.starts_with("leasehold_") && *n != "job")
                            .collect();
                        let mut scrape = json!({"address": format!("h{i}:{}", 9000 + i), "labels": labels});
                        if let Some(j) = job { scrape["job"] = json!(j); }
                        if let Some(p) = path { scrape["metrics_path"] = json!(p); }
                        if let Some(h) = https { scrape["scheme"] = json!(if *h { "https" } else { "http" }); }
                        json!({"key": key, "scrape": scrape})
                    })
                    .collect();
                std::fs::write(&file, serde_json::to_string(&list).unwrap()).unwrap();
                let scrape = Scrape::new(ScrapeSettings {
                    targets_file: file,
                    cluster: "c".into(),
                    identity: "c-0".into(),
                    collector: None,
                })
                .unwrap();
                let far = now_unix_ms() + 60_000;
                let (_authority, rx) = watch::channel(Some(far));
                let router = router(scrape.clone(), rx);
                let mut seen = std::collections::BTreeSet::new();
                for (key, .., held) in defs.iter().filter(|d| seen.insert(d.0.clone())) {
                    if let Some(g) = held {
                        let work = Assignment { target: key.clone(), generation: *g, deadline_unix_ms: Some(far) };
                        scrape.on_acquire(&work).await.unwrap();
                    }
                }
                let (status, ctype, all) = get(&router, "/sd").await;
                assert_eq!((status, ctype.as_deref()), (StatusCode::OK, Some("application/json")));
                http_sd_conforms(&all).unwrap();
                let held = defs.iter().filter(|d| d.5.is_some()).map(|d| &d.0).collect::<std::collections::BTreeSet<_>>();
                assert_eq!(all.as_array().unwrap().len(), held.len());
                let (_, _, configs) = get(&router, "/scrape_configs").await;
                let (_, _, jobs) = get(&router, "/jobs").await;
                let names: Vec<&String> = configs.as_object().unwrap().keys().collect();
                assert_eq!(names, jobs.as_object().unwrap().keys().collect::<Vec<_>>());
                let mut union = Vec::new();
                for (job, config) in configs.as_object().unwrap() {
                    assert_eq!(config, &json!({"job_name": job}));
                    let link = jobs[job]["_link"].as_str().unwrap();
                    let (status, ctype, groups) = get(&router, &format!("{link}?collector_id=c-0")).await;
                    assert_eq!((status, ctype.as_deref()), (StatusCode::OK, Some("application/json")), "{link}");
                    http_sd_conforms(&groups).unwrap();
                    union.extend(groups.as_array().unwrap().iter().cloned());
                    let (_, _, other) = get(&router, &format!("{link}?collector_id=c-9")).await;
                    assert_eq!(other, json!([]));
                }
                let key = |g: &Value| g["labels"]["leasehold_target"].as_str().unwrap().to_owned();
                union.sort_by_key(key);
                let mut all = all.as_array().unwrap().clone();
                all.sort_by_key(key);
                assert_eq!(union, all);
            });
        }
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
        // As the Collector's receiver asks (Go's url.QueryEscape): a space is `+`, a plus `%2B`.
        assert_eq!(job_of_segment("web+app"), "web app");
        assert_eq!(job_of_segment("web%20app"), "web app");
        assert_eq!(job_of_segment("a%2Bb"), "a+b");
        assert_eq!(job_of_segment("node%2Fx"), "node/x");
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
