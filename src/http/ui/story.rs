//! Recent events told as a story: consecutive ownership changes that belong together — the
//! moves of one operation, or the targets one member lost for one cause (a failover, a
//! hand-off) — become one line ("20 targets left c-2 (handoff) for c-0 (10) and c-1 (10) in
//! 0.12 s · longest gap 41 ms"), expandable to the moves; everything else stays a line of its
//! own. The cluster page's recent events, an instance's history and the history page all tell
//! it this way. Pure: it only regroups the history rows it is given, newest first.

use std::collections::HashMap;

use crate::model::Cause;
use crate::store::{HistoryEntry, HistoryKind};

/// Changes further apart than this are not one story, even with the same member and cause.
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
    /// Several targets moved together, newest first.
    Moves {
        /// The cause they share.
        cause: Option<Cause>,
        /// The member they left (`None`: they had no holder).
        from: Option<String>,
        /// The operation they belong to, if any.
        operation: Option<String>,
        /// Who asked for that operation (a user, the join policy), when the entries given say.
        by: Option<String>,
        /// Where they went: member and how many, most first.
        to: Vec<(String, usize)>,
        /// From the oldest to the newest change.
        span_ms: i64,
        /// The longest handoff gap among the moves (time a target had nobody working on it,
        /// as the control plane saw it), when any is known.
        longest_gap_ms: Option<i64>,
        /// The changes.
        entries: Vec<HistoryEntry>,
    },
}

/// Whether `e` can join the moves that `first` (the newest in the group) started.
fn together(first: &HistoryEntry, e: &HistoryEntry) -> bool {
    e.kind == HistoryKind::Ownership
        && first.kind == HistoryKind::Ownership
        && e.cause == first.cause
        && e.operation == first.operation
        && (e.operation.is_some() || e.from == first.from)
        && first.at_ms - e.at_ms <= WINDOW_MS
}

/// Groups `entries` (newest first) into at most `limit` lines.
pub fn lines(entries: Vec<HistoryEntry>, limit: usize) -> Vec<Line> {
    // Who asked for each operation, from its entries among those given ("created" has it).
    let by: HashMap<String, String> = entries
        .iter()
        .filter(|e| e.kind == HistoryKind::Operation)
        .filter_map(|e| Some((e.operation.clone()?, e.actor.clone()?)))
        .collect();
    let mut out: Vec<Vec<HistoryEntry>> = Vec::new();
    for e in entries {
        match out.last_mut() {
            Some(group) if together(&group[0], &e) => group.push(e),
            _ => {
                if out.len() == limit {
                    break;
                }
                out.push(vec![e]);
            }
        }
    }
    out.into_iter()
        .map(|group| {
            let mut l = line(group);
            if let What::Moves {
                operation: Some(op),
                by: who,
                ..
            } = &mut l.what
            {
                *who = by.get(op).cloned();
            }
            l
        })
        .collect()
}

fn line(mut group: Vec<HistoryEntry>) -> Line {
    let at_ms = group[0].at_ms;
    if group.len() == 1 {
        return Line {
            at_ms,
            what: What::One(group.remove(0)),
        };
    }
    let mut to: Vec<(String, usize)> = Vec::new();
    for e in &group {
        let name = e.to.clone().unwrap_or_else(|| "nobody".into());
        match to.iter_mut().find(|(n, _)| *n == name) {
            Some((_, n)) => *n += 1,
            None => to.push((name, 1)),
        }
    }
    to.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let first = &group[0];
    let span_ms = at_ms - group[group.len() - 1].at_ms;
    Line {
        at_ms,
        what: What::Moves {
            cause: first.cause,
            from: if first.operation.is_some() && group.iter().any(|e| e.from != first.from) {
                None
            } else {
                first.from.clone()
            },
            operation: first.operation.clone(),
            by: None,
            to,
            span_ms,
            longest_gap_ms: group.iter().filter_map(|e| e.gap_ms).max(),
            entries: group,
        },
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
mod tests {
    use super::*;

    fn moved(
        target: &str,
        from: &str,
        to: &str,
        cause: Cause,
        op: Option<&str>,
        at_ms: i64,
    ) -> HistoryEntry {
        move_entry(
            target,
            (Some(from), to),
            cause,
            op,
            at_ms,
            Some(at_ms % 1000),
        )
    }

    fn instance(name: &str, event: &str, at_ms: i64) -> HistoryEntry {
        HistoryEntry {
            kind: HistoryKind::Instance,
            target: None,
            from: None,
            to: None,
            cause: None,
            instance: Some(name.into()),
            event: Some(event.into()),
            acquired_at_ms: None,
            ..moved("", "", "", Cause::Initial, None, at_ms)
        }
    }

    #[test]
    fn moves_that_belong_together_are_one_line_and_the_rest_stay_apart() {
        let h = Cause::Handoff;
        let f = Cause::Failover;
        let r = Cause::Rebalance;
        let entries = vec![
            // Newest first: a rebalance's three moves from two members...
            moved("t9", "a", "d", r, Some("op-1"), 9_000),
            moved("t8", "b", "d", r, Some("op-1"), 8_900),
            moved("t7", "a", "d", r, Some("op-1"), 8_800),
            instance("d", "joined", 8_000),
            HistoryEntry {
                kind: HistoryKind::Operation,
                operation: Some("op-1".into()),
                actor: Some("alice".into()),
                ..instance("d", "created", 7_500)
            },
            // ...b's hand-off of three targets to two members...
            moved("t3", "b", "a", h, None, 5_120),
            moved("t2", "b", "c", h, None, 5_050),
            moved("t1", "b", "a", h, None, 5_000),
            // ...a failover from c: another cause, another line.
            moved("t6", "c", "a", f, None, 4_000),
            // ...and one more from b, too long before to be the same story.
            moved("t0", "b", "a", h, None, -60_000),
        ];
        let got = lines(entries, 10);
        let shape: Vec<String> = got
            .iter()
            .map(|l| match &l.what {
                What::One(e) => format!("one {:?}", e.event.as_deref().or(e.target.as_deref())),
                What::Moves {
                    cause,
                    from,
                    operation,
                    by,
                    to,
                    span_ms,
                    longest_gap_ms,
                    entries,
                } => format!(
                    "{} {cause:?} from {from:?} op {operation:?} by {by:?} to {to:?} in {span_ms} gap {longest_gap_ms:?}",
                    entries.len()
                ),
            })
            .collect();
        assert_eq!(
            shape,
            [
                r#"3 Some(Rebalance) from None op Some("op-1") by Some("alice") to [("d", 3)] in 200 gap Some(900)"#,
                r#"one Some("joined")"#,
                r#"one Some("created")"#,
                r#"3 Some(Handoff) from Some("b") op None by None to [("a", 2), ("c", 1)] in 120 gap Some(120)"#,
                r#"one Some("t6")"#,
                r#"one Some("t0")"#,
            ]
        );
        assert_eq!(got[0].at_ms, 9_000);
        // At most `limit` lines, each whole.
        let two = lines(got_entries(), 2);
        assert_eq!(two.len(), 2);
        assert!(matches!(&two[0].what, What::Moves { entries, .. } if entries.len() == 3));
    }

    fn got_entries() -> Vec<HistoryEntry> {
        vec![
            moved("t3", "b", "a", Cause::Handoff, None, 3),
            moved("t2", "b", "a", Cause::Handoff, None, 2),
            moved("t1", "b", "a", Cause::Handoff, None, 1),
            instance("b", "left", 0),
            instance("b", "not_ready", -1),
        ]
    }
}
