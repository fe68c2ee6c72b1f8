//! Load harness for the Kubernetes simulator (issue: 50,000 leases; ≥ 5,000 lease updates/s
//! over HTTP while 50 watchers each receive every event; a paginated list of all 50,000 in
//! ≤ 1 s; RSS at that size).
//!
//! Run: `cargo bench -p kube-sim --bench sim_load` (options after `--`: `--leases N --watchers N
//! --seconds N --concurrency N`). The simulator runs as its own process (this program again,
//! with `--serve-sim`, and mimalloc as `leasehold sim` has it) so its RSS is measured alone;
//! this process is the load generator. Watchers count event
//! lines without decoding them, so the generator's CPU goes to the updates. With
//! `LEASEHOLD_TEST_KUBECONFIG` set (`scripts/envtest.sh run -- cargo bench -p kube-sim --bench
//! sim_load -- …`) the same load goes to that real kube-apiserver instead: the speed ratio in
//! docs/simulator.md comes from the two side by side.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use http_body_util::BodyExt;
use kube::Client;
use serde_json::{Value, json};

struct Args {
    leases: usize,
    watchers: usize,
    seconds: u64,
    concurrency: usize,
}

fn args() -> Args {
    // `cargo bench` passes `--bench`; anything else (`cargo test --all-targets`) gets a smoke
    // run that checks the harness works without spending minutes in a debug build.
    let full = std::env::args().any(|a| a == "--bench");
    let mut a = if full {
        Args {
            leases: 50_000,
            watchers: 50,
            seconds: 10,
            concurrency: 64,
        }
    } else {
        Args {
            leases: 200,
            watchers: 2,
            seconds: 1,
            concurrency: 4,
        }
    };
    let argv: Vec<String> = std::env::args().collect();
    let mut i = 1;
    while i < argv.len() {
        let val = || argv.get(i + 1).and_then(|v| v.parse().ok());
        match argv[i].as_str() {
            "--leases" => a.leases = val().unwrap_or(a.leases),
            "--watchers" => a.watchers = val().unwrap_or(a.watchers),
            "--seconds" => a.seconds = val().map(|v: usize| v as u64).unwrap_or(a.seconds),
            "--concurrency" => a.concurrency = val().unwrap_or(a.concurrency),
            _ => {}
        }
        i += 1;
    }
    a
}

fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
        .unwrap_or(f64::NAN)
}

async fn send(
    client: &Client,
    method: &str,
    path: &str,
    ct: &str,
    body: Vec<u8>,
) -> (u16, Vec<u8>) {
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", ct)
        .body(kube::client::Body::from(body))
        .unwrap();
    let resp = client.send(req).await.expect("request");
    let status = resp.status().as_u16();
    let bytes = resp
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes()
        .to_vec();
    (status, bytes)
}

/// The allocator `leasehold sim` runs with, so the simulator's numbers are the product's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The simulator's side: this program re-run as `--serve-sim ADDR KUBECONFIG` serves a
/// simulator with default options on ADDR and writes its kubeconfig, until it is killed.
async fn serve_sim(listen: &str, kubeconfig: &std::path::Path) -> anyhow::Result<()> {
    let sim = kube_sim::Simulator::start(listen.parse()?, Default::default()).await?;
    let tmp = kubeconfig.with_extension("tmp");
    std::fs::write(&tmp, sim.kubeconfig())?;
    std::fs::rename(&tmp, kubeconfig)?;
    std::future::pending::<()>().await;
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let argv: Vec<String> = std::env::args().collect();
    if let Some(i) = argv.iter().position(|a| a == "--serve-sim") {
        let (Some(listen), Some(kc)) = (argv.get(i + 1), argv.get(i + 2)) else {
            anyhow::bail!("usage: --serve-sim ADDR KUBECONFIG");
        };
        return serve_sim(listen, std::path::Path::new(kc)).await;
    }
    let a = args();
    // Against a real kube-apiserver when the environment names one (`scripts/envtest.sh run --
    // cargo bench -p kube-sim --bench sim_load …`): the same load, to compare the simulator with.
    let real = std::env::var_os("LEASEHOLD_TEST_KUBECONFIG");
    let tier = if real.is_some() {
        "real kube-apiserver + etcd"
    } else {
        "simulator"
    };
    let dir = tempfile::tempdir()?;
    let (mut child, pid, kc) = match real {
        Some(path) => (None, None, std::path::PathBuf::from(path)),
        None => {
            let kc = dir.path().join("kubeconfig");
            let port = std::net::TcpListener::bind("127.0.0.1:0")?
                .local_addr()?
                .port();
            let child = tokio::process::Command::new(std::env::current_exe()?)
                .args(["--serve-sim", &format!("127.0.0.1:{port}")])
                .arg(&kc)
                .env("RUST_LOG", "warn")
                .stdout(std::process::Stdio::null())
                .kill_on_drop(true)
                .spawn()?;
            let pid = child.id().expect("pid");
            while !kc.exists() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            (Some(child), Some(pid), kc)
        }
    };
    let kubeconfig = kube::config::Kubeconfig::read_from(&kc)?;
    let client = Client::try_from(
        kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?,
    )?;
    let base = "/apis/coordination.k8s.io/v1/namespaces/default/leases";

    // 1. Create the leases.
    let t0 = Instant::now();
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..a.concurrency {
        let (client, next, n) = (client.clone(), next.clone(), a.leases as u64);
        tasks.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                let body = json!({ "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": { "name": format!("target-{i:06}"), "labels": { "leasehold.io/cluster": "bench" } },
                    "spec": { "holderIdentity": format!("member-{}", i % 100), "leaseDurationSeconds": 10 } });
                let (s, _) = send(&client, "POST", base, "application/json", serde_json::to_vec(&body).unwrap()).await;
                assert_eq!(s, 201);
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    let create_s = t0.elapsed().as_secs_f64();
    let rss_loaded = pid.map(rss_mib);

    // 2. Paginated list of everything (limit 500), three times.
    let mut list_times = Vec::new();
    for _ in 0..3 {
        let t = Instant::now();
        let mut cont = String::new();
        let mut count = 0usize;
        loop {
            let path = if cont.is_empty() {
                format!("{base}?limit=500")
            } else {
                format!("{base}?limit=500&continue={cont}")
            };
            let (s, body) = send(&client, "GET", &path, "application/json", vec![]).await;
            assert_eq!(s, 200);
            let v: Value = serde_json::from_slice(&body)?;
            count += v["items"].as_array().map_or(0, Vec::len);
            match v["metadata"]["continue"].as_str() {
                Some(c) if !c.is_empty() => cont = c.to_owned(),
                _ => break,
            }
        }
        assert_eq!(count, a.leases);
        list_times.push(t.elapsed().as_secs_f64());
    }

    // 3. Watchers from the current resourceVersion, counting event lines.
    let (_, body) = send(
        &client,
        "GET",
        &format!("{base}?limit=1"),
        "application/json",
        vec![],
    )
    .await;
    let rv = serde_json::from_slice::<Value>(&body)?["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or("0")
        .to_owned();
    let counts: Vec<Arc<AtomicU64>> = (0..a.watchers)
        .map(|_| Arc::new(AtomicU64::new(0)))
        .collect();
    let mut watchers = tokio::task::JoinSet::new();
    for c in &counts {
        let (client, c, path) = (
            client.clone(),
            c.clone(),
            format!("{base}?watch=true&resourceVersion={rv}&timeoutSeconds=600"),
        );
        watchers.spawn(async move {
            let req = http::Request::builder()
                .uri(path)
                .body(kube::client::Body::empty())
                .unwrap();
            let resp = client.send(req).await.expect("watch");
            let mut body = resp.into_body();
            while let Some(Ok(frame)) = body.frame().await {
                if let Some(d) = frame.data_ref() {
                    c.fetch_add(
                        d.iter().filter(|b| **b == b'\n').count() as u64,
                        Ordering::Relaxed,
                    );
                }
            }
        });
    }
    tokio::time::sleep(Duration::from_millis(500)).await;

    // 4. Sustained updates: merge patches of renewTime across all leases.
    let done = Arc::new(AtomicU64::new(0));
    let stop_at = Instant::now() + Duration::from_secs(a.seconds);
    let t1 = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..a.concurrency {
        let (client, done, n, conc) = (client.clone(), done.clone(), a.leases, a.concurrency);
        tasks.spawn(async move {
            let mut i = w;
            while Instant::now() < stop_at {
                let now = jiff::Timestamp::now()
                    .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
                    .to_string();
                let body = format!(r#"{{"spec":{{"renewTime":"{now}"}}}}"#).into_bytes();
                let (s, _) = send(
                    &client,
                    "PATCH",
                    &format!("{base}/target-{:06}", i % n),
                    "application/merge-patch+json",
                    body,
                )
                .await;
                assert_eq!(s, 200);
                done.fetch_add(1, Ordering::Relaxed);
                i += conc;
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    let update_s = t1.elapsed().as_secs_f64();
    let updates = done.load(Ordering::Relaxed);
    let t2 = Instant::now();
    while counts.iter().any(|c| c.load(Ordering::Relaxed) < updates)
        && t2.elapsed() < Duration::from_secs(60)
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let drain_s = t2.elapsed().as_secs_f64();
    let min_seen = counts
        .iter()
        .map(|c| c.load(Ordering::Relaxed))
        .min()
        .unwrap_or(0);
    let rss_after = pid.map(rss_mib);
    watchers.abort_all();
    if let Some(c) = &mut child {
        c.kill().await.ok();
    }

    list_times.sort_by(f64::total_cmp);
    println!("{tier}");
    println!("| measure | value |");
    println!("| --- | --- |");
    println!(
        "| leases created | {} in {:.1} s ({:.0}/s, {} concurrent) |",
        a.leases,
        create_s,
        a.leases as f64 / create_s,
        a.concurrency
    );
    let mib = |m: Option<f64>| {
        m.map_or("— (not this process's child)".into(), |m| {
            format!("{m:.0} MiB")
        })
    };
    println!(
        "| simulator RSS with {} leases | {} |",
        a.leases,
        mib(rss_loaded)
    );
    println!(
        "| paginated list of all (limit 500), best / median of 3 | {:.3} s / {:.3} s |",
        list_times[0], list_times[1]
    );
    println!(
        "| lease updates (merge patch, {} concurrent) | {} in {:.1} s = {:.0}/s |",
        a.concurrency,
        updates,
        update_s,
        updates as f64 / update_s
    );
    println!(
        "| watchers | {} , each received {} of {} events (min), drained {:.2} s after the last update |",
        a.watchers, min_seen, updates, drain_s
    );
    println!("| simulator RSS after updates | {} |", mib(rss_after));
    if min_seen < updates {
        anyhow::bail!("a watcher missed events: {min_seen} < {updates}");
    }
    Ok(())
}
