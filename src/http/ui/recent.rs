//! The cluster page's history, kept between renders: per cluster, its newest history rows (as
//! many as [`ROWS`]) and the recent events told from them, shared by every request for the page
//! (each open page's live refresh included). A request asks the store for the cluster's newest
//! row only; when that is the newest kept, nothing more is read or told again. Newer rows are
//! read by themselves and put in front of the kept ones, and the events told again (each
//! counted whole by the store, however far past the kept rows it reaches: `story::tell`).
//! Every [`REREAD_EVERY`] the rows are read in full again, so a row retention deleted, or one
//! that became visible after a newer one (PostgreSQL can commit ids out of order; SQLite
//! cannot), is set right within that time.
//!
//! It must not: decide what the rows mean (`story` and `charts` do), or keep anything a page
//! shows but the store's rows and what is told from them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::story::{self, Line};
use crate::store::{HistoryEntry, HistoryQuery, Store, StoreError};

/// History rows kept per cluster: enough that a few hundred moves told as one line still leave
/// room for the rest (the store's page limit).
pub const ROWS: u32 = 1000;
/// Events shown on a cluster's page.
pub const EVENTS: usize = 25;
/// How long kept rows are trusted before they are read in full again.
const REREAD_EVERY: Duration = Duration::from_secs(10);

/// A cluster's newest history rows and its recent events, as of one read.
#[derive(Debug)]
pub struct Kept {
    /// Newest first, at most [`ROWS`]; fewer only when the cluster has no more.
    pub rows: Vec<HistoryEntry>,
    /// `rows` told as a story, at most [`EVENTS`] lines.
    pub lines: Vec<Line>,
    /// When the rows were last read in full.
    read_at: Instant,
}

impl Kept {
    /// `rows`, the newest of `cluster`, and their story (each event counted whole, however
    /// far past `rows` it reaches).
    async fn tell(
        store: &Store,
        cluster: &str,
        rows: Vec<HistoryEntry>,
        read_at: Instant,
    ) -> Result<Self, StoreError> {
        let lines = story::tell(store, &query(cluster, ROWS), rows.clone(), EVENTS).await?;
        Ok(Kept {
            rows,
            lines,
            read_at,
        })
    }
}

/// One cluster's slot: a request holding it is the only one reading that cluster's history, so
/// concurrent refreshes after an event read it once, and the others take what it read.
type Slot = Arc<tokio::sync::Mutex<Option<Arc<Kept>>>>;

/// The kept history of every cluster (cheap to clone: one shared map). Made with the
/// dashboard's router, so each served app has its own.
#[derive(Clone, Default)]
pub struct Recent(Arc<Mutex<HashMap<String, Slot>>>);

impl Recent {
    /// `cluster`'s newest history rows and recent events, as the store has them now.
    pub async fn get(&self, store: &Store, cluster: &str) -> Result<Arc<Kept>, StoreError> {
        let slot = {
            let mut slots = self.0.lock().unwrap_or_else(|e| e.into_inner());
            slots.entry(cluster.to_owned()).or_default().clone()
        };
        let mut slot = slot.lock().await;
        let newest = read(store, cluster, 1).await?.first().map(|e| e.id);
        if let Some(kept) = slot.as_ref().filter(|k| k.read_at.elapsed() < REREAD_EVERY) {
            let have = kept.rows.first().map(|e| e.id);
            if newest == have {
                return Ok(kept.clone());
            }
            // Ids only grow: at most `n - h` rows are new (fewer when other clusters' rows
            // took ids in between); if they could fill the kept rows, read them whole instead.
            if let (Some(n), Some(h)) = (newest, have)
                && n > h
                && n - h < i64::from(ROWS)
            {
                // One more than can be new, to reach back to a kept row.
                let limit = (n - h + 1) as u32;
                let mut rows = read(store, cluster, limit).await?;
                // Rows written since the look at the newest can push older new ones out of
                // this read: it is whole only if it reached back to what is kept.
                if rows.len() < limit as usize || rows.last().is_some_and(|e| e.id <= h) {
                    rows.retain(|e| e.id > h);
                    rows.extend(kept.rows.iter().take(ROWS as usize - rows.len()).cloned());
                    let kept = Arc::new(Kept::tell(store, cluster, rows, kept.read_at).await?);
                    *slot = Some(kept.clone());
                    return Ok(kept);
                }
            }
        }
        let rows = if newest.is_some() {
            read(store, cluster, ROWS).await?
        } else {
            Vec::new()
        };
        let kept = Arc::new(Kept::tell(store, cluster, rows, Instant::now()).await?);
        *slot = Some(kept.clone());
        Ok(kept)
    }
}

/// The listing of `cluster`'s newest `limit` history rows.
fn query(cluster: &str, limit: u32) -> HistoryQuery {
    HistoryQuery {
        cluster: Some(cluster.to_owned()),
        limit,
        ..Default::default()
    }
}

/// The newest `limit` history rows of `cluster`.
async fn read(store: &Store, cluster: &str, limit: u32) -> Result<Vec<HistoryEntry>, StoreError> {
    Ok(store.history(&query(cluster, limit)).await?.items)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Cause;
    use crate::store::OwnershipChange;

    fn change(cluster: &str, target: usize, at_ms: i64) -> OwnershipChange {
        OwnershipChange {
            overlap: None,
            cluster: cluster.into(),
            target: format!("t-{target}"),
            from: None,
            to: Some("m-0".into()),
            cause: Cause::Initial,
            operation: None,
            at_ms,
            acquired_at_ms: Some(at_ms),
            gap_ms: None,
        }
    }

    fn ids(kept: &Kept) -> Vec<i64> {
        kept.rows.iter().map(|e| e.id).collect()
    }

    /// What is kept is always the newest rows the store lists, whether they were read again in
    /// full, read by themselves, or not read at all; between other clusters' rows and past the
    /// kept limit.
    #[tokio::test]
    async fn kept_rows_are_the_newest_the_store_has() {
        let store = Store::connect("sqlite::memory:").await.unwrap();
        let recent = Recent::default();
        let newest = async |n: u32| -> Vec<i64> {
            read(&store, "c", n)
                .await
                .unwrap()
                .iter()
                .map(|e| e.id)
                .collect()
        };
        assert!(recent.get(&store, "c").await.unwrap().rows.is_empty());
        let mut at = 1_000;
        let mut add = async |cluster: &str, n: usize| {
            let rows: Vec<_> = (0..n)
                .map(|k| change(cluster, at as usize + k, at))
                .collect();
            at += 1;
            store.record_ownerships(&rows).await.unwrap();
        };
        add("c", 3).await;
        add("other", 2).await;
        let first = recent.get(&store, "c").await.unwrap();
        assert_eq!(ids(&first), newest(ROWS).await);
        assert_eq!(ids(&first).len(), 3);
        // Nothing new: the same rows, not read again.
        assert!(Arc::ptr_eq(&first, &recent.get(&store, "c").await.unwrap()));
        // New rows between another cluster's: read by themselves, in front.
        add("c", 2).await;
        add("other", 5).await;
        add("c", 1).await;
        let second = recent.get(&store, "c").await.unwrap();
        assert_eq!(ids(&second), newest(ROWS).await);
        assert_eq!(ids(&second).len(), 6);
        assert_eq!(second.read_at, first.read_at, "read by themselves");
        assert_eq!(second.lines.len(), 1, "one story: {:?}", second.lines);
        // More than are kept: still the newest, at most ROWS.
        add("c", ROWS as usize + 10).await;
        let third = recent.get(&store, "c").await.unwrap();
        assert_eq!(ids(&third), newest(ROWS).await);
        assert_eq!(third.rows.len(), ROWS as usize);
        add("c", 7).await;
        let fourth = recent.get(&store, "c").await.unwrap();
        assert_eq!(ids(&fourth), newest(ROWS).await);
        assert_eq!(fourth.read_at, third.read_at, "read by themselves");
        // Another cluster is kept apart.
        let other = recent.get(&store, "other").await.unwrap();
        assert_eq!(other.rows.len(), 7);
        assert!(other.rows.iter().all(|e| e.cluster == "other"));
    }
}
