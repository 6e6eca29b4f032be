-- Baton's initial schema (SQLite). Append-only: never edit this file once applied;
-- add a new migration instead. Lease columns on `runs` come in a later migration.
--
-- Types as sqlx encodes them: UUIDs as 16-byte BLOBs, timestamps as RFC 3339 TEXT,
-- JSON as TEXT, booleans as INTEGER 0/1. STRICT tables reject anything else.

CREATE TABLE tenants (
    id          BLOB NOT NULL PRIMARY KEY,
    name        TEXT NOT NULL UNIQUE,
    created_at  TEXT NOT NULL
) STRICT;

CREATE TABLE api_keys (
    id            BLOB NOT NULL PRIMARY KEY,
    tenant_id     BLOB NOT NULL REFERENCES tenants (id),
    name          TEXT NOT NULL,
    prefix        TEXT NOT NULL,
    token_hash    BLOB NOT NULL UNIQUE,
    role          TEXT NOT NULL,
    created_at    TEXT NOT NULL,
    expires_at    TEXT,
    revoked_at    TEXT,
    last_used_at  TEXT
) STRICT;

CREATE INDEX api_keys_by_tenant ON api_keys (tenant_id, id DESC);

CREATE TABLE agents (
    tenant_id     BLOB NOT NULL REFERENCES tenants (id),
    id            BLOB NOT NULL,
    name          TEXT NOT NULL,
    instructions  TEXT NOT NULL,
    provider      TEXT NOT NULL,
    version       INTEGER NOT NULL,
    created_at    TEXT NOT NULL,
    updated_at    TEXT NOT NULL,
    PRIMARY KEY (tenant_id, id)
) STRICT;

-- The runs projection: one row per stream, written in the append transaction.
CREATE TABLE runs (
    id                BLOB NOT NULL PRIMARY KEY,
    tenant_id         BLOB NOT NULL REFERENCES tenants (id),
    agent_id          BLOB NOT NULL,
    agent_version     INTEGER NOT NULL,
    title             TEXT,
    status            TEXT NOT NULL,
    version           INTEGER NOT NULL,
    message_count     INTEGER NOT NULL,
    turn_count        INTEGER NOT NULL,
    cancel_requested  INTEGER NOT NULL,
    last_error        TEXT,
    created_at        TEXT NOT NULL,
    updated_at        TEXT NOT NULL
) STRICT;

CREATE INDEX runs_by_tenant ON runs (tenant_id, id DESC);
CREATE INDEX runs_by_tenant_status ON runs (tenant_id, status, id DESC);
-- What an engine must drive after a start; the predicate matches `runs_needing_drive`.
CREATE INDEX runs_needing_drive ON runs (id)
    WHERE status IN ('queued', 'running')
       OR (cancel_requested AND status NOT IN ('completed', 'failed', 'cancelled'));

-- The source of truth. `position` orders events globally.
CREATE TABLE events (
    position     INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id    BLOB NOT NULL,
    stream_id    BLOB NOT NULL,
    version      INTEGER NOT NULL CHECK (version > 0),
    id           BLOB NOT NULL UNIQUE,
    type         TEXT NOT NULL,
    schema       INTEGER NOT NULL,
    data         TEXT NOT NULL,
    meta         TEXT NOT NULL,
    recorded_at  TEXT NOT NULL,
    -- The backstop against two writers landing the same version.
    CONSTRAINT events_stream_version UNIQUE (stream_id, version)
) STRICT;

-- The messages projection, written in the append transaction.
CREATE TABLE messages (
    tenant_id   BLOB NOT NULL,
    run_id      BLOB NOT NULL,
    seq         INTEGER NOT NULL,
    id          BLOB NOT NULL,
    role        TEXT NOT NULL,
    content     TEXT NOT NULL,
    version     INTEGER NOT NULL,
    created_at  TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
) STRICT;

CREATE TABLE idempotency (
    tenant_id    BLOB NOT NULL,
    request_id   TEXT NOT NULL,
    command      TEXT NOT NULL,
    fingerprint  TEXT NOT NULL,
    response     TEXT NOT NULL,
    created_at   TEXT NOT NULL,
    PRIMARY KEY (tenant_id, request_id)
) STRICT;
