//! Load harness for the REST API and the event feed (issue targets: `GET
//! /api/v1/clusters/{c}/targets?limit=50&…` over 50,000 targets p99 ≤ 10 ms at 500 requests/s;
//! a page's server render ≤ 20 ms; a lease change reaches 100 SSE clients with p99 ≤ 250 ms).
//!
//! Run: `cargo bench --bench api_load` (options after `--`: `--targets N --pods N --rate N
//! --seconds N --warmup N --clients N --changes N --change-rate N --pages PATH,…
//! --page-requests N --parts` any of l (list load), s (SSE fan-out), p (pages) `--renew N
//! --report-only`). `--renew N`: N Lease renewals a second in the background (`renew.rs`).
//! Under `cargo test --all-targets` it does a small smoke run and checks no target.
//!
//! Three processes: the simulator (the release `leasehold sim --fake-kubelet`), the server
//! under test (`leasehold serve`, auth `none` on loopback, SQLite in a tempdir) and this one,
//! which seeds objects and is the load generator. The binary is `CARGO_BIN_EXE_leasehold`:
//! cargo builds it with the bench's own profile before the bench runs, and hands over its exact
//! path, so no target directory or stale build is guessed at.
//!
//! - (l) Open-loop constant rate over a keep-alive pool (hyper-util): request `i` is due at
//!   `start + i / rate` and sent then whatever earlier requests are doing; its latency counts
//!   from that due time, not from when it went out, so a stalled server cannot hide its queue
//!   (no coordinated omission). A mix of first pages, later pages by cursor (cursors the server
//!   handed out in a walk over every page), `owner=`, `q=` and `state=`.
//! - (s) `--clients` SSE streams on `/api/v1/events`, then `--changes` Lease writes to the
//!   simulator (each moves one target to the next pod: desired owner and holder, as a finished
//!   handoff leaves it), open-loop at `--change-rate`; delay from just before the write is sent
//!   to the `ownership` event with that target and new holder arriving, per client.
//! - (p) Sequential GETs of each `--pages` path (`{cluster}`, `{target}` filled in): a page's
//!   server time with nothing else running.

#[path = "../common/mod.rs"]
mod common;
mod list;
mod renew;
mod sse;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use common::procs::{self, CLUSTER, Serve, get, http_client, start_serve, start_sim, target};
use common::{cpu_s, machine, ms, percentile, spread};

/// The page size.
const LIMIT: usize = 50;
/// Targets of the issue.
const LIST_P99: Duration = Duration::from_millis(10);
const PAGE_P99: Duration = Duration::from_millis(20);
const SSE_P99: Duration = Duration::from_millis(250);

struct Args {
    full: bool,
    targets: usize,
    pods: usize,
    cp_namespace: String,
    rate: u64,
    seconds: u64,
    warmup: u64,
    clients: usize,
    changes: usize,
    change_rate: u64,
    pages: Vec<String>,
    page_requests: usize,
    parts: String,
    report_only: bool,
    samples: Option<String>,
    renew: u64,
}

fn args() -> Args {
    // `cargo bench` passes `--bench`; anything else (`cargo test --all-targets`) gets a smoke
    // run that checks the harness works without spending minutes in a debug build.
    let full = std::env::args().any(|a| a == "--bench");
    let pages = vec![
        "/api/v1/clusters/{cluster}/targets/{target}".to_owned(),
        "/clusters/{cluster}/targets/{target}".to_owned(),
    ];
    let mut a = if full {
        Args {
            full,
            targets: 50_000,
            pods: 8,
            cp_namespace: "leasehold".into(),
            rate: 500,
            seconds: 20,
            warmup: 5,
            clients: 100,
            changes: 200,
            change_rate: 20,
            pages,
            page_requests: 200,
            parts: "lsp".into(),
            report_only: false,
            samples: None,
            renew: 0,
        }
    } else {
        Args {
            full,
            targets: 300,
            pods: 2,
            cp_namespace: "leasehold".into(),
            rate: 50,
            seconds: 2,
            warmup: 1,
            clients: 5,
            changes: 10,
            change_rate: 10,
            pages,
            page_requests: 5,
            parts: "lsp".into(),
            report_only: true,
            samples: None,
            renew: 20,
        }
    };
    let argv: Vec<String> = std::env::args().collect();
    for (i, flag) in argv.iter().enumerate() {
        let val = || argv.get(i + 1).and_then(|v| v.parse::<u64>().ok());
        let text = || argv.get(i + 1).cloned().unwrap_or_default();
        match flag.as_str() {
            "--targets" => a.targets = val().map_or(a.targets, |v| v as usize),
            "--pods" => a.pods = val().map_or(a.pods, |v| v as usize),
            "--rate" => a.rate = val().unwrap_or(a.rate),
            "--seconds" => a.seconds = val().unwrap_or(a.seconds),
            "--warmup" => a.warmup = val().unwrap_or(a.warmup),
            "--clients" => a.clients = val().map_or(a.clients, |v| v as usize),
            "--changes" => a.changes = val().map_or(a.changes, |v| v as usize),
            "--change-rate" => a.change_rate = val().unwrap_or(a.change_rate),
            "--page-requests" => a.page_requests = val().map_or(a.page_requests, |v| v as usize),
            "--pages" => a.pages = text().split(',').map(str::to_owned).collect(),
            "--parts" => a.parts = text(),
            "--cp-namespace" => a.cp_namespace = text(),
            "--report-only" => a.report_only = true,
            "--samples" => a.samples = Some(text()),
            "--renew" => a.renew = val().unwrap_or(a.renew),
            _ => {}
        }
    }
    a.pods = a.pods.max(2);
    a.changes = a.changes.min(a.targets);
    a
}

struct Report {
    rows: Vec<(String, String)>,
    missed: Vec<String>,
}

impl Report {
    fn row(&mut self, k: impl Into<String>, v: impl Into<String>) {
        self.rows.push((k.into(), v.into()));
    }

    /// Notes a missed target (a failure unless only reporting).
    fn check(&mut self, what: &str, p99: Duration, target: Duration) {
        if p99 > target {
            self.missed
                .push(format!("{what}: p99 {} > {}", ms(p99), ms(target)));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// (p) Pages, one request at a time.

async fn pages_part(a: &Args, serve: &Serve, r: &mut Report) -> anyhow::Result<()> {
    let client = http_client();
    for template in &a.pages {
        let mut times = Vec::new();
        let mut statuses: BTreeMap<u16, usize> = BTreeMap::new();
        for k in 0..a.page_requests {
            let path = template
                .replace("{cluster}", CLUSTER)
                .replace("{target}", &target((k * 997) % a.targets));
            let t = Instant::now();
            let (status, _) = get(&client, &format!("{}{path}", serve.base)).await?;
            times.push(t.elapsed());
            *statuses.entry(status).or_default() += 1;
        }
        let ok = statuses.keys().all(|s| (200..300).contains(s));
        let statuses: Vec<String> = statuses.iter().map(|(s, n)| format!("{n}× {s}")).collect();
        r.row(
            format!(
                "page `GET {template}`, {} sequential requests, p50 / p90 / p99 / max",
                a.page_requests
            ),
            format!("{} ({})", spread(&mut times), statuses.join(", ")),
        );
        if ok {
            r.check(template, percentile(&times, 99.0), PAGE_P99);
        }
    }
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    common::log_to_stderr();
    let a = args();
    let machine = machine();
    let dir = tempfile::tempdir()?;
    let sim = start_sim(dir.path()).await?;
    let t = Instant::now();
    procs::seed(&sim, a.targets, a.pods, &a.cp_namespace).await?;
    let seeded = t.elapsed();
    let t = Instant::now();
    let mut serve = start_serve(dir.path(), &sim, a.targets, &a.cp_namespace).await?;
    let mut r = Report {
        rows: Vec::new(),
        missed: Vec::new(),
    };
    r.row("machine (load average at start)", machine);
    r.row(
        format!(
            "setup: {} Leases held by {} pods seeded; `serve` ready with all held",
            a.targets, a.pods
        ),
        format!(
            "seeded in {:.1} s; ready {:.1} s after start",
            seeded.as_secs_f64(),
            t.elapsed().as_secs_f64()
        ),
    );
    let renewals = renew::start(&sim, &a);
    let mut result = Ok(());
    if a.parts.contains('l') {
        result = list::list_part(&a, &sim, &serve, &mut r).await;
    }
    if result.is_ok() && a.parts.contains('p') {
        result = pages_part(&a, &serve, &mut r).await;
    }
    if result.is_ok() && a.parts.contains('s') {
        result = sse::sse_part(&a, &sim, &serve, &mut r).await;
    }
    if let Some(renewals) = renewals {
        let done = renewals.finish(&mut r).await;
        result = result.and(done);
    }
    procs::print_rows(a.full, &r.rows);
    serve.still_running()?;
    // The server's warnings (RUST_LOG=warn), if any, for the reader of the run; while it
    // syncs, /readyz answers 503, which its trace layer logs as errors.
    let log = serve.log_tail(5);
    if !log.is_empty() {
        eprintln!("leasehold serve's log, the last lines:\n{log}");
    }
    serve.child.kill().await.ok();
    if let Ok(keep) = std::env::var("SERVE_LOG_DIR") {
        std::fs::copy(serve.log_path(), Path::new(&keep).join("serve.log"))?;
    }
    result?;
    if !r.missed.is_empty() && !a.report_only {
        anyhow::bail!("targets missed: {}", r.missed.join("; "));
    }
    for m in &r.missed {
        eprintln!("target missed (reported only): {m}");
    }
    Ok(())
}
