-- An ownership change's handoff gap: how long (ms) the target had no live holder working on it,
-- as the control plane observed it (`LeaseEntry::handoff_gap_ms`); NULL when not a handoff or
-- not known. Keep in step with ../postgres/0005_handoff_gap.sql.
ALTER TABLE history ADD COLUMN gap_ms INTEGER;
