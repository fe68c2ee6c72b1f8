-- A member's overrun report (an instance event 'overrun', keyed by the member and the time it
-- noticed, both from its member Lease) seen by two replicas, or read again after a restart, is
-- stored once. Keep in step with ../postgres/0004_overruns_once.sql.
CREATE UNIQUE INDEX history_overrun_once
    ON history (cluster, instance, at_ms)
    WHERE kind = 'instance' AND event = 'overrun';
