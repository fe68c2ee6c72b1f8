//! A real gnmic (v0.47.0, built from `../shared/gnmic/` by `scripts/gnmic.sh`) clustering with
//! its Kubernetes locker against the simulator: what in-cluster clients need — HTTPS with the
//! CA of a service-account directory, a bearer token, protobuf Lease writes (client-go ≥ 1.35),
//! and v1 Endpoints maintained from a Service and its pods (gnmic finds its members there).
//!
//! Three `gnmic subscribe` processes, one per "pod", each in its own mount and UTS namespace
//! (`unshare`): gnmic's locker takes its Lease identity from the hostname and reads the fixed
//! path `/var/run/secrets/kubernetes.io/serviceaccount/` (client-go's `InClusterConfig`, the
//! only configuration it accepts), so each gets the pod's name as hostname and the test's
//! service-account directory at that path — inside its own mount namespace, so nothing is
//! written to the machine's `/var/run`. Each serves its API on its pod IP (127.0.0.2–4, the
//! same port: gnmic takes one port from the Endpoints for every member), which is why the
//! simulator runs with `loopback_endpoints`.
//!
//! Checked: a leader is elected (its Lease, gnmic's `/api/v1/cluster/leader`), every target gets
//! a Lease held by a member, gnmic's `/api/v1/cluster` lists the members the Endpoints name; a
//! member killed (SIGKILL, its pod then not ready) has its targets taken by the others.
//!
//! Without gnmic (no archive, no Go) or without namespaces the test fails with the reason when
//! `CI` is set and is skipped with it otherwise.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Endpoints, Pod, Service};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube_sim::{SimOptions, Simulator};
use serde_json::{Value, json};

const NS: &str = "default";
const CLUSTER: &str = "lh";
const MEMBERS: usize = 3;
const TARGETS: usize = 6;
/// gnmic's lock Leases (`lease-duration`); renewed every half of it.
const LEASE_SECONDS: u64 = 4;
/// The whole test stays under this.
const BUDGET: Duration = Duration::from_secs(90);

/// The reason this test cannot run here: a failure in CI, a skip elsewhere.
fn unavailable(why: &str) {
    if std::env::var_os("CI").is_some() {
        panic!("the gnmic test cannot run: {why}");
    }
    eprintln!("SKIPPED: the gnmic test cannot run: {why}");
}

/// `scripts/gnmic.sh path`: the cached binary, built first if needed.
fn gnmic_binary() -> Result<PathBuf, String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/gnmic.sh");
    let out = std::process::Command::new(&script)
        .arg("path")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("running {}: {e}", script.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} path exited with {}: {}",
            script.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

/// One `GET` to a gnmic API.
async fn api_get(addr: &str, path: &str) -> Option<Value> {
    kube_sim::testkit::get_json_http10(addr, path).await
}

/// The gnmic processes; killed (SIGKILL) when dropped, whatever happens to the test.
struct Members {
    children: Vec<Option<tokio::process::Child>>,
    logs: Vec<PathBuf>,
}

impl Members {
    fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.children[i].take() {
            let _ = c.start_kill();
        }
    }

    /// The end of each member's log, for a failure message.
    fn tails(&self) -> String {
        let mut out = String::new();
        for (i, p) in self.logs.iter().enumerate() {
            let text = std::fs::read_to_string(p).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let from = lines.len().saturating_sub(25);
            out.push_str(&format!(
                "--- gnmic-{i} ({}) ---\n{}\n",
                p.display(),
                lines[from..].join("\n")
            ));
        }
        out
    }
}

impl Drop for Members {
    fn drop(&mut self) {
        for i in 0..self.children.len() {
            self.kill(i);
        }
    }
}

/// Every target Lease gnmic holds: target name → (holderIdentity, the instance in its label,
/// whether it is unexpired).
async fn target_leases(leases: &Api<Lease>) -> Vec<(String, String, String, bool)> {
    let prefix = format!("gnmic-{CLUSTER}-targets-");
    let now = jiff::Timestamp::now();
    let mut out = Vec::new();
    for l in leases
        .list(&ListParams::default().labels("app=gnmic"))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
    {
        let name = l.metadata.name.clone().unwrap_or_default();
        let Some(target) = name.strip_prefix(&prefix) else {
            continue;
        };
        let spec = l.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.unwrap_or_default();
        let instance = l
            .metadata
            .labels
            .as_ref()
            .and_then(|m| m.get(&name))
            .cloned()
            .unwrap_or_default();
        let fresh = spec.renew_time.is_some_and(|t| {
            let d = spec.lease_duration_seconds.unwrap_or(0);
            now.as_second() - t.0.as_second() <= i64::from(d)
        });
        out.push((target.to_owned(), holder, instance, fresh));
    }
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gnmic_k8s_locker_clusters_against_the_simulator() {
    let gnmic = match gnmic_binary() {
        Ok(p) => p,
        Err(why) => {
            unavailable(&why);
            return;
        }
    };
    let unshare = match kube_sim::testkit::unshare_args()
        .map_err(|e| format!("no mount and UTS namespaces for the gnmic processes ({e})"))
    {
        Ok(a) => a,
        Err(why) => {
            unavailable(&why);
            return;
        }
    };
    // The budget starts once gnmic is built.
    let started = std::time::Instant::now();

    let opts = SimOptions {
        tls: true,
        loopback_endpoints: true,
        ..SimOptions::default()
    };
    let mut sim = Simulator::start("127.0.0.1:0".parse().unwrap(), opts)
        .await
        .expect("simulator starts");
    assert!(sim.url().starts_with("https://"), "{}", sim.url());
    // The endpoints controller; pods without a node are left to this test (their IPs).
    sim.spawn_kubelet(kube_sim::kubelet::KubeletOptions {
        all_pods: false,
        namespace: None,
    })
    .await
    .expect("kubelet");
    let client = sim.client().await.expect("client over HTTPS");
    let dir = tempfile::tempdir().expect("tempdir");
    let sa = dir.path().join("serviceaccount");
    sim.write_service_account(&sa, kube_sim::auth::DEFAULT_ADMIN_TOKEN)
        .expect("service-account directory");

    // The members' Service and pods, as a StatefulSet would leave them.
    let ips: Vec<String> = (0..MEMBERS).map(|i| format!("127.0.0.{}", i + 2)).collect();
    let port = kube_sim::testkit::common_port(&ips);
    let svc_name = format!("{CLUSTER}-gnmic-api");
    let svcs: Api<Service> = Api::namespaced(client.clone(), NS);
    svcs.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "metadata": { "name": svc_name },
            "spec": { "clusterIP": "None", "selector": { "app": "gnmic" },
                      "ports": [{ "name": "api", "port": port, "targetPort": port }] }
        }))
        .unwrap(),
    )
    .await
    .expect("service");
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    for (i, ip) in ips.iter().enumerate() {
        let name = format!("gnmic-{i}");
        let pod = kube_sim::testkit::mk_pod(&name, json!({ "app": "gnmic" }));
        pods.create(
            &PostParams::default(),
            &serde_json::from_value(pod).unwrap(),
        )
        .await
        .expect("pod");
        let now = jiff::Timestamp::now()
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string();
        let ready = json!({ "type": "Ready", "status": "True", "lastTransitionTime": now });
        pods.patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": {
                "phase": "Running", "podIP": ip, "podIPs": [{ "ip": ip }], "conditions": [ready]
            } })),
        )
        .await
        .expect("pod status");
    }
    let endpoints: Api<Endpoints> = Api::namespaced(client.clone(), NS);
    let listed = kube_sim::testkit::eventually(Duration::from_secs(10), || async {
        let ep = endpoints.get(&svc_name).await.ok()?;
        let addrs = ep.subsets?.first()?.addresses.clone()?;
        (addrs.len() == MEMBERS).then_some(addrs)
    })
    .await
    .expect("the Endpoints list the three pods");
    assert_eq!(
        listed.iter().map(|a| a.ip.clone()).collect::<Vec<_>>(),
        ips,
        "sorted by IP"
    );

    // The gnmic processes.
    let targets: serde_json::Map<String, Value> = (0..TARGETS)
        .map(|t| {
            // Closed ports: nothing answers, which is fine for locking.
            (
                format!("t{t}"),
                json!({ "address": format!("127.0.0.1:{}", 9 + t), "insecure": true, "timeout": "1s" }),
            )
        })
        .collect();
    let mut members = Members {
        children: Vec::new(),
        logs: Vec::new(),
    };
    for (i, ip) in ips.iter().enumerate() {
        let name = format!("gnmic-{i}");
        let config = json!({
            "log": true,
            "api-server": { "address": format!("{ip}:{port}") },
            "clustering": {
                "cluster-name": CLUSTER,
                "instance-name": name,
                "locker": {
                    "type": "k8s",
                    "namespace": NS,
                    "lease-duration": format!("{LEASE_SECONDS}s"),
                },
            },
            "subscriptions": { "sub": { "paths": ["/interfaces"], "mode": "stream", "stream-mode": "sample", "sample-interval": "10s" } },
            "outputs": { "discard": { "type": "file", "filename": "/dev/null", "format": "json" } },
            "targets": targets,
        });
        let cfg = dir.path().join(format!("{name}.json"));
        std::fs::write(&cfg, serde_json::to_vec_pretty(&config).unwrap()).unwrap();
        let log = dir.path().join(format!("{name}.log"));
        let out = std::fs::File::create(&log).unwrap();
        let mut cmd = tokio::process::Command::new("unshare");
        cmd.args(&unshare)
            .args(["--", "sh", "-c", kube_sim::testkit::IN_POD, "sh", &name])
            .arg(&sa)
            .arg(&gnmic)
            .arg("--config")
            .arg(&cfg)
            .arg("subscribe")
            .envs(sim.in_cluster_env())
            .env("POD_NAME", &name)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .kill_on_drop(true);
        members
            .children
            .push(Some(cmd.spawn().expect("unshare runs")));
        members.logs.push(log);
    }
    let names: Vec<String> = (0..MEMBERS).map(|i| format!("gnmic-{i}")).collect();
    let addr = |i: usize| format!("{}:{port}", ips[i]);

    // A leader: its Lease (holderIdentity = its hostname) and gnmic's own view.
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    let leader_lease = format!("gnmic-{CLUSTER}-leader");
    let leader = kube_sim::testkit::eventually(Duration::from_secs(20), || async {
        let l = leases.get(&leader_lease).await.ok()?;
        let holder = l.spec?.holder_identity?;
        let said = api_get(&addr(0), "/api/v1/cluster").await?;
        (said["leader"] == json!(holder)).then_some(holder)
    })
    .await
    .unwrap_or_else(|| panic!("no leader within 20 s\n{}", members.tails()));
    assert!(names.contains(&leader), "leader {leader}");

    // Every target locked by a member, as the Leases and gnmic's cluster view say.
    let placed = kube_sim::testkit::eventually(Duration::from_secs(40), || async {
        let ls = target_leases(&leases).await;
        let ok = ls.len() == TARGETS
            && ls.iter().all(|(_, holder, instance, fresh)| {
                *fresh && holder == instance && names.contains(holder)
            });
        let view = api_get(&addr(0), "/api/v1/cluster").await?;
        (ok && view["number-of-locked-targets"] == json!(TARGETS)).then_some((ls, view))
    })
    .await
    .unwrap_or_else(|| {
        panic!(
            "the targets were not all locked within 40 s\n{}",
            members.tails()
        )
    });
    let (ls, view) = placed;
    let listed: Vec<String> = view["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["api-endpoint"].as_str().unwrap_or_default().to_owned())
        .collect();
    // gnmic v0.47.0 prints the scheme without "://" here ("http127.0.0.2:PORT").
    assert_eq!(
        listed,
        (0..MEMBERS)
            .map(|i| format!("http{}", addr(i)))
            .collect::<Vec<_>>(),
        "gnmic's members are the Endpoints' addresses: {view}"
    );
    eprintln!(
        "leader {leader}; targets placed after {:.1} s: {:?}",
        started.elapsed().as_secs_f64(),
        ls
    );

    // Kill a member that is not the leader but holds targets; its pod turns not ready, so the
    // Endpoints drop it. The others take its targets once its Leases expire.
    let victim = (0..MEMBERS)
        .find(|&i| names[i] != leader && ls.iter().any(|(_, h, _, _)| *h == names[i]))
        .or_else(|| (0..MEMBERS).find(|&i| names[i] != leader))
        .unwrap();
    let lost: Vec<String> = ls
        .iter()
        .filter(|(_, h, _, _)| *h == names[victim])
        .map(|(t, _, _, _)| t.clone())
        .collect();
    let killed_at = std::time::Instant::now();
    members.kill(victim);
    kube_sim::kubelet::set_ready(&client, NS, &names[victim], false)
        .await
        .expect("pod not ready");
    let survivors: Vec<&String> = names.iter().filter(|n| **n != names[victim]).collect();
    let left = BUDGET.saturating_sub(started.elapsed());
    let reowned = kube_sim::testkit::eventually(left, || async {
        let ls = target_leases(&leases).await;
        let ok = ls.len() == TARGETS
            && ls.iter().all(|(_, holder, instance, fresh)| {
                *fresh && holder == instance && survivors.contains(&holder)
            });
        let view = api_get(&addr(if victim == 0 { 1 } else { 0 }), "/api/v1/cluster").await?;
        let members_now = view["members"].as_array().map_or(0, Vec::len);
        (ok && members_now == MEMBERS - 1).then_some(ls)
    })
    .await
    .unwrap_or_else(|| {
        panic!(
            "{}'s targets {lost:?} were not re-owned within the {BUDGET:?} budget\n{}",
            names[victim],
            members.tails()
        )
    });
    eprintln!(
        "{} killed holding {lost:?}; all re-owned after {:.1} s: {reowned:?}",
        names[victim],
        killed_at.elapsed().as_secs_f64()
    );
    assert!(started.elapsed() < BUDGET, "took {:?}", started.elapsed());
    drop(members);
}
