//! How often targets changed hands lately: the targets of a cluster that moved between members
//! more than a given number of times since a moment, read from the `history` table (the plan
//! warnings' "moved N times in the last 10 minutes"). Reads only.

use sqlx::Row as _;

use super::{Store, StoreError};

/// A target that moved often, and how often.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrequentMover {
    /// The target's key.
    pub target: String,
    /// Ownership changes from one member to another since the moment asked about.
    pub moves: i64,
}

impl Store {
    /// The targets of `cluster` that went from one member to another more than `more_than`
    /// times at or after `since_ms` (first owners, releases and a holder taking its own target again do not count), most moved first
    /// (ties by key), at most `limit` of them.
    pub async fn frequent_movers(
        &self,
        cluster: &str,
        since_ms: i64,
        more_than: i64,
        limit: i64,
    ) -> Result<Vec<FrequentMover>, StoreError> {
        let rows = sqlx::query(
            "SELECT target, COUNT(*) AS moves FROM history \
             WHERE kind = 'ownership' AND cluster = $1 AND at_ms >= $2 \
               AND from_instance IS NOT NULL AND to_instance IS NOT NULL \
               AND from_instance <> to_instance \
             GROUP BY target HAVING COUNT(*) > $3 \
             ORDER BY moves DESC, target LIMIT $4",
        )
        .bind(cluster)
        .bind(since_ms)
        .bind(more_than)
        .bind(limit)
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|r| {
                Ok(FrequentMover {
                    target: r.try_get("target")?,
                    moves: r.try_get("moves")?,
                })
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(StoreError::from)
    }
}
