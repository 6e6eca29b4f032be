-- Baton's initial schema (Postgres). Append-only: never edit this file once applied;
-- add a new migration instead. Lease columns on `runs` come in a later migration.

CREATE TABLE tenants (
    id          UUID PRIMARY KEY,
    name        TEXT NOT NULL UNIQUE,
    created_at  TIMESTAMPTZ NOT NULL
);

CREATE TABLE api_keys (
    id            UUID PRIMARY KEY,
    tenant_id     UUID NOT NULL REFERENCES tenants (id),
    name          TEXT NOT NULL,
    prefix        TEXT NOT NULL,
    token_hash    BYTEA NOT NULL UNIQUE,
    role          TEXT NOT NULL,
    created_at    TIMESTAMPTZ NOT NULL,
    expires_at    TIMESTAMPTZ,
    revoked_at    TIMESTAMPTZ,
    last_used_at  TIMESTAMPTZ
);

CREATE INDEX api_keys_by_tenant ON api_keys (tenant_id, id DESC);

CREATE TABLE agents (
    tenant_id     UUID NOT NULL REFERENCES tenants (id),
    id            UUID NOT NULL,
    name          TEXT NOT NULL,
    instructions  TEXT NOT NULL,
    provider      JSONB NOT NULL,
    version       BIGINT NOT NULL,
    created_at    TIMESTAMPTZ NOT NULL,
    updated_at    TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (tenant_id, id)
);

-- The runs projection: one row per stream, written in the append transaction.
CREATE TABLE runs (
    id                UUID PRIMARY KEY,
    tenant_id         UUID NOT NULL REFERENCES tenants (id),
    agent_id          UUID NOT NULL,
    agent_version     BIGINT NOT NULL,
    title             TEXT,
    status            TEXT NOT NULL,
    version           BIGINT NOT NULL,
    message_count     BIGINT NOT NULL,
    turn_count        BIGINT NOT NULL,
    cancel_requested  BOOLEAN NOT NULL,
    last_error        JSONB,
    created_at        TIMESTAMPTZ NOT NULL,
    updated_at        TIMESTAMPTZ NOT NULL
);

CREATE INDEX runs_by_tenant ON runs (tenant_id, id DESC);
CREATE INDEX runs_by_tenant_status ON runs (tenant_id, status, id DESC);
-- What an engine must drive after a start; the predicate matches `runs_needing_drive`.
CREATE INDEX runs_needing_drive ON runs (id)
    WHERE status IN ('queued', 'running')
       OR (cancel_requested AND status NOT IN ('completed', 'failed', 'cancelled'));

-- The source of truth. `position` is allocated before commit: it orders events globally
-- but a reader of "position > P" can miss a late committer (see DESIGN.md §2).
CREATE TABLE events (
    position     BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id    UUID NOT NULL,
    stream_id    UUID NOT NULL,
    version      BIGINT NOT NULL CHECK (version > 0),
    id           UUID NOT NULL UNIQUE,
    type         TEXT NOT NULL,
    schema       INTEGER NOT NULL,
    data         JSONB NOT NULL,
    meta         JSONB NOT NULL,
    recorded_at  TIMESTAMPTZ NOT NULL,
    -- The backstop against two writers landing the same version.
    CONSTRAINT events_stream_version UNIQUE (stream_id, version)
);

-- The messages projection, written in the append transaction.
CREATE TABLE messages (
    tenant_id   UUID NOT NULL,
    run_id      UUID NOT NULL,
    seq         BIGINT NOT NULL,
    id          UUID NOT NULL,
    role        TEXT NOT NULL,
    content     TEXT NOT NULL,
    version     BIGINT NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (run_id, seq)
);

CREATE TABLE idempotency (
    tenant_id    UUID NOT NULL,
    request_id   TEXT NOT NULL,
    command      TEXT NOT NULL,
    fingerprint  TEXT NOT NULL,
    response     JSONB NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (tenant_id, request_id)
);
