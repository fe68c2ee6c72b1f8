//! Prometheus metrics: one registry, owned by a cheap-to-clone [`Metrics`] handle that the
//! engine keeps (its control loop and operation runner record into it) and the HTTP layer
//! encodes at `GET /metrics` in the OpenMetrics text format. Other modules register their own
//! families in it ([`Metrics::register`]): the watchers theirs (`k8s::watch::WatchMetrics`, the
//! `watch_*` families and what the index reports), so this module imports nothing of `k8s`.
//! No global registry: every engine has its own, so tests running several stay apart.
//!
//! Labels are bounded by the configuration and the code: cluster and namespace names come from
//! the configuration, the rest are fixed words or route templates — never target keys,
//! instance names, operation ids or raw paths.
//!
//! | metric | type | labels | meaning |
//! | --- | --- | --- | --- |
//! | `leasehold_watch_events_total` | counter | `namespace`, `kind`, `event` | watch events applied to the index; `event` is `apply` / `delete`, or `list` for an object of a (re)list |
//! | `leasehold_watch_lists_total` | counter | `namespace`, `kind` | lists started: the first sync and every relist |
//! | `leasehold_watch_errors_total` | counter | `namespace`, `kind` | watch errors (the cluster is stale until the watch is back) |
//! | `leasehold_reconcile_duration_seconds` | histogram | `cluster` | one control-loop pass over a cluster: building its model, deciding placement, the Lease writes, the join policy (acting replica only) |
//! | `leasehold_lease_writes_total` | counter | `cluster`, `outcome` | control-loop Lease writes: `created` / `updated` / `deleted` / `unchanged` (decided against on fresh data) / `error` |
//! | `leasehold_ownership_changes_total` | counter | `cluster`, `cause` | holder changes the index saw (every replica) |
//! | `leasehold_overruns_total` | counter | `cluster` | members' reports (on their member Lease) that they were paused past the end of their hold, so another member may have worked on their targets meanwhile; each is also in history (`overrun`) and a Kubernetes Event. Every replica counts; one starting does not count reports made before it watched |
//! | `leasehold_handoff_gap_seconds` | histogram | `cluster` | for a target passing from one member to another: how long it had no live holder as the index saw it (see below) |
//! | `leasehold_operations_started_total` | counter | `cluster`, `kind` | operations this replica started running (`rebalance` / `remove_instance`) |
//! | `leasehold_operations_finished_total` | counter | `cluster`, `kind`, `outcome` | operations this replica finished: `succeeded` / `failed` / `cancelled` |
//! | `leasehold_moves_total` | counter | `cluster`, `kind`, `outcome` | moves of operations finished by this replica: `done` / `failed` |
//! | `leasehold_http_request_duration_seconds` | histogram | `method`, `route`, `status` | time to the response head (a streamed body such as `/api/v1/events` is not included); `route` is the matched route template (`unmatched` if none), `status` the class (`2xx` …) |
//! | `leasehold_targets` | gauge | `cluster`, `state` | targets per state (`owned`, `unassigned`, `moving`, `expired`, `unworked`, `orphaned`: docs/concepts.md), set at scrape time from the latest model |
//! | `leasehold_members` | gauge | `cluster` | member pods (ghosts excluded), at scrape time |
//! | `leasehold_members_ready` | gauge | `cluster` | ready, not terminating member pods, at scrape time |
//! | `leasehold_cluster_stale` | gauge | `cluster` | 1 while a watch the cluster depends on is down, not yet synced, or not proven current by a watch probe within a lease duration |
//! | `leasehold_control_plane_acting` | gauge | | 1 if this replica holds the control-plane Lease |
//! | `leasehold_lease_write_concurrency` | gauge | | control-loop Lease writes allowed in flight at once, adapted to the API server's latency (`k8s::pacing`) |
//!
//! **Handoff gap.** Measured by the index on the watch events it is fed, with the control
//! plane's wall clock (see `LeaseEntry::handoff_gap_ms`): when a target's Lease shows a new
//! holder different from the last one, the gap is the time from the previous holder's last
//! sign of life for the target — its release being seen (the Lease shown with no holder); for
//! a failover, its member Lease's last renewal seen (in gnmic's observed layout: the
//! target Lease's, once that hold expired by our observation) — to the new holder's Lease being seen. A takeover
//! seen with no release and no failover counts 0. It is what the control plane saw, not what
//! the members did: it includes watch delivery delay, a failover's figure is an upper bound (the
//! member may have worked up to its renew deadline, `2D/3` past its last renewal), and a
//! member's own work after acquiring or before releasing (its hooks, which
//! `tests/it/common/invariant.rs` measures) is not in it. First owners and re-acquires by the
//! same member are not handoffs. History stores each move's gap with it (`gap_ms`).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use http::{Method, StatusCode};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::model::{OperationKind, OperationState};

/// The exposition's content type: OpenMetrics 1.0 text, the only text format
/// `prometheus-client` writes (counters as `_total`, a closing `# EOF`). Prometheus asks for
/// it first in its `Accept` header and parses it natively.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Every metric's name starts with this.
const PREFIX: &str = "leasehold";

/// A family of histograms sharing one bucket layout.
type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// Control passes: 1 ms to ~16 s (a pass over 50,000 targets takes ~0.1 s to build).
fn reconcile_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 15))
}

/// HTTP requests: 1 ms to ~8 s (requests time out at 30 s, in `+Inf`).
fn http_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 14))
}

/// The labels of a per-cluster family (shared with the families other modules register).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ClusterLabels {
    cluster: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    cluster: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    cluster: String,
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindOutcomeLabels {
    cluster: String,
    kind: &'static str,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HttpLabels {
    method: &'static str,
    route: String,
    status: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    cluster: String,
    state: &'static str,
}

struct Families {
    reconcile: Histograms<ClusterLabels>,
    lease_writes: Family<OutcomeLabels, Counter>,
    operations_started: Family<KindLabels, Counter>,
    operations_finished: Family<KindOutcomeLabels, Counter>,
    moves: Family<KindOutcomeLabels, Counter>,
    http_requests: Histograms<HttpLabels>,
    targets: Family<StateLabels, Gauge>,
    members: Family<ClusterLabels, Gauge>,
    members_ready: Family<ClusterLabels, Gauge>,
    stale: Family<ClusterLabels, Gauge>,
    mass_lapse: Family<ClusterLabels, Gauge>,
    acting: Gauge,
    write_concurrency: Gauge,
}

/// One cluster's gauges, read from its latest model at scrape time.
#[derive(Debug, Clone)]
pub struct ClusterGauges<'a> {
    /// The cluster's name.
    pub cluster: &'a str,
    /// Targets per state: `owned`, `unassigned`, `moving`, `expired`, `unworked`, `orphaned`.
    pub targets: [(&'static str, usize); 6],
    /// Member pods, ghosts excluded.
    pub members: usize,
    /// Ready, not terminating member pods.
    pub members_ready: usize,
    /// A watch the cluster depends on is down or not yet synced.
    pub stale: bool,
    /// Members lapsed together in a mass lapse (0 when there is none): the model alone cannot
    /// say, the caller sets it (`engine::placement::mass_lapse`).
    pub mass_lapse_members: usize,
}

/// The registry and every metric family; clones share them.
#[derive(Clone)]
pub struct Metrics {
    /// Written only while modules register their families at start-up; read per scrape.
    registry: Arc<Mutex<Registry>>,
    inner: Arc<Families>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A fresh registry with every family registered.
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix(PREFIX);
        let f = Families {
            reconcile: Family::new_with_constructor(reconcile_buckets),
            lease_writes: Family::default(),
            operations_started: Family::default(),
            operations_finished: Family::default(),
            moves: Family::default(),
            http_requests: Family::new_with_constructor(http_buckets),
            targets: Family::default(),
            members: Family::default(),
            members_ready: Family::default(),
            stale: Family::default(),
            mass_lapse: Family::default(),
            acting: Gauge::default(),
            write_concurrency: Gauge::default(),
        };
        let r = &mut registry;
        r.register(
            "reconcile_duration_seconds",
            "Duration of one control-loop pass over a cluster",
            f.reconcile.clone(),
        );
        r.register(
            "lease_writes",
            "Control-loop Lease writes by outcome",
            f.lease_writes.clone(),
        );
        r.register(
            "operations_started",
            "Operations this replica started running",
            f.operations_started.clone(),
        );
        r.register(
            "operations_finished",
            "Operations this replica finished, by outcome",
            f.operations_finished.clone(),
        );
        r.register(
            "moves",
            "Moves finished by this replica, by outcome",
            f.moves.clone(),
        );
        r.register(
            "http_request_duration_seconds",
            "Time to the response head, by method, route template and status class",
            f.http_requests.clone(),
        );
        r.register(
            "targets",
            "Targets per state (latest model)",
            f.targets.clone(),
        );
        r.register("members", "Member pods (latest model)", f.members.clone());
        r.register(
            "members_ready",
            "Ready, not terminating member pods (latest model)",
            f.members_ready.clone(),
        );
        r.register(
            "cluster_stale",
            "1 while a watch the cluster depends on is down, not yet synced, or not proven current",
            f.stale.clone(),
        );
        r.register(
            "mass_lapse_members",
            "Members whose liveness lapsed together, taken for a slow API server: failovers are held back while it is above 0",
            f.mass_lapse.clone(),
        );
        r.register(
            "control_plane_acting",
            "1 if this replica holds the control-plane Lease",
            f.acting.clone(),
        );
        r.register(
            "lease_write_concurrency",
            "Control-loop Lease writes allowed in flight at once, adapted to the API server's latency",
            f.write_concurrency.clone(),
        );
        Metrics {
            registry: Arc::new(Mutex::new(registry)),
            inner: Arc::new(f),
        }
    }

    /// Lets another module register its families in this registry (names get the `leasehold_`
    /// prefix), returning what `register` returns: the module's own recording handle.
    pub fn register<T>(&self, register: impl FnOnce(&mut Registry) -> T) -> T {
        register(&mut self.registry.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// The whole exposition, `# EOF` included.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        let registry = self.registry.lock().unwrap_or_else(PoisonError::into_inner);
        prometheus_client::encoding::text::encode(&mut out, &registry)?;
        Ok(out)
    }

    /// One control-loop pass over `cluster` took `took`.
    pub fn reconciled(&self, cluster: &str, took: Duration) {
        self.inner
            .reconcile
            .get_or_create(&cluster_labels(cluster))
            .observe(took.as_secs_f64());
    }

    /// A control-loop Lease write ended (`outcome`: a fixed word, see the table above).
    pub fn lease_write(&self, cluster: &str, outcome: &'static str) {
        self.inner
            .lease_writes
            .get_or_create(&OutcomeLabels {
                cluster: cluster.to_owned(),
                outcome,
            })
            .inc();
    }

    /// This replica started running an operation.
    pub fn operation_started(&self, cluster: &str, kind: OperationKind) {
        self.inner
            .operations_started
            .get_or_create(&KindLabels {
                cluster: cluster.to_owned(),
                kind: kind.as_str(),
            })
            .inc();
    }

    /// This replica saw an operation end in `state`.
    pub fn operation_finished(&self, cluster: &str, kind: OperationKind, state: OperationState) {
        self.inner
            .operations_finished
            .get_or_create(&KindOutcomeLabels {
                cluster: cluster.to_owned(),
                kind: kind.as_str(),
                outcome: state.as_str(),
            })
            .inc();
    }

    /// A move ended, done or failed.
    pub fn move_finished(&self, cluster: &str, kind: OperationKind, done: bool) {
        self.inner
            .moves
            .get_or_create(&KindOutcomeLabels {
                cluster: cluster.to_owned(),
                kind: kind.as_str(),
                outcome: if done { "done" } else { "failed" },
            })
            .inc();
    }

    /// An HTTP request was answered. `route` is the matched route template, if any.
    pub fn http_request(
        &self,
        method: &Method,
        route: Option<&str>,
        status: StatusCode,
        took: Duration,
    ) {
        self.inner
            .http_requests
            .get_or_create(&HttpLabels {
                method: method_label(method),
                route: route.unwrap_or("unmatched").to_owned(),
                status: status_class(status),
            })
            .observe(took.as_secs_f64());
    }

    /// Sets the per-cluster gauges.
    pub fn observe_cluster(&self, c: &ClusterGauges<'_>) {
        let f = &self.inner;
        for (state, n) in c.targets {
            f.targets
                .get_or_create(&StateLabels {
                    cluster: c.cluster.to_owned(),
                    state,
                })
                .set(gauge_value(n));
        }
        let labels = cluster_labels(c.cluster);
        f.members.get_or_create(&labels).set(gauge_value(c.members));
        f.members_ready
            .get_or_create(&labels)
            .set(gauge_value(c.members_ready));
        f.stale.get_or_create(&labels).set(i64::from(c.stale));
        f.mass_lapse
            .get_or_create(&labels)
            .set(gauge_value(c.mass_lapse_members));
    }

    /// Control-loop Lease writes allowed in flight at once now.
    pub fn set_write_concurrency(&self, limit: usize) {
        self.inner.write_concurrency.set(gauge_value(limit));
    }

    /// Whether this replica is the acting control plane.
    pub fn set_acting(&self, acting: bool) {
        self.inner.acting.set(i64::from(acting));
    }
}

fn gauge_value(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

pub(crate) fn cluster_labels(cluster: &str) -> ClusterLabels {
    ClusterLabels {
        cluster: cluster.to_owned(),
    }
}

/// The standard methods by name; anything else (an extension method) as `other`, so a client
/// cannot invent label values.
fn method_label(m: &Method) -> &'static str {
    match *m {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::OPTIONS => "OPTIONS",
        Method::CONNECT => "CONNECT",
        Method::TRACE => "TRACE",
        _ => "other",
    }
}

fn status_class(s: StatusCode) -> &'static str {
    match s.as_u16() {
        100..=199 => "1xx",
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        _ => "5xx",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_labels_are_bounded() {
        let m = Metrics::new();
        let ext = Method::from_bytes(b"BREW").unwrap();
        m.http_request(
            &ext,
            None,
            StatusCode::IM_A_TEAPOT,
            Duration::from_millis(3),
        );
        m.http_request(
            &Method::GET,
            Some("/api/v1/clusters/{cluster}"),
            StatusCode::NO_CONTENT,
            Duration::from_millis(3),
        );
        let text = m.encode().unwrap();
        assert!(
            text.contains("leasehold_http_request_duration_seconds_count{method=\"other\",route=\"unmatched\",status=\"4xx\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("leasehold_http_request_duration_seconds_count{method=\"GET\",route=\"/api/v1/clusters/{cluster}\",status=\"2xx\"} 1\n"),
            "{text}"
        );
        assert_eq!(status_class(StatusCode::INTERNAL_SERVER_ERROR), "5xx");
        assert_eq!(status_class(StatusCode::PERMANENT_REDIRECT), "3xx");
        assert_eq!(method_label(&Method::DELETE), "DELETE");
    }
}
