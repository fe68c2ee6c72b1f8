//! Headless Chromium through chromedriver (fantoccini), with Chromium's default settings:
//! `--headless`, and `--no-sandbox` only when running as root (Chromium refuses to start as
//! root otherwise). Opens the dashboard pages, installs the arrival listener in each, reads the
//! arrivals back, and accounts for (and in the end stops) every process the browser started.
//! chromedriver and Chromium get a temporary directory of their own as `TMPDIR` (removed at the
//! end): Chromium leaves a directory for its process-singleton socket in it at every start and
//! quit.

use std::process::Stdio;
use std::time::Duration;

use fantoccini::wd::WindowHandle;
use fantoccini::{Client, ClientBuilder};
use serde_json::{Value, json};

/// Installed in each page once it has loaded: every event `static/app.js` takes in (its
/// `leasehold:event` hook) is stored with its arrival time, ms since the epoch by the page's
/// clock (`performance.timeOrigin + performance.now()`, the system clock the harness reads
/// too), how it came (`feed`: this page holds the feed; `tab`: over the BroadcastChannel) and
/// whether the page was visible, with the event's `at_ms` (when the server's index applied the
/// change, whole ms since the epoch). Ownership events and resyncs only.
const LISTEN: &str = r#"
if (!window.__leaseholdArrivals) {
  window.__leaseholdArrivals = [];
  document.addEventListener("leasehold:event", function (e) {
    var t = performance.timeOrigin + performance.now();
    var d = e.detail || {};
    var x = d.data || {};
    if (d.type !== "ownership" && d.type !== "resync") { return; }
    window.__leaseholdArrivals.push([d.type, x.target || "", x.to || "", t, d.via,
      document.visibilityState === "visible", x.at_ms || null]);
  });
}
return !!document.querySelector("[data-live]");
"#;

/// Reads the arrivals back, and the page's clock against the system clock now
/// (`Date.now()` minus `performance.timeOrigin + performance.now()`, ms).
const COLLECT: &str = r#"
return {skew: Date.now() - (performance.timeOrigin + performance.now()),
        arrivals: window.__leaseholdArrivals || null};
"#;

/// One event as a page took it in.
pub(crate) struct Arrival {
    pub(crate) kind: String,
    pub(crate) target: String,
    pub(crate) to: String,
    /// ms since the epoch.
    pub(crate) at_ms: f64,
    /// Through this page's own feed (not another tab's).
    pub(crate) feed: bool,
    pub(crate) visible: bool,
    /// The event's `at_ms`: when the server's index applied the change.
    pub(crate) indexed_ms: Option<f64>,
}

/// What one page has taken in so far.
pub(crate) struct PageLog {
    pub(crate) arrivals: Vec<Arrival>,
    /// The page's clock minus the system clock, ms.
    pub(crate) skew_ms: f64,
}

pub(crate) struct Browser {
    client: Client,
    driver: tokio::process::Child,
    driver_pid: u32,
    pages: Vec<WindowHandle>,
    // Chromium's TMPDIR; removed on drop.
    _tmp: tempfile::TempDir,
}

/// Whether this process runs as root (`Uid:` in `/proc/self/status`).
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().next().map(|u| u == "0"))
        .unwrap_or(false)
}

/// chromedriver, if installed.
pub(crate) fn chromedriver() -> Option<&'static str> {
    ["chromedriver", "/usr/bin/chromedriver"]
        .into_iter()
        .find(|c| {
            std::process::Command::new(c)
                .arg("--version")
                .output()
                .is_ok()
        })
}

impl Browser {
    /// Starts chromedriver (`exe`) on a free port and a headless Chromium session through it.
    pub(crate) async fn start(exe: &str) -> anyhow::Result<Browser> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let tmp = tempfile::tempdir()?;
        let driver = tokio::process::Command::new(exe)
            .arg(format!("--port={port}"))
            .env("TMPDIR", tmp.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()?;
        let driver_pid = driver.id().unwrap_or(0);
        let mut args = vec!["--headless"];
        if is_root() {
            args.push("--no-sandbox");
        }
        let mut caps = serde_json::Map::new();
        caps.insert("goog:chromeOptions".into(), json!({ "args": args }));
        let url = format!("http://127.0.0.1:{port}");
        let mut last = None;
        for _ in 0..50 {
            let connector = hyper_util::client::legacy::connect::HttpConnector::new();
            match ClientBuilder::new(connector)
                .capabilities(caps.clone())
                .connect(&url)
                .await
            {
                Ok(client) => {
                    return Ok(Browser {
                        client,
                        driver,
                        driver_pid,
                        pages: Vec::new(),
                        _tmp: tmp,
                    });
                }
                Err(e) => last = Some(e),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        anyhow::bail!("could not start a Chromium session: {last:?}")
    }

    /// Opens `url` in a new tab (or window), the first in the window the session started
    /// with, and installs the arrival listener once it has loaded.
    pub(crate) async fn open(&mut self, url: &str, as_tab: bool) -> anyhow::Result<()> {
        let handle = if self.pages.is_empty() {
            self.client.window().await?
        } else {
            let w = self.client.new_window(as_tab).await?;
            self.client.switch_to_window(w.handle.clone()).await?;
            w.handle
        };
        self.client.goto(url).await?;
        let live = self.client.execute(LISTEN, vec![]).await?;
        anyhow::ensure!(
            live == json!(true),
            "page {} ({url}) has no live region",
            self.pages.len()
        );
        self.pages.push(handle);
        Ok(())
    }

    /// Every page's arrivals so far, in the order the pages were opened.
    pub(crate) async fn collect(&self) -> anyhow::Result<Vec<PageLog>> {
        let mut out = Vec::with_capacity(self.pages.len());
        for (i, handle) in self.pages.iter().enumerate() {
            self.client.switch_to_window(handle.clone()).await?;
            let v = self.client.execute(COLLECT, vec![]).await?;
            let Some(rows) = v["arrivals"].as_array() else {
                anyhow::bail!("page {i} lost its listener (reloaded?)");
            };
            let arrivals = rows
                .iter()
                .map(|r| Arrival {
                    kind: r[0].as_str().unwrap_or_default().to_owned(),
                    target: r[1].as_str().unwrap_or_default().to_owned(),
                    to: r[2].as_str().unwrap_or_default().to_owned(),
                    at_ms: r[3].as_f64().unwrap_or(f64::NAN),
                    feed: r[4] == "feed",
                    visible: r[5] == Value::Bool(true),
                    indexed_ms: r[6].as_f64(),
                })
                .collect();
            out.push(PageLog {
                arrivals,
                skew_ms: v["skew"].as_f64().unwrap_or(f64::NAN),
            });
        }
        Ok(out)
    }

    /// The browser's processes: chromedriver's descendants (pids).
    pub(crate) fn processes(&self) -> Vec<u32> {
        descendants(self.driver_pid)
    }

    /// Ends the session (Chromium quits), stops chromedriver and kills whatever the browser
    /// left behind.
    pub(crate) async fn stop(mut self) {
        let started = self.processes();
        let _ = tokio::time::timeout(Duration::from_secs(30), self.client.clone().close()).await;
        let _ = self.driver.kill().await;
        let left: Vec<String> = started
            .into_iter()
            .filter(|p| {
                std::fs::read_to_string(format!("/proc/{p}/comm"))
                    .is_ok_and(|c| c.starts_with("chrom"))
            })
            .map(|p| p.to_string())
            .collect();
        if !left.is_empty() {
            let _ = std::process::Command::new("kill")
                .arg("-9")
                .args(&left)
                .status();
        }
    }
}

/// The descendants of `root`, from `/proc/*/stat`.
fn descendants(root: u32) -> Vec<u32> {
    let mut parent = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, r)| r.split_whitespace().nth(1)?.parse::<u32>().ok());
        if let Some(ppid) = ppid {
            parent.push((pid, ppid));
        }
    }
    let mut out = vec![root];
    let mut i = 0;
    while i < out.len() {
        let p = out[i];
        out.extend(parent.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    out.remove(0);
    out
}

/// Proportional set size of `pids` together (shared pages split between their users), MiB,
/// from `/proc/PID/smaps_rollup`.
pub(crate) fn pss_mib(pids: &[u32]) -> f64 {
    let kib: u64 = pids
        .iter()
        .filter_map(|p| {
            std::fs::read_to_string(format!("/proc/{p}/smaps_rollup"))
                .ok()?
                .lines()
                .find_map(|l| l.strip_prefix("Pss:"))?
                .split_whitespace()
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum();
    kib as f64 / 1024.0
}
