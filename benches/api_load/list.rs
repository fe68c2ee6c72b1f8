//! (l) The target list at a constant rate: a walk over every page for the cursors, then an
//! open-loop run of a query mix, each request timed from its due time.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng as _};

use super::common::MachineCpu;
use super::procs::{Http, Serve, Sim, get, get_json, http_client, member};
use super::{Args, CLUSTER, LIMIT, LIST_P99, Report, cpu_s, percentile, spread};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    First,
    Cursor,
    Owner,
    Text,
    State,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::First => "first page",
            Kind::Cursor => "later page (cursor)",
            Kind::Owner => "owner= (half with a cursor)",
            Kind::Text => "q= (3 digits)",
            Kind::State => "state= (owned: all match; moving: none)",
        }
    }
}

/// The query mix: 20% first pages, 30% later pages, 20% `owner=`, 15% `q=`, 15% `state=`.
struct Mix {
    rng: StdRng,
    cursors: Vec<String>,
    pods: usize,
    base: String,
}

impl Mix {
    fn next(&mut self) -> (Kind, String) {
        let cursor = |rng: &mut StdRng| {
            let c = &self.cursors[rng.random_range(0..self.cursors.len())];
            format!("&cursor={}", utf8_percent_encode(c, NON_ALPHANUMERIC))
        };
        let roll = self.rng.random_range(0..100);
        let (kind, query) = match roll {
            0..20 => (Kind::First, String::new()),
            20..50 if !self.cursors.is_empty() => (Kind::Cursor, cursor(&mut self.rng)),
            20..50 => (Kind::First, String::new()),
            50..70 => {
                let owner = member(self.rng.random_range(0..self.pods));
                let more = if self.rng.random_bool(0.5) && !self.cursors.is_empty() {
                    cursor(&mut self.rng)
                } else {
                    String::new()
                };
                (Kind::Owner, format!("&owner={owner}{more}"))
            }
            70..85 => (
                Kind::Text,
                format!("&q={:03}", self.rng.random_range(0..1000)),
            ),
            _ => {
                let state = if self.rng.random_bool(0.5) {
                    "owned"
                } else {
                    "moving"
                };
                (Kind::State, format!("&state={state}"))
            }
        };
        (
            kind,
            format!(
                "{}/api/v1/clusters/{CLUSTER}/targets?limit={LIMIT}{query}",
                self.base
            ),
        )
    }
}

/// Walks every page of the list (checking each target comes once, in order) and returns the
/// cursors the server handed out.
async fn walk(client: &Http, base: &str, targets: usize) -> anyhow::Result<Vec<String>> {
    let mut cursors = Vec::new();
    let mut seen = 0;
    let mut last = String::new();
    loop {
        let more = cursors.last().map_or(String::new(), |c: &String| {
            format!("&cursor={}", utf8_percent_encode(c, NON_ALPHANUMERIC))
        });
        let page = get_json(
            client,
            &format!("{base}/api/v1/clusters/{CLUSTER}/targets?limit={LIMIT}{more}"),
        )
        .await?;
        for t in page["items"].as_array().into_iter().flatten() {
            let key = t["key"].as_str().unwrap_or_default();
            anyhow::ensure!(*key > *last, "page order: {key:?} after {last:?}");
            key.clone_into(&mut last);
            seen += 1;
        }
        match page["next_cursor"].as_str() {
            Some(c) => cursors.push(c.to_owned()),
            None => break,
        }
    }
    anyhow::ensure!(
        seen == targets,
        "the pages hold {seen} of {targets} targets"
    );
    Ok(cursors)
}

struct Sample {
    kind: Kind,
    /// Due time, from the start of the run.
    due: Duration,
    latency: Duration,
    error: Option<String>,
}

/// Sends `rate × seconds` requests open-loop; each request's latency counts from its due time.
async fn open_loop(client: &Http, mix: &mut Mix, rate: u64, seconds: u64) -> Vec<Sample> {
    let n = rate * seconds;
    let start = tokio::time::Instant::now() + Duration::from_millis(10);
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..n {
        let due = start + Duration::from_secs_f64(i as f64 / rate as f64);
        tokio::time::sleep_until(due).await;
        let (kind, uri) = mix.next();
        let client = client.clone();
        tasks.spawn(async move {
            let error = match get(&client, &uri).await {
                Ok((200, body)) if !body.is_empty() => None,
                Ok((s, body)) => Some(format!("{s} {}", String::from_utf8_lossy(&body))),
                Err(e) => Some(e.to_string()),
            };
            Sample {
                kind,
                due: due - start,
                latency: due.elapsed(),
                error,
            }
        });
    }
    tasks.join_all().await
}

pub(crate) async fn list_part(
    a: &Args,
    sim: &Sim,
    serve: &Serve,
    r: &mut Report,
) -> anyhow::Result<()> {
    let client = http_client();
    let t = Instant::now();
    let cursors = walk(&client, &serve.base, a.targets).await?;
    r.row(
        format!(
            "walk of every page (limit {LIMIT}), one at a time: {} pages",
            cursors.len() + 1
        ),
        format!(
            "{:.2} s, every target once and in order",
            t.elapsed().as_secs_f64()
        ),
    );
    let mut mix = Mix {
        rng: StdRng::seed_from_u64(7),
        cursors,
        pods: a.pods,
        base: serve.base.clone(),
    };
    open_loop(&client, &mut mix, a.rate, a.warmup).await;
    let pids = [serve.pid, sim.pid, std::process::id()];
    let cpu0 = pids.map(cpu_s);
    let machine0 = MachineCpu::now();
    let served0 = served_within(&client, &serve.base).await?;
    let t = Instant::now();
    // Wall-clock start, to line the samples up with the server's log (the first request is due
    // 10 ms later).
    let wall = jiff::Timestamp::now();
    let samples = open_loop(&client, &mut mix, a.rate, a.seconds).await;
    let secs = t.elapsed().as_secs_f64();
    let (busy, steal) = MachineCpu::now().since(&machine0);
    let served = served_within(&client, &serve.base).await?;
    let cpu: Vec<f64> = pids
        .iter()
        .zip(cpu0)
        .map(|(pid, c0)| (cpu_s(*pid) - c0) / secs)
        .collect();
    if let Some(path) = &a.samples {
        // One line per request, for a plot or a look at when the slow ones happen.
        let mut csv = format!("# started {wall}\ndue_ms,latency_ms,kind\n");
        for s in &samples {
            csv.push_str(&format!(
                "{:.3},{:.3},{:?}\n",
                s.due.as_secs_f64() * 1e3,
                s.latency.as_secs_f64() * 1e3,
                s.kind
            ));
        }
        std::fs::write(path, csv)?;
    }
    let errors: Vec<&Sample> = samples.iter().filter(|s| s.error.is_some()).collect();
    let mut all: Vec<Duration> = samples.iter().map(|s| s.latency).collect();
    r.row(
        format!(
            "list latency from due time, p50 / p90 / p99 / max: {} requests at {}/s for {} s (after {} s warm-up), limit {LIMIT}",
            samples.len(),
            a.rate,
            a.seconds,
            a.warmup
        ),
        spread(&mut all),
    );
    r.check("target list", percentile(&all, 99.0), LIST_P99);
    let mut by_kind: BTreeMap<Kind, Vec<Duration>> = BTreeMap::new();
    for s in &samples {
        by_kind.entry(s.kind).or_default().push(s.latency);
    }
    for (kind, mut v) in by_kind {
        r.row(
            format!("… {} ({} requests)", kind.label(), v.len()),
            spread(&mut v),
        );
    }
    r.row(
        "… errors (non-200 or failed)",
        match errors.first() {
            None => "0".to_owned(),
            Some(e) => format!(
                "{}, first: {}",
                errors.len(),
                e.error.as_deref().unwrap_or_default()
            ),
        },
    );
    r.row(
        "… CPU during the run, in % of a core: `leasehold serve`; the simulator; this harness",
        format!(
            "{:.0}%; {:.0}%; {:.0}%",
            cpu[0] * 100.0,
            cpu[1] * 100.0,
            cpu[2] * 100.0
        ),
    );
    r.row(
        "… the machine during the run: busy; stolen by the hypervisor",
        format!("{busy:.0}%; {steal:.1}%"),
    );
    // The server's own view (`/metrics`), to tell its time from waiting for a core.
    let within: Vec<String> = served
        .iter()
        .zip(&served0)
        .map(|((le, n), (_, n0))| (le, n - n0))
        .filter(|(le, _)| **le <= 0.016)
        .map(|(le, n)| {
            let total = served
                .last()
                .map_or(1, |l| l.1 - served0.last().map_or(0, |l0| l0.1));
            format!(
                "≤ {:.0} ms {:.2}%",
                le * 1e3,
                100.0 * n as f64 / total.max(1) as f64
            )
        })
        .collect();
    r.row(
        "… answered by `serve` within (its `http_request_duration_seconds` buckets)",
        within.join(", "),
    );
    anyhow::ensure!(errors.is_empty(), "{} requests failed", errors.len());
    Ok(())
}

/// The target list's cumulative latency buckets from the server's `/metrics`: `(le, count)`,
/// ascending, the last one `+Inf`.
async fn served_within(client: &Http, base: &str) -> anyhow::Result<Vec<(f64, u64)>> {
    let (status, body) = get(client, &format!("{base}/metrics")).await?;
    anyhow::ensure!(status == 200, "GET /metrics: {status}");
    let text = String::from_utf8_lossy(&body);
    let mut out: Vec<(f64, u64)> = text
        .lines()
        .filter(|l| {
            l.starts_with("leasehold_http_request_duration_seconds_bucket{")
                && l.contains("route=\"/api/v1/clusters/{cluster}/targets\"")
                && l.contains("status=\"2xx\"")
        })
        .filter_map(|l| {
            let le = l.split("le=\"").nth(1)?.split('"').next()?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, l.rsplit(' ').next()?.parse().ok()?))
        })
        .collect();
    out.sort_by(|a, b| a.0.total_cmp(&b.0));
    Ok(out)
}
