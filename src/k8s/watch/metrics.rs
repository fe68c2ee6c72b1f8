//! The watchers' metrics, registered by this module in the engine's registry
//! ([`Metrics::register`]): what the watches delivered (`leasehold_watch_events_total`,
//! `leasehold_watch_lists_total`, `leasehold_watch_errors_total`, in a `watch` sub-registry) and
//! what the index reported for it (`leasehold_ownership_changes_total`,
//! `leasehold_handoff_gap_seconds`, `leasehold_overruns_total`). `crate::metrics`'s header describes every metric; labels are
//! namespaces, kinds, clusters and fixed words, never target keys or member names.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

use crate::k8s::index::{Change, Kind};
use crate::metrics::{ClusterLabels, Metrics, cluster_labels};

/// Handoff gaps: 10 ms to ~80 s (a release is picked up within a member's poll; an expiry
/// takes up to a lease duration plus the new holder's own observation).
fn handoff_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.01, 2.0, 14))
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
struct CauseLabels {
    cluster: String,
    cause: &'static str,
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

/// The watchers' families; clones share them.
#[derive(Clone, Debug)]
pub struct WatchMetrics {
    events: Family<WatchEventLabels, Counter>,
    lists: Family<WatchLabels, Counter>,
    errors: Family<WatchLabels, Counter>,
    ownership_changes: Family<CauseLabels, Counter>,
    handoff_gap: Family<ClusterLabels, Histogram, fn() -> Histogram>,
    overruns: Family<ClusterLabels, Counter>,
}

impl WatchMetrics {
    /// Registers the watchers' families in `metrics`' registry.
    pub fn new(metrics: &Metrics) -> WatchMetrics {
        let m = WatchMetrics {
            events: Family::default(),
            lists: Family::default(),
            errors: Family::default(),
            ownership_changes: Family::default(),
            handoff_gap: Family::new_with_constructor(handoff_buckets),
            overruns: Family::default(),
        };
        metrics.register(|r| {
            let watch = r.sub_registry_with_prefix("watch");
            watch.register(
                "events",
                "Watch events applied to the index",
                m.events.clone(),
            );
            watch.register(
                "lists",
                "Watch lists started (first sync and relists)",
                m.lists.clone(),
            );
            watch.register("errors", "Watch errors", m.errors.clone());
            r.register(
                "ownership_changes",
                "Target holder changes seen by the index",
                m.ownership_changes.clone(),
            );
            r.register(
                "handoff_gap_seconds",
                "Time a target had no live holder between two members, as the index saw it",
                m.handoff_gap.clone(),
            );
            r.register(
                "overruns",
                "Members' reports of a pause past the end of their hold, seen by the index",
                m.overruns.clone(),
            );
        });
        m
    }

    /// A watch delivered an object event.
    pub fn event(&self, namespace: &str, kind: Kind, event: WatchEvent) {
        self.events
            .get_or_create(&WatchEventLabels {
                namespace: namespace.to_owned(),
                kind: kind_str(kind),
                event: event.as_str(),
            })
            .inc();
    }

    /// A watch started a list.
    pub fn list(&self, namespace: &str, kind: Kind) {
        self.lists
            .get_or_create(&watch_labels(namespace, kind))
            .inc();
    }

    /// A watch failed.
    pub fn error(&self, namespace: &str, kind: Kind) {
        self.errors
            .get_or_create(&watch_labels(namespace, kind))
            .inc();
    }

    /// What the index reported for one event: ownership changes, handoff gaps and overrun
    /// reports (a change or report replayed from a first list is not counted again).
    pub fn changes(&self, changes: &[Change]) {
        for c in changes {
            if let Change::Overrun {
                cluster,
                replayed: false,
                ..
            } = c
            {
                self.overruns.get_or_create(&cluster_labels(cluster)).inc();
            }
            if let Change::Ownership {
                cluster,
                cause,
                gap_ms,
                replayed: false,
                ..
            } = c
            {
                self.ownership_changes
                    .get_or_create(&CauseLabels {
                        cluster: cluster.clone(),
                        cause: cause.as_str(),
                    })
                    .inc();
                if let Some(ms) = gap_ms {
                    self.handoff_gap
                        .get_or_create(&cluster_labels(cluster))
                        .observe(*ms as f64 / 1000.0);
                }
            }
        }
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
        Kind::MemberLease => "member_lease",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Cause;

    fn ownership(cluster: &str, gap_ms: Option<i64>) -> Change {
        Change::Ownership {
            overlap: None,
            cluster: cluster.into(),
            target: "secret-target-key".into(),
            from: Some("member-a".into()),
            to: Some("member-b".into()),
            cause: Cause::Rebalance,
            operation: None,
            at_ms: 0,
            acquired_at_ms: None,
            gap_ms,
            replayed: false,
        }
    }

    /// Handoff gaps land in the histogram in seconds, per cluster; a first owner counts as an
    /// ownership change but not a handoff; target keys and member names never become labels.
    #[test]
    fn handoff_gaps_are_observed_in_seconds() {
        let registry = Metrics::new();
        let m = WatchMetrics::new(&registry);
        m.changes(&[
            ownership("c", Some(250)),
            ownership("c", Some(3_000)),
            ownership("c", None),
        ]);
        let text = registry.encode().unwrap();
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

    /// The watch families keep the names they are documented under.
    #[test]
    fn watch_families_are_named_as_documented() {
        let registry = Metrics::new();
        let m = WatchMetrics::new(&registry);
        m.event("ns", Kind::Lease, WatchEvent::Apply);
        m.list("ns", Kind::Pod);
        m.error("ns", Kind::ConfigMap);
        let text = registry.encode().unwrap();
        for line in [
            "leasehold_watch_events_total{namespace=\"ns\",kind=\"lease\",event=\"apply\"} 1\n",
            "leasehold_watch_lists_total{namespace=\"ns\",kind=\"pod\"} 1\n",
            "leasehold_watch_errors_total{namespace=\"ns\",kind=\"configmap\"} 1\n",
        ] {
            assert!(text.contains(line), "{line} not in {text}");
        }
    }
}
