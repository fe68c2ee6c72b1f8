//! Records what the index sees into history. Ownership changes are recorded by every replica:
//! recording them is idempotent (keyed by the Lease's acquire time), so a change seen by several
//! replicas is stored once and none is lost while the acting replica changes. That includes the
//! holders a replica finds in its first list (replayed changes), so an acquisition no replica
//! saw happen — or that a replica saw but died before writing — is still recorded. So are
//! members' overrun reports (keyed by the member and the time it noticed). Other instance events
//! have no such key and are recorded by the acting replica only. Changes are written in batches
//! (what is queued, runs of ownership changes as one statement), and the journal is told when
//! each batch is done, so a direct writer of history can wait for the recorder to catch up
//! (see `operations`). A failed write of ownership changes or overruns — idempotent, so a
//! write that did land after all is not stored twice — is tried again until it succeeds
//! ([`until_written`]): a database that is briefly away (a PostgreSQL failover, a locked SQLite
//! file) costs history nothing, and one that stays away holds the recorder back until the
//! journal overflows, which is logged as changes not recorded. Other instance events have no
//! key, so a write of one is tried once. Also applies the retention setting.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tracing::warn;

use super::Inner;
use crate::k8s::index::Change;
use crate::model::InstanceEventKind;
use crate::store::{InstanceEvent, OwnershipChange, StoreError, now_ms};

/// How often old history is pruned.
const PRUNE_EVERY: Duration = Duration::from_secs(3600);

/// Changes written out together: what is queued when the recorder gets to it, up to this many.
const BATCH: usize = 1_000;

/// The first pause before a failed idempotent write is tried again; it doubles up to
/// [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_millis(250);
/// The longest pause between two tries of a failed idempotent write.
const RETRY_MAX: Duration = Duration::from_secs(5);

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
/// one by one. Ownership changes and overruns are written until they land; a failed instance
/// event is logged and given up on.
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
                overlap,
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
                    overlap,
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
    until_written("ownership changes", || {
        inner.store.record_ownerships(ownership)
    })
    .await;
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
        } => {
            let event = InstanceEvent {
                cluster,
                instance,
                kind: InstanceEventKind::Overrun,
                at_ms: overrun.at_ms,
                detail: Some(overrun.describe()),
            };
            until_written("an overrun", || inner.store.record_overrun(&event)).await;
            Ok(())
        }
        Change::WorkGap {
            cluster,
            target,
            to,
            gap_ms,
        } => {
            until_written("a work gap", || {
                inner.store.record_work_gap(&cluster, &target, &to, gap_ms)
            })
            .await;
            Ok(())
        }
        Change::Ownership { .. } | Change::Targets { .. } | Change::Members { .. } => Ok(()),
    }
}

/// Runs the idempotent write `write` until it succeeds, pausing [`RETRY_FIRST`] after the first
/// failure, twice as long after each next one, at most [`RETRY_MAX`]; every failure is logged.
async fn until_written<T, F, Fut>(what: &str, mut write: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, StoreError>>,
{
    let mut pause = RETRY_FIRST;
    let mut failures = 0u32;
    loop {
        match write().await {
            Ok(done) => {
                if failures > 0 {
                    tracing::info!(what, failures, "history recorded after failed tries");
                }
                return done;
            }
            Err(error) => {
                failures += 1;
                warn!(%error, what, failures, retry_in = ?pause, "could not record history; trying again");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(RETRY_MAX);
            }
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::model::Cause;
    use crate::store::Store;

    /// A batch of ownership changes written while the database cannot take it (here SQLite's
    /// `history` table renamed away by another connection) is written again until it lands —
    /// once each: the tries before failed, and a retry of an idempotent write stores nothing
    /// twice. Before, the recorder logged the error and dropped the batch.
    #[tokio::test]
    async fn a_failed_batch_of_ownership_changes_is_written_again_until_it_lands() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::connect(&format!("sqlite:{}", dir.path().join("h.db").display()))
            .await
            .unwrap();
        let batch: Vec<OwnershipChange> = (0..20)
            .map(|i| OwnershipChange {
                cluster: "c".into(),
                target: format!("t-{i}"),
                from: None,
                to: Some("m-0".into()),
                cause: Cause::Initial,
                operation: None,
                at_ms: 1_000 + i,
                acquired_at_ms: Some(1_000 + i),
                gap_ms: None,
                overlap: None,
            })
            .collect();
        let count = async |store: &Store, table: &str| -> i64 {
            sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(format!(
                "SELECT COUNT(*) FROM {table} WHERE kind = 'ownership'"
            )))
            .fetch_one(store.pool())
            .await
            .unwrap()
        };
        sqlx::query("ALTER TABLE history RENAME TO history_away")
            .execute(store.pool())
            .await
            .unwrap();
        let tries = AtomicUsize::new(0);
        let write = until_written("ownership changes", || {
            tries.fetch_add(1, Ordering::SeqCst);
            store.record_ownerships(&batch)
        });
        let heal = async {
            tokio::time::sleep(RETRY_FIRST * 3).await;
            sqlx::query("ALTER TABLE history_away RENAME TO history")
                .execute(store.pool())
                .await
                .unwrap();
        };
        let (new, ()) = tokio::join!(write, heal);
        assert_eq!(new, 20);
        assert!(tries.load(Ordering::SeqCst) >= 2, "it failed first");
        assert_eq!(count(&store, "history").await, 20);
        // Written again (as after an answer lost on the way): nothing is stored twice.
        assert_eq!(
            until_written("again", || store.record_ownerships(&batch)).await,
            0
        );
        assert_eq!(count(&store, "history").await, 20);
    }
}
