-- Schedules: an agent's runs started on a timetable. The definition is kept whole as
-- JSON (`baton_core::model::ScheduleSpec`); the columns beside it are what the job and
-- the lists search by. Every change, a fire's included, bumps `version`, and each write
-- names the version it read, so replicas agree on one outcome per fire time.
-- Append-only: never edit this file once applied; add a new migration instead.
CREATE TABLE schedules (
    tenant_id      UUID NOT NULL REFERENCES tenants (id),
    id             UUID NOT NULL,
    agent_id       UUID NOT NULL,
    spec           JSONB NOT NULL,
    -- `active`, `paused` or `ended`.
    state          TEXT NOT NULL,
    paused_reason  TEXT,
    -- The next fire time (Unix milliseconds); NULL once ended.
    next_fire_ms   BIGINT,
    -- A fire decided and not yet recorded (`baton_core::model::PendingFire`).
    pending        JSONB,
    last_fire_at   TIMESTAMPTZ,
    last_run_id    UUID,
    fires          BIGINT NOT NULL DEFAULT 0,
    skipped        BIGINT NOT NULL DEFAULT 0,
    owner          TEXT NOT NULL,
    version        BIGINT NOT NULL,
    created_at     TIMESTAMPTZ NOT NULL,
    updated_at     TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (tenant_id, id)
);

-- The job's look across tenants: active schedules by next fire time, and pending fires.
CREATE INDEX schedules_due ON schedules (next_fire_ms) WHERE state = 'active';
CREATE INDEX schedules_pending ON schedules (updated_at) WHERE pending IS NOT NULL;
CREATE INDEX schedules_by_agent ON schedules (tenant_id, agent_id, id);

-- Row-level security as on every tenant table (0006).
ALTER TABLE schedules ENABLE ROW LEVEL SECURITY;
ALTER TABLE schedules FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON schedules
    USING (tenant_id = NULLIF(current_setting('baton.tenant_id', true), '')::uuid
           OR current_setting('baton.scope', true) = 'all');
