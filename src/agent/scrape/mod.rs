//! Scrape targets served to the member's scraper: the agent tells a Prometheus (or vmagent,
//! Alloy, an OpenTelemetry Collector) in its pod what to scrape, as a built-in hook kind
//! ([`Scrape`], `leasehold agent --scrape-sd-listen`). The scraper pulls the list over HTTP
//! service discovery (`GET /sd`) or the Target Allocator's collector API ([`sd`]); the list is
//! exactly the targets the member holds and works on:
//!
//! - on acquire, the target (its `scrape` definition from the target list,
//!   `targets::ScrapeTarget`) is listed from the next request on;
//! - on release or hand-over, it is delisted. Without the scraper's API the call returns at
//!   once — the hand-over goes ahead as soon as the list no longer has it, and when the
//!   scraper stops scraping is its own affair (it polls the list every `refresh_interval` and
//!   applies what it read later still: Prometheus batches discovery updates for 5 s). With
//!   the scraper's API (`--scrape-api`, [`collector`]) the stop is *proven*: the call returns
//!   once a reading of the scraper's own active targets, taken after the delisting, no longer
//!   has the target — this kind then [confirms its stops](crate::agent::Hooks::confirms_stop)
//!   (the `exclusive` hand-off: never two scrapers on one target), and the member Lease
//!   carries what the scraper says of every held target ([`crate::agent::Hooks::work`]);
//! - in an overlap hand-off to this member ([`Hooks::prepares`], with the scraper's API), the
//!   target is listed ahead of the hand-over at the generation it will give, and the prepare
//!   call returns once a reading of the scraper's API shows it scraped (`up`, or `down` with
//!   the target's own error) — the member then tells the holder, which stops its own;
//! - on a lost authority the member releases every target, and the list is empty from its
//!   renew deadline on whatever the member loop does (the served list is checked against the
//!   published deadline, [`crate::agent::Agent::authority`]).
//!
//! Hook calls for one target arrive in order (the member aborts a start before it asks for a
//! stop) and complete at once, so a call is applied as it comes; a release of an older
//! generation than the one listed leaves the newer hold listed. The target list file is read
//! again when it changes; a list that does not parse keeps the last good one. Only this module
//! and [`sd`] know the formats served; nothing here talks to the scraper.

pub mod collector;
pub mod sd;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use serde::Serialize;

use super::definitions::Definitions;
use super::hooks::{Assignment, Hooks};
use crate::targets::ScrapeTarget;

/// The scrape kind's settings.
#[derive(Debug, Clone)]
pub struct ScrapeSettings {
    /// The target list with the `scrape` definitions (the ConfigMap key the control plane
    /// reads, mounted as a file); read again when it changes.
    pub targets_file: PathBuf,
    /// The cluster: the job of targets that name none, on the Target Allocator's API (which
    /// groups targets by job).
    pub cluster: String,
    /// This member's identity: the Target Allocator API's `collector_id` it serves.
    pub identity: String,
    /// The scraper's own API (Prometheus, vmagent: `http://127.0.0.1:9090`) and how often it
    /// is read: stops are then proven by it.
    pub collector: Option<(String, std::time::Duration)>,
}

/// How long one stop call waits for the scraper to prove the stop before it answers "not
/// yet" (the member asks again at its next pass, within a second). Calls stay short, so a
/// scraper's own seconds-long pipeline never looks like an overwhelmed app to the member's
/// hook limiter, and never meets its hook timeout.
pub const STOP_CALL_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

/// One group of targets in Prometheus' HTTP SD format (`[{"targets": [..], "labels": {..}}]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Group {
    /// `host:port`.
    pub targets: Vec<String>,
    /// The group's labels, Prometheus' `__metrics_path__` and `__scheme__` among them.
    pub labels: BTreeMap<String, String>,
}

/// The targets as scrapers are told them, as the member's hooks. Serve [`sd::router`] beside
/// the agent.
#[derive(Clone)]
pub struct Scrape {
    inner: Arc<Inner>,
}

struct Inner {
    settings: ScrapeSettings,
    /// Target → the generation of the hold listed.
    held: Mutex<BTreeMap<String, u64>>,
    /// The definitions in `targets_file`.
    defs: Definitions<ScrapeTarget>,
    /// The scraper's API, when given.
    watcher: Option<collector::Watcher>,
    /// Holds delisted and not yet proven stopped: (target, generation) → when delisted.
    stopping: Mutex<BTreeMap<(String, u64), tokio::time::Instant>>,
    /// Targets listed ahead of their hand-over to this member (an overlap hand-off): target →
    /// the generation the hand-over will give, and when it was listed.
    preparing: Mutex<BTreeMap<String, (u64, tokio::time::Instant)>>,
    /// Bumped whenever what is listed may have changed (for [`sd::write_file`]).
    changed: tokio::sync::watch::Sender<u64>,
}

impl Scrape {
    /// The scrape kind with `settings`; the target list is read at once (an unreadable file is
    /// an error: start-up stops with it).
    pub fn new(settings: ScrapeSettings) -> Result<Scrape, String> {
        let defs = Definitions::read_deriving(
            &settings.targets_file,
            "scrape",
            |t| t.scrape.map(|s| *s),
            Some(crate::targets::EndpointsSource::scrape_target),
        )?;
        let watcher = match &settings.collector {
            Some((api, poll)) => Some(collector::Watcher::new(api, *poll)?),
            None => None,
        };
        Ok(Scrape {
            inner: Arc::new(Inner {
                settings,
                held: Mutex::default(),
                defs,
                watcher,
                stopping: Mutex::default(),
                preparing: Mutex::default(),
                changed: tokio::sync::watch::Sender::new(0),
            }),
        })
    }

    /// Reads the scraper's API every poll interval, as long as the member runs (nothing to do
    /// without one). Ends when dropped.
    pub async fn watch_collector(self) {
        match &self.inner.watcher {
            Some(w) => w.run().await,
            None => std::future::pending().await,
        }
    }

    /// Delists `work` and, with the scraper's API, answers once a reading taken after the
    /// delisting no longer has the target at this generation or an older one — or, after
    /// [`STOP_CALL_WAIT`] without one, that it is not proven yet (the member asks again).
    async fn stop(&self, work: &Assignment) -> Result<(), String> {
        self.release(work);
        let Some(w) = &self.inner.watcher else {
            return Ok(());
        };
        let key = (work.target.clone(), work.generation);
        let delisted = *self
            .inner
            .stopping
            .lock()
            .unwrap()
            .entry(key.clone())
            .or_insert_with(tokio::time::Instant::now);
        let until = tokio::time::Instant::now() + STOP_CALL_WAIT;
        let mut after = delisted;
        let mut last = "no reading of the scraper's API since".to_owned();
        loop {
            let left = until.saturating_duration_since(tokio::time::Instant::now());
            let Some(r) = w.reading_after(after, left).await else {
                return Err(format!(
                    "not proven yet: the scraper was told to stop scraping {:?} {:?} ago, and {last}",
                    work.target,
                    delisted.elapsed()
                ));
            };
            after = r.sent;
            match r.targets {
                Ok(t) => match t.get(&work.target) {
                    Some(s) if s.generation.is_none_or(|g| g <= work.generation) => {
                        last = format!("it still scrapes it ({})", s.health);
                    }
                    _ => {
                        self.inner.stopping.lock().unwrap().remove(&key);
                        return Ok(());
                    }
                },
                Err(e) => last = e,
            }
        }
    }

    /// Lists `work` ahead of its hand-over (an overlap hand-off) and answers once a reading
    /// of the scraper's API taken after the listing shows it scraped at this generation (or a
    /// newer one): `up`, or `down` with an error of the target's own — or, after
    /// [`STOP_CALL_WAIT`] without one, that it is not proven yet (the member asks again).
    async fn prepare(&self, work: &Assignment) -> Result<(), String> {
        let Some(w) = &self.inner.watcher else {
            return Err("no scraper API to prove a start with (--scrape-api)".to_owned());
        };
        let listed = {
            let mut preparing = self.inner.preparing.lock().unwrap();
            let e = preparing
                .entry(work.target.clone())
                .or_insert((work.generation, tokio::time::Instant::now()));
            if e.0 != work.generation {
                *e = (work.generation, tokio::time::Instant::now());
            }
            e.1
        };
        self.bump();
        let until = tokio::time::Instant::now() + STOP_CALL_WAIT;
        let mut after = listed;
        let mut last = "no reading of the scraper's API since".to_owned();
        loop {
            let left = until.saturating_duration_since(tokio::time::Instant::now());
            let Some(r) = w.reading_after(after, left).await else {
                return Err(format!(
                    "not proven yet: {:?} was listed for the scraper {:?} ago, and {last}",
                    work.target,
                    listed.elapsed()
                ));
            };
            after = r.sent;
            match r.targets {
                Ok(t) => match t.get(&work.target) {
                    Some(s)
                        if s.generation.is_some_and(|g| g >= work.generation)
                            && (s.up() || !s.error.is_empty()) =>
                    {
                        return Ok(());
                    }
                    Some(s) if s.generation.is_some_and(|g| g >= work.generation) => {
                        last = format!("it is listed, not scraped yet ({})", s.health);
                    }
                    _ => last = "it is not among the scraper's targets yet".to_owned(),
                },
                Err(e) => last = e,
            }
        }
    }

    /// Delists a target listed ahead of a hand-over that did not come.
    fn unprepare(&self, work: &Assignment) {
        let mut preparing = self.inner.preparing.lock().unwrap();
        if preparing
            .get(&work.target)
            .is_some_and(|(g, _)| *g <= work.generation)
        {
            preparing.remove(&work.target);
        }
        drop(preparing);
        self.bump();
    }

    /// What is listed: the held targets, and those listed ahead of their hand-over.
    fn listed(&self) -> BTreeMap<String, u64> {
        let mut listed: BTreeMap<String, u64> = self
            .inner
            .preparing
            .lock()
            .unwrap()
            .iter()
            .map(|(k, (g, _))| (k.clone(), *g))
            .collect();
        listed.extend(self.inner.held.lock().unwrap().clone());
        listed
    }

    /// A receiver that sees a new value whenever what is listed may have changed.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.changed.subscribe()
    }

    fn bump(&self) {
        self.inner.changed.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// The settings it runs with.
    pub fn settings(&self) -> &ScrapeSettings {
        &self.inner.settings
    }

    /// The definitions of the listed targets, held or listed ahead of their hand-over (from the
    /// list, or derived from the key of an `endpoints` entry's target), the file read again
    /// first if it changed since the last read.
    fn definitions(&self) -> Arc<BTreeMap<String, ScrapeTarget>> {
        let listed = self.listed();
        Arc::new(self.inner.defs.resolve(listed.keys().map(String::as_str)))
    }

    /// What is served now: the held targets with a definition, one group each, by key
    /// ([`groups`]).
    pub fn groups(&self) -> Vec<(Option<String>, Group)> {
        groups(&self.listed(), &self.definitions())
    }

    /// Every job of the target list, held here or not (the Target Allocator's `/scrape_configs`
    /// and `/jobs`, which a collector reads as its configuration and should not see change
    /// with every hand-over): a target's `job`, or the cluster's name.
    pub fn jobs(&self) -> std::collections::BTreeSet<String> {
        let defs = self.inner.defs.current();
        let sources = self.inner.defs.sources();
        defs.values()
            .map(|d| d.job.clone())
            .chain(sources.values().map(|s| s.scrape.job.clone()))
            .map(|j| j.unwrap_or_else(|| self.inner.settings.cluster.clone()))
            .collect()
    }

    fn acquire(&self, work: &Assignment) -> Result<(), String> {
        // Stops of older holds no longer matter once it is held again.
        self.inner
            .stopping
            .lock()
            .unwrap()
            .retain(|(target, _), _| *target != work.target);
        {
            let mut held = self.inner.held.lock().unwrap();
            let listed = held.entry(work.target.clone()).or_insert(work.generation);
            *listed = (*listed).max(work.generation);
            // Listed ahead of its hand-over: now held.
            self.inner.preparing.lock().unwrap().remove(&work.target);
        }
        self.bump();
        // Listed whatever the definitions say: one that appears in the file later is served
        // from then on.
        if self.definitions().contains_key(&work.target) {
            return Ok(());
        }
        Err(format!(
            "no scrape definition for target {:?} in {}: not served until it has one",
            work.target,
            self.inner.settings.targets_file.display()
        ))
    }

    fn release(&self, work: &Assignment) {
        let mut held = self.inner.held.lock().unwrap();
        // A newer hold stays listed.
        if held
            .get(&work.target)
            .is_some_and(|g| *g <= work.generation)
        {
            held.remove(&work.target);
        }
        drop(held);
        self.bump();
    }
}

impl Hooks for Scrape {
    fn on_acquire(&self, work: &Assignment) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(futures::future::ready(self.acquire(work)))
    }
    fn on_release(&self, work: &Assignment) -> BoxFuture<'_, Result<(), String>> {
        let work = work.clone();
        Box::pin(async move { self.stop(&work).await })
    }
    fn confirms_stop(&self) -> bool {
        self.inner.watcher.is_some()
    }
    fn prepares(&self) -> bool {
        self.inner.watcher.is_some()
    }
    fn limited(&self) -> bool {
        // In-process: a call changes the list at once, then waits for the scraper's proof.
        false
    }
    fn on_prepare(&self, work: &Assignment) -> BoxFuture<'_, Result<(), String>> {
        let work = work.clone();
        Box::pin(async move { self.prepare(&work).await })
    }
    fn on_unprepare(&self, work: &Assignment) -> BoxFuture<'_, Result<(), String>> {
        self.unprepare(work);
        Box::pin(futures::future::ready(Ok(())))
    }
    fn work(&self) -> Option<crate::protocol::AppWork> {
        let watcher = self.inner.watcher.as_ref()?;
        let reading = watcher.last();
        let held = self.inner.held.lock().unwrap().clone();
        let defs = self.definitions();
        let window = i64::try_from(STARTED_WINDOW.as_millis()).unwrap_or(i64::MAX);
        let since = jiff::Timestamp::now()
            .as_millisecond()
            .saturating_sub(window);
        Some(crate::protocol::AppWork {
            // Starts are proven by the scraper's API, so it can start ahead of a hand-over.
            prepares: true,
            started: started(&held, |key| watcher.marks(key), since),
            ..work(&held, &defs, reading.as_ref())
        })
    }
    fn last_worked_ms(&self, work: &Assignment) -> Option<i64> {
        let marks = self.inner.watcher.as_ref()?.marks(&work.target)?;
        (marks.generation == Some(work.generation))
            .then_some(marks.last_ms)
            .flatten()
    }
}

/// How long a proven first scrape is reported in the member Lease's `app-work`
/// ([`crate::protocol::AppWork::started`]): several renewals, so the control plane sees it
/// even when it misses one.
pub const STARTED_WINDOW: std::time::Duration = std::time::Duration::from_secs(60);

/// The `held` targets whose scraping at their generation began (first scrape up) at `since`
/// or later, by `marks`: the newest [`crate::protocol::AppWork::MAX_STARTED`].
pub fn started(
    held: &BTreeMap<String, u64>,
    marks: impl Fn(&str) -> Option<collector::Marks>,
    since: i64,
) -> BTreeMap<String, i64> {
    let mut found: Vec<(i64, &String)> = held
        .iter()
        .filter_map(|(key, generation)| {
            let m = marks(key)?;
            let at = m.first_up_ms.filter(|at| *at >= since)?;
            (m.generation == Some(*generation)).then_some((at, key))
        })
        .collect();
    found.sort_unstable_by(|a, b| b.cmp(a));
    found
        .into_iter()
        .take(crate::protocol::AppWork::MAX_STARTED)
        .map(|(at, key)| (key.clone(), at))
        .collect()
}

/// What the scraper's `reading` says of the `held` targets: each works when the scraper has it
/// at its generation or a newer one and its last scrape was up. Targets without a definition
/// are not served, so not worked on.
pub fn work(
    held: &BTreeMap<String, u64>,
    defs: &BTreeMap<String, ScrapeTarget>,
    reading: Option<&collector::Reading>,
) -> crate::protocol::AppWork {
    let targets = reading.map(|r| r.targets.as_ref());
    let why: Vec<(&str, bool, String)> = held
        .iter()
        .map(|(key, generation)| {
            let (working, why) = if !defs.contains_key(key) {
                (false, "no scrape definition: not served".to_owned())
            } else {
                match targets {
                    None => (false, "the scraper's API not read yet".to_owned()),
                    Some(Err(e)) => (false, e.clone()),
                    Some(Ok(t)) => match t.get(key) {
                        Some(s) if s.generation.is_some_and(|g| g >= *generation) && s.up() => {
                            (true, String::new())
                        }
                        Some(s) if s.generation.is_some_and(|g| g >= *generation) => (
                            false,
                            match s.health.as_str() {
                                "unknown" => "listed, not scraped yet".to_owned(),
                                h if s.error.is_empty() => h.to_owned(),
                                h => format!("{h}: {}", s.error),
                            },
                        ),
                        _ => (false, "not among the scraper's targets yet".to_owned()),
                    },
                }
            };
            (key.as_str(), working, why)
        })
        .collect();
    let reachable = matches!(targets, Some(Ok(_)));
    crate::protocol::AppWork::of(
        "scraper",
        reachable,
        why.iter().map(|(k, w, why)| (*k, *w, Some(why.as_str()))),
    )
}

/// One group per held target with a definition, in key order, with its job (`None`: the
/// scraper's own). Each target has a label set of its own ([`ScrapeTarget::KEY_LABEL`] is its
/// key), so no two share a group. The labels: the definition's, then `job`,
/// `__metrics_path__` and `__scheme__` where the definition gives them (Prometheus takes a
/// target's labels over its scrape config's), then the key and the hold's generation.
pub fn groups(
    held: &BTreeMap<String, u64>,
    defs: &BTreeMap<String, ScrapeTarget>,
) -> Vec<(Option<String>, Group)> {
    held.iter()
        .filter_map(|(key, generation)| {
            let def = defs.get(key)?;
            let mut labels = def.labels.clone();
            for (name, value) in [
                ("job", def.job.clone()),
                ("__metrics_path__", def.metrics_path.clone()),
                ("__scheme__", def.scheme.map(|s| s.as_str().to_owned())),
            ] {
                if let Some(v) = value {
                    labels.insert(name.to_owned(), v);
                }
            }
            labels.insert(ScrapeTarget::KEY_LABEL.to_owned(), key.clone());
            labels.insert(
                ScrapeTarget::GENERATION_LABEL.to_owned(),
                generation.to_string(),
            );
            let group = Group {
                targets: vec![def.address.clone()],
                labels,
            };
            Some((def.job.clone(), group))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::targets::Scheme;

    /// The first scrapes reported are those of held targets at their generation since the
    /// window began, newest first when there are too many.
    #[test]
    fn starts_reported_are_recent_first_scrapes_of_what_is_held() {
        let marks = |generation: u64, first: Option<i64>| collector::Marks {
            generation: Some(generation),
            first_up_ms: first,
            last_ms: first,
        };
        let held = BTreeMap::from([
            ("recent".to_owned(), 4),
            ("old".to_owned(), 4),
            ("other-generation".to_owned(), 5),
            ("not-yet".to_owned(), 1),
            ("unread".to_owned(), 1),
        ]);
        let got = started(
            &held,
            |key| match key {
                "recent" => Some(marks(4, Some(10_000))),
                "old" => Some(marks(4, Some(1_000))),
                "other-generation" => Some(marks(4, Some(10_000))),
                "not-yet" => Some(marks(1, None)),
                _ => None,
            },
            5_000,
        );
        assert_eq!(got, BTreeMap::from([("recent".to_owned(), 10_000)]));
        let many: BTreeMap<String, u64> = (0..300).map(|i| (format!("t-{i:03}"), 1)).collect();
        let got = started(
            &many,
            |key| Some(marks(1, Some(key[2..].parse().unwrap()))),
            0,
        );
        assert_eq!(got.len(), crate::protocol::AppWork::MAX_STARTED);
        assert!(got.contains_key("t-299") && !got.contains_key("t-099"));
    }

    fn work(target: &str, generation: u64) -> Assignment {
        Assignment {
            target: target.into(),
            generation,
            deadline_unix_ms: None,
        }
    }

    /// A scrape kind reading `list` from a file in `dir`.
    fn scrape(dir: &std::path::Path, list: &str) -> Scrape {
        let file = dir.join("targets.yaml");
        std::fs::write(&file, list).unwrap();
        Scrape::new(ScrapeSettings {
            targets_file: file,
            cluster: "c".into(),
            identity: "c-0".into(),
            collector: None,
        })
        .unwrap()
    }

    fn keys(s: &Scrape) -> Vec<(String, String)> {
        s.groups()
            .into_iter()
            .map(|(_, g)| {
                (
                    g.labels[ScrapeTarget::KEY_LABEL].clone(),
                    g.labels[ScrapeTarget::GENERATION_LABEL].clone(),
                )
            })
            .collect()
    }

    #[test]
    fn a_group_carries_prometheus_labels_the_key_and_the_generation() {
        let mut def = ScrapeTarget::at("10.0.0.1:9100");
        def.job = Some("nodes".into());
        def.metrics_path = Some("/probe".into());
        def.scheme = Some(Scheme::Https);
        def.labels.insert("rack".into(), "r1".into());
        let defs = BTreeMap::from([
            ("n-1".to_owned(), def),
            ("n-2".to_owned(), ScrapeTarget::at("10.0.0.2:9100")),
        ]);
        // n-3 is held but has no definition: not served.
        let held = BTreeMap::from([
            ("n-1".to_owned(), 7),
            ("n-2".to_owned(), 0),
            ("n-3".to_owned(), 1),
        ]);
        let got = groups(&held, &defs);
        let json = serde_json::to_value(got.iter().map(|(_, g)| g).collect::<Vec<_>>()).unwrap();
        assert_eq!(
            json,
            serde_json::json!([
                {"targets": ["10.0.0.1:9100"], "labels": {
                    "__metrics_path__": "/probe", "__scheme__": "https", "job": "nodes",
                    "leasehold_generation": "7", "leasehold_target": "n-1", "rack": "r1"}},
                {"targets": ["10.0.0.2:9100"], "labels": {
                    "leasehold_generation": "0", "leasehold_target": "n-2"}},
            ])
        );
        assert_eq!(got[0].0.as_deref(), Some("nodes"));
        assert_eq!(got[1].0, None);
    }

    #[tokio::test]
    async fn holds_are_listed_from_acquire_to_release_and_a_stale_release_keeps_a_newer_hold() {
        let dir = tempfile::tempdir().unwrap();
        let s = scrape(
            dir.path(),
            "- {key: a, scrape: {address: 'h:1'}}\n- {key: b, scrape: {address: 'h:2'}}\n- c\n",
        );
        let hooks: &dyn Hooks = &s;
        assert!(s.groups().is_empty());
        hooks.on_acquire(&work("a", 3)).await.unwrap();
        hooks.on_acquire(&work("b", 1)).await.unwrap();
        assert_eq!(
            keys(&s),
            [("a".into(), "3".into()), ("b".into(), "1".into())]
        );
        hooks.on_release(&work("b", 1)).await.unwrap();
        assert_eq!(keys(&s), [("a".to_owned(), "3".to_owned())]);
        // A release of an older hold leaves the newer one listed.
        hooks.on_release(&work("a", 2)).await.unwrap();
        assert_eq!(keys(&s), [("a".to_owned(), "3".to_owned())]);
        // A hold resumed in a new term: released and acquired again at the same generation.
        hooks.on_release(&work("a", 3)).await.unwrap();
        assert!(s.groups().is_empty());
        hooks.on_acquire(&work("a", 3)).await.unwrap();
        assert_eq!(keys(&s), [("a".to_owned(), "3".to_owned())]);
        // No definition: the acquire says so; served once the file gives one.
        let e = hooks.on_acquire(&work("c", 5)).await.unwrap_err();
        assert!(e.contains("no scrape definition for target \"c\""), "{e}");
        assert_eq!(keys(&s).len(), 1);
        // (A change is seen by the file's modification time and length.)
        std::fs::write(
            &s.settings().targets_file,
            "- {key: a, scrape: {address: 'h:1'}}\n- {key: c, scrape: {address: 'h:3', job: x}}\n",
        )
        .unwrap();
        assert_eq!(
            keys(&s),
            [("a".into(), "3".into()), ("c".into(), "5".into())]
        );
        assert_eq!(s.jobs(), ["c".to_owned(), "x".to_owned()].into());
        // A list that no longer parses keeps the last good one.
        std::fs::write(
            &s.settings().targets_file,
            "- {key: a, scrape: {address: nope}}\n",
        )
        .unwrap();
        assert_eq!(keys(&s).len(), 2);
    }

    #[test]
    fn the_scrapers_reading_says_which_held_targets_are_worked_on() {
        use collector::{Reading, Scraped};
        let defs: BTreeMap<String, ScrapeTarget> = ["a", "b", "c", "d"]
            .iter()
            .map(|k| ((*k).to_owned(), ScrapeTarget::at("h:1")))
            .collect();
        let held = BTreeMap::from([
            ("a".to_owned(), 2),
            ("b".to_owned(), 2),
            ("c".to_owned(), 5),
            ("d".to_owned(), 1),
            ("e".to_owned(), 1),
        ]);
        let seen = |generation, health: &str, error: &str| Scraped {
            generation: Some(generation),
            health: health.into(),
            error: error.into(),
            last_scrape_ms: None,
        };
        let reading = Reading {
            sent: tokio::time::Instant::now(),
            targets: Ok(BTreeMap::from([
                ("a".to_owned(), seen(2, "up", "")),
                ("b".to_owned(), seen(2, "down", "connection refused")),
                // Still the older hold's entry: the new one is not scraped yet.
                ("c".to_owned(), seen(4, "up", "")),
                ("d".to_owned(), seen(1, "unknown", "")),
            ])),
        };
        let w = super::work(&held, &defs, Some(&reading));
        assert!(w.reachable);
        assert_eq!((w.held, w.working), (5, 1));
        assert_eq!(w.not_working["b"], "down: connection refused");
        assert_eq!(w.not_working["c"], "not among the scraper's targets yet");
        assert_eq!(w.not_working["d"], "listed, not scraped yet");
        assert_eq!(w.not_working["e"], "no scrape definition: not served");
        let unread = Reading {
            targets: Err("the scraper's API did not answer: refused".into()),
            ..reading
        };
        let w = super::work(&held, &defs, Some(&unread));
        assert!(!w.reachable && w.working == 0);
        assert_eq!(
            w.not_working["a"],
            "the scraper's API did not answer: refused"
        );
    }

    #[test]
    fn an_unreadable_list_stops_start_up() {
        let dir = tempfile::tempdir().unwrap();
        let e = Scrape::new(ScrapeSettings {
            targets_file: dir.path().join("missing.yaml"),
            cluster: "c".into(),
            identity: "c-0".into(),
            collector: None,
        })
        .err()
        .unwrap();
        assert!(e.contains("missing.yaml"), "{e}");
    }

    /// The targets of an `endpoints` entry are served from their keys: held, and listed ahead
    /// of an overlap hand-off (whose start is not proven here: no scraper reads the list).
    #[tokio::test]
    async fn endpoint_targets_are_served_from_their_keys_held_or_prepared() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("targets.yaml");
        std::fs::write(
            &file,
            "- {endpoints: {service: web, port: metrics, scrape: {job: web}}}\n",
        )
        .unwrap();
        let s = Scrape::new(ScrapeSettings {
            targets_file: file,
            cluster: "c".into(),
            identity: "c-0".into(),
            // Nothing answers there: a prepare is never proven.
            collector: Some((
                "http://127.0.0.1:9".into(),
                std::time::Duration::from_millis(50),
            )),
        })
        .unwrap();
        let hooks: &dyn Hooks = &s;
        hooks
            .on_acquire(&work("web/web-0/10.0.0.1:9100", 2))
            .await
            .unwrap();
        assert!(
            hooks
                .on_prepare(&work("web/web-1/10.0.0.2:9100", 5))
                .await
                .is_err()
        );
        let got: Vec<(String, String, String)> = s
            .groups()
            .into_iter()
            .map(|(job, g)| {
                (
                    g.targets[0].clone(),
                    g.labels["pod"].clone(),
                    format!("{job:?} {}", g.labels[ScrapeTarget::GENERATION_LABEL]),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (
                    "10.0.0.1:9100".into(),
                    "web-0".into(),
                    "Some(\"web\") 2".into()
                ),
                (
                    "10.0.0.2:9100".into(),
                    "web-1".into(),
                    "Some(\"web\") 5".into()
                ),
            ]
        );
        // Another Service's key has no definition here.
        let e = hooks
            .on_acquire(&work("db/db-0/10.0.0.3:5432", 1))
            .await
            .unwrap_err();
        assert!(e.contains("no scrape definition"), "{e}");
        assert_eq!(s.jobs(), ["web".to_owned()].into());
    }
}
