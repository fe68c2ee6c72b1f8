//! Real Prometheus servers for the scrape tests: a `prometheus` per member whose only scrape
//! job takes its targets from its agent over HTTP service discovery, the scrape targets
//! themselves ([`MetricsTargets`]: real HTTP `/metrics` endpoints served by the test process on
//! loopback), and what each Prometheus says it does — its own targets API and its own samples,
//! never Leasehold's view. The binary is Debian's `prometheus` (or `$PROMETHEUS`); without it
//! the tests fail with the reason when `CI` is set and skip with it otherwise.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Prometheus' scrape interval and SD refresh interval in these tests (both the shortest a
/// configuration can say in whole seconds).
pub const INTERVAL: Duration = Duration::from_secs(1);

/// The prometheus binary, or `None` (said why) where it cannot be had outside CI.
pub fn binary() -> Option<PathBuf> {
    let name = std::env::var_os("PROMETHEUS").unwrap_or_else(|| "prometheus".into());
    let why = match std::process::Command::new(&name)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
    {
        Ok(out) if out.status.success() => {
            let version = String::from_utf8_lossy(&out.stdout);
            eprintln!("{}", version.lines().next().unwrap_or_default());
            return Some(PathBuf::from(name));
        }
        Ok(out) => format!("{name:?} --version exited with {}", out.status),
        Err(e) => format!(
            "no {name:?} ({e}); Debian: apt-get install prometheus, or set PROMETHEUS to the binary"
        ),
    };
    if std::env::var_os("CI").is_some() {
        panic!("the scrape tests cannot run: {why}");
    }
    eprintln!("SKIPPED: the scrape tests cannot run: {why}");
    None
}

/// A loopback address free a moment ago.
pub fn free_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
}

/// Scrape targets: an endpoint each, on a loopback port of its own, served by this process
/// until dropped (anything else on the port answers 404).
pub struct MetricsTargets {
    pub addrs: Vec<SocketAddr>,
    tasks: Vec<JoinHandle<()>>,
}

impl MetricsTargets {
    /// One target per path in `paths`, serving metrics there.
    pub async fn serve(paths: &[&str]) -> MetricsTargets {
        let mut addrs = Vec::new();
        let mut tasks = Vec::new();
        for (i, path) in paths.iter().enumerate() {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            addrs.push(listener.local_addr().unwrap());
            let body =
                format!("# TYPE scrape_test_target gauge\nscrape_test_target{{n=\"{i}\"}} 1\n");
            let app = axum::Router::new().route(
                path,
                axum::routing::get(move || {
                    let body = body.clone();
                    async move { ([("content-type", "text/plain; version=0.0.4")], body) }
                }),
            );
            tasks.push(tokio::spawn(async move {
                let _ = axum::serve(listener, app).await;
            }));
        }
        MetricsTargets { addrs, tasks }
    }
}

impl Drop for MetricsTargets {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

type Client = hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    http_body_util::Empty<bytes::Bytes>,
>;

fn client() -> Client {
    hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build_http()
}

/// `GET url` as JSON, `None` unless it answered 200 within 2 s.
pub async fn get_json(url: &str) -> Option<Value> {
    use http_body_util::BodyExt as _;
    let uri: http::Uri = url.parse().ok()?;
    tokio::time::timeout(Duration::from_secs(2), async {
        let resp = client().get(uri).await.ok()?;
        if !resp.status().is_success() {
            return None;
        }
        let body = resp.into_body().collect().await.ok()?.to_bytes();
        serde_json::from_slice(&body).ok()
    })
    .await
    .ok()?
}

/// One target as a Prometheus' targets API shows it.
#[derive(Debug, Clone)]
pub struct Active {
    /// `up`, `down` or `unknown` (not scraped yet).
    pub health: String,
    /// The target's address.
    pub instance: String,
}

/// A prometheus process; killed when dropped.
pub struct Prometheus {
    _child: tokio::process::Child,
    log: PathBuf,
    /// Its web address (API, `/-/ready`).
    pub addr: SocketAddr,
}

impl Prometheus {
    /// A Prometheus whose one scrape job (`leasehold`) takes its targets from `sd_url` (HTTP
    /// SD), refreshed and scraped every [`INTERVAL`], its data in `dir`.
    pub fn start(bin: &Path, dir: &Path, name: &str, sd_url: &str) -> Prometheus {
        let addr = free_addr();
        let config = dir.join(format!("prometheus-{name}.yml"));
        let s = INTERVAL.as_secs();
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: {s}s\n  scrape_timeout: {s}s\nscrape_configs:\n\
                 - job_name: leasehold\n  http_sd_configs:\n  - url: '{sd_url}'\n    refresh_interval: {s}s\n"
            ),
        )
        .unwrap();
        let log = dir.join(format!("prometheus-{name}.log"));
        let out = std::fs::File::create(&log).unwrap();
        let child = tokio::process::Command::new(bin)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join(format!("tsdb-{name}")).display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .arg("--log.level=warn")
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .kill_on_drop(true)
            .spawn()
            .expect("prometheus starts");
        Prometheus {
            _child: child,
            log,
            addr,
        }
    }

    /// Waits (20 s at most) until it says it is ready.
    pub async fn ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let url = format!("http://{}/-/ready", self.addr);
            let uri: http::Uri = url.parse().unwrap();
            if let Ok(r) = client().get(uri).await
                && r.status().is_success()
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "prometheus never became ready on {}: {}",
                self.addr,
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Its active targets by `leasehold_target` label (`GET /api/v1/targets?state=active`);
    /// `None` if it did not answer.
    pub async fn active(&self) -> Option<BTreeMap<String, Active>> {
        let v = get_json(&format!("http://{}/api/v1/targets?state=active", self.addr)).await?;
        let mut out = BTreeMap::new();
        for t in v["data"]["activeTargets"].as_array()? {
            let key = t["labels"]["leasehold_target"].as_str()?.to_owned();
            out.insert(
                key,
                Active {
                    health: t["health"].as_str()?.to_owned(),
                    instance: t["labels"]["instance"].as_str()?.to_owned(),
                },
            );
        }
        Some(out)
    }

    /// The times (Unix seconds) of every successful scrape of each target in the last
    /// `window`, by `leasehold_target`, from its own storage (`up == 1` raw samples, whatever
    /// the generation label).
    pub async fn scrapes(&self, window: Duration) -> BTreeMap<String, Vec<f64>> {
        let query = format!("up[{}s]", window.as_secs());
        let url = format!(
            "http://{}/api/v1/query?query={}",
            self.addr,
            percent_encoding::utf8_percent_encode(&query, percent_encoding::NON_ALPHANUMERIC)
        );
        let v = get_json(&url).await.expect("prometheus answers a query");
        let mut out: BTreeMap<String, Vec<f64>> = BTreeMap::new();
        for series in v["data"]["result"].as_array().expect("a matrix") {
            let Some(key) = series["metric"]["leasehold_target"].as_str() else {
                continue;
            };
            let times = out.entry(key.to_owned()).or_default();
            for pair in series["values"].as_array().unwrap() {
                if pair[1] == "1" {
                    times.push(pair[0].as_f64().unwrap());
                }
            }
        }
        for times in out.values_mut() {
            times.sort_by(f64::total_cmp);
        }
        out
    }
}

/// Per target, what the scrapers' own samples say over a window.
#[derive(Debug, Clone, Default)]
pub struct Coverage {
    /// The longest time with no sample from any scraper (seconds).
    pub max_gap: f64,
    /// How long two scrapers scraped it at once (seconds): the overlap of their runs of
    /// samples, a run lasting one interval past its last sample.
    pub twice: f64,
}

/// Coverage of each target in `[from, to]` (Unix seconds) from `scrapes` (scraper → target →
/// sample times).
pub fn coverage(
    scrapes: &BTreeMap<String, BTreeMap<String, Vec<f64>>>,
    from: f64,
    to: f64,
) -> BTreeMap<String, Coverage> {
    let interval = INTERVAL.as_secs_f64();
    let targets: BTreeSet<&String> = scrapes.values().flat_map(|m| m.keys()).collect();
    let mut out = BTreeMap::new();
    for t in targets {
        // Every sample in the window, and each scraper's runs (split where a sample is late by
        // more than half an interval).
        let mut all: Vec<f64> = Vec::new();
        let mut runs: Vec<(usize, f64, f64)> = Vec::new();
        for (i, by_target) in scrapes.values().enumerate() {
            let times: Vec<f64> = by_target
                .get(t)
                .into_iter()
                .flatten()
                .copied()
                .filter(|x| (from..=to).contains(x))
                .collect();
            all.extend(&times);
            let mut run: Option<(f64, f64)> = None;
            for x in times {
                run = match run {
                    Some((a, b)) if x - b <= interval * 1.5 => Some((a, x)),
                    Some((a, b)) => {
                        runs.push((i, a, b + interval));
                        Some((x, x))
                    }
                    None => Some((x, x)),
                };
            }
            if let Some((a, b)) = run {
                runs.push((i, a, (b + interval).min(to)));
            }
        }
        all.sort_by(f64::total_cmp);
        let mut edges = vec![from];
        edges.extend(&all);
        edges.push(to);
        let max_gap = edges.windows(2).map(|w| w[1] - w[0]).fold(0.0, f64::max);
        let mut twice = 0.0;
        for (n, (i, a, b)) in runs.iter().enumerate() {
            for (j, c, d) in &runs[n + 1..] {
                if i != j {
                    twice += (b.min(*d) - a.max(*c)).max(0.0);
                }
            }
        }
        out.insert(t.clone(), Coverage { max_gap, twice });
    }
    out
}

/// Unix seconds now, by this machine's clock (Prometheus' sample times are on it too).
pub fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}
