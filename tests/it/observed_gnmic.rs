//! Observe mode (`protocol: gnmic`) against a real gnmic cluster clustering itself: three
//! `gnmic subscribe` members with gnmic's Kubernetes locker ([`GnmicCluster`]: each in its own
//! mount and UTS namespace, with its pod's name as hostname and the simulator's service-account
//! layout at client-go's fixed path), their pods and the `{cluster}-gnmic-api` Service in the
//! simulator (HTTPS, loopback pod IPs in Endpoints), targets on a live gNMI device and on
//! closed ports, and Leasehold's control plane observing it. What Leasehold's API says — the
//! leader, the members, the owner of every target — is compared with what gnmic's own API says
//! (`/api/v1/cluster` of a member, `/api/v1/targets` of each), before and after the leader is
//! killed (SIGKILL, its pod then not ready as a kubelet's probe would leave it); the failover
//! must be in Leasehold's history as one `failover` row per moved target, with its gap.
//!
//! Simulator only: kube-apiserver refuses loopback addresses in Endpoints, and gnmic finds its
//! members there. Without gnmic or namespaces the test fails with the reason when `CI` is set
//! and skips with it otherwise.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use axum::body::Body;
use axum::http::Request;
use http_body_util::BodyExt as _;
use leasehold::config::Config;
use leasehold::config::http::AuthSettings;
use leasehold::engine::Engine;
use leasehold::http::auth::Auth;
use leasehold::http::events::Hub;
use leasehold::http::host::AllowedHosts;
use leasehold::http::state::AppState;
use leasehold::store::Store;
use serde_json::{Value, json};
use tokio::time::Instant;
use tower::ServiceExt as _;

use crate::common;
use common::gnmic::{self, ClusterView, Gnmic, GnmicCluster};

const NS: &str = "telemetry";
/// gnmic's cluster name, and Leasehold's (they must be equal).
const CLUSTER: &str = "lh";
/// gnmic's lock Leases (`lease-duration`); renewed every half of it. Not shorter: every lock
/// costs its holder a read and a write per renewal, and gnmic's client-go keeps its default
/// rate limit (5 requests/s, bursts of 10) — at 4 s a member holding five locks falls behind
/// its renewals, its Leases expire while it lives and the others take them over.
const LEASE_S: u64 = 6;
/// Targets on the live device.
const LIVE: usize = 6;
/// Targets on closed ports (gnmic locks them all the same, and retries their connection).
const DOWN: usize = 2;
/// The members: pod name and pod IP.
const MEMBERS: [(&str, &str); 3] = [
    ("gnmic-0", "127.0.0.21"),
    ("gnmic-1", "127.0.0.22"),
    ("gnmic-2", "127.0.0.23"),
];

/// The whole test stays under this (gnmic's own timers: its leader waits 5 s before it
/// dispatches, and dispatches again every 20 s at the fastest).
const BUDGET: Duration = Duration::from_secs(90);

/// Leasehold's control plane observing cluster [`CLUSTER`], and its router.
struct Observer {
    router: axum::Router,
    _engine: Engine,
}

async fn observer(client: kube::Client, dir: &Path) -> Observer {
    let yaml = format!(
        "control_plane: {{namespace: {NS}, lease_duration: 2s}}
clusters:
- name: {CLUSTER}
  namespace: {NS}
  selector: {{app: gnmic}}
  headless_service: {CLUSTER}-gnmic-api
  protocol: gnmic
"
    );
    let config = Config::parse(&yaml, Path::new("observed.yaml")).unwrap();
    let db = format!("sqlite:{}", dir.join("history.db").display());
    let store = Store::connect(&db).await.unwrap();
    let engine = Engine::new(config, client, store, "cp".into());
    let e = engine.clone();
    tokio::spawn(async move { e.run(std::future::pending()).await });
    let settings: AuthSettings = serde_saphyr::from_str("mode: none\n").unwrap();
    let auth = Auth::new(&settings, "127.0.0.1:0".parse().unwrap(), None)
        .await
        .unwrap();
    let state = AppState {
        engine: engine.clone(),
        auth,
        events: Hub::default(),
        tls: false,
        demo: None,
        hosts: AllowedHosts::new(&[], "127.0.0.1:8080".parse().unwrap()).unwrap(),
        refusals: Default::default(),
    };
    Observer {
        router: leasehold::http::router(state),
        _engine: engine,
    }
}

impl Observer {
    /// `GET uri` of Leasehold's API: the JSON body of a 200.
    async fn get(&self, uri: &str) -> Option<Value> {
        let req = Request::builder().uri(uri).body(Body::empty()).unwrap();
        let res = self.router.clone().oneshot(req).await.ok()?;
        if !res.status().is_success() {
            return None;
        }
        let bytes = res.into_body().collect().await.ok()?.to_bytes();
        serde_json::from_slice(&bytes).ok()
    }

    /// `GET uri` of the dashboard: the page of a 200.
    async fn page(&self, uri: &str) -> String {
        let req = Request::builder().uri(uri).body(Body::empty()).unwrap();
        let res = self.router.clone().oneshot(req).await.unwrap();
        assert!(res.status().is_success(), "GET {uri}: {}", res.status());
        let bytes = res.into_body().collect().await.unwrap().to_bytes();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// What Leasehold's API says of the cluster.
    async fn view(&self) -> Option<Said> {
        let c = self.get(&format!("/api/v1/clusters/{CLUSTER}")).await?;
        let t = self
            .get(&format!("/api/v1/clusters/{CLUSTER}/targets?limit=500"))
            .await?;
        let instances = c["instances"]
            .as_array()?
            .iter()
            .map(|i| {
                let name = i["name"].as_str().unwrap_or_default().to_owned();
                (
                    name,
                    Instance {
                        ready: i["ready"].as_bool().unwrap_or(false),
                        endpoint_ready: i["endpoint_ready"].as_bool(),
                        owned: i["owned"].as_u64().unwrap_or(0) as usize,
                        leader: i["leader"].as_bool().unwrap_or(false),
                    },
                )
            })
            .collect();
        let targets = t["items"]
            .as_array()?
            .iter()
            .map(|t| {
                (
                    t["key"].as_str().unwrap_or_default().to_owned(),
                    (
                        t["owner"].as_str().map(str::to_owned),
                        t["state"].as_str().unwrap_or_default().to_owned(),
                    ),
                )
            })
            .collect();
        Some(Said {
            synced: c["synced"].as_bool().unwrap_or(false),
            leader: c["leader"].as_str().map(str::to_owned),
            instances,
            targets,
        })
    }

    /// Leasehold's ownership history of the cluster, oldest first.
    async fn ownership_history(&self) -> Vec<Value> {
        let v = self
            .get(&format!(
                "/api/v1/history?cluster={CLUSTER}&kind=ownership&limit=500"
            ))
            .await
            .expect("the history");
        let mut rows = v["items"].as_array().cloned().unwrap_or_default();
        rows.reverse();
        rows
    }
}

/// An instance as Leasehold's API shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Instance {
    ready: bool,
    endpoint_ready: Option<bool>,
    owned: usize,
    leader: bool,
}

/// Leasehold's account of the cluster.
#[derive(Debug, Clone)]
struct Said {
    synced: bool,
    leader: Option<String>,
    instances: BTreeMap<String, Instance>,
    /// Target → (owner, state).
    targets: BTreeMap<String, (Option<String>, String)>,
}

/// gnmic's account: a live member's `/api/v1/cluster`, and what each live member has started.
#[derive(Debug, Clone)]
struct Truth {
    view: ClusterView,
    started: BTreeMap<String, BTreeSet<String>>,
}

async fn truth(cluster: &GnmicCluster, alive: &[String]) -> Option<Truth> {
    let view = gnmic::cluster_view(cluster.api(&alive[0])).await?;
    let mut started = BTreeMap::new();
    for m in alive {
        started.insert(m.clone(), gnmic::started(cluster.api(m)).await?);
    }
    Some(Truth { view, started })
}

/// Where Leasehold and gnmic disagree, settled as: every one of `targets` locked by a member
/// gnmic counts, started by that member alone, and Leasehold saying the same leader, the same
/// members (its instances ready in the Service's endpoints) and the same owner, each `owned`.
/// Empty when they agree.
fn disagreements(said: &Said, truth: &Truth, targets: &BTreeSet<String>) -> Vec<String> {
    let mut out = Vec::new();
    if !said.synced {
        out.push("Leasehold has not synced".into());
    }
    if said.leader.as_deref() != Some(truth.view.leader.as_str()) {
        out.push(format!(
            "leader: Leasehold {:?}, gnmic {:?}",
            said.leader, truth.view.leader
        ));
    }
    let gnmic_members: BTreeSet<&String> = truth.view.members.keys().collect();
    let endpoint_ready: BTreeSet<&String> = said
        .instances
        .iter()
        .filter(|(_, i)| i.endpoint_ready == Some(true))
        .map(|(n, _)| n)
        .collect();
    if gnmic_members != endpoint_ready {
        out.push(format!(
            "members: gnmic {gnmic_members:?}, Leasehold's ready endpoints {endpoint_ready:?}"
        ));
    }
    let mut gnmic_owner: BTreeMap<&String, &String> = BTreeMap::new();
    for (m, ts) in &truth.view.members {
        for t in ts {
            gnmic_owner.insert(t, m);
        }
    }
    if truth.view.locked != targets.len() {
        out.push(format!(
            "gnmic counts {} locked targets, not {}",
            truth.view.locked,
            targets.len()
        ));
    }
    for t in targets {
        let Some(owner) = gnmic_owner.get(t) else {
            out.push(format!("{t}: locked by no member gnmic counts"));
            continue;
        };
        let runners: Vec<&String> = truth
            .started
            .iter()
            .filter(|(_, s)| s.contains(t))
            .map(|(m, _)| m)
            .collect();
        if runners != [*owner] {
            out.push(format!("{t}: locked by {owner}, started by {runners:?}"));
        }
        match said.targets.get(t) {
            Some((Some(o), state)) if o == *owner && state == "owned" => {}
            other => out.push(format!("{t}: gnmic {owner}, Leasehold {other:?}")),
        }
    }
    for (name, i) in &said.instances {
        let locked = truth.view.members.get(name).map_or(0, BTreeSet::len);
        if gnmic_members.contains(name) && i.owned != locked {
            out.push(format!(
                "{name}: Leasehold owned {}, gnmic locked {locked}",
                i.owned
            ));
        }
        if i.leader != (*name == truth.view.leader) {
            out.push(format!("{name}: Leasehold leader flag {}", i.leader));
        }
    }
    out
}

/// Waits (until `deadline`) for Leasehold and gnmic (asked through `alive`) to agree; the
/// agreed views.
async fn agreed(
    lh: &Observer,
    cluster: &GnmicCluster,
    alive: &[String],
    targets: &BTreeSet<String>,
    deadline: Instant,
    what: &str,
) -> (Said, Truth) {
    let mut last = Vec::new();
    loop {
        if let (Some(said), Some(truth)) = (lh.view().await, truth(cluster, alive).await) {
            last = disagreements(&said, &truth, targets);
            if last.is_empty() {
                return (said, truth);
            }
        }
        assert!(
            Instant::now() < deadline,
            "{what}: Leasehold and gnmic never agreed within the budget; last:\n{}\n{}",
            last.join("\n"),
            cluster.tails()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The pods, as a StatefulSet's would be, ready with their loopback IPs; and the headless
/// Service gnmic reads its members from (the fake kubelet keeps its Endpoints and
/// EndpointSlice).
async fn pods_and_service(client: &kube::Client, port: u16) {
    gnmic::api_service(client, NS, CLUSTER, port).await;
    for (name, ip) in MEMBERS {
        gnmic::ready_pod(client, NS, name, ip).await;
    }
    gnmic::endpoints_ready(client, NS, CLUSTER, MEMBERS.len()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leasehold_says_what_gnmic_says_through_a_leader_crash() {
    kube_sim::sim_only!(
        "gnmic's members serve on loopback IPs, which kube-apiserver refuses in Endpoints"
    );
    let Some(bin) = gnmic::binary() else { return };
    let Some(unshare) = gnmic::namespaces() else {
        return;
    };
    let _serial = common::cluster::SERIAL.lock().await;
    let began = Instant::now();
    let deadline = began + BUDGET;

    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let (t, in_cluster) = gnmic::clustered_sim(NS, dir.path(), unshare).await;

    let device = Gnmic::device(&bin, dir.path(), "d");
    device.listening().await;
    let mut targets = serde_json::Map::new();
    for i in 0..LIVE {
        targets.insert(
            format!("dev-{i}"),
            json!({ "address": device.addr.to_string(), "insecure": true, "timeout": "2s" }),
        );
    }
    for i in 0..DOWN {
        let closed = gnmic::free_addr();
        targets.insert(
            format!("down-{i}"),
            json!({ "address": closed.to_string(), "insecure": true, "timeout": "1s" }),
        );
    }
    let keys: BTreeSet<String> = targets.keys().cloned().collect();
    let mut cluster = GnmicCluster::new(
        &bin,
        in_cluster,
        dir.path(),
        CLUSTER,
        NS,
        LEASE_S,
        &MEMBERS,
        &Value::Object(targets),
    );
    pods_and_service(&t.client, cluster.port).await;
    let lh = observer(t.client.clone(), dir.path()).await;
    for (name, _) in MEMBERS {
        cluster.start(name);
    }
    let names = cluster.names();

    // Settled: Leasehold says what gnmic says.
    let (said, truth) = agreed(&lh, &cluster, &names, &keys, deadline, "placement").await;
    let placed_after = began.elapsed();
    let leader = truth.view.leader.clone();
    eprintln!(
        "observed gnmic: placed and agreed after {placed_after:.1?}: leader {leader}, locks {:?}",
        truth.view.members
    );
    for (name, i) in &said.instances {
        assert!(
            i.ready && i.endpoint_ready == Some(true),
            "{name} before the crash: {i:?}"
        );
    }

    // The leader dies (it holds targets too, unless gnmic gave it none); its pod turns not
    // ready, so the Endpoints (and the Service's EndpointSlice) list it as not ready.
    let victim = leader.clone();
    let lost: BTreeSet<String> = truth.view.members[&victim].clone();
    assert!(
        !lost.is_empty(),
        "gnmic gave its leader no target: {:?}",
        truth.view
    );
    let history_before = lh.ownership_history().await.len();
    let killed = Instant::now();
    let killed_ms = leasehold::store::now_ms();
    cluster.kill(&victim).await;
    kube_sim::kubelet::set_ready(&t.client, NS, &victim, false)
        .await
        .expect("pod not ready");
    let survivors: Vec<String> = names.iter().filter(|n| **n != victim).cloned().collect();
    let (said, truth) = agreed(&lh, &cluster, &survivors, &keys, deadline, "failover").await;
    let reowned_after = killed.elapsed();
    assert_ne!(truth.view.leader, victim);
    assert!(survivors.contains(&truth.view.leader));
    eprintln!(
        "observed gnmic: leader {victim} killed holding {lost:?}; new leader {}, all agreed \
         {reowned_after:.1?} later: {:?}",
        truth.view.leader, truth.view.members
    );

    // The killed member: a not-ready pod that gnmic no longer counts — Leasehold's
    // `endpoint_ready: false` (the Service's EndpointSlice) is what says so.
    let dead = &said.instances[&victim];
    assert!(!dead.ready, "{victim}: {dead:?}");
    assert_eq!(dead.endpoint_ready, Some(false), "{victim}: {dead:?}");
    assert_eq!(dead.owned, 0, "{victim}: {dead:?}");
    assert!(!truth.view.members.contains_key(&victim));
    // The instances page says it in words: the dead one dropped by gnmic, the others members.
    let page = lh.page(&format!("/clusters/{CLUSTER}/instances")).await;
    assert_eq!(page.matches("dropped by gnmic</span>").count(), 1, "{page}");
    assert_eq!(
        page.matches("gnmic member</span>").count(),
        truth.view.members.len(),
        "{page}"
    );

    // History: each target the leader held moved once, as a failover, its gap counted from
    // the dead holder's last renewal seen (so at least a lease duration).
    let rows = lh.ownership_history().await;
    let after: Vec<&Value> = rows[history_before..].iter().collect();
    let mut report = Vec::new();
    for target in &lost {
        let mine: Vec<&&Value> = after
            .iter()
            .filter(|r| r["target"].as_str() == Some(target.as_str()))
            .collect();
        let owner = said.targets[target].0.clone().unwrap();
        assert_eq!(
            mine.len(),
            1,
            "{target}: one history row for its move, not {mine:#?}"
        );
        let r = mine[0];
        assert_eq!(r["from"], json!(victim), "{target}: {r}");
        assert_eq!(r["to"], json!(owner), "{target}: {r}");
        assert_eq!(
            r["cause"],
            json!("failover"),
            "{target}: the move after its holder died must be a failover: {r}"
        );
        let gap = r["gap_ms"]
            .as_i64()
            .unwrap_or_else(|| panic!("{target}: no gap: {r}"));
        let at = r["at_ms"].as_i64().unwrap();
        let since_kill = at - killed_ms;
        assert!(
            gap >= (LEASE_S as i64) * 1000 - 100,
            "{target}: a failover's gap counts from the last renewal seen, at least a lease \
             duration: {r}"
        );
        // Renewed last before the kill (a little after, as seen), and within a lease duration
        // of it: the hold was live when its holder died.
        assert!(
            gap >= since_kill - 500 && gap <= since_kill + (LEASE_S as i64) * 1000,
            "{target}: gap {gap} ms, taken {since_kill} ms after the kill: {r}"
        );
        report.push(format!(
            "{target}: {victim} → {owner} failover, gap {gap} ms (taken {since_kill} ms after \
             the kill, {} ms after the lease expired by Leasehold's clock)",
            gap - (LEASE_S as i64) * 1000
        ));
    }
    // No other target changed hands.
    for r in &after {
        let t = r["target"].as_str().unwrap_or_default();
        assert!(lost.contains(t), "a target its holder kept moved: {r}");
    }
    eprintln!("observed gnmic history:\n  {}", report.join("\n  "));
    eprintln!("observed gnmic: whole test {:.1?}", began.elapsed());
    assert!(began.elapsed() < BUDGET, "took {:?}", began.elapsed());
    drop(cluster);
    drop(device);
}
