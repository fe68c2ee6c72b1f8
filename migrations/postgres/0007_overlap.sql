-- An ownership change by an overlap hand-off (docs/protocol.md, "Overlap hand-off"): `proven`
-- or `unproven`, and for a proven one the overlap in ms; NULL for any other change. Keep in
-- step with ../sqlite/0007_overlap.sql.
ALTER TABLE history ADD COLUMN overlap TEXT;
ALTER TABLE history ADD COLUMN overlap_ms BIGINT;
