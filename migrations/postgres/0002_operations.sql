-- Operations (rebalance, remove-instance) with their moves, and the cordon list.
-- Ids are uuid v7 TEXT, times unix milliseconds (BIGINT), states model.rs words.
-- Keep in step with ../sqlite/0002_operations.sql.
CREATE TABLE operations (
    id             TEXT   PRIMARY KEY,
    cluster        TEXT   NOT NULL,
    kind           TEXT   NOT NULL,
    state          TEXT   NOT NULL,
    requested_by   TEXT   NOT NULL,
    reason         TEXT   NOT NULL,
    instance       TEXT,
    params         TEXT   NOT NULL,  -- JSON (TEXT: the Any driver has no JSON type)
    phase          TEXT,             -- remove-instance progress marker
    created_at_ms  BIGINT NOT NULL,
    updated_at_ms  BIGINT NOT NULL,
    started_at_ms  BIGINT,
    finished_at_ms BIGINT,
    error          TEXT
);
CREATE INDEX operations_created ON operations (created_at_ms, id);
CREATE INDEX operations_cluster_created ON operations (cluster, created_at_ms, id);
CREATE INDEX operations_state_created ON operations (state, created_at_ms, id);

CREATE TABLE moves (
    operation_id   TEXT   NOT NULL REFERENCES operations (id) ON DELETE CASCADE,
    seq            BIGINT NOT NULL,  -- 1, 2, ... in plan order
    target         TEXT   NOT NULL,
    from_instance  TEXT,
    to_instance    TEXT   NOT NULL,
    state          TEXT   NOT NULL,
    attempts       BIGINT NOT NULL DEFAULT 0,
    started_at_ms  BIGINT,
    finished_at_ms BIGINT,
    error          TEXT,
    PRIMARY KEY (operation_id, seq)
);

CREATE TABLE cordons (
    cluster        TEXT   NOT NULL,
    instance       TEXT   NOT NULL,
    cordoned_by    TEXT   NOT NULL,
    cordoned_at_ms BIGINT NOT NULL,
    PRIMARY KEY (cluster, instance)
);
