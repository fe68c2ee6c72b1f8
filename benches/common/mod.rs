//! What the load harnesses share (`benches/engine_load.rs`, `benches/api_load/`,
//! `benches/protocol_load.rs`, `benches/pages_live/`): starting the simulator as its own
//! process, logging to stderr, percentiles and how they are printed, the machine, and a
//! process's and the machine's CPU time and a process's memory from `/proc`; `procs` starts, seeds and writes to the
//! simulator and `leasehold serve` for the harnesses that test the server over HTTP, `sse` is
//! a client of its event feed, `slow_policy` (shared with the pressure tests) slows a real
//! API server.
#![allow(dead_code)] // each harness uses a different subset

pub mod procs;
/// An API server made slow by another tenant's load through a shared admission webhook: the
/// pressure tests' own (`protocol_load --overload`).
#[path = "../../tests/it/common/slow_policy.rs"]
pub mod slow_policy;
pub mod sse;

use std::path::Path;
use std::time::{Duration, Instant};

/// Logs to stderr, filtered by `RUST_LOG` (stdout carries the harness's report).
pub fn log_to_stderr() {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
}

/// Starts `BIN sim --fake-kubelet` on a free port, waits for the kubeconfig it writes to
/// `kubeconfig`, and connects to it. The child is killed when dropped.
pub async fn start_sim_process(
    bin: &str,
    kubeconfig: &Path,
) -> anyhow::Result<(tokio::process::Child, kube::Client)> {
    let child = tokio::process::Command::new(bin)
        .args(["sim", "--fake-kubelet", "--listen", "127.0.0.1:0"])
        .arg("--kubeconfig-out")
        .arg(kubeconfig)
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let started = Instant::now();
    let kc = loop {
        if let Ok(kc) = kube::config::Kubeconfig::read_from(kubeconfig)
            && !kc.clusters.is_empty()
        {
            break kc;
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(30),
            "the simulator wrote no kubeconfig"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let client = kube::Client::try_from(
        kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?,
    )?;
    Ok((child, client))
}

/// The `p`th percentile (nearest rank) of `sorted`.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// A duration in milliseconds, two decimals.
pub fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

/// `p50 / p90 / p99 / max` of `v` (sorted here).
pub fn spread(v: &mut [Duration]) -> String {
    v.sort_unstable();
    format!(
        "{} / {} / {} / {}",
        ms(percentile(v, 50.0)),
        ms(percentile(v, 90.0)),
        ms(percentile(v, 99.0)),
        ms(v.last().copied().unwrap_or_default())
    )
}

/// CPU model, cores, memory and the 1-minute load average, from `/proc`.
pub fn machine() -> String {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let cpuinfo = read("/proc/cpuinfo");
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map_or("?", |l| l.trim_start_matches([' ', '\t', ':']));
    let mem_kib: u64 = read("/proc/meminfo")
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    let load = read("/proc/loadavg");
    format!(
        "{model}, {} cores, {:.0} GiB; load {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        mem_kib as f64 / (1024.0 * 1024.0),
        load.split_whitespace().next().unwrap_or("?")
    )
}

/// CPU seconds (user + system) a process has used, from `/proc/PID/stat` (clock ticks at
/// 100 Hz, the Linux default USER_HZ).
pub fn cpu_s(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = after
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|v| v.parse().ok())
        .collect();
    f.iter().sum::<u64>() as f64 / 100.0
}

/// The process whose command name is `comm` (the first found).
pub fn pid_of(comm: &str) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let name = std::fs::read_to_string(e.path().join("comm")).ok()?;
        (name.trim() == comm).then_some(pid)
    })
}

/// The CPU some processes use from a moment on (`None`: a process not found).
pub struct CpuShares<const N: usize> {
    pids: [Option<u32>; N],
    from: [Option<f64>; N],
}

impl<const N: usize> CpuShares<N> {
    /// From now.
    pub fn start(pids: [Option<u32>; N]) -> Self {
        CpuShares {
            pids,
            from: pids.map(|p| p.map(cpu_s)),
        }
    }

    /// Each one's CPU since the start, over `secs` seconds, in % of one core.
    pub fn shares(&self, secs: f64) -> [Option<f64>; N] {
        std::array::from_fn(|i| {
            self.pids[i]
                .zip(self.from[i])
                .map(|(p, c0)| 100.0 * (cpu_s(p) - c0) / secs.max(0.001))
        })
    }
}

/// A field of `/proc/PID/status` (`VmRSS:`, `VmHWM:`, `RssAnon:` …), in KiB.
pub fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// The machine's CPU time so far, from the first line of `/proc/stat` (clock ticks): busy
/// (user, nice, system, irq, softirq), idle (idle, iowait) and stolen by the hypervisor.
#[derive(Debug, Clone, Copy, Default)]
pub struct MachineCpu {
    pub busy: u64,
    pub idle: u64,
    pub steal: u64,
}

impl MachineCpu {
    pub fn now() -> MachineCpu {
        let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        let f: Vec<u64> = stat
            .lines()
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .skip(1)
            .filter_map(|v| v.parse().ok())
            .collect();
        let at = |i: usize| f.get(i).copied().unwrap_or(0);
        MachineCpu {
            busy: at(0) + at(1) + at(2) + at(5) + at(6),
            idle: at(3) + at(4),
            steal: at(7),
        }
    }

    /// Busy and stolen shares of the machine's CPU time since `earlier`, in percent.
    pub fn since(&self, earlier: &MachineCpu) -> (f64, f64) {
        let busy = self.busy.saturating_sub(earlier.busy) as f64;
        let idle = self.idle.saturating_sub(earlier.idle) as f64;
        let steal = self.steal.saturating_sub(earlier.steal) as f64;
        let total = (busy + idle + steal).max(1.0);
        (100.0 * busy / total, 100.0 * steal / total)
    }
}
