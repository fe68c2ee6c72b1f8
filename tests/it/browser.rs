//! Browser tests: the dashboard in headless Chromium (through chromedriver, driven by
//! fantoccini), served over real HTTP by `leasehold::http::run` beside a real engine, real
//! agents and the simulator with its fake kubelet. They log in through the form, load every
//! page and fail on any console error (CSP violations and failed loads included), check the
//! skip link is the first stop for the keyboard, run a rebalance and an instance removal from
//! the UI and watch them complete live (no reload) with relative times ticking, run axe-core
//! on every page (no serious or critical violation), load pages and
//! tabs in numbers without ever waiting for a connection, and save screenshots at 1280 px and at
//! phone width under `<target>/browser-screenshots/` for review. No two members ever work on
//! one target at once (the invariant checker records the agents' hooks — the demo's members'
//! too, whose every target is worked on by its owner alone after each control).
//!
//! Needs `chromium` and `chromedriver` (Debian: `apt-get install chromium chromium-driver`;
//! `scripts/test.sh` installs them). Without them the test fails, unless
//! `LEASEHOLD_SKIP_BROWSER=1` says to skip.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use http_body_util::BodyExt as _;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, PostParams};
use leasehold::agent::{Agent, AgentConfig};
use leasehold::config::Config;
use leasehold::config::http::HttpSettings;
use leasehold::engine::Engine;
use leasehold::store::Store;
use serde_json::{Value, json};
use tokio::sync::watch;

use common::invariant::InvariantChecker;

const NS: &str = "browser";
const CLUSTER: &str = "c";
const TOKEN: &str = "browser-operator-token";
/// A viewer's: may read every page, change nothing.
const VIEWER_TOKEN: &str = "browser-viewer-token";
const LEASE_S: u64 = 4;

/// Where the screenshots go.
fn shots() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap()
        .join("browser-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

struct Env {
    t: common::TestSim,
    base: String,
    checker: InvariantChecker,
    stop: watch::Sender<bool>,
    agents: Vec<tokio::task::JoinHandle<anyhow::Result<()>>>,
    _dir: tempfile::TempDir,
}

impl Env {
    async fn start(members: usize, targets: usize) -> Env {
        let mut t = common::start().await;
        t.spawn_kubelet();
        Api::<Namespace>::all(t.client.clone())
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap(),
            )
            .await
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let tokens = dir.path().join("tokens.csv");
        std::fs::write(
            &tokens,
            format!(
                "{TOKEN},olga,u1,\"leasehold:operators\"\n\
                 {VIEWER_TOKEN},vic,u2,\"leasehold:viewers\"\n"
            ),
        )
        .unwrap();
        let list: Vec<String> = (0..targets).map(|i| format!("dev-{i:03}")).collect();
        let yaml = format!(
            "database: sqlite:{db}
control_plane: {{namespace: {NS}, lease_duration: 2s}}
http: {{auth: {{mode: token, token_file: {tokens}}}}}
clusters:
- name: {CLUSTER}
  namespace: {NS}
  selector: {{app: c}}
  headless_service: c
  targets: {{inline: [{list}]}}
  policy: {{lease_duration: {LEASE_S}s, on_join: off, move_timeout: {LEASE_S}s}}
",
            db = dir.path().join("h.db").display(),
            tokens = tokens.display(),
            list = list.join(", "),
        );
        let config = Config::parse(&yaml, Path::new("browser.yaml")).unwrap();
        let store = Store::connect(&config.database).await.unwrap();
        let http: HttpSettings = config.http.clone();
        let engine = Engine::new(config, t.client.clone(), store, "cp".into());
        let (stop, stopped) = watch::channel(false);
        let e = engine.clone();
        let mut rx = stopped.clone();
        tokio::spawn(async move {
            e.run(async move {
                let _ = rx.wait_for(|s| *s).await;
            })
            .await
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let mut rx = stopped.clone();
        tokio::spawn(async move {
            leasehold::http::run(engine, &http, listener, None, async move {
                let _ = rx.wait_for(|s| *s).await;
            })
            .await
        });
        let mut env = Env {
            t,
            base,
            checker: InvariantChecker::new(),
            stop,
            agents: Vec::new(),
            _dir: dir,
        };
        for i in 0..members {
            env.add_member(&format!("c-{i}")).await;
        }
        env
    }

    /// A StatefulSet-style member pod and its agent.
    async fn add_member(&mut self, name: &str) {
        // StatefulSet-style: a stable DNS name through the headless Service, and an ordinal.
        let ordinal = name.rsplit('-').next().unwrap_or("0");
        let pod = json!({
            "metadata": {"name": name, "labels": {"app": "c", "apps.kubernetes.io/pod-index": ordinal}},
            "spec": {"hostname": name, "subdomain": "c",
                "containers": [{"name": "app", "image": "collector"}]}
        });
        Api::<Pod>::namespaced(self.t.client.clone(), NS)
            .create(
                &PostParams::default(),
                &serde_json::from_value(pod).unwrap(),
            )
            .await
            .unwrap();
        let mut cfg = AgentConfig::new(CLUSTER, NS, name);
        cfg.lease_duration = Duration::from_secs(LEASE_S);
        // Work stops within a third of the member Lease's duration; at the end every member
        // leaves at once, with nobody to hand over to.
        cfg.hook_timeout = Duration::from_secs(1);
        cfg.drain_timeout = Duration::from_secs(1);
        let agent = Agent::new(cfg, self.checker.hooks(name, Duration::from_millis(5)));
        let client = self.t.client.clone();
        let mut rx = self.stop.subscribe();
        self.agents.push(tokio::spawn(async move {
            agent
                .run(client, async move {
                    let _ = rx.wait_for(|s| *s).await;
                })
                .await
        }));
    }

    /// The API's view of the cluster (the session is the browser's; this uses the token).
    async fn api(&self, path: &str) -> Value {
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build_http::<http_body_util::Full<bytes::Bytes>>();
        let req = http::Request::get(format!("{}/api/v1{path}", self.base))
            .header("authorization", format!("Bearer {TOKEN}"))
            .body(Default::default())
            .unwrap();
        let res = client.request(req).await.unwrap();
        let body = res.into_body().collect().await.unwrap().to_bytes();
        serde_json::from_slice(&body).unwrap()
    }
}

/// chromedriver on a free port, and a headless Chromium session through it.
struct Browser {
    client: Client,
    driver: tokio::process::Child,
    url: String,
    // Chromium's TMPDIR (it leaves a directory in it at every start); removed on drop.
    _tmp: tempfile::TempDir,
}

/// Chromium outlives chromedriver when a test fails before closing its session: the whole
/// process group goes, so no browser is left behind.
impl Drop for Browser {
    fn drop(&mut self) {
        if let Some(pid) = self.driver.id() {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", "--", &format!("-{pid}")])
                .status();
        }
    }
}

impl Browser {
    async fn start() -> Option<Browser> {
        let exe = ["chromedriver", "/usr/bin/chromedriver"]
            .into_iter()
            .find(|c| {
                std::process::Command::new(c)
                    .arg("--version")
                    .output()
                    .is_ok()
            });
        let Some(exe) = exe else {
            if std::env::var("LEASEHOLD_SKIP_BROWSER").as_deref() == Ok("1") {
                eprintln!("skipped: no chromedriver and LEASEHOLD_SKIP_BROWSER=1");
                return None;
            }
            panic!(
                "chromedriver not found: apt-get install chromium chromium-driver \
                 (scripts/test.sh does), or set LEASEHOLD_SKIP_BROWSER=1 to skip"
            );
        };
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let tmp = tempfile::tempdir().unwrap();
        let driver = tokio::process::Command::new(exe)
            .arg(format!("--port={port}"))
            .env("TMPDIR", tmp.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // A group of its own, with the Chromium it starts (see `Drop`).
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let url = format!("http://127.0.0.1:{port}");
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            json!({"args": ["--headless", "--no-sandbox", "--disable-gpu",
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--disable-dev-shm-usage", "--window-size=1280,1000"]}),
        );
        caps.insert("goog:loggingPrefs".into(), json!({"browser": "ALL"}));
        let mut last = None;
        for _ in 0..50 {
            let connector = hyper_util::client::legacy::connect::HttpConnector::new();
            match ClientBuilder::new(connector)
                .capabilities(caps.clone())
                .connect(&url)
                .await
            {
                Ok(client) => {
                    return Some(Browser {
                        client,
                        driver,
                        url,
                        _tmp: tmp,
                    });
                }
                Err(e) => last = Some(e),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        panic!("could not start a Chromium session: {last:?}");
    }

    /// Console messages at level SEVERE since the last call (chromedriver's log endpoint).
    async fn console_errors(&self) -> Vec<String> {
        let id = self.client.session_id().await.unwrap().unwrap();
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build_http::<http_body_util::Full<bytes::Bytes>>();
        let req = http::Request::post(format!("{}/session/{id}/se/log", self.url))
            .header("content-type", "application/json")
            .body(http_body_util::Full::new(bytes::Bytes::from(
                json!({"type": "browser"}).to_string(),
            )))
            .unwrap();
        let res = client.request(req).await.unwrap();
        let body = res.into_body().collect().await.unwrap().to_bytes();
        let v: Value = serde_json::from_slice(&body).unwrap();
        v["value"]
            .as_array()
            .unwrap_or_else(|| panic!("no browser log: {v}"))
            .iter()
            .filter(|e| e["level"] == "SEVERE")
            .map(|e| e["message"].as_str().unwrap_or_default().to_owned())
            .collect()
    }

    /// Clicks the element `css`, finding it again if a live update replaced it in between.
    async fn click(&self, css: &str) {
        for _ in 0..10 {
            let el = self
                .client
                .find(Locator::Css(css))
                .await
                .unwrap_or_else(|e| panic!("{css}: {e}"));
            match el.click().await {
                Ok(()) => return,
                Err(fantoccini::error::CmdError::Standard(e))
                    if e.error == fantoccini::error::ErrorStatus::StaleElementReference =>
                {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => panic!("{css}: {e}"),
            }
        }
        panic!("{css}: replaced ten times while clicking it");
    }

    /// The text the element `css` shows, read in one step (a live update may replace the
    /// element between a find and a read).
    async fn text(&self, css: &str) -> String {
        let text = self
            .client
            .execute(
                "const e = document.querySelector(arguments[0]); return e && e.innerText;",
                vec![json!(css)],
            )
            .await
            .unwrap();
        text.as_str()
            .unwrap_or_else(|| panic!("{css}: not on the page"))
            .to_owned()
    }

    /// Waits until the element `css` shows `want`, without reloading the page.
    async fn wait_text(&self, css: &str, want: &str, timeout: Duration) {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Ok(el) = self.client.find(Locator::Css(css)).await
                && el.text().await.is_ok_and(|t| t.contains(want))
            {
                return;
            }
            if tokio::time::Instant::now() > deadline {
                let url = self.client.current_url().await.map(|u| u.to_string());
                let page = self.client.source().await.unwrap_or_default();
                panic!("{css} never showed {want:?} at {url:?}; the page:\n{page}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Saves the page at 1280 px and at 390 px (`<name>-wide.png`, `<name>-phone.png` under
    /// [`shots`]), and fails unless it fits both: the page never scrolls sideways, and at
    /// 1280 px no table needs a sideways scroll of its own either. Every page the tests visit
    /// is taken.
    async fn shot(&self, name: &str) {
        let mut misfits = Vec::new();
        for (w, h, tag) in [(1280, 1000, "wide"), (390, 844, "phone")] {
            self.client.set_window_size(w, h).await.unwrap();
            let found = self
                .client
                .execute(FITS, vec![json!(w), json!(tag == "wide")])
                .await
                .unwrap();
            let png = self.client.screenshot().await.unwrap();
            std::fs::write(shots().join(format!("{name}-{tag}.png")), png).unwrap();
            for m in found.as_array().unwrap() {
                misfits.push(format!("{name} at {w} px: {}", m.as_str().unwrap()));
            }
        }
        self.client.set_window_size(1280, 1000).await.unwrap();
        assert!(misfits.is_empty(), "{misfits:#?}");
    }

    /// Marks the page; [`Browser::same_page`] tells whether it was reloaded since.
    async fn mark(&self) {
        self.client
            .execute("window.__leaseholdMark = 1;", vec![])
            .await
            .unwrap();
    }

    async fn same_page(&self) -> bool {
        self.client
            .execute("return window.__leaseholdMark === 1;", vec![])
            .await
            .unwrap()
            == json!(true)
    }
}

/// Run in a page at `arguments[0]` px wide: why it does not fit, if it does not — the page
/// wider than the window (`document.scrollingElement.scrollWidth > window.innerWidth`), with
/// the outermost and the innermost elements that reach past its right edge; with
/// `arguments[1]` (at 1280 px), any table wider than its box; and a window that is not as wide
/// as asked.
const FITS: &str = r##"
const [asked, tables] = arguments;
const width = window.innerWidth;
const out = [];
if (width !== asked) { out.push("the window is " + width + " px wide, not " + asked); }
const past = e => e.getBoundingClientRect().right > width + 0.5;
const name = e => e.tagName.toLowerCase() + (e.id ? "#" + e.id : "") +
  (typeof e.className === "string" && e.className ? "." + e.className.trim().split(/\s+/).join(".") : "") +
  " (to " + Math.round(e.getBoundingClientRect().right) + " px: " +
  (e.textContent || "").trim().slice(0, 40) + ")";
if (document.scrollingElement.scrollWidth > width) {
  const wide = [...document.body.querySelectorAll("*")]
    .filter(e => past(e) && !e.closest(".table-wrap, .skip"));
  const outer = wide.filter(e => !wide.includes(e.parentElement)).slice(0, 4).map(name);
  const inner = wide.filter(e => !wide.some(o => o.parentElement === e)).slice(0, 6).map(name);
  out.push("scrolls sideways: " + document.scrollingElement.scrollWidth + " px wide; outermost " +
    outer.join(", ") + "; innermost " + inner.join(", "));
}
if (tables) {
  document.querySelectorAll(".table-wrap").forEach(e => {
    if (e.scrollWidth > e.clientWidth + 1) {
      out.push("table " + (e.id || e.querySelector("table").id || "") + " needs " + e.scrollWidth +
        " px in " + e.clientWidth);
    }
  });
}
return out;
"##;

/// On an operation's page (the browser is there): its gap histogram counts every move history
/// gave a gap, with history's longest; the timeline of a target it moved draws each holder and
/// each gap history has; the cluster's recent events tell the moves as one line with their
/// longest gap.
async fn pictures_agree_with_history(b: &Browser, env: &Env) {
    let c = &b.client;
    let url = c.current_url().await.unwrap();
    let page = url.as_str().to_owned();
    let op = url.path().rsplit('/').next().unwrap().to_owned();
    let count =
        |js: &'static str| async move { c.execute(js, vec![]).await.unwrap().as_u64().unwrap() };
    // History is written a moment after the moves finish: wait for page and API to agree.
    let agreed = common::eventually(Duration::from_secs(15), || async {
        let moves = env
            .api(&format!(
                "/history?operation={op}&kind=ownership&limit=1000"
            ))
            .await;
        let items = moves["items"].as_array().unwrap().clone();
        let gaps: Vec<i64> = items.iter().filter_map(|e| e["gap_ms"].as_i64()).collect();
        c.goto(&page).await.unwrap();
        let binned = count(
            "return [...document.querySelectorAll('#gap-table tbody td.num')]\
             .reduce((n, td) => n + Number(td.textContent), 0);",
        )
        .await;
        (!gaps.is_empty() && binned == gaps.len() as u64).then_some((items, gaps))
    })
    .await;
    let (items, gaps) = agreed.expect("the gap histogram never agreed with history");
    let longest = gaps.iter().max().unwrap();
    let summary = b.text("#gap-summary").await;
    assert!(
        summary.contains(&format!("{} moves", gaps.len()))
            && summary.contains(&format!("longest {}", human(*longest))),
        "{summary} (gaps {gaps:?})"
    );
    b.shot("operation-gaps").await;

    // A target it moved: one bar per holder, one mark per gap, as history has them.
    let target = items[0]["target"].as_str().unwrap();
    let rows = env
        .api(&format!(
            "/history?cluster={CLUSTER}&target={target}&kind=ownership"
        ))
        .await;
    let rows = rows["items"].as_array().unwrap();
    let holders = rows.iter().filter(|e| e["to"].is_string()).count() as u64;
    let with_gap = rows
        .iter()
        .filter(|e| e["gap_ms"].as_i64().is_some_and(|g| g > 0))
        .count() as u64;
    c.goto(&format!("{}/clusters/{CLUSTER}/targets/{target}", env.base))
        .await
        .unwrap();
    let bars =
        count("return document.querySelectorAll('svg.timeline-chart rect:not(.gap)').length;")
            .await;
    let marks =
        count("return document.querySelectorAll('svg.timeline-chart rect.gap').length;").await;
    assert_eq!((bars, marks), (holders, with_gap), "{rows:#?}");
    b.shot("target-timeline").await;

    // The cluster page: the removal's moves are one line, with their longest gap.
    c.goto(&format!("{}/clusters/{CLUSTER}", env.base))
        .await
        .unwrap();
    let events = b.text("#cluster-events").await;
    assert!(
        events.contains(&format!("{} targets", items.len())) && events.contains("longest gap"),
        "{events}"
    );
    let lines = count("return document.querySelectorAll('svg.chart.lines polyline').length;").await;
    assert!(lines >= 2, "load over time draws the members: {lines}");
    // Each member in a style of its own (its name's: `charts::styles`).
    let styles = c
        .execute(
            "return [...document.querySelectorAll('svg.chart.lines polyline')]\
             .map(p => p.getAttribute('class'));",
            vec![],
        )
        .await
        .unwrap();
    let styles: std::collections::BTreeSet<String> = serde_json::from_value(styles).unwrap();
    assert_eq!(
        styles.len() as u64,
        lines,
        "members drawn alike: {styles:?}"
    );
    b.shot("cluster-after").await;
    // Another window, chosen in the address: the chart says what it shows.
    c.goto(&format!("{}/clusters/{CLUSTER}?window=5m", env.base))
        .await
        .unwrap();
    b.wait_text("#load-h", "last 5 min", Duration::from_secs(5))
        .await;
}

/// A duration as the dashboard writes it (`page::duration`).
fn human(ms: i64) -> String {
    match ms {
        ..=999 => format!("{ms} ms"),
        1_000..=9_999 => format!("{}.{} s", ms / 1_000, ms % 1_000 / 100),
        10_000..=59_999 => format!("{} s", ms / 1_000),
        _ => format!("{} min", ms / 60_000),
    }
}

/// Who holds how many targets, by the API.
async fn loads(env: &Env) -> Vec<(String, u64)> {
    let v = env.api(&format!("/clusters/{CLUSTER}/instances")).await;
    v.as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["name"].as_str().unwrap().to_owned(),
                i["owned"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// What axe-core reports at `/docs` inside the vendored Swagger UI's own markup, which this
/// project does not write: the version badge's contrast, the operation summaries' nested
/// buttons, its servers `<select>` without a label. Anything else there fails the test.
const SWAGGER_UI_VIOLATIONS: [&str; 3] = [
    "color-contrast (serious): Elements must meet minimum color contrast ratio thresholds — <pre class=\"version\">",
    "nested-interactive (serious)",
    "select-name (critical): Select element must have an accessible name — <select id=\"servers\">",
];

/// axe-core's source (`scripts/fetch-axe.sh` fetches the pinned version from npm once, into
/// `target/`).
fn axe_source() -> String {
    let out =
        std::process::Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/fetch-axe.sh"))
            .output()
            .expect("scripts/fetch-axe.sh runs");
    assert!(
        out.status.success(),
        "scripts/fetch-axe.sh: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let path = String::from_utf8(out.stdout).unwrap();
    std::fs::read_to_string(path.trim()).unwrap()
}

/// The serious and critical violations axe-core finds on the page shown (WCAG 2 A/AA rules and
/// its best practices): rule, help, and the first offending element of each.
async fn axe_violations(c: &Client, axe: &str) -> Vec<String> {
    c.execute(&format!("{axe}\n;return true;"), vec![])
        .await
        .expect("axe-core loads into the page");
    let found = c
        .execute_async(
            "const done = arguments[arguments.length - 1];
             axe.run(document, {resultTypes: ['violations']}).then(r => done(
               r.violations
                 .filter(v => v.impact === 'serious' || v.impact === 'critical')
                 .map(v => v.id + ' (' + v.impact + '): ' + v.help + ' — ' +
                   (v.nodes[0] ? v.nodes[0].html : ''))
             ), e => done(['axe failed: ' + e]));",
            vec![],
        )
        .await
        .expect("axe-core runs");
    serde_json::from_value(found).unwrap()
}

/// Logs in with `token` through the form, asked for by the cluster page, which comes back.
async fn log_in(b: &Browser, env: &Env, token: &str, shot: bool) {
    let c = &b.client;
    c.goto(&format!("{}/clusters/{CLUSTER}", env.base))
        .await
        .unwrap();
    assert!(c.current_url().await.unwrap().path() == "/login");
    if shot {
        b.shot("login").await;
    }
    c.find(Locator::Css("#token"))
        .await
        .unwrap()
        .send_keys(token)
        .await
        .unwrap();
    b.click("button[type=submit]").await;
    b.wait_text("h1", "Cluster c", Duration::from_secs(10))
        .await;
}

/// Live pages hold a Server-Sent Events connection, and Chromium keeps pages in its back/forward
/// cache and allows six connections per host: pages that kept their feed open when left, one
/// per tab, once made the seventh page load wait for a free connection (57 s measured). With
/// Chromium's default settings, ten navigations back and forth between live pages and two more
/// tabs must each load within a second, and every page must still be live.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_page_loads_and_tabs_never_wait_for_a_connection() {
    let Some(mut b) = Browser::start().await else {
        return;
    };
    let mut env = Env::start(2, 40).await;
    log_in(&b, &env, TOKEN, false).await;
    let c = &b.client;
    let pages = [
        format!("/clusters/{CLUSTER}"),
        format!("/clusters/{CLUSTER}/instances"),
        format!("/clusters/{CLUSTER}/rebalance"),
    ];
    let mut slowest = Duration::ZERO;
    let mut timed = async |what: String, load: BoxedLoad<'_>| {
        let started = tokio::time::Instant::now();
        load.await;
        let took = started.elapsed();
        slowest = slowest.max(took);
        assert!(took < Duration::from_secs(1), "{what} took {took:?}");
    };
    for i in 0..10 {
        let path = &pages[i % pages.len()];
        let url = format!("{}{path}", env.base);
        timed(
            format!("load {i} ({path})"),
            Box::pin(async { c.goto(&url).await.unwrap() }),
        )
        .await;
        if i % 3 == 2 {
            // Back and forward: pages restored from the back/forward cache.
            timed(
                format!("back after {i}"),
                Box::pin(async { c.back().await.unwrap() }),
            )
            .await;
            timed(
                format!("forward after {i}"),
                Box::pin(async { c.forward().await.unwrap() }),
            )
            .await;
        }
    }
    let main = c.window().await.unwrap();
    for (tab, path) in pages.iter().take(2).enumerate() {
        let w = c.new_window(true).await.unwrap();
        c.switch_to_window(w.handle).await.unwrap();
        let url = format!("{}{path}", env.base);
        timed(
            format!("tab {tab}"),
            Box::pin(async { c.goto(&url).await.unwrap() }),
        )
        .await;
    }
    c.switch_to_window(main).await.unwrap();
    for (i, path) in pages.iter().enumerate() {
        let url = format!("{}{path}", env.base);
        timed(
            format!("with three tabs, load {i}"),
            Box::pin(async { c.goto(&url).await.unwrap() }),
        )
        .await;
    }
    eprintln!("slowest page load with up to three tabs: {slowest:?}");
    // Still live, in whichever tab holds the feed: a member joins, and the instances page
    // shows it without a reload.
    let url = format!("{}{}", env.base, pages[1]);
    c.goto(&url).await.unwrap();
    b.mark().await;
    env.add_member("c-2").await;
    b.wait_text("#instances", "c-2", Duration::from_secs(10))
        .await;
    assert!(b.same_page().await, "shown live, not by a reload");
    let errors = b.console_errors().await;
    assert!(errors.is_empty(), "console errors {errors:#?}");
    let _ = b.client.clone().close().await;
    let _ = b.driver.kill().await;
    let _ = env.stop.send(true);
}

type BoxedLoad<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + 'a>>;

/// Installed in a page: every `fetch` it makes and every event `app.js` takes in (its
/// `leasehold:event` hook) is logged with whether the page was visible at that moment.
const LOG_FETCHES_AND_EVENTS: &str = r#"
window.__leaseholdLog = {fetches: [], events: []};
var fetch0 = window.fetch;
window.fetch = function () {
  window.__leaseholdLog.fetches.push(document.visibilityState);
  return fetch0.apply(this, arguments);
};
document.addEventListener("leasehold:event", function (e) {
  var d = e.detail || {};
  window.__leaseholdLog.events.push([d.type, (d.data || {}).cluster || "",
    document.visibilityState]);
});
"#;

/// A hidden page (a tab behind another) takes in every event but fetches nothing for it; once
/// shown again it fetches once and shows what happened meanwhile, without a reload. (With 100
/// tabs open, every hidden tab fetching its page after each event was most of the browser's
/// CPU in `cargo bench --bench pages_live`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hidden_tab_fetches_nothing_until_shown() {
    let Some(mut b) = Browser::start().await else {
        return;
    };
    let mut env = Env::start(2, 20).await;
    let placed = common::eventually(Duration::from_secs(30), || async {
        (loads(&env).await.iter().map(|(_, n)| n).sum::<u64>() == 20).then_some(())
    })
    .await;
    assert!(placed.is_some(), "targets never placed");
    log_in(&b, &env, TOKEN, false).await;
    let c = &b.client;
    let first = c.window().await.unwrap();
    b.mark().await;
    c.execute(LOG_FETCHES_AND_EVENTS, vec![]).await.unwrap();

    // A second tab in front: the first is hidden (and still holds the feed).
    let w = c.new_window(true).await.unwrap();
    c.switch_to_window(w.handle.clone()).await.unwrap();
    c.goto(&format!("{}/clusters/{CLUSTER}/instances", env.base))
        .await
        .unwrap();
    env.add_member("c-2").await;
    b.wait_text("#instances", "c-2", Duration::from_secs(20))
        .await;
    // Time for the hidden page to fetch, had it meant to (0.4 s apart at most, and Chromium
    // runs a hidden page's timers once a second).
    tokio::time::sleep(Duration::from_secs(3)).await;

    // Shown again: it reads its log before it catches up.
    c.switch_to_window(first).await.unwrap();
    let log = c
        .execute("return window.__leaseholdLog;", vec![])
        .await
        .unwrap();
    let events = log["events"].as_array().unwrap();
    let hidden_events = events
        .iter()
        .filter(|e| e[1] == CLUSTER && e[2] == "hidden")
        .count();
    assert!(
        hidden_events > 0,
        "the first tab took in no event about its cluster while hidden: {log}"
    );
    let hidden_fetches = log["fetches"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| *v == "hidden")
        .count();
    assert_eq!(
        hidden_fetches, 0,
        "the hidden tab fetched its page {hidden_fetches} times for {hidden_events} events: {log}"
    );
    b.wait_text("#cluster-instances", "c-2", Duration::from_secs(5))
        .await;
    assert!(b.same_page().await, "shown live, not by a reload");
    let log = c
        .execute("return window.__leaseholdLog;", vec![])
        .await
        .unwrap();
    assert!(
        log["fetches"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v == "visible"),
        "{log}"
    );
    let errors = b.console_errors().await;
    assert!(errors.is_empty(), "console errors {errors:#?}");
    let _ = env.stop.send(true);
    for a in env.agents.drain(..) {
        let _ = tokio::time::timeout(Duration::from_secs(5), a).await;
    }
    let _ = b.client.clone().close().await;
    let _ = b.driver.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_dashboard_in_chromium() {
    let Some(mut b) = Browser::start().await else {
        return;
    };
    let mut env = Env::start(2, 40).await;
    let placed = common::eventually(Duration::from_secs(30), || async {
        let l = loads(&env).await;
        (l.iter().map(|(_, n)| n).sum::<u64>() == 40).then_some(l)
    })
    .await;
    assert!(
        placed.is_some(),
        "targets never placed: {:?}",
        loads(&env).await
    );

    // Log in through the form; the page asked for comes back.
    let c = &b.client;
    log_in(&b, &env, TOKEN, true).await;

    // The keyboard's first stop is the skip link.
    c.execute("document.activeElement.blur();", vec![])
        .await
        .unwrap();
    c.find(Locator::Css("body"))
        .await
        .unwrap()
        .send_keys("\u{E004}")
        .await
        .unwrap();
    let first = c
        .execute("return document.activeElement.className;", vec![])
        .await
        .unwrap();
    assert_eq!(first, json!("skip"), "Tab should reach the skip link first");

    // Every page loads with no console error (CSP violations included).
    let pages = [
        ("overview", "/".to_owned()),
        ("cluster", format!("/clusters/{CLUSTER}")),
        ("instances", format!("/clusters/{CLUSTER}/instances")),
        ("instance", format!("/clusters/{CLUSTER}/instances/c-0")),
        ("targets", format!("/clusters/{CLUSTER}/targets?q=dev-00")),
        ("target", format!("/clusters/{CLUSTER}/targets/dev-001")),
        ("rebalance", format!("/clusters/{CLUSTER}/rebalance")),
        ("operations", "/operations".to_owned()),
        ("history", "/history".to_owned()),
        ("api-docs", "/docs/".to_owned()),
    ];
    let mut inaccessible = Vec::new();
    let axe = axe_source();
    for (name, path) in &pages {
        c.goto(&format!("{}{path}", env.base)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(400)).await;
        // axe-core finds no serious or critical accessibility violation (on /docs, none but
        // the ones in Swagger UI's own markup, listed in SWAGGER_UI_VIOLATIONS).
        let mut found = axe_violations(c, &axe).await;
        if path.starts_with("/docs") {
            found.retain(|v| !SWAGGER_UI_VIOLATIONS.iter().any(|k| v.starts_with(k)));
        }
        if !found.is_empty() {
            inaccessible.push(format!("{path}: {found:#?}"));
        }
        // It fits at 1280 and 390 px (no sideways scroll of the page, nor at 1280 of a table).
        b.shot(name).await;
        let errors = b.console_errors().await;
        assert!(errors.is_empty(), "{path}: console errors {errors:#?}");
    }
    assert!(
        inaccessible.is_empty(),
        "axe-core: serious or critical violations:\n{}",
        inaccessible.join("\n")
    );

    // The plan before the third member joins: starting it later is refused.
    c.goto(&format!("{}/clusters/{CLUSTER}/rebalance", env.base))
        .await
        .unwrap();
    let plan_id = "return document.querySelector('input[name=plan_id]').value;";
    let before = c.execute(plan_id, vec![]).await.unwrap();

    // A third member joins (on_join: off), and the cluster page shows it live.
    c.goto(&format!("{}/clusters/{CLUSTER}", env.base))
        .await
        .unwrap();
    b.mark().await;
    env.add_member("c-2").await;
    b.wait_text("#cluster-instances", "c-2", Duration::from_secs(20))
        .await;
    assert!(
        b.same_page().await,
        "the page reloaded instead of updating live"
    );

    // A viewer sees both plans, read-only: what starting them needs instead of the buttons.
    viewer_sees_the_plans_read_only(&b, &env, &axe).await;

    // Rebalance from the UI: preview, start, and watch it finish live.
    c.goto(&format!("{}/clusters/{CLUSTER}/rebalance", env.base))
        .await
        .unwrap();
    let plan = b.text("#plan").await;
    assert!(plan.contains("c-2"), "{plan}");
    b.shot("rebalance-preview").await;
    // A tab still showing the plan from before c-2 joined (as if it had not kept up) starts
    // it: refused, with why and the fresh plan, which is then started.
    c.execute(
        "document.querySelector('input[name=plan_id]').value = arguments[0];",
        vec![before.clone()],
    )
    .await
    .unwrap();
    b.click("#confirm").await;
    b.wait_text("#plan-changed", "", Duration::from_secs(10))
        .await;
    let fresh = c.execute(plan_id, vec![]).await.unwrap();
    assert_ne!(fresh, before, "the refusal shows the fresh plan");
    assert!(b.text("#plan").await.contains("c-2"));
    b.shot("rebalance-stale").await;
    // The refusal is a 409 page, which Chromium logs as a failed load: that one only.
    let errors = b.console_errors().await;
    assert!(
        errors.len() == 1 && errors[0].contains("/rebalance") && errors[0].contains("409"),
        "{errors:#?}"
    );
    assert!(
        env.api("/operations").await["items"]
            .as_array()
            .unwrap()
            .is_empty(),
        "the stale plan started something"
    );
    b.click("#confirm").await;
    b.wait_text("h1", "rebalance", Duration::from_secs(10))
        .await;
    b.mark().await;
    b.wait_text("#op-state", "succeeded", Duration::from_secs(60))
        .await;
    assert!(
        b.same_page().await,
        "the operation page reloaded instead of updating live"
    );
    b.shot("rebalance-done").await;
    let balanced = common::eventually(Duration::from_secs(20), || async {
        let l = loads(&env).await;
        l.iter().all(|(_, n)| (13..=14).contains(n)).then_some(l)
    })
    .await;
    assert!(balanced.is_some(), "not balanced: {:?}", loads(&env).await);

    // Remove c-0 from the UI: the drain plan first, then the operation, live.
    c.goto(&format!("{}/clusters/{CLUSTER}/instances", env.base))
        .await
        .unwrap();
    b.click("#instance-c-0 a[href$='/remove']").await;
    b.wait_text("h1", "Remove c-0", Duration::from_secs(10))
        .await;
    b.shot("remove-preview").await;
    b.click("#confirm").await;
    b.wait_text("h1", "remove instance c-0", Duration::from_secs(10))
        .await;
    b.mark().await;
    b.wait_text("#op-state", "succeeded", Duration::from_secs(60))
        .await;
    assert!(b.same_page().await);
    b.shot("remove-done").await;
    pictures_agree_with_history(&b, &env).await;
    let drained = loads(&env).await;
    assert!(
        drained.iter().any(|(n, l)| n == "c-0" && *l == 0),
        "c-0 still holds targets: {drained:?}"
    );
    c.goto(&format!("{}/clusters/{CLUSTER}/instances", env.base))
        .await
        .unwrap();
    let row = b.text("#instance-c-0").await;
    assert!(row.contains("cordoned"), "{row}");
    b.shot("instances-after").await;
    // Uncordon… says first what uncordoning would set off (this cluster: on_join: off), with
    // the rebalance it would leave to a person; nothing is uncordoned by looking.
    b.click("#instance-c-0 a[href$='/uncordon']").await;
    b.wait_text("h1", "Uncordon c-0", Duration::from_secs(10))
        .await;
    b.wait_text("#then", "on_join: off", Duration::from_secs(1))
        .await;
    assert!(c.find(Locator::Css("#confirm")).await.is_ok());
    b.shot("uncordon-preview").await;
    let errors = b.console_errors().await;
    assert!(errors.is_empty(), "console errors {errors:#?}");

    // Relative times tick without a reload.
    c.goto(&format!("{}/operations", env.base)).await.unwrap();
    b.shot("operations-after").await;
    b.mark().await;
    let first = b.text("time[data-ago]").await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let later = b.text("time[data-ago]").await;
    assert_ne!(first, later, "the operation's age did not tick");
    assert!(later.ends_with(" ago"), "{later}");
    assert!(b.same_page().await);

    // No two members ever worked on one target at once.
    env.checker.assert_ok();
    let _ = env.stop.send(true);
    for a in env.agents.drain(..) {
        let _ = tokio::time::timeout(Duration::from_secs(5), a).await;
    }
    let _ = b.client.clone().close().await;
    let _ = b.driver.kill().await;
    let _ = Arc::new(());
}

/// Logs out and in again as a viewer, who sees the rebalance and removal plans (moves to
/// make) with no button to start them but what that would need, and no console error or
/// accessibility violation; then logs in as the operator again.
async fn viewer_sees_the_plans_read_only(b: &Browser, env: &Env, axe: &str) {
    let c = &b.client;
    b.click("header .who button[type=submit]").await;
    b.wait_text("h1", "Log in", Duration::from_secs(10)).await;
    log_in(b, env, VIEWER_TOKEN, false).await;
    for (name, path, what) in [
        (
            "rebalance-viewer",
            format!("/clusters/{CLUSTER}/rebalance"),
            "starting this rebalance needs the operator role",
        ),
        (
            "remove-viewer",
            format!("/clusters/{CLUSTER}/instances/c-0/remove"),
            "removing c-0 needs the operator role",
        ),
    ] {
        c.goto(&format!("{}{path}", env.base)).await.unwrap();
        let plan = b.text("main").await;
        assert!(plan.contains("Imbalance before"), "{path}: {plan}");
        b.wait_text("#needs", what, Duration::from_secs(5)).await;
        assert!(
            c.find(Locator::Css("#confirm")).await.is_err(),
            "{path}: a viewer is offered the start"
        );
        let found = axe_violations(c, axe).await;
        assert!(found.is_empty(), "{path}: {found:#?}");
        b.shot(name).await;
    }
    let errors = b.console_errors().await;
    assert!(errors.is_empty(), "console errors {errors:#?}");
    b.click("header .who button[type=submit]").await;
    b.wait_text("h1", "Log in", Duration::from_secs(10)).await;
    log_in(b, env, TOKEN, false).await;
}

/// Each instance and how many targets it holds: by the API, and as the page's instances table
/// shows them.
type Holdings = Vec<(String, u64)>;

/// Samples the API and the page every 100 ms until the API shows a state that is `done` and
/// has not changed for `settle`, and the page shows it too (or `timeout`); the page must reach
/// that state no more than 1 s after the API did. Returns how long after the API it was.
async fn page_follows_api<F: Future<Output = Holdings>>(
    b: &Browser,
    api: &impl Fn() -> F,
    done: impl Fn(&Holdings) -> bool,
    settle: Duration,
    timeout: Duration,
) -> Duration {
    let start = tokio::time::Instant::now();
    let mut samples: Vec<(tokio::time::Instant, Holdings, Holdings)> = Vec::new();
    loop {
        let from_api = api().await;
        let shown = b
            .client
            .execute(
                "return [...document.querySelectorAll('#cluster-instances tbody tr')]\
                 .map(r => [r.cells[0].textContent.trim(), Number(r.cells[3].textContent)]);",
                vec![],
            )
            .await
            .unwrap();
        let from_page: Holdings = serde_json::from_value(shown).unwrap();
        let now = tokio::time::Instant::now();
        samples.push((now, from_api.clone(), from_page.clone()));
        // Since when the API has shown what it shows now, and whether the page does too.
        let since = samples
            .iter()
            .rev()
            .take_while(|s| s.1 == from_api)
            .last()
            .map(|s| s.0)
            .unwrap();
        if done(&from_api) && from_page == from_api && now - since >= settle {
            break;
        }
        assert!(
            now - start < timeout,
            "the page never settled on the API's state: API {from_api:?}, page {from_page:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let last = &samples[samples.len() - 1].1;
    let settled_at = |pick: fn(&(tokio::time::Instant, Holdings, Holdings)) -> &Holdings| {
        let from = samples
            .iter()
            .rposition(|s| pick(s) != last)
            .map_or(0, |i| i + 1);
        samples[from].0
    };
    let api_at = settled_at(|s| &s.1);
    let page_at = settled_at(|s| &s.2);
    let behind = page_at.saturating_duration_since(api_at);
    let told: Vec<String> = samples
        .iter()
        .map(|(at, api, page)| format!("{:?}: api {api:?} page {page:?}", *at - start))
        .collect();
    assert!(
        behind <= Duration::from_secs(1),
        "the page showed {last:?} {behind:?} after the API did:\n{}",
        told.join("\n")
    );
    behind
}

/// `leasehold demo` in Chromium: each demo control, clicked on the cluster page, says what it
/// did, and the page's instances then agree with the API within a second of it, with no reload
/// by hand; a member on its way out is offered no control. At the work level (the members'
/// hooks): after each control every target is worked on by its owner alone, a crashed member's
/// app has died with it, a stopped one's has stopped all its work once the stop is said, and no
/// two members ever work on one target at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_demo_controls_in_chromium() {
    use super::demo::{assert_work_ended, settled};
    let Some(b) = Browser::start().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let checker = InvariantChecker::new();
    let demo = leasehold::demo::start(super::demo::options(dir.path(), "127.0.0.1:0", &checker))
        .await
        .unwrap();
    let owns = |member: &str, t: &[Value]| t.iter().any(|t| t["owner"] == member);
    let base = format!("http://127.0.0.1:{}", demo.api_addr().port());
    let cluster = leasehold::demo::COLLECTOR;
    let http = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Full<bytes::Bytes>>();
    let api = || async {
        let req = http::Request::get(format!("{base}/api/v1/clusters/{cluster}/instances"))
            .body(Default::default())
            .unwrap();
        let res = http.request(req).await.unwrap();
        let body = res.into_body().collect().await.unwrap().to_bytes();
        let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        v.as_array()
            .map(|a| {
                a.iter()
                    .map(|i| {
                        (
                            i["name"].as_str().unwrap().to_owned(),
                            i["owned"].as_u64().unwrap(),
                        )
                    })
                    .collect::<Holdings>()
            })
            .unwrap_or_default()
    };
    let placed = common::eventually(Duration::from_secs(30), || async {
        let h = api().await;
        (h.len() == 3 && h.iter().all(|(_, n)| *n > 0)).then_some(h)
    })
    .await;
    assert!(placed.is_some(), "never placed: {:?}", api().await);
    let work = Duration::from_secs(20);
    settled(demo.api_addr(), &checker, cluster, work, |_| true).await;
    let c = &b.client;
    let page = format!("{base}/clusters/{cluster}");
    c.goto(&page).await.unwrap();
    b.shot("demo").await;

    // Removing the controlling instance of the replicas cluster is warned about from every
    // entry point: its instance page, and the confirmation page reached from there and from
    // the instances list.
    let replicas = leasehold::demo::REPLICAS;
    let remove = format!("/clusters/{replicas}/instances/{replicas}-0/remove");
    let only = "the only ready instance with the role controlling";
    c.goto(&format!(
        "{base}/clusters/{replicas}/instances/{replicas}-0"
    ))
    .await
    .unwrap();
    b.wait_text("#remove-h ~ p.error-box", only, Duration::from_secs(5))
        .await;
    b.click(&format!("a[href=\"{remove}\"]")).await;
    b.wait_text("#plan-warnings", only, Duration::from_secs(10))
        .await;
    c.goto(&format!("{base}/clusters/{replicas}/instances"))
        .await
        .unwrap();
    b.click(&format!("a[href=\"{remove}\"]")).await;
    b.wait_text("#plan-warnings", only, Duration::from_secs(10))
        .await;
    b.shot("demo-remove-controlling").await;
    c.goto(&page).await.unwrap();

    // Add a member: it is said, and once membership settles a rebalance is proposed (the
    // demo's on_join: propose). The cluster page shows it live; approving it from its page
    // gives the newcomer its share.
    b.click("#demo-add").await;
    b.wait_text("#demo-notice", "Added member", Duration::from_secs(10))
        .await;
    b.mark().await;
    b.wait_text("#proposal", "waits for approval", Duration::from_secs(30))
        .await;
    assert!(b.same_page().await, "the page reloaded instead of updating");
    b.shot("demo-proposal").await;
    b.click("#proposal-review").await;
    b.wait_text("h1", "rebalance on", Duration::from_secs(10))
        .await;
    b.shot("demo-proposal-review").await;
    b.click("#approve").await;
    // Approved: its page again, no longer offering Approve.
    let approved = common::eventually(Duration::from_secs(10), || async {
        let gone = c.find(Locator::Css("#approve")).await.is_err();
        let on_it = c.find(Locator::Css("h1")).await.is_ok();
        (gone && on_it).then_some(())
    })
    .await;
    assert!(approved.is_some(), "still offered Approve after approving");
    c.goto(&page).await.unwrap();
    b.mark().await;
    let settle = Duration::from_secs(3);
    let joined = |h: &Holdings| h.len() == 4 && h.iter().all(|(_, n)| *n > 0);
    let behind = page_follows_api(&b, &api, joined, settle, Duration::from_secs(40)).await;
    eprintln!("add: the page followed the API {behind:?} later");
    assert!(b.same_page().await, "the page reloaded instead of updating");
    let after_add = api().await;
    assert_eq!(after_add.len(), 4, "{after_add:?}");
    let added = after_add
        .iter()
        .map(|(n, _)| n.clone())
        .find(|n| !["collector-0", "collector-1", "collector-2"].contains(&n.as_str()))
        .unwrap();
    settled(demo.api_addr(), &checker, cluster, work, |t| {
        owns(&added, t)
    })
    .await;

    // Crash one: said; its targets fail over, and the page follows.
    b.click("#demo-crash-collector-1").await;
    b.wait_text(
        "#demo-notice",
        "Crashed collector-1",
        Duration::from_secs(10),
    )
    .await;
    b.mark().await;
    assert!(
        c.find(Locator::Css("#demo-crash-collector-1"))
            .await
            .is_err(),
        "a crashed member is offered Crash again"
    );
    // It is shown as suspect by the clock alone, before anything of its Leases changes: its
    // heartbeat late (past 2/3 of the lease duration, 3 s here) or lost.
    b.wait_text("#cluster-instances", "heartbeat", Duration::from_secs(3))
        .await;
    assert!(b.same_page().await);
    let failed_over = |h: &Holdings| h.iter().any(|(n, owned)| n == "collector-1" && *owned == 0);
    let behind = page_follows_api(&b, &api, failed_over, settle, Duration::from_secs(40)).await;
    eprintln!("crash: the page followed the API {behind:?} later");
    let after_crash = api().await;
    assert!(
        after_crash
            .iter()
            .any(|(n, owned)| n == "collector-1" && *owned == 0),
        "{after_crash:?}"
    );
    assert_eq!(checker.working_on("collector-1"), Vec::<String>::new());
    settled(demo.api_addr(), &checker, cluster, work, |t| {
        !owns("collector-1", t)
    })
    .await;

    // Stop the added one gracefully: said; it hands its targets over and goes.
    b.click(&format!("#demo-stop-{added}")).await;
    b.wait_text(
        "#demo-notice",
        &format!("Stopped {added}"),
        Duration::from_secs(30),
    )
    .await;
    // Said once its agent has exited, after its app stopped all its work (hand-off first).
    assert_eq!(checker.working_on(&added), Vec::<String>::new());
    b.mark().await;
    let gone = |h: &Holdings| !h.iter().any(|(n, owned)| *n == added && *owned > 0);
    let behind = page_follows_api(&b, &api, gone, settle, Duration::from_secs(40)).await;
    eprintln!("stop: the page followed the API {behind:?} later");
    let after_stop = api().await;
    assert!(
        !after_stop
            .iter()
            .any(|(n, owned)| *n == added && *owned > 0),
        "{after_stop:?}"
    );
    b.shot("demo-after-controls").await;
    let errors = b.console_errors().await;
    assert!(errors.is_empty(), "console errors {errors:#?}");
    settled(demo.api_addr(), &checker, cluster, work, |t| {
        !owns(&added, t)
    })
    .await;
    let _ = b.client.clone().close().await;
    demo.stop().await.unwrap();
    assert_work_ended(&checker, &["collector-1"]);
}

/// A member crashes with the overview open (issue 34's acceptance): the collector's card says
/// "unworked" within 1 s of the API counting a target nobody works on, says it for as long as
/// the API does, and stops within 1.5 s once every target is worked again — never "healthy"
/// while targets are unworked.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_overview_shows_a_crash_as_unworked_until_every_target_is_worked() {
    use super::demo::{assert_work_ended, settled};
    let Some(b) = Browser::start().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let checker = InvariantChecker::new();
    let demo = leasehold::demo::start(super::demo::options(dir.path(), "127.0.0.1:0", &checker))
        .await
        .unwrap();
    let base = format!("http://127.0.0.1:{}", demo.api_addr().port());
    let cluster = leasehold::demo::COLLECTOR;
    let http = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Full<bytes::Bytes>>();
    let send = |method: &str, path: String| {
        let req = http::Request::builder()
            .method(method)
            .uri(format!("{base}{path}"))
            .body(Default::default())
            .unwrap();
        let res = http.request(req);
        async move {
            let res = res.await.unwrap();
            let status = res.status();
            let body = res.into_body().collect().await.unwrap().to_bytes();
            (
                status,
                serde_json::from_slice::<Value>(&body).unwrap_or(Value::Null),
            )
        }
    };
    // Targets of the collector nobody works on, as the API counts them.
    let unworked = || async {
        let (_, v) = send("GET", "/api/v1/clusters".into()).await;
        v.as_array()
            .and_then(|a| a.iter().find(|c| c["name"] == cluster))
            .map(|c| {
                c["targets"]["expired"].as_u64().unwrap_or(0)
                    + c["targets"]["unworked"].as_u64().unwrap_or(0)
            })
            .unwrap_or(0)
    };
    settled(
        demo.api_addr(),
        &checker,
        cluster,
        Duration::from_secs(30),
        |_| true,
    )
    .await;
    let c = &b.client;
    c.goto(&format!("{base}/")).await.unwrap();
    b.wait_text("#c-1", "healthy", Duration::from_secs(10))
        .await;
    b.mark().await;

    let (status, v) = send(
        "POST",
        format!("/demo/clusters/{cluster}/members/collector-1/crash"),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    let crashed = tokio::time::Instant::now();
    // (when the API began counting unworked targets, when it stopped)
    let mut api_unworked: Option<tokio::time::Instant> = None;
    let mut api_worked: Option<tokio::time::Instant> = None;
    let mut page_late: Option<Duration> = None;
    loop {
        let n = unworked().await;
        let tag = b.text("#c-1 .tag").await;
        let now = tokio::time::Instant::now();
        if n > 0 {
            let since = *api_unworked.get_or_insert(now);
            api_worked = None;
            if tag == "unworked" {
                page_late.get_or_insert(now - since);
            } else {
                // The page may lag the API by a view's staleness (`engine::views::MAX_STALE`,
                // 1 s: both read the same views, the page only when told) plus the page's
                // own gap between fetches (`MIN_GAP_MS` in app.js, 0.4 s).
                assert!(
                    now - since <= Duration::from_millis(1500),
                    "the API has counted {n} unworked targets for {:?}, the overview says {tag:?}",
                    now - since
                );
            }
        } else if api_unworked.is_some() {
            let since = *api_worked.get_or_insert(now);
            assert!(
                tag != "unworked" || now - since <= Duration::from_millis(1500),
                "every target worked again {:?} ago, the overview still says unworked",
                now - since
            );
            if tag != "unworked" && now - since >= Duration::from_secs(2) {
                break;
            }
        }
        assert!(
            crashed.elapsed() < Duration::from_secs(40),
            "no crash seen and recovered within 40 s (unworked since {:?}, tag {tag:?})",
            api_unworked.map(|t| t - crashed)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let shown = api_unworked.unwrap() - crashed;
    eprintln!("crash: unworked in the API {shown:?} after it, on the overview {page_late:?} later");
    assert!(
        b.same_page().await,
        "the overview reloaded instead of updating"
    );
    b.shot("overview-after-crash").await;
    let errors = b.console_errors().await;
    assert!(errors.is_empty(), "console errors {errors:#?}");
    let _ = b.client.clone().close().await;
    demo.stop().await.unwrap();
    assert_work_ended(&checker, &["collector-1"]);
}

/// The stories of one page of `/history` as the page tells them (the browser is there): each
/// line's moves counted (`data-count`, `data-cause`) or operation (`data-operation`,
/// `data-moved`), and the link to the next page.
const STORIES: &str = r##"
const lines = [...document.querySelectorAll("ol.timeline > li")].map(li => {
  const d = li.querySelector(":scope > details");
  return {
    count: d && d.dataset.count ? Number(d.dataset.count) : null,
    cause: d ? d.dataset.cause || null : null,
    operation: d ? d.dataset.operation || null : null,
    moved: d && d.dataset.moved ? Number(d.dataset.moved) : null,
    as_of: (li.querySelector(":scope > a.when") || {}).href || null,
  };
});
const next = document.querySelector("a[rel=next]");
return {lines, next: next ? next.href : null};
"##;

/// History for an incident, in Chromium with its default settings: a history longer than two
/// pages (120 placements, a member joining, a rebalance) paged through with the Older links,
/// every story's count equal to the rows the API lists for it; an operation told as one entry
/// with its moves; a time range set in the form and kept by the paging; the cluster as it was
/// at a line's time, its counts the API's; a bad time answered with an error box. Every page
/// fits at 1280 and 390 px.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn history_for_an_incident_in_chromium() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let mut env = Env::start(2, 120).await;
    let placed = common::eventually(Duration::from_secs(40), || async {
        let l = loads(&env).await;
        (l.iter().map(|(_, n)| n).sum::<u64>() == 120).then_some(l)
    })
    .await;
    assert!(placed.is_some(), "never placed: {:?}", loads(&env).await);
    let c = &b.client;
    log_in(&b, &env, TOKEN, false).await;
    // The placements well before what follows, for the time range below.
    tokio::time::sleep(Duration::from_secs(2)).await;
    env.add_member("c-2").await;
    b.wait_text("#cluster-instances", "c-2", Duration::from_secs(20))
        .await;
    c.goto(&format!("{}/clusters/{CLUSTER}/rebalance", env.base))
        .await
        .unwrap();
    b.wait_text("#plan", "c-2", Duration::from_secs(20)).await;
    b.click("#confirm").await;
    b.wait_text("#op-state", "succeeded", Duration::from_secs(60))
        .await;
    let op = c
        .current_url()
        .await
        .unwrap()
        .path()
        .rsplit('/')
        .next()
        .unwrap()
        .replace("%2D", "-");

    // What the API lists: every ownership row of the cluster, the placements and the
    // operation's moves among them (once history has every move the operation made).
    let done = env.api(&format!("/operations/{op}")).await["moves"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["state"] == "done")
        .count();
    assert!(done > 0, "the rebalance moved nothing");
    let counted = common::eventually(Duration::from_secs(20), || async {
        let rows = env
            .api(&format!(
                "/history?cluster={CLUSTER}&kind=ownership&limit=1000"
            ))
            .await;
        let rows = rows["items"].as_array().unwrap().clone();
        let initial = rows.iter().filter(|r| r["cause"] == "initial").count();
        let moved = rows
            .iter()
            .filter(|r| r["operation"] == op.as_str())
            .count();
        (moved >= done).then_some((initial, moved))
    })
    .await;
    let Some((initial, moved)) = counted else {
        let rows = env
            .api(&format!("/history?cluster={CLUSTER}&limit=8"))
            .await;
        panic!("history never had the {done} moves of {op}: {rows:#}");
    };
    assert_eq!(initial, 120);
    let all = env
        .api(&format!("/history?cluster={CLUSTER}&limit=1000"))
        .await;
    let total = all["items"].as_array().unwrap().len();
    assert!(
        total > 100,
        "history of {total} rows: not longer than two pages"
    );

    // Page through it: each story's count is the rows', on every page it appears.
    c.goto(&format!("{}/history?cluster={CLUSTER}", env.base))
        .await
        .unwrap();
    b.shot("history-first").await;
    let (mut pages, mut placements, mut operations) = (0, 0, 0);
    let mut as_of = None;
    loop {
        pages += 1;
        let page = c.execute(STORIES, vec![]).await.unwrap();
        // The rebalance's entries on this page.
        let mut here = 0;
        for l in page["lines"].as_array().unwrap() {
            if l["cause"] == "initial" {
                assert_eq!(l["count"], json!(initial), "page {pages}: {l}");
                placements += 1;
                as_of = as_of.or(l["as_of"].as_str().map(str::to_owned));
            }
            if l["operation"] == op.as_str() {
                assert_eq!(l["moved"], json!(moved), "page {pages}: {l}");
                operations += 1;
                here += 1;
            }
            assert!(l["operation"].is_null() || l["moved"].is_number(), "{l}");
        }
        assert!(here <= 1, "page {pages}: the rebalance told {here} times");
        match page["next"].as_str() {
            Some(_) => {
                b.click("a[rel=next]").await;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            None => break,
        }
    }
    assert!(pages >= 3, "{total} rows in {pages} pages");
    assert!(
        placements >= 2,
        "the placements reach over {placements} page(s)"
    );
    // One entry on each page its rows reach (each counting it whole).
    assert!(operations >= 1, "the rebalance is not told");
    b.shot("history-last").await;

    // A time range, set in the form: the rebalance's and nothing before it; kept by paging.
    let first = all["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["operation"] == op.as_str())
        .map(|r| r["at_ms"].as_i64().unwrap())
        .min()
        .unwrap();
    let field = |ms: i64| {
        jiff::Timestamp::from_millisecond(ms)
            .unwrap()
            .strftime("%Y-%m-%dT%H:%M:%S")
            .to_string()
    };
    c.goto(&format!("{}/history?cluster={CLUSTER}", env.base))
        .await
        .unwrap();
    c.execute(
        "document.getElementById('from').value = arguments[0];\
         document.getElementById('to').value = arguments[1];",
        vec![json!(field(first)), json!(field(first + 600_000))],
    )
    .await
    .unwrap();
    b.click("form.filters button[type=submit]").await;
    b.wait_text("#history", "Rebalance", Duration::from_secs(10))
        .await;
    let url = c.current_url().await.unwrap();
    assert!(url.query().unwrap().contains("from="), "{url}");
    let page = c.execute(STORIES, vec![]).await.unwrap();
    let lines = page["lines"].as_array().unwrap();
    assert!(
        lines
            .iter()
            .any(|l| l["operation"] == op.as_str() && l["moved"] == json!(moved))
    );
    assert!(
        lines.iter().all(|l| l["cause"] != "initial"),
        "placements are before the range"
    );
    if let Some(next) = page["next"].as_str() {
        assert!(next.contains("from=") && next.contains("to="), "{next}");
    }
    b.shot("history-range").await;

    // The cluster as it was at the placements' time: the page's counts are the API's.
    let as_of = as_of.expect("no link to the cluster as it was");
    c.goto(&as_of).await.unwrap();
    b.wait_text("h1", "as it was at", Duration::from_secs(10))
        .await;
    b.wait_text(
        "#as-of-limits",
        "Reconstructed from the history",
        Duration::from_secs(5),
    )
    .await;
    let t = c
        .current_url()
        .await
        .unwrap()
        .query_pairs()
        .find(|(k, _)| k == "t")
        .unwrap()
        .1
        .into_owned();
    let api = env
        .api(&format!(
            "/clusters/{CLUSTER}/as-of?at={}",
            t.replace('+', "%2B")
        ))
        .await;
    let summary = b.text("#as-of-summary").await;
    for i in api["instances"].as_array().unwrap() {
        let n = i["holds"].as_u64().unwrap();
        if n > 0 {
            let said = format!("{} held {n}", i["instance"].as_str().unwrap());
            assert!(summary.contains(&said), "{summary} lacks {said}: {api}");
        }
    }
    let held = api["targets"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["state"] == "held")
        .count();
    assert!(held > 0, "{api}");
    // No serious or critical accessibility violation on the range and as-of pages.
    let axe = axe_source();
    let found = axe_violations(c, &axe).await;
    assert!(found.is_empty(), "as-of: {found:#?}");
    c.back().await.unwrap();
    let found = axe_violations(c, &axe).await;
    assert!(found.is_empty(), "history range: {found:#?}");
    c.forward().await.unwrap();
    b.shot("as-of").await;
    let errors = b.console_errors().await;
    assert!(errors.is_empty(), "console errors {errors:#?}");

    // A bad time: an error box with the form, not a failure page.
    c.goto(&format!(
        "{}/history?cluster={CLUSTER}&from=yesterday",
        env.base
    ))
    .await
    .unwrap();
    b.wait_text("#history-problem", "is not a time", Duration::from_secs(5))
        .await;
    assert!(c.find(Locator::Css("form.filters")).await.is_ok());
    b.shot("history-bad-range").await;
    let errors = b.console_errors().await;
    assert!(
        errors.iter().all(|e| e.contains("400")),
        "only the refused range: {errors:#?}"
    );

    env.checker.assert_ok();
    let _ = env.stop.send(true);
    for a in env.agents.drain(..) {
        let _ = tokio::time::timeout(Duration::from_secs(5), a).await;
    }
    let _ = b.client.clone().close().await;
}
