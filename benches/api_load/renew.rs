//! (`--renew N`) Lease renewals in the background while the other parts measure: N merge
//! patches a second to the simulator, open-loop, each setting one held Lease's `renewTime` to
//! now, in rotation over every target — what members renewing their holds do. The server's
//! index then changes all the time, as in a running cluster (where 50,000 targets renewed every
//! `lease_duration / 3` = 5 s are 10,000 writes a second).

use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use serde_json::json;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::procs::{Sim, patch_lease, target};
use super::{Args, Report, spread};

/// Renewal writes in flight at once; a renewal due while this many are out is skipped (and
/// counted), so a slow simulator cannot queue writes without bound.
const IN_FLIGHT: usize = 64;

#[derive(Default)]
struct Stats {
    ok: usize,
    failed: usize,
    skipped: usize,
    first_error: Option<String>,
    rtt: Vec<Duration>,
    elapsed: Duration,
}

/// Renewals running in the background.
pub(crate) struct Renewals {
    rate: u64,
    stop: watch::Sender<bool>,
    task: JoinHandle<Stats>,
}

/// Starts renewing at `a.renew` writes a second (none if 0).
pub(crate) fn start(sim: &Sim, a: &Args) -> Option<Renewals> {
    if a.renew == 0 {
        return None;
    }
    let (stop, stop_rx) = watch::channel(false);
    let (client, rate, targets) = (sim.client.clone(), a.renew, a.targets);
    let task = tokio::spawn(renew(client, rate, targets, stop_rx));
    Some(Renewals { rate, stop, task })
}

async fn renew(
    client: kube::Client,
    rate: u64,
    targets: usize,
    stop: watch::Receiver<bool>,
) -> Stats {
    let mut stats = Stats::default();
    let mut writes = tokio::task::JoinSet::new();
    let start = tokio::time::Instant::now();
    let began = Instant::now();
    // A prime stride (coprime with the target count unless it divides it) spreads consecutive
    // renewals over the list and still visits every target.
    let stride = if targets.is_multiple_of(7919) {
        1
    } else {
        7919
    };
    let mut i: u64 = 0;
    while !*stop.borrow() {
        let due = start + Duration::from_secs_f64(i as f64 / rate as f64);
        tokio::time::sleep_until(due).await;
        while let Some(done) = writes.try_join_next() {
            record(&mut stats, done);
        }
        let idx = (i as usize * stride) % targets;
        i += 1;
        if writes.len() >= IN_FLIGHT {
            stats.skipped += 1;
            continue;
        }
        let client = client.clone();
        writes.spawn(async move {
            let now = serde_json::to_value(MicroTime(jiff::Timestamp::now()))?;
            let t = Instant::now();
            patch_lease(&client, &target(idx), json!({"spec": {"renewTime": now}})).await?;
            anyhow::Ok(t.elapsed())
        });
    }
    while let Some(done) = writes.join_next().await {
        record(&mut stats, done);
    }
    stats.elapsed = began.elapsed();
    stats
}

fn record(stats: &mut Stats, done: Result<anyhow::Result<Duration>, tokio::task::JoinError>) {
    match done.map_err(anyhow::Error::from).and_then(|r| r) {
        Ok(rtt) => {
            stats.ok += 1;
            stats.rtt.push(rtt);
        }
        Err(e) => {
            stats.failed += 1;
            stats.first_error.get_or_insert_with(|| e.to_string());
        }
    }
}

impl Renewals {
    /// Stops renewing and reports what was done; fails if any renewal failed.
    pub(crate) async fn finish(self, r: &mut Report) -> anyhow::Result<()> {
        let _ = self.stop.send(true);
        let mut s = self.task.await?;
        let achieved = s.ok as f64 / s.elapsed.as_secs_f64().max(1e-9);
        r.row(
            format!(
                "renewals in the background: {}/s asked; done, per second, skipped (over {IN_FLIGHT} in flight), failed",
                self.rate
            ),
            format!(
                "{} in {:.0} s, {achieved:.0}/s, {} skipped, {} failed",
                s.ok,
                s.elapsed.as_secs_f64(),
                s.skipped,
                s.failed
            ),
        );
        r.row(
            "… a renewal's round trip to the simulator, p50 / p90 / p99 / max",
            spread(&mut s.rtt),
        );
        if let Some(e) = &s.first_error {
            anyhow::bail!("{} renewals failed, first: {e}", s.failed);
        }
        Ok(())
    }
}
