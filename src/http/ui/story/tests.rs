//! Tests of the story: the grouping on small examples, and a property test over histories
//! longer than a page, every line's counts against the rows themselves.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use proptest::prelude::*;

use super::*;
use crate::model::{InstanceEventKind, OperationKind, OperationState};
use crate::store::{InstanceEvent, NewOperation, OwnershipChange};

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
            What::Moves(Moves {
                cause,
                from,
                operation,
                by,
                to,
                count,
                span_ms,
                longest_gap_ms,
                entries,
            }) => {
                assert_eq!(*count, entries.len(), "all given");
                format!(
                    "{count} {cause:?} from {from:?} op {operation:?} by {by:?} to {to:?} in {span_ms} gap {longest_gap_ms:?}"
                )
            }
            What::Operation(o) => {
                let m = &o.moves[0];
                assert_eq!(m.count, m.entries.len(), "all given");
                let steps: Vec<_> = o.steps.iter().map(|e| e.step()).collect();
                format!(
                    "{} by {:?}: {steps:?}, {} moved {:?} to {:?} in {} gap {:?}",
                    o.id,
                    o.by,
                    o.moved(),
                    m.cause,
                    m.to,
                    m.span_ms,
                    m.longest_gap_ms
                )
            }
        })
        .collect();
    assert_eq!(
        shape,
        [
            r#"op-1 by Some("alice"): ["created"], 3 moved Rebalance to [("d", 3)] in 200 gap Some(900)"#,
            r#"one Some("joined")"#,
            r#"3 Handoff from Some("b") op None by None to [("a", 2), ("c", 1)] in 120 gap Some(120)"#,
            r#"one Some("t6")"#,
            r#"one Some("t0")"#,
        ]
    );
    assert_eq!(got[0].at_ms, 9_000);
    // At most `limit` lines, each whole.
    let two = lines(got_entries(), 2);
    assert_eq!(two.len(), 2);
    assert!(matches!(&two[0].what, What::Moves(m) if m.entries.len() == 3));
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

// Stories over histories longer than a page, against the rows themselves.

/// One row to record: an ownership change (cluster, cause, from, to, operation number,
/// seconds after the row before) or an instance event.
#[derive(Debug, Clone)]
enum Row {
    Change {
        cluster: usize,
        cause: Cause,
        from: Option<usize>,
        to: Option<usize>,
        op: Option<usize>,
        after_s: i64,
    },
    Instance {
        member: usize,
        after_s: i64,
    },
}

const CLUSTERS: [&str; 2] = ["c", "d"];
const MEMBERS: [&str; 4] = ["m-0", "m-1", "m-2", "m-3"];
const ACTORS: [&str; 3] = ["alice", "bob", "policy"];

/// Mostly seconds apart, now and then more than the window, rarely much more.
fn pause() -> impl Strategy<Value = i64> {
    prop_oneof![8 => 0..5i64, 1 => 55..70i64, 1 => 300..400i64]
}

fn change() -> impl Strategy<Value = Row> {
    let cause = prop::sample::select(vec![
        Cause::Initial,
        Cause::Failover,
        Cause::Handoff,
        Cause::Rebalance,
    ]);
    (
        0..2usize,
        cause,
        prop::option::weighted(0.7, 0..3usize),
        prop::option::weighted(0.95, 0..4usize),
        prop::option::weighted(0.3, 0..3usize),
        pause(),
    )
        .prop_map(|(cluster, cause, from, to, op, after_s)| Row::Change {
            cluster,
            cause,
            from,
            to,
            op,
            after_s,
        })
}

/// Histories of 60 to 750 rows in runs of 30 to 150 (so events run longer than a page of
/// 50): each run repeats a change (another target the same way, a second later, now and
/// then after a pause), cut into by other changes and instance events.
fn history() -> impl Strategy<Value = Vec<Row>> {
    let cut = (0..20u8, pause(), change());
    let run = (change(), 30..150usize, prop::collection::vec(cut, 150));
    prop::collection::vec(run, 2..6).prop_map(|runs| {
        let mut rows = Vec::new();
        for (repeated, len, cuts) in runs {
            rows.push(repeated.clone());
            for (roll, pause, other) in cuts.into_iter().take(len) {
                rows.push(match (roll, repeated.clone()) {
                    (0, _) => Row::Instance {
                        member: pause as usize % MEMBERS.len(),
                        after_s: 1,
                    },
                    (1 | 2, _) => other,
                    (
                        roll,
                        Row::Change {
                            cluster,
                            cause,
                            from,
                            to,
                            op,
                            ..
                        },
                    ) => Row::Change {
                        cluster,
                        cause,
                        from,
                        // Mostly where the one before went, else elsewhere.
                        to: if roll % 3 == 0 {
                            Some(roll as usize % MEMBERS.len())
                        } else {
                            to
                        },
                        op,
                        after_s: if roll == 19 { pause } else { 1 },
                    },
                    (_, instance) => instance,
                });
            }
        }
        rows
    })
}

/// Records `rows` in order: every change its own target; three operations first, one per
/// actor. The whole history as the store lists it, newest first.
async fn record(store: &Store, rows: &[Row]) -> Vec<HistoryEntry> {
    let mut ops = Vec::new();
    for actor in ACTORS {
        let op = store
            .create_operation(&NewOperation {
                cluster: "c".into(),
                kind: OperationKind::Rebalance,
                state: OperationState::Pending,
                requested_by: actor.into(),
                reason: String::new(),
                instance: None,
                params: serde_json::json!({}),
                moves: Vec::new(),
                now_ms: 0,
            })
            .await
            .unwrap();
        ops.push(op.id);
    }
    let mut at_ms = 1_000_000;
    for (i, row) in rows.iter().enumerate() {
        match row {
            Row::Change {
                cluster,
                cause,
                from,
                to,
                op,
                after_s,
            } => {
                at_ms += after_s * 1000 + 7;
                let change = OwnershipChange {
                    overlap: None,
                    cluster: CLUSTERS[*cluster].into(),
                    target: format!("t-{i}"),
                    from: from.map(|m| MEMBERS[m].into()),
                    to: to.map(|m| MEMBERS[m].into()),
                    cause: *cause,
                    operation: op.map(|o| ops[o].clone()),
                    at_ms,
                    acquired_at_ms: Some(at_ms),
                    gap_ms: Some((i as i64 * 37) % 500),
                };
                assert!(store.record_ownership(&change).await.unwrap());
            }
            Row::Instance { member, after_s } => {
                at_ms += after_s * 1000 + 7;
                store
                    .record_instance_event(&InstanceEvent {
                        cluster: "c".into(),
                        instance: MEMBERS[*member].into(),
                        kind: InstanceEventKind::Joined,
                        at_ms,
                        detail: None,
                    })
                    .await
                    .unwrap();
            }
        }
    }
    let all = store
        .history(&HistoryQuery {
            limit: crate::store::MAX_PAGE,
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(all.next_cursor.is_none());
    all.items
}

/// What an event is, worked out from all the rows: cluster, cause, then the operation, or
/// the source and the number of its run (a new one after a pause over the window, in the
/// order recorded).
type EventId = (
    String,
    Option<Cause>,
    Result<String, (Option<String>, usize)>,
);

fn keys(all: &[HistoryEntry]) -> HashMap<i64, EventId> {
    let mut rows: Vec<&HistoryEntry> = all
        .iter()
        .filter(|e| e.kind == HistoryKind::Ownership)
        .collect();
    rows.sort_by_key(|e| e.id);
    // Per cluster, cause and source: when its last change was seen, and its run.
    type Source = (String, Option<Cause>, Option<String>);
    let mut runs: HashMap<Source, (i64, usize)> = HashMap::new();
    let mut out = HashMap::new();
    for e in rows {
        let which = match &e.operation {
            Some(op) => Ok(op.clone()),
            None => {
                let run = runs
                    .entry((e.cluster.clone(), e.cause, e.from.clone()))
                    .or_insert((e.at_ms, 0));
                if e.at_ms - run.0 > WINDOW_MS {
                    run.1 += 1;
                }
                run.0 = e.at_ms;
                Err((e.from.clone(), run.1))
            }
        };
        out.insert(e.id, (e.cluster.clone(), e.cause, which));
    }
    out
}

/// Whether `q`'s filters (those the tests use) list `e`.
fn listed(q: &HistoryQuery, e: &HistoryEntry) -> bool {
    let is = |x: &Option<String>, v: &str| x.as_deref() == Some(v);
    q.cluster.as_ref().is_none_or(|c| e.cluster == *c)
        && q.kind.is_none_or(|k| e.kind == k)
        && q.instance
            .as_ref()
            .is_none_or(|i| is(&e.instance, i) || is(&e.from, i) || is(&e.to, i))
}

/// Every page of `q`'s listing, told; each told in a few lines too, as the first of all.
async fn pages(store: &Store, q: &HistoryQuery) -> Vec<(Vec<HistoryEntry>, Vec<Line>)> {
    let mut out = Vec::new();
    let mut q = q.clone();
    loop {
        let page = store.history(&q).await.unwrap();
        let lines = tell(store, &q, page.items.clone(), usize::MAX)
            .await
            .unwrap();
        let few = tell(store, &q, page.items.clone(), 7).await.unwrap();
        assert_eq!(few, lines[..lines.len().min(7)], "{q:?}");
        out.push((page.items, lines));
        match page.next_cursor {
            Some(c) => q.cursor = Some(c),
            None => return out,
        }
    }
}

fn config() -> ProptestConfig {
    match std::env::var("PROPTEST_CASES") {
        Ok(_) => ProptestConfig::default(),
        Err(_) => ProptestConfig::with_cases(24),
    }
}

/// Paged 50 rows at a time, with and without filters, every line of every page states
/// the counts of its whole event as the listing's filter has it — how many, to whom, over
/// what span, the longest gap, from whom, by whom — and holds all of its rows on the page;
/// a change told alone is alone in its event; every row is told once.
async fn every_story_counts_its_whole_event(rows: Vec<Row>) {
    let store = Store::connect("sqlite::memory:").await.unwrap();
    let all = record(&store, &rows).await;
    let key = keys(&all);
    let by: HashMap<&str, &str> = all
        .iter()
        .filter(|e| e.event.as_deref() == Some("created"))
        .filter_map(|e| Some((e.operation.as_deref()?, e.actor.as_deref()?)))
        .collect();
    let queries = [
        HistoryQuery {
            limit: 50,
            ..Default::default()
        },
        HistoryQuery {
            cluster: Some("c".into()),
            limit: 50,
            ..Default::default()
        },
        HistoryQuery {
            cluster: Some("c".into()),
            instance: Some("m-1".into()),
            limit: 50,
            ..Default::default()
        },
        HistoryQuery {
            kind: Some(HistoryKind::Ownership),
            instance: Some("m-0".into()),
            limit: 50,
            ..Default::default()
        },
    ];
    for q in &queries {
        // Each event's rows that `q` lists, from all the rows.
        let mut events: HashMap<&EventId, Vec<&HistoryEntry>> = HashMap::new();
        for e in all.iter().filter(|e| listed(q, e)) {
            if let Some(k) = key.get(&e.id) {
                events.entry(k).or_default().push(e);
            }
        }
        // One told event: its counts are the whole event's, and all its rows on the page are
        // in it.
        let check = |page: &[HistoryEntry], m: &Moves, many: bool| {
            let Moves {
                cause,
                from,
                operation,
                by: who,
                to,
                count,
                span_ms,
                longest_gap_ms,
                entries,
            } = m;
            let k = &key[&entries[0].id];
            let event = &events[k];
            assert!(
                entries.iter().all(|e| key[&e.id] == *k),
                "{q:?}: one event per line"
            );
            assert_eq!(*count, event.len(), "{q:?}: {k:?}");
            assert!(!many || *count > 1);
            let mut want: BTreeMap<String, usize> = BTreeMap::new();
            for e in event {
                *want
                    .entry(e.to.clone().unwrap_or_else(|| "nobody".into()))
                    .or_default() += 1;
            }
            let got: BTreeMap<String, usize> = to.iter().cloned().collect();
            assert_eq!(got, want, "{q:?}: {k:?}");
            assert!(to.windows(2).all(|w| w[0].1 >= w[1].1), "most first");
            let times = event.iter().map(|e| e.at_ms);
            assert_eq!(
                *span_ms,
                times.clone().max().unwrap() - times.min().unwrap()
            );
            assert_eq!(*longest_gap_ms, event.iter().filter_map(|e| e.gap_ms).max());
            assert_eq!(Some(*cause), k.1);
            let sources: BTreeSet<_> = event.iter().map(|e| &e.from).collect();
            let one = (sources.len() == 1)
                .then(|| event[0].from.clone())
                .flatten();
            assert_eq!(from, &one, "{q:?}: {k:?}");
            assert_eq!(operation, &event[0].operation);
            let asker = operation
                .as_deref()
                .and_then(|o| by.get(o))
                .map(|b| (*b).to_owned());
            assert_eq!(who, &asker);
            // Its rows on this page are all in this line.
            let here = page.iter().filter(|e| key.get(&e.id) == Some(k)).count();
            assert_eq!(entries.len(), here, "{q:?}: {k:?}");
        };
        for (page, lines) in pages(&store, q).await {
            let mut told: Vec<i64> = Vec::new();
            for l in &lines {
                match &l.what {
                    What::One(e) => {
                        told.push(e.id);
                        assert!(operation_of(e).is_none(), "{q:?}: {e:?} is an operation's");
                        if let Some(k) = key.get(&e.id) {
                            assert_eq!(events[k].len(), 1, "{q:?}: {e:?} told alone");
                        }
                    }
                    What::Moves(m) => {
                        told.extend(m.entries.iter().map(|e| e.id));
                        assert!(m.operation.is_none());
                        check(&page, m, true);
                    }
                    What::Operation(o) => {
                        // Every step history has of it, oldest first, whatever the page
                        // holds; and who asked.
                        let steps: Vec<i64> = all
                            .iter()
                            .rev()
                            .filter(|e| {
                                e.kind == HistoryKind::Operation
                                    && e.operation.as_deref() == Some(&o.id)
                            })
                            .map(|e| e.id)
                            .collect();
                        assert_eq!(o.steps.iter().map(|e| e.id).collect::<Vec<_>>(), steps);
                        assert_eq!(o.by.as_deref(), by.get(o.id.as_str()).copied());
                        assert_eq!(o.kind, Some(OperationKind::Rebalance));
                        told.extend(o.entries.iter().map(|e| e.id));
                        for m in &o.moves {
                            told.extend(m.entries.iter().map(|e| e.id));
                            assert_eq!(m.operation.as_deref(), Some(o.id.as_str()));
                            check(&page, m, false);
                        }
                        // Its rows on this page are all in this line.
                        let here = page
                            .iter()
                            .filter(|e| operation_of(e) == Some(o.id.as_str()))
                            .count();
                        let held = o.entries.len()
                            + o.moves.iter().map(|m| m.entries.len()).sum::<usize>();
                        assert_eq!(held, here, "{q:?}: {}", o.id);
                        // Whatever the listing filters: every move it made.
                        let all_moved = all
                            .iter()
                            .filter(|e| {
                                e.kind == HistoryKind::Ownership
                                    && e.operation.as_deref() == Some(&o.id)
                            })
                            .count();
                        assert_eq!(o.all_moved, all_moved, "{q:?}: {}", o.id);
                        assert!(o.moved() <= o.all_moved);
                    }
                }
            }
            told.sort_unstable();
            let mut listed: Vec<i64> = page.iter().map(|e| e.id).collect();
            listed.sort_unstable();
            assert_eq!(told, listed, "{q:?}: every row told once");
        }
    }
}

proptest! {
    #![proptest_config(config())]

    /// See [`every_story_counts_its_whole_event`].
    #[test]
    fn prop_every_story_counts_its_whole_event(rows in history()) {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(every_story_counts_its_whole_event(rows));
    }
}
