//! Bursts of ownership changes, counted over the whole history: for the changes on one page of
//! a listing, the bursts they belong to (an operation's changes, or one source's close in
//! time) with how many changes each holds, to whom, over what span and with what longest gap
//! — as many as the whole history holds that the listing's filters match, never only the
//! page's. The dashboard's stories are told from them.
//!
//! It must not: read a source's whole history to find a burst (every query is bounded by an
//! index: an operation's changes, or one source's within an id range that widens only while a
//! burst reaches past it), or decide what a burst means (the caller gives the gap and tells
//! it).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use sqlx::Row as _;

use super::super::{Arg, Sql, Store, StoreError};
use super::{HistoryEntry, HistoryKind, HistoryQuery, what};
use crate::model::Cause;

/// Ownership changes that belong together, tallied over the whole history by
/// [`Store::bursts`]. Changes of one cluster with one cause are one burst when they share an
/// operation (all of its changes, however far apart in time), or — without an operation —
/// when they left the same member (or nobody) and, in the order recorded (by `id`), each was
/// seen within the burst gap of the one before it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Burst {
    pub cluster: String,
    pub cause: Cause,
    pub operation: Option<String>,
    /// The member every counted change left, when they all left the same one (`None`: they
    /// left nobody, or — in an operation — several members).
    pub from: Option<String>,
    /// The counted changes by new holder (`None`: released), most first, then by name.
    pub to: Vec<(Option<String>, u64)>,
    /// When the oldest counted change was seen.
    pub first_ms: i64,
    /// When the newest counted change was seen.
    pub last_ms: i64,
    /// The longest handoff gap among the counted changes, when any is known.
    pub longest_gap_ms: Option<i64>,
    /// Who asked for the operation (the actor of its `created` entry), when it is kept.
    pub by: Option<String>,
    /// The ids of the given rows that are in it, ascending.
    pub rows: Vec<i64>,
}

impl Burst {
    /// How many changes are counted.
    pub fn count(&self) -> u64 {
        self.to.iter().map(|(_, n)| n).sum()
    }
}

/// Where bursts without an operation come from: the changes of one cluster with one cause
/// that left one member (`None`: nobody).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Source<'a> {
    cluster: &'a str,
    cause: Cause,
    from: Option<&'a str>,
}

impl Source<'_> {
    /// Appends ` AND` this source's changes.
    fn only(&self, sql: &mut Sql) {
        sql.push(" AND kind = 'ownership' AND operation_id IS NULL");
        sql.filter(" AND cluster = {}", Arg::Text(self.cluster.to_owned()));
        sql.filter(" AND cause = {}", Arg::Text(self.cause.as_str().to_owned()));
        match self.from {
            Some(from) => sql.filter(" AND from_instance = {}", Arg::Text(from.to_owned())),
            None => sql.push(" AND from_instance IS NULL"),
        };
    }
}

/// A change of a source: its id and when it was seen.
#[derive(Debug, Clone, Copy)]
struct Seen {
    id: i64,
    at_ms: i64,
}

/// A source's changes with ids in one range: where bursts start among them (the first, and
/// every one seen more than the gap after the one before), and the last.
struct Scan {
    starts: Vec<Seen>,
    last: Seen,
}

/// Counts one burst's changes by new holder (with `what`'s filters appended before the
/// grouping).
const TALLY: &str = "SELECT to_instance, COUNT(*) AS n, MIN(at_ms) AS first_ms, \
     MAX(at_ms) AS last_ms, MAX(gap_ms) AS gap, MIN(COALESCE(from_instance, '')) AS from_lo, \
     MAX(COALESCE(from_instance, '')) AS from_hi FROM history WHERE 1 = 1";

/// How far (in ids), at least, a scan widened to find a burst's ends first reaches past the
/// change found just outside it (each widening then reaches twice as far): ids are shared by
/// every cluster and kind of row, and this many keeps a burst of a few hundred changes among
/// others to a scan or two, without reading far past a small one.
const FIRST_REACH: i64 = 1024;

impl Store {
    /// The bursts (see [`Burst`]) that the ownership changes among `rows` belong to, each
    /// tallied over every change of it in the whole history that `q`'s filters of what to list
    /// (cluster, target, instance, kind, operation) match — not only over `rows`, nor within
    /// `q`'s cursor or time bounds: `rows` is a page `q` listed, and a burst is counted whole
    /// whatever the page holds of it. Without an operation, changes seen more than `gap_ms`
    /// after the one before them are not one burst. Rows of other kinds are in none; bursts
    /// come newest first. Each query is bounded by an index (an operation's changes; one
    /// source's within an id range that widens only while a burst reaches past it), so the
    /// cost follows the bursts' size, not the length of the history.
    pub async fn bursts(
        &self,
        q: &HistoryQuery,
        rows: &[HistoryEntry],
        gap_ms: i64,
    ) -> Result<Vec<Burst>, StoreError> {
        let mut ops: BTreeMap<(&str, &str, Cause), Vec<i64>> = BTreeMap::new();
        let mut sources: BTreeMap<Source, Vec<i64>> = BTreeMap::new();
        for e in rows.iter().filter(|e| e.kind == HistoryKind::Ownership) {
            let Some(cause) = e.cause else { continue };
            match &e.operation {
                Some(op) => ops.entry((&e.cluster, op, cause)).or_default().push(e.id),
                None => sources
                    .entry(Source {
                        cluster: &e.cluster,
                        cause,
                        from: e.from.as_deref(),
                    })
                    .or_default()
                    .push(e.id),
            }
        }
        let by = self.requested_by(ops.keys().map(|(_, op, _)| *op)).await?;
        let mut out = Vec::new();
        for ((cluster, op, cause), mut ids) in ops {
            ids.sort_unstable();
            let mut sql = Sql::new(TALLY);
            sql.push(" AND kind = 'ownership'");
            sql.filter(" AND cluster = {}", Arg::Text(cluster.to_owned()));
            sql.filter(" AND operation_id = {}", Arg::Text(op.to_owned()));
            sql.filter(" AND cause = {}", Arg::Text(cause.as_str().to_owned()));
            let burst = Burst {
                cluster: cluster.to_owned(),
                cause,
                operation: Some(op.to_owned()),
                from: None,
                by: by.get(op).cloned(),
                rows: ids,
                to: Vec::new(),
                first_ms: 0,
                last_ms: 0,
                longest_gap_ms: None,
            };
            out.extend(self.tally(sql, q, burst, None).await?);
        }
        for (source, mut ids) in sources {
            ids.sort_unstable();
            for (first, last, ids) in self.source_bursts(&source, &ids, gap_ms).await? {
                let mut sql = Sql::new(TALLY);
                source.only(&mut sql);
                sql.filter(" AND id >= {}", Arg::Int(first));
                sql.filter(" AND id <= {}", Arg::Int(last));
                let burst = Burst {
                    cluster: source.cluster.to_owned(),
                    cause: source.cause,
                    operation: None,
                    from: None,
                    by: None,
                    rows: ids,
                    to: Vec::new(),
                    first_ms: 0,
                    last_ms: 0,
                    longest_gap_ms: None,
                };
                out.extend(self.tally(sql, q, burst, Some(source.from)).await?);
            }
        }
        out.sort_by_key(|b| std::cmp::Reverse(b.rows.last().copied()));
        Ok(out)
    }

    /// `burst` (its rows and names) with the counts of `sql` ([`TALLY`] over its changes)
    /// where `q` matches; `None` when none does. `from`: the source all its changes left, or
    /// `None` to tell it from the changes (one member, or several).
    async fn tally(
        &self,
        mut sql: Sql,
        q: &HistoryQuery,
        mut burst: Burst,
        from: Option<Option<&str>>,
    ) -> Result<Option<Burst>, StoreError> {
        what(&mut sql, q);
        sql.push(" GROUP BY to_instance");
        let mut sources = BTreeSet::new();
        for row in sql.fetch_all(self).await? {
            let n: i64 = row.try_get("n")?;
            let first: i64 = row.try_get("first_ms")?;
            let last: i64 = row.try_get("last_ms")?;
            let gap: Option<i64> = row.try_get("gap")?;
            sources.insert(row.try_get::<String, _>("from_lo")?);
            sources.insert(row.try_get::<String, _>("from_hi")?);
            burst.first_ms = if burst.to.is_empty() {
                first
            } else {
                burst.first_ms.min(first)
            };
            burst.last_ms = burst.last_ms.max(last);
            burst.longest_gap_ms = burst.longest_gap_ms.max(gap);
            let n = u64::try_from(n).map_err(|_| StoreError::Corrupt(format!("count {n}")))?;
            burst.to.push((row.try_get("to_instance")?, n));
        }
        if burst.to.is_empty() {
            return Ok(None);
        }
        burst
            .to
            .sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        burst.from = match from {
            Some(from) => from.map(str::to_owned),
            None if sources.len() == 1 => sources.pop_first().filter(|f| !f.is_empty()),
            None => None,
        };
        Ok(Some(burst))
    }

    /// The bursts of `source` that hold its changes `ids` (ascending), each as the ids of its
    /// first and last change with those of `ids` in it. Scans the source's changes from the
    /// first of `ids` to the last, then — while the burst of the first (last) of them reaches
    /// past the scan, its change before (after) the scan seen within `gap_ms` of the scan's
    /// first (last) — the changes further back (on), each time twice as far: every change is
    /// read about once, and the bursts' own changes are about all that is read.
    async fn source_bursts(
        &self,
        source: &Source<'_>,
        ids: &[i64],
        gap_ms: i64,
    ) -> Result<Vec<(i64, i64, Vec<i64>)>, StoreError> {
        let (Some(&first), Some(&last)) = (ids.first(), ids.last()) else {
            return Ok(Vec::new());
        };
        let Some(mut scan) = self.scan(source, first, last, gap_ms).await? else {
            // Gone since they were listed (retention).
            return Ok(Vec::new());
        };
        let (mut lo, mut hi) = (first, last);
        let mut reach = (last - first).max(FIRST_REACH);
        loop {
            let mut wider = false;
            let start = scan.starts[0];
            if !scan.starts[1..].iter().any(|s| s.id <= first)
                && let Some(before) = self.next_of(source, start.id, false).await?
                && start.at_ms - before.at_ms <= gap_ms
                && let Some(earlier) = self.scan(source, before.id - reach, lo - 1, gap_ms).await?
            {
                // The scan's first change continues the burst before it.
                let mut starts = earlier.starts;
                starts.extend_from_slice(&scan.starts[1..]);
                scan.starts = starts;
                lo = before.id - reach;
                wider = true;
            }
            if !scan.starts.iter().any(|s| s.id > last)
                && let Some(after) = self.next_of(source, scan.last.id, true).await?
                && after.at_ms - scan.last.at_ms <= gap_ms
                && let Some(later) = self.scan(source, hi + 1, after.id + reach, gap_ms).await?
            {
                // The first change after the scan continues its last burst.
                scan.starts.extend_from_slice(&later.starts[1..]);
                scan.last = later.last;
                hi = after.id + reach;
                wider = true;
            }
            if !wider {
                break;
            }
            reach = reach.saturating_mul(2);
        }
        let mut out: Vec<(i64, i64, Vec<i64>)> = Vec::new();
        for &id in ids {
            let k = scan
                .starts
                .partition_point(|s| s.id <= id)
                .saturating_sub(1);
            let start = scan.starts[k].id;
            let end = scan.starts.get(k + 1).map_or(scan.last.id, |s| s.id - 1);
            match out.last_mut() {
                Some((s, _, held)) if *s == start => held.push(id),
                _ => out.push((start, end, vec![id])),
            }
        }
        Ok(out)
    }

    /// `source`'s changes with ids from `lo` to `hi` as a [`Scan`]; `None` when there are none.
    async fn scan(
        &self,
        source: &Source<'_>,
        lo: i64,
        hi: i64,
        gap_ms: i64,
    ) -> Result<Option<Scan>, StoreError> {
        let mut sql = Sql::new(
            "SELECT id, at_ms, d, next FROM (SELECT id, at_ms, \
             at_ms - LAG(at_ms) OVER (ORDER BY id) AS d, LEAD(id) OVER (ORDER BY id) AS next \
             FROM history WHERE 1 = 1",
        );
        source.only(&mut sql);
        sql.filter(" AND id >= {}", Arg::Int(lo));
        sql.filter(" AND id <= {}", Arg::Int(hi));
        sql.filter(
            ") AS s WHERE d IS NULL OR d > {} OR next IS NULL ORDER BY id",
            Arg::Int(gap_ms),
        );
        let mut starts = Vec::new();
        let mut last = None;
        for row in sql.fetch_all(self).await? {
            let seen = Seen {
                id: row.try_get("id")?,
                at_ms: row.try_get("at_ms")?,
            };
            let d: Option<i64> = row.try_get("d")?;
            if d.is_none_or(|d| d > gap_ms) {
                starts.push(seen);
            }
            if row.try_get::<Option<i64>, _>("next")?.is_none() {
                last = Some(seen);
            }
        }
        Ok(last.map(|last| Scan { starts, last }))
    }

    /// `source`'s change just before the one with id `id` (`after`: just after).
    async fn next_of(
        &self,
        source: &Source<'_>,
        id: i64,
        after: bool,
    ) -> Result<Option<Seen>, StoreError> {
        let mut sql = Sql::new("SELECT id, at_ms FROM history WHERE 1 = 1");
        source.only(&mut sql);
        if after {
            sql.filter(" AND id > {} ORDER BY id LIMIT 1", Arg::Int(id));
        } else {
            sql.filter(" AND id < {} ORDER BY id DESC LIMIT 1", Arg::Int(id));
        }
        let rows = sql.fetch_all(self).await?;
        rows.first()
            .map(|row| {
                Ok(Seen {
                    id: row.try_get("id")?,
                    at_ms: row.try_get("at_ms")?,
                })
            })
            .transpose()
    }

    /// Who asked for `operations`: the actor of each one's `created` entry, where kept.
    async fn requested_by(
        &self,
        operations: impl Iterator<Item = &str>,
    ) -> Result<HashMap<String, String>, StoreError> {
        let mut by = HashMap::new();
        for op in operations.collect::<BTreeSet<_>>() {
            let mut sql = Sql::new(
                "SELECT actor FROM history WHERE kind = 'operation' AND event = 'created' \
                 AND actor IS NOT NULL",
            );
            sql.filter(" AND operation_id = {} LIMIT 1", Arg::Text(op.to_owned()));
            if let Some(row) = sql.fetch_all(self).await?.first() {
                by.insert(op.to_owned(), row.try_get("actor")?);
            }
        }
        Ok(by)
    }
}
