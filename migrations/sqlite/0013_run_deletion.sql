-- A deleted run leaves no row behind: its idempotency records name it, so they go with
-- it. Records written before this migration name no run, and stay when it is deleted.
-- Append-only: never edit this file once applied; add a new migration instead.
ALTER TABLE idempotency ADD COLUMN run_id BLOB;
CREATE INDEX idempotency_by_run ON idempotency (tenant_id, run_id);
