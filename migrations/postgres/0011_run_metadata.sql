-- Runs carry metadata (string labels clients find them by) and a folded copy of the title
-- for the title search; the store writes both with the rest of the projection.
-- The metadata index is partial: runs without labels, most of them, cost it nothing on
-- each append, and a query with metadata filters also says `metadata <> '{}'` to use it.
-- Titles written before this migration are folded by `lower()`; the next append of a run
-- folds its title in Rust, like every later one.
-- Append-only: never edit this file once applied; add a new migration instead.
ALTER TABLE runs ADD COLUMN metadata JSONB NOT NULL DEFAULT '{}'::jsonb;
ALTER TABLE runs ADD COLUMN title_folded TEXT;
-- How the last turn ended, and the failed turns in a row since one completed (runs fail
-- at their agent's `limits.max_failed_turns`).
ALTER TABLE runs ADD COLUMN last_turn_outcome TEXT;
ALTER TABLE runs ADD COLUMN failed_turns BIGINT NOT NULL DEFAULT 0;
UPDATE runs SET title_folded = lower(title) WHERE title IS NOT NULL;
CREATE INDEX runs_by_metadata ON runs USING GIN (metadata jsonb_path_ops)
    WHERE metadata <> '{}'::jsonb;
CREATE INDEX runs_by_tenant_agent ON runs (tenant_id, agent_id, id DESC);
-- An archived agent takes no new runs; the runs it has go on. Null: in use.
ALTER TABLE agents ADD COLUMN archived_at TIMESTAMPTZ;
-- An archived tool is offered to no new agent version; the versions that name it keep it.
ALTER TABLE tools ADD COLUMN archived_at TIMESTAMPTZ;
