//! The scraper's own account of what it scrapes: its targets API (`GET /api/v1/targets?
//! state=active`, served alike by Prometheus and vmagent), read by [`Watcher`] every poll
//! interval. A target the agent lists carries its key and generation as labels
//! (`leasehold_target`, `leasehold_generation`); the scraper keeps every SD label among a
//! target's `discoveredLabels`, so its answer says, per key, whether it scrapes the target and
//! how the last scrape went — the proof [`super::Scrape`] waits for before a hand-over (its
//! `exclusive` mode), and the account the member Lease carries (`app-work`).
//!
//! Reads only; every call is bounded by [`CALL_TIMEOUT`]. Nothing here decides what to list.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use serde::Deserialize;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::net::HttpClient;
use crate::targets::ScrapeTarget;

/// One call's bound.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(2);
/// The largest answer read (a few hundred bytes per target).
const MAX_BODY: usize = 64 << 20;

/// A target the scraper has, as its API reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scraped {
    /// The generation of the hold it was listed for.
    pub generation: Option<u64>,
    /// `up`, `down` or `unknown` (not scraped yet).
    pub health: String,
    /// The last scrape's error, if it failed.
    pub error: String,
    /// When the last scrape began (`lastScrape`, Unix ms by the scraper's clock); `None`
    /// before the first.
    pub last_scrape_ms: Option<i64>,
}

impl Scraped {
    /// Scraped, and the last scrape worked.
    pub fn up(&self) -> bool {
        self.health == "up"
    }
}

/// One reading of the scraper's API.
#[derive(Debug, Clone)]
pub struct Reading {
    /// When the request was sent: the scraper's state is at least this recent.
    pub sent: Instant,
    /// The targets by key, or why the API could not be read.
    pub targets: Result<BTreeMap<String, Scraped>, String>,
}

#[derive(Deserialize)]
struct Answer {
    data: Data,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Data {
    #[serde(default)]
    active_targets: Vec<Active>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Active {
    #[serde(default)]
    discovered_labels: BTreeMap<String, String>,
    #[serde(default)]
    health: String,
    #[serde(default)]
    last_error: String,
    #[serde(default)]
    last_scrape: String,
}

/// When a scrape began, from `lastScrape` (RFC 3339); Prometheus' zero time (never scraped)
/// and anything unreadable are `None`.
fn scrape_time(value: &str) -> Option<i64> {
    let at: jiff::Timestamp = value.parse().ok()?;
    Some(at.as_millisecond()).filter(|ms| *ms > 0)
}

/// When the scraper's work on a listed target began and last went on, as its readings showed
/// it, per key (for [`Watcher::marks`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Marks {
    /// The generation these are of.
    pub generation: Option<u64>,
    /// The first scrape seen up at it (Unix ms).
    pub first_up_ms: Option<i64>,
    /// The last scrape seen at it (Unix ms).
    pub last_ms: Option<i64>,
}

impl Marks {
    /// Takes in a reading's account of the key.
    fn note(&mut self, s: &Scraped) {
        if self.generation != s.generation {
            *self = Marks {
                generation: s.generation,
                ..Marks::default()
            };
        }
        if let Some(at) = s.last_scrape_ms {
            self.last_ms = Some(at);
            if s.up() && self.first_up_ms.is_none() {
                self.first_up_ms = Some(at);
            }
        }
    }
}

/// The targets of an answer of `GET /api/v1/targets` that the agent listed (those with a
/// `leasehold_target` label), by key. A key listed twice (two generations in the scraper's
/// pipeline at once) keeps the newer generation's entry.
pub fn parse(body: &[u8]) -> Result<BTreeMap<String, Scraped>, String> {
    let answer: Answer =
        serde_json::from_slice(body).map_err(|e| format!("not a targets answer: {e}"))?;
    let mut out: BTreeMap<String, Scraped> = BTreeMap::new();
    for t in answer.data.active_targets {
        let Some(key) = t.discovered_labels.get(ScrapeTarget::KEY_LABEL) else {
            continue;
        };
        let scraped = Scraped {
            generation: t
                .discovered_labels
                .get(ScrapeTarget::GENERATION_LABEL)
                .and_then(|g| g.parse().ok()),
            health: t.health,
            error: t.last_error,
            last_scrape_ms: scrape_time(&t.last_scrape),
        };
        match out.get(key) {
            Some(old) if old.generation >= scraped.generation => {}
            _ => {
                out.insert(key.clone(), scraped);
            }
        }
    }
    Ok(out)
}

/// Reads a scraper's targets API every poll interval and keeps the last reading.
pub struct Watcher {
    url: String,
    poll: Duration,
    client: HttpClient,
    last: watch::Sender<Option<Reading>>,
    /// Per key, when its scraping began and last went on, from every reading (kept after the
    /// scraper drops the key: the last scrape before a proven stop).
    marks: std::sync::Mutex<BTreeMap<String, Marks>>,
}

impl Watcher {
    /// A watcher of the API at `base` (`http://127.0.0.1:9090`), read every `poll`.
    pub fn new(base: &str, poll: Duration) -> Result<Watcher, String> {
        Ok(Watcher {
            url: format!("{}/api/v1/targets?state=active", base.trim_end_matches('/')),
            poll,
            client: HttpClient::new().map_err(|e| e.to_string())?,
            last: watch::channel(None).0,
            marks: std::sync::Mutex::default(),
        })
    }

    /// What the readings so far showed of `key`'s scraping (see [`Marks`]).
    pub fn marks(&self, key: &str) -> Option<Marks> {
        self.marks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .copied()
    }

    /// Takes in a reading's marks.
    fn note(&self, reading: &Reading) {
        let Ok(targets) = &reading.targets else {
            return;
        };
        let mut marks = self.marks.lock().unwrap_or_else(|e| e.into_inner());
        for (key, s) in targets {
            marks.entry(key.clone()).or_default().note(s);
        }
    }

    /// The last reading, if any.
    pub fn last(&self) -> Option<Reading> {
        self.last.borrow().clone()
    }

    /// Waits for a reading sent after `after`; `None` if none comes within `within`.
    pub async fn reading_after(&self, after: Instant, within: Duration) -> Option<Reading> {
        let mut rx = self.last.subscribe();
        let found = tokio::time::timeout(
            within,
            rx.wait_for(|r| r.as_ref().is_some_and(|r| r.sent > after)),
        )
        .await;
        match found {
            Ok(Ok(r)) => r.clone(),
            _ => None,
        }
    }

    /// Reads once now.
    async fn read(&self) -> Reading {
        let sent = Instant::now();
        let req = http::Request::get(&self.url)
            .body(Full::new(Bytes::new()))
            .expect("a GET of a fixed URL");
        let targets = match self.client.fetch(req, MAX_BODY, CALL_TIMEOUT).await {
            Ok((status, _, body)) if status.is_success() => parse(&body),
            Ok((status, _, _)) => Err(format!("the scraper's API answered {status}")),
            Err(e) => Err(format!("the scraper's API did not answer: {e}")),
        };
        Reading { sent, targets }
    }

    /// Reads the API every poll interval, forever (an owned task of the agent's process; it
    /// ends when dropped).
    pub async fn run(&self) {
        let mut tick = tokio::time::interval(self.poll);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let reading = self.read().await;
            self.note(&reading);
            self.last.send_replace(Some(reading));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_listed_targets_of_a_prometheus_answer() {
        // As Prometheus 2.42 answers (fields it sends that are not read are left in).
        let body = br#"{"status":"success","data":{"activeTargets":[
          {"discoveredLabels":{"__address__":"127.0.0.1:9001","leasehold_target":"t-1","leasehold_generation":"4","job":"c"},
           "labels":{"instance":"127.0.0.1:9001","job":"c"},"scrapePool":"c","scrapeUrl":"http://127.0.0.1:9001/metrics",
           "globalUrl":"http://127.0.0.1:9001/metrics","lastError":"","lastScrape":"2026-12-07T03:00:00Z",
           "lastScrapeDuration":0.001,"health":"up","scrapeInterval":"1s","scrapeTimeout":"1s"},
          {"discoveredLabels":{"__address__":"127.0.0.1:9002","leasehold_target":"t-2","leasehold_generation":"1"},
           "lastError":"Get \"http://127.0.0.1:9002/metrics\": connection refused","health":"down"},
          {"discoveredLabels":{"__address__":"127.0.0.1:9002","leasehold_target":"t-2","leasehold_generation":"3"},
           "lastError":"","health":"unknown"},
          {"discoveredLabels":{"__address__":"127.0.0.1:9090"},"health":"up"}
        ],"droppedTargets":[]}}"#;
        let got = parse(body).unwrap();
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(got["t-1"].up());
        assert_eq!(got["t-1"].generation, Some(4));
        // The newer generation of t-2 is the one kept.
        assert_eq!(got["t-2"].generation, Some(3));
        assert_eq!(got["t-2"].health, "unknown");
        assert_eq!(got["t-1"].last_scrape_ms, Some(1_796_612_400_000));
        assert_eq!(got["t-2"].last_scrape_ms, None, "not scraped yet");
        assert!(parse(b"{\"status\":\"error\"}").is_err());
        assert!(
            parse(b"<html>")
                .unwrap_err()
                .starts_with("not a targets answer")
        );
    }

    /// A key's marks: the first scrape seen up and the last seen at its generation; a new
    /// generation (the target handed back later) starts them again; Prometheus' zero time is
    /// no scrape.
    #[test]
    fn marks_follow_a_keys_scrapes_at_its_generation() {
        let scraped = |generation: u64, health: &str, at: Option<i64>| Scraped {
            generation: Some(generation),
            health: health.to_owned(),
            error: String::new(),
            last_scrape_ms: at,
        };
        let mut m = Marks::default();
        m.note(&scraped(3, "unknown", None));
        assert_eq!((m.first_up_ms, m.last_ms), (None, None));
        m.note(&scraped(3, "down", Some(1_000)));
        assert_eq!((m.first_up_ms, m.last_ms), (None, Some(1_000)));
        m.note(&scraped(3, "up", Some(2_000)));
        m.note(&scraped(3, "up", Some(3_000)));
        assert_eq!((m.first_up_ms, m.last_ms), (Some(2_000), Some(3_000)));
        m.note(&scraped(5, "up", Some(9_000)));
        assert_eq!(
            m,
            Marks {
                generation: Some(5),
                first_up_ms: Some(9_000),
                last_ms: Some(9_000)
            }
        );
        assert_eq!(scrape_time("0001-01-01T00:00:00Z"), None);
        assert_eq!(
            scrape_time("2026-12-07T03:00:00.25Z"),
            Some(1_796_612_400_250)
        );
    }
}
