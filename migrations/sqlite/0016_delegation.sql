-- Delegation: a run started by another run's `delegate` tool call names its parent, so a
-- parent's children are found (listed, and cancelled with it).
-- Append-only: never edit this file once applied; add a new migration instead.
ALTER TABLE runs ADD COLUMN parent_run_id BLOB;
CREATE INDEX runs_by_parent ON runs (tenant_id, parent_run_id) WHERE parent_run_id IS NOT NULL;
