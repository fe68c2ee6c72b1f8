-- Automatic rebalancing paused per cluster (by a person, from the API or the dashboard): while
-- a row is here, a join does not start or propose a rebalance. Keep in step with
-- ../postgres/0006_automation.sql.
CREATE TABLE automation_pauses (
    cluster      TEXT   NOT NULL PRIMARY KEY,
    paused_by    TEXT   NOT NULL,
    paused_at_ms BIGINT NOT NULL,
    reason       TEXT   NOT NULL
);
