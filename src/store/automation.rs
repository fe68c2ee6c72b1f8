//! Automation pauses: the clusters whose automatic rebalancing (`on_join`) a person paused,
//! with who, when and why. They survive restarts and are shared by every replica (the store is
//! the truth; the engine asks it before acting on a join).
//!
//! It must not: enforce the pause (the engine's join policy does) or audit it (the HTTP action
//! layer records who asked).

use sqlx::Row as _;

use super::{Store, StoreError};

/// A cluster's automatic rebalancing, paused.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct Pause {
    /// Who paused it.
    pub paused_by: String,
    /// When (unix ms).
    pub paused_at_ms: i64,
    /// Why, as they said.
    pub reason: String,
}

impl Store {
    /// Pauses (`Some((by, reason))`) or resumes (`None`) `cluster`'s automatic rebalancing.
    /// Returns whether anything changed (pausing a paused cluster keeps the first pause).
    pub async fn set_automation_pause(
        &self,
        cluster: &str,
        pause: Option<(&str, &str)>,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let done = match pause {
            Some((by, reason)) => {
                sqlx::query(
                    "INSERT INTO automation_pauses (cluster, paused_by, paused_at_ms, reason) \
                     VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
                )
                .bind(cluster)
                .bind(by)
                .bind(now_ms)
                .bind(reason)
                .execute(self.pool())
                .await?
            }
            None => {
                sqlx::query("DELETE FROM automation_pauses WHERE cluster = $1")
                    .bind(cluster)
                    .execute(self.pool())
                    .await?
            }
        };
        Ok(done.rows_affected() > 0)
    }

    /// `cluster`'s pause, if its automatic rebalancing is paused.
    pub async fn automation_pause(&self, cluster: &str) -> Result<Option<Pause>, StoreError> {
        let row = sqlx::query(
            "SELECT paused_by, paused_at_ms, reason FROM automation_pauses WHERE cluster = $1",
        )
        .bind(cluster)
        .fetch_optional(self.pool())
        .await?;
        row.map(|r| {
            Ok(Pause {
                paused_by: r.try_get("paused_by")?,
                paused_at_ms: r.try_get("paused_at_ms")?,
                reason: r.try_get("reason")?,
            })
        })
        .transpose()
        .map_err(|e: sqlx::Error| StoreError::from(e))
    }
}
