//! Real gnmic processes for the managed-mode tests: `gnmic collect` per member (its REST API on
//! a loopback port), a live gNMI device (a second gnmic with a `gnmi-server`, answering
//! Capabilities and Subscribe), and [`Watch`], which polls every collector's own API and
//! records, per target, which collectors run it — the work-level truth, read from gnmic and
//! not from Leasehold. gnmic is built from `../shared/gnmic/` by `scripts/gnmic.sh`; without
//! it the tests fail with the reason when `CI` is set and skip with it otherwise.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;

/// The gnmic binary, or `None` (said why) where it cannot be had outside CI.
pub fn binary() -> Option<PathBuf> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/gnmic.sh");
    let why = match std::process::Command::new(&script)
        .arg("path")
        .stdin(Stdio::null())
        .output()
    {
        Ok(out) if out.status.success() => {
            return Some(PathBuf::from(
                String::from_utf8_lossy(&out.stdout).trim().to_owned(),
            ));
        }
        Ok(out) => format!(
            "{} path exited with {}: {}",
            script.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ),
        Err(e) => format!("running {}: {e}", script.display()),
    };
    if std::env::var_os("CI").is_some() {
        panic!("the gnmic tests cannot run: {why}");
    }
    eprintln!("SKIPPED: the gnmic tests cannot run: {why}");
    None
}

/// A loopback address free a moment ago.
pub fn free_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
}

/// A gnmic process; killed when dropped.
pub struct Gnmic {
    child: Option<tokio::process::Child>,
    bin: PathBuf,
    config: PathBuf,
    args: Vec<String>,
    log: PathBuf,
    /// Its API (collectors) or its gNMI server (devices).
    pub addr: SocketAddr,
}

impl Gnmic {
    /// `gnmic collect` with its API on a free loopback port and one subscription (`all`).
    pub fn collector(bin: &Path, dir: &Path, name: &str) -> Gnmic {
        let addr = free_addr();
        let config = dir.join(format!("gnmic-{name}.yaml"));
        std::fs::write(
            &config,
            format!(
                "api-server:\n  address: {addr}\nlog: true\nsubscriptions:\n  all:\n    paths: [\"/\"]\n    mode: stream\n    stream-mode: sample\n    sample-interval: 1s\n"
            ),
        )
        .unwrap();
        let mut g = Gnmic {
            child: None,
            bin: bin.to_owned(),
            config,
            args: vec!["collect".into()],
            log: dir.join(format!("gnmic-{name}.log")),
            addr,
        };
        g.start();
        g
    }

    /// A device: gnmic's gNMI server on a free loopback port (`gnmic subscribe --watch-config`
    /// with an API, so that it keeps running with no target of its own).
    pub fn device(bin: &Path, dir: &Path, name: &str) -> Gnmic {
        Gnmic::device_at(bin, dir, name, free_addr())
    }

    /// A device serving at `addr`.
    pub fn device_at(bin: &Path, dir: &Path, name: &str, addr: SocketAddr) -> Gnmic {
        let api = free_addr();
        let config = dir.join(format!("device-{name}.yaml"));
        std::fs::write(
            &config,
            format!(
                "gnmi-server:\n  address: {addr}\n  skip-verify: true\nsubscriptions:\n  all:\n    paths: [\"/\"]\n"
            ),
        )
        .unwrap();
        let mut g = Gnmic {
            child: None,
            bin: bin.to_owned(),
            config,
            args: vec![
                "subscribe".into(),
                "--watch-config".into(),
                "--api".into(),
                api.to_string(),
            ],
            log: dir.join(format!("device-{name}.log")),
            addr,
        };
        g.start();
        g
    }

    /// Starts the process (again, after [`Gnmic::kill`]: a restarted gnmic forgets every
    /// target it was given over its API).
    pub fn start(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let child = tokio::process::Command::new(&self.bin)
            .arg("--config")
            .arg(&self.config)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .expect("gnmic starts");
        self.child = Some(child);
    }

    /// Sends `signal` (`-STOP`, `-CONT`) to the process.
    pub fn signal(&self, signal: &str) {
        let pid = self
            .child
            .as_ref()
            .and_then(|c| c.id())
            .expect("gnmic runs")
            .to_string();
        let ok = std::process::Command::new("kill")
            .args([signal, &pid])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {signal} {pid}");
    }

    /// SIGKILL, and waits for the exit.
    pub async fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill().await;
        }
    }

    /// Waits (10 s at most) until it accepts connections.
    pub async fn listening(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while tokio::net::TcpStream::connect(self.addr).await.is_err() {
            assert!(
                Instant::now() < deadline,
                "gnmic never listened on {}: {}",
                self.addr,
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// What gnmic's `GET /api/v1/targets` says of one target.
#[derive(Debug, Clone, serde::Deserialize)]
struct Listed {
    name: String,
    #[serde(default)]
    state: State,
}

#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
struct State {
    #[serde(default)]
    state: String,
    #[serde(default)]
    connection_state: String,
}

type Client = hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    http_body_util::Empty<bytes::Bytes>,
>;

/// One read of one collector: targets it runs, and those it really collects (`READY`).
/// `None`: it did not answer within a second.
async fn read(client: &Client, addr: SocketAddr) -> Option<(BTreeSet<String>, BTreeSet<String>)> {
    use http_body_util::BodyExt as _;
    let uri: http::Uri = format!("http://{addr}/api/v1/targets").parse().ok()?;
    let body = tokio::time::timeout(Duration::from_secs(1), async {
        let resp = client.get(uri).await.ok()?;
        if !resp.status().is_success() {
            return None;
        }
        Some(resp.into_body().collect().await.ok()?.to_bytes())
    })
    .await
    .ok()??;
    let list: Vec<Listed> = serde_json::from_slice(&body).ok()?;
    let running = list
        .iter()
        .filter(|l| l.state.state == "running")
        .map(|l| l.name.clone())
        .collect();
    let collecting = list
        .iter()
        .filter(|l| l.state.state == "running" && l.state.connection_state == "READY")
        .map(|l| l.name.clone())
        .collect();
    Some((running, collecting))
}

#[derive(Default)]
struct Record {
    /// Member → its collector's API.
    collectors: BTreeMap<String, SocketAddr>,
    /// Target → the members whose gnmic collects it, at the last round.
    collecting: BTreeMap<String, BTreeSet<String>>,
    /// Target → when it was last seen collected by anyone.
    last_collected: BTreeMap<String, Instant>,
    /// When the last round ended.
    previous_round: Option<Instant>,
    /// Per target, every time with no collector seen for at least one round, in order.
    gaps: Vec<(String, Duration)>,
    /// Targets run by two collectors at once, with when and by whom.
    overlaps: Vec<String>,
    rounds: u64,
}

/// Polls every collector's API every `period`, in rounds of two reads each: a target counts as
/// run by two collectors at once when both list it as `running` in both of their reads (read
/// A, B, …, then A, B, … again: A ran it at its two reads and B between them, so unless A
/// stopped and restarted it within milliseconds, both ran it at B's first read).
pub struct Watch {
    record: Arc<Mutex<Record>>,
    task: JoinHandle<()>,
    start: Instant,
}

impl Watch {
    pub fn start(period: Duration) -> Watch {
        let record = Arc::new(Mutex::new(Record::default()));
        let r = record.clone();
        let start = Instant::now();
        let task = tokio::spawn(async move {
            let client: Client =
                hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                    .build_http();
            loop {
                let collectors = r.lock().unwrap().collectors.clone();
                let mut first = Reads::new();
                for (m, a) in &collectors {
                    if let Some(x) = read(&client, *a).await {
                        first.insert(m.clone(), x);
                    }
                }
                let mut second = Reads::new();
                for (m, a) in &collectors {
                    if let Some(x) = read(&client, *a).await {
                        second.insert(m.clone(), x);
                    }
                }
                let now = Instant::now();
                tally(&mut r.lock().unwrap(), &first, &second, now, start);
                tokio::time::sleep(period).await;
            }
        });
        Watch {
            record,
            task,
            start,
        }
    }

    /// Watches `member`'s collector from now on.
    pub fn add(&self, member: &str, api: SocketAddr) {
        self.record
            .lock()
            .unwrap()
            .collectors
            .insert(member.to_owned(), api);
    }

    /// No longer watches `member`'s collector (its pod is gone).
    pub fn remove(&self, member: &str) {
        self.record.lock().unwrap().collectors.remove(member);
    }

    /// Target → members whose gnmic collects it, as of the last round.
    pub fn collecting(&self) -> BTreeMap<String, BTreeSet<String>> {
        self.record.lock().unwrap().collecting.clone()
    }

    /// The rounds so far.
    pub fn rounds(&self) -> u64 {
        self.record.lock().unwrap().rounds
    }

    /// Every overlap seen.
    pub fn overlaps(&self) -> Vec<String> {
        self.record.lock().unwrap().overlaps.clone()
    }

    /// The gaps recorded since the last call, and forgets them.
    pub fn take_gaps(&self) -> Vec<(String, Duration)> {
        std::mem::take(&mut self.record.lock().unwrap().gaps)
    }

    /// Time since the watch started.
    pub fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }
}

type Reads = BTreeMap<String, (BTreeSet<String>, BTreeSet<String>)>;

/// Adds one round's two reads to `rec`.
fn tally(rec: &mut Record, first: &Reads, second: &Reads, now: Instant, start: Instant) {
    rec.rounds += 1;
    // Running throughout the round, per target.
    let mut runners: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (m, (run1, _)) in first {
        let Some((run2, _)) = second.get(m) else {
            continue;
        };
        for t in run1.intersection(run2) {
            runners.entry(t.clone()).or_default().push(m.clone());
        }
    }
    for (t, ms) in &runners {
        if ms.len() > 1 {
            let at = now.duration_since(start);
            rec.overlaps.push(format!("{t} run by {ms:?} at {at:?}"));
        }
    }
    // Collected (READY) at the round's second read.
    let mut collecting: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (m, (_, col)) in second {
        for t in col {
            collecting.entry(t.clone()).or_default().insert(m.clone());
        }
    }
    // A target missing from at least one round since it was last collected had a gap: from
    // that round's predecessor to now (an upper bound, to within a round).
    for t in collecting.keys() {
        if let Some(last) = rec.last_collected.insert(t.clone(), now)
            && rec.previous_round.is_some_and(|p| last < p)
        {
            rec.gaps.push((t.clone(), now.duration_since(last)));
        }
    }
    rec.collecting = collecting;
    rec.previous_round = Some(now);
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.task.abort();
    }
}
