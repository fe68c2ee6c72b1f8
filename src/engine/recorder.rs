//! Records what the index sees into history. Ownership changes are recorded by every replica:
//! recording them is idempotent (keyed by the Lease's acquire time), so a change seen by several
//! replicas is stored once and none is lost while the acting replica changes. That includes the
//! holders a replica finds in its first list (replayed changes), so an acquisition no replica
//! saw happen — or that a replica saw but died before writing — is still recorded. So are
//! members' overrun reports (keyed by the member and the time it noticed). Other instance events
//! have no such key and are recorded by the acting replica only. Changes are written in batches
//! (what is queued, runs of ownership changes as one statement), and the journal is told when
//! each batch is done, so a direct writer of history can wait for the recorder to catch up
//! (see `operations`). Also applies the retention setting.

use std::sync::Arc;
use std::time::Duration;

use tracing::warn;

use super::Inner;
use crate::k8s::index::Change;
use crate::model::InstanceEventKind;
use crate::store::{InstanceEvent, OwnershipChange, now_ms};

/// How often old history is pruned.
const PRUNE_EVERY: Duration = Duration::from_secs(3600);

/// Changes written out together: what is queued when the recorder gets to it, up to this many.
const BATCH: usize = 1_000;

pub(super) async fn run(inner: Arc<Inner>) -> anyhow::Result<()> {
    let mut journal = inner.shared.journal().await;
    loop {
        match journal.next_batch(BATCH).await {
            Ok(batch) => record(&inner, batch).await,
            Err(missed) => warn!(
                missed,
                "history recorder fell behind; some changes were not recorded"
            ),
        }
        journal.done();
    }
}

/// Writes one batch in order: runs of ownership changes as one multi-row insert each, the rest
/// one by one. A failed write is logged and given up on (the journal moves on).
async fn record(inner: &Inner, batch: Vec<Change>) {
    let mut ownership = Vec::new();
    for change in batch {
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
                gap_ms,
                replayed: _,
            } => {
                ownership.push(OwnershipChange {
                    cluster,
                    target,
                    from,
                    to,
                    cause,
                    operation,
                    at_ms,
                    acquired_at_ms,
                    gap_ms,
                });
                continue;
            }
            Change::Targets { .. } | Change::Members { .. } => continue,
            other => {
                flush(inner, &mut ownership).await;
                record_other(inner, other).await
            }
        };
        if let Err(error) = result {
            warn!(%error, "could not record history");
        }
    }
    flush(inner, &mut ownership).await;
}

async fn flush(inner: &Inner, ownership: &mut Vec<OwnershipChange>) {
    if ownership.is_empty() {
        return;
    }
    if let Err(error) = inner.store.record_ownerships(ownership).await {
        warn!(%error, changes = ownership.len(), "could not record history");
    }
    ownership.clear();
}

async fn record_other(inner: &Inner, change: Change) -> Result<(), crate::store::StoreError> {
    match change {
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
        Change::Ownership { .. } | Change::Targets { .. } | Change::Members { .. } => Ok(()),
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
