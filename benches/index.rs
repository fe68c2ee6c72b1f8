//! Cost of one watch event applied to the index (`leasehold::k8s::index`) at cluster scale:
//! one cluster with 50,000 target Leases held by 1,000 member pods, every kind synced (so
//! changes are reported, as in production). Issue target: ≤ 5 µs per event. Also the cost of
//! building the cluster's model at that size (reported, no target), and, for context, of
//! decoding one Lease from JSON (the watcher does that before the index sees the event).
//!
//! Run: `cargo bench --bench index -- --warm-up-time 1 --measurement-time 3`.
//!
//! Every event changes something the index compares: each Lease and pod has two versions
//! (renewed at t₁/t₂, held by a/b, …) and the benchmark walks through all 50,000 (or 1,000)
//! objects in turn, alternating versions, so no event is a no-op and the index's maps are
//! visited across their whole size rather than one hot entry.

use std::hint::black_box;
use std::path::Path;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use leasehold::config::Config;
use leasehold::k8s::index::Index;
use leasehold::model::Cause;
use leasehold::protocol::{self, Desire};
use serde_json::json;

const NS: &str = "apps";
const CLUSTER: &str = "c";
const TARGETS: usize = 50_000;
const PODS: usize = 1_000;
/// Lease duration promised by holders (seconds).
const DURATION_S: i32 = 15;

fn config() -> Config {
    let keys: Vec<String> = (0..TARGETS).map(key).collect();
    let yaml = format!(
        "clusters:
- name: {CLUSTER}
  namespace: {NS}
  selector: {{app: c}}
  headless_service: c
  targets: {{inline: [{}]}}
",
        keys.join(", ")
    );
    Config::parse(&yaml, Path::new("bench.yaml")).expect("bench config")
}

fn key(i: usize) -> String {
    format!("device-{i:05}")
}

fn member(i: usize) -> String {
    format!("c-{i}")
}

fn ts(ms: i64) -> Timestamp {
    Timestamp::from_millisecond(ms).unwrap()
}

/// Target Lease `i`, desired by and held by `holder`, renewed at `at_ms`, with a
/// resourceVersion as the API server would give it.
fn mk_lease(i: usize, holder: &str, at_ms: i64, rv: u64) -> Lease {
    let desire = Desire {
        overlap_ms: None,
        term: None,
        owner: holder.to_owned(),
        cause: Cause::Initial,
        operation: None,
        duration_s: DURATION_S,
    };
    let mut lease = protocol::new_target_lease("leasehold", CLUSTER, &key(i), &desire);
    lease.metadata.namespace = Some(NS.into());
    lease.metadata.uid = Some(format!("00000000-0000-4000-8000-{i:012}"));
    lease.metadata.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        ts(1_700_000_000_000),
    ));
    let mut held = protocol::held_by(&lease, holder, ts(at_ms), DURATION_S);
    held.metadata.resource_version = Some(rv.to_string());
    held
}

/// A running StatefulSet member pod as the kubelet reports it.
fn mk_pod(i: usize, ready: bool, restarts: i32, rv: u64) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": member(i), "namespace": NS, "uid": format!("pod-uid-{i}"),
            "resourceVersion": rv.to_string(),
            "creationTimestamp": "2024-01-01T00:00:00Z",
            "labels": {"app": "c", "apps.kubernetes.io/pod-index": i.to_string()},
            "annotations": {"leasehold.io/capacity": "1"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "c", "uid": "sts-uid", "controller": true}]
        },
        "spec": {
            "hostname": member(i), "subdomain": "c", "nodeName": format!("node-{}", i % 20),
            "containers": [{"name": "app", "image": "example/collector:1.0"}]
        },
        "status": {
            "phase": "Running",
            "podIP": format!("10.0.{}.{}", i / 250, i % 250 + 1),
            "conditions": [
                {"type": "Initialized", "status": "True"},
                {"type": "Ready", "status": if ready { "True" } else { "False" }},
                {"type": "ContainersReady", "status": if ready { "True" } else { "False" }},
                {"type": "PodScheduled", "status": "True"}
            ],
            "containerStatuses": [{"name": "app", "ready": ready, "restartCount": restarts,
                "image": "example/collector:1.0", "imageID": "sha256:0", "started": true}]
        }
    }))
    .expect("pod")
}

/// The index of one cluster with every Lease and pod listed and every kind synced.
fn loaded() -> (Index, Vec<Lease>, Vec<Pod>) {
    let mut ix = Index::new(&config().clusters);
    let now = ts(1_700_000_000_000);
    let leases: Vec<Lease> = (0..TARGETS)
        .map(|i| mk_lease(i, &member(i % PODS), 1_700_000_000_000, i as u64 + 1))
        .collect();
    let pods: Vec<Pod> = (0..PODS)
        .map(|i| mk_pod(i, true, 0, (TARGETS + i) as u64))
        .collect();
    ix.reset(NS, &leases, now);
    ix.reset(NS, &pods, now);
    ix.reset::<Service>(NS, &[], now);
    ix.reset::<EndpointSlice>(NS, &[], now);
    ix.reset::<ConfigMap>(NS, &[], now);
    assert!(ix.synced());
    let m = ix.model(CLUSTER, now).unwrap();
    assert_eq!(m.counts.total, TARGETS);
    assert_eq!(m.counts.owned, TARGETS, "{:?}", m.counts);
    (ix, leases, pods)
}

fn benches(c: &mut Criterion) {
    let (mut ix, _, _) = loaded();
    let now = ts(1_700_000_001_000);
    let t1 = 1_700_000_005_000;
    let t2 = 1_700_000_010_000;

    // Lease renewals: same holder, new renewTime (two versions per Lease, alternating).
    let renewals: Vec<[Lease; 2]> = (0..TARGETS)
        .map(|i| {
            let h = member(i % PODS);
            [
                mk_lease(i, &h, t1, 100_000 + i as u64),
                mk_lease(i, &h, t2, 200_000 + i as u64),
            ]
        })
        .collect();
    let mut n = 0usize;
    c.bench_function("apply_lease_renewal_50k_leases_1k_pods", |b| {
        b.iter(|| {
            let v = &renewals[n % TARGETS][(n / TARGETS) % 2];
            n += 1;
            black_box(ix.apply(v, now))
        })
    });
    drop(renewals);

    // Holder changes: the Lease alternates between two members (each apply reports an
    // ownership change, as a real handoff does).
    let handoffs: Vec<[Lease; 2]> = (0..TARGETS)
        .map(|i| {
            let (a, b) = (member((i + 1) % PODS), member((i + 2) % PODS));
            [
                mk_lease(i, &a, t1, 300_000 + i as u64),
                mk_lease(i, &b, t2, 400_000 + i as u64),
            ]
        })
        .collect();
    let mut n = 0usize;
    c.bench_function("apply_lease_holder_change_50k_leases_1k_pods", |b| {
        b.iter(|| {
            let v = &handoffs[n % TARGETS][(n / TARGETS) % 2];
            n += 1;
            let changes = ix.apply(v, now);
            debug_assert_eq!(changes.len(), 1);
            black_box(changes)
        })
    });
    drop(handoffs);

    // Pod updates that change nothing the model shows as an event (restart count).
    let pod_updates: Vec<[Pod; 2]> = (0..PODS)
        .map(|i| {
            [
                mk_pod(i, true, 1, 500_000 + i as u64),
                mk_pod(i, true, 2, 600_000 + i as u64),
            ]
        })
        .collect();
    let mut n = 0usize;
    c.bench_function("apply_pod_update_50k_leases_1k_pods", |b| {
        b.iter(|| {
            let v = &pod_updates[n % PODS][(n / PODS) % 2];
            n += 1;
            black_box(ix.apply(v, now))
        })
    });

    // Pod readiness flips (each apply reports a Ready / NotReady instance change).
    let pod_flips: Vec<[Pod; 2]> = (0..PODS)
        .map(|i| {
            [
                mk_pod(i, false, 2, 700_000 + i as u64),
                mk_pod(i, true, 2, 800_000 + i as u64),
            ]
        })
        .collect();
    let mut n = 0usize;
    c.bench_function("apply_pod_ready_flip_50k_leases_1k_pods", |b| {
        b.iter(|| {
            let v = &pod_flips[n % PODS][(n / PODS) % 2];
            n += 1;
            black_box(ix.apply(v, now))
        })
    });

    // For context: decoding one Lease watch object from JSON (the watcher's share).
    let json = serde_json::to_vec(&mk_lease(7, &member(7), t1, 123_456)).unwrap();
    c.bench_function("decode_lease_json", |b| {
        b.iter(|| serde_json::from_slice::<Lease>(black_box(&json)).unwrap())
    });

    // The whole model at this size (the control loop builds one per reconcile).
    let mut g = c.benchmark_group("model");
    g.sample_size(20);
    g.bench_function("model_50k_targets_1k_pods", |b| {
        b.iter(|| ix.model(black_box(CLUSTER), now).unwrap())
    });
    // The initial sync: listing 50,000 Leases into an empty index.
    g.sample_size(10);
    g.bench_function("initial_sync_50k_leases", |b| {
        b.iter_batched(
            || {
                let leases: Vec<Lease> = (0..TARGETS)
                    .map(|i| mk_lease(i, &member(i % PODS), t1, i as u64 + 1))
                    .collect();
                (Index::new(&config().clusters), leases)
            },
            |(mut ix, leases)| {
                ix.reset(NS, &leases, now);
                (ix, leases)
            },
            BatchSize::LargeInput,
        )
    });
    g.finish();
}

criterion_group!(index, benches);
criterion_main!(index);
