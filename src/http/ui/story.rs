//! Recent events told as a story: ownership changes that belong together — the moves of one
//! operation, or the targets one member lost for one cause (a failover, a hand-off), or that
//! nobody held before (placed), each within a minute of the one before — become one line
//! ("20 targets left c-2 (handoff) for c-0 (10) and c-1 (10) in 0.12 s · longest gap 41 ms"),
//! expandable to the moves at hand; everything else stays a line of its own. Changes are told
//! together only within one cluster and one cause. The cluster page's recent events, an
//! instance's history and the history page all tell it this way.
//!
//! The numbers a line states are the whole event's, never a page's: [`tell`] asks the store to
//! count each event over the whole history (filtered as the page is, so an instance's page
//! counts its own targets), so the last rows of a 75-target failover on a page of 50 still
//! read "75 targets left". The grouping itself (`told`) is pure: it regroups the rows it is
//! given, newest first, by the events the store counted.
//!
//! It must not: count anything itself from the rows of a page ([`lines`], which does, is for
//! rows that are the whole history of what they show).

use std::collections::HashMap;

use crate::model::Cause;
use crate::store::{HistoryEntry, HistoryKind, HistoryQuery, Store, StoreError};

/// Changes from one member (or from nobody) further apart than this are not one story, even
/// with the same cause; an operation's are one story however long it runs.
const WINDOW_MS: i64 = 60_000;

/// One line of the recent events.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    /// The newest entry's time.
    pub at_ms: i64,
    /// What the line is.
    pub what: What,
}

impl Line {
    /// The cluster the line is about.
    pub fn cluster(&self) -> &str {
        match &self.what {
            What::One(e) => &e.cluster,
            What::Moves { entries, .. } => &entries[0].cluster,
        }
    }
}

/// What one line of the recent events tells.
#[derive(Debug, Clone, PartialEq)]
pub enum What {
    /// One history entry, as the history page shows it.
    One(HistoryEntry),
    /// Several targets moved together: one event, counted whole.
    Moves {
        /// The cause they share.
        cause: Cause,
        /// The member they left (`None`: they had no holder, or an operation's left several).
        from: Option<String>,
        /// The operation they belong to, if any.
        operation: Option<String>,
        /// Who asked for that operation (a user, the join policy), when history keeps it.
        by: Option<String>,
        /// Where they went: member and how many, most first.
        to: Vec<(String, usize)>,
        /// How many moved in all (the sum of `to`).
        count: usize,
        /// From the oldest to the newest change.
        span_ms: i64,
        /// The longest handoff gap among the moves (time a target had nobody working on it,
        /// as the control plane saw it), when any is known.
        longest_gap_ms: Option<i64>,
        /// Its changes among the rows told, newest first (all `count` of them, or fewer when
        /// the event reaches past them).
        entries: Vec<HistoryEntry>,
    },
}

/// One event: ownership changes told as one line, counted whole.
#[derive(Debug, Clone, PartialEq)]
struct Event {
    cause: Cause,
    from: Option<String>,
    operation: Option<String>,
    by: Option<String>,
    /// Where they went, most first.
    to: Vec<(String, usize)>,
    first_ms: i64,
    last_ms: i64,
    longest_gap_ms: Option<i64>,
    /// The ids of its changes among the rows told.
    rows: Vec<i64>,
}

impl Event {
    fn count(&self) -> usize {
        self.to.iter().map(|(_, n)| n).sum()
    }
}

/// `entries` — a page that `q` listed, newest first — told as at most `limit` lines, each
/// event counted over the whole history as `q` filters it ([`Store::bursts`]).
pub async fn tell(
    store: &Store,
    q: &HistoryQuery,
    entries: Vec<HistoryEntry>,
    limit: usize,
) -> Result<Vec<Line>, StoreError> {
    let events: Vec<Event> = store
        .bursts(q, &within(&entries, limit), WINDOW_MS)
        .await?
        .into_iter()
        .map(|b| Event {
            cause: b.cause,
            from: b.from,
            operation: b.operation,
            by: b.by,
            to: b
                .to
                .into_iter()
                .map(|(to, n)| (name(to), usize::try_from(n).unwrap_or(usize::MAX)))
                .collect(),
            first_ms: b.first_ms,
            last_ms: b.last_ms,
            longest_gap_ms: b.longest_gap_ms,
            rows: b.rows,
        })
        .collect();
    Ok(told(entries, &events, limit))
}

/// What makes changes one event but for their time: cluster, cause, and the operation or (when
/// none) the member they left.
type Key<'a> = (&'a str, Option<Cause>, Result<&'a str, Option<&'a str>>);

/// `e`'s [`Key`], if it is an ownership change.
fn key(e: &HistoryEntry) -> Option<Key<'_>> {
    (e.kind == HistoryKind::Ownership).then(|| {
        (
            &*e.cluster,
            e.cause,
            e.operation.as_deref().ok_or(e.from.as_deref()),
        )
    })
}

/// The ownership changes of `entries` (newest first) that the first `limit` lines can hold:
/// every line starts at a row of another key or at another kind of row, so the first `limit`
/// lines start before `limit` of those have been seen, and hold only rows of their keys.
fn within(entries: &[HistoryEntry], limit: usize) -> Vec<HistoryEntry> {
    let mut keys = Vec::new();
    let mut lines = 0;
    for e in entries {
        if lines == limit {
            break;
        }
        match key(e) {
            Some(k) if keys.contains(&k) => {}
            Some(k) => {
                keys.push(k);
                lines += 1;
            }
            None => lines += 1,
        }
    }
    entries
        .iter()
        .filter(|e| key(e).is_some_and(|k| keys.contains(&k)))
        .cloned()
        .collect()
}

/// A new holder as a line names it.
fn name(to: Option<String>) -> String {
    to.unwrap_or_else(|| "nobody".into())
}

/// `entries` (newest first) told as at most `limit` lines, counting only the rows given: exact
/// when they are the whole history of what they show, short for a page of it ([`tell`]).
#[cfg(test)]
pub fn lines(entries: Vec<HistoryEntry>, limit: usize) -> Vec<Line> {
    let events = events_in(&entries);
    told(entries, &events, limit)
}

/// The events of `entries` as [`Store::bursts`] makes them, counted over `entries` alone.
#[cfg(test)]
fn events_in(entries: &[HistoryEntry]) -> Vec<Event> {
    // Who asked for each operation, from its "created" entry among those given.
    let by: HashMap<&str, &str> = entries
        .iter()
        .filter(|e| e.kind == HistoryKind::Operation && e.event.as_deref() == Some("created"))
        .filter_map(|e| Some((e.operation.as_deref()?, e.actor.as_deref()?)))
        .collect();
    let mut moves: Vec<(Key, &HistoryEntry)> =
        entries.iter().filter_map(|e| Some((key(e)?, e))).collect();
    moves.sort_by_key(|(_, e)| e.id);
    // Per key, the events in the order recorded; without an operation, a change seen longer
    // than the window after the one before starts a new one.
    let mut events: HashMap<Key, Vec<Vec<&HistoryEntry>>> = HashMap::new();
    for (k, e) in moves {
        let list = events.entry(k).or_default();
        match list.last_mut() {
            Some(event)
                if k.2.is_ok() || event.last().is_some_and(|l| e.at_ms - l.at_ms <= WINDOW_MS) =>
            {
                event.push(e)
            }
            _ => list.push(vec![e]),
        }
    }
    events
        .into_values()
        .flatten()
        .filter_map(|event| {
            let first = event[0];
            let mut to: Vec<(String, usize)> = Vec::new();
            for e in &event {
                let n = name(e.to.clone());
                match to.iter_mut().find(|(t, _)| *t == n) {
                    Some((_, k)) => *k += 1,
                    None => to.push((n, 1)),
                }
            }
            to.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            Some(Event {
                cause: first.cause?,
                from: first
                    .from
                    .clone()
                    .filter(|f| event.iter().all(|e| e.from.as_ref() == Some(f))),
                by: first
                    .operation
                    .as_deref()
                    .and_then(|op| by.get(op))
                    .map(|b| (*b).to_owned()),
                operation: first.operation.clone(),
                to,
                first_ms: event.iter().map(|e| e.at_ms).min()?,
                last_ms: event.iter().map(|e| e.at_ms).max()?,
                longest_gap_ms: event.iter().filter_map(|e| e.gap_ms).max(),
                rows: event.iter().map(|e| e.id).collect(),
            })
        })
        .collect()
}

/// `entries` (newest first) told as at most `limit` lines by `events`, those their ownership
/// changes belong to: an event of more than one change is one line, at its newest change
/// given, holding every change of it given; anything else is a line of its own.
fn told(entries: Vec<HistoryEntry>, events: &[Event], limit: usize) -> Vec<Line> {
    let event_of: HashMap<i64, usize> = events
        .iter()
        .enumerate()
        .filter(|(_, ev)| ev.count() > 1)
        .flat_map(|(i, ev)| ev.rows.iter().map(move |id| (*id, i)))
        .collect();
    // Each line: the event it tells, if any, and its rows.
    let mut out: Vec<(Option<usize>, Vec<HistoryEntry>)> = Vec::new();
    let mut line_of: HashMap<usize, usize> = HashMap::new();
    for e in entries {
        let event = event_of.get(&e.id).copied();
        if let Some(&l) = event.and_then(|ev| line_of.get(&ev)) {
            out[l].1.push(e);
            continue;
        }
        if out.len() == limit {
            continue;
        }
        if let Some(ev) = event {
            line_of.insert(ev, out.len());
        }
        out.push((event, vec![e]));
    }
    out.into_iter()
        .map(|(event, mut group)| {
            let at_ms = group[0].at_ms;
            let what = match event.map(|ev| &events[ev]) {
                None => What::One(group.remove(0)),
                Some(ev) => What::Moves {
                    cause: ev.cause,
                    from: ev.from.clone(),
                    operation: ev.operation.clone(),
                    by: ev.by.clone(),
                    to: ev.to.clone(),
                    count: ev.count(),
                    span_ms: ev.last_ms - ev.first_ms,
                    longest_gap_ms: ev.longest_gap_ms,
                    entries: group,
                },
            };
            Line { at_ms, what }
        })
        .collect()
}

/// A move in cluster `c` as history lists it, for tests of the views over history.
#[cfg(test)]
pub(super) fn move_entry(
    target: &str,
    (from, to): (Option<&str>, &str),
    cause: Cause,
    op: Option<&str>,
    at_ms: i64,
    gap_ms: Option<i64>,
) -> HistoryEntry {
    HistoryEntry {
        id: at_ms,
        at_ms,
        kind: HistoryKind::Ownership,
        cluster: "c".into(),
        target: Some(target.into()),
        instance: None,
        from: from.map(Into::into),
        to: Some(to.into()),
        cause: Some(cause),
        event: None,
        operation: op.map(Into::into),
        actor: None,
        detail: None,
        acquired_at_ms: Some(at_ms),
        gap_ms,
    }
}

#[cfg(test)]
mod tests;
