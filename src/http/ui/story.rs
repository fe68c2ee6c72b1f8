//! Recent events told as a story: ownership changes that belong together — the moves of one
//! operation, or the targets one member lost for one cause (a failover, a hand-off), or that
//! nobody held before (placed), each within a minute of the one before — become one line
//! ("20 targets left c-2 (handoff) for c-0 (10) and c-1 (10) in 0.12 s · longest gap 41 ms"),
//! expandable to the moves at hand; an operation is one entry — its lifecycle (every step
//! history keeps: created, started, its phases, how it ended) and the moves it made, counted
//! whole, linked to the operation; everything else stays a line of its own, in the documented
//! words (`words`: no stored word such as `leases_cleaned` is shown). Changes are told
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

use crate::model::{Cause, OperationKind, OperationState};
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
            What::Moves(m) => &m.entries[0].cluster,
            What::Operation(l) => &l.cluster,
        }
    }

    /// The page of its cluster as it was at this line's time (`None` for a line of no
    /// cluster: refused requests not audited one by one).
    pub fn as_of_href(&self) -> Option<String> {
        as_of_href(self.cluster(), self.at_ms)
    }
}

/// The page of `cluster` as it was at `at_ms`.
pub fn as_of_href(cluster: &str, at_ms: i64) -> Option<String> {
    let at = jiff::Timestamp::from_millisecond(at_ms).ok()?;
    (!cluster.is_empty()).then(|| {
        format!(
            "/clusters/{}/as-of?t={}",
            super::segment(cluster),
            form_urlencoded::byte_serialize(at.to_string().as_bytes()).collect::<String>()
        )
    })
}

/// What one line of the recent events tells.
#[derive(Debug, Clone, PartialEq)]
pub enum What {
    /// One history entry, as the history page shows it.
    One(HistoryEntry),
    /// Several targets moved together, not by an operation: one event, counted whole.
    Moves(Moves),
    /// One operation: its lifecycle (created, started, its phases, how it ended) and the
    /// targets it moved, counted whole, as one entry.
    Operation(Lifecycle),
}

/// Targets that moved together (one event), counted whole.
#[derive(Debug, Clone, PartialEq)]
pub struct Moves {
    /// The cause they share.
    pub cause: Cause,
    /// The member they left (`None`: they had no holder, or an operation's left several).
    pub from: Option<String>,
    /// The operation they belong to, if any.
    pub operation: Option<String>,
    /// Who asked for that operation (a user, the join policy), when history keeps it.
    pub by: Option<String>,
    /// Where they went: member and how many, most first.
    pub to: Vec<(String, usize)>,
    /// How many moved in all (the sum of `to`).
    pub count: usize,
    /// From the oldest to the newest change.
    pub span_ms: i64,
    /// The longest handoff gap among the moves (time a target had nobody working on it,
    /// as the control plane saw it), when any is known.
    pub longest_gap_ms: Option<i64>,
    /// Its changes among the rows told, newest first (all `count` of them, or fewer when
    /// the event reaches past them).
    pub entries: Vec<HistoryEntry>,
}

/// An operation told as one entry: every step of its lifecycle that history keeps, and its
/// moves counted whole — whatever part of it the rows told hold.
#[derive(Debug, Clone, PartialEq)]
pub struct Lifecycle {
    /// The operation's id.
    pub id: String,
    /// Its cluster.
    pub cluster: String,
    /// What it does (`None`: the operation itself is no longer kept).
    pub kind: Option<OperationKind>,
    /// The instance a remove-instance operation removes.
    pub instance: Option<String>,
    /// Who asked for it (its `created` step's actor), when kept.
    pub by: Option<String>,
    /// Why (its `created` step's detail), when given.
    pub reason: Option<String>,
    /// Its steps, oldest first: all history keeps, not only those among the rows told.
    pub steps: Vec<HistoryEntry>,
    /// The targets it moved, per cause (one, for an operation the engine ran), each counted
    /// whole as the listing filters them (an instance's page: its own), for its changes among
    /// the rows told.
    pub moves: Vec<Moves>,
    /// How many ownership changes it made in all, as history keeps them (no filter).
    pub all_moved: usize,
    /// Its other rows among those told (its steps there), newest first.
    pub entries: Vec<HistoryEntry>,
}

impl Lifecycle {
    /// How many of its moves the listing counts (its filters applied: on an instance's page,
    /// those of that instance), each event whole.
    pub fn moved(&self) -> usize {
        self.moves.iter().map(|m| m.count).sum()
    }

    /// The longest handoff gap among its moves the listing counts, when any is known.
    pub fn longest_gap_ms(&self) -> Option<i64> {
        self.moves.iter().filter_map(|m| m.longest_gap_ms).max()
    }

    /// Whether the listing counts every move it made (no filter leaves any out).
    pub fn counts_all(&self) -> bool {
        self.moved() == self.all_moved
    }

    /// The state it was last seen entering (`created` until it entered one).
    pub fn state(&self) -> &str {
        self.steps
            .iter()
            .rev()
            .filter_map(|e| e.event.as_deref())
            .find(|ev| *ev != "phase")
            .unwrap_or("created")
    }

    /// Whether it has ended (succeeded, failed or cancelled).
    pub fn ended(&self) -> bool {
        self.state()
            .parse::<OperationState>()
            .is_ok_and(|s| s.is_final())
    }

    /// From its first step (or move) to its last.
    pub fn span_ms(&self) -> i64 {
        let times = self.steps.iter().map(|e| e.at_ms).chain(
            self.moves
                .iter()
                .flat_map(|m| m.entries.iter().map(|e| e.at_ms)),
        );
        let (lo, hi) = times.fold((i64::MAX, i64::MIN), |(lo, hi), t| (lo.min(t), hi.max(t)));
        (hi - lo).max(0)
    }
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

    /// Told with its changes among the rows told.
    fn told(&self, entries: Vec<HistoryEntry>) -> Moves {
        Moves {
            cause: self.cause,
            from: self.from.clone(),
            operation: self.operation.clone(),
            by: self.by.clone(),
            to: self.to.clone(),
            count: self.count(),
            span_ms: self.last_ms - self.first_ms,
            longest_gap_ms: self.longest_gap_ms,
            entries,
        }
    }
}

/// Each operation's kind and steps, as [`Store::lifecycles`] gives them.
type Steps = HashMap<String, (Option<OperationKind>, Vec<HistoryEntry>, u64)>;

/// `entries` — a page that `q` listed, newest first — told as at most `limit` lines, each
/// event counted over the whole history as `q` filters it ([`Store::bursts`]), each operation
/// with every step of it history keeps ([`Store::lifecycles`]).
pub async fn tell(
    store: &Store,
    q: &HistoryQuery,
    entries: Vec<HistoryEntry>,
    limit: usize,
) -> Result<Vec<Line>, StoreError> {
    let held = within(&entries, limit);
    let events: Vec<Event> = store
        .bursts(
            q,
            &held
                .iter()
                .filter(|e| e.kind == HistoryKind::Ownership)
                .cloned()
                .collect::<Vec<_>>(),
            WINDOW_MS,
        )
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
    let mut ops: Vec<&str> = held.iter().filter_map(|e| e.operation.as_deref()).collect();
    ops.sort_unstable();
    ops.dedup();
    let steps = store.lifecycles(&ops).await?;
    Ok(told(entries, &events, &steps, limit))
}

/// The operation a row is part of the lifecycle of (its steps and the changes it made; not
/// the audit of the request that created it, which stays a line of its own).
fn operation_of(e: &HistoryEntry) -> Option<&str> {
    matches!(e.kind, HistoryKind::Ownership | HistoryKind::Operation)
        .then_some(e.operation.as_deref())
        .flatten()
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

/// What makes rows one line but for their time: an operation, or the [`Key`] of changes
/// that are none's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LineKey<'a> {
    Operation(&'a str),
    Changes(Key<'a>),
}

fn line_key(e: &HistoryEntry) -> Option<LineKey<'_>> {
    match operation_of(e) {
        Some(op) => Some(LineKey::Operation(op)),
        None => key(e).map(LineKey::Changes),
    }
}

/// The rows of `entries` (newest first) that the first `limit` lines can hold and that are
/// counted or told with others (ownership changes, operation steps): every line starts at a
/// row of another key or at a row of no key, so the first `limit` lines start before `limit`
/// of those have been seen, and hold only rows of their keys.
fn within(entries: &[HistoryEntry], limit: usize) -> Vec<HistoryEntry> {
    let mut keys = Vec::new();
    let mut lines = 0;
    for e in entries {
        if lines == limit {
            break;
        }
        match line_key(e) {
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
        .filter(|e| line_key(e).is_some_and(|k| keys.contains(&k)))
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
    let mut steps = Steps::new();
    for e in entries.iter().rev() {
        match (e.kind, &e.operation) {
            (HistoryKind::Operation, Some(op)) => {
                steps.entry(op.clone()).or_default().1.push(e.clone())
            }
            (HistoryKind::Ownership, Some(op)) => steps.entry(op.clone()).or_default().2 += 1,
            _ => {}
        }
    }
    told(entries, &events, &steps, limit)
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
/// changes belong to, and `steps`, the lifecycles of their operations: an operation's steps
/// and changes are one line, at its newest row given; an event of more than one change is one
/// line, at its newest change given, holding every change of it given; anything else is a
/// line of its own.
fn told(entries: Vec<HistoryEntry>, events: &[Event], steps: &Steps, limit: usize) -> Vec<Line> {
    let event_of: HashMap<i64, usize> = events
        .iter()
        .enumerate()
        .flat_map(|(i, ev)| ev.rows.iter().map(move |id| (*id, i)))
        .collect();
    /// What a line holds.
    #[derive(Clone, PartialEq, Eq, Hash)]
    enum Of {
        Operation(String),
        Event(usize),
    }
    let of = |e: &HistoryEntry| match operation_of(e) {
        Some(op) => Some(Of::Operation(op.to_owned())),
        None => event_of
            .get(&e.id)
            .filter(|ev| events[**ev].count() > 1)
            .map(|ev| Of::Event(*ev)),
    };
    // Each line: what it holds, if anything, and its rows.
    let mut out: Vec<(Option<Of>, Vec<HistoryEntry>)> = Vec::new();
    let mut line_of: HashMap<Of, usize> = HashMap::new();
    for e in entries {
        let held = of(&e);
        if let Some(&l) = held.as_ref().and_then(|h| line_of.get(h)) {
            out[l].1.push(e);
            continue;
        }
        if out.len() == limit {
            continue;
        }
        if let Some(h) = held.clone() {
            line_of.insert(h, out.len());
        }
        out.push((held, vec![e]));
    }
    out.into_iter()
        .map(|(held, mut group)| {
            let at_ms = group[0].at_ms;
            let what = match held {
                None => What::One(group.remove(0)),
                Some(Of::Event(ev)) => What::Moves(events[ev].told(group)),
                Some(Of::Operation(op)) => {
                    What::Operation(lifecycle(op, group, events, &event_of, steps))
                }
            };
            Line { at_ms, what }
        })
        .collect()
}

/// Operation `id` told from its rows among those told (`rows`, newest first), the events its
/// changes belong to, and its steps.
fn lifecycle(
    id: String,
    rows: Vec<HistoryEntry>,
    events: &[Event],
    event_of: &HashMap<i64, usize>,
    steps: &Steps,
) -> Lifecycle {
    let cluster = rows[0].cluster.clone();
    let (kind, steps, all_moved) = steps.get(&id).cloned().unwrap_or_default();
    // Its changes by the event they belong to, in the order first seen; anything else
    // (its steps, a change no event counted) stays with the lifecycle.
    let mut moves: Vec<(usize, Vec<HistoryEntry>)> = Vec::new();
    let mut entries = Vec::new();
    for e in rows {
        match event_of.get(&e.id) {
            Some(&ev) if e.kind == HistoryKind::Ownership => {
                match moves.iter_mut().find(|(m, _)| *m == ev) {
                    Some((_, held)) => held.push(e),
                    None => moves.push((ev, vec![e])),
                }
            }
            _ => entries.push(e),
        }
    }
    let created = steps.iter().find(|e| e.event.as_deref() == Some("created"));
    let moves: Vec<Moves> = moves
        .into_iter()
        .map(|(ev, held)| events[ev].told(held))
        .collect();
    Lifecycle {
        by: created
            .and_then(|c| c.actor.clone())
            .or_else(|| moves.iter().find_map(|m| m.by.clone())),
        reason: created
            .and_then(|c| c.detail.clone())
            .filter(|r| !r.is_empty()),
        instance: created.and_then(|c| c.instance.clone()),
        all_moved: usize::try_from(all_moved).unwrap_or(usize::MAX),
        id,
        cluster,
        kind,
        steps,
        moves,
        entries,
    }
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
        overlap_ms: None,
        overlap: None,
        work_gap_ms: None,
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

pub mod as_of;
pub mod page;
#[cfg(test)]
mod tests;
mod words;
