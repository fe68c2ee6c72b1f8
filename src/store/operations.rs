//! The operations half of the store: operations (rebalance, remove-instance) and their moves,
//! compare-and-set state changes, the remove-instance phase marker, cancellation, and the list
//! of unfinished operations to resume after a restart. Each change that matters for audit also
//! appends an operation entry to history, in the same transaction.
//!
//! It must not: decide transitions (the engine picks `from`/`to`; this only refuses a change
//! whose `from` no longer holds) or run any part of an operation.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use sqlx::Row as _;
use sqlx::any::AnyRow;

use super::history::{HistoryKind, NewEntry, insert_entry};
use super::{
    Arg, Page, Sql, Store, StoreError, clamp_limit, decode_cursor, encode_cursor, u32_col, word,
};
use crate::model::{MoveState, OperationKind, OperationState};

/// Moves inserted per statement (5 arguments each: far under both databases' limits).
const MOVES_PER_INSERT: usize = 200;

/// An operation to create.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewOperation {
    pub cluster: String,
    pub kind: OperationKind,
    /// `proposed` or `pending`: anything else is refused.
    pub state: OperationState,
    pub requested_by: String,
    pub reason: String,
    /// The instance a remove-instance operation removes (required for that kind).
    pub instance: Option<String>,
    pub params: serde_json::Value,
    /// The plan, in order; stored with `seq` 1, 2, ...
    pub moves: Vec<NewMove>,
    pub now_ms: i64,
}

/// One planned move.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewMove {
    pub target: String,
    pub from: Option<String>,
    pub to: String,
}

/// An operation with its moves.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Operation {
    /// A uuid v7 (time-ordered).
    pub id: String,
    pub cluster: String,
    pub kind: OperationKind,
    pub state: OperationState,
    pub requested_by: String,
    pub reason: String,
    pub instance: Option<String>,
    #[schema(value_type = Object)]
    pub params: serde_json::Value,
    /// Remove-instance progress marker (`cordoned`, `drained`, `webhook_called`, ...).
    pub phase: Option<String>,
    pub created_at_ms: i64,
    /// Last state or phase change.
    pub updated_at_ms: i64,
    pub started_at_ms: Option<i64>,
    pub finished_at_ms: Option<i64>,
    pub error: Option<String>,
    pub moves: Vec<MoveRecord>,
}

/// One move of an operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MoveRecord {
    /// 1-based position in the plan.
    pub seq: u32,
    pub target: String,
    pub from: Option<String>,
    pub to: String,
    pub state: MoveState,
    pub attempts: u32,
    pub started_at_ms: Option<i64>,
    pub finished_at_ms: Option<i64>,
    pub error: Option<String>,
}

/// How many of an operation's moves are in each state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MoveCounts {
    pub total: u32,
    pub pending: u32,
    pub in_progress: u32,
    pub done: u32,
    pub failed: u32,
    pub cancelled: u32,
}

/// An operation without its moves, with their counts (for listings).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct OperationSummary {
    pub id: String,
    pub cluster: String,
    pub kind: OperationKind,
    pub state: OperationState,
    pub requested_by: String,
    pub reason: String,
    pub instance: Option<String>,
    #[schema(value_type = Object)]
    pub params: serde_json::Value,
    pub phase: Option<String>,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    pub started_at_ms: Option<i64>,
    pub finished_at_ms: Option<i64>,
    pub error: Option<String>,
    pub moves: MoveCounts,
}

/// Which operations to list (newest first). Every filter set must match. Also the query
/// string of `GET /api/v1/operations` (absent fields take their defaults).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::IntoParams)]
#[serde(default)]
#[into_params(parameter_in = Query)]
pub struct OperationQuery {
    /// Only this cluster's.
    pub cluster: Option<String>,
    /// Only in this state.
    pub state: Option<OperationState>,
    /// Only of this kind.
    pub kind: Option<OperationKind>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
    /// Page size: 0 means 100 (`DEFAULT_PAGE`), at most 1000 (`MAX_PAGE`).
    pub limit: u32,
}

const OP_COLUMNS: &str = "o.id, o.cluster, o.kind, o.state, o.requested_by, o.reason, o.instance, \
     o.params, o.phase, o.created_at_ms, o.updated_at_ms, o.started_at_ms, o.finished_at_ms, \
     o.error";

const MOVE_COLUMNS: &str = "SELECT operation_id, seq, target, from_instance, to_instance, state, \
     attempts, started_at_ms, finished_at_ms, error FROM moves";

const UNFINISHED_SQL: &str = "('proposed', 'pending', 'running')";

fn operation_from_row(row: &AnyRow) -> Result<Operation, StoreError> {
    let params: String = row.try_get("params")?;
    Ok(Operation {
        id: row.try_get("id")?,
        cluster: row.try_get("cluster")?,
        kind: word(row, "kind")?,
        state: word(row, "state")?,
        requested_by: row.try_get("requested_by")?,
        reason: row.try_get("reason")?,
        instance: row.try_get("instance")?,
        params: serde_json::from_str(&params)
            .map_err(|e| StoreError::Corrupt(format!("operation params: {e}")))?,
        phase: row.try_get("phase")?,
        created_at_ms: row.try_get("created_at_ms")?,
        updated_at_ms: row.try_get("updated_at_ms")?,
        started_at_ms: row.try_get("started_at_ms")?,
        finished_at_ms: row.try_get("finished_at_ms")?,
        error: row.try_get("error")?,
        moves: Vec::new(),
    })
}

fn move_from_row(row: &AnyRow) -> Result<MoveRecord, StoreError> {
    Ok(MoveRecord {
        seq: u32_col(row, "seq")?,
        target: row.try_get("target")?,
        from: row.try_get("from_instance")?,
        to: row.try_get("to_instance")?,
        state: word(row, "state")?,
        attempts: u32_col(row, "attempts")?,
        started_at_ms: row.try_get("started_at_ms")?,
        finished_at_ms: row.try_get("finished_at_ms")?,
        error: row.try_get("error")?,
    })
}

fn summary_from_row(row: &AnyRow) -> Result<OperationSummary, StoreError> {
    let op = operation_from_row(row)?;
    Ok(OperationSummary {
        id: op.id,
        cluster: op.cluster,
        kind: op.kind,
        state: op.state,
        requested_by: op.requested_by,
        reason: op.reason,
        instance: op.instance,
        params: op.params,
        phase: op.phase,
        created_at_ms: op.created_at_ms,
        updated_at_ms: op.updated_at_ms,
        started_at_ms: op.started_at_ms,
        finished_at_ms: op.finished_at_ms,
        error: op.error,
        moves: MoveCounts {
            total: u32_col(row, "n_total")?,
            pending: u32_col(row, "n_pending")?,
            in_progress: u32_col(row, "n_in_progress")?,
            done: u32_col(row, "n_done")?,
            failed: u32_col(row, "n_failed")?,
            cancelled: u32_col(row, "n_cancelled")?,
        },
    })
}

/// `state IN ($a, $b, ..)` for a set of states.
fn state_in(sql: &mut Sql, states: &[OperationState]) {
    let placeholders: Vec<String> = states
        .iter()
        .map(|s| sql.arg(Arg::Text(s.as_str().to_owned())))
        .collect();
    sql.push(&format!(" AND state IN ({})", placeholders.join(", ")));
}

impl Store {
    /// Creates an operation with its moves (all `pending`), in one transaction with its
    /// `created` history entry.
    pub async fn create_operation(&self, op: &NewOperation) -> Result<Operation, StoreError> {
        if !matches!(op.state, OperationState::Proposed | OperationState::Pending) {
            return Err(StoreError::Invalid(format!(
                "a new operation is proposed or pending, not {}",
                op.state
            )));
        }
        if op.kind == OperationKind::RemoveInstance && op.instance.is_none() {
            return Err(StoreError::Invalid(
                "a remove_instance operation needs an instance".into(),
            ));
        }
        let id = uuid::Uuid::now_v7().to_string();
        let params = serde_json::to_string(&op.params)
            .map_err(|e| StoreError::Invalid(format!("params: {e}")))?;

        let mut tx = self.pool().begin().await?;
        sqlx::query(
            "INSERT INTO operations (id, cluster, kind, state, requested_by, reason, instance, \
             params, created_at_ms, updated_at_ms) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $9)",
        )
        .bind(id.as_str())
        .bind(op.cluster.as_str())
        .bind(op.kind.as_str())
        .bind(op.state.as_str())
        .bind(op.requested_by.as_str())
        .bind(op.reason.as_str())
        .bind(op.instance.as_deref())
        .bind(params.as_str())
        .bind(op.now_ms)
        .execute(&mut *tx)
        .await?;

        for (chunk_no, chunk) in op.moves.chunks(MOVES_PER_INSERT).enumerate() {
            // One statement per number of moves: not kept prepared.
            let mut sql = Sql::new(
                "INSERT INTO moves (operation_id, seq, target, from_instance, to_instance, state, \
                 attempts) VALUES ",
            )
            .one_off();
            let op_id = sql.arg(Arg::Text(id.clone()));
            for (i, m) in chunk.iter().enumerate() {
                let seq = (chunk_no * MOVES_PER_INSERT + i + 1) as i64;
                let seq = sql.arg(Arg::Int(seq));
                let target = sql.arg(Arg::Text(m.target.clone()));
                let from = sql.arg(Arg::OptText(m.from.clone()));
                let to = sql.arg(Arg::Text(m.to.clone()));
                if i > 0 {
                    sql.push(", ");
                }
                sql.push(&format!(
                    "({op_id}, {seq}, {target}, {from}, {to}, 'pending', 0)"
                ));
            }
            sql.execute(&mut tx).await?;
        }

        insert_entry(
            &mut tx,
            HistoryKind::Operation,
            &NewEntry {
                at_ms: op.now_ms,
                cluster: &op.cluster,
                instance: op.instance.as_deref(),
                event: "created",
                operation: Some(&id),
                actor: Some(&op.requested_by),
                detail: Some(&op.reason),
            },
        )
        .await?;
        tx.commit().await?;
        tracing::debug!(operation = %id, cluster = %op.cluster, kind = %op.kind,
            moves = op.moves.len(), "operation created");

        Ok(Operation {
            id,
            cluster: op.cluster.clone(),
            kind: op.kind,
            state: op.state,
            requested_by: op.requested_by.clone(),
            reason: op.reason.clone(),
            instance: op.instance.clone(),
            params: op.params.clone(),
            phase: None,
            created_at_ms: op.now_ms,
            updated_at_ms: op.now_ms,
            started_at_ms: None,
            finished_at_ms: None,
            error: None,
            moves: op
                .moves
                .iter()
                .enumerate()
                .map(|(i, m)| MoveRecord {
                    seq: (i + 1) as u32,
                    target: m.target.clone(),
                    from: m.from.clone(),
                    to: m.to.clone(),
                    state: MoveState::Pending,
                    attempts: 0,
                    started_at_ms: None,
                    finished_at_ms: None,
                    error: None,
                })
                .collect(),
        })
    }

    /// One operation with its moves (in `seq` order).
    pub async fn operation(&self, id: &str) -> Result<Option<Operation>, StoreError> {
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {OP_COLUMNS} FROM operations o WHERE o.id = $1"
        )))
        .bind(id)
        .fetch_optional(self.pool())
        .await?;
        let Some(row) = row else { return Ok(None) };
        let mut op = operation_from_row(&row)?;
        op.moves = sqlx::query(sqlx::AssertSqlSafe(format!(
            "{MOVE_COLUMNS} WHERE operation_id = $1 ORDER BY seq"
        )))
        .bind(id)
        .fetch_all(self.pool())
        .await?
        .iter()
        .map(move_from_row)
        .collect::<Result<_, _>>()?;
        Ok(Some(op))
    }

    /// Lists operations, newest first (by creation time), with move counts.
    pub async fn operations(
        &self,
        q: &OperationQuery,
    ) -> Result<Page<OperationSummary>, StoreError> {
        let limit = clamp_limit(q.limit);
        let mut sql = Sql::new(&format!(
            "SELECT {OP_COLUMNS}, \
             COUNT(m.seq) AS n_total, \
             COUNT(CASE WHEN m.state = 'pending' THEN 1 END) AS n_pending, \
             COUNT(CASE WHEN m.state = 'in_progress' THEN 1 END) AS n_in_progress, \
             COUNT(CASE WHEN m.state = 'done' THEN 1 END) AS n_done, \
             COUNT(CASE WHEN m.state = 'failed' THEN 1 END) AS n_failed, \
             COUNT(CASE WHEN m.state = 'cancelled' THEN 1 END) AS n_cancelled \
             FROM operations o LEFT JOIN moves m ON m.operation_id = o.id WHERE 1 = 1"
        ));
        if let Some(cursor) = &q.cursor {
            let key = decode_cursor("o", cursor)?;
            let (at, id) = key.split_once('/').ok_or(StoreError::BadCursor)?;
            let at: i64 = at.parse().map_err(|_| StoreError::BadCursor)?;
            let at = sql.arg(Arg::Int(at));
            let id = sql.arg(Arg::Text(id.to_owned()));
            sql.push(&format!(
                " AND (o.created_at_ms < {at} OR (o.created_at_ms = {at} AND o.id < {id}))"
            ));
        }
        if let Some(cluster) = &q.cluster {
            sql.filter(" AND o.cluster = {}", Arg::Text(cluster.clone()));
        }
        if let Some(state) = q.state {
            sql.filter(" AND o.state = {}", Arg::Text(state.as_str().to_owned()));
        }
        if let Some(kind) = q.kind {
            sql.filter(" AND o.kind = {}", Arg::Text(kind.as_str().to_owned()));
        }
        sql.push(" GROUP BY o.id ORDER BY o.created_at_ms DESC, o.id DESC");
        sql.filter(" LIMIT {}", Arg::Int(limit + 1));

        let rows = sql.fetch_all(self).await?;
        let mut items = rows
            .iter()
            .map(summary_from_row)
            .collect::<Result<Vec<_>, _>>()?;
        let next_cursor = if items.len() as i64 > limit {
            items.truncate(limit as usize);
            items
                .last()
                .map(|o| encode_cursor("o", &format!("{}/{}", o.created_at_ms, o.id)))
        } else {
            None
        };
        Ok(Page { items, next_cursor })
    }

    /// Operations not in a final state (proposed, pending, running) with their moves, oldest
    /// first: what to resume after a restart or a change of acting replica.
    pub async fn unfinished_operations(&self) -> Result<Vec<Operation>, StoreError> {
        let mut ops = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {OP_COLUMNS} FROM operations o WHERE o.state IN {UNFINISHED_SQL} \
             ORDER BY o.created_at_ms, o.id"
        )))
        .fetch_all(self.pool())
        .await?
        .iter()
        .map(operation_from_row)
        .collect::<Result<Vec<_>, _>>()?;
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "{MOVE_COLUMNS} WHERE operation_id IN \
             (SELECT id FROM operations WHERE state IN {UNFINISHED_SQL}) \
             ORDER BY operation_id, seq"
        )))
        .fetch_all(self.pool())
        .await?;
        let mut moves: HashMap<String, Vec<MoveRecord>> = HashMap::new();
        for row in &rows {
            let op_id: String = row.try_get("operation_id")?;
            moves.entry(op_id).or_default().push(move_from_row(row)?);
        }
        for op in &mut ops {
            // An operation created between the two reads has its moves read too; one finished
            // in between keeps an empty list (it is no longer unfinished anyway).
            op.moves = moves.remove(&op.id).unwrap_or_default();
        }
        Ok(ops)
    }

    /// Compare-and-set state change: applies only if the current state is one of `from`
    /// (returns `false` otherwise, or if there is no such operation). Entering `running` sets
    /// `started_at_ms` (once); entering a final state sets `finished_at_ms`, any other state
    /// clears it. `error` replaces the stored error (`None` clears it). Records a history entry
    /// whose event is the new state.
    pub async fn set_operation_state(
        &self,
        id: &str,
        from: &[OperationState],
        to: OperationState,
        error: Option<&str>,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        if from.is_empty() {
            return Ok(false);
        }
        let mut sql = Sql::new("UPDATE operations SET state = ");
        let now = sql.arg(Arg::Int(now_ms));
        let to_arg = sql.arg(Arg::Text(to.as_str().to_owned()));
        sql.push(&format!("{to_arg}, updated_at_ms = {now}"));
        if to == OperationState::Running {
            sql.push(&format!(", started_at_ms = COALESCE(started_at_ms, {now})"));
        }
        if to.is_final() {
            sql.push(&format!(", finished_at_ms = {now}"));
        } else {
            sql.push(", finished_at_ms = NULL");
        }
        let error_arg = sql.arg(Arg::OptText(error.map(str::to_owned)));
        sql.push(&format!(", error = {error_arg}"));
        sql.filter(" WHERE id = {}", Arg::Text(id.to_owned()));
        state_in(&mut sql, from);
        sql.push(" RETURNING cluster, instance");

        let mut tx = self.pool().begin().await?;
        let Some(row) = sql.fetch_optional(&mut tx).await? else {
            tx.rollback().await?;
            return Ok(false);
        };
        let cluster: String = row.try_get("cluster")?;
        let instance: Option<String> = row.try_get("instance")?;
        insert_entry(
            &mut tx,
            HistoryKind::Operation,
            &NewEntry {
                at_ms: now_ms,
                cluster: &cluster,
                instance: instance.as_deref(),
                event: to.as_str(),
                operation: Some(id),
                actor: None,
                detail: error,
            },
        )
        .await?;
        tx.commit().await?;
        tracing::debug!(operation = %id, state = %to, "operation state changed");
        Ok(true)
    }

    /// Sets the remove-instance progress marker (`cordoned`, `drained`, `webhook_called`,
    /// `pod_deleted`, `leases_cleaned`, ...) so a resumed operation skips what is done. Records a
    /// history entry (`event` = `phase`, `detail` = the phase).
    pub async fn set_operation_phase(
        &self,
        id: &str,
        phase: &str,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        let mut tx = self.pool().begin().await?;
        let row = sqlx::query(
            "UPDATE operations SET phase = $1, updated_at_ms = $2 WHERE id = $3 \
             RETURNING cluster, instance",
        )
        .bind(phase)
        .bind(now_ms)
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else {
            tx.rollback().await?;
            return Err(StoreError::NotFound(format!("operation {id}")));
        };
        let cluster: String = row.try_get("cluster")?;
        let instance: Option<String> = row.try_get("instance")?;
        insert_entry(
            &mut tx,
            HistoryKind::Operation,
            &NewEntry {
                at_ms: now_ms,
                cluster: &cluster,
                instance: instance.as_deref(),
                event: "phase",
                operation: Some(id),
                actor: None,
                detail: Some(phase),
            },
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Updates one move. Entering `in_progress` sets `started_at_ms` (once); entering a final
    /// state sets `finished_at_ms`. `error` replaces the stored error.
    pub async fn update_move(
        &self,
        op_id: &str,
        seq: u32,
        state: MoveState,
        attempts: u32,
        error: Option<&str>,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        let mut sql = Sql::new("UPDATE moves SET state = ");
        let now = sql.arg(Arg::Int(now_ms));
        let st = sql.arg(Arg::Text(state.as_str().to_owned()));
        let att = sql.arg(Arg::Int(i64::from(attempts)));
        sql.push(&format!("{st}, attempts = {att}"));
        if state == MoveState::InProgress {
            sql.push(&format!(", started_at_ms = COALESCE(started_at_ms, {now})"));
        }
        if state.is_final() {
            sql.push(&format!(", finished_at_ms = {now}"));
        } else {
            sql.push(", finished_at_ms = NULL");
        }
        let error_arg = sql.arg(Arg::OptText(error.map(str::to_owned)));
        sql.push(&format!(", error = {error_arg}"));
        sql.filter(" WHERE operation_id = {}", Arg::Text(op_id.to_owned()));
        sql.filter(" AND seq = {}", Arg::Int(i64::from(seq)));
        let mut conn = self.pool().acquire().await?;
        if sql.execute(&mut conn).await? == 0 {
            return Err(StoreError::NotFound(format!(
                "move {seq} of operation {op_id}"
            )));
        }
        Ok(())
    }

    /// Cancels an operation that is proposed, pending or running: in one transaction its state
    /// becomes `cancelled`, its `pending` moves become `cancelled` (done, failed and in-progress
    /// moves keep their state), and a history entry names who cancelled. Returns `false` if it
    /// was already final (or does not exist).
    pub async fn cancel_operation(
        &self,
        id: &str,
        by: &str,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let mut tx = self.pool().begin().await?;
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE operations SET state = 'cancelled', updated_at_ms = $1, finished_at_ms = $1 \
             WHERE id = $2 AND state IN {UNFINISHED_SQL} RETURNING cluster, instance"
        )))
        .bind(now_ms)
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else {
            tx.rollback().await?;
            return Ok(false);
        };
        let cluster: String = row.try_get("cluster")?;
        let instance: Option<String> = row.try_get("instance")?;
        let cancelled = sqlx::query(
            "UPDATE moves SET state = 'cancelled', finished_at_ms = $1 \
             WHERE operation_id = $2 AND state = 'pending'",
        )
        .bind(now_ms)
        .bind(id)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        let detail = format!("{cancelled} pending moves cancelled");
        insert_entry(
            &mut tx,
            HistoryKind::Operation,
            &NewEntry {
                at_ms: now_ms,
                cluster: &cluster,
                instance: instance.as_deref(),
                event: OperationState::Cancelled.as_str(),
                operation: Some(id),
                actor: Some(by),
                detail: Some(&detail),
            },
        )
        .await?;
        tx.commit().await?;
        tracing::debug!(operation = %id, by, "operation cancelled");
        Ok(true)
    }
}

/// Keeps the unfinished-state list in step with the model.
#[cfg(test)]
#[test]
fn unfinished_sql_matches_model() {
    let open: Vec<&str> = OperationState::ALL
        .iter()
        .filter(|s| !s.is_final())
        .map(|s| s.as_str())
        .collect();
    assert_eq!(UNFINISHED_SQL, format!("('{}')", open.join("', '")));
}
