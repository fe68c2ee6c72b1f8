-- An ownership change by a hand-over whose old holder's app proves its stops and knew when it
-- last worked on the target (`leasehold.io/stopped-at`): the work-level gap in ms, from then to
-- the new holder's app's first work on it (`app-work`'s `started`), filled in once when the new
-- holder reports it — the one column of this append-only table written after its row. NULL when
-- not known. Keep in step with ../postgres/0008_work_gap.sql.
ALTER TABLE history ADD COLUMN work_gap_ms INTEGER;
