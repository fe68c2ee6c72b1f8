//! A cluster as its history recorded it at one moment: per target, the last ownership change
//! seen at or before it (who held it then, since when, why); per instance, the last event of
//! each kind seen at or before it (from which whether it was present, cordoned, the leader);
//! per operation, its last step at or before it; and how far back the history kept reaches.
//!
//! It must not: guess what history does not hold. A target with no change at or before the
//! moment is absent here (never moved since history began, or its changes pruned by
//! retention); the caller says so. Liveness (renewals, expiry) is never recorded, so nothing
//! here can say whether a holder was working on a target then — only who held it.

use std::collections::BTreeMap;

use sqlx::Row as _;

use super::super::{Arg, Sql, Store, StoreError};
use super::{ENTRY_COLUMNS, HistoryEntry, entry_from_row};
use crate::model::InstanceEventKind;

/// What history recorded of one cluster up to a moment (see the module header).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AsOf {
    /// The moment (unix ms, inclusive).
    pub at_ms: i64,
    /// When the oldest history row of the cluster still kept was seen (`None`: none is kept).
    /// Before it, history knows nothing (it began later, or retention pruned it).
    pub kept_from_ms: Option<i64>,
    /// Per target with a change at or before the moment, the last one, by target.
    pub targets: Vec<HistoryEntry>,
    /// Per instance and event kind, the last such event at or before the moment.
    pub instance_events: Vec<HistoryEntry>,
    /// Per operation with a step at or before the moment, its last step, oldest first.
    pub operations: Vec<HistoryEntry>,
}

/// One instance at the moment, from its last events at or before it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceAt {
    pub instance: String,
    /// Its last event of those that say whether it is there (`joined`, `ready`, `not_ready`,
    /// `left`, `removed`), with when; `None`: none recorded.
    pub presence: Option<(InstanceEventKind, i64)>,
    /// Cordoned then (its last `cordoned` is later than its last `uncordoned`).
    pub cordoned: bool,
    /// The cluster's elected leader then (its last `leader_gained` is later than its last
    /// `leader_lost`, and later than any other instance's `leader_gained`).
    pub leader: bool,
}

/// The events that say whether an instance is there.
const PRESENCE: [InstanceEventKind; 5] = [
    InstanceEventKind::Joined,
    InstanceEventKind::Ready,
    InstanceEventKind::NotReady,
    InstanceEventKind::Left,
    InstanceEventKind::Removed,
];

/// One target at the moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetAt {
    pub target: String,
    /// Its last change at or before the moment; `None`: none recorded.
    pub last: Option<HistoryEntry>,
}

impl TargetAt {
    /// Who held it then, as its last change recorded left it.
    pub fn holder(&self) -> Option<&str> {
        self.last.as_ref()?.to.as_deref()
    }

    /// What its last change recorded says, as one word: `held` (it had a holder),
    /// `released` (nobody held it), `not_recorded` (no change at or before the moment).
    pub fn state(&self) -> &'static str {
        match &self.last {
            Some(e) if e.to.is_some() => "held",
            Some(_) => "released",
            None => "not_recorded",
        }
    }
}

impl AsOf {
    /// Every target of `known` (say, the cluster's targets now) and every one history
    /// recorded a change of up to the moment, by key, each with its last change then.
    pub fn targets_with<'a>(&self, known: impl IntoIterator<Item = &'a str>) -> Vec<TargetAt> {
        let mut all: BTreeMap<&str, Option<&HistoryEntry>> =
            known.into_iter().map(|k| (k, None)).collect();
        for e in &self.targets {
            if let Some(t) = e.target.as_deref() {
                all.insert(t, Some(e));
            }
        }
        all.into_iter()
            .map(|(target, last)| TargetAt {
                target: target.to_owned(),
                last: last.cloned(),
            })
            .collect()
    }

    /// Each instance with a recorded event at or before the moment, by name.
    pub fn instances(&self) -> Vec<InstanceAt> {
        let mut by: BTreeMap<&str, Vec<&HistoryEntry>> = BTreeMap::new();
        for e in &self.instance_events {
            if let Some(i) = e.instance.as_deref() {
                by.entry(i).or_default().push(e);
            }
        }
        let kind = |e: &HistoryEntry| e.event.as_deref()?.parse::<InstanceEventKind>().ok();
        // The newest leader_gained of the cluster; its instance is the leader unless it lost
        // it afterwards.
        let gained = self
            .instance_events
            .iter()
            .filter(|e| kind(e) == Some(InstanceEventKind::LeaderGained))
            .max_by_key(|e| e.id);
        by.into_iter()
            .map(|(instance, events)| {
                let last = |k: InstanceEventKind| {
                    events
                        .iter()
                        .filter(|e| kind(e) == Some(k))
                        .map(|e| e.id)
                        .max()
                };
                let presence = events
                    .iter()
                    .filter_map(|e| Some((kind(e)?, e)))
                    .filter(|(k, _)| PRESENCE.contains(k))
                    .max_by_key(|(_, e)| e.id)
                    .map(|(k, e)| (k, e.at_ms));
                let cordoned =
                    last(InstanceEventKind::Cordoned) > last(InstanceEventKind::Uncordoned);
                let leader = gained.is_some_and(|g| {
                    g.instance.as_deref() == Some(instance)
                        && Some(g.id) > last(InstanceEventKind::LeaderLost)
                });
                InstanceAt {
                    instance: instance.to_owned(),
                    presence,
                    cordoned,
                    leader,
                }
            })
            .collect()
    }
}

impl Store {
    /// What history recorded of `cluster` up to `at_ms` (inclusive): see `AsOf`. Three
    /// grouped reads over the cluster's rows up to the moment, and one for the oldest kept.
    pub async fn as_of(&self, cluster: &str, at_ms: i64) -> Result<AsOf, StoreError> {
        let last_per = |kind: &str, group: &str| {
            let mut sql = Sql::new(ENTRY_COLUMNS);
            sql.push(" AND id IN (SELECT MAX(id) FROM history WHERE kind = ");
            sql.push(kind);
            sql.filter(" AND cluster = {}", Arg::Text(cluster.to_owned()));
            sql.filter(" AND at_ms <= {} GROUP BY ", Arg::Int(at_ms));
            sql.push(group);
            sql.push(")");
            sql
        };
        let read = async |mut sql: Sql, order: &str| -> Result<Vec<HistoryEntry>, StoreError> {
            sql.push(order);
            sql.fetch_all(self)
                .await?
                .iter()
                .map(entry_from_row)
                .collect()
        };
        let targets = read(last_per("'ownership'", "target"), " ORDER BY target, id").await?;
        let instance_events = read(
            last_per("'instance'", "instance, event"),
            " ORDER BY instance, id",
        )
        .await?;
        let operations = read(last_per("'operation'", "operation_id"), " ORDER BY id").await?;
        let mut oldest = Sql::new("SELECT MIN(at_ms) AS first FROM history WHERE 1 = 1");
        oldest.filter(" AND cluster = {}", Arg::Text(cluster.to_owned()));
        let kept_from_ms = match oldest.fetch_all(self).await?.first() {
            Some(row) => row.try_get::<Option<i64>, _>("first")?,
            None => None,
        };
        Ok(AsOf {
            at_ms,
            kept_from_ms,
            targets,
            instance_events,
            operations,
        })
    }
}
