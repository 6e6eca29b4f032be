-- Retention: a tenant's default for how long its ended runs are kept, an agent's own
-- (copied from its current version's `limits.retention_days`), and the background jobs
-- any replica may run, one at a time, under a lease kept in `jobs`.
-- Append-only: never edit this file once applied; add a new migration instead.
CREATE TABLE retention_policies (
    tenant_id        BLOB PRIMARY KEY REFERENCES tenants (id),
    -- Days an ended run is kept after its last change; NULL: kept for good.
    run_days         INTEGER,
    -- Runs the retention job deleted for this tenant, and when it last did.
    deleted_runs     INTEGER NOT NULL DEFAULT 0,
    last_deleted_at  TEXT,
    -- When an admin last set the policy; NULL: never (a row the job made to count).
    updated_at       TEXT
) STRICT;

ALTER TABLE agents ADD COLUMN run_retention_days INTEGER;

-- Ended runs by age, for the retention job.
CREATE INDEX runs_ended_by_age ON runs (updated_at)
    WHERE status IN ('completed', 'failed', 'cancelled');
-- Idempotency records by age, for pruning past their window.
CREATE INDEX idempotency_by_age ON idempotency (created_at);

-- Background jobs across replicas: the holder of a job's lease runs its round; the next
-- round is due at `next_round_ms` (Unix milliseconds, as run leases keep theirs).
CREATE TABLE jobs (
    name           TEXT PRIMARY KEY,
    owner          TEXT,
    epoch          INTEGER NOT NULL DEFAULT 0,
    expires_ms     INTEGER,
    next_round_ms  INTEGER NOT NULL DEFAULT 0,
    rounds         INTEGER NOT NULL DEFAULT 0,
    -- What the last round did, as the job reports it (JSON).
    last_round     TEXT,
    updated_at     TEXT
) STRICT;
INSERT INTO jobs (name) VALUES ('retention');
