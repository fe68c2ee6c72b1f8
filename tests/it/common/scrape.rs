//! Real scrapers for the scrape tests — Prometheus (Debian's `prometheus`, or `$PROMETHEUS`)
//! and vmagent (Debian's `victoria-metrics` package, or `$VMAGENT`): one per member, whose only
//! scrape job takes its targets from its agent over HTTP service discovery; the scrape targets
//! themselves ([`MetricsTargets`]: real HTTP endpoints served by the test process on loopback,
//! which record every scrape they answer and who made it); and what each scraper says it does
//! (its own targets API). What a test checks is read from the scrapers and the targets, never
//! from Leasehold. Without a scraper's binary the tests fail with the reason when `CI` is set
//! and skip with it otherwise.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Prometheus' scrape interval and SD refresh interval in these tests (both the shortest a
/// configuration can say in whole seconds).
pub const INTERVAL: Duration = Duration::from_secs(1);

/// A scraper: which program scrapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Prometheus (its HTTP SD refresh and its discovery manager's 5 s batching).
    Prometheus,
    /// VictoriaMetrics' vmagent (its HTTP SD checked every `-promscrape.httpSDCheckInterval`).
    Vmagent,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Prometheus => "prometheus",
            Kind::Vmagent => "vmagent",
        }
    }
}

/// The scraper's binary, or `None` (said why) where it cannot be had outside CI.
pub fn binary(kind: Kind) -> Option<PathBuf> {
    let (var, flag, package) = match kind {
        Kind::Prometheus => ("PROMETHEUS", "--version", "prometheus"),
        Kind::Vmagent => ("VMAGENT", "-version", "victoria-metrics"),
    };
    let name = std::env::var_os(var).unwrap_or_else(|| kind.name().into());
    let why = match std::process::Command::new(&name)
        .arg(flag)
        .stdin(Stdio::null())
        .output()
    {
        Ok(out) if out.status.success() => {
            let version = String::from_utf8_lossy(&out.stdout);
            eprintln!("{}", version.lines().next().unwrap_or_default());
            return Some(PathBuf::from(name));
        }
        Ok(out) => format!("{name:?} {flag} exited with {}", out.status),
        Err(e) => format!(
            "no {name:?} ({e}); Debian: apt-get install {package}, or set {var} to the binary"
        ),
    };
    if std::env::var_os("CI").is_some() {
        panic!("the scrape tests cannot run: {why}");
    }
    eprintln!("SKIPPED: the scrape tests cannot run: {why}");
    None
}

pub use super::free_addr;

/// Scrape targets: an endpoint each, on a loopback port of its own, served by this process
/// until dropped (anything else on the port answers 404). Every scrape answered is recorded,
/// with the scraper that made it (its `scraper` query parameter, which each scraper's
/// configuration sets to its member's name). Also a sink that takes vmagent's remote writes.
pub struct MetricsTargets {
    pub addrs: Vec<SocketAddr>,
    /// Where vmagent may send its remote writes (accepted and dropped).
    pub sink: SocketAddr,
    /// (target index, scraper, Unix seconds) of every scrape answered.
    log: Arc<Mutex<Vec<(usize, String, f64)>>>,
    tasks: Vec<JoinHandle<()>>,
}

#[derive(serde::Deserialize)]
struct ScrapeQuery {
    #[serde(default)]
    scraper: String,
}

impl MetricsTargets {
    /// One target per path in `paths`, serving metrics there.
    pub async fn serve(paths: &[&str]) -> MetricsTargets {
        let mut addrs = Vec::new();
        let mut tasks = Vec::new();
        let log: Arc<Mutex<Vec<(usize, String, f64)>>> = Arc::default();
        for (i, path) in paths.iter().enumerate() {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            addrs.push(listener.local_addr().unwrap());
            let body =
                format!("# TYPE scrape_test_target gauge\nscrape_test_target{{n=\"{i}\"}} 1\n");
            let log = log.clone();
            let app = axum::Router::new().route(
                path,
                axum::routing::get(
                    move |axum::extract::Query(q): axum::extract::Query<ScrapeQuery>| {
                        log.lock().unwrap().push((i, q.scraper, unix_now()));
                        let body = body.clone();
                        async move { ([("content-type", "text/plain; version=0.0.4")], body) }
                    },
                ),
            );
            tasks.push(tokio::spawn(async move {
                let _ = axum::serve(listener, app).await;
            }));
        }
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let sink = listener.local_addr().unwrap();
        let app = axum::Router::new().fallback(|| async { axum::http::StatusCode::NO_CONTENT });
        tasks.push(tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        }));
        MetricsTargets {
            addrs,
            sink,
            log,
            tasks,
        }
    }

    /// The times (Unix seconds) each scraper scraped each target (`t-NN`), as the targets saw
    /// the requests: scraper → target → times, sorted.
    pub fn scrapes(&self) -> BTreeMap<String, BTreeMap<String, Vec<f64>>> {
        let mut out: BTreeMap<String, BTreeMap<String, Vec<f64>>> = BTreeMap::new();
        for (i, scraper, at) in self.log.lock().unwrap().iter() {
            out.entry(scraper.clone())
                .or_default()
                .entry(format!("t-{i:02}"))
                .or_default()
                .push(*at);
        }
        for by_target in out.values_mut() {
            for times in by_target.values_mut() {
                times.sort_by(f64::total_cmp);
            }
        }
        out
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

/// A scraper process; killed when dropped.
pub struct Scraper {
    _child: tokio::process::Child,
    log: PathBuf,
    kind: Kind,
    /// Its web address (its targets API).
    pub addr: SocketAddr,
}

impl Scraper {
    /// A scraper whose one scrape job (`leasehold`) takes its targets from `sd_url` (HTTP SD;
    /// `file:///path`: Prometheus' file SD of that file instead), refreshed and scraped every
    /// [`INTERVAL`], its data in `dir`; each scrape says it is `name`'s (the `scraper`
    /// parameter). vmagent sends what it scrapes to `sink`.
    pub fn start(
        kind: Kind,
        bin: &Path,
        dir: &Path,
        name: &str,
        sd_url: &str,
        sink: SocketAddr,
    ) -> Scraper {
        let addr = free_addr();
        let config = dir.join(format!("{}-{name}.yml", kind.name()));
        let s = INTERVAL.as_secs();
        let sd = match sd_url.strip_prefix("file://") {
            Some(file) => format!("file_sd_configs:\n  - files: ['{file}']\n"),
            None => format!("http_sd_configs:\n  - url: '{sd_url}'\n"),
        };
        let job = format!(
            "scrape_configs:\n- job_name: leasehold\n  scrape_interval: {s}s\n  scrape_timeout: {s}s\n  \
             params: {{scraper: ['{name}']}}\n  {sd}"
        );
        let text = match kind {
            Kind::Prometheus if sd_url.starts_with("file://") => job,
            Kind::Prometheus => format!("{job}    refresh_interval: {s}s\n"),
            // vmagent checks its HTTP SD every -promscrape.httpSDCheckInterval.
            Kind::Vmagent => job,
        };
        std::fs::write(&config, text).unwrap();
        let log = dir.join(format!("{}-{name}.log", kind.name()));
        let out = std::fs::File::create(&log).unwrap();
        let mut cmd = tokio::process::Command::new(bin);
        match kind {
            Kind::Prometheus => cmd
                .arg(format!("--config.file={}", config.display()))
                .arg(format!(
                    "--storage.tsdb.path={}",
                    dir.join(format!("tsdb-{name}")).display()
                ))
                .arg(format!("--web.listen-address={addr}"))
                .arg("--log.level=warn"),
            Kind::Vmagent => cmd
                .arg(format!("-promscrape.config={}", config.display()))
                .arg(format!("-promscrape.httpSDCheckInterval={s}s"))
                .arg(format!("-httpListenAddr={addr}"))
                .arg(format!("-remoteWrite.url=http://{sink}/api/v1/write"))
                .arg(format!(
                    "-remoteWrite.tmpDataPath={}",
                    dir.join(format!("vmagent-{name}-data")).display()
                ))
                .arg("-loggerLevel=WARN"),
        };
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("{} starts: {e}", kind.name()));
        Scraper {
            _child: child,
            log,
            kind,
            addr,
        }
    }

    /// Waits (20 s at most) until it says it is ready.
    pub async fn ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        let path = match self.kind {
            Kind::Prometheus => "/-/ready",
            Kind::Vmagent => "/health",
        };
        loop {
            let url = format!("http://{}{path}", self.addr);
            let uri: http::Uri = url.parse().unwrap();
            if let Ok(r) = client().get(uri).await
                && r.status().is_success()
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{} never became ready on {}: {}",
                self.kind.name(),
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
}

/// Per target, what the scrapes the targets answered say over a window.
#[derive(Debug, Clone, Default)]
pub struct Coverage {
    /// The longest time with no scrape by any scraper (seconds).
    pub max_gap: f64,
    /// How long two scrapers scraped it at once (seconds): the overlap of their runs of
    /// scrapes, a run lasting one interval past its last scrape. (A next owner that starts
    /// less than an interval after the last owner's last scrape counts here too.)
    pub twice: f64,
    /// Scrapes by one scraper made strictly between the first and the last scrape of a run of
    /// another's: two scrapers really at work on it at once.
    pub interleaved: usize,
}

/// Coverage of each target in `[from, to]` (Unix seconds) from `scrapes` (scraper → target →
/// scrape times).
pub fn coverage(
    scrapes: &BTreeMap<String, BTreeMap<String, Vec<f64>>>,
    from: f64,
    to: f64,
) -> BTreeMap<String, Coverage> {
    coverage_every(scrapes, from, to, INTERVAL)
}

/// Unix seconds now, by this machine's clock.
pub fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

// Issue 36's acceptance measurement (`tests/it/scrape_acceptance.rs`): Prometheus at an interval
// of the test's choosing, restarted as a pod's container is, and coverage at that interval.

impl Scraper {
    /// A Prometheus as [`Scraper::start`] starts one, but scraping its targets and refreshing
    /// its SD every `interval`. Started again under the same `name` (after [`Scraper::terminate`]
    /// or [`Scraper::kill`]), it keeps its data, as a restarted container with its volume does
    /// (its log is appended to).
    pub fn prometheus_every(
        bin: &Path,
        dir: &Path,
        name: &str,
        sd_url: &str,
        interval: Duration,
    ) -> Scraper {
        let addr = free_addr();
        let config = dir.join(format!("prometheus-{name}.yml"));
        let s = interval.as_secs();
        std::fs::write(
            &config,
            match sd_url.strip_prefix("file://") {
                // Prometheus' file SD (the agent's --scrape-sd-file): read when it changes.
                Some(file) => format!(
                    "scrape_configs:\n- job_name: leasehold\n  scrape_interval: {s}s\n  \
                     scrape_timeout: {s}s\n  params: {{scraper: ['{name}']}}\n  file_sd_configs:\n  \
                     - files: ['{file}']\n"
                ),
                None => format!(
                    "scrape_configs:\n- job_name: leasehold\n  scrape_interval: {s}s\n  \
                     scrape_timeout: {s}s\n  params: {{scraper: ['{name}']}}\n  http_sd_configs:\n  \
                     - url: '{sd_url}'\n    refresh_interval: {s}s\n"
                ),
            },
        )
        .unwrap();
        let log = dir.join(format!("prometheus-{name}.log"));
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap();
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
            .unwrap_or_else(|e| panic!("prometheus starts: {e}"));
        Scraper {
            _child: child,
            log,
            kind: Kind::Prometheus,
            addr,
        }
    }

    /// Stops it as a pod's termination does: SIGTERM, then SIGKILL if it has not exited
    /// within 30 s (Kubernetes' default grace period).
    pub async fn terminate(mut self) {
        if let Some(pid) = self._child.id() {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
        }
        if tokio::time::timeout(Duration::from_secs(30), self._child.wait())
            .await
            .is_err()
        {
            let _ = self._child.kill().await;
        }
    }

    /// Kills it (SIGKILL), as a crash does, and waits for it to be gone.
    pub async fn kill(mut self) {
        let _ = self._child.kill().await;
    }
}

/// [`coverage`] with scrapes every `interval` rather than every [`INTERVAL`]: per target of
/// `scrapes` (scraper → target → scrape times), over `[from, to]` (Unix seconds).
pub fn coverage_every(
    scrapes: &BTreeMap<String, BTreeMap<String, Vec<f64>>>,
    from: f64,
    to: f64,
    interval: Duration,
) -> BTreeMap<String, Coverage> {
    let interval = interval.as_secs_f64();
    let targets: BTreeSet<&String> = scrapes.values().flat_map(|m| m.keys()).collect();
    let mut out = BTreeMap::new();
    for t in targets {
        let mut all: Vec<f64> = Vec::new();
        // Each scraper's runs (split where a scrape is late by more than half an interval),
        // each lasting one interval past its last scrape, and each from its first to its last.
        let mut runs: Vec<(usize, f64, f64)> = Vec::new();
        let mut spans: Vec<(usize, f64, f64)> = Vec::new();
        let mut each: Vec<(usize, f64)> = Vec::new();
        for (i, by_target) in scrapes.values().enumerate() {
            let times: Vec<f64> = by_target
                .get(t)
                .into_iter()
                .flatten()
                .copied()
                .filter(|x| (from..=to).contains(x))
                .collect();
            all.extend(&times);
            each.extend(times.iter().map(|x| (i, *x)));
            let mut run: Option<(f64, f64)> = None;
            for x in times {
                run = match run {
                    Some((a, b)) if x - b <= interval * 1.5 => Some((a, x)),
                    Some((a, b)) => {
                        runs.push((i, a, b + interval));
                        spans.push((i, a, b));
                        Some((x, x))
                    }
                    None => Some((x, x)),
                };
            }
            if let Some((a, b)) = run {
                runs.push((i, a, (b + interval).min(to)));
                spans.push((i, a, b));
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
        let interleaved = each
            .iter()
            .filter(|(i, x)| spans.iter().any(|(j, a, b)| i != j && a < x && x < b))
            .count();
        out.insert(
            t.clone(),
            Coverage {
                max_gap,
                twice,
                interleaved,
            },
        );
    }
    out
}

impl MetricsTargets {
    /// [`MetricsTargets::serve`] on a thread and runtime of their own, so that every scrape is
    /// answered and recorded when it comes, however busy the test's own runtime is (the
    /// simulator, the control plane, the test's polling of the scrapers).
    pub fn serve_apart(paths: &[&str]) -> MetricsTargets {
        let listeners: Vec<std::net::TcpListener> = paths
            .iter()
            .map(|_| {
                let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
                l.set_nonblocking(true).unwrap();
                l
            })
            .collect();
        let addrs = listeners.iter().map(|l| l.local_addr().unwrap()).collect();
        let sink = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        sink.set_nonblocking(true).unwrap();
        let sink_addr = sink.local_addr().unwrap();
        let log: Arc<Mutex<Vec<(usize, String, f64)>>> = Arc::default();
        let paths: Vec<String> = paths.iter().map(|p| (*p).to_owned()).collect();
        // The runtime ends (and every server with it) once the task below is aborted on drop.
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let recorded = log.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                for (i, (listener, path)) in listeners.into_iter().zip(paths).enumerate() {
                    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                    let body = format!(
                        "# TYPE scrape_test_target gauge\nscrape_test_target{{n=\"{i}\"}} 1\n"
                    );
                    let log = recorded.clone();
                    let app =
                        axum::Router::new().route(
                            &path,
                            axum::routing::get(
                                move |axum::extract::Query(q): axum::extract::Query<
                                    ScrapeQuery,
                                >| {
                                    log.lock().unwrap().push((i, q.scraper, unix_now()));
                                    let body = body.clone();
                                    async move {
                                        ([("content-type", "text/plain; version=0.0.4")], body)
                                    }
                                },
                            ),
                        );
                    tokio::spawn(async move {
                        let _ = axum::serve(listener, app).await;
                    });
                }
                let sink = tokio::net::TcpListener::from_std(sink).unwrap();
                let app =
                    axum::Router::new().fallback(|| async { axum::http::StatusCode::NO_CONTENT });
                tokio::spawn(async move {
                    let _ = axum::serve(sink, app).await;
                });
                let _ = stopped.await;
            });
        });
        let tasks = vec![tokio::spawn(async move {
            let _stop = stop;
            std::future::pending::<()>().await;
        })];
        MetricsTargets {
            addrs,
            sink: sink_addr,
            log,
            tasks,
        }
    }
}

// The OpenTelemetry Collector test (`tests/it/scrape_otel.rs`): the scrape configs a Target
// Allocator serves carry no `params` of the collector's choosing, so each collector names itself
// in a header instead (its receiver's `target_allocator.http_scrape_config.http_headers`).

/// The header whose value names the scraper, for [`MetricsTargets::serve_named_by_header`].
pub const SCRAPER_HEADER: &str = "x-leasehold-scraper";

impl MetricsTargets {
    /// As [`MetricsTargets::serve`], but each scrape is recorded as made by the scraper its
    /// [`SCRAPER_HEADER`] names (its `scraper` parameter where it has no such header).
    pub async fn serve_named_by_header(paths: &[&str]) -> MetricsTargets {
        let mut addrs = Vec::new();
        let mut tasks = Vec::new();
        let log: Arc<Mutex<Vec<(usize, String, f64)>>> = Arc::default();
        for (i, path) in paths.iter().enumerate() {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            addrs.push(listener.local_addr().unwrap());
            let body =
                format!("# TYPE scrape_test_target gauge\nscrape_test_target{{n=\"{i}\"}} 1\n");
            let log = log.clone();
            let app = axum::Router::new().route(
                path,
                axum::routing::get(
                    move |headers: axum::http::HeaderMap,
                          axum::extract::Query(q): axum::extract::Query<ScrapeQuery>| {
                        let scraper = headers
                            .get(SCRAPER_HEADER)
                            .and_then(|v| v.to_str().ok())
                            .map_or(q.scraper, str::to_owned);
                        log.lock().unwrap().push((i, scraper, unix_now()));
                        let body = body.clone();
                        async move { ([("content-type", "text/plain; version=0.0.4")], body) }
                    },
                ),
            );
            tasks.push(tokio::spawn(async move {
                let _ = axum::serve(listener, app).await;
            }));
        }
        // No remote-write sink is needed (the collectors export nowhere): an address that
        // answers nothing.
        let sink = free_addr();
        MetricsTargets {
            addrs,
            sink,
            log,
            tasks,
        }
    }
}
