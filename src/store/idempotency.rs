//! Idempotency keys: the store half of the `Idempotency-Key` header
//! (draft-ietf-httpapi-idempotency-key-header). A key is scoped by who sent it, the method and
//! the path; claiming it records the fingerprint of the request body and a claim id, and
//! completing it records the response to replay. Rows live in the database, not in memory, so
//! every replica sharing a PostgreSQL sees the same keys. Expired rows are purged on claim and
//! ignored by lookups.
//!
//! It must not: decide what is stored or for how long (the HTTP layer passes the times and
//! picks the responses worth keeping), or log a key.

use sqlx::Row as _;
use sqlx::any::AnyRow;

use super::{Store, StoreError};

/// Which request a key belongs to: the same key sent by another caller, or to another path, is
/// another key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyScope<'a> {
    /// The authenticated user.
    pub principal: &'a str,
    /// The request method (`POST`).
    pub method: &'a str,
    /// The request path.
    pub path: &'a str,
    /// The header's value.
    pub key: &'a str,
}

/// A response kept for replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResponse {
    /// The HTTP status.
    pub status: u16,
    /// The headers worth replaying (`Content-Type`, `Location`), in order.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

/// What claiming a key found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The key is now held under this claim id: run the request, then
    /// [`Store::complete_idempotency_key`] or [`Store::release_idempotency_key`].
    Claimed(String),
    /// A request with this key and the same body finished: its response.
    Replay(StoredResponse),
    /// The key was used with a different body.
    Mismatch,
    /// A request with this key is still running.
    InFlight,
}

/// A live key as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRecord {
    /// SHA-256 of the first request's body (hex).
    pub fingerprint: String,
    /// When the current claim was made.
    pub claimed_at_ms: i64,
    /// When the key is forgotten.
    pub expires_at_ms: i64,
    /// The response, once the request completed.
    pub response: Option<StoredResponse>,
}

const PK: &str = "principal = $1 AND method = $2 AND path = $3 AND idem_key = $4";

fn record_from_row(row: &AnyRow) -> Result<KeyRecord, StoreError> {
    let status: Option<i64> = row.try_get("status")?;
    let response = match status {
        None => None,
        Some(status) => {
            let status = u16::try_from(status)
                .map_err(|_| StoreError::Corrupt(format!("idempotency status {status}")))?;
            let headers: Option<String> = row.try_get("headers")?;
            let headers = match headers {
                Some(h) => serde_json::from_str(&h)
                    .map_err(|e| StoreError::Corrupt(format!("idempotency headers: {e}")))?,
                None => Vec::new(),
            };
            let body: Option<Vec<u8>> = row.try_get("body")?;
            Some(StoredResponse {
                status,
                headers,
                body: body.unwrap_or_default(),
            })
        }
    };
    Ok(KeyRecord {
        fingerprint: row.try_get("fingerprint")?,
        claimed_at_ms: row.try_get("claimed_at_ms")?,
        expires_at_ms: row.try_get("expires_at_ms")?,
        response,
    })
}

const RECORD_COLUMNS: &str = "SELECT fingerprint, claim_id, claimed_at_ms, expires_at_ms, status, headers, body \
     FROM idempotency_keys WHERE ";

impl Store {
    /// Claims `scope` for a request whose body hashes to `fingerprint`, or says why not. Rows
    /// that expired by `now_ms` are purged first (every key, not only this one). A claim still
    /// in flight that was made before `stale_before_ms` (its request died with its process) is
    /// taken over. A new claim lives until `expires_at_ms`.
    pub async fn claim_idempotency_key(
        &self,
        scope: &KeyScope<'_>,
        fingerprint: &str,
        now_ms: i64,
        expires_at_ms: i64,
        stale_before_ms: i64,
    ) -> Result<Claim, StoreError> {
        let claim_id = uuid::Uuid::new_v4().to_string();
        let mut tx = self.pool().begin().await?;
        // A write first (SQLite takes its write lock up front), and the way to a fresh claim
        // of an expired key.
        sqlx::query("DELETE FROM idempotency_keys WHERE expires_at_ms <= $1")
            .bind(now_ms)
            .execute(&mut *tx)
            .await?;
        let inserted = sqlx::query(
            "INSERT INTO idempotency_keys (principal, method, path, idem_key, fingerprint, \
             claim_id, claimed_at_ms, expires_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
             ON CONFLICT DO NOTHING",
        )
        .bind(scope.principal)
        .bind(scope.method)
        .bind(scope.path)
        .bind(scope.key)
        .bind(fingerprint)
        .bind(&claim_id)
        .bind(now_ms)
        .bind(expires_at_ms)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if inserted == 1 {
            tx.commit().await?;
            return Ok(Claim::Claimed(claim_id));
        }
        let row = sqlx::query(sqlx::AssertSqlSafe(format!("{RECORD_COLUMNS}{PK}")))
            .bind(scope.principal)
            .bind(scope.method)
            .bind(scope.path)
            .bind(scope.key)
            .fetch_one(&mut *tx)
            .await?;
        let record = record_from_row(&row)?;
        let claim = if record.fingerprint != fingerprint {
            Claim::Mismatch
        } else if let Some(response) = record.response {
            Claim::Replay(response)
        } else if record.claimed_at_ms < stale_before_ms {
            let old: String = row.try_get("claim_id")?;
            let taken = sqlx::query(sqlx::AssertSqlSafe(format!(
                "UPDATE idempotency_keys SET claim_id = $5, claimed_at_ms = $6, \
                 expires_at_ms = $7 WHERE {PK} AND claim_id = $8 AND status IS NULL"
            )))
            .bind(scope.principal)
            .bind(scope.method)
            .bind(scope.path)
            .bind(scope.key)
            .bind(&claim_id)
            .bind(now_ms)
            .bind(expires_at_ms)
            .bind(old)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if taken == 1 {
                Claim::Claimed(claim_id)
            } else {
                Claim::InFlight
            }
        } else {
            Claim::InFlight
        };
        tx.commit().await?;
        Ok(claim)
    }

    /// Records the response of the request holding `claim_id`. False when the claim is no
    /// longer held (it went stale and another request took it over, or it expired).
    pub async fn complete_idempotency_key(
        &self,
        scope: &KeyScope<'_>,
        claim_id: &str,
        response: &StoredResponse,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let headers = serde_json::to_string(&response.headers)
            .map_err(|e| StoreError::Invalid(format!("idempotency headers: {e}")))?;
        let done = sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE idempotency_keys SET status = $5, headers = $6, body = $7, \
             completed_at_ms = $8 WHERE {PK} AND claim_id = $9 AND status IS NULL"
        )))
        .bind(scope.principal)
        .bind(scope.method)
        .bind(scope.path)
        .bind(scope.key)
        .bind(i64::from(response.status))
        .bind(headers)
        .bind(response.body.clone())
        .bind(now_ms)
        .bind(claim_id)
        .execute(self.pool())
        .await?
        .rows_affected();
        Ok(done == 1)
    }

    /// Gives up the claim `claim_id` without a response (the request failed in a way a retry
    /// may fix): the next request with the key runs. False when the claim is no longer held.
    pub async fn release_idempotency_key(
        &self,
        scope: &KeyScope<'_>,
        claim_id: &str,
    ) -> Result<bool, StoreError> {
        let gone = sqlx::query(sqlx::AssertSqlSafe(format!(
            "DELETE FROM idempotency_keys WHERE {PK} AND claim_id = $5 AND status IS NULL"
        )))
        .bind(scope.principal)
        .bind(scope.method)
        .bind(scope.path)
        .bind(scope.key)
        .bind(claim_id)
        .execute(self.pool())
        .await?
        .rows_affected();
        Ok(gone == 1)
    }

    /// The key `scope`, unless it is unknown or expired by `now_ms`.
    pub async fn idempotency_key(
        &self,
        scope: &KeyScope<'_>,
        now_ms: i64,
    ) -> Result<Option<KeyRecord>, StoreError> {
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "{RECORD_COLUMNS}{PK} AND expires_at_ms > $5"
        )))
        .bind(scope.principal)
        .bind(scope.method)
        .bind(scope.path)
        .bind(scope.key)
        .bind(now_ms)
        .fetch_optional(self.pool())
        .await?;
        row.as_ref().map(record_from_row).transpose()
    }
}
