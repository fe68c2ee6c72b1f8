//! The same twelve targets (on a live gNMI device) collected three ways on this machine, through
//! the same four events — scale-up 3 → 4, scale-down 4 → 3 (the fourth member goes), a rolling
//! update (each member's pod deleted and back [`POD_AWAY`] later, in turn) and a crash (SIGKILL
//! to the member collecting the most) — with every collection gap and any double collection
//! read from the gnmics' own APIs by [`Watch`] (every 50 ms; a gap shorter than one of its
//! rounds, ~60–130 ms, goes unseen), never from Leasehold:
//!
//! - **gnmic's own clustering**: `gnmic subscribe` members with its Kubernetes locker against
//!   the simulator ([`GnmicCluster`]), its lock Leases at gnmic's default `lease-duration`
//!   (10 s); a member's `/api/v1/targets` lists what it was given and locked (no connection
//!   state: listed counts as collected);
//! - **operator-style**: a `gnmic collect` per member driven by a scripted controller the way
//!   the gNMIc Operator v0.3 does it — placement by rendezvous hashing, a move is break before
//!   make (delete from the old owners over REST, sleep 1 s, add to the new), a restarted pod
//!   gets its set again once it listens; the controller reacts at once (its best case);
//! - **Leasehold managed**: the `managed_gnmic` set-up (`leasehold agent --gnmic-api` beside each
//!   `gnmic collect`, `D` = 3 s, `on_join: auto`).
//!
//! Each prints its rows of the table (`gnmic compare | way | event | targets whose collector
//! changed | targets with a gap seen | p50 | max | double collections seen | event took`); only
//! what must hold is asserted: Leasehold managed never has a target collected by two gnmics.
//! `cargo test --test it -- gnmic_compare:: --nocapture --test-threads=1` (about 3 minutes:
//! gnmic's own clustering waits out its lease duration and its leader's 20 s dispatch passes).

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};
use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;

use crate::common;
use common::cluster::*;
use common::eventually;
use common::gnmic::{self, Gnmic, GnmicCluster, Watch};

const TARGETS: usize = 12;
const POLL: Duration = Duration::from_millis(50);
/// How long a restarted member's pod is away in the rolling update, between its process's end
/// and the new one's start: a pod deleted and created again (scheduling, container start) — on
/// loopback gnmic itself restarts in ~100 ms, which no pod does.
const POD_AWAY: Duration = Duration::from_secs(2);

fn keys() -> Vec<String> {
    (0..TARGETS).map(|i| format!("dev-{i:02}")).collect()
}

/// One row of the table: a way, an event, and what the watch saw meanwhile.
struct Row {
    way: &'static str,
    event: String,
    moved: usize,
    gaps: Vec<Duration>,
    doubled: usize,
    took: Duration,
}

impl Row {
    fn print(&self) {
        let mut d = self.gaps.clone();
        d.sort();
        let q = |p: usize| {
            d.get((d.len() * p).div_ceil(100).saturating_sub(1))
                .map_or("–".to_owned(), |g| format!("{} ms", g.as_millis()))
        };
        eprintln!(
            "gnmic compare | {} | {} | {} | {} | {} | {} | {} | {:.1} s",
            self.way,
            self.event,
            self.moved,
            d.len(),
            q(50),
            q(100),
            self.doubled,
            self.took.as_secs_f64()
        );
    }
}

/// Measures one event: its collectors before, then `run`, then waiting until every target is
/// collected by exactly one gnmic again.
struct Phase {
    before: BTreeMap<String, BTreeSet<String>>,
    overlaps: usize,
    start: Instant,
}

fn begin(watch: &Watch) -> Phase {
    watch.take_gaps();
    Phase {
        before: watch.collecting(),
        overlaps: watch.overlaps().len(),
        start: Instant::now(),
    }
}

async fn end(watch: &Watch, phase: Phase, way: &'static str, event: &str, within: Duration) -> Row {
    // Two whole rounds after the event, so that what the watch says is what followed it.
    rounds(watch, 2).await;
    all_collected(watch, within, event).await;
    // Two more, so that the last gaps are in.
    rounds(watch, 2).await;
    let after = watch.collecting();
    let moved = phase
        .before
        .iter()
        .filter(|(t, c)| after.get(*t) != Some(c))
        .count();
    let row = Row {
        way,
        event: event.to_owned(),
        moved,
        gaps: watch.take_gaps().into_iter().map(|(_, g)| g).collect(),
        doubled: watch.overlaps().len() - phase.overlaps,
        took: phase.start.elapsed(),
    };
    row.print();
    row
}

/// Waits for `n` more rounds of the watch.
async fn rounds(watch: &Watch, n: u64) {
    let r = watch.rounds();
    while watch.rounds() < r + n {
        tokio::time::sleep(POLL).await;
    }
}

/// Waits until every target is collected by exactly one gnmic.
async fn all_collected(watch: &Watch, within: Duration, what: &str) {
    let ok = eventually(within, || async {
        let c = watch.collecting();
        (c.len() == TARGETS && c.values().all(|m| m.len() == 1)).then_some(())
    })
    .await;
    assert!(
        ok.is_some(),
        "{what}: not every target collected by exactly one gnmic within {within:?}: {:?}",
        watch.collecting()
    );
}

/// The one of `among` whose gnmic collects the most targets (a crash worth measuring).
fn busiest(watch: &Watch, among: &[&'static str]) -> &'static str {
    let c = watch.collecting();
    among
        .iter()
        .max_by_key(|m| c.values().filter(|s| s.contains(**m)).count())
        .copied()
        .unwrap()
}

/// Rendezvous (highest random weight) placement, as the gNMIc Operator places targets.
fn rendezvous(targets: &[String], members: &[&str]) -> BTreeMap<String, String> {
    targets
        .iter()
        .map(|t| {
            let m = members
                .iter()
                .max_by_key(|m| {
                    let mut h = std::collections::hash_map::DefaultHasher::new();
                    (t, m).hash(&mut h);
                    h.finish()
                })
                .unwrap();
            (t.clone(), (*m).to_owned())
        })
        .collect()
}

/// The operator-style controller: each member's `gnmic collect` API and the plan it pushed.
struct Operator {
    device: SocketAddr,
    apis: BTreeMap<String, SocketAddr>,
    plan: BTreeMap<String, String>,
}

impl Operator {
    fn definition(&self, target: &str) -> Value {
        json!({ "name": target, "address": self.device.to_string(), "insecure": true,
                "timeout": "2s" })
    }

    async fn add(&self, member: &str, target: &str) {
        let status = gnmic::api_send(
            self.apis[member],
            "POST",
            "/api/v1/config/targets",
            Some(&self.definition(target)),
        )
        .await;
        assert_eq!(status, 200, "adding {target} to {member}");
    }

    /// Re-plans over `members` and moves what changed, break before make: deleted from the old
    /// owners (those still up), 1 s, added to the new.
    async fn replan(&mut self, members: &[&str]) -> usize {
        let next = rendezvous(&keys(), members);
        let moved: Vec<(String, String, String)> = next
            .iter()
            .filter(|(t, m)| self.plan.get(*t) != Some(m))
            .map(|(t, m)| (t.clone(), self.plan[t].clone(), m.clone()))
            .collect();
        for (t, from, _) in &moved {
            if members.contains(&from.as_str()) {
                let path = format!("/api/v1/config/targets/{t}");
                gnmic::api_send(self.apis[from], "DELETE", &path, None).await;
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        for (t, _, to) in &moved {
            self.add(to, t).await;
        }
        self.plan = next;
        moved.len()
    }

    /// A restarted member's set, pushed again once it listens.
    async fn reapply(&self, member: &str) {
        for (t, m) in &self.plan {
            if m == member {
                self.add(member, t).await;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_style_break_before_make() {
    let Some(bin) = gnmic::binary() else { return };
    let _serial = SERIAL.lock().await;
    let way = "operator-style";
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let device = Gnmic::device(&bin, dir.path(), "d");
    device.listening().await;
    let watch = Watch::start(POLL);
    let mut pods = BTreeMap::new();
    for m in ["m-0", "m-1", "m-2", "m-3"] {
        let g = Gnmic::collector(&bin, dir.path(), m);
        if m != "m-3" {
            g.listening().await;
            watch.add(m, g.addr);
        }
        pods.insert(m, g);
    }
    pods.get_mut("m-3").unwrap().kill().await;
    let mut op = Operator {
        device: device.addr,
        apis: pods
            .iter()
            .map(|(m, g)| ((*m).to_owned(), g.addr))
            .collect(),
        plan: rendezvous(&keys(), &["m-0", "m-1", "m-2"]),
    };
    for (t, m) in &op.plan {
        op.add(m, t).await;
    }
    all_collected(&watch, Duration::from_secs(20), "placement").await;

    let p = begin(&watch);
    let g = pods.get_mut("m-3").unwrap();
    g.start();
    g.listening().await;
    watch.add("m-3", g.addr);
    op.replan(&["m-0", "m-1", "m-2", "m-3"]).await;
    end(&watch, p, way, "scale-up 3 → 4", Duration::from_secs(20)).await;

    // The operator shrinks the StatefulSet before it drains the leaving pod.
    let p = begin(&watch);
    pods.get_mut("m-3").unwrap().kill().await;
    watch.remove("m-3");
    op.replan(&["m-0", "m-1", "m-2"]).await;
    end(&watch, p, way, "scale-down 4 → 3", Duration::from_secs(20)).await;

    let p = begin(&watch);
    for m in ["m-0", "m-1", "m-2"] {
        let g = pods.get_mut(m).unwrap();
        g.kill().await;
        tokio::time::sleep(POD_AWAY).await;
        g.start();
        g.listening().await;
        op.reapply(m).await;
        all_collected(&watch, Duration::from_secs(20), "rolling update").await;
    }
    end(&watch, p, way, "rolling update", Duration::from_secs(20)).await;

    let p = begin(&watch);
    let three = ["m-0", "m-1", "m-2"];
    let victim = busiest(&watch, &three);
    pods.get_mut(victim).unwrap().kill().await;
    watch.remove(victim);
    let rest: Vec<&str> = three.into_iter().filter(|m| *m != victim).collect();
    op.replan(&rest).await;
    end(&watch, p, way, "crash", Duration::from_secs(20)).await;
    drop(watch);
    drop(pods);
}

/// Waits until every target is owned and collected by its owner's gnmic alone, the owners
/// among `members`.
async fn owners_collect(h: &Harness, watch: &Watch, members: &[&str], within: Duration) {
    let ok = eventually(within, || async {
        let m = h.model();
        let c = watch.collecting();
        (m.counts.owned == m.counts.total
            && m.counts.total == TARGETS
            && m.targets.iter().all(|t| {
                t.owner.as_deref().is_some_and(|o| {
                    members.contains(&o)
                        && c.get(t.key.as_ref())
                            .is_some_and(|s| s.len() == 1 && s.contains(o))
                })
            }))
        .then_some(())
    })
    .await;
    assert!(
        ok.is_some(),
        "not every target collected by its owner among {members:?}: {:?}",
        watch.collecting()
    );
}

/// Stops member `name` as a pod's deletion does: SIGTERM to its agent (which hands its targets
/// over first), then its gnmic and pod go.
async fn stop_member(h: &mut Harness, watch: &Watch, g: &mut Gnmic, name: &str) {
    let mut p = h.processes.remove(name).unwrap();
    p.signal("-TERM");
    let status = tokio::time::timeout(Duration::from_secs(20), p.child.wait())
        .await
        .unwrap_or_else(|_| panic!("{name} did not exit on SIGTERM:\n{}", p.log()))
        .unwrap();
    assert!(status.success(), "{status}\n{}", p.log());
    g.kill().await;
    watch.remove(name);
    kube_sim::kubelet::crash(&h.t.client, &h.ns, name)
        .await
        .unwrap();
}

#[tokio::test]
async fn leasehold_managed() {
    let Some(bin) = gnmic::binary() else { return };
    let way = "Leasehold managed";
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let device = Gnmic::device(&bin, dir.path(), "d");
    device.listening().await;
    let list: Vec<String> = keys()
        .iter()
        .map(|k| {
            format!(
                "{{key: {k}, gnmic: {{address: '{}', insecure: true, timeout: 2s}}}}",
                device.addr
            )
        })
        .collect();
    let (mut h, targets_file) = managed_harness(&list, dir.path()).await;
    let watch = Watch::start(POLL);
    let mut gnmics = BTreeMap::new();
    for m in ["c-0", "c-1", "c-2"] {
        let g = Gnmic::collector(&bin, dir.path(), m);
        g.listening().await;
        watch.add(m, g.addr);
        h.add_gnmic_member(m, g.addr, &targets_file).await;
        gnmics.insert(m, g);
    }
    h.wait_pods_ready(3).await;
    h.wait_registered(&["c-0", "c-1", "c-2"]).await;
    h.start_engine("cp-a").await;
    let three = ["c-0", "c-1", "c-2"];
    owners_collect(&h, &watch, &three, Duration::from_secs(30)).await;

    let p = begin(&watch);
    let g = Gnmic::collector(&bin, dir.path(), "c-3");
    g.listening().await;
    watch.add("c-3", g.addr);
    h.add_gnmic_member("c-3", g.addr, &targets_file).await;
    gnmics.insert("c-3", g);
    eventually(Duration::from_secs(30), || async {
        (h.model().instance("c-3")?.owned == TARGETS / 4).then_some(())
    })
    .await
    .expect("c-3 was never given its share");
    owners_collect(
        &h,
        &watch,
        &["c-0", "c-1", "c-2", "c-3"],
        Duration::from_secs(30),
    )
    .await;
    end(&watch, p, way, "scale-up 3 → 4", Duration::from_secs(30)).await;

    let p = begin(&watch);
    stop_member(&mut h, &watch, gnmics.get_mut("c-3").unwrap(), "c-3").await;
    owners_collect(&h, &watch, &three, Duration::from_secs(30)).await;
    end(&watch, p, way, "scale-down 4 → 3", Duration::from_secs(30)).await;

    let p = begin(&watch);
    for m in three {
        stop_member(&mut h, &watch, gnmics.get_mut(m).unwrap(), m).await;
        tokio::time::sleep(POD_AWAY).await;
        let g = gnmics.get_mut(m).unwrap();
        g.start();
        g.listening().await;
        watch.add(m, g.addr);
        let api = g.addr;
        h.add_gnmic_member(m, api, &targets_file).await;
        eventually(Duration::from_secs(30), || async {
            (h.model().instance(m)?.owned == TARGETS / 3).then_some(())
        })
        .await
        .unwrap_or_else(|| panic!("{m} was never given its share back"));
        owners_collect(&h, &watch, &three, Duration::from_secs(30)).await;
    }
    end(&watch, p, way, "rolling update", Duration::from_secs(30)).await;

    let p = begin(&watch);
    let victim = busiest(&watch, &three);
    let mut agent = h.processes.remove(victim).unwrap();
    agent.signal("-KILL");
    let _ = agent.child.wait().await;
    gnmics.get_mut(victim).unwrap().kill().await;
    watch.remove(victim);
    kube_sim::kubelet::crash(&h.t.client, &h.ns, victim)
        .await
        .unwrap();
    let rest: Vec<&str> = three.into_iter().filter(|m| *m != victim).collect();
    owners_collect(&h, &watch, &rest, Duration::from_secs(30)).await;
    end(&watch, p, way, "crash", Duration::from_secs(30)).await;

    let overlaps = watch.overlaps();
    assert!(
        overlaps.is_empty(),
        "Leasehold managed: targets collected by two gnmics at once: {overlaps:?}"
    );
    drop(watch);
    h.finish().await;
    drop(gnmics);
}

const NS: &str = "telemetry";
const CLUSTER: &str = "cmp";
/// gnmic's default `lease-duration` (with twelve targets on two members a shorter one falls
/// behind client-go's default rate limit: see `observed_gnmic::LEASE_S`).
const GNMIC_LEASE_S: u64 = 10;
const MEMBERS: [(&str, &str); 4] = [
    ("gnmic-0", "127.0.0.31"),
    ("gnmic-1", "127.0.0.32"),
    ("gnmic-2", "127.0.0.33"),
    ("gnmic-3", "127.0.0.34"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gnmic_own_clustering() {
    kube_sim::sim_only!(
        "gnmic's members serve on loopback IPs, which kube-apiserver refuses in Endpoints"
    );
    let Some(bin) = gnmic::binary() else { return };
    let Some(unshare) = gnmic::namespaces() else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let way = "gnmic's own clustering";
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let (t, in_cluster) = gnmic::clustered_sim(NS, dir.path(), unshare).await;
    let device = Gnmic::device(&bin, dir.path(), "d");
    device.listening().await;
    let targets: serde_json::Map<String, Value> = keys()
        .into_iter()
        .map(|k| {
            (
                k,
                json!({ "address": device.addr.to_string(), "insecure": true, "timeout": "2s" }),
            )
        })
        .collect();
    let mut cluster = GnmicCluster::new(
        &bin,
        in_cluster,
        dir.path(),
        CLUSTER,
        NS,
        GNMIC_LEASE_S,
        &MEMBERS,
        &Value::Object(targets),
    );
    gnmic::api_service(&t.client, NS, CLUSTER, cluster.port).await;
    let watch = Watch::start(POLL);
    for (name, ip) in &MEMBERS[..3] {
        gnmic::ready_pod(&t.client, NS, name, ip).await;
        cluster.start(name);
        watch.add(name, cluster.api(name));
    }
    gnmic::endpoints_ready(&t.client, NS, CLUSTER, 3).await;
    all_collected(&watch, Duration::from_secs(60), "placement").await;
    // (Within: the longest gnmic needs — a lease duration, then its leader's next dispatch
    // pass, every 20 s, one target after another.)
    let within = Duration::from_secs(60);

    // A fourth member: gnmic gives it nothing (it rebalances only when asked); the row is
    // taken after 5 s.
    let p = begin(&watch);
    let (name, ip) = MEMBERS[3];
    gnmic::ready_pod(&t.client, NS, name, ip).await;
    cluster.start(name);
    watch.add(name, cluster.api(name));
    gnmic::endpoints_ready(&t.client, NS, CLUSTER, 4).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    end(&watch, p, way, "scale-up 3 → 4", within).await;

    let p = begin(&watch);
    cluster.stop(name).await;
    watch.remove(name);
    kube_sim::kubelet::crash(&t.client, NS, name).await.unwrap();
    end(&watch, p, way, "scale-down 4 → 3", within).await;

    // Each pod deleted and created again (SIGTERM; not ready until its gnmic is back).
    let p = begin(&watch);
    for (name, _) in &MEMBERS[..3] {
        cluster.stop(name).await;
        kube_sim::kubelet::set_ready(&t.client, NS, name, false)
            .await
            .unwrap();
        tokio::time::sleep(POD_AWAY).await;
        cluster.start(name);
        let api = cluster.api(name);
        eventually(Duration::from_secs(10), || async {
            tokio::net::TcpStream::connect(api).await.ok()
        })
        .await
        .expect("gnmic listens again");
        kube_sim::kubelet::set_ready(&t.client, NS, name, true)
            .await
            .unwrap();
        all_collected(&watch, within, "rolling update").await;
    }
    end(&watch, p, way, "rolling update", within).await;

    let p = begin(&watch);
    let name = busiest(&watch, &["gnmic-0", "gnmic-1", "gnmic-2"]);
    cluster.kill(name).await;
    kube_sim::kubelet::set_ready(&t.client, NS, name, false)
        .await
        .unwrap();
    watch.remove(name);
    end(&watch, p, way, "crash", within).await;
    drop(watch);
    drop(cluster);
}
