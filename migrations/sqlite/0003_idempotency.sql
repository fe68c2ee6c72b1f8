-- Idempotency keys (the Idempotency-Key header on POSTs): one row per caller, method, path and
-- key, claimed before the request runs and completed with its response. Times are unix
-- milliseconds. Keep in step with ../postgres/0003_idempotency.sql.
CREATE TABLE idempotency_keys (
    principal       TEXT    NOT NULL,  -- the authenticated user
    method          TEXT    NOT NULL,
    path            TEXT    NOT NULL,
    idem_key        TEXT    NOT NULL,  -- the header's value, 1..255 characters
    fingerprint     TEXT    NOT NULL,  -- SHA-256 of the request body, hex
    claim_id        TEXT    NOT NULL,  -- who holds it while in flight (uuid)
    claimed_at_ms   INTEGER NOT NULL,
    expires_at_ms   INTEGER NOT NULL,
    status          INTEGER,           -- NULL while in flight
    headers         TEXT,              -- JSON [[name, value], ..]
    body            BLOB,
    completed_at_ms INTEGER,
    PRIMARY KEY (principal, method, path, idem_key)
);
CREATE INDEX idempotency_keys_expires ON idempotency_keys (expires_at_ms);
