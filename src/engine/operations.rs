//! Runs operations on the acting replica. The runner picks up every pending or running
//! operation from the store (so a restart or a new acting replica resumes where the last one
//! stopped) and executes its moves with the cluster's concurrency limit. A move writes the new
//! desired owner (compare-and-swap) and completes when the new owner holds the Lease; a move
//! that times out is retried, then failed with a reason. Progress is stored after every step,
//! and every step is idempotent on the Lease's state, so no move is lost or applied twice.
//! Operations started and finished and moves done or failed are counted in the engine's
//! metrics.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::{Instrument as _, info, info_span, warn};

use super::{Inner, removal};
use crate::config::Cluster;
use crate::k8s::leases;
use crate::model::{Cause, MoveState, OperationKind, OperationState};
use crate::protocol::Desire;
use crate::store::{MoveRecord, Operation, OwnershipChange, now_ms};

/// How often the runner looks for operations without being woken.
const POLL: Duration = Duration::from_secs(1);

/// How long a finished move waits for the history recorder to write what the index saw
/// before it, so its own row lands after those.
const RECORDER_CATCH_UP: Duration = Duration::from_secs(10);

pub(super) async fn runner(inner: Arc<Inner>) -> anyhow::Result<()> {
    // The operation tasks are owned here: when the replica stops acting, the acting loops'
    // JoinSet drops this future, and dropping `running` aborts every operation with it — no
    // move, webhook call or pod deletion goes on from a replica that no longer acts. The
    // operation stays running in the store for the next acting replica to resume.
    let mut running: JoinSet<()> = JoinSet::new();
    // Which operation each task runs, by task id: `cluster/operation`.
    let mut keys: HashMap<tokio::task::Id, String> = HashMap::new();
    loop {
        while let Some(done) = running.try_join_next_with_id() {
            let id = match done {
                Ok((id, ())) => id,
                Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                Err(e) => e.id(),
            };
            keys.remove(&id);
        }
        for op in inner.store.unfinished_operations().await? {
            let key = format!("{}/{}", op.cluster, op.id);
            if op.state == OperationState::Proposed || keys.values().any(|k| *k == key) {
                continue;
            }
            // One at a time per cluster, oldest first.
            if keys
                .values()
                .any(|k| k.starts_with(&format!("{}/", op.cluster)))
            {
                continue;
            }
            let span =
                info_span!("operation", cluster = %op.cluster, operation = %op.id, kind = %op.kind);
            let inner2 = inner.clone();
            let task = running.spawn(
                async move {
                    if let Err(error) = execute(&inner2, op).await {
                        warn!(%error, "operation stopped; it resumes on the next pass");
                    }
                }
                .instrument(span),
            );
            keys.insert(task.id(), key);
        }
        let _ = tokio::time::timeout(POLL, inner.ops_wake.notified()).await;
    }
}

/// Whether the operation was cancelled (or otherwise finished) behind our back.
async fn still_running(inner: &Inner, id: &str) -> anyhow::Result<bool> {
    Ok(inner
        .store
        .operation(id)
        .await?
        .is_some_and(|o| o.state == OperationState::Running))
}

async fn execute(inner: &Arc<Inner>, op: Operation) -> anyhow::Result<()> {
    let spec = inner.cluster(&op.cluster)?.clone();
    if op.state == OperationState::Pending {
        inner
            .store
            .set_operation_state(
                &op.id,
                &[OperationState::Pending],
                OperationState::Running,
                None,
                now_ms(),
            )
            .await?;
        info!(moves = op.moves.len(), "operation started");
        inner.metrics.operation_started(&op.cluster, op.kind);
    }
    // Whether the instance is gone is read only from a model known to be current: a replica
    // that has just begun to act (resuming this operation) may not have seen it yet.
    until_current(inner, &op.cluster, spec.policy.move_timeout).await;
    let ghost = op.kind == OperationKind::RemoveInstance
        && op.instance.as_deref().is_some_and(|i| {
            !inner
                .shared
                .read(|ix| ix.alive(&op.cluster, i, jiff::Timestamp::now()))
        });
    let failed = run_moves(inner, &spec, &op, ghost).await?;
    if !still_running(inner, &op.id).await? {
        info!("operation cancelled; moves in flight finished");
        inner
            .metrics
            .operation_finished(&op.cluster, op.kind, OperationState::Cancelled);
        return Ok(());
    }
    let outcome = if failed > 0 {
        Err(format!("{failed} of {} moves failed", op.moves.len()))
    } else if op.kind == OperationKind::RemoveInstance {
        removal::finish(inner, &spec, &op)
            .await
            .map_err(|e| format!("{e:#}"))
    } else {
        Ok(())
    };
    let (to, error) = match &outcome {
        Ok(()) => (OperationState::Succeeded, None),
        Err(e) => (OperationState::Failed, Some(e.as_str())),
    };
    inner
        .store
        .set_operation_state(&op.id, &[OperationState::Running], to, error, now_ms())
        .await?;
    inner.metrics.operation_finished(&op.cluster, op.kind, to);
    match error {
        None => info!("operation succeeded"),
        Some(error) => warn!(%error, "operation failed"),
    }
    Ok(())
}

/// Runs the unfinished moves; returns how many failed.
async fn run_moves(
    inner: &Arc<Inner>,
    spec: &Cluster,
    op: &Operation,
    ghost: bool,
) -> anyhow::Result<usize> {
    let mut failed = op
        .moves
        .iter()
        .filter(|m| m.state == MoveState::Failed)
        .count();
    let todo: Vec<MoveRecord> = op
        .moves
        .iter()
        .filter(|m| !m.state.is_final())
        .cloned()
        .collect();
    inner.set_busy(&op.cluster, todo.iter().map(|m| m.target.clone()), true);
    let limit = Arc::new(Semaphore::new(spec.policy.max_concurrent_moves));
    let mut flight = JoinSet::new();
    for mv in todo {
        let permit = limit.clone().acquire_owned().await?;
        if !still_running(inner, &op.id).await? {
            break;
        }
        let (inner, spec, op_id) = (inner.clone(), spec.clone(), op.id.clone());
        let kind = op.kind;
        flight.spawn(async move {
            let _permit = permit;
            let target = mv.target.clone();
            let result = run_move(&inner, &spec, &op_id, kind, mv, ghost).await;
            inner.set_busy(&spec.name, [target], false);
            result
        });
    }
    while let Some(done) = flight.join_next().await {
        if !done?? {
            failed += 1;
        }
    }
    Ok(failed)
}

/// One move, with its retries. Returns whether it succeeded.
async fn run_move(
    inner: &Inner,
    spec: &Cluster,
    op_id: &str,
    kind: OperationKind,
    mv: MoveRecord,
    skip_wait: bool,
) -> anyhow::Result<bool> {
    let api: Api<Lease> = Api::namespaced(inner.client.clone(), &spec.namespace);
    let cause = match kind {
        OperationKind::Rebalance => Cause::Rebalance,
        OperationKind::RemoveInstance => Cause::Removal,
    };
    let mut desire = Desire {
        term: None,
        owner: mv.to.clone(),
        cause,
        operation: Some(op_id.to_owned()),
        duration_s: i32::try_from(spec.policy.lease_duration.as_secs()).unwrap_or(i32::MAX),
        overlap_ms: spec
            .policy
            .overlap_ms(inner.shared.read(|ix| ix.prepares(&spec.name, &mv.to))),
    };
    let mut attempts = mv.attempts;
    // Every step of the move is stored as it happens, so a resumed operation knows where it is.
    let record = async |state: MoveState, attempts: u32, error: Option<String>| {
        inner
            .store
            .update_move(op_id, mv.seq, state, attempts, error.as_deref(), now_ms())
            .await
    };
    loop {
        attempts += 1;
        record(MoveState::InProgress, attempts, None).await?;
        if !until_current(inner, &spec.name, spec.policy.move_timeout).await {
            let why = format!(
                "cluster {} is not synced or its watch is down; no decision on stale data",
                spec.name
            );
            if attempts > spec.policy.move_retries {
                record(MoveState::Failed, attempts, Some(why)).await?;
                inner.metrics.move_finished(&spec.name, kind, false);
                return Ok(false);
            }
            warn!(target = %mv.target, %why, "move waits; retrying");
            continue;
        }
        let term = inner.shared.read(|ix| {
            let now = jiff::Timestamp::now();
            ix.alive(&spec.name, &mv.to, now)
                .then(|| ix.member_term(&spec.name, &mv.to))
        });
        let Some(term) = term else {
            let why = format!("destination {} is not a live member", mv.to);
            record(MoveState::Failed, attempts, Some(why)).await?;
            inner.metrics.move_finished(&spec.name, kind, false);
            return Ok(false);
        };
        desire.term = term;
        // Idempotent: if the Lease already wants `to` for this operation, nothing is written.
        leases::set_desire(&api, spec.prefix(), &spec.name, &mv.target, false, |_| {
            Some(desire.clone())
        })
        .await?;
        let outcome = if skip_wait {
            // The old owner is gone: the new one takes over once it sees the Lease expire (and
            // the recorder writes that acquisition when the index sees it).
            Ok(None)
        } else {
            // In an overlap hand-off the next owner prepares only under the term the Lease
            // names: a new term of it (a brief lapse) is written down at once, not after the
            // holder waited its whole bound for a word that cannot come.
            let term = desire.overlap_ms.and(desire.term.as_deref());
            let waited = wait_held(
                inner,
                &spec.name,
                (&mv.target, &mv.to, term),
                // An overlap hand-off may wait its bound before the holder stops first.
                spec.policy.move_timeout
                    + desire
                        .overlap_ms
                        .map_or(Duration::ZERO, |ms| Duration::from_millis(ms as u64)),
            )
            .await;
            match waited {
                Waited::Held(at) => Ok(at),
                Waited::NewTerm => {
                    info!(target = %mv.target, to = %mv.to, "the destination has a new term: writing it down");
                    attempts -= 1;
                    continue;
                }
                Waited::Failed(why) => Err(why),
            }
        };
        match outcome {
            Ok(acquired_at_ms) => {
                // The history recorder writes this handoff when the index sees it; if no
                // replica was watching when it happened (the control plane was down
                // mid-operation), it writes it only from a first list, without `from`.
                // Recording it here too is idempotent (one row per acquisition), so the move
                // is in history either way; `at_ms` is, as everywhere in history, when
                // Leasehold saw it. First the recorder catches up with what the index saw
                // before (this target's earlier changes among them): a row written here ahead
                // of those would leave an older change as the target's newest row.
                if let Some(at) = acquired_at_ms {
                    if !inner.shared.journal_caught_up(RECORDER_CATCH_UP).await {
                        warn!(target = %mv.target, "history recorder is behind; recording the move anyway");
                    }
                    inner
                        .store
                        .record_ownership(&OwnershipChange {
                            cluster: spec.name.clone(),
                            target: mv.target.clone(),
                            from: mv.from.clone(),
                            to: Some(mv.to.clone()),
                            cause,
                            operation: Some(op_id.to_owned()),
                            at_ms: now_ms(),
                            acquired_at_ms: Some(at),
                            // The recorder's row (written first, see above) has them.
                            gap_ms: None,
                            overlap: None,
                        })
                        .await?;
                }
                record(MoveState::Done, attempts, None).await?;
                inner.metrics.move_finished(&spec.name, kind, true);
                return Ok(true);
            }
            Err(why) if attempts > spec.policy.move_retries => {
                let why = format!("{why} (after {attempts} attempts)");
                warn!(target = %mv.target, to = %mv.to, %why, "move failed");
                record(MoveState::Failed, attempts, Some(why)).await?;
                inner.metrics.move_finished(&spec.name, kind, false);
                return Ok(false);
            }
            Err(why) => warn!(target = %mv.target, to = %mv.to, %why, "move timed out; retrying"),
        }
    }
}

/// Waits (up to `timeout`) until the index's model of `cluster` is known to be current
/// ([`crate::k8s::index::Index::current`]); whether it is.
async fn until_current(inner: &Inner, cluster: &str, timeout: Duration) -> bool {
    let mut versions = inner.shared.versions();
    let deadline = Instant::now() + timeout;
    loop {
        if inner
            .shared
            .read(|ix| ix.current(cluster, Timestamp::now()))
        {
            return true;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        // Staleness ends by an event or a proof (each bumps the version) or by the clock.
        let _ =
            tokio::time::timeout(left.min(Duration::from_millis(200)), versions.changed()).await;
    }
}

/// How waiting for a move's destination to hold its target ended.
enum Waited {
    /// It holds it; the acquisition's `acquireTime` (ms), if known.
    Held(Option<i64>),
    /// It is live under another term than the one written with the move (overlap hand-offs).
    NewTerm,
    /// It did not, and why.
    Failed(String),
}

/// Waits until `to` holds `target` (unexpired), or says why not; with `term`, also ends when
/// `to` is live under another term.
async fn wait_held(
    inner: &Inner,
    cluster: &str,
    (target, to, term): (&str, &str, Option<&str>),
    timeout: Duration,
) -> Waited {
    let mut versions = inner.shared.versions();
    let deadline = Instant::now() + timeout;
    loop {
        let now = inner.shared.read(|ix| {
            let at = Timestamp::now();
            (
                ix.target(cluster, target, at),
                // An absence counts only when the model is current.
                ix.alive(cluster, to, at) || !ix.current(cluster, at),
                ix.member_term(cluster, to),
            )
        });
        match now {
            (Some(t), ..) if t.holder.as_deref() == Some(to) && !t.expired => {
                return Waited::Held(t.acquired_at_ms);
            }
            (_, false, _) => {
                return Waited::Failed(format!("destination {to} is not a live member"));
            }
            (_, true, Some(now)) if term.is_some_and(|t| t != now) => return Waited::NewTerm,
            _ => {}
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            let holder = inner
                .shared
                .read(|ix| ix.target(cluster, target, Timestamp::now()))
                .and_then(|t| t.holder);
            return Waited::Failed(format!(
                "{to} did not take the lease within {}s (holder: {})",
                timeout.as_secs(),
                holder.as_deref().unwrap_or("none")
            ));
        }
        let _ =
            tokio::time::timeout(left.min(Duration::from_millis(500)), versions.changed()).await;
    }
}
