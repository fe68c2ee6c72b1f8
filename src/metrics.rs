//! Prometheus metrics: one registry and its families, owned by a cheap-to-clone [`Metrics`]
//! handle that the engine keeps (watchers, control loop and operation runner record into it)
//! and the HTTP layer encodes at `GET /metrics` in the OpenMetrics text format. No global
//! registry: every engine has its own, so tests running several stay apart.
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
//! | `leasehold_handoff_gap_seconds` | histogram | `cluster` | for a target passing from one member to another: how long it had no live holder as the index saw it (see below) |
//! | `leasehold_operations_started_total` | counter | `cluster`, `kind` | operations this replica started running (`rebalance` / `remove_instance`) |
//! | `leasehold_operations_finished_total` | counter | `cluster`, `kind`, `outcome` | operations this replica finished: `succeeded` / `failed` / `cancelled` |
//! | `leasehold_moves_total` | counter | `cluster`, `kind`, `outcome` | moves of operations finished by this replica: `done` / `failed` |
//! | `leasehold_http_request_duration_seconds` | histogram | `method`, `route`, `status` | time to the response head (a streamed body such as `/api/v1/events` is not included); `route` is the matched route template (`unmatched` if none), `status` the class (`2xx` …) |
//! | `leasehold_targets` | gauge | `cluster`, `state` | targets per state (`owned`, `unassigned`, `moving`, `expired`, `orphaned`), set at scrape time from the latest model |
//! | `leasehold_members` | gauge | `cluster` | member pods (ghosts excluded), at scrape time |
//! | `leasehold_members_ready` | gauge | `cluster` | ready, not terminating member pods, at scrape time |
//! | `leasehold_cluster_stale` | gauge | `cluster` | 1 while a watch the cluster depends on is down or not yet synced |
//! | `leasehold_control_plane_acting` | gauge | | 1 if this replica holds the control-plane Lease |
//!
//! **Handoff gap.** Measured by the index on the watch events it is fed, with the control
//! plane's wall clock (see `LeaseEntry::handoff_gap_ms`): when a target's Lease shows a new
//! holder different from the last one, the gap is the time from the previous holder's release
//! being seen (the Lease shown with no holder) — or, if it never released, from its hold
//! expiring by our observation (its record unchanged for a full `leaseDurationSeconds`) — to
//! the new holder's Lease being seen. A takeover seen before the old hold expired by our clock
//! counts 0. It is what the control plane saw, not what the members did: it includes watch
//! delivery delay, and a member's own work after acquiring or before releasing (its hooks,
//! which `tests/common/invariant.rs` measures) is not in it. First owners and re-acquires by
//! the same member are not handoffs.

use std::sync::Arc;
use std::time::Duration;

use http::{Method, StatusCode};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::k8s::index::{Change, Kind};
use crate::k8s::model::ClusterModel;
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

/// Handoff gaps: 10 ms to ~80 s (a release is picked up within a member's poll; an expiry
/// takes up to a lease duration plus the new holder's own observation).
fn handoff_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.01, 2.0, 14))
}

/// HTTP requests: 1 ms to ~8 s (requests time out at 30 s, in `+Inf`).
fn http_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 14))
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WatchLabels {
    namespace: String,
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WatchEventLabels {
    namespace: String,
    kind: &'static str,
    event: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClusterLabels {
    cluster: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    cluster: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CauseLabels {
    cluster: String,
    cause: &'static str,
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

/// What a watch delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchEvent {
    /// An object added or modified.
    Apply,
    /// An object deleted.
    Delete,
    /// An object of a (re)list.
    List,
}

impl WatchEvent {
    fn as_str(self) -> &'static str {
        match self {
            WatchEvent::Apply => "apply",
            WatchEvent::Delete => "delete",
            WatchEvent::List => "list",
        }
    }
}

struct Families {
    watch_events: Family<WatchEventLabels, Counter>,
    watch_lists: Family<WatchLabels, Counter>,
    watch_errors: Family<WatchLabels, Counter>,
    reconcile: Histograms<ClusterLabels>,
    lease_writes: Family<OutcomeLabels, Counter>,
    ownership_changes: Family<CauseLabels, Counter>,
    handoff_gap: Histograms<ClusterLabels>,
    operations_started: Family<KindLabels, Counter>,
    operations_finished: Family<KindOutcomeLabels, Counter>,
    moves: Family<KindOutcomeLabels, Counter>,
    http_requests: Histograms<HttpLabels>,
    targets: Family<StateLabels, Gauge>,
    members: Family<ClusterLabels, Gauge>,
    members_ready: Family<ClusterLabels, Gauge>,
    stale: Family<ClusterLabels, Gauge>,
    acting: Gauge,
}

/// The registry and every metric family; clones share them.
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
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
            watch_events: Family::default(),
            watch_lists: Family::default(),
            watch_errors: Family::default(),
            reconcile: Family::new_with_constructor(reconcile_buckets),
            lease_writes: Family::default(),
            ownership_changes: Family::default(),
            handoff_gap: Family::new_with_constructor(handoff_buckets),
            operations_started: Family::default(),
            operations_finished: Family::default(),
            moves: Family::default(),
            http_requests: Family::new_with_constructor(http_buckets),
            targets: Family::default(),
            members: Family::default(),
            members_ready: Family::default(),
            stale: Family::default(),
            acting: Gauge::default(),
        };
        let r = &mut registry;
        r.register(
            "watch_events",
            "Watch events applied to the index",
            f.watch_events.clone(),
        );
        r.register(
            "watch_lists",
            "Watch lists started (first sync and relists)",
            f.watch_lists.clone(),
        );
        r.register("watch_errors", "Watch errors", f.watch_errors.clone());
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
            "ownership_changes",
            "Target holder changes seen by the index",
            f.ownership_changes.clone(),
        );
        r.register(
            "handoff_gap_seconds",
            "Time a target had no live holder between two members, as the index saw it",
            f.handoff_gap.clone(),
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
            "1 while a watch the cluster depends on is down or not yet synced",
            f.stale.clone(),
        );
        r.register(
            "control_plane_acting",
            "1 if this replica holds the control-plane Lease",
            f.acting.clone(),
        );
        Metrics {
            registry: Arc::new(registry),
            inner: Arc::new(f),
        }
    }

    /// The whole exposition, `# EOF` included.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }

    /// A watch delivered an object event.
    pub fn watch_event(&self, namespace: &str, kind: Kind, event: WatchEvent) {
        self.inner
            .watch_events
            .get_or_create(&WatchEventLabels {
                namespace: namespace.to_owned(),
                kind: kind_str(kind),
                event: event.as_str(),
            })
            .inc();
    }

    /// A watch started a list.
    pub fn watch_list(&self, namespace: &str, kind: Kind) {
        self.inner
            .watch_lists
            .get_or_create(&watch_labels(namespace, kind))
            .inc();
    }

    /// A watch failed.
    pub fn watch_error(&self, namespace: &str, kind: Kind) {
        self.inner
            .watch_errors
            .get_or_create(&watch_labels(namespace, kind))
            .inc();
    }

    /// What the index reported for one event: ownership changes and handoff gaps.
    pub fn changes(&self, changes: &[Change]) {
        for c in changes {
            if let Change::Ownership {
                cluster,
                cause,
                gap_ms,
                ..
            } = c
            {
                self.inner
                    .ownership_changes
                    .get_or_create(&CauseLabels {
                        cluster: cluster.clone(),
                        cause: cause.as_str(),
                    })
                    .inc();
                if let Some(ms) = gap_ms {
                    self.inner
                        .handoff_gap
                        .get_or_create(&cluster_labels(cluster))
                        .observe(*ms as f64 / 1000.0);
                }
            }
        }
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

    /// Sets the per-cluster gauges from a model.
    pub fn observe_model(&self, model: &ClusterModel) {
        let f = &self.inner;
        let c = &model.counts;
        for (state, n) in [
            ("owned", c.owned),
            ("unassigned", c.unassigned),
            ("moving", c.moving),
            ("expired", c.expired),
            ("orphaned", c.orphaned),
        ] {
            f.targets
                .get_or_create(&StateLabels {
                    cluster: model.name.clone(),
                    state,
                })
                .set(gauge_value(n));
        }
        let labels = cluster_labels(&model.name);
        let pods = model.instances.iter().filter(|i| !i.ghost);
        f.members
            .get_or_create(&labels)
            .set(gauge_value(pods.clone().count()));
        f.members_ready
            .get_or_create(&labels)
            .set(gauge_value(pods.filter(|i| i.ready).count()));
        f.stale
            .get_or_create(&labels)
            .set(i64::from(model.stale || !model.synced));
    }

    /// Whether this replica is the acting control plane.
    pub fn set_acting(&self, acting: bool) {
        self.inner.acting.set(i64::from(acting));
    }
}

fn gauge_value(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn cluster_labels(cluster: &str) -> ClusterLabels {
    ClusterLabels {
        cluster: cluster.to_owned(),
    }
}

fn watch_labels(namespace: &str, kind: Kind) -> WatchLabels {
    WatchLabels {
        namespace: namespace.to_owned(),
        kind: kind_str(kind),
    }
}

fn kind_str(kind: Kind) -> &'static str {
    match kind {
        Kind::Pod => "pod",
        Kind::Service => "service",
        Kind::EndpointSlice => "endpointslice",
        Kind::Lease => "lease",
        Kind::ConfigMap => "configmap",
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
    use crate::model::Cause;

    fn ownership(cluster: &str, gap_ms: Option<i64>) -> Change {
        Change::Ownership {
            cluster: cluster.into(),
            target: "secret-target-key".into(),
            from: Some("member-a".into()),
            to: Some("member-b".into()),
            cause: Cause::Rebalance,
            operation: None,
            at_ms: 0,
            acquired_at_ms: None,
            gap_ms,
        }
    }

    /// Handoff gaps land in the histogram in seconds, per cluster; a first owner counts as an
    /// ownership change but not a handoff; target keys and member names never become labels.
    #[test]
    fn handoff_gaps_are_observed_in_seconds() {
        let m = Metrics::new();
        m.changes(&[
            ownership("c", Some(250)),
            ownership("c", Some(3_000)),
            ownership("c", None),
        ]);
        let text = m.encode().unwrap();
        assert!(
            text.contains("leasehold_handoff_gap_seconds_count{cluster=\"c\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("leasehold_handoff_gap_seconds_sum{cluster=\"c\"} 3.25\n"),
            "{text}"
        );
        assert!(
            text.contains("leasehold_handoff_gap_seconds_bucket{le=\"0.32\",cluster=\"c\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "leasehold_ownership_changes_total{cluster=\"c\",cause=\"rebalance\"} 3\n"
            ),
            "{text}"
        );
        assert!(!text.contains("secret-target-key") && !text.contains("member-"));
        assert!(text.ends_with("# EOF\n"));
    }

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
