-- Schedules: an agent's runs started on a timetable. The definition is kept whole as
-- JSON (`baton_core::model::ScheduleSpec`); the columns beside it are what the job and
-- the lists search by. Every change, a fire's included, bumps `version`, and each write
-- names the version it read, so replicas agree on one outcome per fire time.
-- Append-only: never edit this file once applied; add a new migration instead.
CREATE TABLE schedules (
    tenant_id      BLOB NOT NULL REFERENCES tenants (id),
    id             BLOB NOT NULL,
    agent_id       BLOB NOT NULL,
    spec           TEXT NOT NULL,
    -- `active`, `paused` or `ended`.
    state          TEXT NOT NULL,
    paused_reason  TEXT,
    -- The next fire time (Unix milliseconds); NULL once ended.
    next_fire_ms   INTEGER,
    -- A fire decided and not yet recorded (`baton_core::model::PendingFire`).
    pending        TEXT,
    last_fire_at   TEXT,
    last_run_id    BLOB,
    fires          INTEGER NOT NULL DEFAULT 0,
    skipped        INTEGER NOT NULL DEFAULT 0,
    owner          TEXT NOT NULL,
    version        INTEGER NOT NULL,
    created_at     TEXT NOT NULL,
    updated_at     TEXT NOT NULL,
    PRIMARY KEY (tenant_id, id)
) STRICT;

-- The job's look across tenants: active schedules by next fire time, and pending fires.
CREATE INDEX schedules_due ON schedules (next_fire_ms) WHERE state = 'active';
CREATE INDEX schedules_pending ON schedules (updated_at) WHERE pending IS NOT NULL;
CREATE INDEX schedules_by_agent ON schedules (tenant_id, agent_id, id);
