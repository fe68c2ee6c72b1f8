//! `leasehold demo` in-process on port 0, driven over real HTTP like a visitor would: both
//! clusters (collectors and the MMR-style replicas with their roles) in the API, then the
//! demo controls: a member added takes a share, a crashed member's targets fail over once its
//! Leases expire, a stopped member is gone and nothing it held is lost, and the dashboard offers
//! only the controls that apply and says what each did. Short lease durations
//! keep it well under a minute. And the `leasehold demo` process: stopped by SIGTERM, it cleans
//! up; on a terminal (a pseudo-terminal from util-linux `script`) it shows a few lines for
//! people and then its banner, last, again on SIGUSR1, and Ctrl-C ends it with one closing line
//! and no warning; without a terminal its logs are JSON lines.
//!
//! The work is checked, not only the Leases: the app beside each member is the invariant
//! checker ([`options`]), so no two members may ever work on one target at once; after each
//! control every target is worked on by its owner alone ([`settled`]); a stopped member's app
//! has stopped all its work once the stop is answered; and when the demo stops, only the
//! crashed member was killed and nobody works on anything ([`assert_work_ended`]). The browser
//! test of the demo controls uses the same helpers.

use crate::common;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::header::{self, HeaderMap};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use leasehold::demo::{self, DemoOptions, Timing};
use serde_json::Value;

use common::eventually;
use common::invariant::InvariantChecker;

/// Lease duration of both clusters in these tests (the shortest the config allows is 2 s; 3 s
/// leaves room for renewals on a busy 2-core machine).
const LEASE: Duration = Duration::from_secs(3);
const TARGETS: usize = 30;

/// The demo's options in these tests: files in `dir`, the API on `listen`, and the app beside
/// each member recording its work in `checker`.
pub(crate) fn options(dir: &Path, listen: &str, checker: &InvariantChecker) -> DemoOptions {
    DemoOptions {
        listen: listen.parse().unwrap(),
        kube_listen: "127.0.0.1:0".parse().unwrap(),
        members: 3,
        targets: TARGETS,
        kubeconfig_out: dir.join("kubeconfig"),
        database: dir.join("demo.db"),
        token_file: dir.join("tokens.csv"),
        timing: Timing {
            lease_duration: LEASE,
            join_settle: Duration::from_secs(1),
        },
        apps: Arc::new(checker.clone()),
        gnmic: None,
    }
}

/// Waits until every target of the demo's `cluster` (its API at `api`) is owned, each worked on
/// by its owner alone — the members' hooks as `checker` recorded them, not only the API's
/// owners — and `also` holds of the targets; returns them.
pub(crate) async fn settled(
    api: SocketAddr,
    checker: &InvariantChecker,
    cluster: &str,
    timeout: Duration,
    also: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    let http = Http::new(api);
    let worked_alone = |targets: &[Value]| checker.unworked(owned_by(targets)).is_empty();
    let got = eventually(timeout, || async {
        let targets = http.targets(cluster).await;
        (targets.iter().all(|t| t["state"] == "owned") && worked_alone(&targets) && also(&targets))
            .then_some(targets)
    })
    .await;
    match got {
        Some(t) => t,
        None => {
            let targets = http.targets(cluster).await;
            panic!(
                "{cluster}: not settled within {timeout:?}: {:?}; owner vs workers where they \
                 differ: {:?}",
                http.get(&format!("/api/v1/clusters/{cluster}")).await["targets"],
                checker.unworked(owned_by(&targets))
            )
        }
    }
}

/// Once the demo has stopped: no two members ever worked on one target at once, no member but
/// `crashed` was killed (every other agent, stopped by a control or with the demo, told its app
/// to stop all its work before it exited), and nobody works on anything any more.
#[track_caller]
pub(crate) fn assert_work_ended(checker: &InvariantChecker, crashed: &[&str]) {
    checker.assert_ok();
    let crashed: BTreeSet<String> = crashed.iter().map(|m| (*m).to_owned()).collect();
    assert_eq!(
        checker.crashed_members(),
        crashed,
        "members killed (their agent ended without telling its app to stop)"
    );
    let left = checker.work();
    assert!(
        left.is_empty(),
        "work left after the demo stopped: {left:?}"
    );
}

struct Http {
    base: String,
    client: Client<HttpConnector, Full<Bytes>>,
}

impl Http {
    fn new(addr: SocketAddr) -> Http {
        Http {
            base: format!("http://127.0.0.1:{}", addr.port()),
            client: Client::builder(TokioExecutor::new()).build_http(),
        }
    }

    /// One request; the body parsed as JSON when it is JSON.
    async fn call(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> (u16, HeaderMap, Value) {
        let mut req = hyper::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req.body(Full::new(Bytes::from(body.to_owned()))).unwrap();
        let res = tokio::time::timeout(Duration::from_secs(40), self.client.request(req))
            .await
            .expect("an answer within 40 s")
            .expect("the request succeeds");
        let status = res.status().as_u16();
        let headers = res.headers().clone();
        let bytes = res.into_body().collect().await.unwrap().to_bytes();
        let v = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()));
        (status, headers, v)
    }

    async fn get(&self, path: &str) -> Value {
        let (status, _, v) = self.call("GET", path, &[], "").await;
        assert_eq!(status, 200, "GET {path}: {v}");
        v
    }

    async fn post(&self, path: &str) -> (u16, Value) {
        let (status, _, v) = self.call("POST", path, &[], "").await;
        (status, v)
    }

    /// Approves the rebalance the demo proposes when a member joins (`on_join: propose`), once
    /// there is one (at most `within`); its id.
    async fn approve_proposal(&self, cluster: &str, within: Duration) -> String {
        let path = format!("/api/v1/operations?cluster={cluster}&state=proposed");
        let id = eventually(within, || async {
            let v = self.get(&path).await;
            v["items"][0]["id"].as_str().map(str::to_owned)
        })
        .await
        .unwrap_or_else(|| panic!("no rebalance of {cluster} proposed within {within:?}"));
        let approve = format!("/api/v1/operations/{id}/approve");
        let (status, _, v) = self.call("POST", &approve, &[], "").await;
        assert_eq!(status, 202, "POST {approve}: {v}");
        id
    }

    /// Targets of a cluster (all on one page).
    async fn targets(&self, cluster: &str) -> Vec<Value> {
        let v = self
            .get(&format!("/api/v1/clusters/{cluster}/targets?limit=1000"))
            .await;
        v["items"].as_array().unwrap().clone()
    }

    /// Target keys `instance` holds (none while the model does not show it yet).
    async fn held_by(&self, cluster: &str, instance: &str) -> BTreeSet<String> {
        let path = format!("/api/v1/clusters/{cluster}/instances/{instance}");
        let (status, _, v) = self.call("GET", &path, &[], "").await;
        if status == 404 {
            return BTreeSet::new();
        }
        assert_eq!(status, 200, "GET {path}: {v}");
        v["targets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k.as_str().unwrap().to_owned())
            .collect()
    }
}

fn owners(targets: &[Value]) -> BTreeSet<String> {
    targets
        .iter()
        .filter_map(|t| t["owner"].as_str().map(str::to_owned))
        .collect()
}

/// Each target's key and owner (if any).
fn owned_by(targets: &[Value]) -> Vec<(String, Option<String>)> {
    targets
        .iter()
        .map(|t| {
            (
                t["key"].as_str().unwrap().to_owned(),
                t["owner"].as_str().map(str::to_owned),
            )
        })
        .collect()
}

/// How many of `targets` `member` owns.
fn count_owned(targets: &[Value], member: &str) -> usize {
    targets.iter().filter(|t| t["owner"] == member).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_visitor_adds_crashes_and_stops_members() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let checker = InvariantChecker::new();
    let demo = demo::start(options(dir.path(), "127.0.0.1:0", &checker))
        .await
        .unwrap();
    assert!(demo.token_file().is_none(), "loopback: no login");
    assert!(dir.path().join("kubeconfig").exists());
    let api = demo.api_addr();
    let http = Http::new(api);

    let ready = eventually(Duration::from_secs(20), || async {
        (http.call("GET", "/readyz", &[], "").await.0 == 200).then_some(())
    })
    .await;
    assert!(ready.is_some(), "never ready");
    // Every member gets work. A member whose pod turned Ready only after the first placement
    // (seen in CI under load) joins, and gets its share once the rebalance the demo then
    // proposes (`on_join: propose`, `join_settle` 3 s) is approved: approve any proposal.
    let approving = {
        let http = Http::new(api);
        tokio::spawn(async move {
            loop {
                let v = http
                    .get("/api/v1/operations?cluster=collector&state=proposed")
                    .await;
                if let Some(id) = v["items"][0]["id"].as_str() {
                    http.call("POST", &format!("/api/v1/operations/{id}/approve"), &[], "")
                        .await;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
    };
    let members = BTreeSet::from([
        "collector-0".to_owned(),
        "collector-1".to_owned(),
        "collector-2".to_owned(),
    ]);
    let targets = settled(
        api,
        &checker,
        demo::COLLECTOR,
        Duration::from_secs(40),
        |t| owners(t) == members,
    )
    .await;
    assert_eq!(targets.len(), TARGETS);
    approving.abort();
    let dbs = settled(
        api,
        &checker,
        demo::REPLICAS,
        Duration::from_secs(20),
        |_| true,
    )
    .await;
    assert_eq!(dbs.len(), demo::DATABASES.len());
    eprintln!("placed after {:?}", started.elapsed());

    // Both clusters, and the MMR cluster's roles.
    let clusters = http.get("/api/v1/clusters").await;
    let names: Vec<&str> = clusters
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, [demo::COLLECTOR, demo::REPLICAS]);
    let replicas = http.get("/api/v1/clusters/replicas").await;
    let roles: Vec<(String, String)> = replicas["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["name"].as_str().unwrap().to_owned(),
                i["role"].as_str().unwrap_or("-").to_owned(),
            )
        })
        .collect();
    assert_eq!(
        roles,
        [
            ("replicas-0".into(), "controlling".into()),
            ("replicas-1".into(), "copy".into()),
            ("replicas-2".into(), "copy".into())
        ]
    );
    assert_eq!(replicas["services"].as_array().unwrap().len(), 2);

    // Wrong cluster or member: 400 with a message saying what exists.
    let (status, v) = http.post("/demo/clusters/nope/members").await;
    assert_eq!(status, 400, "{v}");
    assert!(
        v["detail"]
            .as_str()
            .unwrap()
            .contains("collector, replicas")
    );
    let (status, v) = http
        .post("/demo/clusters/collector/members/replicas-1/crash")
        .await;
    assert_eq!(status, 400, "{v}");
    assert!(v["detail"].as_str().unwrap().contains("collector-0"), "{v}");

    // Add: collector-3 appears and, after the join settles, a rebalance is proposed; once
    // approved, it gives collector-3 a share.
    let (status, v) = http.post("/demo/clusters/collector/members").await;
    assert_eq!(status, 200, "{v}");
    assert!(
        v["message"].as_str().unwrap().contains("collector-3"),
        "{v}"
    );
    let added = Instant::now();
    let proposal = http
        .approve_proposal(demo::COLLECTOR, Duration::from_secs(25))
        .await;
    let op = http.get(&format!("/api/v1/operations/{proposal}")).await;
    assert!(
        op["reason"].as_str().unwrap().contains("collector-3"),
        "{op}"
    );
    let all = settled(
        api,
        &checker,
        demo::COLLECTOR,
        Duration::from_secs(25),
        |t| count_owned(t, "collector-3") >= 5,
    )
    .await;
    let share = count_owned(&all, "collector-3");
    eprintln!(
        "collector-3 holds {share} targets {:?} after joining",
        added.elapsed()
    );

    // Crash: collector-1's targets are taken over once its Leases expire.
    let victim = http.held_by(demo::COLLECTOR, "collector-1").await;
    assert!(!victim.is_empty());
    let (status, v) = http
        .post("/demo/clusters/collector/members/collector-1/crash")
        .await;
    assert_eq!(status, 200, "{v}");
    let crashed = Instant::now();
    // Its app died with it (the demo reports the kill).
    assert_eq!(checker.working_on("collector-1"), Vec::<String>::new());
    let deadline = LEASE + Duration::from_secs(5);
    settled(api, &checker, demo::COLLECTOR, deadline, |t| {
        count_owned(t, "collector-1") == 0
    })
    .await;
    let took = crashed.elapsed();
    eprintln!(
        "failover of {} targets took {took:?} (lease {LEASE:?})",
        victim.len()
    );
    let failed = http
        .get("/api/v1/clusters/collector/instances/collector-1")
        .await;
    assert_eq!(failed["phase"], "Failed", "{failed}");
    assert_eq!(failed["ready"], false);
    let (status, v) = http
        .post("/demo/clusters/collector/members/collector-1/crash")
        .await;
    assert_eq!(status, 400, "crashing twice: {v}");
    // The dashboard no longer offers to crash or stop it, only to delete its failed pod.
    let page = http.get("/clusters/collector").await;
    let page = page.as_str().unwrap();
    assert!(
        !page.contains("/members/collector-1/crash") && page.contains("Delete its failed pod"),
        "{page}"
    );
    assert!(page.contains("/members/collector-2/crash"), "{page}");

    // Stop, as the dashboard's form post: 303 to the cluster's page, which says what was done;
    // collector-0 is gone and every target it held is owned by another member.
    let before = http.held_by(demo::COLLECTOR, "collector-0").await;
    assert!(!before.is_empty());
    let stopping = Instant::now();
    let (status, headers, v) = http
        .call(
            "POST",
            "/demo/clusters/collector/members/collector-0/stop",
            &[("content-type", "application/x-www-form-urlencoded")],
            "csrf=ignored-here",
        )
        .await;
    assert_eq!(status, 303, "{v}");
    eprintln!(
        "collector-0 handed {} targets over and stopped in {:?}",
        before.len(),
        stopping.elapsed()
    );
    // Answered once its agent has exited: its app stopped all its work before that (each
    // target handed over), and it was not killed.
    assert_eq!(checker.working_on("collector-0"), Vec::<String>::new());
    assert!(!checker.crashed_members().contains("collector-0"));
    let to = headers[header::LOCATION].to_str().unwrap();
    assert_eq!(
        to,
        "/clusters/collector?demo=stopped&member=collector-0#demo-h"
    );
    let page = http.get(to.split('#').next().unwrap()).await;
    assert!(
        page.as_str().unwrap().contains(
            "Stopped collector-0 gracefully (as SIGTERM would): it handed its targets over"
        ),
        "{page}"
    );
    let gone = eventually(Duration::from_secs(15), || async {
        let (status, _, _) = http
            .call(
                "GET",
                "/api/v1/clusters/collector/instances/collector-0",
                &[],
                "",
            )
            .await;
        (status == 404).then_some(())
    })
    .await;
    assert!(gone.is_some(), "collector-0 still listed");
    let after = settled(
        api,
        &checker,
        demo::COLLECTOR,
        Duration::from_secs(3 * LEASE.as_secs() + 5),
        |_| true,
    )
    .await;
    assert_eq!(after.len(), TARGETS, "no target lost");
    for t in after
        .iter()
        .filter(|t| before.contains(t["key"].as_str().unwrap()))
    {
        assert_ne!(t["owner"], "collector-0", "{t}");
    }

    // Each control is audited.
    let audit = http.get("/api/v1/history?kind=audit&limit=100").await;
    let whats: Vec<String> = audit["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.to_string())
        .collect();
    for what in [
        "demo: add a member",
        "demo: crash member collector-1",
        "demo: stop member collector-0",
    ] {
        assert!(
            whats.iter().any(|w| w.contains(what)),
            "no audit entry {what:?}: {whats:?}"
        );
    }

    let stopping = Instant::now();
    let stopped = demo.stop().await.unwrap();
    eprintln!("the demo stopped in {:?}", stopping.elapsed());
    assert_work_ended(&checker, &["collector-1"]);
    // What the closing line says: the running members (collector-2 and -3, the 3 replicas;
    // not the crashed collector-1) released every target.
    assert_eq!(
        (stopped.members, stopped.held, stopped.still_held),
        (5, TARGETS + demo::DATABASES.len(), 0),
        "{stopped}"
    );
    eprintln!("whole test {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beyond_loopback_the_api_needs_the_generated_admin_token() {
    let dir = tempfile::tempdir().unwrap();
    let checker = InvariantChecker::new();
    let demo = demo::start(options(dir.path(), "0.0.0.0:0", &checker))
        .await
        .unwrap();
    let file = demo.token_file().expect("a token file").to_owned();
    assert_eq!(file, dir.path().join("tokens.csv"));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let text = std::fs::read_to_string(&file).unwrap();
    let token = text.split(',').next().unwrap();
    assert!(token.len() >= 40, "a long random token");
    let http = Http::new(demo.api_addr());
    let (status, _, _) = http.call("GET", "/api/v1/clusters", &[], "").await;
    assert_eq!(status, 401);
    let (status, _, _) = http
        .call("POST", "/demo/clusters/collector/members", &[], "")
        .await;
    assert_eq!(status, 401, "the controls need the token too");
    let bearer = format!("Bearer {token}");
    let (status, _, v) = http
        .call(
            "GET",
            "/api/v1/clusters",
            &[("authorization", bearer.as_str())],
            "",
        )
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v.as_array().unwrap().len(), 2);
    demo.stop().await.unwrap();
    assert_work_ended(&checker, &[]);
}

/// `leasehold demo` as people run it, stopped with SIGTERM (as `timeout`, `kill`, systemd or a
/// container runtime stop it): it exits cleanly and removes its temporary state directory.
/// (It used to stop on Ctrl-C only, so SIGTERM killed it and left the directory behind.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_the_demo_and_removes_its_state() {
    let mut demo = tokio::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args([
            "demo",
            "--listen",
            "127.0.0.1:0",
            "--kube-listen",
            "127.0.0.1:0",
        ])
        .args(["--members", "2", "--targets", "10"])
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("leasehold demo starts");
    // The state directory, from what it prints.
    let stdout = demo.stdout.take().unwrap();
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stdout));
    let state = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(rest) = line.trim().strip_prefix("state (history, kubeconfig): ") {
                return rest.split(", removed at exit").next().unwrap().to_owned();
            }
        }
        panic!("the demo never said where its state is");
    })
    .await
    .expect("the demo starts within 30 s");
    assert!(Path::new(&state).is_dir(), "{state}");
    let pid = demo.id().unwrap().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let status = tokio::time::timeout(Duration::from_secs(20), demo.wait())
        .await
        .expect("the demo exits within 20 s of SIGTERM")
        .unwrap();
    assert!(status.success(), "{status}");
    assert!(!Path::new(&state).exists(), "{state} left behind");
}

/// The demo's flags in the tests of the `leasehold demo` process: free ports, 2 collectors and
/// 20 targets (with the 3 replicas and their 8 databases: 5 members, 28 targets).
const DEMO_ARGS: &str =
    "demo --listen 127.0.0.1:0 --kube-listen 127.0.0.1:0 --members 2 --targets 20";
/// The closing line of those demos, up to its duration.
const CLOSING: &str = "leasehold demo stopped: 5 members released 28 targets in ";
/// The banner's first and last lines.
const BANNER_TOP: &str = "Leasehold demo";
const BANNER_END: &str = "Ctrl-C (or SIGTERM) stops the demo.";

/// What a terminal shows of `raw`: its lines without colours and carriage returns.
fn screen(raw: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(raw);
    let mut out = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            // A CSI sequence (colours): ESC [ parameters, then one final byte.
            '\u{1b}' => {
                if chars.next() == Some('[') {
                    for c in chars.by_ref() {
                        if ('\u{40}'..='\u{7e}').contains(&c) {
                            break;
                        }
                    }
                }
            }
            '\r' => {}
            c => out.push(c),
        }
    }
    out.lines().map(str::to_owned).collect()
}

/// A log line's level, on a terminal (`14:03:07.215  WARN message …`).
fn is_warning_or_error(line: &str) -> bool {
    line.split_whitespace()
        .take(3)
        .any(|word| word == "WARN" || word == "ERROR")
}

/// `leasehold demo` on a pseudo-terminal (util-linux `script`), as a person runs it: a line as it
/// starts, a few log lines for people (no JSON, none per target), then the banner — the last
/// thing on the screen once the demo has settled, printed again on SIGUSR1. Ctrl-C (typed into
/// the terminal) stops it with one closing line saying what its members released, and not one
/// warning or error. (The banner used to be buried under hundreds of per-target lines at once,
/// and Ctrl-C printed hundreds more and a warning per member.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_terminal_the_banner_comes_last_and_ctrl_c_ends_in_one_line() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    // `exec`: `script` runs the command with `$SHELL -c`, and a shell that stays as the demo's
    // parent (dash, when `$SHELL` is unset or /bin/sh) is killed by the Ctrl-C as well, so the
    // exit status would be the shell's 130, not the demo's.
    let command = format!("exec '{}' {DEMO_ARGS}", env!("CARGO_BIN_EXE_leasehold"));
    let mut term = tokio::process::Command::new("script")
        // Quiet, flush at once, the demo's exit status as its own, no typescript file.
        .args(["-qefc", &command, "/dev/null"])
        .env_remove("RUST_LOG")
        .env_remove("LEASEHOLD_LOG_FORMAT")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("util-linux `script` runs (it gives the demo a pseudo-terminal)");
    let mut keys = term.stdin.take().unwrap();
    let mut out = term.stdout.take().unwrap();
    let shown = Arc::new(std::sync::Mutex::new(Vec::<u8>::new()));
    let reader = tokio::spawn({
        let shown = shown.clone();
        async move {
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = out.read(&mut buf).await {
                shown.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        }
    });
    let lines = || screen(&shown.lock().unwrap());
    let banners = |lines: &[String]| lines.iter().filter(|l| l.ends_with(BANNER_END)).count();

    let settled = eventually(Duration::from_secs(60), || async {
        let lines = lines();
        (banners(&lines) == 1).then_some(lines)
    })
    .await
    .unwrap_or_else(|| panic!("no banner within 60 s: {:#?}", lines()));
    // Nothing follows the banner once the demo has settled.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let now = lines();
    assert_eq!(
        now.iter().rev().find(|l| !l.trim().is_empty()),
        settled.last(),
        "printed after the banner: {now:#?}"
    );
    let top = now
        .iter()
        .position(|l| l == BANNER_TOP)
        .expect("the banner's first line");
    assert!(
        top <= 10,
        "{top} lines before the banner, a handful at most: {now:#?}"
    );
    assert!(
        !now.iter().any(|l| l.trim_start().starts_with('{')),
        "JSON on the terminal: {now:#?}"
    );
    assert!(
        !now.iter().any(|l| l.contains("target=")),
        "per-target lines on the terminal: {now:#?}"
    );

    // SIGUSR1 prints the banner again.
    let pid = now
        .iter()
        .find_map(|l| l.trim().strip_prefix("kill -USR1 "))
        .and_then(|rest| rest.split_whitespace().next())
        .expect("the banner names the demo's process")
        .to_owned();
    assert!(
        std::process::Command::new("kill")
            .args(["-USR1", &pid])
            .status()
            .unwrap()
            .success()
    );
    eventually(Duration::from_secs(10), || async {
        (banners(&lines()) == 2).then_some(())
    })
    .await
    .unwrap_or_else(|| panic!("no second banner after SIGUSR1: {:#?}", lines()));

    // Ctrl-C, as typed.
    keys.write_all(b"\x03").await.unwrap();
    keys.flush().await.unwrap();
    let status = tokio::time::timeout(Duration::from_secs(30), term.wait())
        .await
        .expect("the demo stops within 30 s of Ctrl-C")
        .unwrap();
    reader.await.unwrap();
    let all = lines();
    assert!(status.success(), "{status}: {all:#?}");
    // (A log line may still follow it: the control plane's "no longer acting" is written by a
    // task of the engine that its end does not wait for.)
    let closing: Vec<&String> = all
        .iter()
        .skip(now.len())
        .filter(|l| l.starts_with(CLOSING) && l.ends_with(" s"))
        .collect();
    assert_eq!(closing.len(), 1, "one closing line: {all:#?}");
    let complaints: Vec<&String> = all.iter().filter(|l| is_warning_or_error(l)).collect();
    assert!(
        complaints.is_empty(),
        "warnings or errors on a normal run: {complaints:#?}"
    );
}

/// `leasehold demo` with stderr not a terminal (a pipe, a file, a log collector): its logs are
/// JSON lines, its members' per-target lines are left out there too, and SIGTERM ends it with
/// the closing line on stdout and no warning or error in the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_terminal_the_demo_logs_json_lines() {
    use tokio::io::AsyncReadExt as _;
    let mut demo = tokio::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(DEMO_ARGS.split_whitespace())
        .env_remove("RUST_LOG")
        .env_remove("LEASEHOLD_LOG_FORMAT")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("leasehold demo starts");
    let mut log = demo.stderr.take().unwrap();
    let log = tokio::spawn(async move {
        let mut text = String::new();
        log.read_to_string(&mut text).await.unwrap();
        text
    });
    let stdout = demo.stdout.take().unwrap();
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stdout));
    tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.ends_with(BANNER_END) {
                return;
            }
        }
        panic!("the demo ended before its banner");
    })
    .await
    .expect("the banner within 60 s");
    let pid = demo.id().unwrap().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let mut rest = Vec::new();
    while let Some(line) = lines.next_line().await.unwrap() {
        rest.push(line);
    }
    let status = tokio::time::timeout(Duration::from_secs(30), demo.wait())
        .await
        .expect("the demo exits within 30 s of SIGTERM")
        .unwrap();
    assert!(status.success(), "{status}");
    assert!(
        matches!(&rest[..], [line] if line.starts_with(CLOSING)),
        "stdout after the banner: {rest:?}"
    );

    let log = log.await.unwrap();
    let entries: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let said = |message: &str| {
        entries
            .iter()
            .any(|e| e["fields"]["message"] == message && e["level"] == "INFO")
    };
    assert!(said("serving HTTP"), "{log}");
    assert!(said("acting as the control plane"), "{log}");
    for e in &entries {
        let target = e["target"].as_str().expect("each entry names its target");
        assert!(
            !target.starts_with("leasehold::agent"),
            "a member's line at the default level: {e}"
        );
        assert!(
            e["level"] == "INFO",
            "a warning or error on a normal run: {e}"
        );
    }
}
