-- History: one append-only table for ownership changes, instance events and operation audit
-- entries (kind). Times are unix milliseconds. Integers are BIGINT (sqlx's Any driver reads
-- them as i64). Keep in step with ../sqlite/0001_history.sql.
CREATE TABLE history (
    id             BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at_ms          BIGINT NOT NULL,
    kind           TEXT   NOT NULL,  -- ownership | instance | operation
    cluster        TEXT   NOT NULL,
    target         TEXT,
    instance       TEXT,
    from_instance  TEXT,
    to_instance    TEXT,
    cause          TEXT,
    event          TEXT,
    operation_id   TEXT,
    actor          TEXT,
    detail         TEXT,
    acquired_at_ms BIGINT
);

-- The same ownership change seen twice (two replicas) is stored once.
CREATE UNIQUE INDEX history_ownership_once
    ON history (cluster, target, COALESCE(to_instance, ''), acquired_at_ms)
    WHERE kind = 'ownership' AND acquired_at_ms IS NOT NULL;

CREATE INDEX history_cluster_id ON history (cluster, id);
CREATE INDEX history_cluster_target_id ON history (cluster, target, id);
CREATE INDEX history_cluster_instance_id ON history (cluster, instance, id);
CREATE INDEX history_cluster_from_id ON history (cluster, from_instance, id);
CREATE INDEX history_cluster_to_id ON history (cluster, to_instance, id);
CREATE INDEX history_at ON history (at_ms);
CREATE INDEX history_operation_id ON history (operation_id, id);
