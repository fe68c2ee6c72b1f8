//! `--stop`: a planned stop of one member (issue 32), after the steady-state window: member 0
//! is told to shut down, as SIGTERM tells `leasehold agent` — it says `leaving` on its member
//! Lease, the control plane moves its targets away, and it hands each over after its app
//! stopped, within `--drain-timeout` (default the product's 10 s); what is left when the drain
//! ends is released. Measured, for the targets it held when told: how many were still held
//! when its drain ended (0: all handed over in time), the gap per target (its app stopping →
//! the next owner's app starting, from the hooks), how long the member took to exit, the API
//! server's Lease writes per second over the stop, and the longest interval between two
//! renewals of any member Lease meanwhile (due every D/3).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

/// What the hooks record for the stop: set `stopping` before the stop begins.
#[derive(Clone, Default)]
pub struct Handoffs {
    /// The member being stopped.
    pub stopping: Arc<Mutex<Option<String>>>,
    /// Its app stopped working on the target at that instant.
    pub released_at: Arc<Mutex<HashMap<String, Instant>>>,
    /// Released by it → started by another member: when it stopped, and the gap.
    pub gaps: Arc<Mutex<Vec<(Instant, Duration)>>>,
}

impl Handoffs {
    /// `member`'s app stopped working on `target` (an `on_release`).
    pub fn released(&self, target: &str, member: &str) {
        if lock(&self.stopping).as_deref() == Some(member) {
            lock(&self.released_at).insert(target.to_owned(), Instant::now());
        }
    }

    /// `member`'s app started working on `target` (an `on_acquire`).
    pub fn acquired(&self, target: &str, member: &str) {
        if lock(&self.stopping).as_deref() == Some(member) {
            return;
        }
        if let Some(at) = lock(&self.released_at).remove(target) {
            lock(&self.gaps).push((at, at.elapsed()));
        }
    }
}

/// A rolling update's planned stops, one line each, and over all: held, handed over, still held
/// at the drain's end, the worst gaps, the longest exit and renewal interval.
pub fn print_rolling(steps: &[Stopped], overlaps: u64, drain: Duration) {
    println!(
        "\nrolling update (--drain-timeout {} s): member | held | handed over (during the drain) | still held at the drain's end | gap p50 / p99 / max | exited after | Lease writes/s | longest renewal interval",
        drain.as_secs()
    );
    for (i, s) in steps.iter().enumerate() {
        println!(
            "| {i} | {} | {} ({}) | {} | {:.0?} / {:.0?} / {:.0?} | {:.1} s | {} | {} |",
            s.held,
            s.handed,
            s.handed_in_drain,
            s.left_at_drain_end
                .map_or("—".to_owned(), |n| n.to_string()),
            s.gap[0],
            s.gap[1],
            s.gap[2],
            s.exited_after.as_secs_f64(),
            s.writes_per_s.map_or("—".to_owned(), |w| format!("{w:.0}")),
            s.longest_renewal_interval
                .map_or("—".to_owned(), |i| format!("{:.2} s", i.as_secs_f64())),
        );
    }
    let held: usize = steps.iter().map(|s| s.held).sum();
    let handed: usize = steps.iter().map(|s| s.handed).sum();
    let worst_p99 = steps.iter().map(|s| s.gap[1]).max().unwrap_or_default();
    let worst = steps.iter().map(|s| s.gap[2]).max().unwrap_or_default();
    let exit = steps
        .iter()
        .map(|s| s.exited_after)
        .max()
        .unwrap_or_default();
    let renewal = steps
        .iter()
        .filter_map(|s| s.longest_renewal_interval)
        .max();
    println!(
        "rolling update: {held} targets held by the members as they stopped, {handed} handed over to a next owner that started · worst step gap p99 {worst_p99:.0?}, max {worst:.0?} · longest exit {:.1} s · longest renewal interval {} · work-level overlaps {overlaps}",
        exit.as_secs_f64(),
        renewal.map_or("—".to_owned(), |i| format!("{:.2} s", i.as_secs_f64())),
    );
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The result of one planned stop.
pub struct Stopped {
    pub held: usize,
    /// Still held when the drain ended (`None`: it exited before).
    pub left_at_drain_end: Option<usize>,
    /// Targets whose next owner started, and their gaps: p50, p99, max.
    pub handed: usize,
    pub gap: [Duration; 3],
    /// Of them, those its app stopped before the drain ended (handed over while it still
    /// worked on the rest), and their gaps: p50, p99, max.
    pub handed_in_drain: usize,
    pub gap_in_drain: [Duration; 3],
    /// When its app stopped the first of them, after the stop began.
    pub first_stop_after: Option<Duration>,
    /// How many its app had stopped 2.5, 5, 7.5 and 10 s after the stop began.
    pub stopped_by: [usize; 4],
    /// CPU over the stop, in % of one core: the API server, etcd, the control plane (`None`:
    /// in this process) and this process (the agents and the harness).
    pub cpu: [Option<f64>; 4],
    /// From the stop to the member's exit.
    pub exited_after: Duration,
    /// The API server's Lease writes per second over the stop (`None` off the real tier).
    pub writes_per_s: Option<f64>,
    /// The longest interval between two renewals of one member Lease during the stop.
    pub longest_renewal_interval: Option<Duration>,
}

impl Stopped {
    pub fn print(&self, drain: Duration, d: Duration) {
        println!(
            "planned stop of member 0: first target stopped after {:.2?} · stopped by 2.5 / 5 / 7.5 / 10 s: {:?} · stopped before the drain ended and handed over: {} (gap p50 / p99 / max {:.0?} / {:.0?} / {:.0?})",
            self.first_stop_after.unwrap_or_default(),
            self.stopped_by,
            self.handed_in_drain,
            self.gap_in_drain[0],
            self.gap_in_drain[1],
            self.gap_in_drain[2],
        );
        let pct = |c: Option<f64>| c.map_or("—".to_owned(), |c| format!("{c:.0}%"));
        println!(
            "planned stop of member 0: CPU (of one core, the machine has {}) — kube-apiserver {}, etcd {}, control plane {}, agents and harness {}",
            std::thread::available_parallelism().map_or(0, |n| n.get()),
            pct(self.cpu[0]),
            pct(self.cpu[1]),
            pct(self.cpu[2]),
            pct(self.cpu[3]),
        );
        println!(
            "\nplanned stop of member 0 (--drain-timeout {} s, D = {} s): held {} · still held when the drain ended: {} · next owner started on {} · gap p50 / p99 / max {:.0?} / {:.0?} / {:.0?} · exited after {:.2} s · apiserver Lease writes/s {} · longest member Lease renewal interval {} (due every {:.2} s)",
            drain.as_secs(),
            d.as_secs(),
            self.held,
            self.left_at_drain_end
                .map_or("— (exited before)".to_owned(), |n| n.to_string()),
            self.handed,
            self.gap[0],
            self.gap[1],
            self.gap[2],
            self.exited_after.as_secs_f64(),
            self.writes_per_s
                .map_or("—".to_owned(), |w| format!("{w:.0}")),
            self.longest_renewal_interval
                .map_or("—".to_owned(), |i| format!("{:.2} s", i.as_secs_f64())),
            (d / 3).as_secs_f64(),
        );
    }
}

/// Stops the member whose shutdown is `stop` and whose task is `task`, holding `held`
/// (published by the agent), while `handoffs` records its apps' stops and the next owners'
/// starts. `writes` reads the API server's Lease write count; `renewals` the renewal
/// intervals (instant seen, interval) of member Leases.
#[allow(clippy::too_many_arguments)]
pub async fn run(
    cp_pid: Option<u32>,
    stop: oneshot::Sender<()>,
    task: JoinHandle<anyhow::Result<()>>,
    held: watch::Receiver<std::collections::BTreeSet<String>>,
    handoffs: &Handoffs,
    drain: Duration,
    writes: impl AsyncFn() -> Option<f64>,
    renewals: &Mutex<Vec<(Instant, Duration)>>,
) -> anyhow::Result<Stopped> {
    let held_now = held.borrow().len();
    let writes0 = writes().await;
    let cpu0 = super::tier_cpu(cp_pid);
    let t0 = Instant::now();
    let _ = stop.send(());
    let mut task = task;
    let drain_end = tokio::time::sleep(drain);
    tokio::pin!(drain_end);
    let mut left_at_drain_end = None;
    loop {
        tokio::select! {
            res = &mut task => {
                res??;
                break;
            }
            () = &mut drain_end, if left_at_drain_end.is_none() => {
                left_at_drain_end = Some(held.borrow().len());
            }
        }
    }
    let exited_after = t0.elapsed();
    let secs = exited_after.as_secs_f64().max(0.001);
    let cpu = cpu0.shares(secs);
    let writes_per_s = writes0.zip(writes().await).map(|(a, b)| (b - a) / secs);
    // The last starts come in after the exit (a handover seen by the next owner's watch).
    let want = held_now;
    let deadline = Instant::now() + Duration::from_secs(30);
    while lock(&handoffs.gaps).len() < want && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let stops = lock(&handoffs.gaps).clone();
    let spread = |mut gaps: Vec<Duration>| -> [Duration; 3] {
        gaps.sort_unstable();
        let at = |p: f64| {
            gaps.get(((gaps.len() as f64 * p) as usize).min(gaps.len().saturating_sub(1)))
                .copied()
                .unwrap_or_default()
        };
        [at(0.5), at(0.99), gaps.last().copied().unwrap_or_default()]
    };
    let in_drain: Vec<Duration> = stops
        .iter()
        .filter(|(at, _)| *at < t0 + drain)
        .map(|(_, g)| *g)
        .collect();
    let stopped_by = [2500, 5000, 7500, 10_000].map(|ms| {
        stops
            .iter()
            .filter(|(at, _)| *at < t0 + Duration::from_millis(ms))
            .count()
    });
    let first_stop_after = stops.iter().map(|(at, _)| *at - t0).min();
    let longest_renewal_interval = lock(renewals)
        .iter()
        .filter(|(seen, _)| *seen >= t0)
        .map(|(_, i)| *i)
        .max();
    Ok(Stopped {
        held: held_now,
        left_at_drain_end,
        handed: stops.len(),
        gap: spread(stops.iter().map(|(_, g)| *g).collect()),
        handed_in_drain: in_drain.len(),
        gap_in_drain: spread(in_drain),
        first_stop_after,
        stopped_by,
        cpu,
        exited_after,
        writes_per_s,
        longest_renewal_interval,
    })
}
