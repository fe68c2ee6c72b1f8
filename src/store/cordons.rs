//! Cordons: the instances a cluster's placement must avoid (remove-instance cordons its
//! instance first; a person may cordon one by hand). They survive restarts, and every change is
//! recorded as a `cordoned`/`uncordoned` instance event naming who asked.
//!
//! It must not: enforce the cordon (placement reads [`Store::cordons`]) or touch operations.

use sqlx::Row as _;

use super::history::{HistoryKind, NewEntry, insert_entry};
use super::{Store, StoreError};
use crate::model::InstanceEventKind;

impl Store {
    /// Cordons (`true`) or uncordons an instance. Returns whether anything changed; a change
    /// also records a `cordoned`/`uncordoned` instance event with `by` as the actor.
    pub async fn set_cordon(
        &self,
        cluster: &str,
        instance: &str,
        cordoned: bool,
        by: &str,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let mut tx = self.pool().begin().await?;
        let changed = if cordoned {
            sqlx::query(
                "INSERT INTO cordons (cluster, instance, cordoned_by, cordoned_at_ms) \
                 VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
            )
            .bind(cluster)
            .bind(instance)
            .bind(by)
            .bind(now_ms)
            .execute(&mut *tx)
            .await?
        } else {
            sqlx::query("DELETE FROM cordons WHERE cluster = $1 AND instance = $2")
                .bind(cluster)
                .bind(instance)
                .execute(&mut *tx)
                .await?
        }
        .rows_affected()
            > 0;
        if !changed {
            tx.rollback().await?;
            return Ok(false);
        }
        let kind = if cordoned {
            InstanceEventKind::Cordoned
        } else {
            InstanceEventKind::Uncordoned
        };
        insert_entry(
            &mut tx,
            HistoryKind::Instance,
            &NewEntry {
                at_ms: now_ms,
                cluster,
                instance: Some(instance),
                event: kind.as_str(),
                operation: None,
                actor: Some(by),
                detail: None,
            },
        )
        .await?;
        tx.commit().await?;
        Ok(true)
    }

    /// The cordoned instances of a cluster, sorted.
    pub async fn cordons(&self, cluster: &str) -> Result<Vec<String>, StoreError> {
        let rows = sqlx::query("SELECT instance FROM cordons WHERE cluster = $1 ORDER BY instance")
            .bind(cluster)
            .fetch_all(self.pool())
            .await?;
        rows.iter()
            .map(|r| r.try_get("instance").map_err(StoreError::from))
            .collect()
    }
}
