-- Tools, agent versions and tool-call receipts (the run engine). Append-only: never edit
-- this file once applied; add a new migration instead.

-- What a turn waits for (approvals, client tool outputs, uncertain calls).
ALTER TABLE runs ADD COLUMN pending_actions BIGINT NOT NULL DEFAULT 0;

-- Agents gain the tools they may call and the limits of a turn; every version of an
-- agent is kept, because a run keeps using the version it started with.
ALTER TABLE agents ADD COLUMN tools JSONB NOT NULL DEFAULT '[]';
ALTER TABLE agents ADD COLUMN limits JSONB NOT NULL DEFAULT '{}';

CREATE TABLE agent_versions (
    tenant_id     UUID NOT NULL REFERENCES tenants (id),
    agent_id      UUID NOT NULL,
    version       BIGINT NOT NULL,
    name          TEXT NOT NULL,
    instructions  TEXT NOT NULL,
    provider      JSONB NOT NULL,
    tools         JSONB NOT NULL,
    limits        JSONB NOT NULL,
    created_at    TIMESTAMPTZ NOT NULL,
    updated_at    TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (tenant_id, agent_id, version)
);

INSERT INTO agent_versions
    (tenant_id, agent_id, version, name, instructions, provider, tools, limits,
     created_at, updated_at)
SELECT tenant_id, id, version, name, instructions, provider, tools, limits,
       created_at, updated_at
FROM agents;

CREATE TABLE tools (
    tenant_id   UUID NOT NULL REFERENCES tenants (id),
    id          UUID NOT NULL,
    name        TEXT NOT NULL,
    definition  JSONB NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL,
    updated_at  TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (tenant_id, id),
    CONSTRAINT tools_name_per_tenant UNIQUE (tenant_id, name)
);

-- The receipts projection: one row per tool call, written in the append transaction.
CREATE TABLE receipts (
    tenant_id        UUID NOT NULL,
    run_id           UUID NOT NULL,
    id               UUID NOT NULL,
    created_version  BIGINT NOT NULL,
    state            TEXT NOT NULL,
    body             JSONB NOT NULL,
    updated_at       TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (run_id, id)
);

CREATE INDEX receipts_by_run ON receipts (tenant_id, run_id, created_version);

-- Tenant secrets, sealed with AES-256-GCM under the keyring key `key_id` (the envelope in
-- `ciphertext` names it too); never stored in the clear. Names sort byte-wise ("C"), as
-- SQLite's do, so both list them in one order.
CREATE TABLE secrets (
    tenant_id   UUID NOT NULL REFERENCES tenants (id),
    name        TEXT COLLATE "C" NOT NULL,
    key_id      TEXT NOT NULL,
    ciphertext  BYTEA NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL,
    updated_at  TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (tenant_id, name)
);

-- Sealed snapshots of a run's engine state (conversation, pending calls, counters), each
-- referenced by a checkpoint.saved event. Rebuilding a run starts from the newest one that
-- opens and verifies, plus the events after through_version.
CREATE TABLE checkpoints (
    tenant_id        UUID NOT NULL,
    run_id           UUID NOT NULL,
    id               UUID NOT NULL,
    through_version  BIGINT NOT NULL,
    key_id           TEXT NOT NULL,
    size             BIGINT NOT NULL,
    sha256           TEXT NOT NULL,
    ciphertext       BYTEA NOT NULL,
    created_at       TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (run_id, id)
);

CREATE INDEX checkpoints_by_run ON checkpoints (tenant_id, run_id, through_version);
