//! Records what the index sees into history. Ownership changes are recorded by every replica:
//! recording them is idempotent (keyed by the Lease's acquire time), so a change seen by several
//! replicas is stored once and none is lost while the acting replica changes. So are members'
//! overrun reports (keyed by the member and the time it noticed). Other instance events have no
//! such key and are recorded by the acting replica only. Also applies the retention setting.

use std::sync::Arc;
use std::time::Duration;

use tracing::warn;

use super::Inner;
use crate::k8s::index::Change;
use crate::model::InstanceEventKind;
use crate::store::{InstanceEvent, OwnershipChange, now_ms};

/// How often old history is pruned.
const PRUNE_EVERY: Duration = Duration::from_secs(3600);

pub(super) async fn run(inner: Arc<Inner>) -> anyhow::Result<()> {
    let mut journal = inner.shared.journal().await;
    loop {
        let change = match journal.next().await {
            Ok(c) => c,
            Err(missed) => {
                warn!(
                    missed,
                    "history recorder fell behind; some changes were not recorded"
                );
                continue;
            }
        };
        let result = match change {
            Change::Ownership {
                cluster,
                target,
                from,
                to,
                cause,
                operation,
                at_ms,
                acquired_at_ms,
                gap_ms: _,
            } => inner
                .store
                .record_ownership(&OwnershipChange {
                    cluster,
                    target,
                    from,
                    to,
                    cause,
                    operation,
                    at_ms,
                    acquired_at_ms,
                })
                .await
                .map(|_| ()),
            Change::Instance { .. } if !inner.acting() => Ok(()),
            Change::Instance {
                cluster,
                instance,
                kind,
                at_ms,
            } => {
                inner
                    .store
                    .record_instance_event(&InstanceEvent {
                        cluster,
                        instance,
                        kind,
                        at_ms,
                        detail: None,
                    })
                    .await
            }
            Change::Overrun {
                cluster,
                instance,
                overrun,
                replayed: _,
            } => inner
                .store
                .record_overrun(&InstanceEvent {
                    cluster,
                    instance,
                    kind: InstanceEventKind::Overrun,
                    at_ms: overrun.at_ms,
                    detail: Some(overrun.describe()),
                })
                .await
                .map(|_| ()),
            Change::Targets { .. } => Ok(()),
        };
        if let Err(error) = result {
            warn!(%error, "could not record history");
        }
    }
}

pub(super) async fn prune(inner: Arc<Inner>) -> anyhow::Result<()> {
    let keep = inner.config.history_retention;
    if keep.is_zero() {
        return std::future::pending().await;
    }
    let mut tick = tokio::time::interval(PRUNE_EVERY);
    loop {
        tick.tick().await;
        if !inner.acting() {
            continue;
        }
        let cutoff = now_ms() - i64::try_from(keep.as_millis()).unwrap_or(i64::MAX);
        match inner.store.prune(cutoff).await {
            Ok(n) if n > 0 => tracing::info!(rows = n, "pruned history past retention"),
            Ok(_) => {}
            Err(error) => warn!(%error, "pruning history failed"),
        }
    }
}
