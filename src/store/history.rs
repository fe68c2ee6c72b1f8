//! The history half of the store: one append-only `history` table holding ownership changes,
//! instance events and operation audit entries, its filtered newest-first listing with opaque
//! cursors, the tallies of the bursts a listed page's ownership changes belong to, counted over
//! the whole history ([`bursts`]: a page of 50 rows must not be all a reader can count), each
//! operation's lifecycle (`lifecycles`), a cluster as recorded at a moment ([`as_of`]), and
//! retention (`prune`).
//!
//! It must not: update or delete a history row other than by retention, or interpret what it
//! records (the engine and the index decide what happened; this only writes it down). A burst
//! is plain grouping — same cluster, cause and operation (or source), rows close in time —
//! with the gap given by the caller (the dashboard's story decides what it tells).

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use sqlx::AnyConnection;
use sqlx::Row as _;
use sqlx::any::AnyRow;

use super::{
    Arg, Page, Sql, Store, StoreError, clamp_limit, decode_cursor, encode_cursor, opt_word,
};
use crate::model::{Cause, InstanceEventKind, OperationKind, UnknownWord};

mod as_of;
mod bursts;

/// A target changed hands (or got its first owner, or lost its owner).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnershipChange {
    pub cluster: String,
    pub target: String,
    /// The previous holder (`None`: the target had none).
    pub from: Option<String>,
    /// The new holder (`None`: released, nobody holds it).
    pub to: Option<String>,
    pub cause: Cause,
    /// The operation that asked for the move, if any.
    pub operation: Option<String>,
    /// When Leasehold saw the change (unix ms).
    pub at_ms: i64,
    /// The Lease's `acquireTime` (unix ms). With it, the same change recorded twice (two replicas
    /// around a leadership change) is stored once: the key is (cluster, target, to, acquired_at).
    pub acquired_at_ms: Option<i64>,
    /// For a move between members: how long (ms) the target had nobody working on it, as the
    /// control plane observed it — from the previous holder's release, or its last sign of
    /// life for a failover, to the new holder's acquire (see `docs/api.md`, "Handoff gap").
    /// `None` for a first owner, a release, or when not known.
    #[serde(default)]
    pub gap_ms: Option<i64>,
    /// An overlap hand-off (scrapers): how it went, and for a proven one the overlap in ms
    /// (the new holder's app proven working → the old holder's proven stopped, by the two
    /// members' clocks; [`crate::protocol::overlap_of`]).
    #[serde(default)]
    pub overlap: Option<(crate::model::Overlap, Option<i64>)>,
}

/// Something happened to a member instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceEvent {
    pub cluster: String,
    pub instance: String,
    pub kind: InstanceEventKind,
    pub at_ms: i64,
    pub detail: Option<String>,
}

/// The kinds of history entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum HistoryKind {
    /// An [`OwnershipChange`].
    Ownership,
    /// An [`InstanceEvent`] (including cordon/uncordon, with the actor).
    Instance,
    /// An operation's lifecycle: `event` is `created`, `phase` (detail: the phase), or the
    /// state it entered (`running`, `succeeded`, `failed`, `cancelled`, ...).
    Operation,
    /// A mutating API request: `event` says what was asked, `actor` who, `detail` the result.
    Audit,
}

impl HistoryKind {
    pub fn as_str(self) -> &'static str {
        match self {
            HistoryKind::Ownership => "ownership",
            HistoryKind::Instance => "instance",
            HistoryKind::Operation => "operation",
            HistoryKind::Audit => "audit",
        }
    }
}

impl fmt::Display for HistoryKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for HistoryKind {
    type Err = UnknownWord;
    fn from_str(s: &str) -> Result<Self, UnknownWord> {
        match s {
            "ownership" => Ok(HistoryKind::Ownership),
            "instance" => Ok(HistoryKind::Instance),
            "operation" => Ok(HistoryKind::Operation),
            "audit" => Ok(HistoryKind::Audit),
            _ => Err(UnknownWord {
                kind: "HistoryKind",
                word: s.to_owned(),
            }),
        }
    }
}

/// Which history entries to list. Every filter set must match. Times: `since_ms` inclusive,
/// `until_ms` exclusive.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::IntoParams)]
#[serde(default)]
#[into_params(parameter_in = Query)]
pub struct HistoryQuery {
    /// Only this cluster's.
    pub cluster: Option<String>,
    /// Only about this target.
    pub target: Option<String>,
    /// Matches an ownership change's `from` or `to`, or the instance of an instance or
    /// operation entry.
    pub instance: Option<String>,
    /// Only entries of this kind.
    pub kind: Option<HistoryKind>,
    /// Only entries of this operation: its lifecycle, the moves it made, its audit.
    pub operation: Option<String>,
    /// Only at or after this time (unix ms).
    pub since_ms: Option<i64>,
    /// Only before this time (unix ms).
    pub until_ms: Option<i64>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
    /// Page size: 0 means 100 (`DEFAULT_PAGE`), at most 1000 (`MAX_PAGE`).
    pub limit: u32,
}

/// One history row. Which fields are set depends on `kind`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct HistoryEntry {
    /// Increasing in insertion order; listings are newest (highest) first.
    pub id: i64,
    pub at_ms: i64,
    pub kind: HistoryKind,
    pub cluster: String,
    pub target: Option<String>,
    /// The instance of an instance event, or the instance a remove-instance operation removes.
    pub instance: Option<String>,
    pub from: Option<String>,
    pub to: Option<String>,
    pub cause: Option<Cause>,
    /// Instance events: the [`InstanceEventKind`] word; operations: see [`HistoryKind::Operation`].
    pub event: Option<String>,
    pub operation: Option<String>,
    /// Who asked (operations, cordons).
    pub actor: Option<String>,
    pub detail: Option<String>,
    pub acquired_at_ms: Option<i64>,
    /// Ownership changes between members: the handoff gap (ms) as the control plane observed
    /// it (see [`OwnershipChange::gap_ms`]); absent when not known.
    pub gap_ms: Option<i64>,
    /// Ownership changes by an overlap hand-off: `proven` (the new owner's app was proven to
    /// work on the target before the old owner's stopped) or `unproven` (not within the
    /// bound: the old owner's stopped first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlap: Option<crate::model::Overlap>,
    /// A proven overlap hand-off: how long (ms) both apps worked on the target, from the new
    /// owner's proven start to the hand-over written after the old one's proven stop (two
    /// members' clocks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlap_ms: Option<i64>,
    /// A hand-over whose old holder's app proves its stops: the work-level gap (ms) from its
    /// app's last work on the target to the new holder's app's first (the scrape kind: the two
    /// scrapers' last and first scrapes; two pods' clocks), once the new holder reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub work_gap_ms: Option<i64>,
}

/// Appends the filters of `q` that choose what is listed: cluster, target, instance, kind,
/// operation (not where or when: the cursor and the time bounds are the caller's).
fn what(sql: &mut Sql, q: &HistoryQuery) {
    if let Some(cluster) = &q.cluster {
        sql.filter(" AND cluster = {}", Arg::Text(cluster.clone()));
    }
    if let Some(target) = &q.target {
        sql.filter(" AND target = {}", Arg::Text(target.clone()));
    }
    if let Some(instance) = &q.instance {
        sql.filter(
            " AND (instance = {} OR from_instance = {} OR to_instance = {})",
            Arg::Text(instance.clone()),
        );
    }
    if let Some(kind) = q.kind {
        sql.filter(" AND kind = {}", Arg::Text(kind.as_str().to_owned()));
    }
    if let Some(operation) = &q.operation {
        sql.filter(" AND operation_id = {}", Arg::Text(operation.clone()));
    }
}

/// An instance or operation entry about to be written (ownership changes have their own insert).
#[derive(Debug, Clone, Default)]
pub(super) struct NewEntry<'a> {
    pub at_ms: i64,
    pub cluster: &'a str,
    pub instance: Option<&'a str>,
    pub event: &'a str,
    pub operation: Option<&'a str>,
    pub actor: Option<&'a str>,
    pub detail: Option<&'a str>,
}

/// Appends one instance (`kind` = instance) or operation entry, on the caller's connection or
/// transaction.
pub(super) async fn insert_entry(
    conn: &mut AnyConnection,
    kind: HistoryKind,
    e: &NewEntry<'_>,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO history (at_ms, kind, cluster, instance, event, operation_id, actor, detail) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bind(e.at_ms)
    .bind(kind.as_str())
    .bind(e.cluster)
    .bind(e.instance)
    .bind(e.event)
    .bind(e.operation)
    .bind(e.actor)
    .bind(e.detail)
    .execute(conn)
    .await?;
    Ok(())
}

/// Rows per statement in [`Store::record_ownerships`]: 9 parameters a row, far below either
/// database's limit on parameters (SQLite 32,766; PostgreSQL 65,535).
pub(super) const OWNERSHIP_ROWS_PER_STATEMENT: usize = 500;

/// Whether an ownership insert of `rows` rows is kept prepared per connection. Each number of
/// rows is its own statement; only the two common ones (a single change, a full chunk) are
/// kept: keeping every size of a burst's last chunk filled each connection's statement cache
/// (100 entries) with programs of up to 4,500 parameters, about 26 MB of SQLite's memory at
/// 50,000 targets (heaptrack, docs/benchmarks.md).
pub(super) fn keep_prepared(rows: usize) -> bool {
    rows == 1 || rows == OWNERSHIP_ROWS_PER_STATEMENT
}

pub(super) const FINAL_STATES_SQL: &str = "('succeeded', 'failed', 'cancelled')";

const ENTRY_COLUMNS: &str = "SELECT id, at_ms, kind, cluster, target, instance, from_instance, \
     to_instance, cause, event, operation_id, actor, detail, acquired_at_ms, gap_ms, overlap, overlap_ms, work_gap_ms FROM history \
     WHERE 1 = 1";

fn entry_from_row(row: &AnyRow) -> Result<HistoryEntry, StoreError> {
    let kind: String = row.try_get("kind")?;
    Ok(HistoryEntry {
        id: row.try_get("id")?,
        at_ms: row.try_get("at_ms")?,
        kind: kind.parse()?,
        cluster: row.try_get("cluster")?,
        target: row.try_get("target")?,
        instance: row.try_get("instance")?,
        from: row.try_get("from_instance")?,
        to: row.try_get("to_instance")?,
        cause: opt_word(row, "cause")?,
        event: row.try_get("event")?,
        operation: row.try_get("operation_id")?,
        actor: row.try_get("actor")?,
        detail: row.try_get("detail")?,
        acquired_at_ms: row.try_get("acquired_at_ms")?,
        gap_ms: row.try_get("gap_ms")?,
        overlap: opt_word(row, "overlap")?,
        overlap_ms: row.try_get("overlap_ms")?,
        work_gap_ms: row.try_get("work_gap_ms")?,
    })
}

impl Store {
    /// Records an ownership change. Idempotent when `acquired_at_ms` is set: the same
    /// (cluster, target, to, acquired_at_ms) is stored once. Returns whether it was new.
    pub async fn record_ownership(&self, c: &OwnershipChange) -> Result<bool, StoreError> {
        Ok(self.record_ownerships(std::slice::from_ref(c)).await? == 1)
    }

    /// Records ownership changes in order, as [`Store::record_ownership`] does one, in as few
    /// statements as it can (a burst — a first placement, a failover — costs one round trip
    /// per 500 rows, not one per row). Returns how many were new.
    pub async fn record_ownerships(&self, changes: &[OwnershipChange]) -> Result<u64, StoreError> {
        const COLUMNS: usize = 11;
        let mut new = 0;
        for chunk in changes.chunks(OWNERSHIP_ROWS_PER_STATEMENT) {
            let rows: Vec<String> = (0..chunk.len())
                .map(|r| {
                    let p: Vec<String> = (1..=COLUMNS)
                        .map(|c| format!("${}", r * COLUMNS + c))
                        .collect();
                    format!("({}, 'ownership', {})", p[0], p[1..].join(", "))
                })
                .collect();
            let sql = format!(
                "INSERT INTO history \
                 (at_ms, kind, cluster, target, from_instance, to_instance, cause, operation_id, \
                  acquired_at_ms, gap_ms, overlap, overlap_ms) \
                 VALUES {} ON CONFLICT DO NOTHING",
                rows.join(", ")
            );
            let keep = keep_prepared(chunk.len());
            let mut q = sqlx::query(sqlx::AssertSqlSafe(sql)).persistent(keep);
            for c in chunk {
                q = q
                    .bind(c.at_ms)
                    .bind(c.cluster.clone())
                    .bind(c.target.clone())
                    .bind(c.from.clone())
                    .bind(c.to.clone())
                    .bind(c.cause.as_str())
                    .bind(c.operation.clone())
                    .bind(c.acquired_at_ms)
                    .bind(c.gap_ms)
                    .bind(c.overlap.map(|(o, _)| o.as_str()))
                    .bind(c.overlap.and_then(|(_, ms)| ms));
            }
            new += q.execute(self.pool()).await?.rows_affected();
        }
        Ok(new)
    }

    /// Fills in the work-level gap of `target`'s newest ownership change, if that change gave
    /// it to `to` and has none yet (see [`HistoryEntry::work_gap_ms`]). Returns whether a row
    /// took it; idempotent.
    pub async fn record_work_gap(
        &self,
        cluster: &str,
        target: &str,
        to: &str,
        gap_ms: i64,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE history SET work_gap_ms = $1 WHERE work_gap_ms IS NULL AND to_instance = $2 \
             AND id = (SELECT MAX(id) FROM history WHERE kind = 'ownership' AND cluster = $3 \
             AND target = $4)",
        )
        .bind(gap_ms)
        .bind(to)
        .bind(cluster)
        .bind(target)
        .execute(self.pool())
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Records a mutating API request: `actor` asked for `what` on `cluster`; `result` is
    /// `ok` or the error shown to the caller.
    pub async fn record_audit(
        &self,
        cluster: &str,
        actor: &str,
        what: &str,
        result: &str,
        operation: Option<&str>,
        at_ms: i64,
    ) -> Result<(), StoreError> {
        let mut conn = self.pool().acquire().await?;
        insert_entry(
            &mut conn,
            HistoryKind::Audit,
            &NewEntry {
                at_ms,
                cluster,
                instance: None,
                event: what,
                operation,
                actor: Some(actor),
                detail: Some(result),
            },
        )
        .await
    }

    /// Records an instance event (cordon and uncordon events also come from
    /// [`Store::set_cordon`], with the actor).
    pub async fn record_instance_event(&self, e: &InstanceEvent) -> Result<(), StoreError> {
        let mut conn = self.pool().acquire().await?;
        insert_entry(
            &mut conn,
            HistoryKind::Instance,
            &NewEntry {
                at_ms: e.at_ms,
                cluster: &e.cluster,
                instance: Some(&e.instance),
                event: e.kind.as_str(),
                detail: e.detail.as_deref(),
                ..NewEntry::default()
            },
        )
        .await
    }

    /// Records a member's overrun report (an instance event of kind `overrun`); a report
    /// already recorded (same cluster, member and time: another replica, or a restart that
    /// read it again) is not stored twice. Whether it was new.
    pub async fn record_overrun(&self, e: &InstanceEvent) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "INSERT INTO history (at_ms, kind, cluster, instance, event, detail) \
             VALUES ($1, 'instance', $2, $3, $4, $5) \
             ON CONFLICT DO NOTHING",
        )
        .bind(e.at_ms)
        .bind(e.cluster.as_str())
        .bind(e.instance.as_str())
        .bind(e.kind.as_str())
        .bind(e.detail.as_deref())
        .execute(self.pool())
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Lists history entries, newest first, one page at a time.
    pub async fn history(&self, q: &HistoryQuery) -> Result<Page<HistoryEntry>, StoreError> {
        let limit = clamp_limit(q.limit);
        let mut sql = Sql::new(ENTRY_COLUMNS);
        if let Some(cursor) = &q.cursor {
            let last: i64 = decode_cursor("h", cursor)?
                .parse()
                .map_err(|_| StoreError::BadCursor)?;
            sql.filter(" AND id < {}", Arg::Int(last));
        }
        what(&mut sql, q);
        if let Some(since) = q.since_ms {
            sql.filter(" AND at_ms >= {}", Arg::Int(since));
        }
        if let Some(until) = q.until_ms {
            sql.filter(" AND at_ms < {}", Arg::Int(until));
        }
        sql.push(" ORDER BY id DESC");
        sql.filter(" LIMIT {}", Arg::Int(limit + 1));

        let rows = sql.fetch_all(self).await?;
        let mut items = rows
            .iter()
            .map(entry_from_row)
            .collect::<Result<Vec<_>, _>>()?;
        let next_cursor = if items.len() as i64 > limit {
            items.truncate(limit as usize);
            items.last().map(|e| encode_cursor("h", &e.id.to_string()))
        } else {
            None
        };
        Ok(Page { items, next_cursor })
    }

    /// Each of `operations` with its kind (while the operation itself is kept), every step of
    /// its lifecycle history keeps (its `operation` entries: created, the states it entered,
    /// its phases), oldest first, and how many ownership changes history keeps of it (every
    /// one, whatever a listing filters); bounded reads per operation (by its index). An
    /// operation of which nothing is kept is absent.
    pub async fn lifecycles(
        &self,
        operations: &[&str],
    ) -> Result<HashMap<String, (Option<OperationKind>, Vec<HistoryEntry>, u64)>, StoreError> {
        let mut out = HashMap::new();
        for op in operations {
            if out.contains_key(*op) {
                continue;
            }
            let mut sql = Sql::new(ENTRY_COLUMNS);
            sql.filter(
                " AND operation_id = {} AND kind = 'operation' ORDER BY id",
                Arg::Text((*op).to_owned()),
            );
            let steps = sql
                .fetch_all(self)
                .await?
                .iter()
                .map(entry_from_row)
                .collect::<Result<Vec<_>, _>>()?;
            let mut kind = Sql::new("SELECT kind FROM operations WHERE 1 = 1");
            kind.filter(" AND id = {}", Arg::Text((*op).to_owned()));
            let kind = match kind.fetch_all(self).await?.first() {
                Some(row) => Some(super::word::<OperationKind>(row, "kind")?),
                None => None,
            };
            let mut moved = Sql::new("SELECT COUNT(*) AS n FROM history WHERE kind = 'ownership'");
            moved.filter(" AND operation_id = {}", Arg::Text((*op).to_owned()));
            let moved = match moved.fetch_all(self).await?.first() {
                Some(row) => {
                    let n: i64 = row.try_get("n")?;
                    u64::try_from(n).map_err(|_| StoreError::Corrupt(format!("count {n}")))?
                }
                None => 0,
            };
            if kind.is_some() || !steps.is_empty() || moved > 0 {
                out.insert((*op).to_owned(), (kind, steps, moved));
            }
        }
        Ok(out)
    }

    /// Retention: deletes history entries with `at_ms` before the cutoff, and operations (with
    /// their moves) that finished before it. Unfinished operations are kept whatever their age.
    /// Returns the history entries plus operations removed (moves are not counted).
    pub async fn prune(&self, older_than_ms: i64) -> Result<u64, StoreError> {
        let mut tx = self.pool().begin().await?;
        let history = sqlx::query("DELETE FROM history WHERE at_ms < $1")
            .bind(older_than_ms)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        let old_ops = format!(
            "SELECT id FROM operations WHERE finished_at_ms < $1 AND state IN {FINAL_STATES_SQL}"
        );
        let moves = sqlx::query(sqlx::AssertSqlSafe(format!(
            "DELETE FROM moves WHERE operation_id IN ({old_ops})"
        )))
        .bind(older_than_ms)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        let operations = sqlx::query(sqlx::AssertSqlSafe(format!(
            "DELETE FROM operations WHERE id IN ({old_ops})"
        )))
        .bind(older_than_ms)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        tx.commit().await?;
        tracing::debug!(
            cutoff_ms = older_than_ms,
            history,
            operations,
            moves,
            "pruned history"
        );
        Ok(history + operations)
    }
}

/// Keeps the final-state list in step with the model.
#[cfg(test)]
#[test]
fn final_states_sql_matches_model() {
    use crate::model::OperationState;
    let finals: Vec<&str> = OperationState::ALL
        .iter()
        .filter(|s| s.is_final())
        .map(|s| s.as_str())
        .collect();
    assert_eq!(
        FINAL_STATES_SQL,
        format!("('{}')", finals.join("', '")),
        "FINAL_STATES_SQL is out of date"
    );
}
